"""``StreamingRecognizer`` with a word n-gram LM fused into its prefix beam search and with attention rescoring of the
final n-best: the LM text equals the fused search run once on the offline posteriors of the same features, the
rescored scores equal the attention decoder's teacher-forced forward recomputed for each hypothesis, and what cannot
be done is refused in one line."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.streaming import forced_speaker
from transformers import Wav2Vec2Processor

from adaptspeech import AdaptSpeechForCTC, AdaptSpeechForJointCTCAttention
from adaptspeech.attention.chunking import chunk_attention
from adaptspeech.decoding.attention_rescoring import attention_log_probs, attention_rescore
from adaptspeech.decoding.ctc_streaming import StreamingCTCPrefixBeam
from adaptspeech.decoding.hypothesis import Hypothesis
from adaptspeech.inference.streaming.recognizer import StreamingRecognizer
from adaptspeech.lm.build import build_arpa
from adaptspeech.testing.tiny_models import save_tiny_model

TEXTS = ["abc def", "ghi jkl", "abc jkl", "def ghi abc"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("stream_rescore")
    (root / "corpus.txt").write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    build_arpa(root / "corpus.txt", root / "lm", order=2, progress=False)
    return (save_tiny_model(root / "ctc", streaming=True), save_tiny_model(root / "ctc_las", head="ctc_las",
                                                                           streaming=True), root / "lm")


def audio(seconds: float, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(int(16000 * seconds)).astype(np.float32) * 0.1


def offline_log_probs(model, recognizer: StreamingRecognizer, wave: np.ndarray) -> torch.Tensor:
    """``[1, T, V]``: the whole-utterance forward under the recognizer's chunk mask, on the features it normalised
    (pushed through its own feature stream again, in one piece)."""
    from adaptspeech.inference.streaming.features import StreamFeatures

    features = StreamFeatures(recognizer.features, recognizer.window)
    raw = np.concatenate([features.push(wave), features.flush()])
    steps = [features.normalize(raw[start : start + recognizer.step_units])
             for start in range(0, len(raw), recognizer.step_units)]
    with torch.no_grad(), chunk_attention(recognizer.chunk_size):
        return model(input_features=torch.from_numpy(np.concatenate(steps))[None]).logits.log_softmax(-1)


def test_lm_text_equals_the_fused_search_on_the_offline_posteriors(folders) -> None:
    pytest.importorskip("kenlm")
    from adaptspeech.lm.shallow_fusion import NGramFusion

    ctc_dir, _, lm = folders
    model = AdaptSpeechForCTC.from_pretrained(ctc_dir).eval()
    processor = Wav2Vec2Processor.from_pretrained(ctc_dir)
    wave = audio(2.1)
    recognizer = StreamingRecognizer(model, processor, chunk_ms=320, method="ctc_beam", lm=lm, alpha=1.0, beta=2.0,
                                     norm_window_s=1.0)
    for start in range(0, len(wave), 999):
        recognizer.accept_waveform(wave[start : start + 999])
    text = recognizer.finalize()
    log_probs = offline_log_probs(model, recognizer, wave)
    assert recognizer.search.frames == log_probs.shape[1]
    vocab = model.config.vocab_size
    search = StreamingCTCPrefixBeam(vocab, 32, 0, token_prune=vocab, token_min_logp=-5.0, beam_prune_logp=-10.0,
                                    fusion=NGramFusion.from_lm_dir(processor.tokenizer, lm, alpha=1.0, beta=2.0))
    search.accept(log_probs)
    best = search.finish(1)[0]
    assert recognizer.tokens() == best.tokens and recognizer.final.scores["lm"] == pytest.approx(best.scores["lm"])
    assert text == recognizer.partial() and recognizer.beam_size == 32  # the offline LM decoder's width


def teacher_forced(decoder, hidden: torch.Tensor, tokens: list[int]) -> float:
    """The reference: ``log P_att(tokens + </s>)`` from the decoder's training forward on this one hypothesis."""
    labels = torch.tensor([tokens or [-100]], dtype=torch.long)
    with torch.no_grad():
        out = decoder(hidden, None, labels)
    log_probs = out.logits.log_softmax(-1)[0]
    targets = out.targets[0]
    real = targets >= 0
    return float(log_probs[real].gather(1, targets[real][:, None]).sum())


def test_attention_scores_equal_the_decoder_forward_per_hypothesis(folders) -> None:
    """The batched step-by-step scoring against the training forward, one hypothesis at a time (another batch
    shape and path: 1e-5)."""
    _, las_dir, _ = folders
    decoder = AdaptSpeechForJointCTCAttention.from_pretrained(las_dir).eval().las_head
    hidden = torch.randn(1, 23, decoder.config.encoder_hidden_size, generator=torch.Generator().manual_seed(0))
    hypotheses = [[5, 6, 7], [], [9, 4, 10, 11, 12, 5], [16]]
    scores = attention_log_probs(decoder, hidden, hypotheses)
    expected = [teacher_forced(decoder, hidden, tokens) for tokens in hypotheses]
    assert scores.tolist() == pytest.approx(expected, abs=1e-5)


