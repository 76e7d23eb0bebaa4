"""Which text score tells the head's top-k candidates apart best, on a model with a language-ID head (docs/lid.md,
"The text score"). Everything the text scores read is computed once and cached; the LMs and the fits then run on the
cache in seconds.

1. ``--passes``: for dev (whole utterances) and test (whole, first 1 s, first 3 s): the head's log-posteriors, and every
   language's system's best-path hypothesis and CTC score per frame for every row (all languages, so any ``k``), plus
   the encoder without adapters (the multilingual base and the shared CTC head); the CPU time of each system's pass.
   Written to ``<output>/passes.json``.
2. ``--fit``: per-language character LMs of each order of ``--orders`` (training transcripts,
   :func:`lid_report.language_lms`: interpolated modified Kneser-Ney), then for each text score of
   :data:`~adaptspeech.inference.language_id.hybrid.TEXT_SCORES` (which hypotheses each candidate's LM scores), each
   order and each ``k`` of ``--top-k``: the calibration fitted on dev (head + LM, and head + CTC + LM), its test
   accuracy per cut, per-language accuracy, confusions and the routed CER of the chosen language's hypothesis.
   Written to ``<output>/lid_text_study.md`` / ``.json``.
   ``--swap-head MODEL --passes-from CACHE``: the cache ``CACHE`` with the log-posteriors of another head (the
   systems' passes do not depend on the head), written to ``<output>/passes.json``; then ``--fit`` as usual.
3. ``--text-only``: how often the text alone (no head) names the language, for each hypothesis it could read
   (:data:`TEXT_ONLY`): ``<output>/lid_text_only.md`` / ``.json``.

Usage::

    python recipes/synthetic_demo/lid_text_study.py --model STUDY/best_model --prepared RUN/prepared --output OUT \
        --passes
    python recipes/synthetic_demo/lid_text_study.py --prepared RUN/prepared --output OUT --fit
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
LANGUAGES = ["cs", "pl", "sl", "it", "es", "sk"]
SETS = {"dev": ("dev", None), "test whole": ("test", None), "test 1s": ("test", 1.0), "test 3s": ("test", 3.0)}
"""Cached set -> (split, seconds read from each row's start; None: whole)."""
BASE_KEY = "base"
"""The cache's name for the pass of the encoder without adapters."""


def compute_passes(model_dir: Path, prepared: str, batch_size: int = 32) -> dict[str, Any]:
    """Step 1: per set of :data:`SETS`: ``truth``, ``reference`` texts, ``log_probs`` ``[N][L]`` (over the head's
    languages), per system (each language and :data:`BASE_KEY`) ``texts`` and ``ctc_per_frame``, and ``seconds``
    (CPU time of the language-ID pass and of each system's pass over the set)."""
    import torch
    from transformers import AutoProcessor

    from adaptspeech import AdaptSpeechForCTC
    from adaptspeech.data.array_rows import column_list
    from adaptspeech.data.prepared_data import load_prepared
    from adaptspeech.inference.language_id.identifiers import HeadIdentifier
    from adaptspeech.lid_evaluation import BASE_PASS, candidate_passes, identify_dataset

    model = AdaptSpeechForCTC.from_pretrained(model_dir).eval()
    processor = AutoProcessor.from_pretrained(model_dir)
    identifier = HeadIdentifier(model, processor)
    splits = load_prepared(prepared)[0]
    out: dict[str, Any] = {"languages": list(identifier.languages)}
    with torch.inference_mode():
        for name, (split, seconds) in SETS.items():
            rows = splits[split]
            every = list(range(len(rows)))
            start = time.process_time()
            log_probs = identify_dataset(identifier, rows, processor, batch_size, seconds)
            entry: dict[str, Any] = {"truth": column_list(rows, "language"), "reference": list(rows["text"]),
                                     "log_probs": log_probs.tolist(), "seconds": {"lid": time.process_time() - start},
                                     "texts": {}, "ctc_per_frame": {}}
            for language in [*identifier.languages, BASE_PASS]:
                key = BASE_KEY if language is BASE_PASS else language
                start = time.process_time()
                found = candidate_passes(model, rows, processor, {language: every}, batch_size, seconds)
                entry["seconds"][key] = time.process_time() - start
                entry["texts"][key] = [found[(i, language)][0] for i in every]
                entry["ctc_per_frame"][key] = [found[(i, language)][1] for i in every]
            out[name] = entry
            print(f"{name}: {len(rows)} rows, seconds {entry['seconds']}", flush=True)
    return out

def swap_head(passes: dict[str, Any], model_dir: Path, prepared: str, batch_size: int = 32) -> dict[str, Any]:
    """``passes`` (a :func:`compute_passes` cache) with the head's log-posteriors and the language-ID pass's CPU time
    of every set replaced by those of the language-ID head of ``model_dir`` (e.g. a head trained on the frozen base
    the systems sit on: the systems' hypotheses and CTC scores do not depend on the head, so they are kept).

    Raises:
        ValueError: the head's languages are not the cache's (in the same order), or a set's rows differ.
    """
    from transformers import AutoProcessor

    from adaptspeech import AdaptSpeechForCTC
    from adaptspeech.data.array_rows import column_list
    from adaptspeech.data.prepared_data import load_prepared
    from adaptspeech.inference.language_id.identifiers import HeadIdentifier
    from adaptspeech.lid_evaluation import identify_dataset

    model = AdaptSpeechForCTC.from_pretrained(model_dir).eval()
    processor = AutoProcessor.from_pretrained(model_dir)
    identifier = HeadIdentifier(model, processor)
    if list(identifier.languages) != passes["languages"]:
        raise ValueError(f"--swap-head {model_dir}: its head's languages {list(identifier.languages)} are not the "
                         f"cached passes' {passes['languages']}")
    splits = load_prepared(prepared)[0]
    out = {**passes, "head": str(model_dir)}
    for name, (split, seconds) in SETS.items():
        rows = splits[split]
        if column_list(rows, "language") != passes[name]["truth"] or list(rows["text"]) != passes[name]["reference"]:
            raise ValueError(f"--swap-head: the {split} rows of {prepared} are not those of the cached set {name!r}")
        start = time.process_time()
        log_probs = identify_dataset(identifier, rows, processor, batch_size, seconds)
        out[name] = {**passes[name], "log_probs": log_probs.tolist(),
                     "seconds": {**passes[name]["seconds"], "lid": time.process_time() - start}}
        print(f"{name}: head swapped ({len(rows)} rows)", flush=True)
    return out


VARIANTS: dict[str, tuple[str, ...]] = {
    "own": ("own",), "shared": ("shared",), "base": ("base",), "own + shared": ("own", "shared"),
    "own + base": ("own", "base"),
}
"""Study row -> the text scores (:data:`~adaptspeech.inference.language_id.hybrid.TEXT_SCORES`) it weighs, each its own
feature (a row of one is what the hybrid option runs)."""
FEATURE_SETS = {"head + LM": False, "head + CTC + LM": True}
"""Feature set -> whether the adapters' CTC score is weighed too."""


class CachedLMs:
    """:class:`~adaptspeech.inference.language_id.hybrid.LanguageLMs` with each ``(language, text)`` scored once."""

    def __init__(self, lms: Any) -> None:
        self.lms, self.cache = lms, {}

    def per_char(self, language: str, text: str) -> float:
        key = (language, text)
        if key not in self.cache:
            self.cache[key] = self.lms.per_char(language, text)
        return self.cache[key]


def build_lms(prepared: str, out: Path, order: int, held_out: list[str] | None = None) -> Any:
    """Per-language character ``order``-gram LMs of the training transcripts (:func:`lid_report.language_lms`), in
    ``out``; with ``held_out`` (texts, e.g. dev's) every word of those texts is first deleted from the training
    transcripts, so that the LMs have seen none of them (as for the test split's words)."""
    from adaptspeech.data.prepared_data import load_prepared
    from adaptspeech.inference.language_id.hybrid import LanguageLMs, build_char_lm, install_language_lms
    from adaptspeech.recipes import recipe_module

    if held_out is None:
        folders = recipe_module(HERE, "lid_report.py").language_lms(prepared, out / "lms", LANGUAGES, order, "char")
    else:
        train = load_prepared(prepared)[0]["train"]
        unseen = {w for t in held_out for w in t.split()}
        folders = {}
        for language in LANGUAGES:
            texts = [" ".join(w for w in t.split() if w not in unseen)
                     for t, lang in zip(train["text"], train["language"], strict=True) if lang == language]
            folders[language] = build_char_lm([t for t in texts if t], out / "lms" / language, order=order)
    install_language_lms(out / "model", folders)
    return CachedLMs(LanguageLMs.from_folder(out / "model", LANGUAGES))


def word_list_texts(corpus: Path, count: int, exclude: set[str], seed: int = 1) -> dict[str, list[str]]:
    """Per language, ``count`` sentences drawn from the synthetic corpus's word lists (its ``synthetic_config.json``)
    the way the demo's LM rows draw their text (:func:`lm_rows.lm_text`: wordfreq's frequencies, the corpus's
    sentence lengths, its own random stream), those equal to a sentence of ``exclude`` (dev and test) dropped. Text in
    the language, as any external text: it holds most of the test split's words, which the training transcripts never
    do."""
    from adaptspeech.data.synthetic import CONFIG_FILE, SyntheticConfig
    from adaptspeech.recipes import recipe_module

    rows = recipe_module(HERE, "lm_rows.py")
    stored = json.loads((corpus / CONFIG_FILE).read_text(encoding="utf-8"))["config"]
    config = SyntheticConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in stored.items()})

    class Corpus:  # what lm_text reads of the recipe's corpus settings
        def synthetic_config(self) -> SyntheticConfig:
            return config

    settings = rows.LMSettings(enabled=True, sentences=count, seed=seed)
    return {language: rows.lm_text(language, Corpus(), settings, exclude)[0] for language in LANGUAGES}


