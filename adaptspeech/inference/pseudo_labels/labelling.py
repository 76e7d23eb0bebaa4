"""Pseudo-labelling an untranscribed pool: every segment decoded by a model (and an n-gram LM), scored, filtered by
confidence and written as a prepared folder a training stage reads beside its labelled rows.

``pseudo_label`` decodes the pool's rows (:func:`~adaptspeech.data.pools.load_pool`) in batches, in length order, with
the CTC best path or the LM decoder's beam search, and scores each with its confidence
(:mod:`adaptspeech.decoding.confidence`). It is resumable: each decoded batch is appended to ``labels.jsonl`` in a
work folder beside the output (``.<name>.labelling``); a run killed half-way continues where it stopped and decodes
no row twice (the work folder records the model, the LM and the pool, and refuses to continue with others). Once
every row is labelled, the filters pick the rows kept: with an LM, WeNet NST's agreement filter first (Chen et al.
2022: a row is kept only when its LM and its best-path hypotheses agree, :func:`lm_agreement_cer` below
``max_lm_disagreement``), then the confidence filter (:class:`~adaptspeech.data.pseudo_labelled.ConfidenceFilter`);
the output folder (:mod:`adaptspeech.data.pseudo_labelled`) appears complete or not at all.

Refused, with one line: a pool whose model inputs the labelling model does not read; a labelling model whose
vocabulary lacks characters of the target's (``target``: the labelled data's prepared folder, whose tokenizer writes
the labels); a filter that keeps nothing (naming it and the confidence quantiles). With a ``target`` the target's dev
split is decoded too: a pool whose source files' mean confidence lies far below the dev split's for most of its audio
(another language, noise) is reported in a warning naming the files.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from datasets import DatasetDict, Value, load_from_disk
from tqdm.auto import tqdm

from ...data.array_rows import column_list, take_rows, with_array_rows
from ...data.collator import model_collator
from ...data.feature_types import FeatureType
from ...data.output_folder import atomic_output_folder, check_output_folder, owned_folder
from ...data.pool_overlap import check_pool_rows, held_out
from ...data.pools import load_pool
from ...data.prepared_corpus import COMPLETE_MARKER
from ...data.prepared_data import load_prepared, select_languages
from ...data.pseudo_labelled import LABELS_FILE, PSEUDO_SPLIT, SUMMARY_FILE, ConfidenceFilter, check_vocabulary
from ...decoding.confidence import ConfidenceMethod, best_path_words, utterance_confidence
from ...decoding.model_decoding import evaluating, model_decoding_inputs
from ...metrics.scoring import count_edits

FAR_BELOW_QUANTILE = 0.05
"""A source file's mean confidence is far below the dev split's when it lies under this quantile of the dev
utterances' confidences."""
MOSTLY = 0.25
PSEUDO_LABEL_OUTPUT = "adaptspeech pseudo-label"
"""What the errors about ``--out`` call a pseudo-labelled folder."""
"""The pool is reported as mostly another language or noise when the files far below hold more than this share of
its audio (a pool of the target language has about ``FAR_BELOW_QUANTILE`` of it there)."""
DEFAULT_MAX_LM_DISAGREEMENT = 0.10
"""WeNet NST's threshold: a label is kept when the CER between its LM and its best-path hypotheses is below 10%."""


@dataclass
class PseudoLabels:
    """What :func:`pseudo_label` made: the kept rows, the summary (``pseudo_label.json``) and the folder."""

    dataset: Any
    summary: dict[str, Any]
    out_dir: Path


def lm_agreement_cer(lm_text: str, greedy_text: str) -> float:
    """The CER of the best-path hypothesis ``greedy_text`` against the LM hypothesis ``lm_text`` (0 when both are
    empty, 1 when only the LM's is)."""
    counts = count_edits([greedy_text], [lm_text], "char")
    if counts.ref_units == 0:
        return 0.0 if counts.edits == 0 else 1.0
    return counts.edits / counts.ref_units


def lm_agreement(records: list[dict[str, Any]], max_cer: float | None) -> np.ndarray:
    """``[N]`` bool: the records (of :func:`label_batches` with an LM: each has ``"greedy_text"``) whose LM and
    best-path hypotheses agree (:func:`lm_agreement_cer` < ``max_cer``); all True when ``max_cer`` is None."""
    if max_cer is None:
        return np.ones(len(records), dtype=bool)
    return np.array([lm_agreement_cer(r["text"], r["greedy_text"]) < max_cer for r in records], dtype=bool)


