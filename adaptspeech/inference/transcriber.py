"""The Python API behind ``adaptspeech transcribe``: recordings of any length -> text (+ timestamps), any decoder.

Each recording makes one pass through the stages, in order, each with one input and one output:

0. the recording: the reason it has nothing to decode, or its unnormalised model input, computed once, on the model's
   frame grid (:mod:`.long_form.recording`, :func:`~.long_form.local_norm.recording_input`);
1. speech regions: where it holds speech, cut at pauses (:mod:`.long_form.regions`, from a finder of
   :mod:`.long_form.speech_finders`: the energy rule of :mod:`adaptspeech.runtime.pauses`, silero-vad, or ``auto``);
2. segments: the pieces decoded on their own (:mod:`.long_form.segmenting`);
3. features: each segment's model input, normalised over its own audio (:mod:`.long_form.local_norm`; a view that
   normalises each encoder call's input as the encoder reads it);
4. encoder: CTC log-probabilities stitched on the recording's frame grid, or each segment's encoder output
   (:mod:`.encoding`);
5. decoder: any method of the decoding registry (:mod:`adaptspeech.decoding`), or an n-gram LM;
6. stitched text and timestamps (:mod:`.long_form.stitching`).

Streaming will run the same stages on a growing recording.

CTC decoders (``ctc_greedy``, ``ctc_beam``, and an n-gram LM through pyctcdecode) read the recording's CTC
log-probabilities on one frame grid, so memory stays bounded however long the recording; a recording no longer than
``chunk_length_s`` is one encoder call, exactly as unchunked. A longer one is split by ``split_by``:

- ``"pauses"`` (default): one speech region at a time, cut at pauses, each normalised as an utterance; pauses are
  blank frames and a word boundary; speech without a pause longer than ``chunk_length_s`` is chunked inside its
  region;
- ``"chunks"``: overlapping chunks stitched frame by frame (transformers' pipeline stride rule), each chunk's input
  normalised over its own audio (a sliding window of ``norm_window_s``, digital silence left out).

The long-form CER check of docs/inference.md compares both with decoding the utterances one by one. The attention
and joint decoders cut a recording longer than ``chunk_length_s`` into consecutive segments at pauses (with
``split_by="pauses"`` the speech regions first), decode each alone and join the texts; the segments and their times
are in ``Transcription.extra["segments"]`` (the CTC speech regions in ``extra["speech"]``). A recording with nothing
to decode (no samples, non-finite samples, digital silence or a peak below ``prepare``'s silence threshold, fewer
samples than one output frame needs: :func:`~adaptspeech.inference.long_form.recording.nothing_to_decode`, the rule of
``prepare``) gets the empty text and ``extra["skipped"]`` saying why, without a model call; the other recordings are
transcribed as usual.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..decoding import DECODING_METHODS, decode, evaluating
from ..decoding.confidence import best_path_words, utterance_confidence
from ..runtime.decoding_methods import PYTORCH, check_method
from ..runtime.long_form import check_chunk_settings
from ..runtime.pauses import DEFAULT_PAUSE_DB, DEFAULT_SPEECH_PAD_S, energy_cost
from . import (
    CUT_COSTS,
    DEFAULT_CHUNK_LENGTH_S,
    DEFAULT_SEARCH_LENGTH_S,
    DEFAULT_STRIDE_LENGTH_S,
    LONG_FORM_SPLITS,
)
from .encoding import chunked_ctc_log_probs, encode_segment, stitch_ctc
from .long_form.local_norm import DEFAULT_NORM_WINDOW_S, ModelInput, check_norm_window, recording_input, segment_input
from .long_form.recording import FrameGrid, nothing_to_decode
from .long_form.regions import find_speech
from .long_form.segmenting import (
    DEFAULT_SMOOTHING_S,
    Segment,
    blank_cost,
    fits_ctc_call,
    fits_segment,
    plan_ctc_segments,
    plan_segments,
)
from .long_form.silero import DEFAULT_THRESHOLD
from .long_form.speech_finders import DEFAULT_SPEECH_FINDER, SpeechFinderSettings
from .long_form.stitching import Transcription, frame_spans, join_segments, label_text
from .long_form.timestamps import ctc_timestamps
from .model_mixin import MODEL_SAMPLING_RATE


@dataclass(frozen=True)
class LongFormSettings:
    """How a recording longer than one encoder call is split and read; checked at construction.

    Args:
        chunk_length_s: seconds of audio per encoder call (CTC), and the longest segment (attention / joint).
        stride_length_s: seconds of context on each side of a CTC chunk's kept frames.
        chunk_batch_size: CTC chunks per encoder call.
        split_by: ``"pauses"`` (speech regions first) or ``"chunks"``.
        cut_by: the cut cost of attention / joint segments: ``"energy"`` or ``"ctc_blank"``.
        search_length_s: seconds before a segment's longest end searched for its cut.
        norm_window_s: seconds of the sliding normalisation window (:mod:`.long_form.local_norm`).
        min_pause_s: shortest pause between two speech regions (None: the speech finder's default).
        speech_pad_s: seconds of pause kept on each side of a speech region.
        speech_finder: where the speech regions are (``split_by="pauses"``): a name of
            :data:`~adaptspeech.inference.long_form.speech_finders.SPEECH_FINDERS` (``"energy"``, ``"silero"``).
        vad_threshold: ``"silero"``: the speech probability that starts speech.

    Attributes:
        finder: the speech-region finder with its settings, checked once here.
    """

    chunk_length_s: float = DEFAULT_CHUNK_LENGTH_S
    stride_length_s: float = DEFAULT_STRIDE_LENGTH_S
    chunk_batch_size: int = 4
    split_by: str = "pauses"
    cut_by: str = "energy"
    search_length_s: float = DEFAULT_SEARCH_LENGTH_S
    norm_window_s: float = DEFAULT_NORM_WINDOW_S
    min_pause_s: float | None = None
    speech_pad_s: float = DEFAULT_SPEECH_PAD_S
    speech_finder: str = DEFAULT_SPEECH_FINDER
    vad_threshold: float = DEFAULT_THRESHOLD
    finder: SpeechFinderSettings = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.split_by not in LONG_FORM_SPLITS:
            raise ValueError(f"split_by {self.split_by!r}; allowed values: {', '.join(LONG_FORM_SPLITS)}")
        if self.cut_by not in CUT_COSTS:
            raise ValueError(f"cut_by {self.cut_by!r}; allowed values: {', '.join(CUT_COSTS)}")
        if self.search_length_s <= 0:
            raise ValueError(f"search_length_s must be positive, got {self.search_length_s}")
        check_norm_window(self.norm_window_s)
        object.__setattr__(self, "finder", SpeechFinderSettings(self.speech_finder, self.min_pause_s,
                                                               self.speech_pad_s, vad_threshold=self.vad_threshold))


def check_transcription(model: Any, method: str, settings: LongFormSettings, timestamps: str | None = None,
                        lm_decoder: Any = None, confidence: bool = False) -> None:
    """Refuse what :func:`transcribe` cannot do with these settings, before any audio is read (``ValueError``, one
    line; ``adaptspeech transcribe`` calls it once before its files): a method the PyTorch path does not serve
    (:func:`~adaptspeech.runtime.decoding_methods.check_method`), timestamps or confidence without the best CTC path
    or an LM, character timestamps with an LM, CTC chunks not longer than their strides, ``cut_by="ctc_blank"``
    without a CTC head."""
    check_method(method, PYTORCH)
    decoder = DECODING_METHODS.get(method)
    if timestamps is not None and not decoder.best_path and lm_decoder is None:
        raise ValueError(f"timestamps need the best CTC path (method ctc_greedy) or an LM, not method {method!r}")
    if lm_decoder is not None and timestamps == "char":
        raise ValueError("the LM decoder gives word timestamps only; use timestamps='word' (--timestamps word)")
    if confidence and not decoder.best_path and lm_decoder is None:
        raise ValueError(f"confidence needs the best CTC path (method ctc_greedy) or an LM, not method {method!r}")
    if decoder.ctc_only or lm_decoder is not None:
        check_chunk_settings(settings.chunk_length_s, settings.stride_length_s)
    elif settings.cut_by == "ctc_blank":
        _check_ctc_blank(model)


def _check_ctc_blank(model: Any) -> None:
    if getattr(model, "ctc_head", None) is None:
        raise ValueError(f"cut_by='ctc_blank' (--cut-by ctc_blank) needs a CTC head; head {model.config.head!r} has "
                         "none: use 'energy'")


@torch.no_grad()
def transcribe(
    model: Any,
    processor: Any,
    waveforms: Sequence[np.ndarray],
    method: str = "ctc_greedy",
    chunk_length_s: float = DEFAULT_CHUNK_LENGTH_S,
    stride_length_s: float = DEFAULT_STRIDE_LENGTH_S,
    timestamps: str | None = None,
    lm_decoder: Any = None,
    lang_ids: torch.Tensor | None = None,
    chunk_batch_size: int = 4,
    cut_by: str = "energy",
    search_length_s: float = DEFAULT_SEARCH_LENGTH_S,
    norm_window_s: float = DEFAULT_NORM_WINDOW_S,
    split_by: str = "pauses",
    min_pause_s: float | None = None,
    speech_pad_s: float = DEFAULT_SPEECH_PAD_S,
    confidence: bool = False,
    speech_finder: str = DEFAULT_SPEECH_FINDER,
    vad_threshold: float = DEFAULT_THRESHOLD,
    **options: Any,
) -> list[Transcription]:
    """Transcribe 16 kHz mono waveforms one by one.

    Args:
        model: an adaptspeech model (eval mode is set for the call).
        processor: its ``Wav2Vec2Processor`` (feature extractor + tokenizer).
        waveforms: ``[S_i]`` float32 arrays at the feature extractor's rate.
        method: a decoding method name (any length: CTC chunked, attention / joint segmented).
        chunk_length_s, stride_length_s: the chunking of CTC decoding (see :mod:`~adaptspeech.inference.encoding`);
            ``chunk_length_s`` is also the longest segment of attention / joint decoding.
        timestamps: ``"word"`` or ``"char"`` start / end times (a best-path CTC method, or the LM decoder for
            ``"word"``).
        lm_decoder: an :class:`~adaptspeech.lm.decoder.LMDecoder` (n-gram LM beam search over the CTC output).
        lang_ids: ``[1]`` language index (models routing several languages per utterance).
        chunk_batch_size: chunks per encoder call.
        cut_by, search_length_s: where attention / joint decoding cuts a long recording (``"energy"`` or
            ``"ctc_blank"``; see :mod:`~adaptspeech.inference.long_form.segmenting`).
        norm_window_s: seconds of the sliding normalisation window of a chunk (``split_by="chunks"``, and speech
            without a pause longer than ``chunk_length_s``).
        split_by: how a recording longer than ``chunk_length_s`` is split: ``"pauses"`` or ``"chunks"`` (see the
            module docstring, and :mod:`~adaptspeech.inference.long_form.segmenting` for attention / joint decoding).
        min_pause_s: shortest pause between two speech regions (``split_by="pauses"``; None: the speech finder's
            default, 0.25 s for ``"energy"``, 0.1 s for ``"silero"``).
        speech_pad_s: seconds of pause kept on each side of a speech region (``split_by="pauses"``).
        confidence: also score each word and the recording (:mod:`adaptspeech.decoding.confidence`; a best-path CTC
            method or the LM decoder): ``extra["confidence"]`` (the recording's) and ``extra["words"]`` (``[{"text",
            "start", "end", "confidence"}, ...]``, seconds).
        speech_finder: where the speech regions are (``split_by="pauses"``): ``"energy"`` (the pause rule) or
            ``"silero"`` (silero-vad; :mod:`~adaptspeech.inference.long_form.speech_finders`).
        vad_threshold: ``speech_finder="silero"``: the speech probability that starts speech.
        **options: the decoder's options (``beam_size``, ``ctc_weight`` ...).
    """
    settings = LongFormSettings(chunk_length_s, stride_length_s, chunk_batch_size, split_by, cut_by, search_length_s,
                                norm_window_s, min_pause_s, speech_pad_s, speech_finder, vad_threshold)
    check_transcription(model, method, settings, timestamps, lm_decoder, confidence)
    decoder = DECODING_METHODS.get(method)
    grid = FrameGrid.of(model)
    results = []
    with evaluating(model):
        for waveform in waveforms:
            seconds = len(waveform) / MODEL_SAMPLING_RATE
            reason = nothing_to_decode(model, waveform)  # stage 0
            if reason is not None:
                results.append(Transcription("", [] if timestamps else None, seconds, {"skipped": reason}))
                continue
            features = recording_input(waveform, processor.feature_extractor, norm_window_s)  # stage 0
            if decoder.ctc_only or lm_decoder is not None:
                results.append(_decode_ctc(model, grid, processor.tokenizer, features, waveform, settings, method,
                                           timestamps, lm_decoder, lang_ids, options, confidence))
            else:
                results.append(_decode_segments(model, grid, processor.tokenizer, features, waveform, settings,
                                                method, lang_ids, options))
    return results


def _decode_ctc(model: Any, grid: FrameGrid, tokenizer: Any, features: ModelInput, waveform: np.ndarray,
                settings: LongFormSettings, method: str, timestamps: str | None, lm_decoder: Any,
                lang_ids: torch.Tensor | None, options: dict[str, Any], confidence: bool = False) -> Transcription:
    """One recording through the stages for a CTC decoder (or the LM decoder); with ``confidence``, its words
    scored (:mod:`adaptspeech.decoding.confidence`)."""
    seconds = len(waveform) / MODEL_SAMPLING_RATE
    delimiter = getattr(tokenizer, "word_delimiter_token_id", None)
    log_probs, filled = recording_ctc_log_probs(model, features, waveform, settings, lang_ids,
                                                delimiter)  # stages 1 - 4
    extra = {} if filled is None else {"speech": frame_spans(filled, grid.seconds_per_frame, seconds)}
    if confidence:  # stages 5 - 6 with the words' confidences
        return _scored(tokenizer, log_probs, grid.seconds_per_frame, seconds, extra, timestamps, lm_decoder, options)
    if lm_decoder is not None:  # stages 5 - 6
        text, words = lm_decoder.decode(log_probs, seconds_per_frame=grid.seconds_per_frame, **options)
        return Transcription(text, words if timestamps else None, seconds, extra)
    ids = decode(method, ctc_log_probs=log_probs[None], blank_id=model.config.pad_token_id, **options)[0]  # stage 5
    chunks = None  # stage 6
    if timestamps is not None:
        chunks = ctc_timestamps(log_probs.argmax(-1).tolist(), tokenizer, grid.seconds_per_frame, timestamps)
    return Transcription(label_text(tokenizer, ids), chunks, seconds, extra)


def _scored(tokenizer: Any, log_probs: torch.Tensor, seconds_per_frame: float, seconds: float, extra: dict[str, Any],
            timestamps: str | None, lm_decoder: Any, options: dict[str, Any]) -> Transcription:
    """A recording's text with its words' confidences: the LM beam search's N-best, or the best CTC path's."""
    if lm_decoder is not None:
        text, words = lm_decoder.decode_scored(log_probs, beam_size=options.get("beam_size"))
    else:
        words = best_path_words(log_probs, tokenizer)
        text = " ".join(w.text for w in words)
    extra = {**extra, "confidence": utterance_confidence(words, log_probs),
             "words": [w.to_dict(seconds_per_frame) for w in words]}
    chunks = None
    if timestamps == "word":
        chunks = [{k: w[k] for k in ("text", "start", "end")} for w in extra["words"]]
    elif timestamps == "char":
        chunks = ctc_timestamps(log_probs.argmax(-1).tolist(), tokenizer, seconds_per_frame, timestamps)
    return Transcription(text, chunks, seconds, extra)


def recording_ctc_log_probs(
    model: Any,
    features: ModelInput,
    waveform: np.ndarray,
    settings: LongFormSettings = LongFormSettings(),
    lang_ids: torch.Tensor | None = None,
    word_delimiter_id: int | None = None,
    pause_db: float = DEFAULT_PAUSE_DB,
) -> tuple[torch.Tensor, list[tuple[int, int]] | None]:
    """Stages 1 - 4 for a CTC decoder: one recording's CTC log-probabilities ``[T, V]`` on its frame grid.

    A recording that fits one encoder call, or is split in chunks, or has no pause, is one segment (chunked with
    strides when longer than ``chunk_length_s``); otherwise each speech region is decoded on its own and the grid
    between regions is blank, with a word boundary in every pause (:mod:`~adaptspeech.inference.encoding`). A
    recording where no region is left (digital silence, a click shorter than ``MIN_SPEECH_S``) is blank throughout.

    Args:
        model: an adaptspeech model with a CTC head.
        features: the recording's model input (:func:`~adaptspeech.inference.long_form.local_norm.recording_input`, or a
            normalised tensor).
        waveform: ``[S]`` the recording at 16 kHz (its frame energies find the pauses).
        settings: the long-form settings.
        lang_ids: ``[1]`` the recording's language index (models routing several languages).
        word_delimiter_id: the tokenizer's word delimiter (``|``), or ``None``: pauses stay blank.
        pause_db: decibels below the speech level under which a frame is a pause frame.

    Returns:
        ``([T, V] log-probabilities, regions)``: with ``split_by="pauses"`` the ``[(first_frame, end_frame), ...]``
        each segment filled (``[]`` for no speech), else ``None``.
    """
    if getattr(model, "ctc_head", None) is None:
        raise ValueError("CTC decoding of a recording needs a model with a CTC head")
    grid = FrameGrid.of(model)
    num_units = len(features)
    regions = None
    if settings.split_by == "pauses" and not fits_ctc_call(grid.geometry, num_units, settings.chunk_length_s):
        finder = settings.finder if pause_db == settings.finder.pause_db else \
            dataclasses.replace(settings.finder, pause_db=pause_db)
        regions = find_speech(grid, num_units, waveform, finder)  # stage 1
    segments = plan_ctc_segments(grid.geometry, num_units, settings.chunk_length_s, regions)  # stage 2
    pieces = [chunked_ctc_log_probs(model, segment_input(features, segment), settings.chunk_length_s,  # stages 3, 4
                                    settings.stride_length_s, settings.chunk_batch_size, lang_ids)
              for segment in segments]
    log_probs, filled = stitch_ctc(model, num_units, segments, pieces, regions.boundaries if regions else [],
                                   word_delimiter_id, lang_ids)  # stage 4: the recording's grid
    return log_probs, filled if settings.split_by == "pauses" else None


def _decode_segments(model: Any, grid: FrameGrid, tokenizer: Any, features: ModelInput, waveform: np.ndarray,
                     settings: LongFormSettings, method: str, lang_ids: torch.Tensor | None,
                     options: dict[str, Any]) -> Transcription:
    """One recording through the stages for an attention or joint decoder: each segment decoded alone."""
    segments = attention_segments(model, features, waveform, settings, lang_ids)  # stages 1, 2
    ids = []
    for segment in segments:
        encoded = encode_segment(model, segment_input(features, segment), lang_ids)  # stages 3, 4
        ids.append(decode(method, ctc_log_probs=encoded.ctc_log_probs, ctc_lengths=encoded.ctc_lengths,  # stage 5
                          decoder=encoded.decoder, encoder_hidden_states=encoded.encoder_hidden_states,
                          encoder_padding_mask=encoded.encoder_padding_mask, **options)[0])
    return join_segments(tokenizer, segments, ids, grid.seconds_per_frame,  # stage 6
                         len(waveform) / MODEL_SAMPLING_RATE)


def attention_segments(
    model: Any,
    features: ModelInput,
    waveform: np.ndarray,
    settings: LongFormSettings = LongFormSettings(),
    lang_ids: torch.Tensor | None = None,
) -> list[Segment]:
    """Stages 1 - 2 for an attention or joint decoder: the segments of one recording
    (:func:`~adaptspeech.inference.long_form.segmenting.plan_segments`), with the cut cost of ``settings.cut_by``
    (:func:`cut_cost`) and, with ``split_by="pauses"``, the speech regions first.

    Args:
        model: an adaptspeech model (with a CTC head for ``cut_by="ctc_blank"``).
        features: the recording's model input (read for its length, and by the CTC pass of ``"ctc_blank"``).
        waveform: ``[S]`` the recording at 16 kHz.
        settings: the long-form settings.
        lang_ids: ``[1]`` language index, for the CTC pass of ``"ctc_blank"``.

    Returns:
        The segments in order (none when no region holds speech: nothing to decode).
    """
    grid = FrameGrid.of(model)
    num_units = len(features)
    regions = None
    if settings.split_by == "pauses" and not fits_segment(grid, num_units, settings.chunk_length_s):
        regions = find_speech(grid, num_units, waveform, settings.finder)  # stage 1 (one segment needs none)
    cost = None
    if not fits_segment(grid, num_units, settings.chunk_length_s):  # where to cut (a CTC pass for "ctc_blank")
        cost = cut_cost(model, features, waveform, settings.cut_by, settings.chunk_length_s, lang_ids)
    return plan_segments(grid, num_units, settings.chunk_length_s, cost, regions, settings.search_length_s,
                         DEFAULT_SMOOTHING_S)  # stage 2


def cut_cost(model: Any, features: ModelInput, waveform: np.ndarray, cut_by: str, chunk_length_s: float,
             lang_ids: torch.Tensor | None = None) -> np.ndarray:
    """``[T]`` cut cost per output frame of a recording (``T = ceil(units / u)``; lower: a better place to cut).

    ``"energy"``: the log power of each frame's samples; ``"ctc_blank"``: ``-log P(blank)`` from a chunked CTC pass
    over the recording (stages 3 - 4 run once more, with strides of ``min(5 s, chunk_length_s / 4)``).

    Raises:
        ValueError: ``"ctc_blank"`` for a model without a CTC head, or an unknown ``cut_by``.
    """
    if cut_by not in _CUT_COSTS:
        raise ValueError(f"cut_by {cut_by!r}; allowed values: {', '.join(CUT_COSTS)}")
    grid = FrameGrid.of(model)
    return _CUT_COSTS[cut_by](model, grid, features, waveform, grid.frames_of(len(features)), chunk_length_s,
                              lang_ids)


def _energy_cost(model: Any, grid: FrameGrid, features: ModelInput, waveform: np.ndarray, num_frames: int,
                 chunk_length_s: float, lang_ids: torch.Tensor | None) -> np.ndarray:
    return energy_cost(waveform, grid.samples_per_frame, num_frames)


def _ctc_blank_cost(model: Any, grid: FrameGrid, features: ModelInput, waveform: np.ndarray, num_frames: int,
                    chunk_length_s: float, lang_ids: torch.Tensor | None) -> np.ndarray:
    _check_ctc_blank(model)
    stride_s = min(DEFAULT_STRIDE_LENGTH_S, chunk_length_s / 4)
    log_probs = chunked_ctc_log_probs(model, features, chunk_length_s, stride_s, lang_ids=lang_ids)
    return blank_cost(log_probs, model.config.pad_token_id, num_frames)


_CUT_COSTS = {"energy": _energy_cost, "ctc_blank": _ctc_blank_cost}
"""The cut cost of each ``cut_by`` (:data:`~adaptspeech.inference.CUT_COSTS`)."""
