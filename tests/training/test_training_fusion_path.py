"""``model.fusion_path`` of a stage: how the fusion is computed (``stacked``, ``reference``, ``recompute``), the same
function in each, chosen per run for before / after measurements of a whole stage (``scripts/bench_demo_fusion.py``).
"""

from __future__ import annotations

import pytest
import torch
from helpers.model_folders import model_folder
from transformers import Wav2Vec2Processor

from adaptspeech.adapters.fusion import SimAdapterFusion
from adaptspeech.adapters.layer_forward import reference_path
from adaptspeech.overrides import apply_overrides
from adaptspeech.testing import tiny_inputs
from adaptspeech.training.model_setup import build_model
from adaptspeech.training.stage import StageConfigError, StageSpec


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return model_folder(tmp_path_factory.mktemp("fusion_path") / "model", languages=("ro", "cs"))


def built(folder, fusion_path: str | None, processor):
    """The stage's model; the new fusion's random W_Q / W_K drawn from the same seed each time."""
    torch.manual_seed(0)
    return build_model(model_spec(folder, fusion_path), processor)


def model_spec(folder, fusion_path: str | None, fusion: bool = True) -> dict:
    spec = {"init": "pretrained", "path": str(folder), "trainable": {"fusion": fusion}}
    if fusion:
        spec["fusion"] = {"languages": ["ro", "cs"], "target_language": "ro"}
    else:
        spec["trainable"] = {"adapters": ["ro"]}
    if fusion_path is not None:
        spec["fusion_path"] = fusion_path
    return spec


def fusions(model) -> list[SimAdapterFusion]:
    return [m for m in model.modules() if isinstance(m, SimAdapterFusion)]


def test_the_reference_path_computes_what_reference_path_does_and_recompute_sets_recompute(folder):
    processor = Wav2Vec2Processor.from_pretrained(folder)
    stacked = built(folder, None, processor).eval()
    reference = built(folder, "reference", processor).eval()
    recompute = built(folder, "recompute", processor)
    assert [(f.reference, f.recompute) for f in fusions(stacked)] == [(False, False)] * 2
    assert [(f.reference, f.recompute) for f in fusions(reference)] == [(True, False)] * 2
    assert [(f.reference, f.recompute) for f in fusions(recompute)] == [(False, True)] * 2
    inputs = tiny_inputs(stacked.config, batch=2)
    with torch.no_grad():
        with reference_path():
            expected = stacked(**inputs).logits
        # literally the same computation (the same weights, each adapter's own forward): exactly equal
        assert torch.equal(reference(**inputs).logits, expected)
        # the stacked path: the same function in another order of the sums (float32 rounding)
        torch.testing.assert_close(stacked(**inputs).logits, expected, rtol=1e-5, atol=1e-5)


def test_a_fusion_path_without_a_fusion_is_refused_in_one_line(folder):
    processor = Wav2Vec2Processor.from_pretrained(folder)
    with pytest.raises(StageConfigError) as info:
        build_model(model_spec(folder, "reference", fusion=False), processor)
    assert str(info.value) == ("model.fusion_path: 'reference' names how a fusion is computed, but this model has no "
                               "fusion (add one with model.fusion)")


def test_an_unknown_fusion_path_is_refused_naming_the_allowed_ones(tmp_path):
    spec = {"name": "x", "output_dir": str(tmp_path / "run"), "data": {"prepared_dir": "p", "train_languages": ["ro"]},
            "model": {"init": "pretrained", "path": "m"}}
    with pytest.raises(StageConfigError) as info:
        StageSpec.from_dict(apply_overrides(spec, ["model.fusion_path=fast"]))
    assert str(info.value) == (
        "model.fusion_path: expected one of the allowed values: stacked, reference, recompute or null, got 'fast'"
    )
