"""CTC beam search with an n-gram LM: pyctcdecode's ``BeamSearchDecoderCTC`` over KenLM, built from a model's
tokenizer, and saved beside the model as a ``Wav2Vec2ProcessorWithLM`` (transformers' pipeline then applies it).

Scores: ``log p_ctc + alpha log10-based LM score (pyctcdecode's scaling) + beta x words``; at ``alpha = beta = 0``
the LM changes nothing and the search is pyctcdecode's beam search over the CTC output alone. The alphabet is the
tokenizer's vocabulary in id order: the pad token is the CTC blank, ``|`` is a space, ``[UNK]`` is pyctcdecode's
unknown token, and the other special tokens keep their spelling (a trained CTC head never emits them).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .build import ARPA_NAME, UNIGRAMS_NAME

_SPECIAL = re.compile(r"^(<[^>]*>|\[[^\]]*\]|⁇)$")
DEFAULT_ALPHA = 0.5
DEFAULT_BETA = 1.0
DEFAULT_BEAM_WIDTH = 32


UNK_SCORE_OFFSET = -10.0


def unk_offset(alpha: float) -> float:
    """pyctcdecode's log-score offset for out-of-vocabulary words: its -10 with an LM weight, 0 at ``alpha == 0``.
    pyctcdecode adds the offset to partial words without scaling it by alpha, so with -10 at alpha = beta = 0 the LM
    would still reorder beams; with 0 the search is exactly the one without an LM."""
    return UNK_SCORE_OFFSET if alpha != 0 else 0.0


def ctc_labels(tokenizer: Any) -> list[str]:
    """pyctcdecode's labels for a ``Wav2Vec2CTCTokenizer``, index = token id."""
    vocab = tokenizer.get_vocab()
    labels = [""] * len(vocab)
    for token, index in vocab.items():
        labels[index] = token
    blank = tokenizer.pad_token_id
    delimiter = getattr(tokenizer, "word_delimiter_token", "|")
    labels = [" " if token == delimiter else token for token in labels]
    labels[blank] = ""
    if tokenizer.unk_token_id is not None:
        labels[tokenizer.unk_token_id] = "⁇"
    return labels


LANGUAGE_MODEL_DIR = "language_model"
"""Where a ``Wav2Vec2ProcessorWithLM`` keeps its LM inside a model folder (pyctcdecode's layout, with
``alphabet.json`` beside it and ``attrs.json`` holding the weights inside)."""
ALPHABET_NAME = "alphabet.json"
ATTRS_NAME = "attrs.json"


def check_arpa(path: str | os.PathLike) -> None:
    """Refuse an ARPA file that is not complete: it must start with ``\\data\\`` and end with ``\\end\\``
    (a copy cut short by a full disk lacks the end; KenLM would fail later with a less direct message). Reads only
    the first and the last bytes.

    Raises:
        ValueError: naming the file and its size.
    """
    path = Path(path)
    size = path.stat().st_size
    with path.open("rb") as handle:
        head = handle.read(4096).lstrip()
        handle.seek(max(0, size - 64))
        tail = handle.read().rstrip()
    if not head.startswith(b"\\data\\"):
        raise ValueError(f"{path}: not an ARPA file (it does not start with \\data\\; {size} bytes)")
    if not tail.endswith(b"\\end\\"):
        raise ValueError(
            f"{path}: not a complete ARPA file (no \\end\\ line: cut short at {size} bytes); write it again "
            "(`adaptspeech lm build`, or `adaptspeech lm tune --save` for a model folder's LM)"
        )


def _read_json(path: Path) -> Any:
    """The JSON in ``path``; a cut-short or unreadable file is a ``ValueError`` naming it."""
    import json

    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(
            f"{path}: unreadable ({err}); the LM saved there is incomplete: run `adaptspeech lm tune --save` again"
        ) from None


def _saved_weights(attrs_file: Path) -> dict[str, float]:
    """``{"alpha", "beta"}`` of a saved LM's ``attrs.json`` (pyctcdecode writes them there)."""
    attrs = _read_json(attrs_file)
    if not isinstance(attrs, dict) or not all(isinstance(attrs.get(k), (int, float)) for k in ("alpha", "beta")):
        raise ValueError(f"{attrs_file}: unreadable (no numeric alpha and beta in it)")
    return {"alpha": float(attrs["alpha"]), "beta": float(attrs["beta"])}


