"""The package's shape: no import circle inside ``adaptspeech/``, nothing outside ``cli/`` imports the command line,
no study code or test fixtures in the library, no string dispatch on names the registries own, and no development
history (a session or an issue named by its number) in what the repository says to its users.

The import graph is read from the source (``ast``), not from a running interpreter: every ``import`` statement of a
module counts, at module level or inside a function (a lazy import that closes a circle still runs), except those
under ``if TYPE_CHECKING:``. ``from X import name`` depends on ``X`` and, when ``X.name`` is a module, on it;
``from . import sub`` of a submodule depends on the submodule alone (the package is already being imported)."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

from helpers.paths import REPO

PACKAGE = REPO / "adaptspeech"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _type_checking_lines(tree: ast.AST) -> set[int]:
    """Line numbers inside ``if TYPE_CHECKING:`` blocks."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
            if name == "TYPE_CHECKING":
                for child in node.body:
                    lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The adaptspeech modules ``name`` imports (see the module docstring)."""
    tree = ast.parse(path.read_text(), str(path))
    skip = _type_checking_lines(tree)
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            subs = {f"{source}.{alias.name}" for alias in node.names if f"{source}.{alias.name}" in known}
            found |= subs
            if source in known and len(subs) < len(node.names):  # a name defined in the module itself
                found.add(source)
    found.discard(name)
    return found


def import_graph() -> dict[str, set[str]]:
    table = modules()
    known = set(table)
    return {name: imports_of(name, path, known) for name, path in table.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_circle_inside_the_package():
    found = circles(import_graph())
    assert not found, "import circles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_circle_finder_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_nothing_outside_the_command_line_imports_it():
    upward = [
        f"{name} imports {target}"
        for name, targets in import_graph().items()
        if not name.startswith("adaptspeech.cli")
        for target in targets
        if target.startswith("adaptspeech.cli")
    ]
    assert not upward, "\n".join(upward)


def test_no_study_code_in_the_library():
    names = set(modules())
    studies = sorted(n for n in names if re.search(r"attention_study|transfer_curve|curve_|demo_lm|las_testing", n))
    assert not studies, studies


def test_no_string_dispatch_on_registered_names_outside_the_registries():
    pattern = re.compile(r"""==\s*["'](fbank|waveform|bottleneck)["']|["'](fbank|waveform|bottleneck)["']\s*==""")
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line):
                offenders.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    allowed = ("registry",)  # the registries' own modules may name their entries
    offenders = [o for o in offenders if not any(part in o.split(":", 1)[0] for part in allowed)]
    assert not offenders, "\n".join(offenders)


def test_the_repository_names_no_session_or_issue_numbers():
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    pattern = re.compile(r"\b(session|issue)s?\s+\d+", re.IGNORECASE)  # "issue #N" of another project is fine
    hits = []
    for relative in tracked.splitlines():
        path = REPO / relative
        if path.suffix not in {".py", ".md", ".yaml", ".yml", ".toml", ".sh", ".txt", ".cfg"} or not path.is_file():
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if pattern.search(line):
                hits.append(f"{relative}:{number}: {line.strip()[:120]}")
    assert not hits, f"{len(hits)} lines name a session or an issue:\n" + "\n".join(hits[:40])


# ---- floors: each module imports only from its own floor and the floors below ----------------------------------------

