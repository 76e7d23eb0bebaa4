"""Every code example of README.md, docs/*.md and recipes/*/README.md works as written.

- ``python`` blocks run offline, the blocks of one page in order in one namespace, in a fresh folder (they write
  their own tiny models, corpora and clips there). A block that cannot run offline is marked in the Markdown by the
  line just before it, ``<!-- no-run: REASON -->`` (the Hub downloads of pretrained checkpoints); the reasons are
  listed by :func:`test_blocks_that_do_not_run_say_why`, and each page may keep only the few it has now.
- ``bash`` / ``sh`` / unlabelled blocks: every ``adaptspeech ...`` command line (also ``python -m adaptspeech.cli``
  under ``accelerate launch`` or ``torchrun``) names subcommands and options that exist in the command's parser.

Found: ``feats``, ``mask``, ``labels`` (README), ``pool`` (docs/data.md), ``model.las`` and ``hidden``
(docs/las.md) used without being defined; the README's PEFT block raised ``NoMatchingPeftModuleError``; the
pipeline examples needed ffmpeg and torchaudio.
"""

from __future__ import annotations

import argparse
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers.paths import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "recipes").glob("*/README.md"))]
FENCE = re.compile(r"^(?:<!--\s*no-run:(?P<reason>[^>]*?)-->\n)?```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^```[ \t]*$",
                   re.M | re.S)
SHELL = ("bash", "sh", "shell", "console", "")
#: how many python blocks of each page may stay unrun (anything more needs a reason to be added here too).
NO_RUN_ALLOWED = {"README.md": 1, "docs/data.md": 1, "docs/mms.md": 4}
COMMAND = re.compile(r"^(?:\$\s+)?(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:(?:/usr/bin/)?time(?:\s+-v)?\s+)?"
                     r"(?P<cmd>adaptspeech\s.*|adaptspeech$)|\s-m\s+(?P<module>adaptspeech\.cli\s.*)$")


@dataclass
class Block:
    page: str
    line: int
    lang: str
    body: str
    no_run: str | None


def blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        line = text.count("\n", 0, match.start("body")) + 1
        reason = match.group("reason")
        found.append(Block(str(page.relative_to(REPO)), line, match.group("lang"), match.group("body"),
                           None if reason is None else reason.strip()))
    return found


PYTHON_PAGES = [page for page in PAGES if any(b.lang == "python" for b in blocks(page))]


@pytest.mark.filterwarnings("ignore::FutureWarning")
@pytest.mark.parametrize("page", PYTHON_PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_the_python_blocks_of_a_page_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem}"}
    ran = 0
    for block in (b for b in blocks(page) if b.lang == "python" and b.no_run is None):
        code = compile("\n" * (block.line - 1) + block.body, str(page), "exec")  # tracebacks give the page's lines
        exec(code, namespace)
        ran += 1
    assert ran, f"{page}: every python block is marked no-run"


def test_blocks_that_do_not_run_say_why() -> None:
    unrun: dict[str, list[str]] = {}
    for page in PAGES:
        for block in blocks(page):
            if block.no_run is not None:
                assert block.lang == "python", f"{block.page}:{block.line}: no-run marks python blocks only"
                assert len(block.no_run) > 5, f"{block.page}:{block.line}: say why the block does not run"
                unrun.setdefault(block.page, []).append(f"line {block.line}: {block.no_run}")
    for name, reasons in unrun.items():
        assert len(reasons) <= NO_RUN_ALLOWED.get(name, 0), f"{name}: more unrun blocks than before: {reasons}"
    assert set(unrun) == set(NO_RUN_ALLOWED), unrun  # the Hub examples stay marked, with their reasons


def command_lines(block: Block) -> list[str]:
    """The ``adaptspeech`` command lines of a shell block, continuation lines joined, from ``adaptspeech`` (or
    ``adaptspeech.cli``) on."""
    found = []
    for line in block.body.replace("\\\n", " ").splitlines():
        match = COMMAND.search(line.strip())
        if match:
            found.append(match.group("cmd") or match.group("module"))
    return found


def unknown_arguments(command: str, parser: argparse.ArgumentParser) -> list[str]:
    """Subcommands and options of ``command`` (``adaptspeech SUB ... --option ...``) that ``parser`` does not have;
    the subcommand path is returned first."""
    tokens = [t.strip("[]") for t in shlex.split(command, comments=True)]
    for stop in ("|", "&&", ";", ">", "2>"):
        tokens = tokens[: tokens.index(stop)] if stop in tokens else tokens
    tokens, path = tokens[1:], []
    while True:
        subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subparsers:
            break
        if not tokens or tokens[0] not in subparsers[0].choices:
            return [f"subcommand {' '.join(path + tokens[:1]) or '(none)'}"]
        path.append(tokens[0])
        parser = subparsers[0].choices[tokens.pop(0)]
    getattr(parser, "add_task_options", lambda _: None)(tokens)  # recipe / demo: the folder's task adds its options
    options = {option for action in parser._actions for option in action.option_strings}
    return [t for t in tokens if t.startswith("--") and t.split("=", 1)[0] not in options]


def test_every_adaptspeech_command_line_uses_subcommands_and_options_that_exist() -> None:
    from adaptspeech.cli import build_parser

    checked, wrong = [], []
    for page in PAGES:
        for block in blocks(page):
            if block.lang not in SHELL:
                continue
            for command in command_lines(block):
                checked.append(command)
                bad = unknown_arguments(command, build_parser())
                if bad:
                    wrong.append(f"{block.page}:{block.line}: {command!r}: unknown {', '.join(bad)}")
    assert not wrong, "\n".join(wrong)
    subcommands = {tuple(shlex.split(c, comments=True)[1:3]) for c in checked}
    assert {("prepare", "synthetic"), ("lm", "tune"), ("transcribe", "--model"), ("recipe", "recipes/common_voice"),
            ("train", "--config")} <= subcommands, subcommands
    assert len(checked) > 30


def test_the_command_line_check_finds_what_does_not_exist() -> None:
    from adaptspeech.cli import build_parser

    assert unknown_arguments("adaptspeech transcribe --model m a.wav --langauge ro", build_parser()) == ["--langauge"]
    assert unknown_arguments("adaptspeech lm tunes --lm x", build_parser()) == ["subcommand lm tunes"]
    assert unknown_arguments("adaptspeech evaluate --split test [--lm lm/] # --nope", build_parser()) == []
    block = Block("x.md", 1, "bash", "$ OMP_NUM_THREADS=1 /usr/bin/time -v adaptspeech demo --foo \\\n  --bar\n"
                  "torchrun --nproc_per_node 2 -m adaptspeech.cli train --config s.yaml\n", None)
    assert command_lines(block) == ["adaptspeech demo --foo    --bar", "adaptspeech.cli train --config s.yaml"]


def test_every_test_the_docs_name_exists():
    """``tests/FILE.py::test_name`` in README, docs and recipe READMEs (the reliability table backs each row with one)
    names a file and a test function that exist."""
    missing = []
    for page in PAGES:
        for match in re.finditer(r"(tests/[\w/]+\.py)(?:::(\w+))?", page.read_text(encoding="utf-8")):
            path, name = REPO / match.group(1), match.group(2)
            if not path.is_file():
                missing.append(f"{page.relative_to(REPO)}: {match.group(1)}")
            elif name and not re.search(rf"def {name}\b", path.read_text(encoding="utf-8")):
                missing.append(f"{page.relative_to(REPO)}: {match.group(1)}::{name}")
    assert not missing, "\n".join(missing)
