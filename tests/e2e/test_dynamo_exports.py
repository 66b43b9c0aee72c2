"""Exports made by current PyTorch's default exporter (torch 2.15, dynamo,
opset 20; tests/e2e/dynamo_exports.py, run in the .venv-export that
tools/install-export-venv.sh makes) compile and train with first-step loss and
gradients matching PyTorch float64 autograd, as the exports of the older
exporter do (test_unseen_architectures.py: loss 1e-4, gradients 1e-3
relative per tensor). The families run in four quarters, one ctest entry
each, as the exports take most of the suite's time."""
import json
import os
import unittest

import onnx as onnx_lib

from tests.e2e.harness import MEGATRAIN, ROOT, Workdir, gradient_errors, read_jsonl, run

EXPORT_PYTHON = os.path.join(ROOT, ".venv-export", "bin", "python")
EXPORTER = os.path.join(ROOT, "tests", "e2e", "dynamo_exports.py")
SIGNATURE = os.path.join(ROOT, "tests", "e2e", "torch_signature.py")


def non_float(onnx):
    """The initializers of `onnx` that hold no floats."""
    floats = (onnx_lib.TensorProto.FLOAT, onnx_lib.TensorProto.FLOAT16,
              onnx_lib.TensorProto.BFLOAT16, onnx_lib.TensorProto.DOUBLE)
    return {t.name for t in onnx_lib.load(onnx).graph.initializer if t.data_type not in floats}


