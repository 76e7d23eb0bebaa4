"""The ``self_training`` section of a SimAdapter recipe (:mod:`~adaptspeech.recipes.self_training` runs it): which
systems are self-trained on the untranscribed pool, for how many rounds, with which confidence filter, batch share,
speed perturbation and steps. Its own module so the recipe's settings (:mod:`~adaptspeech.recipes.protocol_spec`)
can hold it without importing the rounds.

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
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from ..settings import (
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
from .spec import RecipeError, Section

#: ``--only self_training``: train nothing else, run (or reuse) the self-training rounds, re-evaluate
SELF_TRAINING_STEP = "self_training"
#: the systems self-training can start from, in the order they run (SimAdapter fuses the self-trained adapter)
SELF_TRAINED_SYSTEMS = ("target_adapter", "fusion", "finetune")


def _systems(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and len(value) > 0 and all(x in SELF_TRAINED_SYSTEMS for x in value)


@dataclass(frozen=True)
class SelfTrainingSettings(Section):
    """The recipe's ``self_training`` section (module docstring).

    Args:
        enabled: run the rounds (``--only self_training`` runs them too); off, a finished run's rows are still shown.
        pool: a pool folder (``adaptspeech prepare audio-folder`` / ``common-voice-other``); None: built by
            :func:`~adaptspeech.recipes.self_training.ensure_pool`.
        pool_clips: a synthetic corpus: unlabelled clips of the target synthesised for the pool.
        systems: the systems self-trained.
        rounds: the most rounds per system.
        min_confidence, keep_fraction: the filter (one of them; neither: every non-empty label).
        share: the pseudo-labelled share of every batch.
        speed_perturb: the speed factors of the students' training rows (null: none).
        steps_scale: a student trains this many times its stage's steps.
        use_lm: label with the recipe's n-gram LM (its ``lm`` section) when it has one.
        beam_size: the LM beam search's width while labelling.
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
    }

    def __post_init__(self) -> None:
        if self.min_confidence is not None and self.keep_fraction is not None:
            raise RecipeError("self_training: give min_confidence or keep_fraction, not both (set the other to null)")

    def confidence_filter(self) -> Any:
        from ..data.pseudo_labelled import ConfidenceFilter

        return ConfidenceFilter(self.min_confidence, self.keep_fraction)


