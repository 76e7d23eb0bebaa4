"""The language-ID study on a trained demo run: which head settings tell the 6 languages best, and what the hybrid score
adds (docs/lid.md). Meant for the fully trained demo on a GPU machine; every step also runs at toy size.

1. **Heads**: one head per row of :data:`SETTINGS` trained on the fusion model (``stage_lid.yaml`` with its
   ``model.lid`` and ``data.train_subset`` changed; the same seed, steps and learning rate): the single-layer sweep
   (layers 0..3), the learned layer mix up to layers 2 and 3, then AAM-softmax, random 1-4 s crops and all training
   audio on top of the mix, and the mix on all training audio plus untranscribed pools of a known language
   (``--lid-extra-audio sk=POOL``, ``data.lid_extra_audio``; not among the default settings). Each is measured on
   dev and test (whole utterances, first 1 s and 3 s).
2. **Hybrid**: on the head with the best dev accuracy, per-language character 3-gram LMs of the training
   transcripts are written into its model folder (``language_models/<language>/``); every candidate's features are
   computed once (dev; test whole, first 1 s, first 3 s), the calibration is fitted on dev for each ``--top-k`` and
   feature set (head + CTC, head + LM, all three) and measured on test beside the head alone and the oracle top-k;
   the fit with the best dev accuracy is kept (``lid_calibration.json``).
3. **Report**: ``lid_report.py`` on the test split for that model: the acoustic head and the hybrid side by side (by
   duration bucket, confusions, routed CER against known-language CER).

Usage::

    python recipes/synthetic_demo/lid_hybrid_study.py --run runs/demo_gpu --output runs/lid_hybrid --use-gpu

Writes ``<output>/lid_hybrid_study.md`` / ``.json`` (the heads' table, the calibrations) and ``<output>/report/``.

``--text-check`` (no model, ``--prepared``) measures what the text score can tell at best: the language whose LM
scores a row's reference transcript best, for word and character LMs of several orders (the test split's words never
occur in training, and dev's all do, so dev cannot choose the LM: the check shows it).
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path
from typing import Any

from adaptspeech.overrides import load_yaml

HERE = Path(__file__).parent
LANGUAGES = ["cs", "pl", "sl", "it", "es", "sk"]
MIX = {"layer": 3, "layer_mix": True}
AAM = {"loss": "aam_softmax", "margin": 0.2, "scale": 30.0}
CROPS = {"crop_seconds": [1.0, 4.0]}
SETTINGS: dict[str, tuple[dict[str, Any], str | None]] = {
    "layer 0": ({"layer": 0}, "10min"),
    "layer 1": ({"layer": 1}, "10min"),
    "layer 2": ({"layer": 2}, "10min"),
    "layer 3": ({"layer": 3}, "10min"),
    "mix 0..2": ({"layer": 2, "layer_mix": True}, "10min"),
    "mix 0..3": (MIX, "10min"),
    "mix 0..3 + AAM": ({**MIX, **AAM}, "10min"),
    "mix 0..3 + AAM + crops": ({**MIX, **AAM, **CROPS}, "10min"),
    "mix 0..3 + AAM + crops, all audio": ({**MIX, **AAM, **CROPS}, None),
    "mix 0..3, all audio": (MIX, None),
    "mix 0..3, all audio + pool": (MIX, None),
    "mix 0..3, all audio + pool, balanced": (MIX, None),
}
"""Row name -> (the head's ``model.lid`` settings on top of ``stage_lid.yaml``'s, ``data.train_subset``)."""
WITH_POOL = {"mix 0..3, all audio + pool", "mix 0..3, all audio + pool, balanced"}
"""The rows that also train on the untranscribed pools of ``--lid-extra-audio`` (``data.lid_extra_audio``)."""
DATA_SETTINGS: dict[str, dict[str, Any]] = {
    "mix 0..3, all audio + pool, balanced": {"language_sampling_temperature": 100.0}}
"""Rows with more ``data`` settings: a pool makes its language the most frequent one, and ``p_l ∝ n_l^(1/100)``
draws the languages almost uniformly again (the head's prior then stays flat)."""


def stage_for(model: str, prepared: str, output: Path, lid: dict[str, Any], subset: str | None, steps: int,
              use_gpu: bool = False, extra_audio: dict[str, str] | None = None,
              data: dict[str, Any] | None = None) -> dict[str, Any]:
    """``stage_lid.yaml`` on ``model`` with the head's settings ``lid``, the training ``subset`` (None: all), the
    untranscribed pools ``extra_audio`` (language -> pool folder, ``data.lid_extra_audio``; None: none) and more
    ``data`` settings."""
    stage = load_yaml(HERE / "stage_lid.yaml")
    pooling = {k: v for k, v in stage["model"]["lid"].items() if k in ("pooling", "attention_dim")}  # only these
    stage["model"] = {**stage["model"], "init": "pretrained", "path": model, "lid": {**pooling, **lid}}
    stage["training"] = {**stage["training"], "max_steps": steps, "save_steps": steps, "use_cpu": not use_gpu}
    return {**stage, "name": "lid", "output_dir": str(output), "seed": 0,
            "data": {"prepared_dir": prepared, "train_languages": LANGUAGES, "train_subset": subset,
                     **({"lid_extra_audio": extra_audio} if extra_audio else {}), **(data or {})},
            "evaluation": {"batch_size": 32}}


def train_heads(model: Path, prepared: str, out: Path, names: list[str], steps: int, use_gpu: bool,
                extra_audio: dict[str, str] | None = None) -> list[dict]:
    """Step 1: train and measure one head per setting on ``model`` (table rows, written as they come); the rows of
    :data:`WITH_POOL` also train on ``extra_audio``'s pools."""
    from adaptspeech.recipes import recipe_module
    from adaptspeech.training.stage import run_stage

    measure = recipe_module(HERE, "lid_settings_study.py").measure  # the settings study's measurement

    rows = []
    for name in names:
        lid, subset = SETTINGS[name]
        folder = out / "heads" / name.replace(" ", "_").replace(",", "").replace("+", "")
        start = time.perf_counter()
        pools = extra_audio if name in WITH_POOL else None
        result = run_stage(stage_for(str(model), prepared, folder, lid, subset, steps, use_gpu, pools,
                                     DATA_SETTINGS.get(name)),
                           progress=False, overwrite=True)
        summary = json.loads((folder / "stage_summary.json").read_text())
        rows.append({"setting": name, "lid": lid, "subset": subset, "extra_audio": pools,
                     "train_rows": summary["train_rows"], "extra_audio_rows": summary["lid_extra_audio_rows"],
                     "model": str(result.model_dir),
                     "train_seconds": time.perf_counter() - start,
                     "dev": measure(Path(result.model_dir), prepared, "dev"),
                     "test": measure(Path(result.model_dir), prepared, "test")})
        write(out, rows, {})
    return rows


FEATURE_SETS = {"head + CTC": ("lid_log_prob", "ctc_per_frame"), "head + LM": ("lid_log_prob", "lm_per_char"),
                "head + CTC + LM": ("lid_log_prob", "ctc_per_frame", "lm_per_char")}
"""The hybrid's feature sets the study fits: which part (the adapters' CTC score, the LM's text score) helps."""
CUTS = {"whole": None, "1s": 1.0, "3s": 3.0}


def fit_hybrid(model_dir: Path, prepared: str, top_ks: list[int], lm_dirs: dict[str, Path]) -> dict[str, Any]:
    """Step 2: every candidate's features once for dev (whole utterances) and test (whole, first 1 s, first 3 s) with
    the largest ``k``; then for each ``k`` and :data:`FEATURE_SETS` entry a calibration fitted on dev and its test
    accuracy per cut, beside the acoustic head's and the oracle's (the true language among the ``k`` candidates:
    what any re-scoring can reach). The calibration with the best dev accuracy is saved in ``model_dir``."""
    import numpy as np
    import torch
    from transformers import AutoProcessor

    from adaptspeech import AdaptSpeechForCTC
    from adaptspeech.data.array_rows import column_list
    from adaptspeech.data.prepared_data import load_prepared
    from adaptspeech.inference.language_id.hybrid import LanguageLMs, fit_calibration, install_language_lms
    from adaptspeech.inference.language_id.identifiers import HeadIdentifier
    from adaptspeech.inference.language_id.routing import top_languages
    from adaptspeech.lid_evaluation import candidate_feature_table, identify_dataset

    install_language_lms(model_dir, lm_dirs)
    model = AdaptSpeechForCTC.from_pretrained(model_dir).eval()
    processor = AutoProcessor.from_pretrained(model_dir)
    identifier = HeadIdentifier(model, processor)
    lms = LanguageLMs.from_folder(model_dir, identifier.languages)
    splits = load_prepared(prepared)[0]
    largest = max(top_ks)
    tables: dict[str, Any] = {}
    for name, split, seconds in (("dev", "dev", None), *((f"test {c}", "test", s) for c, s in CUTS.items())):
        rows = splits[split]
        log_probs = identify_dataset(identifier, rows, processor, 32, seconds)
        candidates = [top_languages(row, identifier.languages, largest) for row in torch.from_numpy(log_probs)]
        tables[name] = (candidates, candidate_feature_table(model, rows, processor, candidates, lms, 32, seconds),
                        column_list(rows, "language"))

    def cut(name: str, k: int, features: tuple[str, ...]) -> tuple[list, list, list]:
        candidates, table, truth = tables[name]
        return ([[lang for lang, _ in row[:k]] for row in candidates],
                [[{f: c[f] for f in features} for c in row[:k]] for row in table], truth)

    def accuracy(name: str, k: int, calibration: Any) -> float:
        languages, table, truth = cut(name, k, calibration.features)
        return float(np.mean([langs[int(np.argmax([calibration.score(c) for c in row]))] == t
                              for langs, row, t in zip(languages, table, truth, strict=True)]))

    fits: list[dict[str, Any]] = []
    best = None
    for k in top_ks:
        for label, features in FEATURE_SETS.items():
            if lms is None and "lm_per_char" in features:
                continue
            languages, table, truth = cut("dev", k, features)
            calibration = fit_calibration(table, languages, truth, identifier.languages, k)
            fits.append({"k": k, "features": label, "calibration": calibration.to_dict(),
                         "dev": calibration.fitted_on["accuracy_hybrid"],
                         "test": {c: accuracy(f"test {c}", k, calibration) for c in CUTS}})
            if best is None or calibration.fitted_on["accuracy_hybrid"] > best.fitted_on["accuracy_hybrid"]:
                best = calibration
    assert best is not None
    best.save(model_dir)
    reference = {}
    for name in tables:
        candidates, _, truth = tables[name]
        pairs = list(zip(candidates, truth, strict=True))
        reference[name] = {"acoustic": float(np.mean([row[0][0] == t for row, t in pairs]))}
        for k in top_ks:
            reference[name][f"oracle k={k}"] = float(np.mean([t in [lang for lang, _ in row[:k]] for row, t in pairs]))
    return {"fits": fits, "reference": reference, "chosen": best.to_dict(),
            "lms": {lang: str(path) for lang, path in lm_dirs.items()}}


def graft_head(head_model: Path, onto: Path, out: Path) -> Path:
    """A copy of the model ``onto`` (the demo's fusion model) in ``out`` with the language-ID head of ``head_model``,
    trained on the same frozen encoder (e.g. the base the fusion sits on: the head reads the encoder without
    adapters, so it does not need to wait for the adapter stages).

    Raises:
        ValueError: the two models' encoders without adapters differ (the head would read another encoder).
    """
    import torch

    from adaptspeech import AdaptSpeechForCTC

    source = AdaptSpeechForCTC.from_pretrained(head_model).eval()
    model = AdaptSpeechForCTC.from_pretrained(onto).eval()
    if model.lid_head is not None:
        model.remove_lid_head()
    model.add_lid_head(list(source.config.lid_languages), **source.config.lid.to_dict())
    model.lid_head.load_state_dict(source.lid_head.state_dict())
    framed = model.main_input_name == "input_features"  # 2 s: 200 fbank frames, or 32,000 samples
    shape = (1, 200, model.config.backbone_config.num_mel_bins) if framed else (1, 32000)
    probe = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        if not torch.allclose(model.lid_logits(probe), source.lid_logits(probe), atol=1e-5):
            raise ValueError(f"{head_model}: its encoder (without adapters) is not the one of {onto}; train the heads "
                             "on the model the fusion sits on")
    shutil.copytree(onto, out, dirs_exist_ok=True)
    model.save_pretrained(out)
    return out


TEXT_CHECK_LMS = (("word", 3), ("char", 2), ("char", 3), ("char", 4), ("char", 5))
"""The LMs the text check compares: ``(unit, order)``."""


def text_check(prepared: str, out: Path, lms: tuple[tuple[str, int], ...] = TEXT_CHECK_LMS) -> dict[str, Any]:
    """What the text score can tell at best, without a model: each LM of ``lms`` built per language from the training
    transcripts (:func:`lid_report.language_lms`), then the language whose LM scores a row's **reference** transcript
    best (per character), on dev (words seen in training) and test (unseen words); accuracy and confusions."""
    from collections import Counter

    import numpy as np

    from adaptspeech.data.prepared_data import load_prepared
    from adaptspeech.inference.language_id.hybrid import LanguageLMs, install_language_lms
    from adaptspeech.recipes import recipe_module

    report = recipe_module(HERE, "lid_report.py")
    splits = load_prepared(prepared)[0]
    result: dict[str, Any] = {}
    for unit, order in lms:
        name = f"{unit} {order}-gram"
        folder = out / "text_check" / f"{unit}{order}"
        install_language_lms(folder / "model", report.language_lms(prepared, folder / "lms", LANGUAGES, order, unit))
        scorer = LanguageLMs.from_folder(folder / "model", LANGUAGES)
        assert scorer is not None
        result[name] = {}
        for split in ("dev", "test"):
            rows = splits[split]
            guesses = [LANGUAGES[int(np.argmax([scorer.per_char(lang, text) for lang in LANGUAGES]))]
                       for text in rows["text"]]
            truth = list(rows["language"])
            errors = Counter(f"{t} -> {g}" for t, g in zip(truth, guesses, strict=True) if t != g)
            result[name][split] = {"accuracy": float(np.mean([t == g for t, g in zip(truth, guesses, strict=True)])),
                                   "rows": len(truth), "confusions": dict(errors.most_common())}
    return result


def text_check_markdown(result: dict[str, Any]) -> str:
    """The text check's table: accuracy on dev and test, the test split's most frequent confusions."""
    lines = ["| LM (per language, training transcripts) | dev % | test % | test confusions (of 100 a language) |",
             "|" + " --- |" * 4]
    for name, splits in result.items():
        top = ", ".join(f"{pair} {n}" for pair, n in list(splits["test"]["confusions"].items())[:6])
        lines.append(f"| {name} | {100 * splits['dev']['accuracy']:.2f} | {100 * splits['test']['accuracy']:.2f} | "
                     f"{top} |")
    return "\n".join(lines)


def markdown(rows: list[dict], hybrid: dict[str, Any]) -> str:
    """The heads' table (dev and test accuracy) and the calibrations' dev accuracies."""
    lines = ["| setting | audio per language | dev whole % | test whole % | test first 1 s % | test first 3 s % | "
             "sk test % |", "|" + " --- |" * 7]
    for r in rows:
        test = r["test"]
        audio = (r["subset"] or "all") + "".join(f" + {lang} pool" for lang in r.get("extra_audio") or {})
        lines.append(f"| {r['setting']} | {audio} | {100 * r['dev']['whole']['accuracy']:.2f} | "
                     f"{100 * test['whole']['accuracy']:.2f} | {100 * test['1s']['accuracy']:.2f} | "
                     f"{100 * test['3s']['accuracy']:.2f} | {100 * test['whole']['per_language'].get('sk', 0):.0f} |")
    if hybrid:
        lines += ["", "Scoring (the best head; fitted on dev, whole utterances; test: held-out voices, unseen words):",
                  "", "| scoring | k | dev whole % | test whole % | test first 1 s % | test first 3 s % | weights |",
                  "|" + " --- |" * 7]
        reference = hybrid["reference"]
        rows_ref = [("acoustic head", "1", "acoustic")] + [
            (f"oracle (truth among the top {k})", str(k), f"oracle k={k}")
            for k in sorted({f["k"] for f in hybrid["fits"]})]
        for label, k, key in rows_ref:
            lines.append(f"| {label} | {k} | {100 * reference['dev'][key]:.2f} | "
                         + " | ".join(f"{100 * reference[f'test {c}'][key]:.2f}" for c in CUTS) + " | |")
        for f in hybrid["fits"]:
            weights = ", ".join(f"{n} {w:.3g}" for n, w in f["calibration"]["weights"].items())
            lines.append(f"| hybrid: {f['features']} | {f['k']} | {100 * f['dev']:.2f} | "
                         + " | ".join(f"{100 * f['test'][c]:.2f}" for c in CUTS) + f" | {weights} |")
        chosen = hybrid["chosen"]
        lines.append(f"\nChosen on dev: k = {chosen['top_k']}, features {', '.join(chosen['weights'])}.")
    return "\n".join(lines)


def write(out: Path, rows: list[dict], hybrid: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "lid_hybrid_study.json").write_text(json.dumps({"heads": rows, "hybrid": hybrid}, indent=1) + "\n")
    (out / "lid_hybrid_study.md").write_text(markdown(rows, hybrid) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", default=None, help="a finished demo run (its fusion/model and prepared/)")
    parser.add_argument("--prepared", default=None, help="the prepared data (default: RUN/prepared)")
    parser.add_argument("--output", required=True)
    parser.add_argument("--settings", nargs="+", default=[n for n in SETTINGS if n not in WITH_POOL],
                        choices=list(SETTINGS), metavar="SETTING")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--top-k", type=int, nargs="+", default=[2, 3])
    parser.add_argument("--lm-unit", choices=["char", "word"], default="char",
                        help="the per-language LMs' tokens (default char: the test split's words are unseen)")
    parser.add_argument("--lm-order", type=int, default=3, help="default 3 (see --text-check)")
    parser.add_argument("--use-gpu", action="store_true", help="train the heads on the GPU")
    parser.add_argument("--heads-model", default=None,
                        help="train the heads on this model (default RUN/fusion/model), e.g. the run's base/model: "
                        "the same frozen encoder, ready before the adapter stages; the best head is grafted onto "
                        "RUN/fusion/model")
    parser.add_argument("--lid-extra-audio", nargs="+", default=[], metavar="LANGUAGE=POOL",
                        help="untranscribed pools (a language known, e.g. sk=RUN/self_training/pool) for the settings "
                        f"that train on them ({', '.join(sorted(WITH_POOL))})")
    parser.add_argument("--only-heads", action="store_true", help="stop after training and measuring the heads")
    parser.add_argument("--reuse-heads", action="store_true",
                        help="take the heads of OUTPUT/lid_hybrid_study.json (an --only-heads run), train none")
    parser.add_argument("--text-check", action="store_true",
                        help="only the text check (no model; --prepared): which LM tells the reference transcripts' "
                        "language best; writes <output>/lid_text_check.md and .json")
    args = parser.parse_args(argv)
    if any("=" not in entry for entry in args.lid_extra_audio):
        parser.error(f"--lid-extra-audio {args.lid_extra_audio}: give LANGUAGE=POOL entries")
    extra_audio = dict(entry.split("=", 1) for entry in args.lid_extra_audio)
    if set(args.settings) & WITH_POOL and not extra_audio:
        parser.error(f"--settings {', '.join(sorted(set(args.settings) & WITH_POOL))}: give --lid-extra-audio")
    if min(args.top_k) < 2:
        parser.error(f"--top-k {min(args.top_k)}: the hybrid needs at least 2 candidates")
    if args.text_check:
        if args.prepared is None and args.run is None:
            parser.error("--text-check: give --prepared (or --run)")
        out = Path(args.output)
        checked = text_check(args.prepared or str(Path(args.run) / "prepared"), out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "lid_text_check.json").write_text(json.dumps(checked, indent=1) + "\n")
        (out / "lid_text_check.md").write_text(text_check_markdown(checked) + "\n")
        print(text_check_markdown(checked))
        return 0
    if args.run is None:
        parser.error("--run is required (a finished demo run)")
    run, out = Path(args.run), Path(args.output)
    if out.resolve() == run.resolve() or run.resolve() in out.resolve().parents:
        parser.error(f"--output {out}: inside --run {run}, which the study only reads; write elsewhere")
    prepared = args.prepared or str(run / "prepared")
    if args.reuse_heads:
        rows = json.loads((out / "lid_hybrid_study.json").read_text())["heads"]
    else:
        heads_model = Path(args.heads_model) if args.heads_model else run / "fusion" / "model"
        rows = train_heads(heads_model, prepared, out, args.settings, args.steps, args.use_gpu, extra_audio)
    if args.only_heads:
        print(markdown(rows, {}))
        return 0
    best = max(rows, key=lambda r: r["dev"]["whole"]["accuracy"])
    model_dir = graft_head(Path(best["model"]), run / "fusion" / "model", out / "best_model")
    from adaptspeech.recipes import recipe_module

    report = recipe_module(HERE, "lid_report.py")
    lms = report.language_lms(prepared, out / "lms", LANGUAGES, args.lm_order, args.lm_unit)
    hybrid = fit_hybrid(model_dir, prepared, args.top_k, lms)
    write(out, rows, hybrid)
    report.lid_report(model_dir, Path(prepared), "test", out / "report", method="ctc_greedy")
    print(markdown(rows, hybrid))
    print((out / "report" / "lid_report.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
