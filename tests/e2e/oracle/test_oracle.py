"""Model-level self-tests: the oracle against the torch modules it was exported from.

    .venv/bin/python -m unittest tests.e2e.oracle.test_oracle tests.e2e.oracle.test_ops
"""

import contextlib
import copy
import io
import json
import math
import os
import subprocess
import sys
import tempfile
import unittest
import warnings

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from safetensors.numpy import load_file

from . import reference_train
from .interpreter import OnnxModel
from .tiny_models import VOCAB, Float64Everywhere, build, export, match_params

TIGHT = 1e-10  # float64 graph against the float64 module
FLOAT32_GRAPH = 1e-6  # a float32 export carries float32-rounded constants (GELU's, eps...)
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def assert_close(test, actual, expected, rtol, what):
    """max |actual - expected| within rtol of max |expected|."""
    actual, expected = torch.as_tensor(actual), torch.as_tensor(expected)
    test.assertEqual(tuple(actual.shape), tuple(expected.shape), what)
    err = (actual - expected).abs().max().item()
    test.assertLessEqual(err, rtol * max(expected.abs().max().item(), 1e-30), f"{what}: max error {err}")


def module_loss_and_grads(module, ids, targets):
    """Loss and parameter gradients of the module, everything in float64."""
    module = copy.deepcopy(module).double()
    with Float64Everywhere():
        logits = module(ids)
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))
    grads = torch.autograd.grad(loss, list(module.parameters()))
    names = [n for n, _ in module.named_parameters()]
    return logits.detach(), dict(zip(names, grads))


