"""The result type of every beam search in :mod:`adaptspeech.decoding`."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Hypothesis:
    """One decoded label sequence.

    Args:
        tokens (`list[int]`): label ids, without ``<s>`` / ``</s>`` / blanks.
        score (`float`): the score the search ranked it by (length-normalised where the search normalises).
        log_prob (`float`): the unnormalised total score (weighted sum of the scorers' log-probabilities,
            ``</s>`` included).
        scores (`dict[str, float]`): the unweighted total of each scorer (e.g. ``"attention"``, ``"ctc"``).
    """

    tokens: list[int]
    score: float
    log_prob: float
    scores: dict[str, float] = field(default_factory=dict)
