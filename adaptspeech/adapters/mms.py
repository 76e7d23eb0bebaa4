"""The MMS adapter format (``facebook/mms-1b-all`` and its kin): read and write ``adapter.<lang>.safetensors`` as
transformers' ``Wav2Vec2ForCTC.load_adapter(lang)`` does, and take an MMS checkpoint's built-in adapter.

An MMS file holds, for **every** encoder layer ``i``, transformers' ``Wav2Vec2AttnAdapterLayer``
(``wav2vec2.encoder.layers.<i>.adapter_layer.{norm,linear_1,linear_2}.{weight,bias}``: LayerNorm -> Linear(d, r)
-> ReLU -> Linear(r, d), both with bias, ``r = config.adapter_attn_dim``) and the language's output layer
(``lm_head.{weight,bias}``, ``[V, d]`` / ``[V]``: one vocabulary per language). There is no JSON beside it: the
format is recognised from those keys.

Placement: ``Wav2Vec2EncoderLayerStableLayerNorm`` ends with ``h = h + ff(final_layer_norm(h))`` and then
``h = h + adapter_layer(h)``; adaptspeech's adapter hook transforms the layer's output with ``h + adapter(h)``, so
with the backbone's ``adapter_layer`` removed, a :class:`~adaptspeech.adapters.bottleneck.BottleneckAdapter` with
``bias=True`` (``norm -> layer_norm``, ``linear_1 -> down``, ``linear_2 -> up``) on every layer of a
stable-layer-norm wav2vec2 backbone computes exactly what MMS computes (tested against transformers).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from huggingface_hub import hf_hub_download
from torch import nn

from .adapter_types import get_adapter_type
from .bottleneck import BottleneckAdapterConfig
from .config import check_language_code
from .files import AdapterLoadError

#: MMS part name -> the bottleneck adapter's module name
PARTS = {"norm": "layer_norm", "linear_1": "down", "linear_2": "up"}
HEAD_KEYS = ("lm_head.weight", "lm_head.bias")
_KEY = re.compile(r"^wav2vec2\.encoder\.layers\.(\d+)\.adapter_layer\.(norm|linear_1|linear_2)\.(weight|bias)$")


def mms_key(layer: int, part: str, param: str) -> str:
    """``wav2vec2.encoder.layers.<layer>.adapter_layer.<part>.<param>`` (``part`` in :data:`PARTS`)."""
    return f"wav2vec2.encoder.layers.{layer}.adapter_layer.{part}.{param}"


def is_mms_adapter(keys: Iterable[str]) -> bool:
    """True when ``keys`` (of a safetensors file) are MMS adapter keys."""
    return any(_KEY.match(key) for key in keys)


def mms_adapter_config(bottleneck: int) -> BottleneckAdapterConfig:
    """The adaptspeech settings of an MMS adapter of width ``bottleneck`` (``adapter_attn_dim``)."""
    return BottleneckAdapterConfig(bottleneck=bottleneck, activation="relu", layer_norm=True, bias=True)


@dataclass
class MMSAdapter:
    """One language's MMS adapter, in adaptspeech's terms.

    Args:
        config: bottleneck settings (``bias=True``, LayerNorm, ReLU, ``bottleneck = adapter_attn_dim``).
        layers: the encoder layers it covers.
        hidden_size: the encoder width ``d``.
        tensors: ``layers.<i>.<param>`` -> tensor, keyed as adaptspeech's bottleneck adapter files.
        head: ``{"weight": [V, d], "bias": [V]}`` of the language's ``lm_head``, or None.
    """

    config: BottleneckAdapterConfig
    layers: list[int]
    hidden_size: int
    tensors: dict[str, torch.Tensor]
    head: dict[str, torch.Tensor] | None

    @property
    def vocab_size(self) -> int | None:
        return None if self.head is None else int(self.head["weight"].shape[0])


def read_mms_adapter(source: dict[str, torch.Tensor], origin: Path | str) -> MMSAdapter:
    """Parse the tensors of an MMS adapter file; every problem is an :class:`AdapterLoadError` naming ``origin``.

    Checks that every layer has all six tensors, that no other key is present, that the widths agree and that
    ``lm_head`` (when present) has both its weight and bias of width ``d``.
    """
    tensors: dict[str, torch.Tensor] = {}
    layers: set[int] = set()
    unknown = []
    for key, tensor in source.items():
        match = _KEY.match(key)
        if match:
            layer, part, param = int(match.group(1)), match.group(2), match.group(3)
            layers.add(layer)
            tensors[f"layers.{layer}.{PARTS[part]}.{param}"] = tensor
        elif key not in HEAD_KEYS:
            unknown.append(key)
    if unknown or not layers:
        raise AdapterLoadError(
            f"{origin} is not an MMS adapter file: unexpected keys {sorted(unknown)[:5]}"
            + ("" if layers else " and no '...adapter_layer...' keys")
        )
    missing = [
        mms_key(i, part, param)
        for i in sorted(layers)
        for part in PARTS
        for param in ("weight", "bias")
        if f"layers.{i}.{PARTS[part]}.{param}" not in tensors
    ]
    if missing:
        raise AdapterLoadError(f"{origin}: MMS adapter file misses keys {missing[:5]}")
    first = min(layers)
    down = tensors[f"layers.{first}.down.weight"]
    if down.dim() != 2:
        raise AdapterLoadError(f"{origin}: {mms_key(first, 'linear_1', 'weight')} has shape {tuple(down.shape)}")
    bottleneck, hidden_size = int(down.shape[0]), int(down.shape[1])
    head = None
    present = [key for key in HEAD_KEYS if key in source]
    if present:
        if len(present) != 2:
            raise AdapterLoadError(f"{origin}: has {present[0]} without {({*HEAD_KEYS} - {present[0]}).pop()}")
        weight, bias = source["lm_head.weight"], source["lm_head.bias"]
        if weight.dim() != 2 or weight.shape[1] != hidden_size or tuple(bias.shape) != (weight.shape[0],):
            raise AdapterLoadError(
                f"{origin}: lm_head.weight {tuple(weight.shape)} / lm_head.bias {tuple(bias.shape)} do not form an "
                f"output layer of width {hidden_size}"
            )
        head = {"weight": weight, "bias": bias}
    return MMSAdapter(mms_adapter_config(bottleneck), sorted(layers), hidden_size, tensors, head)


def to_mms_tensors(
    adapter: dict[str, torch.Tensor], head: dict[str, torch.Tensor] | None
) -> dict[str, torch.Tensor]:
    """adaptspeech bottleneck tensors (``layers.<i>.<module>.<param>``) and an output layer -> MMS keys."""
    module_to_part = {module: part for part, module in PARTS.items()}
    out: dict[str, torch.Tensor] = {}
    for key, tensor in adapter.items():
        _, layer, module, param = key.split(".")
        out[mms_key(int(layer), module_to_part[module], param)] = tensor
    if head is not None:
        out["lm_head.weight"], out["lm_head.bias"] = head["weight"], head["bias"]
    return out


def placement_problem(model: Any) -> str | None:
    """Why MMS adapters cannot sit where MMS has them in ``model`` (None when they can): MMS adapters follow
    every layer of a stable-layer-norm wav2vec2 encoder with transformers' own attention."""
    config = model.config
    if config.backbone_type != "wav2vec2" or not getattr(config.backbone_config, "do_stable_layer_norm", False):
        kind = config.backbone_type
        if kind == "wav2vec2":
            kind = "wav2vec2 with post-LN layers (do_stable_layer_norm=False)"
        return f"MMS adapters follow stable-layer-norm wav2vec2 layers; this model's backbone is {kind}"
    layers = sorted(model.adapter_blocks)
    if layers != list(range(config.num_encoder_layers)):
        return (
            f"MMS adapters are in all {config.num_encoder_layers} encoder layers; this model has adapter layers "
            f"{layers} (adapter_layers)"
        )
    return None