def label_batches(model: Any, processor: Any, rows: Any, indices: list[int], lm_decoder: Any = None,
                  batch_size: int = 16, beam_size: int | None = None,
                  method: ConfidenceMethod | None = None) -> Iterator[list[dict[str, Any]]]:
    """Decode rows ``indices`` of prepared-style ``rows`` in batches of ``batch_size`` (in the order given); yield per
    batch ``[{"index", "text", "confidence", "words": [[text, confidence], ...]}, ...]``, the words scored by
    ``method`` (default: :class:`~adaptspeech.decoding.confidence.ConfidenceMethod`'s); with ``lm_decoder`` also
    ``"greedy_text"``, the best path's text (the agreement filter's)."""
    method = method or ConfidenceMethod()
    collator = model_collator(model, processor)
    array_rows = with_array_rows(rows)
    tokenizer = processor.tokenizer
    with evaluating(model), torch.no_grad():
        for start in range(0, len(indices), batch_size):
            chunk = indices[start : start + batch_size]
            batch = collator(take_rows(array_rows, chunk))
            batch.pop("labels", None)
            batch = {k: v.to(model.device) for k, v in batch.items()}
            encoded = model_decoding_inputs(model, batch[model.main_input_name], batch.get("attention_mask"),
                                            batch.get("lang_ids"))
            out = []
            for index, log_probs, length in zip(chunk, encoded.ctc_log_probs, encoded.ctc_lengths.tolist(),
                                                strict=True):
                frames = log_probs[:length].float().cpu()
                greedy = best_path_words(frames, tokenizer, method=method if lm_decoder is None else method.acoustic)
                greedy_text = " ".join(w.text for w in greedy)
                extra = {}
                if lm_decoder is not None:
                    text, words = lm_decoder.decode_scored(frames, beam_size=beam_size, method=method,
                                                           best_path_text=greedy_text)
                    extra = {"greedy_text": greedy_text}
                else:
                    text, words = greedy_text, greedy
                out.append({"index": int(index), "text": text,
                            "confidence": utterance_confidence(words, frames, method.measure),
                            "words": [[w.text, round(w.confidence, 6)] for w in words], **extra})
            yield out


def _method_key(method: ConfidenceMethod) -> dict[str, Any]:
    """What identifies a confidence method in the work folder's key: its settings and, for a learned one, the
    estimator file's contents (a file fitted anew at the same path does not continue the old labels)."""
    key = {k: v for k, v in method.__dict__.items() if v is not None}
    if method.estimator:
        key["estimator_sha256"] = hashlib.sha256(Path(method.estimator).read_bytes()).hexdigest()[:16]
    return key


def _work_folder(out: Path) -> Path:
    return out.parent / f".{out.name}.labelling"


def _read_done(labels: Path) -> dict[int, dict[str, Any]]:
    """The rows a killed run labelled (a last line cut short is dropped: its batch is decoded again)."""
    done: dict[int, dict[str, Any]] = {}
    if labels.is_file():
        for line in labels.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                break
            done[int(record["index"])] = record
    return done


def _drop_partial_line(labels: Path) -> None:
    """Cut ``labels`` after its last newline: a run killed while writing a record leaves half a line, to which the
    next run's first record would be appended (one broken line in the middle of the file)."""
    if not labels.is_file():
        return
    with labels.open("rb+") as handle:
        data = handle.read()
        end = data.rfind(b"\n") + 1
        if end < len(data):
            handle.truncate(end)


def _start_work(work: Path, key: dict[str, Any], out: Path,
                replace_other_run: bool = False) -> dict[int, dict[str, Any]]:
    """Start the work folder (held by this process), or continue one of the same run (its labels so far); one of
    another run is refused, or started afresh with ``replace_other_run``."""
    key_file = work / "run.json"
    if key_file.is_file():
        stored = json.loads(key_file.read_text(encoding="utf-8"))
        if stored == key:
            _drop_partial_line(work / LABELS_FILE)
            return _read_done(work / LABELS_FILE)
        if not replace_other_run:
            differ = ", ".join(k for k in key if stored.get(k) != key[k])
            raise ValueError(f"--out {out}: {work} holds the labels of a run with another {differ}; remove {work} "
                             "to start afresh, or choose another --out")
    work.mkdir(parents=True, exist_ok=True)
    (work / LABELS_FILE).unlink(missing_ok=True)
    key_file.write_text(json.dumps(key, indent=1), encoding="utf-8")
    return {}


