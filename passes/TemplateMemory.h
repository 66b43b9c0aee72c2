//===- TemplateMemory.h - where a template's values live --------*- C++ -*-===//
#ifndef MT_PASSES_TEMPLATEMEMORY_H
#define MT_PASSES_TEMPLATEMEMORY_H

#include "ir/MtOps.h"
#include "passes/RowChunk.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

namespace mt {

/// Where one SSA value of a template lives while a launch runs.
struct Placement {
  enum Kind {
    Input,     // a launch input buffer (index: input #)
    Scalar,    // the dloss argument of a head backward
    Param,     // a param in the weight slot (index: param #)
    Workspace, // scratch at `offset` storage elements
    ParamGrad, // accumulated straight into the gradient slot (index: param #)
    SumNode,   // an mt.add of param-gradient contributions: implicit
    Loss,      // the 0-d loss, written to the launch's loss output
    Output,    // written in place in launch output #index: a vocabulary
               // piece's statistics (f32) or embedding rows, which a chain
               // of pieces updates in one buffer; a layer's yielded sum
               // and the value it adds to
  } kind;
  int64_t index = -1;
  int64_t offset = -1;
};

/// The placement of every value of a template body and the scratch it needs.
/// Param gradients accumulate into the gradient slot: the results of
/// backward ops that produce f32 param gradients (dw, db, dtable) go there
/// directly, and sums of contributions are implicit; other contributions
/// (through sum_to, mul_grad) are computed in scratch and added with
/// accumulate_f32. Yielded activations are copied to the output buffers.
/// A template with `row_chunk` runs a stretch of its ops in chunks of
/// token rows (RowChunk.h): the stretch's local row values then take one
/// chunk's worth of scratch.
struct TemplatePlan {
  llvm::DenseMap<mlir::Value, Placement> values;
  /// Reshape results placed where their operand is: no kernel runs for them.
  llvm::DenseSet<mlir::Value> views;
  /// mt.add results summed by their operands' kernels (each term placed
  /// where the tree's root is): no kernel runs for them.
  llvm::DenseSet<mlir::Value> summedInPlace;
  /// Results of kernelWritesOrAdds kernels that add into such a sum; the
  /// first term (in op order) of each tree writes it.
  llvm::DenseSet<mlir::Value> addsInto;
  int64_t workspaceElems = 0;
  std::optional<RowChunking> chunking;
};

TemplatePlan planTemplate(TemplateOp tmpl);

/// The ParamGrad and SumNode placements of a backward template's param
/// gradients, added to values.
void placeParamGradients(TemplateOp tmpl,
                         llvm::DenseMap<mlir::Value, Placement> &values);

/// The scratch the step needs: the largest any launched template needs.
int64_t launchScratchElems(mlir::ModuleOp module);

/// Storage elements one element of v takes in scratch: 2 for a value kept
/// in f32 (mt.attention_delta's δ, mt.attention's log-sum-exp) where
/// storage is bf16 (the GPU), else 1.
int64_t storageWidth(mlir::Value v);

/// Whether v's kernel writes it or, as a flag of its own asks, adds into it
/// (linear's y, the dx of linear_grad, the norms' grads and rope_grad, the
/// dlogits of cross-entropy's grads): such
/// a result needs no zeroing, and can be a term of a sum built in place
/// (TemplatePlan::addsInto). swiglu_grad writes its two results too, under
/// one flag.
bool kernelWritesOrAdds(mlir::Value v);

/// Whether op writes an f32 param gradient as its result #i (dw, db,
/// dtable): such results can target the gradient slot directly.
bool writesParamGradient(mlir::Operation *op, unsigned i);

} // namespace mt

#endif // MT_PASSES_TEMPLATEMEMORY_H
