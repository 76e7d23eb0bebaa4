"""The repository's folders, as the tests find them (this file is ``tests/helpers/paths.py``)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
RECIPES = REPO / "recipes"
SCRIPTS = REPO / "scripts"
#: folders saved by adaptspeech 0.1.0 with their inputs and logits (written once, never edited)
FORMAT_0_1_0 = REPO / "tests" / "fixtures" / "format_0.1.0"
