"""Op-level self-tests: single-node graphs against numpy readings of the ONNX spec.

Covers the forms the exported test models do not reach: opset-dependent
attribute/input forms, negative and huge indices, GQA Attention, the newer
normalization ops, ties and the error paths.
"""

import math
import unittest

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

from .interpreter import OnnxModel
from .registry import OracleError, tensor_from_array

INT64_MAX = np.iinfo(np.int64).max
RNG = np.random.default_rng(0)


def f64(*shape):
    return RNG.standard_normal(shape)


def i64(values):
    return np.array(values, dtype=np.int64)


def single_node_model(op_type, inputs, attrs, opset, domain, outputs):
    names = ["" if v is None else f"in{i}" for i, v in enumerate(inputs)]
    node = helper.make_node(op_type, names, [f"out{i}" for i in range(outputs)], domain=domain, **attrs)
    graph_inputs = [helper.make_tensor_value_info(n, onnx.mapping.NP_TYPE_TO_TENSOR_TYPE[np.asarray(v).dtype], None)
                    for n, v in zip(names, inputs) if n]
    graph_outputs = [helper.make_tensor_value_info(f"out{i}", TensorProto.UNDEFINED, None) for i in range(outputs)]
    opsets = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    return helper.make_model(helper.make_graph([node], "single", graph_inputs, graph_outputs), opset_imports=opsets)


def run_node(op_type, inputs, opset=17, domain="", outputs=1, **attrs):
    """Evaluates one node on numpy inputs (None: an omitted optional input); returns numpy outputs."""
    model = OnnxModel(single_node_model(op_type, inputs, attrs, opset, domain, outputs))
    feeds = {f"in{i}": tensor_from_array(v, onnx.mapping.NP_TYPE_TO_TENSOR_TYPE[np.asarray(v).dtype])
             for i, v in enumerate(inputs) if v is not None}
    result = model.run(**feeds)
    return [result[f"out{i}"].detach().numpy() for i in range(outputs)]


