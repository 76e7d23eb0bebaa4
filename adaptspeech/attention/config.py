"""``AttentionConfig``: which attention the encoder uses, in which layers, with which settings.

The settings every kind shares (``kind``, ``layers``, the widths, dropout, bias, the chunk masks) are fields of
:class:`AttentionConfig`; a kind's own settings are its options class, registered with the kind
(``@ATTENTION.register("ldsa", options=LDSAOptions)``, :mod:`adaptspeech.attention.options`), so adding a kind with
settings is its own files and one registration. Both are validated once, at construction, with messages naming the
setting and the allowed values. Saved (``to_dict`` / ``from_dict``, YAML, ``config.json``) the settings are flat:
``{"kind": "ldsa", "layers": [1], "context_width": 5}``; an option of another kind is refused unless it holds its
default (``attention.context_width=7 applies only to kind(s) ldsa, not 'mhsa'``). :meth:`AttentionConfig.for_model`
fills in the widths the backbone knows (``hidden_size``, ``num_heads``) and checks the layer indices against the
model.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from ..settings import Settings, flat_layout, is_int, unknown_settings
from .chunking import require_streaming_kind
from .options import KindOptions
from .registry import ATTENTION, DEFAULT_KIND

#: the settings every kind shares (the fields of :class:`AttentionConfig` other than its options).
SHARED_SETTINGS = (
    "kind", "layers", "hidden_size", "num_heads", "dropout", "init_from_pretrained", "bias", "chunk_size",
    "num_left_chunks", "dynamic_chunks", "max_chunk_size", "dynamic_left_chunks", "chunk_distillation",
)


def settings_for_kind(kind: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` without the options of other kinds that ``kind`` does not read: one set of settings shared by
    several kinds, e.g. in a comparison, made acceptable to each."""
    owners = ATTENTION.option_owners()
    return {name: value for name, value in settings.items() if name not in owners or kind in owners[name]}


def _saved_settings() -> list[str]:
    """Every name the flat layout may hold: the shared settings and every kind's options, sorted."""
    return sorted([*SHARED_SETTINGS, *ATTENTION.option_owners()])


def _option_default(name: str, kinds: list[str]) -> Any:
    """The default of option ``name`` in the options class of ``kinds[0]``."""
    field = ATTENTION.options(kinds[0]).__dataclass_fields__[name]
    return field.default if field.default is not dataclasses.MISSING else field.default_factory()


def _kind_options(kind: str, options: KindOptions | None, settings: dict[str, Any]) -> KindOptions | None:
    """The options of ``kind``: ``options`` as given, or built from the flat ``settings`` (an option of another kind
    is refused unless it holds its default; an unknown name is refused)."""
    cls = None if kind == DEFAULT_KIND else ATTENTION.options(kind)
    if options is not None:
        if settings:
            raise ValueError(f"attention: give {sorted(settings)} inside options=, or give no options object")
        if cls is None or type(options) is not cls:
            wanted = "no options" if cls is None else cls.__name__
            raise ValueError(f"attention.options: {type(options).__name__} given; kind {kind!r} takes {wanted}")
        return options
    owners = ATTENTION.option_owners()
    own = set() if cls is None else {f.name for f in fields(cls)}
    unknown = [name for name in settings if name not in owners]
    if unknown:
        raise unknown_settings("attention config", unknown, _saved_settings())
    for name, value in settings.items():
        if name not in own and value != _option_default(name, owners[name]):
            raise ValueError(
                f"attention.{name}={value!r} applies only to kind(s) {', '.join(owners[name])}, not {kind!r}"
            )
    return None if cls is None else cls(**{name: value for name, value in settings.items() if name in own})


