"""Settings of a transfer curve (``runner.py``): the budgets, the methods, the step rule
and the per-method grid chosen on dev, read from ``curve.yaml`` beside ``recipe.yaml`` and ``curve.<key>=value``.

The step rule: ``steps = clip(S * scale * (a / A) ** power, min, max)``, where ``S`` is the stage file's
``training.max_steps`` (tuned on dev for the recipe's ``target_subset``, the anchor ``A``), ``a`` the budget's actual
audio (clips for an utterance anchor), ``power`` 0.5 by default (square root: 10x the audio gives 3.2x the steps, i.e.
fewer epochs on more data) and ``scale`` a grid setting (``steps_scale``, 1 by default).
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adaptspeech.data.subsets import SubsetSize
from adaptspeech.overrides import apply_overrides, load_yaml
from adaptspeech.recipes.spec import RecipeError
from adaptspeech.settings import unknown_settings_message

from .report import METHOD_LABELS

METHODS = tuple(METHOD_LABELS)
#: the curve's self-training arm (a method of ``methods``, not run unless named there)
SELF_TRAINING = "self_training"
#: the methods a curve runs when ``methods`` is not given
DEFAULT_METHODS = tuple(m for m in METHODS if m != SELF_TRAINING)
#: the systems the self-training arm can self-train -> the curve method whose run at a budget is its teacher
ARM_SYSTEMS = {"target_adapter": "adapter", "fusion": "simadapter", "finetune": "finetune"}
#: the arm's settings (``curve.self_training.<key>``); null: the recipe's ``self_training`` section's value
ARM_DEFAULTS: dict[str, Any] = {
    "system": "target_adapter",
    "budgets": None,
    "pool": None,
    "rounds": None,
    "steps_scale": None,
    "reuse_recipe_rounds": True,
}
#: method -> (the recipe stage or baseline whose settings it trains with, its group, the shared stage it starts from)
METHOD_STAGES: dict[str, tuple[str, str, str | None]] = {
    "scratch": ("scratch", "baselines", None),
    "finetune": ("finetune", "baselines", "base"),
    "adapter": ("target_adapter", "stages", "source_adapters"),
    "simadapter": ("fusion", "stages", "target_adapter"),
}
#: grid settings every trained method accepts, and the fusion-only ones
GRID_KEYS = ("learning_rate", "steps_scale")
FUSION_GRID_KEYS = ("guide_weight", "temperature", "train_target_adapter")
#: learning rates around the demo's 10-minute settings (chosen on dev there: scratch 2e-3, fine-tuning 5e-4, adapter
#: 5e-3, fusion 1e-3)
DEFAULT_GRID: dict[str, dict[str, list[Any]]] = {
    "scratch": {"learning_rate": [1e-3, 2e-3, 5e-3]},
    "finetune": {"learning_rate": [2e-4, 5e-4, 1e-3]},
    "adapter": {"learning_rate": [2e-3, 5e-3, 1e-2]},
    "simadapter": {"learning_rate": [5e-4, 1e-3, 2e-3]},
}
CURVE_FILE = "curve.yaml"
_TAGS = {
    "learning_rate": "lr",
    "steps_scale": "x",
    "guide_weight": "guide",
    "temperature": "tau",
    "train_target_adapter": "joint",
}


class CurveError(RecipeError):
    """A curve setting that does not fit; the message names it."""


@dataclass
class CurveSettings:
    """Settings of a transfer curve (``curve.yaml`` / ``curve.<key>=value``; module docstring).

    Args:
        budgets: target training audio per point, e.g. ``["1min", "3min", "10min", "30min"]`` (nested subsets).
        methods: a subset of :data:`METHODS` (``simadapter`` needs ``adapter``).
        anchor_budget: the budget the stage files' ``max_steps`` were tuned for (None: the recipe's ``target_subset``).
        steps: ``power`` (0.5), ``min`` (100), ``max`` (2000) of the step rule.
        grid: method -> setting -> list of values (:data:`GRID_KEYS`, :data:`FUSION_GRID_KEYS`), over
            :data:`DEFAULT_GRID` (a setting left out keeps its default list).
        bootstrap_samples: resamples of the test utterances for the intervals.
        folder: the curve's folder inside the recipe's ``output_dir``.
        self_training: the self-training arm (method ``self_training``; :data:`ARM_DEFAULTS`): ``system`` (which
            system is self-trained at each budget: ``target_adapter``, ``fusion`` or ``finetune``, its curve method
            must run too), ``budgets`` (the budgets with an arm point; null: every budget), ``pool``, ``rounds``,
            ``steps_scale`` (null: the recipe's ``self_training`` section's), ``reuse_recipe_rounds`` (at the
            recipe's own ``target_subset``, self-train the recipe's trained system and reuse its finished rounds).
    """

    budgets: list[str]
    methods: list[str] = field(default_factory=lambda: list(DEFAULT_METHODS))
    anchor_budget: str | None = None
    steps: dict[str, float] = field(default_factory=lambda: {"power": 0.5, "min": 100, "max": 2000})
    grid: dict[str, dict[str, list[Any]]] = field(default_factory=lambda: copy.deepcopy(DEFAULT_GRID))
    bootstrap_samples: int = 1000
    folder: str = "curve"
    self_training: dict[str, Any] = field(default_factory=lambda: dict(ARM_DEFAULTS))

    def __post_init__(self) -> None:
        if not self.budgets:
            raise CurveError("curve.budgets: give at least one budget, e.g. --curve 1min,3min,10min")
        for budget in self.budgets:
            try:
                SubsetSize.parse(budget)
            except ValueError as err:
                raise CurveError(f"curve.budgets: {err}") from err
        if len(set(self.budgets)) != len(self.budgets):
            raise CurveError(f"curve.budgets: each budget once, got {self.budgets}")
        unknown = sorted(set(self.methods) - set(METHODS))
        if unknown or not self.methods:
            raise CurveError(f"curve.methods: unknown {unknown or 'none given'}; allowed values: {', '.join(METHODS)}")
        if "simadapter" in self.methods and "adapter" not in self.methods:
            raise CurveError("curve.methods: simadapter fuses the budget's target adapter; add adapter")
        steps = {"power": 0.5, "min": 100, "max": 2000, **self.steps}
        if set(steps) != {"power", "min", "max"} or not 0 < steps["min"] <= steps["max"] or steps["power"] < 0:
            raise CurveError(f"curve.steps: expected power >= 0 and 0 < min <= max, got {self.steps}")
        self.steps = steps
        unknown_grid = sorted(set(self.grid) - set(DEFAULT_GRID))
        if unknown_grid:
            raise CurveError(f"curve.grid: unknown method(s) {unknown_grid}; allowed: {', '.join(DEFAULT_GRID)}")
        self.grid = {method: {**DEFAULT_GRID[method], **(self.grid.get(method) or {})} for method in DEFAULT_GRID}
        for method, grid in self.grid.items():
            allowed = GRID_KEYS + (FUSION_GRID_KEYS if method == "simadapter" else ())
            bad = sorted(set(grid) - set(allowed))
            if bad:
                raise CurveError(unknown_settings_message(f"curve.grid.{method}", bad, allowed))
            for key, values in grid.items():
                if not isinstance(values, list) or not values:
                    raise CurveError(f"curve.grid.{method}.{key}: expected a non-empty list, got {values!r}")
        if self.bootstrap_samples < 1:
            raise CurveError(f"curve.bootstrap_samples: must be >= 1, got {self.bootstrap_samples}")
        self.self_training = check_arm_settings(self.self_training or {}, self.budgets)
        system = self.self_training["system"]
        if SELF_TRAINING in self.methods and ARM_SYSTEMS[system] not in self.methods:
            raise CurveError(f"curve.methods: self_training self-trains each budget's {system} (the "
                             f"{ARM_SYSTEMS[system]} method's run chosen on dev); add {ARM_SYSTEMS[system]}")


def check_arm_settings(values: dict[str, Any], budgets: Sequence[str]) -> dict[str, Any]:
    """The self-training arm's settings over :data:`ARM_DEFAULTS`, each checked (:class:`CurveError` naming it)."""
    unknown = sorted(set(values) - set(ARM_DEFAULTS))
    if unknown:
        raise CurveError(unknown_settings_message("curve.self_training", unknown, ARM_DEFAULTS))
    arm = {**ARM_DEFAULTS, **values}
    if arm["system"] not in ARM_SYSTEMS:
        raise CurveError(f"curve.self_training.system: {arm['system']!r}; allowed values: {', '.join(ARM_SYSTEMS)}")
    chosen = arm["budgets"]
    if chosen is not None:
        if not isinstance(chosen, list) or not chosen or any(str(b) not in budgets for b in chosen):
            raise CurveError(f"curve.self_training.budgets: expected null or a non-empty list of the curve's budgets "
                             f"({', '.join(budgets)}), got {chosen!r}")
        arm["budgets"] = [str(b) for b in chosen]
    if arm["pool"] is not None and (not isinstance(arm["pool"], str) or not arm["pool"]):
        raise CurveError(f"curve.self_training.pool: expected null or a pool folder, got {arm['pool']!r}")
    rounds = arm["rounds"]
    if rounds is not None and (isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1):
        raise CurveError(f"curve.self_training.rounds: expected null or an integer >= 1, got {rounds!r}")
    scale = arm["steps_scale"]
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 < scale < 1e6):
        raise CurveError(f"curve.self_training.steps_scale: expected null or a number > 0, got {scale!r}")
    if not isinstance(arm["reuse_recipe_rounds"], bool):
        raise CurveError(f"curve.self_training.reuse_recipe_rounds: expected true or false, got "
                         f"{arm['reuse_recipe_rounds']!r}")
    return arm


