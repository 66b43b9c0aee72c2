"""Elementwise math, comparisons, logic, matrix products and reductions.

Broadcasting is numpy's (the ONNX multidirectional rule), which torch shares.
"""

import functools

import torch

from .registry import F, I, OracleError, ints, norm_axis, op


def _unary(op_type, fn, since=1):
    op(op_type, since)(lambda node, x: fn(x))


for _name, _fn in {
    "Neg": torch.neg, "Abs": torch.abs, "Sqrt": torch.sqrt, "Exp": torch.exp,
    "Log": torch.log, "Erf": torch.erf, "Tanh": torch.tanh, "Sigmoid": torch.sigmoid,
    "Relu": torch.relu, "Cos": torch.cos, "Sin": torch.sin, "Floor": torch.floor,
    "Ceil": torch.ceil, "Sign": torch.sign, "Reciprocal": torch.reciprocal,
    "Softplus": torch.nn.functional.softplus, "IsNaN": torch.isnan,
    "Not": torch.logical_not, "Identity": lambda x: x,
}.items():
    _unary(_name, _fn)


@op("Round", 11)
def _round(node, x):
    return torch.round(x)  # half to even, as ONNX requires


@op("Add")
def _add(node, a, b):
    return a + b


@op("Sub")
def _sub(node, a, b):
    return a - b


@op("Mul")
def _mul(node, a, b):
    return a * b


@op("Div")
def _div(node, a, b):
    if a.dtype == I:
        return torch.div(a, b, rounding_mode="trunc")
    return a / b


@op("Pow")
def _pow(node, base, exponent):
    y = torch.pow(base, exponent)
    return y.to(base.dtype) if base.dtype != F else y  # the result has the base's type


@op("Mod", 10)
def _mod(node, a, b):
    if node.attr("fmod", 0):
        return torch.fmod(a, b)
    if a.dtype == F:
        raise OracleError("Mod with fmod=0 is only defined for integers")
    return torch.remainder(a, b)  # sign of the divisor


def _variadic(fn):
    return lambda node, *xs: functools.reduce(fn, xs)


op("Max")(_variadic(torch.maximum))
op("Min")(_variadic(torch.minimum))
op("Sum")(_variadic(torch.add))


@op("CumSum", 11)
def _cumsum(node, x, axis):
    axis = norm_axis(int(axis.reshape(-1)[0]), x.dim())
    if node.attr("reverse", 0):
        x = torch.flip(x, [axis])
    y = torch.cumsum(x, axis)
    if node.attr("exclusive", 0):
        y = y - x
    return torch.flip(y, [axis]) if node.attr("reverse", 0) else y


@op("Mean")
def _mean(node, *xs):
    return functools.reduce(torch.add, xs) / len(xs)


@op("Clip")
def _clip(node, x, low=None, high=None):
    if node.opset < 11:
        return torch.clamp(x, node.attr("min", float("-inf")), node.attr("max", float("inf")))
    if low is None and high is None:
        return x
    # torch.clamp's gradient (passes where low <= x <= high) is the module's.
    return torch.clamp(x, None if low is None else low.to(x.dtype),
                       None if high is None else high.to(x.dtype))


@op("IsInf", 10)
def _is_inf(node, x):
    negative = node.attr("detect_negative", 1)
    positive = node.attr("detect_positive", 1)
    return (torch.isposinf(x) & bool(positive)) | (torch.isneginf(x) & bool(negative))


@op("Equal")
def _equal(node, a, b):
    return a == b


@op("Less")
def _less(node, a, b):
    return a < b


@op("LessOrEqual", 12)
def _less_equal(node, a, b):
    return a <= b


@op("Greater")
def _greater(node, a, b):
    return a > b


@op("GreaterOrEqual", 12)
def _greater_equal(node, a, b):
    return a >= b


@op("And")
def _and(node, a, b):
    return a & b


@op("Or")
def _or(node, a, b):
    return a | b


@op("Xor")
def _xor(node, a, b):
    return a ^ b


@op("MatMul")
def _matmul(node, a, b):
    return torch.matmul(a, b)


@op("Gemm")
def _gemm(node, a, b, c=None):
    if node.attr("transA", 0):
        a = a.transpose(0, 1)
    if node.attr("transB", 0):
        b = b.transpose(0, 1)
    y = node.attr("alpha", 1.0) * (a @ b)
    if c is not None:
        y = y + node.attr("beta", 1.0) * c
    return y


@op("Einsum", 12)
def _einsum(node, *xs):
    return torch.einsum(node.attr("equation").replace(" ", ""), *xs)


def _prod(x, dims, keepdim):
    for d in sorted(dims, reverse=True):
        x = torch.prod(x, d, keepdim=keepdim)
    return x


_REDUCERS = {
    "ReduceSum": (13, lambda x, d, k: torch.sum(x, d, keepdim=k)),
    "ReduceMean": (18, lambda x, d, k: torch.mean(x, d, keepdim=k)),
    "ReduceMax": (18, lambda x, d, k: torch.amax(x, d, keepdim=k)),
    "ReduceMin": (18, lambda x, d, k: torch.amin(x, d, keepdim=k)),
    "ReduceProd": (18, _prod),
    "ReduceSumSquare": (18, lambda x, d, k: torch.sum(x * x, d, keepdim=k)),
    "ReduceL1": (18, lambda x, d, k: torch.sum(torch.abs(x), d, keepdim=k)),
    "ReduceL2": (18, lambda x, d, k: torch.sqrt(torch.sum(x * x, d, keepdim=k))),
    "ReduceLogSumExp": (18, lambda x, d, k: torch.logsumexp(x, d, keepdim=k)),
}


def _reduce_handler(axes_input_since, reducer):
    """Axes come from the `axes` attribute before `axes_input_since`, from input 1 after."""

    def handler(node, x, axes=None):
        if node.opset >= axes_input_since:
            axes = [] if axes is None else ints(axes)
            noop = node.attr("noop_with_empty_axes", 0)
        else:
            axes = node.attr("axes", [])
            noop = 0
        if not axes:
            if noop or x.dim() == 0:
                return x
            axes = range(x.dim())
        dims = sorted({norm_axis(a, x.dim()) for a in axes})
        return reducer(x, dims, bool(node.attr("keepdims", 1)))

    return handler


for _name, (_since, _reducer) in _REDUCERS.items():
    op(_name)(_reduce_handler(_since, _reducer))


def _arg_reduce(fn):
    def handler(node, x):
        axis = norm_axis(node.attr("axis", 0), x.dim())
        if node.attr("select_last_index", 0):
            flipped = fn(torch.flip(x, [axis]), axis, keepdim=bool(node.attr("keepdims", 1)))
            return x.shape[axis] - 1 - flipped
        return fn(x, axis, keepdim=bool(node.attr("keepdims", 1)))

    return handler


op("ArgMax")(_arg_reduce(torch.argmax))
op("ArgMin")(_arg_reduce(torch.argmin))
