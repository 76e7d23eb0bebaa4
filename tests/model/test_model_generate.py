"""``generate()`` of the joint / LAS model and transformers' seq2seq ASR pipeline on it, against the project's
attention and joint beam searches run directly on the encoder output."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch
from helpers.model_folders import audio, model_folder
from transformers import AutoModelForSpeechSeq2Seq, AutoProcessor, GenerationConfig, pipeline

from adaptspeech import AdaptSpeechForJointCTCAttention
from adaptspeech.data.features import extract_features
from adaptspeech.decoding import attention_beam_search, joint_beam_search, model_decoding_inputs

TASK = "automatic-speech-recognition"
# see tests/test_pipeline_ctc.py: the conformer convolution leaks padding
LOCAL_CONV = {"conv_depthwise_kernel_size": 1}


@pytest.fixture(scope="module")
def las_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return model_folder(tmp_path_factory.mktemp("las"), head="las", backbone_overrides=LOCAL_CONV)


@pytest.fixture(scope="module")
def joint_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return model_folder(tmp_path_factory.mktemp("joint"), head="ctc_las", backbone_overrides=LOCAL_CONV, seed=1)


def spelled(tokens: list[int], tokenizer: object) -> str:
    """Text of a label sequence, character by character (no CTC merging), specials dropped, ``|`` as a space."""
    specials = set(tokenizer.all_special_ids)
    return "".join(" " if t == "|" else t for t in tokenizer.convert_ids_to_tokens(
        [i for i in tokens if i not in specials]))


def reference(folder: Path, wave: object, ctc_weight: float, beam: int) -> list[int]:
    """Best hypothesis of the search run directly on the encoder output of ``prepare``'s features."""
    processor = AutoProcessor.from_pretrained(folder)
    model = AdaptSpeechForJointCTCAttention.from_pretrained(folder).eval()
    _, features = extract_features(wave, processor.feature_extractor)
    with torch.no_grad():
        enc = model_decoding_inputs(model, torch.from_numpy(features)[None])
        if ctc_weight == 0:
            hyps = attention_beam_search(enc.decoder, enc.encoder_hidden_states, enc.encoder_padding_mask,
                                         beam_size=beam, max_length=256)
        else:
            hyps = joint_beam_search(enc.decoder, enc.encoder_hidden_states, enc.encoder_padding_mask,
                                     enc.ctc_log_probs, enc.ctc_lengths, ctc_weight=ctc_weight, beam_size=beam,
                                     max_length=256)
    return hyps[0][0].tokens


def test_las_folder_runs_generate_in_the_pipeline(las_folder: Path) -> None:
    asr = pipeline(TASK, model=str(las_folder))
    assert asr.type == "seq2seq" and isinstance(asr.model, AdaptSpeechForJointCTCAttention)
    waves = [audio(1.2, seed=1), audio(0.8, seed=2)]
    tokenizer = AutoProcessor.from_pretrained(las_folder).tokenizer
    expected = [spelled(reference(las_folder, w, 0.0, beam=5), tokenizer) for w in waves]  # the pipeline's 5 beams
    assert [asr(w)["text"] for w in waves] == expected
    assert [o["text"] for o in asr(waves, batch_size=2)] == expected
    assert any(a == b for text in expected for a, b in itertools.pairwise(text))  # doubled letters survive decoding


def test_joint_model_in_the_pipeline_uses_the_joint_search(joint_folder: Path) -> None:
    processor = AutoProcessor.from_pretrained(joint_folder)
    model = AutoModelForSpeechSeq2Seq.from_pretrained(joint_folder)
    asr = pipeline(TASK, model=model, tokenizer=processor.tokenizer, feature_extractor=processor.feature_extractor)
    wave = audio(1.2, seed=3)
    for weight in (0.3, 0.7):
        expected = spelled(reference(joint_folder, wave, weight, beam=3), processor.tokenizer)
        assert asr(wave, num_beams=3, ctc_weight=weight)["text"] == expected
    model.generation_config.ctc_weight = 0.7  # the model's default, as generation_config.json holds it
    assert asr(wave, num_beams=3)["text"] == spelled(reference(joint_folder, wave, 0.7, beam=3), processor.tokenizer)


