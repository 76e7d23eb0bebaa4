"""``rel_pos``: WeNet's rel_shift example (Transformer-XL, Dai et al. 2019), transformers' relative attention, and
chunk-by-chunk streaming."""

from __future__ import annotations

import pytest
import torch
from transformers import Wav2Vec2ConformerConfig
from transformers.masking_utils import create_bidirectional_mask
from transformers.models.wav2vec2_conformer.modeling_wav2vec2_conformer import (
    Wav2Vec2ConformerRelPositionalEmbedding,
    Wav2Vec2ConformerSelfAttention,
)

from adaptspeech.attention import AttentionConfig, RelPositionSelfAttention
from adaptspeech.attention.positional import (
    RelativePositionTable,
    rel_shift,
    relative_scores,
    relative_scores_prepadded,
    relative_sinusoids,
)

HIDDEN, HEADS = 32, 4


def test_rel_shift_worked_example_of_the_wenet_note() -> None:
    """WeNet's relative-position note, C = 3 queries, L = 4 keys: a 3 x 7 matrix holding 1..21.

    The note's intermediate steps are reproduced exactly. Its last step says "take the first L columns" but prints
    three, ``[[3, 4, 5], [9, 10, 11], [15, 16, 17]]``; the code (``[:, :, :, :L]``, as in the note's own forward,
    ``matrix_bd[:, :, :, :matrix_ac.size(3)]``) yields four, which is what we test.
    """
    scores = torch.arange(1.0, 22.0).view(1, 1, 3, 7)
    shifted = rel_shift(scores)
    assert shifted.tolist() == [[[[3, 4, 5, 6, 7, 0, 8], [9, 10, 11, 12, 13, 14, 0], [15, 16, 17, 18, 19, 20, 21]]]]
    assert relative_scores(scores, 4).tolist() == [[[[3, 4, 5, 6], [9, 10, 11, 12], [15, 16, 17, 18]]]]
    # the same steps spelled out as in the note: prepend a zero column, flatten, drop the first C elements
    flat = torch.cat([torch.zeros(3, 1), scores[0, 0]], dim=1).flatten()
    assert flat[3:].tolist() == [3, 4, 5, 6, 7, 0, 8, 9, 10, 11, 12, 13, 14, 0, 15, 16, 17, 18, 19, 20, 21]


def test_prepadded_shift_equals_rel_shift() -> None:
    """rel_pos pads the position matrix instead of the scores; the result is the note's rel_shift."""
    scores = torch.randn(2, 3, 5, 2 * 7 - 1)
    padded = torch.nn.functional.pad(scores, (1, 0))
    assert torch.equal(relative_scores_prepadded(padded, 7), relative_scores(scores, 7))  # views: no arithmetic


def test_rel_shift_aligns_relative_positions() -> None:
    """With the table ordered L-1 .. -(L-1), entry (i, j) after the shift holds position (M + i) - j."""
    for queries, keys in [(4, 4), (3, 4), (2, 6), (1, 5)]:
        positions = torch.arange(keys - 1, -keys, -1).float()  # the position each column stands for
        shifted = relative_scores(positions.expand(queries, -1), keys)
        memory = keys - queries
        expected = torch.tensor([[float(memory + i - j) for j in range(keys)] for i in range(queries)])
        assert torch.equal(shifted, expected)


def test_sinusoids_equal_transformers() -> None:
    config = Wav2Vec2ConformerConfig(hidden_size=HIDDEN, num_attention_heads=HEADS, max_source_positions=50)
    for frames in (1, 7, 50, 80):  # 80 > max_source_positions: both extend their table
        x = torch.zeros(1, frames, HIDDEN)
        hf = Wav2Vec2ConformerRelPositionalEmbedding(config)(x)[0]
        # a table of another length than transformers' own (built at max_source_positions): an element may be computed
        # by the vectorised sin / cos in one and by the scalar one in the other, 1 ulp apart
        torch.testing.assert_close(relative_sinusoids(frames, HIDDEN), hf, rtol=0, atol=1e-6)
    table = RelativePositionTable(HIDDEN, max_len=4)
    cpu = torch.device("cpu")
    # sliced from a table of another length (as above, 1 ulp apart at most) ...
    torch.testing.assert_close(table(3, torch.float32, cpu), relative_sinusoids(3, HIDDEN), rtol=0, atol=1e-6)
    assert torch.equal(table(9, torch.float32, cpu), relative_sinusoids(9, HIDDEN))  # extends: the same computation
    torch.testing.assert_close(table(2, torch.float32, cpu), relative_sinusoids(2, HIDDEN), rtol=0, atol=1e-6)