def word_list_fits(passes: dict[str, Any], corpus: Path, count: int, out: Path, orders: list[int],
                   top_ks: list[int]) -> dict[str, Any]:
    """:func:`fit_all`'s ``own`` fits (head + LM) with character LMs of :func:`word_list_texts` instead of the
    training transcripts, and the share of test words the LMs' text holds."""
    from adaptspeech.inference.language_id.hybrid import LanguageLMs, build_char_lm, install_language_lms

    exclude = set(passes["dev"]["reference"]) | set(passes["test whole"]["reference"])
    texts = word_list_texts(corpus, count, exclude)
    test_words = {w for t in passes["test whole"]["reference"] for w in t.split()}
    known = {w for lines in texts.values() for t in lines for w in t.split()}
    result: dict[str, Any] = {"sentences": {k: len(v) for k, v in texts.items()},
                              "test_words_in_text": len(test_words & known) / len(test_words), "fits": []}
    for order in orders:
        folder = out / "lms" / f"word_lists{count}_char{order}"
        install_language_lms(folder / "model", {lang: build_char_lm(lines, folder / "lms" / lang, order=order)
                                                for lang, lines in texts.items()})
        lms = CachedLMs(LanguageLMs.from_folder(folder / "model", LANGUAGES))
        for k in top_ks:
            dev_langs, dev_table = candidate_rows(passes["dev"], k, lms, ("own",))
            weights = fit_calibration_weights(dev_langs, dev_table, passes["dev"]["truth"],
                                              ["lid_log_prob", "lm_per_char"])
            fit = {"order": order, "k": k, "weights": weights,
                   "dev": measure(chosen_languages(dev_langs, dev_table, weights), passes, "dev")}
            for name in [n for n in SETS if n != "dev"]:
                fit[name] = measure(chosen_languages(*candidate_rows(passes[name], k, lms, ("own",)), weights),
                                    passes, name)
            result["fits"].append(fit)
            print(f"word lists {count}: char {order} k={k} dev {100 * fit['dev']['accuracy']:.2f} test "
                  + " / ".join(f"{100 * fit[n]['accuracy']:.2f}" for n in SETS if n != "dev"), flush=True)
    return result


