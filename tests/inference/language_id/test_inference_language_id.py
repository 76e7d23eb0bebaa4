"""A separate transformers language-ID model (``Wav2Vec2ForSequenceClassification``, the MMS-LID layout, built here by
transformers itself) whose labels are mapped to the routed model's languages."""

from __future__ import annotations

import pytest
import torch
from helpers.lid import tiny_lid_classifier, tone_clip
from transformers import Wav2Vec2FeatureExtractor, Wav2Vec2ForSequenceClassification

from adaptspeech.inference.language_id.identifiers import (
    LanguageIDError,
    SequenceClassificationIdentifier,
    parse_label_map,
)


@pytest.fixture(scope="module")
def classifier(tmp_path_factory: pytest.TempPathFactory):
    return tiny_lid_classifier(tmp_path_factory.mktemp("lid_model"), ["ron", "cs", "deu"])


def test_the_posterior_is_the_classifier_s_renormalised_over_the_mapped_labels(classifier) -> None:
    identifier = SequenceClassificationIdentifier.from_folder(classifier, ["ro", "cs", "pl"], {"ron": "ro"})
    assert identifier.languages == ["ro", "cs"] and identifier.label_ids == [0, 1]  # deu stands for no language
    waves = [tone_clip("ro", 1), tone_clip("cs", 2, seconds=0.2)]
    model = Wav2Vec2ForSequenceClassification.from_pretrained(classifier).eval()
    extractor = Wav2Vec2FeatureExtractor.from_pretrained(classifier)
    for wave, got in zip(waves, identifier.log_probs(waves), strict=True):
        with torch.no_grad():  # each alone, unpadded: transformers' own forward
            logits = model(**extractor(wave, sampling_rate=16000, return_tensors="pt")).logits[0]
        # a batch of two (the short clip padded, with its attention mask) against each alone: another float32
        # summation order in the convolutions and matmuls (2.5e-5 seen)
        torch.testing.assert_close(got, logits[[0, 1]].log_softmax(-1), atol=1e-4, rtol=1e-4)


def test_labels_spelled_as_the_languages_need_no_map(classifier) -> None:
    identifier = SequenceClassificationIdentifier.from_folder(classifier, ["cs", "sk"])
    assert identifier.languages == ["cs"]


def test_label_map_entries_that_cannot_work_are_refused_naming_them(classifier) -> None:
    with pytest.raises(LanguageIDError, match=r"names label\(s\) \['ces'\] the model does not have; its labels: cs, "
                                              "deu, ron"):
        SequenceClassificationIdentifier.from_folder(classifier, ["ro", "cs"], {"ces": "cs"})
    with pytest.raises(LanguageIDError, match=r"maps to \['it'\], which the model has no adapter for"):
        SequenceClassificationIdentifier.from_folder(classifier, ["ro", "cs"], {"ron": "it"})
    with pytest.raises(LanguageIDError, match=r"none of its 3 labels \(cs, deu, ron\) is one of the model's languages "
                                              r"\(sk, pl\); map them with --lid-label-map"):
        SequenceClassificationIdentifier.from_folder(classifier, ["sk", "pl"])
    with pytest.raises(LanguageIDError, match="--lid-label-map: 'ron' is not LABEL=LANGUAGE"):
        parse_label_map("ron")
    assert parse_label_map(" ron=ro, ces=cs ") == {"ron": "ro", "ces": "cs"}
    with pytest.raises(LanguageIDError, match=r"--lid-label-map: label 'ces' is given twice \('ces=cs', 'ces=sk'\)"):
        parse_label_map("ces=cs,ron=ro,ces=sk")  # the last entry won: a cs clip was routed to sk


def test_a_folder_that_is_no_audio_classifier_is_refused_in_one_line(tmp_path) -> None:
    with pytest.raises(LanguageIDError, match="not an audio classification folder"):
        SequenceClassificationIdentifier.from_folder(tmp_path, ["ro"])


def test_a_lid_model_that_is_no_folder_and_not_reachable_is_named_in_one_line(tmp_path, monkeypatch) -> None:
    """A value that is no local folder is tried as a Hub id; offline that is one line naming the value, not the Hub's
    connection error."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    missing = tmp_path / "nonexist"
    with pytest.raises(LanguageIDError) as caught:
        SequenceClassificationIdentifier.from_folder(str(missing), ["ro"])
    assert str(caught.value) == (f"--lid-model {missing}: neither a local folder nor a model on the Hub that can be "
                                 "reached (offline: HF_HUB_OFFLINE is set)")
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there: no connection
    with pytest.raises(LanguageIDError) as caught:
        SequenceClassificationIdentifier.from_folder(str(missing), ["ro"])
    assert str(caught.value).endswith("that can be reached (offline: no connection to the Hub)")
    (tmp_path / "file.bin").write_bytes(b"0")
    with pytest.raises(LanguageIDError, match=r"--lid-model .*file\.bin: a file, not a folder"):
        SequenceClassificationIdentifier.from_folder(tmp_path / "file.bin", ["ro"])
