"""Softmax, normalizations, Gelu and fused Attention, per the ONNX spec."""

import math

import torch

from .registry import OracleError, erf_gelu, norm_axis, op, tanh_gelu


def _softmax_handler(fn):
    """Opset < 13 coerces the input to 2-D at `axis` (default 1); 13+ works on one axis (default -1)."""

    def handler(node, x):
        if node.opset >= 13:
            return fn(x, norm_axis(node.attr("axis", -1), x.dim()))
        axis = norm_axis(node.attr("axis", 1), x.dim())
        flat = x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))
        return fn(flat, 1).reshape(x.shape)

    return handler


op("Softmax")(_softmax_handler(torch.softmax))
op("LogSoftmax")(_softmax_handler(torch.log_softmax))


def _normalized_dims(node, x):
    return list(range(norm_axis(node.attr("axis", -1), x.dim()), x.dim()))


@op("Conv", 11)
def _conv(node, x, w, b=None):
    """N-d convolution per the spec: explicit pads (begins, then ends), strides,
    dilations and groups; auto_pad other than NOTSET is not implemented."""
    if node.attr("auto_pad", "NOTSET") != "NOTSET":
        raise OracleError("Conv: only auto_pad NOTSET is implemented")
    dims = x.dim() - 2
    if dims not in (1, 2, 3):
        raise OracleError(f"Conv: {dims}-d convolutions are not implemented")
    pads = list(node.attr("pads", [0] * 2 * dims))
    # F.pad takes (last dim's begin, end, the one before's, ...).
    padding = []
    for d in reversed(range(dims)):
        padding += [pads[d], pads[d + dims]]
    conv = (torch.nn.functional.conv1d, torch.nn.functional.conv2d,
            torch.nn.functional.conv3d)[dims - 1]
    return conv(torch.nn.functional.pad(x, padding), w, b,
                stride=list(node.attr("strides", [1] * dims)),
                dilation=list(node.attr("dilations", [1] * dims)),
                groups=node.attr("group", 1))


@op("LayerNormalization", 17)
def _layer_norm(node, x, scale, bias=None):
    dims = _normalized_dims(node, x)
    mean = x.mean(dims, keepdim=True)
    centered = x - mean
    inv_std = torch.rsqrt((centered * centered).mean(dims, keepdim=True) + node.attr("epsilon", 1e-5))
    y = centered * inv_std * scale
    return [y if bias is None else y + bias, mean, inv_std]


def _rms_norm(node, x, scale):
    dims = _normalized_dims(node, x)
    inv_rms = torch.rsqrt((x * x).mean(dims, keepdim=True) + node.attr("epsilon", 1e-5))
    return x * inv_rms * scale, inv_rms


@op("RMSNormalization", 23)
def _rms_normalization(node, x, scale):
    return _rms_norm(node, x, scale)[0]


def _simplified_layer_norm(node, x, scale):
    y, inv_rms = _rms_norm(node, x, scale)
    return [y, inv_rms]


# onnxruntime registers it in the default domain; converters also emit it as com.microsoft.
op("SimplifiedLayerNormalization")(_simplified_layer_norm)
op("SimplifiedLayerNormalization", domain="com.microsoft")(_simplified_layer_norm)


