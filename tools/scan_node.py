"""The custom op behind each scan node that tools/gated_delta_node.py,
tools/mamba_node.py, tools/mamba2_node.py and tools/lightning_node.py
export (docs/importer.md, "Linear attention"): run eagerly it computes the scan position by position;
torch.onnx.export writes it as one ai.megatrain node with inputs (q, k, v,
g, beta), or (q, k, v, rate) for a constant decay, and v's shape.

Run in the export venv (tools/install-export-venv.sh).
"""
import onnx
import onnxscript
import torch

DOMAIN = "ai.megatrain"


def linear_recurrent(q, k, v, g, beta):
    """GatedLinearRule's scan position by position, in float32 (eager runs
    only): per batch and value head S ← e^g·S + k·(beta·v)ᵀ, o = Sᵀq; g
    [B, S, Hv] decays the whole state, g [B, S, Hv, Dk] each key row."""
    group = v.shape[2] // q.shape[2]
    q, k = q.repeat_interleave(group, 2).float(), k.repeat_interleave(group, 2).float()
    state = v.new_zeros(v.shape[0], v.shape[2], q.shape[3], v.shape[3], dtype=torch.float32)
    out = []
    for t in range(v.shape[1]):
        decay = g[:, t].float().exp()
        state = state * (decay[..., None] if g.dim() == 4 else decay[..., None, None])
        w = beta[:, t, :, None].float() * v[:, t].float()
        state = state + k[:, t][..., :, None] * w[..., None, :]
        out.append(torch.einsum("bhkv,bhk->bhv", state, q[:, t]))
    return torch.stack(out, 1).to(v.dtype)


def _register_schema(node, inputs):
    try:
        onnx.defs.get_schema(node, 1, DOMAIN)
        return
    except onnx.defs.SchemaError:
        pass
    types = [("T", ["tensor(float)", "tensor(float16)", "tensor(bfloat16)"], "")]
    onnx.defs.register_schema(onnx.defs.OpSchema(
        node, DOMAIN, 1,
        inputs=[onnx.defs.OpSchema.FormalParameter(n, "T") for n in inputs],
        outputs=[onnx.defs.OpSchema.FormalParameter("o", "T")],
        type_constraints=types))


def scan_node(op_name, node, recurrent, decay_rate=False):
    """The op megatrain::<op_name>, computing recurrent(q, k, v, g, beta)
    eagerly, and the custom_translation_table entry that exports it as
    ai.megatrain.<node>; returns (op, table). With decay_rate the op takes
    (q, k, v, rate) instead, rate one decay per value head (any shape of Hv
    elements): g = −rate at every position, beta = 1."""
    if not hasattr(torch.ops.megatrain, op_name):
        if decay_rate:
            def scan(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     rate: torch.Tensor) -> torch.Tensor:
                g = -rate.reshape(1, 1, -1).to(v.dtype).expand(*v.shape[:3])
                return recurrent(q, k, v, g, torch.ones_like(g))
            fake = lambda q, k, v, rate: torch.empty_like(v)  # noqa: E731
        else:
            def scan(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                     beta: torch.Tensor) -> torch.Tensor:
                return recurrent(q, k, v, g, beta)
            fake = lambda q, k, v, g, beta: torch.empty_like(v)  # noqa: E731

        op = torch.library.custom_op(f"megatrain::{op_name}", mutates_args=())(scan)
        op.register_fake(fake)
    op = getattr(torch.ops.megatrain, op_name)
    inputs = ("q", "k", "v", "rate") if decay_rate else ("q", "k", "v", "g", "beta")
    _register_schema(node, inputs)
    opset = onnxscript.values.Opset(DOMAIN, 1)

    def to_onnx(*args):
        return getattr(opset, node)(*args)

    return op, {op.default: to_onnx}
