"""Shared steps of the end-to-end tests: export a sample, compile it with
megatrain, run its trainer, and run the float64 oracle on the same model,
data and flags.

The build directory comes from MEGATRAIN_BUILD_DIR (ctest sets it).
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from safetensors.numpy import load_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("MEGATRAIN_BUILD_DIR", os.path.join(ROOT, "build"))
MEGATRAIN = os.path.join(BUILD, "tools", "megatrain")
PYTHON = sys.executable


def run(cmd, check=True, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if check and p.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


class Workdir:
    """A temporary directory holding exports, plans, data and logs."""

    def __init__(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="megatrain-e2e-")
        self.path = self._tmp.name

    def __call__(self, name):
        return os.path.join(self.path, name)

    def corpus(self):
        path = self("corpus.u32")
        if not os.path.exists(path):
            run([PYTHON, os.path.join(ROOT, "samples", "make_tokens.py"), "-o", path])
        return path

    def export(self, model, folded=False):
        path = self(model + ("-folded" if folded else "") + ".onnx")
        if not os.path.exists(path):
            cmd = [PYTHON, os.path.join(ROOT, "samples", "export.py"), "--model", model, "-o", path]
            run(cmd + (["--fold-constants"] if folded else []))
        return path

    def compile(self, onnx, out, *flags):
        run([MEGATRAIN, "compile", onnx, "-o", self(out), *flags])
        with open(os.path.join(self(out), "plan.json")) as f:
            return self(out), json.load(f)

    def train(self, plan_dir, *flags, check=True):
        return run([os.path.join(plan_dir, "trainer"), *flags], check=check, cwd=self.path)

    def oracle(self, onnx, plan, *flags):
        freeze = ",".join(plan.get("constant_initializers", []))
        cmd = [PYTHON, "-m", "tests.e2e.oracle.reference_train", onnx, *flags]
        if freeze:
            cmd += ["--freeze", freeze]
        return run(cmd, cwd=ROOT)


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


# A tensor whose reference gradient is far below the largest tensor's is
# measured against this fraction of the largest instead: a gradient that is
# zero in exact arithmetic (a key bias under softmax without rotary) comes
# out of float32 as rounding noise, whose size relative to zero means nothing.
ZERO_GRADIENT_SCALE = 1e-4


def gradient_errors(ours_path, ref_path):
    """L2 error per tensor relative to the reference's norm (floored at
    ZERO_GRADIENT_SCALE of the largest reference norm), and names only one
    side has."""
    ours, ref = load_file(ours_path), load_file(ref_path)
    common = [k for k in ours if k in ref]
    largest = max((np.linalg.norm(ref[k].astype(np.float64)) for k in common), default=0.0)
    errors = {}
    for k in common:
        diff = np.linalg.norm(ours[k].astype(np.float64) - ref[k].astype(np.float64))
        norm = np.linalg.norm(ref[k].astype(np.float64))
        errors[k] = float(diff / max(norm, ZERO_GRADIENT_SCALE * largest, 1e-30))
    return errors, sorted(set(ours) ^ set(ref))
