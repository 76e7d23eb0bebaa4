"""The attention table: every swappable encoder attention kind registers itself here by name.

Kept in its own module so the kind modules and :mod:`.config` can import it without importing the package
``__init__`` (which imports them); ``adaptspeech.attention.ATTENTION`` is this same object.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..registry import Registry

if TYPE_CHECKING:
    from .base import EncoderAttention

#: name -> :class:`~adaptspeech.attention.base.EncoderAttention` subclass.
ATTENTION: Registry[type[EncoderAttention]] = Registry("attention")

#: the config value meaning "keep the backbone's own attention" (not a registered class).
DEFAULT_KIND = "default"
