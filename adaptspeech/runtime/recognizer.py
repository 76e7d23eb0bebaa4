"""Transcribe with an exported ONNX graph on onnxruntime, without PyTorch.

:class:`OnnxRecognizer` reads the folder ``adaptspeech export`` writes (:mod:`.folder`), computes the graph's input
with the same code as the training features (the feature type's numpy front end, :data:`~.features.FRONT_ENDS`:
waveform samples, :func:`~.features.log_mel_numpy` frames, or w2v-BERT's stacked Kaldi filterbank,
:func:`~.features.stacked_fbank_numpy`; the normalisation runs inside the graph, per utterance or with the training
set's statistics under global CMVN, except for the stacked filterbank, which the runtime normalises per mel bin
before stacking as transformers does), pads a batch, runs the graph and decodes its logits with the torch-free CTC
decoders, named as on every path (:mod:`.decoding_methods`): ``ctc_greedy``, the best path
(:func:`~.ctc.greedy_decode`), or ``ctc_beam``, the prefix beam search (:func:`~.prefix_beam.prefix_beam_search`),
with an n-gram LM (``lm=``) pyctcdecode's beam search (:class:`adaptspeech.lm.decoder.LMDecoder`, which imports no
torch).

A recording longer than one encoder call (``chunk_length_s``, and the graph's ``max_frames``) is split as the PyTorch
path splits it (:mod:`.long_form`, the same functions): at pauses, one speech region per graph call, the pauses blank
frames with a word boundary in each (``split_by="pauses"``), or in overlapping chunks (``split_by="chunks"``, and
speech without a pause longer than one call); the pieces' log-probabilities are stitched on the recording's frame
grid and decoded at once. Each graph call normalises its own input (the runtime normalises it over the call's units
where the graph does not), so a chunk other than a whole recording is
normalised over all of it, where PyTorch normalises it with a sliding window (``norm_window_s``).

Example:
    ```python
    >>> from adaptspeech.runtime import OnnxRecognizer
    >>> recognizer = OnnxRecognizer("exported/ro")           # doctest: +SKIP
    >>> recognizer.transcribe(["clip.wav"])[0].text          # doctest: +SKIP
    ```
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .audio import check_samples, digital_silence, load_audio
from .ctc import greedy_decode, log_softmax
from .decoding_methods import DEPRECATED_DECODERS, ONNX, resolve_method
from .features import normalize_utterance
from .folder import ExportedModel, ExportFolderError, check_vocabulary, read_export
from .long_form import (
    DEFAULT_CHUNK_LENGTH_S,
    DEFAULT_STRIDE_LENGTH_S,
    LONG_FORM_SPLITS,
    Segment,
    SegmentInput,
    blank_grid,
    check_chunk_settings,
    check_pause_settings,
    fits_ctc_call,
    plan_chunks,
    plan_ctc_segments,
    speech_spans,
    stitch_log_probs,
    utterance_samples,
)
from .pauses import DEFAULT_MIN_PAUSE_S, DEFAULT_PAUSE_DB, DEFAULT_SPEECH_PAD_S
from .prefix_beam import prefix_beam_search

DECODERS = tuple(DEPRECATED_DECODERS)
"""The former ``decoder=`` names (deprecated: ``method=`` and ``lm=``;
:data:`.decoding_methods.DEPRECATED_DECODERS`)."""


@dataclass
class Recognition:
    """One utterance's result: ``text``, the decoded label ids, and the number of real output frames."""

    text: str
    label_ids: list[int] = field(default_factory=list)
    frames: int = 0


def deprecated_decoder(decoder: str, method: str | None, lm: str | os.PathLike | None,
                       folder: str | os.PathLike) -> tuple[str, str | os.PathLike | None]:
    """``(method, lm)`` of a former ``decoder=`` / ``--decoder`` name (``"lm"``: the export ``folder``'s own LM unless
    ``lm`` names one); ValueError for an unknown name or one given with ``method``."""
    if decoder not in DEPRECATED_DECODERS:
        raise ValueError(f"--decoder {decoder}; allowed values: {', '.join(DEPRECATED_DECODERS)} (deprecated: use "
                         "--method ctc_greedy | ctc_beam, and --lm DIR)")
    if method is not None:
        raise ValueError(f"--decoder {decoder} and --method {method}: give --method alone (--decoder is deprecated)")
    method, own_lm = DEPRECATED_DECODERS[decoder]
    return method, (lm if lm is not None else folder) if own_lm else lm


