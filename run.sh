#!/usr/bin/env bash
# adaptspeech's two commands:
#   ./run.sh demo   -> the main job (offline demo)
#   ./run.sh test   -> lint + the whole test suite
# Each creates (or reuses) .venv, installs torch==2.13.0 (CPU wheel) and the package with its extras.
set -euo pipefail
cd "$(dirname "$0")"
VENV=${ADAPTSPEECH_VENV:-.venv}
PY=${PYTHON:-python3}
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
# shellcheck disable=SC1091
. "$VENV/bin/activate"
stamp="$VENV/.adaptspeech-installed"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  python -m pip install -q --upgrade pip
  python -m pip install -q torch==2.13.0
  python -m pip install -q -e ".[dev]"
  python -m pip install -q --no-deps pyctcdecode==0.5.0   # declares numpy<2 but works with numpy 2 (LM decoding)
  touch "$stamp"
fi
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_NO_ADVISORY_WARNINGS=1 TOKENIZERS_PARALLELISM=false
cmd=${1:-}
shift || true
case "$cmd" in
  demo) exec adaptspeech demo "$@" ;;   # threads: auto (recipe.yaml) takes the cores other work leaves free
  smoke) exec python -m adaptspeech.smoke "$@" ;;
  test)
    ruff check adaptspeech tests scripts recipes
    # two workers (tests run on one torch thread each: tests/conftest.py), whole files per worker so that a
    # module's shared fixtures are built once; ADAPTSPEECH_TEST_WORKERS=0 runs them in this process
    exec python -m pytest -q -n "${ADAPTSPEECH_TEST_WORKERS:-2}" --dist loadfile --durations=15 "$@" ;;
  *) echo "usage: ./run.sh demo|test|smoke [args...]" >&2; exit 2 ;;
esac
