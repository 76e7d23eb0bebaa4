"""An exported waveform model in sherpa-onnx's offline recogniser (its wav2vec2-family CTC entry point,
``OfflineRecognizer.from_omnilingual_asr_ctc``), for comparing its transcripts with adaptspeech's.

sherpa-onnx feeds the raw waveform as ``x`` alone (the graph's ``x_lengths`` default: the whole row), normalises it
itself before the graph normalises it again, reads ``[N, T, V]`` logits with blank id 0 and spells tokens from
``tokens.txt``; it keeps runs of spaces, which are collapsed here as adaptspeech's decoder does. fbank folders do not
run in sherpa-onnx (docs/export.md).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from .folder import TOKENS_FILE, ExportFolderError, read_export


def sherpa_transcribe(folder: str | os.PathLike, waveforms: Sequence[np.ndarray], precision: str = "fp32",
                      num_threads: int = 1) -> list[str]:
    """sherpa-onnx's transcripts of ``waveforms`` with an exported folder's graph.

    Args:
        folder: a folder written by ``adaptspeech export`` for a waveform model.
        waveforms: mono float32 ``[S]`` waveforms at the folder's sampling rate.
        precision: ``fp32`` or ``int8`` (the graph file of that precision).
        num_threads: sherpa-onnx's onnxruntime threads.

    Returns:
        One text per waveform, runs of spaces collapsed.

    Raises:
        ExportFolderError: a folder of a framed (fbank) model: sherpa-onnx would feed it the waveform and decode
            nonsense without an error.
    """
    exported = read_export(folder)
    if exported.framed:
        raise ExportFolderError(f"{exported.path}: a {exported.feature['type']} model; sherpa-onnx's wav2vec2-family "
                                "entry point runs waveform models only (docs/export.md)")
    import sherpa_onnx  # after the refusal, which needs no sherpa-onnx

    recognizer = sherpa_onnx.OfflineRecognizer.from_omnilingual_asr_ctc(
        model=str(exported.graph(precision)), tokens=str(exported.path / TOKENS_FILE), num_threads=num_threads)
    texts = []
    for waveform in waveforms:
        stream = recognizer.create_stream()
        stream.accept_waveform(exported.sampling_rate, np.asarray(waveform, dtype=np.float32))
        recognizer.decode_stream(stream)
        texts.append(" ".join(stream.result.text.split()))
    return texts
