"""The feature types (adaptspeech.data.feature_types): every registered type answers what the rest of the library
asks of it, consistently with the features it computes (units, the samples each unit reads, digital silence, the
batch key), and a feature extractor or a model names its type."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from adaptspeech.data.audio import digital_silence
from adaptspeech.data.feature_types import (
    FEATURE_TYPES,
    FeatureType,
    feature_type_of,
    feature_type_of_model,
    normalize_utterance,
)


def wave(seconds: float = 0.73, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * 16000)) / 16000
    return (0.3 * np.sin(2 * np.pi * 300 * t) + 0.05 * rng.standard_normal(t.shape)).astype(np.float32)


@pytest.mark.parametrize("name", FEATURE_TYPES.names())
def test_every_type_counts_its_units_and_the_samples_each_reads(name: str) -> None:
    features = FEATURE_TYPES.get(name)(n_mels=16)
    x = wave()
    raw = features.raw(x)
    assert raw.dtype == np.float32 and len(raw) == features.num_units(len(x))
    assert raw.shape[1:] == (() if features.feature_size == 1 else (features.feature_size,))
    if name != "stacked_fbank":  # which normalises its mel bins before stacking, with ddof=1, as transformers does
        np.testing.assert_array_equal(features.extract(x), normalize_utterance(raw, axis=0))
    assert features.empty().shape == (0, *raw.shape[1:])
    first, last = features.unit_samples(5, 40)  # prepare of these samples gives exactly units 5 .. 39
    np.testing.assert_allclose(features.raw(x[first:last]), raw[5:40], atol=1e-4)
    assert features.framed == (features.unit_window > 1)


@pytest.mark.parametrize("name", FEATURE_TYPES.names())
def test_units_touching_marked_samples_match_a_unit_by_unit_reference(name: str) -> None:
    features = FEATURE_TYPES.get(name)()
    x = np.ones(4000, np.float32)
    x[1000:2000] = 0.0  # digital silence (whole fbank windows of zeros)
    x[3000:3100] = 0.0  # too short to be
    marked = digital_silence(x)
    units = features.num_units(len(x)) + 2  # two units past the end read nothing
    expected = []
    for t in range(units):
        first, last = features.unit_samples(t, t + 1)
        expected.append(bool(marked[min(first, len(x)) : min(last, len(x))].any()))
    assert features.units_touching(marked, units).tolist() == expected
    assert features.digital_silence(features.raw(x)).any()


def test_an_extractor_and_a_model_name_their_type() -> None:
    assert feature_type_of(SimpleNamespace(sampling_rate=16000)) == "waveform"  # a pretrained checkpoint's
    fbank = SimpleNamespace(sampling_rate=16000, feature_type="fbank", n_mels=40, do_normalize=False)
    assert FeatureType.of(fbank) == FEATURE_TYPES.get("fbank")(16000, 40, False)
    with pytest.raises(ValueError, match="allowed values: fbank, stacked_fbank, waveform"):
        feature_type_of(SimpleNamespace(sampling_rate=16000, feature_type="mfcc"))
    for name in ("fbank", "waveform"):
        model = SimpleNamespace(main_input_name=FEATURE_TYPES.get(name).input_name)
        assert feature_type_of_model(model) == name and FeatureType.of_model(model).name == name
    spec = SimpleNamespace(main_input_name="input_features", feature_type="stacked_fbank")  # w2v-BERT's backbone spec
    assert feature_type_of_model(spec) == "stacked_fbank" == FeatureType.of_model(spec).name


def test_fbank_rows_prepared_as_waveforms_are_featurised_when_collated() -> None:
    x = wave()
    fbank = FEATURE_TYPES.get("fbank")(n_mels=16)
    np.testing.assert_array_equal(fbank.collate_input({"input_values": x}), fbank.extract(x))
    with pytest.raises(KeyError, match="needs 'input_values'"):
        FEATURE_TYPES.get("waveform")().collate_input({"input_features": fbank.extract(x)})


def test_the_feature_extractor_is_registered_under_the_configs_model_type() -> None:
    """``data.features`` registers the extractor under the model type string, so that an fbank processor folder loads
    without importing the model; the string must be the config's."""
    from transformers.models.auto.feature_extraction_auto import FEATURE_EXTRACTOR_MAPPING

    from adaptspeech.configuration import AdaptSpeechConfig
    from adaptspeech.data.features import MODEL_TYPE, AdaptSpeechFeatureExtractor

    assert AdaptSpeechConfig.model_type == MODEL_TYPE
    assert FEATURE_EXTRACTOR_MAPPING._extra_content[MODEL_TYPE] is AdaptSpeechFeatureExtractor


def test_an_fbank_processor_folder_loads_after_importing_the_data_package_alone(tmp_path) -> None:
    """``prepare`` reloads the processor it wrote without importing the model (found: "Unrecognized feature
    extractor" once the package's import became light)."""
    import subprocess
    import sys

    from adaptspeech.data.processor import build_processor
    from adaptspeech.data.text import build_vocab

    build_processor(build_vocab(["a b"]), tmp_path / "processor", feature_type="fbank")
    script = ("import sys\nimport adaptspeech.data\nfrom transformers import Wav2Vec2Processor\n"
              "assert 'adaptspeech.modeling' not in sys.modules\n"
              "print(type(Wav2Vec2Processor.from_pretrained(sys.argv[1]).feature_extractor).__name__)\n")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "processor")], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["AdaptSpeechFeatureExtractor"]
