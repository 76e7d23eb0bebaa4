"""What the overfit tests of the joint CTC / attention models decode: four tone-corpus transcripts
(:mod:`adaptspeech.testing.tones`) and every decoder with the options it runs at."""

from __future__ import annotations

from typing import Any

#: "beeg": a repeated character that CTC must separate with a blank
TEXTS = ["abc", "hgfe", "dada", "beeg"]
#: decoder name -> its options
METHODS: dict[str, dict[str, Any]] = {
    "ctc_greedy": {},
    "ctc_beam": dict(beam_size=8),
    "attention_greedy": {},
    "attention_beam": dict(beam_size=8),
    "joint": dict(beam_size=8, ctc_weight=0.3),
}
