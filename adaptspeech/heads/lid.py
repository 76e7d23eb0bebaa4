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

What is pooled (``LIDConfig.layer_mix``): the output of layer ``layer`` alone (default), or a **learned layer mix**:
``sum_l softmax(w)_l h_l`` over the outputs of layers ``0 .. layer`` (one weight per layer, :class:`LayerMix`; the
ML-SUPERB 2.0 winner pools a learned weighted sum of all layers). Either way the layers above ``layer`` are not run.

The classifier (``LIDConfig.loss``): ``"cross_entropy"``, a ``Linear(2D, L)`` trained with the cross-entropy; or
``"aam_softmax"``, additive angular margin softmax (ArcFace, Deng et al. 2019; the ECAPA-TDNN language-ID recipes):
the logits are ``scale * cos(theta_l)``, the cosine between the pooled vector and language ``l``'s weight row (both
L2-normalised, no bias), and the training loss is the cross-entropy of the logits with the true language's angle
widened by ``margin``: ``scale * cos(theta_y + margin)`` (:meth:`LIDHead.loss`).
"""

from __future__ import annotations

import dataclasses
import math
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


LID_LOSSES = ("cross_entropy", "aam_softmax")
"""The classifiers / training losses of the head (see the module docstring)."""
#: the settings of ``loss: aam_softmax`` and their defaults (margin in radians)
AAM_DEFAULTS = {"margin": 0.2, "scale": 30.0}
#: the settings written to ``config.json`` only when they differ from the default (a head saved without them loads
#: as before)
_OPTIONAL_KEYS = ("layer_mix", "loss", "margin", "scale", "crop_seconds")


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class LIDConfig(Settings):
    """Settings of the language-ID head (``AdaptSpeechConfig.lid``), saved flat: ``{"pooling": ..., "layer": ...,
    <the pooling's options>}`` plus the settings below that differ from their defaults.

    Args:
        pooling: one of ``LID_POOLINGS.names()``.
        layer: the encoder layer whose output is pooled (0: the first, ``-1``: the last); with ``layer_mix`` the
            deepest layer of the mix.
        options: the pooling's options (its registered options class).
        layer_mix: pool a learned softmax-weighted sum of the outputs of layers ``0 .. layer`` (:class:`LayerMix`)
            instead of layer ``layer`` alone.
        loss: one of :data:`LID_LOSSES`.
        margin: the additive angular margin of ``aam_softmax``, radians in ``[0, pi / 2)`` (only with it).
        scale: the logit scale of ``aam_softmax``, positive (only with it).
        crop_seconds: ``[shortest, longest]``: while the head trains alone, each training utterance is cut to a random
            window of a length drawn uniformly from this range (short inputs are trained for); None: whole utterances.
    """

    pooling: str = "attentive_stats"
    layer: int = -1
    options: Settings = field(default_factory=AttentiveStatsOptions)
    layer_mix: bool = False
    loss: str = "cross_entropy"
    margin: float | None = None
    scale: float | None = None
    crop_seconds: tuple[float, float] | None = None
    what: ClassVar[str] = "lid"

    def __post_init__(self) -> None:
        LID_POOLINGS.check(self.pooling, "lid.pooling")
        if not is_int(self.layer):
            raise ValueError(f"lid.layer must be an integer (an encoder layer), got {self.layer!r}")
        expected = LID_POOLINGS.options(self.pooling)
        if not isinstance(self.options, expected):
            raise ValueError(f"lid: pooling {self.pooling!r} takes {expected.__name__}, got "
                             f"{type(self.options).__name__}")
        if not isinstance(self.layer_mix, bool):
            raise ValueError(f"lid.layer_mix must be true or false, got {self.layer_mix!r}")
        if self.loss not in LID_LOSSES:
            raise ValueError(f"lid.loss: unknown value {self.loss!r}; allowed values: {', '.join(LID_LOSSES)}")
        if self.loss == "aam_softmax":
            object.__setattr__(self, "margin", AAM_DEFAULTS["margin"] if self.margin is None else self.margin)
            object.__setattr__(self, "scale", AAM_DEFAULTS["scale"] if self.scale is None else self.scale)
            if not _is_number(self.margin) or not 0 <= self.margin < math.pi / 2:
                raise ValueError(f"lid.margin must be an angle in radians from 0 to below pi/2 (1.5708), got "
                                 f"{self.margin!r}")
            if not _is_number(self.scale) or not 0 < self.scale < math.inf:
                raise ValueError(f"lid.scale must be a positive number, got {self.scale!r}")
        else:
            given = [name for name in ("margin", "scale") if getattr(self, name) is not None]
            if given:
                raise ValueError(f"lid.{given[0]}: a setting of loss aam_softmax; this head has loss {self.loss!r}")
        if self.crop_seconds is not None:
            crop = self.crop_seconds
            if (not isinstance(crop, (list, tuple)) or len(crop) != 2 or not all(_is_number(v) for v in crop)
                    or not 0 < crop[0] <= crop[1] < math.inf):
                raise ValueError(f"lid.crop_seconds must be [shortest, longest] seconds with 0 < shortest <= longest, "
                                 f"got {crop!r}")
            object.__setattr__(self, "crop_seconds", (float(crop[0]), float(crop[1])))

    @classmethod
    def from_dict(cls, data: Any) -> LIDConfig:
        """From the flat layout; a setting that neither the head nor the chosen pooling has is refused."""
        if not isinstance(data, dict):
            raise ValueError(f"lid must be a mapping of settings, got {type(data).__name__}")
        pooling = data.get("pooling", cls.pooling)
        LID_POOLINGS.check(pooling, "lid.pooling")
        options_class = LID_POOLINGS.options(pooling)
        own = [f.name for f in dataclasses.fields(options_class)]
        allowed = ["pooling", "layer", *own, *_OPTIONAL_KEYS]
        unknown = set(data) - set(allowed)
        if unknown:
            raise unknown_settings("lid", unknown, allowed)
        options = options_class(**{k: data[k] for k in own if k in data})
        return cls(pooling=pooling, layer=data.get("layer", cls.layer), options=options,
                   **{k: data[k] for k in _OPTIONAL_KEYS if k in data})

    def to_dict(self) -> dict[str, Any]:
        out = {"pooling": self.pooling, "layer": self.layer, **self.options.to_dict()}
        if self.layer_mix:
            out["layer_mix"] = True
        if self.loss != "cross_entropy":
            out.update(loss=self.loss, margin=self.margin, scale=self.scale)
        if self.crop_seconds is not None:
            out["crop_seconds"] = list(self.crop_seconds)
        return out

    def resolved_layer(self, num_layers: int) -> int:
        """The layer as an index ``0 .. num_layers - 1``.

        Raises:
            ValueError: outside ``-num_layers .. num_layers - 1``.
        """
        if not -num_layers <= self.layer < num_layers:
            raise ValueError(f"lid.layer {self.layer} is outside the encoder's layers 0..{num_layers - 1} "
                             f"(or -1..-{num_layers})")
        return self.layer % num_layers


class LayerMix(nn.Module):
    """A learned softmax-weighted sum of the outputs of ``num_layers`` encoder layers (weights start equal).

    Args:
        num_layers: the layers mixed (``0 .. num_layers - 1``).
    """

    def __init__(self, num_layers: int) -> None:
        super().__init__()
        self.weights = nn.Parameter(torch.zeros(num_layers))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden ``[K, B, T, D]`` (layers 0 .. K-1) -> ``[B, T, D]``."""
        if hidden.shape[0] != self.weights.shape[0]:
            raise ValueError(f"the layer mix has {self.weights.shape[0]} weights, got {hidden.shape[0]} layers")
        shares = torch.softmax(self.weights.float(), dim=0).to(hidden.dtype)
        return (shares.view(-1, 1, 1, 1) * hidden).sum(0)


class LIDHead(nn.Module):
    """(Layer mix +) pooling + a classifier over the languages (``Linear(2D, L)``, or cosine logits for
    ``aam_softmax``).

    Args:
        hidden_size: encoder width ``D``.
        languages: the languages, in logit order.
        config: the head's settings.
        num_layers: the encoder's layer count (resolves ``layer`` for the layer mix; needed with ``layer_mix``).
    """

    def __init__(self, hidden_size: int, languages: list[str], config: LIDConfig,
                 num_layers: int | None = None) -> None:
        super().__init__()
        if len(languages) < 2:
            raise ValueError(f"a language-ID head needs at least 2 languages, got {languages}")
        self.languages = list(languages)
        self.config = config
        self.layer_mix = None
        if config.layer_mix:
            if num_layers is None:
                raise ValueError("lid.layer_mix: the head needs the encoder's layer count (num_layers)")
            self.layer_mix = LayerMix(config.resolved_layer(num_layers) + 1)
        self.pooling = LID_POOLINGS.get(config.pooling)(hidden_size, config.options)
        self.classifier = nn.Linear(2 * hidden_size, len(languages), bias=config.loss == "cross_entropy")

    def forward(self, hidden: torch.Tensor, frame_mask: torch.Tensor) -> torch.Tensor:
        """hidden [B, T, D] of the chosen layer (with the layer mix: [K, B, T, D] of layers 0 .. K-1), frame_mask
        [B, T] -> logits [B, L] (float32)."""
        if self.layer_mix is not None:
            hidden = self.layer_mix(hidden)
        pooled = self.pooling(hidden, frame_mask).to(self.classifier.weight.dtype)
        if self.config.loss == "aam_softmax":
            cosine = nn.functional.linear(nn.functional.normalize(pooled, dim=-1),
                                          nn.functional.normalize(self.classifier.weight, dim=-1))
            return (self.config.scale * cosine).to(torch.float32)
        return self.classifier(pooled).to(torch.float32)

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """The training loss of logits [B, L] (from :meth:`forward`) against language indices [B]: the cross-entropy;
        for ``aam_softmax`` the cross-entropy after the true language's angle is widened by the margin
        (:func:`aam_softmax_loss`)."""
        if self.config.loss == "aam_softmax":
            return aam_softmax_loss(logits / self.config.scale, labels, self.config.margin, self.config.scale)
        return nn.functional.cross_entropy(logits, labels)


def aam_softmax_loss(cosine: torch.Tensor, labels: torch.Tensor, margin: float, scale: float) -> torch.Tensor:
    """Additive angular margin softmax (ArcFace): the cross-entropy of ``scale * cos(theta)`` with the true class's
    ``cos(theta_y)`` replaced by ``cos(theta_y + margin)``.

    Where ``theta_y + margin`` would pass ``pi`` (``cos(theta_y) <= cos(pi - margin)``) the target logit is
    ``cos(theta_y) - margin * sin(margin)`` instead, which keeps it decreasing in ``theta_y`` (insightface's and
    SpeechBrain's rule).

    Args:
        cosine: ``[B, L]`` cosines in ``[-1, 1]``.
        labels: ``[B]`` true class indices.
    """
    cosine = cosine.float().clamp(-1.0, 1.0)
    sine = (1.0 - cosine.pow(2)).clamp_min(0.0).sqrt()
    widened = cosine * math.cos(margin) - sine * math.sin(margin)
    widened = torch.where(cosine > math.cos(math.pi - margin), widened, cosine - math.sin(math.pi - margin) * margin)
    target = nn.functional.one_hot(labels, cosine.shape[-1]).bool()
    return nn.functional.cross_entropy(scale * torch.where(target, widened, cosine), labels)
