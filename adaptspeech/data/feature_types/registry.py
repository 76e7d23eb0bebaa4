"""Feature types: what a model reads from a waveform, as a registry of classes.

A feature type is one class (its own module) plus one :func:`register_feature_type` call; everything that depends on
what a model reads asks it: the batch key (``input_name``), the feature size, how many input units a waveform gives and
which samples each unit reads, the samples per encoder frame that ``prepare`` assumes, how ``prepare`` stores a
prepared utterance, whether transformers' stock ``Wav2Vec2FeatureExtractor`` computes the features, what digital
silence looks like in the features, and how a model built on them maps samples to output frames.

Every feature type normalises the same way when the feature extractor's ``do_normalize`` is set: per utterance
(:func:`normalize_utterance` along the time axis, ``normalization: utterance``, the default) or, for the types
adaptspeech's own extractor computes (fbank), with a training set's per-bin statistics (``normalization: global``,
:class:`~adaptspeech.runtime.features.GlobalCmvn`); so normalisation is not a question a type answers.

``build_processor`` stores ``feature_type`` on the feature extractor; feature extractors of pretrained checkpoints
lack it and mean :data:`DEFAULT_FEATURE_TYPE`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ...registry import Registry
from ...runtime.features import NORMALIZATIONS, GlobalCmvn, normalize_utterance
from ...runtime.long_form import units_touching

__all__ = [
    "DEFAULT_FEATURE_TYPE",
    "FEATURE_TYPES",
    "FeatureType",
    "feature_type_of",
    "feature_type_of_model",
    "normalize_utterance",
    "register_feature_type",
]

DEFAULT_FEATURE_TYPE = "waveform"
"""What a feature extractor without a ``feature_type`` attribute (a pretrained checkpoint's) computes."""


@dataclass(frozen=True)
class FeatureType:
    """One model input computed from a mono waveform, with the feature extractor's settings.

    A model input is a sequence of *units*: samples for waveforms, frames of ``unit_window`` samples every
    ``unit_hop`` samples for framed features (fbank: 25-ms windows every 10 ms).

    Class attributes (each subclass sets them):
        name: the ``feature_type`` value (``build_processor``, ``prepare --feature-type``).
        input_name: the dataset column / batch key / model argument (``input_values``, ``input_features``).
        stock_extractor: transformers' ``Wav2Vec2FeatureExtractor`` computes these features itself (a processor
            saves it as it is); otherwise the processor holds an
            :class:`~adaptspeech.feature_extraction.AdaptSpeechFeatureExtractor`.
        stock_class: the class name of that transformers extractor (``Wav2Vec2FeatureExtractor``,
            ``SeamlessM4TFeatureExtractor``); :meth:`build_stock_extractor` builds it.
        encoder_stride: samples per encoder output frame that ``prepare`` assumes when it drops clips too short for
            their transcript (wav2vec2's 320; the fbank Conformer's 640).

    Args:
        sampling_rate (`int`, defaults to 16000): the rate of the waveforms.
        n_mels (`int`, defaults to 80): mel filters (fbank).
        do_normalize (`bool`, defaults to `True`): normalise the features (as ``normalization`` says).
        normalization (`str`, defaults to ``"utterance"``): ``"utterance"`` (:func:`normalize_utterance` over each
            utterance) or ``"global"`` (with ``global_cmvn``, the training set's statistics; adaptspeech's own
            extractor's types only).
        global_cmvn: the statistics ``normalization: global`` applies (None until computed).
    """

    name: ClassVar[str]
    input_name: ClassVar[str]
    stock_extractor: ClassVar[bool]
    encoder_stride: ClassVar[int]
    #: the class name of transformers' feature extractor that computes these features (``stock_extractor``).
    stock_class: ClassVar[str | None] = None
    #: :meth:`normalize` of the raw units is what the model reads, so an exported graph can normalise its raw input;
    #: False where the utterance is normalised before its units are formed (w2v-BERT's frames stacked by 2): the
    #: torch-free runtime normalises then (:func:`adaptspeech.runtime.features.stacked_fbank_numpy`).
    normalizes_raw_units: ClassVar[bool] = True

    sampling_rate: int = 16000
    n_mels: int = 80
    do_normalize: bool = True
    normalization: str = "utterance"
    global_cmvn: GlobalCmvn | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.normalization not in NORMALIZATIONS:
            raise ValueError(f"feature extractor: normalization={self.normalization!r}; allowed values: "
                             f"{', '.join(NORMALIZATIONS)}")
        if self.normalization == "global" and self.stock_extractor:
            raise ValueError(f"feature extractor: normalization='global' needs adaptspeech's own feature extractor "
                             f"(feature_type fbank); feature_type={self.name!r} is computed by transformers' "
                             f"{self.stock_class}, which normalises per utterance")

    @classmethod
    def from_extractor(cls, feature_extractor: Any) -> FeatureType:
        """This feature type with a feature extractor's settings (``sampling_rate``, ``n_mels``, ``do_normalize``,
        ``normalization``, ``global_cmvn``; 80, true, ``"utterance"`` and None where it lacks them), whatever type
        the extractor itself computes."""
        stats = getattr(feature_extractor, "global_cmvn", None)
        return cls(
            sampling_rate=int(feature_extractor.sampling_rate),
            n_mels=int(getattr(feature_extractor, "n_mels", 80)),
            do_normalize=bool(getattr(feature_extractor, "do_normalize", True)),
            normalization=str(getattr(feature_extractor, "normalization", "utterance")),
            global_cmvn=GlobalCmvn.from_dict(stats) if isinstance(stats, dict) else stats,
        )

    @staticmethod
    def of(feature_extractor: Any) -> FeatureType:
        """The feature type a feature extractor computes (:func:`feature_type_of`), with its settings."""
        return FEATURE_TYPES.get(feature_type_of(feature_extractor)).from_extractor(feature_extractor)

    @staticmethod
    def of_model(model: Any) -> FeatureType:
        """The feature type a model reads (default settings: 16 kHz), from its ``main_input_name``."""
        return FEATURE_TYPES.get(feature_type_of_model(model))()

    def build_stock_extractor(self) -> Any:
        """transformers' feature extractor computing these features with these settings, carrying ``feature_type``
        and ``n_mels`` (which transformers saves with it); only for ``stock_extractor`` types."""
        raise NotImplementedError(f"feature_type={self.name!r} has no stock transformers feature extractor")

    @property
    def feature_size(self) -> int:
        """Values per unit (1 for samples, ``n_mels`` for fbank frames)."""
        raise NotImplementedError

    @property
    def unit_window(self) -> int:
        """Samples one unit reads."""
        raise NotImplementedError

    @property
    def unit_hop(self) -> int:
        """Samples from one unit to the next."""
        raise NotImplementedError

    @property
    def framed(self) -> bool:
        """Units are frames over several samples: an utterance's features read from its own samples lie on another
        grid (phase) than those read from a longer recording."""
        return self.unit_window > 1 or self.unit_hop > 1

    def num_units(self, num_samples: int) -> int:
        """Units of the model input of ``num_samples`` samples."""
        raise NotImplementedError

    def raw(self, waveform: np.ndarray) -> np.ndarray:
        """The unnormalised model input of a ``[S]`` waveform: ``[N]`` or ``[N, feature_size]`` float32."""
        raise NotImplementedError

    def extract(self, waveform: np.ndarray) -> np.ndarray:
        """The model input of one utterance ``[S]``: :meth:`raw`, then :meth:`normalize`."""
        return self.normalize(self.raw(waveform))

    def normalize(self, raw: np.ndarray) -> np.ndarray:
        """One utterance's raw units ``[N(, F)]`` as the model reads them: normalised over the utterance when
        ``do_normalize`` (per column for framed features), or with :attr:`global_cmvn` under ``normalization:
        global``; the raw units without ``do_normalize``."""
        if not self.do_normalize:
            return raw
        if self.normalization == "global":
            return self.stats().apply(raw)
        return normalize_utterance(raw, axis=0)

    @property
    def global_normalization(self) -> bool:
        """Units are normalised with the training set's statistics (the same in every context: no window)."""
        return self.do_normalize and self.normalization == "global"

    def stats(self) -> GlobalCmvn:
        """:attr:`global_cmvn`, checked against the feature size.

        Raises:
            ValueError: none (a folder with ``normalization: global`` but no statistics), or of another size.
        """
        if self.global_cmvn is None:
            raise ValueError("feature extractor: normalization='global' but no global_cmvn statistics: they are "
                             "computed by `adaptspeech prepare --normalization global` over the training split")
        if len(self.global_cmvn.mean) != self.feature_size:
            raise ValueError(f"feature extractor: global_cmvn holds {len(self.global_cmvn.mean)} bins; "
                             f"feature_type={self.name!r} gives {self.feature_size}")
        return self.global_cmvn

    def empty(self) -> np.ndarray:
        """A model input of no units (the features of a skipped row)."""
        raise NotImplementedError

    def dataset_feature(self) -> Any:
        """The ``datasets`` feature of a prepared utterance's input column."""
        raise NotImplementedError

    def digital_silence(self, raw: np.ndarray) -> np.ndarray:
        """``[N]`` bool: units of an unnormalised model input (:meth:`raw`) that hold digital silence (runs of exact
        zeros: muted stretches, zero padding, clips joined by zeros)."""
        raise NotImplementedError

    def inputs_to_logits_ratio(self, model: Any) -> int:
        """Input samples per output frame of a model reading these features."""
        raise NotImplementedError

    def unit_samples(self, start: int, end: int) -> tuple[int, int]:
        """``(first, end)``: the samples units ``[start, end)`` read (``prepare`` of these samples gives exactly
        those units)."""
        return start * self.unit_hop, (end - 1) * self.unit_hop + self.unit_window

    def units_touching(self, marked: np.ndarray, num_units: int) -> np.ndarray:
        """``[num_units]`` bool: units whose samples hold any sample ``marked`` ``[S]`` (units past the end read
        none)."""
        return units_touching(marked, num_units, self.unit_hop, self.unit_window)

    def collate_input(self, row: Any) -> np.ndarray:
        """A prepared row's model input (its :attr:`input_name` column), float32.

        Raises:
            KeyError: the row lacks it (naming the columns it has).
        """
        if self.input_name in row:
            return np.asarray(row[self.input_name], dtype=np.float32)
        raise KeyError(f"a row for feature_type={self.name!r} needs {self.input_name!r}; it has {', '.join(row)}")


FEATURE_TYPES: Registry[type[FeatureType]] = Registry("feature type")


def register_feature_type(cls: type[FeatureType]) -> type[FeatureType]:
    """Class decorator: add a :class:`FeatureType` subclass to :data:`FEATURE_TYPES` under its ``name``."""
    return FEATURE_TYPES.register(cls.name)(cls)


def feature_type_of(feature_extractor: Any) -> str:
    """The name of the feature type a feature extractor computes: its ``feature_type`` attribute, else the type whose
    stock extractor class it is (:attr:`FeatureType.stock_class`: a pretrained checkpoint's
    ``SeamlessM4TFeatureExtractor``), else :data:`DEFAULT_FEATURE_TYPE`.

    Raises:
        ValueError: an unknown ``feature_type`` (listing the registered ones).
    """
    stock = [n for n in FEATURE_TYPES if FEATURE_TYPES.get(n).stock_class == type(feature_extractor).__name__]
    name = getattr(feature_extractor, "feature_type", stock[0] if stock else DEFAULT_FEATURE_TYPE)
    FEATURE_TYPES.check(name, "feature extractor: feature_type")
    return name


def feature_type_of_model(model: Any) -> str:
    """The name of the feature type a model (or a backbone spec) reads: the one its backbone spec names
    (:attr:`~adaptspeech.backbones.base.BackboneSpec.feature_type`), else the one whose ``input_name`` is the
    model's ``main_input_name`` (:data:`DEFAULT_FEATURE_TYPE` for any other)."""
    spec = getattr(getattr(model, "config", None), "backbone_spec", model)
    declared = getattr(spec, "feature_type", None)
    if isinstance(declared, str):
        return declared
    names = [name for name in FEATURE_TYPES if FEATURE_TYPES.get(name).input_name == model.main_input_name]
    return names[0] if names else DEFAULT_FEATURE_TYPE
