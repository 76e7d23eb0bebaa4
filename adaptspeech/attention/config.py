"""``AttentionConfig``: which attention the encoder uses, in which layers, with which settings.

A peft-style dataclass: ``__post_init__`` refuses impossible values with a message naming the setting and the
allowed values, ``to_dict`` / ``from_dict`` round-trip through JSON, and :meth:`AttentionConfig.for_model`
fills in the widths the backbone knows (``hidden_size``, ``num_heads``) and checks the layer indices against
the model.
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, fields
from typing import Any

from .registry import ATTENTION, DEFAULT_KIND

#: initialisations of the random synthesizer's attention logits.
SYNTHESIZER_INITS = ("random", "fixed_patterns")

#: the LSH / ALSH kinds of seeds/002 section 3.2 (see :mod:`.lsh`).
LSH_KINDS = ("lsh_sign_alsh", "lsh_xbox", "lsh_xbox_qnf", "lsh_simple", "lsh_simple_alsh")


_SYNTHESIZERS = ("synthesizer_dense", "synthesizer_dense_shared", "synthesizer_random")

#: settings that only some kinds read -> those kinds; a value other than the default on another kind is refused.
KIND_SETTINGS: dict[str, tuple[str, ...]] = {
    "max_relative_positions": ("rel_pos",),
    "memory_efficient_threshold": ("rel_pos",),
    "query_block_size": ("rel_pos",),
    "context_width": ("ldsa",),
    "synthesizer_hidden": ("synthesizer_dense", "synthesizer_dense_shared"),
    "synthesizer_max_len": _SYNTHESIZERS,
    "sparse_block_size": ("sparse_strided", "sparse_fixed"),
    "sparse_summary": ("sparse_fixed",),
    "lsh_num_keys": LSH_KINDS,
    "lsh_seed": LSH_KINDS,
    "sign_alsh_u": ("lsh_sign_alsh",),
    "sign_alsh_m": ("lsh_sign_alsh",),
}


def settings_for_kind(kind: str, settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` without the kind-specific ones that ``kind`` does not read (:data:`KIND_SETTINGS`, and
    ``hybrid``, ``synthesizer_init``, ``synthesizer_freeze``, ``memory_efficient``): one set of settings shared by
    several kinds, e.g. in a comparison, made acceptable to each."""
    owners = {**KIND_SETTINGS, "hybrid": ("ldsa",), "synthesizer_init": ("synthesizer_random",),
              "synthesizer_freeze": ("synthesizer_random",), "memory_efficient": ("rel_pos",)}
    return {name: value for name, value in settings.items() if name not in owners or kind in owners[name]}


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass
class AttentionConfig:
    """Settings of the swappable encoder attention.

    Args:
        kind (`str`, defaults to ``"default"``): ``"default"`` keeps the backbone's own attention; otherwise a
            name registered in ``ATTENTION`` (``mhsa``, ``rel_pos``, ``ldsa``, ``synthesizer_dense``,
            ``synthesizer_random``).
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
        max_relative_positions (`int`, defaults to 5000): ``rel_pos``: length of the initially cached sinusoid
            table (as transformers' ``max_source_positions``); longer inputs extend it.
        memory_efficient (`bool`, *optional*): ``rel_pos``: ``True`` always computes in query blocks (memory
            linear in ``T``: only ``query_block_size x T`` scores exist at a time, and backward recomputes them
            block by block), ``False`` always forms the full ``T x T`` scores (faster for short inputs, memory
            quadratic in ``T``); ``None`` (the default) picks the blockwise path for inputs longer than
            ``memory_efficient_threshold`` frames. Outputs and gradients are the same either way (to float
            rounding).
        memory_efficient_threshold (`int`, defaults to 2048): ``rel_pos`` with ``memory_efficient=None``: inputs
            of more frames than this use the blockwise path (0 = always).
        query_block_size (`int`, defaults to 256): ``rel_pos``'s blockwise path: queries per block ``B``; its
            transient memory is ``O(B T h)`` (a few ``[B, T]`` score matrices per head).
        context_width (`int`, defaults to 15): ``ldsa``: context width ``c`` (odd; the LDSA paper uses 15).
        hybrid (`bool`, defaults to `False`): ``ldsa``: LDSA followed by multi-head self-attention in the same
            sub-layer (the LDSA paper's best combination).
        synthesizer_hidden (`int`, defaults to 16): ``synthesizer_dense``: hidden size ``N`` of ``F`` (the
            seed uses 16).
        synthesizer_max_len (`int`, defaults to 1000): synthesizers: the longest sequence ``L`` (frames); the
            learned matrices are ``L`` wide and cropped to the input length. Longer inputs are refused.
        synthesizer_init (`str`, defaults to ``"random"``): ``synthesizer_random``: ``"random"`` (small random
            logits) or ``"fixed_patterns"`` (the diagonal / shifted / increasing / decreasing / random heads
            of the seed's Fig. 2a).
        synthesizer_freeze (`bool`, defaults to `False`): ``synthesizer_random``: keep the attention logits
            fixed (stored as a buffer, so no optimizer can move them).
        sparse_block_size (`int`, defaults to 16): ``sparse_strided`` / ``sparse_fixed``: the Sparse
            Transformer's stride / block length ``l`` (about ``sqrt(T)`` of typical inputs gives ``T sqrt(T)``
            time). A fixed setting, not derived from ``T``, so padding never changes the pattern.
        sparse_summary (`int`, defaults to 1): ``sparse_fixed``: summary positions ``c`` per block (the last
            ``c`` frames of each block); must be at most ``sparse_block_size``.
        lsh_num_keys (`int`, defaults to 64): LSH kinds: ``C``, the most keys a query attends to (the top ``C``
            keys sharing its hash, seeds/002 eq. 3).
        lsh_seed (`int`, defaults to 0): LSH kinds: seed of the random projections ``a`` (a buffer, saved with
            the module).
        sign_alsh_u (`float`, defaults to 0.75): ``lsh_sign_alsh``: ``U`` in ``T(x) = U x / M`` (eq. 4), in
            ``(0, 1)``.
        sign_alsh_m (`int`, defaults to 2): ``lsh_sign_alsh``: ``m``, extra dimensions of ``S`` and ``R`` (eqs.
            5-6).
    """

    kind: str = DEFAULT_KIND
    layers: list[int] | None = None
    hidden_size: int = 0
    num_heads: int = 0
    dropout: float | None = None
    init_from_pretrained: bool = True
    bias: bool = True
    chunk_size: int = 0
    num_left_chunks: int = -1
    max_relative_positions: int = 5000
    memory_efficient: bool | None = None
    memory_efficient_threshold: int = 2048
    query_block_size: int = 256
    context_width: int = 15
    hybrid: bool = False
    synthesizer_hidden: int = 16
    synthesizer_max_len: int = 1000
    synthesizer_init: str = "random"
    synthesizer_freeze: bool = False
    sparse_block_size: int = 16
    sparse_summary: int = 1
    lsh_num_keys: int = 64
    lsh_seed: int = 0
    sign_alsh_u: float = 0.75
    sign_alsh_m: int = 2

    def __post_init__(self) -> None:
        if self.kind != DEFAULT_KIND and self.kind not in ATTENTION:
            raise ValueError(
                f"attention.kind: unknown attention {self.kind!r}; allowed values: "
                f"{', '.join([DEFAULT_KIND, *ATTENTION.names()])}"
            )
        if self.layers is not None:
            if not isinstance(self.layers, (list, tuple)) or not all(_is_int(i) for i in self.layers):
                raise ValueError(f"attention.layers must be a list of layer indices or None, got {self.layers!r}")
            self.layers = [int(i) for i in self.layers]
            if any(i < 0 for i in self.layers):
                raise ValueError(f"attention.layers must be >= 0 (0-based layer indices), got {self.layers}")
            if len(set(self.layers)) != len(self.layers):
                raise ValueError(f"attention.layers has duplicates: {self.layers}")
        for name in ("hidden_size", "num_heads"):
            value = getattr(self, name)
            if not _is_int(value) or value < 0:
                raise ValueError(f"attention.{name} must be an integer >= 0 (0 = from the backbone), got {value!r}")
        if self.hidden_size and self.num_heads and self.hidden_size % self.num_heads:
            raise ValueError(
                f"attention.hidden_size ({self.hidden_size}) must be divisible by attention.num_heads "
                f"({self.num_heads}); allowed num_heads: {_divisors(self.hidden_size)}"
            )
        for name in ("init_from_pretrained", "bias", "hybrid", "synthesizer_freeze"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"attention.{name} must be true or false, got {getattr(self, name)!r}")
        if self.dropout is not None and (
            isinstance(self.dropout, bool) or not isinstance(self.dropout, (int, float)) or not 0 <= self.dropout < 1
        ):
            raise ValueError(
                f"attention.dropout must be a number in [0, 1) or null (the backbone's), got {self.dropout!r}"
            )
        if not _is_int(self.chunk_size) or self.chunk_size < 0:
            raise ValueError(
                f"attention.chunk_size must be 0 (full attention) or a positive frame count, got {self.chunk_size!r}"
            )
        if not _is_int(self.num_left_chunks) or self.num_left_chunks < -1:
            raise ValueError(
                f"attention.num_left_chunks must be -1 (all previous chunks) or >= 0, got {self.num_left_chunks!r}"
            )
        if not _is_int(self.max_relative_positions) or self.max_relative_positions < 1:
            raise ValueError(
                f"attention.max_relative_positions must be a positive integer, got {self.max_relative_positions!r}"
            )
        if self.memory_efficient is not None and not isinstance(self.memory_efficient, bool):
            raise ValueError(
                "attention.memory_efficient must be true (blockwise), false (full T x T scores) or null (blockwise "
                f"above attention.memory_efficient_threshold frames), got {self.memory_efficient!r}"
            )
        if not _is_int(self.memory_efficient_threshold) or self.memory_efficient_threshold < 0:
            raise ValueError(
                "attention.memory_efficient_threshold must be an integer >= 0 (frames; longer inputs use the "
                f"blockwise path, 0 = always), got {self.memory_efficient_threshold!r}"
            )
        if not _is_int(self.query_block_size) or self.query_block_size < 1:
            raise ValueError(
                "attention.query_block_size must be a positive integer (queries per block, e.g. 256), got "
                f"{self.query_block_size!r}"
            )
        if not _is_int(self.context_width) or self.context_width < 1 or self.context_width % 2 == 0:
            raise ValueError(
                "attention.context_width must be a positive odd integer (the window is centred on the frame: "
                f"1, 3, 5, ..., e.g. 15), got {self.context_width!r}"
            )
        for name in ("synthesizer_hidden", "synthesizer_max_len"):
            value = getattr(self, name)
            if not _is_int(value) or value < 1:
                raise ValueError(f"attention.{name} must be a positive integer, got {value!r}")
        if self.synthesizer_init not in SYNTHESIZER_INITS:
            raise ValueError(
                f"attention.synthesizer_init {self.synthesizer_init!r} unknown; allowed values: "
                f"{', '.join(SYNTHESIZER_INITS)}"
            )
        self._check_kind_specific()
        self._check_seed002_settings()

    def _check_seed002_settings(self) -> None:
        """Ranges of the sparse and LSH settings, and refusal of a changed one on a kind that ignores it."""
        for name in ("sparse_block_size", "sparse_summary", "lsh_num_keys", "sign_alsh_m"):
            value = getattr(self, name)
            if not _is_int(value) or value < 1:
                raise ValueError(f"attention.{name} must be a positive integer, got {value!r}")
        if not _is_int(self.lsh_seed) or self.lsh_seed < 0:
            raise ValueError(f"attention.lsh_seed must be an integer >= 0, got {self.lsh_seed!r}")
        if self.sparse_summary > self.sparse_block_size:
            raise ValueError(
                f"attention.sparse_summary ({self.sparse_summary}) must be at most attention.sparse_block_size "
                f"({self.sparse_block_size})"
            )
        if isinstance(self.sign_alsh_u, bool) or not isinstance(self.sign_alsh_u, (int, float)) or not (
            0 < self.sign_alsh_u < 1
        ):
            raise ValueError(f"attention.sign_alsh_u must be a number in (0, 1), got {self.sign_alsh_u!r}")
        defaults = {f.name: f.default for f in fields(self)}
        for name, kinds in KIND_SETTINGS.items():
            if getattr(self, name) != defaults[name] and self.kind not in kinds:
                raise ValueError(
                    f"attention.{name}={getattr(self, name)!r} applies only to kind(s) {', '.join(kinds)}, not "
                    f"{self.kind!r}"
                )

    def _check_kind_specific(self) -> None:
        """Settings that only make sense for one kind are refused elsewhere, so a typo does not pass
        silently."""
        if self.hybrid and self.kind != "ldsa":
            raise ValueError(f"attention.hybrid=True applies only to kind 'ldsa', not {self.kind!r}")
        if self.synthesizer_init != "random" and self.kind != "synthesizer_random":
            raise ValueError(
                f"attention.synthesizer_init={self.synthesizer_init!r} applies only to kind "
                f"'synthesizer_random', not {self.kind!r}"
            )
        if self.synthesizer_freeze and self.kind != "synthesizer_random":
            raise ValueError(
                f"attention.synthesizer_freeze=True applies only to kind 'synthesizer_random', not {self.kind!r}"
            )
        if self.memory_efficient is not None and self.kind != "rel_pos":
            raise ValueError(
                f"attention.memory_efficient={self.memory_efficient!r} applies only to kind 'rel_pos', not "
                f"{self.kind!r}"
            )
        if self.kind == DEFAULT_KIND and self.chunk_size:
            raise ValueError(
                "attention.chunk_size needs a swapped attention kind (the backbone's own attention has no "
                f"chunk masks); allowed kinds: {', '.join(ATTENTION.names())}"
            )

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
        """A JSON-serialisable dict of every setting."""
        data = asdict(self)
        if data["layers"] is not None:
            data["layers"] = list(data["layers"])
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AttentionConfig:
        """Build from :meth:`to_dict`'s output (or a YAML/JSON section), refusing unknown settings."""
        if not isinstance(data, dict):
            raise ValueError(f"attention config must be a mapping of settings, got {type(data).__name__}")
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(
                f"attention config: unknown setting(s) {', '.join(unknown)}; allowed settings: "
                f"{', '.join(sorted(names))}"
            )
        return cls(**data)


def _divisors(n: int) -> str:
    divisors = [d for d in range(1, n + 1) if n % d == 0]
    if len(divisors) > 12:
        divisors = [*divisors[:11], divisors[-1]]
        return ", ".join(str(d) for d in divisors[:11]) + f", ..., {divisors[-1]}"
    return ", ".join(str(d) for d in divisors)
