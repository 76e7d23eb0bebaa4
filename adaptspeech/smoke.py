"""A one-minute smoke run of the foundation: config -> model -> three language adapters -> SimAdapter fusion ->
a few optimizer steps, printing the loss terms and the trainable-parameter figures.

    python -m adaptspeech.smoke [--steps 8] [--backbone fbank_conformer]
"""

from __future__ import annotations

import argparse
import time

import torch

from .configuration import AdaptSpeechConfig
from .modeling import AdaptSpeechForCTC
from .testing import TINY_BACKBONES, tiny_inputs

LANGUAGES = ["ro", "cs", "pl"]


def run_smoke(steps: int = 8, backbone_type: str = "fbank_conformer", seed: int = 0) -> dict[str, float]:
    """Train the target adapter + fusion of a small random model on random batches; returns the last losses."""
    torch.manual_seed(seed)
    backbone = dict(TINY_BACKBONES[backbone_type], hidden_size=64, num_attention_heads=4, intermediate_size=128)
    config = AdaptSpeechConfig(
        backbone_type=backbone_type,
        backbone_config=backbone,
        adapter_languages=LANGUAGES,
        adapter_defaults={"bottleneck": 16},
        vocab_size=24,
    )
    model = AdaptSpeechForCTC(config)
    print(
        f"model: {backbone_type}, width {config.hidden_size}, {config.num_encoder_layers} layers, "
        f"adapters for {', '.join(LANGUAGES)}"
    )
    model.add_fusion(LANGUAGES, target_language="ro", guide_weight=0.1)
    model.set_trainable(adapters=["ro"], fusion=True)
    model.print_trainable_parameters()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    inputs = tiny_inputs(config, batch=4, seconds=1.0, seed=seed)
    labels = torch.randint(4, config.vocab_size, (4, 6))
    model.train()
    last: dict[str, float] = {}
    start = time.perf_counter()
    for step in range(1, steps + 1):
        out = model(**inputs, labels=labels)
        optimizer.zero_grad()
        out.loss.backward()
        optimizer.step()
        last = {
            "loss": out.loss.item(),
            "loss_ctc": out.loss_ctc.item(),
            "loss_fusion_reg": out.loss_fusion_reg.item(),
            "loss_fusion_guide": out.loss_fusion_guide.item(),
        }
        print(f"step {step:>3}  " + "  ".join(f"{k} {v:.6g}" for k, v in last.items()))
    print(f"{steps} steps in {time.perf_counter() - start:.1f} s")
    return last


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="adaptspeech smoke run")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--backbone", default="fbank_conformer", choices=sorted(TINY_BACKBONES))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    run_smoke(args.steps, args.backbone, args.seed)


if __name__ == "__main__":
    main()
