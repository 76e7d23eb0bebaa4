"""Query rows with no allowed key (padded queries under a chunk mask, a fully padded sequence) on every kind.

On CPU, PyTorch's ``scaled_dot_product_attention`` returns zeros for a row whose boolean mask allows no key; on
CUDA some backends (the memory-efficient kernel, older kernels, the math path with ``-inf`` masks) return NaN, and
a NaN in a padded row still poisons gradients (``NaN * 0 = NaN``) and batch statistics. So no kind may hand SDPA
such a row. The tests swap SDPA for the math reference ``softmax(scores.masked_fill(~mask, -inf)) V`` (NaN on
an empty row, the behaviour of those backends) that also records every mask it is given, and check that no mask
has an all-False row, that outputs and gradients are finite, and that every output equals the one of PyTorch's
own CPU kernel.
"""

from __future__ import annotations

import math

import pytest
import torch

from adaptspeech.attention import ATTENTION, AttentionConfig, EncoderAttention, settings_for_kind
from adaptspeech.attention.masks import fill_empty_rows, row_has_key
from adaptspeech.attention.shared_qk import exclude_self, self_mask

HIDDEN = 16

#: every registered kind; the sparse kinds also with one head (the merged pattern), LSH with a small ``C``.
VARIANTS: dict[str, dict] = {
    **{name: {"kind": name} for name in ATTENTION.names()},
    "sparse_strided_one_head": {"kind": "sparse_strided", "num_heads": 1, "sparse_block_size": 3},
    "sparse_fixed_small": {"kind": "sparse_fixed", "sparse_block_size": 4, "sparse_summary": 2},
    "lsh_simple_small": {"kind": "lsh_simple", "lsh_num_keys": 2},
}

#: (chunk_size, num_left_chunks, lengths): frames 8..11 of the length-5 sequence form a chunk with no real key;
#: a length-0 sequence has no real key at all.
CASES = {
    "chunks": (4, 0, (12, 5)),
    "chunks_and_left": (3, 1, (12, 4)),
    "empty_sequence": (0, -1, (12, 0)),
}


def build(variant: str, chunk_size: int, num_left_chunks: int) -> EncoderAttention:
    torch.manual_seed(0)
    settings = {"hidden_size": HIDDEN, "num_heads": 4, "synthesizer_max_len": 16, "context_width": 5}
    settings.update(VARIANTS[variant])
    settings = settings_for_kind(str(settings["kind"]), settings)
    config = AttentionConfig(**settings, chunk_size=chunk_size, num_left_chunks=num_left_chunks)
    return ATTENTION.get(config.kind)(config).eval()


class ReferenceSDPA:
    """Stand-in for ``torch.nn.functional.scaled_dot_product_attention`` with the ``-inf`` math semantics (an
    empty row gives NaN) that records how many rows of each boolean mask allow no key."""

    def __init__(self) -> None:
        self.calls = 0
        self.empty_rows = 0

    def __call__(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        dropout_p: float = 0.0,
        is_causal: bool = False,
        scale: float | None = None,
        enable_gqa: bool = False,
    ) -> torch.Tensor:
        assert dropout_p == 0.0 and not is_causal
        self.calls += 1
        scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
        scores = query @ key.transpose(-1, -2) * scale
        if attn_mask is not None:
            assert attn_mask.dtype == torch.bool
            self.empty_rows += int((~attn_mask.any(dim=-1)).sum())
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        return torch.softmax(scores, dim=-1) @ value


def run(module: EncoderAttention, lengths: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """Output and input gradient of a batch with ``lengths`` (loss over every frame, padded too)."""
    torch.manual_seed(1)
    frames = max(lengths)
    x = torch.randn(len(lengths), frames, HIDDEN, requires_grad=True)
    padding = torch.arange(frames)[None, :] < torch.tensor(lengths)[:, None]
    out = module(x, padding)
    (out * torch.randn_like(out)).sum().backward()
    return out.detach(), x.grad


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("variant", VARIANTS)
def test_no_row_without_a_key_reaches_sdpa(variant: str, case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    chunk_size, num_left_chunks, lengths = CASES[case]
    module = build(variant, chunk_size, num_left_chunks)
    expected, expected_grad = run(module, lengths)  # PyTorch's CPU kernel: empty rows give zeros
    module.zero_grad()
    reference = ReferenceSDPA()
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", reference)
    out, grad = run(module, lengths)
    assert reference.empty_rows == 0, f"{variant}: {reference.empty_rows} mask rows allow no key"
    assert torch.isfinite(out).all() and torch.isfinite(grad).all()
    for name, param in module.named_parameters():
        assert param.grad is None or torch.isfinite(param.grad).all(), f"{variant}: NaN gradient for {name}"
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(grad, expected_grad, atol=1e-5, rtol=1e-5)
    # the last frame of the shortest sequence sees no real frame: zero context, the output projection's bias
    bias = module.output_proj.bias
    assert bias is not None
    torch.testing.assert_close(out[lengths.index(min(lengths)), -1], bias.detach())


def test_fill_empty_rows_gives_each_empty_row_key_zero() -> None:
    allowed = torch.tensor([[[True, False, True], [False, False, False], [False, True, False]]])  # [1, 3, 3]
    safe, empty = fill_empty_rows(allowed)
    assert torch.equal(empty, torch.tensor([[[False], [True], [False]]]))
    assert torch.equal(safe, torch.tensor([[[True, False, True], [True, False, False], [False, True, False]]]))
    keys_only = torch.tensor([True, False, False, False])[None, None, None, :]  # [1, 1, 1, T]: a key mask
    safe, empty = fill_empty_rows(torch.cat([keys_only, torch.zeros_like(keys_only)]))
    assert safe.shape == (2, 1, 1, 4) and empty.shape == (2, 1, 1, 1)
    assert safe.any(dim=-1).all() and torch.equal(empty.view(-1), torch.tensor([False, True]))


def test_row_tests_in_uint8_match_the_bool_definitions_on_broadcast_masks() -> None:
    """``row_has_key`` and ``exclude_self`` compute in ``uint8`` views (speed); on expanded (stride-0) and
    sliced masks they must equal ``any`` and the Reformer rule written with ``torch.where``."""
    torch.manual_seed(0)
    keys = torch.rand(3, 1, 1, 7) < 0.3  # key padding: some rows allow nothing
    chunks = torch.rand(7, 7) < 0.4
    for allowed in (keys.expand(3, 2, 7, 7), keys & chunks, (torch.rand(3, 2, 7, 14) < 0.3)[..., ::2]):
        assert torch.equal(row_has_key(allowed), allowed.any(dim=-1, keepdim=True))
        is_self = self_mask(7)
        others = allowed & ~is_self
        expected = torch.where(others.any(dim=-1, keepdim=True), others, allowed)
        assert torch.equal(exclude_self(allowed, is_self), expected)
        safe, empty = fill_empty_rows(allowed)
        assert safe.any(dim=-1).all() and torch.equal(safe & ~empty, allowed & ~empty)
        assert torch.equal(empty, ~allowed.any(dim=-1, keepdim=True))