def _kenlm_file(lm_dir: Path) -> Path:
    """The KenLM file of a saved ``language_model/`` folder: the one file besides ``attrs.json`` and
    ``unigrams.txt`` (pyctcdecode keeps the name it was saved from: ``lm.arpa`` for adaptspeech's LMs)."""
    if (lm_dir / ARPA_NAME).is_file():
        return lm_dir / ARPA_NAME
    others = sorted(p for p in lm_dir.iterdir() if p.suffix in (".arpa", ".bin", ".binary") and p.is_file())
    if not others:
        raise FileNotFoundError(f"{lm_dir / ARPA_NAME}: missing, so the LM saved in {lm_dir.parent} is incomplete; "
                                "run `adaptspeech lm tune --save` again")
    return others[0]


def check_saved_lm(folder: str | os.PathLike) -> dict[str, float]:
    """Check the LM that :func:`save_processor_with_lm` wrote into a model ``folder`` (``alphabet.json``,
    ``language_model/`` with ``attrs.json``, ``unigrams.txt`` and a complete ``lm.arpa``); return its saved
    weights ``{"alpha", "beta"}``.

    Raises:
        FileNotFoundError: a file of the LM is missing (naming it).
        ValueError: a file is cut short or unreadable (naming it).
    """
    folder = Path(folder)
    lm_dir = folder / LANGUAGE_MODEL_DIR
    for name in (folder / ALPHABET_NAME, lm_dir / ATTRS_NAME, lm_dir / UNIGRAMS_NAME):
        if not name.is_file():
            raise FileNotFoundError(f"{name}: missing, so the LM saved in {folder} is incomplete; run "
                                    "`adaptspeech lm tune --save` again")
    _read_json(folder / ALPHABET_NAME)
    weights = _saved_weights(lm_dir / ATTRS_NAME)
    kenlm_file = _kenlm_file(lm_dir)
    if kenlm_file.suffix == ".arpa":
        check_arpa(kenlm_file)
    return weights


def locate_lm(lm: str | os.PathLike) -> tuple[Path, dict[str, float] | None]:
    """``(the KenLM file, saved weights or None)`` for an ``--lm`` path: an ``adaptspeech lm build`` folder (no
    saved weights), a model folder with the LM of ``adaptspeech lm tune --save``, or that LM's ``language_model/``
    folder (both: the tuned weights of ``attrs.json``). ``unigrams.txt`` is beside the KenLM file. The files are
    checked (see :func:`check_arpa`, :func:`check_saved_lm`).

    Raises:
        FileNotFoundError: none of these is there.
        ValueError: a file of the LM is cut short or unreadable (naming it).
    """
    folder = Path(lm)
    if (folder / LANGUAGE_MODEL_DIR).is_dir() or (folder / ALPHABET_NAME).is_file():
        weights = check_saved_lm(folder)
        return _kenlm_file(folder / LANGUAGE_MODEL_DIR), weights
    if (folder / ATTRS_NAME).is_file():  # a saved LM's language_model/ folder
        kenlm_file = _kenlm_file(folder)
        if kenlm_file.suffix == ".arpa":
            check_arpa(kenlm_file)
        return kenlm_file, _saved_weights(folder / ATTRS_NAME)
    if not (folder / ARPA_NAME).is_file():
        raise FileNotFoundError(
            f"--lm {folder}: no {ARPA_NAME} there, nor an LM saved into a model folder ({LANGUAGE_MODEL_DIR}/); "
            "write one with `adaptspeech lm build` (or `adaptspeech lm tune --save` into the model folder)"
        )
    check_arpa(folder / ARPA_NAME)
    return folder / ARPA_NAME, None


def build_decoder(tokenizer: Any, lm_dir: str | os.PathLike | None, alpha: float | None = None,
                  beta: float | None = None) -> Any:
    """A ``pyctcdecode.BeamSearchDecoderCTC`` over ``tokenizer``'s labels with the LM at ``lm_dir`` (None: no LM;
    see :func:`locate_lm` for the folders it may be). ``alpha`` / ``beta`` left out: the tuned weights saved with
    the LM (``adaptspeech lm tune --save``), else :data:`DEFAULT_ALPHA` / :data:`DEFAULT_BETA`."""
    from pyctcdecode import build_ctcdecoder

    kenlm_path = unigrams = saved = None
    if lm_dir is not None:
        kenlm_file, saved = locate_lm(lm_dir)
        unigram_file = kenlm_file.parent / UNIGRAMS_NAME
        if unigram_file.is_file():
            unigrams = unigram_file.read_text(encoding="utf-8").split()
        kenlm_path = str(kenlm_file)
    alpha = alpha if alpha is not None else saved["alpha"] if saved else DEFAULT_ALPHA
    beta = beta if beta is not None else saved["beta"] if saved else DEFAULT_BETA
    return build_ctcdecoder(ctc_labels(tokenizer), kenlm_model_path=kenlm_path, unigrams=unigrams, alpha=float(alpha),
                            beta=float(beta), unk_score_offset=unk_offset(alpha))


