"""The results.md section of the self-training rows says which filter, teacher and confidence the rounds used."""

from __future__ import annotations

from typing import Any

from adaptspeech.recipes.simadapter.self_training_rows import self_training_markdown


def _summary(**settings: Any) -> dict[str, Any]:
    base = {"rounds": 2, "min_confidence": None, "keep_fraction": 0.8, "keep_fraction_schedule": None,
            "max_lm_disagreement": None, "use_lm": True, "teacher": "own", "confidence": "max_prob/min",
            "steps_scale": 2.0, "share": 0.5, "speed_perturb": [0.9, 1.0, 1.1]}
    base.update(settings)
    return {"settings": base, "pool_minutes": 58.4, "systems": {}, "evaluation_seconds": 1.0}


def test_the_report_names_the_agreement_filter_before_the_confidence_share():
    md = self_training_markdown(_summary(max_lm_disagreement=0.1), "test")
    assert "best path and the LM hypothesis differ by less than 10% CER" in md
    assert "at most the 80% most confident labels of the pool (max_prob/min)" in md


def test_the_report_names_the_fusion_teacher_and_the_learned_confidence():
    md = self_training_markdown(_summary(teacher="fusion", confidence="learned"), "test")
    assert "SimAdapter fusion labels round 1 for every system" in md
    assert "the 80% most confident labels of the pool (learned) are kept" in md


def test_the_report_names_a_rising_schedule():
    md = self_training_markdown(_summary(keep_fraction=None, keep_fraction_schedule=[0.6, 0.7]), "test")
    assert "the most confident 60%, 70% of the pool's labels in rounds 1, 2 (later rounds: the last)" in md


def test_without_a_filter_setting_every_label_is_kept():
    md = self_training_markdown(_summary(keep_fraction=None, use_lm=False), "test")
    assert "all of the labels are kept" in md and "with the n-gram LM" not in md