def fit_calibration_weights(languages: list, table: list, truth: list[str], names: list[str]) -> dict[str, float]:
    """:func:`~adaptspeech.inference.language_id.hybrid.fit_weights` of the features ``names`` on cached rows."""
    import numpy as np

    from adaptspeech.inference.language_id.hybrid import fit_weights

    arrays = [np.array([[c[f] for f in names] for c in rows]) for rows in table]
    index = [langs.index(t) if t in langs else None for langs, t in zip(languages, truth, strict=True)]
    return dict(zip(names, map(float, fit_weights(arrays, index)), strict=True))


def candidate_rows(entry: dict[str, Any], k: int, lms: Any, text_scores: tuple[str, ...]) -> tuple[list, list]:
    """Per row of a cached set: the top-``k`` languages of the head and their features (``lid_log_prob``,
    ``ctc_per_frame`` and one ``lm_per_char`` per text score, named ``lm_per_char`` for the first, ``lm_<score>`` for
    the others), through :func:`~adaptspeech.inference.language_id.hybrid.candidates_features`."""
    import numpy as np

    from adaptspeech.inference.language_id.hybrid import candidates_features

    languages, table = [], []
    for n, log_probs in enumerate(entry["log_probs"]):
        order = np.argsort(-np.asarray(log_probs), kind="stable")[:k]
        langs = [LANGUAGES[int(i)] for i in order]
        lid = [float(log_probs[int(i)]) for i in order]
        ctc = [entry["ctc_per_frame"][lang][n] for lang in langs]
        texts = [entry["texts"][lang][n] for lang in langs]
        rows = None
        for position, score in enumerate(text_scores):
            features = candidates_features(lid, ctc, texts, langs, lms, score, entry["texts"][BASE_KEY][n])
            if rows is None:
                rows = features
            else:
                for row, f in zip(rows, features, strict=True):
                    row[f"lm_{score}" if position else "lm_per_char"] = f["lm_per_char"]
        languages.append(langs)
        table.append(rows)
    return languages, table