def _quantiles(values: np.ndarray) -> dict[str, float]:
    if len(values) == 0:
        return {}
    return {name: float(np.quantile(values, q)) for name, q in
            (("min", 0.0), ("q10", 0.1), ("q25", 0.25), ("median", 0.5), ("q75", 0.75), ("q90", 0.9), ("max", 1.0))}


def _per_file(rows: Any, confidences: np.ndarray) -> dict[str, dict[str, float]]:
    """Mean confidence, segments and seconds per source file."""
    files = column_list(rows, "source_file")
    durations = np.asarray(column_list(rows, "duration"), dtype=np.float64)
    out: dict[str, dict[str, float]] = {}
    for name in dict.fromkeys(files):
        mask = np.array([f == name for f in files])
        out[name] = {"mean_confidence": float(confidences[mask].mean()), "segments": int(mask.sum()),
                     "seconds": float(durations[mask].sum())}
    return out


def reference_check(per_file: dict[str, dict[str, float]], dev_confidences: np.ndarray) -> dict[str, Any]:
    """The pool's source files whose mean confidence lies far below the dev split's (under its
    :data:`FAR_BELOW_QUANTILE` quantile), their share of the pool's audio, and whether that is most of the pool
    (:data:`MOSTLY`)."""
    threshold = float(np.quantile(dev_confidences, FAR_BELOW_QUANTILE))
    low = sorted((name for name, f in per_file.items() if f["mean_confidence"] < threshold),
                 key=lambda n: per_file[n]["mean_confidence"])
    total = sum(f["seconds"] for f in per_file.values()) or 1.0
    share = sum(per_file[n]["seconds"] for n in low) / total
    return {"dev_mean_confidence": float(dev_confidences.mean()), "threshold": threshold, "files_far_below": low,
            "audio_share_far_below": share, "mostly_far_below": share > MOSTLY}


def _warning(check: dict[str, Any], per_file: dict[str, dict[str, float]]) -> str:
    low = check["files_far_below"]
    named = ", ".join(f"{Path(n).name} {per_file[n]['mean_confidence']:.2f}" for n in low[:10])
    more = f" and {len(low) - 10} more" if len(low) > 10 else ""
    share, dev, threshold = check["audio_share_far_below"], check["dev_mean_confidence"], check["threshold"]
    return (f"adaptspeech: warning: {len(low)} of {len(per_file)} source files ({100 * share:.0f}% of the pool's "
            f"audio) have a mean confidence far below the dev split's ({dev:.2f}; threshold {threshold:.2f}): "
            f"{named}{more}; is the pool another language or noise?")


def _label_rows(model: Any, processor: Any, rows: Any, done: dict[int, dict[str, Any]], work: Path, lm_decoder: Any,
                batch_size: int, beam_size: int | None, progress: bool, on_batch: Callable[[int], None] | None,
                method: ConfidenceMethod | None = None) -> tuple[list[int], float, float]:
    """Decode the rows not in ``done`` (shortest first), appending each batch to the work folder's labels and to
    ``done``; returns ``(rows decoded, their audio seconds, decoding seconds)``."""
    lengths = column_list(rows, "input_length")
    todo = [i for i in sorted(range(len(rows)), key=lambda i: lengths[i]) if i not in done]
    audio_seconds = float(np.sum(np.asarray(column_list(rows, "duration"), dtype=np.float64)[todo])) if todo else 0.0
    started = time.perf_counter()
    with (work / LABELS_FILE).open("a", encoding="utf-8") as handle, \
            tqdm(total=len(rows), initial=len(done), desc="pseudo-labelling", unit="segment",
                 disable=not progress) as bar:
        for batch in label_batches(model, processor, rows, todo, lm_decoder, batch_size, beam_size, method):
            for record in batch:
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
                done[record["index"]] = record
            handle.flush()
            bar.update(len(batch))
            if on_batch is not None:
                on_batch(len(done))
    return todo, audio_seconds, time.perf_counter() - started