def export_problem(model: Any, language: str) -> str | None:
    """Why ``language``'s adapter cannot be written as an MMS file that transformers loads (None when it can)."""
    settings = model.config.adapters[language]
    if not get_adapter_type(settings.adapter_type).mms_format:
        return f"adapter of {language!r} is {settings.adapter_type!r}; MMS files hold bottleneck adapters"
    wrong = {
        key: getattr(settings, key)
        for key, mms in (("bias", True), ("layer_norm", True), ("activation", "relu"))
        if getattr(settings, key) != mms
    }
    if wrong:
        return (
            f"adapter of {language!r} has {wrong}; MMS's Wav2Vec2AttnAdapterLayer has bias=True, layer_norm=True, "
            "activation='relu'"
        )
    problem = placement_problem(model)
    if problem is not None:
        return problem
    attention = model.config.attention
    if not attention.is_default:
        return (
            f"the encoder attention is swapped ({attention.kind!r}); transformers' Wav2Vec2ForCTC runs its own "
            "attention"
        )
    return None


def take_builtin_adapter(backbone: nn.Module) -> MMSAdapter | None:
    """Remove an MMS backbone's built-in ``adapter_layer`` modules and return their weights (None without any).

    Afterwards ``backbone.config.adapter_attn_dim`` is None, so a model rebuilt from the saved config has no
    built-in adapter either (the weights live on as an adaptspeech language adapter).
    """
    bottleneck = getattr(backbone.config, "adapter_attn_dim", None)
    if bottleneck is None:
        return None
    tensors: dict[str, torch.Tensor] = {}
    layers = []
    for i, layer in enumerate(backbone.encoder.layers):
        module = getattr(layer, "adapter_layer", None)
        if module is None:
            continue
        layers.append(i)
        for part, target in PARTS.items():
            for param, tensor in getattr(module, part).named_parameters():
                tensors[f"layers.{i}.{target}.{param}"] = tensor.detach()
        layer.adapter_layer = None
    backbone.config.adapter_attn_dim = None
    if not layers:  # post-LN wav2vec2 layers never build the adapter: nothing to take
        return None
    hidden = int(backbone.config.hidden_size)
    return MMSAdapter(mms_adapter_config(int(bottleneck)), layers, hidden, tensors, None)


