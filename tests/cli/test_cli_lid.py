"""``transcribe --language auto`` / ``evaluate --language auto`` with the model's own language-ID head or a separate
``--lid-model``, and every setting that cannot work refused in one line."""

from __future__ import annotations

import json

import pytest
import soundfile as sf
from helpers.cli import one_error_line, run_main
from helpers.lid import model_with_lid_head, tiny_lid_classifier, tone_clip, two_language_corpus
from transformers import AutoProcessor

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.inference.language_id.identifiers import HeadIdentifier, SequenceClassificationIdentifier


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory):
    """A model with a (random) language-ID head, one without, a separate classifier, two wav files, a prepared
    folder."""
    from helpers.model_folders import model_folder

    root = tmp_path_factory.mktemp("cli_lid")
    waves = {"ro": tone_clip("ro", 5), "cs": tone_clip("cs", 6)}
    files = []
    for language, wave in waves.items():
        files.append(root / f"{language}.wav")
        sf.write(files[-1], wave, 16000)
    return {
        "model": model_with_lid_head(root / "model"),
        "no_head": model_folder(root / "no_head", backbone="wav2vec2"),
        "classifier": tiny_lid_classifier(root / "classifier", ["ron", "cs", "deu"]),
        "files": files,
        "waves": list(waves.values()),
        "prepared": two_language_corpus(root / "prepared", clips=1),
    }


def _lines(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines()]


def test_transcribe_auto_prints_each_file_s_language_and_probability(setup, capsys) -> None:
    code, out, _ = run_main(["transcribe", "--model", setup["model"], *setup["files"], "--language", "auto",
                             "--device", "cpu"], capsys)
    assert code == 0
    model, processor = AdaptSpeechForCTC.from_pretrained(setup["model"]), AutoProcessor.from_pretrained(setup["model"])
    log_probs = HeadIdentifier(model, processor).log_probs([setup["waves"][0]])[0]  # ro.wav alone, as transcribe
    lines = _lines(out)
    assert [line["path"] for line in lines] == [str(f) for f in setup["files"]]
    assert lines[0]["language"] == ["ro", "cs"][int(log_probs.argmax())]
    assert lines[0]["language_probability"] == pytest.approx(float(log_probs.max().exp()), abs=1e-6)
    code, out, _ = run_main(["transcribe", "--model", setup["model"], setup["files"][0], "--language",
                             lines[0]["language"], "--device", "cpu"], capsys)
    assert out.split("\t")[1].strip() == lines[0]["text"]  # the same as with that language given


def test_transcribe_auto_with_a_separate_model_and_top_k(setup, capsys) -> None:
    argv = ["transcribe", "--model", setup["model"], setup["files"][1], "--language", "auto", "--lid-model",
            setup["classifier"], "--lid-label-map", "ron=ro", "--lid-top-k", "2", "--device", "cpu"]
    code, out, _ = run_main(argv, capsys)
    assert code == 0
    (line,) = _lines(out)
    expected = SequenceClassificationIdentifier.from_folder(setup["classifier"], ["ro", "cs"], {"ron": "ro"})
    log_probs = expected.log_probs([setup["waves"][1]])[0]
    candidates = line["language_candidates"]
    assert sorted(c["language"] for c in candidates) == ["cs", "ro"]
    for c in candidates:
        assert c["lid_log_prob"] == pytest.approx(float(log_probs[["ro", "cs"].index(c["language"])]), abs=1e-5)
    assert line["language"] == max(candidates, key=lambda c: c["score"])["language"]


def test_evaluate_auto_scores_the_routing(setup, capsys, tmp_path) -> None:
    out_file = tmp_path / "r.json"
    code, out, _ = run_main(["evaluate", "--model", setup["model"], "--data", setup["prepared"], "--split", "test",
                             "--language", "auto", "--device", "cpu", "--no-progress", "--output", out_file], capsys)
    assert code == 0 and "language ID\taccuracy" in out
    result = json.loads(out_file.read_text())
    assert result["lid"]["num_utterances"] == 8 and set(result["routing"]["systems"]) <= {"adapter"}


