"""Small decoder LMs: our own PyTorch modules, and HuggingFace ones built
from a small config. Every model maps input_ids [batch, seq] (int64) to
logits [batch, seq, 256]; tokens are bytes.

The modules are written the way their families are, so that their exports
carry each family's idioms; the comments say which export form each line
becomes.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

VOCAB = 256
HIDDEN = 64
HEADS = 4
HEAD_DIM = HIDDEN // HEADS
MAX_POS = 256


def init_weights(model, seed):
    """Seeded weights with no two initializers equal.

    torch.onnx.export merges initializers of equal value, so norm weights
    left at 1 and biases left at 0 would come out as one shared tensor.
    Matrices get std min(shape)^-1/2, which keeps activations and logits O(1).
    """
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=p.dtype)
            if p.dim() == 1:
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.1 * noise)
            else:
                p.copy_(noise * min(p.shape) ** -0.5)
    return model


def rotate_half(x, half):
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)  # Slice, Slice, Neg, Concat


def apply_rope(x, cos, sin, rotary_dim):
    """Rotate-half RoPE on the first rotary_dim features of x [B, H, S, D]."""
    if rotary_dim == x.shape[-1]:
        return x * cos + rotate_half(x, rotary_dim // 2) * sin
    rot, rest = x[..., :rotary_dim], x[..., rotary_dim:]
    return torch.cat((rot * cos + rotate_half(rot, rotary_dim // 2) * sin, rest), dim=-1)


def split_heads(x, heads):
    b, s, _ = x.shape
    return x.view(b, s, heads, HEAD_DIM).transpose(1, 2)  # Reshape, Transpose


def merge_heads(x):
    b, _, s, _ = x.shape
    return x.transpose(1, 2).reshape(b, s, HIDDEN)


# -- tiny-gpt2 --

class GPT2Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(HIDDEN)  # LayerNormalization
        self.c_attn = nn.Linear(HIDDEN, 3 * HIDDEN)  # fused qkv
        self.c_proj = nn.Linear(HIDDEN, HIDDEN)
        self.ln_2 = nn.LayerNorm(HIDDEN)
        self.c_fc = nn.Linear(HIDDEN, 4 * HIDDEN)
        self.mlp_proj = nn.Linear(4 * HIDDEN, HIDDEN)

    def forward(self, x, causal):
        q, k, v = self.c_attn(self.ln_1(x)).split(HIDDEN, dim=2)  # Split
        q, k, v = split_heads(q, HEADS), split_heads(k, HEADS), split_heads(v, HEADS)
        scores = q @ k.transpose(-1, -2) / math.sqrt(HEAD_DIM)  # Div
        fill = torch.full([], torch.finfo(scores.dtype).min, dtype=scores.dtype)
        scores = torch.where(causal, scores, fill)  # Where
        x = x + self.c_proj(merge_heads(scores.softmax(-1) @ v))
        h = F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh")
        return x + self.mlp_proj(h)


class TinyGPT2(nn.Module):
    """LayerNorm, GELU tanh, learned positions, tied head, biases, fused qkv."""

    def __init__(self, layers=2):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, HIDDEN)
        self.wpe = nn.Embedding(MAX_POS, HIDDEN)
        self.blocks = nn.ModuleList(GPT2Block() for _ in range(layers))
        self.ln_f = nn.LayerNorm(HIDDEN)
        # GPT-2's mask buffer: a bool tril sliced to [S, S].
        self.register_buffer("causal_mask", torch.tril(torch.ones(MAX_POS, MAX_POS, dtype=torch.bool)))

    def forward(self, input_ids):
        s = input_ids.shape[1]
        positions = torch.arange(s, device=input_ids.device)  # Range
        h = self.wte(input_ids) + self.wpe(positions)
        causal = self.causal_mask[:s, :s]
        for block in self.blocks:
            h = block(h, causal)
        return F.linear(self.ln_f(h), self.wte.weight)  # MatMul(h, Transpose(wte))


# -- tiny-llama --

class RMSNorm(nn.Module):
    def __init__(self, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(HIDDEN))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class LlamaAttention(nn.Module):
    def __init__(self, kv_heads):
        super().__init__()
        self.kv_heads = kv_heads
        self.q_proj = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.k_proj = nn.Linear(HIDDEN, kv_heads * HEAD_DIM, bias=False)
        self.v_proj = nn.Linear(HIDDEN, kv_heads * HEAD_DIM, bias=False)
        self.o_proj = nn.Linear(HIDDEN, HIDDEN, bias=False)

    def forward(self, x, cos, sin, mask):
        q = apply_rope(split_heads(self.q_proj(x), HEADS), cos, sin, HEAD_DIM)
        k = apply_rope(split_heads(self.k_proj(x), self.kv_heads), cos, sin, HEAD_DIM)
        v = split_heads(self.v_proj(x), self.kv_heads)
        k, v = repeat_kv(k, HEADS // self.kv_heads), repeat_kv(v, HEADS // self.kv_heads)
        scores = q @ k.transpose(2, 3) / math.sqrt(HEAD_DIM) + mask  # Div, Add
        return self.o_proj(merge_heads(scores.softmax(-1) @ v))


def repeat_kv(x, n_rep):
    """[B, Hkv, S, D] -> [B, Hkv*n_rep, S, D]: Unsqueeze, Expand, Reshape."""
    b, hkv, s, d = x.shape
    return x[:, :, None, :, :].expand(b, hkv, n_rep, s, d).reshape(b, hkv * n_rep, s, d)


class LlamaBlock(nn.Module):
    def __init__(self, kv_heads):
        super().__init__()
        self.input_norm = RMSNorm()
        self.self_attn = LlamaAttention(kv_heads)
        self.post_attention_norm = RMSNorm()
        self.gate_proj = nn.Linear(HIDDEN, 2 * HIDDEN, bias=False)
        self.up_proj = nn.Linear(HIDDEN, 2 * HIDDEN, bias=False)
        self.down_proj = nn.Linear(2 * HIDDEN, HIDDEN, bias=False)

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_norm(x), cos, sin, mask)
        h = self.post_attention_norm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))  # SwiGLU


class LayerScaleBlock(LlamaBlock):
    """A Llama block whose branches are scaled per channel by learned
    vectors before the residual adds (LayerScale)."""

    def __init__(self, kv_heads):
        super().__init__(kv_heads)
        self.attn_gamma = nn.Parameter(torch.ones(HIDDEN))
        self.mlp_gamma = nn.Parameter(torch.ones(HIDDEN))

    def forward(self, x, cos, sin, mask):
        x = x + self.attn_gamma * self.self_attn(self.input_norm(x), cos, sin, mask)  # Mul
        h = self.post_attention_norm(x)
        return x + self.mlp_gamma * self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class TokenShiftBlock(LlamaBlock):
    """A Llama block whose attention reads a causal depthwise convolution of
    its normed input (two zero positions padded before, then an unpadded
    Conv1d) and whose MLP reads each position plus a learned share of the one
    before it (RWKV's token shift: a zero row padded before, the last row
    cropped)."""

    def __init__(self, kv_heads):
        super().__init__(kv_heads)
        self.conv = nn.Conv1d(HIDDEN, HIDDEN, 3, groups=HIDDEN, bias=False)
        self.mix = nn.Parameter(torch.full((HIDDEN,), 0.5))

    def forward(self, x, cos, sin, mask):
        h = self.input_norm(x).transpose(1, 2)
        h = self.conv(F.pad(h, (2, 0))).transpose(1, 2)  # Pad, Conv
        x = x + self.self_attn(h, cos, sin, mask)
        h = self.post_attention_norm(x)
        h = h + self.mix * F.pad(h, (0, 0, 1, -1))  # Pad with a crop
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class TinyLlama(nn.Module):
    """RMSNorm, RoPE from inv_freq, SwiGLU, GQA 4 query / 2 KV heads."""

    def __init__(self, layers=3, tied=False, theta=10000.0, block=LlamaBlock):
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, HIDDEN)
        self.layers = nn.ModuleList(block(kv_heads=2) for _ in range(layers))
        self.norm = RMSNorm()
        self.lm_head = nn.Linear(HIDDEN, VOCAB, bias=False)
        if tied:
            self.lm_head.weight = self.embed_tokens.weight
        self.register_buffer("inv_freq", 1.0 / theta ** (torch.arange(0, HEAD_DIM, 2).float() / HEAD_DIM))

    def forward(self, input_ids):
        s = input_ids.shape[1]
        positions = torch.arange(s, device=input_ids.device, dtype=self.inv_freq.dtype)
        freqs = positions[:, None] * self.inv_freq[None, :]  # Mul of Unsqueezes ([S, D/2])
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()  # [S, D], broadcast over [B, H, S, D]
        mask = torch.full((s, s), float("-inf"), dtype=emb.dtype, device=emb.device).triu(1)  # Trilu
        h = self.embed_tokens(input_ids)
        for layer in self.layers:
            h = layer(h, cos, sin, mask)
        return self.lm_head(self.norm(h))


# -- tiny-neox --

class NeoXBlock(nn.Module):
    def __init__(self, rotary_dim):
        super().__init__()
        self.rotary_dim = rotary_dim
        self.input_layernorm = nn.LayerNorm(HIDDEN)
        self.post_attention_layernorm = nn.LayerNorm(HIDDEN)
        self.q_proj = nn.Linear(HIDDEN, HIDDEN)
        self.k_proj = nn.Linear(HIDDEN, HIDDEN)
        self.v_proj = nn.Linear(HIDDEN, HIDDEN)
        self.dense = nn.Linear(HIDDEN, HIDDEN)
        self.dense_h_to_4h = nn.Linear(HIDDEN, 4 * HIDDEN)
        self.dense_4h_to_h = nn.Linear(4 * HIDDEN, HIDDEN)

    def attention(self, x, cos, sin, masked):
        q = apply_rope(split_heads(self.q_proj(x), HEADS), cos, sin, self.rotary_dim)
        k = apply_rope(split_heads(self.k_proj(x), HEADS), cos, sin, self.rotary_dim)
        v = split_heads(self.v_proj(x), HEADS)
        scores = (q @ k.transpose(-1, -2)) * HEAD_DIM ** -0.5  # Mul
        scores = scores.masked_fill(masked, float("-inf"))  # Where
        return self.dense(merge_heads(scores.softmax(-1) @ v))

    def forward(self, x, cos, sin, masked):
        # Parallel residual: attention and MLP both read the layer input.
        attn = self.attention(self.input_layernorm(x), cos, sin, masked)
        mlp = self.dense_4h_to_h(F.gelu(self.dense_h_to_4h(self.post_attention_layernorm(x))))  # Erf
        return x + attn + mlp


class TinyNeoX(nn.Module):
    """Parallel residual, LayerNorm, partial rotary (half of head_dim), GELU erf."""

    def __init__(self, layers=2, theta=10000.0):
        super().__init__()
        rotary_dim = HEAD_DIM // 2
        self.embed_in = nn.Embedding(VOCAB, HIDDEN)
        self.layers = nn.ModuleList(NeoXBlock(rotary_dim) for _ in range(layers))
        self.final_layer_norm = nn.LayerNorm(HIDDEN)
        self.embed_out = nn.Linear(HIDDEN, VOCAB, bias=False)
        # NeoX caches cos/sin for every position and slices them to [S, R].
        inv_freq = 1.0 / theta ** (torch.arange(0, rotary_dim, 2).float() / rotary_dim)
        emb = (torch.arange(MAX_POS).float()[:, None] * inv_freq[None, :]).repeat(1, 2)
        self.register_buffer("cos_cached", emb.cos())
        self.register_buffer("sin_cached", emb.sin())

    def forward(self, input_ids):
        s = input_ids.shape[1]
        cos, sin = self.cos_cached[:s], self.sin_cached[:s]  # Slice
        pos = torch.arange(s, device=input_ids.device)
        masked = pos[None, :] > pos[:, None]  # Range, Unsqueeze, Greater
        h = self.embed_in(input_ids)
        for layer in self.layers:
            h = layer(h, cos, sin, masked)
        return self.embed_out(self.final_layer_norm(h))


# -- HuggingFace models --

def _logits_only(cls):
    """A subclass whose forward takes only input_ids and returns logits.

    Subclassing (not wrapping) keeps parameter names, and so initializer
    names, exactly HuggingFace's. Calling the head directly skips the
    CausalLM forward's logits.float(), which would cut float64 references
    down to float32.
    """
    def forward(self, input_ids):
        base = getattr(self, self.base_model_prefix)
        return self.lm_head(base(input_ids=input_ids, use_cache=False)[0])
    return type(cls.__name__, (cls,), {"forward": forward})


def hf_model(kind):
    import transformers as tf

    small = dict(vocab_size=VOCAB, use_cache=False, attn_implementation="eager")
    llama_like = dict(hidden_size=HIDDEN, intermediate_size=2 * HIDDEN, num_hidden_layers=2,
                      num_attention_heads=HEADS, num_key_value_heads=2, max_position_embeddings=MAX_POS,
                      tie_word_embeddings=False)
    if kind == "llama":
        cls, config = tf.LlamaForCausalLM, tf.LlamaConfig(**small, **llama_like)
    elif kind == "qwen2":
        cls, config = tf.Qwen2ForCausalLM, tf.Qwen2Config(**small, **llama_like, use_sliding_window=False)
    else:
        cls, config = tf.GPT2LMHeadModel, tf.GPT2Config(
            **small, n_embd=HIDDEN, n_layer=2, n_head=HEADS, n_positions=MAX_POS,
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return _logits_only(cls)(config)


MODELS = {
    "tiny-gpt2": ("GPT-2 style: LayerNorm, GELU tanh, learned positions, tied head, biases, fused qkv Split; 2 layers",
                  lambda: TinyGPT2()),
    "tiny-llama": ("Llama style: RMSNorm, RoPE from inv_freq, SwiGLU, GQA 4/2 heads, untied head; 3 layers",
                   lambda: TinyLlama()),
    "tiny-llama-tied": ("tiny-llama with the head tied to the embedding; 2 layers",
                        lambda: TinyLlama(layers=2, tied=True)),
    "tiny-layerscale": ("tiny-llama whose attention and MLP outputs are scaled per channel by learned vectors; 2 layers",
                        lambda: TinyLlama(layers=2, block=LayerScaleBlock)),
    "tiny-tokenshift": ("tiny-llama with a causal depthwise convolution (Pad, then Conv1d) before attention and "
                        "each position mixed with the one before it (a token shift) before the MLP; 2 layers",
                        lambda: TinyLlama(layers=2, block=TokenShiftBlock)),
    "tiny-neox": ("NeoX style: parallel residual, LayerNorm, partial rotary (8 of 16), GELU erf, biases; 2 layers",
                  lambda: TinyNeoX()),
    "hf-llama": ("transformers LlamaForCausalLM, eager attention, GQA 4/2, 2 layers",
                 lambda: hf_model("llama")),
    "hf-gpt2": ("transformers GPT2LMHeadModel (Conv1D weights as Gemm), 2 layers",
                lambda: hf_model("gpt2")),
    "hf-qwen2": ("transformers Qwen2ForCausalLM, q/k/v biases, GQA 4/2, 2 layers",
                 lambda: hf_model("qwen2")),
}


def build(name, seed=0):
    """The model called `name`, in eval mode, with seeded weights."""
    _, make = MODELS[name]
    torch.manual_seed(seed)
    return init_weights(make(), seed).eval()
