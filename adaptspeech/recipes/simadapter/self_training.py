"""Self-training of a SimAdapter recipe's target systems on untranscribed audio: K rounds of noisy-student training
(Xie et al. 2020; Park et al. 2020, "Improved noisy student training for automatic speech recognition"; WeNet's
``examples/aishell/NST``, NeMo's iterative pseudo-labelling), the recipe section ``self_training``.

For each system of ``systems`` (``target_adapter``: the target's adapter alone, ``fusion``: SimAdapter, ``finetune``:
full fine-tuning), starting from the system the recipe trained (the *teacher*), each round

1. labels the pool with the teacher (+ the recipe's n-gram LM, its weights tuned on dev for that teacher):
   :func:`~adaptspeech.inference.pseudo_labels.labelling.pseudo_label`, the labels scored by their confidence;
2. keeps the confident labels (``min_confidence`` or ``keep_fraction``: the filter is what makes self-training work;
   WeNet's loop without it got worse, 4.85 -> 5.52 CER on AISHELL-1);
3. trains a *student* as the recipe trained the system (same stage file, same starting model: the source-adapter
   model for the adapter, the base for fine-tuning, the self-trained adapter for SimAdapter), on the labelled rows and
   the kept pseudo-labelled rows (``share`` of every batch), with noise: the model's SpecAugment and dropout and
   speed perturbation (``speed_perturb``), for ``steps_scale`` times the stage's steps;
4. evaluates the student on dev (the stage's own dev evaluation); the student becomes the next teacher while its dev
   CER improves on the best so far, else the rounds stop.

The system's self-trained model is the round with the lowest dev CER (round 0: the teacher itself, when no student
improved). The pool (section ``pool``, or built by
:func:`~adaptspeech.recipes.simadapter.self_training_pool.ensure_pool`: the synthetic corpus's unlabelled clips of the
target, or a Common Voice release's ``other.tsv``) must share no clip or sentence with dev / test. For a synthetic
corpus, what the unlabelled clips say is known (``unlabelled_sentences.tsv``, never read by training): each round
records the pseudo-labels' CER, overall, of the kept ones and per confidence bin (:func:`label_quality`).

Everything lives in ``<output_dir>/self_training/``: ``pool/``, ``<system>/round_<k>/{labels,student}`` and
``self_training.json``; a round whose record (spec, teacher, pool, LM) matches is reused, not redone. The synthetic
demo's transfer curve runs the same rounds from its own runs (:meth:`SelfTrainingRunner.run_system`'s ``teacher``,
``folder`` and ``system_spec``) and reuses the recipe's finished rounds (``reuse``).
"""

from __future__ import annotations

import copy
import itertools
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ...data.pools import (
    load_pool,
    pool_fingerprint,
)
from ...data.prepared_data import load_prepared, select_languages
from ...data.pseudo_labelled import LABELS_FILE, NothingDecodedError
from ...decoding.confidence import LEARNED, ConfidenceMethod, fit_nbest_temperature, frame_confidence
from ...decoding.confidence_estimator import (
    DEFAULT_FEATURES,
    DEFAULT_L2,
    ESTIMATOR_FILE,
    LM_BEAM,
    WordConfidenceEstimator,
)
from ...inference.pseudo_labels import labelling  # pseudo_label read at the call: tests replace it there
from ...inference.pseudo_labels.confidence_comparison import decoded_split, fit_split_estimator
from ...lm.decoder import LMDecoder, build_decoder
from ...lm.tune import dev_log_probs, grid_search
from ...metrics.confidence import word_correctness
from ...metrics.scoring import count_edits
from ...modeling import AdaptSpeechForCTC
from ...progress import log
from ...saved_model import load_saved_model, model_fingerprint
from ...training import stage as training_stage  # run_stage read at the call: tests replace it there
from ...training.checkpoint_averaging import average_top_checkpoints
from ...training.decoding_evaluation import DecodingEvaluation
from ...training.stage import StageSpec
from ..spec import RecipeError
from .self_training_pool import FOLDER, held_aside_sentences
from .self_training_settings import DEFAULT_CONFIDENCE, SELF_TRAINED_SYSTEMS, SelfTrainingSettings
from .spec import SimAdapterRecipe
from .stages import PlannedStage, interrupted_checkpoint, recipe_plan, stage_spec

