"""Size of one language adapter on an encoder of XLS-R 300M's shape, as a share of the backbone.

Builds ``AdaptSpeechForCTC`` from config with random weights (no download): wav2vec2 with stable layer norm,
24 layers, width 1024, 16 heads, FFN 4096, the XLS-R feature encoder
(:data:`adaptspeech.backbones.wav2vec2.XLSR_300M_BACKBONE`); adds one bottleneck adapter (r = 64 by
default) after every encoder layer and prints its parameter count against the backbone's.

    python scripts/adapter_size.py [--bottleneck 64] [--layers 24] [--hidden 1024]
"""

from __future__ import annotations

import argparse
import json

import torch

from adaptspeech import AdaptSpeechConfig, AdaptSpeechForCTC
from adaptspeech.backbones.wav2vec2 import XLSR_300M_BACKBONE


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bottleneck", type=int, default=64)
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()

    backbone = {**XLSR_300M_BACKBONE, "num_hidden_layers": args.layers, "hidden_size": args.hidden}
    config = AdaptSpeechConfig(
        backbone_type="wav2vec2",
        backbone_config=backbone,
        adapter_languages=["ro"],
        adapter_defaults={"bottleneck": args.bottleneck},
    )
    with torch.device("meta"):  # shapes only: no memory, no time spent on random init
        model = AdaptSpeechForCTC(config)
    report = model.trainable_parameters()
    adapter = report["groups"]["adapter:ro"]["total"]
    backbone_params = report["backbone"]
    figures = {
        "encoder": f"wav2vec2 stable-LN, {args.layers} layers, width {args.hidden} (XLS-R 300M shape)",
        "bottleneck": args.bottleneck,
        "adapter_layers": len(model.adapter_blocks),
        "adapter_parameters": adapter,
        "backbone_parameters": backbone_params,
        "adapter_share_of_backbone_percent": round(100 * adapter / backbone_params, 3),
    }
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        print(f"backbone ({figures['encoder']}): {backbone_params:,} parameters")
        print(f"one language adapter (r={args.bottleneck}, {len(model.adapter_blocks)} layers): {adapter:,} parameters")
        print(f"adapter / backbone: {figures['adapter_share_of_backbone_percent']:.3f}%")


if __name__ == "__main__":
    main()
