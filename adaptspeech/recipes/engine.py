"""The recipe engine: a recipe folder is loaded once into a typed spec, with overrides, and run by its *task*.

A recipe folder holds ``recipe.yaml`` (:mod:`~adaptspeech.recipes.spec` lists the settings every recipe has), the
files it names (stage files) and, optionally, its own Python (``python: [study.py]``): the engine imports those
modules from the folder, as a package of their own (so they may import each other relatively), before it looks the
task up, so a study defined beside its YAML registers itself. The library registers the SimAdapter protocol
(:mod:`~adaptspeech.recipes.simadapter.protocol`, task ``simadapter``, the default); ESPnet's ``egs2/*/local`` and
transformers' ``examples/`` keep studies outside the library in the same way.

A task (:class:`RecipeTask`, registered in :data:`RECIPE_TASKS`) is what ESPnet calls a Task: it names its spec
class, adds its own command-line options (:meth:`RecipeTask.add_arguments`, as ``AbsTask.add_task_arguments``), plans
its steps and runs them. The engine gives every task the same ``a.b.c=value`` overrides (YAML values; a key that
names one of the task's stages edits that stage file: ``base.training.max_steps=100``), the same ``--only`` check and
the same schedule: a step ``--only`` leaves out is reused (the task's :attr:`RecipeTask.outside_only`), a finished
step is skipped when the task says so (:attr:`RecipeTask.skip_finished`), every other step runs.

    spec = load_recipe("recipes/synthetic_demo", ["target=pl", "base.training.max_steps=200"])
    run_recipe(spec, only=["fusion"])
"""

from __future__ import annotations

import argparse
import enum
import importlib
import importlib.machinery
import importlib.util
import os
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar, Protocol

from ..overrides import apply_overrides, load_yaml
from ..progress import library_progress_bars
from ..registry import Registry
from ..training.threads import apply_threads
from .options import DEFAULT_TASK, LIBRARY_TASKS, RECIPE_FILE, folder_options, folder_package
from .spec import RecipeError, RecipeSpec

#: settings that choose the task: read before the overrides apply, so not overridable
_TASK_KEYS = ("task", "python")
#: the outputs a run prints when it ends, by default
DEFAULT_OUTPUTS = ("results.md", "results.json")


class PlannedStep(Protocol):
    """A step of a recipe's plan (a stage of the protocol, an attention kind of the study): what ``--only`` names."""

    @property
    def name(self) -> str: ...


class Action(enum.Enum):
    """What the schedule does with a planned step."""

    RUN = "run"
    """Train / compute it now."""
    REUSE = "reuse"
    """Take its outputs from an earlier run (a finished step, or one ``--only`` leaves out)."""
    LEAVE = "leave"
    """Leave it alone: neither run nor read (a step ``--only`` leaves out, for a task that does not need it)."""


