"""``adaptspeech.runtime`` is the ground floor: importing it, every module of it and the LM decoder it may use imports
neither PyTorch nor transformers, peft or datasets, also where they are installed (found: the package's eager
``__init__`` imported all of them before ``adaptspeech.runtime``, and the runtime read the pause rule and the long-form
defaults from ``adaptspeech.inference``)."""

from __future__ import annotations

import json
import subprocess
import sys

from helpers.cli import subprocess_env
from helpers.paths import REPO

HEAVY = ("torch", "transformers", "peft", "datasets")


def test_every_runtime_module_imports_no_torch_where_torch_is_installed():
    names = sorted(f"adaptspeech.runtime.{path.stem}" for path in (REPO / "adaptspeech" / "runtime").glob("*.py")
                   if path.stem not in ("__init__", "__main__"))
    script = (
        "import importlib, json, sys\n"
        "import adaptspeech.runtime\n"
        f"for name in {[*names, 'adaptspeech.lm.decoder']!r}:\n"
        "    importlib.import_module(name)\n"
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], env=subprocess_env(), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout) == []
    assert {"adaptspeech.runtime.pauses", "adaptspeech.runtime.long_form", "adaptspeech.runtime.recognizer"} <= {
        *names}
