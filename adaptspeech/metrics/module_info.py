"""Metadata shared by the WER and CER ``evaluate`` modules: input schema, citation, links."""

from __future__ import annotations

import datasets
import evaluate

CITATION = """\
@inproceedings{morris2004,
  author = {Morris, Andrew Cameron and Maier, Viktoria and Green, Phil},
  title = {From WER and RIL to MER and WIL: improved evaluation measures for connected speech recognition},
  booktitle = {Interspeech},
  year = {2004}
}
"""


def text_pair_features() -> datasets.Features:
    """The input schema of both modules: one predicted and one reference string per utterance."""
    return datasets.Features(
        {
            "predictions": datasets.Value("string", id="sequence"),
            "references": datasets.Value("string", id="sequence"),
        }
    )


def error_rate_info(description: str, inputs_description: str) -> evaluate.MetricInfo:
    """The :class:`evaluate.MetricInfo` of an error-rate module with its own description texts."""
    return evaluate.MetricInfo(
        description=description,
        citation=CITATION,
        inputs_description=inputs_description,
        features=text_pair_features(),
        codebase_urls=["https://github.com/jitsi/jiwer/"],
        reference_urls=["https://en.wikipedia.org/wiki/Word_error_rate"],
    )
