"""Exports a sample model to ONNX, and writes float64 reference outputs.

    python samples/export.py --list
    python samples/export.py --model tiny-llama -o tiny-llama.onnx [--seed N] [--fold-constants]
    python samples/export.py --model tiny-llama --reference ref.npz [--batch 2 --seq 16] [--tokens F.u32]

The export takes one input, input_ids (int64 [batch, seq]), and gives one
output, logits ([batch, seq, 256]), both dynamic in batch and seq, at opset
17. Without --fold-constants, initializers keep the PyTorch parameter names;
with it, weight transposes are folded into new initializers onnx::MatMul_NNN,
as most users' exports are.

The reference (.npz) holds, for one step of design.md's data layout (window j
is tokens[j*S : j*S+S+1], step 0 reads windows 0..B-1):
  tokens     uint32 [B*S+1]   the token stream; write it out as a corpus
  input_ids  int64 [B, S]     targets int64 [B, S]
  logits     float64 [B, S, V]
  loss       float64 []       mean next-token cross-entropy over B*S targets
  grad/NAME  float64          d loss / d parameter, keyed by parameter name
all computed on the module in float64.
"""
import argparse
import os
import sys
import warnings

import numpy as np
import torch
import torch.nn.functional as F

import models


def export(model, path, fold_constants=False):
    ids = torch.randint(0, models.VOCAB, (2, 16), generator=torch.Generator().manual_seed(0))
    tmp = path + ".tmp"
    with warnings.catch_warnings():
        # Tracing warns about every Python-level shape test in the model code.
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (ids,), tmp, input_names=["input_ids"], output_names=["logits"],
                          dynamic_axes={"input_ids": {0: "batch", 1: "seq"},
                                        "logits": {0: "batch", 1: "seq"}},
                          opset_version=17, do_constant_folding=fold_constants)
    os.replace(tmp, path)


def token_batch(batch, seq, seed, tokens_file=None):
    """B*S+1 tokens: the first from a token file, or seeded random bytes."""
    n = batch * seq + 1
    if tokens_file:
        tokens = np.fromfile(tokens_file, dtype="<u4", count=n)
        if tokens.size < n:
            sys.exit(f"error: {tokens_file} holds {tokens.size} tokens, {n} needed for "
                     f"--batch {batch} --seq {seq}")
        if tokens.max() >= models.VOCAB:
            sys.exit(f"error: token {tokens.max()} in {tokens_file} is outside the vocabulary "
                     f"(0..{models.VOCAB - 1})")
        return tokens
    return np.random.default_rng(seed).integers(0, models.VOCAB, n).astype(np.uint32)


def reference(model, tokens, batch, seq):
    """Logits, loss and gradients of the module in float64 for one step's windows."""
    windows = np.stack([tokens[j * seq: j * seq + seq + 1] for j in range(batch)]).astype(np.int64)
    input_ids, targets = torch.from_numpy(windows[:, :-1]), torch.from_numpy(windows[:, 1:])
    model = model.double()
    model.zero_grad()
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # HF builds masks with torch.full(finfo(float64).min)
    try:
        logits = model(input_ids)
    finally:
        torch.set_default_dtype(default)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    loss.backward()
    out = {"tokens": tokens, "input_ids": input_ids.numpy(), "targets": targets.numpy(),
           "logits": logits.detach().numpy(), "loss": loss.detach().numpy()}
    for name, p in model.named_parameters():
        out["grad/" + name] = p.grad.numpy()
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--list", action="store_true", help="list the models")
    p.add_argument("--model", choices=sorted(models.MODELS), metavar="NAME")
    p.add_argument("-o", "--output", help="ONNX file to write")
    p.add_argument("--seed", type=int, default=0, help="seeds the weights and the reference tokens")
    p.add_argument("--fold-constants", action="store_true",
                   help="fold weight transposes into new initializers, as exports usually do")
    p.add_argument("--reference", metavar="FILE.npz", help="write float64 reference outputs")
    p.add_argument("--batch", type=int, default=2, help="reference batch (default 2)")
    p.add_argument("--seq", type=int, default=16, help="reference sequence length (default 16)")
    p.add_argument("--tokens", metavar="FILE.u32", help="take the reference tokens from a token file")
    args = p.parse_args()
    if args.list:
        for name, (summary, _) in models.MODELS.items():
            print(f"{name:16} {summary}")
        return
    if not args.model or not (args.output or args.reference):
        p.error("--model and at least one of -o, --reference are required")
    if not 1 <= args.seq <= models.MAX_POS:
        p.error(f"--seq {args.seq} is outside 1..{models.MAX_POS} (the models' positions)")
    model = models.build(args.model, args.seed)
    if args.output:
        export(model, args.output, args.fold_constants)
    if args.reference:
        tokens = token_batch(args.batch, args.seq, args.seed, args.tokens)
        np.savez(args.reference, **reference(model, tokens, args.batch, args.seq))


if __name__ == "__main__":
    main()
