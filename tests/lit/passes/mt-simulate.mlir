// RUN: megatrain-opt %s -split-input-file --mt-derive-backward --mt-partition --mt-pack-weights --mt-schedule="micro-batches=2" --mt-insert-transfers --mt-insert-events --mt-plan-memory --mt-verify-schedule --mt-simulate | FileCheck %s
// RUN: megatrain-opt %s -split-input-file --mt-derive-backward --mt-partition --mt-pack-weights --mt-schedule="micro-batches=2" --mt-insert-transfers --mt-insert-events --mt-plan-memory --mt-verify-schedule --mt-simulate="h2d-gbps=1.024 host-gbps=3.072 copy-latency-us=0 trace=%t.json" | FileCheck %s --check-prefix=CLOSED
// RUN: FileCheck %s --check-prefix=TRACE < %t.json
// RUN: not megatrain-opt %s -split-input-file --mt-simulate="preset=tpu-v9" 2>&1 | FileCheck %s --check-prefix=PRESET
// RUN: not megatrain-opt %s -split-input-file --mt-simulate="attention-efficiency=1.5" 2>&1 | FileCheck %s --check-prefix=ATTENTION
// RUN: sed 's/master_weights = "bf16"/master_weights = "fp8"/' %s | not megatrain-opt -split-input-file --mt-simulate 2>&1 | FileCheck %s --check-prefix=MASTER

// The whole pipeline, then the default machine (h200-pcie5): the prediction
// sits on mt.schedule with every key inspect and plan.json read.
// CHECK-LABEL: mt.schedule @step
// CHECK-SAME: prediction = {{[{]}}active_params = {{.*}} : f64, attention_efficiency = 6.000000e-02 : f64, attention_s = {{.*}} : f64, compute_busy_fraction = {{.*}} : f64, d2h_busy_fraction = {{.*}} : f64, gemm_s = {{.*}} : f64, h2d_busy_fraction = {{.*}} : f64, host_busy_fraction = {{.*}} : f64, link_bound_fraction = {{.*}} : f64, model_tflops = {{.*}} : f64, other_kernels_s = {{.*}} : f64, preset = "h200-pcie5", step_s = {{.*}} : f64, suggested_micro_batches = {{[0-9]+}} : i64, tokens_per_s = {{[0-9.e+-]+}} : f64}
// Unknown presets are named, with the list of known ones.
// PRESET: error: mt-simulate: unknown preset 'tpu-v9' (presets: h200-pcie5, gh200, a100-pcie4, rtx3090-pcie4)
// An attention efficiency is a fraction of the peak.
// ATTENTION: error: mt-simulate: attention-efficiency 1.500000e+00 is not a fraction of the peak in (0, 1]
module {
  mt.param @wte : tensor<32x16xf32>
  mt.param @l0.ln : tensor<16xf32>
  mt.param @l0.wq : tensor<16x16xf32>
  mt.param @l1.ln : tensor<16xf32>
  mt.param @l1.wq : tensor<16x16xf32>
  mt.param @norm : tensor<16xf32>
  mt.param @lm_head tied to @wte {transposed} : tensor<16x32xf32>
  mt.template @embedding kind "embedding" (%ids: tensor<1x8xi32>) params (%t: tensor<32x16xf32>) -> (tensor<1x8x16xf32>) {
    %h = mt.embed %ids, %t : (tensor<1x8xi32>, tensor<32x16xf32>) -> tensor<1x8x16xf32>
    mt.yield %h : tensor<1x8x16xf32>
  }
  mt.template @layer kind "layer" (%x: tensor<1x8x16xf32>) params (%ln: tensor<16xf32>, %wq: tensor<16x16xf32>) -> (tensor<1x8x16xf32>) {
    %n = mt.rms_norm %x, %ln {eps = 1.0e-5 : f64} : (tensor<1x8x16xf32>, tensor<16xf32>) -> tensor<1x8x16xf32>
    %q = mt.linear %n, %wq : (tensor<1x8x16xf32>, tensor<16x16xf32>) -> tensor<1x8x16xf32>
    %y = mt.add %x, %q : (tensor<1x8x16xf32>, tensor<1x8x16xf32>) -> tensor<1x8x16xf32>
    mt.yield %y : tensor<1x8x16xf32>
  }
  mt.template @head kind "head" (%x: tensor<1x8x16xf32>) params (%g: tensor<16xf32>, %w: tensor<16x32xf32>) -> (tensor<1x8x32xf32>) {
    %n = mt.rms_norm %x, %g {eps = 1.0e-5 : f64} : (tensor<1x8x16xf32>, tensor<16xf32>) -> tensor<1x8x16xf32>
    %l = mt.linear %n, %w {w_layout = "in_out"} : (tensor<1x8x16xf32>, tensor<16x32xf32>) -> tensor<1x8x32xf32>
    mt.yield %l : tensor<1x8x32xf32>
  }
  mt.model @main(%tokens: tensor<1x8xi32>, %targets: tensor<1x8xi32>) -> (tensor<f32>) {
    %h0 = mt.apply @embedding(%tokens) params(@wte) : (tensor<1x8xi32>) -> tensor<1x8x16xf32>
    %h1 = mt.apply @layer(%h0) layer(0) params(@l0.ln, @l0.wq) : (tensor<1x8x16xf32>) -> tensor<1x8x16xf32>
    %h2 = mt.apply @layer(%h1) layer(1) params(@l1.ln, @l1.wq) : (tensor<1x8x16xf32>) -> tensor<1x8x16xf32>
    %lg = mt.apply @head(%h2) params(@norm, @lm_head) : (tensor<1x8x16xf32>) -> tensor<1x8x32xf32>
    %loss = mt.cross_entropy %lg, %targets : (tensor<1x8x32xf32>, tensor<1x8xi32>) -> tensor<f32>
    mt.return %loss : tensor<f32>
  }
}

