"""``target=`` / ``sources=`` overrides of a recipe reach the language-specific stage settings (the adapters each stage
adds and trains, the fusion's languages and target). The demo README advertised ``adaptspeech demo target=pl ...``,
but the stage files name the demo's languages, so the target stage trained an adapter called ``sk`` on Polish audio
and the fusion fused ``sk``: a silently wrong run."""

from __future__ import annotations

import pytest

from adaptspeech.recipes import RecipeError, load_recipe


def languages_of(stage: dict) -> dict:
    model = stage.get("model") or {}
    return {
        "add_adapters": sorted(model.get("add_adapters") or {}),
        "active_languages": model.get("active_languages"),
        "trainable": (model.get("trainable") or {}).get("adapters"),
    }


def test_target_and_sources_overrides_retarget_every_stage():
    recipe = load_recipe("recipes/synthetic_demo", ["target=pl", "sources=[cs, sk, sl, it, es]"])
    stages = recipe.stages
    assert languages_of(stages["target_adapter"]) == {
        "add_adapters": ["pl"], "active_languages": ["pl"], "trainable": ["pl"]}
    assert languages_of(stages["source_adapters"]) == {
        "add_adapters": ["cs", "es", "it", "sk", "sl"], "active_languages": ["cs", "sk", "sl", "it", "es"],
        "trainable": ["cs", "sk", "sl", "it", "es"]}
    fusion = stages["fusion"]["model"]["fusion"]
    assert fusion["languages"] == ["cs", "sk", "sl", "it", "es", "pl"] and fusion["target_language"] == "pl"
    # the defaults are untouched
    default = load_recipe("recipes/synthetic_demo")
    assert languages_of(default.stages["target_adapter"])["add_adapters"] == ["sk"]
    assert default.stages["fusion"]["model"]["fusion"]["target_language"] == "sk"


def test_a_stage_override_that_contradicts_the_target_is_refused():
    with pytest.raises(RecipeError, match=r"stages\.target_adapter.*\['ro'\].*target 'sk'"):
        load_recipe("recipes/synthetic_demo", ["target_adapter.model.add_adapters={ro: {bottleneck: 8}}",
                                               "target_adapter.model.active_languages=[ro]",
                                               "target_adapter.model.trainable.adapters=[ro]"])
    with pytest.raises(RecipeError, match=r"stages\.fusion.*target_language 'cs'.*target 'sk'"):
        load_recipe("recipes/synthetic_demo", ["fusion.model.fusion.target_language=cs"])
