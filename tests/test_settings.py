"""The typed-settings helpers every settings class uses: the integer test, the strict ``from_dict``, reading by key,
and the flat layout of registered options."""

from __future__ import annotations

import dataclasses
import re
import typing
from dataclasses import dataclass

import pytest

from adaptspeech.data.common_voice import parse_languages
from adaptspeech.errors import StageConfigError
from adaptspeech.settings import (
    LANGUAGES,
    NON_EMPTY_STR,
    POSITIVE_INT,
    Settings,
    SpecSection,
    check_language_code,
    check_value,
    flat_layout,
    is_int,
    is_language_code,
    optional,
    setting,
    strict_from_dict,
    unknown_settings,
    unknown_settings_message,
)


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
    message = r"shared settings: unknown setting\(s\) sise \(did you mean size\?\); allowed settings: name, size"
    with pytest.raises(ValueError, match=message):
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


# ---- one unknown-setting message, one language-code rule ----------------------------------------------------------


def test_every_unknown_setting_message_names_the_closest_allowed_setting():
    """Two builders gave two messages: settings classes listed the allowed settings without a "did you mean"."""
    message = unknown_settings_message("model", ["heda", "zzz"], ["head", "path"], hints={"zzz": "it is elsewhere"})
    assert message == ("model: unknown setting(s) heda (did you mean head?), zzz (it is elsewhere); "
                       "allowed settings: head, path")
    assert str(unknown_settings("lid", ["layers"], ["pooling", "layer"])) == (
        "lid: unknown setting(s) layers (did you mean layer?); allowed settings: pooling, layer")


CODES_OF_EVERY_RULE = ["ro", "cnh", "pt-BR", "zh-CN", "rm-sursilv", "cmn-script_simplified", "nan-tw"]
NOT_CODES = ["RO", "r", "romanian", "r o", "../x", "1234", "ro-", "", "fusion"]


@pytest.mark.parametrize("code", CODES_OF_EVERY_RULE)
def test_a_language_code_is_one_everywhere(code):
    """Three rules disagreed: MMS's ``cmn-script_simplified`` (a subtag of 10 characters) named an adapter but was
    refused in a stage spec and by ``prepare common-voice``; ``RO`` was an adapter's name and a Common Voice language
    but not a stage's."""
    assert is_language_code(code)
    assert check_language_code(code) == code  # adapters, fusion, language heads, MMS languages
    assert parse_languages([code]) == [code]  # prepare common-voice --languages
    assert check_value("data.train_languages", LANGUAGES, code) == [code]  # stage specs and recipes


@pytest.mark.parametrize("code", NOT_CODES)
def test_what_is_not_a_language_code_is_refused_everywhere(code):
    assert not is_language_code(code)
    with pytest.raises(ValueError, match=re.escape(f"language code {code!r} is not valid (ISO 639")):
        check_language_code(code)
    if code.strip():
        with pytest.raises(ValueError, match="is not a language code"):
            parse_languages([code])
    with pytest.raises(StageConfigError, match=r"data.train_languages: expected a list of language codes \(ISO 639"):
        check_value("data.train_languages", LANGUAGES, [code])


# ---- a section of a user's file, read by attribute -------------------------------------------------------------


@dataclass
class Section(SpecSection):
    what = "section"

    split: str = setting(NON_EMPTY_STR, "dev")
    languages: list[str] | None = setting(optional(LANGUAGES))
    rows: int = setting(POSITIVE_INT, 16)


def test_a_section_reads_by_attribute_with_its_defaults_and_records_what_was_given():
    section = Section.read({"languages": "ro", "rows": 4})
    assert (section.split, section.languages, section.rows) == ("dev", ["ro"], 4)
    assert section.to_dict() == {"languages": ["ro"], "rows": 4}  # the record: what the file set, normalised
    assert section["rows"] == 4 and section.get("split", "x") == "x" and section.given("rows")
    assert Section.read(None).to_dict() == {} and Section.read(None).rows == 16
    assert Section(rows=2).to_dict() == {"split": "dev", "languages": None, "rows": 2}  # built directly: every one
    assert Section.types() == {"split": NON_EMPTY_STR, "languages": Section.types()["languages"], "rows": POSITIVE_INT}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"rowz": 4}, "section: unknown setting(s) rowz (did you mean rows?); "
                      "allowed settings: languages, rows, split"),
        ({"rows": 0}, "section.rows: expected a positive integer, got 0"),
        ({"split": ""}, "section.split: expected a non-empty string, got ''"),
        ([1], "section: expected a mapping of settings, got [1]"),
    ],
)
def test_a_section_refuses_a_setting_that_does_not_fit_in_one_line(values, message):
    with pytest.raises(StageConfigError) as info:
        Section.read(values)
    assert str(info.value) == message
