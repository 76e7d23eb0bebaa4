"""adaptspeech on a CUDA GPU in one prepared run, written as a Markdown table.

Five sections, each a function of this script, run in this order:

1. ``heads``: every head (``ctc``, ``ctc_las``, ``las``) x every attention kind of ``ATTENTION``, a few
   ``AdaptSpeechTrainer`` steps in bf16 with activation checkpointing (non-re-entrant) at a small shape (filterbank
   Conformer, 2 layers, the kind in both; adapters ``ro`` and ``cs``, SimAdapter fusion over both; trainable: the
   backbone, the head, ``ro``'s adapter and the fusion). Checked before every optimizer step: a finite gradient on
   every trainable tensor, none on ``cs``'s frozen adapter (which the fusion runs); every logged loss finite.
2. ``training``: a training step at XLS-R 300M's shape (random weights, batch 8 x 10 s, bf16 autocast, fused AdamW;
   ``scripts/bench_training_step.py``'s configurations): full fine-tuning, adapter (r = 64), LoRA (r = 8),
   SimAdapter fusion over 6 adapters (the stacked path; ``fusion_reference``: each adapter's own forward, the path
   before the stacked one; ``fusion_recompute``: the stacked block recomputed in backward), and transformers'
   ``Wav2Vec2ForCTC`` with MMS adapters of the same size, prepared as ``run_speech_recognition_ctc_adapter.py``
   prepares it (``mms``; ``mms_frozen_front_end``: plus
   ``freeze_feature_encoder()``), each without and with activation checkpointing: median seconds per step, audio
   seconds per second, ``torch.cuda.max_memory_allocated``. Targets: adapter <= 1.0x the peer's time, adapter <=
   0.6x full fine-tuning's, fusion <= 1.3x full fine-tuning's.
3. ``attention``: every attention kind (``scripts/bench_attention.py``'s contenders) at T = 1000 and 4000, width
   768, 12 heads, batch 1, bf16 autocast, forward + backward of the sub-layer: fastest of the timed passes and the
   peak memory of one pass, against transformers' SDPA (``hf_sdpa``) and relative attention (``hf_rel_sdpa``)
   measured in the same run; blockwise ``rel_pos`` (and transformers' relative attention, where it fits) at 16000.
4. ``decoding``: a joint CTC / LAS model (the demo's encoder: filterbank Conformer, width 144, 4 layers) trained
   for a few hundred steps on the synthetic tone corpus of :mod:`adaptspeech.testing.tones`, then CTC greedy,
   CTC prefix beam 8, attention beam 8 and joint CTC / attention beam 8 over 64 unseen utterances, encoder and
   decoder on the GPU, against the same model on this machine's CPU in the same run: utterances per second,
   real-time factor, CER, and how many hypotheses differ between the two devices.
5. ``demo``: ``adaptspeech demo`` with every stage on the GPU (``<stage>.training.use_cpu=false``), wall time and
   its results table beside the committed CPU run's (``recipes/synthetic_demo/results/results.json``).

Usage::

    python scripts/gpu_check.py                          # every section on CUDA (about 8 minutes on an H200)
    python scripts/gpu_check.py --device cpu --tiny      # every section at toy size on a CPU (CI)
    python scripts/gpu_check.py --sections training,attention --out runs/gpu_check

Writes ``gpu_check.md`` and ``gpu_check.json`` into ``--out`` (default ``runs/gpu_check``), rewritten after each
section so that a run cut short keeps what it measured, and prints the tables. Exit status 1 when a check fails (an
exception, a non-finite loss, a missing or a stray gradient, a demo that does not finish); a missed speed target is
reported, not an error. A section that raises is reported with its error and the next section runs.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

SCRIPTS = Path(__file__).resolve().parent
REPO = SCRIPTS.parent
sys.path.insert(0, str(SCRIPTS))  # the benchmark scripts beside this one: their configurations and contenders

SECTIONS = ("heads", "training", "attention", "decoding", "demo")
GIB = 2**30
MIB = 2**20
#: ``scripts/bench_training_step.py`` configurations of the training section, in table order
TRAINING_CONFIGS = ("full", "adapter", "lora", "fusion", "fusion_reference", "fusion_recompute", "mms",
                    "mms_frozen_front_end")
#: targets of the training section: (numerator, denominator, largest ratio)
TRAINING_TARGETS = (("adapter", "mms", 1.0), ("adapter", "full", 0.6), ("fusion", "full", 1.3))
#: the committed results of the demo on the CPU
CPU_DEMO_RESULTS = REPO / "recipes" / "synthetic_demo" / "results" / "results.json"
#: the training section's backbone at ``--tiny``: XLS-R 300M's layout (stable layer norm, the 7 convolutions' kernels
#: and strides) at toy widths
TINY_300M: dict[str, Any] = {"hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128,
                             "conv_dim": [32] * 7, "num_conv_pos_embeddings": 16, "num_conv_pos_embedding_groups": 4}
DEMO_STAGES = ("base", "source_adapters", "target_adapter", "fusion", "finetune", "scratch")


@dataclass
class Scale:
    """The sizes of every section: the real check (``full``) or a toy run for CI (``tiny``)."""

    steps: int  # heads: Trainer steps per head x kind
    small_width: int
    small_heads: int
    small_mels: int
    layers_300m: int
    batch_300m: int
    seconds_300m: float
    warmup_300m: int
    timed_300m: int
    attention_width: int
    attention_heads: int
    attention_lengths: tuple[int, ...]
    long_length: int
    attention_passes: int
    decode_width: int
    decode_layers: int
    decode_train_utterances: int
    decode_steps: int
    decode_test_utterances: int
    shape_300m: dict[str, Any] = field(default_factory=dict)  # the training section's settings over XLS-R 300M's

    @classmethod
    def full(cls) -> Scale:
        return cls(3, 64, 4, 80, 24, 8, 10.0, 2, 5, 768, 12, (1000, 4000), 16000, 5, 144, 4, 512, 400, 64)

    @classmethod
    def tiny(cls) -> Scale:
        """Toy on every CPU: the training section's wav2vec2 at width 64 (not XLS-R's 1024), its feature encoder at
        32 channels (not 512) and its positional convolution (ours and the MMS peer's) of kernel 16 in 4 groups (not
        128 in 16); every configuration and code path of the full scale."""
        return cls(2, 32, 2, 16, 2, 1, 1.0, 1, 1, 64, 4, (64, 128), 256, 1, 32, 2, 32, 20, 8, shape_300m=TINY_300M)

    @property
    def width_300m(self) -> int:
        """The hidden width of the training section's models."""
        return int(self.shape_300m.get("hidden_size", 1024))


