"""Inference the way users run it: long recordings in bounded memory, timestamps, the Python API behind
``transcribe`` (:mod:`.transcriber`).

A recording makes one pass through stages, each a module with one input and one output: the recording on the model's
frame grid (:mod:`.recording`) -> speech regions (:mod:`.regions`, from :mod:`adaptspeech.runtime.pauses`) -> segments
(:mod:`.segmenting`) -> features (:mod:`.local_norm`) -> encoder (:mod:`.encoding`) -> decoder
(:mod:`adaptspeech.decoding`) -> stitched text and timestamps (:mod:`.stitching`, :mod:`.timestamps`). A stage module
imports only the stages before it.

Heavy modules are imported by their users; this package's ``__init__`` holds only the shared defaults, so that the
command line can show them without importing torch (those the ONNX runtime shares, chunk and stride lengths and the
long-form splits, live in :mod:`adaptspeech.runtime.long_form` and are re-exported here).
"""

from ..runtime.long_form import DEFAULT_CHUNK_LENGTH_S, DEFAULT_STRIDE_LENGTH_S, LONG_FORM_SPLITS

__all__ = ["CUT_COSTS", "DEFAULT_CHUNK_LENGTH_S", "DEFAULT_NORM_WINDOW_S", "DEFAULT_SEARCH_LENGTH_S",
           "DEFAULT_STRIDE_LENGTH_S", "LONG_FORM_SPLITS"]

CUT_COSTS = ("energy", "ctc_blank")
"""How attention / joint decoding scores a frame as a place to cut a long recording (lower: better)."""
DEFAULT_SEARCH_LENGTH_S = 5.0
"""Seconds before a segment's longest end searched for its cut (attention / joint decoding)."""
DEFAULT_NORM_WINDOW_S = 4.0
"""Width of the sliding normalisation window, in seconds (chosen on the long-form CER check, docs/inference.md)."""
