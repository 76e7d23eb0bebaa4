"""``StreamingRecognizer``: live recognition with a CTC model, audio in as it comes, partial text after every chunk.

Samples go through the stream's features (:mod:`.features`: units as their windows complete, normalised over the
last ``norm_window_s`` seconds), then, one chunk of ``chunk_ms`` at a time, through the encoder with its cache
(:meth:`~adaptspeech.inference.streaming.encoding.StreamingMixin.encode_chunk`), the CTC head and an incremental CTC
search (:mod:`adaptspeech.decoding.ctc_streaming`: greedy or prefix beam, carried across chunks). :meth:`finalize`
decodes the last, partial chunk. Example::

    recognizer = StreamingRecognizer(model, processor, chunk_ms=640)
    for block in microphone_blocks():          # float32 samples at 16 kHz, any block size
        print(recognizer.accept_waveform(block))  # the partial text
    print(recognizer.finalize())

With ``method="ctc_beam"`` a word n-gram LM can be fused into the search (``lm=``: the folders ``transcribe --lm``
takes, with their tuned alpha / beta; :mod:`adaptspeech.runtime.lm_prefix_beam`), and the final n-best of an utterance
can be rescored with the model's attention (LAS) decoder on the whole streamed encoder output (``rescore=True``, U2's
attention rescoring; :mod:`adaptspeech.decoding.attention_rescoring`): the encoder output of the current utterance is
then kept until its end.

The model must be able to stream (a streaming attention kind in every layer, causal convolution, a streaming front end;
see :meth:`~adaptspeech.inference.streaming.encoding.StreamingMixin.streaming_refusal`); a model trained without chunk
masks streams with a warning (it was not trained for it).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ...adapters.routing import current_override, routing_call
from ...data.feature_types import FeatureType
from ...decoding import attention_rescoring  # attention_rescore read at the call: tests replace it there
from ...decoding.ctc_streaming import Endpointer, StreamingCTCGreedy, StreamingCTCPrefixBeam
from ...decoding.hypothesis import Hypothesis
from ...lm.shallow_fusion import NGramFusion
from ...runtime.decoding_methods import LM_METHOD, STREAMING, methods_for, resolve_method
from .. import DEFAULT_NORM_WINDOW_S
from ..language_id.routing import routed_tokenizer, routing_override
from ..long_form.silero import DEFAULT_THRESHOLD, check_threshold
from ..long_form.speech_finders import SPEECH_FINDERS
from ..long_form.stitching import label_text
from .features import StreamFeatures
from .vad_endpointing import StreamVAD, VADEndpointer

#: seconds of blank before any text after which the silence so far is dropped (WeNet's endpoint rule 1)
LEADING_SILENCE_S = 5.0

#: the incremental searches :class:`StreamingRecognizer` runs (``method=``): the vocabulary's streaming methods
STREAMING_METHODS = methods_for(STREAMING)

#: the prefix beam width with an n-gram LM when none is given (the offline LM decoder's)
LM_BEAM_SIZE = 32
#: the offline LM decoder's pruning (pyctcdecode's defaults), used by the fused search too
LM_TOKEN_MIN_LOGP, LM_BEAM_PRUNE_LOGP = -5.0, -10.0


def lm_prefix_beam(
    vocab_size: int, blank_id: int, fusion: Any, beam_size: int = LM_BEAM_SIZE
) -> StreamingCTCPrefixBeam:
    """The streaming prefix beam search with a word n-gram LM fused
    (:class:`~adaptspeech.lm.shallow_fusion.NGramFusion`), with the offline LM decoder's settings: every label with
    log-probability >= -5 tried, prefixes more than 10 below the best dropped."""
    return StreamingCTCPrefixBeam(vocab_size, beam_size, blank_id, token_prune=vocab_size,
                                  token_min_logp=LM_TOKEN_MIN_LOGP, beam_prune_logp=LM_BEAM_PRUNE_LOGP, fusion=fusion)


def chunk_frames(model: Any, chunk_ms: float) -> int:
    """Encoder frames per chunk of ``chunk_ms`` milliseconds; ValueError unless it is a whole number of frames."""
    frame_ms = model.frame_milliseconds()
    frames = chunk_ms / frame_ms
    if chunk_ms <= 0 or abs(frames - round(frames)) > 1e-9:
        raise ValueError(
            f"chunk of {chunk_ms:g} ms: must be a positive multiple of the model's {frame_ms:g} ms frames "
            f"(e.g. {16 * frame_ms:g})"
        )
    return round(frames)


def check_stream_finder(speech_finder: str, vad_threshold: float,
                        endpoint_silence_s: float | None) -> Callable[[float], StreamVAD]:
    """``(vad_threshold) -> detector``: what endpoints a stream for ``speech_finder``, settings checked; ValueError
    (one line) for a finder that is not registered or cannot stream, a threshold outside ``(0.15, 1)`` or no
    ``endpoint_silence_s``, ImportError (:class:`~adaptspeech.inference.long_form.silero.MissingSileroError`) when
    silero-vad is not installed."""
    SPEECH_FINDERS.check(speech_finder, "speech_finder")
    entry = SPEECH_FINDERS.get(speech_finder)
    factory = entry.stream
    if factory is None:
        streaming = ", ".join(name for name in SPEECH_FINDERS if SPEECH_FINDERS.get(name).stream is not None)
        raise ValueError(f"speech_finder {speech_finder!r} cannot endpoint a stream (it needs the whole recording); "
                         f"finders that can: {streaming}; without one the best path's blanks endpoint")
    if endpoint_silence_s is None:
        raise ValueError(f"speech_finder {speech_finder!r} endpoints a stream: set endpoint_silence_s "
                         "(--endpoint-silence SECONDS, the silence that ends an utterance)")
    check_threshold(vad_threshold)
    entry.require()
    return factory


class StreamingRecognizer:
    """Streaming recognition of one stream at a time (:meth:`reset` starts the next).

    Args:
        model: an adaptspeech CTC model that can stream, in evaluation mode (moved to its device by the caller).
        processor: its processor (feature extractor and tokenizer).
        chunk_ms: milliseconds of audio per encoder chunk (a multiple of the model's frame, 40 ms for the fbank
            Conformer): the latency / accuracy trade-off.
        num_left_chunks: previous chunks each chunk attends to (-1: all; a bound keeps memory flat on long streams).
        method: ``ctc_greedy`` or ``ctc_beam`` (prefix beam search): the vocabulary's streaming methods
            (:func:`~adaptspeech.runtime.decoding_methods.methods_for` ``("streaming")``); None: ``ctc_beam`` with
            ``lm`` or ``rescore``, else ``ctc_greedy``.
        beam_size: prefix beam width (None: 8, or 32 with an LM as the offline LM decoder).
        lang_ids: ``[1]`` the stream's language index, for a model routing several languages.
        language: route the stream to this language's system (its adapter, the fusion for the fusion's target, the
            encoder alone for a language without adapter: :func:`~adaptspeech.inference.language_id.routing.system_for`)
            for this stream only, without changing the model's settings: streams of different languages can share
            one model, interleaved or in threads. None: the model's settings (or the routing of the block the
            recognizer is made in).
        norm_window_s: seconds of past audio the features are normalised over.
        endpoint_silence_s: end an utterance after this many seconds of blank following some text (None: never; the
            stream is then one utterance): its text moves to :meth:`pop_segments` and the search starts afresh.
        speech_finder: what measures that silence: None (the best path's blanks, WeNet's rule) or a speech finder
            that can stream (``"silero"``: silero-vad on the audio, :mod:`.vad_endpointing`); needs
            ``endpoint_silence_s``.
        vad_threshold: ``speech_finder="silero"``: the speech probability that starts speech.
        lm: a word n-gram LM fused into the prefix beam search (``ctc_beam``): a folder as ``transcribe --lm`` takes
            (an ``lm build`` folder, or a model folder with the LM of ``lm tune --save``) or an
            :class:`~adaptspeech.lm.shallow_fusion.NGramFusion`.
        alpha, beta: the LM weight and word bonus (None: the tuned ones saved with the LM, else 0.5 and 1.0).
        rescore: at the end of each utterance, rescore the search's n-best (``beam_size``) with the attention (LAS)
            decoder (``ctc_beam``, a ``ctc_las`` model).
        ctc_weight: the CTC score's weight in the rescoring, ``ctc_weight * ctc + (1 - ctc_weight) * attention``
            (None: 0.5; given without ``rescore``: refused).
    """

    def __init__(
        self,
        model: Any,
        processor: Any,
        chunk_ms: float = 640,
        num_left_chunks: int = -1,
        method: str | None = None,
        beam_size: int | None = None,
        lang_ids: torch.Tensor | None = None,
        norm_window_s: float = DEFAULT_NORM_WINDOW_S,
        endpoint_silence_s: float | None = None,
        speech_finder: str | None = None,
        vad_threshold: float = DEFAULT_THRESHOLD,
        lm: str | os.PathLike | Any | None = None,
        alpha: float | None = None,
        beta: float | None = None,
        rescore: bool = False,
        ctc_weight: float | None = None,
        language: str | None = None,
    ) -> None:
        if getattr(model, "ctc_head", None) is None:
            raise ValueError(f"streaming decodes with a CTC head; this model has head={model.config.head!r}")
        method = resolve_method(method if method is not None or not rescore else LM_METHOD, STREAMING,
                                lm=lm is not None)
        self.fusion = self._fusion(processor, lm, alpha, beta)
        self.rescore = self._check_rescore(model, method, rescore, ctc_weight)
        self.ctc_weight = 0.5 if ctc_weight is None else float(ctc_weight)
        self.model, self.processor = model.eval(), processor
        self.chunk_size = chunk_frames(model, chunk_ms)
        self.chunk_ms = float(chunk_ms)
        self.num_left_chunks = num_left_chunks
        model.check_stream_chunks(self.chunk_size)  # refuse / warn now, not at the first chunk
        default_beam = LM_BEAM_SIZE if self.fusion is not None else 8
        self.method, self.beam_size, self.lang_ids = method, beam_size or default_beam, lang_ids
        self.routing = current_override() if language is None else routing_override(model, language)
        self.tokenizer = processor.tokenizer if language is None else \
            routed_tokenizer(model, language, processor.tokenizer)
        self.features = FeatureType.of(processor.feature_extractor)
        self.units_per_frame = model.config.inputs_to_logits_ratio // self.features.unit_hop
        self.step_units = self.chunk_size * self.units_per_frame
        self.window = max(1, round(norm_window_s * self.features.sampling_rate / self.features.unit_hop))
        frame_ms = model.frame_milliseconds()
        self.endpoint_frames = (
            None if endpoint_silence_s is None else (max(1, round(endpoint_silence_s * 1000 / frame_ms)),
                                                     max(1, round(LEADING_SILENCE_S * 1000 / frame_ms)))
        )
        self.vad = None if speech_finder is None else \
            check_stream_finder(speech_finder, vad_threshold, endpoint_silence_s)(vad_threshold)
        self.reset()

    @staticmethod
    def _fusion(processor: Any, lm: Any, alpha: float | None, beta: float | None) -> Any:
        """The :class:`~adaptspeech.lm.shallow_fusion.NGramFusion` of ``lm`` (None without; the method is checked
        by the vocabulary: ``ctc_beam`` with an LM); ValueError for weights without an LM."""
        if lm is None:
            if alpha is not None or beta is not None:
                raise ValueError("alpha / beta (--alpha / --beta) weigh an n-gram LM: give lm= (--lm) too")
            return None
        if not isinstance(lm, (str, os.PathLike)):
            return lm
        return NGramFusion.from_lm_dir(processor.tokenizer, lm, alpha=alpha, beta=beta)

    @staticmethod
    def _check_rescore(model: Any, method: str, rescore: bool, ctc_weight: float | None) -> bool:
        """``rescore``, refused (ValueError, one line) without an attention decoder, an n-best or a weight in [0, 1];
        a weight without ``rescore`` refused."""
        if not rescore:
            if ctc_weight is not None:
                raise ValueError("ctc_weight (--ctc-weight) weighs the attention rescoring: give rescore=True "
                                 "(--rescore) too")
            return False
        if getattr(model, "las_head", None) is None:
            raise ValueError(f"attention rescoring needs an attention (LAS) decoder; this model has "
                             f"head={model.config.head!r} (train one with head: ctc_las)")
        if method != LM_METHOD:
            raise ValueError(f"--method {method}: attention rescoring (--rescore) rescores the prefix beam's n-best "
                             f"(--method {LM_METHOD}, the default with it)")
        if ctc_weight is not None and not 0.0 <= ctc_weight <= 1.0:
            raise ValueError(f"ctc_weight={ctc_weight}; allowed values: numbers in [0, 1]")
        return True

    def reset(self) -> None:
        """Forget the stream: the next sample starts a new one."""
        self.stream_features = StreamFeatures(self.features, self.window)
        self.pending = self.features.empty()
        rows = self.model.row_languages(self.lang_ids)
        self.cache = self.model.start_stream(self.chunk_size, self.num_left_chunks, rows, warn=False,
                                             override=self.routing)
        self.search = self._new_search()
        blank = self.model.config.pad_token_id
        self.endpointer: Endpointer | VADEndpointer | None = None
        if self.vad is not None:
            self.endpointer = VADEndpointer(self.vad, self.model.config.inputs_to_logits_ratio, *self.endpoint_frames)
        elif self.endpoint_frames is not None:
            self.endpointer = Endpointer(blank, *self.endpoint_frames)
        self.segments: list[dict[str, Any]] = []  # utterances ended by the endpointer: text, start, end (seconds)
        self.popped = 0
        self.frames = 0  # encoder frames decoded
        self.segment_start = 0  # encoder frame where the current utterance's search started
        self.chunk_seconds: list[float] = []  # compute time of every encoder chunk (latency figures)
        self.vad_seconds = 0.0  # compute time of the speech finder that endpoints (silero), all blocks together
        self.hidden: list[torch.Tensor] = []  # the current utterance's encoder output, kept for rescoring
        self.final: Hypothesis | None = None  # the current utterance's final hypothesis, once finalised
        self.finished = False

    def _new_search(self) -> StreamingCTCGreedy | StreamingCTCPrefixBeam:
        blank = self.model.config.pad_token_id
        if self.method == "ctc_greedy":
            return StreamingCTCGreedy(blank)
        if self.fusion is not None:
            return lm_prefix_beam(self.model.config.vocab_size, blank, self.fusion, self.beam_size)
        return StreamingCTCPrefixBeam(self.model.config.vocab_size, self.beam_size, blank)

    @property
    def seconds(self) -> float:
        """Seconds of audio accepted so far."""
        return self.stream_features.total_samples / self.features.sampling_rate

    def accept_waveform(self, samples: np.ndarray | torch.Tensor) -> str:
        """More samples ``[n]`` (float, the feature extractor's rate, 16 kHz) -> the partial text; every complete
        chunk is encoded and decoded now."""
        if self.finished:
            raise ValueError("this stream was finalised; call reset() to start another")
        samples = np.asarray(samples.cpu() if isinstance(samples, torch.Tensor) else samples, dtype=np.float32)
        if samples.ndim != 1:
            raise ValueError(f"accept_waveform takes mono samples [n], got shape {samples.shape}")
        if isinstance(self.endpointer, VADEndpointer):
            start = time.perf_counter()
            self.endpointer.accept_waveform(samples)
            self.vad_seconds += time.perf_counter() - start
        raw = self.stream_features.push(samples)
        self.pending = np.concatenate([self.pending, raw]) if len(raw) else self.pending
        while len(self.pending) >= self.step_units:
            step, self.pending = self.pending[: self.step_units], self.pending[self.step_units :]
            self._encode(step, final=False)
        return self.partial()

    def _encode(self, raw: np.ndarray, final: bool) -> None:
        start = time.perf_counter()
        units = torch.from_numpy(self.stream_features.normalize(raw))[None]  # [1, n, F] or [1, n]
        model = self.model
        units = units.to(model.device, dtype=model.dtype)
        hidden, self.cache = model.encode_chunk(units, self.cache, final=final)
        if hidden.shape[1]:
            if self.rescore:
                self.hidden.append(hidden)
            with torch.no_grad(), routing_call(self.cache.row_languages, override=self.cache.override):
                logits = model.ctc_head(hidden, row_languages=self.cache.row_languages)
            log_probs = logits.float().log_softmax(dim=-1)[0].cpu()
            self.search.accept(log_probs)
            self.frames += log_probs.shape[0]
            if self.endpointer is not None:
                self._endpoint(self.endpointer.update(log_probs, bool(self.tokens())))
        self.chunk_seconds.append(time.perf_counter() - start)

    def _endpoint(self, event: str | None) -> None:
        """Close the current utterance (``"end"``) or drop leading silence (``"silence"``); the search restarts."""
        if event is None:
            return
        frame_s = self.model.frame_milliseconds() / 1000
        if event == "end":
            end = self.frames - self.endpointer.trailing
            text = label_text(self.tokenizer, self._final_hypothesis().tokens)
            self.segments.append({"text": text, "start": round(self.segment_start * frame_s, 3),
                                  "end": round(end * frame_s, 3)})
        self.search = self._new_search()
        self.hidden = []
        self.endpointer.restart()
        self.segment_start = self.frames

    def pop_segments(self) -> list[dict[str, Any]]:
        """The utterances the endpointer ended since the last call: ``{"text", "start", "end"}`` (seconds)."""
        new = self.segments[self.popped :]
        self.popped = len(self.segments)
        return new

    def text(self) -> str:
        """The whole stream's text: the ended utterances and the current one."""
        return " ".join(part for part in [*(s["text"] for s in self.segments), self.partial()] if part)

    def tokens(self) -> list[int]:
        """The label ids decoded so far (after :meth:`finalize`, the final hypothesis's)."""
        if self.final is not None:
            return self.final.tokens
        best = self.search.partial()
        return best if isinstance(best, list) else best.tokens

    def _final_hypothesis(self) -> Hypothesis:
        """The current utterance's result at its end: greedy's labels; the prefix beam's best at the end of the
        utterance (with an LM, the last word and the end of sentence scored), rescored by the attention decoder with
        ``rescore``."""
        if isinstance(self.search, StreamingCTCGreedy):
            return Hypothesis(self.search.partial(), 0.0, 0.0)
        nbest = self.search.finish(self.beam_size)
        if self.rescore and self.hidden:
            nbest = attention_rescoring.attention_rescore(self.model.las_head, torch.cat(self.hidden, dim=1), nbest,
                                                          self.ctc_weight)
        return nbest[0]

    def partial(self) -> str:
        """The text of the current utterance so far (decoded again only after new frames: a live source asks after
        every block)."""
        key = (id(self.search), self.search.frames, len(self.segments), self.final is not None)
        if getattr(self, "_partial", (None, ""))[0] != key:
            self._partial = (key, label_text(self.tokenizer, self.tokens()))
        return self._partial[1]

    def finalize(self) -> str:
        """The end of the stream: decode the rest (the last, partial chunk) -> the final text of the current utterance
        (the whole stream's without endpointing; :meth:`text` joins the ended utterances to it)."""
        if not self.finished:
            tail = self.stream_features.flush()
            raw = np.concatenate([self.pending, tail]) if len(tail) else self.pending
            self.pending = self.features.empty()
            self._encode(raw, final=True)
            self.final = self._final_hypothesis()
            self.finished = True
        return self.partial()
