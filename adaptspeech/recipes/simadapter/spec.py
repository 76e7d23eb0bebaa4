"""The settings of a SimAdapter protocol recipe (:mod:`~adaptspeech.recipes.simadapter.protocol`), typed: the corpus,
the data preparation, the languages, the stage files and the test-set evaluation.

``recipe.yaml`` (with :mod:`~adaptspeech.recipes.spec`'s settings every recipe has)::

    corpus:
      type: synthetic            # synthetic (built offline) | common_voice (a release folder or a Hub dataset id)
      root: null                 # the corpus folder (synthetic: default <output_dir>/corpus)
      clips_per_language: 1000   # synthetic only: clips per language, the build's seed (default: the recipe's),
      seed: null                 # its synthesis processes, and any other SyntheticConfig field (voices, ...)
      workers: 2
    prepare: {feature_type: fbank, max_seconds: 12}   # adaptspeech.data.prepared_corpus.prepare_corpus settings
    sources: [cs, pl, sl, it, es]
    target: sk
    target_subset: 10min         # the target's training budget in the target stages (null: all of it)
    stages: {base: stage_base.yaml, source_adapters: ..., target_adapter: ..., fusion: ...}
    baselines: {finetune: stage_finetune.yaml, scratch: stage_scratch.yaml}   # either, both or none
    evaluation: {split: test, method: ctc_beam, options: {beam_size: 8}, batch_size: 16, device: auto}
    self_training: {enabled: false, ...}   # noisy-student rounds on untranscribed audio (self_training_settings.py)

The stage files keep the stage runner's own format (:mod:`adaptspeech.training.stage`: checked by
:class:`~adaptspeech.training.stage.StageSpec` when each stage's spec is built); their languages follow ``sources`` /
``target`` (:func:`~adaptspeech.recipes.simadapter.languages.retarget_stages`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from ...data.subsets import SubsetSize
from ...data.synthetic import SyntheticConfig
from ...errors import StageConfigError
from ...settings import (
    INT,
    LANGUAGE_CODE,
    LANGUAGES,
    MAPPING,
    NON_EMPTY_STR,
    POSITIVE_INT,
    SUBSET_SIZE,
    SettingType,
    choice,
    optional,
    unknown_settings_message,
)
from ..spec import EvaluationSettings, RecipeError, RecipeSpec, Section, check_settings
from .languages import check_stage_languages, retarget_stages
from .self_training_settings import SelfTrainingSettings

STAGE_NAMES = ("base", "source_adapters", "target_adapter", "fusion")
BASELINE_NAMES = ("finetune", "scratch")
CORPUS_TYPES = ("synthetic", "common_voice")
#: the corpus settings that are not fields of the synthetic corpus's SyntheticConfig
_CORPUS_KEYS = ("type", "root", "clips_per_language", "seed", "workers")


@dataclass(frozen=True)
class CorpusSettings(Section):
    """The recipe's ``corpus`` section (module docstring).

    Args:
        type: ``synthetic`` or ``common_voice``.
        root: the corpus folder or Hub dataset id (synthetic: None builds it in ``<output_dir>/corpus``).
        clips_per_language, seed, workers: the synthetic build's size, seed (None: the recipe's) and processes.
        synthetic: any other :class:`~adaptspeech.data.synthetic_plan.SyntheticConfig` field (voices, noise_snr_db...).
    """

    type: str = "synthetic"
    root: str | None = None
    clips_per_language: int = 1000
    seed: int | None = None
    workers: int = 2
    synthetic: Mapping[str, Any] = field(default_factory=dict)

    SETTINGS: ClassVar[Mapping[str, SettingType]] = {
        "type": choice(*CORPUS_TYPES),
        "root": optional(NON_EMPTY_STR),
        "clips_per_language": POSITIVE_INT,
        "seed": optional(INT),
        "workers": POSITIVE_INT,
    }

    @classmethod
    def from_dict(cls, section: str, values: Any, error: type[RecipeError] = RecipeError) -> CorpusSettings:
        """The section from its flat mapping: the keys of :attr:`SETTINGS`, and SyntheticConfig fields for a
        synthetic corpus."""
        values = dict(values or {})
        if "kind" in values:
            raise error(f"{section}.kind: the corpus's type is set as {section}.type (synthetic or common_voice)")
        corpus_type = values.get("type", "synthetic")
        synthetic_fields = {f.name for f in dataclasses.fields(SyntheticConfig)} - {"seed", "clips_per_language"}
        table = dict(cls.SETTINGS)
        if corpus_type == "synthetic":
            table.update({name: SettingType("a SyntheticConfig value", lambda v: True) for name in synthetic_fields})
        checked = check_settings(section, values, table, error)
        own = {key: checked.pop(key) for key in _CORPUS_KEYS if key in checked}
        return cls(**own, synthetic=checked)

    def to_dict(self) -> dict[str, Any]:
        own = {name: getattr(self, name) for name in _CORPUS_KEYS}
        return {**own, **{key: value for key, value in self.synthetic.items()}}

    def synthetic_config(self) -> Any:
        """The :class:`~adaptspeech.data.synthetic_plan.SyntheticConfig` of the corpus's word lists and sentences (its
        fields set here; the seed and the size left at their defaults: they do not change the word lists)."""
        if self.type != "synthetic":
            return SyntheticConfig()
        return SyntheticConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in self.synthetic.items()})


@dataclass(frozen=True)
class ProtocolEvaluation(EvaluationSettings):
    """The protocol's ``evaluation`` section: :class:`~adaptspeech.recipes.spec.EvaluationSettings` and the device.

    Args:
        device: ``auto`` (the device the stages trained on), or ``cpu``, ``cuda``, ``cuda:1``, ``mps``.
    """

    device: str = "auto"

    SETTINGS: ClassVar[Mapping[str, SettingType]] = {**EvaluationSettings.SETTINGS, "device": NON_EMPTY_STR}


@dataclass(frozen=True, kw_only=True)
class SimAdapterRecipe(RecipeSpec):
    """A SimAdapter protocol recipe (module docstring), checked once when loaded.

    Args:
        corpus: the corpus section.
        prepare: the data preparation's settings (:func:`adaptspeech.data.prepared_corpus.prepare_corpus` keywords).
        sources: the source languages.
        target: the target language (not a source).
        target_subset: the target's training budget in the target stages (``"10min"``, ``200``; None: all).
        stages: stage name -> its stage settings (every name of :data:`STAGE_NAMES`).
        baselines: baseline name -> its stage settings (names of :data:`BASELINE_NAMES`).
        evaluation: the test-set evaluation.
        self_training: the self-training rounds of the trained systems on untranscribed audio
            (:mod:`~adaptspeech.recipes.simadapter.self_training`; off by default).
    """

    corpus: CorpusSettings
    prepare: Mapping[str, Any] = field(default_factory=dict)
    sources: tuple[str, ...]
    target: str
    target_subset: str | int | None = None
    stages: Mapping[str, dict[str, Any]]
    baselines: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    evaluation: ProtocolEvaluation = field(default_factory=ProtocolEvaluation)
    self_training: SelfTrainingSettings = field(default_factory=SelfTrainingSettings)

    SETTINGS: ClassVar[Mapping[str, SettingType]] = {
        "corpus": MAPPING,
        "prepare": MAPPING,
        "sources": LANGUAGES,
        "target": LANGUAGE_CODE,
        "target_subset": optional(SUBSET_SIZE),
        "stages": MAPPING,
        "baselines": MAPPING,
        "evaluation": MAPPING,
        "self_training": MAPPING,
    }
    REQUIRED: ClassVar[tuple[str, ...]] = ("sources", "target", "corpus")

    @classmethod
    def convert(cls, values: dict[str, Any], folder: Path) -> dict[str, Any]:
        values = super().convert(values, folder)
        values["corpus"] = CorpusSettings.from_dict("corpus", values.get("corpus"), cls.ERROR)
        values["evaluation"] = ProtocolEvaluation.from_dict("evaluation", values.get("evaluation"), cls.ERROR)
        values["self_training"] = SelfTrainingSettings.from_dict("self_training", values.get("self_training"),
                                                                 cls.ERROR)
        values["sources"] = tuple(values["sources"])
        return values

    def __post_init__(self) -> None:
        missing = [s for s in STAGE_NAMES if s not in self.stages]
        if missing:
            raise self.ERROR(f"recipe.stages: missing stage(s) {missing}; a recipe runs {', '.join(STAGE_NAMES)}")
        unknown = sorted(set(self.stages) - set(STAGE_NAMES))
        if unknown:
            raise self.ERROR(unknown_settings_message("recipe.stages", unknown, STAGE_NAMES))
        unknown = sorted(set(self.baselines) - set(BASELINE_NAMES))
        if unknown:
            raise self.ERROR(unknown_settings_message("recipe.baselines", unknown, BASELINE_NAMES))
        if self.target in self.sources:
            raise self.ERROR(f"recipe: target {self.target!r} is also a source language")
        if self.target_subset is not None:
            try:
                SubsetSize.parse(self.target_subset)
            except ValueError as err:
                raise self.ERROR(f"target_subset: {err}") from None
        try:
            check_stage_languages(self.stages, self.sources, self.target)
        except StageConfigError as err:
            raise self.ERROR(str(err)) from None

    def retargeted(self) -> SimAdapterRecipe:
        """A copy whose stage settings' languages follow ``sources`` / ``target`` once more, after the stage overrides
        (:func:`~adaptspeech.recipes.simadapter.languages.retarget_stages`; the transfer curve trains with these)."""
        return dataclasses.replace(self, stages=retarget_stages(self.stages, self.sources, self.target))

    def stage_settings(self, group: str, name: str) -> dict[str, Any]:
        """The settings of stage ``name`` of ``group`` (``"stages"`` or ``"baselines"``), as its file holds them."""
        return (self.stages if group == "stages" else self.baselines)[name]
