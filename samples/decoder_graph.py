"""Decoder layers written as a PyTorch exporter writes them at opset 17.

Every function adds nodes to a `Graph` and returns the output value name.
Weights are [in, out] (the layout of folded exports) and named after
HuggingFace's Llama/Qwen2 parameters.
"""
import dataclasses
import math

import numpy as np
from onnx import numpy_helper

from onnx_build import FLOAT, INT64

INT64_MAX = np.iinfo(np.int64).max  # torch writes x[..., a:] as Slice(end=INT64_MAX)
FLOAT32_MIN = float(np.finfo(np.float32).min)


@dataclasses.dataclass
class DecoderShape:
    vocab: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    layers: int
    qkv_bias: bool = False
    eps: float = 1e-5
    rope_theta: float = 10000.0
    rotary_fraction: float = 1.0  # rotary_dim = head_dim * rotary_fraction
    norm: str = "rms"  # rms: decomposed RMSNorm; layer: LayerNormalization op
    mlp: tuple = ()  # per layer, "swiglu" or "gelu"; empty means all swiglu
    parallel_residual: bool = False
    tied: bool = False
    sliding_window: int = 0  # query i sees keys i - W < j <= i; 0: all j <= i
    attention_chunk: int = 0  # query i sees its chunk's keys, j // C == i // C; 0: all
    experts: int = 0  # > 0: Llama 4's experts of `ffn` units beside a shared one; 0: an MLP
    experts_per_token: int = 1

    @property
    def head_dim(self):
        return self.hidden // self.heads

    @property
    def rotary_dim(self):
        return int(self.head_dim * self.rotary_fraction)

    def mlp_of(self, layer):
        return self.mlp[layer] if self.mlp else "swiglu"

    def check(self):
        if self.hidden % self.heads or self.heads % self.kv_heads:
            raise ValueError(f"hidden {self.hidden}, heads {self.heads} and kv heads "
                             f"{self.kv_heads} must divide evenly")
        if self.mlp and len(self.mlp) != self.layers:
            raise ValueError(f"{len(self.mlp)} MLP kinds for {self.layers} layers")
        if self.sliding_window < 0:
            raise ValueError(f"sliding window {self.sliding_window} must be positive (0: none)")
        if self.attention_chunk < 0:
            raise ValueError(f"attention chunk {self.attention_chunk} must be positive (0: none)")
        if self.experts < 0 or (self.experts and not 1 <= self.experts_per_token <= self.experts):
            raise ValueError(f"{self.experts_per_token} of {self.experts} experts per token")


# -- norms --

def rms_norm(g, x, weight, eps):
    """Pow(x, 2), ReduceMean(-1), Add eps, Sqrt, Div, Mul(weight, .)."""
    ms = g.reduce_mean(g.op("Pow", x, g.const(2.0)), [-1])
    rms = g.op("Sqrt", g.op("Add", ms, g.const(eps)))
    return g.op("Mul", weight, g.op("Div", x, rms))


def norm(g, cfg, x, prefix):
    """The decomposed RMSNorm, or a LayerNormalization op with weight and bias."""
    with g.scope(prefix.rsplit(".", 1)[-1]):
        w = g.weight(f"{prefix}.weight", [cfg.hidden], std=0.1, mean=1.0)
        if cfg.norm == "layer":
            b = g.weight(f"{prefix}.bias", [cfg.hidden], std=0.1)
            return g.op("LayerNormalization", x, w, b, axis=-1, epsilon=cfg.eps)
        return rms_norm(g, x, w, cfg.eps)


# -- linear and heads --

def linear(g, x, prefix, n_in, n_out, bias=False):
    """MatMul with an [in, out] weight, then Add bias."""
    y = g.op("MatMul", x, g.weight(f"{prefix}.weight", [n_in, n_out], std=n_in ** -0.5))
    if bias:
        y = g.op("Add", y, g.weight(f"{prefix}.bias", [n_out], std=0.1))
    return y


