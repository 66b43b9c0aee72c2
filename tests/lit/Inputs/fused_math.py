"""The math of the mt primitives in float64 NumPy (see ir/MtOps.td).

Each idiom graph claims to compute one of these; idioms.py --check holds it to
that claim by evaluating the graph with onnx_eval and comparing.
"""
import math

import numpy as np

_erf = np.vectorize(math.erf, otypes=[np.float64])


def linear(x, w, b=None, w_layout="in_out"):
    y = x @ (w if w_layout == "in_out" else w.T)
    return y if b is None else y + b


def rms_norm(x, w=None, eps=1e-5):
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return y if w is None else y * w


def layer_norm(x, w=None, b=None, eps=1e-5):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    y = (x - mean) / np.sqrt(var + eps)
    y = y if w is None else y * w
    return y if b is None else y + b


def gelu(x, approximate="none"):
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + _erf(x / math.sqrt(2)))


def silu(x):
    return x / (1 + np.exp(-x))


def swiglu(gate, up):
    return silu(gate) * up


def rope(x, cos, sin, rotary_dim, seq_axis=2, interleaved=False):
    """x [B, H, S, D] (seq_axis 2) or [B, S, H, D] (seq_axis 1); cos, sin [S, R].
    interleaved: the pairs (2i, 2i+1) rotate (GPT-J) instead of (i, i + R/2)."""
    if seq_axis == 1:
        cos, sin = cos[:, None, :], sin[:, None, :]
    h = rotary_dim // 2
    rot, rest = x[..., :rotary_dim], x[..., rotary_dim:]
    if interleaved:
        rotated = np.stack([-rot[..., 1::2], rot[..., 0::2]], axis=-1).reshape(rot.shape)
    else:
        rotated = np.concatenate([-rot[..., h:], rot[..., :h]], axis=-1)
    return np.concatenate([rot * cos + rotated * sin, rest], axis=-1)


def rope_tables(positions, rotary_dim, theta=10000.0):
    inv_freq = 1.0 / theta ** (np.arange(0, rotary_dim, 2) / rotary_dim)
    freqs = np.outer(positions, inv_freq)
    emb = np.concatenate([freqs, freqs], axis=-1)
    return np.cos(emb), np.sin(emb)


def softcap(x, cap):
    return cap * np.tanh(x / cap)


def attention(q, k, v, scale, alibi=None, window=None, cap=None, sinks=None, chunk=None):
    """Causal attention; q [B, H, S, D], k and v [B, Hkv, S, D]; alibi: one
    slope per query head, adding slope · key position to the scores; window:
    query i sees keys i - window < j <= i; chunk: query i sees the keys of its
    chunk, j // chunk == i // chunk; cap: the scaled scores soft-capped
    before the masks; sinks: one more logit per query head in each row's
    softmax, weighing no value."""
    rep = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    s = q @ np.swapaxes(k, -1, -2) * scale
    if cap is not None:
        s = softcap(s, cap)
    n = s.shape[-1]
    if alibi is not None:
        s = s + np.asarray(alibi)[:, None, None] * np.arange(n)
    keep = np.tril(np.ones((n, n), bool))
    if window is not None:
        keep &= ~np.tril(np.ones((n, n), bool), -window)
    if chunk is not None:
        keep &= np.arange(n)[:, None] // chunk == np.arange(n)[None, :] // chunk
    s = np.where(keep, s, -np.inf)
    if sinks is not None:
        column = np.broadcast_to(np.asarray(sinks)[:, None, None], s.shape[:-1] + (1,))
        s = np.concatenate([s, column], axis=-1)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True))[..., :n] @ v


def heads(x, n):
    """[B, S, n*D] -> [B, n, S, D]."""
    b, s, _ = x.shape
    return x.reshape(b, s, n, -1).transpose(0, 2, 1, 3)


def merge(x):
    b, h, s, d = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, s, h * d)


def cross_entropy(logits, targets):
    z = logits - logits.max(axis=-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    return -np.take_along_axis(logp, targets[..., None], axis=-1).mean()


def decoder(w, cfg, ids):
    """The model of samples/decoder_graph.py from its weights `w` (name -> array)."""
    D, H, Hkv, R = cfg.head_dim, cfg.heads, cfg.kv_heads, cfg.rotary_dim
    S = ids.shape[1]
    cos, sin = rope_tables(np.arange(S), R, cfg.rope_theta)

    def norm(x, p):
        if cfg.norm == "layer":
            return layer_norm(x, w[p + ".weight"], w[p + ".bias"], cfg.eps)
        return rms_norm(x, w[p + ".weight"], cfg.eps)

    def lin(x, p, bias=False):
        return linear(x, w[p + ".weight"], w[p + ".bias"] if bias else None)

    def attn(x, p):
        q = rope(heads(lin(x, p + ".q_proj", cfg.qkv_bias), H), cos, sin, R)
        k = rope(heads(lin(x, p + ".k_proj", cfg.qkv_bias), Hkv), cos, sin, R)
        v = heads(lin(x, p + ".v_proj", cfg.qkv_bias), Hkv)
        a = attention(q, k, v, D ** -0.5, window=cfg.sliding_window or None,
                      chunk=cfg.attention_chunk or None)
        return lin(merge(a), p + ".o_proj")

    def mlp(x, p, kind):
        if cfg.experts:
            return moe(x, p)
        if kind == "swiglu":
            return lin(swiglu(lin(x, p + ".gate_proj"), lin(x, p + ".up_proj")), p + ".down_proj")
        return lin(gelu(lin(x, p + ".fc_in", True)), p + ".fc_out", True)

    def moe(x, p):
        """Llama 4's: each token's best experts on the token scaled by the sigmoid of their
        logits, plus the shared expert."""
        xs = x.reshape(-1, cfg.hidden)
        logits = xs @ w[p + ".router.weight"].T
        gate_up, down, I = w[p + ".experts.gate_up_proj"], w[p + ".experts.down_proj"], cfg.ffn
        shared = p + ".shared_expert"
        out = lin(swiglu(lin(xs, shared + ".gate_proj"), lin(xs, shared + ".up_proj")),
                  shared + ".down_proj")
        for t in range(xs.shape[0]):
            for e in np.argsort(-logits[t], kind="stable")[:cfg.experts_per_token]:
                h = xs[t] / (1 + np.exp(-logits[t, e])) @ gate_up[e]
                out[t] += swiglu(h[:I], h[I:]) @ down[e]
        return out.reshape(x.shape)

    h = w["model.embed_tokens.weight"][ids]
    for i in range(cfg.layers):
        p = f"model.layers.{i}"
        a = attn(norm(h, p + ".input_layernorm"), p + ".self_attn")
        if cfg.parallel_residual:
            h = h + a + mlp(norm(h, p + ".post_attention_layernorm"), p + ".mlp", cfg.mlp_of(i))
        else:
            h = h + a
            h = h + mlp(norm(h, p + ".post_attention_layernorm"), p + ".mlp", cfg.mlp_of(i))
    h = norm(h, "model.norm")
    head = w["model.embed_tokens.weight"].T if cfg.tied else w["lm_head.weight"]
    return h @ head