def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def attention_reference(q, k, v, scale=None, causal=False, past_k=None, past_v=None, mask=None):
    """Per-(batch, head) loop over 4-D inputs, straight from the spec's description."""
    past = 0 if past_k is None else past_k.shape[2]
    if past_k is not None:
        k, v = np.concatenate([past_k, k], 2), np.concatenate([past_v, v], 2)
    b_size, q_heads, q_len, head = q.shape
    groups = q_heads // k.shape[1]
    scale = 1 / math.sqrt(head) if scale is None else scale
    if mask is not None:
        mask = np.broadcast_to(mask, (b_size, q_heads, q_len, k.shape[2]))
    out = np.zeros((b_size, q_heads, q_len, v.shape[3]))
    for b in range(b_size):
        for h in range(q_heads):
            scores = q[b, h] @ k[b, h // groups].T * scale
            if mask is not None:
                scores = np.where(mask[b, h], scores, -np.inf) if mask.dtype == bool else scores + mask[b, h]
            if causal:
                i, j = np.indices(scores.shape)
                scores = np.where(j > i + past, -np.inf, scores)
            out[b, h] = softmax(scores) @ v[b, h // groups]
    return out


class Ops(unittest.TestCase):
    def same(self, actual, expected, rtol=1e-12):
        expected = np.asarray(expected)
        self.assertEqual(actual.shape, expected.shape)
        if expected.dtype.kind in "biu":
            self.assertEqual(actual.dtype, np.bool_ if expected.dtype == bool else np.int64)
            np.testing.assert_array_equal(actual, expected)
        else:
            self.assertEqual(actual.dtype, np.float64)
            np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol)

    def test_reshape(self):
        x = f64(2, 3, 4)
        self.same(run_node("Reshape", [x, i64([0, -1])])[0], x.reshape(2, 12))
        self.same(run_node("Reshape", [x, i64([-1, 0, 2])])[0], x.reshape(4, 3, 2))
        empty = np.zeros((0, 3))
        self.same(run_node("Reshape", [empty, i64([3, 0])], opset=14, allowzero=1)[0], np.zeros((3, 0)))
        self.same(run_node("Reshape", [empty, i64([0, 3])], opset=14)[0], np.zeros((0, 3)))

    def test_slice(self):
        x = np.arange(10.0)
        self.same(run_node("Slice", [x, i64([-1]), i64([-INT64_MAX]), i64([0]), i64([-2])])[0], x[::-2])
        self.same(run_node("Slice", [x, i64([2]), i64([INT64_MAX])])[0], x[2:])
        self.same(run_node("Slice", [x, i64([8]), i64([2]), i64([0]), i64([-3])])[0], x[8:2:-3])
        y = f64(4, 7)
        self.same(run_node("Slice", [y, i64([1, -6]), i64([100, -1]), i64([0, -1]), i64([2, 2])])[0], y[1::2, 1:6:2])
        self.same(run_node("Slice", [y], opset=9, starts=[1], ends=[-1], axes=[1])[0], y[:, 1:-1])

    def test_split(self):
        x = f64(7, 2)
        parts = run_node("Split", [x], opset=11, outputs=2, split=[3, 4])
        self.same(parts[0], x[:3]), self.same(parts[1], x[3:])
        parts = run_node("Split", [x, i64([2, 5])], opset=13, outputs=2)
        self.same(parts[0], x[:2]), self.same(parts[1], x[2:])
        parts = run_node("Split", [x], opset=18, outputs=3, num_outputs=3)
        self.same(parts[0], x[:3]), self.same(parts[1], x[3:6]), self.same(parts[2], x[6:])
        parts = run_node("Split", [f64(2, 6)], opset=13, outputs=2, axis=-1)
        self.assertEqual([p.shape for p in parts], [(2, 3), (2, 3)])

    def test_squeeze_unsqueeze(self):
        x = f64(3, 1, 2, 1)
        self.same(run_node("Squeeze", [x], opset=11, axes=[-1])[0], x.reshape(3, 1, 2))
        self.same(run_node("Squeeze", [x, i64([1, 3])], opset=13)[0], x.reshape(3, 2))
        self.same(run_node("Squeeze", [x], opset=13)[0], x.reshape(3, 2))
        y = f64(3, 2)
        self.same(run_node("Unsqueeze", [y], opset=11, axes=[0, -1])[0], y.reshape(1, 3, 2, 1))
        self.same(run_node("Unsqueeze", [y, i64([3, 1])], opset=13)[0], y.reshape(3, 1, 2, 1))

    def test_gather_shape_size(self):
        x = f64(3, 5, 2)
        idx = i64([[0, -1], [-5, 2]])
        self.same(run_node("Gather", [x, idx], axis=1)[0], np.take(x, idx % 5, axis=1))
        self.same(run_node("Gather", [x, np.array(-1)])[0], x[-1])
        self.same(run_node("Shape", [x], opset=15, start=1, end=-1)[0], i64([5]))
        self.same(run_node("Shape", [x], opset=15, start=-10)[0], i64([3, 5, 2]))
        self.same(run_node("Size", [x])[0], np.array(30))
        with self.assertRaisesRegex(OracleError, "out of range"):
            run_node("Gather", [x, i64([3])])

    def test_constants(self):
        self.same(run_node("ConstantOfShape", [i64([2, 3])])[0], np.zeros((2, 3)))
        value = numpy_helper.from_array(np.array([7], dtype=np.int32))
        self.same(run_node("ConstantOfShape", [i64([2])], value=value)[0], i64([7, 7]))
        self.same(run_node("Constant", [], value_floats=[1.5, -2.0])[0], [1.5, -2.0])
        self.same(run_node("Constant", [], value_int=4)[0], np.array(4))
        self.same(run_node("Constant", [], value_ints=[1, 2])[0], i64([1, 2]))
        self.same(run_node("Constant", [], value=numpy_helper.from_array(np.float32([[0.25]])))[0], [[0.25]])
        sparse = helper.make_sparse_tensor(numpy_helper.from_array(np.float32([5.0, 6.0])),
                                           numpy_helper.from_array(i64([1, 4])), [2, 3])
        self.same(run_node("Constant", [], sparse_value=sparse)[0], [[0.0, 5.0, 0.0], [0.0, 6.0, 0.0]])

    def test_range_expand_where_trilu(self):
        self.same(run_node("Range", [np.array(5), np.array(-4), np.array(-3)])[0], i64([5, 2, -1]))
        self.same(run_node("Range", [np.array(0.5), np.array(2.0), np.array(0.5)])[0], [0.5, 1.0, 1.5])
        x = f64(3, 1)
        self.same(run_node("Expand", [x, i64([2, 1, 4])])[0], np.broadcast_to(x, (2, 3, 4)))
        self.same(run_node("Expand", [x, i64([1, 1])])[0], x)
        cond = np.array([[True], [False]])
        a, b = f64(2, 3), f64(3)
        self.same(run_node("Where", [cond, a, b])[0], np.where(cond, a, b))
        m = f64(2, 4, 4)
        self.same(run_node("Trilu", [m, np.array(1)])[0], np.triu(m, 1))
        self.same(run_node("Trilu", [m, np.array(-1)], upper=0)[0], np.tril(m, -1))
        self.same(run_node("Trilu", [m])[0], np.triu(m))

    def test_cast(self):
        x = np.array([-2.7, 2.7, 0.0])
        self.same(run_node("Cast", [x], to=TensorProto.INT32)[0], i64([-2, 2, 0]))
        self.same(run_node("Cast", [x], to=TensorProto.BOOL)[0], np.array([True, True, False]))
        self.same(run_node("Cast", [i64([300, -1])], to=TensorProto.UINT8)[0], i64([44, 255]))
        self.same(run_node("Cast", [i64([2 ** 31])], to=TensorProto.INT32)[0], i64([-2 ** 31]))
        self.same(run_node("Cast", [np.array([True, False])], to=TensorProto.FLOAT16)[0], [1.0, 0.0])
        self.same(run_node("CastLike", [i64([3]), np.float32([0])])[0], [3.0])

    def test_arithmetic(self):
        self.same(run_node("Div", [i64([-7, 7]), i64([2, 2])])[0], i64([-3, 3]))
        self.same(run_node("Mod", [i64([-7, 7]), i64([3, -3])])[0], i64([2, -2]))
        self.same(run_node("Mod", [np.array([-7.5]), np.array([2.0])], fmod=1)[0], [-1.5])
        self.same(run_node("Pow", [i64([2, 3]), i64([3, 2])])[0], i64([8, 9]))
        self.same(run_node("Pow", [np.array([4.0]), np.float32([0.5])])[0], [2.0])
        a, b, c = f64(2, 3), f64(3), f64(1, 3)
        self.same(run_node("Max", [a, b, c])[0], np.maximum(np.maximum(a, b), c))
        self.same(run_node("Min", [a, b])[0], np.minimum(a, b))
        self.same(run_node("Clip", [a, np.array(-0.5)])[0], np.maximum(a, -0.5))
        self.same(run_node("Clip", [a, None, np.array(0.5)])[0], np.minimum(a, 0.5))
        self.same(run_node("Clip", [a], opset=6, min=-0.5, max=0.5)[0], np.clip(a, -0.5, 0.5))
        # The ONNX CumSum spec's examples; axis 1 of a matrix against numpy.
        x, axis0 = np.array([1.0, 2.0, 3.0]), i64(0)
        self.same(run_node("CumSum", [x, axis0])[0], [1.0, 3.0, 6.0])
        self.same(run_node("CumSum", [x, axis0], exclusive=1)[0], [0.0, 1.0, 3.0])
        self.same(run_node("CumSum", [x, axis0], reverse=1)[0], [6.0, 5.0, 3.0])
        self.same(run_node("CumSum", [x, axis0], exclusive=1, reverse=1)[0], [5.0, 3.0, 0.0])
        self.same(run_node("CumSum", [a, i64(-1)])[0], np.cumsum(a, axis=1))
        inf = np.array([np.inf, -np.inf, 1.0, np.nan])
        self.same(run_node("IsInf", [inf], detect_negative=0)[0], np.array([True, False, False, False]))
        self.same(run_node("IsNaN", [inf])[0], np.array([False, False, False, True]))
        self.same(run_node("Floor", [np.array([-1.5])])[0], [-2.0])
        self.same(run_node("Ceil", [np.array([-1.5])])[0], [-1.0])
        self.same(run_node("Reciprocal", [np.array([4.0])])[0], [0.25])

    def test_matrix_products(self):
        a, b, c = f64(3, 4), f64(5, 4), f64(5)
        self.same(run_node("Gemm", [a, b, c], transB=1, alpha=0.5, beta=2.0)[0], 0.5 * a @ b.T + 2 * c)
        x, y = f64(2, 3, 4), f64(4, 5)
        self.same(run_node("MatMul", [x, y])[0], x @ y)
        z = f64(2, 4, 5)
        self.same(run_node("Einsum", [x, z], equation="bij,bjk->bik")[0], np.einsum("bij,bjk->bik", x, z))

    def test_reductions(self):
        x = f64(2, 3, 4)
        self.same(run_node("ReduceMean", [x], opset=13, axes=[-1], keepdims=0)[0], x.mean(-1))
        self.same(run_node("ReduceMean", [x, i64([0, 2])], opset=18)[0], x.mean((0, 2), keepdims=True))
        self.same(run_node("ReduceMean", [x], opset=18, noop_with_empty_axes=1)[0], x)
        self.same(run_node("ReduceSum", [x, i64([1])], opset=13, keepdims=0)[0], x.sum(1))
        self.same(run_node("ReduceSum", [x], opset=13, keepdims=0)[0], np.array(x.sum()))
        self.same(run_node("ReduceSum", [x], opset=11, axes=[1])[0], x.sum(1, keepdims=True))
        self.same(run_node("ReduceMax", [x], opset=17, axes=[1])[0], x.max(1, keepdims=True))
        self.same(run_node("ReduceMax", [x, i64([-2])], opset=18, keepdims=0)[0], x.max(1))

    def test_softmax(self):
        x = f64(2, 3, 4)
        flat = softmax(x.reshape(2, 12)).reshape(2, 3, 4)
        self.same(run_node("Softmax", [x], opset=11)[0], flat)
        self.same(run_node("Softmax", [x], opset=13, axis=1)[0], softmax(x, 1))
        self.same(run_node("Softmax", [x], opset=13)[0], softmax(x, -1))
        self.same(run_node("LogSoftmax", [x], opset=13)[0], np.log(softmax(x, -1)))

    def test_normalizations(self):
        x, scale, bias = f64(2, 3, 4), f64(3, 4), f64(3, 4)
        mean = x.mean((1, 2), keepdims=True)
        inv_std = 1 / np.sqrt(((x - mean) ** 2).mean((1, 2), keepdims=True) + 2.0 ** -10)
        y, m, s = run_node("LayerNormalization", [x, scale, bias], outputs=3, axis=-2, epsilon=2.0 ** -10)
        self.same(y, (x - mean) * inv_std * scale + bias)
        self.same(m, mean), self.same(s, inv_std)
        w = f64(4)
        rms = x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5) * w
        self.same(run_node("RMSNormalization", [x, w], opset=23)[0], rms)
        self.same(run_node("SimplifiedLayerNormalization", [x, w], domain="com.microsoft")[0], rms)
        with self.assertRaisesRegex(OracleError, "unsupported op RMSNormalization .*opset 17"):
            run_node("RMSNormalization", [x, w], opset=17)

    def test_gelu(self):
        x = torch.from_numpy(f64(50) * 3)
        exact = torch.nn.functional.gelu(x).numpy()
        tanh = torch.nn.functional.gelu(x, approximate="tanh").numpy()
        self.same(run_node("Gelu", [x.numpy()], opset=20)[0], exact)
        self.same(run_node("Gelu", [x.numpy()], opset=20, approximate="tanh")[0], tanh)

    def test_attention_4d_gqa_causal(self):
        q, k, v = f64(2, 6, 5, 4), f64(2, 2, 5, 4), f64(2, 2, 5, 3)
        self.same(run_node("Attention", [q, k, v], opset=23, is_causal=1)[0],
                  attention_reference(q, k, v, causal=True))
        self.same(run_node("Attention", [q, k, v], opset=23, scale=0.375)[0], attention_reference(q, k, v, scale=0.375))

    def test_attention_3d(self):
        b, length, q_heads, kv_heads, head = 2, 5, 4, 2, 3
        q, k, v = f64(b, length, q_heads * head), f64(b, length, kv_heads * head), f64(b, length, kv_heads * head)

        def heads(t, n):
            return t.reshape(b, length, n, head).transpose(0, 2, 1, 3)

        expected = attention_reference(heads(q, q_heads), heads(k, kv_heads), heads(v, kv_heads), causal=True)
        y = run_node("Attention", [q, k, v], opset=23, is_causal=1, q_num_heads=q_heads, kv_num_heads=kv_heads)[0]
        self.same(y, expected.transpose(0, 2, 1, 3).reshape(b, length, q_heads * head))

    def test_attention_past_and_mask(self):
        q, k, v = f64(1, 2, 3, 4), f64(1, 2, 3, 4), f64(1, 2, 3, 4)
        past_k, past_v = f64(1, 2, 2, 4), f64(1, 2, 2, 4)
        mask = RNG.random((3, 5)) > 0.3
        mask[:, 0] = True  # no fully masked row
        y, present_k, present_v = run_node("Attention", [q, k, v, mask, past_k, past_v], opset=23, outputs=3,
                                           is_causal=1)
        self.same(y, attention_reference(q, k, v, causal=True, past_k=past_k, past_v=past_v, mask=mask))
        self.same(present_k, np.concatenate([past_k, k], 2)), self.same(present_v, np.concatenate([past_v, v], 2))
        additive = f64(1, 1, 3, 5)
        y = run_node("Attention", [q, k, v, additive, past_k, past_v], opset=23)[0]
        self.same(y, attention_reference(q, k, v, past_k=past_k, past_v=past_v, mask=additive))

    def test_dropout_is_identity(self):
        x = f64(3)
        y, mask = run_node("Dropout", [x, np.array(0.5)], opset=13, outputs=2)
        self.same(y, x), self.same(mask, np.ones(3, dtype=bool))
        self.same(run_node("Dropout", [x, np.array(0.0), np.array(True)], opset=13)[0], x)
        with self.assertRaisesRegex(OracleError, "training mode"):
            run_node("Dropout", [x, np.array(0.1), np.array(True)], opset=13)

    def test_unsupported_op_names_node(self):
        model = single_node_model("FancyOp", [f64(2)], {}, 17, "", 1)
        model.graph.node[0].name = "block3/fancy"
        with self.assertRaisesRegex(OracleError, r"unsupported op FancyOp \(node 'block3/fancy', domain 'ai.onnx', opset 17\)"):
            OnnxModel(model)

    def test_runtime_error_names_node(self):
        with self.assertRaisesRegex(OracleError, r"op MatMul, opset 17"):
            run_node("MatMul", [f64(2, 3), f64(2, 3)])


