"""The ``adaptspeech`` command.

Each subcommand lives in its own module (``prepare.py``, ``train.py`` ...) as one function
``_add_<name>(subparsers)`` that declares its parser and sets ``func`` to the function that runs it;
:data:`SUBCOMMANDS` lists them. Heavy imports happen inside the runners, so that ``adaptspeech --help`` stays fast.
Expected errors (a missing folder, a bad value) end with one line ``adaptspeech: error: ...`` and exit status 1;
usage errors (an unknown option) are one line too, exit status 2. ``adaptspeech --version`` prints the installed
package's version.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from .common import DECODING_CHOICES, PROG, CommandError, torch_missing_line
from .evaluate import _add_evaluate
from .export import _add_export
from .lm import _add_lm
from .prepare import _add_prepare
from .pseudo_label import _add_pseudo_label
from .push import _add_push
from .recipe import _add_demo, _add_recipe, demo_recipe_dir
from .train import _add_train
from .transcribe import _add_transcribe
from .transcribe_stream import _add_transcribe_stream

# ---- the command ---------------------------------------------------------------------------------------

__all__ = [
    "DECODING_CHOICES",
    "PROG",
    "SUBCOMMANDS",
    "CommandError",
    "build_parser",
    "demo_recipe_dir",
    "main",
    "package_version",
]

SUBCOMMANDS: tuple[Callable[[argparse._SubParsersAction], None], ...] = (
    _add_prepare,
    _add_train,
    _add_evaluate,
    _add_transcribe,
    _add_lm,
    _add_pseudo_label,
    _add_push,
    _add_export,
    _add_recipe,
    _add_demo,
)
"""Each adds one subcommand."""

SUBCOMMAND_OPTIONS: tuple[Callable[[argparse._SubParsersAction], None], ...] = (_add_transcribe_stream,)
"""Each adds a group of options to a subcommand added before (``transcribe --stream``)."""

_NEGATIVE_NUMBER = re.compile(r"^-(\.?\d|inf|nan)", re.IGNORECASE)
"""An argument starting like this is a value (a negative number, or a list or range that starts with one)."""


class _Parser(argparse.ArgumentParser):
    """``ArgumentParser`` whose usage errors are one line (``PROG: error: ...``, exit status 2), and which takes
    any argument that starts like a negative number (``-1e9``, ``-5,1e9``, ``-.5``, ``-inf``) for a value, not for
    an option: argparse's own pattern knows only ``-5`` and ``-0.5`` and answered "expected one argument" to
    ``--beta -1e9``. (No adaptspeech option looks like a negative number; subcommand parsers are of this class.)"""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = _NEGATIVE_NUMBER

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())} (see `{self.prog} --help`)\n")


def package_version() -> str:
    """The installed ``adaptspeech`` distribution's version (``importlib.metadata``), or the source tree's
    ``adaptspeech.__version__`` when the package runs without being installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(PROG)
    except PackageNotFoundError:
        from .. import __version__

        return str(__version__)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG, description="Low-resource speech recognition with per-language adapters on the Hugging Face stack."
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {package_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add in (*SUBCOMMANDS, *SUBCOMMAND_OPTIONS):
        add(subparsers)
    return parser


def _expected_errors() -> tuple[type[BaseException], ...]:
    """Errors that end the command with one line: bad input, missing files, offline pushes, bad clips.

    ``StageConfigError``, ``RecipeError`` and ``AdapterLoadError`` are ``ValueError`` subclasses; the classes of
    modules not imported yet cannot have been raised.
    """
    errors: list[type[BaseException]] = [CommandError, OSError, ValueError, KeyError, ImportError]
    for module, name in (("adaptspeech.hub", "PushError"), ("adaptspeech.data.audio", "BadClipError")):
        cls = getattr(sys.modules.get(module), name, None)
        if cls is not None:
            errors.append(cls)
    return tuple(errors)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``adaptspeech`` with ``argv`` (default ``sys.argv[1:]``); return the exit status.

    ``KEY=VALUE`` overrides may also follow other options (``train --config s.yaml --threads 1 a.b=1``). Set
    ``ADAPTSPEECH_TRACEBACK=1`` to see the traceback of an expected error.
    """
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        if hasattr(args, "overrides") and all("=" in t and not t.startswith("-") for t in extra):
            args.overrides = [*args.overrides, *extra]
        else:
            where = f"{PROG} {args.command}"
            parser.exit(2, f"{where}: error: unrecognized arguments: {' '.join(extra)} (see `{where} --help`)\n")
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except Exception as err:
        if not isinstance(err, _expected_errors()) or os.environ.get("ADAPTSPEECH_TRACEBACK"):
            raise
        message = err.args[0] if isinstance(err, KeyError) and err.args else str(err)
        if isinstance(err, ImportError):  # PyTorch missing: an install of the `runtime` extra alone
            message = torch_missing_line(args.command, err) or message
        print(f"{PROG}: error: {' '.join(str(message).split()) or type(err).__name__}", file=sys.stderr)
        return 1