def chosen_languages(languages: list, table: list, weights: dict[str, float]) -> list[str]:
    """Per row the candidate with the best ``sum_f w_f * feature_f``."""
    return [langs[max(range(len(rows)), key=lambda j, rows=rows: sum(w * rows[j][f] for f, w in weights.items()))]
            for langs, rows in zip(languages, table, strict=True)]


def measure(chosen: list[str], passes: dict[str, Any], name: str) -> dict[str, Any]:
    """Accuracy, per-language accuracy, confusions (% of the true language's rows) of ``chosen`` on cached set
    ``name``; for test sets the routed CER (the chosen language's whole-utterance hypothesis) per language."""
    from adaptspeech.metrics import compute_error_rates

    entry = passes[name]
    truth = entry["truth"]
    per = Counter(truth)
    result: dict[str, Any] = {
        "accuracy": sum(c == t for c, t in zip(chosen, truth, strict=True)) / len(truth),
        "per_language": {lang: sum(c == t == lang for c, t in zip(chosen, truth, strict=True)) / per[lang]
                         for lang in LANGUAGES},
        "confusions": {f"{t} -> {c}": 100 * n / per[t] for (t, c), n in
                       Counter((t, c) for c, t in zip(chosen, truth, strict=True) if c != t).most_common()}}
    if name.startswith("test"):
        whole = passes["test whole"]
        routed = [whole["texts"][c][n] for n, c in enumerate(chosen)]
        rates = compute_error_rates(routed, whole["reference"], languages=truth)
        result["routed_cer"] = {lang: e["cer"] for lang, e in rates["per_language"].items()}
        result["routed_cer"]["all"] = rates["overall"]["cer"]
    return result


def known_cer(passes: dict[str, Any]) -> dict[str, float]:
    """CER with the known language (its system's whole-utterance hypothesis) per language and overall."""
    from adaptspeech.metrics import compute_error_rates

    whole = passes["test whole"]
    rates = compute_error_rates([whole["texts"][t][n] for n, t in enumerate(whole["truth"])], whole["reference"],
                                languages=whole["truth"])
    return {**{lang: e["cer"] for lang, e in rates["per_language"].items()}, "all": rates["overall"]["cer"]}


