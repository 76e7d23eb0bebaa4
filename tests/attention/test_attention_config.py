"""AttentionConfig: defaults, JSON round trips, refusals naming the setting and the allowed values."""

from __future__ import annotations

import json

import pytest

from adaptspeech.attention import ATTENTION, AttentionConfig, settings_for_kind
from adaptspeech.attention.options import LDSAOptions, RelPosOptions, SignALSHOptions


def test_kinds_are_registered() -> None:
    assert ATTENTION.names() == [
        "ldsa", "lsh_sign_alsh", "lsh_simple", "lsh_simple_alsh", "lsh_xbox", "lsh_xbox_qnf", "mhsa", "rel_pos",
        "shared_qk", "sparse_fixed", "sparse_strided", "synthesizer_dense", "synthesizer_dense_shared",
        "synthesizer_random",
    ]


def test_defaults_keep_the_backbone_attention() -> None:
    config = AttentionConfig()
    assert config.is_default
    assert config.layer_indices(12) == []
    assert config.options is None and config.chunk_size == 0 and config.num_left_chunks == -1
    with pytest.raises(AttributeError, match=r"attention\.context_width is an option of kind\(s\) ldsa, not 'default'"):
        config.context_width  # noqa: B018
    assert AttentionConfig(kind="ldsa").context_width == 15  # the kind's options read as attributes


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"kind": "ldsa", "layers": [3, 0], "context_width": 31, "hybrid": True, "chunk_size": 8},
        {"kind": "synthesizer_random", "synthesizer_init": "fixed_patterns", "synthesizer_freeze": True},
        {"kind": "rel_pos", "hidden_size": 768, "num_heads": 12, "num_left_chunks": 2, "chunk_size": 16},
    ],
)
def test_json_round_trip(settings: dict) -> None:
    config = AttentionConfig(**settings)
    again = AttentionConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert again == config
    assert again.to_dict() == config.to_dict()


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"kind": "lsh"}, ["attention.kind", "'lsh'", "default, ldsa, lsh_sign_alsh, lsh_simple"]),
        ({"kind": "ldsa", "context_width": 14}, ["attention.context_width", "odd", "14"]),
        ({"kind": "ldsa", "context_width": 0}, ["attention.context_width"]),
        ({"kind": "mhsa", "hidden_size": 30, "num_heads": 4}, ["hidden_size (30)", "num_heads (4)", "1, 2, 3, 5"]),
        ({"kind": "mhsa", "layers": [1, 1]}, ["attention.layers", "duplicates"]),
        ({"kind": "mhsa", "layers": [-1]}, ["attention.layers", ">= 0"]),
        ({"kind": "mhsa", "layers": "all"}, ["attention.layers"]),
        ({"kind": "mhsa", "dropout": 1.0}, ["attention.dropout"]),
        ({"kind": "mhsa", "dropout": "0.1"}, ["attention.dropout"]),
        ({"kind": "ldsa", "hybrid": "yes"}, ["attention.hybrid", "true or false"]),
        ({"kind": "mhsa", "chunk_size": -4}, ["attention.chunk_size"]),
        ({"kind": "mhsa", "num_left_chunks": -2}, ["attention.num_left_chunks"]),
        ({"kind": "mhsa", "hidden_size": -8}, ["attention.hidden_size"]),
        ({"kind": "synthesizer_random", "synthesizer_init": "eye"}, ["synthesizer_init", "random, fixed_patterns"]),
        ({"kind": "synthesizer_dense", "synthesizer_max_len": 0}, ["attention.synthesizer_max_len"]),
        ({"kind": "mhsa", "hybrid": True}, ["attention.hybrid=True applies only to kind(s) ldsa, not 'mhsa'"]),
        ({"kind": "synthesizer_dense", "synthesizer_freeze": True}, ["synthesizer_freeze", "synthesizer_random"]),
        ({"kind": "mhsa", "synthesizer_init": "fixed_patterns"}, ["synthesizer_init", "synthesizer_random"]),
        ({"chunk_size": 4}, ["attention.chunk_size", "mhsa"]),
    ],
)
def test_impossible_values_are_refused(settings: dict, words: list[str]) -> None:
    with pytest.raises(ValueError) as error:
        AttentionConfig(**settings)
    for word in words:
        assert word in str(error.value)


def test_from_dict_refuses_unknown_settings() -> None:
    with pytest.raises(ValueError, match=r"unknown setting.*context_size.*allowed settings: .*context_width"):
        AttentionConfig.from_dict({"kind": "ldsa", "context_size": 15})


def test_for_model_fills_in_the_backbone_widths() -> None:
    config = AttentionConfig(kind="ldsa", layers=[5, 1]).for_model(hidden_size=64, num_heads=4, num_layers=6)
    assert (config.hidden_size, config.num_heads, config.head_dim) == (64, 4, 16)
    assert config.layer_indices(6) == [1, 5]
    own_heads = AttentionConfig(kind="ldsa", num_heads=8).for_model(64, 4, 6)
    assert own_heads.num_heads == 8  # an attention may use its own head split
    assert AttentionConfig(kind="mhsa").layer_indices(3) == [0, 1, 2]


