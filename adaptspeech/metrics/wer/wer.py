"""Word error rate as an ``evaluate`` metric that loads offline, by path.

``evaluate.load("wer")`` fetches its script from the Hub; this module ships inside the adaptspeech
package instead::

    import evaluate
    from adaptspeech.metrics import metric_path

    wer = evaluate.load(str(metric_path("wer")))  # works with HF_HUB_OFFLINE=1
    wer.compute(predictions=["ana are pere"], references=["ana are mere"])  # 0.333...

Scoring rules (NFC, whitespace runs collapsed, corpus-level rate, empty references kept and counted as
insertions against zero reference words) are documented once in :mod:`adaptspeech.metrics.scoring`.
"""

import evaluate

from adaptspeech.metrics import module_info, scoring

_DESCRIPTION = """\
Word error rate (WER): the minimum number of word substitutions S, deletions D and insertions I that turn
the references into the predictions, divided by the number of reference words N, summed over the whole
corpus: WER = (S + D + I) / N. Lower is better; it can exceed 1 when the predictions insert many words.

Both sides are put in Unicode NFC and their whitespace runs collapsed to single spaces; case and
punctuation are compared as given. An empty or whitespace-only reference is kept: it adds no reference
words and each predicted word counts as an insertion. If the whole input has no reference words, the
result is the number of inserted words (jiwer's convention), so 0.0 when every prediction is empty too.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list[str]`): transcripts produced by the recogniser, one per utterance.
    references (`list[str]`): ground-truth transcripts, one per utterance.
    concatenate_texts (`bool`, defaults to `False`): align all references joined into one word sequence
        against all predictions joined into one (alignments may then cross utterance boundaries).
    return_counts (`bool`, defaults to `False`): return a dict with the rate under "wer" and the integer
        counts "edits", "substitutions", "deletions", "insertions", "hits", "ref_units" (reference words)
        and "hyp_units" (predicted words), instead of the bare rate.

Returns:
    `float` (the corpus-level WER), or a `dict` with `return_counts=True`.

Examples:
    >>> wer.compute(predictions=["ana are pere", ""], references=["ana are mere", "bine"])
    0.5
"""


class WER(evaluate.Metric):
    """Corpus-level word error rate computed with jiwer (see the module docstring)."""

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
            predictions, references, "word", concatenate_texts=concatenate_texts, return_counts=return_counts
        )
