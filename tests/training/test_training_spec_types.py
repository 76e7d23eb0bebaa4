"""Every stage setting is checked against its declared type: a string where a bool is expected, a typo in
``backbone_config``, a language list given as one string, ``model.head``, a language code that is not ISO-like -- each
is refused with one line naming the setting, the expected type and the value (or read as documented)."""

from __future__ import annotations

import pytest

from adaptspeech import yaml_loader
from adaptspeech.overrides import apply_overrides
from adaptspeech.training.spec_types import (
    DATA_TYPES,
    EVALUATION_TYPES,
    MODEL_TYPES,
    STAGE_TYPES,
    TRAINABLE_TYPES,
)
from adaptspeech.training.stage import StageConfigError, StageSpec
from adaptspeech.training.training_settings import TRAINING_RANGES, TrainingSettings, check_training_arguments

TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}


def base(tmp_path) -> dict:
    return {
        "name": "x",
        "output_dir": str(tmp_path / "run"),
        "data": {"prepared_dir": "p", "train_languages": ["ro", "cs"]},
        "model": {"init": "config", "config": {"backbone_type": "fbank_conformer", "backbone_config": dict(TINY)}},
    }


def refused(spec: dict, overrides: list[str]) -> str:
    with pytest.raises(StageConfigError) as info:
        StageSpec.from_dict(apply_overrides(spec, overrides))
    message = str(info.value)
    assert "\n" not in message
    return message


def test_the_string_no_is_not_true(tmp_path):
    """YAML 1.2: ``no`` is the string "no", which Python takes as true; before the check the backbone trained."""
    assert yaml_loader.load("no") == "no"
    message = refused(base(tmp_path), ["model.trainable.backbone=no"])
    assert message == "model.trainable.backbone: expected true or false, got 'no'"
    spec = StageSpec.from_dict(apply_overrides(base(tmp_path), ["model.trainable.backbone=false"]))
    assert spec.model["trainable"]["backbone"] is False
    assert StageSpec.from_dict(apply_overrides(base(tmp_path), ["evaluation.method=null"])).evaluation["method"] is None


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("name=[a]", "name: expected a non-empty string, got ['a']"),
        ("seed=1.5", "seed: expected an integer, got 1.5"),
        ("data.subset_seed=abc", "data.subset_seed: expected an integer, got 'abc'"),
        ("data.max_eval_rows=0", "data.max_eval_rows: expected a positive integer or null, got 0"),
        ("data.language_sampling_temperature=0", "data.language_sampling_temperature: expected a number > 0 or null"),
        ("data.language_sampling_temperature=hot", "expected a number > 0 or null, got 'hot'"),
        ("model.trainable.fusion=yes", "model.trainable.fusion: expected true or false, got 'yes'"),
        ("model.trainable.head=1", "model.trainable.head: expected true or false, got 1"),
        ("model.trainable.feature_encoder=off", "model.trainable.feature_encoder: expected true or false or null"),
        ("model.gradient_check_steps=-1", "model.gradient_check_steps: expected an integer >= 0, got -1"),
        ("model.init=hub", "model.init: expected one of the allowed values: config, pretrained, backbone"),
        ("evaluation.batch_size=big", "evaluation.batch_size: expected a positive integer, got 'big'"),
        ("evaluation.method=greedy", "evaluation.method 'greedy' unknown; allowed values: attention_beam"),
        ("evaluation.options=3", "evaluation.options: expected a mapping of settings or null, got 3"),
        ("model.config.ctc_weight=high", "model.config.ctc_weight: expected a number, got 'high'"),
        ("model.config.fusion_active=no", "model.config.fusion_active: expected true or false, got 'no'"),
        ("model.add_adapters.ro.layer_norm=no", "model.add_adapters.ro.layer_norm: expected true or false, got 'no'"),
        ("model.add_adapters.ro.bottleneck=8.5", "model.add_adapters.ro.bottleneck: expected an integer, got 8.5"),
        ("model.fusion.include_self=no", "model.fusion.include_self: expected true or false, got 'no'"),
        ("model.config.las.location_aware=no", "model.config.las.location_aware: expected true or false, got 'no'"),
    ],
)
def test_every_section_is_type_checked(tmp_path, override, message):
    assert message in refused(base(tmp_path), [override])


