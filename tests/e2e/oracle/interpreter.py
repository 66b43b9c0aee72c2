"""Evaluates an ONNX graph in float64 torch with autograd: the independent oracle.

It shares nothing with the C++ importer, so the end-to-end tests compare two
readings of the ONNX spec, not one reading with itself.

Values: float tensors of any ONNX float type are float64, integer tensors
int64 (a Cast to a narrower integer type wraps like that type), bools bool.
Dynamic dims are whatever the fed inputs have.

Parameters: every float initializer is a float64 leaf tensor with
requires_grad, keyed by initializer name; integer and bool initializers are
constants, and so are Constant nodes. Which leaves are trained is decided by
the loss (see reference_train): a leaf the loss has no gradient for is a
constant too.

Ties: torch's exporter folds Transpose(W) of a shared weight into a new
initializer (e.g. a tied LM head beside the embedding), so the graph holds
one parameter twice. The oracle ties two float initializers when they have
the same element type and either
  (a) the same shape and bitwise-equal data, or
  (b) both are 2-D, shaped [m, n] and [n, m], and one is bitwise equal to
      the other's transpose.
An initializer whose elements are all bitwise equal (zeros, ones, a single
element) never ties: equal values there are no evidence of sharing. Ties are
transitive. A tie group is represented by its member that comes first in
graph.initializer (its source): the only leaf; the other members are the
source or its transpose. Their gradients therefore sum into the source's, in
the source's orientation, and are reported once, under the source's name.
`tie_detect=False` keeps every initializer its own parameter.
"""

import os
from collections import defaultdict
from typing import NamedTuple

import numpy as np
import onnx
from onnx import numpy_helper

import torch

from . import ops_math, ops_nn, ops_sequence, ops_tensor  # noqa: F401  (they fill the op table)
from .registry import F, OPS, Node, OracleError, scalar, tensor_from_array, torch_dtype


class Tie(NamedTuple):
    source: str  # the tie group's first initializer: the leaf
    transposed: bool  # this member is source.T


def _bits(array):
    return np.ascontiguousarray(array).view(f"u{array.dtype.itemsize}")


def _fingerprint(array):
    """A transpose-invariant hash: wrapping sums of the bit patterns."""
    words = _bits(array).ravel().astype(np.uint64)
    return int(words.sum()), int((words * words).sum())


def _relation(source, other):
    """'same', 'transposed' or None: how `other` relates to `source`, bitwise."""
    if source.shape == other.shape and np.array_equal(_bits(source), _bits(other)):
        return "same"
    if source.ndim == 2 and source.shape[::-1] == other.shape and np.array_equal(_bits(source.T), _bits(other)):
        return "transposed"
    return None


def find_ties(initializers, arrays):
    """Maps each tied initializer (not a source) to its Tie; see the module docstring."""
    buckets = defaultdict(list)
    for init in initializers:
        array = arrays[init.name]
        if torch_dtype(init.data_type) != F or array.size < 2:
            continue
        bits = _bits(array).ravel()
        if (bits == bits[0]).all():
            continue
        shape = tuple(sorted(array.shape)) if array.ndim == 2 else array.shape
        buckets[(array.dtype.str, array.ndim, shape, _fingerprint(array))].append(init.name)
    ties = {}
    for names in buckets.values():  # each in initializer order
        for i, source in enumerate(names):
            if source in ties:
                continue
            for other in names[i + 1:]:
                relation = other not in ties and _relation(arrays[source], arrays[other])
                if relation:
                    ties[other] = Tie(source, relation == "transposed")
    return ties


def _domain(domain):
    return "" if domain == "ai.onnx" else domain


def _reads(proto):
    """The names a node reads: its inputs and what its subgraphs (a Loop's
    body) read from the enclosing graph."""
    names = [n for n in proto.input if n]
    for a in proto.attribute:
        if a.type != onnx.AttributeProto.GRAPH:
            continue
        inner = {i.name for i in a.g.input} | {t.name for t in a.g.initializer}
        used = []
        for n in a.g.node:
            used += _reads(n)
            inner.update(n.output)
        used += [o.name for o in a.g.output]
        names += [u for u in used if u not in inner]
    return names


