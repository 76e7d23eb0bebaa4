"""w2v-BERT 2.0 (transformers' ``Wav2Vec2BertModel``) as the ``wav2vec2_bert`` backbone: loading a checkpoint saved by
transformers, its feature extractor, and what the backbone refuses."""

import numpy as np
import pytest
import torch
from transformers import (
    AutoModelForCTC,
    AutoProcessor,
    SeamlessM4TFeatureExtractor,
    Wav2Vec2BertConfig,
    Wav2Vec2BertForCTC,
    Wav2Vec2BertModel,
)

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.data.feature_types import FeatureType, StackedFbankFeatures, feature_type_of, feature_type_of_model
from adaptspeech.testing import TINY_BACKBONES, save_tiny_model, tiny_config

VOCAB = 12


def waveforms(*lengths: int, seed: int = 0) -> list[np.ndarray]:
    """Noise waveforms of these sample counts (odd and even filterbank frame counts)."""
    rng = np.random.default_rng(seed)
    return [(0.1 * rng.standard_normal(n)).astype(np.float32) for n in lengths]


@pytest.fixture(scope="module")
def ctc_checkpoint(tmp_path_factory):
    """A tiny random ``Wav2Vec2BertForCTC`` saved by transformers, and the model itself."""
    torch.manual_seed(0)
    reference = Wav2Vec2BertForCTC(Wav2Vec2BertConfig(vocab_size=VOCAB, **TINY_BACKBONES["wav2vec2_bert"])).eval()
    folder = tmp_path_factory.mktemp("w2v_bert_ctc")
    reference.save_pretrained(folder)
    return folder, reference


def wrapped(folder, reference, **kwargs):
    """``from_backbone`` of the checkpoint, with the reference's lm_head copied into the new CTC head."""
    model = AdaptSpeechForCTC.from_backbone(str(folder), vocab_size=VOCAB, **kwargs).eval()
    with torch.no_grad():
        model.ctc_head.lm_head.load_state_dict(reference.lm_head.state_dict())
    return model


@pytest.mark.parametrize("lengths", [(8000,), (8000, 5000)], ids=["batch1", "padded_batch"])
def test_logits_equal_transformers_without_an_active_adapter(ctc_checkpoint, lengths):
    folder, reference = ctc_checkpoint
    model = wrapped(folder, reference, adapter_languages=["ro", "cs"])
    assert model.config.backbone_type == "wav2vec2_bert" and model.main_input_name == "input_features"
    batch = SeamlessM4TFeatureExtractor()(waveforms(*lengths), sampling_rate=16000, return_tensors="pt")
    with torch.no_grad():
        expected = reference(**batch).logits
        got = model(**batch)
    real = batch["attention_mask"].bool()
    assert got.logits.shape == expected.shape
    torch.testing.assert_close(got.logits[real], expected[real], atol=1e-5, rtol=0)
    assert got.frame_lengths.tolist() == batch["attention_mask"].sum(-1).tolist()


def test_from_backbone_loads_every_encoder_weight_of_a_model_checkpoint(tmp_path):
    torch.manual_seed(1)
    encoder = Wav2Vec2BertModel(Wav2Vec2BertConfig(**TINY_BACKBONES["wav2vec2_bert"]))
    encoder.save_pretrained(tmp_path)
    model = AdaptSpeechForCTC.from_backbone(str(tmp_path), vocab_size=VOCAB, adapter_languages=["ro"])
    ours = model.backbone.state_dict()
    for key, value in encoder.state_dict().items():
        assert torch.equal(ours[key], value), key


def test_feature_type_equals_seamless_extractor_per_utterance():
    extractor = SeamlessM4TFeatureExtractor()
    features = StackedFbankFeatures()
    clips = waveforms(8000, 5000, 16000)
    batch = extractor(clips, sampling_rate=16000, return_tensors="np")
    for row, clip in enumerate(clips):
        ours = features.extract(clip)
        units = int(batch["attention_mask"][row].sum())
        assert ours.shape == (units, 160) == (features.num_units(len(clip)), features.feature_size)
        np.testing.assert_array_equal(ours, batch["input_features"][row, :units])
    assert features.unit_hop == 320 and features.unit_window == 560


def test_a_saved_model_folder_reloads_its_seamless_extractor_with_autoprocessor(tmp_path):
    folder = save_tiny_model(tmp_path, backbone_type="wav2vec2_bert")
    processor = AutoProcessor.from_pretrained(folder)
    assert type(processor.feature_extractor) is SeamlessM4TFeatureExtractor
    assert feature_type_of(processor.feature_extractor) == "stacked_fbank"
    clip = waveforms(7000)
    expected = SeamlessM4TFeatureExtractor()(clip, sampling_rate=16000, return_tensors="pt")
    got = processor(clip, sampling_rate=16000, return_tensors="pt")
    assert torch.equal(got["input_features"], expected["input_features"])
    model = AutoModelForCTC.from_pretrained(folder).eval()
    assert model.config.backbone_type == "wav2vec2_bert"
    with torch.no_grad():
        assert model(**got).logits.shape == (1, expected["input_features"].shape[1], model.config.vocab_size)


def test_a_pretrained_seamless_extractor_without_feature_type_reads_as_stacked_fbank():
    assert feature_type_of(SeamlessM4TFeatureExtractor()) == "stacked_fbank"
    assert FeatureType.of(SeamlessM4TFeatureExtractor()).feature_size == 160


def test_the_model_reads_stacked_fbank_not_the_fbank_conformer_features():
    model = AdaptSpeechForCTC(tiny_config("wav2vec2_bert"))
    assert feature_type_of_model(model) == "stacked_fbank"
    assert FeatureType.of_model(model).inputs_to_logits_ratio(model) == 320
    assert feature_type_of_model(AdaptSpeechForCTC(tiny_config("fbank_conformer"))) == "fbank"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"add_adapter": True}, r"^wav2vec2_bert: backbone_config\.add_adapter=true: .* not a language adapter"),
        ({"conv_lookahead": 0}, r"^wav2vec2_bert: backbone_config\.conv_lookahead=0: .* causal already"),
    ],
)
def test_unsupported_settings_are_refused_in_one_line(overrides, message):
    with pytest.raises(ValueError, match=message) as info:
        tiny_config("wav2vec2_bert", backbone_overrides=overrides)
    assert "\n" not in str(info.value)


def test_a_checkpoint_with_add_adapter_is_refused_before_its_weights_load(tmp_path):
    Wav2Vec2BertConfig(add_adapter=True, **TINY_BACKBONES["wav2vec2_bert"]).save_pretrained(tmp_path)  # no weights
    with pytest.raises(ValueError, match=rf"^{tmp_path}: backbone_config\.add_adapter=true"):
        AdaptSpeechForCTC.from_backbone(str(tmp_path), vocab_size=VOCAB)


def test_streaming_is_refused_naming_the_whole_recording_attention():
    model = AdaptSpeechForCTC(tiny_config("wav2vec2_bert"))
    with pytest.raises(ValueError, match=r"^the wav2vec2_bert backbone cannot stream: .*whole recording .* 4 left / 2"):
        model.config.backbone_spec.stream_front_end(model.backbone)
