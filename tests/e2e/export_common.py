"""What the exporters of the end-to-end tests share; imports only torch, so
that both the torch 1.13 venv (hf_architectures.py) and the torch 2.15 one
(dynamo_exports.py) can use it."""
import torch


class LogitsOnly(torch.nn.Module):
    """The model with token ids in and logits out: what the trainer feeds."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(input_ids=ids, use_cache=False).logits


def build(architectures, name, seed=0):
    """The family's tiny model, seeded, in eval mode, eager attention. Norm
    weights start at 1: every param gets its own values, as trained weights
    have, or the exporters merge equal initializers into one."""
    torch.manual_seed(seed)
    config_class, kwargs, model_class = architectures[name]
    config = config_class(**kwargs)
    config._attn_implementation = "eager"
    # Mixtures of experts as batched products over the chosen experts (the
    # default loops over experts with data-dependent shapes, which does not
    # export).
    config._experts_implementation = "batched_mm"
    model = model_class(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.02 * torch.randn_like(p))
        # Selection biases are buffers that start at 0: made nonzero, as
        # trained ones are, so that they change which experts are chosen.
        for name, b in model.named_buffers():
            if name.endswith(("e_score_correction_bias", "expert_bias")):
                b.add_(0.02 * torch.randn_like(b))
            # Gemma 4's per-layer output scales: buffers that checkpoints
            # set (1 at init), each layer its own.
            if name.endswith("layer_scalar"):
                b.add_(0.2 * torch.randn_like(b))
    return LogitsOnly(model)
