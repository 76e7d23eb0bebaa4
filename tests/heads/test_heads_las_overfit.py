"""End to end: a tiny encoder + CTC head + LAS head overfit four synthetic utterances; every decoder
reads them back exactly, and a save/load round trip changes neither logits nor decodes."""

from __future__ import annotations

import json

import pytest
import torch
from helpers.decoders import METHODS, TEXTS
from safetensors.torch import load_file, save_file

from adaptspeech.decoding import ctc_prefix_beam_search, decode, joint_beam_search
from adaptspeech.heads.las_config import LASConfig
from adaptspeech.testing.tones import (
    TinyJointCTCLAS,
    character_error_rate,
    decode_ids,
    make_tone_batch,
    tiny_las_config,
    train_tiny_joint,
)


@pytest.fixture(scope="module")
def trained():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small ops: one thread is faster and kinder to parallel test runs
    torch.manual_seed(0)
    batch = make_tone_batch(TEXTS, seed=0)
    model = TinyJointCTCLAS(tiny_las_config(label_smoothing=0.0, scheduled_sampling=0.0))
    losses = train_tiny_joint(model, batch, steps=150)
    yield model, batch, losses
    torch.set_num_threads(threads)


def run_decoders(model: TinyJointCTCLAS, batch) -> dict[str, list[list[int]]]:
    with torch.no_grad():
        encoded = model.encode(batch.features, batch.feature_lengths)
        inputs = dict(ctc_log_probs=encoded.ctc_log_probs, ctc_lengths=encoded.padding_mask.sum(1),
                      decoder=model.las, encoder_hidden_states=encoded.hidden_states,
                      encoder_padding_mask=encoded.padding_mask)
        return {name: decode(name, **inputs, **options) for name, options in METHODS.items()}


def test_training_converges(trained):
    _, _, losses = trained
    assert losses[-1] < 0.05 < losses[0]


def test_every_decoder_reads_the_transcripts_back_exactly(trained):
    model, batch, _ = trained
    for name, ids in run_decoders(model, batch).items():
        hypotheses = [decode_ids(row) for row in ids]
        assert character_error_rate(TEXTS, hypotheses) == 0.0, (name, hypotheses)


def test_joint_extremes_match_the_single_scorer_searches(trained):
    model, batch, _ = trained
    with torch.no_grad():
        encoded = model.encode(batch.features, batch.feature_lengths)
        lengths = encoded.padding_mask.sum(1)
        args = (model.las, encoded.hidden_states, encoded.padding_mask, encoded.ctc_log_probs, lengths)
        ctc_only = joint_beam_search(*args, ctc_weight=1.0, beam_size=8)
        prefix = ctc_prefix_beam_search(encoded.ctc_log_probs, lengths, beam_size=8)
        attention_only = joint_beam_search(*args, ctc_weight=0.0, beam_size=8)
    assert [h[0].tokens for h in ctc_only] == [h[0].tokens for h in prefix]
    assert [h[0].tokens for h in attention_only] == run_decoders(model, batch)["attention_beam"]


def test_save_load_round_trip_gives_identical_logits_and_decodes(trained, tmp_path):
    model, batch, _ = trained
    (tmp_path / "las_config.json").write_text(json.dumps(model.las.config.to_dict()))
    save_file(model.state_dict(), tmp_path / "model.safetensors")

    config = LASConfig.from_dict(json.loads((tmp_path / "las_config.json").read_text()))
    torch.manual_seed(123)  # different initial weights, all overwritten by the load
    loaded = TinyJointCTCLAS(config)
    loaded.load_state_dict(load_file(tmp_path / "model.safetensors"))
    loaded.eval()
    with torch.no_grad():
        before = model(batch.features, batch.feature_lengths, batch.labels)
        after = loaded(batch.features, batch.feature_lengths, batch.labels)
    assert torch.equal(before[2].logits, after[2].logits)
    assert torch.equal(before[0], after[0])
    assert run_decoders(loaded, batch) == run_decoders(model, batch)
