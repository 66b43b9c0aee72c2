"""Self-test of samples/: every export, reference, structure preset and token file.

    .venv/bin/python tests/lit/Inputs/check_samples.py

Exports each model (plain and --fold-constants), checks the graph contract
with onnx.checker, evaluates the graph with onnx_eval (no ONNX Runtime) at the
reference batch and at another batch and seq, checks that gradient keys name
initializers, writes every structure preset (small, fast, data-less) and
checks the tiny one with data against fused_math. Exits non-zero on failure.
"""
import dataclasses
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import TensorProto, numpy_helper

HERE = Path(__file__).resolve().parent
SAMPLES = HERE.parents[2] / "samples"
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(SAMPLES))

import export  # noqa: E402
import fused_math as fm  # noqa: E402
import models  # noqa: E402
import onnx_eval  # noqa: E402
import structure_model  # noqa: E402

failures = []


def expect(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL", what)


def rel_err(a, b):
    return np.abs(a - b).max() / max(1.0, np.abs(b).max())


def check_contract(name, m):
    (inp,), (out,) = m.graph.input, m.graph.output
    dims = lambda v: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]  # noqa: E731
    expect(inp.name == "input_ids" and inp.type.tensor_type.elem_type == TensorProto.INT64
           and dims(inp) == ["batch", "seq"], f"{name}: input {inp.name} {dims(inp)}")
    expect(out.name == "logits" and dims(out) == ["batch", "seq", models.VOCAB],
           f"{name}: output {out.name} {dims(out)}")


def check_export(name, tmp):
    net = models.build(name)
    for fold in (False, True):
        tag = f"{name}{' --fold-constants' if fold else ''}"
        path = str(tmp / f"{name}{'.folded' if fold else ''}.onnx")
        export.export(net, path, fold)
        m = onnx.load(path)
        check_contract(tag, m)
        onnx.checker.check_model(m, full_check=True)
        for b, s in ((3, 5), (1, 23)):
            ids = np.random.default_rng(s).integers(0, models.VOCAB, (b, s))
            with torch.no_grad():
                want = net(torch.from_numpy(ids)).numpy()
            got = onnx_eval.run(m, {"input_ids": ids})["logits"]
            expect(rel_err(got, want) < 1e-4, f"{tag}: logits at batch {b} seq {s} off by {rel_err(got, want):.1e}")
        if not fold:
            inits = {t.name for t in m.graph.initializer}
    ref = export.reference(models.build(name), export.token_batch(2, 16, 0), 2, 16)
    grads = [k[5:] for k in ref if k.startswith("grad/")]
    expect(set(grads) <= inits, f"{name}: gradients of non-initializers {sorted(set(grads) - inits)}")
    got = onnx_eval.run(m, {"input_ids": ref["input_ids"]}, float64=True)["logits"]
    expect(rel_err(got, ref["logits"]) < 1e-4, f"{name}: reference logits off by {rel_err(got, ref['logits']):.1e}")
    loss = fm.cross_entropy(ref["logits"], ref["targets"])
    expect(abs(loss - ref["loss"]) < 1e-10, f"{name}: reference loss {ref['loss']} != {loss}")
    expect(np.array_equal(ref["input_ids"][1], ref["tokens"][16:32]) and
           np.array_equal(ref["targets"][1], ref["tokens"][17:33]), f"{name}: windows do not follow design.md")


def check_structure(tmp):
    for preset in structure_model.PRESETS:
        path = tmp / f"{preset}.onnx"
        start = time.time()
        subprocess.run([sys.executable, str(SAMPLES / "structure_model.py"), "--preset", preset,
                        "-o", str(path)], check=True)
        took, size = time.time() - start, path.stat().st_size
        m = onnx.load(str(path))
        dataless = all(not (t.raw_data or t.float_data) for t in m.graph.initializer
                       if t.name != "model.rotary_emb.inv_freq")
        expect(dataless and size < 10 << 20 and took < 10,
               f"structure {preset}: {size} bytes in {took:.1f}s, data-less {dataless}")
        print(f"structure {preset:12} {size / 1e6:5.2f} MB {took:4.1f}s {len(m.graph.node)} nodes")
    tiny = structure_model.PRESETS["tiny"]
    # As is, with a window of 3 keys, in chunks of 5 under a window of 3, and with Llama 4's
    # experts (4, 2 per token).
    for shape in (tiny, dataclasses.replace(tiny, sliding_window=3),
                  dataclasses.replace(tiny, sliding_window=3, attention_chunk=5),
                  dataclasses.replace(tiny, experts=4, experts_per_token=2)):
        m = structure_model.build(shape, with_data=True, seed=1)
        onnx.checker.check_model(m, full_check=True)
        ids = np.random.default_rng(0).integers(0, shape.vocab, (2, 12))
        w = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in m.graph.initializer}
        got = onnx_eval.run(m, {"input_ids": ids}, float64=True)["logits"]
        expect(rel_err(got, fm.decoder(w, shape, ids)) < 1e-6,
               f"structure tiny --with-data (window {shape.sliding_window}, chunk "
               f"{shape.attention_chunk}, experts {shape.experts}) differs from fused_math")


def check_cli(tmp):
    py = sys.executable
    tokens = tmp / "corpus.u32"
    subprocess.run([py, str(SAMPLES / "make_tokens.py"), "-o", str(tokens)], check=True)
    t = np.fromfile(tokens, "<u4")
    expect(t.size > 100000 and t.max() < 256, f"make_tokens: {t.size} tokens, max {t.max()}")
    ref = tmp / "ref.npz"
    subprocess.run([py, str(SAMPLES / "export.py"), "--model", "tiny-llama", "-o", str(tmp / "cli.onnx"),
                    "--reference", str(ref), "--tokens", str(tokens), "--batch", "3", "--seq", "8"], check=True)
    r = np.load(ref)
    expect(r["logits"].shape == (3, 8, 256) and np.array_equal(r["tokens"], t[:25]),
           f"export --reference --tokens: logits {r['logits'].shape}")


def main():
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for name in models.MODELS:
            start = time.time()
            check_export(name, tmp)
            print(f"export {name:16} {time.time() - start:4.1f}s")
        check_structure(tmp)
        check_cli(tmp)
    print("FAILED:\n  " + "\n  ".join(failures) if failures else "all samples ok")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
