"""The op table: ONNX (domain, op type) -> handler, plus what handlers share.

A handler receives a `Node` (attributes, opset, input presence) and the input
tensors (None for omitted optional inputs) and returns one tensor or a list.
Adding an op is adding one decorated function in an ops_*.py module.
"""

import math

import numpy as np
import torch
from onnx import TensorProto, helper, numpy_helper

F = torch.float64  # every float tensor in the oracle
I = torch.int64  # every integer tensor in the oracle

_FLOAT_TYPES = {TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16,
                TensorProto.BFLOAT16}
# Narrow integer types wrap like the real type does after a Cast.
_INT_BITS = {TensorProto.INT8: (8, True), TensorProto.INT16: (16, True),
             TensorProto.INT32: (32, True), TensorProto.INT64: (64, True),
             TensorProto.UINT8: (8, False), TensorProto.UINT16: (16, False),
             TensorProto.UINT32: (32, False), TensorProto.UINT64: (64, False)}


class OracleError(Exception):
    """A model, op or input the oracle cannot evaluate; the message names it."""


def onnx_type_name(elem_type):
    return TensorProto.DataType.Name(elem_type)


def torch_dtype(elem_type):
    """The oracle's dtype for an ONNX element type: float64, int64 or bool."""
    if elem_type in _FLOAT_TYPES:
        return F
    if elem_type in _INT_BITS:
        return I
    if elem_type == TensorProto.BOOL:
        return torch.bool
    raise OracleError(f"unsupported element type {onnx_type_name(elem_type)}")


def cast(x, elem_type):
    """ONNX Cast: floats become float64, integers keep integer semantics."""
    if elem_type == TensorProto.BOOL:
        return x != 0
    dtype = torch_dtype(elem_type)
    if dtype == F:
        return x.to(F)
    y = x.to(I)  # float -> int truncates toward zero
    bits, signed = _INT_BITS[elem_type]
    if bits < 64:
        span = 1 << bits
        low = -(span >> 1) if signed else 0
        y = torch.remainder(y - low, span) + low
    return y


def tensor_from_proto(proto):
    """TensorProto -> oracle tensor (float64 / int64 / bool), data already loaded."""
    array = numpy_helper.to_array(proto)
    return tensor_from_array(array, proto.data_type)


def tensor_from_array(array, elem_type):
    dtype = torch_dtype(elem_type)
    if dtype == F:
        return torch.from_numpy(np.asarray(array, dtype=np.float64).copy())
    if dtype == I:
        return torch.from_numpy(np.asarray(array).astype(np.int64))
    return torch.from_numpy(np.asarray(array, dtype=np.bool_).copy())


class OnnxSequence:
    """An ONNX sequence value: its tensors (not a list, so that a handler's
    list of outputs stays distinguishable from one sequence output)."""

    def __init__(self, items):
        self.items = items


class Node:
    """One NodeProto as a handler sees it."""

    def __init__(self, proto, opset):
        self.proto = proto
        self.op_type = proto.op_type
        self.name = proto.name or f"<{proto.op_type} -> {','.join(proto.output)}>"
        self.opset = opset
        self.attrs = {a.name: helper.get_attribute_value(a) for a in proto.attribute}
        self.num_outputs = len(proto.output)

    def attr(self, name, default=None):
        value = self.attrs.get(name, default)
        return value.decode() if isinstance(value, bytes) else value

    def has_output(self, i):
        return i < len(self.proto.output) and self.proto.output[i] != ""


OPS = {}  # (domain, op_type) -> (since_version, handler)


def op(op_type, since=1, domain=""):
    """Registers a handler valid from opset `since` of `domain`."""

    def register(handler):
        OPS[(domain, op_type)] = (since, handler)
        return handler

    return register


def norm_axis(axis, rank):
    if not -rank <= axis < max(rank, 1):
        raise OracleError(f"axis {axis} out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def ints(t):
    """An int64 tensor (shape, axes, starts...) as a Python list."""
    return [int(v) for v in t.reshape(-1).tolist()]


def scalar(t):
    return t.reshape(-1)[0].item()


def erf_gelu(x):
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def tanh_gelu(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
