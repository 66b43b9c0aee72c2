"""Small ONNX graphs, each exercising one idiom form the importer fuses.

    python idioms.py NAME -o FILE.onnx     write one graph
    python idioms.py --list                names and node forms
    python idioms.py --check               build all, run onnx.checker where it
                                           knows the ops, and compare a NumPy
                                           evaluation of each graph with the
                                           fused math it claims

Contract: float input `x` [batch, seq, 16] (ids-based graphs: int64 `ids`
[batch, seq]), one output `y`, weights as seeded initializers with data,
opset 17 unless the form needs another. Node forms are exactly as listed.
"""
import argparse
import math
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[2] / "samples"))

import decoder_graph as dg  # noqa: E402
import fused_math as fm  # noqa: E402
import onnx_eval  # noqa: E402
from onnx_build import FLOAT, INT64, Graph  # noqa: E402

HIDDEN = 16
EPS = 1e-6
MAX_POS = 64
VOCAB = 256
INF = float("inf")
FMIN = dg.FLOAT32_MIN

IDIOMS = {}


def idiom(name, summary, opset=17, domains=None):
    def register(build):
        IDIOMS[name] = (build, summary, opset, domains)
        return build
    return register


# -- helpers --

def x_input(g):
    return g.input("x", FLOAT, ["batch", "seq", HIDDEN])


def ids_input(g):
    return g.input("ids", INT64, ["batch", "seq"])


def y_output(g, value, dim):
    g.output(value, "y", FLOAT, ["batch", "seq", dim])


def param(g, name, shape, std=None, mean=0.0):
    """A seeded weight; returns its name and its values in float64 for the reference."""
    if std is None:
        std = shape[0] ** -0.5 if len(shape) == 2 else 0.1
    g.weight(name, shape, std=std, mean=mean)
    return name, g.arrays[name].astype(np.float64)


def matmul(g, x, n_in, n_out, name):
    w, W = param(g, name, [n_in, n_out])
    return g.op("MatMul", x, w), W


# -- RMSNorm --

def _rms_tail(g, x, ms, weight_first=False):
    """Add eps, Sqrt, Div(x, .), then Mul by the weight."""
    n = g.op("Div", x, g.op("Sqrt", g.op("Add", ms, g.const(EPS))))
    w, W = param(g, "norm.weight", [HIDDEN], mean=1.0)
    return g.op("Mul", w, n) if weight_first else g.op("Mul", n, w), W


@idiom("rmsnorm-pow-div", "Pow(x,2), ReduceMean(axes=[-1] attr, keepdims=1), Add eps 1e-6, Sqrt, Div(x,.), "
       "Mul(.,w)")
def _(g):
    x = x_input(g)
    y, W = _rms_tail(g, x, g.reduce_mean(g.op("Pow", x, g.const(2.0)), [-1]))
    y_output(g, y, HIDDEN)
    return lambda f: fm.rms_norm(f["x"], W, EPS)


@idiom("rmsnorm-no-eps", "Pow(x,2), ReduceMean, Sqrt, Reciprocal, Mul(x,.), Mul(w,.): no eps Add "
       "(a dynamo export of an eps below float32's reach of the mean square)")
def _(g):
    x = x_input(g)
    ms = g.reduce_mean(g.op("Pow", x, g.const(2.0)), [-1])
    w, W = param(g, "norm.weight", [HIDDEN], mean=1.0)
    y = g.op("Mul", w, g.op("Mul", x, g.op("Reciprocal", g.op("Sqrt", ms))))
    y_output(g, y, HIDDEN)
    return lambda f: fm.rms_norm(f["x"], W, 0.0)


@idiom("pow-square", "Add(x, Pow(Relu(x), 2)): a squared ReLU as the dynamo exporter writes it")
def _(g):
    x = x_input(g)
    y_output(g, g.op("Add", x, g.op("Pow", g.op("Relu", x), g.const(2.0))), HIDDEN)
    return lambda f: f["x"] + np.maximum(f["x"], 0) ** 2


@idiom("gathernd-slice", "Add(x, Squeeze(GatherND(Transpose(x, [2,0,1]), [[3]]), 0)) with x "
       "transposed to [16,B,S]: GatherND of one index tuple is a slice")
def _(g):
    x = x_input(g)
    t = g.op("Transpose", x, perm=[2, 0, 1])
    picked = g.op("GatherND", t, g.const([[3]], np.int64))
    col = g.op("Squeeze", picked, g.ints(0))
    y_output(g, g.op("Add", x, g.unsqueeze(col, 2)), HIDDEN)
    return lambda f: f["x"] + f["x"][..., 3:4]


def _position_table(g, x, beta, period):
    """1 + beta·log(1 + floor(pos / period)) [S, 1] from Range(0, S): Llama 4's
    (Ministral 3's) query scaling, computed in the graph."""
    pos = g.op("Cast", g.op("Range", g.const(0), g.size(x, 1), g.const(1)), to=FLOAT)
    steps = g.op("Floor", g.op("Div", pos, g.const(float(period))))
    scale = g.op("Add", g.op("Mul", g.op("Log", g.op("Add", steps, g.const(1.0))),
                             g.const(float(beta))), g.const(1.0))
    return g.unsqueeze(scale, 1)


def _position_scale(pos, beta, period):
    return (1 + beta * np.log1p(np.floor(pos / period)))[:, None]


def _xielu(g, x, ap, an):
    """xIELU with beta 0.5 and eps −1e-6 as the dynamo exporter writes it."""
    lin = g.op("Mul", g.const(0.5), x)
    pos = g.op("Add", g.op("Mul", g.op("Mul", ap, x), x), lin)
    expm1 = g.op("Sub", g.op("Exp", g.op("Min", x, g.const(-1e-6))), g.const(1.0))
    neg = g.op("Add", g.op("Mul", g.op("Sub", expm1, x), an), lin)
    y_output(g, g.op("Where", g.op("Greater", x, g.const(0.0)), pos, neg), HIDDEN)


def _xielu_ref(x, a_p, a_n):
    return np.where(x > 0, a_p * x * x + 0.5 * x,
                    a_n * (np.expm1(np.minimum(x, -1e-6)) - x) + 0.5 * x)


@idiom("xielu", "Where(Greater(x,0), Add(Mul(Mul(ap,x),x), Mul(beta,x)), "
       "Add(Mul(Sub(Sub(Exp(Min(x,eps)),1),x), an), Mul(beta,x))) with ap, an [1] weights: "
       "Apertus's xIELU as the dynamo exporter writes it")
def _(g):
    x = x_input(g)
    ap, AP = param(g, "act.alpha_p", [1], mean=0.8)
    an, AN = param(g, "act.alpha_n", [1], mean=0.3)
    _xielu(g, x, ap, an)
    return lambda f: _xielu_ref(f["x"], AP[0], AN[0])


@idiom("xielu-softplus", "xielu with ap = Softplus(αp) and an = beta + Softplus(αn) of [1] "
       "weights under torch's threshold, Where(Greater(Mul(α,1),20), α, Div(Softplus(Mul(α,1)),1)): "
       "Apertus's xIELU without the ONNX optimizer")
def _(g):
    x = x_input(g)
    p, P = param(g, "act.alpha_p", [1], mean=0.8)
    n, N = param(g, "act.alpha_n", [1], mean=-0.4)

    def softplus(a):
        scaled = g.op("Mul", a, g.const(1.0))
        sp = g.op("Div", g.op("Softplus", scaled), g.const(1.0))
        return g.op("Where", g.op("Greater", scaled, g.const(20.0)), a, sp)
    _xielu(g, x, softplus(p), g.op("Add", g.const(0.5), softplus(n)))
    return lambda f: _xielu_ref(f["x"], np.log1p(np.exp(P[0])), 0.5 + np.log1p(np.exp(N[0])))


def _batched_experts(g, xs, idx, w, gate_up, down, K, activation):
    """HF's batched experts on the rows xs [T, 16]: each row repeated K times,
    GatherND of each choice's gate_up [E, 2I, 16] and down [E, 16, I], batched
    MatMuls, (g, u) = Split, a = activation(g, u), the outputs weighed by w
    [T, K] and summed per token."""
    tokens = g.dim(xs, 0)
    rows = g.op("Reshape", g.op("Expand", g.unsqueeze(xs, 1), g.shape_of(tokens, K, HIDDEN)),
                g.ints(-1, HIDDEN))
    pick = g.unsqueeze(g.op("Reshape", idx, g.ints(-1)), -1)

    def expert(weight, vec):
        prod = g.op("MatMul", g.op("GatherND", weight, pick), g.unsqueeze(vec, -1))
        return g.op("Squeeze", prod, g.ints(-1))
    gate, up = g.op("Split", expert(gate_up, rows), axis=1, outputs=2)
    o = g.op("Mul", expert(down, activation(gate, up)),
             g.unsqueeze(g.op("Reshape", w, g.ints(-1)), -1))
    return g.op("ReduceSum", g.op("Reshape", o, g.ints(-1, K, HIDDEN)), g.ints(1), keepdims=0)


