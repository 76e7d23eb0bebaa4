"""The LM weights on the command line of ``lm tune``, ``evaluate`` and ``transcribe``: empty or non-finite values are
one usage line naming the option, negative numbers are values, and ``evaluate --lm`` labels its summary ``ctc_lm``."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from helpers.cli import run_main
from helpers.lm import tune_argv

pytest.importorskip("kenlm")
pytest.importorskip("pyctcdecode")


@pytest.mark.parametrize(
    ("command", "option", "value", "message"),
    [
        ("tune", "--alphas", "", "argument --alphas: expected comma-separated numbers, got ''"),
        ("tune", "--betas", " , ", "argument --betas: expected comma-separated numbers, got ' , '"),
        ("tune", "--alphas", "nan", "argument --alphas: expected finite numbers, got 'nan'"),
        ("tune", "--betas", "0,inf", "argument --betas: expected finite numbers, got '0,inf'"),
        ("evaluate", "--alpha", "nan", "argument --alpha: expected a finite number, got 'nan'"),
        ("evaluate", "--beta", "-inf", "argument --beta: expected a finite number, got '-inf'"),
        ("transcribe", "--alpha", "nan", "argument --alpha: expected a finite number, got 'nan'"),
        ("transcribe", "--hotword-weight", "nan", "argument --hotword-weight: expected a finite number, got 'nan'"),
    ],
)
def test_an_empty_or_non_finite_lm_weight_is_one_line_naming_the_option(command, option, value, message,
                                                                       lm_setup, capsys) -> None:  # fmt: skip
    """(``--alphas ''`` ended in an IndexError after the whole grid, ``nan`` in "max() arg is an empty sequence".)"""
    import soundfile as sf

    clip = lm_setup.root / "clip.wav"
    sf.write(clip, lm_setup.waves[0], 16000)
    argv = {
        "tune": tune_argv(lm_setup),
        "evaluate": ["evaluate", "--model", lm_setup.model, "--data", lm_setup.prepared, "--split", "dev", "--lm",
                     lm_setup.lm, "--no-progress", "--device", "cpu"],
        "transcribe": ["transcribe", "--model", lm_setup.model, clip, "--lm", lm_setup.lm, "--no-progress",
                       "--device", "cpu"],
    }[command]
    option_and_value = [f"{option}={value}"] if value.startswith("-") else [option, value]  # not a negative number
    code, out, err = run_main([*argv, *option_and_value], capsys)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and message in err, err


def test_negative_lm_weights_are_values_not_options(lm_setup: SimpleNamespace, capsys) -> None:
    """``--beta -1e9`` and ``--alphas -5,1e9`` (argparse took them for options: "expected one argument")."""
    import json

    code, out, err = run_main([*tune_argv(lm_setup), "--alphas", "-5,1e9", "--betas", "-1e9,-.5"], capsys)
    assert code == 0, err
    assert sorted(line.split("\t")[:2] for line in out.splitlines()[1:5]) == sorted(
        [["-5", "-1e+09"], ["-5", "-0.5"], ["1e+09", "-1e+09"], ["1e+09", "-0.5"]])
    results = lm_setup.root / "results.json"
    argv = ["evaluate", "--model", lm_setup.model, "--data", lm_setup.prepared, "--split", "dev", "--lm", lm_setup.lm,
            "--alpha", "-2", "--beta", "-1e9", "--no-progress", "--device", "cpu", "--output", results]
    code, _, err = run_main(argv, capsys)
    assert code == 0, err
    options = json.loads(results.read_text())["options"]
    assert (options["alpha"], options["beta"]) == (-2.0, -1e9)


def test_evaluate_with_an_lm_labels_its_summary_ctc_lm(lm_setup: SimpleNamespace, capsys) -> None:
    """The printed summary names the decoder the JSON names (it said ``(ctc_greedy)``)."""
    import json

    results = lm_setup.root / "results.json"
    argv = ["evaluate", "--model", lm_setup.model, "--data", lm_setup.prepared, "--split", "dev", "--lm", lm_setup.lm,
            "--no-progress", "--device", "cpu", "--output", results]
    code, out, err = run_main(argv, capsys)
    assert code == 0, err
    assert json.loads(results.read_text())["method"] == "ctc_lm"
    overall = next(line for line in out.splitlines() if line.startswith("overall\t"))
    assert overall.endswith("3 utt (ctc_lm)")
    code, out, _ = run_main([a for a in argv if a not in ("--lm", lm_setup.lm)] + ["--overwrite"], capsys)
    assert code == 0
    assert next(line for line in out.splitlines() if line.startswith("overall\t")).endswith("3 utt (ctc_greedy)")
