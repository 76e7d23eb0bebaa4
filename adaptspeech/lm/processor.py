"""``AdaptSpeechProcessorWithLM``: transformers' ``Wav2Vec2ProcessorWithLM`` for any adaptspeech feature extractor.

transformers' class accepts only feature extractors named ``Wav2Vec2FeatureExtractor`` (or SeamlessM4T's), which
excludes the fbank :class:`~adaptspeech.feature_extraction.AdaptSpeechFeatureExtractor`. This subclass makes the
same checks on the decoder and the vocabulary and nothing else. Saved, it writes the same files (its name, ending in
``WithLM``, in ``processor_config.json``; ``alphabet.json`` and ``language_model/`` of pyctcdecode), which is what
transformers' pipeline looks for to decode with the LM. Load it with ``AdaptSpeechProcessorWithLM.from_pretrained``,
which refuses a local folder whose LM files are cut short or unreadable, naming the file
(:func:`~adaptspeech.lm.files.check_saved_lm`). :func:`save_processor_with_lm` writes it into a model folder.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from transformers import Wav2Vec2ProcessorWithLM
from transformers.processing_utils import ProcessorMixin

from .files import check_saved_lm


class AdaptSpeechProcessorWithLM(Wav2Vec2ProcessorWithLM):
    """Feature extractor + ``Wav2Vec2CTCTokenizer`` + pyctcdecode decoder (see the module docstring)."""

    def __init__(self, feature_extractor: Any, tokenizer: Any, decoder: Any) -> None:
        from pyctcdecode import BeamSearchDecoderCTC

        ProcessorMixin.__init__(self, feature_extractor, tokenizer)
        if not isinstance(decoder, BeamSearchDecoderCTC):
            raise TypeError(f"decoder must be a pyctcdecode BeamSearchDecoderCTC, got {type(decoder).__name__}")
        missing = self.get_missing_alphabet_tokens(decoder, tokenizer)
        if missing:
            raise ValueError(f"the tokenizer's tokens {sorted(missing)} are missing from the decoder's alphabet")
        self.decoder = decoder

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike, **kwargs: Any) -> Any:
        """transformers' loading, after checking the LM files of a local folder (a cut-short ``lm.arpa``,
        ``attrs.json`` or ``alphabet.json`` is a ``ValueError`` naming it, a missing one ``FileNotFoundError``)."""
        if Path(pretrained_model_name_or_path).is_dir():
            check_saved_lm(pretrained_model_name_or_path)
        return super().from_pretrained(pretrained_model_name_or_path, **kwargs)


_STAGING = ".lm_save.partial"
_ASIDE = ".lm_save.old"


def save_processor_with_lm(processor: Any, decoder: Any, folder: str | os.PathLike) -> Path:
    """Write ``processor`` + ``decoder`` as an ``AdaptSpeechProcessorWithLM`` into ``folder`` (a model folder): its
    ``processor_config.json`` names the class, ``alphabet.json`` and ``language_model/`` hold the decoder, so
    ``pipeline("automatic-speech-recognition", model=folder)`` decodes with the LM (transformers needs ``kenlm`` and
    ``pyctcdecode`` installed for that, and falls back to greedy CTC with a warning otherwise).

    The files are written beside, into the hidden ``folder/.lm_save.partial``, checked, and then renamed into place
    (``processor_config.json``, which asks for the LM, last). A failure while writing (a full disk) leaves
    ``folder`` as it was, an earlier LM included; the error is raised.
    """
    out = Path(folder)
    staging = out / _STAGING
    _remove(staging)  # left by a killed save
    _remove(out / _ASIDE)
    staging.mkdir()
    try:
        with_lm = AdaptSpeechProcessorWithLM(feature_extractor=processor.feature_extractor,
                                          tokenizer=processor.tokenizer, decoder=decoder)
        with_lm.save_pretrained(str(staging))
        _name_processor_in_feature_extractor(staging / "processor_config.json")
        check_saved_lm(staging)
        _swap_in(staging, out)
    finally:
        _remove(staging)
    return out


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def _swap_in(staging: Path, out: Path) -> None:
    """Rename every entry of ``staging`` into ``out`` (``processor_config.json``, which asks for the LM, last), the
    ones they replace moved aside first and deleted at the end; on an error the replaced ones are put back."""
    aside = out / _ASIDE
    aside.mkdir()
    names = sorted((p.name for p in staging.iterdir()), key=lambda name: (name == "processor_config.json", name))
    done: list[tuple[str, bool]] = []  # (name, whether the one it replaces is in aside/)
    try:
        for name in names:
            earlier = (out / name).exists()
            if earlier:
                os.replace(out / name, aside / name)
            done.append((name, earlier))
            os.replace(staging / name, out / name)
    except BaseException:
        for name, earlier in reversed(done):
            _remove(out / name)
            if earlier:
                os.replace(aside / name, out / name)
        aside.rmdir()
        raise
    _remove(aside)


def _name_processor_in_feature_extractor(config_file: Path) -> None:
    """Repeat ``processor_class`` inside the saved feature extractor's settings: transformers' pipeline looks for
    the ``...WithLM`` name there (where transformers 4 wrote it), not at the top of ``processor_config.json``."""
    data = json.loads(config_file.read_text(encoding="utf-8"))
    data["feature_extractor"]["processor_class"] = data["processor_class"]
    config_file.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
