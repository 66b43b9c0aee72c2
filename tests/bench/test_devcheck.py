"""bench/device/devcheck.py: Nsight Compute's kernel durations, the
attention table's dQ / dK-dV split and cuDNN's column, the tile table's
fastest choices, a benchmark run of a plan another way (its prediction at
cuDNN's rate, the warnings it gave), and the runs against the targets, on
CSV and JSON written by hand in the layouts those tools write."""
import contextlib
import io
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "device"))
import devcheck  # noqa: E402

HEAD = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
        '"Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit",'
        '"Metric Value"\n')


def details_row(i, kernel, unit, value):
    return (f'"{i}","7","trainer","h","{kernel}","1","13","(128, 1, 1)","(64, 32, 1)","0","9.0",'
            f'"Command line profiler metrics","gpu__time_duration.sum","{unit}","{value}"\n')


class KernelNames(unittest.TestCase):
    def test_return_type_namespaces_and_parameters_go(self):
        full = ("void mtrt::cuda::attn::(anonymous namespace)::forward_kernel<128>"
                "(__nv_bfloat16 *, const __nv_bfloat16 *, long, mtrt::KeyRange, "
                "mtrt::cuda::attn::ScoreForm)")
        self.assertEqual(devcheck.kernel_name(full), "forward_kernel<128>")

    def test_namespaces_inside_template_arguments_stay(self):
        full = ("void mtrt::cuda::(anonymous namespace)::pointwise_kernel<"
                "(mtrt::cuda::(anonymous namespace)::Pointwise)3>(__nv_bfloat16 *, long)")
        self.assertEqual(devcheck.kernel_name(full),
                         "pointwise_kernel<(mtrt::cuda::(anonymous namespace)::Pointwise)3>")

    def test_a_bare_name_is_kept(self):
        name = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_kernel"
        self.assertEqual(devcheck.kernel_name(name), name)


class NcuDurations(unittest.TestCase):
    def write(self, text):
        f = tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False)
        f.write(text)
        f.close()
        self.addCleanup(os.unlink, f.name)
        return f.name

    def test_details_page_with_units_and_thousands(self):
        path = self.write("==PROF== Connected to process 7\n" + HEAD
                          + details_row(0, "void ns::rope_kernel<false>(long)", "usecond", "1,250.5")
                          + details_row(1, "void ns::rope_kernel<false>(long)", "nsecond", "500")
                          + details_row(2, "sm90_gemm", "msecond", "2.5"))
        self.assertEqual(devcheck.ncu_durations(path),
                         [("rope_kernel<false>", 1250500.0), ("rope_kernel<false>", 500.0),
                          ("sm90_gemm", 2500000.0)])

    def test_raw_page_with_a_units_row(self):
        path = self.write('"ID","Kernel Name","gpu__time_duration.sum"\n'
                          '"","","usecond"\n"0","k1(int)","3"\n"1","k2","1,000"\n')
        self.assertEqual(devcheck.ncu_durations(path), [("k1", 3000.0), ("k2", 1e6)])

    def test_no_header_is_an_error(self):
        path = self.write("==ERROR== The application returned an error code (1).\n")
        with self.assertRaises(ValueError):
            devcheck.ncu_durations(path)

    def test_table_by_kernel(self):
        path = self.write(HEAD + details_row(0, "a(int)", "nsecond", "300")
                          + details_row(1, "b(int)", "nsecond", "600")
                          + details_row(2, "a(int)", "nsecond", "100"))
        with tempfile.TemporaryDirectory() as work:
            with contextlib.redirect_stdout(io.StringIO()):
                self.assertEqual(devcheck.cmd_kernels("m", path, work), 0)
            with open(os.path.join(work, "kernels-m.json")) as f:
                table = json.load(f)
        self.assertEqual(table["launches"], 3)
        self.assertEqual([(r["kernel"], r["launches"]) for r in table["kernels"]],
                         [("b", 1), ("a", 2)])
        self.assertAlmostEqual(table["kernels"][0]["share"], 0.6)
        self.assertAlmostEqual(table["kernels"][1]["ms"], 4e-4)