def pseudo_label(
    model: Any,
    processor: Any,
    pool_dir: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    model_id: str,
    lm_decoder: Any = None,
    lm_key: dict[str, Any] | None = None,
    target: str | os.PathLike[str] | None = None,
    confidence_filter: ConfidenceFilter | None = None,
    batch_size: int = 16,
    beam_size: int | None = None,
    progress: bool = True,
    on_batch: Callable[[int], None] | None = None,
    overwrite: bool = False,
    replace_other_run: bool = False,
    max_lm_disagreement: float | None = None,
    confidence_method: ConfidenceMethod | None = None,
) -> PseudoLabels:
    """Label every row of the pool at ``pool_dir`` and write the kept ones to ``out_dir`` (module docstring).

    Args:
        model, processor: the labelling model (a CTC head) and its processor.
        model_id: what the rows' ``labelled_by`` column records (the model folder and its fingerprint).
        lm_decoder: an :class:`~adaptspeech.lm.decoder.LMDecoder` (its N-best scores the words), or None: the best
            CTC path.
        lm_key: what identifies the LM and its weights (recorded; a resumed run must have the same).
        target: the labelled data's prepared folder: its tokenizer writes the labels and its dev split (the pool's
            language) is the confidence reference. None: the model's own tokenizer, no reference.
        confidence_filter: which labels are kept (default: every non-empty one).
        on_batch: called with the number of rows labelled so far after each batch is written (progress hooks).
        overwrite: replace an earlier complete output in ``out_dir``; without it one is refused before anything is
            decoded (:func:`~adaptspeech.data.output_folder.check_output_folder`).
        replace_other_run: start afresh over the work folder of a run with another model, LM or pool (the caller
            owns the output, as a recipe its rounds' folders) instead of refusing it; a work folder that another
            live process is writing is refused either way.
        max_lm_disagreement: with ``lm_decoder``, keep only the rows whose best-path hypothesis lies below this CER
            from the LM's (:func:`lm_agreement`; WeNet NST's :data:`DEFAULT_MAX_LM_DISAGREEMENT`); None: no such
            filter. Without an LM it is refused.
        confidence_method: how words are scored (default :class:`~adaptspeech.decoding.confidence.ConfidenceMethod`).

    Raises:
        NotADirectoryError, FileExistsError: ``out_dir`` is a file, or a folder of other files (checked first).
        ValueError: the pool's inputs are not the model's, a labelling vocabulary lacks target characters, a work
            folder of another run, or the filter keeps nothing.
    """
    out = Path(out_dir).absolute()
    if max_lm_disagreement is not None:
        if lm_decoder is None:
            raise ValueError(f"--max-lm-disagreement {max_lm_disagreement}: the agreement filter compares the LM's "
                             "labels with the best path's; give an LM (--lm)")
        if not 0.0 < max_lm_disagreement <= 1.0:
            raise ValueError(f"--max-lm-disagreement {max_lm_disagreement}: a CER in (0, 1]")
    check_output_folder(out, COMPLETE_MARKER, PSEUDO_LABEL_OUTPUT, overwrite=overwrite)  # before any segment is decoded
    confidence_filter = confidence_filter or ConfidenceFilter()
    rows, pool_extractor = load_pool(pool_dir)
    made, read = FeatureType.of(pool_extractor), FeatureType.of(processor.feature_extractor)
    if made != read:
        raise ValueError(f"--data {pool_dir}: the pool holds {made} inputs, the labelling model reads {read}; "
                         "prepare the pool with --processor the model's folder")
    language = rows[0]["language"]
    target_processor, dev = processor, None
    if target is not None:
        dataset, target_processor = load_prepared(target)
        check_pool_rows(rows, held_out(target, language), f"--data {pool_dir}")
        if "dev" in dataset and language in set(dataset["dev"].unique("language")):
            dev = select_languages(dataset["dev"], [language], "dev", "--target")
    check_vocabulary(processor.tokenizer, target_processor.tokenizer, f"--model {model_id}")
    pool_config = json.loads((Path(pool_dir) / "pool_config.json").read_text(encoding="utf-8"))
    method = confidence_method or ConfidenceMethod()
    key = {"model": model_id, "lm": lm_key, "beam_size": beam_size, "rows": len(rows),
           **({} if method == ConfidenceMethod() else {"confidence": _method_key(method)}),
           **({} if lm_decoder is None else {"records": "with greedy_text"}),
           "pool": hashlib.sha256(json.dumps(pool_config, sort_keys=True).encode()).hexdigest()[:16]}
    work = _work_folder(out)
    with owned_folder(work, "--out"):  # another live run labelling into it is refused
        done = _start_work(work, key, out, replace_other_run)
        todo, audio_seconds, seconds = _label_rows(model, processor, rows, done, work, lm_decoder, batch_size,
                                                   beam_size, progress, on_batch, method)
    texts = [done[i]["text"] for i in range(len(rows))]
    confidences = np.array([done[i]["confidence"] for i in range(len(rows))], dtype=np.float64)
    agree = lm_agreement([done[i] for i in range(len(rows))], max_lm_disagreement)
    if max_lm_disagreement is not None and not agree.any():
        raise ValueError(f"--data {pool_dir}: no label's LM and best-path hypotheses agree within CER "
                         f"{max_lm_disagreement:g} (--max-lm-disagreement); {len(rows)} labels")
    kept = confidence_filter.keep(confidences, [t if a else "" for t, a in zip(texts, agree, strict=True)])
    confidence_filter.check_kept(kept, confidences, f"--data {pool_dir}", texts)
    per_file = _per_file(rows, confidences)
    summary: dict[str, Any] = {
        "model": model_id, "lm": lm_key, "pool": str(pool_dir), "language": language, "rows": len(rows),
        "kept": int(kept.sum()), "kept_share": float(kept.mean()), "filter": confidence_filter.describe(),
        "min_confidence": confidence_filter.min_confidence, "keep_fraction": confidence_filter.keep_fraction,
        "max_lm_disagreement": max_lm_disagreement, "lm_agreeing": int(agree.sum()), "confidence_method": method.name,
        "empty_labels": int(sum(not t for t in texts)), "confidence_quantiles": _quantiles(confidences),
        "kept_hours": float(np.asarray(column_list(rows, "duration"))[kept].sum()) / 3600,
        "decoded_this_run": len(todo), "decode_seconds": seconds, "decoded_audio_seconds": audio_seconds,
        "real_time_factor": seconds / audio_seconds if audio_seconds else None,
        "segments_per_second": len(todo) / seconds if todo and seconds > 0 else None, "per_file": per_file,
    }
    if dev is not None:
        dev_records = [r for batch in label_batches(model, processor, dev, list(range(len(dev))), lm_decoder,
                                                     batch_size, beam_size, method) for r in batch]
        summary["reference"] = reference_check(per_file, np.array([r["confidence"] for r in dev_records]))
        if summary["reference"]["mostly_far_below"]:
            print(_warning(summary["reference"], per_file), file=sys.stderr)
    target_tokenizer = target_processor.tokenizer
    labelled = rows.select(np.flatnonzero(kept))
    kept_records = [done[i] for i in np.flatnonzero(kept)]
    labelled = labelled.remove_columns([c for c in ("text",) if c in labelled.column_names])
    labelled = labelled.add_column("text", [r["text"] for r in kept_records])
    labelled = labelled.add_column("labels", [target_tokenizer(r["text"]).input_ids for r in kept_records])
    labelled = labelled.add_column("confidence", [float(r["confidence"]) for r in kept_records])
    labelled = labelled.cast_column("confidence", Value("float32"))
    labelled = labelled.add_column("labelled_by", [model_id] * len(kept_records))
    with atomic_output_folder(out, COMPLETE_MARKER, PSEUDO_LABEL_OUTPUT, overwrite=overwrite) as staging:
        DatasetDict({PSEUDO_SPLIT: labelled}).save_to_disk(str(staging / "dataset"))
        target_processor.save_pretrained(str(staging / "processor"))
        shutil.copy(work / LABELS_FILE, staging / LABELS_FILE)
        (staging / SUMMARY_FILE).write_text(json.dumps(summary, indent=1, ensure_ascii=False), encoding="utf-8")
        record = {"source": str(Path(pool_dir).absolute()), "languages": [language], "splits": [PSEUDO_SPLIT],
                  "pseudo_labelled_by": model_id, "rows": {PSEUDO_SPLIT: len(labelled)}}
        (staging / COMPLETE_MARKER).write_text(json.dumps(record, indent=1), encoding="utf-8")
    shutil.rmtree(work, ignore_errors=True)
    return PseudoLabels(load_from_disk(str(out / "dataset"))[PSEUDO_SPLIT], summary, out)