class ExportedModels(unittest.TestCase):
    """(a) logits and (b) gradients of the interpreter equal the module's."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        warnings.filterwarnings("ignore")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def check(self, family, dtype, fold, rtol):
        module = build(family)
        exported = module.to(dtype)
        path = export(exported, os.path.join(self.tmp.name, f"{family}_{dtype}_{fold}.onnx"), dtype, fold)
        oracle = OnnxModel(path)
        matches = match_params(oracle, exported)
        if fold:  # the tied head was folded into a transposed copy of the embedding
            self.assertEqual(len(oracle.ties), 1)
            self.assertTrue(next(iter(oracle.ties.values())).transposed)

        gen = torch.Generator().manual_seed(1)
        ids = torch.randint(0, VOCAB, (3, 7), generator=gen)  # not the traced (2, 5)
        targets = torch.randint(0, VOCAB, (3, 7), generator=gen)
        logits = oracle.logits(ids)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))
        grads = dict(zip(oracle.params, torch.autograd.grad(loss, list(oracle.params.values()))))

        expected_logits, expected_grads = module_loss_and_grads(exported, ids, targets)
        assert_close(self, logits.detach(), expected_logits, rtol, "logits")
        for name, (module_name, transposed) in matches.items():
            expected = expected_grads[module_name]
            assert_close(self, grads[name], expected.t() if transposed else expected, rtol,
                         f"gradient of {name} ({module_name})")

    def test_llama(self):
        for dtype, fold, rtol in [(torch.float64, True, TIGHT), (torch.float64, False, TIGHT),
                                  (torch.float32, True, FLOAT32_GRAPH)]:
            with self.subTest(dtype=dtype, fold=fold):
                self.check("llama", dtype, fold, rtol)

    def test_gpt2(self):
        for dtype, fold, rtol in [(torch.float64, True, TIGHT), (torch.float64, False, TIGHT),
                                  (torch.float32, True, FLOAT32_GRAPH)]:
            with self.subTest(dtype=dtype, fold=fold):
                self.check("gpt2", dtype, fold, rtol)

    def test_hand_written(self):
        for dtype, fold, rtol in [(torch.float64, True, TIGHT), (torch.float64, False, TIGHT),
                                  (torch.float32, False, FLOAT32_GRAPH)]:
            with self.subTest(dtype=dtype, fold=fold):
                self.check("hand", dtype, fold, rtol)

    def test_external_data(self):
        path = export(build("gpt2"), os.path.join(self.tmp.name, "inline.onnx"), torch.float32)
        model = onnx.load(path)
        external = os.path.join(self.tmp.name, "external.onnx")
        onnx.save_model(model, external, save_as_external_data=True, location="external.data", size_threshold=0)
        ids = torch.randint(0, VOCAB, (2, 4))
        assert_close(self, OnnxModel(external).logits(ids).detach(), OnnxModel(path).logits(ids).detach(),
                     0.0, "logits with external data")


class Hyper:
    B, S, N, A = 2, 6, 5, 2
    LR, WARMUP, MIN_RATIO, WD, BETAS, EPS, CLIP = 1e-2, 2, 0.1, 0.1, (0.9, 0.95), 1e-8, 0.5

    @classmethod
    def flags(cls):
        return ["--batch", cls.B, "--seq-len", cls.S, "--steps", cls.N, "--grad-accum", cls.A,
                "--lr", cls.LR, "--warmup", cls.WARMUP, "--min-lr-ratio", cls.MIN_RATIO,
                "--weight-decay", cls.WD, "--beta1", cls.BETAS[0], "--beta2", cls.BETAS[1],
                "--eps", cls.EPS, "--clip-grad", cls.CLIP]

    @classmethod
    def lr(cls, t):
        if t < cls.WARMUP:
            return cls.LR * (t + 1) / cls.WARMUP
        low = cls.LR * cls.MIN_RATIO
        return low + 0.5 * (cls.LR - low) * (1 + math.cos(math.pi * (t - cls.WARMUP) / (cls.N - cls.WARMUP)))


def torch_training(module, tokens):
    """A plain torch.optim.AdamW loop over the module: the trajectory to match."""
    h = Hyper
    module = copy.deepcopy(module).double()
    params = list(module.parameters())
    optimizer = torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": h.WD},
                                   {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
                                  lr=h.LR, betas=h.BETAS, eps=h.EPS)
    n_windows = (len(tokens) - 1) // h.S
    losses, norms, first_grads = [], [], None
    for t in range(h.N):
        for group in optimizer.param_groups:
            group["lr"] = h.lr(t)
        optimizer.zero_grad()
        step_loss = 0.0
        for a in range(h.A):
            starts = [((t * h.A + a) * h.B + r) % n_windows * h.S for r in range(h.B)]
            rows = torch.tensor(np.stack([tokens[s:s + h.S + 1] for s in starts]).astype(np.int64))
            with Float64Everywhere():
                logits = module(rows[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, VOCAB), rows[:, 1:].reshape(-1))
            (loss / h.A).backward()
            step_loss += loss.item() / h.A
        if first_grads is None:
            first_grads = {n: p.grad.clone() for n, p in module.named_parameters()}
        norms.append(torch.nn.utils.clip_grad_norm_(params, h.CLIP).item())
        losses.append(step_loss)
        optimizer.step()
    return module, losses, norms, first_grads


class ReferenceTraining(unittest.TestCase):
    """(c) reference_train follows a hand-written torch AdamW loop; (d) bad token files fail cleanly."""

    @classmethod
    def setUpClass(cls):
        warnings.filterwarnings("ignore")
        cls.tmp = tempfile.TemporaryDirectory()
        cls.module = build("llama")
        cls.model_path = export(cls.module.double(), os.path.join(cls.tmp.name, "llama.onnx"))
        rng = np.random.default_rng(0)
        cls.tokens = rng.integers(0, VOCAB, size=41).astype("<u4")  # 6 windows: rows wrap
        cls.data = os.path.join(cls.tmp.name, "tokens.u32")
        cls.tokens.tofile(cls.data)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def run_main(self, *args):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = reference_train.main([str(a) for a in args])
        return rc, err.getvalue()

    def test_matches_torch_adamw(self):
        expected_module, losses, norms, first_grads = torch_training(self.module, self.tokens)

        log = os.path.join(self.tmp.name, "log.jsonl")
        dump = os.path.join(self.tmp.name, "grads.safetensors")
        rc, err = self.run_main(self.model_path, "--data", self.data, *Hyper.flags(),
                                "--log-jsonl", log, "--dump-grads", dump)
        self.assertEqual(rc, 0, err)
        with open(log) as f:
            records = [json.loads(line) for line in f]
        self.assertEqual([r["step"] for r in records], list(range(Hyper.N)))
        for r, loss, norm in zip(records, losses, norms):
            self.assertAlmostEqual(r["loss"], loss, delta=TIGHT * loss)
            self.assertAlmostEqual(r["grad_norm"], norm, delta=TIGHT * norm)
            self.assertAlmostEqual(r["lr"], Hyper.lr(r["step"]), delta=1e-15)
            self.assertEqual(r["tokens"], Hyper.A * Hyper.B * Hyper.S)
        self.assertGreater(norms[0], Hyper.CLIP, "the test should exercise clipping")

        oracle = OnnxModel(self.model_path)
        matches = match_params(oracle, self.module)
        dumped = load_file(dump)
        self.assertEqual(set(dumped), set(oracle.params))
        for name, (module_name, transposed) in matches.items():
            expected = first_grads[module_name].t() if transposed else first_grads[module_name]
            assert_close(self, torch.from_numpy(dumped[name]).double(), expected, 1e-6, f"dumped {name}")

        config = reference_train.TrainConfig(batch=Hyper.B, seq_len=Hyper.S, steps=Hyper.N, grad_accum=Hyper.A,
                                             lr=Hyper.LR, warmup=Hyper.WARMUP, min_lr_ratio=Hyper.MIN_RATIO,
                                             weight_decay=Hyper.WD, beta1=Hyper.BETAS[0], beta2=Hyper.BETAS[1],
                                             eps=Hyper.EPS, clip_grad=Hyper.CLIP)
        reference_train.train(oracle, self.tokens, config)
        trained = dict(expected_module.named_parameters())
        for name, (module_name, transposed) in matches.items():
            expected = trained[module_name].detach()
            assert_close(self, oracle.params[name].detach(), expected.t() if transposed else expected, TIGHT,
                         f"trained {name}")

    def test_bad_token_files(self):
        cases = {
            "odd_size.u32": (b"\x01\x00\x00\x00\x02\x00", "not a multiple of 4"),
            "short.u32": (np.arange(Hyper.S, dtype="<u4").tobytes(), "needs at least"),
            "out_of_vocab.u32": (np.array([1, 2, 3, VOCAB, 4, 5, 6, 7, 8], dtype="<u4").tobytes(),
                                 f"token id {VOCAB} >= vocab {VOCAB}"),
        }
        log = os.path.join(self.tmp.name, "bad.jsonl")
        for name, (data, message) in cases.items():
            with self.subTest(name):
                path = os.path.join(self.tmp.name, name)
                with open(path, "wb") as f:
                    f.write(data)
                rc, err = self.run_main(self.model_path, "--data", path, "--batch", 1, "--seq-len", Hyper.S,
                                        "--log-jsonl", log)
                self.assertEqual(rc, 1)
                self.assertTrue(err.startswith("error: "), err)
                self.assertIn(message, err)
                self.assertIn(path, err)
                self.assertFalse(os.path.exists(log))
        self.assertIn("byte offset 12", err)

    def test_freezing_a_tied_copy(self):
        """A copy of another initializer (tied to it) freezes with its source;
        alone, while the source trains, it is refused by name."""
        from onnx import TensorProto, helper, numpy_helper
        emb = np.random.default_rng(1).normal(size=(VOCAB, 8)).astype(np.float32)
        graph = helper.make_graph(
            [helper.make_node("Gather", ["emb", "input_ids"], ["h"]),
             helper.make_node("MatMul", ["h", "head"], ["z"]),
             helper.make_node("Add", ["z", "bias"], ["logits"])],
            "tied", [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["b", "s"])],
            [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["b", "s", VOCAB])],
            [numpy_helper.from_array(emb, "emb"), numpy_helper.from_array(emb.T.copy(), "head"),
             numpy_helper.from_array(np.linspace(-1, 1, VOCAB, dtype=np.float32), "bias")])
        path = os.path.join(self.tmp.name, "tied.onnx")
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
        common = [path, "--data", self.data, "--batch", 1, "--seq-len", Hyper.S, "--steps", 1]
        rc, err = self.run_main(*common, "--freeze", "head")
        self.assertEqual(rc, 1)
        self.assertIn("--freeze head: it equals emb, which is trained", err)
        rc, err = self.run_main(*common, "--freeze", "emb,head")
        self.assertEqual(rc, 0, err)

    def test_command_line(self):
        bad = os.path.join(self.tmp.name, "cli_bad.u32")
        with open(bad, "wb") as f:
            f.write(b"\x00")
        result = subprocess.run([sys.executable, "-m", "tests.e2e.oracle.reference_train", self.model_path,
                                 "--data", bad, "--batch", "1", "--seq-len", "4"],
                                cwd=REPO, capture_output=True, text=True)
        self.assertEqual(result.returncode, 1)
        self.assertTrue(result.stderr.startswith("error: token file"), result.stderr)


if __name__ == "__main__":
    unittest.main()
