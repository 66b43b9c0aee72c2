"""Writes ONNX graphs node by node, so the exact node forms are ours to choose.

Shared by structure_model.py (real-shape decoders whose weights carry no
data) and tests/lit/Inputs/idioms.py (one idiom form per graph).
"""
import contextlib

import numpy as np
from onnx import TensorProto, helper, numpy_helper

# The IR version ONNX pairs with each opset; runtimes reject older IRs.
_IR_FOR_OPSET = [(23, 11), (21, 10), (19, 9), (0, 8)]

FLOAT = TensorProto.FLOAT
INT64 = TensorProto.INT64


def ir_version_for(opset):
    return next(ir for since, ir in _IR_FOR_OPSET if opset >= since)


class Graph:
    """One graph under construction.

    Weights come from `weight()`: seeded random values when `with_data`,
    otherwise declared (name, dims, FLOAT) with no data at all.
    """

    def __init__(self, name, opset=17, with_data=True, seed=0, domains=None):
        self.name = name
        self.opset = opset
        self.with_data = with_data
        self.rng = np.random.default_rng(seed)
        self.domains = dict(domains or {})
        self.nodes, self.initializers = [], []
        self.inputs, self.outputs = [], []
        self.arrays = {}  # initializer name -> array, for numeric checks
        self._scope = []
        self._count = {}

    # -- naming ------------------------------------------------------------

    @contextlib.contextmanager
    def scope(self, name):
        """Prefixes node names like torch's exporter: /model/layers.3/self_attn/MatMul."""
        self._scope.append(name)
        try:
            yield
        finally:
            self._scope.pop()

    def _node_name(self, op_type):
        base = "/" + "/".join(self._scope + [op_type])
        n = self._count.get(base, 0)
        self._count[base] = n + 1
        return base if n == 0 else f"{base}_{n}"

    # -- graph interface ----------------------------------------------------

    def input(self, name, elem_type, shape):
        self.inputs.append(helper.make_tensor_value_info(name, elem_type, shape))
        return name

    def output(self, value, name, elem_type, shape):
        """Makes `value` a graph output called `name` (renaming its producer's output)."""
        if value != name:
            for node in self.nodes:
                for i, out in enumerate(node.output):
                    if out == value:
                        node.output[i] = name
                for i, inp in enumerate(node.input):
                    if inp == value:
                        node.input[i] = name
        self.outputs.append(helper.make_tensor_value_info(name, elem_type, shape))
        return name

    # -- nodes ----------------------------------------------------------------

    def op(self, op_type, *inputs, domain="", outputs=1, **attrs):
        """Adds one node; returns the name of its output, or a list of the
        names of its `outputs` outputs when there are several."""
        name = self._node_name(op_type)
        outs = [f"{name}_output_{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=name,
                                           domain=domain or None, **attrs))
        return outs[0] if outputs == 1 else outs

    def const(self, value, dtype=None):
        """A Constant node, as exporters write scalars: int64 for ints, else float32."""
        if dtype is None:
            dtype = np.int64 if isinstance(value, int) else np.float32
        return self.op("Constant", value=numpy_helper.from_array(np.array(value, dtype=dtype)))

    def ints(self, *values):
        """An int64 vector Constant (shapes, axes, starts, ends)."""
        return self.const(list(values), np.int64)

    def tensor(self, name, array):
        """An initializer that always carries data (tables, masks, inv_freq)."""
        array = np.asarray(array)
        self.initializers.append(numpy_helper.from_array(array, name))
        self.arrays[name] = array
        return name

    def weight(self, name, shape, std=0.02, mean=0.0):
        """A trainable FLOAT initializer; data-less when the graph has no data."""
        if not self.with_data:
            t = TensorProto(name=name, data_type=FLOAT)
            t.dims.extend(shape)
            self.initializers.append(t)
            return name
        return self.tensor(name, (mean + std * self.rng.standard_normal(shape)).astype(np.float32))

    # -- common forms -----------------------------------------------------------

    def reduce_mean(self, x, axes, keepdims=1):
        """ReduceMean with axes as attribute (opset < 18) or as input (opset >= 18)."""
        if self.opset >= 18:
            return self.op("ReduceMean", x, self.ints(*axes), keepdims=keepdims)
        return self.op("ReduceMean", x, axes=list(axes), keepdims=keepdims)

    def unsqueeze(self, x, *axes):
        return self.op("Unsqueeze", x, self.ints(*axes))

    def slice(self, x, starts, ends, axes):
        """Slice; starts and ends are int lists or the names of int64 tensors."""
        def vec(v):
            return self.ints(*v) if isinstance(v, (list, tuple)) else v
        return self.op("Slice", x, vec(starts), vec(ends), self.ints(*axes))

    def size(self, x, axis):
        """x.size(axis) as an int64 scalar: Shape, Gather."""
        return self.op("Gather", self.op("Shape", x), self.const(axis), axis=0)

    def dim(self, x, axis):
        """x.size(axis) as a 1-element int64 tensor, ready for Concat: Shape, Gather, Unsqueeze."""
        return self.unsqueeze(self.size(x, axis), 0)

    def shape_of(self, *parts):
        """Concat of 1-element dims and ints into a shape vector, as view(b, s, h, d) exports."""
        return self.op("Concat", *[p if isinstance(p, str) else self.ints(p) for p in parts], axis=0)

    # -- result ---------------------------------------------------------------

    def model(self, producer="megatrain-samples"):
        graph = helper.make_graph(self.nodes, self.name, self.inputs, self.outputs,
                                  initializer=self.initializers)
        opsets = [helper.make_opsetid("", self.opset)]
        opsets += [helper.make_opsetid(d, v) for d, v in self.domains.items()]
        m = helper.make_model(graph, opset_imports=opsets, producer_name=producer)
        m.ir_version = ir_version_for(self.opset)
        return m
