"""A model folder written by ``save_pretrained`` (a stage's ``model/``, what ``adaptspeech train`` saves): the head its
``config.json`` records, and the model loaded as the class the head registry names for that head, so that a saved
``las`` / ``ctc_las`` model loads as what it is.

The training stages (``model.init: pretrained``), the command line (``--model DIR``) and the recipes load saved
models here.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from transformers.utils import logging as hf_logging

from .heads import HEADS

CONFIG_FILE = "config.json"
"""The file of a saved model that records its settings and its head."""

__all__ = ["CONFIG_FILE", "SavedModelError", "load_saved_model", "model_fingerprint", "saved_head"]


class SavedModelError(ValueError):
    """A folder that holds no loadable adaptspeech model; one line naming the folder and the fault."""


def saved_head(path: str | os.PathLike) -> str:
    """The head recorded in the ``config.json`` of the saved model at ``path`` (``"ctc"`` when it names none).

    Raises:
        SavedModelError: no ``config.json``, one that is not JSON, or a head the registry does not know.
    """
    config = Path(path) / CONFIG_FILE
    if not config.is_file():
        raise SavedModelError(f"{path} has no {CONFIG_FILE} (pass the model/ folder a stage or `adaptspeech train` "
                              "saved)")
    try:
        head = str(json.loads(config.read_text()).get("head", "ctc"))
    except json.JSONDecodeError as err:
        raise SavedModelError(f"{config} is not valid JSON ({err.msg})") from None
    if head not in HEADS:
        raise SavedModelError(f"{config}: {HEADS.unknown_message(head)}")
    return head


def load_saved_model(path: str | os.PathLike, progress_bar: bool = True) -> Any:
    """The saved model at ``path``, loaded (``from_pretrained``) as the model class of its head
    (``HEADS.get(head).model_class``), in the mode ``from_pretrained`` leaves it (eval).

    Args:
        progress_bar: False hides transformers' "Loading weights" bar meanwhile (its previous state is restored).

    Raises:
        SavedModelError: see :func:`saved_head`.
    """
    model_class = HEADS.get(saved_head(path)).model_class
    bars = hf_logging.is_progress_bar_enabled()
    if not progress_bar:
        hf_logging.disable_progress_bar()
    try:
        return model_class.from_pretrained(path)
    finally:
        if bars and not progress_bar:
            hf_logging.enable_progress_bar()


def model_fingerprint(model_dir: str | os.PathLike) -> str:
    """SHA-256 over the names and contents of the files of a saved model folder (a retrained model changes it): what
    a cached result or a pseudo-label records as the model it came from."""
    model_dir = Path(model_dir)
    digest = hashlib.sha256()
    for path in sorted(p for p in model_dir.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(model_dir)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()
