"""Character error rate as an ``evaluate`` metric that loads offline, by path.

``evaluate.load("cer")`` fetches its script from the Hub; this module ships inside the adaptspeech
package instead::

    import evaluate
    from adaptspeech.metrics import metric_path

    cer = evaluate.load(str(metric_path("cer")))  # works with HF_HUB_OFFLINE=1
    cer.compute(predictions=["ana are pere"], references=["ana are mere"])  # 1 / 12

Scoring rules (NFC, whitespace runs collapsed, spaces between words counted as characters, corpus-level
rate, empty references kept and counted as insertions against zero reference characters) are documented
once in :mod:`adaptspeech.metrics.scoring`.
"""

import evaluate

from adaptspeech.metrics import module_info, scoring

_DESCRIPTION = """\
Character error rate (CER): the minimum number of character substitutions S, deletions D and insertions I
that turn the references into the predictions, divided by the number of reference characters N, summed
over the whole corpus: CER = (S + D + I) / N. Characters are Unicode code points after NFC, so a letter
with a diacritic (ș, ț, ř) is one character however it was typed; the single space between two words is
a character too. Lower is better; it can exceed 1 when the predictions insert many characters.

Both sides are put in Unicode NFC and their whitespace runs collapsed to single spaces (leading and
trailing whitespace dropped); case and punctuation are compared as given. An empty or whitespace-only
reference is kept: it adds no reference characters and each predicted character counts as an insertion.
If the whole input has no reference characters, the result is the number of inserted characters
(jiwer's convention), so 0.0 when every prediction is empty too.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list[str]`): transcripts produced by the recogniser, one per utterance.
    references (`list[str]`): ground-truth transcripts, one per utterance.
    concatenate_texts (`bool`, defaults to `False`): align all references joined into one character
        sequence (nothing inserted between utterances) against all predictions joined the same way.
    return_counts (`bool`, defaults to `False`): return a dict with the rate under "cer" and the integer
        counts "edits", "substitutions", "deletions", "insertions", "hits", "ref_units" (reference
        characters) and "hyp_units" (predicted characters), instead of the bare rate.

Returns:
    `float` (the corpus-level CER), or a `dict` with `return_counts=True`.

Examples:
    >>> cer.compute(predictions=["řeka"], references=["reka"])
    0.25
"""


class CER(evaluate.Metric):
    """Corpus-level character error rate computed with jiwer (see the module docstring)."""

    def _info(self) -> evaluate.MetricInfo:
        return module_info.error_rate_info(_DESCRIPTION, _KWARGS_DESCRIPTION)

    def _compute(
        self,
        predictions: list[str],
        references: list[str],
        concatenate_texts: bool = False,
        return_counts: bool = False,
    ) -> float | dict[str, float | int]:
        return scoring.error_rate(
            predictions, references, "char", concatenate_texts=concatenate_texts, return_counts=return_counts
        )
