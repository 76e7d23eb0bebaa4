"""Attention and joint CTC/attention beam search: greedy equivalence, score bookkeeping, guards, limits."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch.nn import functional as F

from adaptspeech.decoding import (
    DECODING_METHODS,
    attention_beam_search,
    attention_greedy_decode,
    ctc_prefix_beam_search,
    decode,
    end_detected,
    joint_beam_search,
    max_output_lengths,
)
from adaptspeech.heads.las import LASDecoder
from adaptspeech.heads.las_config import LASConfig
from adaptspeech.testing.tones import (
    TinyJointCTCLAS,
    make_tone_batch,
    random_texts,
    tiny_las_config,
    train_tiny_joint,
)

V, D, EOS = 6, 8, 5  # vocabulary: 0 = blank/pad, 1..4 labels, 5 = sos/eos


def make_decoder(seed: int, eos_bias: float = -1.0, **overrides) -> LASDecoder:
    torch.manual_seed(seed)
    settings = dict(vocab_size=V, encoder_hidden_size=D, listener_layers=1, listener_hidden=6, decoder_hidden=16,
                    embedding_dim=6, attention_dim=8, max_target_length=12)
    settings.update(overrides)
    decoder = LASDecoder(LASConfig(**settings)).eval()
    with torch.no_grad():
        decoder.character_distribution.output.bias[EOS] += eos_bias  # varied stopping points
        decoder.character_distribution.output.weight.mul_(3.0)  # peakier, so beams disagree with greedy
    return decoder


@pytest.fixture(scope="module")
def held_out():
    """A joint model trained briefly on 8 tone utterances, and its encoder output on 6 unseen ones.

    Unseen inputs make the decoder uncertain, so greedy and beam search disagree and lengths vary.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = TinyJointCTCLAS(tiny_las_config())
    train_tiny_joint(model, make_tone_batch(random_texts(8, 3, 7, seed=1), seed=2), steps=40)
    test = make_tone_batch(random_texts(6, 2, 8, seed=3), seed=4)
    with torch.no_grad():
        encoded = model.encode(test.features, test.feature_lengths)
    yield model.las, encoded
    torch.set_num_threads(threads)


def encoder_batch(seed: int, lengths: list[int]):
    generator = torch.Generator().manual_seed(seed)
    frames = max(lengths)
    hidden = torch.randn(len(lengths), frames, D, generator=generator)
    mask = torch.arange(frames)[None, :] < torch.tensor(lengths)[:, None]
    return hidden, mask


