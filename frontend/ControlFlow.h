//===- ControlFlow.h - ONNX loops and sequences, evaluated at import -*- C++ -*-===//
//
// torch exports repeat_interleave under dynamic_axes as a Loop that builds a
// sequence (SplitToSequence, SequenceAt, SequenceInsert, ConcatFromSequence).
// In a decoder it only ever repeats compile-time values (GPT-J's and
// CodeGen's rotary tables), so once batch and sequence are bound the loop is
// run here, on constants, and its results are constants; a loop or sequence
// fed by an activation is an error naming the node. No loop or sequence
// reaches the model.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_FRONTEND_CONTROLFLOW_H
#define MEGATRAIN_FRONTEND_CONTROLFLOW_H

#include "frontend/Graph.h"

#include <functional>
#include <vector>

namespace mt::onnx_import {

/// Runs a subgraph (a Loop's body) once: its inputs bound to `inputs`, its
/// nodes inferred and folded as the builder does the main graph's, new
/// values owned by `scratch`. Returns its outputs.
using SubgraphRunner = std::function<std::vector<Value *>(
    Graph &scratch, const onnx::GraphProto &body,
    const std::vector<Value *> &inputs)>;

/// Loop and the sequence ops.
bool isControlFlow(const Node &n);

/// A sequence of activations, as exports without the ONNX optimizer write
/// torch.split and unbind: SplitToSequence of an activation becomes a Split
/// (and a Squeeze of each piece where the axis goes), each SequenceAt of it
/// at a constant position an Identity of its piece; `infer` infers a node so
/// rewritten. Returns whether `n` was one of those; any other sequence op on
/// such a sequence fails naming the node.
bool lowerActivationSequence(Graph &g, Node &n,
                             const std::function<void(Node &)> &infer);

/// Evaluates a Loop or sequence op whose inputs are all known at compile
/// time, setting its outputs' types and values; fails naming the node when
/// one is not, or when the op's semantics are violated.
void foldControlFlow(Node &n, const SubgraphRunner &run);

} // namespace mt::onnx_import

#endif // MEGATRAIN_FRONTEND_CONTROLFLOW_H