class OnnxModel:
    """An ONNX model ready to run: its parameters, constants, ties and nodes."""

    def __init__(self, model, tie_detect=True):
        if isinstance(model, (str, os.PathLike)):
            path = os.fspath(model)
            try:
                model = onnx.load(path, load_external_data=True)
            except Exception as e:
                raise OracleError(f"cannot load ONNX model {path}: {e}") from e
        graph = model.graph
        opsets = {_domain(o.domain): o.version for o in model.opset_import}
        arrays = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
        self.ties = find_ties(graph.initializer, arrays) if tie_detect else {}
        self.params = {}  # source initializers of float type: the leaves, in initializer order
        self.constants = {}
        for init in graph.initializer:
            if init.name in self.ties:
                continue
            tensor = tensor_from_array(arrays[init.name], init.data_type)
            if tensor.dtype == F:
                self.params[init.name] = tensor.requires_grad_(True)
            else:
                self.constants[init.name] = tensor
        self.input_names = [i.name for i in graph.input if i.name not in arrays]
        self.outputs = list(graph.output)  # ValueInfoProto: declared types and shapes
        self.output_names = [o.name for o in graph.output]
        self.nodes = [self._bind(proto, opsets) for proto in graph.node]
        self._release = self._release_plan()

    @staticmethod
    def _bind(proto, opsets):
        domain = _domain(proto.domain)
        opset = opsets.get(domain)
        node = Node(proto, opset)
        if (domain, proto.op_type) == ("", "Loop") and opset and opset >= 13:
            node.body = node.attrs["body"]
            node.body_nodes = [OnnxModel._bind(p, opsets) for p in node.body.node]
            node.handler = None  # run by _loop, which needs the enclosing values
            return node
        entry = OPS.get((domain, proto.op_type))
        if opset is None or entry is None or opset < entry[0]:
            where = f"node '{node.name}', domain '{domain or 'ai.onnx'}', opset {opset}"
            hint = f"; the oracle has it from opset {entry[0]}" if entry and opset else ""
            raise OracleError(f"unsupported op {proto.op_type} ({where}){hint}")
        node.handler = entry[1]
        return node

    def _release_plan(self):
        """For each node, the values no later node reads (freed to bound memory)."""
        last_use = {}
        for i, node in enumerate(self.nodes):
            for name in _reads(node.proto):
                last_use[name] = i
        plan = [[] for _ in self.nodes]
        for name, i in last_use.items():
            if name and name not in self.output_names:
                plan[i].append(name)
        return plan

    def tied_value(self, name):
        """A tie member's value: its source's (a param, or a frozen constant)."""
        tie = self.ties[name]
        source = self.params.get(tie.source)
        if source is None:
            source = self.constants[tie.source]
        return source.t() if tie.transposed else source

    def run(self, **feeds):
        """Evaluates the graph on `feeds` (input name -> tensor); returns output name -> tensor."""
        missing = [n for n in self.input_names if n not in feeds]
        if missing:
            raise OracleError(f"graph inputs not fed: {', '.join(missing)}")
        values = {**self.constants, **self.params, **feeds}
        for name in self.ties:
            values[name] = self.tied_value(name)
        self._execute(self.nodes, values, self._release)
        return {name: values[name] for name in self.output_names}

    def _execute(self, nodes, values, releases=None):
        """Runs nodes in order over `values` (name -> tensor), adding their outputs."""
        for i, node in enumerate(nodes):
            unknown = [n for n in _reads(node.proto) if n not in values]
            if unknown:
                raise OracleError(f"value '{unknown[0]}' is read before it is produced "
                                  f"(node '{node.name}', op {node.op_type})")
            args = [values[n] if n else None for n in node.proto.input]
            try:
                if node.handler is None:
                    result = self._loop(node, args, values)
                else:
                    result = node.handler(node, *args)
            except Exception as e:
                raise OracleError(f"{e} (node '{node.name}', op {node.op_type}, opset {node.opset})") from e
            results = result if isinstance(result, list) else [result]
            for name, value in zip(node.proto.output, results):
                if name:
                    values[name] = value
            for name in releases[i] if releases else ():
                values.pop(name, None)

    def _loop(self, node, args, values):
        """ONNX Loop: the body runs while the trip count and condition allow,
        threading the loop-carried values; scan outputs are stacked."""
        trips, cond, carried = args[0], args[1], list(args[2:])
        body = node.body
        num_scans = len(body.output) - 1 - len(carried)
        scans = [[] for _ in range(num_scans)]
        keep_going = cond is None or bool(scalar(cond))
        i = 0
        while (trips is None or i < int(scalar(trips))) and keep_going:
            scope = dict(values)
            scope[body.input[0].name] = torch.tensor(i, dtype=torch.int64)
            scope[body.input[1].name] = torch.tensor(True)
            for vi, value in zip(body.input[2:], carried):
                scope[vi.name] = value
            self._execute(node.body_nodes, scope)
            outs = [scope[o.name] for o in body.output]
            keep_going = bool(scalar(outs[0]))
            carried = outs[1:1 + len(carried)]
            for k in range(num_scans):
                scans[k].append(outs[1 + len(carried) + k])
            i += 1
        if any(not s for s in scans):
            raise OracleError("a Loop with scan outputs ran no iteration")
        return carried + [torch.stack(s) for s in scans]

    def logits_name(self):
        return "logits" if "logits" in self.output_names else self.output_names[0]

    def logits(self, input_ids):
        """The [B, S, V] logits for int64 `input_ids` [B, S]."""
        return self.run(input_ids=input_ids)[self.logits_name()]