def test_auto_on_a_model_without_a_head_says_how_to_get_one(setup, capsys) -> None:
    message = ("adaptspeech: error: --language auto: the model has no language-ID head; train one with a stage whose "
               "model.trainable.lid is true (docs/lid.md) or pass --lid-model DIR (a Wav2Vec2ForSequenceClassification "
               "folder)")
    for command in (["transcribe", setup["files"][0]], ["evaluate", "--data", setup["prepared"]]):
        code, _, err = run_main([*command, "--model", setup["no_head"], "--language", "auto", "--device", "cpu"],
                                capsys)
        assert code == 1 and one_error_line(err) == message, err


def test_settings_that_cannot_work_are_refused_in_one_line(setup, capsys, tmp_path) -> None:
    other = tiny_lid_classifier(tmp_path / "de_fr", ["deu", "fra"])
    base = ["transcribe", setup["files"][0], "--model", setup["model"], "--device", "cpu"]
    cases = [
        (["--language", "auto", "--lid-model", other],
         f"--lid-model {other}: none of its 2 labels (deu, fra) is one of the model's languages (cs, ro); map them "
         "with --lid-label-map LABEL=LANGUAGE,..."),
        (["--language", "auto", "--lid-model", setup["classifier"], "--lid-label-map", "ces=cs"],
         f"--lid-model {setup['classifier']}: the label map names label(s) ['ces'] the model does not have; its "
         "labels: cs, deu, ron"),
        (["--language", "auto", "--lid-model", setup["classifier"], "--lid-label-map", "ron"],
         "--lid-label-map: 'ron' is not LABEL=LANGUAGE"),
        (["--language", "ro", "--lid-model", setup["classifier"]], "--lid-model: used with --language auto only"),
        (["--language", "auto", "--lid-label-map", "ron=ro"],
         "--lid-label-map maps the labels of --lid-model; pass --lid-model DIR"),
        (["--language", "ro", "--lid-prior-weight", "0.5"], "--lid-prior-weight: used with --language auto only"),
        (["--language", "auto", "--lid-model", setup["classifier"], "--lid-label-map", "ron=ro,ron=cs"],
         "--lid-label-map: label 'ron' is given twice ('ron=ro', 'ron=cs'); give each label once"),
    ]
    for extra, message in cases:
        code, _, err = run_main([*base, *extra], capsys)
        assert code == 1 and one_error_line(err) == f"adaptspeech: error: {message}", err
    for weight in ("-1", "nan"):  # a negative prior weight would prefer the least probable languages
        code, _, err = run_main([*base, "--language", "auto", "--lid-top-k", "2", "--lid-prior-weight", weight],
                                capsys)
        assert code == 2 and "argument --lid-prior-weight: expected a non-negative number" in err, err


def test_a_file_too_short_to_identify_gets_one_line_and_the_others_are_transcribed(setup, capsys, tmp_path) -> None:
    short = tmp_path / "short.wav"
    sf.write(short, tone_clip("ro", 1)[:25], 16000)  # one frame of the tiny front end (kernels 10, 3; strides 5, 2)
    code, out, err = run_main(["transcribe", "--model", setup["model"], short, setup["files"][0], "--language", "auto",
                               "--device", "cpu", "--no-progress"], capsys)
    assert code == 1 and len(_lines(out)) == 1
    assert one_error_line(err).startswith(f"adaptspeech: error: {short}: no text: too short to identify its language")


