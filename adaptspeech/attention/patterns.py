"""The fixed attention patterns of Wu et al. 2022 (Fig. 2a) used to initialise the random synthesizer.

The seed's 12 heads: five *diagonal* heads (the diagonal, shifted left by one and two, shifted right by one
and two), one *increasing* and one *decreasing* head, and five *small random* heads. Here "shifted left by
``s``" means each frame looks ``s`` frames back (key ``j = i - s``), "right" ``s`` frames ahead (``j = i +
s``); "increasing" weights grow linearly with the key position (``~ j + 1``), "decreasing" fall linearly (``~
L - j``).

The patterns are attention *weights*; the synthesizer learns *logits* that go through a softmax, so we store
``log(max(P, floor))`` (``floor = 1e-4``): the softmax then reproduces ``P`` up to the floor (a one-hot
diagonal keeps ~95% of the mass at ``T = 500`` frames) and every logit stays finite and trainable. Random
heads are ``N(0, 0.02^2)`` logits (near-uniform attention), as the paper's "small random numbers".

Other head counts (the paper only shows 12): for ``h < 12`` head ``k`` takes entry ``floor(k * 12 / h)`` of the
12-head layout, an even subsample that keeps each family's share (4 heads: diagonal, right 1, decreasing,
random); for ``h > 12`` the first 12 heads follow the paper and the extra heads are small random.
"""

from __future__ import annotations

import math

import torch

#: the paper's 12-head layout (Fig. 2a, left to right).
SEED_LAYOUT: tuple[str, ...] = (
    "diagonal",
    "shift_left_1",
    "shift_left_2",
    "shift_right_1",
    "shift_right_2",
    "increasing",
    "decreasing",
    "random",
    "random",
    "random",
    "random",
    "random",
)

#: diagonal-family pattern -> key offset ``j - i``.
DIAGONAL_OFFSETS: dict[str, int] = {
    "diagonal": 0,
    "shift_left_1": -1,
    "shift_left_2": -2,
    "shift_right_1": 1,
    "shift_right_2": 2,
}

PATTERN_FLOOR = 1e-4
RANDOM_STD = 0.02


def fixed_pattern_layout(num_heads: int) -> list[str]:
    """The pattern name of each head (see the module docstring for ``num_heads != 12``)."""
    if num_heads < 1:
        raise ValueError(f"fixed patterns need num_heads >= 1, got {num_heads}")
    seed = len(SEED_LAYOUT)
    if num_heads <= seed:
        return [SEED_LAYOUT[k * seed // num_heads] for k in range(num_heads)]
    return [*SEED_LAYOUT, *["random"] * (num_heads - seed)]


def pattern_weights(name: str, length: int) -> torch.Tensor:
    """Unnormalised non-negative pattern ``[L, L]`` (query, key) for a non-random pattern name."""
    positions = torch.arange(length, dtype=torch.float32)
    if name in DIAGONAL_OFFSETS:
        offset = DIAGONAL_OFFSETS[name]
        return (positions[None, :] - positions[:, None] == offset).float()
    if name == "increasing":
        return ((positions + 1) / length).expand(length, length).clone()
    if name == "decreasing":
        return ((length - positions) / length).expand(length, length).clone()
    raise ValueError(f"unknown fixed pattern {name!r}; allowed values: {', '.join(sorted(set(SEED_LAYOUT)))}")


def fixed_pattern_logits(num_heads: int, length: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Logits ``[h, L, L]`` whose softmax over keys gives the paper's patterns (random heads: small random)."""
    logits = torch.empty(num_heads, length, length)
    floor = math.log(PATTERN_FLOOR)
    for head, name in enumerate(fixed_pattern_layout(num_heads)):
        if name == "random":
            logits[head].normal_(0.0, RANDOM_STD, generator=generator)
        else:
            logits[head] = pattern_weights(name, length).clamp(min=PATTERN_FLOOR).log().clamp(min=floor)
    return logits
