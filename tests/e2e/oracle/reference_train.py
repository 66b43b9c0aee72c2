"""The reference training loop: what the trainer must compute, in float64.

    python -m tests.e2e.oracle.reference_train MODEL.onnx --data TOKENS.u32
        --batch B --seq-len S [--steps N] [--grad-accum A] [--lr X] [--warmup W]
        [--lr-schedule cosine|constant] [--min-lr-ratio R] [--weight-decay WD]
        [--beta1 B1] [--beta2 B2] [--eps E] [--clip-grad C]
        [--dump-grads F.safetensors] [--log-jsonl F] [--no-tie-detect]
        [--freeze NAME[,NAME...]]

Flags mirror the trainer's so a test passes both the same arguments. Exact
semantics (the C++ trainer implements the same):

Data. The token file is raw little-endian uint32 ids; its size must be a
multiple of 4, it must hold at least S+1 tokens, and every id must be below
the vocabulary size V (the logits' last dim). Window j is
tokens[j*S : j*S+S+1]: inputs its first S, targets its last S. There are
n_windows = (len(tokens) - 1) // S. Step t (0-based), micro-step a in
[0, A), batch row r reads window ((t*A + a)*B + r) mod n_windows.

Loss. The graph's logits output ("logits", else the first output) is
[B, S, V]. A step's loss is the mean next-token cross-entropy over all A*B*S
targets; each micro-step contributes the gradient of its own mean loss / A.

Parameters. Every float initializer (after ties, see interpreter) that the
loss of step 0 has a gradient for is trained: autograd reaches it through
float values (Shape, comparisons, Cast to integer, CastLike's target cut the
path; a zero gradient, as through Floor, still counts). The rest, integer
initializers and Constant nodes are constants. Parameters, gradients and
moments are float64, in initializer order.

Learning rate at step t: lr*(t+1)/W while t < W; afterwards lr (constant) or,
for cosine, lr*R + 0.5*(lr - lr*R)*(1 + cos(pi*p)) with
p = (t - W) / max(1, N - W).

Clipping. grad_norm = sqrt(sum over params of ||g||^2) of the averaged
gradients; if C > 0 every gradient is scaled by min(1, C / (grad_norm + 1e-6))
(torch.nn.utils.clip_grad_norm_).

AdamW, torch.optim.AdamW's arithmetic, step count k = t + 1:
    p -= lr_t * WD * p            (only for params of rank >= 2)
    m = B1*m + (1-B1)*g;  v = B2*v + (1-B2)*g*g
    p -= lr_t / (1 - B1^k) * m / (sqrt(v) / sqrt(1 - B2^k) + E)

--bf16-weights: the parameters start from the initializers rounded to
bfloat16 (to nearest even), as a trainer keeping bf16 master weights loads
them; training then proceeds in float64 as above.

Defaults: N 1, A 1, lr 3e-4, W 0, cosine, R 0.1, WD 0.1, B1 0.9, B2 0.95,
E 1e-8, C 1.0 (0 disables clipping; grad_norm is logged either way).

Outputs. --dump-grads: step 0's averaged, unclipped gradients as float32
safetensors keyed by initializer name (a tie once, under its source).
--log-jsonl: one object per step: step, loss (before the update), lr,
grad_norm (before clipping), tokens (A*B*S). Files are written only when
every step succeeded. Errors print `error: ...` on stderr and exit 1.
"""

import argparse
import json
import math
import os
import sys
from dataclasses import dataclass

import numpy as np
import torch

from .interpreter import OnnxModel
from .registry import OracleError


@dataclass
class TrainConfig:
    batch: int
    seq_len: int
    steps: int = 1
    grad_accum: int = 1
    lr: float = 3e-4
    warmup: int = 0
    lr_schedule: str = "cosine"
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    clip_grad: float = 1.0

    def check(self):
        for flag in ("batch", "seq_len", "steps", "grad_accum"):
            if getattr(self, flag) < 1:
                raise OracleError(f"--{flag.replace('_', '-')} must be >= 1 (got {getattr(self, flag)})")
        if self.warmup < 0:
            raise OracleError(f"--warmup must be >= 0 (got {self.warmup})")
        if self.lr_schedule not in ("cosine", "constant"):
            raise OracleError(f"--lr-schedule must be cosine or constant (got {self.lr_schedule})")


