"""The caches a stream carries from one chunk to the next, for the modules that need their past: each swapped
attention layer (keys / values of the allowed left chunks) and each streaming depthwise convolution (its last ``k - 1``
input frames when causal, ``(k - 1) / 2`` when dynamic-chunk: :mod:`adaptspeech.backbones.causal_conv`).

:func:`streaming` puts one :class:`StreamState` in a :class:`contextvars.ContextVar` around a chunk's forward; a module
that streams reads and replaces its own entry (keyed by the module itself), so the encoder layers run their ordinary
``forward`` (and the adapter and fusion hooks on them run unchanged) while their attention and convolution continue
where the previous chunk stopped. Outside :func:`streaming` every module computes on the whole sequence.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

from torch import nn

_STREAM: ContextVar[StreamState | None] = ContextVar("adaptspeech_stream", default=None)


class StreamState:
    """Per-module caches of one stream (one utterance, or a batch of equal-length ones)."""

    def __init__(self) -> None:
        self._caches: dict[int, tuple[nn.Module, Any]] = {}

    def get(self, module: nn.Module) -> Any:
        """``module``'s cache from the previous chunk, or None at the start of the stream."""
        entry = self._caches.get(id(module))
        return None if entry is None else entry[1]

    def put(self, module: nn.Module, cache: Any) -> None:
        """Keep ``module``'s cache for the next chunk."""
        self._caches[id(module)] = (module, cache)

    def __len__(self) -> int:
        return len(self._caches)

    def values(self) -> list[Any]:
        """Every module's cache (for measuring the state's size)."""
        return [cache for _, cache in self._caches.values()]


def current_stream() -> StreamState | None:
    """The stream of the running chunk, or None (whole-sequence forward)."""
    return _STREAM.get()


@contextlib.contextmanager
def streaming(state: StreamState) -> Iterator[StreamState]:
    """Run the block as the next chunk of the stream whose caches ``state`` holds."""
    token = _STREAM.set(state)
    try:
        yield state
    finally:
        _STREAM.reset(token)