def fit_all(passes: dict[str, Any], prepared: str, out: Path, orders: list[int], top_ks: list[int],
            lm_fits: tuple[str, ...] = ("train", "held-out")) -> dict[str, Any]:
    """Step 2 (see the module docstring): for each LM order, LM fitting mode (``train``: the LMs of all training
    transcripts for the fit and the test; ``held-out``: for the fit on dev, LMs without dev's words, like the test
    split's), text-score variant (:data:`VARIANTS`), ``k`` and feature set: the calibration fitted on dev and its
    results on every cached set; the acoustic head and the oracle beside them. ``chosen_on_dev``: the best dev
    accuracy among the fits the hybrid can run (one text score, the LMs of all training transcripts), ties to the
    smaller ``k`` and fewer features."""
    import numpy as np

    sets = [name for name in SETS if name != "dev"]
    result: dict[str, Any] = {"reference": {}, "fits": [], "known_cer": known_cer(passes), "seconds": {
        name: passes[name]["seconds"] for name in SETS}}
    for name in SETS:
        acoustic = [LANGUAGES[int(np.argmax(lp))] for lp in passes[name]["log_probs"]]
        result["reference"][name] = {"acoustic": measure(acoustic, passes, name)}
        for k in top_ks:
            top = [[LANGUAGES[int(i)] for i in np.argsort(-np.asarray(lp), kind="stable")[:k]]
                   for lp in passes[name]["log_probs"]]
            result["reference"][name][f"oracle k={k}"] = float(np.mean(
                [t in c for t, c in zip(passes[name]["truth"], top, strict=True)]))
    dev_texts = passes["dev"]["reference"]
    for order in orders:
        full = build_lms(prepared, out / "lms" / f"char{order}", order)
        for mode in lm_fits:
            fit_lms = full if mode == "train" else build_lms(prepared, out / "lms" / f"char{order}_without_dev_words",
                                                             order, dev_texts)
            for variant, scores in VARIANTS.items():
                for k in top_ks:
                    dev_langs, dev_table = candidate_rows(passes["dev"], k, fit_lms, scores)
                    tables = {name: candidate_rows(passes[name], k, full, scores) for name in sets}
                    for label, with_ctc in FEATURE_SETS.items():
                        names = ["lid_log_prob", *(["ctc_per_frame"] if with_ctc else []), "lm_per_char",
                                 *[f"lm_{s}" for s in scores[1:]]]
                        weights = fit_calibration_weights(dev_langs, dev_table, passes["dev"]["truth"], names)
                        fit = {"order": order, "lm_fit": mode, "variant": variant, "k": k, "features": label,
                               "weights": weights,
                               "dev": measure(chosen_languages(dev_langs, dev_table, weights), passes, "dev")}
                        for name in sets:
                            fit[name] = measure(chosen_languages(*tables[name], weights), passes, name)
                        result["fits"].append(fit)
                        print(f"char {order} {mode:8s} {variant:13s} k={k} {label:16s} dev "
                              f"{100 * fit['dev']['accuracy']:.2f} test "
                              + " / ".join(f"{100 * fit[n]['accuracy']:.2f}" for n in sets), flush=True)
    runnable = [f for f in result["fits"] if f["lm_fit"] == "train" and len(VARIANTS[f["variant"]]) == 1]
    best = max(runnable, key=lambda f: (f["dev"]["accuracy"], -f["k"], -len(f["weights"])))
    result["chosen_on_dev"] = {k: best[k] for k in ("order", "lm_fit", "variant", "k", "features")}
    return result


TEXT_ONLY = ("reference", "true language's system", "base", "own", "every system, averaged")
"""What the text alone is asked about (no head): the language whose LM scores best the reference transcript, the
hypothesis of the true language's system, the base's hypothesis, each language's own system's hypothesis, or the mean
over all systems' hypotheses."""


def text_only(passes: dict[str, Any], prepared: str, out: Path, orders: list[int]) -> dict[str, Any]:
    """How often the text alone (no head; all languages as candidates) names the true language, per LM order, per
    cached set (and on the utterances the acoustic head gets wrong) and per :data:`TEXT_ONLY` question: what each
    text score can tell at best, and whether it errs where the head errs."""
    import numpy as np

    result: dict[str, Any] = {}
    for order in orders:
        lms = build_lms(prepared, out / "lms" / f"char{order}", order)
        result[f"char {order}-gram"] = {}
        for name in ("dev", "test whole"):
            entry = passes[name]
            truth = [LANGUAGES.index(t) for t in entry["truth"]]
            systems = [*LANGUAGES, BASE_KEY]
            scores = np.array([[[lms.per_char(j, entry["texts"][i][n]) for j in LANGUAGES] for i in systems]
                               for n in range(len(truth))])  # [N, systems, languages]
            reference = np.array([[lms.per_char(j, text) for j in LANGUAGES] for text in entry["reference"]])
            rows = np.arange(len(truth))
            asked = {"reference": reference, "true language's system": scores[rows, truth],
                     "base": scores[:, len(LANGUAGES)], "own": scores[:, np.arange(len(LANGUAGES)),
                                                                       np.arange(len(LANGUAGES))],
                     "every system, averaged": scores[:, :len(LANGUAGES)].mean(1)}
            wrong = np.asarray(entry["log_probs"]).argmax(-1) != truth  # the acoustic head's errors
            result[f"char {order}-gram"][name] = {
                q: float(np.mean(a.argmax(-1) == truth)) for q, a in asked.items()}
            if wrong.any():  # (none: no row)
                result[f"char {order}-gram"][f"{name}, the head's errors"] = {
                    q: float(np.mean(a.argmax(-1)[wrong] == np.asarray(truth)[wrong])) for q, a in asked.items()}
    return result