def load_tokens(path, seq_len):
    size = os.path.getsize(path)
    if size % 4:
        raise OracleError(f"token file {path} has {size} bytes, not a multiple of 4 (uint32 ids)")
    tokens = np.fromfile(path, dtype="<u4")
    if len(tokens) < seq_len + 1:
        raise OracleError(f"token file {path} holds {len(tokens)} tokens; "
                          f"--seq-len {seq_len} needs at least {seq_len + 1}")
    return tokens


def check_vocab(tokens, vocab, path):
    bad = np.flatnonzero(tokens >= vocab)
    if bad.size:
        i = int(bad[0])
        raise OracleError(f"token id {int(tokens[i])} >= vocab {vocab} ({path}, byte offset {4 * i})")


def vocab_size(model):
    """The logits' last dim: from the graph's declared type, else from a one-token run."""
    for output in model.outputs:
        if output.name == model.logits_name():
            dims = output.type.tensor_type.shape.dim
            if dims and dims[-1].HasField("dim_value") and dims[-1].dim_value > 0:
                return dims[-1].dim_value
    with torch.no_grad():
        return model.logits(torch.zeros((1, 1), dtype=torch.int64)).shape[-1]


def batch_at(tokens, config, step, micro):
    """(inputs, targets), each [B, S] int64, of micro-step `micro` of step `step`."""
    s = config.seq_len
    n_windows = (len(tokens) - 1) // s
    first = (step * config.grad_accum + micro) * config.batch
    windows = np.arange(first, first + config.batch) % n_windows
    rows = tokens[windows[:, None] * s + np.arange(s + 1)].astype(np.int64)
    return torch.from_numpy(rows[:, :-1]), torch.from_numpy(rows[:, 1:])


def lr_at(config, step):
    if step < config.warmup:
        return config.lr * (step + 1) / config.warmup
    if config.lr_schedule == "constant":
        return config.lr
    progress = (step - config.warmup) / max(1, config.steps - config.warmup)
    low = config.lr * config.min_lr_ratio
    return low + 0.5 * (config.lr - low) * (1 + math.cos(math.pi * progress))


def step_gradients(model, tokens, config, step, names):
    """Mean loss of step `step` and its gradients for `names` (None where unreached)."""
    leaves = [model.params[n] for n in names]
    grads = [None] * len(names)
    loss_sum = 0.0
    for micro in range(config.grad_accum):
        inputs, targets = batch_at(tokens, config, step, micro)
        logits = model.logits(inputs)
        expected = (config.batch, config.seq_len)
        if logits.dim() != 3 or tuple(logits.shape[:2]) != expected:
            raise OracleError(f"logits output '{model.logits_name()}' has shape {list(logits.shape)}, "
                              f"expected [{config.batch}, {config.seq_len}, V]")
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        micro_grads = torch.autograd.grad(loss / config.grad_accum, leaves, allow_unused=True)
        grads = [g if acc is None else (acc if g is None else acc + g) for acc, g in zip(grads, micro_grads)]
        loss_sum += loss.item()
    return loss_sum / config.grad_accum, grads


def global_norm(grads):
    return torch.norm(torch.stack([torch.norm(g, 2.0) for g in grads]), 2.0).item()


class AdamW:
    """torch.optim.AdamW's update, with decay only on params of rank >= 2."""

    def __init__(self, config):
        self.config = config
        self.moments = {}
        self.count = 0

    @torch.no_grad()
    def step(self, params, grads, lr):
        c = self.config
        self.count += 1
        correction1 = 1 - c.beta1 ** self.count
        correction2_sqrt = math.sqrt(1 - c.beta2 ** self.count)
        for (name, p), g in zip(params, grads):
            m, v = self.moments.setdefault(name, (torch.zeros_like(p), torch.zeros_like(p)))
            if p.dim() >= 2:
                p.mul_(1 - lr * c.weight_decay)
            m.mul_(c.beta1).add_(g, alpha=1 - c.beta1)
            v.mul_(c.beta2).addcmul_(g, g, value=1 - c.beta2)
            p.addcdiv_(m, (v.sqrt() / correction2_sqrt).add_(c.eps), value=-lr / correction1)