@dataclass
class Context:
    """What every section needs: the device, the sizes, where to write, and the failures so far."""

    device: torch.device
    scale: Scale
    tiny: bool
    out: Path
    budget: float = math.inf  # seconds the running section may take before it skips its remaining items
    section_start: float = 0.0
    skipped: list[str] = field(default_factory=list)

    def over_budget(self, item: str) -> bool:
        """True (and ``item`` noted as skipped) once the running section has used its time budget."""
        if time.perf_counter() - self.section_start <= self.budget:
            return False
        self.skipped.append(item)
        return True

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    def synchronize(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def autocast(self) -> contextlib.AbstractContextManager:
        """bf16 autocast on the device (CPU autocast on the CPU)."""
        return torch.autocast(self.device.type, dtype=torch.bfloat16)

    def release(self) -> None:
        """Give freed memory back between measurements."""
        gc.collect()
        if self.cuda:
            torch.cuda.empty_cache()


@dataclass
class Section:
    """One section's result: Markdown lines, figures for the JSON file, failed checks."""

    name: str
    title: str
    lines: list[str] = field(default_factory=list)
    figures: Any = None
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0


# --- the device ---------------------------------------------------------------------------------------------------
def device_description(device: torch.device) -> dict[str, Any]:
    """Model, memory, driver, CUDA, torch and library versions, CPUs: the header of the report."""
    import transformers

    info: dict[str, Any] = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "cpu": platform.processor() or platform.machine(),
    }
    with contextlib.suppress(ImportError):
        import peft

        info["peft"] = peft.__version__
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(
            gpu=props.name,
            gpu_memory_gib=round(props.total_memory / GIB, 1),
            multiprocessors=props.multi_processor_count,
            capability=f"{props.major}.{props.minor}",
            cuda=torch.version.cuda,
        )
        try:
            done = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=30, check=False,
            )
            info["driver"] = done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout else None
        except (OSError, subprocess.TimeoutExpired):
            info["driver"] = None
    return info


def describe(info: dict[str, Any]) -> str:
    """One line naming the machine."""
    if "gpu" in info:
        head = (
            f"{info['gpu']} ({info['gpu_memory_gib']} GiB, {info['multiprocessors']} SMs, compute capability "
            f"{info['capability']}, driver {info.get('driver') or 'unknown'}, CUDA {info['cuda']})"
        )
    else:
        head = f"CPU ({info['cpu']})"
    return (
        f"{head}; torch {info['torch']}, transformers {info['transformers']}, peft {info.get('peft', '-')}, "
        f"Python {info['python']}, {info['cpus']} CPUs"
    )


# --- 1. every head x attention kind -------------------------------------------------------------------------------
#: settings a kind needs at the small shape (everything else: its defaults)
KIND_EXTRAS: dict[str, dict[str, Any]] = {
    "ldsa": {"context_width": 7},
    "synthesizer_random": {"synthesizer_init": "fixed_patterns", "synthesizer_max_len": 64},
    "synthesizer_dense": {"synthesizer_max_len": 64},
    "synthesizer_dense_shared": {"synthesizer_max_len": 64},
    "sparse_strided": {"sparse_block_size": 8},
    "sparse_fixed": {"sparse_block_size": 8},
}
FROZEN_LANGUAGE = "cs"  # its adapter runs inside the fusion and must get no gradient


def small_config(scale: Scale, head: str, kind: str) -> Any:
    """The small model of the heads section: filterbank Conformer, 2 layers, ``kind`` in both, adapters ro / cs."""
    from adaptspeech import AdaptSpeechConfig

    vocab = 12
    las = {"decoder_hidden": 64, "embedding_dim": 32, "attention_dim": 32} if "las" in head.split("_") else None
    return AdaptSpeechConfig(
        backbone_type="fbank_conformer",
        backbone_config={
            "hidden_size": scale.small_width,
            "num_hidden_layers": 2,
            "num_attention_heads": scale.small_heads,
            "intermediate_size": 2 * scale.small_width,
            "num_mel_bins": scale.small_mels,
            "conv_depthwise_kernel_size": 7,
        },
        attention={"kind": kind, **KIND_EXTRAS.get(kind, {})},
        head=head,
        vocab_size=vocab,
        bos_token_id=vocab - 1,
        eos_token_id=vocab - 1,
        adapter_languages=["ro", FROZEN_LANGUAGE],
        adapter_defaults={"bottleneck": 16},
        **({"las": las} if las else {}),
    )