def test_every_declared_setting_has_a_type_table():
    """One table per section, and the tables are what the stage accepts."""
    from adaptspeech.training import stage

    assert tuple(STAGE_TYPES) == stage.STAGE_SECTIONS
    assert tuple(DATA_TYPES) == stage.DATA_KEYS and tuple(MODEL_TYPES) == stage.MODEL_KEYS
    assert tuple(TRAINABLE_TYPES) == stage.TRAINABLE_KEYS and tuple(EVALUATION_TYPES) == stage.EVALUATION_KEYS


def test_a_typo_inside_backbone_config_names_the_closest_key(tmp_path):
    """Before: ``hiden_size: 16`` was written into config.json and ignored."""
    message = refused(base(tmp_path), ["model.config.backbone_config.hiden_size=16"])
    assert message.startswith("model.config.backbone_config: unknown setting(s) hiden_size (did you mean hidden_size?)")


def test_a_backbone_value_of_the_wrong_type_is_one_line(tmp_path):
    """Before: ``hidden_size=abc`` ended in a full traceback."""
    assert refused(base(tmp_path), ["model.config.backbone_config.hidden_size=abc"]) == (
        "model.config.backbone_config.hidden_size: expected an integer, got 'abc'"
    )
    message = refused(base(tmp_path), ["model.config.backbone_config.hidden_dropout=none"])
    assert message == "model.config.backbone_config.hidden_dropout: expected a number, got 'none'"
    message = refused(base(tmp_path), ["model.config.backbone_config.apply_spec_augment=no"])
    assert "apply_spec_augment: expected true or false, got 'no'" in message


def test_backbone_config_is_checked_against_the_chosen_backbone(tmp_path):
    # wav2vec2 has conv_dim, the fbank conformer takes num_mel_bins
    spec = apply_overrides(base(tmp_path), ["model.config.backbone_type=wav2vec2"])
    spec["model"]["config"]["backbone_config"] = {"hidden_size": 32, "conv_dim": [16, 16], "mask_time_prob": 0}
    StageSpec.from_dict(spec)
    assert "num_mel_bins" in refused(spec, ["model.config.backbone_config.num_mel_bins=16"])


def test_unknown_model_config_keys_name_the_closest_valid_one(tmp_path):
    message = refused(base(tmp_path), ["model.config.adapter_default={bottleneck: 8}"])
    assert message.startswith("model.config: unknown setting(s) adapter_default (did you mean adapter_defaults?)")
    assert "backbone_type" in message  # the allowed settings are listed
    message = refused(base(tmp_path), ["model.config.backbone_type=conformer"])
    assert "model.config.backbone_type: expected one of the allowed values: fbank_conformer" in message


def test_model_config_with_a_pretrained_model_is_refused(tmp_path):
    message = refused(base(tmp_path), ["model.init=pretrained", "model.path=somewhere"])
    assert message.startswith("model.config: not used with model.init=pretrained")


def test_model_head_is_refused_with_the_place_of_the_head(tmp_path):
    """``model.head`` was accepted and ignored; the head is ``model.config.head``."""
    message = refused(base(tmp_path), ["model.head=las"])
    assert "model: unknown setting(s) head (the head is model.config.head" in message


def test_a_single_language_is_a_one_element_list(tmp_path):
    """Before: ``data.train_languages=ro`` was read as ['r', 'o']."""
    spec = StageSpec.from_dict(
        apply_overrides(base(tmp_path), ["data.train_languages=ro", "data.eval_languages=cs",
                                         "model.trainable.adapters=ro", "model.active_languages=ro"])
    )
    assert spec.data["train_languages"] == ["ro"] and spec.data["eval_languages"] == ["cs"]
    assert spec.model["trainable"]["adapters"] == ["ro"] and spec.model["active_languages"] == ["ro"]


