"""What a user of the generated trainer relies on: --stress and --resume
give bitwise the same training, and bad input ends in one `error:` line
naming the culprit, a non-zero exit, and nothing lost."""
import json
import os
import re
import shutil
import signal
import subprocess
import time
import unittest

import numpy as np

from tests.e2e.harness import MEGATRAIN, Workdir, read_jsonl, run


class TrainerContract(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.w = Workdir()
        cls.data = cls.w.corpus()
        onnx = cls.w.export("tiny-llama")
        # Small staging slabs (units move in chunks) and a checkpoint on the
        # host: more streams and events for stress to shake.
        cls.plan, _ = cls.w.compile(onnx, "llama", "--batch", "2", "--seq-len", "16",
                                    "--micro-batches", "2", "--staging-elems", "8192",
                                    "--host-checkpoints", "1")
        other = cls.w.export("tiny-gpt2")
        cls.other_plan, _ = cls.w.compile(other, "gpt2", "--batch", "2", "--seq-len", "16")

    def train(self, *flags, check=True, plan=None):
        return self.w.train(plan or self.plan, "--data", self.data, *flags, check=check)

    def assertBadInput(self, result, *fragments):
        self.assertNotEqual(result.returncode, 0, result.stderr)
        lines = [l for l in result.stderr.splitlines() if l.startswith("error:")]
        self.assertTrue(lines, f"no error: line in {result.stderr!r}")
        for f in fragments:
            self.assertIn(f, lines[0])

    def test_inspect_describes_the_plan(self):
        shown = run([MEGATRAIN, "inspect", self.plan]).stdout
        # Each unit's weight slots, visit by visit, as the schedule's
        # launches name them (micro-batches of one visit share a slot).
        with open(os.path.join(self.plan, "model.mlir")) as f:
            launches = re.findall(r'mt\.launch @\S+ "(fwd|bwd)" unit @(\w+) .*? weights @([\w.]+)', f.read())
        visits = {}
        for direction, unit, slot in launches:
            v = visits.setdefault(unit, [])
            if not v or v[-1] != (direction, slot):
                v.append((direction, slot))
        self.assertEqual(len(visits), 5)
        for unit, v in visits.items():
            self.assertRegex(shown, rf"(?m)^{unit} .* {re.escape(' / '.join(s for _, s in v))}$")
        with open(os.path.join(self.plan, "plan.json")) as f:
            plan = json.load(f)
        # What never trains is named: tiny-llama's RoPE inv_freq.
        self.assertEqual(plan["model_buffers"], ["inv_freq"])
        self.assertIn("\nmodel buffers (never trained): inv_freq\n", shown)
        self.assertIn("device memory (bf16 storage): ", shown)
        for part in plan["device_memory"]["breakdown"]:
            self.assertRegex(shown, rf"(?m)^  {part} +\d")
        self.assertIn("predicted on h200-pcie5: step", shown)
        pred = plan["prediction"]
        self.assertIn(f"kernels per step: GEMMs {pred['gemm_s']:.3f} s", shown)
        self.assertIn(f"attention {pred['attention_s']:.3f} s", shown)
        self.assertEqual(pred["attention_efficiency"], 0.06)
        self.assertIn("attention taken at 6% of the dense peak", shown)
        self.assertEqual(json.loads(run([MEGATRAIN, "inspect", self.plan, "--json"]).stdout),
                         plan)
        missing = run([MEGATRAIN, "inspect", self.w("no-such-plan")], check=False)
        self.assertBadInput(missing, "no-such-plan")

    def test_stress_is_bitwise_equal(self):
        w = self.w
        self.train("--steps", "4", "--log-jsonl", w("plain.jsonl"), "--export", w("plain.st"))
        self.train("--steps", "4", "--stress", "--seed", "7",
                   "--log-jsonl", w("stress.jsonl"), "--export", w("stress.st"))
        losses = lambda f: [r["loss"] for r in read_jsonl(w(f))]
        self.assertEqual(losses("plain.jsonl"), losses("stress.jsonl"))
        with open(w("plain.st"), "rb") as a, open(w("stress.st"), "rb") as b:
            self.assertEqual(a.read(), b.read())

    def test_resume_is_bitwise_equal(self):
        w = self.w
        flags = ["--lr-schedule", "constant", "--lr", "1e-3"]
        self.train("--steps", "6", *flags, "--export", w("whole.st"),
                   "--log-jsonl", w("whole.jsonl"))
        shutil.rmtree(w("ck"), ignore_errors=True)
        self.train("--steps", "3", *flags, "--checkpoint-dir", w("ck"))
        self.train("--steps", "6", *flags, "--resume", w("ck"), "--export", w("resumed.st"),
                   "--log-jsonl", w("resumed.jsonl"))
        with open(w("whole.st"), "rb") as a, open(w("resumed.st"), "rb") as b:
            self.assertEqual(a.read(), b.read())
        whole = [r["loss"] for r in read_jsonl(w("whole.jsonl"))][3:]
        self.assertEqual(whole, [r["loss"] for r in read_jsonl(w("resumed.jsonl"))])

    def test_token_file_not_whole_ids(self):
        path = self.w("odd.u32")
        with open(path, "wb") as f:
            f.write(b"\x01\x00\x00\x00" * 100 + b"\x01\x02")
        r = self.w.train(self.plan, "--data", path, "--steps", "1", check=False)
        self.assertBadInput(r, path, "multiple of 4")

    def test_token_id_beyond_vocab(self):
        path = self.w("big.u32")
        ids = np.arange(200, dtype="<u4") % 256
        ids[77] = 300
        ids.tofile(path)
        r = self.w.train(self.plan, "--data", path, "--steps", "1", check=False)
        self.assertBadInput(r, path, "300")

    def test_missing_token_file(self):
        r = self.w.train(self.plan, "--data", self.w("absent.u32"), "--steps", "1", check=False)
        self.assertBadInput(r, "absent.u32")

    def test_checkpoint_of_another_model(self):
        w = self.w
        shutil.rmtree(w("gpt2ck"), ignore_errors=True)
        self.train("--steps", "1", "--checkpoint-dir", w("gpt2ck"), plan=self.other_plan)
        r = self.train("--steps", "2", "--resume", w("gpt2ck"), check=False)
        self.assertBadInput(r, "gpt2ck")

    def test_missing_checkpoint(self):
        r = self.train("--steps", "2", "--resume", self.w("nowhere"), check=False)
        self.assertBadInput(r, "nowhere")

    def test_corrupt_checkpoint(self):
        w = self.w
        shutil.rmtree(w("bad"), ignore_errors=True)
        self.train("--steps", "1", "--checkpoint-dir", w("bad"))
        step = os.path.join(w("bad"), sorted(d for d in os.listdir(w("bad")) if d.startswith("step-"))[-1])
        state = os.path.join(step, "state.safetensors")
        with open(state, "r+b") as f:
            f.seek(os.path.getsize(state) // 2)
            f.write(b"\xff" * 64)
        r = self.train("--steps", "2", "--resume", w("bad"), check=False)
        self.assertBadInput(r, "state.safetensors")

    def test_program_missing_an_update_is_refused(self):
        # The embedding in two vocabulary pieces, units u0 and u1, each
        # owning half of its table. A plan whose step drops u1's AdamW would
        # leave those rows untrained: the trainer refuses it at start-up.
        w = self.w
        plan, _ = w.compile(w.export("tiny-llama"), "pieces", "--batch", "2", "--seq-len", "16",
                            "--vocab-pieces", "2", "--no-build")
        with open(os.path.join(plan, "trainer.cpp")) as f:
            code = f.read()
        adamw_u1 = "    {mtrt::Op::AdamW, mtrt::Stream::Host, 1, -1, 0, -1},\n"
        self.assertEqual(code.count(adamw_u1), 1)
        self.assertIn('{"u1", "embedding"', code)
        code = code.replace(adamw_u1, "")
        code = re.sub(r"(\d+), kCommands,", lambda m: f"{int(m.group(1)) - 1}, kCommands,", code)
        with open(os.path.join(plan, "trainer.cpp"), "w") as f:
            f.write(code)
        run(["cmake", "-S", plan, "-B", os.path.join(plan, "build")])
        run(["cmake", "--build", os.path.join(plan, "build"), "-j", "2"])
        r = self.train("--steps", "1", check=False, plan=plan)
        self.assertBadInput(r, "unit 'u1'", "adamw")

    def test_kill_during_checkpoints_keeps_one_loadable(self):
        w = self.w
        shutil.rmtree(w("killed"), ignore_errors=True)
        flags = ["--lr-schedule", "constant"]
        cmd = [os.path.join(self.plan, "trainer"), "--data", self.data, "--steps", "100000",
               "--checkpoint-dir", w("killed"), "--checkpoint-every", "1", *flags]
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 60
        while not os.path.exists(os.path.join(w("killed"), "latest")) and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.37)  # somewhere in the middle of writing one
        p.send_signal(signal.SIGKILL)
        p.wait()
        # Resuming continues from whichever checkpoint was complete; train
        # one step past it.
        with open(os.path.join(w("killed"), "latest")) as f:
            latest = f.read().strip()
        done = int(latest.rsplit("-", 1)[-1])
        r = self.train("--steps", str(done + 1), "--resume", w("killed"), *flags,
                       "--log-jsonl", w("after.jsonl"), check=False)
        self.assertEqual(r.returncode, 0, r.stderr)
        records = read_jsonl(w("after.jsonl"))
        self.assertTrue(records and all(np.isfinite(x["loss"]) for x in records))


if __name__ == "__main__":
    unittest.main()


class ExportOnnx(unittest.TestCase):
    """--export then `megatrain export-onnx`: an ONNX copy holding the
    trained weights, ties kept consistent, that compiles again."""

    def test_trained_copy(self):
        import onnx
        from onnx import numpy_helper
        from safetensors.numpy import load_file

        from tests.e2e.harness import MEGATRAIN, run

        w = Workdir()
        data = w.corpus()
        src = w.export("tiny-llama-tied", folded=True)
        plan, _ = w.compile(src, "tied", "--batch", "2", "--seq-len", "16")
        w.train(plan, "--data", data, "--steps", "2", "--export", w("trained.st"))
        run([MEGATRAIN, "export-onnx", src, w("trained.st"), "-o", w("trained.onnx")])
        weights = load_file(w("trained.st"))
        model = onnx.load(w("trained.onnx"))
        original = {i.name: numpy_helper.to_array(i) for i in onnx.load(src).graph.initializer}
        inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
        trained = [k for k in weights if k in inits]
        self.assertGreater(len(trained), 10)
        for k in trained:
            np.testing.assert_array_equal(weights[k], inits[k], err_msg=k)
            self.assertFalse(np.array_equal(inits[k], original[k]), f"{k} did not train")
        # The folded head is the embedding transposed, before and after.
        heads = [k for k in inits if k.startswith("onnx::MatMul")]
        self.assertTrue(any(np.array_equal(inits[h].T, inits["embed_tokens.weight"])
                            for h in heads))
        onnx.checker.check_model(model)
        w.compile(w("trained.onnx"), "again", "--batch", "2", "--seq-len", "16")