class Ties(unittest.TestCase):
    """The tie rule of interpreter's docstring, one clause per case."""

    def model(self, initializers):
        inits = [numpy_helper.from_array(a, name) for name, a in initializers.items()]
        nodes = [helper.make_node("ReduceSum", [name], [f"sum_{name}"], keepdims=0, axes=[0, 1] if a.ndim == 2 else [0])
                 for name, a in initializers.items()]
        outputs = [helper.make_tensor_value_info(f"sum_{n}", TensorProto.FLOAT, None) for n in initializers]
        graph = helper.make_graph(nodes, "ties", [], outputs, inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])

    def test_rule(self):
        w = RNG.standard_normal((3, 4)).astype(np.float32)
        model = self.model({"w": w, "w_t": np.ascontiguousarray(w.T), "w_copy": w.copy(),
                            "other": w + 1, "ones_a": np.ones(4, np.float32), "ones_b": np.ones(4, np.float32),
                            "w_f64": w.astype(np.float64)})
        oracle = OnnxModel(model)
        self.assertEqual(oracle.ties, {"w_t": ("w", True), "w_copy": ("w", False)})
        self.assertEqual(list(oracle.params), ["w", "other", "ones_a", "ones_b", "w_f64"])
        total = sum(v.sum() for v in oracle.run().values())
        (grad,) = torch.autograd.grad(total, [oracle.params["w"]])
        self.assertTrue(torch.equal(grad, torch.full((3, 4), 3.0, dtype=torch.float64)))
        self.assertEqual(OnnxModel(model, tie_detect=False).ties, {})