def small_rows(scale: Scale, count: int, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """``count`` utterances of 1-2.4 s of random filterbank frames with 3-8 labels in 1..10."""
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(count):
        frames = int(torch.randint(100, 240, (), generator=gen))
        rows.append({
            "input_features": torch.randn(frames, scale.small_mels, generator=gen),
            "labels": torch.randint(1, 11, (int(torch.randint(3, 9, (), generator=gen)),), generator=gen),
        })
    return rows


def collate(rows: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Pad features (zeros, boolean attention mask) and labels (-100)."""
    frames = max(r["input_features"].shape[0] for r in rows)
    length = max(r["labels"].shape[0] for r in rows)
    features = torch.zeros(len(rows), frames, rows[0]["input_features"].shape[1])
    mask = torch.zeros(len(rows), frames, dtype=torch.bool)
    labels = torch.full((len(rows), length), -100, dtype=torch.long)
    for i, r in enumerate(rows):
        n = r["input_features"].shape[0]
        features[i, :n], mask[i, :n] = r["input_features"], True
        labels[i, : r["labels"].shape[0]] = r["labels"]
    return {"input_features": features, "attention_mask": mask, "labels": labels}


def gradient_audit(model: torch.nn.Module, frozen_marker: str) -> list[str]:
    """What is wrong with the gradients of ``model`` right before an optimizer step, as one message per problem
    (empty: nothing): a trainable tensor without gradient or with a non-finite one, a frozen tensor with a gradient,
    and a tensor whose name holds ``frozen_marker`` that is trainable."""
    missing, nonfinite, stray, unfrozen = [], [], [], []
    for name, param in model.named_parameters():
        if frozen_marker in name and param.requires_grad:
            unfrozen.append(name)
        if param.requires_grad:
            if param.grad is None:
                missing.append(name)
            elif not bool(torch.isfinite(param.grad).all()):
                nonfinite.append(name)
        elif param.grad is not None:
            stray.append(name)
    problems = []
    for label, names in (
        ("no gradient on trainable", missing),
        ("non-finite gradient on", nonfinite),
        ("gradient on frozen", stray),
        ("trainable although it should be frozen:", unfrozen),
    ):
        if names:
            problems.append(f"{label} {len(names)} tensor(s), e.g. {names[0]}")
    return problems


def run_head_kind(ctx: Context, head: str, kind: str, workdir: Path) -> dict[str, Any]:
    """A few Trainer steps of one head x kind; returns its row (``ok`` False with ``problems`` on failure)."""
    from transformers import TrainerCallback, TrainingArguments

    from adaptspeech.heads import HEADS
    from adaptspeech.training.trainer import AdaptSpeechTrainer

    torch.manual_seed(0)
    model = HEADS.get(head).model_class(small_config(ctx.scale, head, kind))
    model.add_fusion(["ro", FROZEN_LANGUAGE], target_language="ro")
    model.set_trainable(backbone=True, head=True, adapters=["ro"], fusion=True)
    marker = f".adapters.{FROZEN_LANGUAGE}."
    problems: list[str] = []

    class Audit(TrainerCallback):
        def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            problems.extend(f"step {state.global_step + 1}: {p}" for p in gradient_audit(model, marker))
            return control

    args = TrainingArguments(
        output_dir=str(workdir / f"{head}-{kind}"),
        max_steps=ctx.scale.steps,
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        bf16=True,
        activation_checkpointing=True,
        activation_checkpointing_kwargs={"use_reentrant": False},
        use_cpu=not ctx.cuda,
        disable_tqdm=True,
        dataloader_num_workers=0,
        remove_unused_columns=False,
        seed=0,
    )
    trainer = AdaptSpeechTrainer(
        model=model, args=args, train_dataset=small_rows(ctx.scale, 4 * ctx.scale.steps), data_collator=collate,
        callbacks=[Audit()],
    )
    start = time.perf_counter()
    trainer.train()
    ctx.synchronize()
    seconds = time.perf_counter() - start
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    if len(losses) != ctx.scale.steps:
        problems.append(f"{len(losses)} losses logged for {ctx.scale.steps} steps")
    if not all(math.isfinite(value) for value in losses):
        problems.append(f"non-finite loss: {losses}")
    if not model.is_activation_checkpointing:
        problems.append("activation checkpointing is off")
    dtype = next(p for p in model.parameters()).dtype
    return {"head": head, "kind": kind, "ok": not problems, "problems": problems, "losses": losses,
            "seconds": seconds, "weights_dtype": str(dtype)}


def heads_section(ctx: Context) -> Section:
    """Every head x attention kind: a few bf16 Trainer steps with activation checkpointing, gradients audited."""
    from adaptspeech.attention import ATTENTION
    from adaptspeech.heads import HEADS

    section = Section("heads", "Every head x attention kind: bf16 Trainer steps with activation checkpointing")
    heads, kinds = HEADS.names(), ATTENTION.names()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind in kinds:
            for head in heads:
                if ctx.over_budget(f"heads: {head} x {kind}"):
                    rows.append({"head": head, "kind": kind, "ok": None, "problems": ["not run (time budget)"]})
                    continue
                try:
                    row = run_head_kind(ctx, head, kind, Path(tmp))
                except Exception as err:  # a failure of one pair is reported, the others still run
                    row = {"head": head, "kind": kind, "ok": False, "problems": [one_line(err)], "losses": []}
                rows.append(row)
                if row["ok"] is False:
                    section.failures.append(f"heads: {head} x {kind}: {'; '.join(row['problems'])}")
                ctx.release()
    by = {(r["head"], r["kind"]): r for r in rows}
    section.lines += [
        f"Filterbank Conformer, width {ctx.scale.small_width}, 2 layers, the kind in both; adapters `ro` (trainable) "
        f"and `{FROZEN_LANGUAGE}` (frozen), SimAdapter fusion over both (trainable), backbone and head trainable; "
        f"{ctx.scale.steps} `AdaptSpeechTrainer` steps of batch 4, `bf16=True`, `activation_checkpointing=True` "
        "(non-re-entrant). A cell reads `ok` with the first -> last loss when every loss is finite, every trainable "
        f"tensor has a finite gradient before each optimizer step and `{FROZEN_LANGUAGE}`'s adapter has none.",
        "",
        "| kind | " + " | ".join(heads) + " |",
        "|---|" + "---|" * len(heads),
    ]
    for kind in kinds:
        cells = []
        for head in heads:
            row = by[(head, kind)]
            if row["ok"]:
                cells.append(f"ok ({row['losses'][0]:.2f} -> {row['losses'][-1]:.2f}, {row['seconds']:.1f} s)")
            elif row["ok"] is None:
                cells.append("not run (time budget)")
            else:
                cells.append("**FAILED**: " + "; ".join(row["problems"])[:300].replace("|", "/"))
        section.lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    passed = sum(r["ok"] is True for r in rows)
    section.lines += ["", f"{passed} of {len(rows)} head x kind pairs pass."]
    section.figures = rows
    return section


# --- 2. the training step at XLS-R 300M's shape -------------------------------------------------------------------
def training_section(ctx: Context) -> Section:
    """Full fine-tuning, adapter, LoRA, fusion and transformers' MMS adapters: time, throughput, peak memory."""
    import bench_training_step as bts

    scale = ctx.scale
    section = Section("training", "Training step at XLS-R 300M's shape, bf16, fused AdamW")
    results: list[dict[str, Any]] = []
    for checkpointing in (False, True):
        for configuration in TRAINING_CONFIGS:
            if ctx.over_budget(f"training: {configuration} (checkpointing {on_off(checkpointing)})"):
                continue
            args = argparse.Namespace(
                layers=scale.layers_300m, batch=scale.batch_300m, seconds=scale.seconds_300m,
                steps=scale.timed_300m, warmup=scale.warmup_300m, dtype="bf16", device=str(ctx.device),
                threads=None, checkpointing=checkpointing, freeze_feature_encoder=False, fused=ctx.cuda,
                shape=scale.shape_300m,
            )
            try:
                result = bts.measure(configuration, args)
            except Exception as err:
                result = {"config": configuration, "error": one_line(err)}
                section.failures.append(
                    f"training: {configuration} (checkpointing {checkpointing}): {result['error']}"
                )
            result["checkpointing"] = checkpointing
            results.append(result)
            ctx.release()
    peak_key = "peak_cuda_mib" if ctx.cuda else "peak_above_baseline_mib"
    section.lines += [
        f"Random weights of XLS-R 300M's {'layout at toy widths' if scale.shape_300m else 'shape'} "
        f"({scale.layers_300m} layers, width {scale.width_300m}), batch {scale.batch_300m} x "
        f"{scale.seconds_300m:g} s of 16 kHz audio, bf16 autocast with fp32 weights, "
        f"{'fused ' if ctx.cuda else ''}AdamW; median of {scale.timed_300m} steps after {scale.warmup_300m} "
        "warm-up steps (forward + CTC + backward + optimizer step); memory: "
        + ("`torch.cuda.max_memory_allocated` (weights, gradients, optimizer state, activations)." if ctx.cuda
           else "peak RSS above the imports (no CUDA here)."),
        "`mms`: transformers' `Wav2Vec2ForCTC(adapter_attn_dim=64)` after `init_adapter_layers()`, "
        "`freeze_base_model()` and `_get_adapters()` trainable (`run_speech_recognition_ctc_adapter.py`); "
        "`mms_frozen_front_end`: plus `freeze_feature_encoder()`. Ratios against full fine-tuning with the same "
        "checkpointing setting.",
        "",
        "| configuration | checkpointing | trainable params | s/step | audio s per s | vs full | peak GiB | vs full |",
        "|---|---|---|---|---|---|---|---|",
    ]

    def find(configuration: str, checkpointing: bool) -> dict[str, Any] | None:
        return next((r for r in results if r["config"] == configuration and r["checkpointing"] == checkpointing
                     and "error" not in r), None)

    for r in results:
        if "error" in r:
            section.lines.append(f"| {r['config']} | {on_off(r['checkpointing'])} | **FAILED**: {r['error']} "
                                 "| | | | | |")
            continue
        full = find("full", r["checkpointing"])
        section.lines.append(
            f"| {r['config']} | {on_off(r['checkpointing'])} | {r['trainable']:,} | {r['median_seconds']:.3f} "
            f"| {r['audio_seconds_per_second']:.0f} "
            f"| {ratio_text(r['median_seconds'], full and full['median_seconds'])} "
            f"| {r[peak_key] * MIB / GIB:.2f} | {ratio_text(r[peak_key], full and full[peak_key])} |"
        )
    section.lines += ["", "Targets (step time):", ""]
    for checkpointing in (False, True):
        for numerator, denominator, limit in TRAINING_TARGETS:
            a, b = find(numerator, checkpointing), find(denominator, checkpointing)
            if a is None or b is None:
                section.lines.append(f"- {numerator} / {denominator}, checkpointing {on_off(checkpointing)}: "
                                     "not measured")
                continue
            section.lines.append(training_target_line(numerator, denominator, limit, checkpointing, a, b, peak_key))
    section.figures = results
    return section


def training_target_line(numerator: str, denominator: str, limit: float, checkpointing: bool,
                         a: dict[str, Any], b: dict[str, Any], peak_key: str) -> str:
    """One target line of the training section: ``a``'s step time over ``b``'s against ``limit``, and the memory
    ratio beside it ("-" where ``b``'s peak is 0: at toy sizes the peak RSS can stay at the import baseline)."""
    value = a["median_seconds"] / b["median_seconds"]
    verdict = "met" if value <= limit else "**missed**"
    return (f"- {numerator} <= {limit}x {denominator}, checkpointing {on_off(checkpointing)}: {value:.2f}x "
            f"{verdict} (memory {ratio_text(a[peak_key], b[peak_key])})")


# --- 3. attention at long inputs ----------------------------------------------------------------------------------
def attention_pass_measure(
    ctx: Context, label: str, width: int, heads: int, frames: int, passes: int
) -> dict[str, Any]:
    """Fastest forward + backward of one contender (after a warm-up pass) and the peak memory of one pass."""
    import bench_attention as ba

    torch.manual_seed(0)
    x = torch.randn(1, frames, width, device=ctx.device, requires_grad=True)
    with ctx.autocast():
        module, step = ba.build(label, width, heads, frames, x)
    module.to(ctx.device)
    params = [p for p in module.parameters() if p.requires_grad]

    def one_pass() -> float:
        ctx.synchronize()
        tick = time.perf_counter()
        with ctx.autocast():
            ba.run_once(step, x, params)
        ctx.synchronize()
        return time.perf_counter() - tick

    warm = one_pass()
    times = [one_pass() for _ in range(passes if warm < 5.0 else 1)]
    if ctx.cuda:
        x.grad = None
        for p in params:
            p.grad = None
        ctx.synchronize()
        before = torch.cuda.memory_allocated(ctx.device)
        torch.cuda.reset_peak_memory_stats(ctx.device)
        one_pass()
        peak = torch.cuda.max_memory_allocated(ctx.device) - before
    else:
        with ctx.autocast():
            peak = ba.peak_memory(step, x, params)
    return {"label": label, "frames": frames, "seconds": min(times), "passes": len(times), "peak_bytes": peak}


def attention_section(ctx: Context) -> Section:
    """Every kind at two lengths and the blockwise ``rel_pos`` at a long one, against transformers' attention."""
    import bench_attention as ba

    scale = ctx.scale
    section = Section("attention", "Attention at long inputs, forward + backward, bf16 autocast")
    ours = [*ba.OURS, *(k for k in ba.TABLE1_KINDS if k not in ba.OURS)]
    baselines = [*ba.BASELINES, *ba.REL_BASELINES]
    plan = [(label, t) for t in scale.attention_lengths for label in (*ours, *baselines)]
    plan += [(label, scale.long_length) for label in ("rel_pos_blockwise", "hf_sdpa", "hf_rel_sdpa")]
    measures: dict[tuple[str, int], dict[str, Any]] = {}
    for label, frames in plan:
        if ctx.over_budget(f"attention: {label} at T={frames}"):
            continue
        try:
            measures[(label, frames)] = attention_pass_measure(
                ctx, label, scale.attention_width, scale.attention_heads, frames, scale.attention_passes
            )
        except torch.cuda.OutOfMemoryError:
            measures[(label, frames)] = {"label": label, "frames": frames, "error": "out of memory"}
        except Exception as err:
            measures[(label, frames)] = {"label": label, "frames": frames, "error": one_line(err)}
            if label.startswith("hf_") and frames == scale.long_length:
                pass  # transformers' own attention at the longest length may not fit: reported, not a failure
            else:
                section.failures.append(f"attention: {label} at T={frames}: {measures[(label, frames)]['error']}")
        ctx.release()

    lengths = [*scale.attention_lengths, scale.long_length]

    def cell(label: str, t: int, what: str) -> str:
        m = measures.get((label, t))
        if m is None:
            return ""
        if "error" in m:
            return m["error"]
        return f"{m['seconds'] * 1e3:.2f}" if what == "ms" else f"{m['peak_bytes'] / MIB:,.0f}"

    def speed(label: str, base: str, t: int) -> str:
        a, b = measures.get((label, t)), measures.get((base, t))
        if not a or not b or "error" in a or "error" in b:
            return "-"
        return f"{b['seconds'] / a['seconds']:.2f}x / {a['peak_bytes'] / max(b['peak_bytes'], 1):.2f}"

    section.lines += [
        f"Width {scale.attention_width}, {scale.attention_heads} heads, batch 1, no padding, the attention sub-layer "
        f"alone: fastest of {scale.attention_passes} forward + backward passes after a warm-up, and the peak memory of "
        "one pass above what was allocated before it"
        + (" (`torch.cuda.max_memory_allocated`)." if ctx.cuda else " (the profiler's memory events)."),
        "The last columns: speed (baseline time / ours) and memory (ours / baseline) against `hf_sdpa` "
        "(transformers' `Wav2Vec2Attention`, SDPA) and, for the relative kinds, `hf_rel_sdpa` "
        "(`Wav2Vec2ConformerSelfAttention`, relative positions).",
        "",
        "| contender | " + " | ".join(f"T={t} ms" for t in lengths) + " | "
        + " | ".join(f"T={t} MiB" for t in lengths) + f" | vs hf_sdpa T={scale.attention_lengths[-1]} "
        f"| vs hf_rel_sdpa T={scale.attention_lengths[-1]} |",
        "|---|" + "---|" * (2 * len(lengths) + 2),
    ]
    last = scale.attention_lengths[-1]
    for label in (*ours, *baselines):
        relative = label.startswith("rel_pos") or label.startswith("hf_rel")
        section.lines.append(
            f"| {label} | " + " | ".join(cell(label, t, "ms") for t in lengths) + " | "
            + " | ".join(cell(label, t, "mib") for t in lengths)
            + f" | {speed(label, 'hf_sdpa', last)} | {speed(label, 'hf_rel_sdpa', last) if relative else '-'} |"
        )
    long = scale.long_length
    section.lines += [
        "",
        f"At T={long}: `rel_pos_blockwise` vs `hf_rel_sdpa`: {speed('rel_pos_blockwise', 'hf_rel_sdpa', long)} "
        f"(speed / memory); vs `hf_sdpa`: {speed('rel_pos_blockwise', 'hf_sdpa', long)}.",
    ]
    section.figures = list(measures.values())
    return section


# --- 4. decoding ----------------------------------------------------------------------------------------------------
def decoding_model(scale: Scale) -> Any:
    """The joint CTC / LAS model of the decoding section (the demo's encoder shape at full scale)."""
    from adaptspeech import AdaptSpeechConfig, AdaptSpeechForJointCTCAttention
    from adaptspeech.testing.tones import tone_vocab_size

    vocab = tone_vocab_size()
    config = AdaptSpeechConfig(
        backbone_type="fbank_conformer",
        backbone_config={
            "hidden_size": scale.decode_width,
            "num_hidden_layers": scale.decode_layers,
            "num_attention_heads": 4 if scale.decode_width % 4 == 0 else 2,
            "intermediate_size": 4 * scale.decode_width,
            "num_mel_bins": 80,
            "conv_depthwise_kernel_size": 15,
            "hidden_dropout": 0.1,
            "attention_dropout": 0.1,
            "activation_dropout": 0.1,
        },
        head="ctc_las",
        ctc_weight=0.3,
        vocab_size=vocab,
        bos_token_id=vocab - 1,
        eos_token_id=vocab - 1,
        las={"decoder_hidden": scale.decode_width, "embedding_dim": 64, "attention_dim": 64},
    )
    return AdaptSpeechForJointCTCAttention(config)


def tone_batches(texts: list[str], batch: int, seed: int) -> list[tuple[dict[str, torch.Tensor], list[str], int]]:
    """``texts`` as collated batches of the tone corpus: (model inputs, texts, real feature frames)."""
    from adaptspeech.testing.tones import make_tone_batch

    out = []
    for i in range(0, len(texts), batch):
        tones = make_tone_batch(texts[i : i + batch], seed=seed + i)
        mask = torch.arange(tones.features.shape[1])[None] < tones.feature_lengths[:, None]
        out.append(({"input_features": tones.features, "attention_mask": mask, "labels": tones.labels},
                    tones.texts, int(tones.feature_lengths.sum())))
    return out


def decoding_section(ctx: Context) -> Section:
    """Train the joint model on the device, then time every decoder with the encoder on the device and on the CPU."""
    from adaptspeech.decoding import transcribe_batch
    from adaptspeech.testing.tones import character_error_rate, decode_ids, random_texts

    scale = ctx.scale
    section = Section("decoding", "Decoding throughput, encoder and decoder on the device")
    torch.manual_seed(0)
    model = decoding_model(scale).to(ctx.device)
    train = tone_batches(random_texts(scale.decode_train_utterances, 6, 24, seed=1), 16, seed=100)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    model.train()
    start = time.perf_counter()
    for step in range(scale.decode_steps):
        inputs = {k: v.to(ctx.device) for k, v in train[step % len(train)][0].items()}
        with ctx.autocast():
            loss = model(**inputs).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()
    ctx.synchronize()
    train_seconds = time.perf_counter() - start
    final_loss = float(loss)
    if not math.isfinite(final_loss):
        section.failures.append(f"decoding: the training loss is {final_loss}")
    model.eval()
    test = tone_batches(random_texts(scale.decode_test_utterances, 12, 30, seed=2), 16, seed=300)
    audio_seconds = sum(frames for _, _, frames in test) * 0.01
    utterances = sum(len(texts) for _, texts, _ in test)
    methods = [
        ("CTC greedy", "ctc_greedy", {}),
        ("CTC prefix beam 8", "ctc_beam", {"beam_size": 8}),
        ("attention beam 8", "attention_beam", {"beam_size": 8}),
        ("joint CTC/attention beam 8 (CTC weight 0.3)", "joint", {"beam_size": 8, "ctc_weight": 0.3}),
    ]
    devices = [ctx.device] + ([torch.device("cpu")] if ctx.cuda else [])
    figures: dict[str, dict[str, Any]] = {}
    for device in devices:
        model.to(device)
        batches = [({k: v.to(device) for k, v in inputs.items() if k != "labels"}, texts) for inputs, texts, _ in test]
        for label, method, options in methods:
            with torch.no_grad():
                transcribe_batch(model, batches[0][0], method, **options)  # warm-up
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                tick = time.perf_counter()
                ids = [row for inputs, _ in batches for row in transcribe_batch(model, inputs, method, **options)]
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                seconds = time.perf_counter() - tick
            hypotheses = [decode_ids([i for i in row if 0 < i < model.config.vocab_size - 1]) for row in ids]
            references = [text for _, texts in batches for text in texts]
            figures.setdefault(label, {})[device.type] = {
                "seconds": seconds, "utt_per_s": utterances / seconds, "rtf": seconds / audio_seconds,
                "cer": character_error_rate(references, hypotheses), "hypotheses": hypotheses,
            }
    section.lines += [
        f"`AdaptSpeechForJointCTCAttention` (`ctc_las`; filterbank Conformer width {scale.decode_width}, "
        f"{scale.decode_layers} layers; LAS decoder width {scale.decode_width}) trained {scale.decode_steps} steps "
        f"(batch 16, bf16 autocast, {train_seconds:.0f} s, last loss {final_loss:.3f}) on "
        f"{scale.decode_train_utterances} utterances of the synthetic tone corpus, then {utterances} unseen "
        f"utterances ({audio_seconds:.0f} s of audio) decoded in batches of 16 with `transcribe_batch` (encoder "
        "forward + search, fp32, after one warm-up batch)"
        + (f"; the same model on this machine's CPU ({torch.get_num_threads()} threads) in the same run." if ctx.cuda
           else "."),
        "",
        "| method | " + " | ".join(f"{d.type} utt/s | {d.type} RTF | {d.type} CER %" for d in devices)
        + (" | GPU / CPU speed | hypotheses that differ |" if ctx.cuda else " |"),
        "|---|" + "---|---|---|" * len(devices) + ("---|---|" if ctx.cuda else ""),
    ]
    for label, _, _ in methods:
        row = figures[label]
        cells = [f"{row[d.type]['utt_per_s']:.1f} | {row[d.type]['rtf']:.1e} | {100 * row[d.type]['cer']:.2f}"
                 for d in devices]
        extra = ""
        if ctx.cuda:
            gpu, cpu = row["cuda"], row["cpu"]
            differ = sum(a != b for a, b in zip(gpu["hypotheses"], cpu["hypotheses"], strict=True))
            extra = f" | {cpu['seconds'] / gpu['seconds']:.2f}x | {differ} of {utterances}"
        section.lines.append(f"| {label} | " + " | ".join(cells) + extra + " |")
    section.figures = {label: {d: {k: v for k, v in f.items() if k != "hypotheses"} for d, f in per.items()}
                       for label, per in figures.items()}
    return section


# --- 5. the demo ----------------------------------------------------------------------------------------------------
def demo_overrides(ctx: Context, out: Path) -> list[str]:
    """``adaptspeech demo`` overrides: every stage on the device, all CPUs for synthesis and data; tiny: toy sizes."""
    cpus = os.cpu_count() or 2
    overrides = [f"output_dir={out}", f"threads={min(cpus, 16)}", f"corpus.workers={min(cpus, 16)}"]
    if ctx.cuda:
        overrides += [f"{stage}.training.use_cpu=false" for stage in DEMO_STAGES]
    if ctx.tiny:
        tiny = {"backbone_type": "fbank_conformer", "backbone_config": {
            "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64,
            "conv_depthwise_kernel_size": 3}}
        overrides += [
            "sources=[cs, pl]", "target=sk", "target_subset=8utt", "corpus.clips_per_language=16",
            "lm.sentences=300", "lm.order=2", "lm.alphas=[0.5]", "lm.betas=[1.0]", "lm.beam_size=4",
            f"base.model.config={json.dumps(tiny)}", f"scratch.model.config={json.dumps(tiny)}",
            "source_adapters.model.add_adapters={cs: {bottleneck: 8}, pl: {bottleneck: 8}}",
            "source_adapters.model.active_languages=[cs, pl]",
            "source_adapters.model.trainable={adapters: [cs, pl]}",
            "target_adapter.model.add_adapters={sk: {bottleneck: 8}}",
            "fusion.model.fusion={languages: [cs, pl, sk], target_language: sk, residual: none}",
        ]
        overrides += [f"{stage}.training.{key}={value}" for stage in DEMO_STAGES
                      for key, value in (("max_steps", 2), ("per_device_train_batch_size", 4),
                                         ("eval_strategy", "no"), ("save_steps", 2))]
    return overrides


def demo_section(ctx: Context, timeout: float) -> Section:
    """``adaptspeech demo`` on the device; its table beside the committed CPU run's."""
    section = Section("demo", "The offline demo on the device")
    out = ctx.out / "demo"
    command = [sys.executable, "-m", "adaptspeech.cli", "demo", "--no-progress", *demo_overrides(ctx, out)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    ctx.out.mkdir(parents=True, exist_ok=True)
    log = ctx.out / "demo.log"
    start = time.perf_counter()
    with log.open("w") as handle:
        try:
            done = subprocess.run(command, cwd=REPO, env=env, stdout=handle, stderr=subprocess.STDOUT,
                                  timeout=timeout, check=False)
            code: int | None = done.returncode
        except subprocess.TimeoutExpired:
            code = None
    wall = time.perf_counter() - start
    command_text = "adaptspeech demo " + " ".join(a for a in command[5:] if not a.startswith("output_dir="))
    section.lines += [f"Command: `{command_text}`; wall time **{wall / 60:.1f} min** (aim: 5 min)."]
    results_path = out / "results.json"
    if code != 0 or not results_path.is_file():
        reason = f"did not finish within {timeout:.0f} s" if code is None else f"exit status {code}"
        tail = log.read_text(errors="replace").strip().splitlines()[-3:] if log.is_file() else []
        section.failures.append(f"demo: {reason}: {' / '.join(tail)[:400]}")
        section.lines.append(f"**FAILED**: {reason}; the last lines of `demo.log`: " + " / ".join(tail)[:600])
        section.figures = {"wall_seconds": wall, "exit": code}
        return section
    gpu = json.loads(results_path.read_text())
    cpu = json.loads(CPU_DEMO_RESULTS.read_text()) if CPU_DEMO_RESULTS.is_file() and not ctx.tiny else None
    section.lines += ["", demo_table(gpu, cpu)]
    if cpu is not None:
        section.lines += ["", ranking_line(gpu, cpu)]
    section.figures = {"wall_seconds": wall, "results": gpu}
    return section


def demo_table(gpu: dict[str, Any], cpu: dict[str, Any] | None) -> str:
    """Test CER per system on the device and, when given, in the committed CPU run."""
    cpu_rows = {r["system"]: r for r in (cpu or {}).get("rows", [])}
    lines = [
        "| system | CER % here | WER % here | train s here | " + ("CER % CPU run | train s CPU run |" if cpu else ""),
        "|---|---|---|---|" + ("---|---|" if cpu else ""),
    ]
    for r in gpu["rows"]:
        other = cpu_rows.get(r["system"])
        cells = (f"| {r['system']} | {100 * r['cer']:.2f} | {100 * r['wer']:.2f} "
                 f"| {seconds_text(r.get('train_seconds'))} |")
        if cpu:
            cells += (f" {100 * other['cer']:.2f} | {seconds_text(other.get('train_seconds'))} |" if other
                      else " - | - |")
        lines.append(cells)
    total = gpu.get("total_seconds")
    if cpu and total:
        lines += ["", f"Total: {total / 60:.1f} min here, {cpu.get('total_seconds', 0) / 60:.1f} min in the CPU run "
                      f"(decoding on {gpu.get('device', '?')} here)."]
    return "\n".join(lines)


def ranking_line(gpu: dict[str, Any], cpu: dict[str, Any]) -> str:
    """Whether the systems rank the same by test CER here and in the CPU run."""
    common = [r["system"] for r in gpu["rows"] if r["system"] in {c["system"] for c in cpu["rows"]}]
    cer_gpu = {r["system"]: r["cer"] for r in gpu["rows"]}
    cer_cpu = {r["system"]: r["cer"] for r in cpu["rows"]}
    here = sorted(common, key=cer_gpu.__getitem__)
    there = sorted(common, key=cer_cpu.__getitem__)
    if here == there:
        return "Ranking by test CER: the same as in the CPU run."
    return ("Ranking by test CER differs from the CPU run: here " + " < ".join(here) + "; CPU run "
            + " < ".join(there) + ".")


# --- the report ---------------------------------------------------------------------------------------------------
def one_line(err: BaseException) -> str:
    """An exception as one line: its type and the first line of its message."""
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"[:300]


def on_off(flag: bool) -> str:
    return "on" if flag else "off"


def ratio_text(value: float | None, base: float | None) -> str:
    return "-" if value is None or not base else f"{value / base:.2f}x"


def seconds_text(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def write_report(ctx: Context, info: dict[str, Any], sections: list[Section], argv: list[str]) -> str:
    """Write ``gpu_check.md`` / ``gpu_check.json`` and return the Markdown."""
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"## adaptspeech on {info.get('gpu', 'the CPU')}",
        "",
        f"Machine: {describe(info)}. Date: {stamp}. Command: `python scripts/gpu_check.py {' '.join(argv)}`.",
        "",
    ]
    for section in sections:
        number = SECTIONS.index(section.name) + 1
        lines += [f"### {number}. {section.title} ({section.seconds:.0f} s)", "", *section.lines, ""]
    failures = [f for s in sections for f in s.failures]
    lines += ["### Failures", ""] + ([f"- {f}" for f in failures] if failures else ["None."])
    text = "\n".join(lines) + "\n"
    ctx.out.mkdir(parents=True, exist_ok=True)
    (ctx.out / "gpu_check.md").write_text(text)
    payload = {"machine": info, "date": stamp, "argv": argv, "failures": failures,
               "sections": {s.name: {"seconds": s.seconds, "figures": s.figures} for s in sections}}
    (ctx.out / "gpu_check.json").write_text(json.dumps(payload, indent=1, default=str) + "\n")
    return text


#: seconds each section may take on the real scale before it skips what is left (the demo: until the deadline)
BUDGETS = {"heads": 150.0, "training": 150.0, "attention": 100.0, "decoding": 120.0}


def run_section(name: str, ctx: Context, demo_timeout: float) -> Section:
    """Run one section; an exception becomes a failed section with its message (the traceback on stderr)."""
    functions: dict[str, Callable[[Context], Section]] = {
        "heads": heads_section,
        "training": training_section,
        "attention": attention_section,
        "decoding": decoding_section,
        "demo": lambda c: demo_section(c, demo_timeout),
    }
    print(f"[gpu_check] {name} ...", file=sys.stderr, flush=True)
    tick = ctx.section_start = time.perf_counter()
    ctx.budget = math.inf if ctx.tiny else BUDGETS.get(name, math.inf)
    ctx.skipped = []
    try:
        section = functions[name](ctx)
    except Exception as err:
        traceback.print_exc()
        section = Section(name, name, lines=[f"**FAILED**: {one_line(err)}"], failures=[f"{name}: {one_line(err)}"])
    section.seconds = time.perf_counter() - tick
    if ctx.skipped:
        section.lines += ["", f"Not run (the section's time budget of {ctx.budget:.0f} s was used up): "
                          + ", ".join(ctx.skipped) + "."]
    print(f"[gpu_check] {name}: {section.seconds:.0f} s, {len(section.failures)} failure(s)", file=sys.stderr,
          flush=True)
    return section


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:1, cpu")
    parser.add_argument("--tiny", action="store_true", help="every section at toy size (CI on a CPU)")
    parser.add_argument("--sections", default=",".join(SECTIONS), help=f"a subset of {','.join(SECTIONS)}")
    parser.add_argument("--out", default="runs/gpu_check", help="folder of gpu_check.md / .json (runs/gpu_check)")
    parser.add_argument("--deadline", type=float, default=None, metavar="S",
                        help="the demo is stopped (and reported as failed) when the whole run reaches S seconds "
                        "(default: the demo may take 15 minutes)")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    sections = [s for s in args.sections.split(",") if s]
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        parser.error(f"--sections: unknown {', '.join(unknown)}; allowed: {', '.join(SECTIONS)}")
    try:
        device = torch.device(args.device)
    except RuntimeError as err:
        parser.error(f"--device {args.device!r}: {err}")
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: CUDA is not available here (use --device cpu --tiny for a toy run)")
    ctx = Context(device, Scale.tiny() if args.tiny else Scale.full(), args.tiny, Path(args.out))
    info = device_description(device)
    print(f"[gpu_check] {describe(info)}", file=sys.stderr, flush=True)
    done: list[Section] = []
    start = time.perf_counter()
    for name in sections:
        left = 900.0 if args.deadline is None else args.deadline - (time.perf_counter() - start)
        done.append(run_section(name, ctx, max(left, 1.0)))
        text = write_report(ctx, info, done, argv)
    print(text)
    return 1 if any(s.failures for s in done) else 0


if __name__ == "__main__":
    sys.exit(main())