def attention_row(name, **extra):
    row = {"name": name, "B": 1, "H": 2, "Hkv": 1, "S": 64, "D": 64, "window": 0, "chunk": 0,
           "fwd_ms": 1.0, "bwd_ms": 3.0, "dq_ms": 1.25, "fwd_tflops": 10.0, "bwd_tflops": 8.0,
           "cuda_cores_fwd_tflops": None, "cuda_cores_bwd_tflops": None, "finite": True}
    row.update(extra)
    return row


def summary_of_attention(rows):
    """The report's summary.md for an attention.json of `rows` alone."""
    with tempfile.TemporaryDirectory() as work, tempfile.TemporaryDirectory() as out:
        with open(os.path.join(work, "attention.json"), "w") as f:
            json.dump(rows, f)
        with contextlib.redirect_stdout(io.StringIO()):
            devcheck.cmd_report(work, out)
        with open(os.path.join(out, "summary.md")) as f:
            return f.read()


class Report(unittest.TestCase):
    def test_attention_rows_split_the_backward(self):
        summary = summary_of_attention([attention_row("x")])
        self.assertIn("| x | 1 2 1 64 64 0 0 | 10.0 / 8.0 | – / – | 3.000 / 1.250 + 1.750 | – / – | – |",
                      summary)

    def test_attention_rows_show_the_sequence_major_layout_beside(self):
        summary = summary_of_attention([attention_row(
            "s", seq_major_fwd_tflops=9.5, seq_major_bwd_tflops=7.0)])
        self.assertIn("| s | 1 2 1 64 64 0 0 | 10.0 / 8.0 | 9.5 / 7.0 | 3.000 / 1.250 + 1.750 |",
                      summary)

    def test_attention_rows_set_the_gemm_backward_beside_the_two_passes(self):
        summary = summary_of_attention([attention_row("g", bwd_ms=2.5, two_pass_ms=3.0)])
        self.assertIn("| g | 1 2 1 64 64 0 0 | 10.0 / 8.0 | – / – | 2.500 / 1.250 + 1.750 |", summary)

    def test_attention_rows_show_cudnn_beside_ours(self):
        summary = summary_of_attention([attention_row(
            "y", cudnn_fwd_tflops=400.0, cudnn_bwd_tflops=300.0,
            cudnn_nondeterministic_bwd_tflops=350.0, cudnn_fwd_difference=0.0031)])
        self.assertIn("| y | 1 2 1 64 64 0 0 | 10.0 / 8.0 | – / – | 3.000 / 1.250 + 1.750 | – / – "
                      "| 400.0 / 300.0 / 350.0 (3.1e-03) |", summary)

    def test_a_deterministic_backward_past_its_bound_is_left_blank(self):
        summary = summary_of_attention([attention_row(
            "z", cudnn_fwd_tflops=400.0, cudnn_bwd_tflops=None,
            cudnn_nondeterministic_bwd_tflops=350.0, cudnn_fwd_difference=0.0031)])
        self.assertIn("| 400.0 / – / 350.0 (3.1e-03) |", summary)

    def test_a_forward_without_an_engine_leaves_the_backwards(self):
        summary = summary_of_attention([attention_row(
            "w", cudnn_fwd_tflops=None, cudnn_bwd_tflops=None,
            cudnn_nondeterministic_bwd_tflops=350.0, cudnn_fwd_difference=None)])
        self.assertIn("| – / – / 350.0 (–) |", summary)


def tile_row(shape, tiles, runtime=False, **extra):
    row = {"shape": shape, "tiles": tiles, "runtime": runtime, "fwd_ms": 1.0, "dq_ms": 1.0,
           "dkdv_ms": 2.0, "fwd_tflops": 100.0, "bwd_tflops": 80.0, "difference": 0.0}
    row.update(extra)
    return row


