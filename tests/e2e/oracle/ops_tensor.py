"""Shape, indexing, data-movement and constant ops.

Shapes travel as int64 tensors, as in ONNX; a handler turns them into Python
lists with `ints` when it needs them.
"""

import math

import numpy as np
import torch
from onnx import numpy_helper

from .registry import (F, I, OracleError, cast, ints, norm_axis, op, scalar,
                       tensor_from_array, tensor_from_proto)


@op("Cast")
def _cast(node, x):
    return cast(x, node.attr("to"))


@op("CastLike", 15)
def _cast_like(node, x, like):
    return x.to(like.dtype) if like.dtype != torch.bool else x != 0


@op("Reshape", 5)
def _reshape(node, x, shape):
    dims = ints(shape)
    if not node.attr("allowzero", 0):
        # 0 copies the input's dim at the same index.
        dims = [x.shape[i] if d == 0 else d for i, d in enumerate(dims)]
    return x.reshape(dims)


@op("Flatten")
def _flatten(node, x):
    axis = norm_axis(node.attr("axis", 1), x.dim() + 1)
    return x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))


@op("Transpose")
def _transpose(node, x):
    perm = node.attr("perm", list(range(x.dim() - 1, -1, -1)))
    return x.permute(perm)


@op("Unsqueeze")
def _unsqueeze(node, x, axes=None):
    axes = node.attr("axes") if node.opset < 13 else ints(axes)
    rank = x.dim() + len(axes)
    for a in sorted(norm_axis(a, rank) for a in axes):
        x = x.unsqueeze(a)
    return x


@op("Squeeze")
def _squeeze(node, x, axes=None):
    axes = node.attr("axes", None) if node.opset < 13 else (None if axes is None else ints(axes))
    if axes is None:
        axes = [d for d, n in enumerate(x.shape) if n == 1]
    axes = sorted((norm_axis(a, x.dim()) for a in axes), reverse=True)
    for a in axes:
        if x.shape[a] != 1:
            raise OracleError(f"cannot squeeze axis {a} of size {x.shape[a]}")
        x = x.squeeze(a)
    return x


@op("Concat")
def _concat(node, *xs):
    return torch.cat(xs, norm_axis(node.attr("axis"), xs[0].dim()))


def _slice_axis(x, axis, start, end, step):
    n = x.shape[axis]
    if step == 0:
        raise OracleError("Slice step 0")
    start = start + n if start < 0 else start
    end = end + n if end < 0 else end
    if step > 0:
        start, end = min(max(start, 0), n), min(max(end, 0), n)
    else:
        start, end = min(max(start, 0), n - 1), min(max(end, -1), n - 1)
    if step == 1:
        return x.narrow(axis, start, max(end - start, 0))
    return x.index_select(axis, torch.arange(start, end, step, dtype=I))


@op("Slice")
def _slice(node, x, starts=None, ends=None, axes=None, steps=None):
    if node.opset < 10:
        starts, ends = node.attr("starts"), node.attr("ends")
        axes = node.attr("axes", list(range(len(starts))))
        steps = [1] * len(starts)
    else:
        starts, ends = ints(starts), ints(ends)
        axes = list(range(len(starts))) if axes is None else ints(axes)
        steps = [1] * len(starts) if steps is None else ints(steps)
    for start, end, axis, step in zip(starts, ends, axes, steps):
        x = _slice_axis(x, norm_axis(axis, x.dim()), start, end, step)
    return x


