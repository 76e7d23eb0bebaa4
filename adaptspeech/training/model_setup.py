"""The model of a stage, from its ``model`` section: built from a config, wrapped around a Hub backbone or loaded from
a saved folder (:func:`~adaptspeech.saved_model.load_saved_model`), then given its adapter files, new adapters,
fusion, active languages and trainable groups (:func:`build_model`), and checked against the prepared vocabulary."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..adapters.files import AdapterLoadError
from ..configuration import AdaptSpeechConfig
from ..errors import StageConfigError
from ..heads import HEADS
from ..saved_model import SavedModelError, load_saved_model
from .model_size import check_model_size
from .spec_types import ModelSettings

__all__ = ["build_model", "check_vocabulary", "load_adapters"]


def _model_class(head: str) -> type:
    """The adaptspeech model class of ``model.config.head`` (``HEADS.get(head).model_class``)."""
    if head not in HEADS:
        raise StageConfigError(f"model.config.head: {HEADS.unknown_message(head)}")
    return HEADS.get(head).model_class


def _construct(model_spec: ModelSettings, processor: Any) -> Any:
    """The model of ``model.init``: ``pretrained`` loads the saved folder as the class its head names; ``config`` and
    ``backbone`` build the class of ``model.config.head`` with the prepared vocabulary's size and special tokens."""
    init = model_spec.init
    if init == "pretrained":
        path = Path(model_spec.path)
        if not path.exists():
            raise StageConfigError(f"model.path {path} does not exist (did the previous stage run?)")
        try:
            return load_saved_model(path)
        except SavedModelError as err:
            raise StageConfigError(f"model.path: {err}") from None
    kwargs = dict(model_spec.config or {})
    tokenizer = processor.tokenizer
    kwargs.setdefault("vocab_size", len(tokenizer))
    kwargs.setdefault("pad_token_id", tokenizer.pad_token_id)
    if tokenizer.bos_token_id is not None:
        kwargs.setdefault("bos_token_id", tokenizer.bos_token_id)
        kwargs.setdefault("eos_token_id", tokenizer.eos_token_id)
    cls = _model_class(kwargs.get("head", "ctc"))
    try:
        if init == "backbone":
            return cls.from_backbone(model_spec.path, mms_language=model_spec.mms_language, **kwargs)
        config = AdaptSpeechConfig(**kwargs)
        check_model_size(cls, config, kwargs.get("backbone_config"))  # counted on the meta device, before building
        return cls(config)
    except StageConfigError:
        raise
    except (ValueError, KeyError) as err:
        message = err.args[0] if isinstance(err, KeyError) and err.args else str(err)
        raise StageConfigError(f"model.config: {message}") from err


def _activate_trainable_adapters(
    model: Any, model_spec: ModelSettings, trainable_adapters: list[str], trainable_fusion: bool = False
) -> None:
    """Make the trainable adapters the active ones (see :mod:`adaptspeech.training.stage`), or refuse a setting that
    leaves one of them (or a trainable fusion) out of the forward pass."""
    active = model_spec.active_languages
    if active is not None:
        try:
            model.set_active_languages(list(active))
        except KeyError as err:
            raise StageConfigError(f"model.active_languages: {err.args[0]}") from None
        if trainable_fusion and model.config.fusion is not None:
            raise StageConfigError(
                f"model.trainable.fusion: the fusion would not train: model.active_languages {list(active)} switches "
                "it off (active languages run their own adapters); remove model.active_languages or "
                "model.trainable.fusion"
            )
    elif trainable_adapters and not model.config.fusion_active:
        model.set_active_languages(list(trainable_adapters))
    if model.config.fusion_active:
        reached, what = list(model.config.fusion["languages"]), "the fusion's languages (model.fusion.languages)"
    else:
        reached, what = list(model.config.active_languages), "model.active_languages"
    idle = [lang for lang in trainable_adapters if lang not in reached]
    if idle:
        raise StageConfigError(
            f"model.trainable.adapters {idle} would not train: they are not among {what} {reached}; add them there "
            "or remove them from model.trainable.adapters"
        )


