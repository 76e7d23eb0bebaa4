"""Folders saved by adaptspeech 0.1.0 (``tests/fixtures/format_0.1.0``, written once by
``tests/fixtures/make_format_fixtures.py``) keep loading, and give the logits stored beside them.

The stored logits were computed on the machine that wrote the fixtures; this machine may run other kernels (AVX-512
or not, another thread count), so they are compared with a tolerance of 1e-5 (float32 rounding of a width-32 model;
a wrong weight, setting or code path moves them by 1e-2 or more). What is literally the same computation, the folder
loaded twice, or saved again and reloaded, is compared bit for bit."""


import pytest
import torch
from helpers.paths import FORMAT_0_1_0
from peft import PeftModel
from safetensors.torch import load_file
from transformers import AutoModelForCTC, AutoModelForSpeechSeq2Seq, Wav2Vec2ForCTC

import adaptspeech.adapters.peft_method  # registers the peft method
import adaptspeech.modeling  # noqa: F401  (registers the model classes)

FIXTURES = FORMAT_0_1_0
TOL = 1e-5


def load(name: str) -> torch.nn.Module:
    folder = FIXTURES / name
    if name == "ctc_las":
        return AutoModelForSpeechSeq2Seq.from_pretrained(folder).eval()
    if name == "peft":
        base = Wav2Vec2ForCTC.from_pretrained(folder / "base")
        return PeftModel.from_pretrained(base, folder / "ro", adapter_name="ro").eval()
    if name == "mms_adapter":
        model = AutoModelForCTC.from_pretrained(folder / "base")
        model.load_adapter("ro", folder / "adapter")
        model.set_active_languages(["ro"])
        return model.eval()
    return AutoModelForCTC.from_pretrained(folder).eval()


def run(model: torch.nn.Module, name: str):
    inputs = load_file(str(FIXTURES / name / "inputs.safetensors"))
    with torch.no_grad():
        return model(**inputs)


@pytest.mark.parametrize("name", ["ctc_fusion", "ctc_wav2vec2_lora", "ctc_las", "peft", "mms_adapter"])
def test_a_folder_saved_by_0_1_0_loads_and_gives_its_stored_logits(name, tmp_path):
    expected = load_file(str(FIXTURES / name / "expected.safetensors"))["logits"]
    model = load(name)
    logits = run(model, name).logits
    assert logits.shape == expected.shape
    assert torch.allclose(logits, expected, atol=TOL, rtol=0), (logits - expected).abs().max()
    assert torch.equal(run(load(name), name).logits, logits)  # the same folder, loaded again: the same bits
    if name in ("peft", "mms_adapter"):
        return
    model.save_pretrained(tmp_path / "again")
    again = (AutoModelForSpeechSeq2Seq if name == "ctc_las" else AutoModelForCTC).from_pretrained(tmp_path / "again")
    assert torch.equal(run(again.eval(), name).logits, logits)


def test_the_joint_model_keeps_its_attention_logits_and_loss():
    stored = load_file(str(FIXTURES / "ctc_las" / "expected_las.safetensors"))
    out = run(load("ctc_las"), "ctc_las")
    assert torch.allclose(out.attention_logits, stored["attention_logits"], atol=TOL, rtol=0)
    assert torch.allclose(out.loss.reshape(1), stored["loss"], atol=TOL, rtol=0)


def test_the_saved_settings_are_read_back():
    fusion = load("ctc_fusion")
    assert fusion.config.fusion_active and fusion.config.fusion_settings().include_self
    assert fusion.config.fusion_settings().temperature == 2.0
    lora = load("ctc_wav2vec2_lora")
    assert lora.config.active_languages == ["uk"]
    assert lora.config.adapters["uk"]["adapter_type"] == "lora"
