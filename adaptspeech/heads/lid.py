"""Language identification head: pooled hidden states of one encoder layer -> a posterior over the model's languages.

The head reads the **shared encoder without any adapter** (the language is not known yet): the hidden states
``[B, T, D]`` of one encoder layer (``LIDConfig.layer``: 0 is the first layer's output, ``-1`` the last layer's; the
layers above it are not run) are pooled over the real frames into one vector per utterance, and a linear layer maps
it to one logit per language of ``config.lid_languages``.

Poolings (:data:`LID_POOLINGS`, one class per name, each with its options class registered in the same call):

* ``"mean_std"``: the per-dimension mean and standard deviation over the frames (x-vector statistics pooling,
  Snyder et al. 2018) -> ``[B, 2D]``;
* ``"attentive_stats"``: attentive statistics pooling (Okabe et al. 2018): a one-hidden-layer scorer
  ``e_t = v^T tanh(W h_t + b) + k`` gives each frame a weight ``alpha_t = softmax_t(e_t)``; the weighted mean
  ``mu = sum_t alpha_t h_t`` and weighted standard deviation ``sigma = sqrt(sum_t alpha_t h_t^2 - mu^2)`` are
  concatenated -> ``[B, 2D]``.

Both need two frames for a standard deviation; an utterance with a single frame is refused (one line naming its row
and how long it must be).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import nn

from ..registry import Registry
from ..settings import Settings, is_int, unknown_settings

#: the variance floor of the standard deviation (keeps ``sqrt`` differentiable on constant frames)
VARIANCE_FLOOR = 1e-5
#: the fewest real frames an utterance needs for a standard deviation
MIN_FRAMES = 2


class UtteranceTooShortError(ValueError):
    """An utterance with fewer than :data:`MIN_FRAMES` real frames at the pooled layer."""


@dataclass(frozen=True)
class AttentiveStatsOptions(Settings):
    """Options of ``"attentive_stats"``.

    Args:
        attention_dim: width of the frame scorer's hidden layer.
    """

    attention_dim: int = 64
    what: ClassVar[str] = "lid attentive_stats options"

    def __post_init__(self) -> None:
        if not is_int(self.attention_dim) or self.attention_dim < 1:
            raise ValueError(f"lid.attention_dim must be a positive integer, got {self.attention_dim!r}")


@dataclass(frozen=True)
class NoOptions(Settings):
    """A pooling without settings of its own."""

    what: ClassVar[str] = "lid pooling options"


LID_POOLINGS: Registry[type[nn.Module]] = Registry("lid pooling")
"""Pooling name -> its module class (``cls(hidden_size, options)``; forward ``(hidden [B, T, D], mask [B, T]) ->
[B, 2D]``)."""


def _check_frames(frame_mask: torch.Tensor) -> torch.Tensor:
    """Frames per utterance ``[B]`` (float), or :class:`UtteranceTooShortError` naming the first short row."""
    counts = frame_mask.sum(-1)
    short = (counts < MIN_FRAMES).nonzero()
    if len(short):
        row = int(short[0])
        raise UtteranceTooShortError(
            f"utterance {row} of the batch has {int(counts[row])} frame(s) at the language-ID layer; the pooled "
            f"statistics need at least {MIN_FRAMES} (about {MIN_FRAMES} encoder strides of audio)"
        )
    return counts.to(torch.float32)


def weighted_stats(hidden: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """``[mean, std]`` of ``hidden`` [B, T, D] under frame ``weights`` [B, T] (rows summing to 1) -> [B, 2D]."""
    weights = weights.unsqueeze(-1).to(hidden.dtype)
    mean = (weights * hidden).sum(1)
    variance = (weights * hidden.pow(2)).sum(1) - mean.pow(2)
    return torch.cat([mean, variance.clamp_min(VARIANCE_FLOOR).sqrt()], dim=-1)


@LID_POOLINGS.register("mean_std", options=NoOptions)
class MeanStdPooling(nn.Module):
    """Mean and standard deviation over the real frames (Snyder et al. 2018)."""

    def __init__(self, hidden_size: int, options: NoOptions) -> None:
        super().__init__()
        self.hidden_size = hidden_size

    def forward(self, hidden: torch.Tensor, frame_mask: torch.Tensor) -> torch.Tensor:
        """hidden [B, T, D], frame_mask [B, T] (True on real frames) -> [B, 2D]."""
        counts = _check_frames(frame_mask)
        weights = frame_mask.to(torch.float32) / counts.unsqueeze(-1)
        return weighted_stats(hidden, weights)


@LID_POOLINGS.register("attentive_stats", options=AttentiveStatsOptions)
class AttentiveStatsPooling(nn.Module):
    """Attentive statistics pooling (Okabe et al. 2018): frame weights from a small scorer, then weighted mean and
    standard deviation."""

    def __init__(self, hidden_size: int, options: AttentiveStatsOptions) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.scorer = nn.Sequential(nn.Linear(hidden_size, options.attention_dim), nn.Tanh(),
                                    nn.Linear(options.attention_dim, 1))

    def forward(self, hidden: torch.Tensor, frame_mask: torch.Tensor) -> torch.Tensor:
        """hidden [B, T, D], frame_mask [B, T] (True on real frames) -> [B, 2D]."""
        _check_frames(frame_mask)
        scores = self.scorer(hidden).squeeze(-1).to(torch.float32)  # [B, T]
        scores = scores.masked_fill(~frame_mask.bool(), float("-inf"))
        return weighted_stats(hidden, torch.softmax(scores, dim=-1))


@dataclass(frozen=True)
class LIDConfig(Settings):
    """Settings of the language-ID head (``AdaptSpeechConfig.lid``), saved flat: ``{"pooling": ..., "layer": ...,
    <the pooling's options>}``.

    Args:
        pooling: one of ``LID_POOLINGS.names()``.
        layer: the encoder layer whose output is pooled (0: the first, ``-1``: the last).
        options: the pooling's options (its registered options class).
    """

    pooling: str = "attentive_stats"
    layer: int = -1
    options: Settings = field(default_factory=AttentiveStatsOptions)
    what: ClassVar[str] = "lid"

    def __post_init__(self) -> None:
        LID_POOLINGS.check(self.pooling, "lid.pooling")
        if not is_int(self.layer):
            raise ValueError(f"lid.layer must be an integer (an encoder layer), got {self.layer!r}")
        expected = LID_POOLINGS.options(self.pooling)
        if not isinstance(self.options, expected):
            raise ValueError(f"lid: pooling {self.pooling!r} takes {expected.__name__}, got "
                             f"{type(self.options).__name__}")

    @classmethod
    def from_dict(cls, data: Any) -> LIDConfig:
        """From the flat layout; a setting that neither the head nor the chosen pooling has is refused."""
        if not isinstance(data, dict):
            raise ValueError(f"lid must be a mapping of settings, got {type(data).__name__}")
        pooling = data.get("pooling", cls.pooling)
        LID_POOLINGS.check(pooling, "lid.pooling")
        options_class = LID_POOLINGS.options(pooling)
        own = [f.name for f in dataclasses.fields(options_class)]
        allowed = ["pooling", "layer", *own]
        unknown = set(data) - set(allowed)
        if unknown:
            raise unknown_settings("lid", unknown, allowed)
        options = options_class(**{k: data[k] for k in own if k in data})
        return cls(pooling=pooling, layer=data.get("layer", cls.layer), options=options)

    def to_dict(self) -> dict[str, Any]:
        return {"pooling": self.pooling, "layer": self.layer, **self.options.to_dict()}

    def resolved_layer(self, num_layers: int) -> int:
        """The layer as an index ``0 .. num_layers - 1``.

        Raises:
            ValueError: outside ``-num_layers .. num_layers - 1``.
        """
        if not -num_layers <= self.layer < num_layers:
            raise ValueError(f"lid.layer {self.layer} is outside the encoder's layers 0..{num_layers - 1} "
                             f"(or -1..-{num_layers})")
        return self.layer % num_layers


class LIDHead(nn.Module):
    """Pooling + ``Linear(2D, L)`` over the languages.

    Args:
        hidden_size: encoder width ``D``.
        languages: the languages, in logit order.
        config: the head's settings.
    """

    def __init__(self, hidden_size: int, languages: list[str], config: LIDConfig) -> None:
        super().__init__()
        if len(languages) < 2:
            raise ValueError(f"a language-ID head needs at least 2 languages, got {languages}")
        self.languages = list(languages)
        self.config = config
        self.pooling = LID_POOLINGS.get(config.pooling)(hidden_size, config.options)
        self.classifier = nn.Linear(2 * hidden_size, len(languages))

    def forward(self, hidden: torch.Tensor, frame_mask: torch.Tensor) -> torch.Tensor:
        """hidden [B, T, D] of the chosen layer, frame_mask [B, T] -> logits [B, L] (float32)."""
        pooled = self.pooling(hidden, frame_mask)
        return self.classifier(pooled.to(self.classifier.weight.dtype)).to(torch.float32)

    @staticmethod
    def loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Cross-entropy of logits [B, L] against language indices [B]."""
        return nn.functional.cross_entropy(logits, labels)
