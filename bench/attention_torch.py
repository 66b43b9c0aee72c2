#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention on attention_bench's shapes.

    python3 bench/attention_torch.py ATTENTION_JSON [--json OUT] [--iters N]

Reads the rows attention_bench wrote (--json), times torch's causal SDPA
(bf16, its fastest backend: flash attention on Hopper) forward and
backward on each shape without a window or chunks (SDPA has neither short
of a dense mask), counting TFLOPS as attention_bench does, and prints our
kernels and torch's side by side. Grouped KV heads are expanded to H heads
before timing, outside the timed region.
"""
import argparse
import json
import sys

import torch
import torch.nn.functional as F


def time_ms(fn, iters):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


def pairs(s, w):
    w = w if 0 < w < s else s
    return s * w - w * (w - 1) / 2


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("ours", help="attention_bench's --json output")
    p.add_argument("--json", help="where to write the side-by-side rows")
    p.add_argument("--iters", type=int, default=5)
    a = p.parse_args()
    try:
        rows = json.load(open(a.ours))
    except (OSError, ValueError) as e:
        sys.exit(f"error: {a.ours}: {e}")
    if not torch.cuda.is_available():
        sys.exit("error: no CUDA device for torch")
    out = []
    print("| shape | ours fwd / bwd TFLOPS | torch SDPA fwd / bwd TFLOPS | ours / torch fwd, bwd |")
    print("|---|---|---|---|")
    for r in rows:
        row = dict(r)
        if r["window"] == 0 and r.get("chunk", 0) == 0:
            B, H, Hkv, S, D = r["B"], r["H"], r["Hkv"], r["S"], r["D"]
            q = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            k = torch.randn(B, Hkv, S, D, device="cuda", dtype=torch.bfloat16)
            v = torch.randn(B, Hkv, S, D, device="cuda", dtype=torch.bfloat16)
            k = k.repeat_interleave(H // Hkv, dim=1).requires_grad_()
            v = v.repeat_interleave(H // Hkv, dim=1).requires_grad_()
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            dy = torch.randn_like(y)
            fwd = time_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), a.iters)
            bwd = time_ms(lambda: torch.autograd.grad(y, (q, k, v), dy, retain_graph=True), a.iters)
            flops = 4.0 * B * H * pairs(S, 0) * D
            row.update(torch_fwd_ms=fwd, torch_bwd_ms=bwd,
                       torch_fwd_tflops=flops / fwd / 1e9, torch_bwd_tflops=2.5 * flops / bwd / 1e9)
            print(f"| {r['name']} | {r['fwd_tflops']:.1f} / {r['bwd_tflops']:.1f} | "
                  f"{row['torch_fwd_tflops']:.1f} / {row['torch_bwd_tflops']:.1f} | "
                  f"{r['fwd_tflops'] / row['torch_fwd_tflops']:.2f}, "
                  f"{r['bwd_tflops'] / row['torch_bwd_tflops']:.2f} |")
            del q, k, v, y, dy
        else:
            print(f"| {r['name']} | {r['fwd_tflops']:.1f} / {r['bwd_tflops']:.1f} | – | – |")
        out.append(row)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