def split_heads(g, x, heads, head_dim):
    """[B, S, H*D] -> Reshape [B, S, H, D] -> Transpose [B, H, S, D]."""
    shape = g.shape_of(g.dim(x, 0), g.dim(x, 1), heads, head_dim)
    return g.op("Transpose", g.op("Reshape", x, shape), perm=[0, 2, 1, 3])


def merge_heads(g, x, width):
    """[B, H, S, D] -> Transpose [B, S, H, D] -> Reshape [B, S, H*D]."""
    t = g.op("Transpose", x, perm=[0, 2, 1, 3])
    return g.op("Reshape", t, g.shape_of(g.dim(t, 0), g.dim(t, 1), width))


# -- rotary --

def inv_freq(rotary_dim, theta):
    return (1.0 / theta ** (np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)).astype(np.float32)


def rotary_tables(g, inv_freq_name, seq):
    """cos, sin [S, R] from positions Range(0, S) and inv_freq [R/2].

    freqs = Transpose(inv_freq[:, None] @ positions[None, :]); emb = Concat(freqs, freqs).
    """
    positions = g.op("Cast", g.op("Range", g.const(0), seq, g.const(1)), to=FLOAT)
    freqs = g.op("MatMul", g.unsqueeze(inv_freq_name, 1), g.unsqueeze(positions, 0))
    freqs = g.op("Transpose", freqs, perm=[1, 0])
    emb = g.op("Concat", freqs, freqs, axis=-1)
    return g.op("Cos", emb), g.op("Sin", emb)


def rotate_half(g, x, half):
    """Concat(-x[..., half:], x[..., :half]) by Slice, Neg, Concat."""
    x1 = g.slice(x, [0], [half], [-1])
    x2 = g.slice(x, [half], [INT64_MAX], [-1])
    return g.op("Concat", g.op("Neg", x2), x1, axis=-1)