class AttentionTiles(unittest.TestCase):
    def test_no_rows_no_section(self):
        self.assertEqual(devcheck.tile_lines([]), [])

    def test_the_fastest_that_agrees_per_kernel_and_shape(self):
        lines = devcheck.tile_lines([
            tile_row("s", "a", runtime=True),
            tile_row("s", "b", fwd_ms=0.5, dkdv_ms=2.5),
            # Fastest of all, but its outputs differ from the runtime's.
            tile_row("s", "c", fwd_ms=0.25, dq_ms=0.1, difference=0.5),
            tile_row("t", "a", runtime=True, dq_ms=2.0),
            tile_row("t", "b", dq_ms=1.6)])
        self.assertIn("| s | a (runtime) | 100.0 | 1.000 | 2.000 | 80.0 | 0.0e+00 |", lines)
        self.assertIn("| s | b (2.00x) | a (1.00x) | a (1.00x) |", lines)
        self.assertIn("| t | a (1.00x) | b (1.25x) | a (1.00x) |", lines)


class Benchmarks(unittest.TestCase):
    def test_a_variant_reads_its_plans_json_and_shows_its_first_loss(self):
        with tempfile.TemporaryDirectory() as work:
            os.makedirs(os.path.join(work, "plans", "m"))
            with open(os.path.join(work, "plans", "m", "plan.json"), "w") as f:
                json.dump({"trained_params": 2e9, "micro_batches": 2}, f)
            with open(os.path.join(work, "m+cudnn.jsonl"), "w") as f:
                for step, loss in ((0, 10.5), (1, 9.25)):
                    f.write(json.dumps({"step": step, "loss": loss, "tokens": 1000,
                                        "tokens_per_s": 500.0}) + "\n")
            row = devcheck.bench_row(work, "m+cudnn")
        self.assertEqual(row["params"], 2e9)
        self.assertEqual(row["micro_batches"], 2)
        self.assertEqual(row["first_loss"], 10.5)
        self.assertAlmostEqual(row["step_s"], 2.0)
        self.assertEqual(row["prediction"], {})

    def test_a_cudnn_variant_takes_the_prediction_at_cudnns_rate(self):
        with tempfile.TemporaryDirectory() as work:
            plan_dir = os.path.join(work, "plans", "m")
            os.makedirs(plan_dir)
            with open(os.path.join(plan_dir, "plan.json"), "w") as f:
                json.dump({"trained_params": 2e9, "prediction": {"step_s": 3.0}}, f)
            with open(os.path.join(plan_dir, "prediction-cudnn.json"), "w") as f:
                json.dump({"step_s": 1.5, "attention_efficiency": 0.5}, f)
            self.assertEqual(devcheck.bench_row(work, "m")["prediction"]["step_s"], 3.0)
            self.assertEqual(devcheck.bench_row(work, "m+cudnn")["prediction"]["step_s"], 1.5)
            self.assertEqual(
                devcheck.bench_row(work, "m+cudnn-nondeterministic")["prediction"]["step_s"], 1.5)


    def test_a_runs_warnings_come_with_its_row_once_each(self):
        with tempfile.TemporaryDirectory() as work:
            os.makedirs(os.path.join(work, "plans", "m"))
            with open(os.path.join(work, "m+cudnn.log"), "w") as f:
                f.write("$ trainer --backend cuda\n"
                        "warning: cuDNN has no engine for the attention forward of B=4\n"
                        "step 0 loss 10.5\n"
                        "warning: cuDNN has no engine for the attention forward of B=4\n")
            with open(os.path.join(work, "m.log"), "w") as f:
                f.write("step 0 loss 10.5\n")
            self.assertEqual(devcheck.bench_row(work, "m+cudnn")["warnings"],
                             ["warning: cuDNN has no engine for the attention forward of B=4"])
            self.assertEqual(devcheck.bench_row(work, "m")["warnings"], [])
            with open(os.path.join(work, "stages.jsonl"), "w") as f:
                for name in ("bench m", "bench m+cudnn"):
                    f.write(json.dumps({"name": name, "status": "ok"}) + "\n")
            with tempfile.TemporaryDirectory() as out:
                with contextlib.redirect_stdout(io.StringIO()):
                    devcheck.cmd_report(work, out)
                with open(os.path.join(out, "summary.md")) as f:
                    summary = f.read()
        self.assertEqual(summary.count("- m+cudnn: `warning: cuDNN has no engine for the "
                                       "attention forward of B=4`"), 1)
        self.assertNotIn("- m: ", summary)


