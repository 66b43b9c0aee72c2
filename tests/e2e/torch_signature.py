"""Prints, as JSON, what torch's exporter recorded about each input of the
exported program in MODEL.onnx (the graph's metadata
pkg.torch.export.ExportedProgram.graph_signature): {target: kind}, kind
PARAMETER, BUFFER or CONSTANT_TENSOR. Run with the export venv, whose onnx
reads graph metadata.

    .venv-export/bin/python tests/e2e/torch_signature.py MODEL.onnx
"""
import json
import re
import sys

import onnx

model = onnx.load(sys.argv[1], load_external_data=False)
text = {p.key: p.value for p in model.graph.metadata_props}.get(
    "pkg.torch.export.ExportedProgram.graph_signature", "")
kinds = {m.group(2): m.group(1) for m in re.finditer(
    r"^\S+: (PARAMETER|BUFFER|CONSTANT_TENSOR) target='([^']*)'", text, re.M)}
print(json.dumps(kinds))
