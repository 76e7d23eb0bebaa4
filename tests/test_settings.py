"""The typed-settings helpers every settings class uses: the integer test, the strict ``from_dict``, reading by key,
and the flat layout of registered options."""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass

import pytest

from adaptspeech.settings import Settings, flat_layout, is_int, strict_from_dict


@dataclass
class Shared(Settings):
    what = "shared settings"

    name: str = "a"
    size: int = 1


@dataclass
class First(Settings):
    width: int = 3
    flag: bool | None = None


@dataclass
class Second(Settings):
    width: int = 5  # declared again: the first declaration wins in the flat layout
    labels: list[str] = dataclasses.field(default_factory=lambda: ["x"])


def test_is_int_refuses_bools_and_floats():
    assert is_int(0) and is_int(-3) and not is_int(True) and not is_int(2.0) and not is_int("2")


def test_from_dict_refuses_unknown_keys_and_non_mappings():
    assert Shared.from_dict({"size": 4}) == Shared(size=4)
    with pytest.raises(ValueError, match=r"shared settings: unknown setting\(s\) sise; allowed settings: name, size"):
        Shared.from_dict({"sise": 4})
    with pytest.raises(ValueError, match="shared settings must be a mapping of settings, got list"):
        Shared.from_dict([("size", 4)])
    assert strict_from_dict(Shared, {"name": "b"}, "x", allowed=["name"]) == Shared(name="b")


def test_settings_read_by_key_as_their_saved_dict():
    settings = Shared(size=4)
    assert settings["size"] == 4 and settings.get("name") == "a" and settings.get("other", 7) == 7
    assert Shared.parse(settings) is settings and Shared.parse({"size": 4}) == settings
    with pytest.raises(KeyError, match="shared settings has no setting 'other'; its settings: name, size"):
        settings["other"]


def test_the_flat_layout_puts_every_option_beside_the_shared_settings():
    layout = flat_layout("Flat", Shared, [First, Second], skip=["name"])
    hints = typing.get_type_hints(layout)
    assert list(hints) == ["size", "width", "flag", "labels"]
    assert hints["flag"] == bool | None and hints["labels"] == list[str]
    assert layout() == layout(size=1, width=3, flag=None, labels=["x"])


def test_a_nan_or_infinite_float_setting_is_refused_naming_it():
    """``FusionConfig(temperature=nan)`` passed ``temperature <= 0`` (nan compares false) and training stopped later
    on its loss; every float setting of a settings class is finite, built directly or from a dict."""
    from adaptspeech import AdaptSpeechConfig
    from adaptspeech.adapters.config import FusionConfig

    for value in (float("nan"), float("inf"), float("-inf")):
        with pytest.raises(ValueError, match=r"^fusion config: temperature must be a finite number, got "):
            FusionConfig(languages=["ro", "cs"], temperature=value)
    with pytest.raises(ValueError, match="fusion config: reg_weight must be a finite number, got nan"):
        AdaptSpeechConfig(adapter_languages=["ro", "cs"], fusion={"languages": ["ro", "cs"],
                                                                  "reg_weight": float("nan")})
    assert FusionConfig(languages=["ro", "cs"], temperature=2).temperature == 2
