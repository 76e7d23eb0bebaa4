"""Python run in a subprocess where PyTorch, and every other dependency outside the ``runtime`` extra, cannot be
imported: what an install of ``pip install adaptspeech[runtime]`` alone (numpy, soundfile, soxr, onnxruntime)
leaves. The packages are read from ``pyproject.toml``: the base dependencies that the extra does not name."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Sequence

import tomllib

from helpers.cli import subprocess_env
from helpers.paths import REPO

IMPORT_NAMES = {"pyyaml": "yaml", "ruamel.yaml": "ruamel", "huggingface-hub": "huggingface_hub"}
"""Distribution names whose import name differs (others: ``-`` read as ``_``)."""


def _names(requirements: Sequence[str]) -> set[str]:
    names = (re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower() for r in requirements)
    return {IMPORT_NAMES.get(n, n.replace("-", "_")) for n in names}


def outside_the_runtime_extra() -> tuple[str, ...]:
    """The import names of the base dependencies the ``runtime`` extra leaves out (torch, transformers, tqdm ...)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return tuple(sorted(_names(project["dependencies"]) - _names(project["optional-dependencies"]["runtime"])))


def blocking_prelude(blocked: Sequence[str]) -> str:
    """Python source that makes the packages ``blocked`` (and their submodules) unimportable, raising the
    ``ModuleNotFoundError`` a missing package raises."""
    return (
        "import sys\n"
        f"_BLOCKED = {tuple(blocked)!r}\n"
        "class _Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in _BLOCKED:\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, _Block())\n"
    )


def run_without(blocked: Sequence[str], body: str, argv: Sequence[str] = (), timeout: float = 120
                ) -> subprocess.CompletedProcess:
    """Run ``body`` (Python source, after :func:`blocking_prelude`; it sets ``code``, the exit status) with ``argv``
    in a fresh interpreter, which exits with ``code``, or with 3 (naming them on stderr) when any blocked package
    was imported after all."""
    script = blocking_prelude(blocked) + body + (
        "\n_leaked = sorted({m.split('.')[0] for m in sys.modules} & set(_BLOCKED))\n"
        "if _leaked:\n"
        "    print('imported:', _leaked, file=sys.stderr)\n"
        "    sys.exit(3)\n"
        "sys.exit(code)\n"
    )
    return subprocess.run([sys.executable, "-c", script, *map(str, argv)], env=subprocess_env(),
                          capture_output=True, text=True, timeout=timeout)
