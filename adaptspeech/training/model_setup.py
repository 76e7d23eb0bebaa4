"""What a stage does to a built model beside adapters and fusion: loading adapter files (``model.load_adapters``)
and checking that the output layers it trains have the prepared vocabulary's size."""

from __future__ import annotations

from typing import Any

from .errors import StageConfigError


def load_adapters(model: Any, entries: dict[str, Any]) -> None:
    """``model.load_adapters``: language -> ``{path, load_head}`` (or just the path): adapter files in adaptspeech's
    or MMS's format (see ``load_adapter``), loaded before ``add_adapters`` and the fusion, none of them activated
    (the stage's trainable / active settings decide that)."""
    from ..adapters.files import AdapterLoadError

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
