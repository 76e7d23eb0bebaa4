"""The LAS head inside AdaptSpeechForJointCTCAttention: joint loss, overfitting four synthetic utterances to their
exact transcripts with every decoder, adapters/fusion with the joint head, and the save/load round trip."""

import pytest
import torch
from helpers.decoders import METHODS, TEXTS
from transformers import AutoModelForCTC, AutoModelForSpeechSeq2Seq

from adaptspeech import AdaptSpeechForCTC, AdaptSpeechForJointCTCAttention
from adaptspeech.decoding import transcribe_batch
from adaptspeech.testing import tiny_config
from adaptspeech.testing.tones import character_error_rate, decode_ids, make_tone_batch, tone_vocab_size

EOS = tone_vocab_size() - 1


def joint_config(**kwargs):
    return tiny_config(
        "fbank_conformer",
        head="ctc_las",
        ctc_weight=0.3,
        vocab_size=tone_vocab_size(),
        bos_token_id=EOS,
        eos_token_id=EOS,
        las={"decoder_hidden": 64, "embedding_dim": 32, "attention_dim": 32},
        backbone_overrides={"num_mel_bins": 80, "hidden_size": 64, "intermediate_size": 128},
        **kwargs,
    )


def batch_dict(batch):
    mask = torch.arange(batch.features.shape[1])[None] < batch.feature_lengths[:, None]
    return {"input_features": batch.features, "attention_mask": mask, "labels": batch.labels}


@pytest.fixture(scope="module")
def trained():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = AdaptSpeechForJointCTCAttention(joint_config(adapter_languages=["xx"]))
    batch = batch_dict(make_tone_batch(TEXTS, seed=0))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(300):
        out = model(**batch)
        optimizer.zero_grad()
        out.loss.backward()
        optimizer.step()
    torch.set_num_threads(threads)
    model.eval()
    return model, batch, out


def test_joint_loss_is_the_weighted_sum(trained):
    model, batch, _ = trained
    out = model(**batch)
    assert torch.allclose(out.loss, 0.3 * out.loss_ctc + 0.7 * out.loss_att)
    assert out.attention_logits.shape == (4, batch["labels"].shape[1] + 1, tone_vocab_size())


@pytest.mark.parametrize("method", sorted(METHODS))
def test_overfits_to_exact_transcripts_with_every_decoder(trained, method):
    model, batch, _ = trained
    ids = transcribe_batch(model, batch, method, **METHODS[method])
    hypotheses = [decode_ids(row) for row in ids]
    assert character_error_rate(TEXTS, hypotheses) == 0.0, hypotheses


def test_beam_one_equals_greedy(trained):
    model, batch, _ = trained
    assert transcribe_batch(model, batch, "attention_beam", beam_size=1) == transcribe_batch(
        model, batch, "attention_greedy"
    )
    assert transcribe_batch(model, batch, "ctc_beam", beam_size=1) == transcribe_batch(model, batch, "ctc_greedy")


def test_round_trip_identical_logits_and_decodes(trained, tmp_path):
    model, batch, _ = trained
    expected = model(**batch)
    model.save_pretrained(tmp_path)
    for auto in (AutoModelForSpeechSeq2Seq, AutoModelForCTC):
        loaded = auto.from_pretrained(tmp_path)
        assert isinstance(loaded, AdaptSpeechForCTC) and loaded.las_head is not None
        loaded.eval()
        got = loaded(**batch)
        assert torch.equal(got.logits, expected.logits)
        assert torch.equal(got.attention_logits, expected.attention_logits)
        for method, options in METHODS.items():
            assert transcribe_batch(loaded, batch, method, **options) == transcribe_batch(
                model, batch, method, **options
            )


def test_adapters_and_fusion_work_the_same_with_the_joint_head():
    torch.manual_seed(0)
    model = AdaptSpeechForJointCTCAttention(joint_config(adapter_languages=["ro", "cs"]))
    model.add_fusion(["ro", "cs"], target_language="ro")
    model.set_trainable(adapters=["ro"], fusion=True)
    batch = batch_dict(make_tone_batch(TEXTS[:2], seed=1))
    out = model(**batch, output_fusion_weights=True)
    out.loss.backward()
    assert out.loss_fusion_reg is not None and len(out.fusion_weights) == 2
    grads = {n for n, p in model.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}
    assert grads and all(".adapters.ro." in n or ".fusion." in n for n in grads)


def test_head_choice_is_checked():
    with pytest.raises(ValueError, match="AdaptSpeechForJointCTCAttention"):
        AdaptSpeechForCTC(tiny_config(head="las", vocab_size=10, bos_token_id=9, eos_token_id=9))
    with pytest.raises(ValueError, match="'ctc_las' or 'las'"):
        AdaptSpeechForJointCTCAttention(tiny_config(head="ctc"))
    attention_only = AdaptSpeechForJointCTCAttention(
        tiny_config("fbank_conformer", head="las", vocab_size=10, bos_token_id=9, eos_token_id=9)
    )
    assert attention_only.ctc_head is None