def hf_and_ours(
    implementation: str, heads: int = HEADS
) -> tuple[Wav2Vec2ConformerSelfAttention, RelPositionSelfAttention]:
    torch.manual_seed(0)
    config = Wav2Vec2ConformerConfig(hidden_size=HIDDEN, num_attention_heads=heads, position_embeddings_type="relative")
    config._attn_implementation = implementation
    hf = Wav2Vec2ConformerSelfAttention(config).eval()
    torch.nn.init.normal_(hf.pos_bias_u)
    torch.nn.init.normal_(hf.pos_bias_v)
    ours = RelPositionSelfAttention(AttentionConfig(kind="rel_pos", hidden_size=HIDDEN, num_heads=heads)).eval()
    copied = ours.init_from_hf(hf)
    assert copied == [
        *[f"linear_{n}.{p}" for n in ("q", "k", "v", "out") for p in ("weight", "bias")],
        "linear_pos.weight",
        "pos_bias_u",
        "pos_bias_v",
    ]
    return hf, ours


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("padded", [False, True])
def test_equals_transformers_relative_attention(implementation: str, padded: bool) -> None:
    hf, ours = hf_and_ours(implementation)
    torch.manual_seed(1)
    x = torch.randn(3, 13, HIDDEN)
    padding = torch.arange(13)[None, :] < torch.tensor([[13], [9], [4]]) if padded else None
    hf_mask = create_bidirectional_mask(config=hf.config, inputs_embeds=x, attention_mask=padding)
    positions = Wav2Vec2ConformerRelPositionalEmbedding(hf.config)(x)
    expected, _ = hf(x, attention_mask=hf_mask, relative_position_embeddings=positions)
    out = ours(x, padding)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=0)  # padded frames too: both mask keys only


def test_state_dict_keys_equal_transformers() -> None:
    hf, ours = hf_and_ours("sdpa")
    assert set(ours.state_dict()) == set(hf.state_dict())
    ours.load_state_dict(hf.state_dict())  # a conformer rel-pos checkpoint loads unchanged


def test_zeroed_positions_when_copied_from_plain_attention() -> None:
    """From a module without relative positions the position terms start at zero: plain attention."""
    from adaptspeech.attention import MultiHeadSelfAttention

    config = AttentionConfig(kind="mhsa", hidden_size=HIDDEN, num_heads=HEADS)
    plain = MultiHeadSelfAttention(config).eval()
    ours = RelPositionSelfAttention(AttentionConfig(kind="rel_pos", hidden_size=HIDDEN, num_heads=HEADS)).eval()
    assert "linear_pos.weight" not in ours.init_from_hf(plain)
    x = torch.randn(2, 6, HIDDEN)
    torch.testing.assert_close(ours(x), plain(x), atol=1e-6, rtol=0)


@pytest.mark.parametrize(("chunk_size", "num_left_chunks"), [(4, -1), (4, 0), (4, 1), (3, 2), (5, 1)])
def test_streaming_chunks_equal_the_chunk_masked_forward(chunk_size: int, num_left_chunks: int) -> None:
    """Decoding chunk by chunk with a cache (the note's C x (2L-1) rel_shift) equals training with the mask."""
    torch.manual_seed(0)
    config = AttentionConfig(
        kind="rel_pos", hidden_size=HIDDEN, num_heads=HEADS, chunk_size=chunk_size, num_left_chunks=num_left_chunks
    )
    module = RelPositionSelfAttention(config).eval()
    torch.nn.init.normal_(module.pos_bias_u)
    torch.nn.init.normal_(module.pos_bias_v)
    x = torch.randn(2, 14, HIDDEN)  # 14 frames: the last chunk is shorter
    full = module(x)
    cache = None
    outputs = []
    for start in range(0, 14, chunk_size):
        out, cache = module.forward_chunk(x[:, start : start + chunk_size], cache)
        outputs.append(out)
        kept = cache[0].shape[2]
        assert kept <= (start + chunk_size if num_left_chunks < 0 else num_left_chunks * chunk_size)
    torch.testing.assert_close(torch.cat(outputs, dim=1), full, atol=1e-5, rtol=0)


def test_one_streaming_chunk_is_full_attention() -> None:
    torch.manual_seed(0)
    settings = {"kind": "rel_pos", "hidden_size": HIDDEN, "num_heads": HEADS}
    full = RelPositionSelfAttention(AttentionConfig(**settings)).eval()
    chunked = RelPositionSelfAttention(AttentionConfig(**settings, chunk_size=10)).eval()
    chunked.load_state_dict(full.state_dict())
    x = torch.randn(1, 10, HIDDEN)
    out, _ = chunked.forward_chunk(x)
    torch.testing.assert_close(out, full(x), atol=1e-5, rtol=0)


def test_forward_chunk_refuses_bad_settings() -> None:
    module = RelPositionSelfAttention(AttentionConfig(kind="rel_pos", hidden_size=HIDDEN, num_heads=HEADS))
    with pytest.raises(ValueError, match="chunk_size > 0"):
        module.forward_chunk(torch.randn(1, 4, HIDDEN))
    chunked = RelPositionSelfAttention(
        AttentionConfig(kind="rel_pos", hidden_size=HIDDEN, num_heads=HEADS, chunk_size=2)
    )
    with pytest.raises(ValueError, match=r"longer than attention\.chunk_size=2"):
        chunked.forward_chunk(torch.randn(1, 4, HIDDEN))


def test_odd_width_is_refused() -> None:
    with pytest.raises(ValueError, match=r"even attention\.hidden_size"):
        RelPositionSelfAttention(AttentionConfig(kind="rel_pos", hidden_size=15, num_heads=3))
