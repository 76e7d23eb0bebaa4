"""The recipe engine: a recipe folder's own Python registers its task (its modules import each other relatively),
the task adds its own command-line options, the schedule runs, reuses or leaves each step (``--only``, finished
steps), the settings are typed once at load (an unknown key, a value of the wrong type, an override of the task are
refused in one line) and a spec round-trips through its dict; the command line names no recipe."""

from __future__ import annotations

import inspect
import json
import re
import textwrap

import pytest
from helpers.recipes import DEMO, STUDY

from adaptspeech.cli import main
from adaptspeech.errors import StageConfigError
from adaptspeech.overrides import load_yaml
from adaptspeech.recipes import RECIPE_TASKS, RecipeError, load_recipe, recipe_module, run_recipe
from adaptspeech.recipes.engine import Action, folder_task, schedule, spec_from_dict

TOY_TASK = '''
from dataclasses import dataclass
from typing import ClassVar

from adaptspeech.recipes.engine import RECIPE_TASKS, Action, RecipeTask, schedule
from adaptspeech.recipes.spec import RecipeSpec
from adaptspeech.settings import SettingType

from .markers import MARKER


@dataclass(frozen=True)
class Step:
    name: str


@dataclass(frozen=True, kw_only=True)
class CountSpec(RecipeSpec):
    steps: tuple[str, ...] = ()

    SETTINGS: ClassVar = {"steps": SettingType("a list of step names", lambda v: isinstance(v, list), tuple)}


@RECIPE_TASKS.register("engine_test_count")
class Count(RecipeTask):
    spec_class = CountSpec
    skip_finished = True
    outside_only = Action.LEAVE
    step_noun = "step"
    outputs = ("results.md",)

    @classmethod
    def add_arguments(cls, parser):
        parser.add_argument("--greeting", default=None)

    def command(self, folder, overrides, only, options):
        if options.greeting:
            print(f"greeting: {options.greeting}")
        return super().command(folder, overrides, only, options)

    def plan(self, spec):
        return [Step(name) for name in spec.steps]

    def finished(self, spec, step):
        return (spec.output_dir / step.name / MARKER).is_file()

    def run(self, spec, only=None):
        done = {}
        for step, action in schedule(self, spec, only):
            done[step.name] = action.value
            if action is Action.RUN:
                (spec.output_dir / step.name).mkdir(parents=True, exist_ok=True)
                (spec.output_dir / step.name / MARKER).write_text("done")
        (spec.output_dir / "results.md").write_text(f"| steps | {done} |\\n")
        return done
'''


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """A recipe folder whose task is defined in its own two modules (one imports the other relatively)."""
    folder = tmp_path_factory.mktemp("toy_recipe")
    (folder / "task.py").write_text(TOY_TASK)
    (folder / "markers.py").write_text('MARKER = "done.txt"\n')
    out = folder / "out"
    (folder / "recipe.yaml").write_text(
        textwrap.dedent(
            f"""\
            task: engine_test_count
            python: task.py
            output_dir: {out}
            steps: [a, b, c]
            """
        )
    )
    return folder, out


def test_the_folder_code_registers_its_task_and_runs(toy):
    folder, out = toy
    spec = load_recipe(folder)
    assert type(spec).__name__ == "CountSpec" and spec.steps == ("a", "b", "c") and "engine_test_count" in RECIPE_TASKS
    assert run_recipe(spec, only=["b"]) == {"a": "leave", "b": "run", "c": "leave"}
    assert run_recipe(spec) == {"a": "run", "b": "reuse", "c": "run"}  # a finished step is skipped
    assert recipe_module(folder, "task.py") is recipe_module(folder / "recipe.yaml", "task.py")  # imported once
    with pytest.raises(RecipeError, match=r"--only: unknown step\(s\) d; allowed values: a, b, c"):
        run_recipe(spec, only=["d"])
    (out / "a" / "done.txt").unlink()
    assert [action for _, action in schedule(folder_task(folder), spec)] == [Action.RUN, Action.REUSE, Action.REUSE]


def test_the_task_adds_its_own_command_line_options(toy, capsys):
    folder, out = toy
    assert main(["recipe", str(folder), "--greeting", "hello", "--only", "c", f"output_dir={out / 'cli'}"]) == 0
    printed = capsys.readouterr().out
    assert "greeting: hello" in printed and "{'a': 'leave', 'b': 'leave', 'c': 'run'}" in printed
    assert f"wrote {out / 'cli' / 'results.md'}" in printed
    with pytest.raises(SystemExit):  # another recipe's task does not have the option
        main(["recipe", str(STUDY), "--greeting", "hello"])
    assert "unrecognized arguments: --greeting" in capsys.readouterr().err


def test_recipe_help_lists_the_options_of_the_folders_task(capsys):
    with pytest.raises(SystemExit):
        main(["recipe", str(DEMO), "--help"])
    demo_help = capsys.readouterr().out
    assert "--curve BUDGET,BUDGET" in demo_help and "--dry-run" in demo_help and "--only" in demo_help
    with pytest.raises(SystemExit):
        main(["recipe", str(STUDY), "--help"])
    study_help = capsys.readouterr().out
    assert "--only" in study_help and "--curve" not in study_help and "--dry-run" not in study_help


