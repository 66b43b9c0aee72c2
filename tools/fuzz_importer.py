"""Mutation fuzzing of the importer: bad input must end in one `error:` line.

Each round mutates one node of an exported model (an attribute's value, an
input re-pointed or swapped, the node removed or given another op type) or
truncates one initializer, compiles it with `megatrain compile`, and flags
any run that crashes, hangs, or fails without an `error:` line. Flagged
models are kept for reproduction.

    .venv/bin/python tools/fuzz_importer.py MODEL.onnx [--rounds 200] [--seed 1]
        [--megatrain build/tools/megatrain] [--keep DIR]
"""
import argparse
import copy
import os
import random
import subprocess
import sys
import tempfile

import onnx
from onnx import numpy_helper

OPS = ["Add", "Mul", "Reshape", "Transpose", "Gather", "Slice", "Concat", "Softmax",
       "MatMul", "Unsqueeze", "Loop", "SequenceAt", "Expand", "Where"]


def mutate_attribute(rng, node):
    a = rng.choice(list(node.attribute))
    if a.type == onnx.AttributeProto.INT:
        a.i = rng.choice([-5, -1, 0, 1, 2, 3, 7, 1 << 40])
    elif a.type == onnx.AttributeProto.INTS and len(a.ints):
        a.ints[rng.randrange(len(a.ints))] = rng.choice([-3, -1, 0, 1, 5, 99])
    elif a.type == onnx.AttributeProto.FLOAT:
        a.f = rng.choice([0.0, -1.0, 1e30, float("nan")])
    elif a.type == onnx.AttributeProto.TENSOR:
        arr = numpy_helper.to_array(a.t).copy()
        if arr.size:
            integral = arr.dtype.kind in "iub"
            arr.flat[rng.randrange(arr.size)] = (rng.choice([-7, 0, 3, 100000]) if integral
                                                 else rng.choice([0.0, -1e9, float("inf")]))
        a.t.CopyFrom(numpy_helper.from_array(arr, a.t.name))
    return f"attribute {a.name}"


def mutate(rng, model, names):
    """Mutates `model` in place; returns what it did."""
    g = model.graph
    node = rng.choice(list(g.node))
    where = f"node '{node.name}' ({node.op_type}): "
    kind = rng.randrange(6)
    if kind == 0 and node.attribute:
        return where + mutate_attribute(rng, node)
    if kind == 1 and node.input:
        i = rng.randrange(len(node.input))
        node.input[i] = rng.choice(names)
        return where + f"input {i} -> {node.input[i]}"
    if kind == 2 and len(node.input) > 1:
        a, b = rng.sample(range(len(node.input)), 2)
        node.input[a], node.input[b] = node.input[b], node.input[a]
        return where + f"inputs {a} and {b} swapped"
    if kind == 3 and g.initializer:
        t = rng.choice(list(g.initializer))
        arr = numpy_helper.to_array(t)
        if arr.size > 1:
            t.CopyFrom(numpy_helper.from_array(arr.reshape(-1)[: arr.size // 2], t.name))
            return f"initializer '{t.name}' truncated"
    if kind == 4:
        g.node.remove(node)
        return where + "removed"
    node.op_type = rng.choice(OPS)
    return where + f"op -> {node.op_type}"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model")
    p.add_argument("--rounds", type=int, default=200)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--megatrain", default="build/tools/megatrain")
    p.add_argument("--keep", default="fuzz-failures", help="where flagged models go")
    args = p.parse_args()
    rng = random.Random(args.seed)
    base = onnx.load(args.model)
    g = base.graph
    names = ([o for n in g.node for o in n.output] + [t.name for t in g.initializer]
             + [i.name for i in g.input])
    flagged = 0
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "mutant.onnx")
        for r in range(args.rounds):
            model = copy.deepcopy(base)
            what = mutate(rng, model, names)
            onnx.save(model, path)
            try:
                run = subprocess.run([args.megatrain, "compile", path, "--batch", "2",
                                      "--seq-len", "16"], capture_output=True, text=True,
                                     timeout=120)
                lines = run.stderr.strip().splitlines()
                ok = run.returncode in (0, 1, 2) and (
                    run.returncode == 0 or (lines and lines[-1].startswith("error:")))
                verdict = f"exit {run.returncode}: {lines[-1][:160] if lines else ''}"
            except subprocess.TimeoutExpired:
                ok, verdict = False, "no answer in 120 s"
            if not ok:
                flagged += 1
                os.makedirs(args.keep, exist_ok=True)
                keep = os.path.join(args.keep, f"seed{args.seed}-round{r}.onnx")
                onnx.save(model, keep)
                print(f"round {r}: {what}: {verdict} (kept {keep})")
    print(f"{args.rounds} rounds, {flagged} flagged")
    return 1 if flagged else 0


if __name__ == "__main__":
    sys.exit(main())
