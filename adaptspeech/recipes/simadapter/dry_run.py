"""Dry run of a real-data recipe: every stage for a few steps, with the real model shape, on a tiny corpus.

``adaptspeech recipe recipes/common_voice --dry-run`` (or ``python scripts/dry_run_recipe.py recipes/common_voice``)
checks, before a long GPU run, that every stage of the recipe builds, trains, saves and evaluates, and measures what
each stage costs per step:

1. writes a tiny corpus in the Common Voice release layout for the recipe's languages
   (:func:`~adaptspeech.recipes.simadapter.cv_layout.write_common_voice_layout`: ``<lang>/clips/*.mp3``,
   ``train/dev/test.tsv``, ``clip_durations.tsv``; 8 / 2 / 2 clips of about 2 s per language by default);
2. replaces every ``model.init: backbone`` stage (a Hub checkpoint such as ``facebook/wav2vec2-xls-r-300m``, which
   needs the network) with ``model.init: config`` and a backbone config of the checkpoint's shape and settings,
   random weights (:data:`~adaptspeech.backbones.wav2vec2.XLSR_300M_BACKBONE`, also importable from here);
   ``--dry-run-backbone`` overrides any of its fields (tests use a tiny shape);
3. keeps each stage's own settings (adapters, fusion, routing, trainable groups, ``bf16``, ``gradient_checkpointing``,
   learning rate ...) and overrides only the amount of work: ``max_steps`` (3), the batch (2), one micro-batch per
   step, no checkpoints, no mid-run evaluation, dev evaluation on ``max_eval_rows`` (4) utterances; without a GPU,
   ``training.use_cpu`` (the Trainer refuses ``bf16`` otherwise; on the CPU it is bf16 autocast);
4. runs ``prepare``, each stage and the test-set evaluation one after the other, **each in its own Python process**
   (so that one stage's peak memory does not include another's), and prints per step: trainable parameters, the
   first optimizer step's seconds, the median seconds of the later steps (forward + backward + optimizer step,
   measured by a Trainer callback from ``on_step_begin`` to ``on_step_end``, data loading excluded) as wall time and
   as the process's CPU time (all threads: the steadier figure on a machine shared with other work), the peak
   resident memory while training and over the whole process, and the wall time.

Peak memory: Linux's ``VmHWM`` (peak resident set size) from ``/proc/self/status``, reset with
``/proc/self/clear_refs`` (``5``) when training begins (:mod:`adaptspeech.memory`); on a CUDA device also
``torch.cuda.max_memory_allocated``.

Writes ``dry_run.md`` and ``dry_run.json`` in the dry run's output folder (the recipe's ``output_dir`` + ``-dry-run``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import transformers.trainer
from transformers import TrainerCallback

from ...backbones.wav2vec2 import XLSR_300M_BACKBONE
from ...memory import MIB, current_rss_bytes, peak_rss_bytes, reset_peak_rss
from ...progress import log
from ...training.spec_types import backbone_defaults
from ..engine import comma_list, load_recipe, spec_from_dict
from ..options import add_dry_run_arguments
from ..spec import RecipeError
from .cv_layout import write_common_voice_layout
from .evaluation import evaluate_recipe
from .spec import BASELINE_NAMES, STAGE_NAMES, SimAdapterRecipe
from .stages import load_stage_outputs, prepare_data, recipe_plan, train_recipe_stage

STEP_PREPARE, STEP_EVALUATE = "prepare", "evaluate"
TAG = "dry-run"
"""The dry run's log lines start ``[dry-run]``."""
FOLDER_KEY = "folder"
"""``dry_run_recipe.json`` (what each worker process reads): the recipe's settings and its folder under this key."""
STEP_NAMES = (STEP_PREPARE, *STAGE_NAMES, *BASELINE_NAMES, STEP_EVALUATE)


