"""Exports of HuggingFace families the importer was not written against
(tests/e2e/hf_architectures.py) compile into one layer template and train
with first-step gradients matching PyTorch float64 autograd, whole and with
each layer's MLP and the loss in chunks of tokens."""
import re
import unittest

from tests.e2e.harness import PYTHON, ROOT, Workdir, gradient_errors, read_jsonl, run
from tests.e2e.hf_architectures import ARCHITECTURES, STATIC


class UnseenArchitectures(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.w = Workdir()
        cls.data = cls.w.corpus()

    def test_architectures(self):
        w = self.w
        for name in ARCHITECTURES:
            with self.subTest(architecture=name):
                onnx = w(name + ".onnx")
                run([PYTHON, "-m", "tests.e2e.hf_architectures", name, onnx], cwd=ROOT)
                # A fixed-shape export takes one micro-batch of 2 x 16 per step.
                micro = "1" if name in STATIC else "2"
                plan_dir, plan = w.compile(onnx, name, "--batch", "2", "--seq-len", "16",
                                           "--micro-batches", micro)
                with open(plan_dir + "/model.mlir") as f:
                    text = f.read()
                # One layer template: no @layer_1 for a last layer that differs.
                self.assertEqual(len(re.findall(r"mt\.template @layer(_\d+)? kind", text)), 1, name)
                w.oracle(onnx, plan, "--data", self.data, "--batch", str(2 * int(micro)),
                         "--seq-len", "16",
                         "--steps", "1", "--dump-grads", w(name + ".ref.st"),
                         "--log-jsonl", w(name + ".ref.jsonl"))
                self.check(name, plan_dir)
                # 32 tokens per micro-batch in chunks of 8.
                chunked_dir, _ = w.compile(onnx, name + "-chunks", "--batch", "2", "--seq-len", "16",
                                           "--micro-batches", micro, "--mlp-chunk-tokens", "8",
                                           "--loss-chunk-tokens", "8")
                with open(chunked_dir + "/model.mlir") as f:
                    self.assertEqual(f.read().count("row_chunk = 8 : i64, row_ops"), 2, name)
                self.check(name, chunked_dir, tag="-chunks")

    def check(self, name, plan_dir, tag=""):
        w = self.w
        ours_st, ours_log = w(name + tag + ".ours.st"), w(name + tag + ".ours.jsonl")
        w.train(plan_dir, "--data", self.data, "--steps", "1",
                "--dump-grads", ours_st, "--log-jsonl", ours_log)
        ours = read_jsonl(ours_log)[0]["loss"]
        ref = read_jsonl(w(name + ".ref.jsonl"))[0]["loss"]
        self.assertLess(abs(ours - ref) / abs(ref), 1e-4, name + tag)
        errors, unmatched = gradient_errors(ours_st, w(name + ".ref.st"))
        self.assertEqual(unmatched, [], name + tag)
        for tensor, err in errors.items():
            self.assertLess(err, 1e-3, f"{name}{tag}: {tensor}")


if __name__ == "__main__":
    unittest.main()