class RecipeTask:
    """What runs a recipe folder: its spec class, its command-line options, its plan, its run.

    Subclass it, set :attr:`spec_class`, implement :meth:`plan` and :meth:`run`, and register it:
    ``@RECIPE_TASKS.register("my_study")``. Instances hold no state; the spec is the run's settings.
    """

    spec_class: ClassVar[type[RecipeSpec]] = RecipeSpec
    #: ``recipe.yaml`` keys holding named stage files (``{"stages": ("base", ...)}``): each value is a mapping of
    #: stage name -> a file name inside the folder (or the stage's settings inline), and an override whose first
    #: part is a stage name (``base.training.max_steps=100``) edits that stage
    stage_groups: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    #: what a step does when ``--only`` leaves it out
    outside_only: ClassVar[Action] = Action.REUSE
    #: skip a finished step (False: a step that runs retrains, overwriting its folder)
    skip_finished: ClassVar[bool] = False
    #: what ``--only`` calls the steps in its messages
    step_noun: ClassVar[str] = "stage"
    #: the files (inside ``output_dir``) the command names when it ends; the first one is printed
    outputs: ClassVar[tuple[str, ...]] = DEFAULT_OUTPUTS

    # ---- command line -----------------------------------------------------------------------------------------

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        """Add the task's own command-line options to ``adaptspeech recipe FOLDER`` (none by default)."""

    def command(
        self, folder: Path, overrides: Sequence[str], only: Sequence[str] | None, options: argparse.Namespace
    ) -> int:
        """``adaptspeech recipe FOLDER [overrides] [--only ...] [the task's options]``: load, run, print the results.

        Args:
            options: the parsed command line (the task reads the options it added).

        Returns:
            The exit status.
        """
        spec = self.load(folder, overrides)
        check_only(only, self.step_names(spec), self.step_noun)
        with library_progress_bars(enabled=spec.progress):
            run_recipe(spec, only)
        print_outputs(spec.output_dir, self.outputs)
        return 0

    # ---- settings ---------------------------------------------------------------------------------------------

    def load(self, folder: str | os.PathLike, overrides: Sequence[str] = ()) -> RecipeSpec:
        """The typed spec of the recipe folder with ``overrides`` (``a.b.c=value``; see the module docstring)."""
        folder = recipe_folder(folder)
        values = self.read_stage_files(folder, read_recipe_file(folder))
        flat, staged = self.split_overrides(overrides)
        # read again: an override may name a stage file (``baselines={finetune: stage_finetune.yaml}``)
        values = self.read_stage_files(folder, apply_overrides(values, flat))
        values = self.adjust(values)
        values = self.apply_stage_overrides(values, staged)
        return self.spec_class.from_dict(values, folder)

    def split_overrides(self, overrides: Sequence[str]) -> tuple[list[str], list[str]]:
        """``(overrides of recipe.yaml, overrides of a stage)``; refuses overrides of ``task`` / ``python``."""
        names = {name for names in self.stage_groups.values() for name in names}
        flat, staged = [], []
        for text in overrides:
            head = text.split("=", 1)[0].split(".", 1)[0].strip()
            if head in _TASK_KEYS:
                raise RecipeError(f"override {text!r}: {head} is read from recipe.yaml before the overrides; edit it")
            (staged if head in names and "." in text.split("=", 1)[0] else flat).append(text)
        return flat, staged

    def read_stage_files(self, folder: Path, values: dict[str, Any]) -> dict[str, Any]:
        """``values`` with every stage of :attr:`stage_groups` read from its file (a group left out: empty)."""
        values = dict(values)
        for group in self.stage_groups:
            entries = values.get(group) or {}
            if not isinstance(entries, Mapping):
                raise RecipeError(f"recipe.{group}: expected a mapping of stage name -> stage file, got {entries!r}")
            values[group] = {
                name: load_yaml(folder / ref) if isinstance(ref, str) else dict(ref or {})
                for name, ref in entries.items()
            }
        return values

    def adjust(self, values: dict[str, Any]) -> dict[str, Any]:
        """A hook between the recipe's overrides and the stage overrides (the protocol makes the stage files follow
        ``sources`` / ``target`` there); unchanged by default."""
        return values

    def apply_stage_overrides(self, values: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
        """Apply ``<stage>.<section>.<key>=value`` overrides to the stages of :attr:`stage_groups`."""
        for text in overrides:
            head, rest = text.split(".", 1)
            group = next(g for g, names in self.stage_groups.items() if head in names)
            if head not in values[group]:
                raise RecipeError(f"override {text!r}: the recipe has no stage {head!r}")
            values[group] = {**values[group], head: apply_overrides(values[group][head], [rest])}
        return values

    # ---- plan and run -----------------------------------------------------------------------------------------

    def plan(self, spec: RecipeSpec) -> Sequence[PlannedStep]:
        """The steps of ``spec`` in the order they run."""
        raise NotImplementedError

    def step_names(self, spec: RecipeSpec) -> tuple[str, ...]:
        """What ``--only`` accepts: the planned steps' names (a task may add more)."""
        return tuple(step.name for step in self.plan(spec))

    def finished(self, spec: RecipeSpec, step: PlannedStep) -> bool:
        """Whether ``step`` finished in an earlier run (its outputs are complete)."""
        return False

    def run(self, spec: RecipeSpec, only: Sequence[str] | None = None) -> dict[str, Any]:
        """Run the steps :func:`schedule` picks and write the results; returns what ``results.json`` holds."""
        raise NotImplementedError


RECIPE_TASKS: Registry[type[RecipeTask]] = Registry("recipe task")
"""The recipe tasks by name (``recipe.yaml``'s ``task:``)."""


# ---- folders and their code ------------------------------------------------------------------------------------


def recipe_folder(path: str | os.PathLike) -> Path:
    """The recipe folder of ``path`` (a folder with ``recipe.yaml``, or that file)."""
    path = Path(path)
    folder = path.parent if path.name == RECIPE_FILE and path.is_file() else path
    if not (folder / RECIPE_FILE).is_file():
        raise RecipeError(f"{path}: no such recipe folder (a folder with {RECIPE_FILE} and the files it names)")
    return folder


def read_recipe_file(folder: Path) -> dict[str, Any]:
    """``recipe.yaml`` of ``folder`` as read (stage files not read yet)."""
    try:
        return load_yaml(folder / RECIPE_FILE)
    except RecipeError:
        raise
    except ValueError as err:
        raise RecipeError(str(err)) from None


def recipe_module(folder: str | os.PathLike, path: str) -> ModuleType:
    """Import the module ``path`` (``study.py``, ``curve/runner.py``) of the recipe folder (once; later calls return
    the same module). ``folder``: the recipe folder or its ``recipe.yaml``.

    Raises:
        RecipeError: the file is not there, or importing it fails (a syntax error, a failing import, an exception it
            raises): one line naming the file, the line and the error.
    """
    folder = recipe_folder(folder)
    relative = Path(path)
    if relative.suffix != ".py" or relative.is_absolute() or ".." in relative.parts:
        raise RecipeError(f"python: {path!r} is not a .py file inside the recipe folder {folder}")
    if not (folder / relative).is_file():
        raise RecipeError(f"python: {folder / relative} not found")
    package = folder_package(folder)
    try:
        return importlib.import_module(".".join([package, *relative.with_suffix("").parts]))
    except Exception as err:  # the folder's own code: a syntax error, a failing import, an exception it raises
        raise RecipeError(f"python: {_error_place(err, folder, folder / relative)}: {type(err).__name__}: "
                          f"{' '.join(str(getattr(err, 'msg', None) or err).split())}") from err


def _error_place(err: BaseException, folder: Path, module: Path) -> str:
    """``FILE, line N`` of ``err`` raised while importing ``module`` of the recipe folder ``folder``: the line of a
    syntax error, else the deepest frame in the folder's files (the module itself when none is)."""
    if isinstance(err, SyntaxError) and err.filename:
        return f"{err.filename}, line {err.lineno}"
    folder = folder.resolve()
    inside = [frame for frame in traceback.extract_tb(err.__traceback__)
              if Path(frame.filename).resolve().is_relative_to(folder)]
    return f"{inside[-1].filename}, line {inside[-1].lineno}" if inside else str(module)


def task_of(folder: Path, values: Mapping[str, Any]) -> RecipeTask:
    """The task of a recipe folder (``values``: its ``recipe.yaml``), after importing the folder's own Python."""
    if "kind" in values and "task" not in values:
        raise RecipeError(
            f"{folder / RECIPE_FILE}: name the recipe's task as task: {values['kind']} (with python: its module), "
            "not kind:"
        )
    python = values.get("python") or []
    for path in [python] if isinstance(python, str) else python:
        recipe_module(folder, str(path))
    name = values.get("task", DEFAULT_TASK)
    for module in LIBRARY_TASKS.values():
        importlib.import_module(module)  # registers the library's tasks
    if name not in RECIPE_TASKS:
        raise RecipeError(f"{folder / RECIPE_FILE}: task: {RECIPE_TASKS.unknown_message(name)}")
    return RECIPE_TASKS.get(name)()


def recipe_task(spec: RecipeSpec) -> RecipeTask:
    """The task that runs ``spec`` (its folder's code is imported when the spec is loaded)."""
    return RECIPE_TASKS.get(spec.task)()


def folder_task(folder: str | os.PathLike) -> RecipeTask:
    """The task of the recipe folder ``folder``."""
    folder = recipe_folder(folder)
    return task_of(folder, read_recipe_file(folder))


# ---- the engine's entry points ---------------------------------------------------------------------------------


def load_recipe(folder: str | os.PathLike, overrides: Sequence[str] | None = None) -> RecipeSpec:
    """Read the recipe folder (``recipe.yaml`` and the files it names, its own Python), apply ``a.b.c=value``
    overrides and check every setting; returns its task's typed spec.

    Raises:
        RecipeError: one line naming the setting.
    """
    return folder_task(folder).load(folder, list(overrides or []))


def spec_from_dict(values: Mapping[str, Any], folder: str | os.PathLike) -> RecipeSpec:
    """The spec whose :meth:`~RecipeSpec.to_dict` is ``values`` (e.g. handed to another process as JSON)."""
    folder = recipe_folder(folder)
    return task_of(folder, values).spec_class.from_dict(values, folder)


def run_recipe(spec: RecipeSpec, only: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the recipe ``spec`` with its task (``only``: just these steps; see :func:`schedule`)."""
    return recipe_task(spec).run(spec, list(only) if only else None)


def run_command(
    folder: str | os.PathLike, overrides: Sequence[str], only: Sequence[str] | None, options: argparse.Namespace
) -> int:
    """``adaptspeech recipe FOLDER ...``: the folder's task runs its command (:meth:`RecipeTask.command`)."""
    folder = recipe_folder(folder)
    return task_of(folder, read_recipe_file(folder)).command(folder, list(overrides), only, options)


def add_task_arguments(folder: str | os.PathLike, parser: argparse.ArgumentParser) -> bool:
    """Add the options of the folder's task to ``parser``: those of :data:`~.options.TASK_OPTIONS` (no import of the
    task), else the task's :meth:`RecipeTask.add_arguments`; False (nothing added) when the folder cannot be read
    (the command then reports why)."""
    declared = folder_options(folder)
    if declared is not None:
        declared(parser)
        return True
    try:
        task = folder_task(folder)
    except RecipeError:
        return False
    task.add_arguments(parser)
    return True


# ---- schedule ---------------------------------------------------------------------------------------------------


def comma_list(text: str | None) -> list[str]:
    """``"a, b,,c"`` -> ``["a", "b", "c"]``: the value of a list option (``--only``, ``--curve``)."""
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def check_only(only: Sequence[str] | None, allowed: Sequence[str], noun: str = "stage") -> None:
    """Refuse ``--only`` names outside ``allowed`` in one line."""
    unknown = [name for name in dict.fromkeys(only or []) if name not in allowed]
    if unknown:
        raise RecipeError(f"--only: unknown {noun}(s) {', '.join(unknown)}; allowed values: {', '.join(allowed)}")


def schedule(
    task: RecipeTask, spec: RecipeSpec, only: Sequence[str] | None = None
) -> list[tuple[PlannedStep, Action]]:
    """Every planned step with what to do with it: a step ``only`` leaves out gets the task's
    :attr:`~RecipeTask.outside_only`; a finished one is reused when the task skips finished steps; the rest run."""
    plan = task.plan(spec)
    check_only(only, task.step_names(spec), task.step_noun)
    scheduled = []
    for step in plan:
        if only and step.name not in only:
            action = task.outside_only
        elif task.skip_finished and task.finished(spec, step):
            action = Action.REUSE
        else:
            action = Action.RUN
        scheduled.append((step, action))
    return scheduled


def set_threads(spec: RecipeSpec) -> None:
    """Use the recipe's ``threads`` torch threads: a count, ``auto`` (the cores other processes leave free now; one
    line when the machine is busy, :func:`~adaptspeech.training.threads.apply_threads`) or None (torch's setting)."""
    apply_threads(spec.threads)


def print_outputs(folder: Path, names: Sequence[str]) -> None:
    """Print the first file of ``names`` in ``folder`` and list those that exist."""
    first = folder / names[0]
    if first.is_file():
        print(first.read_text())
    written = [str(folder / name) for name in names if (folder / name).exists()]
    if written:
        print(f"wrote {', '.join(written)}")