@op("Pad")
def _pad(node, x, pads=None, value=None, axes=None):
    """Constant mode only: negative pads crop."""
    mode = node.attr("mode", "constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode != "constant":
        raise OracleError(f"Pad mode {mode}")
    pads = ints(pads)
    axes = list(range(x.dim())) if axes is None else [norm_axis(a, x.dim()) for a in ints(axes)]
    n = len(axes)
    if len(pads) != 2 * n:
        raise OracleError(f"Pad: {len(pads)} pads for {n} axes")
    fill = 0.0 if value is None or value.numel() == 0 else value.reshape(-1)[0].item()
    widths = [0] * (2 * x.dim())  # torch's order: the last dim's (before, after) first
    for i, axis in enumerate(axes):
        widths[2 * (x.dim() - 1 - axis)] = pads[i]
        widths[2 * (x.dim() - 1 - axis) + 1] = pads[n + i]
    return torch.nn.functional.pad(x, widths, value=fill)


@op("Split")
def _split(node, x, split=None):
    axis = norm_axis(node.attr("axis", 0), x.dim())
    n = x.shape[axis]
    sizes = node.attr("split", None) if node.opset < 13 else (None if split is None else ints(split))
    if sizes is None:
        parts = node.attr("num_outputs", node.num_outputs) if node.opset >= 18 else node.num_outputs
        chunk = -(-n // parts)  # the last part is the smaller one
        sizes = [max(min(chunk, n - i * chunk), 0) for i in range(parts)]
    if sum(sizes) != n:
        raise OracleError(f"split sizes {sizes} do not add up to dim {n}")
    return list(torch.split(x, sizes, axis))


@op("Gather")
def _gather(node, x, indices):
    axis = norm_axis(node.attr("axis", 0), x.dim())
    n = x.shape[axis]
    if indices.numel() and (indices.min() < -n or indices.max() >= n):
        raise OracleError(f"index out of range [-{n}, {n}) on axis {axis}")
    flat = torch.where(indices < 0, indices + n, indices).reshape(-1)
    out = x.index_select(axis, flat)
    return out.reshape(x.shape[:axis] + indices.shape + x.shape[axis + 1:])


@op("GatherElements", 11)
def _gather_elements(node, x, indices):
    axis = norm_axis(node.attr("axis", 0), x.dim())
    n = x.shape[axis]
    return torch.gather(x, axis, torch.where(indices < 0, indices + n, indices))


@op("ScatterElements", 11)
def _scatter_elements(node, x, indices, updates):
    """A copy of x with updates written at indices along axis (reduction
    none; a repeated index keeps the last write, as torch does)."""
    if node.attr("reduction", "none") != "none":
        raise OracleError("ScatterElements: only reduction none is implemented")
    axis = norm_axis(node.attr("axis", 0), x.dim())
    n = x.shape[axis]
    if indices.numel() and (indices.min() < -n or indices.max() >= n):
        raise OracleError(f"index out of range [-{n}, {n}) on axis {axis}")
    idx = torch.where(indices < 0, indices + n, indices)
    return x.scatter(axis, idx, updates.to(x.dtype))


@op("ScatterND", 11)
def _scatter_nd(node, x, indices, updates):
    """A copy of x with updates[i...] written at x[*indices[i..., :]]
    (reduction none; a repeated index keeps the last write). Differentiable
    in x and updates: an index_put on a clone."""
    if node.attr("reduction", "none") != "none":
        raise OracleError("ScatterND: only reduction none is implemented")
    k = indices.shape[-1]
    sizes = torch.tensor(x.shape[:k])
    ids = indices.reshape(-1, k)
    if ids.numel() and ((ids < -sizes).any() or (ids >= sizes).any()):
        raise OracleError("ScatterND index out of range")
    ids = torch.where(ids < 0, ids + sizes, ids)
    values = updates.reshape((ids.shape[0],) + tuple(x.shape[k:])).to(x.dtype)
    return x.clone().index_put(tuple(ids.unbind(-1)), values)


@op("GatherND", 12)
def _gather_nd(node, x, indices):
    """Per the spec: out[b..., i...] = x[b..., *indices[b..., i..., :]], the
    first batch_dims dims shared; one advanced-indexing gather per batch."""
    b = node.attr("batch_dims", 0)
    k = indices.shape[-1]
    batch = x.shape[:b]
    xs = x.reshape((-1,) + tuple(x.shape[b:]))
    ids = indices.reshape((xs.shape[0], -1, k))
    sizes = torch.tensor(xs.shape[1:1 + k])
    if ids.numel() and ((ids < -sizes).any() or (ids >= sizes).any()):
        raise OracleError("GatherND index out of range")
    ids = torch.where(ids < 0, ids + sizes, ids)
    picked = torch.stack([xs[n][tuple(ids[n].unbind(-1))] for n in range(xs.shape[0])])
    return picked.reshape(tuple(batch) + tuple(indices.shape[b:-1]) + tuple(x.shape[b + k:]))


@op("TopK", 11)
def _topk(node, x, k):
    """Values and int64 indices of the k largest (or smallest) along axis;
    gradients flow through the values (a mixture of experts' routing)."""
    axis = norm_axis(node.attr("axis", -1), x.dim())
    values, indices = torch.topk(x, int(ints(k)[0]), dim=axis,
                                 largest=bool(node.attr("largest", 1)),
                                 sorted=bool(node.attr("sorted", 1)))
    return [values, indices.to(torch.int64)]


@op("Shape")
def _shape(node, x):
    rank = x.dim()

    def clamp(i):
        return min(max(i + rank if i < 0 else i, 0), rank)

    start, end = clamp(node.attr("start", 0)), clamp(node.attr("end", rank))
    return torch.tensor(list(x.shape)[start:end], dtype=I)


@op("Size")
def _size(node, x):
    return torch.tensor(x.numel(), dtype=I)


@op("ConstantOfShape", 9)
def _constant_of_shape(node, shape):
    value = node.attrs.get("value")
    fill = tensor_from_proto(value) if value is not None else torch.zeros((), dtype=F)
    return torch.full(ints(shape), fill.reshape(-1)[0].item(), dtype=fill.dtype)


def _sparse_to_dense(sparse):
    values = numpy_helper.to_array(sparse.values)
    indices = numpy_helper.to_array(sparse.indices)
    dims = list(sparse.dims)
    dense = np.zeros(math.prod(dims), dtype=values.dtype)
    if indices.ndim == 2:  # [NNZ, rank] coordinates
        indices = np.ravel_multi_index(tuple(indices.T), dims)
    dense[indices] = values
    return tensor_from_array(dense.reshape(dims), sparse.values.data_type)


@op("Constant")
def _constant(node):
    (name, value), = node.attrs.items()
    if name == "value":
        return tensor_from_proto(value)
    if name == "sparse_value":
        return _sparse_to_dense(value)
    if name in ("value_float", "value_floats"):
        return torch.tensor(value, dtype=F)
    if name in ("value_int", "value_ints"):
        return torch.tensor(value, dtype=I)
    raise OracleError(f"Constant attribute '{name}' has no tensor value the oracle computes on")


@op("Range", 11)
def _range(node, start, limit, delta):
    s, l, d = scalar(start), scalar(limit), scalar(delta)
    if start.dtype == I:
        count = max(-((s - l) // d), 0)  # ceil((l - s) / d) in exact integers
        return s + torch.arange(count, dtype=I) * d
    count = max(math.ceil((l - s) / d), 0)
    return s + torch.arange(count, dtype=F) * d


@op("Expand", 8)
def _expand(node, x, shape):
    return x.expand(torch.broadcast_shapes(x.shape, tuple(ints(shape))))


@op("Tile", 6)
def _tile(node, x, repeats):
    return x.repeat(ints(repeats))


@op("Where", 9)
def _where(node, condition, a, b):
    return torch.where(condition, a, b)


@op("Trilu", 14)
def _trilu(node, x, k=None):
    k = 0 if k is None else int(scalar(k))
    return torch.triu(x, k) if node.attr("upper", 1) else torch.tril(x, k)


@op("Dropout")
def _dropout(node, x, ratio=None, training_mode=None):
    """Identity; in training mode only with ratio 0 (what a TRAINING-mode export of a dropout-free model holds)."""
    training = training_mode is not None and bool(scalar(training_mode))
    if training and (0.5 if ratio is None else scalar(ratio)) != 0:
        raise OracleError("Dropout in training mode with a nonzero ratio is random; the oracle is deterministic")
    return [x, torch.ones(x.shape, dtype=torch.bool)]
