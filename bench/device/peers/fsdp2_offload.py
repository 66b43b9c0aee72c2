"""Peer baseline: a Llama-shaped model trained with PyTorch FSDP2 and
CPUOffloadPolicy on one GPU, the way a user of the PyTorch/HF stack would.

Parameters, gradients and AdamW state live in host RAM (fp32); layers are
gathered to the GPU in bf16 (MixedPrecisionPolicy); activation checkpointing
per decoder layer. Prints one JSON line with the measured figures, and
writes it to --json-out if given.

Needs torch >= 2.6 (fully_shard) and transformers (LlamaForCausalLM); both are
on the GPU machine's image. Written against those APIs but not run on a GPU
where it was written: fix what breaks, keep the method (same model shape,
batch and sequence as the MegaTrain run it is compared with; warm-up steps
excluded; cuda synchronize around timed steps; never zeros as weights).

Changes from the peer script as handed over (shared/peers): the attention
implementation is passed to LlamaConfig as recent transformers document it
(assigning the private `_attn_implementation` is kept as a fallback for
older ones), the host's peak RSS comes from
getrusage (psutil's rss is the current, not the peak), --name labels the
result, and a failure prints one JSON line with the error after the
traceback. bench/device_check.sh passes --batch M*B for a MegaTrain plan of
M micro-batches of B sequences: the same tokens per optimizer step.

Example:
  python3 fsdp2_offload.py --hidden 4096 --ffn 14336 --layers 32 --heads 32 \
      --kv-heads 8 --vocab 128256 --batch 4 --seq 4096 --steps 3
"""
import argparse
import json
import os
import resource
import sys
import time
import traceback


def main():
    import torch
    import torch.distributed as dist

    ap = argparse.ArgumentParser()
    ap.add_argument("--name", default="fsdp2")
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--ffn", type=int, default=5632)
    ap.add_argument("--layers", type=int, default=22)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--no-checkpointing", action="store_true")
    ap.add_argument("--json-out")
    a = ap.parse_args()

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("nccl", rank=0, world_size=1)
    torch.cuda.set_device(0)

    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.ffn,
                      num_hidden_layers=a.layers, num_attention_heads=a.heads,
                      num_key_value_heads=a.kv_heads, max_position_embeddings=a.seq,
                      tie_word_embeddings=False, attn_implementation="sdpa")
    try:  # older transformers read the private attribute
        cfg._attn_implementation = "sdpa"
    except (AttributeError, TypeError):
        pass
    t0 = time.perf_counter()
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg)
    model = model.to_empty(device="cpu").float()
    with torch.no_grad():
        for p in model.parameters():
            p.uniform_(-0.02, 0.02)
    # buffers left uninitialized by to_empty: rebuild the rotary embedding
    rot = model.model.rotary_emb
    model.model.rotary_emb = type(rot)(config=cfg)
    n_params = sum(p.numel() for p in model.parameters())
    init_s = time.perf_counter() - t0

    if not a.no_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    off = CPUOffloadPolicy(pin_memory=True)
    for layer in model.model.layers:
        fully_shard(layer, mp_policy=mp, offload_policy=off)
    fully_shard(model, mp_policy=mp, offload_policy=off)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.0)

    g = torch.Generator(device="cuda").manual_seed(0)
    times = []
    for step in range(a.warmup + a.steps):
        ids = torch.randint(0, a.vocab, (a.batch, a.seq), device="cuda", generator=g)
        torch.cuda.synchronize()
        t = time.perf_counter()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if step >= a.warmup:
            times.append(time.perf_counter() - t)

    # ru_maxrss is in KiB on Linux: the peak, not the current RSS.
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    times.sort()
    med = times[len(times) // 2]
    tokens = a.batch * a.seq
    res = {
        "system": "fsdp2-cpu-offload",
        "name": a.name,
        "params": n_params,
        "batch": a.batch,
        "seq": a.seq,
        "step_s_median": med,
        "step_s_all": times,
        "tokens_per_s": tokens / med,
        "model_tflops": 6.0 * n_params * tokens / med / 1e12,
        "peak_device_bytes": torch.cuda.max_memory_allocated(),
        "host_rss_bytes": rss,
        "init_s": init_s,
        "loss_last": float(loss),
        "torch": torch.__version__,
    }
    line = json.dumps(res)
    print(line)
    if a.json_out:
        with open(a.json_out, "w") as f:
            f.write(line + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # one line for the report, then the traceback
        traceback.print_exc()
        name = sys.argv[sys.argv.index("--name") + 1] if "--name" in sys.argv else "fsdp2"
        line = json.dumps({"system": "fsdp2-cpu-offload", "name": name,
                           "error": f"{type(e).__name__}: {e}"})
        print(line)
        if "--json-out" in sys.argv:
            with open(sys.argv[sys.argv.index("--json-out") + 1], "w") as f:
                f.write(line + "\n")
        sys.exit(1)
