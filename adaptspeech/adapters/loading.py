"""The validating half of an atomic ``load_adapter``: read an adapter file (adaptspeech's or MMS's format) and check
everything against the model, changing nothing; the model's :meth:`load_adapter` then swaps.

Formats, told apart by what lies in the folder / repo:

* adaptspeech: ``adapter.<lang>.safetensors`` + ``adapter.<lang>.json`` (settings, layers, hidden size, whether a
  head is included and whether it is the language's own head);
* MMS: ``adapter.<lang>.safetensors`` alone, recognised from its keys (:mod:`adaptspeech.adapters.mms`); its
  ``lm_head`` becomes the language's own CTC head.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .adapter_types import LanguageAdapterConfig, get_adapter_type
from .files import (
    ADAPTER_CONFIG,
    ADAPTER_WEIGHTS,
    AdapterLoadError,
    check_shapes,
    read_meta,
    read_tensors,
    resolve_file,
)
from .mms import is_mms_adapter, placement_problem, read_mms_adapter

HEAD_PREFIXES = ("head.", "las_head.")


@dataclass
class AdapterPlan:
    """A checked adapter file, ready to be swapped in.

    Args:
        config: the adapter's settings.
        adapter: the adapter's tensors, keyed as the adapter type's :meth:`tensors`.
        head: head tensors to load (``{"weight", "bias"}`` for a language head, ``head.*`` / ``las_head.*`` for the
            shared heads), or None.
        head_kind: ``"language"`` (the language's own CTC head), ``"shared"`` or None.
        origin: the weights file (for messages).
    """

    config: LanguageAdapterConfig
    adapter: dict[str, torch.Tensor]
    head: dict[str, torch.Tensor] | None
    head_kind: str | None
    origin: Path


def plan_adapter_load(
    model: Any,
    language: str,
    path_or_repo: str | os.PathLike,
    revision: str | None = None,
    token: str | bool | None = None,
    cache_dir: str | None = None,
    load_head: bool = True,
) -> AdapterPlan:
    """Read and check ``language``'s adapter file in ``path_or_repo`` against ``model``; change nothing.

    Raises:
        FileNotFoundError: neither format's files are there (naming what is).
        AdapterLoadError: the file does not fit the model (naming the file, the key or setting, and both sides).
    """
    try:
        meta_path = resolve_file(path_or_repo, ADAPTER_CONFIG.format(language), revision, token, cache_dir)
    except FileNotFoundError as no_meta:
        try:
            weights_path = resolve_file(path_or_repo, ADAPTER_WEIGHTS.format(language), revision, token, cache_dir)
        except FileNotFoundError:
            raise FileNotFoundError(
                f"{no_meta} (nor {ADAPTER_WEIGHTS.format(language)} alone, as MMS stores adapters)"
            ) from None
        source = read_tensors(weights_path)
        if not is_mms_adapter(source):
            raise FileNotFoundError(
                f"{no_meta}; {weights_path.name} has no JSON beside it and is not an MMS adapter file either"
            ) from None
        return _plan_mms(model, language, weights_path, source, load_head)
    weights_path = resolve_file(path_or_repo, ADAPTER_WEIGHTS.format(language), revision, token, cache_dir)
    return _plan_native(model, language, meta_path, weights_path, load_head)


def _plan_native(model: Any, language: str, meta_path: Path, weights_path: Path, load_head: bool) -> AdapterPlan:
    config = model.config
    meta = read_meta(meta_path)
    if meta.get("hidden_size") != config.hidden_size:
        raise AdapterLoadError(
            f"{weights_path}: adapter for {language!r} was trained on hidden size {meta.get('hidden_size')}, "
            f"this model has {config.hidden_size}"
        )
    if meta.get("layers") != sorted(model.adapter_blocks):
        raise AdapterLoadError(
            f"{weights_path}: adapter for {language!r} covers encoder layers {meta.get('layers')}, this model "
            f"has adapter layers {sorted(model.adapter_blocks)}"
        )
    try:
        adapter_config = LanguageAdapterConfig.from_dict(meta["adapter"])
    except (KeyError, TypeError, ValueError) as err:
        raise AdapterLoadError(f"{meta_path}: adapter settings do not fit: {err}") from err
    adapter_type = get_adapter_type(adapter_config.adapter_type)
    source = read_tensors(weights_path)
    try:
        expected = adapter_type.expected_shapes(model, language, adapter_config)
    except ValueError as err:
        raise AdapterLoadError(f"{weights_path}: {err}") from err
    head_kind = None
    if meta.get("include_head"):
        own = meta.get("language_head")
        if own:
            vocab_size = int(own.get("vocab_size", 0))
            try:
                model._check_language_head(language, vocab_size)
            except ValueError as err:
                raise AdapterLoadError(f"{weights_path}: {err}") from err
            head_kind = "language"
            head_shapes = {
                "head.lm_head.weight": (vocab_size, config.hidden_size),
                "head.lm_head.bias": (vocab_size,),
            }
        else:
            head_kind = "shared"
            head_shapes = {k: tuple(v.shape) for k, v in model._head_tensors().items()}
        expected.update(head_shapes)
    check_shapes(expected, source, weights_path)
    adapter = {k: v for k, v in source.items() if not k.startswith(HEAD_PREFIXES)}
    head = {k: v for k, v in source.items() if k.startswith(HEAD_PREFIXES)} or None
    if head_kind == "language" and head is not None:
        head = {"weight": head["head.lm_head.weight"], "bias": head["head.lm_head.bias"]}
    if not load_head:
        head, head_kind = None, None
    return AdapterPlan(adapter_config, adapter, head, head_kind, weights_path)


def _plan_mms(
    model: Any, language: str, weights_path: Path, source: dict[str, torch.Tensor], load_head: bool
) -> AdapterPlan:
    mms = read_mms_adapter(source, weights_path)
    if mms.hidden_size != model.config.hidden_size:
        raise AdapterLoadError(
            f"{weights_path}: MMS adapter for {language!r} has width {mms.hidden_size}, this model has hidden size "
            f"{model.config.hidden_size}"
        )
    problem = placement_problem(model)
    if problem is not None:
        raise AdapterLoadError(f"{weights_path}: {problem}")
    if mms.layers != sorted(model.adapter_blocks):
        raise AdapterLoadError(
            f"{weights_path}: MMS adapter for {language!r} covers encoder layers {mms.layers}, this model has "
            f"{model.config.num_encoder_layers} (adapter layers {sorted(model.adapter_blocks)})"
        )
    expected = get_adapter_type(mms.config.adapter_type).expected_shapes(model, language, mms.config)
    check_shapes(expected, mms.tensors, weights_path)
    head, head_kind = None, None
    if load_head and mms.head is not None:
        try:
            model._check_language_head(language, int(mms.vocab_size))
        except ValueError as err:
            raise AdapterLoadError(f"{weights_path}: {err} (load_head=False loads the adapter alone)") from err
        head, head_kind = mms.head, "language"
    return AdapterPlan(mms.config, mms.tensors, head, head_kind, weights_path)
