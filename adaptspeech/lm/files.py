"""The files of an n-gram LM: complete ARPA files, the LM saved into a model folder (pyctcdecode's layout:
``alphabet.json`` and ``language_model/`` with ``attrs.json``, ``unigrams.txt`` and the KenLM file), finding the LM an
``--lm`` path names, and loading a saved decoder. A cut-short or unreadable file is refused naming it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .build import ARPA_NAME, UNIGRAMS_NAME

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


def load_processor_decoder(folder: str | os.PathLike) -> Any | None:
    """The pyctcdecode decoder saved in a model folder by :func:`save_processor_with_lm`, or None when the folder
    holds no LM. A cut-short or unreadable file of the LM is refused naming it (see :func:`check_saved_lm`)."""
    path = Path(folder)
    if not (path / ALPHABET_NAME).is_file() and not (path / LANGUAGE_MODEL_DIR).is_dir():
        return None
    check_saved_lm(path)
    from pyctcdecode import BeamSearchDecoderCTC

    return BeamSearchDecoderCTC.load_from_dir(str(path))