class Targets(unittest.TestCase):
    def test_each_run_against_the_three_targets(self):
        benches = [
            {"name": "llama-1b", "tokens_per_s": 20000.0, "tokens_per_step": 49152,
             "gpu_busy_fraction": 0.95, "model_tflops": 130.0},
            {"name": "llama-1b+cudnn", "tokens_per_s": 40000.0, "tokens_per_step": 49152,
             "gpu_busy_fraction": 0.85, "model_tflops": 260.0},
            {"name": "llama-7b-24g+cudnn", "tokens_per_s": 6500.0, "tokens_per_step": 65536,
             "gpu_busy_fraction": None, "model_tflops": 262.5},
            {"name": "llama-7b-24g", "tokens_per_s": 5000.0, "tokens_per_step": 65536,
             "gpu_busy_fraction": 0.8, "model_tflops": 200.0},
            {"name": "llama-3b", "tokens_per_s": None},  # a run that failed
        ]
        fsdp = [{"name": "llama-1b", "tokens_per_s": 16000.0, "batch": 24, "seq": 2048},
                {"name": "llama-3b", "tokens_per_s": 5000.0, "batch": 28, "seq": 2048}]
        lines = devcheck.target_lines(benches, fsdp)
        self.assertIn("| llama-1b | 1.25x, not met | 0.95, met | 130.0 |", lines)
        self.assertIn("| llama-1b+cudnn | 2.50x, met | 0.85, not met | 260.0 |", lines)
        self.assertIn("| llama-7b-24g+cudnn | – | – | 262.5, met |", lines)
        self.assertIn("| llama-7b-24g | – | 0.80, not met | 200.0, not met |", lines)
        self.assertFalse(any(line.startswith("| llama-3b") for line in lines))

    def test_a_peer_at_another_batch_is_said_so(self):
        lines = devcheck.target_lines(
            [{"name": "m", "tokens_per_s": 300.0, "tokens_per_step": 1000,
              "gpu_busy_fraction": 0.9, "model_tflops": 1.0}],
            [{"name": "m", "tokens_per_s": 100.0, "batch": 1, "seq": 500}])
        self.assertIn("| m | 3.00x, met (other batch) | 0.90, met | 1.0 |", lines)

    def test_no_runs_no_section(self):
        self.assertEqual(devcheck.target_lines([], []), [])


# ctest's lines as it prints them (a skipped gtest case, a failure, a timeout).
CTEST_CUDA = """Test project /tmp/megatrain-devcheck/build
      Start  1: CudaKernelsTest.Linear
 1/5 Test  #1: CudaKernelsTest.Linear ...........................   Passed    0.41 sec
 2/5 Test  #2: Cudnn/AttentionTest.ForwardAndBackward/0 .........   Passed    1.20 sec
 3/5 Test  #3: Cudnn/AttentionTest.ForwardAndBackward/1 .........***Skipped   0.01 sec
 4/5 Test  #4: TensorCores/AttentionTest.ForwardAndBackward/2 ...***Failed    0.30 sec
 5/5 Test  #5: Conformance/ConformanceTest.Step/cuda ............***Timeout 150.01 sec

60% tests passed, 2 tests failed out of 5
"""


