"""Export MiniMax-01's lightning attention for MegaTrain: each linear
attention layer's scan becomes one ai.megatrain.DecayLinearRule node.

Lightning attention is linear attention with a constant decay per head,
S ← e^(−s_h)·S + k·vᵀ, o = Sᵀq, which transformers computes in blocks with
a Python loop over the sequence, and torch's exporter unrolls over a
sequence length it then fixes. install() swaps the layer's forward for one
that writes the scan as the node, which reads the layer's slope buffer
s as it is (an op on it would be folded by the ONNX optimizer into an
initializer torch's signature no longer names a buffer); the projections,
the output norm and gate stay ordinary ops:

    import lightning_node                        # tools/ on sys.path
    table = lightning_node.install()
    torch.onnx.export(model, (ids,), "model.onnx", dynamo=True,
                      custom_translation_table=table, ...)

Run in the export venv (tools/install-export-venv.sh).
"""
import torch
import torch.nn.functional as F

from scan_node import linear_recurrent, scan_node

MODULES = ("minimax",)


def install():
    """Routes MiniMaxLightningAttention through the custom op; returns the
    custom_translation_table for torch.onnx.export."""
    from transformers.models.minimax import modeling_minimax as mm

    op, table = scan_node("decay_linear_rule", "DecayLinearRule", linear_recurrent,
                           decay_rate=True)

    def forward(self, hidden_states, position_embeddings=None, attention_mask=None,
                cache=None, **kwargs):
        if cache is not None:
            raise NotImplementedError("a recurrent state (a cache) does not export for training")
        b, s, _ = hidden_states.shape
        heads, dim = self.num_attention_heads, self.head_dim
        qkv = self.act_fn(self.qkv_proj(hidden_states))
        qkv = mm.apply_mask_to_padding_states(qkv, attention_mask)
        q, k, v = torch.split(qkv.reshape(b, s, heads, 3 * dim), dim, dim=3)
        out = op(q.float(), k.float(), v.float(), self.slope_rate)
        out = self.norm(out.reshape(b, s, heads * dim).to(hidden_states.dtype))
        out = F.sigmoid(self.output_gate(hidden_states)) * out
        return self.out_proj(out), None

    mm.MiniMaxLightningAttention.forward = forward
    return table