@pytest.mark.parametrize(
    ("override", "setting"),
    [
        ("data.train_languages=[Romanian]", "data.train_languages"),
        ("data.train_languages=ro,cs", "data.train_languages"),
        ("data.eval_languages=[ro, 'c s']", "data.eval_languages"),
        ("model.active_languages=[RO]", "model.active_languages"),
        ("model.trainable.adapters=[r]", "model.trainable.adapters"),
        ("model.add_adapters={romanian: {bottleneck: 8}}", "model.add_adapters"),
        ("model.config.adapter_languages=[ro, 12]", "model.config.adapter_languages"),
        ("model.fusion={languages: [ro, Czech]}", "model.fusion.languages"),
        ("model.fusion={languages: [ro], target_language: x}", "model.fusion.target_language"),
    ],
)
def test_language_codes_must_be_iso_like(tmp_path, override, setting):
    message = refused(base(tmp_path), [override])
    assert message.startswith(f"{setting}: expected a ") and "language code" in message


def test_iso_like_codes_with_subtags_pass(tmp_path):
    override = "data.train_languages=[pt-BR, zh-CN, rm-sursilv, yue]"
    spec = StageSpec.from_dict(apply_overrides(base(tmp_path), [override]))
    assert spec.data["train_languages"] == ["pt-BR", "zh-CN", "rm-sursilv", "yue"]



# ---- counts that must be positive, finite rates, backbone dimensions -----------------------------------------------


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("training.max_steps=-5", "training.max_steps: expected a positive integer (or -1: train "
                                  "training.num_train_epochs), got -5"),
        ("training.max_steps=0", "training.max_steps: expected a positive integer (or -1: train "
                                 "training.num_train_epochs), got 0"),
        ("training.per_device_train_batch_size=0", "training.per_device_train_batch_size: expected a positive integer, "
                                                   "got 0"),
        ("training.per_device_eval_batch_size=-1", "training.per_device_eval_batch_size: expected a positive integer, "
                                                   "got -1"),
        ("training.gradient_accumulation_steps=0", "training.gradient_accumulation_steps: expected a positive integer, "
                                                   "got 0"),
        ("training.eval_accumulation_steps=0", "training.eval_accumulation_steps: expected a positive integer or "
                                               "null, got 0"),
        ("training.num_train_epochs=-1", "training.num_train_epochs: expected a finite number > 0, got -1"),
        ("training.save_steps=0", "training.save_steps: expected a finite number > 0 (below 1: a fraction of the "
                                  "training steps), got 0"),
        ("training.logging_steps=-2", "training.logging_steps: expected a finite number > 0 (below 1: a fraction of "
                                      "the training steps), got -2"),
        ("training.eval_steps=0", "training.eval_steps: expected a finite number > 0 (below 1: a fraction of the "
                                  "training steps) or null, got 0"),
        ("training.warmup_steps=-10", "training.warmup_steps: expected a finite number >= 0 (below 1: a fraction of "
                                      "the training steps), got -10"),
        ("training.save_total_limit=0", "training.save_total_limit: expected a positive integer or null (null: keep "
                                        "every checkpoint), got 0"),
        ("training.dataloader_num_workers=-1", "training.dataloader_num_workers: expected an integer >= 0, got -1"),
    ],
)
def test_every_count_that_must_be_positive_is_checked(tmp_path, override, message):
    """Before: ``max_steps=-5`` trained 12 steps (transformers reads any max_steps <= 0 as "use the epochs") and
    ``gradient_accumulation_steps=0`` ended in ZeroDivisionError."""
    assert refused(base(tmp_path), [override]) == message