def test_rescored_final_result_equals_the_reference(folders) -> None:
    """The final n-best of the stream rescored: ``0.3 ctc + 0.7 attention`` recomputed for each hypothesis with the
    decoder's forward on the streamed encoder output; the best of those is the recognizer's text."""
    _, las_dir, _ = folders
    model = AdaptSpeechForJointCTCAttention.from_pretrained(las_dir).eval()
    with torch.no_grad():  # a trained CTC head does not emit <s> / </s> (which the decoder's forward refuses)
        model.ctc_head.lm_head.bias[[model.las_head.config.sos_id, model.las_head.config.eos_id]] = -1e4
    processor = Wav2Vec2Processor.from_pretrained(las_dir)
    recognizer = StreamingRecognizer(model, processor, chunk_ms=320, method="ctc_beam", beam_size=4, rescore=True,
                                     ctc_weight=0.3)
    recognizer.accept_waveform(audio(1.9, seed=3))
    recognizer.finalize()
    hidden = torch.cat(recognizer.hidden, dim=1)
    assert hidden.shape[1] == recognizer.frames
    nbest = recognizer.search.finish(4)
    assert len(nbest) == 4
    rescored = attention_rescore(model.las_head, hidden, nbest, 0.3)
    reference = sorted(((0.3 * h.scores["ctc"] + 0.7 * teacher_forced(model.las_head, hidden, h.tokens), h.tokens)
                        for h in nbest), key=lambda pair: pair[0], reverse=True)
    assert [h.score for h in rescored] == pytest.approx([score for score, _ in reference], abs=1e-5)
    assert [h.tokens for h in rescored] == [tokens for _, tokens in reference]
    assert recognizer.final == rescored[0]
    assert attention_rescore(model.las_head, hidden, nbest, 1.0)[0].tokens == nbest[0].tokens  # CTC alone: unchanged


def test_what_cannot_be_done_is_refused(folders) -> None:
    ctc_dir, las_dir, lm = folders
    model = AdaptSpeechForCTC.from_pretrained(ctc_dir).eval()
    processor = Wav2Vec2Processor.from_pretrained(ctc_dir)
    with pytest.raises(ValueError, match="attention rescoring needs an attention \\(LAS\\) decoder; this model has "
                                         "head='ctc'"):
        StreamingRecognizer(model, processor, method="ctc_beam", rescore=True)
    with pytest.raises(ValueError, match=r"--method ctc_greedy: --lm needs the prefix beam search \(--method ctc_beam, "
                                         r"the default with it\)"):
        StreamingRecognizer(model, processor, method="ctc_greedy", lm=lm)
    with pytest.raises(ValueError, match=r"alpha / beta \(--alpha / --beta\) weigh an n-gram LM: give lm= \(--lm\) "
                                         "too"):
        StreamingRecognizer(model, processor, alpha=1.0)
    joint = AdaptSpeechForJointCTCAttention.from_pretrained(las_dir).eval()
    with pytest.raises(ValueError, match=r"--method ctc_greedy: attention rescoring \(--rescore\) rescores the prefix "
                                         r"beam's n-best \(--method ctc_beam, the default with it\)"):
        StreamingRecognizer(joint, processor, method="ctc_greedy", rescore=True)
    with pytest.raises(ValueError, match=r"ctc_weight \(--ctc-weight\) weighs the attention rescoring"):
        StreamingRecognizer(joint, processor, ctc_weight=0.3)
    with pytest.raises(ValueError, match=r"ctc_weight=1.5; allowed values: numbers in \[0, 1\]"):
        attention_rescore(joint.las_head, torch.zeros(1, 3, joint.las_head.config.encoder_hidden_size),
                          [Hypothesis([5], 0.0, 0.0, {"ctc": 0.0})], 1.5)


def test_an_endpoint_rescores_the_ended_utterance_alone(folders, monkeypatch) -> None:
    """With endpointing, each utterance's n-best is rescored on that utterance's encoder output only: the kept output
    starts afresh after an endpoint."""
    _, las_dir, _ = folders
    model = AdaptSpeechForJointCTCAttention.from_pretrained(las_dir).eval()
    head = model.ctc_head.lm_head
    with torch.no_grad():
        head.weight.zero_()
    recognizer = StreamingRecognizer(model, Wav2Vec2Processor.from_pretrained(las_dir), chunk_ms=200,
                                     method="ctc_beam", beam_size=3, rescore=True, endpoint_silence_s=0.6)
    rescored: list[int] = []
    real = attention_rescore

    def spy(decoder, hidden, nbest, ctc_weight):
        rescored.append(hidden.shape[1])
        return real(decoder, hidden, nbest, ctc_weight)

    monkeypatch.setattr("adaptspeech.decoding.attention_rescoring.attention_rescore", spy)

    say = forced_speaker(recognizer, head, audio)

    blank = model.config.pad_token_id
    say(blank + 5, 0.8)
    say(blank, 1.0)
    (segment,) = recognizer.pop_segments()
    assert segment["text"] and rescored and rescored[0] <= recognizer.frames
    say(blank + 6, 0.6)
    recognizer.finalize()
    assert len(rescored) == 2 and rescored[1] < recognizer.frames - rescored[0] + 1
    assert sum(h.shape[1] for h in recognizer.hidden) == rescored[1]
