"""Transcribe with an exported ONNX graph on onnxruntime, without PyTorch.

:class:`OnnxRecognizer` reads the folder ``adaptspeech export`` writes (:mod:`.folder`), computes the graph's input
with the same code as the training features (waveform samples, or :func:`~.features.log_mel_numpy` frames; the
per-utterance normalisation runs inside the graph), pads a batch, runs the graph and decodes its logits with the
torch-free CTC decoders: best path (:func:`~.ctc.greedy_decode`), prefix beam search
(:func:`~.prefix_beam.prefix_beam_search`) or pyctcdecode's beam search with the folder's n-gram LM
(:class:`adaptspeech.lm.decoder.LMDecoder`, which imports no torch).

Example:
    ```python
    >>> from adaptspeech.runtime import OnnxRecognizer
    >>> recognizer = OnnxRecognizer("exported/ro")           # doctest: +SKIP
    >>> recognizer.transcribe(["clip.wav"])[0].text          # doctest: +SKIP
    ```
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .audio import load_audio
from .ctc import greedy_decode, log_softmax
from .features import log_mel_numpy
from .folder import ExportedModel, ExportFolderError, check_vocabulary, read_export
from .prefix_beam import prefix_beam_search

DECODERS = ("greedy", "beam", "lm")


@dataclass
class Recognition:
    """One utterance's result: ``text``, the decoded label ids, and the number of real output frames."""

    text: str
    label_ids: list[int] = field(default_factory=list)
    frames: int = 0


class OnnxRecognizer:
    """An exported model on onnxruntime.

    Args:
        folder: the folder ``adaptspeech export`` wrote.
        precision: ``fp32`` or ``int8`` (None: int8 when the folder has it, else fp32).
        decoder: ``greedy`` (best path), ``beam`` (CTC prefix beam search) or ``lm`` (pyctcdecode with the folder's
            n-gram LM, or the LM at ``lm``).
        beam_size: beams kept (default: 8 for ``beam``, the LM decoder's 32 for ``lm``).
        lm: an LM folder for ``decoder="lm"`` (default: the exported folder's own).
        num_threads: onnxruntime intra-op threads.
        providers: onnxruntime execution providers (default CPU).

    Raises:
        ExportFolderError: the folder is not a usable export (see :func:`~.folder.read_export`), or its tokens or
            feature settings disagree with the graph.
    """

    def __init__(self, folder: str | os.PathLike, precision: str | None = None, decoder: str = "greedy",
                 beam_size: int | None = None, lm: str | os.PathLike | None = None, num_threads: int = 1,
                 providers: Sequence[str] | None = None) -> None:
        import onnxruntime as ort

        if decoder not in DECODERS:
            raise ValueError(f"decoder={decoder!r}; allowed values: {', '.join(DECODERS)}")
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
        self.decoder, self.beam_size = decoder, beam_size
        self._lm = self._lm_decoder(lm) if decoder == "lm" else None

    def _lm_decoder(self, lm: str | os.PathLike | None) -> Any:
        from ..lm.decoder import DEFAULT_BEAM_WIDTH, LMDecoder, build_decoder

        folder = Path(lm) if lm is not None else self.model.path
        try:
            return LMDecoder(build_decoder(self.model.table, folder), beam_width=self.beam_size or DEFAULT_BEAM_WIDTH)
        except FileNotFoundError as err:
            raise ExportFolderError(f"decoder='lm': {err}") from None

    # --- input ---------------------------------------------------------------------------------------------------
    def features(self, waveform: np.ndarray) -> np.ndarray:
        """The graph's input for one mono waveform at the model's rate: ``[S]`` samples or ``[T, n_mels]`` log-mel
        frames (un-normalised: the graph normalises)."""
        waveform = np.asarray(waveform, dtype=np.float32)
        if self.model.framed:
            return log_mel_numpy(waveform, self.model.sampling_rate, int(self.model.feature["n_mels"]))
        return waveform

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
        if self.decoder == "greedy":
            ids = greedy_decode(logits, frames, table.blank_id)
        elif self.decoder == "beam":
            ids = [best[0][0] for best in prefix_beam_search(log_softmax(logits), frames, self.beam_size or 8,
                                                            table.blank_id)]
        else:
            results = []
            for row, n in zip(log_softmax(logits), frames.tolist()):
                text, _ = self._lm.decode(row[:n], self.model.seconds_per_frame)
                results.append(Recognition(text, [], int(n)))
            return results
        return [Recognition(table.text(row), row, int(n)) for row, n in zip(ids, frames.tolist())]

    def transcribe(self, audio: Sequence[str | os.PathLike | np.ndarray], batch_size: int = 1) -> list[Recognition]:
        """Transcribe audio files (any format :func:`~.audio.load_audio` decodes) or waveforms at the model's rate,
        ``batch_size`` at a time (padded; the result does not depend on the batch)."""
        waveforms = [a if isinstance(a, np.ndarray) else load_audio(a, self.model.sampling_rate) for a in audio]
        results: list[Recognition] = []
        for start in range(0, len(waveforms), batch_size):
            results += self.decode(*self.logits(waveforms[start : start + batch_size]))
        return results
