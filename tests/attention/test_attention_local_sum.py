"""LDSA's local weighted sum (eq. 3 of Xu et al. 2021, the LDSA paper): values against loops, gradients against
finite differences."""

from __future__ import annotations

import pytest
import torch

from adaptspeech.attention.local_sum import local_weighted_sum


def loop_reference(weights: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    batch, frames, heads, width = weights.shape
    half = width // 2
    out = torch.zeros_like(values)
    for b in range(batch):
        for t in range(frames):
            for h in range(heads):
                for j in range(width):
                    n = t + j - half
                    if 0 <= n < frames:
                        out[b, t, h] += weights[b, t, h, j] * values[b, n, h]
    return out


@pytest.mark.parametrize("width", [1, 3, 5, 15])
def test_matches_the_loop(width: int) -> None:
    torch.manual_seed(0)
    weights = torch.randn(2, 9, 3, width)
    values = torch.randn(2, 9, 3, 4)
    torch.testing.assert_close(local_weighted_sum(weights, values), loop_reference(weights, values))


def test_gradients_match_finite_differences() -> None:
    torch.manual_seed(0)
    weights = torch.randn(2, 6, 2, 5, dtype=torch.float64, requires_grad=True)
    values = torch.randn(2, 6, 2, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(local_weighted_sum, (weights, values))


def test_mismatched_shapes_and_even_width_are_refused() -> None:
    with pytest.raises(ValueError, match="must agree on"):
        local_weighted_sum(torch.randn(1, 5, 2, 3), torch.randn(1, 6, 2, 4))
    with pytest.raises(ValueError, match="must be odd"):
        local_weighted_sum(torch.randn(1, 5, 2, 4), torch.randn(1, 5, 2, 4))