#: confidence bins of the label-quality table
CONFIDENCE_BINS = (0.0, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)

@dataclass(frozen=True)
class LMSetup:
    """The n-gram LM the teachers label with: its folder, the (alpha, beta) grid tuned on dev per teacher, the beam."""

    folder: Path
    alphas: tuple[float, ...]
    betas: tuple[float, ...]
    beam_size: int


@dataclass
class TeacherLM:
    """How a teacher labels with the LM: the decoder with its weights tuned on dev (None: no LM), the N-best
    temperature and, for ``confidence: learned``, the estimator fitted on dev, or why none could be fitted (dev has no
    correct or no wrong word of the teacher's; the labels are then scored by ``max_prob/min``)."""

    decoder: Any = None
    alpha: float | None = None
    beta: float | None = None
    temperature: float = 1.0
    estimator: WordConfidenceEstimator | None = None
    estimator_skipped: str | None = None

    def estimator_record(self, file: Path) -> dict[str, Any]:
        """``{"confidence_estimator": ...}`` of a round's record: the estimator's file (``file``) and its JSON, or
        ``{"skipped": why}``; empty without ``learned``."""
        if self.estimator is not None:
            return {"confidence_estimator": {"file": str(file), **self.estimator.to_dict()}}
        if self.estimator_skipped is not None:
            return {"confidence_estimator": {"skipped": self.estimator_skipped, "labelled_with": DEFAULT_CONFIDENCE}}
        return {}


@dataclass
class RoundRecord:
    """One round of one system: its teacher, labels, filter, student and their figures (``trainable_params`` /
    ``trainable_share``: the parameters its student trained and their share of its model; None in a round recorded
    before they were)."""

    round: int
    teacher: str
    student: str | None
    alpha: float | None = None
    beta: float | None = None
    labels: dict[str, Any] = field(default_factory=dict)
    dev_cer: float | None = None
    improved: bool = False
    seconds: dict[str, float] = field(default_factory=dict)
    trainable_params: int | None = None
    trainable_share: float | None = None


@dataclass
class SystemRun:
    """A system's rounds and the chosen one (0: the teacher itself)."""

    system: str
    teacher_dev_cer: float
    rounds: list[RoundRecord]
    chosen: int
    own_model: str | None = None

    @property
    def model_dir(self) -> Path:
        """The self-trained model: the chosen round's student, else the system itself (``own_model``, or the first
        teacher)."""
        if self.chosen:
            return Path(self.rounds[self.chosen - 1].student)
        return Path(self.own_model or self.rounds[0].teacher)


# ---- the pool ----------------------------------------------------------------------------------------------------


def label_quality(labels_dir: Path, pool_paths: list[str], truth: dict[str, str] | None,
                  kept: set[int] | None = None) -> dict[str, Any]:
    """The pseudo-labels' CER against what the clips say: all of them, the kept ones, per confidence bin
    (:data:`CONFIDENCE_BINS`); ``{}`` when the truth is unknown."""
    if truth is None:
        return {}
    records = [json.loads(line) for line in (labels_dir / LABELS_FILE).read_text(encoding="utf-8").splitlines()]

    def cer(chosen: list[dict[str, Any]]) -> float | None:
        refs = [truth[pool_paths[r["index"]]] for r in chosen]
        counts = count_edits([r["text"] for r in chosen], refs, "char") if chosen else None
        return None if counts is None else counts.edits / max(counts.ref_units, 1)

    bins = []
    for low, high in itertools.pairwise(CONFIDENCE_BINS):
        inside = [r for r in records if low <= r["confidence"] < high or (high == 1.0 and r["confidence"] == 1.0)]
        bins.append({"low": low, "high": high, "count": len(inside), "cer": cer(inside)})
    out = {"cer_all": cer(records), "bins": bins}
    if kept is not None:
        out["cer_kept"] = cer([r for r in records if r["index"] in kept])
    return out


# ---- the rounds --------------------------------------------------------------------------------------------------


def _planned(spec: SimAdapterRecipe, system: str) -> PlannedStage:
    stages = {stage.name: stage for stage in recipe_plan(spec)}
    if system not in stages:
        raise RecipeError(f"self_training.systems: {system} is not trained by this recipe")
    return stages[system]