def _moe(g, renormalize, topk_of_logits=False, selection_bias=False, grouped=False):
    """x [B,S,16] through 4 SwiGLU experts (I = 8), 2 per token, as HF's
    batched experts export: routing Gemm/Softmax/TopK, rows repeated per
    choice, GatherND of each choice's expert matrices, batched MatMuls.
    topk_of_logits: TopK of the logits, then Softmax of the chosen ones
    (Granite-MoE), the renormalized weights again. selection_bias: TopK of
    the probabilities plus a bias [4], the weights gathered from the
    probabilities and renormalized over a Clip of their sum (ERNIE 4.5).
    grouped: sigmoid scores plus the bias choose within the better of 2
    groups of 2 experts (by the sums of their two best biased scores: a
    Where over the ScatterElements mask of a TopK of group sums), the
    chosen scores renormalized over the sum plus 1e-20 and scaled by 2.5
    (DeepSeek V3, GLM-4.5)."""
    E, I, K = 4, 8, 2
    x = x_input(g)
    flat = g.op("Reshape", x, g.ints(-1, HIDDEN))
    router, R = param(g, "moe.router", [E, HIDDEN])
    gate_up, GU = param(g, "moe.gate_up", [E, 2 * I, HIDDEN], std=0.25)
    down, DN = param(g, "moe.down", [E, HIDDEN, I], std=0.35)
    logits = g.op("Gemm", flat, router, transB=1)
    BIAS = np.array([0.3, -0.2, 0.1, 0.0])
    if grouped:
        probs = g.op("Sigmoid", logits)
        bias = g.tensor("moe.selection_bias", BIAS.astype(np.float32))
        c = g.op("Add", probs, bias)
        best2, _ = g.op("TopK", g.op("Reshape", c, g.ints(-1, 2, 2)), g.ints(2), axis=-1,
                        outputs=2)
        _, gidx = g.op("TopK", g.op("ReduceSum", best2, g.ints(-1), keepdims=0), g.ints(1),
                       axis=-1, outputs=2)
        zeros = g.op("Expand", g.const(0.0), g.op("Shape", g.op("ReduceSum", best2, g.ints(-1),
                                                                 keepdims=0)))
        ones = g.op("Expand", g.const(1.0), g.op("Shape", gidx))
        mask = g.op("ScatterElements", zeros, gidx, ones, axis=1)
        mask = g.op("Reshape", g.op("Expand", g.unsqueeze(mask, -1), g.ints(1, 1, 2)),
                    g.ints(-1, E))
        keep = g.op("Not", g.op("Cast", mask, to=TensorProto.BOOL))
        masked = g.op("Where", keep, g.const(-np.inf), c)
        _, idx = g.op("TopK", masked, g.ints(K), axis=-1, outputs=2)
        values = g.op("GatherElements", probs, idx, axis=-1)
        total = g.op("Add", g.op("ReduceSum", values, g.ints(-1), keepdims=1), g.const(1e-20))
        w = g.op("Mul", g.op("Div", values, total), g.const(2.5))
    elif selection_bias:
        probs = g.op("Softmax", logits, axis=-1)
        bias = g.tensor("moe.selection_bias", BIAS.astype(np.float32))
        _, idx = g.op("TopK", g.op("Add", probs, bias), g.ints(K), axis=-1, outputs=2)
        values = g.op("GatherElements", probs, idx, axis=-1)
        w = g.op("Div", values, g.op("Clip", g.op("ReduceSum", values, g.ints(-1), keepdims=1),
                                       g.const(1e-12)))
    elif topk_of_logits:
        values, idx = g.op("TopK", logits, g.ints(K), axis=-1, outputs=2)
        w = g.op("Softmax", values, axis=-1)
    else:
        values, idx = g.op("TopK", g.op("Softmax", logits, axis=-1), g.ints(K), axis=-1,
                           outputs=2)
        w = values
    if renormalize and not topk_of_logits and not selection_bias and not grouped:
        w = g.op("Div", values, g.op("ReduceSum", values, g.ints(-1), keepdims=1))
    y = _batched_experts(g, flat, idx, w, gate_up, down, K,
                         lambda gate, up: g.op("Mul", g.op("Mul", gate, g.op("Sigmoid", gate)),
                                               up))
    y_output(g, g.op("Reshape", y, g.op("Shape", x)), HIDDEN)

    def ref(f):
        xs = f["x"].reshape(-1, HIDDEN)
        logits = xs @ R.T
        if grouped:
            p = 1 / (1 + np.exp(-logits))
        else:
            p = np.exp(logits - logits.max(-1, keepdims=True))
            p /= p.sum(-1, keepdims=True)
        out = np.zeros_like(xs)
        for t in range(xs.shape[0]):
            score = p[t] + (BIAS if selection_bias or grouped else 0)
            if grouped:  # groups of 2: each group's sum is its two scores
                best = int(np.argmax(score.reshape(2, 2).sum(-1)))
                score = np.where(np.arange(E) // 2 == best, score, -np.inf)
            chosen = np.argsort(-score, kind="stable")[:K]
            wt = p[t, chosen] / (p[t, chosen].sum() if renormalize else 1)
            wt = wt * (2.5 if grouped else 1)
            for e, we in zip(chosen, wt):
                h = GU[e] @ xs[t]
                act = h[:I] / (1 + np.exp(-h[:I])) * h[I:]
                out[t] += we * (DN[e] @ act)
        return out.reshape(f["x"].shape)
    return ref


@idiom("moe-renormalized", "a mixture of 4 SwiGLU experts, top 2 of the router's softmax, "
       "renormalized (Mixtral, Qwen3-MoE): Gemm, Softmax, TopK, Div(v, ReduceSum(v)), "
       "Reshape(Expand(Unsqueeze(x))), GatherND of the expert weights, MatMul, Split, ReduceSum")
def _(g):
    return _moe(g, True)


@idiom("moe-topk-logits", "moe-renormalized with the top 2 of the logits, then Softmax of "
       "those 2 (Granite-MoE): the same weights")
def _(g):
    return _moe(g, True, topk_of_logits=True)


@idiom("moe-selection-bias", "moe-renormalized with the experts chosen by the probabilities "
       "plus a bias [4] (Add before TopK), weighed by GatherElements of the probabilities, "
       "over Clip(ReduceSum, 1e-12) (ERNIE 4.5)")
def _(g):
    return _moe(g, True, selection_bias=True)


@idiom("moe-grouped-sigmoid", "moe-renormalized with sigmoid scores plus a bias [4] choosing "
       "within the better of 2 groups of 2 (Where(Not(Cast(ScatterElements mask)), -inf, .)), "
       "the weights gathered, renormalized over ReduceSum + 1e-20 and scaled by 2.5 "
       "(DeepSeek V3, GLM-4.5)")
def _(g):
    return _moe(g, True, grouped=True)


@idiom("moe-raw-weights", "moe-renormalized without the Div: the top 2 probabilities as they "
       "are (OLMoE)")
def _(g):
    return _moe(g, False)


@idiom("moe-gpt-oss", "gpt-oss's experts: Gemm router with a bias, top 2 of the logits, "
       "Softmax of those; each choice's row vector times GatherND of [4,16,16] (x · W) plus "
       "GatherND of its bias, g and u the even and odd columns (Slice steps 2), Clip(g, max 0.5), "
       "Clip(u, -0.5, 0.5), g · Sigmoid(g · 1.702) · (u + 1), times GatherND of [4,8,16] plus "
       "its bias")
def _(g):
    E, I, K, L = 4, 8, 2, 0.5
    x = x_input(g)
    flat = g.op("Reshape", x, g.ints(-1, HIDDEN))
    router, R = param(g, "moe.router", [E, HIDDEN])
    rbias, RB = param(g, "moe.router_bias", [E])
    gate_up, GU = param(g, "moe.gate_up", [E, HIDDEN, 2 * I], std=0.25)
    gbias, GB = param(g, "moe.gate_up_bias", [E, 2 * I])
    down, DN = param(g, "moe.down", [E, I, HIDDEN], std=0.35)
    dbias, DB = param(g, "moe.down_bias", [E, HIDDEN])
    values, idx = g.op("TopK", g.op("Gemm", flat, router, rbias, transB=1), g.ints(K), axis=-1,
                       outputs=2)
    w = g.op("Softmax", values, axis=1)
    tokens = g.dim(flat, 0)
    rows = g.op("Reshape", g.op("Expand", g.unsqueeze(flat, 1), g.shape_of(tokens, K, HIDDEN)),
                g.ints(-1, HIDDEN))
    pick = g.unsqueeze(g.op("Reshape", idx, g.ints(-1)), -1)

    def expert(weight, bias, vec):
        prod = g.op("MatMul", g.unsqueeze(vec, 1), g.op("GatherND", weight, pick))
        return g.op("Add", g.op("Squeeze", prod, g.ints(1)), g.op("GatherND", bias, pick))
    h = expert(gate_up, gbias, rows)
    gate = g.op("Clip", g.op("Slice", h, g.ints(0), g.ints(2 * I), g.ints(1), g.ints(2)), "",
                g.const(L))
    up = g.op("Clip", g.op("Slice", h, g.ints(1), g.ints(2 * I), g.ints(1), g.ints(2)),
              g.const(-L), g.const(L))
    glu = g.op("Mul", gate, g.op("Sigmoid", g.op("Mul", gate, g.const(1.702))))
    a = g.op("Mul", g.op("Add", up, g.const(1.0)), glu)
    o = g.op("Mul", expert(down, dbias, a), g.unsqueeze(g.op("Reshape", w, g.ints(-1)), -1))
    y = g.op("ReduceSum", g.op("Reshape", o, g.ints(-1, K, HIDDEN)), g.ints(1), keepdims=0)
    y_output(g, g.op("Reshape", y, g.op("Shape", x)), HIDDEN)

    def ref(f):
        xs = f["x"].reshape(-1, HIDDEN)
        logits = xs @ R.T + RB
        out = np.zeros_like(xs)
        for t in range(xs.shape[0]):
            chosen = np.argsort(-logits[t], kind="stable")[:K]
            wt = np.exp(logits[t, chosen] - logits[t, chosen].max())
            for e, we in zip(chosen, wt / wt.sum()):
                h = xs[t] @ GU[e] + GB[e]
                gt, ut = np.minimum(h[0::2], L), np.clip(h[1::2], -L, L)
                act = gt / (1 + np.exp(-1.702 * gt)) * (ut + 1)
                out[t] += we * (act @ DN[e] + DB[e])
        return out.reshape(f["x"].shape)
    return ref


def _moe_gemma4(g, gelu_tanh):
    """Gemma 4's experts with their GELU written by gelu_tanh(g, gate)."""
    E, I, K = 4, 8, 2
    x = x_input(g)
    flat = g.op("Reshape", x, g.ints(-1, HIDDEN))
    rscale, RS = param(g, "moe.router_scale", [HIDDEN], std=0.2, mean=1.0)
    escale, XS = param(g, "moe.pre_norm", [HIDDEN], std=0.2, mean=1.0)
    router, R = param(g, "moe.router", [E, HIDDEN])
    per_expert, PE = param(g, "moe.per_expert_scale", [E], std=0.3, mean=1.0)
    gate_up, GU = param(g, "moe.gate_up", [E, 2 * I, HIDDEN], std=0.25)
    down, DN = param(g, "moe.down", [E, HIDDEN, I], std=0.35)
    routed = g.op("Mul", g.op("Mul", flat, rscale), g.const(HIDDEN ** -0.5))
    values, idx = g.op("TopK", g.op("Softmax", g.op("Gemm", routed, router, transB=1), axis=-1),
                       g.ints(K), axis=-1, outputs=2)
    w = g.op("Div", values, g.op("ReduceSum", values, g.ints(-1), keepdims=1))
    w = g.op("Mul", w, g.op("GatherND", per_expert, g.unsqueeze(idx, -1)))
    y = _batched_experts(g, g.op("Mul", flat, escale), idx, w, gate_up, down, K,
                         lambda gate, up: g.op("Mul", gelu_tanh(g, gate), up))
    y_output(g, g.op("Reshape", y, g.op("Shape", x)), HIDDEN)

    def ref(f):
        xs = f["x"].reshape(-1, HIDDEN)
        logits = (xs * RS * HIDDEN ** -0.5) @ R.T
        p = np.exp(logits - logits.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        out = np.zeros_like(xs)
        for t in range(xs.shape[0]):
            chosen = np.argsort(-p[t], kind="stable")[:K]
            wt = p[t, chosen] / p[t, chosen].sum() * PE[chosen]
            for e, we in zip(chosen, wt):
                h = GU[e] @ (xs[t] * XS)
                gt = h[:I]
                gelu = 0.5 * gt * (1 + np.tanh(math.sqrt(2 / math.pi) * (gt + 0.044715 * gt ** 3)))
                out[t] += we * (DN[e] @ (gelu * h[I:]))
        return out.reshape(f["x"].shape)
    return ref


@idiom("moe-gemma4", "Gemma 4's experts: the router on its own input (x times a scale vector "
       "and 1/4), top 2 of its softmax renormalized, times GatherND of per-expert scales [4]; "
       "the experts on x times another vector, Gelu(g, tanh) · u", opset=20)
def _(g):
    return _moe_gemma4(g, lambda g, gate: g.op("Gelu", gate, approximate="tanh"))


def _gelu_tanh_opset18(g, x):
    """The tanh GELU as torch's exporter writes it below opset 20:
    Mul(0.5, Mul(x, Add(Tanh(Mul(√(2/π), Add(x, Mul(0.044715, Pow(x, 3))))), 1)))."""
    cube = g.op("Pow", x, g.const(3.0))
    inner = g.op("Mul", g.const(math.sqrt(2 / math.pi)),
                 g.op("Add", x, g.op("Mul", g.const(0.044715), cube)))
    return g.op("Mul", g.const(0.5), g.op("Mul", x, g.op("Add", g.op("Tanh", inner), g.const(1.0))))


@idiom("moe-gemma4-decomposed-gelu", "as moe-gemma4 at opset 18, the experts' GELU decomposed: "
       "Mul(0.5, Mul(g, Add(Tanh(Mul(0.7978846, Add(g, Mul(0.044715, Pow(g, 3))))), 1))) · u",
       opset=18)
def _(g):
    return _moe_gemma4(g, _gelu_tanh_opset18)


@idiom("moe-llama4", "Llama 4's experts: Gemm router, top 2 of the logits scattered into a "
       "-inf [T,4] and Sigmoid (0 for the experts not chosen); x tiled 4 times, times the "
       "transposed weights as a column, viewed [4,T,16]; MatMul with [4,16,16], Split, "
       "silu(g) · u, MatMul with [4,8,16], ReduceSum over the experts")
def _(g):
    E, I, K = 4, 8, 2
    x = x_input(g)
    flat = g.op("Reshape", x, g.ints(-1, HIDDEN))
    router, R = param(g, "moe.router", [E, HIDDEN])
    gate_up, GU = param(g, "moe.gate_up", [E, HIDDEN, 2 * I], std=0.25)
    down, DN = param(g, "moe.down", [E, I, HIDDEN], std=0.35)
    logits = g.op("Gemm", flat, router, transB=1)
    values, idx = g.op("TopK", logits, g.ints(K), axis=-1, outputs=2)
    hidden = g.op("Expand", g.const(-np.inf), g.op("Shape", logits))
    w = g.op("Sigmoid", g.op("ScatterElements", hidden, idx, values, axis=1))
    rows = g.op("Tile", flat, g.ints(E, 1))
    scaled = g.op("Mul", rows, g.op("Reshape", g.op("Transpose", w, perm=[1, 0]), g.ints(-1, 1)))
    h = g.op("MatMul", g.op("Reshape", scaled, g.ints(E, -1, HIDDEN)), gate_up)
    gate, up = g.op("Split", h, g.ints(I, I), axis=2, outputs=2)
    a = g.op("Mul", up, g.op("Mul", gate, g.op("Sigmoid", gate)))
    y = g.op("ReduceSum", g.op("MatMul", a, down), g.ints(0), keepdims=0)
    y_output(g, g.op("Reshape", y, g.op("Shape", x)), HIDDEN)

    def ref(f):
        xs = f["x"].reshape(-1, HIDDEN)
        logits = xs @ R.T
        out = np.zeros_like(xs)
        for t in range(xs.shape[0]):
            for e in np.argsort(-logits[t], kind="stable")[:K]:
                h = (xs[t] / (1 + np.exp(-logits[t, e]))) @ GU[e]
                gt, ut = h[:I], h[I:]
                out[t] += (gt / (1 + np.exp(-gt)) * ut) @ DN[e]
        return out.reshape(f["x"].shape)
    return ref


def _causal_conv(g, pads, pad_op=False, bias=False, unoptimized=False):
    """x [B,S,16] transposed to [B,16,S], a depthwise Conv with 3 taps per
    channel and `pads` (with `pad_op`, of a Pad op's K − 1 zeros before the
    positions; with `bias`, a bias per channel), sliced back to S positions,
    transposed back (LFM2's short convolution; Mamba's has the bias)."""
    K = 3
    x = x_input(g)
    w, W = param(g, "conv.weight", [HIDDEN, 1, K], std=0.5)
    Bias = np.zeros(HIDDEN)
    conv_inputs = [w]
    if bias:
        b, Bias = param(g, "conv.bias", [HIDDEN], std=0.5)
        conv_inputs.append(b)
    if unoptimized:  # the weight squeezed and unsqueezed back, a bias of zeros
        axis = g.ints(1)
        conv_inputs = [g.op("Unsqueeze", g.op("Squeeze", w, axis), axis),
                       g.const(np.zeros(HIDDEN, np.float32))]
    xt = g.op("Transpose", x, perm=[0, 2, 1])
    if pad_op:
        xt = g.op("Pad", xt, g.ints(0, 0, K - 1, 0, 0, 0))
    conv = g.op("Conv", xt, *conv_inputs, group=HIDDEN, pads=pads, kernel_shape=[K])
    y = g.op("Slice", conv, g.ints(0), g.op("Reshape", g.dim(x, 1), g.ints(1)), g.ints(2))
    y_output(g, g.op("Transpose", y, perm=[0, 2, 1]), HIDDEN)

    def ref(f):
        xs = np.transpose(f["x"], (0, 2, 1))
        before = K - 1 if pad_op else pads[0]
        padded = np.concatenate([np.zeros(xs.shape[:2] + (before,)), xs], axis=-1)
        out = sum(W[None, :, 0, j, None] * padded[:, :, j:j + xs.shape[2]] for j in range(K))
        return np.transpose(out + Bias[None, :, None], (0, 2, 1))
    return ref


@idiom("causal-conv", "Slice(Conv(Transpose(x), w [16,1,3], group 16, pads [2, 2]), [0, S)) "
       "transposed back: a depthwise causal convolution (LFM2)")
def _(g):
    return _causal_conv(g, [2, 2])


@idiom("causal-conv-pads-before", "causal-conv with pads [2, 0]: causal without the Slice")
def _(g):
    return _causal_conv(g, [2, 0])


@idiom("causal-conv-pad-op", "causal-conv as an unpadded Conv of Pad(x, 2 zeros before the "
       "positions)")
def _(g):
    return _causal_conv(g, [0, 0], pad_op=True)


@idiom("causal-conv-bias", "causal-conv with a bias [16] on the Conv (Mamba's convolution)")
def _(g):
    return _causal_conv(g, [2, 2], bias=True)


def _decay_linear(g):
    """q, k [B,S,1,4] and v [B,S,4,4] projections of x scanned by
    ai.megatrain.DecayLinearRule with a slope buffer [4, 1, 1]."""
    x = x_input(g)
    heads = lambda t, h, d: g.op("Reshape", t, g.ints(0, 0, h, d))  # noqa: E731
    (q, Wq), (k, Wk) = matmul(g, x, HIDDEN, 4, "q.weight"), matmul(g, x, HIDDEN, 4, "k.weight")
    v, Wv = matmul(g, x, HIDDEN, 16, "v.weight")
    rates = np.array([0.5, 0.25, 0.125, 0.0625], np.float32).reshape(4, 1, 1)
    o = g.op("DecayLinearRule", heads(q, 1, 4), heads(k, 1, 4), heads(v, 4, 4),
             g.tensor("slope_rate", rates), domain="ai.megatrain")
    y_output(g, g.op("Reshape", o, g.ints(0, 0, 16)), HIDDEN)

    def ref(f):
        xs = f["x"]
        bs, sl = xs.shape[:2]
        vs = (xs @ Wv).reshape(bs, sl, 4, 4)
        qs, ks = (xs @ Wq).reshape(bs, sl, 4), (xs @ Wk).reshape(bs, sl, 4)
        o = np.zeros_like(vs)
        for bi in range(bs):
            for h in range(4):
                m = np.zeros((4, 4))
                for t in range(sl):
                    m = np.exp(-rates.ravel()[h]) * m + np.outer(ks[bi, t], vs[bi, t, h])
                    o[bi, t, h] = m.T @ qs[bi, t]
        return o.reshape(bs, sl, 16)
    return ref


@idiom("decay-linear", "ai.megatrain.DecayLinearRule(q, k, v, slope_rate [4,1,1]): a constant "
       "decay per value head (MiniMax's lightning attention), the slopes a BUFFER in torch's "
       "graph signature", domains={"ai.megatrain": 1})
def _(g):
    g.torch_signature = _torch_signature(slope_rate="BUFFER")
    return _decay_linear(g)


@idiom("decay-linear-unsigned", "decay-linear without torch's graph signature: nothing says "
       "the slopes are a buffer", domains={"ai.megatrain": 1})
def _(g):
    return _decay_linear(g)


@idiom("causal-conv-unoptimized", "causal-conv of Unsqueeze(Squeeze(w, 1), 1) with a bias of "
       "zeros, as an export without the ONNX optimizer writes Conv1d")
def _(g):
    return _causal_conv(g, [2, 2], unoptimized=True)


@idiom("split-to-sequence", "Concat(SequenceAt(s, 1), SequenceAt(s, -2)) of s = "
       "SplitToSequence(x, [4, 12], axis -1), plus the same pieces of unbind: "
       "SplitToSequence(Reshape(x, [0, 0, 2, 8]), axis 2, keepdims 0), as exports without the "
       "ONNX optimizer write torch.split and unbind")
def _(g):
    x = x_input(g)
    s = g.op("SplitToSequence", x, g.ints(4, 12), axis=-1)
    swapped = g.op("Concat", g.op("SequenceAt", s, g.const(1, np.int64)),
                   g.op("SequenceAt", s, g.const(-2, np.int64)), axis=-1)
    u = g.op("SplitToSequence", g.op("Reshape", x, g.ints(0, 0, 2, 8)), axis=2, keepdims=0)
    halves = g.op("Concat", g.op("SequenceAt", u, g.const(1, np.int64)),
                  g.op("SequenceAt", u, g.const(0, np.int64)), axis=-1)
    y_output(g, g.op("Add", swapped, halves), HIDDEN)

    def ref(f):
        x = f["x"]
        return (np.concatenate([x[..., 4:], x[..., :4]], -1)
                + np.concatenate([x[..., 8:], x[..., :8]], -1))
    return ref


@idiom("bad-sequence-of-activations", "SequenceLength(SplitToSequence(x, [4, 12], axis -1)) "
       "added to x: a sequence of activations read other than by SequenceAt")
def _(g):
    x = x_input(g)
    s = g.op("SplitToSequence", x, g.ints(4, 12), axis=-1)
    n = g.op("Cast", g.op("SequenceLength", s), to=FLOAT)
    y_output(g, g.op("Add", x, n), HIDDEN)
    return None


@idiom("identity-arithmetic", "Add(Sub(Div(Mul(x, CastLike(1.0, x)), Constant ones [16]), 0.0), "
       "x): products by ones and sums of zeros that an export without the ONNX optimizer keeps")
def _(g):
    x = x_input(g)
    one = g.op("CastLike", g.const(1.0), x)
    t = g.op("Div", g.op("Mul", x, one), g.const(np.ones(HIDDEN, np.float32)))
    y_output(g, g.op("Add", g.op("Sub", t, g.const(0.0)), x), HIDDEN)
    return lambda f: 2 * f["x"]


@idiom("identity-views", "Add(MatMul(x, Transpose(w, [0, 1])), Concat(Max(Expand(Transpose(x, "
       "[0, 1, 2]), Shape(x))))): views that change nothing, as an export without the ONNX "
       "optimizer writes them around a router's indices and the experts' weights")
def _(g):
    x = x_input(g)
    w, W = param(g, "w", [HIDDEN, HIDDEN])
    proj = g.op("MatMul", x, g.op("Transpose", w, perm=[0, 1]))
    same = g.op("Expand", g.op("Transpose", x, perm=[0, 1, 2]), g.op("Shape", x))
    y_output(g, g.op("Add", proj, g.op("Concat", g.op("Max", same), axis=-1)), HIDDEN)
    return lambda f: f["x"] @ W + f["x"]


@idiom("weights-of-ones", "Add(Mul(x, w), b), w [16] a weight of ones and b [16] of zeros, "
       "as at initialization: trained, not dropped for the identities they equal")
def _(g):
    x = x_input(g)
    w, W = param(g, "w", [HIDDEN], std=0.0, mean=1.0)
    b, B = param(g, "b", [HIDDEN], std=0.0)
    y_output(g, g.op("Add", g.op("Mul", x, w), b), HIDDEN)
    return lambda f: f["x"] * W + B


@idiom("clip-activation", "Clip(x, -0.5, 0.25) and Clip(x, min 0.1) of an activation, "
       "summed (Nemotron-H's floor on Mamba's time step)")
def _(g):
    x = x_input(g)
    both = g.op("Clip", x, g.const(-0.5), g.const(0.25))
    floor = g.op("Clip", x, g.const(0.1))
    y_output(g, g.op("Add", both, floor), HIDDEN)

    def ref(f):
        return np.clip(f["x"], -0.5, 0.25) + np.maximum(f["x"], 0.1)
    return ref


def _l2norm(g, t):
    """t · Reciprocal(Sqrt(ReduceSum(t·t, last axis) + eps)), transformers' l2norm."""
    ss = g.op("ReduceSum", g.op("Mul", t, t), g.ints(-1), keepdims=1)
    return g.op("Mul", t, g.op("Reciprocal", g.op("Sqrt", g.op("Add", ss, g.const(EPS)))))


def _gated_delta_ref(q, k, v, g, beta):
    """The rule literally: per batch and value head, M [Dk, Dv] from 0; g
    [B,S,Hv], or [B,S,Hv,Dk] decaying each row of M by its own."""
    group = v.shape[2] // q.shape[2]
    o = np.zeros_like(v)
    for b in range(v.shape[0]):
        for h in range(v.shape[2]):
            m = np.zeros((q.shape[3], v.shape[3]))
            for t in range(v.shape[1]):
                kt, qt = k[b, t, h // group], q[b, t, h // group]
                decay = np.exp(g[b, t, h])
                m = (decay[:, None] if g.ndim == 4 else decay) * m
                m = m + np.outer(kt, beta[b, t, h] * (v[b, t, h] - m.T @ kt))
                o[b, t, h] = m.T @ qt
    return o


@idiom("gated-delta", "ai.megatrain.GatedDeltaRule(q, k, v, g, beta): q and k [B,S,2,4] "
       "L2-normed by ReduceSum (q also scaled by 1/2), v [B,S,4,4], g = Neg(Softplus(.)), "
       "beta = Sigmoid(.), from projections of x (gated DeltaNet)",
       domains={"ai.megatrain": 1})
def _(g):
    x = x_input(g)
    heads = lambda t, h, d: g.op("Reshape", t, g.ints(0, 0, h, d))  # noqa: E731
    (q, Wq), (k, Wk) = matmul(g, x, HIDDEN, 8, "q.weight"), matmul(g, x, HIDDEN, 8, "k.weight")
    (v, Wv), (a, Wa) = matmul(g, x, HIDDEN, 16, "v.weight"), matmul(g, x, HIDDEN, 4, "a.weight")
    b, Wb = matmul(g, x, HIDDEN, 4, "b.weight")
    q = g.op("Mul", _l2norm(g, heads(q, 2, 4)), g.const(0.5))
    k = _l2norm(g, heads(k, 2, 4))
    o = g.op("GatedDeltaRule", q, k, heads(v, 4, 4), g.op("Neg", g.op("Softplus", a)),
             g.op("Sigmoid", b), domain="ai.megatrain")
    y_output(g, g.op("Reshape", o, g.ints(0, 0, 16)), HIDDEN)

    def ref(f):
        xs = f["x"]
        bs, sl = xs.shape[:2]

        def l2(t):
            return t / np.sqrt((t * t).sum(-1, keepdims=True) + EPS)
        qs = 0.5 * l2((xs @ Wq).reshape(bs, sl, 2, 4))
        ks = l2((xs @ Wk).reshape(bs, sl, 2, 4))
        gs = -np.log1p(np.exp(xs @ Wa))
        betas = 1 / (1 + np.exp(-(xs @ Wb)))
        return _gated_delta_ref(qs, ks, (xs @ Wv).reshape(bs, sl, 4, 4), gs, betas).reshape(bs, sl, 16)
    return ref


@idiom("gated-delta-key-decay", "GatedDeltaRule with g [B,S,2,4], a decay per key channel "
       "(Kimi Delta Attention): q and k [B,S,2,4] L2-normed, v [B,S,2,4]",
       domains={"ai.megatrain": 1})
def _(g):
    x = x_input(g)
    heads = lambda t, h, d: g.op("Reshape", t, g.ints(0, 0, h, d))  # noqa: E731
    (q, Wq), (k, Wk) = matmul(g, x, HIDDEN, 8, "q.weight"), matmul(g, x, HIDDEN, 8, "k.weight")
    (v, Wv), (a, Wa) = matmul(g, x, HIDDEN, 8, "v.weight"), matmul(g, x, HIDDEN, 8, "a.weight")
    b, Wb = matmul(g, x, HIDDEN, 2, "b.weight")
    o = g.op("GatedDeltaRule", _l2norm(g, heads(q, 2, 4)), _l2norm(g, heads(k, 2, 4)),
             heads(v, 2, 4), g.op("Neg", g.op("Softplus", heads(a, 2, 4))), g.op("Sigmoid", b),
             domain="ai.megatrain")
    y_output(g, g.op("Reshape", o, g.ints(0, 0, 8)), 8)

    def ref(f):
        xs = f["x"]
        bs, sl = xs.shape[:2]

        def l2(t):
            return t / np.sqrt((t * t).sum(-1, keepdims=True) + EPS)
        qs, ks = (l2((xs @ W).reshape(bs, sl, 2, 4)) for W in (Wq, Wk))
        gs = -np.log1p(np.exp((xs @ Wa).reshape(bs, sl, 2, 4)))
        betas = 1 / (1 + np.exp(-(xs @ Wb)))
        return _gated_delta_ref(qs, ks, (xs @ Wv).reshape(bs, sl, 2, 4), gs, betas).reshape(bs, sl, 8)
    return ref


@idiom("gated-linear", "ai.megatrain.GatedLinearRule(C, B, x, dt·A, dt): C and B [B,S,1,4], "
       "x [B,S,4,4], dt = Softplus(. + dt_bias) [B,S,4], A a weight [4], plus D·x (Mamba-2's "
       "scan)", domains={"ai.megatrain": 1})
def _(g):
    x = x_input(g)
    heads = lambda t, h, d: g.op("Reshape", t, g.ints(0, 0, h, d))  # noqa: E731
    (c, Wc), (b, Wb) = matmul(g, x, HIDDEN, 4, "c.weight"), matmul(g, x, HIDDEN, 4, "b.weight")
    (v, Wv), (d, Wd) = matmul(g, x, HIDDEN, 16, "x.weight"), matmul(g, x, HIDDEN, 4, "dt.weight")
    dt_bias, DtBias = param(g, "dt_bias", [4], std=0.5)
    a, A = param(g, "A", [4], std=0.5, mean=-1.0)
    skip, D = param(g, "D", [4, 1], std=0.5, mean=1.0)
    dt = g.op("Softplus", g.op("Add", d, dt_bias))
    xs4 = heads(v, 4, 4)
    o = g.op("GatedLinearRule", heads(c, 1, 4), heads(b, 1, 4), xs4, g.op("Mul", dt, a), dt,
             domain="ai.megatrain")
    y_output(g, g.op("Reshape", g.op("Add", o, g.op("Mul", xs4, skip)), g.ints(0, 0, 16)), HIDDEN)

    def ref(f):
        xs = f["x"]
        bs, sl = xs.shape[:2]
        dts = np.log1p(np.exp(xs @ Wd + DtBias))
        vs = (xs @ Wv).reshape(bs, sl, 4, 4)
        qs, ks = (xs @ Wc).reshape(bs, sl, 1, 4), (xs @ Wb).reshape(bs, sl, 1, 4)
        o = np.zeros_like(vs)
        for bi in range(bs):
            for h in range(4):
                m = np.zeros((4, 4))
                for t in range(sl):
                    m = np.exp(dts[bi, t, h] * A[h]) * m + np.outer(ks[bi, t, 0], dts[bi, t, h] * vs[bi, t, h])
                    o[bi, t, h] = m.T @ qs[bi, t, 0]
        return (o + vs * D).reshape(bs, sl, 16)
    return ref


@idiom("selective-scan", "Mamba-1's scan (tools/mamba_node.py, unoptimized): dt = "
       "Softplus(MatMul(dt_proj.weight [8,2], Transpose(x·Wr)) + bias [8,1]) over 8 channels "
       "[B,8,S], transposed back; GatedLinearRule(Unsqueeze(C), Unsqueeze(B), Unsqueeze(v), "
       "Unsqueeze(dt)·Neg(Exp(A_log [8,4])), dt): a value head of one column per channel, the "
       "decay per key channel; Squeeze, plus v·D, out_proj", domains={"ai.megatrain": 1})
def _(g):
    x = x_input(g)
    (v, Wv), (r, Wr) = matmul(g, x, HIDDEN, 8, "x.weight"), matmul(g, x, HIDDEN, 2, "dt_rank.weight")
    (c, Wc), (b, Wb) = matmul(g, x, HIDDEN, 4, "c.weight"), matmul(g, x, HIDDEN, 4, "b.weight")
    dt_w, DtW = param(g, "dt_proj.weight", [8, 2], std=0.5)
    dt_b, DtB = param(g, "dt_proj.bias", [8, 1], std=0.5)
    a_log, ALog = param(g, "A_log", [8, 4], std=0.3, mean=0.5)
    skip, D = param(g, "D", [8], std=0.5, mean=1.0)
    dt = g.op("Softplus", g.op("Add", g.op("MatMul", dt_w, g.op("Transpose", r, perm=[0, 2, 1])),
                               dt_b))
    dt = g.op("Transpose", dt, perm=[0, 2, 1])
    a = g.op("Neg", g.op("Exp", a_log))
    o = g.op("GatedLinearRule", g.unsqueeze(c, 2), g.unsqueeze(b, 2), g.unsqueeze(v, 3),
             g.op("Mul", g.unsqueeze(dt, 3), a), dt, domain="ai.megatrain")
    o = g.op("Add", g.op("Squeeze", o, g.ints(3)), g.op("Mul", v, skip))
    y, Wo = matmul(g, o, 8, HIDDEN, "out.weight")
    y_output(g, y, HIDDEN)

    def ref(f):
        xs = f["x"]
        vs, qs, ks = xs @ Wv, xs @ Wc, xs @ Wb
        dts = np.log1p(np.exp(np.swapaxes(DtW @ np.swapaxes(xs @ Wr, 1, 2) + DtB, 1, 2)))
        A = -np.exp(ALog)
        o = np.zeros_like(vs)
        for bi in range(xs.shape[0]):
            h = np.zeros((8, 4))  # per channel, a state of 4
            for t in range(xs.shape[1]):
                h = np.exp(dts[bi, t][:, None] * A) * h + dts[bi, t][:, None] * vs[bi, t][:, None] * ks[bi, t]
                o[bi, t] = h @ qs[bi, t]
        return (o + vs * D) @ Wo
    return ref


@idiom("bad-gated-delta-heads", "GatedDeltaRule with 3 value heads on 2 key heads (no grouping)",
       domains={"ai.megatrain": 1})
def _(g):
    x = x_input(g)
    heads = lambda t, h, d: g.op("Reshape", t, g.ints(0, 0, h, d))  # noqa: E731
    q, k = heads(matmul(g, x, HIDDEN, 8, "q.weight")[0], 2, 4), heads(matmul(g, x, HIDDEN, 8, "k.weight")[0], 2, 4)
    v = heads(matmul(g, x, HIDDEN, 12, "v.weight")[0], 3, 4)
    a, b = matmul(g, x, HIDDEN, 3, "a.weight")[0], matmul(g, x, HIDDEN, 3, "b.weight")[0]
    o = g.op("GatedDeltaRule", q, k, v, a, b, domain="ai.megatrain")
    y_output(g, g.op("Reshape", o, g.ints(0, 0, 12)), 12)


@idiom("pad-token-shift", "Add(x, Pad(x, pads [0,1,0, 0,-1,0])): each position also gets the "
       "one before it, zeros at the first (a token shift: padded before, cropped after)")
def _(g):
    x = x_input(g)
    y_output(g, g.op("Add", x, g.op("Pad", x, g.ints(0, 1, 0, 0, -1, 0))), HIDDEN)

    def ref(f):
        xs = f["x"]
        return xs + np.concatenate([np.zeros_like(xs[:, :1]), xs[:, :-1]], axis=1)
    return ref


@idiom("pad-computed-table", "Mul(x, Pad(t [1,1,12], pads [0,0,2, 0,0,2], 0.5)): a table padded "
       "at compile time, a frozen table")
def _(g):
    x = x_input(g)
    t = np.linspace(0.5, 1.5, 12, dtype=np.float32).reshape(1, 1, 12)
    padded = g.op("Pad", g.tensor("t", t), g.ints(0, 0, 2, 0, 0, 2), g.const(0.5))
    y_output(g, g.op("Mul", x, padded), HIDDEN)
    return lambda f: f["x"] * np.pad(t, ((0, 0), (0, 0), (2, 2)), constant_values=0.5)


@idiom("table-from-initializers", "Mul(Mul(x, Exp(w)), Unsqueeze(d, [0, 1])), w and d [16] "
       "initializers computed on before they are applied (a Mamba export without the "
       "optimizer): computed at run time, so that both train, or tables of buffers")
def _(g):
    x = x_input(g)
    w, W = param(g, "w", [HIDDEN])
    d, D = param(g, "d", [HIDDEN])
    scaled = g.op("Mul", x, g.op("Exp", w))
    y_output(g, g.op("Mul", scaled, g.op("Unsqueeze", d, g.ints(0, 1))), HIDDEN)
    return lambda f: f["x"] * np.exp(W) * D


@idiom("scalar-parameters", "Add(Mul(x, w), Mul(x, Exp(t))), w and t [1]: one-element "
       "weights, a scale and a log-scale, which train (no literal factors)")
def _(g):
    x = x_input(g)
    w, W = param(g, "w", [1])
    t, T = param(g, "t", [1])
    y_output(g, g.op("Add", g.op("Mul", x, w), g.op("Mul", x, g.op("Exp", t))), HIDDEN)
    return lambda f: f["x"] * W + f["x"] * np.exp(T)


@idiom("table-from-unsupported", "Mul(x, Cos(w)), w [16]: a computation on a parameter that "
       "no primitive computes, refused unless w is a buffer")
def _(g):
    x = x_input(g)
    w, W = param(g, "w", [HIDDEN])
    y_output(g, g.op("Mul", x, g.op("Cos", w)), HIDDEN)
    return lambda f: f["x"] * np.cos(W)


def _torch_signature(**kinds):
    """torch's graph signature text: each name's kind (PARAMETER, BUFFER)."""
    lines = [f"p_{n}: {k} target='{n}'" + (" persistent=False" if k == "BUFFER" else "")
             for n, k in kinds.items()]
    return "\n# inputs\n" + "\n".join(lines) + "\nx: USER_INPUT\n\n# outputs\ny: USER_OUTPUT\n"


@idiom("table-from-torch-buffers", "table-from-initializers with torch's graph signature in "
       "the graph's metadata naming w a BUFFER and d a PARAMETER")
def _(g):
    g.torch_signature = _torch_signature(w="BUFFER", d="PARAMETER")
    return IDIOMS["table-from-initializers"][0](g)


@idiom("table-from-exporter-initializer", "table-from-initializers with torch's graph "
       "signature naming d a BUFFER and not naming w (the exporter's own initializer)")
def _(g):
    g.torch_signature = _torch_signature(d="BUFFER")
    return IDIOMS["table-from-initializers"][0](g)


@idiom("torch-buffer-as-weight", "Mul(x, w), w [16] a BUFFER in torch's graph signature "
       "(Falcon-H1's µP vector)")
def _(g):
    g.torch_signature = _torch_signature(w="BUFFER")
    x = x_input(g)
    w, W = param(g, "w", [HIDDEN])
    y_output(g, g.op("Mul", x, w), HIDDEN)
    return lambda f: f["x"] * W


@idiom("table-from-trained", "Add(Mul(x, w), Mul(x, Exp(w))), w [16]: w read as a weight "
       "and through a computation on it, trained by both")
def _(g):
    x = x_input(g)
    w, W = param(g, "w", [HIDDEN])
    y_output(g, g.op("Add", g.op("Mul", x, w), g.op("Mul", x, g.op("Exp", w))), HIDDEN)
    return lambda f: f["x"] * W + f["x"] * np.exp(W)


@idiom("bad-pad-edge", "Add(x, Pad(x, pads [0,1,0, 0,-1,0], mode edge)): a shift that repeats "
       "the first position")
def _(g):
    x = x_input(g)
    y_output(g, g.op("Add", x, g.op("Pad", x, g.ints(0, 1, 0, 0, -1, 0), mode="edge")), HIDDEN)
    return None


@idiom("bad-conv-centered", "causal-conv with pads [1, 1]: each position sees the next one too")
def _(g):
    _causal_conv(g, [1, 1])
    return None


@idiom("sigmoid-gate", "Add(x, Mul(Sigmoid(MatMul(x, w[16,1])), x)): a Sigmoid outside any "
       "SiLU, a gate (Qwen2-MoE's shared expert)")
def _(g):
    x = x_input(g)
    gate, W = matmul(g, x, HIDDEN, 1, "gate.weight")
    y_output(g, g.op("Add", x, g.op("Mul", g.op("Sigmoid", gate), x)), HIDDEN)
    return lambda f: f["x"] + f["x"] / (1 + np.exp(-(f["x"] @ W)))


def _softplus_gate(g, threshold, written_out=False):
    x = x_input(g)
    w, W = param(g, "gate.weight", [HIDDEN, 1], std=8.0)  # z crosses the threshold
    gate = g.op("MatMul", x, w)
    if written_out:  # Kimi Linear's Log(1 + Exp(z))
        sp = g.op("Log", g.op("Add", g.const(1.0), g.op("Exp", gate)))
    else:
        sp = g.op("Softplus", gate)
    if threshold is not None:  # torch's F.softplus: x itself past the threshold
        sp = g.op("Where", g.op("Greater", gate, g.const(threshold)), gate, sp)
    y_output(g, g.op("Add", x, g.op("Mul", sp, x)), HIDDEN)

    def ref(f):
        z = f["x"] @ W
        sp = np.log1p(np.exp(z))
        return f["x"] + (sp if threshold is None else np.where(z > threshold, z, sp)) * f["x"]
    return ref


@idiom("softplus-gate", "Add(x, Mul(Softplus(MatMul(x, w[16,1])), x)): a softplus gate "
       "(Laguna's attention output)")
def _(g):
    return _softplus_gate(g, None)


@idiom("softplus-gate-threshold", "softplus-gate as torch exports F.softplus: "
       "Where(Greater(z, 20), z, Softplus(z))")
def _(g):
    return _softplus_gate(g, 20.0)


@idiom("softplus-gate-written-out", "softplus-gate as Kimi Linear writes it: "
       "Where(Greater(z, 20), z, Log(1 + Exp(z)))")
def _(g):
    return _softplus_gate(g, 20.0, written_out=True)


@idiom("mul-computed-table", "Add(x, Mul(x, t)), t [S,1] = 1 + 0.1·log(1 + floor(Range(0,S) / 4)) "
       "computed in the graph: a frozen table")
def _(g):
    x = x_input(g)
    y_output(g, g.op("Add", x, g.op("Mul", x, _position_table(g, x, 0.1, 4))), HIDDEN)
    return lambda f: f["x"] + f["x"] * _position_scale(np.arange(f["x"].shape[1]), 0.1, 4)


@idiom("mul-computed-ones", "Add(x, Mul(x, t)), t [S,1] = 1 + 0.1·log(1 + floor(Range(0,S) / 4096)): "
       "all ones below 4096 tokens, no op")
def _(g):
    x = x_input(g)
    y_output(g, g.op("Add", x, g.op("Mul", x, _position_table(g, x, 0.1, 4096))), HIDDEN)
    return lambda f: 2 * f["x"]


@idiom("rmsnorm-reciprocal", "Pow(x,2), ReduceMean, Add eps, Sqrt, Reciprocal, Mul(x,.), Mul(w,.)")
def _(g):
    x = x_input(g)
    ms = g.reduce_mean(g.op("Pow", x, g.const(2.0)), [-1])
    inv = g.op("Reciprocal", g.op("Sqrt", g.op("Add", ms, g.const(EPS))))
    w, W = param(g, "norm.weight", [HIDDEN], mean=1.0)
    y_output(g, g.op("Mul", w, g.op("Mul", x, inv)), HIDDEN)
    return lambda f: fm.rms_norm(f["x"], W, EPS)


@idiom("rmsnorm-mul-self", "Mul(x,x) instead of Pow, ReduceMean, Add eps, Sqrt, Div(x,.), Mul(.,w)")
def _(g):
    x = x_input(g)
    y, W = _rms_tail(g, x, g.reduce_mean(g.op("Mul", x, x), [-1]))
    y_output(g, y, HIDDEN)
    return lambda f: fm.rms_norm(f["x"], W, EPS)


@idiom("rmsnorm-reducemean-attr-opset13", "opset 13: Pow, ReduceMean with axes attribute, Add, Sqrt, Div, "
       "Mul(w,.)",
       opset=13)
def _(g):
    x = x_input(g)
    y, W = _rms_tail(g, x, g.op("ReduceMean", g.op("Pow", x, g.const(2.0)), axes=[-1]),
                     weight_first=True)
    y_output(g, y, HIDDEN)
    return lambda f: fm.rms_norm(f["x"], W, EPS)


@idiom("rmsnorm-reducemean-input-opset18", "opset 18: Pow, ReduceMean with axes as 2nd input, Add, Sqrt, Div, "
       "Mul",
       opset=18)
def _(g):
    x = x_input(g)
    ms = g.op("ReduceMean", g.op("Pow", x, g.const(2.0)), g.ints(-1), keepdims=1)
    y, W = _rms_tail(g, x, ms)
    y_output(g, y, HIDDEN)
    return lambda f: fm.rms_norm(f["x"], W, EPS)


@idiom("rmsnorm-cast", "HF: Cast(to=FLOAT), Pow, ReduceMean, Add, Sqrt, Div(1,.), Mul(xc,.), Cast(to=FLOAT), "
       "Mul(w,.)")
def _(g):
    xc = g.op("Cast", x_input(g), to=FLOAT)
    ms = g.reduce_mean(g.op("Pow", xc, g.const(2.0)), [-1])
    rsqrt = g.op("Div", g.const(1.0), g.op("Sqrt", g.op("Add", ms, g.const(EPS))))
    n = g.op("Cast", g.op("Mul", xc, rsqrt), to=FLOAT)
    w, W = param(g, "norm.weight", [HIDDEN], mean=1.0)
    y_output(g, g.op("Mul", w, n), HIDDEN)
    return lambda f: fm.rms_norm(f["x"], W, EPS)


@idiom("rmsnorm-op-opset23", "opset 23: RMSNormalization(x, w, axis=-1, epsilon=1e-6)", opset=23)
def _(g):
    w, W = param(g, "norm.weight", [HIDDEN], mean=1.0)
    y_output(g, g.op("RMSNormalization", x_input(g), w, axis=-1, epsilon=EPS), HIDDEN)
    return lambda f: fm.rms_norm(f["x"], W, EPS)


@idiom("rmsnorm-simplified-layernorm",
       "SimplifiedLayerNormalization(x, w, axis=-1, epsilon=1e-6, stash_type=1), "
       "ONNX domain (where ORT registers it)")
def _(g):
    w, W = param(g, "norm.weight", [HIDDEN], mean=1.0)
    y_output(g, g.op("SimplifiedLayerNormalization", x_input(g), w, axis=-1, epsilon=EPS,
                     stash_type=1), HIDDEN)
    return lambda f: fm.rms_norm(f["x"], W, EPS)


@idiom("rmsnorm-simplified-layernorm-ms",
       "com.microsoft SimplifiedLayerNormalization(x, w, axis=-1, "
       "epsilon=1e-6)", domains={"com.microsoft": 1})
def _(g):
    w, W = param(g, "norm.weight", [HIDDEN], mean=1.0)
    y_output(g, g.op("SimplifiedLayerNormalization", x_input(g), w, domain="com.microsoft",
                     axis=-1, epsilon=EPS, stash_type=1), HIDDEN)
    return lambda f: fm.rms_norm(f["x"], W, EPS)


@idiom("rmsnorm-no-weight", "Pow(x,2), ReduceMean, Add eps, Sqrt, Div(x,.); no weight")
def _(g):
    x = x_input(g)
    ms = g.reduce_mean(g.op("Pow", x, g.const(2.0)), [-1])
    y_output(g, g.op("Div", x, g.op("Sqrt", g.op("Add", ms, g.const(EPS)))), HIDDEN)
    return lambda f: fm.rms_norm(f["x"], None, EPS)


# -- LayerNorm --

@idiom("layernorm-op", "LayerNormalization(x, w, b, axis=-1, epsilon=1e-5)")
def _(g):
    w, W = param(g, "ln.weight", [HIDDEN], mean=1.0)
    b, B = param(g, "ln.bias", [HIDDEN])
    y_output(g, g.op("LayerNormalization", x_input(g), w, b, axis=-1, epsilon=1e-5), HIDDEN)
    return lambda f: fm.layer_norm(f["x"], W, B, 1e-5)


@idiom("layernorm-op-no-bias", "LayerNormalization(x, w, axis=-1, epsilon=1e-5); no bias input")
def _(g):
    w, W = param(g, "ln.weight", [HIDDEN], mean=1.0)
    y_output(g, g.op("LayerNormalization", x_input(g), w, axis=-1, epsilon=1e-5), HIDDEN)
    return lambda f: fm.layer_norm(f["x"], W, None, 1e-5)


@idiom("layernorm-op-offset-weight", "LayerNormalization(x, Add(w, 1), b): Nemotron's 1 + w, "
       "as an export without the ONNX optimizer leaves it")
def _(g):
    w, W = param(g, "ln.weight", [HIDDEN])
    b, B = param(g, "ln.bias", [HIDDEN])
    scale = g.op("Add", w, g.const(1.0))
    y_output(g, g.op("LayerNormalization", x_input(g), scale, b, axis=-1, epsilon=1e-5),
             HIDDEN)
    return lambda f: fm.layer_norm(f["x"], 1 + W, B, 1e-5)


@idiom("layernorm-op-ones", "LayerNormalization(x, Expand(1, Shape(x)[-1:])): OLMo's norm "
       "without weights, its scale literal ones")
def _(g):
    x = x_input(g)
    width = g.op("Slice", g.op("Shape", x), g.ints(-1), g.ints(2**62), g.ints(0))
    ones = g.op("Expand", g.const(1.0), width)
    y_output(g, g.op("LayerNormalization", x, ones, axis=-1, epsilon=1e-5), HIDDEN)
    return lambda f: fm.layer_norm(f["x"], None, None, 1e-5)


@idiom("layernorm-decomposed",
       "ReduceMean(x), Sub(x,m), Pow(d,2), ReduceMean, Add eps 1e-5, Sqrt, Div(d,.), Mul(.,w), Add(.,b)")
def _(g):
    x = x_input(g)
    d = g.op("Sub", x, g.reduce_mean(x, [-1]))
    var = g.reduce_mean(g.op("Pow", d, g.const(2.0)), [-1])
    n = g.op("Div", d, g.op("Sqrt", g.op("Add", var, g.const(1e-5))))
    w, W = param(g, "ln.weight", [HIDDEN], mean=1.0)
    b, B = param(g, "ln.bias", [HIDDEN])
    y_output(g, g.op("Add", g.op("Mul", n, w), b), HIDDEN)
    return lambda f: fm.layer_norm(f["x"], W, B, 1e-5)


# -- GELU and SiLU --

@idiom("gelu-erf-div", "torch: Div(x,1.4142135), Erf, Add(.,1), Mul(x,.), Mul(.,0.5)")
def _(g):
    y_output(g, dg.gelu_erf(g, x_input(g)), HIDDEN)
    return lambda f: fm.gelu(f["x"])


@idiom("gelu-erf-mul", "Mul(x,0.5), Mul(x,0.70710677), Erf, Add(1,.), Mul(half,.)")
def _(g):
    x = x_input(g)
    half = g.op("Mul", x, g.const(0.5))
    e = g.op("Erf", g.op("Mul", x, g.const(1 / math.sqrt(2.0))))
    y_output(g, g.op("Mul", half, g.op("Add", g.const(1.0), e)), HIDDEN)
    return lambda f: fm.gelu(f["x"])


def _gelu_tanh(g, x, cube):
    inner = g.op("Add", x, g.op("Mul", g.const(0.044715), cube))
    t = g.op("Tanh", g.op("Mul", g.const(math.sqrt(2 / math.pi)), inner))
    return g.op("Mul", g.op("Mul", g.const(0.5), x), g.op("Add", g.const(1.0), t))


@idiom("gelu-tanh-pow",
       "HF NewGELU: Pow(x,3), Mul(0.044715,.), Add(x,.), Mul(0.7978846,.), Tanh, Add(1,.), Mul(Mul(0.5,x),.)")
def _(g):
    x = x_input(g)
    y_output(g, _gelu_tanh(g, x, g.op("Pow", x, g.const(3.0))), HIDDEN)
    return lambda f: fm.gelu(f["x"], "tanh")


@idiom("gelu-tanh-cube-mul", "as gelu-tanh-pow with the cube as Mul(Mul(x,x),x)")
def _(g):
    x = x_input(g)
    y_output(g, _gelu_tanh(g, x, g.op("Mul", g.op("Mul", x, x), x)), HIDDEN)
    return lambda f: fm.gelu(f["x"], "tanh")


@idiom("gelu-tanh-factored",
       "BLOOM: Mul(Mul(x,0.5), Add(Tanh(Mul(Mul(x,0.7978846), Add(Mul(Mul(x,0.044715),x),1))),1))")
def _(g):
    x = x_input(g)
    inner = g.op("Add", g.op("Mul", g.op("Mul", x, g.const(0.044715)), x), g.const(1.0))
    t = g.op("Tanh", g.op("Mul", g.op("Mul", x, g.const(math.sqrt(2 / math.pi))), inner))
    y_output(g, g.op("Mul", g.op("Mul", x, g.const(0.5)), g.op("Add", t, g.const(1.0))), HIDDEN)
    return lambda f: fm.gelu(f["x"], "tanh")


@idiom("gelu-op-opset20", "opset 20: Gelu(x), approximate absent (none)", opset=20)
def _(g):
    y_output(g, g.op("Gelu", x_input(g)), HIDDEN)
    return lambda f: fm.gelu(f["x"])


@idiom("gelu-op-tanh-opset20", "opset 20: Gelu(x, approximate=\"tanh\")", opset=20)
def _(g):
    y_output(g, g.op("Gelu", x_input(g), approximate="tanh"), HIDDEN)
    return lambda f: fm.gelu(f["x"], "tanh")


@idiom("relu", "Relu(x)")
def _(g):
    y_output(g, g.op("Relu", x_input(g)), HIDDEN)
    return lambda f: np.maximum(f["x"], 0)


@idiom("softcap", "Gemma 2's logit cap: Mul(Tanh(Div(x, 3)), 3)")
def _(g):
    x = x_input(g)
    y_output(g, g.op("Mul", g.op("Tanh", g.op("Div", x, g.const(3.0))), g.const(3.0)), HIDDEN)
    return lambda f: fm.softcap(f["x"], 3.0)


@idiom("softcap-rescaled", "Mul(2, Tanh(Mul(x, 0.25))): a cap of 2 on 0.5 · x")
def _(g):
    x = x_input(g)
    y_output(g, g.op("Mul", g.const(2.0), g.op("Tanh", g.op("Mul", x, g.const(0.25)))), HIDDEN)
    return lambda f: 2.0 * np.tanh(0.25 * f["x"])


@idiom("silu", "Mul(x, Sigmoid(x))")
def _(g):
    x = x_input(g)
    y_output(g, g.op("Mul", x, g.op("Sigmoid", x)), HIDDEN)
    return lambda f: fm.silu(f["x"])


@idiom("swiglu", "gate=MatMul(x,Wg[16,32]), up=MatMul(x,Wu[16,32]), Mul(Mul(gate,Sigmoid(gate)),up); "
       "y [B,S,32]")
def _(g):
    x = x_input(g)
    gate, Wg = matmul(g, x, HIDDEN, 32, "mlp.gate_proj.weight")
    up, Wu = matmul(g, x, HIDDEN, 32, "mlp.up_proj.weight")
    y_output(g, g.op("Mul", g.op("Mul", gate, g.op("Sigmoid", gate)), up), 32)
    return lambda f: fm.swiglu(f["x"] @ Wg, f["x"] @ Wu)


# -- Linear --

@idiom("linear-matmul", "MatMul(x, W[16,32] initializer): in_out layout")
def _(g):
    y, W = matmul(g, x_input(g), HIDDEN, 32, "fc.weight")
    y_output(g, y, 32)
    return lambda f: fm.linear(f["x"], W)


@idiom("linear-matmul-bias", "Add(MatMul(x, W[16,32]), b[32])")
def _(g):
    y, W = matmul(g, x_input(g), HIDDEN, 32, "fc.weight")
    b, B = param(g, "fc.bias", [32])
    y_output(g, g.op("Add", y, b), 32)
    return lambda f: fm.linear(f["x"], W, B)


@idiom("linear-matmul-transpose", "MatMul(x, Transpose(W[32,16], perm=[1,0])): out_in layout, "
       "unfolded torch export")
def _(g):
    w, W = param(g, "fc.weight", [32, HIDDEN], std=HIDDEN ** -0.5)
    y_output(g, g.op("MatMul", x_input(g), g.op("Transpose", w, perm=[1, 0])), 32)
    return lambda f: fm.linear(f["x"], W, None, "out_in")


@idiom("linear-matmul-transpose-bias", "torch nn.Linear: Add(b[32], MatMul(x, Transpose(W[32,16])))")
def _(g):
    w, W = param(g, "fc.weight", [32, HIDDEN], std=HIDDEN ** -0.5)
    b, B = param(g, "fc.bias", [32])
    y = g.op("MatMul", x_input(g), g.op("Transpose", w, perm=[1, 0]))
    y_output(g, g.op("Add", b, y), 32)
    return lambda f: fm.linear(f["x"], W, B, "out_in")


@idiom("linear-left-matmul", "Transpose(MatMul(W[32,16], Transpose(x, perm=[0,2,1])), "
       "perm=[0,2,1]): the weight on the left of channels-first activations")
def _(g):
    w, W = param(g, "fc.weight", [32, HIDDEN], std=HIDDEN ** -0.5)
    y = g.op("MatMul", w, g.op("Transpose", x_input(g), perm=[0, 2, 1]))
    y_output(g, g.op("Transpose", y, perm=[0, 2, 1]), 32)
    return lambda f: fm.linear(f["x"], W, None, "out_in")


def _gemm_linear(g, trans_b):
    """Reshape x to [B*S, 16], Gemm, Reshape to Concat(Shape(x)[0:2], [32])."""
    x = x_input(g)
    shape = [32, HIDDEN] if trans_b else [HIDDEN, 32]
    w, W = param(g, "fc.weight", shape, std=HIDDEN ** -0.5)
    b, B = param(g, "fc.bias", [32])
    if trans_b:
        flat = g.op("Reshape", x, g.ints(-1, HIDDEN))
    else:  # x.view(-1, x.size(-1)) as torch writes it
        flat = g.op("Reshape", x, g.shape_of(-1, g.dim(x, 2)))
    y = g.op("Gemm", flat, w, b, alpha=1.0, beta=1.0, transB=trans_b)
    out_shape = g.op("Concat", g.slice(g.op("Shape", x), [0], [-1], [0]), g.ints(32), axis=0)
    y_output(g, g.op("Reshape", y, out_shape), 32)
    return lambda f: fm.linear(f["x"], W, B, "out_in" if trans_b else "in_out")


@idiom("linear-gemm-transb", "Reshape(x,[-1,16]), Gemm(., W[32,16], b, transB=1), Reshape(., "
       "Concat(Slice(Shape(x),0,-1),[32]))")
def _(g):
    return _gemm_linear(g, 1)


@idiom("linear-gemm", "GPT-2 Conv1D: Reshape(x, Concat([-1], Shape(x)[2])), Gemm(., W[16,32], b, transB=0), "
       "Reshape back")
def _(g):
    return _gemm_linear(g, 0)


# -- RoPE: x -> MatMul Wq[16,32] -> [B,S,4,8] -> [B,4,S,8] -> rope -> y [B,4,S,8] --

H, D = 4, 8


def _q_heads(g, x):
    q, Wq = matmul(g, x, HIDDEN, H * D, "q_proj.weight")
    return dg.split_heads(g, q, H, D), Wq


def _rope_idiom(g, tables, rotary_dim=D):
    """tables(g, x) -> (cos, sin) broadcastable to [B,H,S,D]; returns the reference."""
    x = x_input(g)
    q, Wq = _q_heads(g, x)
    cos, sin = tables(g, x)
    g.output(dg.rope(g, q, cos, sin, rotary_dim, D), "y", FLOAT, ["batch", H, "seq", D])

    def ref(f):
        cos, sin = fm.rope_tables(np.arange(f["x"].shape[1]), rotary_dim)
        return fm.rope(fm.heads(f["x"] @ Wq, H), cos, sin, rotary_dim)
    return ref


def _rope_table_initializers(g):
    cos, sin = fm.rope_tables(np.arange(MAX_POS), D)
    return (g.tensor("rope.cos_cached", cos.astype(np.float32)),
            g.tensor("rope.sin_cached", sin.astype(np.float32)))


@idiom("rope-table-slice",
       "cos/sin initializers [64,8] Slice(table,[0],S,[0]) -> [S,8]; "
       "rotate-half Slice/Slice(end=INT64_MAX)/Neg/Concat; Add(Mul(q,cos),Mul(rot,sin))")
def _(g):
    def tables(g, x):
        seq = g.dim(x, 1)
        return tuple(g.slice(t, [0], seq, [0]) for t in _rope_table_initializers(g))
    return _rope_idiom(g, tables)


@idiom("rope-flipped",
       "rotate-half the other way (NanoChat): Concat(x2, Neg(x1)); tables from inv_freq[4] "
       "(MatMul form): the sin table negated")
def _(g):
    x = x_input(g)
    q, Wq = _q_heads(g, x)
    cos, sin = dg.rotary_tables(g, g.tensor("rope.inv_freq", dg.inv_freq(D, 10000.0)), g.size(x, 1))
    x1 = g.slice(q, [0], [D // 2], [-1])
    x2 = g.slice(q, [D // 2], [dg.INT64_MAX], [-1])
    rotated = g.op("Concat", x2, g.op("Neg", x1), axis=-1)
    y = g.op("Add", g.op("Mul", q, cos), g.op("Mul", rotated, sin))
    g.output(y, "y", FLOAT, ["batch", H, "seq", D])

    def ref(f):
        cos, sin = fm.rope_tables(np.arange(f["x"].shape[1]), D)
        return fm.rope(fm.heads(f["x"] @ Wq, H), cos, -sin, D)
    return ref


def _interleaved_rope(g, tables):
    """y = q·cos + rotate_every_two(q)·sin on q = heads(x·Wq), the [S, 8]
    tables from tables(g, seq, freqs [64, 4]); returns Wq and freqs."""
    x = x_input(g)
    q, Wq = _q_heads(g, x)
    freqs = np.outer(np.arange(MAX_POS), 1.0 / 10000.0 ** (np.arange(0, D, 2) / D))
    cos, sin = tables(g, g.dim(x, 1), freqs)
    x1 = g.op("Slice", q, g.ints(0), g.ints(D), g.ints(3), g.ints(2))
    x2 = g.op("Slice", q, g.ints(1), g.ints(D), g.ints(3), g.ints(2))
    pairs = g.op("Concat", g.unsqueeze(g.op("Neg", x2), 4), g.unsqueeze(x1, 4), axis=-1)
    rot = g.op("Reshape", pairs, g.op("Shape", q))
    y = g.op("Add", g.op("Mul", q, cos), g.op("Mul", rot, sin))
    g.output(y, "y", FLOAT, ["batch", H, "seq", D])
    return Wq, freqs


@idiom("rope-interleaved",
       "GPT-J's rotate_every_two: x1=Slice(q,0::2), x2=Slice(q,1::2) on the last dim, "
       "Reshape(Concat(Unsqueeze(Neg(x2),4), Unsqueeze(x1,4), axis=-1), q's shape); tables "
       "[64,8] with each frequency twice in a row, Slice to [S,8]; Add(Mul(q,cos),Mul(rot,sin))")
def _(g):
    def tables(g, seq, freqs):
        return (g.slice(g.tensor(f"rope.{n}_cached", np.repeat(f(freqs), 2, axis=-1)
                                 .astype(np.float32)), [0], seq, [0])
                for n, f in (("cos", np.cos), ("sin", np.sin)))
    Wq, freqs = _interleaved_rope(g, tables)
    cos_t, sin_t = (np.repeat(f(freqs), 2, axis=-1) for f in (np.cos, np.sin))

    def ref(f):
        n = f["x"].shape[1]
        return fm.rope(fm.heads(f["x"] @ Wq, H), cos_t[:n], sin_t[:n], D, interleaved=True)
    return ref


def _repeat_interleave_loop(g, table, name):
    """torch's repeat_interleave(table, 2, dim=-1) under dynamic_axes: the
    columns split into a sequence, a Loop that expands each to two columns
    and inserts it into a sequence, and ConcatFromSequence."""
    from onnx import helper  # noqa: PLC0415
    cols = g.op("SplitToSequence", table, axis=1, keepdims=0)
    count = g.op("SequenceLength", cols)
    body = helper.make_graph(
        [helper.make_node("SequenceAt", [cols, "i"], [f"{name}.col"]),
         helper.make_node("Constant", [], [f"{name}.axes"],
                          value=numpy_helper.from_array(np.array([1], np.int64))),
         helper.make_node("Unsqueeze", [f"{name}.col", f"{name}.axes"], [f"{name}.col1"]),
         helper.make_node("Constant", [], [f"{name}.pair"],
                          value=numpy_helper.from_array(np.array([1, 2], np.int64))),
         helper.make_node("Expand", [f"{name}.col1", f"{name}.pair"], [f"{name}.col2"]),
         helper.make_node("SequenceInsert", ["acc", f"{name}.col2"], ["acc_out"]),
         helper.make_node("Identity", ["cond"], ["cond_out"])],
        f"{name}.body",
        [helper.make_tensor_value_info("i", INT64, []),
         helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
         helper.make_tensor_sequence_value_info("acc", FLOAT, None)],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_sequence_value_info("acc_out", FLOAT, None)])
    true = g.const(True, np.bool_)
    pieces = g.op("Loop", count, true, g.op("SequenceEmpty", dtype=FLOAT), body=body)
    return g.op("ConcatFromSequence", pieces, axis=1)


@idiom("rope-interleaved-loop",
       "rope-interleaved with tables [64,4] Slice to [S,4] and repeated as torch's dynamic "
       "export does: SplitToSequence(axis 1), Loop(SequenceLength) of SequenceAt, Unsqueeze, "
       "Expand [1,2], SequenceInsert; ConcatFromSequence(axis 1) -> [S,8]")
def _(g):
    def tables(g, seq, freqs):
        return (_repeat_interleave_loop(
            g, g.slice(g.tensor(f"rope.{n}_half", f(freqs).astype(np.float32)), [0], seq, [0]), n)
            for n, f in (("cos", np.cos), ("sin", np.sin)))
    _interleaved_rope(g, tables)
    # onnx_eval has no Loop: the numbers are checked end to end, on GPT-J
    # and CodeGen exported with dynamic axes (tests/e2e/hf_architectures.py).
    return None


@idiom("rope-table-gather",
       "cos/sin initializers [64,8] Gather(table, Unsqueeze(Range(0,S,1),0)) -> [1,S,8], "
       "Unsqueeze(1) -> [1,1,S,8]; rotate-half")
def _(g):
    def tables(g, x):
        pos = g.unsqueeze(g.op("Range", g.const(0), g.size(x, 1), g.const(1)), 0)
        return tuple(g.unsqueeze(g.op("Gather", t, pos, axis=0), 1) for t in _rope_table_initializers(g))
    return _rope_idiom(g, tables)


@idiom("rope-inv-freq-matmul",
       "inv_freq[4] initializer: MatMul(Unsqueeze(inv_freq,1), Unsqueeze(Cast(Range(0,S)),0)), "
       "Transpose, Concat(f,f), Cos, Sin")
def _(g):
    def tables(g, x):
        return dg.rotary_tables(g, g.tensor("rope.inv_freq", dg.inv_freq(D, 10000.0)), g.size(x, 1))
    return _rope_idiom(g, tables)


@idiom("rope-inv-freq-mul",
       "inv_freq[4]: Mul(Unsqueeze(Cast(Range(0,S)),1) [S,1], inv_freq) [S,4], Concat(f,f), Cos, Sin")
def _(g):
    def tables(g, x):
        pos = g.op("Cast", g.op("Range", g.const(0), g.size(x, 1), g.const(1)), to=FLOAT)
        freqs = g.op("Mul", g.unsqueeze(pos, 1), g.tensor("rope.inv_freq", dg.inv_freq(D, 10000.0)))
        emb = g.op("Concat", freqs, freqs, axis=-1)
        return g.op("Cos", emb), g.op("Sin", emb)
    return _rope_idiom(g, tables)


@idiom("rope-partial",
       "rotary_dim 4 of head_dim 8: Slice q[...,:4] and q[...,4:], rotate-half on the first, "
       "Concat(rot, rest); tables from inv_freq[2] (MatMul form)")
def _(g):
    def tables(g, x):
        return dg.rotary_tables(g, g.tensor("rope.inv_freq", dg.inv_freq(4, 10000.0)), g.size(x, 1))
    return _rope_idiom(g, tables, rotary_dim=4)


@idiom("rope-bshd",
       "rope before the transpose: q [B,S,4,8], cos/sin [S,8] Unsqueeze(1) -> [S,1,8], rotate-half, "
       "then Transpose -> [B,4,S,8]")
def _(g):
    x = x_input(g)
    q, Wq = matmul(g, x, HIDDEN, H * D, "q_proj.weight")
    q = g.op("Reshape", q, g.shape_of(g.dim(x, 0), g.dim(x, 1), H, D))
    cos, sin = dg.rotary_tables(g, g.tensor("rope.inv_freq", dg.inv_freq(D, 10000.0)), g.size(x, 1))
    r = dg.rope(g, q, g.unsqueeze(cos, 1), g.unsqueeze(sin, 1), D, D)
    g.output(g.op("Transpose", r, perm=[0, 2, 1, 3]), "y", FLOAT, ["batch", H, "seq", D])

    def ref(f):
        cos, sin = fm.rope_tables(np.arange(f["x"].shape[1]), D)
        qs = (f["x"] @ Wq).reshape(*f["x"].shape[:2], H, D)
        return fm.rope(qs, cos, sin, D, seq_axis=1).transpose(0, 2, 1, 3)
    return ref


def _rope_half_tables(g, x):
    """cos and sin of half width [S, 4] from the [64, 4] frequencies, Slice to S, Unsqueeze to
    [1, 1, S, 4]."""
    freqs = np.outer(np.arange(MAX_POS), 1.0 / 10000.0 ** (np.arange(0, D, 2) / D))
    seq = g.dim(x, 1)
    return tuple(g.unsqueeze(g.unsqueeze(g.slice(g.tensor(f"rope.{n}_half", f(freqs).astype(
        np.float32)), [0], seq, [0]), 0), 0) for n, f in (("cos", np.cos), ("sin", np.sin)))


def _rope_on_parts(g, pairs):
    """Concat(x1·c − x2·s, x2·c + x1·s) with tables of half width: x1, x2 the halves of q
    (Split; gpt-oss) or, with pairs, its even and odd elements (Slice steps 2; DeepSeek V3),
    the result then laid out evens first."""
    x = x_input(g)
    q, Wq = _q_heads(g, x)
    c, s = _rope_half_tables(g, x)
    if pairs:
        x1 = g.op("Slice", q, g.ints(0), g.ints(D), g.ints(-1), g.ints(2))
        x2 = g.op("Slice", q, g.ints(1), g.ints(D), g.ints(-1), g.ints(2))
    else:
        x1, x2 = g.op("Split", q, axis=-1, outputs=2)
    y = g.op("Concat", g.op("Sub", g.op("Mul", x1, c), g.op("Mul", x2, s)),
             g.op("Add", g.op("Mul", x2, c), g.op("Mul", x1, s)), axis=-1)
    g.output(y, "y", FLOAT, ["batch", H, "seq", D])

    def ref(f):
        pos = np.arange(f["x"].shape[1])
        freqs = np.outer(pos, 1.0 / 10000.0 ** (np.arange(0, D, 2) / D))
        qs = fm.heads(f["x"] @ Wq, H)
        a, b = (qs[..., 0::2], qs[..., 1::2]) if pairs else (qs[..., :D // 2], qs[..., D // 2:])
        cos, sin = np.cos(freqs), np.sin(freqs)
        return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)
    return ref


@idiom("rope-halves",
       "gpt-oss's RoPE: Split(q) into halves, Concat(x1*c - x2*s, x2*c + x1*s) with cos/sin "
       "[S,4] of half width")
def _(g):
    return _rope_on_parts(g, False)


@idiom("rope-pairs",
       "DeepSeek V3's interleaved RoPE: x1 = q[..., 0::2], x2 = q[..., 1::2] (Slice steps 2), "
       "Concat(x1*c - x2*s, x2*c + x1*s): the pairs rotated, laid out evens first")
def _(g):
    return _rope_on_parts(g, True)


# -- Layout: ScatterND of rows into zeros, Expand over heads, Concat --

@idiom("key-scatter-expand",
       "DeepSeek V3's key: a [B,S,1,4] rotary part Expand-ed over 3 heads, a [B,S,3,4] "
       "per-head part; both Transpose-d [3,1,2,0], ScatterND-ed as rows 0..3 and 4..7 into "
       "ConstantOfShape zeros [8,S,3,B] (Transpose-d there and back between the two), "
       "Transpose-d back [B,S,3,8]; then Concat with a "
       "[B,S,3,2] part on the last axis, Reshape [B,S,30]")
def _(g):
    x = x_input(g)
    nope, Wn = matmul(g, x, HIDDEN, 12, "k_nope.weight")
    rot, Wr = matmul(g, x, HIDDEN, 4, "k_rot.weight")
    extra, We = matmul(g, x, HIDDEN, 6, "k_extra.weight")
    b, s = g.dim(x, 0), g.dim(x, 1)
    nope = g.op("Reshape", nope, g.shape_of(b, s, 3, 4))
    rot = g.op("Expand", g.op("Reshape", rot, g.shape_of(b, s, 1, 4)), g.shape_of(b, s, 3, 4))
    zeros = g.op("ConstantOfShape", g.shape_of(8, s, 3, b),
                 value=numpy_helper.from_array(np.array([0.0], np.float32)))
    perm = [3, 1, 2, 0]
    rows = lambda start: g.unsqueeze(g.ints(*range(start, start + 4)), -1)
    key = g.op("ScatterND", zeros, rows(0), g.op("Transpose", nope, perm=perm))
    key = g.op("Transpose", g.op("Transpose", key, perm=perm), perm=perm)  # and back
    key = g.op("ScatterND", key, rows(4), g.op("Transpose", rot, perm=perm))
    key = g.op("Transpose", key, perm=perm)
    y = g.op("Concat", key, g.op("Reshape", extra, g.shape_of(b, s, 3, 2)), axis=-1)
    y_output(g, g.op("Reshape", y, g.shape_of(b, s, 30)), 30)

    def ref(f):
        xs = f["x"]
        bs = xs.shape[:2]
        n = (xs @ Wn).reshape(*bs, 3, 4)
        r = np.broadcast_to((xs @ Wr).reshape(*bs, 1, 4), (*bs, 3, 4))
        e = (xs @ We).reshape(*bs, 3, 2)
        return np.concatenate([n, r, e], axis=-1).reshape(*bs, 30)
    return ref


@idiom("expand-two-widths",
       "two [B,S,1,4] parts Expand-ed, one over 3 heads and one over 2 (as layers of other "
       "head counts do), Reshape-d [B,S,12] and [B,S,8], Concat [B,S,20]")
def _(g):
    x = x_input(g)
    b, s = g.dim(x, 0), g.dim(x, 1)
    parts, weights = [], []
    for heads, name in ((3, "a"), (2, "b")):
        p, W = matmul(g, x, HIDDEN, 4, f"{name}.weight")
        p = g.op("Expand", g.op("Reshape", p, g.shape_of(b, s, 1, 4)), g.shape_of(b, s, heads, 4))
        parts.append(g.op("Reshape", p, g.shape_of(b, s, heads * 4)))
        weights.append((heads, W))
    y_output(g, g.op("Concat", *parts, axis=-1), 20)

    def ref(f):
        xs = f["x"]
        return np.concatenate([np.tile(xs @ W, (1, 1, heads)) for heads, W in weights], axis=-1)
    return ref


# -- Attention: x -> q/k/v -> heads -> scores -> mask -> Softmax -> .v -> merge -> o_proj --

AH, AD = 4, 4  # query heads, head dim


def _attention_idiom(g, mask_scores, kv_heads=AH, scale="div", alibi=None, window=None, cap=None,
                     sinks=False, v_dim=AD, chunk=None):
    """mask_scores(g, scores, x) -> masked scores; scale: div | mul | qk (each by d^-1/4);
    alibi, window, chunk: the slopes the masks add and the window and chunks they keep, for the
    reference;
    cap: the scaled scores become Mul(Tanh(Div(scores, cap)), cap) before the mask;
    sinks: "concat", gpt-oss's sink logits, a [1, 4, 1, 1] param concatenated to the masked
    scores (Expand to [B, 4, S, 1]), the row max subtracted, Softmax, the last column sliced
    off; or "lse", Granite SWA's: the product times Unsqueeze(Sigmoid(ReduceLogSumExp(masked)
    - sinks [1, 4, 1]), -1). v_dim: the value head dim (the query's is 4)."""
    x = x_input(g)
    q, Wq = matmul(g, x, HIDDEN, AH * AD, "attn.q_proj.weight")
    k, Wk = matmul(g, x, HIDDEN, kv_heads * AD, "attn.k_proj.weight")
    v, Wv = matmul(g, x, HIDDEN, kv_heads * v_dim, "attn.v_proj.weight")
    q, k = (dg.split_heads(g, t, n, AD) for t, n in ((q, AH), (k, kv_heads)))
    v = dg.split_heads(g, v, kv_heads, v_dim)
    k = dg.repeat_kv(g, k, AH // kv_heads, kv_heads, AD)
    v = dg.repeat_kv(g, v, AH // kv_heads, kv_heads, v_dim)
    if scale == "qk":
        q = g.op("Mul", q, g.const(AD ** -0.25))
        k = g.op("Mul", k, g.const(AD ** -0.25))
    s = g.op("MatMul", q, g.op("Transpose", k, perm=[0, 1, 3, 2]))
    if scale == "div":
        s = g.op("Div", s, g.const(math.sqrt(AD)))
    elif scale == "mul":
        s = g.op("Mul", s, g.const(1 / math.sqrt(AD)))
    if cap is not None:
        s = g.op("Mul", g.op("Tanh", g.op("Div", s, g.const(cap))), g.const(cap))
    masked = mask_scores(g, s, x)
    S = None
    if sinks == "concat":
        sink, S = param(g, "attn.sinks", [1, AH, 1, 1], std=1.0)
        b, seq = g.dim(x, 0), g.dim(x, 1)
        c = g.op("Concat", masked, g.op("Expand", sink, g.shape_of(b, AH, seq, 1)), axis=-1)
        c = g.op("Sub", c, g.op("ReduceMax", c, axes=[-1], keepdims=1))
        p = g.op("Softmax", c, axis=-1)
        p = g.op("Slice", p, g.ints(0), g.ints(-1), g.ints(3), g.ints(1))
    else:
        p = g.op("Softmax", masked, axis=-1)
    a = g.op("MatMul", p, v)
    if sinks == "lse":
        sink, S = param(g, "attn.sinks", [1, AH, 1], std=1.0)
        lse = g.op("ReduceLogSumExp", masked, axes=[-1], keepdims=0)
        a = g.op("Mul", a, g.unsqueeze(g.op("Sigmoid", g.op("Sub", lse, sink)), -1))
    y, Wo = matmul(g, dg.merge_heads(g, a, AH * v_dim), AH * v_dim, HIDDEN, "attn.o_proj.weight")
    y_output(g, y, HIDDEN)
    return _attention_ref(Wq, Wk, Wv, Wo, kv_heads, alibi, window, cap,
                          None if S is None else S.reshape(-1), chunk)


def _attention_ref(Wq, Wk, Wv, Wo, kv_heads, alibi=None, window=None, cap=None, sinks=None,
                   chunk=None):
    def ref(f):
        x = f["x"]
        a = fm.attention(fm.heads(x @ Wq, AH), fm.heads(x @ Wk, kv_heads), fm.heads(x @ Wv, kv_heads),
                         AD ** -0.5, alibi, window, cap, sinks, chunk)
        return fm.merge(a) @ Wo
    return ref


def _trilu_where(g, s, x):
    seq = g.dim(x, 1)
    ones = g.op("ConstantOfShape", g.op("Concat", seq, seq, axis=0),
                value=numpy_helper.from_array(np.array([True])))
    return g.op("Where", g.op("Trilu", ones, upper=0), s, g.const(-INF))


def _mask_table(g, fill):
    table = np.triu(np.full((MAX_POS, MAX_POS), fill, np.float32), 1)
    return g.tensor("attn.causal_mask", table)


def _mask_add(fill):
    def mask(g, s, x):
        seq = g.dim(x, 1)
        return g.op("Add", s, g.slice(_mask_table(g, fill), [0, 0], g.op("Concat", seq, seq, axis=0), [0, 1]))
    return mask


def _positions(g, x):
    r = g.op("Range", g.const(0), g.size(x, 1), g.const(1))
    return g.unsqueeze(r, 1), g.unsqueeze(r, 0)  # i [S,1], j [1,S]


@idiom("attention-trilu-where",
       "mask Trilu(ConstantOfShape([S,S], true), upper=0) lower-triangular bool; Where(mask, scores, "
       "-inf); scale Div(scores, 2)")
def _(g):
    return _attention_idiom(g, _trilu_where)


@idiom("attention-mask-add-inf",
       "initializer [64,64] with -inf above the diagonal, Slice to [S,S] (axes 0,1), Add(scores, .); "
       "scale Mul(scores, 0.5)")
def _(g):
    return _attention_idiom(g, _mask_add(-INF), scale="mul")


@idiom("attention-mask-add-finfo-min",
       "initializer [64,64] with finfo(float32).min above the diagonal, Slice, Add(scores, .); scale Div")
def _(g):
    return _attention_idiom(g, _mask_add(FMIN))


def _product_mask(keep_below=0):
    """OpenAI GPT's: scores · b + -1e4 · (1 - b), b a [64, 64] lower-triangular 0/1
    table sliced to [S, S]; keep_below > 0: b keeps only the main diagonal and
    the keep_below below it, while the -1e4 term keeps the whole triangle."""
    def mask(g, s, x):
        seq = g.dim(x, 1)
        tril = np.tril(np.ones((1, 1, MAX_POS, MAX_POS), np.float32))
        b = tril - np.tril(tril, -1 - keep_below) if keep_below else tril
        ends = g.op("Concat", seq, seq, axis=0)
        bt = g.slice(g.tensor("attn.bias", b), [0, 0], ends, [2, 3])
        keep = g.slice(g.tensor("attn.keep", tril), [0, 0], ends, [2, 3])
        fill = g.op("Mul", g.op("Sub", g.const(1.0), keep), g.const(-10000.0))
        return g.op("Add", g.op("Mul", s, bt), fill)
    return mask


@idiom("attention-product-mask",
       "Add(Mul(scores, b), Mul(Sub(1, b), -10000)), b a lower-triangular 0/1 table sliced to "
       "[S, S] (OpenAI GPT); scale Div")
def _(g):
    return _attention_idiom(g, _product_mask())


@idiom("bad-attention-product-mask",
       "attention-product-mask whose 0/1 table keeps only the main diagonal and the one below, "
       "where the -1e4 term keeps the whole triangle: zero scores, not a mask")
def _(g):
    _attention_idiom(g, _product_mask(keep_below=1))
    return None


@idiom("attention-range-greater-where",
       "i=Unsqueeze(Range(0,S),1), j=Unsqueeze(Range,0), Where(Greater(j,i), -inf, scores); "
       "scale Mul(q,0.7071), Mul(k,0.7071)")
def _(g):
    def mask(g, s, x):
        i, j = _positions(g, x)
        return g.op("Where", g.op("Greater", j, i), g.const(-INF), s)
    return _attention_idiom(g, mask, scale="qk")


@idiom("attention-range-less-where",
       "Where(Less(i,j), finfo.min, scores) with i [S,1], j [1,S] from Range; scale Div")
def _(g):
    def mask(g, s, x):
        i, j = _positions(g, x)
        return g.op("Where", g.op("Less", i, j), g.const(FMIN), s)
    return _attention_idiom(g, mask)


@idiom("attention-gqa",
       "4 query heads, 2 KV heads: k,v Unsqueeze(2), Expand [B,2,2,S,4], Reshape [B,4,S,4]; "
       "Trilu+Where mask; scale Div")
def _(g):
    return _attention_idiom(g, _trilu_where, kv_heads=2)


@idiom("attention-merged-bmm",
       "OPT's bmm: Mul(q, 0.5) split to [B,4,S,4], q, k, v Reshape [B*4,S,4]; MatMul(q, "
       "Transpose(k, [0,2,1])), Reshape [B,4,S,S], Add [64,64] finfo.min mask, Max(., finfo.min), "
       "Reshape [B*4,S,S], Softmax, MatMul(p, v), Reshape [B,4,S,4]")
def _(g):
    x = x_input(g)
    q, Wq = matmul(g, x, HIDDEN, AH * AD, "attn.q_proj.weight")
    k, Wk = matmul(g, x, HIDDEN, AH * AD, "attn.k_proj.weight")
    v, Wv = matmul(g, x, HIDDEN, AH * AD, "attn.v_proj.weight")
    q = g.op("Mul", q, g.const(AD ** -0.5))
    b, s = g.dim(x, 0), g.dim(x, 1)
    merged = lambda t: g.op("Reshape", dg.split_heads(g, t, AH, AD), g.shape_of(-1, s, AD))
    q, k, v = merged(q), merged(k), merged(v)
    scores = g.op("Reshape", g.op("MatMul", q, g.op("Transpose", k, perm=[0, 2, 1])),
                  g.shape_of(b, AH, s, s))
    scores = g.op("Max", _mask_add(FMIN)(g, scores, x), g.const(FMIN))
    p = g.op("Softmax", g.op("Reshape", scores, g.shape_of(-1, s, s)), axis=-1)
    a = g.op("Reshape", g.op("MatMul", p, v), g.shape_of(b, AH, s, AD))
    y, Wo = matmul(g, dg.merge_heads(g, a, AH * AD), AH * AD, HIDDEN, "attn.o_proj.weight")
    y_output(g, y, HIDDEN)
    return _attention_ref(Wq, Wk, Wv, Wo, AH)


ALIBI = [0.5, 0.25, 0.125, 0.0625]


def _position_bias(table):
    """Add(scores, Slice(table [1,4,64,64], to [S,S])) then the finfo.min mask."""
    def mask(g, s, x):
        seq = g.dim(x, 1)
        bias = g.slice(g.tensor("attn.position_bias", table.astype(np.float32)), [0, 0],
                       g.op("Concat", seq, seq, axis=0), [2, 3])
        return _mask_add(FMIN)(g, g.op("Add", s, bias), x)
    return mask


@idiom("attention-alibi",
       "ALiBi: Add(scores, Slice([1,4,64,64] table of slope_h * j, slopes 1/2, 1/4, 1/8, 1/16)), "
       "then the finfo.min mask; scale Div")
def _(g):
    table = np.array(ALIBI)[None, :, None, None] * np.arange(MAX_POS)[None, None, None, :]
    return _attention_idiom(g, _position_bias(np.broadcast_to(table, (1, AH, MAX_POS, MAX_POS))),
                            alibi=ALIBI)


def _window_mask(g, s, x):
    """Add(scores, Slice([64,64] initializer to [S,S])): finfo.min where j > i or i - j >= 3."""
    i, j = np.arange(MAX_POS)[:, None], np.arange(MAX_POS)[None, :]
    table = np.where((j > i) | (i - j >= 3), FMIN, 0).astype(np.float32)
    seq = g.dim(x, 1)
    return g.op("Add", s, g.slice(g.tensor("attn.window_mask", table), [0, 0],
                                  g.op("Concat", seq, seq, axis=0), [0, 1]))


@idiom("attention-sliding-window",
       "initializer [64,64]: finfo.min where j > i or i - j >= 3 (Mistral's window), Slice to [S,S], "
       "Add(scores, .); scale Div")
def _(g):
    return _attention_idiom(g, _window_mask, window=3)


def _chunk_mask(window=None):
    """Add(scores, Slice([64,64] initializer to [S,S])): finfo.min where j > i or j is outside
    i's chunk of 3 (Llama 4's chunked attention), or i - j >= window."""
    def mask(g, s, x):
        i, j = np.arange(MAX_POS)[:, None], np.arange(MAX_POS)[None, :]
        hide = (j > i) | (j // 3 != i // 3)
        if window:
            hide |= i - j >= window
        table = np.where(hide, FMIN, 0).astype(np.float32)
        seq = g.dim(x, 1)
        return g.op("Add", s, g.slice(g.tensor("attn.chunk_mask", table), [0, 0],
                                      g.op("Concat", seq, seq, axis=0), [0, 1]))
    return mask


@idiom("attention-chunked",
       "initializer [64,64]: finfo.min where j > i or j // 3 != i // 3 (Llama 4's chunks of 3), "
       "Slice to [S,S], Add(scores, .); scale Div")
def _(g):
    return _attention_idiom(g, _chunk_mask(), chunk=3)


@idiom("attention-chunked-window",
       "the chunks of 3 of attention-chunked, and a sliding window of 2 inside them")
def _(g):
    return _attention_idiom(g, _chunk_mask(window=2), chunk=3, window=2)


@idiom("attention-softcap",
       "Gemma 2's soft-capped scores: Mul(scores, 0.5), Div(., 0.75), Tanh, Mul(., 0.75), then the "
       "[64,64] -inf mask Add")
def _(g):
    return _attention_idiom(g, _mask_add(-INF), scale="mul", cap=0.75)


@idiom("attention-sinks",
       "gpt-oss's sinks: Concat(masked scores, Expand(sinks [1,4,1,1], [B,4,S,1])) on the key "
       "axis, Sub its ReduceMax, Softmax, Slice off the last column, then MatMul(p, v); GQA over "
       "2 KV heads, a sliding window of 3")
def _(g):
    return _attention_idiom(g, _window_mask, kv_heads=2, window=3, sinks="concat")


@idiom("attention-sinks-lse",
       "Granite SWA's sinks: MatMul(Softmax(masked scores), v) times Unsqueeze(Sigmoid("
       "ReduceLogSumExp(masked scores) - sinks [1,4,1]), -1); GQA over 2 KV heads, the -inf mask")
def _(g):
    return _attention_idiom(g, _mask_add(-INF), kv_heads=2, scale="mul", sinks="lse")


@idiom("attention-value-dim-wide",
       "values of head dim 6 against queries and keys of 4 (GQA over 2 KV heads)")
def _(g):
    return _attention_idiom(g, _mask_add(-INF), kv_heads=2, scale="mul", v_dim=6)


@idiom("attention-value-dim-narrow",
       "values of head dim 2 against queries and keys of 4 (MiMo-V2-Flash's, DeepSeek's kind)")
def _(g):
    return _attention_idiom(g, _mask_add(-INF), kv_heads=2, scale="mul", v_dim=2)


@idiom("attention-mqa-seq-major",
       "GPT-BigCode's multi-query form: q [B,S,16] Reshape [B,S*4,4]; k, v [B,S,4] (one head); "
       "MatMul(q, Transpose(k, [0,2,1])), Mul 0.5, Reshape [B,S,4,S], Where(Unsqueeze(Trilu(ones "
       "[S,S]), [0,2]), scores, finfo.min), Softmax, Reshape [B,S*4,S], MatMul(p, v), Reshape "
       "[B,S,16]")
def _(g):
    x = x_input(g)
    q, Wq = matmul(g, x, HIDDEN, AH * AD, "attn.q_proj.weight")
    k, Wk = matmul(g, x, HIDDEN, AD, "attn.k_proj.weight")
    v, Wv = matmul(g, x, HIDDEN, AD, "attn.v_proj.weight")
    b, s = g.dim(x, 0), g.dim(x, 1)
    q = g.op("Reshape", q, g.shape_of(b, -1, AD))
    scores = g.op("Mul", g.op("MatMul", q, g.op("Transpose", k, perm=[0, 2, 1])), g.const(0.5))
    scores = g.op("Reshape", scores, g.shape_of(b, s, AH, s))
    ones = g.op("ConstantOfShape", g.op("Concat", s, s, axis=0),
                value=numpy_helper.from_array(np.array([True])))
    keep = g.unsqueeze(g.op("Trilu", ones, upper=0), 0, 2)
    p = g.op("Softmax", g.op("Where", keep, scores, g.const(FMIN)), axis=-1)
    a = g.op("MatMul", g.op("Reshape", p, g.shape_of(b, -1, s)), v)
    y, Wo = matmul(g, g.op("Reshape", a, g.shape_of(b, s, AH * AD)), AH * AD, HIDDEN,
                   "attn.o_proj.weight")
    y_output(g, y, HIDDEN)
    return _attention_ref(Wq, Wk, Wv, Wo, 1)


@idiom("bad-attention-position-bias",
       "a learned-looking relative position bias (seeded normal [1,4,64,64]) added to the scores, "
       "then the finfo.min mask")
def _(g):
    table = np.random.default_rng(7).standard_normal((1, AH, MAX_POS, MAX_POS))
    _attention_idiom(g, _position_bias(table))
    return None


@idiom("bad-attention-mask-in-softcap",
       "the -inf mask Add inside the soft cap: Mul(Tanh(Div(Add(scores, mask), 0.75)), 0.75)")
def _(g):
    def mask(g, s, x):
        masked = _mask_add(-INF)(g, s, x)
        return g.op("Mul", g.op("Tanh", g.op("Div", masked, g.const(0.75))), g.const(0.75))
    _attention_idiom(g, mask)
    return None


@idiom("attention-op-opset23-4d",
       "opset 23: Attention(q [B,4,S,4], k, v [B,2,S,4], "
       "is_causal=1) between split_heads and merge_heads", opset=23)
def _(g):
    x = x_input(g)
    q, Wq = matmul(g, x, HIDDEN, AH * AD, "attn.q_proj.weight")
    k, Wk = matmul(g, x, HIDDEN, 2 * AD, "attn.k_proj.weight")
    v, Wv = matmul(g, x, HIDDEN, 2 * AD, "attn.v_proj.weight")
    a = g.op("Attention", dg.split_heads(g, q, AH, AD), dg.split_heads(g, k, 2, AD),
             dg.split_heads(g, v, 2, AD), is_causal=1)
    y, Wo = matmul(g, dg.merge_heads(g, a, AH * AD), AH * AD, HIDDEN, "attn.o_proj.weight")
    y_output(g, y, HIDDEN)
    return _attention_ref(Wq, Wk, Wv, Wo, 2)


@idiom("attention-op-opset23-3d",
       "opset 23: Attention(q [B,S,16], k, v [B,S,8], is_causal=1, q_num_heads=4, "
       "kv_num_heads=2) -> [B,S,16]", opset=23)
def _(g):
    x = x_input(g)
    q, Wq = matmul(g, x, HIDDEN, AH * AD, "attn.q_proj.weight")
    k, Wk = matmul(g, x, HIDDEN, 2 * AD, "attn.k_proj.weight")
    v, Wv = matmul(g, x, HIDDEN, 2 * AD, "attn.v_proj.weight")
    a = g.op("Attention", q, k, v, is_causal=1, q_num_heads=AH, kv_num_heads=2)
    y, Wo = matmul(g, a, AH * AD, HIDDEN, "attn.o_proj.weight")
    y_output(g, y, HIDDEN)
    return _attention_ref(Wq, Wk, Wv, Wo, 2)


# -- Embeddings (ids [batch, seq] in) --

def _wte(g):
    return param(g, "wte.weight", [VOCAB, HIDDEN], std=1.0)


@idiom("embed-gather", "Gather(wte[256,16], ids, axis=0)")
def _(g):
    w, W = _wte(g)
    y_output(g, g.op("Gather", w, ids_input(g), axis=0), HIDDEN)
    return lambda f: W[f["ids"]]


@idiom("embed-positions-gather", "Add(Gather(wte, ids), Gather(wpe[64,16], Unsqueeze(Range(0,S,1),0)))")
def _(g):
    ids = ids_input(g)
    w, W = _wte(g)
    p, P = param(g, "wpe.weight", [MAX_POS, HIDDEN], std=1.0)
    pos = g.unsqueeze(g.op("Range", g.const(0), g.size(ids, 1), g.const(1)), 0)
    y_output(g, g.op("Add", g.op("Gather", w, ids, axis=0), g.op("Gather", p, pos, axis=0)), HIDDEN)
    return lambda f: W[f["ids"]] + P[: f["ids"].shape[1]]


@idiom("embed-positions-slice", "Add(Gather(wte, ids), Slice(wpe[64,16], [0], S, [0]))")
def _(g):
    ids = ids_input(g)
    w, W = _wte(g)
    p, P = param(g, "wpe.weight", [MAX_POS, HIDDEN], std=1.0)
    y_output(g, g.op("Add", g.op("Gather", w, ids, axis=0), g.slice(p, [0], g.dim(ids, 1), [0])), HIDDEN)
    return lambda f: W[f["ids"]] + P[: f["ids"].shape[1]]


@idiom("embed-tied-head", "h=Gather(wte[256,16], ids); y=MatMul(h, Transpose(wte, "
       "perm=[1,0])) logits [B,S,256]")
def _(g):
    w, W = _wte(g)
    h = g.op("Gather", w, ids_input(g), axis=0)
    y_output(g, g.op("MatMul", h, g.op("Transpose", w, perm=[1, 0])), VOCAB)
    return lambda f: W[f["ids"]] @ W.T


# -- Blocks (ids in, logits y out) --

def _decoder_idiom(g, cfg, **kw):
    dg.decoder(g, cfg, ids_name="ids", logits_name="y", **kw)
    return lambda f: fm.decoder({k: v.astype(np.float64) for k, v in g.arrays.items()}, cfg, f["ids"])


BLOCK = dict(vocab=VOCAB, hidden=HIDDEN, ffn=32, heads=4, kv_heads=2)


@idiom("decoder-prenorm-3layer",
       "3 Llama layers as samples/structure_model.py writes them (RMSNorm, GQA 4/2, "
       "RoPE from inv_freq, Trilu mask, SwiGLU), final norm, untied head")
def _(g):
    return _decoder_idiom(g, dg.DecoderShape(layers=3, **BLOCK))


@idiom("decoder-parallel-residual",
       "2 NeoX-style layers: x + attn(ln1(x)) + mlp(ln2(x)); LayerNormalization, qkv biases, "
       "rotary_dim 2 of 4, GELU-erf MLP with biases")
def _(g):
    return _decoder_idiom(g, dg.DecoderShape(layers=2, norm="layer", mlp=("gelu", "gelu"), qkv_bias=True,
                                             parallel_residual=True, rotary_fraction=0.5, **BLOCK))


@idiom("decoder-mixed-mlp", "3 pre-norm layers: layers 0 and 2 SwiGLU MLP, "
       "layer 1 GELU-erf MLP (two templates)")
def _(g):
    return _decoder_idiom(g, dg.DecoderShape(layers=3, mlp=("swiglu", "gelu", "swiglu"), **BLOCK))


# -- Bad inputs, for error tests --

@idiom("bad-unsupported-op", "2-layer decoder with Add(h, Hardmax(h)) in "
       "the residual stream after layer 0 (node /model/Hardmax)")
def _(g):
    def hardmax(g, i, h):
        return g.op("Add", h, g.op("Hardmax", h)) if i == 0 else h
    dg.decoder(g, dg.DecoderShape(layers=2, **BLOCK), ids_name="ids", logits_name="y", between_layers=hardmax)


@idiom("bad-unsupported-op-fixed-seq", "bad-unsupported-op exported with the sequence "
       "fixed at 8 and the batch dynamic, as torch's exporter leaves models that loop over "
       "the sequence")
def _(g):
    def hardmax(g, i, h):
        return g.op("Add", h, g.op("Hardmax", h)) if i == 0 else h
    dg.decoder(g, dg.DecoderShape(layers=2, **BLOCK), ids_name="ids", logits_name="y",
               between_layers=hardmax, seq=8)


@idiom("bad-side-input", "3-layer decoder whose layers each add, after their own, the "
       "rows of a second table at the token ids (node /model/Gather_1): a side input beside "
       "the residual stream, as per-layer embeddings are")
def _(g):
    cfg = dg.DecoderShape(layers=3, **BLOCK)
    side = []

    def add_side(g, i, h):
        if i < 0:
            table = g.weight("model.per_layer.weight", [cfg.vocab, cfg.hidden], std=1.0)
            side.append(g.op("Gather", table, "ids", axis=0))
            return h
        return g.op("Add", h, side[0])
    dg.decoder(g, cfg, ids_name="ids", logits_name="y", between_layers=add_side)


@idiom("bad-score-choice", "x + ReduceSum(TopK(x · xᵀ, 2)): keys chosen by score outside any "
       "router, as DeepSeek's sparse attention chooses them")
def _(g):
    x = x_input(g)
    scores = g.op("MatMul", x, g.op("Transpose", x, perm=[0, 2, 1]))
    best, _ = g.op("TopK", scores, g.ints(2), axis=-1, outputs=2)
    chosen = g.op("ReduceSum", best, g.ints(-1), keepdims=1)
    y_output(g, g.op("Add", x, chosen), HIDDEN)
    return None


@idiom("whole-axis-choice", "x + ReduceSum(Cast(ScatterElements(true [B,S,S], TopK(x · xᵀ, S).indices, "
       "false))): a choice of every key (DeepSeek's sparse attention within its index_topk) "
       "unmasks them all, whatever the scores")
def _(g):
    x = x_input(g)
    scores = g.op("MatMul", x, g.op("Transpose", x, perm=[0, 2, 1]))
    _, chosen = g.op("TopK", scores, g.op("Reshape", g.dim(x, 1), g.ints(1)), axis=-1, outputs=2)
    blocked = g.op("ConstantOfShape", g.op("Shape", scores),
                   value=numpy_helper.from_array(np.array([True])))
    unblock = g.op("ConstantOfShape", g.op("Shape", chosen),
                   value=numpy_helper.from_array(np.array([False])))
    mask = g.op("ScatterElements", blocked, chosen, unblock, axis=-1)
    still = g.op("ReduceSum", g.op("Cast", mask, to=TensorProto.FLOAT), g.ints(-1), keepdims=1)
    y_output(g, g.op("Add", x, still), HIDDEN)
    return lambda f: f["x"] + 0.0


@idiom("bad-sequence-op", "Add(x, ConcatFromSequence(SequenceInsert(SequenceEmpty(), x), axis=0)): "
       "an ONNX sequence of an activation")
def _(g):
    x = x_input(g)
    seq = g.op("SequenceInsert", g.op("SequenceEmpty", dtype=TensorProto.FLOAT), x)
    y_output(g, g.op("Add", x, g.op("ConcatFromSequence", seq, axis=0)), HIDDEN)
    return None


@idiom("bad-loop-activation", "Loop(2, true, x) whose body doubles the carried value: "
       "a loop over an activation")
def _(g):
    from onnx import helper  # noqa: PLC0415
    x = x_input(g)
    body = helper.make_graph(
        [helper.make_node("Add", ["h", "h"], ["h_out"]),
         helper.make_node("Identity", ["cond"], ["cond_out"])],
        "double",
        [helper.make_tensor_value_info("i", INT64, []),
         helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h", FLOAT, None)],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_out", FLOAT, None)])
    y = g.op("Loop", g.const(2), g.const(True, np.bool_), x, body=body)
    y_output(g, y, HIDDEN)
    return None


@idiom("bad-gather-scalar", "Add(x, Gather(Constant 2.0, Constant 0)): a Gather from a scalar, "
       "which has no axis")
def _(g):
    x = x_input(g)
    y_output(g, g.op("Add", x, g.op("Gather", g.const(2.0), g.const(0))), HIDDEN)
    return None


@idiom("bad-range-empty-limit", "Add(x, Cast(Range(0, Slice(Shape(x), [3, 3)), 1))): a Range "
       "whose limit is an empty tensor, not a scalar")
def _(g):
    x = x_input(g)
    limit = g.op("Slice", g.op("Shape", x), g.ints(3), g.ints(3))
    pos = g.op("Cast", g.op("Range", g.const(0, np.int64), limit, g.const(1, np.int64)), to=FLOAT)
    y_output(g, g.op("Add", x, pos), HIDDEN)
    return None


@idiom("bad-cycle", "a=Add(x,t), t=Mul(a,w), y=Identity(a): a cycle through nodes /Add and /Mul")
def _(g):
    x = x_input(g)
    w, _ = param(g, "w", [HIDDEN])
    g.nodes.append(onnx.helper.make_node("Add", [x, "t"], ["a"], name="/Add"))
    g.nodes.append(onnx.helper.make_node("Mul", ["a", w], ["t"], name="/Mul"))
    g.nodes.append(onnx.helper.make_node("Identity", ["a"], ["y"], name="/Identity"))
    g.output("y", "y", FLOAT, ["batch", "seq", HIDDEN])


@idiom("bad-missing-external-data",
       "MatMul(x, fc.weight[16,32]) whose data is external in FILE.missing.bin, which is never written")
def _(g):
    w, _ = param(g, "fc.weight", [HIDDEN, 32])
    y_output(g, g.op("MatMul", x_input(g), w), 32)


@idiom("bad-matmul-shape", "MatMul(x [B,S,16], W[32,8]): inner dims 16 vs 32 disagree")
def _(g):
    w, _ = param(g, "fc.weight", [32, 8])
    y_output(g, g.op("MatMul", x_input(g), w), 8)


@idiom("bad-unbound-dim", "Add(x, extra) with a second float input extra [1, \"foo\", 16]; "
       "foo is no batch/seq flag")
def _(g):
    extra = g.input("extra", FLOAT, [1, "foo", HIDDEN])
    y_output(g, g.op("Add", x_input(g), extra), HIDDEN)


@idiom("external-data", "Add(MatMul(x, fc.weight[16,32]), "
       "fc.bias[32]) with all initializer data in FILE.data beside it")
def _(g):
    y, W = matmul(g, x_input(g), HIDDEN, 32, "fc.weight")
    b, B = param(g, "fc.bias", [32])
    y_output(g, g.op("Add", y, b), 32)
    return lambda f: fm.linear(f["x"], W, B)


# -- writing and checking --

# torch's graph signature an idiom records (g.torch_signature), by name.
TORCH_SIGNATURES = {}


def build(name):
    build_fn, _, opset, domains = IDIOMS[name]
    g = Graph(name, opset=opset, seed=sum(map(ord, name)), domains=domains)
    ref = build_fn(g)
    if hasattr(g, "torch_signature"):
        TORCH_SIGNATURES[name] = g.torch_signature
    return g.model(producer="megatrain-idioms"), ref


def _varint(n):
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _field(number, payload):
    """A length-delimited protobuf field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def with_graph_metadata(model, key, value):
    """The model's bytes with GraphProto.metadata_props (field 16, IR
    version 10) holding key: value, written by hand as the onnx package here
    predates the field."""
    entry = _field(1, key.encode()) + _field(2, value.encode())
    graph = model.graph.SerializeToString() + _field(16, entry)
    rest = onnx.ModelProto()
    rest.CopyFrom(model)
    rest.ClearField("graph")
    return rest.SerializeToString() + _field(7, graph)


def write(name, path):
    model, _ = build(name)
    path = Path(path)
    if name == "external-data":
        onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                        location=path.name + ".data", size_threshold=0)
        return
    if name == "bad-missing-external-data":
        missing = path.name + ".missing.bin"
        (path.parent / missing).unlink(missing_ok=True)
        for t in model.graph.initializer:
            raw = t.raw_data
            t.ClearField("raw_data")
            t.data_location = TensorProto.EXTERNAL
            for key, value in (("location", missing), ("offset", "0"), ("length", str(len(raw)))):
                t.external_data.add(key=key, value=value)
    if name in TORCH_SIGNATURES:
        path.write_bytes(with_graph_metadata(
            model, "pkg.torch.export.ExportedProgram.graph_signature", TORCH_SIGNATURES[name]))
        return
    onnx.save(model, str(path))


def _feeds(model, rng, batch=2, seq=8):
    feeds = {}
    for i in model.graph.input:
        if i.type.tensor_type.elem_type == INT64:
            feeds[i.name] = rng.integers(0, VOCAB, (batch, seq), dtype=np.int64)
        else:
            feeds[i.name] = rng.standard_normal((batch, seq, HIDDEN)).astype(np.float32)
    return feeds


def _knows_all_ops(model):
    return model.opset_import[0].version <= onnx.defs.onnx_opset_version() and all(
        onnx.defs.has(n.op_type, n.domain) for n in model.graph.node)


def check_one(name, tmp):
    """Returns (problems with idiom `name`, whether onnx.checker ran)."""
    path = Path(tmp) / f"{name}.onnx"
    write(name, path)
    problems = []
    if name == "bad-missing-external-data":
        try:
            onnx.load(str(path))
            problems.append("loading should fail on the missing data file")
        except (FileNotFoundError, OSError, onnx.checker.ValidationError):
            pass
        onnx.load(str(path), load_external_data=False)
        return problems, False
    model = onnx.load(str(path))
    if name in ("bad-matmul-shape", "bad-gather-scalar"):
        try:
            onnx.shape_inference.infer_shapes(model, strict_mode=True)
            problems.append("shape inference should reject the graph")
        except onnx.shape_inference.InferenceError:
            pass
        return problems, False
    if name == "bad-cycle":
        try:
            onnx.checker.check_model(model)
            problems.append("the checker should reject the cycle")
        except onnx.checker.ValidationError:
            pass
        return problems, False
    checked = _knows_all_ops(model)
    if checked:
        onnx.checker.check_model(model, full_check=True)
    _, ref = build(name)
    if ref is not None:
        feeds = _feeds(model, np.random.default_rng(0))
        got = onnx_eval.run(model, feeds, float64=True)["y"]
        want = ref({k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in feeds.items()})
        if got.shape != want.shape:
            problems.append(f"shape {got.shape} != {want.shape}")
        else:
            err = np.abs(got - want).max() / max(1.0, np.abs(want).max())
            if not err < 1e-5:
                problems.append(f"differs from the fused math by {err:.2e}")
    return problems, checked


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("name", nargs="?", choices=sorted(IDIOMS), metavar="NAME")
    p.add_argument("-o", "--output", help="ONNX file to write")
    p.add_argument("--list", action="store_true", help="list the idioms and their node forms")
    p.add_argument("--check", action="store_true", help="build and verify every idiom")
    args = p.parse_args()
    if args.list:
        for name, (_, summary, opset, _) in IDIOMS.items():
            print(f"{name:34} {summary}")
        return
    if args.check:
        failed = 0
        with tempfile.TemporaryDirectory() as tmp:
            for name in IDIOMS:
                problems, checked = check_one(name, tmp)
                status = "FAIL " + "; ".join(problems) if problems else "ok"
                print(f"{name:34} {status}{'' if checked else '  (onnx.checker skipped)'}")
                failed += bool(problems)
        sys.exit(1 if failed else 0)
    if not args.name or not args.output:
        p.error("NAME and -o are required")
    write(args.name, args.output)


if __name__ == "__main__":
    main()
