//===- AttentionLayout.h - the dims of attention's tensors ------*- C++ -*-===//
//
// mt.attention, mt.attention_delta and mt.attention_grad take q, k, v and y
// heads-major, [B, heads, S, D] (`layout = "bhsd"`, the default), or
// sequence-major, [B, S, heads, D] ("bshd": as a projection writes them,
// which spares the transposes around attention; mt-fold-attention-layout).
// Their row statistics (lse, δ) are [B, heads, S] in both.
//
//===----------------------------------------------------------------------===//
#ifndef MT_IR_ATTENTIONLAYOUT_H
#define MT_IR_ATTENTIONLAYOUT_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>

namespace mt {

inline bool isAttentionLayout(llvm::StringRef layout) {
  return layout == "bhsd" || layout == "bshd";
}
inline bool isSeqMajor(llvm::StringRef layout) { return layout == "bshd"; }

/// Where a 4-d attention tensor of `layout` keeps its heads and positions.
inline unsigned headsAxis(llvm::StringRef layout) {
  return isSeqMajor(layout) ? 2 : 1;
}
inline unsigned seqAxis(llvm::StringRef layout) {
  return isSeqMajor(layout) ? 1 : 2;
}

/// [B, heads, S] of a 4-d attention tensor's shape.
inline llvm::SmallVector<int64_t, 3> attentionRows(llvm::ArrayRef<int64_t> t,
                                                   llvm::StringRef layout) {
  return {t[0], t[headsAxis(layout)], t[seqAxis(layout)]};
}

} // namespace mt

#endif // MT_IR_ATTENTIONLAYOUT_H
