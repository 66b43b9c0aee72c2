"""Generated trainers on the CUDA backend's code, with the CUDA runtime
calls and kernels emulated on the CPU ("cudaemu", tests/e2e/cudaemu): the
same schedules the GPU would run (three streams and events, pinned staging,
chunked copies, token-chunked MLP and loss, vocabulary pieces) against the
CPU backend in bf16 on the same weights and data. Criteria as the device
check's parity: loss within 1e-2 relative, every gradient's cosine with the
CPU's >= 0.999, in bf16 or, where bf16's rounding moves the CPU's own
gradient that far (a router choosing its experts on rounded logits), in
fp32; and --stress gives the same losses bit for bit."""
import os
import unittest

import numpy as np
import onnx as onnx_lib
from safetensors.numpy import load_file

from tests.e2e.harness import BUILD, PYTHON, ROOT, Workdir, read_jsonl, run

EMU_PROJECT = os.path.join(ROOT, "tests", "e2e", "cudaemu")


def cosine(a, b):
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    return 1.0 if na == nb == 0 else float(a @ b / max(na * nb, 1e-300))


class CudaEmulatedTrainer(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.w = Workdir()
        cls.data = cls.w.corpus()

    def emu_trainer(self, plan_dir):
        build = plan_dir + "-emu"
        run(["cmake", "-S", EMU_PROJECT, "-B", build, "-DMEGATRAIN_BUILD_DIR=" + BUILD,
             "-DTRAINER_CPP=" + os.path.join(plan_dir, "trainer.cpp")])
        run(["cmake", "--build", build, "-j", "2"])
        return os.path.join(build, "trainer")

    def check(self, onnx, tag, *flags, stress=False):
        w = self.w
        plan_dir, _ = w.compile(onnx, tag, "--batch", "2", "--seq-len", "16",
                                "--no-build", *flags)
        trainer = self.emu_trainer(plan_dir)
        weights = ["--weights", os.path.join(plan_dir, "weights.safetensors")]

        def train(name, *args):
            run([trainer, "--data", self.data, "--seed", "3", *weights,
                 "--log-jsonl", w(name + ".jsonl"), *args], cwd=w.path)
            return [r["loss"] for r in read_jsonl(w(name + ".jsonl"))]

        one = ("--steps", "1", "--precision", "bf16")
        cpu = train(tag + ".cpu", "--backend", "cpu", *one, "--dump-grads", w(tag + ".cpu.st"))
        emu = train(tag + ".emu", "--backend", "cudaemu", *one, "--dump-grads", w(tag + ".emu.st"))
        self.assertLess(abs(emu[0] - cpu[0]) / abs(cpu[0]), 1e-2, tag)
        ours, ref = load_file(w(tag + ".emu.st")), load_file(w(tag + ".cpu.st"))
        self.assertEqual(sorted(ours), sorted(ref), tag)
        short = [name for name in ref if cosine(ours[name], ref[name]) < 0.999]
        if short:
            train(tag + ".cpu32", "--backend", "cpu", "--steps", "1",
                  "--dump-grads", w(tag + ".cpu32.st"))
            fp32 = load_file(w(tag + ".cpu32.st"))
            for name in short:
                self.assertGreaterEqual(
                    cosine(ours[name], fp32[name]), 0.999,
                    f"{tag}: {name} (bf16: {cosine(ours[name], ref[name]):.5f})")
        if stress:
            two = ("--backend", "cudaemu", "--steps", "2")
            self.assertEqual(train(tag + ".emu2", *two), train(tag + ".stress", *two, "--stress"),
                             tag)

    # The emulator runs every GPU thread as a fiber: a step of these tiny
    # models takes seconds, so the plans are few and hold many features.
    def test_llama_with_every_kind_of_chunk(self):
        # 2 micro-batches; units through 8192-element staging slabs; a
        # checkpoint on the host; MLP and loss in 2 chunks of 16 of 32
        # tokens; the head and the embedding in 2 vocabulary pieces.
        self.check(self.w.export("tiny-llama"), "llama", "--micro-batches", "2",
                   "--staging-elems", "8192",
                   "--host-checkpoints", "1", "--mlp-chunk-tokens", "16",
                   "--loss-chunk-tokens", "16", "--vocab-pieces", "2", stress=True)

    def test_frozen_weights(self):
        # Weights frozen by --buffers: the whole embedding (its backward has
        # nothing to do), a norm's and a projection's in one layer only,
        # whose gradient kernels get no place to put one.
        self.check(self.w.export("tiny-llama"), "llama-frozen", "--buffers",
                   "embed_tokens.weight,layers.0.self_attn.q_proj.weight,"
                   "layers.1.input_norm.weight")

    def test_gpt2_tied_with_biases(self):
        self.check(self.w.export("tiny-gpt2"), "gpt2", "--mlp-chunk-tokens", "16",
                   "--vocab-pieces", "2")

    def test_bloom_alibi(self):
        # ALiBi slopes from the generated code into the CUDA attention
        # kernels, and BLOOM's layer as a whole. At this size ALiBi moves
        # the gradients by less than the bf16 criteria see: the slopes'
        # math is checked in tests/unit/runtime/cuda/KernelsTest.cpp.
        onnx = self.w("bloom.onnx")
        run([PYTHON, "-m", "tests.e2e.hf_architectures", "bloom", onnx], cwd=ROOT)
        self.check(onnx, "bloom")

    def dynamo_export(self, family, *flags):
        """The family's export by tests/e2e/dynamo_exports.py (torch 2.15)."""
        python = os.path.join(ROOT, ".venv-export", "bin", "python")
        if not os.path.exists(python):
            raise AssertionError(f"{python} is missing: run tools/install-export-venv.sh")
        onnx = self.w(family + "".join(flags) + ".onnx")
        run([python, os.path.join(ROOT, "tests", "e2e", "dynamo_exports.py"), family, onnx,
             *flags], cwd=ROOT)
        return onnx

    def test_mixtral_experts(self):
        # The mixture of experts' generated calls into the CUDA kernels
        # (the default, grouped tensor-core GEMMs: routing, experts, the
        # weight gradients through scratch), the MoE stretch in 2 chunks of
        # 16 of 32 tokens.
        self.check(self.dynamo_export("mixtral"), "mixtral", "--micro-batches", "2",
                   "--mlp-chunk-tokens", "16")

    def test_mixtral_frozen_experts(self):
        # Frozen by --buffers: the first layer's router and an expert tensor
        # (the export's first three-dimensional initializer), whose gradient
        # kernels are skipped, in 2 chunks of 16 tokens.
        onnx = self.dynamo_export("mixtral")
        experts = next(t.name for t in onnx_lib.load(onnx).graph.initializer
                       if len(t.dims) == 3)
        self.check(onnx, "mixtral-frozen", "--mlp-chunk-tokens", "16", "--buffers",
                   "model.model.layers.0.mlp.gate.weight," + experts)

    def test_gpt_oss(self):
        # gpt-oss's attention sinks (their gradient from each row's
        # log-sum-exp) and its clamped, biased experts stored for x · W on
        # the grouped tensor-core path, through the generated calls.
        self.check(self.dynamo_export("gpt_oss"), "gpt_oss", "--micro-batches", "2")

    def test_llama4(self):
        # Llama 4's chunked attention on the tensor-core kernels, and its
        # experts weighed on their inputs on the grouped tensor-core path.
        self.check(self.dynamo_export("llama4"), "llama4", "--micro-batches", "2")

    def test_gemma4_experts(self):
        # Gemma 4's GeGLU experts with trained per-expert scales, routed on
        # an input of their own (its gradient back through its own norm),
        # on the grouped tensor-core path, in 2 chunks of 16 of 32 tokens.
        self.check(self.dynamo_export("gemma4_moe"), "gemma4_moe", "--mlp-chunk-tokens", "16")

    def test_qwen3_5_gated_delta(self):
        # Qwen3.5's gated DeltaNet layers: the scan's CUDA kernels (state
        # checkpoints and per-tile partial sums in kernel scratch) and the
        # causal convolution, through the generated calls.
        self.check(self.dynamo_export("qwen3_5"), "qwen3_5", "--micro-batches", "2")

    def test_kimi_linear_key_decay(self):
        # Kimi Linear's delta rule with a decay per key channel (the
        # backward's dg per row of the state through the per-tile partials)
        # beside MLA and experts, through the generated calls.
        self.check(self.dynamo_export("kimi_linear"), "kimi_linear", "--micro-batches", "2")

    def test_jamba_selective_scan(self):
        # Jamba's Mamba-1 mixers: 128 value heads of one column on one key
        # head, a decay per key channel (32 heads to a block), beside
        # attention and experts, through the generated calls.
        self.check(self.dynamo_export("jamba"), "jamba", "--micro-batches", "2")

    def test_apertus_xielu_through_softplus(self):
        # Apertus without the ONNX optimizer: xIELU on its raw alphas, the
        # softplus and its derivative inside the kernels, through the
        # generated calls.
        self.check(self.dynamo_export("apertus", "--no-optimize"), "apertus_unoptimized")

    def test_bamba_mamba2(self):
        # Bamba's Mamba-2 mixers beside an attention layer: the scan without
        # the delta rule on the same kernels, the convolution's bias and its
        # gradient, through the generated calls.
        self.check(self.dynamo_export("bamba"), "bamba", "--micro-batches", "2")


if __name__ == "__main__":
    unittest.main()
