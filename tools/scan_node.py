"""The custom op behind each scan node that tools/gated_delta_node.py and
tools/mamba2_node.py export (docs/importer.md, "Linear attention"): run
eagerly it computes the scan position by position; torch.onnx.export
writes it as one ai.megatrain node with inputs (q, k, v, g, beta) and
v's shape.

Run in the export venv (tools/install-export-venv.sh).
"""
import onnx
import onnxscript
import torch

DOMAIN = "ai.megatrain"


def _register_schema(node):
    try:
        onnx.defs.get_schema(node, 1, DOMAIN)
        return
    except onnx.defs.SchemaError:
        pass
    types = [("T", ["tensor(float)", "tensor(float16)", "tensor(bfloat16)"], "")]
    onnx.defs.register_schema(onnx.defs.OpSchema(
        node, DOMAIN, 1,
        inputs=[onnx.defs.OpSchema.FormalParameter(n, "T") for n in ("q", "k", "v", "g", "beta")],
        outputs=[onnx.defs.OpSchema.FormalParameter("o", "T")],
        type_constraints=types))


def scan_node(op_name, node, recurrent):
    """The op megatrain::<op_name>, computing recurrent(q, k, v, g, beta)
    eagerly, and the custom_translation_table entry that exports it as
    ai.megatrain.<node>; returns (op, table)."""
    if not hasattr(torch.ops.megatrain, op_name):
        def scan(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                 beta: torch.Tensor) -> torch.Tensor:
            return recurrent(q, k, v, g, beta)

        op = torch.library.custom_op(f"megatrain::{op_name}", mutates_args=())(scan)
        op.register_fake(lambda q, k, v, g, beta: torch.empty_like(v))
    op = getattr(torch.ops.megatrain, op_name)
    _register_schema(node)
    opset = onnxscript.values.Opset(DOMAIN, 1)

    def to_onnx(q, k, v, g, beta):
        return getattr(opset, node)(q, k, v, g, beta)

    return op, {op.default: to_onnx}
