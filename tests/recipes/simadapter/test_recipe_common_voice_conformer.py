"""The Common Voice recipe on a wav2vec2-conformer checkpoint with ``backbone_config.conv_lookahead`` (the conformer
convolution causal or a dynamic chunk convolution, for streaming): accepted by the real run's stage (``model.init:
backbone``, where the checkpoint's config is loaded and only adaptspeech's own settings go on top) and by its dry run
(``model.init: config`` of the checkpoint's shape); a bad value is one line."""

from __future__ import annotations

import json

import pytest
import torch

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.backbones.causal_conv import ChunkDepthwiseConv1d, ShiftedDepthwiseConv1d
from adaptspeech.errors import StageConfigError
from adaptspeech.recipes import load_recipe
from adaptspeech.recipes.simadapter.dry_run import DryRunSettings, load_dry_run_recipe
from adaptspeech.recipes.simadapter.stages import recipe_plan, stage_spec
from adaptspeech.testing import tiny_config

CV = "recipes/common_voice"
CONFORMER = ["base.model.config.backbone_type=wav2vec2_conformer", "base.model.path=some/wav2vec2-conformer"]


def _base_spec(spec, tmp_path) -> dict:
    planned = next(stage for stage in recipe_plan(spec) if stage.name == "base")
    return stage_spec(spec, planned, tmp_path / "prepared")


@pytest.mark.parametrize("lookahead", ["chunk", 0])
def test_the_real_stage_takes_conv_lookahead_on_the_checkpoint(tmp_path, lookahead):
    """Before: ``model.config.backbone_config: not used with model.init=backbone``."""
    spec = load_recipe(CV, [f"output_dir={tmp_path}", *CONFORMER,
                            f"base.model.config.backbone_config.conv_lookahead={lookahead}"])
    model = _base_spec(spec, tmp_path)["model"]
    assert model["init"] == "backbone" and model["config"]["backbone_config"] == {"conv_lookahead": lookahead}


@pytest.mark.parametrize("lookahead", ["chunk", 0])
def test_the_dry_run_stage_takes_conv_lookahead(tmp_path, lookahead):
    """Before: ``unknown setting(s) conv_lookahead, do_stable_layer_norm`` (XLS-R's wav2vec2 setting merged into a
    conformer config)."""
    spec = load_dry_run_recipe(CV, [f"output_dir={tmp_path / 'cv'}", *CONFORMER,
                                    f"base.model.config.backbone_config.conv_lookahead={lookahead}"], DryRunSettings())
    model = _base_spec(spec, tmp_path)["model"]
    backbone = model["config"]["backbone_config"]
    assert model["init"] == "config" and backbone["conv_lookahead"] == lookahead
    assert backbone["hidden_size"] == 1024 and "do_stable_layer_norm" not in backbone


def test_from_backbone_puts_conv_lookahead_on_the_checkpoint(tmp_path):
    from transformers import Wav2Vec2ConformerModel

    config = tiny_config("wav2vec2_conformer").backbone_config
    Wav2Vec2ConformerModel(config).save_pretrained(tmp_path / "ckpt")
    model = AdaptSpeechForCTC.from_backbone(str(tmp_path / "ckpt"), backbone_type="wav2vec2_conformer",
                                            vocab_size=12, backbone_config={"conv_lookahead": "chunk"})
    convs = [layer.conv_module.depthwise_conv for layer in model.backbone.encoder.layers]
    assert convs and all(isinstance(conv, ChunkDepthwiseConv1d) for conv in convs)
    assert model.config.backbone_config.conv_lookahead == "chunk"
    assert model.config.backbone_config.hidden_size == config.hidden_size  # the checkpoint's own config
    causal = AdaptSpeechForCTC.from_backbone(str(tmp_path / "ckpt"), backbone_type="wav2vec2_conformer",
                                             vocab_size=12, backbone_config={"conv_lookahead": 0})
    assert all(isinstance(layer.conv_module.depthwise_conv, ShiftedDepthwiseConv1d)
               for layer in causal.backbone.encoder.layers)
    reference = Wav2Vec2ConformerModel.from_pretrained(tmp_path / "ckpt").state_dict()
    weights = model.backbone.state_dict()
    differ = [k for k, v in reference.items() if k in weights and not torch.equal(weights[k], v)]
    assert differ == []
    saved = json.loads((lambda p: (model.save_pretrained(p), (p / "config.json").read_text())[1])(tmp_path / "m"))
    assert saved["backbone_config"]["conv_lookahead"] == "chunk"


@pytest.mark.parametrize(("override", "message"), [
    ("base.model.config.backbone_config.conv_lookahead=ahead",
     "model.config.backbone_config.conv_lookahead: expected null (symmetric), chunk (dynamic chunk convolution), 0 "
     "(causal) or a look-ahead in frames, got 'ahead'"),
    ("base.model.config.backbone_config.hidden_size=8",
     "model.config.backbone_config: not used with model.init=backbone (the checkpoint's own config is loaded) but "
     "for adaptspeech's own settings (conv_lookahead); remove hidden_size"),
])
def test_bad_backbone_settings_on_the_checkpoint_are_one_line(tmp_path, override, message):
    spec = load_recipe(CV, [f"output_dir={tmp_path}", *CONFORMER, override])
    with pytest.raises(StageConfigError) as err:
        _base_spec(spec, tmp_path)
    assert str(err.value) == message


def test_conv_lookahead_on_wav2vec2_is_refused_in_one_line(tmp_path):
    spec = load_recipe(CV, [f"output_dir={tmp_path}", "base.model.config.backbone_config.conv_lookahead=0"])
    with pytest.raises(StageConfigError) as err:
        _base_spec(spec, tmp_path)
    assert str(err.value) == ("model.config.backbone_config: not used with model.init=backbone (the checkpoint's own "
                              "config is loaded) (wav2vec2 has no adaptspeech setting of its own); remove "
                              "conv_lookahead")
