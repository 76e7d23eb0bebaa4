"""The base of an attention kind's options, and the checks the options share (messages name ``attention.<setting>``)."""

from __future__ import annotations

from ...settings import Settings, is_int


class KindOptions(Settings):
    """Base of the options of one attention kind: a dataclass, validated in ``__post_init__``, registered with its kind
    (``@ATTENTION.register("ldsa", options=LDSAOptions)``). Its fields are saved flat beside the attention's shared
    settings (``{"kind": "ldsa", "layers": [1], "context_width": 5}``); :class:`~adaptspeech.attention.AttentionConfig`
    reads them as its own attributes (``config.context_width``)."""

    what = "attention options"


def require_positive_int(name: str, value: object, hint: str = "") -> None:
    """ValueError ``attention.<name> must be a positive integer<hint>, got <value>`` unless ``value`` is one."""
    if not is_int(value) or value < 1:
        raise ValueError(f"attention.{name} must be a positive integer{hint}, got {value!r}")


def require_bool(name: str, value: object) -> None:
    """ValueError ``attention.<name> must be true or false`` unless ``value`` is a bool."""
    if not isinstance(value, bool):
        raise ValueError(f"attention.{name} must be true or false, got {value!r}")
