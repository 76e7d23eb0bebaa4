"""What autograd keeps for backward in one training forward of each ``bench_training_step.py`` configuration: the
activation part of its peak memory, per encoder layer and in the rest of the model.

The forward of a configuration (built as ``bench_training_step.py`` builds it, training mode, one batch of random
audio) runs under ``torch.autograd.graph.saved_tensors_hooks``; every tensor autograd saves is counted once by its
storage (views of one storage count once), parameters excluded. Run at two layer counts, the difference gives the
bytes one more encoder layer keeps, the rest the fixed part (front end, projection, positional convolution, head and
loss): the figures to set a configuration's peak memory against, beside its weights, gradients and AdamW state.

    OMP_NUM_THREADS=1 python scripts/saved_activations.py --configs full,adapter,fusion --layers 1,3
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_training_step as bts

from adaptspeech.memory import MIB


def saved_bytes(configuration: str, layers: int, batch: int, seconds: float) -> int:
    """Bytes of the distinct non-parameter storages autograd saves in one training forward of ``configuration``."""
    model = bts.build_model(configuration, layers).train()
    generator = torch.Generator().manual_seed(0)
    samples = int(seconds * 16000)
    audio = torch.randn(batch, samples, generator=generator)
    labels = torch.randint(5, 40, (batch, max(1, int(10 * seconds))), generator=generator)
    storages: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = max(storages.get(storage.data_ptr(), 0), storage.nbytes())
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor), bts.step_context(configuration):
        model(input_values=audio, attention_mask=torch.ones_like(audio, dtype=torch.long), labels=labels,
              **bts.step_inputs(configuration, batch))
    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    return sum(size for pointer, size in storages.items() if pointer not in parameters)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default="full,adapter,fusion", help=f"among {', '.join(bts.ALL_CONFIGS)}")
    parser.add_argument("--layers", default="1,3", help="two encoder layer counts (the slope is per layer)")
    parser.add_argument("--batch", type=int, default=4, help="utterances")
    parser.add_argument("--seconds", type=float, default=4.0, help="seconds of audio per utterance")
    parser.add_argument("--at", type=int, default=24, help="the layer count to extrapolate to (XLS-R 300M: 24)")
    args = parser.parse_args()
    low, high = (int(n) for n in args.layers.split(","))
    print(f"batch {args.batch} x {args.seconds:g} s, autograd's saved tensors in one training forward")
    print(f"| configuration | MiB at {low} layer(s) | MiB at {high} | per further layer | at {args.at} layers |")
    print("| --- | --- | --- | --- | --- |")
    for configuration in args.configs.split(","):
        a = saved_bytes(configuration, low, args.batch, args.seconds) / MIB
        b = saved_bytes(configuration, high, args.batch, args.seconds) / MIB
        slope = (b - a) / (high - low)
        print(f"| {configuration} | {a:,.0f} | {b:,.0f} | {slope:,.1f} | {a + slope * (args.at - low):,.0f} |",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
