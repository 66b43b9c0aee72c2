"""Writes broken or altered model files, for the importer's error tests.

    python corrupt.py empty OUT                        a zero-byte file
    python corrupt.py truncate IN OUT [--fraction F]   the first F (default 0.5)
                                                       of IN's bytes, cut
                                                       mid-file
    python corrupt.py text OUT                         a short text file, not
                                                       protobuf
    python corrupt.py static-dim IN OUT INPUT AXIS N   IN with dim AXIS of graph
                                                       input INPUT fixed to N
                                                       (a model exported with a
                                                       static shape)
    python corrupt.py opset IN OUT N                   IN claiming to import
                                                       opset N of the default
                                                       domain
    python corrupt.py retype IN OUT NODE OP [--name N] IN with node NODE's op
                                                       type changed to OP (and
                                                       its name to N): a near
                                                       miss of an idiom
"""
import argparse
import sys
from pathlib import Path

# Starts with 'T' (0x54): protobuf field 10 with wire type 4 (end group), which
# no parser accepts as the first byte of a message.
TEXT = "This is a text file, not an ONNX model.\n"


def truncate(src, out, fraction):
    data = Path(src).read_bytes()
    cut = int(len(data) * fraction)
    if not 0 < cut < len(data):
        sys.exit(f"corrupt.py: --fraction {fraction} of {len(data)} bytes leaves nothing to cut")
    Path(out).write_bytes(data[:cut])


def static_dim(src, out, name, axis, value):
    import onnx  # only this mode needs it

    model = onnx.load(src, load_external_data=False)
    inputs = [i for i in model.graph.input if i.name == name]
    if not inputs:
        sys.exit(f"corrupt.py: {src} has no graph input '{name}'")
    dims = inputs[0].type.tensor_type.shape.dim
    if not 0 <= axis < len(dims):
        sys.exit(f"corrupt.py: input '{name}' has no dim {axis}")
    dims[axis].dim_value = value  # replaces dim_param (a oneof)
    onnx.save(model, out)


def set_opset(src, out, version):
    import onnx

    model = onnx.load(src, load_external_data=False)
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = version
    onnx.save(model, out)


def retype(src, out, node, op, name):
    import onnx

    model = onnx.load(src, load_external_data=False)
    nodes = [n for n in model.graph.node if n.name == node]
    if not nodes:
        sys.exit(f"corrupt.py: {src} has no node '{node}'")
    nodes[0].op_type = op
    if name:
        nodes[0].name = name
    onnx.save(model, out)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="mode", required=True)
    sub.add_parser("empty").add_argument("out")
    t = sub.add_parser("truncate")
    t.add_argument("src")
    t.add_argument("out")
    t.add_argument("--fraction", type=float, default=0.5)
    sub.add_parser("text").add_argument("out")
    s = sub.add_parser("static-dim")
    for arg, kind in (("src", str), ("out", str), ("input", str), ("axis", int), ("value", int)):
        s.add_argument(arg, type=kind)
    o = sub.add_parser("opset")
    for arg, kind in (("src", str), ("out", str), ("version", int)):
        o.add_argument(arg, type=kind)
    r = sub.add_parser("retype")
    for arg in ("src", "out", "node", "op"):
        r.add_argument(arg)
    r.add_argument("--name")
    args = p.parse_args()
    if args.mode == "empty":
        Path(args.out).write_bytes(b"")
    elif args.mode == "truncate":
        truncate(args.src, args.out, args.fraction)
    elif args.mode == "text":
        Path(args.out).write_text(TEXT)
    elif args.mode == "static-dim":
        static_dim(args.src, args.out, args.input, args.axis, args.value)
    elif args.mode == "opset":
        set_opset(args.src, args.out, args.version)
    else:
        retype(args.src, args.out, args.node, args.op, args.name)


if __name__ == "__main__":
    main()