@dataclass
class DryRunSettings:
    """How much work each stage of a dry run does (the recipe decides everything else)."""

    steps: int = 3
    """Optimizer steps per stage; the first is reported apart (warm-up), the median of the others as s/step."""
    batch: int = 2
    """Utterances per optimizer step (one micro-batch: ``gradient_accumulation_steps`` is set to 1)."""
    seconds: float = 2.0
    """Mean clip length of the written corpus."""
    clips: dict[str, int] = field(default_factory=lambda: {"train": 8, "dev": 2, "test": 2})
    """Clips per language and split of the written corpus (the test split is what the evaluation decodes)."""
    eval_rows: int = 4
    """Dev utterances each stage evaluates after training (``data.max_eval_rows``)."""
    backbone_config: dict[str, Any] = field(default_factory=dict)
    """Fields merged over :data:`~adaptspeech.backbones.wav2vec2.XLSR_300M_BACKBONE` (e.g. a tiny shape for tests)."""
    precision: str = "recipe"
    """``recipe``: each stage's own ``bf16`` / ``fp16`` settings; ``fp32``: mixed precision off in every stage (for
    CPUs without native bfloat16, where bf16 autocast makes convolutions about 20x slower than fp32)."""
    isolate: bool = True
    """Run each step in its own process (peak memory per step); False: all in this process (tests)."""
    audio_format: str = "mp3"


# ---- the stage probe -------------------------------------------------------------------------------------------


def _make_probe() -> Any:
    """A ``TrainerCallback`` timing each optimizer step and the peak memory while training."""
    class StageProbe(TrainerCallback):
        def __init__(self) -> None:
            self.step_seconds: list[float] = []
            self.step_cpu_seconds: list[float] = []
            self.peak_reset = False
            self.rss_train_begin = 0
            self.peak_train = 0
            self.peak_cuda: int | None = None
            self._start = self._cpu_start = 0.0

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.peak_reset = reset_peak_rss()
            self.rss_train_begin = current_rss_bytes()
            if torch.cuda.is_available():
                torch.cuda.reset_peak_memory_stats()

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            self._start, self._cpu_start = time.perf_counter(), time.process_time()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            self.step_seconds.append(time.perf_counter() - self._start)
            self.step_cpu_seconds.append(time.process_time() - self._cpu_start)

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.peak_train = peak_rss_bytes()
            if torch.cuda.is_available():
                self.peak_cuda = torch.cuda.max_memory_allocated()

    return StageProbe()


# ---- the recipe, adjusted -------------------------------------------------------------------------------------


def dry_run_output_dir(spec: SimAdapterRecipe) -> Path:
    """Where a dry run of ``spec`` writes (never the real run's folder: its prepared data would be reused)."""
    return Path(f"{spec.output_dir}-dry-run")


def _stages(spec: SimAdapterRecipe) -> dict[str, dict[str, Any]]:
    """Every stage and baseline of ``spec`` by name."""
    return {**spec.stages, **spec.baselines}


def dry_run_overrides(spec: SimAdapterRecipe, settings: DryRunSettings, out: Path) -> list[str]:
    """``key=value`` overrides turning ``spec`` into its dry run (see the module docstring)."""
    on_cpu = not torch.cuda.is_available()
    overrides = [
        f"output_dir={out}",
        "corpus.type=common_voice",
        f"corpus.root={out / 'cv-corpus-dry-run'}",
        f"evaluation.batch_size={settings.batch}",
    ]
    for name, stage in _stages(spec).items():
        overrides += [
            f"{name}.training.max_steps={settings.steps}",
            f"{name}.training.per_device_train_batch_size={settings.batch}",
            f"{name}.training.per_device_eval_batch_size={settings.batch}",
            f"{name}.training.gradient_accumulation_steps=1",
            f"{name}.training.warmup_steps=0",
            f"{name}.training.logging_steps=1",
            f"{name}.training.save_strategy=no",
            f"{name}.training.eval_strategy=no",
            f"{name}.training.dataloader_num_workers=0",
            f"{name}.data.max_eval_rows={settings.eval_rows}",
        ]
        if on_cpu:  # the Trainer refuses bf16 without a GPU unless told to train on the CPU (bf16 autocast there)
            overrides.append(f"{name}.training.use_cpu=true")
        if settings.precision == "fp32":
            overrides += [f"{name}.training.bf16=false", f"{name}.training.fp16=false"]
        elif settings.precision != "recipe":
            raise RecipeError(f"dry run precision {settings.precision!r} unknown; allowed values: recipe, fp32")
        model = dict(stage.get("model") or {})
        if model.get("init") == "backbone":
            config = dict(model.get("config") or {})
            known = backbone_defaults(str(config.get("backbone_type", "wav2vec2")))
            # XLS-R's shape and settings that the stage's backbone has (a conformer has no do_stable_layer_norm)
            shape = {key: value for key, value in XLSR_300M_BACKBONE.items() if key in known}
            backbone = {**shape, **dict(config.get("backbone_config") or {})}
            config["backbone_config"] = {**backbone, **settings.backbone_config}
            overrides += [
                f"{name}.model.init=config",
                f"{name}.model.path=null",
                f"{name}.model.config={json.dumps(config)}",
            ]
    return overrides


