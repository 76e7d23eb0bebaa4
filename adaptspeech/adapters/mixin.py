"""The language-adapter API of the adaptspeech models (MMS names where MMS has them).

Mixed into :class:`~adaptspeech.modeling.AdaptSpeechPreTrainedModel`; it relies on ``self.config``,
``self.adapter_blocks`` (encoder layer index -> :class:`LanguageAdapterBlock`), ``self.routing`` and
``self.ctc_head`` (whose per-language output layers are declared in ``config.language_heads``).

Adapter files come in two formats, told apart when loading: adaptspeech's (``adapter.<lang>.safetensors`` with
``adapter.<lang>.json``, any adapter type) and MMS's (``adapter.<lang>.safetensors`` alone, transformers' key names,
with the language's ``lm_head``; see :mod:`adaptspeech.adapters.mms`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .adapter_types import (
    ADAPTER_MODULE_NAME,
    ADAPTER_TYPES,
    AdapterType,
    LanguageAdapterConfig,
    get_adapter_type,
)
from .block import LanguageAdapterBlock, mark_initialized
from .config import check_language_code
from .files import (
    ADAPTER_CONFIG,
    ADAPTER_WEIGHTS,
    copy_tensors,
    write_tensors,
    write_weights,
)
from .fusion_mixin import FusionMixin
from .loading import plan_adapter_load
from .mms import MMSAdapter, export_problem, to_mms_tensors

#: ``save_adapter`` formats
ADAPTER_FORMATS = ("adaptspeech", "mms")


class LanguageAdapterMixin(FusionMixin):
    """Add, activate, freeze, save and load per-language adapters and their SimAdapter fusion."""

    config: Any
    adapter_blocks: dict[int, LanguageAdapterBlock]

    # --- languages -------------------------------------------------------------------------------------------
    @property
    def adapter_languages(self) -> list[str]:
        """Languages with an adapter, sorted; their positions are the ``lang_ids`` forward expects."""
        return sorted(self.config.adapters)

    @property
    def language_to_id(self) -> dict[str, int]:
        return {lang: i for i, lang in enumerate(self.adapter_languages)}

    def _check_languages(self, languages: Iterable[str], what: str) -> list[str]:
        languages = list(languages)
        unknown = [lang for lang in languages if lang not in self.config.adapters]
        if unknown:
            raise KeyError(
                f"{what}: no adapter for language(s) {unknown}; languages with one: {self.adapter_languages}"
            )
        return languages

    def add_language_adapter(self, language: str, **settings: Any) -> None:
        """Give ``language`` an adapter in every adapter layer, on the model's device and in its dtype.

        Args:
            language: language code (becomes the adapter's name and file name).
            **settings: settings of the adapter's type overriding ``config.adapter_defaults`` (e.g.
                ``bottleneck=128``, or ``adapter_type="lora", lora_r=8``); a setting of another type is refused.
        """
        check_language_code(language)
        if language in self.config.adapters:
            raise ValueError(f"language {language!r} already has an adapter; remove_language_adapter first")
        self._add_adapter(language, self.config.adapter_defaults.settings(settings, strict=True))

    def _add_adapter(self, language: str, adapter_config: LanguageAdapterConfig) -> None:
        self._build_language_adapter(language, adapter_config)
        self.config.adapters = {**self.config.adapters, language: adapter_config}
        self.sync_routing()

    def _placement(self) -> tuple[torch.device, torch.dtype]:
        """``(device, dtype)`` of the backbone's first floating-point parameter: where everything added goes."""
        for param in self.backbone.parameters():
            if param.is_floating_point():
                return param.device, param.dtype
        return torch.device("cpu"), torch.get_default_dtype()

    def _place(self, modules: Iterable[nn.Module]) -> None:
        """Move modules the toolkit added (adapters, fusion, heads) to the backbone's device and dtype."""
        device, dtype = self._placement()
        for module in modules:
            tensors = [*module.parameters(), *module.buffers()]
            if device.type == "meta" or any(t.device.type == "meta" for t in tensors):
                continue  # built on the meta device inside from_pretrained: the loader places the weights
            module.to(device=device, dtype=dtype)

    def _place_all_added(self) -> None:
        """Move every adapter, fusion and head to the backbone's device and dtype (a model built around a
        pretrained half-precision backbone)."""
        modules: list[nn.Module] = list(self.adapter_blocks.values())
        modules += [head for head in (getattr(self, "ctc_head", None), getattr(self, "las_head", None),
                                      getattr(self, "lid_head", None)) if head]
        for language in self.config.adapters:
            modules += self._adapter_type_of(language).modules(self, language)
        self._place(modules)

    def _build_language_adapter(self, language: str, adapter_config: LanguageAdapterConfig) -> None:
        adapter_type = get_adapter_type(adapter_config.adapter_type)
        adapter_type.build(self, language, adapter_config)
        self._place(adapter_type.modules(self, language))

    def _adapter_type_of(self, language: str) -> AdapterType:
        return get_adapter_type(self.config.adapters[language].adapter_type)

    def remove_language_adapter(self, language: str) -> None:
        """Remove ``language``'s adapter (and its CTC head, if it has one); refused while the language is fused."""
        self._remove_adapter(language)
        if language in self.config.language_heads:
            self.remove_language_head(language)

    def _remove_adapter(self, language: str) -> None:
        """Remove the adapter only (a load that replaces it keeps the language's head)."""
        self._check_languages([language], "remove_language_adapter")
        fusion = self.config.fusion
        if fusion is not None and language in fusion.languages:
            raise ValueError(f"language {language!r} is fused ({fusion.languages}); remove the fusion first")
        self._adapter_type_of(language).remove(self, language)
        adapters = dict(self.config.adapters)
        del adapters[language]
        self.config.adapters = adapters
        self.config.active_languages = [lang for lang in self.config.active_languages if lang != language]
        self.sync_routing()

    # --- activation --------------------------------------------------------------------------------------------
    def set_active_languages(self, languages: list[str]) -> None:
        """The adapters that run: one language, or several routed per utterance by ``lang_ids`` (fusion off)."""
        self.config.active_languages = self._check_languages(languages, "set_active_languages")
        self.config.fusion_active = False
        self.sync_routing()

    def set_target_language(self, language: str, tokenizer: Any = None) -> None:
        """MMS name: run ``language``'s adapter alone, with its CTC head (its own, else the shared one).

        Args:
            language: a language with an adapter.
            tokenizer: optionally the tokenizer (or a processor holding one) to switch with it, as MMS users do:
                a nested per-language vocabulary (transformers' ``Wav2Vec2CTCTokenizer`` of MMS) is switched with
                ``tokenizer.set_target_lang(language)``; a flat one is only checked.

        Raises:
            ValueError: the head's size differs from the vocabulary's (transformers #24223), naming both; the
                model and the tokenizer are left unchanged.
        """
        self._check_languages([language], "set_target_language")
        if tokenizer is not None:
            self._switch_vocabulary(language, tokenizer)
        self.set_active_languages([language])

    def _switch_vocabulary(self, language: str, tokenizer: Any) -> None:
        # here, not at the top: heads.ctc imports adapters.routing, whose package __init__ imports this module
        from ..heads.ctc import check_head_fits_vocabulary, language_vocab_size  # noqa: PLC0415

        tokenizer = getattr(tokenizer, "tokenizer", tokenizer)
        size, nested = language_vocab_size(tokenizer, language)
        if getattr(self, "ctc_head", None) is not None:
            check_head_fits_vocabulary(self.ctc_head.vocab_size_of(language), size, language, tokenizer)
        if nested:
            tokenizer.set_target_lang(language)

    def sync_routing(self) -> None:
        """Bring the routing settings every adapter layer reads (``model.routing``, peft's LoRA active adapters) in
        line with ``config.active_languages`` / ``fusion_active`` / the adapters; called by every user call that
        changes them (never per inference call: those route with a
        :class:`~adaptspeech.adapters.routing.RoutingOverride`)."""
        self.routing.language_ids = self.adapter_languages
        self.routing.active_languages = list(self.config.active_languages)
        self.routing.fusion_active = bool(self.config.fusion_active)
        self.routing.fusion_target = None if self.config.fusion is None else self.config.fusion.target_language
        for name in ADAPTER_TYPES.names():
            get_adapter_type(name).apply_routing(self)

    # --- per-language CTC heads --------------------------------------------------------------------------------
    def add_language_head(self, language: str, vocab_size: int) -> None:
        """Give ``language`` a CTC output layer of its own (``Linear(d, vocab_size)``, initialised like the shared
        one); it runs whenever ``language`` is the target (see :mod:`adaptspeech.heads.ctc`)."""
        self._check_languages([language], "add_language_head")
        if language in self.config.language_heads:
            raise ValueError(f"language {language!r} already has a CTC head; remove_language_head first")
        self._check_language_head(language, vocab_size)
        layer = self.ctc_head.add_language_head(language, vocab_size)
        self._init_weights(layer)
        mark_initialized(layer)
        self._place([layer])
        self.config.language_heads = {**self.config.language_heads, language: {"vocab_size": int(vocab_size)}}

    def _check_language_head(self, language: str, vocab_size: int) -> None:
        """ValueError unless this model can hold a CTC head of ``vocab_size`` outputs for ``language``."""
        if self.config.head != "ctc" or getattr(self, "ctc_head", None) is None:
            raise ValueError(
                f"a CTC head of its own for {language!r}: per-language heads need head='ctc' (this model has "
                f"head={self.config.head!r})"
            )
        if not 0 <= self.config.pad_token_id < vocab_size:
            raise ValueError(
                f"a CTC head of {vocab_size} outputs for {language!r} cannot hold the blank "
                f"(pad_token_id={self.config.pad_token_id})"
            )

    def remove_language_head(self, language: str) -> None:
        if language not in self.config.language_heads:
            raise KeyError(
                f"remove_language_head: {language!r} has no CTC head of its own; languages with one: "
                f"{sorted(self.config.language_heads)}"
            )
        self.ctc_head.remove_language_head(language)
        heads = dict(self.config.language_heads)
        del heads[language]
        self.config.language_heads = heads

    def _set_language_head(self, language: str, weight: torch.Tensor, bias: torch.Tensor) -> None:
        """Make ``language``'s own head exactly ``(weight [V, d], bias [V])`` (created or replaced as needed)."""
        if language in self.config.language_heads and self.config.language_heads[language]["vocab_size"] != len(bias):
            self.remove_language_head(language)
        if language not in self.config.language_heads:
            self.add_language_head(language, int(weight.shape[0]))
        layer = self.ctc_head.language_heads[language]
        copy_tensors({"weight": layer.weight, "bias": layer.bias}, {"weight": weight, "bias": bias})

    # --- trainable parameters ----------------------------------------------------------------------------------
    def _named_groups(self) -> dict[str, list[tuple[str, nn.Parameter]]]:
        """Parameters by group (see :meth:`_group_of`)."""
        groups: dict[str, list[tuple[str, nn.Parameter]]] = {"backbone": [], "fusion": [], "head": []}
        if getattr(self, "lid_head", None) is not None:
            groups["lid"] = []
        for lang in self.adapter_languages:
            groups[f"adapter:{lang}"] = []
        for lang in sorted(self.config.language_heads):
            groups[f"head:{lang}"] = []
        for name, param in self.named_parameters():
            groups[self._group_of(name)].append((name, param))
        return groups

    def _group_of(self, name: str) -> str:
        """The group of the parameter called ``name``: ``adapter:<lang>`` (its adapter type holds it), ``fusion``,
        ``head:<lang>`` (a language's own CTC head), ``lid`` (the language-ID head), ``backbone`` or ``head``."""
        for lang in self.config.adapters:
            if self._adapter_type_of(lang).holds(name, lang):
                return f"adapter:{lang}"
        parts = name.split(".")
        if ADAPTER_MODULE_NAME in parts:  # a language-adapter block holds the adapters and the fusion
            return "fusion"
        if name.startswith("ctc_head.language_heads."):
            return f"head:{parts[2]}"
        if name.startswith("lid_head."):
            return "lid"
        return "backbone" if name.startswith("backbone.") else "head"

    def set_trainable(
        self,
        adapters: Iterable[str] = (),
        fusion: bool = False,
        head: bool = False,
        backbone: bool = False,
        feature_encoder: bool | None = None,
        heads: Iterable[str] = (),
        lid: bool = False,
    ) -> None:
        """Set ``requires_grad`` exactly: only the named groups train.

        What is made trainable must run in forward, or it would never get a gradient: with no adapter active (and
        the fusion off) the trainable adapters become the active ones (routed per utterance by ``lang_ids`` when
        there are several), as the stage runner does; ``fusion=True`` switches on an inactive fusion in that case.
        Trainable adapters outside the active languages (or outside the fusion's languages while the fusion is
        active), ``fusion=True`` on a model without a fusion or with its fusion switched off while other adapters
        are active, are refused with one line naming them, before any flag changes.

        Args:
            adapters: languages whose adapters train.
            fusion: train the SimAdapter layers.
            head: train the shared output head(s) (the CTC ``lm_head`` of ``vocab_size``, the LAS decoder).
            backbone: train the backbone (the encoder without adapters).
            feature_encoder: train the convolutional front end (defaults to ``backbone``).
            heads: languages whose own CTC heads (``config.language_heads``) train.
            lid: train the language-ID head (:mod:`adaptspeech.heads.lid`; it reads the encoder without adapters).
        """
        adapters_given = self._check_languages(adapters, "set_trainable")
        adapters = set(adapters_given)
        heads = set(heads)
        no_head = sorted(heads - set(self.config.language_heads))
        if no_head:
            raise KeyError(
                f"set_trainable: no CTC head of their own for {no_head}; languages with one: "
                f"{sorted(self.config.language_heads)}"
            )
        self._activate_trainable([lang for lang in dict.fromkeys(adapters_given) if lang in adapters], fusion)
        for group, params in self._named_groups().items():
            if group == "backbone":
                flag = backbone
            elif group == "fusion":
                flag = fusion
            elif group == "head":
                flag = head
            elif group == "lid":
                flag = lid
            elif group.startswith("head:"):
                flag = group.split(":", 1)[1] in heads
            else:
                flag = group.split(":", 1)[1] in adapters
            for _, param in params:
                param.requires_grad = flag
        train_front_end = backbone if feature_encoder is None else bool(feature_encoder)
        self.config.backbone_spec.set_feature_encoder_trainable(self.backbone, train_front_end)
        self.train(self.training)  # frozen normalisation statistics follow the new flags

    def _activate_trainable(self, adapters: list[str], fusion: bool) -> None:
        """Make the adapters (and fusion) about to be made trainable run in forward, or refuse (see
        :meth:`set_trainable`)."""
        config = self.config
        nothing_active = not config.active_languages and not config.fusion_active
        if fusion:
            if config.fusion is None:
                raise ValueError("set_trainable(fusion=True): the model has no fusion; call add_fusion(languages) "
                                 "first")
            if not config.fusion_active and not nothing_active:
                raise ValueError(
                    "set_trainable(fusion=True): the fusion would not train: it is switched off (active languages "
                    f"{list(config.active_languages)}); call set_fusion_active(True) first"
                )
            if not config.fusion_active:
                self.set_fusion_active(True)
        if config.fusion_active:
            reached, what = list(config.fusion.languages), "the fusion's languages"
            hint = "fuse them (add_fusion) or switch the fusion off (set_active_languages)"
        else:
            if adapters and nothing_active:
                self.set_active_languages(adapters)
            reached, what = list(config.active_languages), "the active languages"
            hint = f"call set_active_languages({[*reached, *[a for a in adapters if a not in reached]]}) first"
        idle = [lang for lang in adapters if lang not in reached]
        if idle:
            raise ValueError(
                f"set_trainable: adapters {idle} would not train: they are not among {what} {reached}; {hint}, or "
                "leave them out of adapters"
            )

    def freeze_base_model(self) -> None:
        """MMS name: freeze the backbone (adapters, fusion and head keep their flags)."""
        for _, param in self._named_groups()["backbone"]:
            param.requires_grad = False
        self.config.backbone_spec.set_feature_encoder_trainable(self.backbone, False)
        self.train(self.training)

    def trainable_parameters(self) -> dict[str, Any]:
        """Per group (backbone, each language's adapter, fusion, head): total and trainable counts, plus shares."""
        groups = self._named_groups()
        report: dict[str, Any] = {"groups": {}}
        total = trainable = 0
        for group, params in groups.items():
            n = sum(p.numel() for _, p in params)
            t = sum(p.numel() for _, p in params if p.requires_grad)
            report["groups"][group] = {"total": n, "trainable": t}
            total += n
            trainable += t
        backbone = report["groups"]["backbone"]["total"]
        report.update(
            total=total,
            trainable=trainable,
            trainable_share=trainable / max(total, 1),
            backbone=backbone,
            adapter_share_of_backbone={
                g.split(":", 1)[1]: v["total"] / max(backbone, 1)
                for g, v in report["groups"].items()
                if g.startswith("adapter:")
            },
        )
        return report

    def print_trainable_parameters(self) -> str:
        """peft's one-liner plus a per-group table; returns the text it prints."""
        report = self.trainable_parameters()
        lines = [
            f"trainable params: {report['trainable']:,} || all params: {report['total']:,} || "
            f"trainable%: {100 * report['trainable_share']:.4f}"
        ]
        for group, v in report["groups"].items():
            lines.append(f"  {group:<16} {v['trainable']:>12,} / {v['total']:>12,} trainable")
        text = "\n".join(lines)
        print(text)
        return text

    # --- save / load -------------------------------------------------------------------------------------------
    def _head_tensors(self, language: str | None = None) -> dict[str, torch.Tensor]:
        """The live output-layer tensors ``language`` uses, keyed as in adapter files: its own CTC head
        (``head.lm_head.{weight,bias}``) when it has one, else the shared CTC layer (``head.lm_head.*``) and the
        LAS decoder (``las_head.*``)."""
        if language is not None and language in self.config.language_heads:
            layer = self.ctc_head.language_heads[language]
            return {"head.lm_head.weight": layer.weight, "head.lm_head.bias": layer.bias}
        tensors: dict[str, torch.Tensor] = {}
        if getattr(self, "ctc_head", None) is not None:
            tensors.update({f"head.lm_head.{k}": v for k, v in self.ctc_head.lm_head.state_dict().items()})
        if getattr(self, "las_head", None) is not None:
            tensors.update({f"las_head.{k}": v for k, v in self.las_head.state_dict().items()})
        return tensors

    def _provenance(self) -> dict[str, Any]:
        return {
            "backbone_type": self.config.backbone_type,
            "backbone_name_or_path": self.config.backbone_name_or_path,
            "backbone_revision": self.config.backbone_revision,
            "hidden_size": self.config.hidden_size,
            "num_encoder_layers": self.config.num_encoder_layers,
            "layers": sorted(self.adapter_blocks),
            "vocab_size": self.config.vocab_size,
        }

    def save_adapter(
        self,
        language: str,
        folder: str | os.PathLike,
        include_head: bool | None = None,
        format: str = "adaptspeech",
    ) -> Path:
        """Write ``language``'s adapter into ``folder``; returns the weights file.

        Args:
            language: a language with an adapter.
            folder: created if missing.
            include_head: also write the head ``language`` uses (its own CTC head, else the shared head(s));
                default False for ``"adaptspeech"``, always True for ``"mms"``.
            format: ``"adaptspeech"``: ``adapter.<lang>.safetensors`` + ``adapter.<lang>.json`` (any adapter type).
                ``"mms"``: ``adapter.<lang>.safetensors`` alone with MMS's key names and the language's CTC output
                layer as ``lm_head``, which transformers' ``Wav2Vec2ForCTC.load_adapter(lang)`` loads into an MMS
                model whose ``adapter_attn_dim`` is the adapter's bottleneck. Only adapters of MMS's shape and
                placement qualify (bottleneck with bias, LayerNorm and ReLU after every layer of a stable-layer-norm
                wav2vec2 backbone with its own attention); anything else is refused with one line saying why.
        """
        self._check_languages([language], "save_adapter")
        if format not in ADAPTER_FORMATS:
            raise ValueError(f"save_adapter: format {format!r} unknown; allowed values: {', '.join(ADAPTER_FORMATS)}")
        if format == "mms":
            return self._save_mms_adapter(language, Path(folder), include_head)
        include_head = bool(include_head)
        tensors = self._adapter_type_of(language).tensors(self, language)
        meta = {
            "language": language,
            "adapter": self.config.adapter_defaults.saved(self.config.adapters[language]),
            "include_head": include_head,
            **self._provenance(),
        }
        if include_head:
            tensors.update(self._head_tensors(language))
            if language in self.config.language_heads:
                meta["language_head"] = dict(self.config.language_heads[language])
        return write_tensors(folder, ADAPTER_WEIGHTS.format(language), ADAPTER_CONFIG.format(language), tensors, meta)

    def _save_mms_adapter(self, language: str, folder: Path, include_head: bool | None) -> Path:
        where = f"save_adapter({language!r}, format='mms')"
        if include_head is False:
            raise ValueError(
                f"{where}: MMS files always hold the language's lm_head (transformers' load_adapter needs it)"
            )
        problem = export_problem(self, language)
        if problem is None and getattr(self, "ctc_head", None) is None:
            problem = f"this model has no CTC head (head={self.config.head!r}); MMS files hold the language's lm_head"
        if problem is not None:
            raise ValueError(f"{where}: {problem}")
        stale = folder / ADAPTER_CONFIG.format(language)
        if stale.exists():
            raise ValueError(
                f"{where}: {stale} exists (an adaptspeech-format save): load_adapter would read the MMS file with it; "
                "write to another folder"
            )
        head = self._head_tensors(language)
        tensors = to_mms_tensors(
            self._adapter_type_of(language).tensors(self, language),
            {"weight": head["head.lm_head.weight"], "bias": head["head.lm_head.bias"]},
        )
        return write_weights(folder, ADAPTER_WEIGHTS.format(language), tensors)

    def load_adapter(
        self,
        language: str,
        path_or_repo: str | os.PathLike,
        revision: str | None = None,
        token: str | bool | None = None,
        cache_dir: str | None = None,
        activate: bool = True,
        load_head: bool = True,
    ) -> None:
        """Load ``adapter.<language>.safetensors`` from a folder or a Hub repo: adaptspeech's format (with its JSON)
        or MMS's (no JSON; e.g. ``load_adapter("pol", "facebook/mms-1b-all")``).

        If the model has no adapter for ``language`` yet, one is created from the file's settings; one with other
        settings (e.g. another bottleneck) is replaced. An MMS file's ``lm_head`` (and an adaptspeech file's own
        head) becomes ``language``'s CTC head, created or replaced to the file's vocabulary size. The load is
        atomic: the file's hidden size, layers, keys and every tensor shape are checked against what the file's
        settings give on this model *before* anything changes (:mod:`adaptspeech.adapters.loading`); a mismatch
        raises :class:`AdapterLoadError` naming the file, the key and both shapes, and leaves the model (weights,
        config, active languages) exactly as it was.

        Args:
            activate: make ``language`` the target language (its adapter and head run).
            load_head: load the head the file holds (False: the adapter alone, e.g. a SimAdapter source).
        """
        check_language_code(language)
        plan = plan_adapter_load(self, language, path_or_repo, revision, token, cache_dir, load_head)
        # everything fits: swap
        replace = language in self.config.adapters and self.config.adapters[language] != plan.config
        active = list(self.config.active_languages)
        if replace:
            self._remove_adapter(language)  # refuses (before changing anything) if the language is fused
        if language not in self.config.adapters:
            self._add_adapter(language, plan.config)
        if replace and not activate:
            self.config.active_languages = active
            self.sync_routing()
        copy_tensors(self._adapter_type_of(language).tensors(self, language), plan.adapter)
        if plan.head_kind == "language":
            self._set_language_head(language, plan.head["weight"], plan.head["bias"])
        elif plan.head_kind == "shared":
            copy_tensors(self._head_tensors(), plan.head)
        if activate:
            self.set_target_language(language)

    def _copy_mms_adapter(self, language: str, adapter: MMSAdapter, lm_head: nn.Module | None) -> None:
        """Copy an MMS checkpoint's built-in adapter (declared in the config as ``language``'s) and its ``lm_head``
        into the model (:meth:`from_backbone`)."""
        copy_tensors(self._adapter_type_of(language).tensors(self, language), adapter.tensors)
        if lm_head is not None:
            self._set_language_head(language, lm_head.weight.detach(), lm_head.bias.detach())
