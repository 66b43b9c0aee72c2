#!/usr/bin/python3
"""torch.optim.AdamW(foreach=True) on CPU, in params/s, to set beside
bench/adamw_bench's figure for the same parameter count and thread count.

    /usr/bin/python3 bench/adamw_vs_torch.py --params 256M --threads 2

The parameters are split into --tensors equal tensors, as a model's are; the
first step (which allocates the moments) is not timed.
"""
import argparse
import statistics
import time

import torch


def count(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text[-1:].upper() in units:
        return int(float(text[:-1]) * units[text[-1].upper()])
    return int(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", type=count, default=256 << 20,
                    help="total parameters, with K/M/G = 2^10/2^20/2^30")
    ap.add_argument("--tensors", type=int, default=64)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--iters", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    sizes = [args.params // args.tensors] * args.tensors
    sizes[-1] += args.params - sum(sizes)
    params = [torch.nn.Parameter(torch.empty(n).uniform_(-0.05, 0.05))
              for n in sizes]
    for p in params:
        p.grad = torch.empty_like(p).uniform_(-1e-2, 1e-2)
    opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=1e-2, foreach=True)
    opt.step()

    times = []
    for _ in range(args.iters):
        t0 = time.perf_counter()
        opt.step()
        times.append(time.perf_counter() - t0)
    best, median = min(times), statistics.median(times)
    print(f"torch {torch.__version__} AdamW(foreach=True), {args.threads} threads, "
          f"{args.params} params in {args.tensors} tensors")
    print(f"torch params/s: {args.params / best:.4g} best, "
          f"{args.params / median:.4g} median ({best:.3f} s best)")


if __name__ == "__main__":
    main()
