"""Everything up to the upload: the folder's files, the model card, loading it back; offline push fails in one line."""

import pytest
import torch

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.hub import PushError, prepare_adapter_folder, push_folder
from adaptspeech.testing import tiny_config, tiny_inputs


def trained_model():
    torch.manual_seed(0)
    config = tiny_config(
        adapter_languages=["ro", "cs"],
        adapter_defaults={"bottleneck": 8},
        backbone_name_or_path="facebook/wav2vec2-xls-r-300m",
        backbone_revision="abc123",
    )
    model = AdaptSpeechForCTC(config)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    return model


def test_adapter_folder_contents_card_and_load_back(tmp_path):
    model = trained_model()
    model.eval()
    model.set_target_language("ro")
    inputs = tiny_inputs(model.config)
    expected = model(**inputs).logits
    folder = prepare_adapter_folder(model, tmp_path / "push", language="ro", metrics={"test_cer": 0.0612})
    assert sorted(p.name for p in folder.iterdir()) == ["README.md", "adapter.ro.json", "adapter.ro.safetensors"]
    card = (folder / "README.md").read_text()
    for fragment in (
        "base_model: facebook/wav2vec2-xls-r-300m",
        "revision `abc123`",
        "- ro",
        "test_cer",
        "0.0612",
        "bottleneck r=8",
    ):
        assert fragment in card, fragment

    fresh = AdaptSpeechForCTC(tiny_config(backbone_name_or_path="facebook/wav2vec2-xls-r-300m"))
    fresh.load_state_dict({k: v for k, v in model.state_dict().items() if "language_adapters" not in k})
    fresh.eval()
    fresh.load_adapter("ro", folder)
    assert torch.allclose(fresh(**inputs).logits, expected, atol=1e-6)


def test_fusion_folder_loads_back(tmp_path):
    model = trained_model()
    model.add_fusion(["ro", "cs"], target_language="ro")
    with torch.no_grad():
        for block in model.adapter_blocks.values():
            block.fusion.linear_q.weight.add_(0.1)
    model.eval()
    inputs = tiny_inputs(model.config)
    expected = model(**inputs).logits
    folder = prepare_adapter_folder(model, tmp_path / "f", language="ro", include_fusion=True)
    model.save_adapter("cs", folder)
    assert "SimAdapter fusion over ro, cs" in (folder / "README.md").read_text()

    fresh = AdaptSpeechForCTC(tiny_config())
    fresh.load_state_dict({k: v for k, v in model.state_dict().items() if "language_adapters" not in k})
    fresh.eval()
    fresh.load_adapter("ro", folder)
    fresh.load_adapter("cs", folder)
    fresh.load_fusion(folder)
    assert torch.allclose(fresh(**inputs).logits, expected, atol=1e-6)


def test_push_without_network_is_one_clear_line(tmp_path, monkeypatch):
    model = trained_model()
    folder = prepare_adapter_folder(model, tmp_path / "push", language="ro")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(PushError) as err:
        push_folder(folder, "someone/adapter-ro")
    assert "\n" not in str(err.value) and "someone/adapter-ro" in str(err.value) and "offline" in str(err.value).lower()

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.invalid")
    with pytest.raises(PushError) as err:
        push_folder(folder, "someone/adapter-ro")
    assert "\n" not in str(err.value) and "unreachable" in str(err.value)
    with pytest.raises(PushError, match="nothing to push"):
        push_folder(tmp_path / "empty", "someone/x")


def test_the_card_parses_back_with_huggingface_hub(tmp_path):
    """The card's metadata is huggingface_hub's: language, base model and revision, and a model-index the Hub shows."""
    from huggingface_hub import ModelCard

    model = trained_model()
    folder = prepare_adapter_folder(model, tmp_path / "push", language="ro", metrics={"test_cer": 0.0612,
                                    "test_wer": 0.21, "test_utterances": 40}, dataset="Common Voice 17 ro")
    card = ModelCard.load(folder / "README.md")
    assert card.data.language == ["ro"]
    assert card.data.base_model == "facebook/wav2vec2-xls-r-300m" and card.data.base_model_revision == "abc123"
    assert card.data.pipeline_tag == "automatic-speech-recognition"
    results = {(r.metric_type, r.dataset_name, r.dataset_split): r.metric_value for r in card.data.eval_results}
    assert results == {("cer", "Common Voice 17 ro", "test"): 6.12, ("wer", "Common Voice 17 ro", "test"): 21.0}