def rope(g, x, cos, sin, rotary_dim, head_dim):
    """x·cos + rotate_half(x)·sin on the first rotary_dim features, the rest untouched."""
    if rotary_dim == head_dim:
        rot, rest = x, None
    else:
        rot = g.slice(x, [0], [rotary_dim], [-1])
        rest = g.slice(x, [rotary_dim], [INT64_MAX], [-1])
    y = g.op("Add", g.op("Mul", rot, cos), g.op("Mul", rotate_half(g, rot, rotary_dim // 2), sin))
    return y if rest is None else g.op("Concat", y, rest, axis=-1)


# -- attention --

def causal_mask(g, seq_len, window=0, chunk=0):
    """[S, S] additive mask: finfo.min above the diagonal, 0 elsewhere (Trilu upper, k=1);
    with a window W, also finfo.min at and below the W-th diagonal under it (Trilu lower,
    k=-W); with chunks of C, also finfo.min where Div(i, C) != Div(j, C) (Llama 4's chunked
    attention). seq_len: S as an int64 scalar."""
    seq = g.unsqueeze(seq_len, 0)
    full = g.op("ConstantOfShape", g.op("Concat", seq, seq, axis=0),
                value=_scalar(FLOAT32_MIN))
    mask = g.op("Trilu", full, g.const(1), upper=1)
    if window:
        mask = g.op("Add", mask, g.op("Trilu", full, g.const(-window), upper=0))
    if chunk:
        which = g.op("Div", g.op("Range", g.const(0), seq_len, g.const(1)), g.const(chunk))
        same = g.op("Equal", g.unsqueeze(which, 1), g.unsqueeze(which, 0))
        mask = g.op("Add", mask, g.op("Where", same, g.const(0.0), g.const(FLOAT32_MIN)))
    return mask


def repeat_kv(g, x, n_rep, kv_heads, head_dim):
    """[B, Hkv, S, D] -> Unsqueeze(2) -> Expand [B, Hkv, n_rep, S, D] -> Reshape [B, Hkv*n_rep, S, D]."""
    if n_rep == 1:
        return x
    b, s = g.dim(x, 0), g.dim(x, 2)
    e = g.op("Expand", g.unsqueeze(x, 2), g.shape_of(b, kv_heads, n_rep, s, head_dim))
    return g.op("Reshape", e, g.shape_of(b, kv_heads * n_rep, s, head_dim))


def attention_core(g, q, k, v, mask, head_dim):
    """Softmax(q·kᵀ / sqrt(D) + mask)·v on [B, H, S, D]."""
    scores = g.op("MatMul", q, g.op("Transpose", k, perm=[0, 1, 3, 2]))
    scores = g.op("Div", scores, g.const(math.sqrt(head_dim)))
    probs = g.op("Softmax", g.op("Add", scores, mask), axis=-1)
    return g.op("MatMul", probs, v)


def self_attention(g, cfg, x, prefix, cos, sin, mask):
    D, H, Hkv = cfg.head_dim, cfg.heads, cfg.kv_heads
    with g.scope("self_attn"):
        q = linear(g, x, f"{prefix}.q_proj", cfg.hidden, H * D, cfg.qkv_bias)
        k = linear(g, x, f"{prefix}.k_proj", cfg.hidden, Hkv * D, cfg.qkv_bias)
        v = linear(g, x, f"{prefix}.v_proj", cfg.hidden, Hkv * D, cfg.qkv_bias)
        q = rope(g, split_heads(g, q, H, D), cos, sin, cfg.rotary_dim, D)
        k = rope(g, split_heads(g, k, Hkv, D), cos, sin, cfg.rotary_dim, D)
        v = split_heads(g, v, Hkv, D)
        k = repeat_kv(g, k, H // Hkv, Hkv, D)
        v = repeat_kv(g, v, H // Hkv, Hkv, D)
        y = merge_heads(g, attention_core(g, q, k, v, mask, D), H * D)
        return linear(g, y, f"{prefix}.o_proj", H * D, cfg.hidden)


# -- MLPs --

def swiglu_mlp(g, cfg, x, prefix):
    """down(silu(gate(x)) * up(x)) with silu as Mul(x, Sigmoid(x))."""
    with g.scope("mlp"):
        gate = linear(g, x, f"{prefix}.gate_proj", cfg.hidden, cfg.ffn)
        up = linear(g, x, f"{prefix}.up_proj", cfg.hidden, cfg.ffn)
        act = g.op("Mul", g.op("Mul", gate, g.op("Sigmoid", gate)), up)
        return linear(g, act, f"{prefix}.down_proj", cfg.ffn, cfg.hidden)


def llama4_moe(g, cfg, x, prefix):
    """Llama 4's experts as transformers exports them: every expert on every token, the token
    scaled by its routing weight (the sigmoid of its best router logits, 0 for the other
    experts), summed over the experts, beside a shared SwiGLU expert."""
    E, H, I = cfg.experts, cfg.hidden, cfg.ffn
    with g.scope("feed_forward"):
        flat = g.op("Reshape", x, g.ints(-1, H))
        router = g.weight(f"{prefix}.router.weight", [E, H], std=H ** -0.5)
        logits = g.op("Gemm", flat, router, transB=1)
        values, chosen = g.op("TopK", logits, g.ints(cfg.experts_per_token), axis=-1, outputs=2)
        hidden = g.op("Expand", g.const(-math.inf), g.op("Shape", logits))
        w = g.op("Sigmoid", g.op("ScatterElements", hidden, chosen, values, axis=1))
        scaled = g.op("Mul", g.op("Tile", flat, g.ints(E, 1)),
                      g.op("Reshape", g.op("Transpose", w, perm=[1, 0]), g.ints(-1, 1)))
        gate_up = g.weight(f"{prefix}.experts.gate_up_proj", [E, H, 2 * I], std=H ** -0.5)
        down = g.weight(f"{prefix}.experts.down_proj", [E, I, H], std=I ** -0.5)
        h = g.op("MatMul", g.op("Reshape", scaled, g.ints(E, -1, H)), gate_up)
        gate, up = g.op("Split", h, g.ints(I, I), axis=2, outputs=2)
        act = g.op("Mul", up, g.op("Mul", gate, g.op("Sigmoid", gate)))
        routed = g.op("ReduceSum", g.op("MatMul", act, down), g.ints(0), keepdims=0)
        y = g.op("Add", swiglu_mlp(g, cfg, flat, f"{prefix}.shared_expert"), routed)
        return g.op("Reshape", y, g.op("Shape", x))


def gelu_erf(g, x):
    """x/2 · (1 + erf(x/√2)) as torch exports it: Div, Erf, Add, Mul, Mul."""
    e = g.op("Erf", g.op("Div", x, g.const(math.sqrt(2.0))))
    return g.op("Mul", g.op("Mul", x, g.op("Add", e, g.const(1.0))), g.const(0.5))


def gelu_mlp(g, cfg, x, prefix):
    with g.scope("mlp"):
        h = gelu_erf(g, linear(g, x, f"{prefix}.fc_in", cfg.hidden, cfg.ffn, bias=True))
        return linear(g, h, f"{prefix}.fc_out", cfg.ffn, cfg.hidden, bias=True)


# -- the whole model --

def decoder_layer(g, cfg, i, x, cos, sin, mask):
    prefix = f"model.layers.{i}"
    with g.scope(f"layers.{i}"):
        attn = self_attention(g, cfg, norm(g, cfg, x, f"{prefix}.input_layernorm"),
                              f"{prefix}.self_attn", cos, sin, mask)
        mlp = swiglu_mlp if cfg.mlp_of(i) == "swiglu" else gelu_mlp
        if cfg.experts:
            mlp = llama4_moe
        if cfg.parallel_residual:
            m = mlp(g, cfg, norm(g, cfg, x, f"{prefix}.post_attention_layernorm"), f"{prefix}.mlp")
            return g.op("Add", g.op("Add", x, attn), m)
        h = g.op("Add", x, attn)
        m = mlp(g, cfg, norm(g, cfg, h, f"{prefix}.post_attention_layernorm"), f"{prefix}.mlp")
        return g.op("Add", h, m)


def decoder(g, cfg, ids_name="input_ids", logits_name="logits", between_layers=None, seq="seq"):
    """ids [batch, seq] -> logits [batch, seq, vocab].

    `between_layers(g, i, h)`, when given, rewrites the residual stream after layer i
    (i = -1: the embedded tokens, before the first layer). `seq` is the sequence
    dim: a symbol, or a number for an export that fixed it.
    """
    cfg.check()
    ids = g.input(ids_name, INT64, ["batch", seq])
    with g.scope("model"):
        wte = g.weight("model.embed_tokens.weight", [cfg.vocab, cfg.hidden], std=1.0)
        h = g.op("Gather", wte, ids, axis=0)
        seq_len = g.size(ids, 1)
        with g.scope("rotary_emb"):
            freq = g.tensor("model.rotary_emb.inv_freq", inv_freq(cfg.rotary_dim, cfg.rope_theta))
            cos, sin = rotary_tables(g, freq, seq_len)
        mask = causal_mask(g, seq_len, cfg.sliding_window, cfg.attention_chunk)
        if between_layers:
            h = between_layers(g, -1, h)
        for i in range(cfg.layers):
            h = decoder_layer(g, cfg, i, h, cos, sin, mask)
            if between_layers:
                h = between_layers(g, i, h)
        h = norm(g, cfg, h, "model.norm")
    with g.scope("lm_head"):
        if cfg.tied:
            head = g.op("Transpose", wte, perm=[1, 0])
        else:
            head = g.weight("lm_head.weight", [cfg.hidden, cfg.vocab], std=cfg.hidden ** -0.5)
        logits = g.op("MatMul", h, head)
    return g.output(logits, logits_name, FLOAT, ["batch", seq, cfg.vocab])


def _scalar(value):
    return numpy_helper.from_array(np.array([value], dtype=np.float32))