def test_the_documented_special_values_of_the_counts_pass(tmp_path):
    overrides = ["training.max_steps=-1", "training.save_steps=0.25", "training.warmup_steps=0",
                 "training.save_total_limit=null", "training.eval_steps=null", "training.dataloader_num_workers=0"]
    spec = StageSpec.from_dict(apply_overrides(base(tmp_path), overrides))
    assert spec.training["max_steps"] == -1 and spec.training["save_steps"] == 0.25
    assert spec.training.save_total_limit is None and spec.training.dataloader_num_workers == 0


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("training.learning_rate=.inf", "training.learning_rate: expected a finite number > 0, got inf"),
        ("training.learning_rate=.nan", "training.learning_rate: expected a finite number > 0, got nan"),
        ("training.learning_rate=0", "training.learning_rate: expected a finite number > 0, got 0"),
        ("training.learning_rate=-1e-3", "training.learning_rate: expected a finite number > 0, got -0.001"),
        ("training.weight_decay=.nan", "training.weight_decay: expected a finite number >= 0, got nan"),
        ("training.max_grad_norm=.inf", "training.max_grad_norm: expected a finite number >= 0 (0: no clipping), "
                                        "got inf"),
        ("training.adam_epsilon=0", "training.adam_epsilon: expected a finite number > 0, got 0"),
        ("training.adam_beta1=1.5", "training.adam_beta1: expected a number in [0, 1), got 1.5"),
        ("training.adam_beta2=.nan", "training.adam_beta2: expected a number in [0, 1), got nan"),
        ("training.label_smoothing_factor=-0.1", "training.label_smoothing_factor: expected a number in [0, 1), "
                                                 "got -0.1"),
    ],
)
def test_non_finite_and_non_positive_rates_are_refused_naming_the_setting(tmp_path, override, message):
    """Before: ``learning_rate: .inf`` trained until the loss was NaN, and the message blamed the data."""
    assert refused(base(tmp_path), [override]) == message


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("hidden_size=-4", "hidden_size: expected a positive integer, got -4"),
        ("intermediate_size=-64", "intermediate_size: expected a positive integer, got -64"),
        ("conv_depthwise_kernel_size=-7", "conv_depthwise_kernel_size: expected a positive integer, got -7"),
        ("num_attention_heads=0", "num_attention_heads: expected a positive integer, got 0"),
        ("num_mel_bins=0", "num_mel_bins: expected a positive integer, got 0"),
        ("num_hidden_layers=-1", "num_hidden_layers: expected an integer >= 0, got -1"),
        ("spec_augment_time_masks=-2", "spec_augment_time_masks: expected an integer >= 0, got -2"),
        ("hidden_dropout=1.5", "hidden_dropout: expected a number in [0, 1], got 1.5"),
        ("mask_time_prob=.nan", "mask_time_prob: expected a number in [0, 1], got nan"),
        ("layer_norm_eps=0", "layer_norm_eps: expected a finite number > 0, got 0"),
        ("initializer_range=.inf", "initializer_range: expected a finite number, got inf"),
        ("conv_dim=[16, -16]", "conv_dim: expected a list of positive integers, got [16, -16]"),
    ],
)
def test_backbone_dimensions_and_rates_out_of_range_are_one_line(tmp_path, override, message):
    """Before: a negative dimension ended in PyTorch's "Trying to create tensor with negative dimension" traceback and
    zero heads in ZeroDivisionError."""
    assert refused(base(tmp_path), [f"model.config.backbone_config.{override}"]) == (
        f"model.config.backbone_config.{message}"
    )


def test_a_backbone_without_encoder_layers_passes(tmp_path):
    spec = StageSpec.from_dict(apply_overrides(base(tmp_path), ["model.config.backbone_config.num_hidden_layers=0"]))
    assert spec.model["config"]["backbone_config"]["num_hidden_layers"] == 0


def test_a_nan_or_infinite_number_in_a_stage_file_is_refused(tmp_path):
    """YAML's ``.nan`` / ``.inf`` were numbers to the type check: training started and stopped later on its loss."""
    spec = base(tmp_path)
    spec["model"]["add_adapters"] = {"ro": {}, "cs": {}}
    spec["model"]["fusion"] = yaml_loader.load("{languages: [ro, cs], temperature: .nan}")
    with pytest.raises(StageConfigError, match=r"^model\.fusion\.temperature: expected a number, got nan$"):
        StageSpec.from_dict(spec)
    spec["model"]["fusion"] = {"languages": ["ro", "cs"]}
    assert "model.config.ctc_weight: expected a number, got inf" in refused(spec, ["model.config.ctc_weight=.inf"])
    assert "data.language_sampling_temperature: expected a number > 0 or null, got inf" in refused(
        spec, ["data.language_sampling_temperature=.inf"])