def test_the_commands_of_docs_lid_run_at_toy_size(tmp_path, capsys) -> None:
    """docs/lid.md's stage YAML and its train / transcribe / evaluate command lines, on the toy corpus: the paths of
    the page replaced by toy ones, the training shortened."""
    import re
    import shlex

    import yaml
    from helpers.paths import REPO

    from adaptspeech.testing import tiny_config

    page = (REPO / "docs" / "lid.md").read_text()
    prepared = two_language_corpus(tmp_path / "prepared", clips=8)
    processor = AutoProcessor.from_pretrained(prepared / "processor")
    pretrained = tmp_path / "my_model" / "model"
    AdaptSpeechForCTC(tiny_config("wav2vec2", vocab_size=len(processor.tokenizer),
                                  adapter_languages=["ro", "cs"])).save_pretrained(pretrained)
    processor.save_pretrained(pretrained)
    stage = yaml.safe_load(re.search(r"```yaml\n(# stage_lid.yaml.*?)```", page, re.S).group(1))
    stage["output_dir"], stage["data"]["prepared_dir"] = str(tmp_path / "my_model_lid"), str(prepared)
    stage["model"]["path"] = str(pretrained)
    stage["training"].update(max_steps=20, per_device_train_batch_size=8, learning_rate=0.02, warmup_steps=0)
    (tmp_path / "stage_lid.yaml").write_text(yaml.safe_dump(stage))
    classifier = tiny_lid_classifier(tmp_path / "mms-lid-126", ["ron", "ces", "deu"])
    clips = {}
    for name, language in (("clip1.wav", "ro"), ("clip2.wav", "cs"), ("clip.wav", "cs")):
        clips[name] = tmp_path / name
        sf.write(clips[name], tone_clip(language, len(clips)), 16000)
    from adaptspeech.lm.build import build_arpa

    (tmp_path / "lm.txt").write_text("ab ba\nabc cab\nab ba\nabc cab\n", encoding="utf-8")
    lms = {language: build_arpa(tmp_path / "lm.txt", tmp_path / "lms" / language, order=2, progress=False).parent
           for language in ("ro", "cs")}
    replace = {"runs/my_model_lid/model": str(tmp_path / "my_model_lid" / "model"), "runs/my_model/model":
               str(pretrained), "runs/prepared": str(prepared), "stage_lid.yaml": str(tmp_path / "stage_lid.yaml"),
               "mms-lid-126": str(classifier), "routed.json": str(tmp_path / "routed.json"),
               "hybrid.json": str(tmp_path / "hybrid.json"), "cs=lms/cs,sk=lms/sk": f"ro={lms['ro']},cs={lms['cs']}",
               **{name: str(path) for name, path in clips.items()}}
    commands = [line for block in re.findall(r"```bash\n(.*?)```", page, re.S) for line in block.splitlines()
                if re.match(r"adaptspeech (train|transcribe|evaluate) ", line)]
    assert len(commands) == 9
    for line in commands:
        argv = [replace.get(arg, arg) for arg in shlex.split(line)[1:]]
        code, out, err = run_main([*argv, "--no-progress"], capsys)
        assert code == 0, (line, err)
        if argv[0] == "transcribe":
            assert all(json.loads(row)["language"] in ("ro", "cs") for row in out.splitlines())
    assert json.loads((tmp_path / "routed.json").read_text())["lid"]["num_utterances"] == 8
    hybrid = json.loads((tmp_path / "hybrid.json").read_text())["routing"]  # fitted with the LMs, then used
    assert hybrid["scoring"] == "hybrid" and set(hybrid["weights"]) == {"lid_log_prob", "ctc_per_frame", "lm_per_char"}


