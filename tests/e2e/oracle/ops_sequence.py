"""Sequence ops: a sequence is an OnnxSequence holding a Python list of tensors."""

import torch

from .registry import OnnxSequence, OracleError, ints, norm_axis, op, scalar, torch_dtype


def _position(p, n, at_end=False):
    hi = n if at_end else n - 1
    if not -n <= p <= hi:
        raise OracleError(f"position {p} out of range for a sequence of {n} tensors")
    return p + n if p < 0 else p


@op("SequenceEmpty", since=11)
def sequence_empty(node):
    torch_dtype(node.attr("dtype", 1))  # a known element type
    return OnnxSequence([])


@op("SequenceConstruct", since=11)
def sequence_construct(node, *tensors):
    return OnnxSequence(list(tensors))


@op("SequenceInsert", since=11)
def sequence_insert(node, seq, tensor, position=None):
    items = list(seq.items)
    at = len(items) if position is None else _position(int(scalar(position)), len(items), True)
    items.insert(at, tensor)
    return OnnxSequence(items)


@op("SequenceAt", since=11)
def sequence_at(node, seq, position):
    return seq.items[_position(int(scalar(position)), len(seq.items))]


@op("SequenceLength", since=11)
def sequence_length(node, seq):
    return torch.tensor(len(seq.items), dtype=torch.int64)


@op("SequenceErase", since=11)
def sequence_erase(node, seq, position=None):
    items = list(seq.items)
    del items[_position(-1 if position is None else int(scalar(position)), len(items))]
    return OnnxSequence(items)


@op("SplitToSequence", since=11)
def split_to_sequence(node, x, split=None):
    axis = norm_axis(node.attr("axis", 0), x.dim())
    if split is None:
        parts = torch.split(x, 1, dim=axis)
        if not node.attr("keepdims", 1):
            parts = [p.squeeze(axis) for p in parts]
        return OnnxSequence(list(parts))
    if split.dim() == 0:
        return OnnxSequence(list(torch.split(x, int(split), dim=axis)))
    return OnnxSequence(list(torch.split(x, ints(split), dim=axis)))


@op("ConcatFromSequence", since=11)
def concat_from_sequence(node, seq):
    if not seq.items:
        raise OracleError("ConcatFromSequence of an empty sequence")
    rank = seq.items[0].dim()
    if node.attr("new_axis", 0):
        return torch.stack(seq.items, dim=norm_axis(node.attr("axis"), rank + 1))
    return torch.cat(seq.items, dim=norm_axis(node.attr("axis"), rank))