def test_the_command_line_names_no_recipe():
    import adaptspeech.cli.recipe as command

    source = inspect.getsource(command)  # the demo command knows where the demo's folder is, not what it runs
    for name in ("attention_study", "curve", "lm_rows", "study", "simadapter", "dry_run"):
        assert not re.search(rf"\b{name}\b", source), name


@pytest.mark.parametrize(
    ("folder", "override", "message"),
    [
        ("synthetic_demo", "progress=maybe", r"recipe\.progress: expected true or false, got 'maybe'"),
        ("synthetic_demo", "threads=0", r"recipe\.threads: expected a positive integer or 'auto' or null, got 0"),
        ("synthetic_demo", "threads=two", r"recipe\.threads: expected a positive integer or 'auto' or null, got 'two'"),
        ("synthetic_demo", "corpus.kind=synthetic", r"corpus\.kind: the corpus's type is set as corpus\.type"),
        ("common_voice", "corpus.clips=3", r"corpus: unknown setting\(s\) clips; allowed settings: clips_per_lang"),
        ("synthetic_demo", "evaluation.method=viterbi", r"evaluation\.method 'viterbi' unknown"),
        ("synthetic_demo", "target_subset=ten minutes", r"target_subset: subset size"),
        ("synthetic_demo", "task=attention_study", r"task is read from recipe.yaml"),
        ("attention_study", "attention_maps.seconds=-1", r"attention_maps\.seconds: expected a finite number > 0"),
    ],
)
def test_settings_are_typed_and_checked_at_load(folder, override, message):
    with pytest.raises(RecipeError, match=message):
        load_recipe(f"recipes/{folder}", [override])


def test_threads_take_a_count_auto_or_null_and_the_demo_defaults_to_auto():
    assert load_recipe("recipes/synthetic_demo").threads == "auto"  # fewer threads on a busy machine
    assert load_recipe("recipes/synthetic_demo", ["threads=1"]).threads == 1
    assert load_recipe("recipes/synthetic_demo", ["threads=null"]).threads is None


def test_stage_overrides_and_corpus_settings():
    with pytest.raises(RecipeError, match=r"override 'finetune.training.max_steps=1': the recipe has no stage"):
        load_recipe("recipes/synthetic_demo", ["baselines={}", "finetune.training.max_steps=1"])
    spec = load_recipe("recipes/synthetic_demo", ["corpus.noise_snr_db=[10, 20]"])  # a SyntheticConfig field
    assert spec.corpus.synthetic == {"noise_snr_db": [10, 20]}
    assert spec.corpus.synthetic_config().noise_snr_db == (10, 20)


def test_an_override_naming_a_stage_file_reads_it():
    # a group replaced on the command line names its stage files as recipe.yaml does: they are read, not kept as text
    spec = load_recipe("recipes/synthetic_demo", ["baselines={finetune: stage_finetune.yaml}"])
    assert spec.baselines.keys() == {"finetune"}
    assert spec.stage_settings("baselines", "finetune")["training"] == load_yaml(
        "recipes/synthetic_demo/stage_finetune.yaml")["training"]
    with pytest.raises(StageConfigError, match=r"config file .*stage_nope\.yaml not found"):
        load_recipe("recipes/synthetic_demo", ["baselines={finetune: stage_nope.yaml}"])


def test_an_unknown_task_is_named_with_the_allowed_ones(tmp_path):
    (tmp_path / "recipe.yaml").write_text("task: nope\noutput_dir: out\n")
    with pytest.raises(RecipeError, match=r"task: unknown recipe task 'nope'; allowed values: .*simadapter"):
        load_recipe(tmp_path)
    with pytest.raises(RecipeError, match="no such recipe folder"):
        load_recipe(tmp_path / "missing")


@pytest.mark.parametrize("folder", ["recipes/synthetic_demo", "recipes/common_voice", "recipes/attention_study"])
def test_a_spec_round_trips_through_its_dict(folder):
    spec = load_recipe(folder, ["target=ro"] if "study" not in folder else ["sources=[cs, pl]"])
    values = json.loads(json.dumps(spec.to_dict()))
    assert spec_from_dict(values, spec.folder) == spec


@pytest.mark.parametrize(
    ("source", "line", "error"),
    [
        ("x = 1\ndef f(:\n    pass\n", 2, "SyntaxError: invalid syntax"),
        ("import os\nimport adaptspeech_no_such_module\n", 2,
         "ModuleNotFoundError: No module named 'adaptspeech_no_such_module'"),
        ("def fail():\n    raise RuntimeError('the study is broken')\n\n\nfail()\n", 2,
         "RuntimeError: the study is broken"),
    ],
)
def test_a_broken_python_file_of_the_folder_is_one_line(tmp_path, capsys, source, line, error):
    """The folder's Python is imported while the command line is parsed: an error in it is one line naming the file,
    the line and the error, not a traceback through argparse."""
    (tmp_path / "recipe.yaml").write_text("task: engine_test_broken\npython: study.py\noutput_dir: out\n")
    (tmp_path / "study.py").write_text(source)
    assert main(["recipe", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.strip() == f"adaptspeech: error: python: {tmp_path / 'study.py'}, line {line}: {error}"
    with pytest.raises(RecipeError, match=re.escape(f"study.py, line {line}: {error}")):
        load_recipe(tmp_path)