// -----

// The closed form below with bf16 master weights: packing reads 2 B and
// writes 2 B per element (0.667 ms), the copy is unchanged (1 ms): a
// 1.667 ms step, host busy 40%, h2d 60%. Another value is an error.
// CLOSED-LABEL: mt.unit @u1 kind "layer" applies [0] params [@w]
// CLOSED: host_busy_fraction = {{(0\.39999[0-9]*|4\.0+e-01)}} : f64
// CLOSED-SAME: step_s = {{(0\.0016666[0-9]*|1\.6666[0-9]*e-03)}} : f64
// MASTER: error: mt.master_weights must be "fp32" or "bf16", not "fp8"
module attributes {mt.master_weights = "bf16"} {
  mt.param @w : tensor<512000xf32>
  mt.unit @u1 kind "layer" applies [0] params [@w]
  mt.buffer @tokens "device" "tokens" {dtype = "i32", elems = 2048 : i64}
  mt.buffer @stage "host" "staging" {dtype = "storage", elems = 512000 : i64}
  mt.buffer @slot "device" "weights" {dtype = "storage", elems = 512000 : i64}
  mt.event @stage.ready "param_ready"
  mt.event @stage.free "buffer_free"
  mt.schedule @step attributes {micro_batches = 1 : i64} {
    mt.wait @stage.free on "host"
    mt.pack @u1 into @stage on "host"
    mt.record @stage.ready on "host"
    mt.wait @stage.ready on "h2d"
    mt.h2d @stage into @slot on "h2d"
    mt.record @stage.free on "h2d"
  }
}

// -----

// A closed form: packing 512000 elements moves 6 B each over 3.072 GB/s
// (1 ms) and the copy 2 B each over 1.024 GB/s (1 ms). The free event makes
// the next step's pack wait for this step's copy, so the two never overlap:
// a 2 ms step, each stream busy half of it. The token buffer holds ids and
// targets of 1024 tokens: 1024 / 2 ms tokens/s, and 6 · 512000 params ·
// 1024 tokens / 2 ms = 1.572864 model TFLOPS. (The passes before
// mt-simulate leave this already scheduled module as it is.)
// CLOSED-LABEL: mt.unit @u0 kind "layer" applies [0] params [@w]
// CLOSED: prediction = {active_params = 5.120000e+05 : f64, attention_efficiency = 6.000000e-02 : f64, attention_s = 0.000000e+00 : f64, compute_busy_fraction = 0.000000e+00 : f64, d2h_busy_fraction = 0.000000e+00 : f64, gemm_s = 0.000000e+00 : f64, h2d_busy_fraction = 5.000000e-01 : f64, host_busy_fraction = 5.000000e-01 : f64, link_bound_fraction = 0.000000e+00 : f64, model_tflops = 1.572864 : f64, other_kernels_s = 0.000000e+00 : f64, preset = "h200-pcie5", step_s = 2.000000e-03 : f64, suggested_micro_batches = 0 : i64, tokens_per_s = 5.120000e+05 : f64}
// The trace: a thread per stream, then the commands as complete events in
// microseconds (this module is the last one simulated, so its trace stays).
// TRACE: {"args":{"name":"h2d"},"name":"thread_name","ph":"M","pid":0,"tid":0}
// TRACE-SAME: {"args":{"name":"host"},"name":"thread_name","ph":"M","pid":0,"tid":3}
// TRACE-SAME: {"args":{"step":0},"cat":"run","dur":1000{{[.0-9]*}},"name":"pack @u0","ph":"X","pid":0,"tid":3,"ts":0}
// TRACE-SAME: "name":"h2d @stage -> @slot","ph":"X","pid":0,"tid":0,"ts":1000
module {
  mt.param @w : tensor<512000xf32>
  mt.unit @u0 kind "layer" applies [0] params [@w]
  mt.buffer @tokens "device" "tokens" {dtype = "i32", elems = 2048 : i64}
  mt.buffer @stage "host" "staging" {dtype = "storage", elems = 512000 : i64}
  mt.buffer @slot "device" "weights" {dtype = "storage", elems = 512000 : i64}
  mt.event @stage.ready "param_ready"
  mt.event @stage.free "buffer_free"
  mt.schedule @step attributes {micro_batches = 1 : i64} {
    mt.wait @stage.free on "host"
    mt.pack @u0 into @stage on "host"
    mt.record @stage.ready on "host"
    mt.wait @stage.ready on "h2d"
    mt.h2d @stage into @slot on "h2d"
    mt.record @stage.free on "h2d"
  }
}