def test_a_lid_model_that_is_neither_a_folder_nor_reachable_is_one_line(setup, capsys, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, _, err = run_main(["transcribe", setup["files"][0], "--model", setup["model"], "--device", "cpu",
                             "--language", "auto", "--lid-model", "nonexist"], capsys)
    assert code == 1 and one_error_line(err) == ("adaptspeech: error: --lid-model nonexist: neither a local folder nor "
                                                 "a model on the Hub that can be reached (offline: HF_HUB_OFFLINE is "
                                                 "set)"), err


def test_the_hybrid_calibration_is_fitted_on_dev_and_then_routes(setup, capsys, tmp_path) -> None:
    import shutil

    from adaptspeech.inference.language_id.hybrid import LIDCalibration

    model = tmp_path / "model"
    shutil.copytree(setup["model"], model)
    code, out, _ = run_main(["evaluate", "--model", model, "--data", setup["prepared"], "--split", "dev",
                             "--language", "auto", "--lid-top-k", "2", "--fit-lid-calibration", "--device", "cpu",
                             "--no-progress"], capsys)
    assert code == 0 and out.startswith("language ID\tacoustic ") and out.rstrip().endswith("lid_calibration.json")
    calibration = LIDCalibration.load(model)
    assert calibration.top_k == 2 and calibration.features == ("lid_log_prob", "ctc_per_frame")
    assert calibration.fitted_on["rows"] == 8
    out_file = tmp_path / "r.json"
    code, out, _ = run_main(["evaluate", "--model", model, "--data", setup["prepared"], "--split", "test",
                             "--language", "auto", "--lid-scoring", "hybrid", "--device", "cpu", "--no-progress",
                             "--output", out_file], capsys)
    routing = json.loads(out_file.read_text())["routing"]
    assert code == 0 and routing["scoring"] == "hybrid" and routing["top_k"] == 2
    assert routing["weights"] == pytest.approx(dict(calibration.weights))
    code, out, _ = run_main(["transcribe", "--model", model, setup["files"][0], "--language", "auto",
                             "--lid-scoring", "hybrid", "--device", "cpu"], capsys)
    (line,) = _lines(out)
    assert code == 0 and len(line["language_candidates"]) == 2
    assert line["language"] == max(line["language_candidates"], key=lambda c: c["score"])["language"]


def test_hybrid_settings_that_cannot_work_are_refused_in_one_line(setup, capsys, tmp_path) -> None:
    model = setup["model"]
    evaluate = ["evaluate", "--model", model, "--data", setup["prepared"], "--split", "dev", "--device", "cpu",
                "--no-progress"]
    cases = [
        (["transcribe", setup["files"][0], "--model", model, "--device", "cpu", "--language", "auto",
          "--lid-scoring", "hybrid"],
         f"{model}/lid_calibration.json: missing; hybrid language scoring needs weights fitted on a dev split: run "
         f"`adaptspeech evaluate --model {model} --data PREPARED --split dev --language auto --lid-top-k 3 "
         "--fit-lid-calibration`"),
        (["transcribe", setup["files"][0], "--model", model, "--device", "cpu", "--lid-scoring", "hybrid"],
         "--lid-scoring: used with --language auto only"),
        ([*evaluate, "--language", "auto", "--lid-scoring", "hybrid", "--lid-prior-weight", "2"],
         "--lid-prior-weight: not used with --lid-scoring hybrid (lid_calibration.json holds its weights)"),
        ([*evaluate, "--fit-lid-calibration"],
         "--fit-lid-calibration: fits the model's own language-ID head; use --language auto without --lid-model"),
        ([*evaluate, "--language", "auto", "--fit-lid-calibration"],
         "--fit-lid-calibration: --lid-top-k 1; the hybrid score chooses between at least 2 candidate languages "
         "(e.g. --lid-top-k 3)"),
        ([*evaluate, "--language", "auto", "--lid-top-k", "2", "--fit-lid-calibration", "--lid-lms", "ro"],
         "--lid-lms: 'ro' is not LANGUAGE=DIR"),
        ([*evaluate, "--language", "auto", "--lid-top-k", "2", "--fit-lid-calibration", "--lid-lms", "pl=x"],
         "--lid-lms: pl is not a language of the language-ID head (ro, cs)"),
        ([*evaluate, "--language", "auto", "--lid-top-k", "2", "--fit-lid-calibration", "--lid-lms",
          f"ro={tmp_path}"],
         f"--lm {tmp_path}: no lm.arpa there, nor an LM saved into a model folder (language_model/); write one with "
         "`adaptspeech lm build` (or `adaptspeech lm tune --save` into the model folder)"),
        ([*evaluate, "--language", "auto", "--lid-lms", "ro=x"], "--lid-lms: used with --fit-lid-calibration only"),
        ([*evaluate, "--language", "auto", "--lid-text-score", "shared"],
         "--lid-text-score: used with --fit-lid-calibration only"),
        ([*evaluate, "--language", "auto", "--lid-top-k", "2", "--fit-lid-calibration", "--lid-text-score", "base"],
         "--lid-text-score base: the LMs score the hypotheses, and the model folder has no language_models/ for "
         "every language (add them with --lid-lms)"),
    ]
    for argv, message in cases:
        code, _, err = run_main(argv, capsys)
        assert code == 1 and one_error_line(err) == f"adaptspeech: error: {message}", err
    code, _, err = run_main([*evaluate, "--language", "auto", "--lid-top-k", "2", "--fit-lid-calibration",
                             "--lid-text-score", "mine"], capsys)
    assert code == 2 and ("argument --lid-text-score: invalid choice: 'mine' (choose from 'own', 'shared', 'base')"
                          in err)
