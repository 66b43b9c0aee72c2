"""50 AdamW steps vs PyTorch's semantics in float64 (warmup, cosine decay,
clipping, gradient accumulation, several micro-batches): the loss of every
step must agree to 1e-3 relative in fp32."""
import unittest

from tests.e2e.harness import Workdir, read_jsonl

FLAGS = ["--steps", "50", "--lr", "1e-3", "--warmup", "5", "--grad-accum", "2",
         "--weight-decay", "0.1", "--clip-grad", "1.0"]


class Trajectory(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.w = Workdir()
        cls.data = cls.w.corpus()

    def check(self, model):
        w = self.w
        onnx = w.export(model)
        plan_dir, plan = w.compile(onnx, model, "--batch", "2", "--seq-len", "16",
                                   "--micro-batches", "2")
        w.train(plan_dir, "--data", self.data, "--log-jsonl", w(model + ".ours.jsonl"), *FLAGS)
        w.oracle(onnx, plan, "--data", self.data, "--batch", "4", "--seq-len", "16",
                 "--log-jsonl", w(model + ".ref.jsonl"), *FLAGS)
        ours, ref = read_jsonl(w(model + ".ours.jsonl")), read_jsonl(w(model + ".ref.jsonl"))
        self.assertEqual(len(ours), 50)
        self.assertEqual(len(ref), 50)
        for a, b in zip(ours, ref):
            self.assertLess(abs(a["loss"] - b["loss"]) / abs(b["loss"]), 1e-3,
                            f"{model} step {a['step']}")
            self.assertAlmostEqual(a["lr"], b["lr"], places=12)
        # Training did something: the loss fell.
        self.assertLess(ours[-1]["loss"], ours[0]["loss"] - 0.5)

    def test_tiny_llama(self):
        self.check("tiny-llama")

    def test_tiny_gpt2(self):
        self.check("tiny-gpt2")


if __name__ == "__main__":
    unittest.main()