class OnnxRecognizer:
    """An exported model on onnxruntime.

    Args:
        folder: the folder ``adaptspeech export`` wrote.
        precision: ``fp32`` or ``int8`` (None: int8 when the folder has it, else fp32).
        method: ``ctc_greedy`` (best path) or ``ctc_beam`` (CTC prefix beam search; with ``lm``, pyctcdecode's)
            (:func:`~.decoding_methods.methods_for` ``("onnx")``; None: ``ctc_beam`` with ``lm``, else
            ``ctc_greedy``).
        beam_size: beams kept (default: 8, the LM decoder's 32 with ``lm``).
        lm: an n-gram LM folder (``adaptspeech transcribe --lm`` takes the same; the export folder itself when it
            holds one).
        alpha, beta: the LM weight and word bonus (None: the tuned ones saved with the LM, else the defaults).
        decoder: deprecated (a :class:`FutureWarning`): ``greedy``, ``beam`` or ``lm`` (the folder's own LM, or
            ``lm``), mapped to ``method`` / ``lm``.
        num_threads: onnxruntime intra-op threads.
        providers: onnxruntime execution providers (default CPU).
        chunk_length_s: seconds of audio per graph call (at most the graph's ``max_frames``): a longer recording is
            split (``adaptspeech transcribe --chunk-length``).
        stride_length_s: seconds of context on each side of a chunk.
        split_by: ``"pauses"`` or ``"chunks"``: how a recording longer than one call is split.
        min_pause_s, speech_pad_s: the pause rule's settings (:mod:`adaptspeech.runtime.pauses`).

    Raises:
        ExportFolderError: the folder is not a usable export (see :func:`~.folder.read_export`), or its tokens or
            feature settings disagree with the graph.
    """

    def __init__(self, folder: str | os.PathLike, precision: str | None = None, method: str | None = None,
                 beam_size: int | None = None, lm: str | os.PathLike | None = None, num_threads: int = 1,
                 providers: Sequence[str] | None = None, chunk_length_s: float = DEFAULT_CHUNK_LENGTH_S,
                 stride_length_s: float = DEFAULT_STRIDE_LENGTH_S, split_by: str = "pauses",
                 min_pause_s: float = DEFAULT_MIN_PAUSE_S, speech_pad_s: float = DEFAULT_SPEECH_PAD_S,
                 alpha: float | None = None, beta: float | None = None, decoder: str | None = None) -> None:
        import onnxruntime as ort

        if decoder is not None:
            method, lm = deprecated_decoder(decoder, method, lm, folder)
            warnings.warn(f"OnnxRecognizer(decoder={decoder!r}) is deprecated: use method={method!r}"
                          + (f", lm={str(lm)!r}" if lm is not None else ""), FutureWarning, stacklevel=2)
        self.method = resolve_method(method, ONNX, lm=lm is not None)
        if (alpha is not None or beta is not None) and lm is None:
            raise ValueError("alpha / beta weigh an n-gram LM: give lm= too")
        if split_by not in LONG_FORM_SPLITS:
            raise ValueError(f"split_by={split_by!r}; allowed values: {', '.join(LONG_FORM_SPLITS)}")
        check_pause_settings(min_pause_s, speech_pad_s)
        check_chunk_settings(chunk_length_s, stride_length_s)
        self.split_by, self.min_pause_s, self.speech_pad_s = split_by, min_pause_s, speech_pad_s
        self.chunk_length_s, self.stride_length_s = chunk_length_s, stride_length_s
        self.model: ExportedModel = read_export(folder)
        self.graph_path = self.model.graph(precision)
        options = ort.SessionOptions()
        options.intra_op_num_threads = num_threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3  # not the note that x_lengths has a stored default
        self.session = ort.InferenceSession(str(self.graph_path), options,
                                            providers=list(providers or ["CPUExecutionProvider"]))
        check_vocabulary(self.model, self.graph_path, self.session.get_outputs()[0].shape[-1],
                         list(self.session.get_inputs()[0].shape))
        self.beam_size = beam_size
        self._lm = None if lm is None else self._lm_decoder(lm, alpha, beta)

    def _lm_decoder(self, lm: str | os.PathLike, alpha: float | None, beta: float | None) -> Any:
        from ..lm.decoder import DEFAULT_BEAM_WIDTH, LMDecoder, build_decoder

        try:
            return LMDecoder(build_decoder(self.model.table, Path(lm), alpha=alpha, beta=beta),
                             beam_width=self.beam_size or DEFAULT_BEAM_WIDTH)
        except FileNotFoundError as err:
            raise ExportFolderError(f"--lm {lm}: {err}") from None

    # --- input ---------------------------------------------------------------------------------------------------
    def features(self, waveform: np.ndarray) -> np.ndarray:
        """The graph's input for one mono utterance at the model's rate: ``[S]`` samples or ``[T, F]`` frames (the
        feature type's front end; un-normalised where the graph normalises, else normalised over the utterance)."""
        model = self.model
        front_end, n_mels = model.front_end, int(model.feature["n_mels"])
        if model.runtime_normalizes:
            return front_end.normalized(waveform, model.sampling_rate, n_mels)
        return front_end.raw(np.asarray(waveform, dtype=np.float32), model.sampling_rate, n_mels)

    def raw_units(self, waveform: np.ndarray) -> np.ndarray:
        """A recording's un-normalised input units (its pieces are normalised per graph call: :meth:`_call`)."""
        model = self.model
        return model.front_end.raw(np.asarray(waveform, dtype=np.float32), model.sampling_rate,
                                   int(model.feature["n_mels"]))

    def logits(self, waveforms: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Run the graph on a padded batch: ``(logits [B, T, V], real frames [B])``."""
        inputs = [self.features(w) for w in waveforms]
        lengths = np.array([len(x) for x in inputs], dtype=np.int64)
        shape = (len(inputs), int(lengths.max()), *inputs[0].shape[1:])
        batch = np.zeros(shape, dtype=np.float32)
        for row, x in enumerate(inputs):
            batch[row, : len(x)] = x
        logits, frames = self.session.run(None, {"x": batch, "x_lengths": lengths})
        return logits, frames

    # --- decoding ------------------------------------------------------------------------------------------------
    def decode(self, logits: np.ndarray, frames: np.ndarray) -> list[Recognition]:
        """Logits ``[B, T, V]`` and real frames ``[B]`` -> one :class:`Recognition` per row."""
        table = self.model.table
        if self._lm is not None:
            results = []
            for row, n in zip(log_softmax(logits), frames.tolist()):
                text, _ = self._lm.decode(row[:n], self.model.seconds_per_frame)
                results.append(Recognition(text, [], int(n)))
            return results
        if self.method == "ctc_greedy":
            ids = greedy_decode(logits, frames, table.blank_id)
        else:
            ids = [best[0][0] for best in prefix_beam_search(log_softmax(logits), frames, self.beam_size or 8,
                                                            table.blank_id)]
        return [Recognition(table.text(row), row, int(n)) for row, n in zip(ids, frames.tolist())]

    def transcribe(self, audio: Sequence[str | os.PathLike | np.ndarray], batch_size: int = 1) -> list[Recognition]:
        """Transcribe audio files (any format :func:`~.audio.load_audio` decodes) or waveforms at the model's rate,
        ``batch_size`` at a time (padded; the result does not depend on the batch); a recording longer than one
        graph call alone, split (see the module docstring).

        Raises:
            BadClipError: a file :func:`~.audio.load_audio` cannot use, or a waveform it would refuse in a file (no
                samples, a non-finite one, silence: :func:`~.audio.check_samples`), named ``audio[i]``.
        """
        waveforms = [a if isinstance(a, np.ndarray) else load_audio(a, self.model.sampling_rate) for a in audio]
        for i, (given, waveform) in enumerate(zip(audio, waveforms, strict=True)):
            if isinstance(given, np.ndarray):
                check_samples(waveform, f"audio[{i}]")
        results: list[Recognition | None] = [None] * len(waveforms)
        whole = [i for i, w in enumerate(waveforms) if self.fits_one_call(w)]
        for start in range(0, len(whole), batch_size):
            rows = whole[start : start + batch_size]
            for i, result in zip(rows, self.decode(*self.logits([waveforms[i] for i in rows])), strict=True):
                results[i] = result
        for i, waveform in enumerate(waveforms):
            if results[i] is None:
                log_probs = self.recording_log_probs(waveform)
                results[i] = self.decode(log_probs[None], np.array([len(log_probs)], dtype=np.int64))[0]
        return [r for r in results if r is not None]

    # --- long recordings -----------------------------------------------------------------------------------------
    @property
    def call_seconds(self) -> float:
        """Seconds of audio per graph call: ``chunk_length_s``, at most the graph's ``max_frames``."""
        if self.model.max_frames is None:
            return self.chunk_length_s
        return min(self.chunk_length_s, self.model.max_frames * self.model.seconds_per_frame)

    def fits_one_call(self, waveform: np.ndarray) -> bool:
        """The recording is read in one graph call (always, for a folder exported without its frame geometry)."""
        geometry = self.model.geometry
        return geometry is None or fits_ctc_call(geometry, len(self.raw_units(waveform)), self.call_seconds)

    def recording_log_probs(self, waveform: np.ndarray) -> np.ndarray:
        """CTC log-probabilities ``[T, V]`` of one recording on its frame grid (``T``: the graph's output frames for
        the whole recording), split and stitched as the PyTorch path does
        (:func:`adaptspeech.inference.transcriber.recording_ctc_log_probs`)."""
        geometry = self.model.geometry
        if geometry is None:
            raise ExportFolderError(f"{self.model.path}: exported without first_frame_units; export it again to "
                                    "split long recordings")
        waveform = np.asarray(waveform, dtype=np.float32)
        units = self.raw_units(waveform)
        regions = None
        if self.split_by == "pauses":
            regions = speech_spans(geometry, len(units), waveform, self.min_pause_s, self.speech_pad_s,
                                   DEFAULT_PAUSE_DB)
        segments = plan_ctc_segments(geometry, len(units), self.call_seconds, regions)
        pieces = [self._segment_log_probs(units, waveform, segment) for segment in segments]
        if len(segments) == 1 and segments[0].read_as is SegmentInput.RECORDING and (
                segments[0].start, segments[0].end) == (0, len(units)):
            return pieces[0]
        num_frames = geometry.output_frames(len(units))
        table = self.model.table
        if not segments:
            return blank_grid(num_frames, len(table), table.blank_id)
        delimiter = table.tokens.index(table.word_delimiter) if table.word_delimiter in table.tokens else None
        return stitch_log_probs(num_frames, table.blank_id, [s.first_frame for s in segments], pieces,
                                regions.boundaries if regions else [], delimiter)[0]

    def _segment_log_probs(self, units: np.ndarray, waveform: np.ndarray, segment: Segment) -> np.ndarray:
        """``[T_i, V]`` log-probabilities of one segment: one graph call for an utterance (an fbank utterance next to
        digital silence computed again from its own samples, as
        :meth:`adaptspeech.inference.long_form.local_norm.RecordingInput.utterance` does), else overlapping chunks."""
        geometry = self.model.geometry
        assert geometry is not None
        x = units[segment.start : segment.end]
        if segment.read_as is SegmentInput.UTTERANCE:
            if self.model.framed:
                silent = digital_silence(waveform, self.model.sampling_rate)
                samples = utterance_samples(segment.start, segment.end, silent, geometry.unit_hop, geometry.unit_window)
                if samples is not None and len(again := self.features(waveform[samples[0] : samples[1]])) > 0:
                    return self._call(again, normalized=True)
            return self._call(x)
        per_second = self.model.sampling_rate / geometry.samples_per_frame
        chunk_frames = max(1, round(self.call_seconds * per_second))
        chunks = plan_chunks(len(x), geometry.units_per_frame, chunk_frames, round(self.stride_length_s * per_second))
        return np.concatenate([self._call(x[c.start : c.end])[c.keep_from : c.keep_to] for c in chunks])

    def _call(self, x: np.ndarray, normalized: bool = False) -> np.ndarray:
        """``[T, V]`` log-probabilities of one graph call on one input ``[S]`` or ``[S, F]`` of raw units, normalised
        over themselves here where the graph does not normalise (``normalized``: already done)."""
        if self.model.runtime_normalizes and not normalized:
            x = normalize_utterance(np.asarray(x, dtype=np.float32), axis=0)
        logits, frames = self.session.run(None, {"x": x[None].astype(np.float32),
                                                 "x_lengths": np.array([len(x)], dtype=np.int64)})
        return log_softmax(logits[0, : int(frames[0])])
