"""Writes a Llama-style decoder of real shape whose weights carry no data.

The graph is what a PyTorch export at opset 17 looks like (dynamic batch and
seq, RMSNorm decomposed, RoPE from an inv_freq constant, GQA by
Unsqueeze/Expand/Reshape, an additive causal mask from Trilu), but every
weight initializer only declares its name, dims and FLOAT type. That lets the
compiler plan 7B-120B models on machines that could never hold them.

    python3 samples/structure_model.py --preset llama-120b -o llama-120b.onnx
    python3 samples/structure_model.py --preset tiny --with-data -o tiny.onnx
"""
import argparse
import dataclasses
import os
import sys

import onnx

from decoder_graph import DecoderShape, decoder
from onnx_build import Graph

PRESETS = {
    "tiny": DecoderShape(vocab=256, hidden=64, ffn=128, heads=4, kv_heads=2, layers=2),
    "llama-7b": DecoderShape(vocab=32000, hidden=4096, ffn=11008, heads=32, kv_heads=32,
                             layers=32, eps=1e-6),
    "qwen2.5-14b": DecoderShape(vocab=152064, hidden=5120, ffn=13824, heads=40, kv_heads=8,
                                layers=48, qkv_bias=True, rope_theta=1e6),
    "qwen2.5-32b": DecoderShape(vocab=152064, hidden=5120, ffn=27648, heads=40, kv_heads=8,
                                layers=64, qkv_bias=True, rope_theta=1e6),
    "qwen2.5-72b": DecoderShape(vocab=152064, hidden=8192, ffn=29568, heads=64, kv_heads=8,
                                layers=80, qkv_bias=True, rope_theta=1e6),
    "mistral-7b": DecoderShape(vocab=32000, hidden=4096, ffn=14336, heads=32, kv_heads=8,
                               layers=32, rope_theta=1e6, sliding_window=4096),
    "llama-120b": DecoderShape(vocab=128256, hidden=10240, ffn=28672, heads=80, kv_heads=8,
                               layers=108, rope_theta=5e5),
    # Llama 4 Scout's shape: 16 experts (one per token) beside a shared one in every layer,
    # chunks of 8192 keys (Scout keeps every fourth layer on full attention, without RoPE;
    # the same below 8192 tokens a sequence).
    "llama4-scout": DecoderShape(vocab=202048, hidden=5120, ffn=8192, heads=40, kv_heads=8,
                                 layers=48, rope_theta=5e5, attention_chunk=8192, experts=16),
}

OVERRIDES = ("layers", "hidden", "ffn", "heads", "kv_heads", "vocab", "sliding_window",
             "attention_chunk", "experts", "experts_per_token")


def build(shape, with_data=False, seed=0, name="decoder"):
    g = Graph(name, opset=17, with_data=with_data, seed=seed)
    decoder(g, shape)
    return g.model()


def param_count(shape):
    D, H, Hkv = shape.head_dim, shape.heads, shape.kv_heads
    attn = shape.hidden * D * (2 * H + 2 * Hkv) + (D * (H + 2 * Hkv) if shape.qkv_bias else 0)
    mlp = 3 * shape.hidden * shape.ffn
    if shape.experts:  # the routed experts, the shared one and the router
        mlp = (shape.experts + 1) * mlp + shape.experts * shape.hidden
    layer = attn + mlp + 2 * shape.hidden
    return shape.vocab * shape.hidden * (1 if shape.tied else 2) + shape.layers * layer + shape.hidden


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", choices=sorted(PRESETS), help="model shape")
    p.add_argument("-o", "--output", help="ONNX file to write")
    p.add_argument("--with-data", action="store_true",
                   help="fill the weights with seeded random values (small shapes only)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--list", action="store_true", help="list the presets")
    for flag in OVERRIDES:
        p.add_argument("--" + flag.replace("_", "-"), type=int, dest=flag,
                       help=f"override the preset's {flag.replace('_', ' ')}")
    args = p.parse_args()
    if args.list:
        for name, s in PRESETS.items():
            n = param_count(s)
            size = f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.2f}M"
            print(f"{name:12} {size:>7} params  hidden {s.hidden}, ffn {s.ffn}, "
                  f"heads {s.heads}/{s.kv_heads} kv, {s.layers} layers, vocab {s.vocab}"
                  f"{', qkv bias' if s.qkv_bias else ''}"
                  f"{f', window {s.sliding_window}' if s.sliding_window else ''}"
                  f"{f', chunks of {s.attention_chunk}' if s.attention_chunk else ''}"
                  f"{f', {s.experts} experts ({s.experts_per_token} a token)' if s.experts else ''}")
        return
    if not args.preset or not args.output:
        p.error("--preset and -o are required")
    shape = dataclasses.replace(PRESETS[args.preset], **{
        field: getattr(args, field) for field in OVERRIDES if getattr(args, field) is not None})
    try:
        shape.check()
    except ValueError as e:
        sys.exit(f"error: {e} (--preset {args.preset})")
    bytes_needed = param_count(shape) * 4
    if args.with_data and bytes_needed > 1 << 30:
        sys.exit(f"error: --with-data would write {bytes_needed / 2**30:.1f} GiB of weights "
                 f"(--preset {args.preset}); drop --with-data or shrink with --layers/--hidden")
    model = build(shape, args.with_data, args.seed, name=args.preset)
    tmp = args.output + ".tmp"
    onnx.save(model, tmp)
    os.replace(tmp, args.output)


if __name__ == "__main__":
    main()
