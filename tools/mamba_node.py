"""Export Mamba-1 layers (Mamba, Falcon Mamba, Jamba) for MegaTrain: each
layer's selective scan becomes one ai.megatrain.GatedLinearRule node.

transformers' scan without its CUDA kernels loops over the sequence, which
torch's exporter unrolls at a fixed length that no layer template can
stream. install() swaps that scan for a custom op that exports as one node
(docs/importer.md, "Linear attention"). Mamba-1's state is a [state]
vector per channel, each entry with its own decay: one value head of one
column per channel, all of them on one key head, the decay per key
channel. The discretization stays in ordinary ops:

    dt = softplus(dt + dt_bias)                       [B, T, D]
    y  = GatedLinearRule(q=C, k=B, v=x, g=dt·A, beta=dt) + D·x
         q, k [B, T, 1, N], v [B, T, D, 1], g [B, T, D, N]
    out = y · silu(z)

    import mamba_node                            # tools/ on sys.path
    table = mamba_node.install()
    torch.onnx.export(model, (ids,), "model.onnx", dynamo=True,
                      custom_translation_table=table, ...)

Run in the export venv (tools/install-export-venv.sh): needs torch,
transformers and onnxscript.
"""
import importlib

import torch.nn.functional as F

from scan_node import linear_recurrent, scan_node

MODULES = ("mamba", "falcon_mamba", "jamba")


def install():
    """Routes the selective scan of every module in MODULES through the
    custom op; returns the custom_translation_table for torch.onnx.export."""
    op, table = scan_node("gated_linear_rule", "GatedLinearRule", linear_recurrent)

    # transformers' layout: hidden_states, dt and z [B, D, T], A [D, N],
    # B and C [B, N, T].
    def mamba_selective_scan(hidden_states, dt, A, B, C, D=None, z=None, delta_bias=None,
                             delta_softplus=False, return_last_state=False, **kwargs):
        if return_last_state:
            raise NotImplementedError("a recurrent state (a cache) does not export for training")
        dtype = hidden_states.dtype
        if delta_bias is not None:
            dt = dt + delta_bias.to(dt.dtype)[..., None]
        if delta_softplus:
            dt = F.softplus(dt)
        x = hidden_states.transpose(1, 2).float()
        dt = dt.transpose(1, 2).float()
        q = C.transpose(1, 2).float()[:, :, None, :]
        k = B.transpose(1, 2).float()[:, :, None, :]
        y = op(q, k, x[..., None], dt[..., None] * A.float(), dt)[..., 0]
        if D is not None:
            y = y + x * D.float()
        y = y.transpose(1, 2)
        if z is not None:
            y = y * F.silu(z)
        return y.to(dtype)

    for name in MODULES:
        module = importlib.import_module(f"transformers.models.{name}.modeling_{name}")
        module.mamba_selective_scan = mamba_selective_scan
    return table