@op("Gelu", 20)
def _gelu(node, x):
    approximate = node.attr("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise OracleError(f"Gelu approximate='{approximate}'")
    return erf_gelu(x) if approximate == "none" else tanh_gelu(x)


def _to_heads(t, num_heads):
    """[B, S, H*D] -> [B, H, S, D]."""
    b, s, hidden = t.shape
    return t.reshape(b, s, num_heads, hidden // num_heads).transpose(1, 2)


def _bias_from_mask(mask, dtype):
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, float("-inf"))
    return mask


@op("Attention", 23)
def _attention(node, q, k, v, mask=None, past_key=None, past_value=None, nonpad_kv_seqlen=None):
    """Follows the onnx reference: sqrt(scale) on Q and K, softcap before the bias,
    causal mask aligned bottom-right (query i sees keys j <= i + past length),
    K/V heads repeated interleaved ([h0, h0, h1, h1, ...]) for GQA."""
    if nonpad_kv_seqlen is not None:
        raise OracleError("Attention input nonpad_kv_seqlen is not supported")
    three_d = q.dim() == 3
    if three_d:
        q_heads, kv_heads = node.attr("q_num_heads"), node.attr("kv_num_heads")
        if not q_heads or not kv_heads:
            raise OracleError("3-D Attention needs q_num_heads and kv_num_heads")
        q, k, v = _to_heads(q, q_heads), _to_heads(k, kv_heads), _to_heads(v, kv_heads)
    present_key = k if past_key is None else torch.cat([past_key, k], 2)
    present_value = v if past_value is None else torch.cat([past_value, v], 2)
    k, v = present_key, present_value
    q_len, kv_len = q.shape[2], k.shape[2]

    scale = node.attr("scale", None)
    root_scale = math.sqrt(1.0 / math.sqrt(q.shape[3]) if scale is None else scale)
    bias = torch.zeros((q_len, kv_len), dtype=q.dtype)
    if mask is not None:
        bias = _bias_from_mask(mask, q.dtype)
        pad = kv_len - bias.shape[-1]  # a shorter mask leaves the trailing keys masked
        if pad > 0:
            bias = torch.nn.functional.pad(bias, (0, pad), value=float("-inf"))
    if node.attr("is_causal", 0):
        past = 0 if past_key is None else past_key.shape[2]
        i = torch.arange(q_len).unsqueeze(1)
        j = torch.arange(kv_len).unsqueeze(0)
        bias = bias + torch.zeros((q_len, kv_len), dtype=q.dtype).masked_fill(j > i + past, float("-inf"))

    if q.shape[1] != k.shape[1]:
        if q.shape[1] % k.shape[1]:
            raise OracleError(f"{q.shape[1]} query heads do not group over {k.shape[1]} kv heads")
        groups = q.shape[1] // k.shape[1]
        k = k.repeat_interleave(groups, 1)
        v = v.repeat_interleave(groups, 1)

    qk = torch.matmul(q * root_scale, (k * root_scale).transpose(2, 3))
    softcap = node.attr("softcap", 0.0)
    if softcap > 0:
        qk = softcap * torch.tanh(qk / softcap)
    scores = qk + bias
    probs = torch.softmax(scores, -1)
    y = torch.matmul(probs, v)
    if three_d:
        y = y.transpose(1, 2).reshape(y.shape[0], q_len, -1)
    mode = node.attr("qk_matmul_output_mode", 0)
    qk_out = {0: qk, 1: qk, 2: scores, 3: probs}[mode]
    return [y, present_key, present_value, qk_out]


def _gated_scan(name, q, k, v, g, beta, delta):
    """MegaTrain's gated scan nodes (docs/importer.md), position by position:
    per batch and value head a state M [Dk, Dv] from 0 decays by exp(g),
    takes the rank-1 update k·δᵀ with δ = beta·(v − Mᵀk) under the delta rule
    (beta·v without it), and reads out Mᵀq. Value head h reads key head
    h // (Hv / Hk). g [B, S, Hv] decays the whole state; g [B, S, Hv, Dk]
    decays row i of M by exp(g[..., i])."""
    if q.dim() != 4 or k.shape != q.shape or v.dim() != 4 or v.shape[2] % q.shape[2]:
        raise OracleError(f"{name}: q {tuple(q.shape)}, k {tuple(k.shape)}, "
                          f"v {tuple(v.shape)} are not [B, S, Hk, Dk] and [B, S, Hv, Dv]")
    group = v.shape[2] // q.shape[2]
    q, k = q.repeat_interleave(group, 2), k.repeat_interleave(group, 2)
    state = torch.zeros(v.shape[0], v.shape[2], q.shape[3], v.shape[3], dtype=v.dtype)
    out = []
    if g.dim() not in (3, 4) or (g.dim() == 4 and g.shape[3] != q.shape[3]):
        raise OracleError(f"{name}: g {tuple(g.shape)} is neither [B, S, Hv] nor [B, S, Hv, Dk]")
    for t in range(v.shape[1]):
        decay = torch.exp(g[:, t])
        state = state * (decay[..., None] if g.dim() == 4 else decay[..., None, None])
        kt = k[:, t]
        w = v[:, t] - torch.einsum("bhkv,bhk->bhv", state, kt) if delta else v[:, t]
        state = state + kt[..., :, None] * (beta[:, t, :, None] * w)[..., None, :]
        out.append(torch.einsum("bhkv,bhk->bhv", state, q[:, t]))
    return torch.stack(out, 1)


@op("GatedDeltaRule", 1, domain="ai.megatrain")
def _gated_delta_rule(node, q, k, v, g, beta):
    return _gated_scan("GatedDeltaRule", q, k, v, g, beta, delta=True)


@op("GatedLinearRule", 1, domain="ai.megatrain")
def _gated_linear_rule(node, q, k, v, g, beta):
    return _gated_scan("GatedLinearRule", q, k, v, g, beta, delta=False)


@op("DecayLinearRule", 1, domain="ai.megatrain")
def _decay_linear_rule(node, q, k, v, rate):
    """GatedLinearRule with g = −rate (one per value head) at every position
    and beta = 1."""
    if rate.numel() != v.shape[2]:
        raise OracleError(f"DecayLinearRule: rate {tuple(rate.shape)} does not hold one "
                          f"decay per value head ({v.shape[2]})")
    g = -rate.reshape(1, 1, -1).to(v.dtype).expand(*v.shape[:3])
    return _gated_scan("DecayLinearRule", q, k, v, g, torch.ones_like(g), delta=False)
