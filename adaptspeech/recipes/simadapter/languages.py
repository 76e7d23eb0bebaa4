"""The languages of a recipe's stages follow its ``sources`` and ``target``.

The stage files name languages (the adapters a stage adds, activates and trains; the fusion's languages and target);
the recipe names them once more in ``sources`` / ``target``, which also choose the training data. A ``target=pl``
override that left the stage files as written trained an adapter called ``sk`` on Polish audio. :func:`load_recipe`
therefore rewrites the stages' language settings from ``sources`` / ``target`` (:func:`retarget_stages`) before the
per-stage overrides apply, and refuses a stage whose languages still disagree (:func:`check_stage_languages`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from ...errors import StageConfigError


def retarget_stages(stages: Mapping[str, Any], sources: Sequence[str], target: str) -> dict[str, Any]:
    """A copy of a recipe's ``stages`` (stage name -> settings) whose language-specific settings follow its
    ``sources`` and ``target``.

    ``target=it sources="[cs, pl, sl, sk, es]"`` then trains the source adapters of those sources (each with the
    settings of the stage file's first adapter unless it names that language), the target adapter of ``it`` and a
    fusion over ``[*sources, it]`` with ``it`` as its target. Settings the stage files leave out stay out.
    """
    stages = copy.deepcopy(dict(stages))
    sources = list(sources)

    def follow(model: dict[str, Any], languages: list[str]) -> None:
        current = model.get("add_adapters")
        if current:
            template = next(iter(current.values())) or {}
            model["add_adapters"] = {lang: current.get(lang, template) for lang in languages}
        if model.get("active_languages"):
            model["active_languages"] = list(languages)
        if (model.get("trainable") or {}).get("adapters"):
            model["trainable"]["adapters"] = list(languages)

    follow(stages["source_adapters"].setdefault("model", {}), sources)
    follow(stages["target_adapter"].setdefault("model", {}), [target])
    fusion = (stages["fusion"].get("model") or {}).get("fusion")
    if fusion is not None:
        fusion["languages"] = [*sources, target]
        fusion["target_language"] = target
    return stages


def _adapter_languages(stage: dict[str, Any]) -> set[str]:
    model = stage.get("model") or {}
    found = set(model.get("add_adapters") or {})
    found |= set(model.get("active_languages") or [])
    found |= set((model.get("trainable") or {}).get("adapters") or [])
    return found


def check_stage_languages(stages: Mapping[str, Any], sources: Sequence[str], target: str) -> None:
    """Refuse stages whose language settings disagree with ``sources`` / ``target`` (one line naming both).

    Raises:
        StageConfigError: e.g. ``stages.target_adapter adds / trains adapter(s) ['ro'], but the recipe's target 'sk'``.
    """
    sources = list(sources)
    wanted = {"source_adapters": set(sources), "target_adapter": {target}}
    for name, languages in wanted.items():
        found = _adapter_languages(stages.get(name) or {})
        if found and found != languages:
            role = f"target {target!r}" if name == "target_adapter" else f"sources {sources}"
            raise StageConfigError(
                f"stages.{name} adds / trains adapter(s) {sorted(found)}, but the recipe's {role} needs "
                f"{sorted(languages)}; set target= / sources= instead of the stage's languages"
            )
    fusion = ((stages.get("fusion") or {}).get("model") or {}).get("fusion")
    if fusion is not None:
        if fusion.get("target_language") not in (None, target):
            raise StageConfigError(
                f"stages.fusion: target_language {fusion['target_language']!r}, but the recipe's target {target!r}"
            )
        if fusion.get("languages") and set(fusion["languages"]) != {*sources, target}:
            raise StageConfigError(
                f"stages.fusion: languages {fusion['languages']}, but the recipe fuses sources {sources} and target "
                f"{target!r}"
            )
