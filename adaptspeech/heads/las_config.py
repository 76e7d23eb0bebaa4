"""Configuration of the Listen-Attend-Spell head (listener + attention + speller).

The LAS head is built from one :class:`LASConfig`, as every adaptspeech module is built from its
config. The joint CTC/attention model keeps this config as a plain dict (``to_dict``) inside its
``AdaptSpeechConfig`` so that it round-trips through ``save_pretrained`` / ``from_pretrained``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..settings import strict_from_dict


def _fail(name: str, value: object, allowed: str) -> None:
    raise ValueError(f"LASConfig.{name}={value!r} is not allowed; allowed values: {allowed}")


def _check_int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        _fail(name, value, f"integers >= {minimum}")


def _check_fraction(name: str, value: object, *, inclusive_one: bool) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        ok = False
    else:
        ok = 0.0 <= value <= 1.0 if inclusive_one else 0.0 <= value < 1.0
    if not ok:
        _fail(name, value, "numbers in [0, 1]" if inclusive_one else "numbers in [0, 1)")


@dataclass
class LASConfig:
    """Settings of :class:`~adaptspeech.heads.las.LASDecoder`.

    Args:
        vocab_size (`int`, defaults to 32): output vocabulary size V, special tokens included.
        encoder_hidden_size (`int`, defaults to 256): width D of the encoder output the head reads.
        sos_id (`int`, *optional*): start-of-sentence id; defaults to ``vocab_size - 1`` (ESPnet's shared
            ``<sos/eos>`` as the last vocabulary entry).
        eos_id (`int`, *optional*): end-of-sentence id; defaults to ``vocab_size - 1``.
        pad_id (`int`, defaults to 0): id fed to the embedding at padded label positions (never a target;
            usually also the CTC blank).
        listener_layers (`int`, defaults to 0): pyramidal BLSTM layers on top of the encoder, each halving
            the frame rate; 0 uses the encoder output as is.
        listener_hidden (`int`, defaults to 128): hidden size per direction of each pBLSTM layer (the
            listener's output width is ``2 * listener_hidden``).
        decoder_layers (`int`, defaults to 1): stacked LSTM cells in the speller.
        decoder_hidden (`int`, defaults to 256): width of the speller state s_i.
        embedding_dim (`int`, defaults to 128): width of the label embedding of y_(i-1).
        attention_dim (`int`, defaults to 128): width K of phi(s_i) = W s_i and psi(h_u) = U h_u.
        attention_heads (`int`, defaults to 1): 1 is the seed's single content attention; more heads split
            the K dimension and use a value projection (see ``las_attention.py``).
        location_aware (`bool`, defaults to `False`): add convolutional location features of the previous
            attention weights to the keys (Chorowski et al., 2015).
        location_kernel_size (`int`, defaults to 31): odd kernel width of the location convolution.
        location_channels (`int`, defaults to 10): channels of the location convolution.
        label_smoothing (`float`, defaults to 0.0): label smoothing of the attention cross-entropy, in [0, 1).
        scheduled_sampling (`float`, defaults to 0.0): probability, per utterance and step, of feeding the
            model's own previous argmax instead of the reference label while training, in [0, 1].
        dropout (`float`, defaults to 0.0): dropout on embeddings, between LSTM layers and before the
            character distribution, in [0, 1).
        max_target_length (`int`, defaults to 256): longest label sequence accepted in training and the
            hard cap on decoded lengths.
    """

    vocab_size: int = 32
    encoder_hidden_size: int = 256
    sos_id: int | None = None
    eos_id: int | None = None
    pad_id: int = 0
    listener_layers: int = 0
    listener_hidden: int = 128
    decoder_layers: int = 1
    decoder_hidden: int = 256
    embedding_dim: int = 128
    attention_dim: int = 128
    attention_heads: int = 1
    location_aware: bool = False
    location_kernel_size: int = 31
    location_channels: int = 10
    label_smoothing: float = 0.0
    scheduled_sampling: float = 0.0
    dropout: float = 0.0
    max_target_length: int = 256

    def __post_init__(self) -> None:
        _check_int("vocab_size", self.vocab_size, 2)
        for name in ("encoder_hidden_size", "listener_hidden", "decoder_layers", "decoder_hidden",
                     "embedding_dim", "attention_dim", "attention_heads", "location_channels",
                     "max_target_length"):
            _check_int(name, getattr(self, name), 1)
        _check_int("listener_layers", self.listener_layers, 0)
        if self.sos_id is None:
            self.sos_id = self.vocab_size - 1
        if self.eos_id is None:
            self.eos_id = self.vocab_size - 1
        ids = f"integers in [0, {self.vocab_size - 1}]"
        for name in ("sos_id", "eos_id", "pad_id"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < self.vocab_size:
                _fail(name, value, ids)
        for name in ("sos_id", "eos_id"):
            if getattr(self, name) == self.pad_id:
                _fail(name, getattr(self, name), f"{ids} other than pad_id={self.pad_id}")
        if not isinstance(self.location_aware, bool):
            _fail("location_aware", self.location_aware, "True, False")
        _check_int("location_kernel_size", self.location_kernel_size, 1)
        if self.location_kernel_size % 2 == 0:
            _fail("location_kernel_size", self.location_kernel_size, "odd integers >= 1")
        _check_fraction("label_smoothing", self.label_smoothing, inclusive_one=False)
        _check_fraction("scheduled_sampling", self.scheduled_sampling, inclusive_one=True)
        _check_fraction("dropout", self.dropout, inclusive_one=False)
        heads = self.attention_heads
        for name, width in (("attention_dim", self.attention_dim), ("listener output", self.memory_size)):
            if width % heads:
                divisors = [d for d in range(1, width + 1) if width % d == 0]
                _fail("attention_heads", heads,
                      f"divisors of the {name} width {width}: {', '.join(map(str, divisors))}")

    @property
    def memory_size(self) -> int:
        """Width of the sequence the speller attends over (the listener's output)."""
        return 2 * self.listener_hidden if self.listener_layers else self.encoder_hidden_size

    def to_dict(self) -> dict[str, Any]:
        """All settings as a JSON-serialisable dict (special ids resolved)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> LASConfig:
        """Build from a dict written by :meth:`to_dict`; unknown keys are refused, naming them."""
        return strict_from_dict(cls, values, "LASConfig", allowed=[f.name for f in dataclasses.fields(cls)])