def train(model, tokens, config, report=None):
    """Runs config.steps steps, updating model.params in place.

    Returns (records, step 0's gradients by name); `report(record)` sees each step.
    """
    config.check()
    names = list(model.params)
    records, first_grads = [], None
    optimizer = AdamW(config)
    for step in range(config.steps):
        loss, grads = step_gradients(model, tokens, config, step, names)
        if first_grads is None:
            # What the loss cannot reach is a constant from here on.
            names = [n for n, g in zip(names, grads) if g is not None]
            grads = [g for g in grads if g is not None]
            if not names:
                raise OracleError("the loss has no gradient for any float initializer")
            first_grads = dict(zip(names, grads))
        norm = global_norm(grads)
        if config.clip_grad > 0:
            coef = min(1.0, config.clip_grad / (norm + 1e-6))
            grads = [g * coef for g in grads]
        lr = lr_at(config, step)
        optimizer.step([(n, model.params[n]) for n in names], grads, lr)
        record = {"step": step, "loss": loss, "lr": lr, "grad_norm": norm,
                  "tokens": config.grad_accum * config.batch * config.seq_len}
        records.append(record)
        if report:
            report(record)
    return records, first_grads


def _write_atomically(path, write):
    tmp = f"{path}.tmp"
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _write_jsonl(records):
    def write(path):
        with open(path, "w") as f:
            for record in records:
                f.write(json.dumps(record) + "\n")

    return write


def _write_grads(grads):
    def write(path):
        from safetensors.torch import save_file

        save_file({n: g.detach().to(torch.float32).contiguous() for n, g in grads.items()}, path)

    return write


def parse_args(argv):
    p = argparse.ArgumentParser(prog="reference_train", description=__doc__.split("\n\n")[0])
    p.add_argument("model")
    p.add_argument("--data", required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--seq-len", type=int, required=True)
    defaults = TrainConfig(batch=1, seq_len=1)
    p.add_argument("--steps", type=int, default=defaults.steps)
    p.add_argument("--grad-accum", type=int, default=defaults.grad_accum)
    p.add_argument("--lr", type=float, default=defaults.lr)
    p.add_argument("--warmup", type=int, default=defaults.warmup)
    p.add_argument("--lr-schedule", choices=["cosine", "constant"], default=defaults.lr_schedule)
    p.add_argument("--min-lr-ratio", type=float, default=defaults.min_lr_ratio)
    p.add_argument("--weight-decay", type=float, default=defaults.weight_decay)
    p.add_argument("--beta1", type=float, default=defaults.beta1)
    p.add_argument("--beta2", type=float, default=defaults.beta2)
    p.add_argument("--eps", type=float, default=defaults.eps)
    p.add_argument("--clip-grad", type=float, default=defaults.clip_grad)
    p.add_argument("--dump-grads")
    p.add_argument("--log-jsonl")
    p.add_argument("--no-tie-detect", action="store_true")
    p.add_argument("--bf16-weights", action="store_true",
                   help="start from the initializers rounded to bfloat16")
    p.add_argument("--freeze", action="append", default=[],
                   help="an initializer to keep constant (a buffer such as a "
                        "RoPE inv_freq; repeatable or comma-separated)")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    config = TrainConfig(**{k: getattr(args, k) for k in TrainConfig.__dataclass_fields__})
    try:
        config.check()
        tokens = load_tokens(args.data, config.seq_len)
        model = OnnxModel(args.model, tie_detect=not args.no_tie_detect)
        frozen = {n for spec in args.freeze for n in spec.split(",") if n}
        for name in sorted(frozen):
            if name in model.ties:  # a copy of its source: frozen with it
                source = model.ties[name].source
                if source not in frozen:
                    raise OracleError(f"--freeze {name}: it equals {source}, which is trained")
                continue
            if name not in model.params:
                raise OracleError(f"--freeze {name}: no float initializer of that name")
            model.constants[name] = model.params.pop(name).detach()
        check_vocab(tokens, vocab_size(model), args.data)
        if args.bf16_weights:
            with torch.no_grad():
                for p in model.params.values():
                    p.copy_(p.to(torch.float32).to(torch.bfloat16).to(p.dtype))

        def report(r):
            print(f"step {r['step']}: loss {r['loss']:.10f} lr {r['lr']:.6e} grad_norm {r['grad_norm']:.6e}")

        records, first_grads = train(model, tokens, config, report)
        if args.log_jsonl:
            _write_atomically(args.log_jsonl, _write_jsonl(records))
        if args.dump_grads:
            _write_atomically(args.dump_grads, _write_grads(first_grads))
    except (OracleError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
