"""The filters that decide which aligned lines become clips: the folding of the CER compared with ``--max-cer``."""

from __future__ import annotations

from adaptspeech.alignment.filters import fold_text


def test_fold_text_drops_diacritics_and_case():
    assert fold_text("Keďže ČO ľúbi, łódź ě ø") == "kedze co lubi, lodz e o"