def text_only_markdown(result: dict[str, Any]) -> str:
    """:func:`text_only`'s table."""
    lines = ["| LM | set | " + " | ".join(f"{q} %" for q in TEXT_ONLY) + " |", "|" + " --- |" * (2 + len(TEXT_ONLY))]
    for lm, sets in result.items():
        for name, asked in sets.items():
            lines.append(f"| {lm} | {name} | " + " | ".join(f"{100 * asked[q]:.2f}" for q in TEXT_ONLY) + " |")
    return "\n".join(lines)


def word_lists_markdown(result: dict[str, Any]) -> str:
    """:func:`word_list_fits`' table, with per-language accuracy and routed CER of each fit (test, whole)."""
    lines = [f"Text: {result['sentences']} sentences; test words in the text: "
             f"{100 * result['test_words_in_text']:.1f}%.", "",
             "| LM | k | dev % | test whole % | test 3 s % | test 1 s % | per language, whole % | routed CER, whole % "
             "|",
             "|" + " --- |" * 8]
    for f in result["fits"]:
        whole = f["test whole"]
        lines.append(f"| char {f['order']}-gram | {f['k']} | " + " | ".join(
            f"{100 * f[n]['accuracy']:.2f}" for n in ("dev", "test whole", "test 3s", "test 1s")) + " | "
            + ", ".join(f"{lang} {100 * v:.0f}" for lang, v in whole["per_language"].items()) + " | "
            + ", ".join(f"{lang} {100 * v:.2f}" for lang, v in whole["routed_cer"].items()) + " |")
    return "\n".join(lines)


