"""Tiny random-init HuggingFace decoders of families the importer was not
written against, exported the way users export them (torch.onnx.export of
the model's own code, opset 17, dynamic batch and sequence, under which
GPT-J's and CodeGen's repeat_interleave becomes an ONNX Loop; the exports in
STATIC have fixed shapes, batch 2 x 16 tokens), for the end-to-end tests:

    python -m tests.e2e.hf_architectures NAME OUT.onnx
"""
import sys

import torch
import transformers as T

from tests.e2e.export_common import build

COMMON = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
              num_attention_heads=4, max_position_embeddings=128, use_cache=False)

ARCHITECTURES = {
    # GQA, sliding-window attention longer than the sequence.
    "mistral": (T.MistralConfig, dict(COMMON, num_key_value_heads=2, sliding_window=4096),
                T.MistralForCausalLM),
    # A sliding window shorter than the sequence (keys i - 8 < j <= i).
    "mistral-window": (T.MistralConfig, dict(COMMON, num_key_value_heads=2, sliding_window=8),
                       T.MistralForCausalLM),
    # LayerNorm, GELU tanh, biases, and a sliding window shorter than the
    # sequence.
    "starcoder2": (T.Starcoder2Config, dict(COMMON, num_key_value_heads=2, sliding_window=8),
                   T.Starcoder2ForCausalLM),
    # Parallel attention and MLP from one LayerNorm, partial rotary, biases.
    "phi": (T.PhiConfig, dict(COMMON, partial_rotary_factor=0.5), T.PhiForCausalLM),
    # LayerNorm, partial rotary.
    "stablelm": (T.StableLmConfig, dict(COMMON, num_key_value_heads=4), T.StableLmForCausalLM),
    # Scores from a batched 3-d product (baddbmm) over batch x heads.
    "gptneox": (T.GPTNeoXConfig, dict(COMMON, rotary_pct=0.25), T.GPTNeoXForCausalLM),
    # Fused QKV viewed per head and picked apart by Gather; parallel blocks.
    "falcon": (T.FalconConfig, dict(vocab_size=256, hidden_size=64, num_hidden_layers=2,
                                    num_attention_heads=4, new_decoder_architecture=False,
                                    parallel_attn=True, alibi=False, use_cache=False),
               T.FalconForCausalLM),
    # RMSNorm scaling by 1 + w, embeddings scaled by sqrt(hidden), GeGLU,
    # multi-query attention, tied head.
    "gemma": (T.GemmaConfig, dict(COMMON, num_key_value_heads=1, head_dim=16), T.GemmaForCausalLM),
    # Scores and values merged over batch x heads (bmm), clamped to the
    # lowest float after the mask; ReLU; learned positions offset by 2,
    # per batch row; a tied head.
    "opt": (T.OPTConfig, dict(vocab_size=256, hidden_size=64, ffn_dim=128, num_hidden_layers=2,
                              num_attention_heads=4, max_position_embeddings=128,
                              word_embed_proj_dim=64, use_cache=False), T.OPTForCausalLM),
    # OPT-350m's form: norms after the residual sums (post-norm), embeddings
    # narrower than the stream, projected in and out.
    "opt-post-norm": (T.OPTConfig, dict(vocab_size=256, hidden_size=64, ffn_dim=128,
                                        num_hidden_layers=2, num_attention_heads=4,
                                        max_position_embeddings=128, word_embed_proj_dim=32,
                                        do_layer_norm_before=False, use_cache=False),
                      T.OPTForCausalLM),
    # ALiBi added to scores merged over batch x heads (baddbmm), kᵀ viewed
    # from [B, H, D, S], a fused QKV per head, LayerNorm after the
    # embedding, GELU tanh as x · (1 + 0.044715 · x · x), a tied head.
    "bloom": (T.BloomConfig, dict(vocab_size=256, hidden_size=64, n_layer=2, n_head=4,
                                  use_cache=False), T.BloomForCausalLM),
    # Multi-query attention with the queries merged as [B, S·H, D] (rows by
    # token, then head), learned positions, GELU tanh, a tied head.
    "gpt-bigcode": (T.GPTBigCodeConfig, dict(vocab_size=256, n_embd=64, n_layer=2, n_head=4,
                                             n_positions=128, multi_query=True, use_cache=False),
                    T.GPTBigCodeForCausalLM),
    # ALiBi added to 4-d scores, LayerNorms without biases, no linear biases.
    "mpt": (T.MptConfig, dict(vocab_size=256, d_model=64, n_layers=2, n_heads=4, max_seq_len=128,
                              use_cache=False), T.MptForCausalLM),
    # Squared ReLU, LayerNorm of q and k per head, partial rotary.
    "persimmon": (T.PersimmonConfig, dict(COMMON, partial_rotary_factor=0.5),
                  T.PersimmonForCausalLM),
    # Interleaved rotary (rotate_every_two, strided slices) on part of the
    # head dim, parallel attention and MLP, sin/cos looked up by position
    # (GatherElements).
    "gptj": (T.GPTJConfig, dict(vocab_size=256, n_embd=64, n_layer=2, n_head=4, rotary_dim=8,
                                n_positions=128, use_cache=False), T.GPTJForCausalLM),
    # GPT-J exported with fixed shapes: no Loop, the tables' gathers folded.
    "gptj-fixed-shapes": (T.GPTJConfig, dict(vocab_size=256, n_embd=64, n_layer=2, n_head=4,
                                             rotary_dim=8, n_positions=128, use_cache=False),
                          T.GPTJForCausalLM),
    # GPT-J's rotary with a fused QKV split per model-parallel shard.
    "codegen": (T.CodeGenConfig, dict(vocab_size=256, n_embd=64, n_layer=2, n_head=4,
                                      rotary_dim=8, n_positions=128, n_ctx=128, use_cache=False),
                T.CodeGenForCausalLM),
    # Llama with attention biases and a tied head.
    "llama-bias-tied": (T.LlamaConfig, dict(COMMON, num_key_value_heads=2, attention_bias=True,
                                            tie_word_embeddings=True), T.LlamaForCausalLM),
}


# Exported with fixed shapes, as some users do.
STATIC = {"gptj-fixed-shapes"}
STATIC_BATCH, STATIC_SEQ = 2, 16


def export(name, path, seed=0):
    ids = torch.randint(0, 256, (STATIC_BATCH, STATIC_SEQ))
    dynamic = None if name in STATIC else {"input_ids": {0: "batch", 1: "seq"},
                                           "logits": {0: "batch", 1: "seq"}}
    torch.onnx.export(build(ARCHITECTURES, name, seed), (ids,), path, input_names=["input_ids"],
                      output_names=["logits"], opset_version=17, do_constant_folding=False,
                      dynamic_axes=dynamic)


if __name__ == "__main__":
    export(sys.argv[1], sys.argv[2])