FLOORS: dict[str, int] = {
    # 0: the ground floor, numpy + onnxruntime: features, CTC searches, pauses and long-form planning, the ONNX
    # recognizer. The package's own __init__ is light (its public names load on first use), so importing it is free.
    "": 0, "runtime": 0,
    # 1: settings, errors, the registry and the small helpers every floor above uses
    "settings": 1, "errors": 1, "registry": 1, "run_lock": 1, "yaml_loader": 1, "overrides": 1, "progress": 1,
    "devices": 1, "memory": 1, "shortcuts": 1, "stream_state": 1, "hub_connection": 1,
    # 2: the parts of a model, its data, decoders, LMs and metrics
    "attention": 2, "backbones": 2, "adapters": 2, "heads": 2, "decoding": 2, "lm": 2, "metrics": 2, "data": 2,
    # 3: the model
    "configuration": 3, "modeling": 3, "modeling_outputs": 3, "generation": 3, "feature_extraction": 3,
    "saved_model": 3,
    # 4: recognizers (inference/ and its subpackages: long_form, streaming, language_id, pseudo_labels)
    "inference": 4,
    # 5: what runs a model: export, training, evaluation, the pipeline, the Hub
    "export": 5, "training": 5, "evaluation": 5, "pipeline": 5, "lid_evaluation": 5, "hub": 5, "model_card": 5,
    "smoke": 5, "testing": 5, "alignment": 5,
    # 6: recipes; 7: the command line
    "recipes": 6, "cli": 7,
}
"""The floor of each top-level module or subpackage of ``adaptspeech`` (docs: DESIGN's layout, from the ground up)."""

ALLOWED_UPWARD: dict[tuple[str, str], str] = {
    ("adaptspeech.modeling", "adaptspeech.inference.model_mixin"):
        "the model class is built from its inference mixin (from_pretrained(target_lang=...), the frame ratio), which "
        "sits with the inference stages that read it (the frame grid, the long-form features)",
    ("adaptspeech.modeling", "adaptspeech.inference.streaming.encoding"):
        "the model class is built from its streaming mixin (encode_chunk with a cache), which sits with the "
        "streaming recognizer that drives it",
    ("adaptspeech.runtime.recognizer", "adaptspeech.lm.decoder"):
        "the ONNX recognizer's --lm: the n-gram LM decoder (pyctcdecode, numpy), imported lazily, the one "
        "thing of the package the runtime may use",
}
"""The imports from a higher floor that stay, each with its reason (at most three)."""


def floor_of(module: str) -> int:
    """The floor of ``adaptspeech.<part>...`` from :data:`FLOORS` (KeyError: a module without a floor)."""
    parts = module.split(".")
    return FLOORS[parts[1] if len(parts) > 1 else ""]


def upward_imports(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """``(importer, imported)`` pairs whose imported module sits on a higher floor than its importer."""
    return {(name, target) for name, targets in graph.items() for target in targets
            if floor_of(target) > floor_of(name)}


def test_every_module_has_a_floor():
    missing = sorted({name.split(".")[1] for name in modules() if "." in name} - set(FLOORS))
    assert not missing, f"give these a floor in FLOORS: {missing}"


def test_no_module_imports_from_a_higher_floor_but_the_named_few():
    found = upward_imports(import_graph())
    assert len(ALLOWED_UPWARD) <= 3
    new = sorted(found - set(ALLOWED_UPWARD))
    assert not new, "imports from a higher floor:\n" + "\n".join(f"{a} imports {b}" for a, b in new)
    stale = sorted(set(ALLOWED_UPWARD) - found)
    assert not stale, f"allowed upward imports that no longer exist (remove them): {stale}"


def test_the_floor_check_finds_an_upward_import():
    graph = {"adaptspeech.runtime.x": {"adaptspeech.inference.y"}, "adaptspeech.cli.z": {"adaptspeech.runtime.x"}}
    assert upward_imports(graph) == {("adaptspeech.runtime.x", "adaptspeech.inference.y")}


def test_the_runtime_imports_only_the_runtime_and_the_lm_decoder():
    graph = import_graph()
    allowed = {"adaptspeech", "adaptspeech.lm.decoder"}
    found = sorted(f"{name} imports {target}" for name, targets in graph.items()
                   if name.startswith("adaptspeech.runtime")
                   for target in targets
                   if not target.startswith("adaptspeech.runtime") and target not in allowed)
    assert not found, "\n".join(found)
    # that the LM decoder's own module-level imports stay torch-free (its word confidence imports torch lazily, for
    # pseudo-labels) is checked by importing it: tests/runtime/test_runtime_torch_free.py
