"""Tiny random-init HuggingFace decoders exported the way users of current
PyTorch export them: torch.onnx.export's default (dynamo) exporter of torch
2.15, opset 20, dynamic batch and sequence, with transformers 5. Run with the
export venv that tools/install-export-venv.sh makes (.venv-export):

    .venv-export/bin/python tests/e2e/dynamo_exports.py NAME OUT.onnx [--opset N]
    .venv-export/bin/python tests/e2e/dynamo_exports.py --list

--no-optimize exports without the ONNX optimizer (torch.split as
SplitToSequence, computations on weights left in the graph).

--opset asks the exporter for another opset (below 20 it writes GELU out in
Pow, Tanh and products rather than as one Gelu).
"""
import os
import sys

import torch
import transformers as T
from export_common import build  # run by path, from the export venv

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))
import gated_delta_node  # noqa: E402  (tools/, beside the compiler)
import lightning_node  # noqa: E402
import mamba2_node  # noqa: E402
import mamba_node  # noqa: E402

COMMON = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
              use_cache=False)

NEOX = {k: v for k, v in COMMON.items() if k != "num_key_value_heads"}

# Multi-head latent attention (DeepSeek's): latent keys and values of rank 16,
# keys of a 16-dim part without position and an 8-dim rotary part.
MLA = dict(COMMON, head_dim=8, num_key_value_heads=4, kv_lora_rank=16, qk_rope_head_dim=8,
           qk_nope_head_dim=16, v_head_dim=16)

# Gated DeltaNet hybrids: three linear-attention layers to one full one.
GATED_DELTA = dict(COMMON, num_hidden_layers=4, head_dim=16, linear_num_key_heads=2,
                   linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8,
                   linear_conv_kernel_dim=4)
# Mamba-2 mixers: 8 heads of 16 on a state of 16 with 2 groups of B and C
# (4 heads to a group; the gated norm normalizes each group's 64 channels
# apart), chunks of 8 so that transformers' scan pads its last one; time
# steps from 0.5 to 1 (0.001 to 0.1 by default), so that the state holds
# much of the past and a wrong recurrence shows.
MAMBA2 = dict(vocab_size=256, hidden_size=64, num_hidden_layers=2, expand=2, num_heads=8,
              head_dim=16, state_size=16, n_groups=2, conv_kernel=4, chunk_size=8,
              time_step_min=0.5, time_step_max=1.0, use_cache=False, tie_word_embeddings=False)
# Mamba-1 mixers: 128 channels, each a state of 16.
MAMBA = dict(vocab_size=256, hidden_size=64, num_hidden_layers=2, expand=2, state_size=16,
             conv_kernel=4, time_step_min=0.5, time_step_max=1.0, use_cache=False,
             tie_word_embeddings=False)
# The same mixer in the hybrids' naming.
MAMBA2_MIXER = dict(mamba_n_heads=8, mamba_d_head=16, mamba_n_groups=2, mamba_d_state=16,
                    mamba_d_conv=4, mamba_expand=2, mamba_chunk_size=8)