# ---- the sections read by attribute; the record of a run --------------------------------------------------------


def test_the_sections_read_by_attribute_with_the_defaults_of_their_class(tmp_path):
    spec = StageSpec.from_dict(base(tmp_path))
    data, model, evaluation = spec.data, spec.model, spec.evaluation
    assert (data.train_split, data.eval_split, data.subset_seed, data.pseudo_labelled_share) == ("train", "dev", 0, 0.5)
    assert data.evaluated_languages == ["ro", "cs"] and data.train_subset is None
    assert (model.init, model.gradient_check_steps, model.trainable) == ("config", 10, None)
    groups = model.trainable_groups  # no model.trainable: the backbone and the head train
    assert (groups.backbone, groups.head, groups.fusion, groups.lid) == (True, True, False, False)
    assert (evaluation.method, evaluation.batch_size, evaluation.options) == (None, 16, None)
    given = StageSpec.from_dict(apply_overrides(base(tmp_path), ["model.trainable={adapters: [ro]}"])).model
    assert (given.trainable_groups.backbone, given.trainable_groups.head, given.trainable_groups.adapters) == (
        False, False, ["ro"])  # a section trains what it names


def test_a_run_records_the_settings_as_written_and_an_old_record_still_resumes(tmp_path):
    """``stage_spec.json`` records each section as the file gave it (the sections' defaults are not written), so a
    record written before the sections were typed compares equal to the same spec read now."""
    from adaptspeech.training.resume import changed_settings, check_resumed_spec, save_stage_spec

    spec = apply_overrides(base(tmp_path), ["data.train_languages=ro", "evaluation.batch_size=4",
                                            "model.trainable.adapters=ro", "training.max_steps=3"])
    recorded = StageSpec.from_dict(spec).to_dict()
    old_record = {  # what the plain-mapping sections wrote for this spec
        "name": "x", "output_dir": str(tmp_path / "run"), "seed": 0, "training": {"max_steps": 3},
        "data": {"prepared_dir": "p", "train_languages": ["ro"]}, "evaluation": {"batch_size": 4},
        "model": {"init": "config", "config": {"backbone_type": "fbank_conformer", "backbone_config": dict(TINY)},
                  "trainable": {"adapters": ["ro"]}},
    }
    assert recorded == old_record
    save_stage_spec(tmp_path, old_record)
    check_resumed_spec(tmp_path, recorded)  # nothing changed: resumes
    changed = StageSpec.from_dict(apply_overrides(spec, ["data.subset_seed=1"])).to_dict()
    assert changed_settings(old_record, changed) == ["data.subset_seed: (unset) -> 1"]


@pytest.mark.parametrize(
    ("training", "message"),
    [
        ({"learning_rate": "fast"}, "training.learning_rate: expected a number, got 'fast'"),
        ({"max_steps": 2.5}, "training.max_steps: expected an integer, got 2.5"),
        ({"max_steps": True}, "training.max_steps: expected an integer, got True"),
        ({"use_cpu": "yes"}, "training.use_cpu: expected true or false, got 'yes'"),
        ({"ddp_find_unused_parameters": 1}, "expected true or false or null, got 1"),
    ],
)
def test_training_values_of_the_wrong_type_are_refused(training, message):
    with pytest.raises(StageConfigError) as info:
        check_training_arguments(training)
    assert str(info.value) == message or message in str(info.value)


def test_training_values_of_the_right_type_pass():
    values = {"learning_rate": 1, "max_steps": 10, "use_cpu": True, "ddp_find_unused_parameters": None,
              "lr_scheduler_type": "cosine", "output_dir": "x", "seed": 3, "warmup_steps": 0.1}
    assert check_training_arguments(values) == values


# ---- the training section -----------------------------------------------------------------------------------------