def ctc_log_probs(seed: int, batch: int, frames: int, sharpness: float = 2.0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    logits = sharpness * torch.randn(batch, frames, V, generator=generator, dtype=torch.float64)
    logits[..., EOS] = -1e4  # the CTC head never emits <sos/eos>
    return torch.log_softmax(logits, dim=-1)


def teacher_forced_log_prob(decoder: LASDecoder, hidden, mask, tokens: list[int]) -> float:
    """log P(tokens + </s> | x) from the teacher-forced forward pass."""
    with torch.no_grad():
        labels = torch.tensor([tokens if tokens else [-100]])
        out = decoder(hidden, mask, labels)
    log_probs = torch.log_softmax(out.logits[0], dim=-1)
    return sum(float(log_probs[i, t]) for i, t in enumerate([*tokens, EOS]))


def ctc_sequence_log_prob(log_probs: torch.Tensor, tokens: list[int]) -> float:
    """log p_ctc(tokens | x) by torch's CTC forward algorithm."""
    if not tokens:
        return float(log_probs[:, 0].sum())
    loss = F.ctc_loss(log_probs[:, None], torch.tensor([tokens]), torch.tensor([log_probs.shape[0]]),
                      torch.tensor([len(tokens)]), blank=0, reduction="sum")
    return -float(loss)


@pytest.mark.parametrize("seed", range(4))
def test_beam_one_equals_greedy(seed):
    decoder = make_decoder(seed)
    hidden, mask = encoder_batch(seed, [9, 4, 7, 2])
    greedy = attention_greedy_decode(decoder, hidden, mask)
    beam = attention_beam_search(decoder, hidden, mask, beam_size=1)
    assert [h[0].tokens for h in beam] == greedy
    limited = attention_beam_search(decoder, hidden, mask, beam_size=1, max_length=2)
    assert [h[0].tokens for h in limited] == attention_greedy_decode(decoder, hidden, mask, max_length=2)


def test_beam_one_equals_greedy_on_a_trained_decoder(held_out):
    decoder, encoded = held_out
    greedy = attention_greedy_decode(decoder, encoded.hidden_states, encoded.padding_mask)
    beam = attention_beam_search(decoder, encoded.hidden_states, encoded.padding_mask, beam_size=1)
    assert [h[0].tokens for h in beam] == greedy
    assert len({len(t) for t in greedy}) >= 2  # not a vacuous comparison
    wide = attention_beam_search(decoder, encoded.hidden_states, encoded.padding_mask, beam_size=6)
    assert [h[0].tokens for h in wide] != greedy  # wider beams do change results here


def test_wider_beams_find_more_probable_sequences_than_greedy(held_out):
    decoder, encoded = held_out
    greedy = attention_greedy_decode(decoder, encoded.hidden_states, encoded.padding_mask)
    beam = attention_beam_search(decoder, encoded.hidden_states, encoded.padding_mask, beam_size=6,
                                 length_penalty=0.0)
    gains = []
    for b in range(len(greedy)):
        frames = int(encoded.padding_mask[b].sum())
        args = (decoder, encoded.hidden_states[b : b + 1, :frames], encoded.padding_mask[b : b + 1, :frames])
        gains.append(beam[b][0].log_prob - teacher_forced_log_prob(*args, greedy[b]))
    assert min(gains) >= -1e-4 and max(gains) > 1e-3


def test_max_length_guard_stops_a_decoder_that_never_ends():
    decoder = make_decoder(0, eos_bias=-1e4)
    hidden, mask = encoder_batch(0, [7, 3])
    for beam_size in (1, 3):
        hyps = attention_beam_search(decoder, hidden, mask, beam_size=beam_size, max_length_ratio=0.5)
        assert [len(h[0].tokens) for h in hyps] == [4, 2]  # ceil(0.5 * frames)
        hyps = attention_beam_search(decoder, hidden, mask, beam_size=beam_size, max_length=5)
        assert [len(h[0].tokens) for h in hyps] == [5, 5]
    assert [len(t) for t in attention_greedy_decode(decoder, hidden, mask)] == [7, 3]
    capped = attention_greedy_decode(decoder, hidden, mask, max_length=50)
    assert [len(t) for t in capped] == [12, 12]  # LASConfig.max_target_length


def test_max_output_lengths():
    frames = torch.tensor([10, 3, 1])
    assert max_output_lengths(frames).tolist() == [10, 3, 1]
    assert max_output_lengths(frames, max_length_ratio=0.25).tolist() == [3, 1, 1]
    assert max_output_lengths(frames, max_length=4, cap=2).tolist() == [2, 2, 2]
    with pytest.raises(ValueError, match="max_length_ratio=0"):
        max_output_lengths(frames, max_length_ratio=0)


def test_end_detection_rule():
    best = {0: -1.0, 1: -12.0, 2: -15.0, 3: -20.0}
    assert end_detected(best, -1.0, step=3)  # steps 1, 2, 3 all more than 10 below the best
    assert not end_detected(best, -1.0, step=2)  # step 0 is the best itself
    assert not end_detected({0: -1.0, 2: -15.0, 3: -20.0}, -1.0, step=3)  # nothing finished at step 1


def test_end_detection_never_changes_a_decoder_that_stops_early():
    decoder = make_decoder(2)
    hidden, mask = encoder_batch(4, [9, 6])
    plain = attention_beam_search(decoder, hidden, mask, beam_size=4)
    detected = attention_beam_search(decoder, hidden, mask, beam_size=4, end_detection=True)
    assert [h[0].tokens for h in detected] == [h[0].tokens for h in plain]


@pytest.mark.parametrize("seed", range(3))
def test_joint_with_ctc_weight_zero_is_the_attention_beam_search(seed):
    decoder = make_decoder(seed)
    hidden, mask = encoder_batch(seed, [9, 5, 7])
    ctc = ctc_log_probs(seed, 3, 9)
    joint = joint_beam_search(decoder, hidden, mask, ctc, ctc_weight=0.0, beam_size=4, nbest=2)
    attention = attention_beam_search(decoder, hidden, mask, beam_size=4, nbest=2)
    assert [[h.tokens for h in hyps] for hyps in joint] == [[h.tokens for h in hyps] for hyps in attention]
    assert [[h.score for h in hyps] for hyps in joint] == [[h.score for h in hyps] for hyps in attention]


def _brute_force_best(log_probs: torch.Tensor) -> tuple[list[int], float]:
    """argmax_y p_ctc(y | x) by enumerating every alignment."""
    frames = log_probs.shape[0]
    totals: dict[tuple[int, ...], float] = {}
    for path in itertools.product(range(V), repeat=frames):
        labels = tuple(k for i, k in enumerate(path) if k != 0 and (i == 0 or path[i - 1] != k))
        logp = sum(float(log_probs[t, k]) for t, k in enumerate(path))
        totals[labels] = float(torch.logaddexp(torch.tensor(totals.get(labels, -math.inf)), torch.tensor(logp)))
    labels, logp = max(totals.items(), key=lambda item: item[1])
    return list(labels), logp


@pytest.mark.parametrize("seed", range(3))
def test_joint_with_ctc_weight_one_is_the_ctc_prefix_beam_search(seed):
    # beams wide enough to keep every prefix of up to 3 labels over 4 labels: both searches are exact
    ctc = ctc_log_probs(seed, 2, 3)
    lengths = torch.tensor([3, 2])
    joint = joint_beam_search(None, None, None, ctc, lengths, ctc_weight=1.0, beam_size=90, length_penalty=0.0,
                              eos_id=EOS)
    prefix = ctc_prefix_beam_search(ctc, lengths, beam_size=90, token_prune=V)
    decoder = make_decoder(seed)
    hidden, mask = encoder_batch(seed, [3, 2])
    with_decoder = joint_beam_search(decoder, hidden, mask, ctc, ctc_weight=1.0, beam_size=90, length_penalty=0.0)
    for b in range(2):
        tokens, logp = _brute_force_best(ctc[b, : int(lengths[b])])
        assert joint[b][0].tokens == prefix[b][0].tokens == tokens == with_decoder[b][0].tokens
        assert joint[b][0].log_prob == pytest.approx(prefix[b][0].log_prob, abs=1e-6)
        assert joint[b][0].log_prob == pytest.approx(logp, abs=1e-6)


@pytest.mark.parametrize("seed", range(3))
def test_joint_with_ctc_weight_one_agrees_with_prefix_beam_at_beam_8(seed):
    ctc = ctc_log_probs(seed, 3, 12, sharpness=4.0)
    joint = joint_beam_search(None, None, None, ctc, ctc_weight=1.0, beam_size=8, length_penalty=0.0, eos_id=EOS)
    prefix = ctc_prefix_beam_search(ctc, beam_size=8)
    assert [h[0].tokens for h in joint] == [h[0].tokens for h in prefix]


def test_joint_scores_combine_ctc_and_attention_log_probabilities():
    weight = 0.4
    decoder = make_decoder(5)
    hidden, mask = encoder_batch(5, [8, 6])
    ctc = ctc_log_probs(5, 2, 8, sharpness=3.0)
    results = joint_beam_search(decoder, hidden, mask, ctc, ctc_weight=weight, beam_size=4, nbest=2,
                                length_penalty=0.0)
    for b, hyps in enumerate(results):
        frames = int(mask[b].sum())
        for hyp in hyps:
            ctc_logp = ctc_sequence_log_prob(ctc[b, :frames], hyp.tokens)
            att_logp = teacher_forced_log_prob(decoder, hidden[b : b + 1, :frames], mask[b : b + 1, :frames],
                                               hyp.tokens)
            assert hyp.scores["ctc"] == pytest.approx(ctc_logp, abs=1e-4)
            assert hyp.scores["attention"] == pytest.approx(att_logp, abs=1e-4)
            assert hyp.log_prob == pytest.approx(weight * ctc_logp + (1 - weight) * att_logp, abs=1e-4)


def test_joint_never_emits_a_sequence_ctc_cannot_align():
    decoder = make_decoder(0, eos_bias=-5.0)  # the decoder alone would run to the length limit
    hidden, mask = encoder_batch(0, [6, 4])
    ctc = ctc_log_probs(0, 2, 6)
    for hyps in joint_beam_search(decoder, hidden, mask, ctc, ctc_weight=0.3, beam_size=4):
        assert math.isfinite(hyps[0].scores["ctc"])
        assert len(hyps[0].tokens) <= 6


def test_joint_checks_its_inputs():
    decoder = make_decoder(0)
    hidden, mask = encoder_batch(0, [6])
    with pytest.raises(ValueError, match=r"ctc_weight=1\.5; allowed values"):
        joint_beam_search(decoder, hidden, mask, ctc_log_probs(0, 1, 6), ctc_weight=1.5)
    with pytest.raises(ValueError, match="needs the decoder"):
        joint_beam_search(None, None, None, ctc_log_probs(0, 1, 6), ctc_weight=0.5)
    with pytest.raises(ValueError, match=r"LASConfig\.vocab_size is 6"):
        joint_beam_search(decoder, hidden, mask, torch.zeros(1, 6, 9).log_softmax(-1))
    with pytest.raises(ValueError, match="needs eos_id"):
        joint_beam_search(None, None, None, ctc_log_probs(0, 1, 6), ctc_weight=1.0)


def test_decode_dispatches_by_name_and_names_what_is_missing():
    assert DECODING_METHODS.names() == ["attention_beam", "attention_greedy", "ctc_beam", "ctc_greedy", "joint"]
    decoder = make_decoder(1)
    hidden, mask = encoder_batch(1, [7, 4])
    ctc = ctc_log_probs(1, 2, 7)
    lengths = mask.sum(1)
    assert decode("ctc_beam", ctc_log_probs=ctc, ctc_lengths=lengths, beam_size=3) == [
        h[0].tokens for h in ctc_prefix_beam_search(ctc, lengths, beam_size=3)]
    assert decode("attention_beam", decoder=decoder, encoder_hidden_states=hidden, encoder_padding_mask=mask,
                  beam_size=1) == attention_greedy_decode(decoder, hidden, mask)
    joint = decode("joint", ctc_log_probs=ctc, decoder=decoder, encoder_hidden_states=hidden,
                   encoder_padding_mask=mask, ctc_weight=0.5, beam_size=3)
    assert joint == [h[0].tokens for h in joint_beam_search(decoder, hidden, mask, ctc, ctc_weight=0.5,
                                                             beam_size=3)]
    with pytest.raises(ValueError, match="unknown decoding method 'beam'; allowed values: attention_beam, "):
        decode("beam", ctc_log_probs=ctc)
    with pytest.raises(ValueError, match=r"decode\(method='attention_greedy'\) needs decoder"):
        decode("attention_greedy", encoder_hidden_states=hidden)