ARCHITECTURES = {
    "llama": (T.LlamaConfig, COMMON, T.LlamaForCausalLM),
    "qwen2": (T.Qwen2Config, COMMON, T.Qwen2ForCausalLM),
    # Qwen 3: q/k RMSNorm per head.
    "qwen3": (T.Qwen3Config, dict(COMMON, head_dim=16), T.Qwen3ForCausalLM),
    "mistral": (T.MistralConfig, COMMON, T.MistralForCausalLM),
    "phi": (T.PhiConfig, COMMON, T.PhiForCausalLM),
    "phi3": (T.Phi3Config, dict(COMMON, pad_token_id=0), T.Phi3ForCausalLM),
    # Command R: interleaved rotary, parallel attention and MLP, LayerNorm
    # without bias, logit scale (torch 1.13's exporter fails on it); Command
    # R7B (cohere2) with sliding-window layers.
    "cohere": (T.CohereConfig, COMMON, T.CohereForCausalLM),
    "cohere2": (T.Cohere2Config, dict(COMMON, sliding_window=8), T.Cohere2ForCausalLM),
    "gemma": (T.GemmaConfig, dict(COMMON, head_dim=16), T.GemmaForCausalLM),
    # Gemma 3: q/k RMSNorm, sandwich norms, sliding-window layers.
    "gemma3": (T.Gemma3TextConfig, dict(COMMON, head_dim=16, sliding_window=8),
               T.Gemma3ForCausalLM),
    # Gemma 2: attention scores and logits soft-capped, caps small enough
    # (with larger initial weights: scores reach ~2.5, logits ~11) that the
    # tanh bends them; alternating sliding-window layers.
    "gemma2": (T.Gemma2Config, dict(COMMON, head_dim=16, sliding_window=8, initializer_range=0.2,
                                    attn_logit_softcapping=1.0, final_logit_softcapping=5.0),
               T.Gemma2ForCausalLM),
    # OLMo: LayerNorm without weights; OLMo 2: norms after attention and MLP.
    "olmo": (T.OlmoConfig, COMMON, T.OlmoForCausalLM),
    "olmo2": (T.Olmo2Config, COMMON, T.Olmo2ForCausalLM),
    # Granite: multipliers on embeddings, residuals, attention and logits.
    "granite": (T.GraniteConfig, COMMON, T.GraniteForCausalLM),
    "starcoder2": (T.Starcoder2Config, COMMON, T.Starcoder2ForCausalLM),
    "stablelm": (T.StableLmConfig, COMMON, T.StableLmForCausalLM),
    "gpt_neox": (T.GPTNeoXConfig, NEOX, T.GPTNeoXForCausalLM),
    # Falcon: fused QKV picked apart with GatherND.
    "falcon": (T.FalconConfig, dict(vocab_size=256, hidden_size=64, num_hidden_layers=2,
                                    num_attention_heads=4, use_cache=False),
               T.FalconForCausalLM),
    "opt": (T.OPTConfig, dict(vocab_size=256, hidden_size=64, ffn_dim=128, num_hidden_layers=2,
                              num_attention_heads=4, max_position_embeddings=128,
                              word_embed_proj_dim=64, use_cache=False), T.OPTForCausalLM),
    "bloom": (T.BloomConfig, dict(vocab_size=256, hidden_size=64, n_layer=2, n_head=4,
                                  use_cache=False), T.BloomForCausalLM),
    "mpt": (T.MptConfig, dict(vocab_size=256, d_model=64, n_layers=2, n_heads=4, max_seq_len=128,
                              use_cache=False), T.MptForCausalLM),
    "gpt_bigcode": (T.GPTBigCodeConfig, dict(vocab_size=256, n_embd=64, n_layer=2, n_head=4,
                                             n_positions=128, use_cache=False),
                    T.GPTBigCodeForCausalLM),
    "gptj": (T.GPTJConfig, dict(vocab_size=256, n_embd=64, n_layer=2, n_head=4, rotary_dim=8,
                                n_positions=128, use_cache=False), T.GPTJForCausalLM),
    "codegen": (T.CodeGenConfig, dict(vocab_size=256, n_embd=64, n_layer=2, n_head=4,
                                      rotary_dim=8, n_positions=128, n_ctx=128, use_cache=False),
                T.CodeGenForCausalLM),
    # GPT-Neo: unscaled attention scores, learned positions, layers alternating
    # full causal attention with a local window.
    "gpt_neo": (T.GPTNeoConfig, dict(vocab_size=256, hidden_size=64, intermediate_size=128,
                                     num_layers=2, num_heads=4, window_size=5,
                                     attention_types=[[["global", "local"], 1]],
                                     max_position_embeddings=128, use_cache=False),
                T.GPTNeoForCausalLM),
    # Helium: RMSNorm eps 1e-8, which leaves no Add in the export.
    "helium": (T.HeliumConfig, dict(COMMON, head_dim=16), T.HeliumForCausalLM),
    # Nemotron and Arcee: squared ReLU as Pow(x, 2).
    "nemotron": (T.NemotronConfig, COMMON, T.NemotronForCausalLM),
    "arcee": (T.ArceeConfig, COMMON, T.ArceeForCausalLM),
    "exaone4": (T.Exaone4Config, COMMON, T.Exaone4ForCausalLM),
    "ernie4_5": (T.Ernie4_5Config, dict(COMMON, head_dim=16), T.Ernie4_5ForCausalLM),
    "seed_oss": (T.SeedOssConfig, dict(COMMON, head_dim=16), T.SeedOssForCausalLM),
    "smollm3": (T.SmolLM3Config, dict(COMMON, pad_token_id=0), T.SmolLM3ForCausalLM),
    "glm": (T.GlmConfig, dict(COMMON, head_dim=16, pad_token_id=0), T.GlmForCausalLM),
    "gpt2": (T.GPT2Config, dict(vocab_size=256, n_embd=64, n_layer=2, n_head=4,
                                n_positions=128, use_cache=False), T.GPT2LMHeadModel),
    # NanoChat: weightless RMSNorms (one after the embedding, q/k after
    # RoPE), RoPE rotating the other way (Concat(x2, -x1)), squared ReLU,
    # soft-capped logits.
    "nanochat": (T.NanoChatConfig, dict(COMMON, head_dim=16), T.NanoChatForCausalLM),
    # Ministral 3: YaRN tables and Llama 4's per-position query scaling,
    # 1 + beta·log(1 + floor(pos / original max)); an original max of 8
    # makes the scaling vary within the test's 16 tokens.
    "ministral3": (T.Ministral3Config,
                   dict(COMMON, head_dim=16, rope_parameters=dict(
                       rope_type="yarn", rope_theta=1e6, factor=16.0,
                       original_max_position_embeddings=8, beta_fast=32.0, beta_slow=1.0,
                       mscale=1.0, mscale_all_dim=1.0, llama_4_scaling_beta=0.1)),
                   T.Ministral3ForCausalLM),
    # OLMo 3: sliding-window layers with OLMo 2's norms after each sublayer.
    "olmo3": (T.Olmo3Config, dict(COMMON, sliding_window=8), T.Olmo3ForCausalLM),
    "glm4": (T.Glm4Config, dict(COMMON, head_dim=16, pad_token_id=0), T.Glm4ForCausalLM),
    # BitNet (unquantized weights): RMSNorms inside attention and the MLP.
    "bitnet": (T.BitNetConfig, dict(COMMON, pad_token_id=0), T.BitNetForCausalLM),
    "biogpt": (T.BioGptConfig, dict(vocab_size=256, hidden_size=64, intermediate_size=128,
                                    num_hidden_layers=2, num_attention_heads=4,
                                    max_position_embeddings=128, use_cache=False),
               T.BioGptForCausalLM),
    "hunyuan_v1_dense": (T.HunYuanDenseV1Config, dict(COMMON, head_dim=16, pad_token_id=0),
                         T.HunYuanDenseV1ForCausalLM),
    # Apertus: xIELU, whose trained alphas the exporter folds through their
    # softplus into one-element initializers (trained as such here and in
    # the oracle); q/k RMSNorm.
    "apertus": (T.ApertusConfig, dict(COMMON, head_dim=16, pad_token_id=0),
                T.ApertusForCausalLM),
    # Mixtures of experts: 4 SwiGLU experts, 2 per token; Mixtral and
    # Qwen3-MoE renormalize the two chosen weights, OLMoE does not.
    "mixtral": (T.MixtralConfig, dict(COMMON, num_local_experts=4, num_experts_per_tok=2),
                T.MixtralForCausalLM),
    "qwen3_moe": (T.Qwen3MoeConfig, dict(COMMON, head_dim=16, num_experts=4,
                                         num_experts_per_tok=2, moe_intermediate_size=32,
                                         norm_topk_prob=True), T.Qwen3MoeForCausalLM),
    "olmoe": (T.OlmoeConfig, dict(COMMON, num_experts=4, num_experts_per_tok=2),
              T.OlmoeForCausalLM),
    # Granite-MoE: the top 2 of the router's logits, then their softmax;
    # Hunyuan MoE: a dense SwiGLU MLP beside the routed experts.
    "granitemoe": (T.GraniteMoeConfig, dict(COMMON, num_local_experts=4, num_experts_per_tok=2),
                   T.GraniteMoeForCausalLM),
    "hunyuan_v1_moe": (T.HunYuanMoEV1Config, dict(COMMON, head_dim=16, num_experts=4, moe_topk=2,
                                                  pad_token_id=0), T.HunYuanMoEV1ForCausalLM),
    # Qwen2-MoE: the top 2 probabilities as they are, and a shared expert
    # gated by a sigmoid.
    "qwen2_moe": (T.Qwen2MoeConfig, dict(COMMON, num_experts=4, num_experts_per_tok=2,
                                         moe_intermediate_size=32,
                                         shared_expert_intermediate_size=64),
                  T.Qwen2MoeForCausalLM),
    # ERNIE 4.5 MoE: experts chosen by the probabilities plus a selection
    # bias (made nonzero, so that it changes choices), weighed by the
    # probabilities alone, renormalized over a clamped sum; a shared expert.
    "ernie4_5_moe": (T.Ernie4_5_MoeConfig, dict(COMMON, head_dim=16, moe_num_experts=4, moe_k=2,
                                                moe_intermediate_size=32, moe_num_shared_experts=1,
                                                moe_layer_start_index=0),
                     T.Ernie4_5_MoeForCausalLM),
    # GLM-4.5 (DeepSeek V3's routing): sigmoid scores plus a selection bias
    # choose 2 of 8 experts within the best 2 of 4 groups (by the sums of
    # their two best biased scores); the chosen scores, renormalized and
    # scaled by 2.5, weigh them; a shared expert; the first layer dense.
    "glm4_moe": (T.Glm4MoeConfig, dict(COMMON, head_dim=16, n_routed_experts=8,
                                       num_experts_per_tok=2, n_group=4, topk_group=2,
                                       routed_scaling_factor=2.5, moe_intermediate_size=32,
                                       n_shared_experts=1, pad_token_id=0),
                 T.Glm4MoeForCausalLM),
    # dots.llm1: the same routing, 2 of 8 experts in the better of 2 groups,
    # the chosen scores as they are, scaled by 1.5.
    "dots1": (T.Dots1Config, dict(COMMON, head_dim=16, n_routed_experts=8,
                                  num_experts_per_tok=2, n_group=2, topk_group=1,
                                  routed_scaling_factor=1.5, norm_topk_prob=False,
                                  moe_intermediate_size=32, n_shared_experts=1,
                                  first_k_dense_replace=0, pad_token_id=0),
              T.Dots1ForCausalLM),
    # EXAONE MoE: the same routing, a dense first layer, a sliding-window
    # layer before a global one.
    "exaone_moe": (T.ExaoneMoeConfig, dict(COMMON, head_dim=16, num_experts=8,
                                           num_experts_per_tok=2, n_group=4, topk_group=2,
                                           moe_intermediate_size=32, num_shared_experts=1,
                                           sliding_window=8,
                                           layer_types=["sliding_attention", "full_attention"],
                                           mlp_layer_types=["dense", "sparse"],
                                           pad_token_id=0),
                   T.ExaoneMoeForCausalLM),
    # LFM2: a short-convolution layer (a depthwise causal Conv1d over 3
    # positions between two gates) before an attention layer.
    "lfm2": (T.Lfm2Config, dict(COMMON, head_dim=16, layer_types=["conv", "full_attention"],
                                pad_token_id=0), T.Lfm2ForCausalLM),
    # LFM2-MoE: a dense conv layer, then an attention layer whose experts
    # are chosen by sigmoid scores plus a bias, renormalized, scaled by 1.5.
    "lfm2_moe": (T.Lfm2MoeConfig, dict(COMMON, head_dim=16, layer_types=["conv", "full_attention"],
                                       num_dense_layers=1, num_experts=8, num_experts_per_tok=2,
                                       moe_intermediate_size=32, routed_scaling_factor=1.5,
                                       pad_token_id=0), T.Lfm2MoeForCausalLM),
    # XGLM: sinusoidal positions (a frozen table, offset by 2), a scaled
    # embedding, pre-norm LayerNorms.
    "xglm": (T.XGLMConfig, dict(vocab_size=256, d_model=64, ffn_dim=128, num_layers=2,
                                attention_heads=4, max_position_embeddings=128, use_cache=False),
             T.XGLMForCausalLM),
    # OpenAI GPT: the causal mask as a product, scores · tril + -1e4 · (1 -
    # tril); each layer's tril buffer equal to the others' (the oracle ties
    # them: frozen together).
    "openai-gpt": (T.OpenAIGPTConfig, dict(vocab_size=256, n_embd=64, n_layer=2, n_head=4,
                                           n_positions=128), T.OpenAIGPTLMHeadModel),
    # Further decoders: Ministral (sliding windows), VaultGemma, Jais 2,
    # Mellum; and mixtures of experts: MiniMax-M2 (sigmoid scores with a
    # selection bias), Cohere 2 MoE, AFMoE (shared experts, a dense first
    # layer), Hunyuan V3 (scaled routing), Solar Open (group-limited, 2
    # groups), Granite-MoE with a shared expert, FlexOlmo (5 of 7 experts).
    "ministral": (T.MinistralConfig, dict(COMMON, head_dim=16, pad_token_id=0),
                  T.MinistralForCausalLM),
    "vaultgemma": (T.VaultGemmaConfig, dict(COMMON, head_dim=16, pad_token_id=0),
                   T.VaultGemmaForCausalLM),
    "jais2": (T.Jais2Config, dict(COMMON, head_dim=16, pad_token_id=0), T.Jais2ForCausalLM),
    "mellum": (T.MellumConfig, dict(COMMON, head_dim=16, pad_token_id=0), T.MellumForCausalLM),
    "minimax": (T.MiniMaxConfig, dict(COMMON, head_dim=16, num_hidden_layers=4,
                                     layer_types=["linear_attention", "full_attention"] * 2,
                                     num_local_experts=8, num_experts_per_tok=2,
                                     block_size=4, pad_token_id=0),
                T.MiniMaxForCausalLM),
    "minimax_m2": (T.MiniMaxM2Config, dict(COMMON, head_dim=16, num_local_experts=8,
                                           num_experts_per_tok=2, pad_token_id=0),
                   T.MiniMaxM2ForCausalLM),
    "cohere2_moe": (T.Cohere2MoeConfig, dict(COMMON, head_dim=16, pad_token_id=0),
                    T.Cohere2MoeForCausalLM),
    "afmoe": (T.AfmoeConfig, dict(COMMON, head_dim=16, num_experts=8, num_experts_per_tok=2,
                                  moe_intermediate_size=32, num_shared_experts=1,
                                  pad_token_id=0), T.AfmoeForCausalLM),
    "hy_v3": (T.HYV3Config, dict(COMMON, head_dim=16, num_experts=8, num_experts_per_tok=2,
                                 moe_intermediate_size=32, pad_token_id=0), T.HYV3ForCausalLM),
    "solar_open": (T.SolarOpenConfig, dict(COMMON, head_dim=16, n_routed_experts=8,
                                           num_experts_per_tok=2, moe_intermediate_size=32,
                                           n_group=2, topk_group=1, pad_token_id=0),
                   T.SolarOpenForCausalLM),
    "granitemoeshared": (T.GraniteMoeSharedConfig, dict(COMMON, head_dim=16, pad_token_id=0),
                         T.GraniteMoeSharedForCausalLM),
    "flex_olmo": (T.FlexOlmoConfig, dict(COMMON, head_dim=16, pad_token_id=0),
                  T.FlexOlmoForCausalLM),
    # Flint: attention sinks (a logit per head concatenated to the scores),
    # a sliding window, a dense first layer, then experts with a shared one.
    "flint": (T.FlintConfig, dict(COMMON, head_dim=16, num_experts=8, num_experts_per_tok=2,
                                  moe_intermediate_size=32, shared_expert_intermediate_size=32,
                                  mlp_only_layers=[0], sliding_window=5,
                                  layer_types=["full_attention", "sliding_attention"],
                                  pad_token_id=0), T.FlintForCausalLM),
    # gpt-oss: attention sinks, sliding and full layers, RoPE on halves with
    # half-width tables, and experts stored for x · W with g and u
    # interleaved, biases on the router and both products, clamped at a
    # limit low enough (0.2) that the tiny model's units cross it.
    "gpt_oss": (T.GptOssConfig, dict(COMMON, head_dim=16, num_local_experts=8,
                                     num_experts_per_tok=2, sliding_window=5,
                                     layer_types=["sliding_attention", "full_attention"],
                                     swiglu_limit=0.2, pad_token_id=0),
                T.GptOssForCausalLM),
    # Granite SWA (dense and MoE): sinks as the output scaled by
    # sigmoid(logsumexp(scores) - sink), a full and a sliding layer.
    "granite_swa": (T.GraniteSWAConfig, dict(COMMON, head_dim=16, sliding_window=5,
                                             layer_types=["full_attention", "sliding_attention"],
                                             pad_token_id=0), T.GraniteSWAForCausalLM),
    "granitemoe_swa": (T.GraniteMoeSWAConfig,
                       dict(COMMON, head_dim=16, sliding_window=5,
                            layer_types=["full_attention", "sliding_attention"], pad_token_id=0),
                       T.GraniteMoeSWAForCausalLM),
    # MiMo-V2-Flash: values of head dim 8 against queries and keys of 16
    # (padded to 16 for the attention, the output sliced back), sinks on
    # the sliding layer, sigmoid-routed experts after a dense layer; and the
    # same with values wider than the keys (queries and keys padded).
    "mimo_v2_flash": (T.MiMoV2FlashConfig,
                      dict(COMMON, head_dim=16, v_head_dim=8, n_routed_experts=8,
                           num_experts_per_tok=2, moe_intermediate_size=32, sliding_window=5,
                           layer_types=["full_attention", "sliding_attention"], pad_token_id=0),
                      T.MiMoV2FlashForCausalLM),
    "mimo_v2_flash_wide_values": (T.MiMoV2FlashConfig,
                                  dict(COMMON, head_dim=16, v_head_dim=24, n_routed_experts=8,
                                       num_experts_per_tok=2, moe_intermediate_size=32,
                                       pad_token_id=0), T.MiMoV2FlashForCausalLM),
    # DeepSeek V3 (Kimi K2's architecture): multi-head latent attention
    # (low-rank q and kv, one rotary key shared by the heads and broadcast
    # to them, the key assembled by ScatterND in an empty tensor, values
    # narrower than the keys), RoPE on interleaved pairs, then sigmoid
    # experts chosen in the best 2 of 4 groups, scaled, with a shared one.
    "deepseek_v3": (T.DeepseekV3Config,
                    dict(COMMON, head_dim=8, num_key_value_heads=4, q_lora_rank=32,
                         kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=16,
                         v_head_dim=16, n_routed_experts=8, n_group=4, topk_group=2,
                         num_experts_per_tok=2, moe_intermediate_size=32,
                         first_k_dense_replace=1, n_shared_experts=1,
                         routed_scaling_factor=2.5, pad_token_id=0),
                    T.DeepseekV3ForCausalLM),
    # Multi-head latent attention elsewhere: GLM-4.7-Flash (glm4_moe_lite;
    # queries projected whole, GLM-4.5's experts), A.X K1 (axk1; the key and
    # value expanded from the latent by concatenation, not ScatterND),
    # Youtu (dense MLPs), MiniCPM3 (DeepSeek V2's attention, muP scales on
    # embeddings, residual branches and logits).
    "glm4_moe_lite": (T.Glm4MoeLiteConfig,
                      dict(MLA, n_routed_experts=8, num_experts_per_tok=2,
                           moe_intermediate_size=32, n_shared_experts=1,
                           routed_scaling_factor=1.8, pad_token_id=0),
                      T.Glm4MoeLiteForCausalLM),
    "axk1": (T.AXK1Config, dict(MLA, q_lora_rank=32, n_routed_experts=8, n_group=4, topk_group=2,
                                num_experts_per_tok=2, moe_intermediate_size=32,
                                n_shared_experts=1, pad_token_id=0), T.AXK1ForCausalLM),
    "youtu": (T.YoutuConfig, dict(MLA, pad_token_id=0), T.YoutuForCausalLM),
    # DeepSeek's sparse attention (DeepSeek V3.2; GLM-5 with GLM's experts in
    # one group): an indexer's scores choose index_topk keys a query, so
    # while that covers the sequence (32 here, of 16) every key is chosen
    # and the attention is dense.
    "deepseek_v32": (T.DeepseekV32Config,
                     dict(MLA, q_lora_rank=32, n_routed_experts=8, n_group=4, topk_group=2,
                          num_experts_per_tok=2, moe_intermediate_size=32,
                          first_k_dense_replace=1, n_shared_experts=1, index_topk=32,
                          index_head_dim=16, index_n_heads=2, pad_token_id=0),
                     T.DeepseekV32ForCausalLM),
    "glm_moe_dsa": (T.GlmMoeDsaConfig,
                    dict(MLA, q_lora_rank=32, n_routed_experts=8, num_experts_per_tok=2,
                         moe_intermediate_size=32, first_k_dense_replace=1, n_shared_experts=1,
                         index_topk=32, index_head_dim=16, index_n_heads=2, pad_token_id=0),
                    T.GlmMoeDsaForCausalLM),
    "minicpm3": (T.MiniCPM3Config, dict(MLA, q_lora_rank=32, scale_emb=12.0, scale_depth=1.4,
                                        dim_model_base=32, pad_token_id=0),
                 T.MiniCPM3ForCausalLM),
    # HyperCLOVA X: muP multipliers on the embeddings, residual branches,
    # attention scores and logits; norms after each sublayer too.
    "hyperclovax": (T.HyperCLOVAXConfig, dict(COMMON, head_dim=16, embedding_multiplier=2.0,
                                              logits_scaling=0.5, residual_multiplier=0.7,
                                              attention_multiplier=0.2, pad_token_id=0),
                    T.HyperCLOVAXForCausalLM),
    # CWM: a full and a sliding-window layer.
    "cwm": (T.CwmConfig, dict(COMMON, head_dim=16, sliding_window=5,
                              layer_types=["full_attention", "sliding_attention"], pad_token_id=0),
            T.CwmForCausalLM),
    # LFM3: a short-convolution layer, a full and a sliding-window layer.
    "lfm3": (T.Lfm3Config, dict(COMMON, head_dim=16, num_hidden_layers=3, sliding_window=5,
                                layer_types=["conv", "full_attention", "sliding_attention"],
                                pad_token_id=0), T.Lfm3ForCausalLM),
    # Laguna: attention outputs gated per head by a softplus (as torch
    # exports F.softplus: past a threshold, x itself), a full and a
    # sliding-window layer with different head counts, a dense then a
    # sparse MLP (sigmoid scores plus a selection bias, renormalized and
    # scaled, beside a shared expert).
    "laguna": (T.LagunaConfig, dict(COMMON, head_dim=16, num_experts=8, num_experts_per_tok=2,
                                    moe_intermediate_size=32, shared_expert_intermediate_size=32,
                                    sliding_window=5,
                                    layer_types=["full_attention", "sliding_attention"],
                                    mlp_layer_types=["dense", "sparse"],
                                    moe_routed_scaling_factor=1.5,
                                    num_attention_heads_per_layer=[4, 2], pad_token_id=0),
               T.LagunaForCausalLM),
    # Apertus 1.5's text model: Apertus's xIELU and q/k norms.
    "apertus1p5": (T.Apertus1p5TextConfig, dict(COMMON, head_dim=16, pad_token_id=0),
                   T.Apertus1p5TextForCausalLM),
    # Llama 4: a dense layer with chunked attention (chunks of 5 of the 16
    # tokens), rotary and weightless q/k RMS norms; a NoPE layer with full
    # causal attention whose queries are scaled per position (temperature
    # tuning, a step every 4 tokens) and a mixture of experts that runs
    # every expert on every token scaled by its routing weight (the sigmoid
    # of the one chosen logit; 0 for the others), beside a shared expert.
    # Exported with a real-valued rotary: torch's exporter cannot export the
    # complex one (see export()).
    "llama4": (T.Llama4TextConfig, dict(COMMON, head_dim=16, intermediate_size=32,
                                        intermediate_size_mlp=128, interleave_moe_layer_step=2,
                                        num_local_experts=4, num_experts_per_tok=1,
                                        no_rope_layers=[1, 0], attention_chunk_size=5,
                                        floor_scale=4, attn_scale=0.1, pad_token_id=0),
               T.Llama4ForCausalLM),
    # Gemma 4 (the 31B's form): full-attention layers with their own head
    # width and key-value heads, keys that are also the values (one
    # projection, the values RMS-normed without a weight), rope on a quarter
    # of the full layers' head ("proportional"), sliding-window layers
    # beside them, every layer's output scaled by its own constant.
    "gemma4": (T.Gemma4TextConfig, dict(COMMON, head_dim=16, num_hidden_layers=3, sliding_window=5,
                                        layer_types=["sliding_attention", "sliding_attention",
                                                     "full_attention"],
                                        hidden_size_per_layer_input=0, attention_k_eq_v=True,
                                        global_head_dim=32, num_global_key_value_heads=1,
                                        final_logit_softcapping=5.0),
               T.Gemma4ForCausalLM),
    # Gemma 4's mixture of experts (the 26B-A4B's form): GeGLU experts with
    # trained per-expert scales, routed on a copy of the token normed apart
    # (a scale vector, 1/√hidden), beside the dense MLP.
    "gemma4_moe": (T.Gemma4TextConfig, dict(COMMON, head_dim=16, sliding_window=5,
                                            layer_types=["sliding_attention", "full_attention"],
                                            global_head_dim=32,
                                            hidden_size_per_layer_input=0, enable_moe_block=True,
                                            num_experts=4, top_k_experts=2,
                                            moe_intermediate_size=32),
                   T.Gemma4ForCausalLM),
    # IQuest-Coder, EXAONE 3 and InternLM3: configurations of their own for
    # transformers' Llama (InternLM3's with biases on every projection).
    "iquestcoder": (T.IQuestCoderConfig, dict(COMMON, head_dim=16), T.LlamaForCausalLM),
    "exaone": (T.ExaoneConfig, dict(COMMON, head_dim=16), T.LlamaForCausalLM),
    "internlm3": (T.InternLM3Config, dict(COMMON, head_dim=16, qkv_bias=True, bias=True),
                  T.LlamaForCausalLM),
    # Persimmon: LayerNorm on queries and keys, rotary on half the head,
    # squared ReLU.
    "persimmon": (T.PersimmonConfig, NEOX, T.PersimmonForCausalLM),
    # Aria's text model: softmax over the top 2 of 4 experts stored for
    # x · W, beside shared experts twice an expert's width.
    "aria_text": (T.AriaTextConfig, dict(COMMON, head_dim=16, moe_num_experts=4, moe_topk=2,
                                         moe_num_shared_experts=2), T.AriaTextForCausalLM),
    # Sarvam MoE: configured for transformers' GLM-4.5, its experts in one
    # group, q/k norms, a dense first layer.
    "sarvam_moe": (T.SarvamMoEConfig, dict(COMMON, head_dim=16, n_routed_experts=8,
                                           num_experts_per_tok=2, moe_intermediate_size=32,
                                           n_shared_experts=1, first_k_dense_replace=1,
                                           pad_token_id=0), T.Glm4MoeForCausalLM),
    # Sarvam MLA: configured for transformers' DeepSeek V3, queries without
    # a low rank, its experts in one group, a dense first layer.
    "sarvam_mla": (T.SarvamMLAConfig, dict(MLA, n_routed_experts=8, num_experts_per_tok=2,
                                           moe_intermediate_size=32, n_shared_experts=1,
                                           pad_token_id=0), T.DeepseekV3ForCausalLM),
    # ModernBERT's decoder: LayerNorms without bias, GeGLU, a window on two
    # layers of three, a dense, GELU and LayerNorm before the biased head.
    "modernbert-decoder": (T.ModernBertDecoderConfig,
                           dict(vocab_size=256, hidden_size=64, intermediate_size=128,
                                num_hidden_layers=3, num_attention_heads=4, local_attention=8,
                                max_position_embeddings=128, pad_token_id=0, use_cache=False),
                           T.ModernBertDecoderForCausalLM),
    # dots.llm3's text model: DeepSeek V3.2's attention (the indexer's choice
    # covering the sequence) with the latents scaled, the rotary key normed
    # and each head's output gated by a sigmoid; the third layer windowed,
    # with heads and latents of its own.
    "dots3_note_text": (T.Dots3NoteTextConfig,
                        dict(MLA, num_hidden_layers=3, q_lora_rank=32, n_routed_experts=8,
                             num_experts_per_tok=2, moe_intermediate_size=32,
                             shared_experts_intermediate_size=32, index_topk=32,
                             index_head_dim=16, index_n_heads=2, sliding_window=5,
                             swa_num_attention_heads=2, swa_num_key_value_heads=2,
                             swa_q_lora_rank=24, swa_kv_lora_rank=24, swa_head_dim=24,
                             swa_qk_nope_head_dim=16, swa_v_head_dim=16, pad_token_id=0),
                        T.Dots3NoteForCausalLM),
    # Qwen3.5 (text): three gated DeltaNet layers (a causal conv over q, k
    # and v, the scan with 4 value heads on 2 key heads, an RMSNorm gated by
    # SiLU) to a full-attention layer with a sigmoid-gated output, q/k norms
    # and the interleaved multimodal rotary on a quarter of the head.
    # Qwen3.5 MoE and Qwen3-Next: the same layers with routed experts and a
    # sigmoid-gated shared expert. Exported through tools/gated_delta_node.py.
    "qwen3_5": (T.Qwen3_5TextConfig, GATED_DELTA, T.Qwen3_5ForCausalLM),
    "qwen3_5_moe": (T.Qwen3_5MoeTextConfig, dict(GATED_DELTA, num_experts=4, num_experts_per_tok=2,
                                                 moe_intermediate_size=32,
                                                 shared_expert_intermediate_size=32),
                    T.Qwen3_5MoeForCausalLM),
    "qwen3_next": (T.Qwen3NextConfig, dict(GATED_DELTA, num_experts=4, num_experts_per_tok=2,
                                           moe_intermediate_size=32,
                                           shared_expert_intermediate_size=32),
                   T.Qwen3NextForCausalLM),
    # OLMo hybrid: gated DeltaNet layers whose beta may reach 2 (negative
    # eigenvalues), to a full-attention layer; Lara 4 Mini: the same
    # linear layers among attention ones, with routed experts.
    "olmo_hybrid": (T.OlmoHybridConfig, dict(GATED_DELTA, pad_token_id=0),
                    T.OlmoHybridForCausalLM),
    "lara_mini": (T.LaraMiniConfig, GATED_DELTA, T.LaraMiniForCausalLM),
    # Mamba: every layer a mixer (in_proj to x and the gate z; a causal conv
    # over x; x_proj to a low-rank time step, B and C; the selective scan, a
    # state of 16 per channel each with its own decay; y·silu(z); out_proj).
    # Time steps from 0.5 to 1, as for Mamba-2. Falcon Mamba: the same with
    # weightless RMSNorms on the time step, B and C. Exported through
    # tools/mamba_node.py.
    "mamba": (T.MambaConfig, MAMBA, T.MambaForCausalLM),
    "falcon_mamba": (T.FalconMambaConfig, MAMBA, T.FalconMambaForCausalLM),
    # Jamba: Mamba mixers (RMSNorms on the time step, B and C) and an
    # attention layer, routed experts every other layer.
    "jamba": (T.JambaConfig,
              dict(COMMON, num_hidden_layers=4, attn_layer_period=4, attn_layer_offset=1,
                   expert_layer_period=2, expert_layer_offset=0, num_experts=4,
                   num_experts_per_tok=2, mamba_d_state=16, mamba_d_conv=4, mamba_expand=2,
                   use_mamba_kernels=False, tie_word_embeddings=False),
              T.JambaForCausalLM),
    # Mamba-2: every layer a mixer (in_proj to the gate, x, B, C and dt; a
    # causal conv over x, B and C; the scan; an RMSNorm gated by SiLU over
    # each group; out_proj). Exported through tools/mamba2_node.py.
    "mamba2": (T.Mamba2Config, MAMBA2, T.Mamba2ForCausalLM),
    # Bamba: Mamba-2 mixers with Llama's SwiGLU MLP in every layer, the
    # second layer attention instead.
    "bamba": (T.BambaConfig, dict(COMMON, num_hidden_layers=3, attn_layer_indices=[1],
                                  **MAMBA2_MIXER), T.BambaForCausalLM),
    # Nemotron-H: a layer is one block, a mixer, attention or a squared-ReLU
    # MLP, each behind its own RMSNorm; the mixer's time step floored at
    # time_step_min, here 0.7 so that the floor holds for about half of
    # them.
    "nemotron_h": (T.NemotronHConfig,
                   dict(vocab_size=256, hidden_size=64, intermediate_size=128, head_dim=16,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                        layers_block_type=["mamba", "mlp", "attention", "mlp"], ssm_state_size=16,
                        mamba_num_heads=8, mamba_head_dim=16, n_groups=2, chunk_size=8,
                        time_step_min=0.7, time_step_max=1.0, use_cache=False,
                        tie_word_embeddings=False),
                   T.NemotronHForCausalLM),
    # Zamba2: Mamba-2 layers; the hybrid ones first run one shared
    # transformer block (its weights reused at each) on the hidden state
    # concatenated with the embeddings.
    "zamba2": (T.Zamba2Config,
               dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                    layers_block_type=["mamba", "hybrid", "mamba", "hybrid"], num_attention_heads=4,
                    num_key_value_heads=4, n_mamba_heads=8, mamba_d_state=16, mamba_ngroups=2,
                    chunk_size=8, max_position_embeddings=128, use_cache=False),
               T.Zamba2ForCausalLM),
    # Falcon-H1: attention and a mixer side by side in every layer, µP
    # multipliers on the embedding, the head, attention, the MLP and the
    # mixer's projections.
    "falcon_h1": (T.FalconH1Config,
                  dict(COMMON, mamba_d_ssm=128, embedding_multiplier=2.0, lm_head_multiplier=0.5,
                       mlp_multipliers=[0.5, 2.0], key_multiplier=1.5,
                       attention_out_multiplier=0.75, attention_in_multiplier=1.25,
                       ssm_multipliers=[0.5, 1.5, 0.75, 1.25, 2.0], ssm_in_multiplier=0.5,
                       ssm_out_multiplier=1.5, **MAMBA2_MIXER), T.FalconH1ForCausalLM),
    # Granite 4 (hybrid): mixers and attention layers, each with routed
    # experts and a shared expert, Granite's multipliers.
    "granitemoehybrid": (T.GraniteMoeHybridConfig,
                         dict(COMMON, num_hidden_layers=3,
                              layer_types=["mamba", "attention", "mamba"], num_local_experts=4,
                              num_experts_per_tok=2, shared_intermediate_size=32,
                              embedding_multiplier=2.0, logits_scaling=4.0,
                              residual_multiplier=0.5, attention_multiplier=0.125,
                              **MAMBA2_MIXER), T.GraniteMoeHybridForCausalLM),
    # Kimi Linear: Kimi Delta Attention layers (the delta rule with a decay
    # per key channel from a low-rank forget gate, an output norm gated by a
    # sigmoid) to an MLA layer; experts with a shared one after a dense
    # first layer. Exported through tools/gated_delta_node.py.
    "kimi_linear": (T.KimiLinearConfig,
                    dict(vocab_size=256, hidden_size=64, intermediate_size=128,
                         moe_intermediate_size=32, num_hidden_layers=4, num_attention_heads=4,
                         num_key_value_heads=4, n_shared_experts=1, kv_lora_rank=32,
                         q_lora_rank=None, qk_rope_head_dim=8, v_head_dim=16, qk_nope_head_dim=16,
                         num_local_experts=4, num_experts_per_tok=2, linear_head_dim=16,
                         linear_num_heads=4, max_position_embeddings=128,
                         layer_types=["linear_attention"] * 3 + ["full_attention"],
                         mlp_layer_types=["dense"] + ["sparse"] * 3, use_cache=False,
                         pad_token_id=0, bos_token_id=1, eos_token_id=2),
                    T.KimiLinearForCausalLM),
    # Ling's hybrid (Bailing): Kimi Delta Attention layers whose forget
    # gate is a bounded sigmoid, every third layer MLA; group-limited
    # routing over experts after a dense first layer.
    "bailing_hybrid": (T.BailingHybridConfig,
                       dict(vocab_size=256, hidden_size=64, intermediate_size=128,
                            moe_intermediate_size=32, num_hidden_layers=3, num_attention_heads=4,
                            num_key_value_heads=4, n_shared_experts=1, kv_lora_rank=32,
                            q_lora_rank=None, qk_rope_head_dim=8, v_head_dim=16,
                            qk_nope_head_dim=16, head_dim=16, n_group=2, topk_group=1,
                            num_local_experts=4, num_experts_per_tok=2, first_k_dense_replace=1,
                            layer_group_size=3, max_position_embeddings=128, use_cache=False,
                            pad_token_id=0, bos_token_id=1, eos_token_id=2),
                       T.BailingHybridForCausalLM),
    # CTRL: sinusoidal positions computed in the graph, a frozen table.
    "ctrl": (T.CTRLConfig, dict(vocab_size=256, n_embd=64, dff=128, n_layer=2, n_head=4,
                                n_positions=128, use_cache=False), T.CTRLLMHeadModel),
}


