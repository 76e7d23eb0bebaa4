"""A CTC model as the aligner reads it: its labels, and a recording's frame log-probabilities computed piecewise.

Two kinds of model folder:

- a model folder of ours (``adaptspeech train``'s ``OUTPUT_DIR/model``, any backbone): a model without adapters (a
  multilingual base, one shared head) is used as it is for any language; otherwise the language's adapter is made
  the active one (:meth:`~adaptspeech.adapters.mixin.AdapterMixin.set_target_language`, which also switches a
  per-language vocabulary) and the recording goes through the long-form planner of ``transcribe``
  (:func:`~adaptspeech.inference.transcriber.recording_ctc_log_probs`: speech regions cut at pauses, each read as an
  utterance, a region longer than ``chunk_length_s`` in strided chunks), so memory stays bounded however long the
  recording; frames between regions are blank (no word delimiter is forced in a pause: a pause may end a line);
- a transformers CTC checkpoint in a local folder (``AutoModelForCTC`` with its processor, e.g. a wav2vec2 / MMS
  fine-tune): the waveform in strided chunks of ``chunk_length_s`` (:func:`~adaptspeech.runtime.long_form.
  plan_chunks`, transformers' pipeline rule), each normalised by its feature extractor; an MMS checkpoint with
  adapters loads the language's (``load_adapter``) and its vocabulary.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..inference import DEFAULT_CHUNK_LENGTH_S, DEFAULT_STRIDE_LENGTH_S

SAMPLING_RATE = 16000


class AlignmentModelError(ValueError):
    """A model folder the aligner cannot use (missing, no CTC head, no adapter or vocabulary for the language)."""


@dataclass
class AlignmentModel:
    """A CTC model with what the aligner needs of it.

    Attributes:
        model: the torch model (eval mode).
        processor: its processor (feature extractor + tokenizer, switched to the language).
        language: the language aligned.
        vocab: ``{label: id}`` of the language's CTC head.
        blank_id, word_delimiter_id: the CTC blank and the word delimiter (``|``).
        seconds_per_frame: seconds between two output frames.
        ours: a model folder of ours (else a transformers checkpoint).
        lang_ids: ``[1]`` the language's index for a model routing several languages, else None.
    """

    model: Any
    processor: Any
    language: str
    vocab: dict[str, int]
    blank_id: int
    word_delimiter_id: int
    seconds_per_frame: float
    ours: bool
    lang_ids: Any = None
    chunk_length_s: float = DEFAULT_CHUNK_LENGTH_S
    stride_length_s: float = DEFAULT_STRIDE_LENGTH_S

    def log_probs(self, waveform: np.ndarray) -> np.ndarray:
        """``[T, V]`` float32 CTC log-probabilities of a 16 kHz recording ``[S]``, computed piecewise."""
        import torch

        with torch.no_grad():
            if self.ours:
                return self._ours(waveform)
            return self._transformers(waveform)

    def _ours(self, waveform: np.ndarray) -> np.ndarray:
        from ..inference.long_form.local_norm import recording_input
        from ..inference.transcriber import LongFormSettings, recording_ctc_log_probs

        settings = LongFormSettings(chunk_length_s=self.chunk_length_s, stride_length_s=self.stride_length_s)
        features = recording_input(waveform, self.processor.feature_extractor, settings.norm_window_s)
        log_probs, _ = recording_ctc_log_probs(self.model, features, waveform, settings, self.lang_ids, None)
        return log_probs.float().numpy()

    def _transformers(self, waveform: np.ndarray) -> np.ndarray:
        import torch

        from ..runtime.long_form import plan_chunks

        per_frame = round(self.seconds_per_frame * SAMPLING_RATE)
        chunk_frames = max(1, round(self.chunk_length_s / self.seconds_per_frame))
        stride_frames = round(self.stride_length_s / self.seconds_per_frame)
        pieces = []
        for chunk in plan_chunks(len(waveform), per_frame, chunk_frames, stride_frames):
            inputs = self.processor.feature_extractor(waveform[chunk.start : chunk.end], sampling_rate=SAMPLING_RATE,
                                                      return_tensors="pt")
            logits = self.model(inputs.input_values.to(self.model.device)).logits[0]
            pieces.append(torch.log_softmax(logits.float(), dim=-1)[chunk.keep_from : chunk.keep_to].cpu())
        return torch.cat(pieces).numpy()

    def greedy_text(self, log_probs: np.ndarray) -> str:
        """The model's own best-path reading of frames ``[n, V]``: argmax, repeats merged, blanks dropped, the word
        delimiter a space."""
        from ..inference.long_form.stitching import label_text

        best = np.asarray(log_probs).argmax(-1)
        ids = [int(x) for i, x in enumerate(best) if x != self.blank_id and (i == 0 or x != best[i - 1])]
        return label_text(self.processor.tokenizer, ids)


def load_alignment_model(model_dir: str | os.PathLike[str], language: str, *, device: str = "cpu",
                         chunk_length_s: float = DEFAULT_CHUNK_LENGTH_S,
                         stride_length_s: float = DEFAULT_STRIDE_LENGTH_S) -> AlignmentModel:
    """Load a model folder of ours or a transformers CTC checkpoint for aligning ``language`` (module docstring).

    Raises:
        AlignmentModelError: no such folder, no ``config.json``, no processor beside the model, no CTC head, or
            adapters but none for ``language`` / no vocabulary for it (the message names the folder and the
            languages it has).
    """
    path = Path(model_dir)
    if not (path / "config.json").is_file():
        raise AlignmentModelError(f"--model {path}: no config.json there (a model folder of `adaptspeech train`, or a "
                                  "transformers CTC checkpoint)")
    import json

    model_type = json.loads((path / "config.json").read_text(encoding="utf-8")).get("model_type")
    ours = model_type == "adaptspeech"
    loaded = _load_ours(path, language) if ours else _load_transformers(path, language)
    model, processor, lang_ids, seconds_per_frame = loaded
    model.to(device)
    tokenizer = processor.tokenizer
    vocab = dict(tokenizer.get_vocab())
    delimiter = getattr(tokenizer, "word_delimiter_token", None) or "|"
    if delimiter not in vocab:
        raise AlignmentModelError(f"--model {path}: its vocabulary has no word delimiter {delimiter!r}")
    blank_id = int(getattr(model.config, "pad_token_id", None) or tokenizer.pad_token_id or 0)
    return AlignmentModel(model, processor, language, vocab, blank_id, vocab[delimiter], seconds_per_frame, ours,
                          lang_ids, chunk_length_s, stride_length_s)


def _load_ours(path: Path, language: str) -> tuple[Any, Any, Any, float]:
    import torch
    from transformers import Wav2Vec2Processor

    from ..data.collator import routes_languages
    from ..inference.long_form.recording import FrameGrid
    from ..saved_model import load_saved_model

    model = load_saved_model(path, progress_bar=False).eval()
    if getattr(model, "ctc_head", None) is None:
        raise AlignmentModelError(f"--model {path}: the model has no CTC head (alignment reads CTC posteriors)")
    try:
        processor = Wav2Vec2Processor.from_pretrained(path)
    except (OSError, ValueError) as err:
        raise AlignmentModelError(f"--model {path}: no processor saved beside the model ({err})") from None
    if model.adapter_languages and language not in model.adapter_languages:
        raise AlignmentModelError(f"--language {language!r}: the model {path} has no adapter for it; languages with "
                                  f"one: {', '.join(model.adapter_languages) or '(none)'}")
    lang_ids = None
    if not model.adapter_languages:
        pass  # a multilingual base: its shared head reads every language it was trained on
    elif routes_languages(model):
        lang_ids = torch.tensor([model.language_to_id[language]])
    elif not model.config.fusion_active:
        model.set_target_language(language, processor)
    return model, processor, lang_ids, FrameGrid.of(model).seconds_per_frame


def _load_transformers(path: Path, language: str) -> tuple[Any, Any, Any, float]:
    from transformers import AutoModelForCTC, AutoProcessor

    try:
        model = AutoModelForCTC.from_pretrained(path).eval()
        processor = AutoProcessor.from_pretrained(path)
    except (OSError, ValueError) as err:
        raise AlignmentModelError(f"--model {path}: not a transformers CTC checkpoint with its processor ({err})") \
            from None
    tokenizer = processor.tokenizer
    if getattr(tokenizer, "target_lang", None) is not None or isinstance(next(iter(tokenizer.vocab.values())), dict):
        languages = sorted(tokenizer.vocab) if isinstance(next(iter(tokenizer.vocab.values())), dict) else []
        if language not in languages:
            raise AlignmentModelError(f"--language {language!r}: the checkpoint {path} has no vocabulary for it; "
                                      f"languages with one: {', '.join(languages) or '(none)'}")
        tokenizer.set_target_lang(language)
        if getattr(model.config, "adapter_attn_dim", None):
            model.load_adapter(language)
    ratio = int(np.prod(model.config.conv_stride)) if hasattr(model.config, "conv_stride") else 320
    return model, processor, None, ratio / SAMPLING_RATE
