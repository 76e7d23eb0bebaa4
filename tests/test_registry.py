"""The name -> class table, and the options class an entry may register with itself."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from adaptspeech.registry import Registry


@dataclass
class WideOptions:
    width: int = 3


@dataclass
class WiderOptions(WideOptions):
    depth: int = 1


def table() -> Registry[type]:
    registry: Registry[type] = Registry("thing")
    registry.register("plain")(type("Plain", (), {}))
    registry.register("wide", options=WideOptions)(type("Wide", (), {}))
    registry.register("wider", options=WiderOptions)(type("Wider", (), {}))
    return registry


def test_an_entry_registers_its_options_in_the_same_call():
    registry = table()
    assert registry.options("wide") is WideOptions and registry.options("plain") is None
    assert registry.name_of_options(WiderOptions) == "wider"
    assert registry.option_owners() == {"width": ["wide", "wider"], "depth": ["wider"]}
    assert registry.option_classes() == [WideOptions, WiderOptions]
    with pytest.raises(KeyError, match="unknown thing 'narrow'; allowed values: plain, wide, wider"):
        registry.options("narrow")


def test_a_name_is_registered_once():
    registry = table()
    with pytest.raises(ValueError, match="thing 'wide' is already registered"):
        registry.register("wide")(type("Other", (), {}))