def builtin_language(name_or_path: str, revision: str | None = None, given: str | None = None) -> str:
    """The language of an MMS checkpoint's built-in adapter: ``given``, else the ``target_lang`` of its
    ``tokenizer_config.json``, else ``"eng"`` for ``facebook/mms-*`` (transformers: "By default MMS loads adapter
    weights for English"); otherwise ValueError asking for ``mms_language``."""
    if given is not None:
        return check_language_code(given)
    found = _tokenizer_target_lang(name_or_path, revision)
    if found:
        return check_language_code(found)
    if re.match(r"^facebook/mms-", str(name_or_path)):
        return "eng"
    raise ValueError(
        f"{name_or_path}: which language its built-in MMS adapter is for is not recorded (no target_lang in "
        "tokenizer_config.json): pass mms_language='<code>' to from_backbone"
    )


def _tokenizer_target_lang(name_or_path: str, revision: str | None) -> str | None:
    local = Path(name_or_path)
    if local.is_dir():
        path: Path | None = local / "tokenizer_config.json"
    else:
        try:
            path = Path(hf_hub_download(str(name_or_path), "tokenizer_config.json", revision=revision))
        except Exception:  # offline, no such file: not knowable from here
            path = None
    if path is None or not path.is_file():
        return None
    try:
        value = json.loads(path.read_text()).get("target_lang")
    except (OSError, json.JSONDecodeError):
        return None
    return value if isinstance(value, str) else None


def builtin_config_kwargs(
    config_kwargs: dict[str, Any],
    language: str,
    builtin: MMSAdapter,
    lm_head: nn.Linear | None,
    num_layers: int,
) -> dict[str, Any]:
    """``AdaptSpeechConfig`` kwargs that declare an MMS checkpoint's built-in adapter as ``language``'s adapter
    (and its ``lm_head`` as ``language``'s CTC head), active unless ``active_languages`` is given.

    Raises:
        ValueError: ``language`` is already among the given adapters or heads, or ``adapter_layers`` leaves out a
            layer the built-in adapter is in.
    """
    kwargs = dict(config_kwargs)
    taken = set(kwargs.get("adapters") or {}) | set(kwargs.get("adapter_languages") or [])
    if language in taken:
        raise ValueError(
            f"mms_language={language!r} names the checkpoint's built-in MMS adapter, but {language!r} is already among "
            "the adapters you gave; choose another mms_language"
        )
    layers = kwargs.get("adapter_layers")
    if layers is not None and sorted(int(i) for i in layers) != builtin.layers:
        raise ValueError(
            f"adapter_layers={list(layers)}: the checkpoint's built-in MMS adapter is in encoder layers "
            f"{builtin.layers} of {num_layers}; adaptspeech adapters must be there too"
        )
    kwargs["adapters"] = {**(kwargs.get("adapters") or {}), language: builtin.config}
    if lm_head is not None:
        heads = dict(kwargs.get("language_heads") or {})
        heads[language] = {"vocab_size": int(lm_head.out_features)}
        kwargs["language_heads"] = heads
    kwargs.setdefault("active_languages", [language])
    return kwargs