def markdown(result: dict[str, Any]) -> str:
    """The fits' table (dev and test accuracy per cut), the acoustic head and the oracle beside them, and the chosen
    fit's per-language accuracy, routed CER against known-language CER and confusions."""
    sets = [name for name in SETS if name != "dev"]
    lines = ["| scoring | LM | LMs for the fit | k | features | dev % | test whole % | test 3 s % | test 1 s % |",
             "|" + " --- |" * 9]
    reference = result["reference"]
    lines.append("| acoustic head | | | 1 | | " + " | ".join(
        f"{100 * reference[n]['acoustic']['accuracy']:.2f}" for n in ("dev", "test whole", "test 3s", "test 1s"))
        + " |")
    for k in sorted({f["k"] for f in result["fits"]}):
        lines.append(f"| oracle (truth among the top {k}) | | | {k} | | " + " | ".join(
            f"{100 * reference[n][f'oracle k={k}']:.2f}" for n in ("dev", "test whole", "test 3s", "test 1s")) + " |")
    for f in result["fits"]:
        lines.append(f"| text: {f['variant']} | char {f['order']}-gram | {f['lm_fit']} | {f['k']} | {f['features']} | "
                     + " | ".join(f"{100 * f[n]['accuracy']:.2f}" for n in ("dev", "test whole", "test 3s", "test 1s"))
                     + " |")
    chosen = result["chosen_on_dev"]
    best = next(f for f in result["fits"] if all(f[k] == v for k, v in chosen.items()))
    lines += ["", f"Chosen on dev: {chosen}; weights {best['weights']}.", "",
              "| language | acoustic whole % | hybrid whole % | hybrid 3 s % | hybrid 1 s % | CER known % | "
              "CER routed (hybrid, whole) % | routed - known |", "|" + " --- |" * 8]
    known = result["known_cer"]
    for lang in LANGUAGES:
        routed = best["test whole"]["routed_cer"][lang]
        lines.append(f"| {lang} | {100 * reference['test whole']['acoustic']['per_language'][lang]:.0f} | "
                     + " | ".join(f"{100 * best[n]['per_language'][lang]:.0f}" for n in ("test whole", "test 3s",
                                                                                         "test 1s"))
                     + f" | {100 * known[lang]:.2f} | {100 * routed:.2f} | {100 * (routed - known[lang]):+.2f} |")
    for n in sets:
        lines.append(f"\nConfusions ({n}, % of the true language's rows): "
                     + ", ".join(f"{pair} {v:.0f}" for pair, v in best[n]["confusions"].items()))
    seconds = result["seconds"]["test whole"]
    lines.append("\nCPU time over test (whole utterances, process time, one run): language-ID pass "
                 f"{seconds['lid']:.1f} s; each system's pass " + ", ".join(
                     f"{k} {v:.1f} s" for k, v in seconds.items() if k != "lid") + ".")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="a model folder with a language-ID head (for --passes)")
    parser.add_argument("--prepared", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--passes", action="store_true", help="step 1: compute and cache the passes")
    parser.add_argument("--swap-head", default=None, metavar="MODEL",
                        help="step 1 without the systems' passes: the cache of --passes-from with the head's "
                        "posteriors of MODEL's language-ID head instead, written to <output>/passes.json")
    parser.add_argument("--passes-from", default=None, help="the passes.json --swap-head starts from")
    parser.add_argument("--fit", action="store_true", help="step 2: the LMs and the fits on the cache")
    parser.add_argument("--text-only", action="store_true",
                        help="what the text alone tells (no head), on the cache: <output>/lid_text_only.md / .json")
    parser.add_argument("--word-lists", type=int, default=0, metavar="N",
                        help="the own-hypothesis fits with character LMs of N sentences a language drawn from the "
                        "corpus's word lists (--corpus) instead of the training transcripts: "
                        "<output>/lid_text_word_lists.md / .json")
    parser.add_argument("--corpus", default=None, help="the synthetic corpus folder (its synthetic_config.json)")
    parser.add_argument("--orders", type=int, nargs="+", default=[3, 4, 5])
    parser.add_argument("--top-k", type=int, nargs="+", default=[2, 3])
    parser.add_argument("--lm-fits", nargs="+", choices=["train", "held-out"], default=["train", "held-out"],
                        help="the LMs the dev fit reads: those of all training transcripts (what the hybrid runs), "
                        "and/or those without dev's words (like the test split's words)")
    args = parser.parse_args(argv)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    if args.passes:
        if args.model is None:
            parser.error("--passes needs --model")
        passes = compute_passes(Path(args.model), args.prepared)
        (out / "passes.json").write_text(json.dumps(passes) + "\n", encoding="utf-8")
    if args.swap_head:
        if args.passes_from is None or Path(args.passes_from).resolve() == (out / "passes.json").resolve():
            parser.error("--swap-head needs --passes-from, a passes.json outside --output")
        cached = json.loads(Path(args.passes_from).read_text(encoding="utf-8"))
        passes = swap_head(cached, Path(args.swap_head), args.prepared)
        (out / "passes.json").write_text(json.dumps(passes) + "\n", encoding="utf-8")
    if args.text_only:
        passes = json.loads((out / "passes.json").read_text(encoding="utf-8"))
        checked = text_only(passes, args.prepared, out, args.orders)
        (out / "lid_text_only.json").write_text(json.dumps(checked, indent=1) + "\n", encoding="utf-8")
        (out / "lid_text_only.md").write_text(text_only_markdown(checked) + "\n", encoding="utf-8")
        print(text_only_markdown(checked))
    if args.word_lists:
        if args.corpus is None:
            parser.error("--word-lists needs --corpus")
        passes = json.loads((out / "passes.json").read_text(encoding="utf-8"))
        listed = word_list_fits(passes, Path(args.corpus), args.word_lists, out, args.orders, args.top_k)
        (out / "lid_text_word_lists.json").write_text(json.dumps(listed, indent=1) + "\n", encoding="utf-8")
        (out / "lid_text_word_lists.md").write_text(word_lists_markdown(listed) + "\n", encoding="utf-8")
        print(word_lists_markdown(listed))
    if args.fit:
        passes = json.loads((out / "passes.json").read_text(encoding="utf-8"))
        result = fit_all(passes, args.prepared, out, args.orders, args.top_k, tuple(args.lm_fits))
        (out / "lid_text_study.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        (out / "lid_text_study.md").write_text(markdown(result) + "\n", encoding="utf-8")
        print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
