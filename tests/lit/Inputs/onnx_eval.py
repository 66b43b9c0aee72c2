"""A small NumPy evaluator for the ONNX ops the samples and idiom graphs use.

The oracle for the graphs here: ONNX Runtime is not installed, and onnx 1.12
has no reference evaluator. `run(model, feeds, float64=True)` computes every
float tensor in float64, so idiom forms can be compared to their fused math
at tight tolerances.
"""
import functools
import math

import numpy as np
from onnx import TensorProto, helper, mapping, numpy_helper

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _attrs(node):
    out = {}
    for attr in node.attribute:
        v = helper.get_attribute_value(attr)
        out[attr.name] = v.decode() if isinstance(v, bytes) else v
    return out


def _axes(a, axes):
    """Axes from an input (newer opsets) or the attribute (older ones); None for all."""
    if axes is not None:
        return [int(v) for v in np.ravel(axes)]
    return a.get("axes")


def _gather_nd(x, i):
    """batch_dims 0: each tuple along the last dim of i indexes x's leading dims."""
    return x[tuple(np.moveaxis(i, -1, 0))]


def _unsqueeze(a, x, axes=None):
    axes = _axes(a, axes)
    return np.expand_dims(x, tuple(ax % (x.ndim + len(axes)) for ax in axes))


def _squeeze(a, x, axes=None):
    axes = _axes(a, axes)
    return np.squeeze(x, axis=None if axes is None else tuple(axes))


def _reduce_mean(a, x, axes=None):
    axes = _axes(a, axes)
    return np.mean(x, axis=None if axes is None else tuple(axes), keepdims=bool(a.get("keepdims", 1)))


def _reduce_max(a, x, axes=None):
    axes = _axes(a, axes)
    return np.max(x, axis=None if axes is None else tuple(axes), keepdims=bool(a.get("keepdims", 1)))


def _reduce_log_sum_exp(a, x, axes=None):
    axes = _axes(a, axes)
    axis = None if axes is None else tuple(axes)
    m = np.max(x, axis=axis, keepdims=True)
    s = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return s if a.get("keepdims", 1) else np.squeeze(s, axis=axis)


def _gated_scan(q, k, v, g, beta, delta):
    """MegaTrain's GatedDeltaRule (delta) and GatedLinearRule: per batch and
    value head a state M [Dk, Dv] from 0; each position M = exp(g)·M,
    M += k·(beta·(v − Mᵀk))ᵀ (k·(beta·v)ᵀ without delta), out = Mᵀq."""
    group = v.shape[2] // q.shape[2]
    q, k = np.repeat(q, group, axis=2), np.repeat(k, group, axis=2)
    m = np.zeros(v.shape[:1] + v.shape[2:3] + q.shape[3:] + v.shape[3:], v.dtype)
    out = np.zeros_like(v)
    for t in range(v.shape[1]):
        decay = np.exp(g[:, t])  # per head, or per key channel (rows of m)
        m = m * (decay[..., None] if g.ndim == 4 else decay[..., None, None])
        w = v[:, t] - np.einsum("bhkv,bhk->bhv", m, k[:, t]) if delta else v[:, t]
        m = m + k[:, t, :, :, None] * (beta[:, t, :, None] * w)[:, :, None, :]
        out[:, t] = np.einsum("bhkv,bhk->bhv", m, q[:, t])
    return out


def _scatter_nd(a, x, idx, updates):
    """A copy of x with updates[i] written at x[*idx[i]] (reduction none)."""
    y = np.array(x, copy=True)
    k = idx.shape[-1]
    flat = idx.reshape(-1, k)
    values = updates.reshape((flat.shape[0],) + x.shape[k:])
    for i, at in enumerate(flat):
        y[tuple(at)] = values[i]
    return y


def _div(a, x, y):
    if np.issubdtype(np.asarray(x).dtype, np.integer):
        return np.trunc(x / y).astype(np.asarray(x).dtype)
    return x / y


def _norm_axes(axis, rank):
    return tuple(range(axis % rank, rank))


