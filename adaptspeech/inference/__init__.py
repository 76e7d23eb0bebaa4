"""Inference the way users run it: long recordings in bounded memory, timestamps, the Python API behind
``transcribe`` (:mod:`.transcriber`).

A recording makes one pass through stages, each a module with one input and one output: the recording on the model's
frame grid (:mod:`.recording`) -> speech regions (:mod:`.regions`, from :mod:`.pauses`) -> segments
(:mod:`.segmenting`) -> features (:mod:`.local_norm`) -> encoder (:mod:`.encoding`) -> decoder
(:mod:`adaptspeech.decoding`) -> stitched text and timestamps (:mod:`.stitching`, :mod:`.timestamps`). A stage module
imports only the stages before it.

Heavy modules are imported by their users; this package's ``__init__`` holds only the shared defaults, so that the
command line can show them without importing torch.
"""

DEFAULT_CHUNK_LENGTH_S = 30.0
"""Seconds of audio per encoder call when a recording is transcribed chunk by chunk."""
DEFAULT_STRIDE_LENGTH_S = 5.0
"""Seconds of context on each side of a chunk's kept frames."""
LONG_FORM_SPLITS = ("pauses", "chunks")
"""How a recording longer than the chunk length is split: at pauses (speech regions, each decoded as an utterance), or
in chunks (CTC: overlapping chunks stitched frame by frame; attention / joint: consecutive segments of at most the
chunk length)."""
CUT_COSTS = ("energy", "ctc_blank")
"""How attention / joint decoding scores a frame as a place to cut a long recording (lower: better)."""
DEFAULT_SEARCH_LENGTH_S = 5.0
"""Seconds before a segment's longest end searched for its cut (attention / joint decoding)."""
DEFAULT_NORM_WINDOW_S = 4.0
"""Width of the sliding normalisation window, in seconds (chosen on the long-form CER check, docs/inference.md)."""