class LMDecoder:
    """Decode CTC log-probabilities ``[T, V]`` with pyctcdecode (and an LM).

    Args:
        decoder: a ``BeamSearchDecoderCTC`` (see :func:`build_decoder`, or a ``Wav2Vec2ProcessorWithLM``'s).
        beam_width: beams kept per frame.
        hotwords: words to favour (may be outside the LM's vocabulary), with ``hotword_weight``.
        token_min_logp, beam_prune_logp: pyctcdecode's pruning (its defaults -5 and -10).
    """

    def __init__(self, decoder: Any, beam_width: int = DEFAULT_BEAM_WIDTH, hotwords: Sequence[str] | None = None,
                 hotword_weight: float = 10.0, token_min_logp: float = -5.0, beam_prune_logp: float = -10.0) -> None:
        self.decoder = decoder
        self.beam_width = beam_width
        self.hotwords = list(hotwords) if hotwords else None
        self.hotword_weight = hotword_weight
        self.token_min_logp = token_min_logp
        self.beam_prune_logp = beam_prune_logp
        labels = getattr(getattr(decoder, "_alphabet", None), "labels", [])
        self.special_labels = [label for label in labels if _SPECIAL.match(label)]

    @property
    def alpha(self) -> float | None:
        """The LM weight (None without an LM)."""
        model = getattr(self.decoder, "_language_model", None)
        return None if model is None else float(model.alpha)

    @property
    def beta(self) -> float | None:
        """The word insertion bonus (None without an LM)."""
        model = getattr(self.decoder, "_language_model", None)
        return None if model is None else float(model.beta)

    def set_weights(self, alpha: float, beta: float) -> None:
        """Change the LM weight and the word bonus in place (and the out-of-vocabulary offset, see
        :func:`unk_offset`). Integers are taken as floats (pyctcdecode refuses them)."""
        alpha, beta = float(alpha), float(beta)
        self.decoder.reset_params(alpha=alpha, beta=beta, unk_score_offset=unk_offset(alpha))

    def decode(self, log_probs: torch.Tensor | np.ndarray, seconds_per_frame: float = 0.04,
               beam_size: int | None = None) -> tuple[str, list[dict[str, Any]]]:
        """``(text, words)`` with ``words = [{"text", "start", "end"}, ...]`` (seconds) of the best beam.

        Args:
            log_probs: ``[T, V]`` CTC log-probabilities of the real frames.
            seconds_per_frame: the output frame period (``inputs_to_logits_ratio / 16000``).
            beam_size: overrides ``beam_width`` for this call.
        """
        logits = np.asarray(log_probs.detach().float().cpu() if isinstance(log_probs, torch.Tensor) else log_probs,
                            dtype=np.float32)
        beams = self.decoder.decode_beams(
            logits, beam_width=beam_size or self.beam_width, beam_prune_logp=self.beam_prune_logp,
            token_min_logp=self.token_min_logp, hotwords=self.hotwords, hotword_weight=self.hotword_weight,
        )
        text, frames = self._clean(beams[0][0]), beams[0][2]
        words = [{"text": self._clean(word), "start": round(start * seconds_per_frame, 6),
                  "end": round(end * seconds_per_frame, 6)} for word, (start, end) in frames]
        return text, [word for word in words if word["text"]]

    def _clean(self, text: str) -> str:
        """Drop the special tokens (``<s>``, ``</s>``, unknown), as the other decoders' text does."""
        for label in self.special_labels:
            text = text.replace(label, "")
        return " ".join(text.split())


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
    from .processor import AdaptSpeechProcessorWithLM

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
    import shutil

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
    import json

    data = json.loads(config_file.read_text(encoding="utf-8"))
    data["feature_extractor"]["processor_class"] = data["processor_class"]
    config_file.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def load_processor_decoder(folder: str | os.PathLike) -> Any | None:
    """The pyctcdecode decoder saved in a model folder by :func:`save_processor_with_lm`, or None when the folder
    holds no LM. A cut-short or unreadable file of the LM is refused naming it (see :func:`check_saved_lm`)."""
    path = Path(folder)
    if not (path / ALPHABET_NAME).is_file() and not (path / LANGUAGE_MODEL_DIR).is_dir():
        return None
    check_saved_lm(path)
    from pyctcdecode import BeamSearchDecoderCTC

    return BeamSearchDecoderCTC.load_from_dir(str(path))