def _pad(a, x, pads, value=None, axes=None):
    if a.get("mode", b"constant") not in (b"constant", "constant"):
        raise NotImplementedError("Pad mode " + str(a["mode"]))
    axes = range(x.ndim) if axes is None else [int(k) % x.ndim for k in axes]
    n = len(axes)
    crop = [slice(None)] * x.ndim
    widths = [(0, 0)] * x.ndim
    for i, k in enumerate(axes):
        lo, hi = int(pads[i]), int(pads[n + i])
        crop[k] = slice(max(0, -lo), x.shape[k] - max(0, -hi))
        widths[k] = (max(0, lo), max(0, hi))
    fill = 0 if value is None or np.size(value) == 0 else np.asarray(value).reshape(-1)[0]
    return np.pad(x[tuple(crop)], widths, constant_values=fill)


def _slice(x, starts, ends, axes=None, steps=None):
    axes = range(len(starts)) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    index = [slice(None)] * x.ndim
    for s, e, ax, st in zip(starts, ends, axes, steps):
        n = x.shape[ax]
        s = int(max(min(s, n), -n - 1))  # clamps INT64_MAX-style ends like ONNX
        e = int(max(min(e, n), -n - 1))
        index[int(ax)] = slice(s, e, int(st))
    return x[tuple(index)]


def _softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _trilu(x, k, upper):
    n, m = x.shape[-2:]
    keep = np.triu(np.ones((n, m), bool), k) if upper else np.tril(np.ones((n, m), bool), k)
    return np.where(keep, x, np.zeros_like(x))


def _reshape(x, shape, allowzero=0):
    shape = [int(s) for s in shape]
    if not allowzero:
        shape = [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]
    return x.reshape(shape)


def _gelu(x, approximate):
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    return (0.5 * x * (1 + _erf(x / math.sqrt(2)))).astype(x.dtype)


def _rms_norm(x, scale, axis, eps):
    axes = _norm_axes(axis, x.ndim)
    return x / np.sqrt(np.mean(x * x, axis=axes, keepdims=True) + eps) * scale


def _layer_norm(x, scale, bias, axis, eps):
    axes = _norm_axes(axis, x.ndim)
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mean) / np.sqrt(var + eps) * scale
    return y if bias is None else y + bias


def _attention(a, q, k, v, mask=None, *rest):
    """opset-23 Attention: 4-D [B, H, S, D] or 3-D [B, S, H*D] with head counts."""
    three_d = q.ndim == 3
    if three_d:
        hq, hkv = a["q_num_heads"], a["kv_num_heads"]
        b, s = q.shape[:2]
        q = q.reshape(b, s, hq, -1).transpose(0, 2, 1, 3)
        k = k.reshape(b, k.shape[1], hkv, -1).transpose(0, 2, 1, 3)
        v = v.reshape(b, v.shape[1], hkv, -1).transpose(0, 2, 1, 3)
    rep = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    scale = a.get("scale", 1 / math.sqrt(q.shape[-1]))
    scores = q @ np.swapaxes(k, -1, -2) * scale
    if mask is not None:
        scores = np.where(mask, scores, -np.inf) if mask.dtype == bool else scores + mask
    if a.get("is_causal", 0):
        sq, sk = scores.shape[-2:]
        scores = np.where(np.tril(np.ones((sq, sk), bool), sk - sq), scores, -np.inf)
    y = _softmax(scores, -1) @ v
    if three_d:
        y = y.transpose(0, 2, 1, 3).reshape(y.shape[0], y.shape[2], -1)
    return y


def _gemm(a, x, w, c=None):
    x = x.T if a.get("transA", 0) else x
    w = w.T if a.get("transB", 0) else w
    y = a.get("alpha", 1.0) * (x @ w)
    return y if c is None else y + a.get("beta", 1.0) * c


def _topk(a, x, k):
    """The k largest along axis, descending, ties to the lower index."""
    axis, k = a.get("axis", -1), int(np.ravel(k)[0])
    idx = np.take(np.argsort(-x, axis=axis, kind="stable"), np.arange(k), axis=axis)
    return np.take_along_axis(x, idx, axis=axis), idx.astype(np.int64)


def _reduce_sum(a, x, axes=None):
    axes = tuple(int(v) for v in np.ravel(axes)) if axes is not None else None
    return np.sum(x, axis=axes, keepdims=bool(a.get("keepdims", 1)))


