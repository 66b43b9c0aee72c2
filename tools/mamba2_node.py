"""Export Mamba-2 layers (Mamba-2, Bamba, Nemotron-H, Falcon-H1, Granite 4
hybrids, Zamba2) for MegaTrain: each layer's state space scan becomes one
ai.megatrain.GatedLinearRule node.

torch's exporter traces transformers' chunked SSD scan with a sequence
length it then fixes (the chunk padding and the segment sums), which no
layer template can stream. install() swaps that scan for a custom op that
exports as one node (docs/importer.md, "Linear attention"); the
discretization around it stays in ordinary ops:

    dt = softplus(dt + dt_bias)            (clamped where the model says so)
    y  = GatedLinearRule(q=C, k=B, v=x, g=dt·A, beta=dt) + D·x

    import mamba2_node                           # tools/ on sys.path
    table = mamba2_node.install()
    torch.onnx.export(model, (ids,), "model.onnx", dynamo=True,
                      custom_translation_table=table, ...)

Run in the export venv (tools/install-export-venv.sh): needs torch,
transformers and onnxscript.
"""
import importlib
import math

import torch
import torch.nn.functional as F

from scan_node import linear_recurrent, scan_node

MODULES = ("mamba2", "bamba", "nemotron_h", "falcon_h1", "granitemoehybrid", "zamba2")


def install():
    """Routes the chunked scan of every module in MODULES through the custom
    op; returns the custom_translation_table for torch.onnx.export."""
    op, table = scan_node("gated_linear_rule", "GatedLinearRule", linear_recurrent)

    def mamba2_chunk_scan(hidden_states, dt, A, B, C, chunk_size, D=None, dt_bias=None,
                          initial_states=None, dt_softplus=False,
                          dt_limit=(0.0, float("inf")), return_final_states=False, **kwargs):
        if initial_states is not None or return_final_states:
            raise NotImplementedError("a recurrent state (a cache) does not export for training")
        if dt_bias is not None:
            dt = dt + dt_bias.to(dt.dtype)
        if dt_softplus:
            dt = F.softplus(dt)
        lo, hi = dt_limit
        if lo > 0 or not math.isinf(hi):  # softplus is ≥ 0 already
            dt = torch.clamp(dt, min=lo, max=hi)
        x = hidden_states.float()
        dt = dt.float()
        y = op(C.float(), B.float(), x, dt * A.float(), dt)
        if D is not None:
            y = y + x * D.float()[:, None]
        return y

    for name in MODULES:
        module = importlib.import_module(f"transformers.models.{name}.modeling_{name}")
        module.mamba2_chunk_scan = mamba2_chunk_scan
    return table