def _dev_cer(stage_dir: Path) -> float:
    summary = json.loads((stage_dir / "stage_summary.json").read_text())
    split = json.loads((stage_dir / "stage_spec.json").read_text())["data"].get("eval_split", "dev")
    return float(summary[split]["overall"]["cer"])


def student_spec(spec: SimAdapterRecipe, settings: SelfTrainingSettings, system: str, prepared: Path,
                 labels: Path, output_dir: Path, start: Path | None = None) -> dict[str, Any]:
    """The stage spec of a student: the system's stage with the pseudo-labelled rows, the noise, the scaled steps,
    from the system's own starting model (or ``start``)."""
    return student_spec_from(stage_spec(spec, _planned(spec, system), prepared), settings, f"{system}_student",
                             labels, output_dir, start, system=system)


def student_spec_from(system_spec: dict[str, Any], settings: SelfTrainingSettings, name: str, labels: Path,
                      output_dir: Path, start: Path | None = None, system: str | None = None) -> dict[str, Any]:
    """A student of a system trained with the stage spec ``system_spec`` (a recipe stage's, or a transfer curve
    run's): that spec with the pseudo-labelled rows (``labels``, ``settings.share`` of every batch), speed
    perturbation, ``settings.steps_scale`` times its steps (warm-up scaled alike), its last checkpoint kept (saved every
    quarter of its steps) and no evaluation during training, from its own starting model (or ``start``).
    ``system_spec`` is not changed. With ``settings.average_top_n`` it evaluates and saves ``2 N`` times, keeping
    every checkpoint (averaged after it trained:
    :func:`~adaptspeech.training.checkpoint_averaging.average_top_checkpoints`); for ``system`` ``target_adapter``
    with ``settings.adapter_bottleneck`` its new adapters take that bottleneck width, and with
    ``settings.adapter_lora`` they become ``bottleneck_lora`` adapters: LoRA of that rank beside the bottleneck."""
    student = copy.deepcopy(system_spec)
    student["name"] = name
    student["output_dir"] = str(output_dir)
    data = student["data"]
    data.update(pseudo_labelled_dir=str(labels), pseudo_labelled_share=settings.share)
    if settings.speed_perturb:
        data["speed_perturb"] = list(settings.speed_perturb)
    if start is not None:
        student["model"]["path"] = str(start)
    training = student.setdefault("training", {})
    steps = max(1, round(int(training.get("max_steps", 500)) * settings.steps_scale))
    if "warmup_steps" in training:
        training["warmup_steps"] = round(int(training["warmup_steps"]) * steps / int(training["max_steps"]))
    # the last checkpoint kept: a rerun continues an interrupted student from it (SelfTrainingRunner.run_system)
    training.update(max_steps=steps, save_strategy="steps", save_steps=max(1, steps // 4), save_total_limit=1,
                    eval_strategy="no")
    if settings.average_top_n:
        every = max(1, steps // (2 * settings.average_top_n))
        training.update(save_strategy="steps", eval_strategy="steps", save_steps=every, eval_steps=every,
                        save_total_limit=None, load_best_model_at_end=False)
    if system == "target_adapter" and (settings.adapter_bottleneck or settings.adapter_lora):
        student["model"]["add_adapters"] = {lang: _student_adapter(lang, value or {}, settings)
                                            for lang, value in (student["model"].get("add_adapters") or {}).items()}
    training.pop("train_sampling_strategy", None)
    StageSpec.from_dict(student)
    return student


def _student_adapter(language: str, given: dict[str, Any], settings: SelfTrainingSettings) -> dict[str, Any]:
    """The settings of a new adapter of the adapter alone's student: the stage's ``given`` with
    ``settings.adapter_bottleneck`` and ``settings.adapter_lora`` (LoRA beside a bottleneck adapter)."""
    out = dict(given)
    if settings.adapter_bottleneck:
        out["bottleneck"] = settings.adapter_bottleneck
    if settings.adapter_lora:
        if out.get("adapter_type", "bottleneck") != "bottleneck":
            raise RecipeError(f"self_training.adapter_lora: the stage's adapter for {language!r} is of type "
                              f"{out['adapter_type']!r}; LoRA is added beside a bottleneck adapter only")
        out.update(adapter_type="bottleneck_lora", lora_r=settings.adapter_lora, lora_alpha=2 * settings.adapter_lora)
    return out


#: settings that do not change what a round does (how many rounds run, which systems, whether the section is on)
ROUND_FREE_SETTINGS = ("enabled", "rounds", "systems")
#: settings added after rounds were first recorded, at the value that does what those rounds did: left out of the
#: comparison at that value, so a round finished before they existed is reused
LATER_SETTINGS = {"teacher": "own", "keep_fraction_schedule": None, "max_lm_disagreement": None,
                  "confidence": "max_prob/min", "fit_nbest_temperature": False, "average_top_n": None,
                  "adapter_bottleneck": None, "adapter_lora": None}


def same_round(stored: dict[str, Any], key: dict[str, Any]) -> bool:
    """Whether a finished round's key (``round.json``) is that of the round about to run: the same teacher, start,
    pool, LM and settings, leaving out :data:`ROUND_FREE_SETTINGS` (a run with fewer rounds or another system list
    reuses the rounds it shares with an earlier one)."""

    def strip(k: dict[str, Any]) -> dict[str, Any]:
        settings = {n: v for n, v in (k.get("settings") or {}).items() if n not in ROUND_FREE_SETTINGS
                    and not (n in LATER_SETTINGS and v == LATER_SETTINGS[n])}
        return {**k, "settings": settings}

    return strip(stored) == strip(key)


def _finished_round(candidates: Sequence[Path], key: dict[str, Any]) -> Path | None:
    """The first of the round folders ``candidates`` that holds a finished round (its ``round.json`` and its
    student's model) whose key is ``key`` (:func:`same_round`), else None."""
    for round_dir in candidates:
        marker = round_dir / "round.json"
        if marker.is_file() and (round_dir / "student" / "model").is_dir() and \
                same_round(json.loads(marker.read_text())["key"], key):
            return round_dir
    return None


def _interrupted_student(spec: dict[str, Any], what: str) -> str | None:
    """The last complete checkpoint of an interrupted earlier run of the student ``spec`` with the same settings, to
    continue from (:func:`~adaptspeech.recipes.simadapter.stages.interrupted_checkpoint`, as the recipe stages do);
    None: train afresh (no checkpoint, a finished student, or one of other settings: the round's folder is the
    recipe's own, replaced)."""
    try:
        checkpoint = interrupted_checkpoint(spec, what)
    except RecipeError as err:
        log(f"{what}: the interrupted student is of other settings, trained afresh ({err})")
        return None
    if checkpoint is not None:
        log(f"{what}: continuing the interrupted student from {Path(checkpoint).name} (same settings)")
    return checkpoint


class SelfTrainingRunner:
    """Runs (or reuses) the rounds of every system (module docstring)."""

    def __init__(self, spec: SimAdapterRecipe, settings: SelfTrainingSettings, prepared: Path, pool: Path,
                 lm: LMSetup | None) -> None:
        self.spec, self.prepared, self.pool, self.lm = spec, prepared, pool, lm
        self.settings = settings.resolved(lm is not None)  # confidence: learned with the LM unless set
        self.learned_by_default = settings.confidence is None and self.settings.confidence == LEARNED
        self.folder = spec.output_dir / FOLDER
        dataset, self.processor = load_prepared(prepared)
        self.dev = select_languages(dataset["dev"], [spec.target], "dev", "self_training")
        rows, _ = load_pool(pool)
        self.pool_paths = list(rows["path"])
        self.pool_seconds = float(np.sum(rows["duration"]))
        self.truth = held_aside_sentences(spec, pool)
        self.pool_key = pool_fingerprint(pool)[:16]
        self.trained_rounds: list[Path] = []  # the round folders this runner labelled and trained
        self.reused_rounds: list[Path] = []  # the finished round folders it reused

    def _estimator_key(self) -> dict[str, Any]:
        """What a round's key holds of its learned word confidence (how it is fitted: split, features, L2 penalty;
        the teacher and the LM are in the key already); empty for any other confidence (the keys of the rounds
        recorded before stay as they were)."""
        if self.settings.confidence != LEARNED:
            return {}
        return {"confidence_estimator": {"fitted_on": "dev", "features": list(DEFAULT_FEATURES[LM_BEAM]),
                                         "l2": DEFAULT_L2}}

    def _teacher_lm(self, model: Any, estimator_file: Path | None = None) -> TeacherLM:
        """The LM decoder tuned on dev for ``model`` (None without an LM), the N-best temperature (fitted on dev with
        ``fit_nbest_temperature``, else 1) and, with ``confidence: learned``, the word confidence estimator fitted on
        the LM beam's words of dev (:func:`~adaptspeech.inference.pseudo_labels.confidence_comparison.
        fit_split_estimator`), saved at ``estimator_file``.

        Raises:
            RecipeError: ``confidence: learned`` set in the recipe, and dev has no correct or no wrong word of the
                teacher's (unset, the default ``learned`` then labels with ``max_prob/min``, logged and recorded).
        """
        if self.lm is None:
            return TeacherLM()
        decoder = LMDecoder(build_decoder(self.processor.tokenizer, self.lm.folder), beam_width=self.lm.beam_size)
        log_probs = dev_log_probs(model, self.dev, self.processor)
        best = grid_search(decoder, log_probs, list(self.dev["text"]), self.lm.alphas, self.lm.betas)[0]
        decoder.set_weights(best["alpha"], best["beta"])
        out = TeacherLM(decoder, best["alpha"], best["beta"])
        learned = self.settings.confidence == LEARNED
        if not (self.settings.fit_nbest_temperature or learned):
            return out
        split = decoded_split(log_probs, list(self.dev["text"]), decoder, self.settings.beam_size)
        if self.settings.fit_nbest_temperature:
            method = self.settings.confidence_method()
            flags = [word_correctness(" ".join(w for w, _ in nb[0][0]) if nb else "", ref)
                     for nb, ref in zip(split.nbests, split.references, strict=True)]
            frames = [frame_confidence(lp, method.measure, method.alpha).numpy() for lp in split.log_probs]
            if any(flags):
                out.temperature, _ = fit_nbest_temperature(split.nbests, frames, flags)
        if learned:
            assert estimator_file is not None
            try:
                out.estimator = fit_split_estimator(split, self.processor.tokenizer, LM_BEAM, fitted_on={
                    "split": "dev", "language": self.spec.target, "alpha": best["alpha"], "beta": best["beta"],
                    "beam_size": self.settings.beam_size})
            except ValueError as err:  # no correct or no wrong word on dev
                message = (f"the learned word confidence of {model.name_or_path} cannot be fitted on the "
                           f"{self.spec.target} dev split ({err})")
                if not self.learned_by_default:
                    raise RecipeError(f"self_training.confidence: learned: {message}") from None
                log(f"self-training: {message}; labelling with {DEFAULT_CONFIDENCE} (self_training.confidence "
                    "unset)")
                out.estimator_skipped = str(err)
                return out
            out.estimator.save(estimator_file)
        return out

    def _label(self, teacher: Path, out: Path, round_: int = 1) -> tuple[Any, TeacherLM, float]:
        """Label the pool with ``teacher`` into ``out`` (a learned estimator saved beside it, in the round's folder:
        :data:`~adaptspeech.decoding.confidence_estimator.ESTIMATOR_FILE`, not in the teacher's model folder, whose
        fingerprint is the round's key); the labels, the teacher's LM setup and the seconds."""
        started = time.perf_counter()
        model = AdaptSpeechForCTC.from_pretrained(teacher)
        estimator_file = out.parent / ESTIMATOR_FILE
        lm = self._teacher_lm(model, estimator_file)
        decoder = lm.decoder
        lm_key = None if decoder is None else {"lm": str(self.lm.folder), "alpha": lm.alpha, "beta": lm.beta,
                                               "beam_size": self.settings.beam_size}
        model_id = f"{teacher}@{model_fingerprint(teacher)[:12]}"
        method = replace(self.settings.confidence_method(), nbest_temperature=lm.temperature)
        if lm.estimator is not None:
            method = replace(method, estimator=str(estimator_file))
        elif lm.estimator_skipped is not None:
            method = ConfidenceMethod.parse(DEFAULT_CONFIDENCE)
        try:  # the round's folder is the recipe's: labels of an earlier teacher left there are started afresh
            result = labelling.pseudo_label(model, self.processor, self.pool, out, model_id=model_id,
                                  lm_decoder=decoder, lm_key=lm_key, target=self.prepared,
                                  confidence_filter=self.settings.confidence_filter(round_),
                                  beam_size=self.settings.beam_size, progress=self.spec.progress,
                                  overwrite=True, replace_other_run=True,  # the round's own folder
                                  max_lm_disagreement=self.settings.max_lm_disagreement if decoder else None,
                                  confidence_method=method)
        except NothingDecodedError as err:
            raise RecipeError(f"self-training: the teacher {teacher} decoded nothing: empty text for all "
                              f"{err.utterances} utterances of the pool {self.pool} (is it trained, and on this "
                              "language?)") from err
        except ValueError as err:  # e.g. no label passes the agreement filter: one line naming the section
            raise RecipeError(f"self-training round {round_} ({teacher}): {err}") from err
        return result, lm, time.perf_counter() - started

    def _average(self, student_dir: Path, spec: dict[str, Any]) -> dict[str, Any]:
        """Replace the student's model by the average of its ``average_top_n`` best checkpoints and its dev
        evaluation in ``stage_summary.json`` by the average's (the last step's kept as ``<split>_last_step``)."""
        record = average_top_checkpoints(student_dir / "checkpoints", int(self.settings.average_top_n),
                                         student_dir / "model", student_dir / "model")
        evaluation = spec.get("evaluation") or {}
        decoding = DecodingEvaluation(self.processor, evaluation.get("method"), evaluation.get("batch_size", 16),
                                      dict(evaluation.get("options") or {}))
        result = decoding.result(load_saved_model(student_dir / "model", progress_bar=False), self.dev)
        summary_file = student_dir / "stage_summary.json"
        summary = json.loads(summary_file.read_text())
        split = spec["data"].get("eval_split", "dev")
        summary[f"{split}_last_step"] = summary.get(split)
        summary[split] = result
        summary["averaged_checkpoints"] = record
        summary_file.write_text(json.dumps(summary, indent=2, default=float) + "\n")
        return record

    def run_system(self, system: str, start: Path | None = None, *, teacher: Path | None = None,
                   folder: Path | None = None, system_spec: dict[str, Any] | None = None,
                   reuse: Sequence[Path] = ()) -> SystemRun:
        """The rounds of ``system``.

        Args:
            system: a stage of :data:`~adaptspeech.recipes.simadapter.self_training_settings.SELF_TRAINED_SYSTEMS`.
            start: the students' starting model instead of the stage's own.
            teacher: the first teacher (a trained model folder beside its ``stage_summary.json``); None: the
                recipe's stage, ``<output_dir>/<system>/model``.
            folder: where the rounds are written; None: ``<output_dir>/self_training/<system>``.
            system_spec: the stage spec the teacher was trained with, from which the students are built
                (:func:`student_spec_from`); None: the recipe's stage.
            reuse: more folders of rounds, searched after ``folder``: a finished round there whose key matches
                is reused as it is (its student stays where it is); new rounds are written only in ``folder``.
        """
        own = teacher or self.spec.output_dir / system / "model"
        teacher = own
        if self.settings.teacher == "fusion" and system_spec is None and system != "fusion":
            teacher = self.spec.output_dir / _planned(self.spec, "fusion").name / "model"
            if not teacher.is_dir():
                raise RecipeError(f"self_training.teacher: fusion: the SimAdapter system {teacher} is not trained")
        folder = folder or self.folder / system
        best_dev = teacher_dev = _dev_cer(own.parent)  # a student must beat the system itself
        records: list[RoundRecord] = []
        chosen = 0
        for k in range(1, self.settings.rounds + 1):
            round_dir = folder / f"round_{k}"
            student_dir = round_dir / "student"
            record_key = json.loads(json.dumps({
                "teacher": model_fingerprint(teacher), "start": model_fingerprint(start) if start else None,
                "pool": self.pool_key, "settings": self.settings.to_dict(), "lm": None if self.lm is None else
                {"files": model_fingerprint(self.lm.folder)[:16], "alphas": self.lm.alphas, "betas": self.lm.betas},
                **self._estimator_key(),
            }))
            found = _finished_round([round_dir, *(Path(r) / f"round_{k}" for r in reuse)], record_key)
            if found is not None:
                record = RoundRecord(**json.loads((found / "round.json").read_text())["record"])
                self.reused_rounds.append(found)
                log(f"self-training {system} round {k}: done before in {found}, reused "
                    f"(dev CER {100 * record.dev_cer:.2f}%)")
            else:
                log(f"self-training {system} round {k}: labelling the pool with {teacher}")
                labels, lm, label_seconds = self._label(teacher, round_dir / "labels", k)
                kept = set(np.flatnonzero(np.isin(self.pool_paths, labels.dataset["path"])).tolist())
                quality = label_quality(round_dir / "labels", self.pool_paths, self.truth, kept)
                if system_spec is None:
                    spec = student_spec(self.spec, self.settings, system, self.prepared, round_dir / "labels",
                                        student_dir, start)
                else:
                    spec = student_spec_from(system_spec, self.settings, f"{system}_student", round_dir / "labels",
                                             student_dir, start, system=system)
                log(f"self-training {system} round {k}: kept {labels.summary['kept']} of {labels.summary['rows']} "
                    f"labels" + (f" (CER {100 * quality['cer_kept']:.2f}% kept, {100 * quality['cer_all']:.2f}% all)"
                                 if quality else "") + f"; training the student for {spec['training']['max_steps']} "
                    "steps")
                checkpoint = _interrupted_student(spec, f"self-training {system} round {k}")
                result = training_stage.run_stage(spec, resume=checkpoint or False, progress=self.spec.progress,
                                   overwrite=checkpoint is None)
                averaged = self._average(student_dir, spec) if self.settings.average_top_n else None
                summary = labels.summary
                record = RoundRecord(
                    k, str(teacher), str(student_dir / "model"), lm.alpha, lm.beta,
                    {"rows": summary["rows"], "kept": summary["kept"], "kept_share": summary["kept_share"],
                     "kept_hours": summary["kept_hours"], "confidence_quantiles": summary["confidence_quantiles"],
                     "real_time_factor": summary["real_time_factor"], "quality": quality,
                     "filter": summary["filter"], "lm_agreeing": summary["lm_agreeing"],
                     "nbest_temperature": lm.temperature, "averaged_checkpoints": averaged,
                     **lm.estimator_record(round_dir / ESTIMATOR_FILE)},
                    _dev_cer(student_dir), seconds={"label": label_seconds, "train": result.train_seconds},
                    trainable_params=int(result.trainable["trainable"]),
                    trainable_share=float(result.trainable["trainable_share"]))
                (round_dir / "round.json").write_text(json.dumps({"key": record_key, "record": record.__dict__},
                                                                 indent=1, default=float))
                self.trained_rounds.append(round_dir)
            record.improved = record.dev_cer < best_dev
            records.append(record)
            log(f"self-training {system} round {k}: dev CER {100 * record.dev_cer:.2f}% (best so far "
                f"{100 * best_dev:.2f}%)")
            if not record.improved:
                break
            best_dev, chosen, teacher = record.dev_cer, k, Path(record.student)
        return SystemRun(system, teacher_dev, records, chosen, str(own))

    def run(self) -> dict[str, SystemRun]:
        """Every system of the settings, in :data:`SELF_TRAINED_SYSTEMS` order; SimAdapter's students start from the
        self-trained adapter when the adapter is self-trained too (and has no LoRA: ``adapter_lora``)."""
        runs: dict[str, SystemRun] = {}
        for system in SELF_TRAINED_SYSTEMS:
            if system not in self.settings.systems:
                continue
            start = None
            if system == "fusion" and "target_adapter" in runs and runs["target_adapter"].chosen:
                if self.settings.adapter_lora:  # a bottleneck_lora adapter is not fused
                    log("self-training fusion: its students start from the recipe's adapter (SimAdapter does not "
                        "fuse the self-trained adapter with LoRA)")
                else:
                    start = runs["target_adapter"].model_dir
            runs[system] = self.run_system(system, start)
        return runs


def describe_run(run: SystemRun) -> str:
    """One line: the dev CER of each round and the chosen one."""
    rounds = ", ".join(f"round {r.round} {100 * r.dev_cer:.2f}" for r in run.rounds if r.dev_cer is not None)
    return (f"{run.system}: teacher dev CER {100 * run.teacher_dev_cer:.2f}%; {rounds}; chosen round {run.chosen}"
            + ("" if run.chosen else " (no student beat the teacher)"))