if __name__ == "__main__":
    unittest.main()


class ControlFlow(unittest.TestCase):
    """Loop and the sequence ops, on graphs built here; expected values by hand."""

    @staticmethod
    def run_graph(nodes, inputs, outputs):
        graph = helper.make_graph(
            nodes, "g",
            [helper.make_tensor_value_info(n, onnx.mapping.NP_TYPE_TO_TENSOR_TYPE[v.dtype], None)
             for n, v in inputs.items()],
            [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in outputs])
        model = OnnxModel(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
        feeds = {n: tensor_from_array(v, onnx.mapping.NP_TYPE_TO_TENSOR_TYPE[v.dtype])
                 for n, v in inputs.items()}
        result = model.run(**feeds)
        return [result[n].detach().numpy() for n in outputs]

    def test_split_erase_concat(self):
        x = np.arange(10, dtype=np.float64).reshape(2, 5)
        nodes = [helper.make_node("SplitToSequence", ["x", "sizes"], ["s"], axis=1),
                 helper.make_node("SequenceErase", ["s", "zero"], ["t"]),
                 helper.make_node("SequenceLength", ["t"], ["n"]),
                 helper.make_node("SequenceConstruct", ["x", "x"], ["u"]),
                 helper.make_node("ConcatFromSequence", ["t"], ["y"], axis=-1),
                 helper.make_node("ConcatFromSequence", ["u"], ["z"], axis=0, new_axis=1)]
        y, n, z = self.run_graph(nodes, {"x": x, "sizes": i64([2, 3]), "zero": i64(0)},
                                 ["y", "n", "z"])
        np.testing.assert_array_equal(y, x[:, 2:])
        self.assertEqual(int(n), 1)
        self.assertEqual(z.shape, (2, 2, 5))

    def test_loop_threads_carried_values_and_stacks_scans(self):
        # Doubles c, scans 10 * i, and stops after iteration 2 of at most 4.
        body = helper.make_graph(
            [helper.make_node("Add", ["c", "c"], ["c_out"]),
             helper.make_node("Less", ["i", "two"], ["cond_out"]),
             helper.make_node("Mul", ["i", "ten"], ["scan"])],
            "body",
            [helper.make_tensor_value_info("i", TensorProto.INT64, []),
             helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
             helper.make_tensor_value_info("c", TensorProto.DOUBLE, None)],
            [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
             helper.make_tensor_value_info("c_out", TensorProto.DOUBLE, None),
             helper.make_tensor_value_info("scan", TensorProto.INT64, [])])
        nodes = [helper.make_node("Loop", ["m", "go", "c0"], ["c", "scans"], body=body)]
        c, scans = self.run_graph(
            nodes, {"m": i64(4), "go": np.array(True), "c0": np.array([1.0, -3.0]),
                    "two": i64(2), "ten": i64(10)}, ["c", "scans"])
        np.testing.assert_array_equal(c, [8.0, -24.0])
        np.testing.assert_array_equal(scans, [0, 10, 20])


class TopK(unittest.TestCase):
    def test_largest_values_and_indices_along_axis(self):
        x = np.array([[0.1, 0.7, 0.3, 0.9], [0.5, 0.2, 0.8, 0.4]])
        values, indices = run_node("TopK", [x, i64([2])], opset=11, outputs=2)
        np.testing.assert_array_equal(values, [[0.9, 0.7], [0.8, 0.5]])
        self.assertEqual(indices.tolist(), [[3, 1], [2, 0]])
        values, indices = run_node("TopK", [x, i64([1])], opset=11, outputs=2, axis=0, largest=0)
        self.assertEqual(indices.tolist(), [[0, 1, 0, 1]])


class Conv(unittest.TestCase):
    def test_depthwise_causal_padding_by_hand(self):
        # Two channels, taps [1, 2, 3] and [0, 0, 1]; pads 2 before and 0
        # after: y[s] = 1·x[s−2] + 2·x[s−1] + 3·x[s] and y[s] = x[s].
        x = np.array([[[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]]])
        w = np.array([[[1.0, 2.0, 3.0]], [[0.0, 0.0, 1.0]]])
        y = run_node("Conv", [x, w], opset=11, group=2, pads=[2, 0])[0]
        np.testing.assert_array_equal(y, [[[3, 8, 14, 20], [5, 6, 7, 8]]])
        # Symmetric pads, a stride, a dilation and a bias on one full channel.
        y = run_node("Conv", [x[:, :1], w[:1], np.array([0.5])], opset=11, pads=[1, 1],
                     strides=[2], dilations=[1])[0]
        np.testing.assert_array_equal(y, [[[8.5, 20.5]]])


class Pad(unittest.TestCase):
    def test_constant_pads_and_crops_by_hand(self):
        x = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
        # One zero row before, the last row cropped: a shift down by one.
        y = run_node("Pad", [x, np.array([1, 0, -1, 0])])[0]
        np.testing.assert_array_equal(y, [[0, 0, 0], [1, 2, 3]])
        # Opset 18's axes: two columns of 7 after on the last axis only.
        y = run_node("Pad", [x, np.array([0, 2]), np.array(7.0), np.array([-1])], opset=18)[0]
        np.testing.assert_array_equal(y, [[1, 2, 3, 7, 7], [4, 5, 6, 7, 7]])


class GatedDeltaRule(unittest.TestCase):
    def test_two_positions_by_hand(self):
        # Dk = Dv = 1: M = 0; t0: δ = 0.5·(4 − 0) = 2, M = 1·2 = 2, o = 2·2 = 4;
        # t1: M = 0.5·2 = 1, δ = 1·(2 − 1·0.5) = 1.5, M = 1 + 0.5·1.5 = 1.75,
        # o = 1.75·3 = 5.25.
        q, k, v = (np.array(a).reshape(1, 2, 1, 1) for a in ([2.0, 3.0], [1.0, 0.5], [4.0, 2.0]))
        g = np.log(np.array([1.0, 0.5])).reshape(1, 2, 1)
        beta = np.array([0.5, 1.0]).reshape(1, 2, 1)
        o = run_node("GatedDeltaRule", [q, k, v, g, beta], opset=1, domain="ai.megatrain")[0]
        np.testing.assert_allclose(o.ravel(), [4.0, 5.25], rtol=1e-12)

    def test_a_decay_per_key_channel(self):
        # Dk = 2, Dv = 1, q = [1, 1]: t0: δ = 2, M = [2, 2]ᵀ, o = 4; t1: rows
        # decay by 0.5 and 0.25, M = [1, 0.5]ᵀ, u = Mᵀ[1, 0] = 1, δ = 3 − 1 =
        # 2, M = [3, 0.5]ᵀ, o = 3.5 (one decay of 0.5 for both rows: 4).
        q = np.ones((1, 2, 1, 2))
        k = np.array([[1.0, 1.0], [1.0, 0.0]]).reshape(1, 2, 1, 2)
        v = np.array([2.0, 3.0]).reshape(1, 2, 1, 1)
        g = np.log(np.array([[1.0, 1.0], [0.5, 0.25]])).reshape(1, 2, 1, 2)
        beta = np.ones((1, 2, 1))
        o = run_node("GatedDeltaRule", [q, k, v, g, beta], opset=1, domain="ai.megatrain")[0]
        np.testing.assert_allclose(o.ravel(), [4.0, 3.5], rtol=1e-12)

    def test_value_heads_share_a_key_head(self):
        # Two value heads on one key head: each runs as the single-head
        # rule with its own v, g and beta.
        rng = np.random.default_rng(3)
        q, k = rng.normal(size=(2, 5, 1, 3)), rng.normal(size=(2, 5, 1, 3))
        v = rng.normal(size=(2, 5, 2, 4))
        g, beta = -rng.uniform(0, 1, (2, 5, 2)), rng.uniform(0, 1, (2, 5, 2))
        o = run_node("GatedDeltaRule", [q, k, v, g, beta], opset=1, domain="ai.megatrain")[0]
        for h in range(2):
            one = run_node("GatedDeltaRule", [q, k, v[:, :, h:h + 1], g[:, :, h:h + 1],
                                              beta[:, :, h:h + 1]], opset=1, domain="ai.megatrain")[0]
            np.testing.assert_allclose(o[:, :, h:h + 1], one, rtol=1e-12)


class GatedLinearRule(unittest.TestCase):
    def test_two_positions_by_hand(self):
        # Dk = Dv = 1, no delta rule: t0: M = 0 + 1·(0.5·4) = 2, o = 2·2 = 4;
        # t1: M = 0.5·2 + 0.5·(1·2) = 2, o = 2·3 = 6.
        q, k, v = (np.array(a).reshape(1, 2, 1, 1) for a in ([2.0, 3.0], [1.0, 0.5], [4.0, 2.0]))
        g = np.log(np.array([1.0, 0.5])).reshape(1, 2, 1)
        beta = np.array([0.5, 1.0]).reshape(1, 2, 1)
        o = run_node("GatedLinearRule", [q, k, v, g, beta], opset=1, domain="ai.megatrain")[0]
        np.testing.assert_allclose(o.ravel(), [4.0, 6.0], rtol=1e-12)


class DecayLinearRule(unittest.TestCase):
    def test_two_positions_by_hand(self):
        # Dk = Dv = 1, rate ln 2 (decay 0.5): t0: M = 1·4 = 4, o = 2·4 = 8;
        # t1: M = 0.5·4 + 0.5·2 = 3, o = 3·3 = 9.
        q, k, v = (np.array(a).reshape(1, 2, 1, 1) for a in ([2.0, 3.0], [1.0, 0.5], [4.0, 2.0]))
        rate = np.array([np.log(2.0)]).reshape(1, 1, 1)
        o = run_node("DecayLinearRule", [q, k, v, rate], opset=1, domain="ai.megatrain")[0]
        np.testing.assert_allclose(o.ravel(), [8.0, 9.0], rtol=1e-12)


class ScatterElements(unittest.TestCase):
    def test_writes_updates_at_indices_along_axis(self):
        x = np.zeros((2, 4))
        out = run_node("ScatterElements", [x, i64([[3, 1], [-4, 2]]), np.array([[1.0, 2.0], [3.0, 4.0]])],
                       opset=13, axis=1)[0]
        np.testing.assert_array_equal(out, [[0, 2, 0, 1], [3, 0, 4, 0]])
        out = run_node("ScatterElements", [x, i64([[1, 0, 1, 0]]), np.ones((1, 4))], opset=13)[0]
        np.testing.assert_array_equal(out, [[0, 1, 0, 1], [1, 0, 1, 0]])


class ScatterND(unittest.TestCase):
    """Values placed by hand into x = arange(12).reshape(3, 4)."""

    def test_rows_elements_and_negative_indices(self):
        x = np.arange(12, dtype=np.float64).reshape(3, 4)
        rows = run_node("ScatterND", [x, i64([[2], [0]]), -np.ones((2, 4))], opset=13)[0]
        np.testing.assert_array_equal(rows, [[-1, -1, -1, -1], [4, 5, 6, 7], [-1, -1, -1, -1]])
        points = run_node("ScatterND", [x, i64([[0, 1], [-1, -1]]), np.array([20.0, 30.0])],
                          opset=13)[0]
        np.testing.assert_array_equal(points, [[0, 20, 2, 3], [4, 5, 6, 7], [8, 9, 10, 30]])
        with self.assertRaises(OracleError):
            run_node("ScatterND", [x, i64([[3]]), np.zeros((1, 4))], opset=13)


class GatherND(unittest.TestCase):
    """Values picked by hand from x = arange(24).reshape(2, 3, 4)."""

    def test_tuples_batch_dims_and_negative_indices(self):
        x = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
        rows = run_node("GatherND", [x, i64([[0, 1], [1, 2]])])[0]
        np.testing.assert_array_equal(rows, [[4, 5, 6, 7], [20, 21, 22, 23]])
        batched = run_node("GatherND", [x, i64([[1], [2]])], batch_dims=1)[0]
        np.testing.assert_array_equal(batched, [[4, 5, 6, 7], [20, 21, 22, 23]])
        points = run_node("GatherND", [x, i64([[[0, 1, 3]], [[1, 2, -1]]])])[0]
        np.testing.assert_array_equal(points, [[7], [23]])
        with self.assertRaises(OracleError):
            run_node("GatherND", [x, i64([[2, 0]])])