def _protocol_recipe(recipe_dir: str | os.PathLike, overrides: list[str]) -> SimAdapterRecipe:
    spec = load_recipe(recipe_dir, overrides)
    if not isinstance(spec, SimAdapterRecipe):
        raise RecipeError(f"{recipe_dir}: a dry run runs the stages of a SimAdapter protocol recipe (task {spec.task})")
    return spec


def load_dry_run_recipe(
    recipe_dir: str | os.PathLike, overrides: list[str] | None, settings: DryRunSettings
) -> SimAdapterRecipe:
    """The recipe at ``recipe_dir`` with the user's ``overrides``, then the dry run's (which win)."""
    spec = _protocol_recipe(recipe_dir, list(overrides or []))
    out = dry_run_output_dir(spec)
    return _protocol_recipe(recipe_dir, [*(overrides or []), *dry_run_overrides(spec, settings, out)])


# ---- one step (in a worker process or here) -------------------------------------------------------------------


def run_step(spec: SimAdapterRecipe, step: str) -> dict[str, Any]:
    """Run one dry-run step (``prepare``, a stage name or ``evaluate``) and measure it."""
    reset = reset_peak_rss()
    start = time.perf_counter()
    record: dict[str, Any] = {"step": step, "peak_reset": reset}
    prepared = spec.output_dir / "prepared"
    if step == STEP_PREPARE:
        prepare_data(spec)
    elif step == STEP_EVALUATE:
        results, histories = {}, {}
        for stage in recipe_plan(spec):
            results[stage.name], histories[stage.name] = load_stage_outputs(spec, stage.name)
        evaluated = evaluate_recipe(spec, prepared, results, histories)
        record["device"] = evaluated["device"]
        record["systems"] = {row["system"]: row["cer"] for row in evaluated["rows"]}
    else:
        stage = {s.name: s for s in recipe_plan(spec)}.get(step)
        if stage is None:
            raise RecipeError(f"dry run: the recipe has no stage {step!r}")
        probe = _make_probe()
        transformers.trainer.DEFAULT_CALLBACKS.append(probe)  # every Trainer built from now on reports to it
        try:
            summary, _ = train_recipe_stage(spec, stage, prepared, spec.progress, resume=False)  # timed: afresh
        finally:
            transformers.trainer.DEFAULT_CALLBACKS.remove(probe)
        steps = probe.step_seconds
        later = steps[1:] or steps
        record.update(
            trainable=summary["trainable"]["trainable"],
            total_params=summary["trainable"]["total"],
            steps=len(steps),
            step_seconds=steps,
            first_step_seconds=steps[0] if steps else None,
            seconds_per_step=statistics.median(later) if later else None,
            step_cpu_seconds=probe.step_cpu_seconds,
            cpu_seconds_per_step=statistics.median(probe.step_cpu_seconds[1:] or probe.step_cpu_seconds or [0.0]),
            train_seconds=summary["train_seconds"],
            rss_train_begin_mib=probe.rss_train_begin / MIB,
            peak_train_mib=probe.peak_train / MIB,
            peak_train_reset=probe.peak_reset,
            peak_cuda_mib=None if probe.peak_cuda is None else probe.peak_cuda / MIB,
        )
    record["peak_process_mib"] = peak_rss_bytes() / MIB
    record["wall_seconds"] = time.perf_counter() - start
    record["torch_threads"] = torch.get_num_threads()
    return record


def _run_isolated(recipe_json: Path, step: str, result_json: Path) -> dict[str, Any]:
    """Run :func:`run_step` in a new Python process; its output goes to this process's stdout / stderr."""
    result_json.unlink(missing_ok=True)
    start = time.perf_counter()
    command = [sys.executable, "-m", "adaptspeech.recipes.simadapter.dry_run", "--worker", step, str(recipe_json)]
    command.append(str(result_json))
    code = subprocess.run(command, check=False).returncode
    if result_json.is_file():
        record = json.loads(result_json.read_text())
    else:
        record = {"step": step, "error": f"the worker process exited with code {code} and wrote no result"}
    record["process_wall_seconds"] = time.perf_counter() - start
    return record


def _error_text(err: BaseException) -> str:
    """``"ValueError: first line of the message"``: one line for the table."""
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0] if lines else ''}".replace("|", "/")