@pytest.mark.parametrize(
    ("settings", "model", "words"),
    [
        ({"kind": "mhsa", "layers": [0, 6]}, (64, 4, 6), ["[6] out of range", "6 layers", "0..5"]),
        ({"kind": "mhsa", "hidden_size": 32}, (64, 4, 6), ["hidden_size=32", "hidden_size=64"]),
        ({"kind": "mhsa", "num_heads": 5}, (64, 4, 6), ["num_heads=5", "1, 2, 4, 8, 16, 32, 64"]),
        ({"kind": "mhsa"}, (64, 5, 6), ["num_heads=5"]),
    ],
)
def test_validate_for_model_refuses_mismatches(settings: dict, model: tuple[int, int, int], words: list[str]) -> None:
    with pytest.raises(ValueError) as error:
        AttentionConfig(**settings).validate_for_model(*model)
    for word in words:
        assert word in str(error.value)


def test_building_a_module_needs_the_widths() -> None:
    with pytest.raises(ValueError, match=r"hidden_size and attention\.num_heads must be set"):
        ATTENTION.get("mhsa")(AttentionConfig(kind="mhsa"))


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"kind": "mhsa", "context_width": 7}, ["attention.context_width=7", "ldsa", "not 'mhsa'"]),
        ({"kind": "mhsa", "synthesizer_hidden": 8},
         ["attention.synthesizer_hidden=8", "synthesizer_dense, synthesizer_dense_shared", "not 'mhsa'"]),
        ({"kind": "ldsa", "synthesizer_max_len": 300}, ["attention.synthesizer_max_len=300", "synthesizer_random"]),
        ({"kind": "synthesizer_random", "synthesizer_hidden": 8}, ["attention.synthesizer_hidden=8"]),
        ({"kind": "mhsa", "query_block_size": 64}, ["attention.query_block_size=64", "rel_pos"]),
        ({"kind": "ldsa", "max_relative_positions": 100}, ["attention.max_relative_positions=100", "rel_pos"]),
        ({"kind": "mhsa", "memory_efficient_threshold": 0}, ["attention.memory_efficient_threshold=0", "rel_pos"]),
        ({"context_width": 7}, ["attention.context_width=7", "not 'default'"]),
    ],
)
def test_a_setting_of_another_kind_is_refused(settings: dict, words: list[str]) -> None:
    """docs/attention.md: kind-specific options on another kind are refused (``context_width`` and
    ``synthesizer_hidden`` on ``mhsa`` were accepted and ignored)."""
    with pytest.raises(ValueError) as error:
        AttentionConfig(**settings)
    for word in words:
        assert word in str(error.value)


def test_settings_shared_by_several_kinds_are_filtered_per_kind() -> None:
    shared = {"hidden_size": 32, "num_heads": 4, "context_width": 5, "synthesizer_max_len": 16, "hybrid": True}
    assert settings_for_kind("mhsa", shared) == {"hidden_size": 32, "num_heads": 4}
    assert settings_for_kind("ldsa", shared) == {"hidden_size": 32, "num_heads": 4, "context_width": 5,
                                                 "hybrid": True}
    assert settings_for_kind("synthesizer_dense", shared) == {"hidden_size": 32, "num_heads": 4,
                                                              "synthesizer_max_len": 16}
    for kind in ATTENTION.names():
        AttentionConfig(kind=kind, **settings_for_kind(kind, shared))  # accepted by every kind


def test_each_kind_registers_its_options_class() -> None:
    assert ATTENTION.options("ldsa") is LDSAOptions and ATTENTION.options("rel_pos") is RelPosOptions
    assert ATTENTION.options("mhsa") is None and ATTENTION.options("shared_qk") is None
    owners = ATTENTION.option_owners()
    assert owners["context_width"] == ["ldsa"]
    assert owners["synthesizer_max_len"] == ["synthesizer_dense", "synthesizer_dense_shared", "synthesizer_random"]
    assert set(owners["lsh_seed"]) == {k for k in ATTENTION.names() if k.startswith("lsh_")}


def test_the_options_are_typed_and_saved_flat() -> None:
    config = AttentionConfig(kind="lsh_sign_alsh", layers=[1], sign_alsh_m=3)
    assert config.options == SignALSHOptions(sign_alsh_m=3) and config.sign_alsh_m == 3 and config.lsh_num_keys == 64
    assert config.to_dict()["sign_alsh_m"] == 3 and "options" not in config.to_dict()
    assert "context_width" not in config.to_dict()  # another kind's options are not saved
    assert AttentionConfig(kind="lsh_sign_alsh", layers=[1], options=SignALSHOptions(sign_alsh_m=3)) == config
    assert config.to_diff_dict() == {"kind": "lsh_sign_alsh", "layers": [1], "sign_alsh_m": 3}
    assert AttentionConfig().to_diff_dict() == {"kind": "default"}
    with pytest.raises(ValueError, match=r"attention\.options: LDSAOptions given; kind 'rel_pos' takes RelPosOptions"):
        AttentionConfig(kind="rel_pos", options=LDSAOptions())


def test_a_saved_dict_with_every_kind_s_defaults_still_loads() -> None:
    """Dicts written when every option of every kind was saved (at its default) load as before."""
    flat = {f: getattr(AttentionConfig.flat_layout()(), f) for f in AttentionConfig.flat_layout().__dataclass_fields__}
    config = AttentionConfig.from_dict({**flat, "kind": "ldsa", "context_width": 5})
    assert config == AttentionConfig(kind="ldsa", context_width=5)


def test_the_flat_layout_has_every_setting_with_its_annotation() -> None:
    import typing

    layout = AttentionConfig.flat_layout()
    hints = typing.get_type_hints(layout)
    assert hints["context_width"] is int and hints["memory_efficient"] == bool | None and "options" not in hints
    assert {"kind", "layers", "chunk_size", "synthesizer_init", "lsh_seed", "sign_alsh_u"} <= set(hints)