def write(work, name, text):
    with open(os.path.join(work, name), "w") as f:
        f.write(text)


class Tests(unittest.TestCase):
    def test_counts_from_the_cuda_log_with_cudnns_apart(self):
        with tempfile.TemporaryDirectory() as work:
            write(work, "ctest-cuda.log", CTEST_CUDA)
            with contextlib.redirect_stdout(io.StringIO()):
                rc = devcheck.cmd_tests(work)
            with open(os.path.join(work, "tests.json")) as f:
                res = json.load(f)
        self.assertEqual(rc, 1)
        self.assertEqual((res["passed"], res["skipped"], res["failed"], res["total"]), (2, 1, 2, 5))
        self.assertEqual((res["cudnn_passed"], res["cudnn_skipped"], res["cudnn_failed"]), (1, 1, 0))
        self.assertEqual(res["failed_names"], ["TensorCores/AttentionTest.ForwardAndBackward/2",
                                               "Conformance/ConformanceTest.Step/cuda"])
        self.assertEqual(res["parts"], ["cuda"])

    def test_the_cpu_log_adds_to_the_totals_not_the_cuda_counts(self):
        with tempfile.TemporaryDirectory() as work:
            write(work, "ctest-cuda.log", CTEST_CUDA)
            write(work, "ctest-cpu.log",
                  " 1/1 Test  #9: HostAdamW.MatchesReference .......   Passed    0.10 sec\n")
            with contextlib.redirect_stdout(io.StringIO()):
                devcheck.cmd_tests(work)
            with open(os.path.join(work, "tests.json")) as f:
                res = json.load(f)
        self.assertEqual((res["passed"], res["cuda_passed"], res["total"]), (3, 2, 6))
        self.assertEqual(res["parts"], ["cuda", "cpu"])

    def test_no_logs_is_a_failure(self):
        with tempfile.TemporaryDirectory() as work:
            with contextlib.redirect_stdout(io.StringIO()):
                self.assertEqual(devcheck.cmd_tests(work), 1)


class CudnnFirst(unittest.TestCase):
    def setUp(self):
        self.work = tempfile.mkdtemp()
        self.addCleanup(lambda: __import__("shutil").rmtree(self.work))

    def given(self, tests, parity):
        if tests is not None:
            write(self.work, "tests.json", json.dumps(tests))
        if parity is not None:
            write(self.work, "tiny-llama+cudnn.parity.json", json.dumps(parity))
        return devcheck.cudnn_ok(self.work)

    def test_its_tests_passed_and_its_parity_on_cudnn(self):
        ok, why = self.given({"cudnn_passed": 12, "cudnn_failed": 0}, {"ok": True, "warnings": []})
        self.assertTrue(ok, why)

    def test_a_failed_cudnn_test(self):
        ok, why = self.given({"cudnn_passed": 11, "cudnn_failed": 1}, {"ok": True})
        self.assertFalse(ok)
        self.assertIn("1 of cuDNN's kernel tests failed", why)

    def test_tests_skipped_or_not_run(self):
        self.assertFalse(self.given({"cudnn_passed": 0, "cudnn_skipped": 12}, {"ok": True})[0])
        self.assertFalse(self.given(None, None)[0])

    def test_parity_failed_or_missing(self):
        self.assertFalse(self.given({"cudnn_passed": 12}, {"ok": False})[0])
        os.remove(os.path.join(self.work, "tiny-llama+cudnn.parity.json"))
        self.assertFalse(devcheck.cudnn_ok(self.work)[0])

    def test_parity_that_ran_partly_on_our_kernels(self):
        ok, why = self.given({"cudnn_passed": 12}, {"ok": True, "warnings": [
            "warning: cuDNN has no engine for the attention forward of B=1; the "
            "tensor-core kernels run it"]})
        self.assertFalse(ok)
        self.assertIn("partly on our kernels", why)


if __name__ == "__main__":
    unittest.main()
