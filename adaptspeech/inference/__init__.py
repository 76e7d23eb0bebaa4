"""Inference the way users run it: long recordings in bounded memory, timestamps, the Python API behind
``transcribe`` (:mod:`.transcriber`), live streams, language identification and pseudo-labels.

- :mod:`.transcriber`: recordings of any length -> text (+ timestamps), any decoder; :mod:`.encoding`, its encoder
  stage; :mod:`.model_mixin`, what every adaptspeech model offers inference (the language chosen at load time, the
  frame ratio).
- :mod:`.long_form`: the stages of a long recording. A recording makes one pass through them, each a module with one
  input and one output: the recording on the model's frame grid (:mod:`.long_form.recording`) -> speech regions
  (:mod:`.long_form.regions`, from a finder of :mod:`.long_form.speech_finders`: the energy rule of
  :mod:`adaptspeech.runtime.pauses`, or silero-vad, :mod:`.long_form.silero`) -> segments (:mod:`.long_form.segmenting`)
  -> features (:mod:`.long_form.local_norm`) -> encoder (:mod:`.encoding`) -> decoder (:mod:`adaptspeech.decoding`)
  -> stitched text and timestamps (:mod:`.long_form.stitching`, :mod:`.long_form.timestamps`). A stage module imports
  only the stages before it.
- :mod:`.streaming`: live recognition (:class:`~.streaming.recognizer.StreamingRecognizer`): the encoder as a stream
  with a cache (:mod:`.streaming.encoding`), a stream's features (:mod:`.streaming.features`), PCM / WAV byte streams
  (:mod:`.streaming.pcm`) and endpointing on a voice activity detector (:mod:`.streaming.vad_endpointing`).
- :mod:`.language_id`: who tells the language (:mod:`.language_id.identifiers`), automatic routing to the language's
  adapter (:mod:`.language_id.routing`) and hybrid language scoring (:mod:`.language_id.hybrid`).
- :mod:`.pseudo_labels`: self-training labels for an untranscribed pool (:mod:`.pseudo_labels.labelling`) and the
  comparison of word confidence methods that chooses their filter (:mod:`.pseudo_labels.confidence_comparison`).

Heavy modules are imported by their users; this package's ``__init__`` (and each subpackage's) holds only the shared
defaults, so that the command line can show them without importing torch (those the ONNX runtime shares, chunk and
stride lengths and the long-form splits, live in :mod:`adaptspeech.runtime.long_form` and are re-exported here).
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
