"""The fixed attention patterns of Fig. 2a of Wu et al. 2022 ("Input-independent attention weights are expressive
enough") that initialise the random synthesizer."""

from __future__ import annotations

import pytest
import torch

from adaptspeech.attention import ATTENTION, AttentionConfig
from adaptspeech.attention.patterns import SEED_LAYOUT, fixed_pattern_layout, fixed_pattern_logits


def test_twelve_heads_follow_the_papers_figure() -> None:
    assert fixed_pattern_layout(12) == [
        "diagonal",
        "shift_left_1",
        "shift_left_2",
        "shift_right_1",
        "shift_right_2",
        "increasing",
        "decreasing",
        *["random"] * 5,
    ]


@pytest.mark.parametrize(
    ("heads", "expected"),
    [
        (1, ["diagonal"]),
        (4, ["diagonal", "shift_right_1", "decreasing", "random"]),
        (6, ["diagonal", "shift_left_2", "shift_right_2", "decreasing", "random", "random"]),
        (16, [*SEED_LAYOUT, "random", "random", "random", "random"]),
    ],
)
def test_other_head_counts(heads: int, expected: list[str]) -> None:
    assert fixed_pattern_layout(heads) == expected


def test_softmax_of_the_logits_gives_the_patterns() -> None:
    length = 50
    probs = torch.softmax(fixed_pattern_logits(12, length, torch.Generator().manual_seed(0)), dim=-1)
    rows = torch.arange(length)
    for head, offset in enumerate([0, -1, -2, 1, 2]):  # diagonal family: key = query + offset
        inside = (rows + offset >= 0) & (rows + offset < length)
        mass = probs[head, rows[inside], rows[inside] + offset]
        assert bool((mass > 0.99).all()), (head, mass.min())
    increasing, decreasing = probs[5, 0], probs[6, 0]
    assert bool((increasing.diff() > 0).all()) and bool((decreasing.diff() < 0).all())
    torch.testing.assert_close(increasing, (rows + 1.0) / (rows + 1.0).sum())
    torch.testing.assert_close(decreasing, (length - rows.float()) / (length - rows.float()).sum())
    assert torch.equal(probs[5], probs[5, :1].expand(length, -1))  # equal rows, each the same softmax
    random = fixed_pattern_logits(12, length, torch.Generator().manual_seed(0))[7:]
    assert random.abs().max() < 0.2 and random.std() > 0.005  # small random logits


def test_module_uses_and_freezes_the_patterns() -> None:
    config = AttentionConfig(
        kind="synthesizer_random",
        hidden_size=24,
        num_heads=12,
        synthesizer_max_len=20,
        synthesizer_init="fixed_patterns",
        synthesizer_freeze=True,
    )
    module = ATTENTION.get("synthesizer_random")(config)
    torch.testing.assert_close(module.logits[:7], fixed_pattern_logits(12, 20)[:7])
    assert module.frozen and all(name != "logits" for name, _ in module.named_parameters())
    x = torch.randn(1, 10, 24)
    weights = module.attention_weights(x, None)  # [1, h, T, T], cropped and renormalised
    assert torch.equal(weights[0, 0].argmax(-1), torch.arange(10))
    assert torch.equal(weights[0, 3, :9].argmax(-1), torch.arange(1, 10))