def build_model(
    model_spec: ModelSettings | Mapping[str, Any], processor: Any, train_languages: list[str] | None = None
) -> Any:
    """Create / load the model of a stage and apply its adapter, fusion, active-language and trainable settings.

    ``init: pretrained`` reads the head from the saved ``config.json`` and loads the class the head registry names
    for it, so a saved ``las`` / ``ctc_las`` model loads as what it is.

    Args:
        model_spec: the stage's ``model`` section (a mapping is read with :meth:`ModelSettings.read`).
        processor: the prepared ``Wav2Vec2Processor`` (its tokenizer sizes a model built from a config).
        train_languages: the stage's training languages: the languages of a new language-ID head unless
            ``model.lid.languages`` names them.
    """
    model_spec = ModelSettings.parse(model_spec)
    model = _construct(model_spec, processor)
    if model_spec.mms_language and model_spec.init != "backbone":
        raise StageConfigError("model.mms_language names the built-in adapter of an MMS checkpoint: use it with "
                               "model.init: backbone")
    load_adapters(model, model_spec.load_adapters or {})
    try:
        for language, settings in (model_spec.add_adapters or {}).items():
            if language not in model.config.adapters:
                model.add_language_adapter(language, **(settings or {}))
        fusion = model_spec.fusion
        if fusion:
            fusion = dict(fusion)
            languages = fusion.pop("languages")
            model.add_fusion(languages, **fusion)
    except (ValueError, KeyError) as err:
        message = err.args[0] if isinstance(err, KeyError) and err.args else str(err)
        raise StageConfigError(f"model.add_adapters / model.fusion: {message}") from err
    if model_spec.fusion_path:
        if model.config.fusion is None:
            raise StageConfigError(
                f"model.fusion_path: {model_spec.fusion_path!r} names how a fusion is computed, but this model has "
                "no fusion (add one with model.fusion)"
            )
        model.set_fusion_path(model_spec.fusion_path)
    trainable = model_spec.trainable_groups
    _add_lid_head(model, model_spec, trainable.lid, train_languages)
    adapters = list(trainable.adapters or [])
    unknown = [lang for lang in adapters if lang not in model.config.adapters]
    if unknown:
        raise StageConfigError(
            f"model.trainable.adapters: no adapter for {unknown}; languages with one: {sorted(model.config.adapters)} "
            "(add one with model.add_adapters)"
        )
    heads = list(trainable.heads or [])
    no_head = [lang for lang in heads if lang not in model.config.language_heads]
    if no_head:
        raise StageConfigError(
            f"model.trainable.heads: no language head for {no_head}; languages with one: "
            f"{sorted(model.config.language_heads)}"
        )
    _activate_trainable_adapters(model, model_spec, adapters, trainable.fusion)
    check_vocabulary(model, processor.tokenizer)
    try:
        model.set_trainable(
            adapters=adapters,
            fusion=trainable.fusion,
            head=trainable.head,
            backbone=trainable.backbone,
            feature_encoder=trainable.feature_encoder,
            heads=heads,
            lid=trainable.lid,
        )
    except ValueError as err:  # what the checks above do not already name (e.g. a fusion the model lacks)
        raise StageConfigError(f"model.trainable: {err}") from None
    return model


def _add_lid_head(model: Any, model_spec: ModelSettings, trainable: bool, train_languages: list[str] | None) -> None:
    """A new language-ID head when ``model.lid`` asks for one or ``model.trainable.lid`` trains one the model lacks
    (over ``model.lid.languages``, else the stage's training languages); refused when ``model.lid`` would replace
    the model's own head with other settings."""
    settings = dict(model_spec.lid or {})
    given = settings.pop("languages", None)
    languages = given or train_languages
    if model.lid_head is not None:
        if model_spec.lid is not None and (
            (given is not None and list(given) != list(model.config.lid_languages)) or
            {**model.config.lid.to_dict(), **settings} != model.config.lid.to_dict()
        ):
            raise StageConfigError(
                f"model.lid: the model already has a language-ID head over {model.config.lid_languages} "
                f"({model.config.lid.to_dict()}); remove model.lid to train it further"
            )
        return
    if not trainable and model_spec.lid is None:
        return
    if not trainable:
        raise StageConfigError("model.lid adds a language-ID head that would not train: set model.trainable.lid: true")
    try:
        model.add_lid_head(list(languages or []), **settings)
    except ValueError as err:
        raise StageConfigError(f"model.lid: {err}") from None


def load_adapters(model: Any, entries: dict[str, Any]) -> None:
    """``model.load_adapters``: language -> ``{path, load_head}`` (or just the path): adapter files in adaptspeech's
    or MMS's format (see ``load_adapter``), loaded before ``add_adapters`` and the fusion, none of them activated
    (the stage's trainable / active settings decide that)."""
    for language, entry in entries.items():
        settings = {"path": entry} if isinstance(entry, str) else dict(entry or {})
        unknown = sorted(set(settings) - {"path", "load_head", "revision"})
        if unknown or not isinstance(settings.get("path"), str):
            raise StageConfigError(
                f"model.load_adapters.{language}: expected a path or {{path, load_head, revision}}, got {entry!r}"
            )
        try:
            model.load_adapter(language, settings["path"], revision=settings.get("revision"), activate=False,
                               load_head=bool(settings.get("load_head", True)))
        except (AdapterLoadError, FileNotFoundError, ValueError, KeyError) as err:
            message = err.args[0] if isinstance(err, KeyError) and err.args else str(err)
            raise StageConfigError(f"model.load_adapters.{language}: {message}") from err


def check_vocabulary(model: Any, tokenizer: Any) -> None:
    """Every output layer the stage runs (the active languages' heads, or the shared one) must have the prepared
    vocabulary's size (a CTC head of another size would train against the wrong labels, transformers #24223)."""
    size = len(tokenizer)
    ctc_head = getattr(model, "ctc_head", None)
    languages = list(model.config.active_languages) or [None]
    if model.config.fusion_active and model.config.fusion.get("target_language"):
        languages = [model.config.fusion["target_language"]]
    for language in languages:
        head = ctc_head.vocab_size_of(language) if ctc_head is not None else model.config.vocab_size
        if head != size:
            which = f"{language}'s CTC head" if ctc_head is not None and language in model.config.language_heads \
                else "the model's vocabulary"
            raise StageConfigError(
                f"{which} ({head} tokens) does not match the prepared vocabulary ({size} tokens in the processor of "
                "data.prepared_dir)"
            )
