"""``adaptspeech.yaml_loader``: plain scalars resolve by the YAML 1.2 core schema, errors are one line."""

from __future__ import annotations

import math

import pytest

from adaptspeech import yaml_loader
from adaptspeech.yaml_loader import YAMLSyntaxError, load

CORE_SCHEMA = [
    # null
    ("null", None), ("Null", None), ("NULL", None), ("~", None), ("", None),
    # bool: only the six spellings of true / false
    ("true", True), ("True", True), ("TRUE", True), ("false", False), ("False", False), ("FALSE", False),
    # int: base 10 (leading zeros too), 0o octal, 0x hexadecimal
    ("0", 0), ("-0", 0), ("12", 12), ("+12", 12), ("-12", -12), ("010", 10), ("007", 7),
    ("0o17", 15), ("0o0", 0), ("0x1F", 31), ("0xff", 255), ("0x0", 0),
    # float
    ("3e-4", 3e-4), ("1e3", 1000.0), ("1E5", 1e5), ("12e03", 12000.0), ("-1.5E+3", -1500.0), ("1.", 1.0),
    (".5", 0.5), ("+.5", 0.5), ("-.5", -0.5), ("0.1", 0.1), ("1.0e3", 1000.0),
    (".inf", math.inf), (".Inf", math.inf), (".INF", math.inf), ("+.inf", math.inf), ("-.inf", -math.inf),
    # strings: YAML 1.1 booleans, base 60, dates, underscores, binary, malformed numbers
    ("yes", "yes"), ("no", "no"), ("on", "on"), ("off", "off"), ("y", "y"), ("n", "n"), ("Yes", "Yes"),
    ("tRue", "tRue"), ("1:30", "1:30"), ("190:20:30", "190:20:30"), ("2024-05-01", "2024-05-01"),
    ("2001-12-14t21:59:43.10-05:00", "2001-12-14t21:59:43.10-05:00"), ("1_000", "1_000"), ("0b101", "0b101"),
    ("0o8", "0o8"), ("+0o17", "+0o17"), ("-0x1F", "-0x1F"), ("0x_1F", "0x_1F"), ("1e", "1e"), ("e3", "e3"),
    ("inf", "inf"), ("nan", "nan"), ("-.nan", "-.nan"), ("'010'", "010"), ("!!str 10", "10"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "expected"), CORE_SCHEMA)
def test_plain_scalars_resolve_by_the_core_schema(text, expected):
    value = load(text)
    assert type(value) is type(expected)
    assert value == expected


@pytest.mark.parametrize("text", [".nan", ".NaN", ".NAN"])
def test_nan(text):
    value = load(text)
    assert isinstance(value, float) and math.isnan(value)


def test_a_training_config_keeps_its_types():
    text = "learning_rate: 3e-4\neval_strategy: no\nmax_steps: 010\nwarmup: ~\nbf16: false\nsince: 2024-05-01\n"
    assert load(text) == {
        "learning_rate": 0.0003,
        "eval_strategy": "no",
        "max_steps": 10,
        "warmup": None,
        "bf16": False,
        "since": "2024-05-01",
    }


def test_nested_values_anchors_and_merge_keys():
    text = "base: &b {lr: 1e-3, layers: [1, 2]}\nrun:\n  <<: *b\n  lr: 5e-3\n"
    assert load(text) == {"base": {"lr": 1e-3, "layers": [1, 2]}, "run": {"lr": 5e-3, "layers": [1, 2]}}


def test_a_yaml_1_1_directive_does_not_bring_back_1_1_types():
    assert load("%YAML 1.1\n---\n[010, no, 1:30]\n") == [10, "no", "1:30"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: 1\na: 2\n", 'found duplicate key "a"'),
        ("a: [1, 2\n", "expected ',' or ']'"),
        ("a: b: c\n", "line 1"),
        ("a\n---\nb\n", "expected a single document"),
        ("x: !!python/object/apply:os.system [ls]\n", "could not determine a constructor"),
    ],
)
def test_errors_are_one_line_of_one_type(text, message):
    with pytest.raises(YAMLSyntaxError) as info:
        load(text)
    assert message in str(info.value) and "\n" not in str(info.value)
    assert isinstance(info.value, ValueError)  # the command line prints a ValueError as one line


def test_public_names():
    assert set(yaml_loader.__all__) == {"CORE_SCHEMA_RESOLVERS", "CoreSchemaResolver", "YAMLSyntaxError", "load"}