def _conv1d(a, x, w, b=None):
    """1-d, unit strides and dilations: x [N, C, L], w [M, C / group, K]."""
    assert len(w.shape) == 3 and a.get("strides", [1]) == [1] and a.get("dilations", [1]) == [1]
    pads = a.get("pads", [0, 0])
    x = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[1])))
    group, (M, Cg, K) = a.get("group", 1), w.shape
    L = x.shape[2] - K + 1
    y = np.zeros((x.shape[0], M, L), x.dtype)
    for m in range(M):
        c0 = m // (M // group) * Cg
        for j in range(K):
            y[:, m] += np.einsum("ncl,c->nl", x[:, c0:c0 + Cg, j:j + L], w[m, :, j])
    return y if b is None else y + b[None, :, None]


def _scatter_elements(a, x, i, u):
    """reduction none: a copy of x with u written at i along axis."""
    assert a.get("reduction", b"none") in (b"none", "none")
    out = x.copy()
    np.put_along_axis(out, i, u, axis=a.get("axis", 0))
    return out


def _constant_decay(rate, v):
    """DecayLinearRule's g = −rate at every position and beta = 1."""
    g = np.broadcast_to(-np.asarray(rate).reshape(1, 1, -1), v.shape[:3]).astype(v.dtype)
    return g, np.ones_like(g)


def _split_to_sequence(a, x, split):
    """A list of pieces (a sequence): chunks of one size for a scalar split,
    pieces of one without the axis unless keepdims for none."""
    axis = a.get("axis", 0) % x.ndim
    if split is None:
        pieces = np.split(x, x.shape[axis], axis)
        return [p if a.get("keepdims", 1) else np.squeeze(p, axis) for p in pieces]
    split = np.asarray(split).astype(np.int64)
    if split.ndim == 0:
        split = [min(int(split), x.shape[axis] - b) for b in range(0, x.shape[axis], int(split))]
    return np.split(x, np.cumsum(split)[:-1], axis)