@dataclass(init=False)
class AttentionConfig(Settings):
    """Settings of the swappable encoder attention.

    Args:
        kind (`str`, defaults to ``"default"``): ``"default"`` keeps the backbone's own attention; otherwise a
            name registered in ``ATTENTION`` (``mhsa``, ``rel_pos``, ``ldsa``, the synthesizers, ...).
        layers (`list[int]`, *optional*): encoder layer indices (0-based) that get the new attention; ``None``
            means every encoder layer.
        hidden_size (`int`, defaults to 0): model width ``D``; 0 = filled in from the backbone's config.
        num_heads (`int`, defaults to 0): number of heads ``h``; 0 = the backbone's number of heads. It may
            differ from the backbone's (the head split is internal to the attention), but must divide
            ``hidden_size``.
        dropout (`float`, *optional*): dropout on the attention weights (training only); ``None`` (the default)
            takes the replaced attention's own dropout (the backbone's ``attention_dropout``), so a swap never
            silently changes the regularisation the backbone was configured with.
        init_from_pretrained (`bool`, defaults to `True`): start the new attention from the replaced layer's
            weights where shapes allow (q/k/v/out for ``mhsa`` and ``rel_pos``; value and output projections
            for ``ldsa`` and the synthesizers).
        bias (`bool`, defaults to `True`): affine biases in the projections (HF's attention layers have them).
        chunk_size (`int`, defaults to 0): chunk (streaming) masks. 0 = full attention; ``n > 0`` = each frame
            sees its own chunk of ``n`` frames and ``num_left_chunks`` previous chunks. Honoured by every
            kind.
        num_left_chunks (`int`, defaults to -1): previous chunks visible to a frame; -1 = all of them.
        dynamic_chunks (`bool`, defaults to `False`): dynamic chunk training (the U2 rule, Zhang et al. 2020): each
            training batch draws full context (about half the batches) or chunks of 1 .. ``max_chunk_size`` frames;
            the chunk size is chosen at decoding time (:func:`~adaptspeech.attention.chunking.chunk_attention`), full
            context when none is. Only for the kinds that can stream
            (:func:`~adaptspeech.attention.chunking.streaming_kinds`).
        max_chunk_size (`int`, defaults to 25): the largest chunk drawn (25 frames of 40 ms = 1 s, as WeNet).
        dynamic_left_chunks (`bool`, defaults to `False`): also draw the number of left chunks (else all).
        chunk_distillation (`float`, *optional*): dual-mode in-place distillation (Yu et al., ICLR 2021): in the
            batches that dynamic chunk training draws chunks for, the same batch at full context teaches the chunked
            forward, adding ``chunk_distillation * KL(p_full || p_chunk)`` over the valid frames of the CTC posteriors
            to the loss (:func:`~adaptspeech.heads.ctc.chunk_distillation_kl`); ``None`` or 0: off. Needs
            ``dynamic_chunks``.
        options (`KindOptions`, *optional*): the kind's own options (e.g.
            :class:`~adaptspeech.attention.options.LDSAOptions`); built from ``**settings`` when omitted.
        **settings: the kind's options by name (``context_width=7`` for ``ldsa``), read back as attributes
            (``config.context_width``); see each kind's options class for their meaning and defaults.
    """

    what = "attention config"

    kind: str = DEFAULT_KIND
    layers: list[int] | None = None
    hidden_size: int = 0
    num_heads: int = 0
    dropout: float | None = None
    init_from_pretrained: bool = True
    bias: bool = True
    chunk_size: int = 0
    num_left_chunks: int = -1
    dynamic_chunks: bool = False
    max_chunk_size: int = 25
    dynamic_left_chunks: bool = False
    chunk_distillation: float | None = None
    options: KindOptions | None = None

    def __init__(
        self,
        kind: str = DEFAULT_KIND,
        layers: list[int] | None = None,
        hidden_size: int = 0,
        num_heads: int = 0,
        dropout: float | None = None,
        init_from_pretrained: bool = True,
        bias: bool = True,
        chunk_size: int = 0,
        num_left_chunks: int = -1,
        dynamic_chunks: bool = False,
        max_chunk_size: int = 25,
        dynamic_left_chunks: bool = False,
        chunk_distillation: float | None = None,
        options: KindOptions | None = None,
        **settings: Any,
    ) -> None:
        self.kind = kind
        self.layers = layers
        self.hidden_size = hidden_size
        self.num_heads = num_heads
        self.dropout = dropout
        self.init_from_pretrained = init_from_pretrained
        self.bias = bias
        self.chunk_size = chunk_size
        self.num_left_chunks = num_left_chunks
        self.dynamic_chunks = dynamic_chunks
        self.max_chunk_size = max_chunk_size
        self.dynamic_left_chunks = dynamic_left_chunks
        self.chunk_distillation = chunk_distillation
        if self.kind != DEFAULT_KIND and self.kind not in ATTENTION:
            raise ValueError(
                f"attention.kind: unknown attention {self.kind!r}; allowed values: "
                f"{', '.join([DEFAULT_KIND, *ATTENTION.names()])}"
            )
        self._check_shared()
        self.options = _kind_options(self.kind, options, settings)

    def _check_shared(self) -> None:
        """Ranges of the settings every kind shares."""
        if self.layers is not None:
            if not isinstance(self.layers, (list, tuple)) or not all(is_int(i) for i in self.layers):
                raise ValueError(f"attention.layers must be a list of layer indices or None, got {self.layers!r}")
            self.layers = [int(i) for i in self.layers]
            if any(i < 0 for i in self.layers):
                raise ValueError(f"attention.layers must be >= 0 (0-based layer indices), got {self.layers}")
            if len(set(self.layers)) != len(self.layers):
                raise ValueError(f"attention.layers has duplicates: {self.layers}")
        for name in ("hidden_size", "num_heads"):
            value = getattr(self, name)
            if not is_int(value) or value < 0:
                raise ValueError(f"attention.{name} must be an integer >= 0 (0 = from the backbone), got {value!r}")
        if self.hidden_size and self.num_heads and self.hidden_size % self.num_heads:
            raise ValueError(
                f"attention.hidden_size ({self.hidden_size}) must be divisible by attention.num_heads "
                f"({self.num_heads}); allowed num_heads: {_divisors(self.hidden_size)}"
            )
        for name in ("init_from_pretrained", "bias", "dynamic_chunks", "dynamic_left_chunks"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"attention.{name} must be true or false, got {getattr(self, name)!r}")
        if self.dropout is not None and (
            isinstance(self.dropout, bool) or not isinstance(self.dropout, (int, float)) or not 0 <= self.dropout < 1
        ):
            raise ValueError(
                f"attention.dropout must be a number in [0, 1) or null (the backbone's), got {self.dropout!r}"
            )
        if not is_int(self.chunk_size) or self.chunk_size < 0:
            raise ValueError(
                f"attention.chunk_size must be 0 (full attention) or a positive frame count, got {self.chunk_size!r}"
            )
        if not is_int(self.num_left_chunks) or self.num_left_chunks < -1:
            raise ValueError(
                f"attention.num_left_chunks must be -1 (all previous chunks) or >= 0, got {self.num_left_chunks!r}"
            )
        if self.kind == DEFAULT_KIND and self.chunk_size:
            raise ValueError(
                "attention.chunk_size needs a swapped attention kind (the backbone's own attention has no "
                f"chunk masks); allowed kinds: {', '.join(ATTENTION.names())}"
            )
        self._check_dynamic_chunks()

    def _check_dynamic_chunks(self) -> None:
        """``dynamic_chunks`` only for a kind that can stream, without a fixed ``chunk_size``; ``chunk_distillation``
        a finite weight >= 0, only with ``dynamic_chunks``."""
        if not is_int(self.max_chunk_size) or self.max_chunk_size < 1:
            raise ValueError(f"attention.max_chunk_size must be a positive frame count, got {self.max_chunk_size!r}")
        weight = self.chunk_distillation
        if weight is not None:
            number = not isinstance(weight, bool) and isinstance(weight, (int, float))
            if not number or not math.isfinite(weight) or weight < 0:
                raise ValueError(
                    f"attention.chunk_distillation must be a finite weight >= 0 (0 or null: off), got {weight!r}"
                )
            if not self.dynamic_chunks:
                raise ValueError(
                    f"attention.chunk_distillation={weight!r} distils full context into the chunks that dynamic chunk "
                    "training draws: it needs attention.dynamic_chunks: true"
                )
            self.chunk_distillation = float(weight)
        if not self.dynamic_chunks:
            return
        require_streaming_kind(self.kind, "attention.dynamic_chunks")
        if self.chunk_size:
            raise ValueError(
                f"attention.dynamic_chunks draws the chunk size per batch; attention.chunk_size={self.chunk_size} "
                "would fix it: set one of them"
            )

    def __getattr__(self, name: str) -> Any:
        """The kind's options read as attributes (``config.context_width``); only called for names not found
        otherwise."""
        options = self.__dict__.get("options")
        if options is not None and name in options.__dataclass_fields__:
            return getattr(options, name)
        owners = ATTENTION.option_owners().get(name) if not name.startswith("__") else None
        if owners:
            raise AttributeError(
                f"attention.{name} is an option of kind(s) {', '.join(owners)}, not {self.__dict__.get('kind')!r}"
            )
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # --- checks against the model ---------------------------------------------------------------------------
    @property
    def is_default(self) -> bool:
        """True when the backbone keeps its own attention."""
        return self.kind == DEFAULT_KIND

    @property
    def head_dim(self) -> int:
        """``d_k = hidden_size / num_heads`` (needs both set)."""
        self.require_dims()
        return self.hidden_size // self.num_heads

    def require_dims(self) -> None:
        """Raise unless ``hidden_size`` and ``num_heads`` are set (an attention module needs them)."""
        if not self.hidden_size or not self.num_heads:
            raise ValueError(
                "attention.hidden_size and attention.num_heads must be set to build an attention module "
                f"(got {self.hidden_size} and {self.num_heads}); use AttentionConfig.for_model(...) to fill "
                "them "
                "in from the backbone"
            )

    def layer_indices(self, num_layers: int) -> list[int]:
        """The encoder layers that get the new attention (none for ``kind="default"``), sorted."""
        if self.is_default:
            return []
        return list(range(num_layers)) if self.layers is None else sorted(self.layers)

    def validate_for_model(self, hidden_size: int, num_heads: int, num_layers: int) -> None:
        """Check this config against a backbone with the given width, number of heads and of encoder layers.

        Raises:
            ValueError: naming the setting: a layer index out of range, a ``hidden_size`` other than the
                model's (the attention output feeds the layer's residual), or ``num_heads`` not dividing the
                width.
        """
        if self.layers is not None:
            bad = [i for i in self.layers if not 0 <= i < num_layers]
            if bad:
                raise ValueError(
                    f"attention.layers {bad} out of range: the encoder has {num_layers} layers, allowed "
                    "indices "
                    f"0..{num_layers - 1}"
                )
        if self.hidden_size and self.hidden_size != hidden_size:
            raise ValueError(
                f"attention.hidden_size={self.hidden_size} differs from the backbone's "
                f"hidden_size={hidden_size}; "
                "leave it 0 to take the backbone's"
            )
        heads = self.num_heads or num_heads
        if hidden_size % heads:
            raise ValueError(
                f"attention.num_heads={heads} does not divide the backbone's hidden_size={hidden_size}; "
                f"allowed values: {_divisors(hidden_size)}"
            )

    def for_model(
        self, hidden_size: int, num_heads: int, num_layers: int, dropout: float | None = None
    ) -> AttentionConfig:
        """A validated copy with ``hidden_size`` / ``num_heads`` filled in from the backbone where they are 0, and
        ``dropout`` from the backbone's attention dropout where it is None."""
        self.validate_for_model(hidden_size, num_heads, num_layers)
        return dataclasses.replace(
            self,
            hidden_size=self.hidden_size or hidden_size,
            num_heads=self.num_heads or num_heads,
            dropout=self.dropout if self.dropout is not None else float(dropout or 0.0),
        )

    # --- serialisation --------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The flat, JSON-serialisable settings: the shared ones and every option of the kind."""
        data = {name: getattr(self, name) for name in SHARED_SETTINGS}
        if data["layers"] is not None:
            data["layers"] = list(data["layers"])
        if self.options is not None:
            data.update(self.options.to_dict())
        return data

    def to_diff_dict(self) -> dict[str, Any]:
        """:meth:`to_dict` keeping ``kind`` and only the settings that differ from their defaults (what a model's
        ``config.json`` holds)."""
        defaults = AttentionConfig(kind=self.kind).to_dict()
        return {k: v for k, v in self.to_dict().items() if k == "kind" or v != defaults[k]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AttentionConfig:
        """Build from :meth:`to_dict`'s output (or a YAML / JSON section), refusing unknown settings."""
        if not isinstance(data, Mapping):
            raise ValueError(f"attention config must be a mapping of settings, got {type(data).__name__}")
        if "options" in data:
            raise unknown_settings("attention config", ["options"], _saved_settings())
        return cls(**data)

    @classmethod
    def flat_layout(cls) -> type:
        """The saved layout (the shared settings and every registered kind's options side by side) as a dataclass,
        to check a YAML / JSON section against the field annotations before it is typed."""
        return _flat_attention_layout(tuple(ATTENTION.option_classes()))


@functools.cache
def _flat_attention_layout(options: tuple[type, ...]) -> type:
    return flat_layout("FlatAttentionSettings", AttentionConfig, options, skip=("options",))


def _divisors(n: int) -> str:
    divisors = [d for d in range(1, n + 1) if n % d == 0]
    if len(divisors) > 12:
        divisors = [*divisors[:11], divisors[-1]]
        return ", ".join(str(d) for d in divisors[:11]) + f", ..., {divisors[-1]}"
    return ", ".join(str(d) for d in divisors)
