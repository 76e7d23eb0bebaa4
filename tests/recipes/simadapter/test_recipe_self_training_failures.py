"""A SimAdapter recipe's runs that end early, at toy scale (one source language, 3 steps a stage): a
``self_training.pool`` that is no pool is refused before anything is built; ``--only base`` on a fresh folder trains
the base and exits 0 naming the stages it skipped; a teacher that decodes nothing is one line saying so, after the
table of the trained systems is written; a rerun takes over the recipe's own stale labelling folder (not one another
live process holds); an audio-folder pool is read as such."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
from pathlib import Path

import pytest
import soundfile as sf
from helpers.model_folders import audio
from helpers.recipes import DEMO, TINY, few_steps

from adaptspeech.cli import main
from adaptspeech.recipes import load_recipe
from adaptspeech.recipes.simadapter.evaluation import ADAPTER_ALONE, ZERO_SHOT

STAGES = ("base", "source_adapters", "target_adapter", "fusion")
POOL_CLIPS = 8


def _overrides(out: Path, *extra: str) -> list[str]:
    """The toy run: one source language, no baselines, no LM, 3 steps a stage; self-training (when on) of the adapter
    alone, one round, on 8 unlabelled clips."""
    return [
        f"output_dir={out}", "progress=false", "sources=[cs]", "target=sk", "target_subset=8utt", "baselines={}",
        "lm.enabled=false", "corpus.clips_per_language=20", f"base.model.config={json.dumps(TINY)}",
        "source_adapters.model.add_adapters={cs: {bottleneck: 8}}", "source_adapters.model.active_languages=[cs]",
        "source_adapters.model.trainable={adapters: [cs]}", "target_adapter.model.add_adapters={sk: {bottleneck: 8}}",
        "fusion.model.fusion={languages: [cs, sk], target_language: sk, residual: none}",
        f"self_training.pool_clips={POOL_CLIPS}", "self_training.rounds=1", "self_training.systems=[target_adapter]",
        *few_steps(STAGES, save_steps=3), *extra,
    ]


def _run(*argv: str) -> tuple[int, str, str]:
    """``adaptspeech recipe DEMO argv``: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["recipe", str(DEMO), *argv])
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One folder: a run refused for its pool, then ``--only base`` on the fresh folder, then the other stages."""
    out = tmp_path_factory.mktemp("recipe_failures") / "run"
    bad_pool = _run(*_overrides(out, "self_training.enabled=true", f"self_training.pool={out.parent / 'nopool'}"))
    built_after_bad_pool = sorted(p.name for p in out.iterdir()) if out.exists() else []
    only_base = _run(*_overrides(out), "--only", "base")
    built_after_only_base = sorted(p.name for p in out.iterdir())
    rest = _run(*_overrides(out), "--only", "source_adapters,target_adapter,fusion")
    assert rest[0] == 0, rest
    return {"out": out, "bad_pool": bad_pool, "built_after_bad_pool": built_after_bad_pool, "only_base": only_base,
            "built_after_only_base": built_after_only_base}


def test_a_pool_setting_that_is_no_pool_is_refused_before_anything_is_built(runs):
    code, _, err = runs["bad_pool"]
    assert code == 1 and err.strip() == (
        f"adaptspeech: error: self_training.pool {runs['out'].parent / 'nopool'}: no pool_config.json, not a pool "
        "written by `adaptspeech prepare audio-folder` / `common-voice-other`")
    assert runs["built_after_bad_pool"] == []  # no corpus, no prepared data, no stage


def test_only_base_on_a_fresh_folder_trains_it_and_names_the_skipped_stages(runs):
    code, out, err = runs["only_base"]
    assert code == 0, err
    assert ("trained base; skipped source_adapters, target_adapter, fusion (left out by --only, not run before): no "
            "results table until every stage has run") in out
    assert "wrote" not in out and err == ""
    assert runs["built_after_only_base"] == ["base", "corpus", "prepared"]  # no other stage, no results table
    assert (runs["out"] / "results.md").is_file()  # the later run with the other stages wrote the table


def _decode_nothing(model_dir: Path, blank_bias: float) -> None:
    """Make the CTC head of the model in ``model_dir`` prefer the blank on every frame (its text is empty)."""
    import torch

    from adaptspeech import AdaptSpeechForCTC

    model = AdaptSpeechForCTC.from_pretrained(model_dir)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.startswith("ctc_head") and name.endswith("bias"):
                parameter[model.config.pad_token_id] += blank_bias
    model.save_pretrained(model_dir)


def test_a_teacher_that_decodes_nothing_is_one_line_after_the_table_and_a_rerun_takes_over_its_folder(
        runs, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(runs["out"], out)
    (out / "results.md").unlink()
    _decode_nothing(out / "target_adapter" / "model", 100.0)
    code, _, err = _run(*_overrides(out), "--only", "self_training")
    teacher, pool = out / "target_adapter" / "model", out / "self_training" / "pool"
    expected = (f"adaptspeech: error: self-training: the teacher {teacher} decoded nothing: empty text for all "
                f"{POOL_CLIPS} utterances of the pool {pool} (is it trained, and on this language?) (the trained "
                f"systems' results are in {out / 'results.md'})")
    assert code == 1 and err.strip() == expected
    table = (out / "results.md").read_text()  # every system trained and evaluated is in the table
    for system in (ZERO_SHOT, ADAPTER_ALONE, "SimAdapter fusion (on the target adapter)"):
        assert f"| {system} |" in table
    assert "self-training" not in table.split("### ")[0]
    work = out / "self_training" / "target_adapter" / "round_1" / ".labels.labelling"
    assert (work / "run.json").is_file()  # the labels of that teacher stay, in the recipe's own folder
    first_teacher = json.loads((work / "run.json").read_text())["model"]
    # another teacher: the recipe's stale folder is started afresh (not "remove ... to start afresh")
    _decode_nothing(teacher, 50.0)
    code, _, err = _run(*_overrides(out), "--only", "self_training")
    assert code == 1 and err.strip() == expected
    assert json.loads((work / "run.json").read_text())["model"] != first_teacher  # this teacher's labels now
    # a folder another live process is labelling into is left to it
    holder = os.getppid()
    (work / ".owner_pid").write_text(str(holder))
    run_json = (work / "run.json").read_text()
    _decode_nothing(teacher, 10.0)
    code, _, err = _run(*_overrides(out), "--only", "self_training")
    assert code == 1 and f"another process (pid {holder}) is writing it" in err and err.count("\n") == 1
    assert (work / "run.json").read_text() == run_json


def test_an_audio_folder_pool_is_read_as_one(runs, tmp_path):
    """What an audio folder's clips say is unknown: it is not read as a Common Voice release (which failed after
    every system was evaluated); its language must be the target's."""
    from adaptspeech.data.pools import feature_extractor_for, prepare_audio_folder
    from adaptspeech.recipes.simadapter.self_training_pool import held_aside_sentences

    clips = tmp_path / "recordings"
    clips.mkdir()
    for i in range(3):
        sf.write(clips / f"talk{i}.wav", audio(1.0 + 0.2 * i, seed=i), 16000)
    extractor = feature_extractor_for(processor_dir=str(runs["out"] / "prepared" / "processor"))
    prepare_audio_folder(clips, "sk", tmp_path / "pool", extractor, progress=False)
    spec = load_recipe(DEMO, _overrides(runs["out"], f"self_training.pool={tmp_path / 'pool'}"))
    assert held_aside_sentences(spec, tmp_path / "pool") is None
    prepare_audio_folder(clips, "ro", tmp_path / "pool_ro", extractor, progress=False)
    code, _, err = _run(*_overrides(runs["out"], "self_training.enabled=true",
                                    f"self_training.pool={tmp_path / 'pool_ro'}"))
    assert code == 1 and err.strip() == (f"adaptspeech: error: self_training.pool {tmp_path / 'pool_ro'}: a pool of "
                                         "'ro', the recipe's target is 'sk'")
