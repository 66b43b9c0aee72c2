"""Tiny decoders for the oracle's self-tests, their exports and float64 references.

Parameters are perturbed away from their init so that no two are equal:
torch's eval-mode exporter merges initializers with equal values (fresh
norm weights are all ones), which would blur the name mapping under test.
"""

import copy
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

VOCAB = 64
LN_EPS = 2.0 ** -17  # ONNX float attributes are float32: an eps they hold exactly keeps float64 tight


class Float64Everywhere(TorchFunctionMode):
    """Runs a module with every float32 request turned into float64.

    HF code upcasts to float32 for stability (RMSNorm, softmax, RoPE); the
    exported graph keeps those as Cast(to=FLOAT), which the oracle evaluates in
    float64, so the reference must not round there either.
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):
        def up(a):
            return torch.float64 if a is torch.float32 else a

        if func is torch.Tensor.float:
            func = torch.Tensor.double
        return func(*map(up, args), **{k: up(v) for k, v in (kwargs or {}).items()})


class LogitsOnly(torch.nn.Module):
    """input_ids -> logits, the interface the trainer imports."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids=input_ids, use_cache=False, return_dict=False)[0]


class Block(torch.nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.rms_weight = torch.nn.Parameter(torch.ones(dim))
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim, bias=False)
        self.norm = torch.nn.LayerNorm(dim, eps=LN_EPS)
        self.up = torch.nn.Linear(dim, 4 * dim)
        self.down = torch.nn.Linear(4 * dim, dim)

    def forward(self, x, mask):
        b, s, dim = x.shape
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.rms_weight
        q, k, v = (t.reshape(b, s, self.heads, -1).transpose(1, 2) for t in self.qkv(h).chunk(3, dim=-1))
        scores = q @ k.transpose(-2, -1) / math.sqrt(dim // self.heads) + mask
        y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, dim)
        x = x + self.proj(y)
        return x + self.down(F.gelu(self.up(self.norm(x))))


class TinyDecoder(torch.nn.Module):
    """Idioms the HF models lack: chunked QKV, a -inf mask from triu, erf GELU,
    a hand-written RMS norm and a head tied through F.linear."""

    def __init__(self, vocab=VOCAB, dim=16, heads=4, layers=2, max_seq=32):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.pos = torch.nn.Parameter(torch.randn(max_seq, dim) * 0.1)
        self.blocks = torch.nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm = torch.nn.LayerNorm(dim, eps=LN_EPS)

    def forward(self, input_ids):
        s = input_ids.shape[1]
        x = self.embed(input_ids) + self.pos[:s]
        mask = torch.full((s, s), float("-inf")).triu(1)
        for block in self.blocks:
            x = block(x, mask)
        return F.linear(self.norm(x), self.embed.weight)


def _llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                         tie_word_embeddings=True, attn_implementation="eager")
    return LogitsOnly(LlamaForCausalLM(config))


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=VOCAB, n_embd=16, n_layer=2, n_head=4, n_positions=32,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=LN_EPS)
    return LogitsOnly(GPT2LMHeadModel(config))


BUILDERS = {"llama": _llama, "gpt2": _gpt2, "hand": TinyDecoder}


def build(family, seed=0):
    """A float32 module in eval mode whose parameters are all distinct."""
    torch.manual_seed(seed)
    module = BUILDERS[family]().eval()
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return module


def export(module, path, dtype=torch.float64, fold=True):
    """torch.onnx.export at opset 17 with dynamic batch and sequence axes."""
    module = copy.deepcopy(module).to(dtype)
    ids = torch.randint(0, VOCAB, (2, 5))
    torch.onnx.export(module, (ids,), path, input_names=["input_ids"], output_names=["logits"],
                      dynamic_axes={"input_ids": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}},
                      opset_version=17, do_constant_folding=fold)
    return path


def match_params(oracle, module):
    """Oracle parameter name -> (module parameter name, transposed), matched by value.

    Every oracle parameter must be exactly one module parameter, and back.
    """
    module_params = {n: p.detach().double().numpy() for n, p in module.named_parameters()}
    matches = {}
    for name, leaf in oracle.params.items():
        value = leaf.detach().numpy()
        found = [(n, False) for n, p in module_params.items() if p.shape == value.shape and np.array_equal(p, value)]
        found += [(n, True) for n, p in module_params.items()
                  if p.ndim == 2 and p.shape[::-1] == value.shape and np.array_equal(p.T, value)]
        if len(found) != 1:
            raise AssertionError(f"oracle parameter {name} matches module parameters {found}")
        matches[name] = found[0]
    unmatched = set(module_params) - {n for n, _ in matches.values()}
    if unmatched:
        raise AssertionError(f"module parameters without an oracle parameter: {sorted(unmatched)}")
    return matches