def test_the_training_section_reads_by_attribute_with_adaptspeechs_defaults(tmp_path):
    """adaptspeech's settings are attributes with their defaults; every other ``TrainingArguments`` field is passed
    through as given; the record (``to_dict``) holds what the file gave, in its order."""
    spec = StageSpec.from_dict(base(tmp_path))
    training = spec.training
    assert (training.logging_steps, training.save_total_limit, training.save_strategy) == (25, 2, "steps")
    assert (training.report_to, training.remove_unused_columns, training.dataloader_num_workers) == ([], False, 0)
    assert training.seed is None and training.passthrough == {} and training.to_dict() == {}
    assert spec.checkpoint_dir == tmp_path / "run" / "checkpoints"
    given = StageSpec.from_dict(apply_overrides(base(tmp_path), [
        "training.max_steps=7", "training.logging_steps=5", "training.output_dir=elsewhere", "training.use_cpu=true"]))
    assert given.training.logging_steps == 5 and given.training.passthrough == {"max_steps": 7, "use_cpu": True}
    assert given.checkpoint_dir.name == "elsewhere"
    assert list(given.to_dict()["training"]) == ["max_steps", "logging_steps", "output_dir", "use_cpu"]
    assert StageSpec.from_dict(given.to_dict()).to_dict() == given.to_dict()


def test_the_keyword_arguments_take_the_stages_values_unless_set():
    chosen = TrainingSettings.read({"max_steps": 3}).keyword_arguments("out", seed=5, progress=False)
    assert chosen == {"output_dir": "out/checkpoints", "seed": 5, "data_seed": 5, "disable_tqdm": True,
                      "label_names": ["labels"], "report_to": [], "remove_unused_columns": False,
                      "save_strategy": "steps", "save_total_limit": 2, "logging_steps": 25,
                      "dataloader_num_workers": 0, "max_steps": 3}
    given = TrainingSettings.read({"seed": 1, "disable_tqdm": False, "label_names": ["lid_targets"]})
    arguments = given.keyword_arguments("out", seed=5, progress=False, label_names=["labels"])
    assert (arguments["seed"], arguments["data_seed"], arguments["disable_tqdm"]) == (1, 5, False)
    assert arguments["label_names"] == ["lid_targets"]


def test_every_setting_of_the_training_section_is_a_training_arguments_field():
    """adaptspeech's settings and the ranged ones name ``TrainingArguments`` fields of the installed transformers
    (``warmup_ratio`` left it in 5.x)."""
    import dataclasses

    from transformers import TrainingArguments

    fields = {f.name for f in dataclasses.fields(TrainingArguments)}
    assert set(TrainingSettings.types()) <= fields and set(TRAINING_RANGES) <= fields


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("training.max_stepz=3", "training: unknown setting(s) max_stepz (did you mean max_steps?); allowed settings: "
                                 "the fields of transformers.TrainingArguments"),
        ("training.logging_step=3", "training: unknown setting(s) logging_step (did you mean logging_steps?)"),
        ("training.passthrough={}", "training: unknown setting(s) passthrough;"),
        ("training.remove_unused_columns=no", "training.remove_unused_columns: expected true or false, got 'no'"),
        ("training.output_dir=''", "training.output_dir: expected a non-empty string or null, got ''"),
        ("training.report_to=3", "training.report_to: expected a string, a list of strings or null, got 3"),
        ("training.label_names=labels", "training.label_names: expected a list of strings or null, got 'labels'"),
        ("training.seed=1.5", "training.seed: expected an integer or null, got 1.5"),
        ("training=[1]", "training: expected a mapping of settings or null, got [1]"),
    ],
)
def test_a_training_setting_that_does_not_fit_is_refused_naming_it(tmp_path, override, message):
    """An unknown key gets the one unknown-setting message (the closest ``TrainingArguments`` field); a setting of
    adaptspeech's of the wrong type names its type. Before, ``label_names: labels`` reached the Trainer as a string."""
    assert refused(base(tmp_path), [override]).startswith(message)