def test_ctc_las_folder_in_the_pipeline_runs_the_joint_search(joint_folder: Path) -> None:
    """A joint folder passed by name goes to the seq2seq path (generate(), joint CTC/attention search), not to CTC
    greedy with the attention decoder silently dropped."""
    asr = pipeline(TASK, model=str(joint_folder))
    assert asr.type == "seq2seq" and isinstance(asr.model, AdaptSpeechForJointCTCAttention)
    tokenizer = AutoProcessor.from_pretrained(joint_folder).tokenizer
    wave = audio(1.2, seed=3)
    expected = spelled(reference(joint_folder, wave, 0.3, beam=3), tokenizer)  # generate()'s default CTC weight
    assert asr(wave, num_beams=3)["text"] == expected


def test_ctc_las_folder_with_a_saved_lm_runs_ctc_with_the_lm(tmp_path: Path) -> None:
    """`lm tune --save` into a joint folder asks for CTC + n-gram LM decoding: the pipeline keeps that path."""
    pytest.importorskip("kenlm")
    pytest.importorskip("pyctcdecode")
    from adaptspeech.lm.build import build_arpa
    from adaptspeech.lm.decoder import build_decoder
    from adaptspeech.lm.processor import save_processor_with_lm

    folder = model_folder(tmp_path / "model", head="ctc_las", backbone_overrides=LOCAL_CONV)
    processor = AutoProcessor.from_pretrained(folder)
    text = tmp_path / "corpus.txt"
    text.write_text("\n".join(["abc def", "ghi jab", "abc def", "lot of letters", "ghi jab"]) + "\n")
    build_arpa(text, tmp_path / "lm", order=2)
    save_processor_with_lm(processor, build_decoder(processor.tokenizer, tmp_path / "lm"), folder)
    assert pipeline(TASK, model=str(folder)).type == "ctc_with_lm"


def test_generate_layout_nbest_and_scores(joint_folder: Path) -> None:
    processor = AutoProcessor.from_pretrained(joint_folder)
    model = AdaptSpeechForJointCTCAttention.from_pretrained(joint_folder)
    inputs = processor.feature_extractor([audio(1.0, seed=4), audio(0.6, seed=5)], sampling_rate=16000,
                                         return_tensors="pt")
    out = model.generate(**inputs, num_beams=4, num_return_sequences=2, return_dict_in_generate=True,
                         output_scores=True, ctc_weight=0.5)
    config = model.config
    assert out.sequences.shape[0] == 4 and out.sequences_scores.shape == (4,)
    assert (out.sequences[:, 0] == config.bos_token_id).all()
    for row in out.sequences.tolist():
        end = row.index(config.eos_token_id)
        assert all(t == config.pad_token_id for t in row[end + 1 :])
    assert out.sequences_scores[0] >= out.sequences_scores[1] and out.sequences_scores[2] >= out.sequences_scores[3]
    with torch.no_grad():
        enc = model_decoding_inputs(model.eval(), inputs["input_features"], inputs["attention_mask"])
        hyps = joint_beam_search(enc.decoder, enc.encoder_hidden_states, enc.encoder_padding_mask,
                                 enc.ctc_log_probs, enc.ctc_lengths, ctc_weight=0.5, beam_size=4, nbest=2)
    firsts = [out.sequences[i].tolist() for i in (0, 2)]
    assert [row[1 : row.index(config.eos_token_id)] for row in firsts] == [h[0].tokens for h in hyps]


def test_generate_refuses_what_it_cannot_do(las_folder: Path, joint_folder: Path) -> None:
    las = AdaptSpeechForJointCTCAttention.from_pretrained(las_folder)
    x = torch.randn(1, 50, 16)
    with pytest.raises(ValueError, match="do_sample"):
        las.generate(input_features=x, do_sample=True)
    with pytest.raises(ValueError, match="no CTC head"):
        las.generate(input_features=x, ctc_weight=0.3)
    with pytest.raises(ValueError, match="unsupported setting"):
        las.generate(input_features=x, top_k=5)
    joint = AdaptSpeechForJointCTCAttention.from_pretrained(joint_folder)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        joint.generate(input_features=x, ctc_weight=1.5)
    assert isinstance(joint.generation_config, GenerationConfig)
