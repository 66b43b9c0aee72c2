"""Export gated DeltaNet layers (Qwen3.5, Qwen3.5 MoE, Qwen3-Next, OLMo
hybrid, Lara 4 Mini) and Kimi Delta Attention layers (Kimi Linear, Ling's
hybrid: the same rule with a decay per key channel; GLM-5 Next's scan is
swapped too, its model not tried) for MegaTrain: each layer's scan becomes
one ai.megatrain.GatedDeltaRule node.

torch's exporter traces transformers' chunked scan as a Python loop over a
sequence length it then fixes, unrolled, which no layer template can
stream. install() swaps that scan for a custom op that exports as one node
(docs/importer.md, "Linear attention"), with queries and keys
L2-normalized and the query scaled by 1/√Dk beforehand, in ordinary ops:

    import gated_delta_node                      # tools/ on sys.path
    table = gated_delta_node.install()
    torch.onnx.export(model, (ids,), "model.onnx", dynamo=True,
                      custom_translation_table=table, ...)

Run in the export venv (tools/install-export-venv.sh): needs torch,
transformers and onnxscript.
"""
import importlib

import torch

from scan_node import scan_node

# transformers' module -> the chunked scan it calls.
SCANS = {name: "torch_chunk_gated_delta_rule"
         for name in ("qwen3_5", "qwen3_5_moe", "qwen3_next", "olmo_hybrid", "lara_mini")}
SCANS.update({name: "chunk_kimi_delta_attention"
              for name in ("kimi_linear", "bailing_hybrid", "glm5_next")})
MODULES = tuple(SCANS)


def _recurrent(q, k, v, g, beta):
    """The rule position by position, in float32 (eager runs only); g
    [B, S, Hv] decays the whole state, g [B, S, Hv, Dk] each key row."""
    group = v.shape[2] // q.shape[2]
    q, k = q.repeat_interleave(group, 2).float(), k.repeat_interleave(group, 2).float()
    state = v.new_zeros(v.shape[0], v.shape[2], q.shape[3], v.shape[3], dtype=torch.float32)
    out = []
    for t in range(v.shape[1]):
        decay = g[:, t].float().exp()
        state = state * (decay[..., None] if g.dim() == 4 else decay[..., None, None])
        kt = k[:, t]
        delta = beta[:, t, :, None].float() * (v[:, t].float() - torch.einsum("bhkv,bhk->bhv", state, kt))
        state = state + kt[..., :, None] * delta[..., None, :]
        out.append(torch.einsum("bhkv,bhk->bhv", state, q[:, t]))
    return torch.stack(out, 1).to(v.dtype)


def _l2norm(x, eps=1e-6):
    # transformers' (and FLA's) l2norm: x / √(Σx² + eps) over the head.
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + eps)


def install():
    """Routes the chunked scan of every module in MODULES through the custom
    op; returns the custom_translation_table for torch.onnx.export."""
    op, table = scan_node("gated_delta_rule", "GatedDeltaRule", _recurrent)

    def chunk_gated_delta_rule(query, key, value, g, beta, chunk_size=64, initial_state=None,
                               output_final_state=False, use_qk_l2norm_in_kernel=False, **kwargs):
        if initial_state is not None or output_final_state:
            raise NotImplementedError("a recurrent state (a cache) does not export for training")
        if use_qk_l2norm_in_kernel:
            query, key = _l2norm(query), _l2norm(key)
        query = query * query.shape[-1] ** -0.5
        return op(query, key, value, g, beta), None

    for name, scan in SCANS.items():
        module = importlib.import_module(f"transformers.models.{name}.modeling_{name}")
        setattr(module, scan, chunk_gated_delta_rule)
    return table