def real_llama4_rotary():
    """Llama 4's rotary as its real-valued equivalent: torch 2.15's exporter
    has no ONNX form for the complex tensors (view_as_complex, polar) of
    transformers' version. Rotating the pair (x_2i, x_2i+1) by the angle
    θ_i is x·cos + rotate_every_two(x)·sin with each cos and sin repeated
    for its pair, the same numbers (GPT-J's interleaved form)."""
    from transformers.models.llama4 import modeling_llama4 as L

    def angles(self, x, position_ids):
        freqs = position_ids[..., None].float() * self.inv_freq.to(x.device, torch.float)
        return torch.stack((freqs.cos(), freqs.sin()), -1) * self.attention_scaling

    def rotate(xq, xk, cs):
        cos = cs[..., 0].repeat_interleave(2, -1)[:, :, None, :]
        sin = cs[..., 1].repeat_interleave(2, -1)[:, :, None, :]

        def one(x):
            x = x.float()
            swapped = torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)
            return x * cos + swapped * sin
        return one(xq).type_as(xq), one(xk).type_as(xk)

    L.Llama4TextRotaryEmbedding.forward = angles
    L.apply_rotary_emb = rotate


def export(name, path, seed=0, opset=None, optimize=True):
    if name == "llama4":
        real_llama4_rotary()
    model = build(ARCHITECTURES, name, seed)
    ids = torch.randint(0, 256, (2, 16))
    table = None
    helper = next((h for h in (gated_delta_node, mamba_node, mamba2_node, lightning_node)
                   if name in h.MODULES), None)
    if helper:
        # The node must compute what transformers' chunked scan does.
        with torch.no_grad():
            chunked = model(ids)
            table = helper.install()
            recurrent = model(ids)
        if not torch.allclose(chunked, recurrent, rtol=1e-4, atol=1e-5):
            sys.exit(f"error: {name}: the {helper.__name__} node's logits differ from "
                     f"transformers' by {(chunked - recurrent).abs().max().item():.3g}")
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq", max=128)
    torch.onnx.export(model, (ids,), path, input_names=["input_ids"], output_names=["logits"],
                      dynamic_shapes={"ids": {0: batch, 1: seq}}, dynamo=True,
                      external_data=False, opset_version=opset, custom_translation_table=table,
                      optimize=optimize)


if __name__ == "__main__":
    args = sys.argv[1:]
    optimize = "--no-optimize" not in args
    args = [a for a in args if a != "--no-optimize"]
    if args == ["--list"]:
        print("\n".join(ARCHITECTURES))
    elif len(args) == 4 and args[2] == "--opset":
        export(args[0], args[1], opset=int(args[3]), optimize=optimize)
    elif len(args) == 2:
        export(args[0], args[1], optimize=optimize)
    else:
        sys.exit("error: expected NAME OUT.onnx [--opset N] [--no-optimize], or --list\n"
                 + __doc__)