class DynamoExports(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.path.exists(EXPORT_PYTHON):
            raise AssertionError(f"{EXPORT_PYTHON} is missing: run tools/install-export-venv.sh")
        cls.w = Workdir()
        cls.data = cls.w.corpus()
        cls.names = run([EXPORT_PYTHON, EXPORTER, "--list"]).stdout.split()
        if len(cls.names) < 30:
            raise AssertionError(f"{EXPORTER} --list names {len(cls.names)} families")

    # The families in four quarters, one ctest entry each, so that each
    # stays well inside ctest's timeout on a slow machine.
    def test_families_quarter_1(self):
        self.check(self.names[0::4])

    def test_families_quarter_2(self):
        self.check(self.names[1::4])

    def test_families_quarter_3(self):
        self.check(self.names[2::4])

    def test_families_quarter_4(self):
        self.check(self.names[3::4])

    def test_vocabulary_pieces_of_scaled_tables(self):
        """LM heads and embeddings cut in two vocabulary pieces where scalings
        or soft caps follow them: each head piece scales or soft-caps its own
        logits, each embedding piece scales its own rows. Gemma 2 (tied, rows
        by √hidden, logits soft-capped), Granite (embedding multiplier, logits
        divided), Cohere (logit scale)."""
        self.check(["gemma2", "granite", "cohere"], "--vocab-pieces", "2")

    def test_experts_in_chunks_of_tokens(self):
        """Each layer's mixture of experts over 4 chunks of 8 of its 32
        tokens (mt-chunk-mlp): routing per chunk, the experts' and router's
        gradients summed over the chunks; Gemma 4's router input chunked
        with the tokens, its two layer templates (sliding, full) each."""
        self.check(["mixtral", "olmoe", "gemma4_moe"], "--mlp-chunk-tokens", "8")

    def test_frozen_experts(self):
        """--buffers freezes Mixtral's first router and an expert tensor (the
        export's first three-dimensional initializer), with the experts in
        chunks of tokens: no gradient for either (the oracle freezes them too), the
        rest as PyTorch's."""
        onnx = self.w("mixtral_frozen.onnx")
        run([EXPORT_PYTHON, EXPORTER, "mixtral", onnx], cwd=ROOT)
        experts = next(t.name for t in onnx_lib.load(onnx).graph.initializer
                       if len(t.dims) == 3)
        frozen = ["model.model.layers.0.mlp.gate.weight", experts]
        plan = self.trains_like_pytorch(onnx, "mixtral_frozen", "--mlp-chunk-tokens", "8",
                                        "--buffers", ",".join(frozen))
        self.assertTrue(set(frozen) <= set(plan["model_buffers"]))

    def test_opset_18_exports(self):
        """Exports asked for opset 18, where the exporter writes GELU out in
        Pow, Tanh and products: Gemma 4's GeGLU experts (GELU inside the
        experts) and Gemma 3's GELU MLP."""
        self.check(["gemma4_moe", "gemma3"], opset=18)

    def test_sparse_attention_past_its_choice(self):
        """DeepSeek V3.2's sparse attention trains while its index_topk (32)
        covers the sequence (the families train it at 16). At 64 tokens a
        query would see only 32 of its keys, which no kernel of ours does:
        refused, naming the indexer's choice, with nothing written."""
        onnx = self.w("deepseek_v32_64.onnx")
        run([EXPORT_PYTHON, EXPORTER, "deepseek_v32", onnx], cwd=ROOT)
        out = self.w("deepseek_v32_64")
        r = run([MEGATRAIN, "compile", onnx, "--batch", "1", "--seq-len", "64", "-o", out],
                check=False)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("(TopK, opset 20), a choice by score that no supported router makes",
                      r.stderr)
        self.assertIn("index_topk covers --seq-len", r.stderr)
        self.assertFalse(os.path.exists(out))

    def test_exports_without_the_optimizer(self):
        """Without the ONNX optimizer the exporter writes torch.split as
        SplitToSequence, a Conv1d weight squeezed and unsqueezed back with a
        bias of zeros, softplus's beta of 1, and leaves computations on
        weights in the graph: Mamba-2's A = −exp(A_log) and its skip
        Unsqueeze(D), Mamba-1's −exp(A_log) broadcast against the time
        step, gated DeltaNet's −exp(A_log), Apertus's xIELU alphas through
        softplus. Those run in the layer, so A_log, D and the alphas train
        as in PyTorch (their gradients held to the oracle's, which
        differentiates the same graph); declared buffers, they are frozen
        tables."""
        for family, computed in [("mamba2", (".A_log", ".D")), ("mamba", (".A_log",)),
                                 ("qwen3_5", (".A_log",)),
                                 ("apertus", (".alpha_p", ".alpha_n"))]:
            with self.subTest(family=family):
                onnx = self.w(family + "_unoptimized.onnx")
                run([EXPORT_PYTHON, EXPORTER, family, onnx, "--no-optimize"], cwd=ROOT)
                names = [t.name for t in onnx_lib.load(onnx).graph.initializer
                         if t.name.endswith(computed)]
                self.assertTrue(names)
                plan = self.trains_like_pytorch(onnx, family + "_unoptimized")
                self.assertFalse(set(names) & set(plan["constant_initializers"]))
                plan = self.trains_like_pytorch(onnx, family + "_unoptimized_frozen",
                                                "--buffers", ",".join(names))
                self.assertTrue(set(names) <= set(plan["model_buffers"]))

    def test_norms_without_the_optimizer(self):
        """Without the ONNX optimizer a LayerNorm's scale may be computed:
        Nemotron's 1 + w (w trains), OLMo's ones (no weight at all; the
        optimizer would fold them into an initializer that trains)."""
        for family in ["nemotron", "olmo"]:
            with self.subTest(family=family):
                onnx = self.w(family + "_unoptimized.onnx")
                run([EXPORT_PYTHON, EXPORTER, family, onnx, "--no-optimize"], cwd=ROOT)
                plan = self.trains_like_pytorch(onnx, family + "_unoptimized")
                norms = [t.name for t in onnx_lib.load(onnx).graph.initializer
                         if "layernorm" in t.name]
                self.assertEqual(bool(norms), family == "nemotron")
                self.assertFalse(set(norms) & set(plan["constant_initializers"]))

    def test_views_without_the_optimizer(self):
        """Without the ONNX optimizer the exporter writes ops that change
        nothing around a router's indices and the experts' weights (a Max
        of one input, an Expand to the same shape, identity Transposes:
        Mixtral), Squeeze(Unsqueeze(h)) before gpt-oss's strided slices, a
        strided slice as one Slice per axis (GPT-J's rotary), ERNIE 4.5's
        selection bias Squeezed at run time, and Granite SWA's sinks
        reshaped to [1, H, 1] at run time."""
        for family in ["mixtral", "gpt_oss", "gptj", "ernie4_5_moe", "granite_swa"]:
            with self.subTest(family=family):
                onnx = self.w(family + "_unoptimized.onnx")
                run([EXPORT_PYTHON, EXPORTER, family, onnx, "--no-optimize"], cwd=ROOT)
                self.trains_like_pytorch(onnx, family + "_unoptimized")

    def check(self, names, *flags, opset=None):
        w = self.w
        export_flags = ["--opset", str(opset)] if opset else []
        for family in names:
            with self.subTest(family=family, flags=flags, opset=opset):
                name = family + "".join(flags + tuple(export_flags)).replace("-", "_")
                onnx = w(name + ".onnx")
                run([EXPORT_PYTHON, EXPORTER, family, onnx, *export_flags], cwd=ROOT)
                plan = self.trains_like_pytorch(onnx, name, *flags)
                if "--vocab-pieces" in flags:  # both tables cut, none left whole
                    pieces = int(flags[flags.index("--vocab-pieces") + 1])
                    kinds = [u["kind"] for u in plan["units"]]
                    self.assertEqual(kinds.count("embedding"), pieces)
                    self.assertEqual(kinds.count("head"), pieces)
                if "--mlp-chunk-tokens" in flags:  # each layer and its backward
                    chunked = {c["template"]: c["chunks"] for c in plan["token_chunks"]}
                    self.assertEqual(chunked["layer"], 4)
                    self.assertEqual(chunked["layer.bwd"], 4)
                    self.assertEqual(set(chunked.values()), {4})

    def trains_like_pytorch(self, onnx, name, *flags):
        """Compiles `onnx` with `flags`, trains a step, and holds loss and
        gradients to the float64 oracle's; returns the plan."""
        w = self.w
        plan_dir, plan = w.compile(onnx, name, "--batch", "2", "--seq-len", "16",
                                   "--micro-batches", "2", *flags)
        # What torch's exporter says is a buffer never trains (read here by
        # onnx in Python, apart from the importer's own reading).
        kinds = json.loads(run([EXPORT_PYTHON, SIGNATURE, onnx]).stdout)
        initializers = {t.name for t in onnx_lib.load(onnx).graph.initializer}
        buffers = {t for t, k in kinds.items() if k != "PARAMETER" and t in initializers}
        self.assertLessEqual(buffers, set(plan["constant_initializers"]) | non_float(onnx))
        w.train(plan_dir, "--data", self.data, "--steps", "1",
                "--dump-grads", w(name + ".ours.st"), "--log-jsonl", w(name + ".ours.jsonl"))
        w.oracle(onnx, plan, "--data", self.data, "--batch", "4", "--seq-len", "16",
                 "--steps", "1", "--dump-grads", w(name + ".ref.st"),
                 "--log-jsonl", w(name + ".ref.jsonl"))
        ours = read_jsonl(w(name + ".ours.jsonl"))[0]["loss"]
        ref = read_jsonl(w(name + ".ref.jsonl"))[0]["loss"]
        self.assertLess(abs(ours - ref) / abs(ref), 1e-4)
        errors, unmatched = gradient_errors(w(name + ".ours.st"), w(name + ".ref.st"))
        self.assertEqual(unmatched, [])
        for tensor, err in errors.items():
            self.assertLess(err, 1e-3, f"{name}: {tensor}")
        return plan


if __name__ == "__main__":
    unittest.main()