def _worker(step: str, recipe_json: str, result_json: str) -> int:
    values = json.loads(Path(recipe_json).read_text())
    try:
        spec = spec_from_dict(values, values.pop(FOLDER_KEY))
        assert isinstance(spec, SimAdapterRecipe)
        record = run_step(spec, step)
        code = 0
    except Exception as err:  # reported in the table; the next steps still run
        traceback.print_exc()
        record = {"step": step, "error": _error_text(err)}
        code = 1
    Path(result_json).write_text(json.dumps(record, indent=1, default=float) + "\n")
    return code


# ---- the whole dry run ----------------------------------------------------------------------------------------


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def dry_run_markdown(records: list[dict[str, Any]]) -> str:
    """The per-step table of a dry run (markdown)."""
    lines = [
        "| step | trainable params | first step s | s/step (median of later steps) | CPU s/step | RSS at train begin "
        "MiB | peak RSS training MiB | peak RSS process MiB | wall s | status |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in records:
        wall = r.get("process_wall_seconds", r.get("wall_seconds"))
        status = r.get("error") or r.get("skipped") or "ok"
        lines.append(
            f"| {r['step']} | {_fmt(r.get('trainable'), ',')} | {_fmt(r.get('first_step_seconds'), '.2f')} "
            f"| {_fmt(r.get('seconds_per_step'), '.2f')} | {_fmt(r.get('cpu_seconds_per_step'), '.2f')} "
            f"| {_fmt(r.get('rss_train_begin_mib'), ',.0f')} "
            f"| {_fmt(r.get('peak_train_mib'), ',.0f')} "
            f"| {_fmt(r.get('peak_process_mib'), ',.0f')} | {_fmt(wall, '.0f')} | {status} |"
        )
    return "\n".join(lines) + "\n"


def run_dry_run(
    recipe_dir: str | os.PathLike,
    overrides: list[str] | None = None,
    settings: DryRunSettings | None = None,
    only: list[str] | None = None,
) -> dict[str, Any]:
    """Dry-run every stage of the recipe at ``recipe_dir`` (see the module docstring).

    Args:
        overrides: the user's ``key=value`` overrides (applied before the dry run's own).
        only: run only these steps (``prepare``, stage names, ``evaluate``); earlier steps' outputs are reused.

    Returns:
        ``{"records": [one dict per step], "settings": ..., "output_dir": ..., "markdown": table}``; also written to
        ``dry_run.json`` / ``dry_run.md`` in the output folder.
    """
    settings = settings or DryRunSettings()
    spec = load_dry_run_recipe(recipe_dir, overrides, settings)
    unknown = sorted(set(only or []) - set(STEP_NAMES))
    if unknown:
        raise RecipeError(f"dry run: unknown step(s) {', '.join(unknown)}; allowed values: {', '.join(STEP_NAMES)}")
    out = spec.output_dir
    out.mkdir(parents=True, exist_ok=True)
    languages = [*spec.sources, spec.target]
    corpus = Path(str(spec.corpus.root))
    total_start = time.perf_counter()
    missing = [lang for lang in languages if not (corpus / lang / "test.tsv").is_file()]
    if missing:  # e.g. a later dry run with another target adds that language only
        start = time.perf_counter()
        write_common_voice_layout(corpus, missing, settings.clips, settings.seconds, spec.seed, settings.audio_format)
        seconds = time.perf_counter() - start
        log(f"wrote a Common Voice layout for {', '.join(missing)} in {seconds:.0f} s: {corpus}", TAG)
    recipe_json = out / "dry_run_recipe.json"
    recipe_json.write_text(json.dumps({**spec.to_dict(), FOLDER_KEY: str(spec.folder)}, indent=1) + "\n")
    plan = recipe_plan(spec)
    steps = [STEP_PREPARE, *(s.name for s in plan), STEP_EVALUATE]
    previous = {s.name: s.previous for s in plan}
    records: list[dict[str, Any]] = []
    failed: set[str] = set()
    for index, step in enumerate(steps, 1):
        if only and step not in only:
            continue
        blockers = sorted(failed) if step == STEP_EVALUATE else [previous.get(step)]
        blockers = [b for b in [*blockers, STEP_PREPARE] if b in failed and b != step]
        if blockers:
            record = {"step": step, "skipped": f"skipped: {', '.join(dict.fromkeys(blockers))} failed"}
            log(f"{index}/{len(steps)} {step}: {record['skipped']}", TAG)
            failed.add(step)
            records.append(record)
            continue
        log(f"{index}/{len(steps)} {step}: running" + (" in its own process" if settings.isolate else ""), TAG)
        if settings.isolate:
            record = _run_isolated(recipe_json, step, out / f"dry_run_{step}.json")
        else:
            try:
                record = run_step(spec, step)
            except Exception as err:  # reported in the table; the next steps still run
                traceback.print_exc()
                record = {"step": step, "error": _error_text(err)}
        if "error" in record:
            failed.add(step)
            log(f"{index}/{len(steps)} {step}: FAILED: {record['error']}", TAG)
        else:
            log(
                f"{index}/{len(steps)} {step}: trainable {_fmt(record.get('trainable'), ',')}, "
                f"s/step {_fmt(record.get('seconds_per_step'), '.2f')} "
                f"(CPU time {_fmt(record.get('cpu_seconds_per_step'), '.2f')}), "
                f"peak RSS training {_fmt(record.get('peak_train_mib'), ',.0f')} MiB, "
                f"process {_fmt(record.get('peak_process_mib'), ',.0f')} MiB, {record['wall_seconds']:.0f} s",
                TAG,
            )
        records.append(record)
    total = time.perf_counter() - total_start
    info = {
        "recipe": str(recipe_dir),
        "output_dir": str(out),
        "settings": asdict(settings),
        "backbone_stages": {
            name: (stage.get("model") or {}).get("config", {}).get("backbone_config")
            for name, stage in _stages(spec).items()
            if (stage.get("model") or {}).get("init") == "config"
        },
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        },
        "memory_method": "VmHWM (peak RSS) from /proc/self/status, reset via /proc/self/clear_refs at train begin; "
        + ("one process per step" if settings.isolate else "all steps in one process"),
        "total_seconds": total,
        "failed": sorted(failed),
    }
    table = dry_run_markdown(records)
    (out / "dry_run.json").write_text(json.dumps({"records": records, **info}, indent=1, default=float) + "\n")
    (out / "dry_run.md").write_text(
        f"### Dry run of {recipe_dir} ({settings.steps} steps x batch {settings.batch} x ~{settings.seconds:g} s "
        f"per stage, precision: {settings.precision})\n\n{table}\n"
        f"Total wall time: {total / 60:.1f} min. Memory: {info['memory_method']}.\n"
    )
    return {"records": records, "markdown": table, **info}


