"""The ``self_training`` section of a SimAdapter recipe (:mod:`~adaptspeech.recipes.simadapter.self_training` runs it):
which systems are self-trained on the untranscribed pool, for how many rounds, with which confidence filter, batch
share, speed perturbation and steps. Its own module so the recipe's settings
(:mod:`~adaptspeech.recipes.simadapter.spec`) can hold it without importing the rounds.

.. code-block:: yaml

    self_training:
      enabled: false             # run the rounds (``--only self_training`` runs them on a finished run)
      pool: null                 # a pool folder (adaptspeech prepare audio-folder / common-voice-other); null: built
      pool_clips: 1600           # synthetic corpus: unlabelled clips of the target (1600 x ~2.2 s = an hour)
      systems: [target_adapter, fusion, finetune]
      rounds: 3                  # at most; the rounds stop when dev CER stops improving
      min_confidence: null       # the filter: a minimum utterance confidence, or
      keep_fraction: 0.8         # the most confident share of the labels
      share: 0.5                 # pseudo-labelled share of every batch
      speed_perturb: [0.9, 1.0, 1.1]
      steps_scale: 2.0           # a student trains this many times its stage's steps
      use_lm: true               # label with the recipe's n-gram LM, when it has one
      beam_size: 16
      teacher: own               # own: each system labels for its students; fusion: SimAdapter labels for every one
      keep_fraction_schedule: null   # e.g. [0.6, 0.7, 0.8]: round k keeps the k-th share (the last one after)
      max_lm_disagreement: null  # with the LM: keep a label only when its LM and best-path hypotheses agree (0.1)
      confidence: null           # the word confidence; null: learned with the LM (an estimator fitted on dev per
                                 # teacher), max_prob/min without; or MEASURE[@ALPHA]/AGGREGATION, learned:FILE
      fit_nbest_temperature: false   # with the LM: the N-best temperature fitted on dev for each teacher
      average_top_n: null        # a student is the average of its N best checkpoints by dev CER (TopIPL)
      adapter_bottleneck: null   # the adapter alone's students: this bottleneck width instead of the stage's
      adapter_lora: null         # the adapter alone's students: LoRA of this rank beside the bottleneck adapter
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from ...data.pseudo_labelled import ConfidenceFilter
from ...decoding.confidence import LEARNED, ConfidenceMethod
from ...settings import (
    BOOL,
    FINITE_POSITIVE,
    NON_EMPTY_STR,
    OPEN_UNIT,
    POSITIVE_INT,
    PROBABILITY,
    SPEED_FACTORS,
    SettingType,
    optional,
)
from ..spec import RecipeError, Section

#: ``--only self_training``: train nothing else, run (or reuse) the self-training rounds, re-evaluate
SELF_TRAINING_STEP = "self_training"
#: the systems self-training can start from, in the order they run (SimAdapter fuses the self-trained adapter)
SELF_TRAINED_SYSTEMS = ("target_adapter", "fusion", "finetune")


#: the word confidence without an LM (and with one, when ``learned`` is not wanted)
DEFAULT_CONFIDENCE = ConfidenceMethod().name

#: the teachers of the students: the system itself (its latest student), or SimAdapter fusion for every system
TEACHERS = ("own", "fusion")


def _confidence_method(value: Any) -> bool:
    try:
        ConfidenceMethod.parse(value)
    except (ValueError, TypeError, AttributeError):
        return False
    return isinstance(value, str)


def _schedule(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and len(value) > 0 and all(
        PROBABILITY.accepts(x) and x > 0 for x in value) and list(value) == sorted(value)


def _systems(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and len(value) > 0 and all(x in SELF_TRAINED_SYSTEMS for x in value)


@dataclass(frozen=True)
class SelfTrainingSettings(Section):
    """The recipe's ``self_training`` section (module docstring).

    Args:
        enabled: run the rounds (``--only self_training`` runs them too); off, a finished run's rows are still shown.
        pool: a pool folder (``adaptspeech prepare audio-folder`` / ``common-voice-other``); None: built by
            :func:`~adaptspeech.recipes.simadapter.self_training_pool.ensure_pool`.
        pool_clips: a synthetic corpus: unlabelled clips of the target synthesised for the pool.
        systems: the systems self-trained.
        rounds: the most rounds per system.
        min_confidence, keep_fraction: the filter (one of them; neither: every non-empty label).
        share: the pseudo-labelled share of every batch.
        speed_perturb: the speed factors of the students' training rows (null: none).
        steps_scale: a student trains this many times its stage's steps.
        use_lm: label with the recipe's n-gram LM (its ``lm`` section) when it has one.
        beam_size: the LM beam search's width while labelling.
        teacher: ``own``: round 1 labels with the system itself; ``fusion``: with the recipe's SimAdapter system for
            every system (the students still start from their own stage's model; later rounds label with the latest
            student).
        keep_fraction_schedule: the share kept in round k (the last value for later rounds), rising; instead of
            ``keep_fraction``.
        max_lm_disagreement: with the LM, keep a label only when the CER between its LM and its best-path
            hypotheses is below this (WeNet NST: 0.1); null: no such filter.
        confidence: the word confidence method: ``MEASURE[@ALPHA]/AGGREGATION``, ``learned:FILE`` (a saved
            estimator) or ``learned`` (:mod:`~adaptspeech.decoding.confidence_estimator`: a logistic regression over
            the LM beam's word features fitted on the target's dev split for each teacher, saved in the round's
            folder; it needs the LM); None: :meth:`resolved` makes it ``learned`` when the teachers label with an LM,
            else ``max_prob/min``.
        fit_nbest_temperature: with the LM, fit the N-best temperature on dev for each teacher.
        average_top_n: a student evaluates and saves ``2 N`` times and becomes the average of its N best checkpoints
            by dev CER (TopIPL); null: its last step.
        adapter_bottleneck: the bottleneck width of the adapter alone's students (more capacity); null: the stage's.
        adapter_lora: the adapter alone's students get LoRA of this rank (``lora_alpha`` twice it) on the attention
            projections of the adapter layers beside their bottleneck adapter, trained, saved and loaded with the
            language (adapter type ``bottleneck_lora``); null: the bottleneck adapter alone. SimAdapter does not fuse
            such an adapter, so the SimAdapter students then start from the recipe's adapter, not the self-trained one.
    """

    enabled: bool = False
    pool: str | None = None
    pool_clips: int = 1600
    systems: tuple[str, ...] = SELF_TRAINED_SYSTEMS
    rounds: int = 3
    min_confidence: float | None = None
    keep_fraction: float | None = 0.8
    share: float = 0.5
    speed_perturb: tuple[float, ...] | None = (0.9, 1.0, 1.1)
    steps_scale: float = 2.0
    use_lm: bool = True
    beam_size: int = 16
    teacher: str = "own"
    keep_fraction_schedule: tuple[float, ...] | None = None
    max_lm_disagreement: float | None = None
    confidence: str | None = None
    fit_nbest_temperature: bool = False
    average_top_n: int | None = None
    adapter_bottleneck: int | None = None
    adapter_lora: int | None = None

    SETTINGS: ClassVar[Mapping[str, SettingType]] = {
        "enabled": BOOL,
        "pool": optional(NON_EMPTY_STR),
        "pool_clips": POSITIVE_INT,
        "systems": SettingType(f"a non-empty list of {', '.join(SELF_TRAINED_SYSTEMS)}", _systems, tuple),
        "rounds": POSITIVE_INT,
        "min_confidence": optional(PROBABILITY),
        "keep_fraction": optional(SettingType("a number in (0, 1]", lambda v: PROBABILITY.accepts(v) and v > 0)),
        "share": OPEN_UNIT,
        "speed_perturb": optional(SettingType(SPEED_FACTORS.description, SPEED_FACTORS.accepts,
                                              lambda v: tuple(float(x) for x in v))),
        "steps_scale": FINITE_POSITIVE,
        "use_lm": BOOL,
        "beam_size": POSITIVE_INT,
        "teacher": SettingType(f"one of {', '.join(TEACHERS)}", lambda v: v in TEACHERS),
        "keep_fraction_schedule": optional(SettingType("a non-empty rising list of numbers in (0, 1]", _schedule,
                                                       lambda v: tuple(float(x) for x in v))),
        "max_lm_disagreement": optional(SettingType("a number in (0, 1]", lambda v: PROBABILITY.accepts(v) and v > 0)),
        "confidence": optional(SettingType("a confidence method MEASURE[@ALPHA]/AGGREGATION (e.g. "
                                           "tsallis_exp@0.33/min) or learned[:FILE]", _confidence_method)),
        "fit_nbest_temperature": BOOL,
        "average_top_n": optional(SettingType("an integer >= 2", lambda v: POSITIVE_INT.accepts(v) and v >= 2)),
        "adapter_bottleneck": optional(POSITIVE_INT),
        "adapter_lora": optional(POSITIVE_INT),
    }

    def __post_init__(self) -> None:
        if self.min_confidence is not None and self.keep_fraction is not None:
            raise RecipeError("self_training: give min_confidence or keep_fraction, not both (set the other to null)")
        if self.keep_fraction_schedule is not None and self.min_confidence is not None:
            raise RecipeError("self_training: give min_confidence or keep_fraction_schedule, not both (set the other "
                              "to null)")
        if self.max_lm_disagreement is not None and not self.use_lm:
            raise RecipeError("self_training.max_lm_disagreement compares the LM's labels with the best path's: it "
                              "needs use_lm: true")
        if self.fit_nbest_temperature and not self.use_lm:
            raise RecipeError("self_training.fit_nbest_temperature is the LM beam's: it needs use_lm: true")
        if self.confidence == LEARNED and not self.use_lm:
            raise RecipeError("self_training.confidence: learned is fitted on the LM beam's words of dev: it needs "
                              "use_lm: true (or give learned:FILE, or a MEASURE/AGGREGATION)")

    def resolved(self, with_lm: bool) -> SelfTrainingSettings:
        """The section with ``confidence`` set: unset, ``learned`` when the teachers label with an LM (``with_lm``),
        else ``max_prob/min`` (:data:`DEFAULT_CONFIDENCE`).

        Raises:
            RecipeError: ``learned`` without an LM to label with (one line naming the setting).
        """
        if self.confidence == LEARNED and not with_lm:
            raise RecipeError("self_training.confidence: learned is fitted on the LM beam's words of dev: the recipe "
                              "has no n-gram LM to label with (its lm section)")
        if self.confidence is not None:
            return self
        return replace(self, confidence=LEARNED if with_lm else DEFAULT_CONFIDENCE)

    def confidence_filter(self, round_: int = 1) -> Any:
        """The filter of round ``round_`` (1-based): ``keep_fraction_schedule``'s share when set."""
        if self.keep_fraction_schedule is not None:
            return ConfidenceFilter(None, self.keep_fraction_schedule[min(round_, len(self.keep_fraction_schedule))
                                                                      - 1])
        return ConfidenceFilter(self.min_confidence, self.keep_fraction)

    def confidence_method(self) -> ConfidenceMethod:
        """The :class:`~adaptspeech.decoding.confidence.ConfidenceMethod` of ``confidence`` (unset: the one without an
        LM; :meth:`resolved` sets it)."""
        return ConfidenceMethod.parse(self.confidence or DEFAULT_CONFIDENCE)


