"""First-step loss and gradients of every sample model vs PyTorch float64
autograd on the same weights and data (the oracle interprets the exported
ONNX in float64). fp32 training must agree to 1e-3 relative L2 per tensor
and 1e-4 in the loss; the observed agreement is about 1e-6."""
import json
import os
import re
import unittest

import numpy as np
import onnx
from onnx import numpy_helper
from safetensors.numpy import load_file

from tests.e2e.harness import MEGATRAIN, Workdir, gradient_errors, read_jsonl, run

MODELS = ["tiny-llama", "tiny-llama-tied", "tiny-gpt2", "tiny-neox",
          "tiny-layerscale", "tiny-tokenshift", "hf-llama", "hf-gpt2", "hf-qwen2"]
FOLDED = ["tiny-llama-tied", "hf-llama"]  # exports whose weights torch folded


class FirstStepGradients(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.w = Workdir()
        cls.data = cls.w.corpus()

    def check(self, model, folded=False, micro_batches=2, extra=(), tag=None,
              seq_len=16):
        w = self.w
        tag = tag or model + ("-folded" if folded else "")
        onnx = w.export(model, folded)
        # 2 micro-batches of 2 sequences: the oracle sees a batch of 4.
        plan_dir, plan = w.compile(onnx, tag, "--batch", "2", "--seq-len", str(seq_len),
                                   "--micro-batches", str(micro_batches), *extra)
        w.train(plan_dir, "--data", self.data, "--steps", "1",
                "--dump-grads", w(tag + ".ours.safetensors"),
                "--log-jsonl", w(tag + ".ours.jsonl"))
        w.oracle(onnx, plan, "--data", self.data, "--batch", str(2 * micro_batches),
                 "--seq-len", str(seq_len), "--steps", "1",
                 "--dump-grads", w(tag + ".ref.safetensors"),
                 "--log-jsonl", w(tag + ".ref.jsonl"))
        ours, ref = read_jsonl(w(tag + ".ours.jsonl"))[0], read_jsonl(w(tag + ".ref.jsonl"))[0]
        self.assertLess(abs(ours["loss"] - ref["loss"]) / abs(ref["loss"]), 1e-4, tag)
        errors, unmatched = gradient_errors(w(tag + ".ours.safetensors"),
                                            w(tag + ".ref.safetensors"))
        self.assertEqual(unmatched, [], f"{tag}: gradients only one side has")
        for name, err in errors.items():
            self.assertLess(err, 1e-3, f"{tag}: {name}")
        return plan_dir

    def test_models(self):
        for model in MODELS:
            with self.subTest(model=model):
                self.check(model)

    def test_folded_exports(self):
        for model in FOLDED:
            with self.subTest(model=model):
                self.check(model, folded=True)

    def test_frozen_weights(self):
        """--buffers freezes weights the model reads directly: the embedding,
        layer 0's query projection (layer 1's trains: the two layers get
        templates of their own) and layer 1's first norm. They get no
        gradient, as in the oracle told to freeze the same, and keep their
        values through training; the rest trains."""
        frozen = ["embed_tokens.weight", "layers.0.self_attn.q_proj.weight",
                  "layers.1.input_norm.weight"]
        plan_dir = self.check("tiny-llama", extra=("--buffers", ",".join(frozen)), tag="frozen")
        with open(os.path.join(plan_dir, "plan.json")) as f:
            self.assertLessEqual(set(frozen), set(json.load(f)["constant_initializers"]))
        self.w.train(plan_dir, "--data", self.data, "--steps", "2", "--lr", "1e-2",
                     "--export", self.w("frozen.trained.safetensors"))
        trained = load_file(self.w("frozen.trained.safetensors"))
        initial = {t.name: numpy_helper.to_array(t)
                   for t in onnx.load(self.w.export("tiny-llama")).graph.initializer}
        for name in frozen:
            np.testing.assert_array_equal(trained[name], initial[name], name)
        for name in ("layers.1.self_attn.q_proj.weight", "layers.0.input_norm.weight"):
            self.assertFalse(np.array_equal(trained[name], initial[name]), name)

    def test_one_micro_batch(self):
        self.check("tiny-llama", micro_batches=1)

    def test_checkpoints_on_host(self):
        # The first two layers' block inputs go to host after the forward
        # and come back ahead of the backward.
        self.check("tiny-llama", extra=("--host-checkpoints", "2"), tag="host-ckpt")

    def test_units_moved_in_chunks(self):
        # Staging slabs of 4096 elements: every unit packs, copies and drains
        # in several chunks; a transposed tie crosses chunk boundaries.
        self.check("tiny-llama-tied", folded=True, extra=("--staging-elems", "4096"),
                   tag="chunked")
        self.check("tiny-gpt2", extra=("--staging-elems", "4096", "--slots", "3"),
                   tag="chunked3")

    def test_loss_in_token_chunks(self):
        # The head's launch over 24 tokens in chunks of 8: the middle chunk
        # spans two sequences of 12; the loss and the head's weight
        # gradients add up chunk by chunk. RMSNorm with an untied head, and
        # LayerNorm with a tied one.
        for model in ("tiny-llama", "tiny-gpt2"):
            with self.subTest(model=model):
                self.check(model, seq_len=12, extra=("--loss-chunk-tokens", "8"),
                           tag=model + "-loss-chunks")

    def test_mlp_in_token_chunks(self):
        # Each layer's row-wise stretch (output projection, residual, norm,
        # MLP; in the backward their recompute and gradients) over 24
        # tokens in chunks of 8, the middle chunk spanning two sequences;
        # the weight gradients add up chunk by chunk. SwiGLU with RMSNorm,
        # GELU with LayerNorm and biases, a parallel residual, a folded HF
        # export ([in, out] weights), LayerScale (whose gradient is a sum
        # over rows in scratch, added to the slot chunk by chunk), and with
        # the loss chunked too.
        for model, folded in (("tiny-llama", False), ("tiny-gpt2", False),
                              ("tiny-neox", False), ("hf-llama", True),
                              ("tiny-layerscale", False)):
            with self.subTest(model=model, folded=folded):
                plan_dir = self.check(model, folded, seq_len=12,
                                      extra=("--mlp-chunk-tokens", "8"),
                                      tag=model + "-mlp-chunks")
                self.assert_layers_chunked(plan_dir, 8)
        plan_dir = self.check("tiny-llama", seq_len=12,
                              extra=("--mlp-chunk-tokens", "8", "--loss-chunk-tokens", "6"),
                              tag="mlp-and-loss-chunks")
        self.assert_layers_chunked(plan_dir, 8)

    def assert_layers_chunked(self, plan_dir, chunk):
        # Both directions of the layer run a stretch in chunks, and inspect
        # says so.
        with open(os.path.join(plan_dir, "model.mlir")) as f:
            ir = f.read()
        chunked = re.findall(r'kind "layer".*row_chunk = (\d+) : i64, row_ops', ir)
        self.assertEqual(chunked, [str(chunk)] * 2, plan_dir)
        shown = run([MEGATRAIN, "inspect", plan_dir]).stdout
        for t in ("layer", "layer.bwd"):
            self.assertRegex(shown, rf"@{re.escape(t)} runs ops \d+\.\.\d+ in "
                                    rf"{24 // chunk} chunks of {chunk} tokens")

    def test_vocab_pieces(self):
        # The LM head and the embedding in 3 units of vocabulary rows: the
        # loss from log-sum-exp statistics merged piece by piece, dh summed
        # over the head's pieces, each embedding piece writing and scattering
        # its rows. Tied (both cut alike: the embedding's pieces own the rows
        # the head's read), tied transposed (the head's rows are the
        # embedding's), a head stored [hidden, vocab] (hf-llama folded: each
        # piece gathers columns), GPT-2 (the embedding adds positions and
        # stays whole), and with the embedding's output offloaded to host.
        for model, folded in (("tiny-llama", False), ("tiny-llama-tied", False),
                              ("tiny-llama-tied", True), ("hf-llama", True),
                              ("tiny-gpt2", False)):
            with self.subTest(model=model, folded=folded):
                self.check(model, folded, extra=("--vocab-pieces", "3"),
                           tag=model + ("-folded" if folded else "") + "-vocab")
        self.check("tiny-llama", extra=("--vocab-pieces", "3", "--host-checkpoints", "2"),
                   tag="vocab-host-ckpt")


if __name__ == "__main__":
    unittest.main()