def _split(a, x, split=None):
    axis = a.get("axis", 0)
    sizes = list(np.ravel(split)) if split is not None else a.get("split")
    if sizes is None:
        n = a.get("num_outputs", a["_outputs"])
        sizes = [-(-x.shape[axis] // n)] * n
        sizes[-1] = x.shape[axis] - sum(sizes[:-1])
    return tuple(np.split(x, np.cumsum(sizes)[:-1], axis=axis))


OPS = {
    "Identity": lambda a, x: x,
    "Add": lambda a, x, y: x + y,
    "Sub": lambda a, x, y: x - y,
    "Mul": lambda a, x, y: x * y,
    "Div": _div,
    "Pow": lambda a, x, y: np.power(x, y).astype(np.asarray(x).dtype),
    "Neg": lambda a, x: -x,
    "Sqrt": lambda a, x: np.sqrt(x),
    "Log": lambda a, x: np.log(x),
    "Exp": lambda a, x: np.exp(x),
    "Floor": lambda a, x: np.floor(x),
    "Reciprocal": lambda a, x: 1 / x,
    "Erf": lambda a, x: _erf(x).astype(x.dtype),
    "Tanh": lambda a, x: np.tanh(x),
    "Sigmoid": lambda a, x: 1 / (1 + np.exp(-x)),
    "Softplus": lambda a, x: np.log1p(np.exp(x)),
    "Relu": lambda a, x: np.maximum(x, 0).astype(x.dtype),
    "Max": lambda a, *xs: functools.reduce(np.maximum, xs),
    "Min": lambda a, *xs: functools.reduce(np.minimum, xs),
    "Cos": lambda a, x: np.cos(x),
    "Sin": lambda a, x: np.sin(x),
    "Equal": lambda a, x, y: np.equal(x, y),
    "Less": lambda a, x, y: np.less(x, y),
    "Greater": lambda a, x, y: np.greater(x, y),
    "Where": lambda a, c, x, y: np.where(c, x, y),
    "MatMul": lambda a, x, y: np.matmul(x, y),
    "Gemm": _gemm,
    "Softmax": lambda a, x: _softmax(x, a.get("axis", -1)),
    "Shape": lambda a, x: np.array(x.shape[a.get("start", 0):a.get("end")], np.int64),
    "Gather": lambda a, x, i: np.take(x, i, axis=a.get("axis", 0)),
    "GatherND": lambda a, x, i: _gather_nd(x, i),
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Concat": lambda a, *xs: np.concatenate(xs, axis=a["axis"]),
    "Reshape": lambda a, x, s: _reshape(x, s, a.get("allowzero", 0)),
    "Transpose": lambda a, x: np.transpose(x, a.get("perm")),
    "Slice": lambda a, x, s, e, ax=None, st=None: _slice(x, s, e, ax, st),
    "Pad": _pad,
    "Split": _split,
    "SplitToSequence": lambda a, x, split=None: _split_to_sequence(a, x, split),
    "SequenceAt": lambda a, seq, i: seq[int(i)],
    "SequenceLength": lambda a, seq: np.int64(len(seq)),
    "CastLike": lambda a, x, like: x.astype(like.dtype),
    "Expand": lambda a, x, s: x * np.ones([int(v) for v in s], x.dtype),
    "Tile": lambda a, x, r: np.tile(x, [int(v) for v in r]),
    "Range": lambda a, s, l, d: np.arange(s, l, d).astype(np.asarray(s).dtype),
    "ConstantOfShape": lambda a, s: np.full([int(v) for v in s], numpy_helper.to_array(a["value"])[0]
                                            if "value" in a else np.float32(0)),
    "Trilu": lambda a, x, k=None: _trilu(x, 0 if k is None else int(k), a.get("upper", 1)),
    "CumSum": lambda a, x, axis: np.cumsum(x, axis=int(axis)),
    "ReduceLogSumExp": _reduce_log_sum_exp,
    "ReduceMax": _reduce_max,
    "ReduceMean": _reduce_mean,
    "ReduceSum": _reduce_sum,
    "GatherElements": lambda a, x, i: np.take_along_axis(x, i, axis=a.get("axis", 0)),
    "ScatterElements": _scatter_elements,
    "ScatterND": _scatter_nd,
    "GatedDeltaRule": lambda a, *x: _gated_scan(*x, delta=True),
    "GatedLinearRule": lambda a, *x: _gated_scan(*x, delta=False),
    "DecayLinearRule": lambda a, q, k, v, rate: _gated_scan(
        q, k, v, *_constant_decay(rate, v), delta=False),
    "Conv": _conv1d,
    "Not": lambda a, x: np.logical_not(x),
    "Clip": lambda a, x, lo=None, hi=None: np.clip(x, -np.inf if lo is None else lo,
                                                   np.inf if hi is None else hi),
    "TopK": lambda a, x, k: _topk(a, x, k),
    "LayerNormalization": lambda a, x, w, b=None: _layer_norm(x, w, b, a.get("axis", -1),
                                                              a.get("epsilon", 1e-5)),
    "RMSNormalization": lambda a, x, w: _rms_norm(x, w, a.get("axis", -1), a.get("epsilon", 1e-5)),
    "SimplifiedLayerNormalization": lambda a, x, w: _rms_norm(x, w, a.get("axis", -1),
                                                               a.get("epsilon", 1e-5)),
    "Gelu": lambda a, x: _gelu(x, a.get("approximate", "none")),
    "Attention": _attention,
}


def _np_type(elem_type, float64):
    if float64 and elem_type in (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16):
        return np.float64
    return mapping.TENSOR_TYPE_TO_NP_TYPE[elem_type]


def _widen(x, float64):
    if float64 and isinstance(x, np.ndarray) and np.issubdtype(x.dtype, np.floating):
        return x.astype(np.float64)
    return x


def run(model, feeds, float64=False, outputs=None):
    """Evaluates the graph in node order (it must be topologically sorted)."""
    g = model.graph
    env = {t.name: _widen(numpy_helper.to_array(t), float64) for t in g.initializer}
    env.update({k: _widen(np.asarray(v), float64) for k, v in feeds.items()})
    env[""] = None
    with np.errstate(over="ignore", invalid="ignore"):
        for node in g.node:
            a = _attrs(node)
            if node.op_type == "Constant":
                res = (_widen(numpy_helper.to_array(a["value"]), float64),)
            elif node.op_type == "Cast":
                res = (env[node.input[0]].astype(_np_type(a["to"], float64)),)
            else:
                if node.op_type not in OPS:
                    raise NotImplementedError(f"{node.op_type} ({node.name})")
                a["_outputs"] = len(node.output)
                r = OPS[node.op_type](a, *[env[i] for i in node.input])
                res = r if isinstance(r, tuple) else (r,)
            for name, value in zip(node.output, res):
                # A list is a sequence (SplitToSequence's), kept as one.
                env[name] = (value if isinstance(value, list)
                             else _widen(np.asarray(value), float64))
    names = outputs or [o.name for o in g.output]
    return {n: env[n] for n in names}
