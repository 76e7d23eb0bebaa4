"""A recipe's settings, typed: :class:`RecipeSpec` (what every ``recipe.yaml`` holds) and :class:`Section` (a typed
section of it), each built once when the recipe is loaded and checked there, so that no step of a run reads a
setting by key or meets a value of the wrong type hours into training.

``recipe.yaml``'s settings every recipe has::

    task: simadapter     # the registered task that runs the folder (RECIPE_TASKS); default: simadapter
    python: [study.py]   # the folder's own Python (paths inside the folder), imported first: it registers its task
    name: my_recipe
    output_dir: runs/my_recipe
    threads: null        # torch threads: a count, auto (the cores other processes leave free) or null (torch's default)
    seed: 0
    progress: true       # progress bars (false: log lines only; also hides datasets' and transformers' bars)

A task's spec (:class:`RecipeSpec` subclass) adds its own settings in :attr:`RecipeSpec.SETTINGS` and turns the
sections it holds into :class:`Section` dataclasses in :meth:`RecipeSpec.convert`. Values are checked against their
declared :class:`~adaptspeech.training.spec_types.SettingType` (the stage files' checker: one line naming the
setting, what it expects and the value; an unknown key names the closest allowed one).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from ..decoding import DECODING_METHODS
from ..errors import StageConfigError
from ..settings import BOOL, INT, MAPPING, NON_EMPTY_STR, POSITIVE_INT, STR, SettingType, check_section, optional
from ..training.threads import THREADS
from .options import DEFAULT_TASK

T = TypeVar("T", bound="Section")
R = TypeVar("R", bound="RecipeSpec")


class RecipeError(StageConfigError):
    """A recipe that does not fit; the message names the setting."""


def check_settings(
    section: str, values: Any, table: Mapping[str, SettingType], error: type[RecipeError] = RecipeError
) -> dict[str, Any]:
    """:func:`~adaptspeech.training.spec_types.check_section` raising ``error`` (a :class:`RecipeError`)."""
    try:
        return check_section(section, values, table)
    except StageConfigError as err:
        raise error(str(err)) from None


def plain(value: Any) -> Any:
    """``value`` as YAML / JSON data: sections as mappings, tuples as lists, paths as strings."""
    if isinstance(value, Section):
        return value.to_dict()
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, Mapping):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value


STRINGS = SettingType(
    "a string or a list of strings",
    lambda v: isinstance(v, str) or (isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v)),
    lambda v: (v,) if isinstance(v, str) else tuple(v),
)


@dataclass(frozen=True)
class Section:
    """A typed section of ``recipe.yaml``: a frozen dataclass whose fields are its settings, each declared in
    :attr:`SETTINGS` (name -> :class:`~adaptspeech.training.spec_types.SettingType`)."""

    SETTINGS: ClassVar[Mapping[str, SettingType]] = {}

    @classmethod
    def from_dict(cls: type[T], section: str, values: Any, error: type[RecipeError] = RecipeError) -> T:
        """The section ``section`` (its name in messages: ``"evaluation"``) from its mapping (None: the defaults)."""
        return cls(**check_settings(section, {} if values is None else values, cls.SETTINGS, error))

    def to_dict(self) -> dict[str, Any]:
        """The section as ``recipe.yaml`` writes it (:meth:`from_dict` of it gives the same section)."""
        return {f.name: plain(getattr(self, f.name)) for f in dataclasses.fields(self)}


@dataclass(frozen=True)
class EvaluationSettings(Section):
    """A recipe's ``evaluation`` section: the test-set pass of its trained models.

    Args:
        split: the prepared split decoded (``test``).
        method: the decoding method (``adaptspeech.decoding.DECODING_METHODS``).
        options: the method's options (``{beam_size: 8}``).
        batch_size: utterances per forward pass.
    """

    split: str = "test"
    method: str = "ctc_greedy"
    options: Mapping[str, Any] = field(default_factory=dict)
    batch_size: int = 16

    SETTINGS: ClassVar[Mapping[str, SettingType]] = {
        "split": NON_EMPTY_STR,
        "method": NON_EMPTY_STR,
        "options": MAPPING,
        "batch_size": POSITIVE_INT,
    }

    def __post_init__(self) -> None:
        if self.method not in DECODING_METHODS:
            raise RecipeError(
                f"evaluation.method {self.method!r} unknown; allowed values: {', '.join(DECODING_METHODS.names())}"
            )


@dataclass(frozen=True, kw_only=True)
class RecipeSpec:
    """The settings every recipe has (module docstring), typed; a task's spec subclasses it.

    Args:
        folder: the recipe folder (``recipe.yaml``, its stage files, its Python); relative settings are read from it.
        output_dir: where the run writes.
        task: the registered task that runs it.
        python: the folder's own modules, paths inside the folder.
        name: the recipe's name.
        threads: torch threads: a count, ``"auto"`` (:func:`~adaptspeech.training.threads.apply_threads`: the cores
            the other processes leave free when the run starts) or None (torch's default).
        seed: the recipe's seed.
        progress: progress bars (False: log lines only).
    """

    folder: Path
    output_dir: Path
    task: str = DEFAULT_TASK
    python: tuple[str, ...] = ()
    name: str | None = None
    threads: int | str | None = None
    seed: int = 0
    progress: bool = True

    #: declared type of each top-level setting this class adds (the table of a spec is the union along its classes)
    SETTINGS: ClassVar[Mapping[str, SettingType]] = {
        "task": NON_EMPTY_STR,
        "python": STRINGS,
        "name": optional(STR),
        "output_dir": NON_EMPTY_STR,
        "threads": optional(THREADS),
        "seed": INT,
        "progress": BOOL,
    }
    #: settings recipe.yaml must give
    REQUIRED: ClassVar[tuple[str, ...]] = ("output_dir",)
    #: the error its checks raise (a task's own subclass of :class:`RecipeError`)
    ERROR: ClassVar[type[RecipeError]] = RecipeError

    @classmethod
    def settings(cls) -> dict[str, SettingType]:
        """Every top-level setting of this spec and its declared type (the classes' :attr:`SETTINGS` together)."""
        table: dict[str, SettingType] = {}
        for klass in reversed(cls.__mro__):
            table.update(vars(klass).get("SETTINGS", {}))
        return table

    @classmethod
    def from_dict(cls: type[R], values: Mapping[str, Any], folder: str | Path) -> R:
        """The spec of ``recipe.yaml``'s settings ``values`` (stage files already read, overrides applied).

        Raises:
            RecipeError: (:attr:`ERROR`) one line naming the setting.
        """
        checked = check_settings("recipe", values, cls.settings(), cls.ERROR)
        required = [key for klass in cls.__mro__ for key in vars(klass).get("REQUIRED", ())]
        for key in dict.fromkeys(required):
            if checked.get(key) in (None, "", [], {}, ()):
                raise cls.ERROR(f"recipe: missing required setting {key!r}")
        return cls(folder=Path(folder), **cls.convert(checked, Path(folder)))

    @classmethod
    def convert(cls, values: dict[str, Any], folder: Path) -> dict[str, Any]:
        """The checked settings as field values: sections typed, paths as :class:`~pathlib.Path` (subclasses add
        theirs and call this)."""
        values = dict(values)
        values["output_dir"] = Path(values["output_dir"])
        return values

    def to_dict(self) -> dict[str, Any]:
        """The settings as ``recipe.yaml`` (stage files inline) would hold them: ``from_dict(spec.to_dict(),
        spec.folder)`` gives the same spec."""
        return {f.name: plain(getattr(self, f.name)) for f in dataclasses.fields(self) if f.name != "folder"}