def split_curve_overrides(overrides: Sequence[str]) -> tuple[list[str], list[str]]:
    """``(recipe overrides, curve overrides without their "curve." prefix)``."""
    recipe, curve = [], []
    for text in overrides:
        if text.split("=", 1)[0].startswith("curve."):
            curve.append(text.split(".", 1)[1])
        else:
            recipe.append(text)
    return recipe, curve


def load_curve_settings(
    recipe_dir: str | Path,
    overrides: Sequence[str] = (),
    budgets: Sequence[str] | None = None,
    methods: Sequence[str] | None = None,
) -> CurveSettings:
    """``curve.yaml`` beside ``recipe.yaml`` (when there is one), then ``overrides`` (``key=value``, no prefix), then
    ``budgets`` / ``methods`` (``--curve`` / ``--curve-methods``)."""
    recipe_dir = Path(recipe_dir)
    folder = recipe_dir if recipe_dir.is_dir() else recipe_dir.parent
    values = load_yaml(folder / CURVE_FILE) if (folder / CURVE_FILE).is_file() else {}
    values = apply_overrides(values, list(overrides))
    if budgets:
        values["budgets"] = list(budgets)
    if methods:
        values["methods"] = list(methods)
    allowed = {f for f in CurveSettings.__dataclass_fields__}
    unknown = sorted(set(values) - allowed)
    if unknown:
        raise CurveError(unknown_settings_message("curve", unknown, sorted(allowed)))
    values.setdefault("budgets", [])
    values["budgets"] = [str(b) for b in values["budgets"]]
    return CurveSettings(**values)


