"""Tiny random-init HuggingFace decoders exported the way users of current
PyTorch export them: torch.onnx.export's default (dynamo) exporter of torch
2.15, opset 20, dynamic batch and sequence, with transformers 5. Run with the
export venv that tools/install-export-venv.sh makes (.venv-export):

    .venv-export/bin/python tests/e2e/dynamo_exports.py NAME OUT.onnx
    .venv-export/bin/python tests/e2e/dynamo_exports.py --list
"""
import sys

import torch
import transformers as T
from export_common import build  # run by path, from the export venv

COMMON = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
              use_cache=False)

ARCHITECTURES = {
    "llama": (T.LlamaConfig, COMMON, T.LlamaForCausalLM),
    "qwen2": (T.Qwen2Config, COMMON, T.Qwen2ForCausalLM),
    "mistral": (T.MistralConfig, COMMON, T.MistralForCausalLM),
    "phi3": (T.Phi3Config, dict(COMMON, pad_token_id=0), T.Phi3ForCausalLM),
    # Command R: interleaved rotary, parallel attention and MLP, LayerNorm
    # without bias, logit scale (torch 1.13's exporter fails on it).
    "cohere": (T.CohereConfig, COMMON, T.CohereForCausalLM),
    # Gemma 3: q/k RMSNorm, sandwich norms, sliding-window layers.
    "gemma3": (T.Gemma3TextConfig, dict(COMMON, head_dim=16, sliding_window=8),
               T.Gemma3ForCausalLM),
    # OLMo 2: norms after attention and MLP, q/k RMSNorm.
    "olmo2": (T.Olmo2Config, COMMON, T.Olmo2ForCausalLM),
    # Granite: multipliers on embeddings, residuals, attention and logits.
    "granite": (T.GraniteConfig, COMMON, T.GraniteForCausalLM),
    "gpt2": (T.GPT2Config, dict(vocab_size=256, n_embd=64, n_layer=2, n_head=4,
                                n_positions=128, use_cache=False), T.GPT2LMHeadModel),
}


def export(name, path, seed=0):
    model = build(ARCHITECTURES, name, seed)
    ids = torch.randint(0, 256, (2, 16))
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq", max=128)
    torch.onnx.export(model, (ids,), path, input_names=["input_ids"], output_names=["logits"],
                      dynamic_shapes={"ids": {0: batch, 1: seq}}, dynamo=True,
                      external_data=False)


if __name__ == "__main__":
    if sys.argv[1:] == ["--list"]:
        print("\n".join(ARCHITECTURES))
    else:
        export(sys.argv[1], sys.argv[2])