def main(argv: list[str] | None = None) -> int:
    """``python -m adaptspeech.recipes.simadapter.dry_run`` (also the worker entry point of isolated steps)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--worker"]:
        return _worker(*argv[1:4])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_dry_run_arguments(parser)
    parser.add_argument("recipe_dir", metavar="RECIPE_DIR")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    parser.add_argument("--only", default=None, metavar="STEP,STEP", help=f"steps among {', '.join(STEP_NAMES)}")
    parser.add_argument("--in-process", action="store_true", help="run every step in this process (no isolation)")
    args = parser.parse_args(argv)
    settings = settings_from_arguments(args, prefix="")
    settings.isolate = not args.in_process
    only = comma_list(args.only) or None
    result = run_dry_run(args.recipe_dir, args.overrides, settings, only=only)
    print(result["markdown"])
    return 1 if result["failed"] else 0


def settings_from_arguments(args: argparse.Namespace, prefix: str = "dry_run_") -> DryRunSettings:
    """:class:`DryRunSettings` from ``--{prefix}steps``, ``--{prefix}batch``, ``--{prefix}seconds``,
    ``--{prefix}backbone`` and ``--{prefix}precision`` (None: the default)."""
    settings = DryRunSettings()
    if getattr(args, f"{prefix}precision", None):
        settings.precision = getattr(args, f"{prefix}precision")
    for name in ("steps", "batch", "seconds"):
        value = getattr(args, f"{prefix}{name}", None)
        if value is not None:
            if not value > 0:
                raise RecipeError(f"--{prefix.replace('_', '-')}{name}: must be positive, got {value}")
            setattr(settings, name, value)
    backbone = getattr(args, f"{prefix}backbone", None)
    if backbone:
        try:
            settings.backbone_config = json.loads(backbone)
        except json.JSONDecodeError as err:
            raise RecipeError(f"--{prefix.replace('_', '-')}backbone: not JSON ({err})") from err
        if not isinstance(settings.backbone_config, dict):
            raise RecipeError(f"--{prefix.replace('_', '-')}backbone: a JSON object of config fields, got {backbone}")
    return settings


if __name__ == "__main__":
    sys.exit(main())