def scaled_steps(
    settings: CurveSettings, stage_steps: int, seconds: float, clips: int, anchor: SubsetSize, scale: float = 1.0
) -> int:
    """``clip(stage_steps * scale * (a / anchor) ** power, min, max)``: ``a`` is the budget's audio in seconds
    (``clips`` for an utterance anchor), ``anchor`` the budget ``stage_steps`` was tuned for."""
    ratio = (seconds if anchor.is_duration else clips) / anchor.budget
    steps = round(stage_steps * scale * ratio ** settings.steps["power"])
    return int(min(max(steps, settings.steps["min"]), settings.steps["max"]))


def grid_points(settings: CurveSettings, method: str) -> list[dict[str, Any]]:
    """Every combination of the method's grid values, in grid order."""
    grid = settings.grid[method]
    keys = list(grid)
    return [dict(zip(keys, values, strict=True)) for values in itertools.product(*(grid[k] for k in keys))]


def setting_tag(setting: dict[str, Any]) -> str:
    """A folder-safe name of a grid point: ``lr0.005``, ``lr0.001_guide0.1_joint1``."""
    parts = []
    for key, value in setting.items():
        text = str(int(value)) if isinstance(value, bool) else f"{value:g}" if isinstance(value, float) else str(value)
        parts.append(f"{_TAGS[key]}{text}")
    return "_".join(parts)
