"""A command line that starts fast: ``import adaptspeech``, ``adaptspeech --help``, every subcommand's ``--help`` and
a refused option import neither PyTorch nor transformers nor peft (found: ``adaptspeech --help`` imported all three,
10.7-11.5 s on an idle 2-core machine, through the package's eager ``__init__``). Each check runs in a fresh
interpreter where torch IS installed and reads ``sys.modules``; the seconds are measured by
``scripts/bench_startup.py`` (docs/benchmarks.md), not here."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers.cli import subprocess_env
from helpers.paths import REPO

HEAVY = ("torch", "transformers", "peft")

RECIPE_FOLDERS = ("recipes/synthetic_demo", "recipes/common_voice", "recipes/attention_study")
"""Recipe folders whose task adds its own options before parsing (``demo`` names the first): the options come from
the tasks' option table (adaptspeech.recipes.options, the folder's options.py), not from the task."""

_WALK = """
import argparse, contextlib, io, json, sys
from adaptspeech.cli import build_parser, main

def subcommands(parser, prefix):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield [*prefix, name]
                yield from subcommands(sub, [*prefix, name])

commands = [*subcommands(build_parser(), []), *(["recipe", folder] for folder in json.loads(sys.argv[1]))]
heavy = ("torch", "transformers", "peft")
found = {}
for argv in [[], *commands]:
    for tail in (["--help"], ["--bogus-option"]):
        out, err = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                main([*argv, *tail])
        except SystemExit as stop:
            code = stop.code
        else:
            code = None
        found[" ".join([*argv, *tail])] = [code, [name for name in heavy if name in sys.modules], len(out.getvalue()),
                                           [option in out.getvalue() for option in ("--dry-run", "--curve")]]
print(json.dumps(found))
"""


def _run(script: str, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", script, *argv], env=subprocess_env(), capture_output=True, text=True,
                          timeout=300)


def test_help_and_a_refused_option_of_every_command_import_no_torch_transformers_or_peft():
    done = _run(_WALK, json.dumps([str(REPO / folder) for folder in RECIPE_FOLDERS]))
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout)
    # every command and sub-command was reached: prepare's four corpora, lm build / tune, transcribe ...
    assert {"--help", "transcribe --help", "prepare common-voice --help", "lm tune --help", "recipe --help",
            "transcribe --bogus-option", "train --bogus-option", "demo --help", "demo --bogus-option"} <= set(found)
    assert len(found) >= 2 * (14 + len(RECIPE_FOLDERS))
    # the tasks' own options are listed: the protocol's --dry-run, the demo's --curve, none for the attention study
    demo, protocol, study = (f"recipe {REPO / folder} --help" for folder in RECIPE_FOLDERS)
    assert [found[c][3] for c in ("demo --help", demo, protocol, study)] == [[True, True], [True, True],
                                                                             [True, False], [False, False]]
    for command, (code, heavy, printed, _) in found.items():
        assert not heavy, f"`adaptspeech {command}` imported {', '.join(heavy)}"
        if command.endswith("--help"):
            assert code == 0 and printed > 100, (command, code, printed)
        else:
            assert code == 2, (command, code)  # a usage error: one line, exit status 2


def test_the_package_import_is_light_and_its_public_names_load_on_first_use():
    script = (
        "import sys, json\n"
        "import adaptspeech\n"
        "light = [name for name in ('torch', 'transformers', 'peft') if name in sys.modules]\n"
        "from adaptspeech import AdaptSpeechForCTC\n"
        "from transformers import AutoModelForCTC, AutoProcessor\n"
        "from transformers.models.auto.modeling_auto import MODEL_FOR_CTC_MAPPING\n"
        "from transformers.pipelines import PIPELINE_REGISTRY\n"
        "impl = PIPELINE_REGISTRY.supported_tasks['automatic-speech-recognition']['impl'].__name__\n"
        "print(json.dumps([light, MODEL_FOR_CTC_MAPPING[AdaptSpeechForCTC.config_class] is AdaptSpeechForCTC, impl,\n"
        "                  'SPEECH_ADAPTER' in __import__('peft').mapping.PEFT_TYPE_TO_TUNER_MAPPING]))\n"
    )
    done = _run(script)
    assert done.returncode == 0, done.stderr[-3000:]
    light, registered, impl, peft_method = json.loads(done.stdout)
    assert light == []
    assert registered, "taking AdaptSpeechForCTC from the package did not register it with AutoModelForCTC"
    assert impl == "AdaptSpeechRecognitionPipeline"
    assert peft_method, "taking a name from the package did not register the speech_adapter PEFT method"


def test_every_public_name_resolves_to_its_submodules_object():
    import importlib

    import adaptspeech

    assert sorted(adaptspeech.__all__) == sorted(adaptspeech._EXPORTS)
    for name, module in adaptspeech._EXPORTS.items():
        assert getattr(adaptspeech, name) is getattr(importlib.import_module(module, "adaptspeech"), name)
    with pytest.raises(AttributeError, match="no attribute 'NoSuchName'"):
        adaptspeech.NoSuchName  # noqa: B018


def test_the_static_feature_type_names_are_the_registrys():
    from adaptspeech.cli.names import FEATURE_TYPE_NAMES
    from adaptspeech.data.feature_types import FEATURE_TYPES

    assert tuple(FEATURE_TYPES.names()) == FEATURE_TYPE_NAMES
