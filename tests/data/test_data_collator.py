"""The collator: shapes, bool masks, -100 label padding, language ids and the attention decoder's targets."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from adaptspeech.data import DataCollatorCTCWithPadding, build_processor, build_vocab, extract_features, num_frames


@pytest.fixture(scope="module")
def toy_processor(tmp_path_factory):
    return build_processor(build_vocab(["abc d"]), tmp_path_factory.mktemp("toy"))


def _rows(lengths=(1600, 4000, 2500), labels=((5, 6), (7, 5, 5, 8, 4, 6), ()), langs=("ro", "cs", "ro")):
    rng = np.random.default_rng(0)
    return [
        {"input_values": rng.standard_normal(n).astype(np.float32).tolist(), "labels": list(lab), "language": lang}
        for n, lab, lang in zip(lengths, labels, langs)
    ]


def test_waveform_batch(toy_processor):
    rows = _rows()
    batch = DataCollatorCTCWithPadding(toy_processor, {"ro": 0, "cs": 1})(rows)
    assert set(batch) == {"input_values", "attention_mask", "labels", "lang_ids"}
    assert batch["input_values"].shape == (3, 4000) and batch["input_values"].dtype == torch.float32
    assert batch["attention_mask"].dtype == torch.bool and batch["attention_mask"].shape == (3, 4000)
    for i, row in enumerate(rows):
        n = len(row["input_values"])
        assert batch["attention_mask"][i].tolist() == [True] * n + [False] * (4000 - n)
        np.testing.assert_array_equal(batch["input_values"][i, :n].numpy(), np.asarray(row["input_values"], np.float32))
        assert (batch["input_values"][i, n:] == 0).all()
    assert batch["labels"].dtype == torch.long
    assert batch["labels"].tolist() == [[5, 6, -100, -100, -100, -100], [7, 5, 5, 8, 4, 6], [-100] * 6]
    assert batch["lang_ids"].tolist() == [0, 1, 0] and batch["lang_ids"].dtype == torch.long


def test_decoder_targets(toy_processor):
    rows = _rows()
    batch = DataCollatorCTCWithPadding(toy_processor, add_decoder_targets=True)(rows)
    assert "lang_ids" not in batch
    longest = max(len(r["labels"]) for r in rows)
    assert batch["decoder_input_ids"].shape == batch["decoder_labels"].shape == (3, longest + 1)
    bos, eos, pad = 2, 3, 0
    for i, row in enumerate(rows):  # built by hand, position by position
        expected_in, expected_out = [], []
        for t in range(longest + 1):
            expected_in.append(bos if t == 0 else row["labels"][t - 1] if t - 1 < len(row["labels"]) else pad)
            expected_out.append(
                row["labels"][t] if t < len(row["labels"]) else eos if t == len(row["labels"]) else -100
            )
        assert batch["decoder_input_ids"][i].tolist() == expected_in
        assert batch["decoder_labels"][i].tolist() == expected_out


def test_fbank_batch_from_features_and_on_the_fly(toy_processor, tmp_path):
    fbank_processor = build_processor(build_vocab(["abc d"]), tmp_path, feature_type="fbank")
    rows = _rows()
    fe = fbank_processor.feature_extractor
    with_feats = [
        {**r, "input_features": extract_features(np.asarray(r["input_values"], np.float32), fe)[1]} for r in rows
    ]
    collator = DataCollatorCTCWithPadding(fbank_processor, feature_type="fbank")
    from_feats = collator([{k: v for k, v in r.items() if k != "input_values"} for r in with_feats])
    on_the_fly = collator(rows)
    frames = [num_frames(len(r["input_values"])) for r in rows]
    assert from_feats["input_features"].shape == (3, max(frames), 80)
    assert from_feats["attention_mask"].sum(dim=1).tolist() == frames
    assert from_feats["attention_mask"].dtype == torch.bool
    torch.testing.assert_close(from_feats["input_features"], on_the_fly["input_features"])
    assert (from_feats["input_features"][0, frames[0] :] == 0).all()


def test_pad_to_multiple_and_inference_rows(toy_processor):
    rows = [{"input_values": [0.1] * 1001}, {"input_values": [0.2] * 10}]
    batch = DataCollatorCTCWithPadding(toy_processor, pad_to_multiple_of=320)(rows)
    assert batch["input_values"].shape == (2, 1280) and "labels" not in batch
    assert batch["attention_mask"].sum(dim=1).tolist() == [1001, 10]


def test_prepared_rows_collate(prepared_corpus, processor):
    prepared, _ = prepared_corpus
    rows = [prepared["train"][i] for i in range(4)]
    batch = DataCollatorCTCWithPadding(processor, {"ro": 0, "cs": 1}, add_decoder_targets=True)(rows)
    lengths = [len(r["input_values"]) for r in rows]
    assert batch["input_values"].shape == (4, max(lengths))
    assert batch["attention_mask"].sum(dim=1).tolist() == lengths
    for i, row in enumerate(rows):
        labels = batch["labels"][i]
        assert labels[labels != -100].tolist() == row["labels"]


def test_collator_errors_name_the_problem(toy_processor):
    with pytest.raises(ValueError, match="allowed values: fbank, stacked_fbank, waveform"):
        DataCollatorCTCWithPadding(toy_processor, feature_type="mfcc")
    with pytest.raises(KeyError, match=r"'sl' of clip a\.mp3 is not in language_to_id; allowed values: ro, cs"):
        DataCollatorCTCWithPadding(toy_processor, {"ro": 0, "cs": 1})(
            [{"input_values": [0.0], "labels": [5], "language": "sl", "path": "a.mp3"}]
        )
    with pytest.raises(KeyError, match="needs 'input_values'"):
        DataCollatorCTCWithPadding(toy_processor)([{"input_features": [[0.0] * 80]}])


def test_lid_crops_cut_each_row_to_a_random_window_of_the_chosen_length(toy_processor):
    from adaptspeech.runtime.features import normalize_utterance

    collator = DataCollatorCTCWithPadding(toy_processor, ctc_labels=False, lid_crop_seconds=(0.5, 1.0))
    ramp = np.arange(48000, dtype=np.float32)  # 3 s: any contiguous window normalises to the same ramp
    rows = [{"input_values": ramp, "labels": [1]}, {"input_values": ramp[:4000], "labels": [1]}]
    torch.manual_seed(0)
    lengths = set()
    for _ in range(20):
        batch = collator(rows)
        length = int(batch["attention_mask"][0].sum())
        assert 8000 <= length <= 16000
        lengths.add(length)
        np.testing.assert_allclose(batch["input_values"][0, :length].numpy(),
                                   normalize_utterance(np.arange(length, dtype=np.float32)), atol=1e-4)
        assert int(batch["attention_mask"][1].sum()) == 4000  # shorter than the shortest crop: whole
        assert "labels" not in batch
    assert len(lengths) > 10  # drawn, not fixed
    torch.manual_seed(1)
    first = collator(rows)["input_values"]
    torch.manual_seed(1)
    assert torch.equal(collator(rows)["input_values"], first)  # torch's generator: the trainer's seed decides


def test_lid_crops_with_transcripts_are_refused_in_one_line(toy_processor):
    with pytest.raises(ValueError, match=r"^lid\.crop_seconds \[1\.0, 4\.0\]: random crops cut the audio away from "
                                         r"its transcript; they are for a head trained alone"):
        DataCollatorCTCWithPadding(toy_processor, lid_crop_seconds=(1.0, 4.0))
