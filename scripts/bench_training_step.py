"""Training-step time and peak memory on XLS-R 300M's shape: full fine-tuning against adapters, fusion and LoRA.

One run measures four configurations of ``AdaptSpeechForCTC`` built from config (random weights, no download; the
wav2vec2 stable-layer-norm encoder of ``facebook/wav2vec2-xls-r-300m``: 24 layers, width 1024, 16 heads, FFN 4096,
the 7-layer convolutional feature encoder), each in its own Python process so that peak memories do not mix:

- ``full``: full fine-tuning (everything but the convolutional feature encoder, which stays frozen as in the recipe
  and in transformers' fine-tuning scripts; 315M trainable);
- ``adapter``: one bottleneck adapter (r = 64) after every one of the 24 layers, the backbone and the head frozen;
- ``fusion``: five source adapters (r = 128) and the target adapter (r = 64), SimAdapter fusion over the six;
  fusion + target adapter trainable;
- ``lora``: per-language LoRA (``add_language_adapter(lang, adapter_type="lora", lora_r=8)``; the default target
  modules ``q_proj`` / ``v_proj``), the backbone frozen.
- ``routed`` (on request): multilingual adapter training, several languages in one batch: one bottleneck adapter
  (r = 64, the ``adapter`` width) per language of :data:`ROUTED_LANGUAGES`, all trainable and active, each utterance
  through its own language's adapter (``lang_ids``: utterance ``i`` is language ``i mod 4``); ``lora_routed``: the
  same with per-language LoRA (r = 8), routed through peft's mixed-batch forward (``adapter_names``);
  ``routed_reference``: ``routed`` with each language's rows gathered, run and scattered back one language at a
  time, as before the grouped path (inside ``reference_path()``);
- ``fusion_reference`` (on request): ``fusion`` computed by each adapter's own forward and the fusion over their
  stacked outputs (``adaptspeech.adapters.layer_forward.reference_path()``), as before the stacked path;
  ``fusion_recompute``: ``fusion`` with ``model.set_fusion_recompute(True)``.

Beside each configuration's time the table prints its arithmetic bound: the multiply-adds of one step
(:func:`multiply_adds`) and their ratio to full fine-tuning's, the time ratio the configuration would have if it
computed its products as fast as full fine-tuning does. ``--rounds N`` measures the configurations N times,
interleaved, and reports the median over all rounds' steps: on a machine shared with other work, whose load changes
over minutes, the ratios then see the same load.

w2v-BERT 2.0 at its full shape, on request (``--configs full,adapter,w2v_bert_full,w2v_bert_adapter,...``): the
configurations ``w2v_bert_full``, ``w2v_bert_adapter``, ``w2v_bert_fusion``, ``w2v_bert_lora`` build the same
trainable groups on a random-weight ``wav2vec2_bert`` backbone of ``facebook/w2v-bert-2.0``'s shape
(:data:`~adaptspeech.backbones.wav2vec2_bert.W2V_BERT_2_BACKBONE`: 24 conformer layers, width 1024, FFN 4096,
580M parameters; ``--layers`` layers), fed the same seconds of audio as its input: random stacked filterbank
features ``[batch, units, 160]``, 50 units a second (transformers' front end is numpy, outside the step). Full
fine-tuning trains every weight (it has no convolutional feature encoder to freeze). The table then also gives each
w2v-BERT configuration's ratios to w2v-BERT's own full fine-tuning and to XLS-R's (``full``); the arithmetic bound
is counted for the XLS-R configurations only.

The peer users pick today, on request (``--configs ...,mms``): transformers' ``Wav2Vec2ForCTC`` with MMS adapters
(``adapter_attn_dim=64``, the bottleneck of ``adapter``), prepared as transformers'
``run_speech_recognition_ctc_adapter.py`` and the MMS adapter blog prepare it: ``init_adapter_layers()``,
``freeze_base_model()``, then every tensor of ``_get_adapters()`` (the adapters and the CTC head) trainable
(``mms``); ``mms_frozen_front_end`` also calls ``freeze_feature_encoder()``, which that script does not.

A step is forward + CTC loss + backward + ``torch.optim.AdamW`` step + ``zero_grad`` on one batch of random audio
(``--batch`` x ``--seconds``) with random labels (10 characters per second). The time is the median of ``--steps``
steps after ``--warmup`` steps, as wall time and as the process's CPU time (all threads; on a machine shared with
other work the CPU time is the steadier figure, and the 1-minute load average is printed beside it).

Peak memory: on the CPU the peak resident set size (``VmHWM`` of
``/proc/self/status``, reset with ``/proc/self/clear_refs`` once the model is built, so it counts the weights plus
what training adds), and the ratios use that peak minus the process's RSS after the imports (the libraries' own
~0.5 GiB); on CUDA ``torch.cuda.max_memory_allocated``. ``layerdrop`` and SpecAugment time masking are off
(``layerdrop`` skips random layers and would make the step time random); dropout stays as in XLS-R.

    python scripts/bench_training_step.py                   # 24 layers, batch 4 x 4 s, fp32, CPU or CUDA
    python scripts/bench_training_step.py --dtype bf16 --device cuda --steps 10
    python scripts/bench_training_step.py --checkpointing --configs full,adapter   # as the recipe's full stages
    python scripts/bench_training_step.py --layers 2 --batch 1 --seconds 1 --steps 1   # a quick check
    python scripts/bench_training_step.py --layers 8 --rounds 2 --configs full,adapter,fusion,fusion_reference
    python scripts/bench_training_step.py --batch 1 --configs full,adapter,fusion,w2v_bert_full,w2v_bert_adapter,\
        w2v_bert_fusion                                   # w2v-BERT 2.0 against XLS-R 300M
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
from pathlib import Path
from typing import Any

from adaptspeech.backbones.wav2vec2 import XLSR_300M_BACKBONE
from adaptspeech.backbones.wav2vec2_bert import W2V_BERT_2_BACKBONE
from adaptspeech.memory import MIB, current_rss_bytes, peak_rss_bytes, reset_peak_rss

CONFIGS = ("full", "adapter", "fusion", "lora")
#: the fusion computed as before its stacked path (each adapter's own forward, inside ``reference_path()``) and with
#: the fusion block recomputed in backward: the before / after rows of one run
FUSION_VARIANTS = ("fusion_reference", "fusion_recompute")
#: several languages in one batch, each utterance through its own language's adapter (bottleneck or LoRA)
ROUTED = ("routed", "routed_reference", "lora_routed")
#: the languages of the routed configurations; utterance ``i`` of a batch is ``ROUTED_LANGUAGES[i % 4]``
ROUTED_LANGUAGES = ("cy", "it", "ro", "ru")
#: transformers' own MMS adapter training, the peer of ``adapter`` (see the module docstring)
PEERS = ("mms", "mms_frozen_front_end")
#: the configurations of :data:`CONFIGS` on w2v-BERT 2.0's shape (see the module docstring)
W2V_BERT_PREFIX = "w2v_bert_"
W2V_BERT_CONFIGS = tuple(W2V_BERT_PREFIX + c for c in CONFIGS)
ALL_CONFIGS = CONFIGS + FUSION_VARIANTS + ROUTED + PEERS + W2V_BERT_CONFIGS
#: the bottleneck of ``adapter`` and the ``adapter_attn_dim`` of the peers: equal adapter size
ADAPTER_BOTTLENECK = 64
SOURCES = ("ru", "cy", "it", "eu", "pt")
TARGET = "ro"
TARGETS = {"time": 0.7, "memory": 0.5}
"""The targets for the adapter-only configuration, as ratios to full fine-tuning."""
FUSION_TARGETS = {"time": 1.1, "memory": 0.6}
"""The targets for the fusion step, as ratios to full fine-tuning."""

BACKBONE: dict[str, Any] = {**XLSR_300M_BACKBONE, "layerdrop": 0.0, "mask_time_prob": 0.0}
"""XLS-R 300M's shape and dropouts, without ``layerdrop`` and SpecAugment time masking (random step times)."""
W2V_BERT_SHAPE: dict[str, Any] = {**W2V_BERT_2_BACKBONE, "layerdrop": 0.0, "mask_time_prob": 0.0}
"""w2v-BERT 2.0's shape and dropouts, without ``layerdrop`` and SpecAugment time masking."""


def build_peer(configuration: str, layers: int, shape: dict[str, Any] | None = None) -> Any:
    """transformers' ``Wav2Vec2ForCTC`` with MMS adapters of ``ADAPTER_BOTTLENECK`` in every layer, prepared for
    adapter training as ``run_speech_recognition_ctc_adapter.py`` does (``mms_frozen_front_end``: plus
    ``freeze_feature_encoder()``). ``shape``: backbone settings over :data:`BACKBONE` (a toy width)."""
    import torch
    from transformers import Wav2Vec2Config, Wav2Vec2ForCTC

    torch.manual_seed(0)
    config = Wav2Vec2Config(
        **{**BACKBONE, **(shape or {}), "num_hidden_layers": layers}, vocab_size=40,
        adapter_attn_dim=ADAPTER_BOTTLENECK
    )
    model = Wav2Vec2ForCTC(config)
    model.init_adapter_layers()
    model.freeze_base_model()
    for param in model._get_adapters().values():
        param.requires_grad = True
    if configuration == "mms_frozen_front_end":
        model.freeze_feature_encoder()
    return model


def build_model(configuration: str, layers: int, shape: dict[str, Any] | None = None) -> Any:
    """The model of ``configuration`` (one of :data:`CONFIGS` or :data:`PEERS`) with its trainable groups set (fp32
    weights, on the current default device: the CPU unless built under ``with torch.device(...)``). ``shape``:
    backbone settings over :data:`BACKBONE` (``scripts/gpu_check.py --tiny``: a toy width everywhere)."""
    import torch

    from adaptspeech import AdaptSpeechConfig, AdaptSpeechForCTC

    if configuration in PEERS:
        return build_peer(configuration, layers, shape)
    torch.manual_seed(0)
    if configuration in W2V_BERT_CONFIGS:
        configuration = configuration.removeprefix(W2V_BERT_PREFIX)
        settings = {k: v for k, v in (shape or {}).items() if k in W2V_BERT_SHAPE}  # a toy width, where given
        config = AdaptSpeechConfig(backbone_type="wav2vec2_bert", backbone_config={
            **W2V_BERT_SHAPE, **settings, "num_hidden_layers": layers}, vocab_size=40)
    else:
        config = AdaptSpeechConfig(
            backbone_type="wav2vec2", backbone_config={**BACKBONE, **(shape or {}), "num_hidden_layers": layers},
            vocab_size=40,
        )
    model = AdaptSpeechForCTC(config)
    if configuration == "full":
        model.set_trainable(backbone=True, head=True, feature_encoder=False)
    elif configuration == "adapter":
        model.add_language_adapter(TARGET, bottleneck=ADAPTER_BOTTLENECK)
        model.set_active_languages([TARGET])
        model.set_trainable(adapters=[TARGET])
    elif configuration in ("fusion", *FUSION_VARIANTS):
        for lang in SOURCES:
            model.add_language_adapter(lang, bottleneck=128)
        model.add_language_adapter(TARGET, bottleneck=64)
        model.add_fusion([*SOURCES, TARGET], target_language=TARGET)
        model.set_trainable(adapters=[TARGET], fusion=True)
        if configuration == "fusion_recompute":
            model.set_fusion_recompute(True)
    elif configuration == "lora":
        model.add_language_adapter(TARGET, adapter_type="lora", lora_r=8)
        model.set_active_languages([TARGET])
        model.set_trainable(adapters=[TARGET])
    elif configuration in ("routed", "routed_reference"):
        for lang in ROUTED_LANGUAGES:
            model.add_language_adapter(lang, bottleneck=ADAPTER_BOTTLENECK)
        model.set_trainable(adapters=list(ROUTED_LANGUAGES))  # all trainable, all active: routed by lang_ids
    elif configuration == "lora_routed":
        for lang in ROUTED_LANGUAGES:
            model.add_language_adapter(lang, adapter_type="lora", lora_r=8)
        model.set_trainable(adapters=list(ROUTED_LANGUAGES))
    else:
        raise ValueError(f"unknown configuration {configuration!r}; allowed: {', '.join(ALL_CONFIGS)}")
    return model


def step_context(configuration: str) -> Any:
    """What a training step of ``configuration`` runs inside: ``reference_path()`` for ``fusion_reference``."""
    import contextlib

    from adaptspeech.adapters.layer_forward import reference_path

    return reference_path() if configuration.endswith("_reference") else contextlib.nullcontext()


def step_inputs(configuration: str, batch: int, device: Any = None) -> dict[str, Any]:
    """What a step of ``configuration`` passes to the model besides audio and labels: ``lang_ids`` [batch] for the
    routed configurations (utterance ``i`` in language ``ROUTED_LANGUAGES[i % 4]``; the model numbers its adapter
    languages in sorted order, as :data:`ROUTED_LANGUAGES` is)."""
    import torch

    if configuration not in ROUTED:
        return {}
    return {"lang_ids": torch.arange(batch, device=device) % len(ROUTED_LANGUAGES)}


def frames(samples: int) -> list[int]:
    """The output length of each convolution of the feature encoder for ``samples`` of audio (the last: encoder
    frames ``T``)."""
    lengths = []
    for kernel, stride in zip(BACKBONE["conv_kernel"], BACKBONE["conv_stride"], strict=True):
        samples = (samples - kernel) // stride + 1
        lengths.append(samples)
    return lengths


def multiply_adds(configuration: str, layers: int, batch: int, seconds: float) -> dict[str, float]:
    """The multiply-adds of one training step of ``configuration``, by part: the arithmetic bound.

    Counted are the products (matrix products and convolutions; element-wise work, normalisation, softmax and the
    optimizer are not), each forward product once, and in backward the input gradient where something below it
    trains and the weight gradient where its weight trains (each as many multiply-adds as the forward product).
    With ``M = batch x T`` frames, width ``d``, FFN ``f``, adapter width ``r``, ``N`` fused entries: an encoder
    layer's forward is ``4 M d^2`` (projections) ``+ 2 M T d`` (scores and context) ``+ 2 M d f``; an adapter's
    ``2 M d r``; the fusion's ``3 M d^2 + 2 M N d`` (the cheaper order: ``W_Q``, ``q W_K^T``, ``W_V`` and the two
    products over the entries). Full fine-tuning trains everything above the convolutional front end; the adapter
    and fusion configurations back-propagate input gradients through the frozen layers above layer 0 (nothing below
    the first adapter trains). The fusion variants compute the same function (``fusion_recompute`` adds one forward
    of the adapters and the fusion, counted).

    Returns:
        multiply-adds per part (``front_end``, ``projection``, ``pos_conv``, ``layers``, ``adapters``, ``fusion``,
        ``head``) and ``total``.
    """
    d, f = BACKBONE["hidden_size"], BACKBONE["intermediate_size"]
    lengths = frames(int(seconds * 16000))
    t = lengths[-1]
    m = batch * t
    channels = [1, *BACKBONE["conv_dim"]]
    front_end = batch * sum(
        n * channels[i] * channels[i + 1] * k for i, (n, k) in enumerate(zip(lengths, BACKBONE["conv_kernel"]))
    )
    projection = m * channels[-1] * d
    pos_conv = m * d * (d // BACKBONE["num_conv_pos_embedding_groups"]) * BACKBONE["num_conv_pos_embeddings"]
    layer = 4 * m * d * d + 2 * m * t * d + 2 * m * d * f
    head = m * d * 40
    parts = {"front_end": float(front_end)}
    if configuration == "full":  # forward, input and weight gradients (no input gradient into the frozen front end)
        parts.update(projection=2.0 * projection, pos_conv=3.0 * pos_conv, layers=3.0 * layers * layer, head=3.0 * head)
    else:  # frozen: forward everywhere, input gradients above layer 0 (layer 0's input needs none)
        parts.update(projection=float(projection), pos_conv=float(pos_conv), layers=(2.0 * layers - 1) * layer)
        parts["head"] = 2.0 * head
    if configuration in ("adapter", "routed", "routed_reference"):  # forward, weight and input gradients above
        # layer 0; routed: each utterance through one adapter of the same width, so the same count
        parts["adapters"] = (3.0 * layers - 1) * 2 * m * d * ADAPTER_BOTTLENECK
    if configuration in ("lora", "lora_routed"):  # r = 8 on q_proj and v_proj, trained: layer 0 back-propagates
        # down to them (routed: each utterance through one language's LoRA of the same rank, the same count)
        parts["layers"] += layer - 3 * m * d * d  # ... all but the input gradients of its q, k, v projections
        parts["adapters"] = (3.0 * layers - 1) * 2 * 2 * m * d * 8
    if configuration.startswith("fusion"):
        sources = 2 * m * d * 128 * len(SOURCES)
        target = 2 * m * d * 64
        entries = len(SOURCES) + 1
        fusion = 3 * m * d * d + 2 * m * entries * d
        recompute = configuration == "fusion_recompute"
        again = recompute * layers
        parts["adapters"] = (2.0 * layers - 1 + again) * sources + (3.0 * layers - 1 + again) * target
        # W_Q, W_K, W_V and the two entry products: forward, weight gradients, input gradients (W_Q's into z: not
        # at layer 0)
        parts["fusion"] = (3.0 + recompute) * layers * fusion - m * d * d
    parts["total"] = sum(parts.values())
    return parts


def measure(configuration: str, args: argparse.Namespace) -> dict[str, Any]:
    """Build ``configuration`` and time its training steps; returns the figures (one process per call).
    ``args.shape`` (optional): backbone settings over :data:`BACKBONE` (see :func:`build_model`)."""
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    rss_baseline = current_rss_bytes()  # the libraries' own memory (imported above) is the baseline, not the model's
    start = time.perf_counter()
    with device:  # built where it trains: a CUDA model is initialised on the GPU, not copied there
        model = build_model(configuration, args.layers, getattr(args, "shape", None))
    if args.freeze_feature_encoder and configuration not in W2V_BERT_CONFIGS:  # w2v-BERT has no feature encoder
        # transformers' Wav2Vec2FeatureEncoder keeps its own `_requires_grad` flag (True unless frozen through
        # freeze_feature_encoder): while it is True, training mode marks the waveform as requiring grad, so autograd
        # records the 7 convolutions, keeps their activations and back-propagates down to the audio even though no
        # parameter there trains. set_trainable(adapters=...) leaves the flag True; this clears it.
        model.freeze_feature_encoder()
    if args.checkpointing:  # as the recipe's activation_checkpointing: non-re-entrant, per encoder layer
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    build_seconds = time.perf_counter() - start
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-4, fused=bool(getattr(args, "fused", False)))
    generator = torch.Generator().manual_seed(0)
    samples = int(args.seconds * 16000)
    if configuration in W2V_BERT_CONFIGS:  # the stacked filterbank units of that audio: [batch, units, 160]
        from adaptspeech.data.feature_types import StackedFbankFeatures

        features = StackedFbankFeatures()
        units = features.num_units(samples)
        inputs = {"input_features": torch.randn(args.batch, units, features.feature_size, generator=generator)
                  .to(device)}
    else:
        units = samples
        inputs = {"input_values": torch.randn(args.batch, samples, generator=generator).to(device)}
    mask = torch.ones(args.batch, units, dtype=torch.long, device=device)
    labels = torch.randint(5, 40, (args.batch, max(1, int(10 * args.seconds))), generator=generator).to(device)
    extra = step_inputs(configuration, args.batch, device)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.dtype == "bf16")
    cuda = device.type == "cuda"
    rss_before = current_rss_bytes()
    peak_reset = reset_peak_rss()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    times: list[float] = []
    cpu_times: list[float] = []
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    for step in range(args.warmup + args.steps):
        if cuda:
            torch.cuda.synchronize()
        t0, c0 = time.perf_counter(), time.process_time()
        with autocast, step_context(configuration):
            loss = model(**inputs, attention_mask=mask, labels=labels, **extra).loss
            loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
        if step >= args.warmup:
            times.append(elapsed)
            cpu_times.append(cpu)
        print(
            f"  {configuration}: step {step + 1}/{args.warmup + args.steps} {elapsed:.2f} s, CPU time {cpu:.2f} s",
            file=sys.stderr,
            flush=True,
        )
    return {
        "config": configuration,
        "trainable": sum(p.numel() for p in trainable),
        "total": sum(p.numel() for p in model.parameters()),
        "step_seconds": times,
        "median_seconds": statistics.median(times),
        "audio_seconds_per_second": args.batch * args.seconds / statistics.median(times),
        "cpu_step_seconds": cpu_times,
        "median_cpu_seconds": statistics.median(cpu_times),
        "load_average": [load_before, os.getloadavg()[0] if hasattr(os, "getloadavg") else None],
        "rss_baseline_mib": rss_baseline / MIB,
        "rss_before_mib": rss_before / MIB,
        "peak_rss_mib": peak_rss_bytes() / MIB,
        "peak_above_baseline_mib": (peak_rss_bytes() - rss_baseline) / MIB,
        "peak_rss_reset": peak_reset,
        "peak_cuda_mib": torch.cuda.max_memory_allocated() / MIB if cuda else None,
        "build_seconds": build_seconds,
        "threads": torch.get_num_threads(),
    }


def _ratio(value: float | None, base: float | None) -> str:
    return "-" if value is None or not base else f"{value / base:.2f}x"


def table(results: list[dict[str, Any]], cuda: bool) -> str:
    """The markdown table: step time and peak memory with their ratios to full fine-tuning, and beside the time the
    arithmetic bound (:func:`multiply_adds`) as a ratio to full fine-tuning's."""
    base = next((r for r in results if r["config"] == "full" and "error" not in r), None)
    peak_key = _peak_key(cuda)
    peak_name = "peak CUDA memory MiB" if cuda else "peak RSS above the import baseline MiB"
    lines = [
        "| configuration | trainable params | G multiply-adds | bound vs full | s/step (median) | vs full "
        f"| CPU s/step (median) | vs full | peak RSS MiB | {peak_name} | vs full |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['config']} | failed: {r['error']} | | | | | | | | | |")
            continue
        macs = r.get("multiply_adds", {}).get("total")
        base_macs = base and base.get("multiply_adds", {}).get("total")
        lines.append(
            f"| {r['config']} | {r['trainable']:,} | {'-' if macs is None else f'{macs / 1e9:.0f}'} "
            f"| {_ratio(macs, base_macs)} | {r['median_seconds']:.2f} "
            f"| {_ratio(r['median_seconds'], base and base['median_seconds'])} | {r['median_cpu_seconds']:.2f} "
            f"| {_ratio(r['median_cpu_seconds'], base and base['median_cpu_seconds'])} | {r['peak_rss_mib']:,.0f} "
            f"| {r[peak_key]:,.0f} | {_ratio(r[peak_key], base and base[peak_key])} |"
        )
    return "\n".join(lines)


def _peak_key(cuda: bool) -> str:
    """The memory figure the ratios use: the CUDA allocator's peak, or on the CPU the peak RSS minus the process's
    RSS once torch, transformers and adaptspeech are imported (what the model, its gradients, the optimizer state
    and the activations add; the ~0.5 GiB of libraries would otherwise dilute every ratio)."""
    return "peak_cuda_mib" if cuda else "peak_above_baseline_mib"


def _verdict(name: str, ratio: float, target: float) -> str:
    return f"{name} <= {target}x full fine-tuning: {ratio:.2f}x " + ("met" if ratio <= target else "MISSED")


def verdicts(results: list[dict[str, Any]], cuda: bool) -> list[str]:
    """The targets for the adapter-only and the fusion configurations: met or missed (the fusion's time beside its
    arithmetic bound)."""
    by = {r["config"]: r for r in results if "error" not in r}
    if "full" not in by:
        return []
    full = by["full"]
    peak_key = _peak_key(cuda)
    lines = []
    if "adapter" in by:
        adapter = by["adapter"]
        lines += [
            _verdict("adapter-only step time (wall)", adapter["median_seconds"] / full["median_seconds"],
                     TARGETS["time"])
            + ", "
            + _verdict("CPU time", adapter["median_cpu_seconds"] / full["median_cpu_seconds"], TARGETS["time"]),
            _verdict("adapter-only peak memory", adapter[peak_key] / full[peak_key], TARGETS["memory"]),
        ]
    for name in ("lora", *ROUTED):
        if name in by:
            r = by[name]
            bound = r["multiply_adds"]["total"] / full["multiply_adds"]["total"]
            lines.append(
                f"{name} step time: {r['median_seconds'] / full['median_seconds']:.2f}x full fine-tuning's (wall), "
                f"{r['median_cpu_seconds'] / full['median_cpu_seconds']:.2f}x (CPU time); arithmetic bound "
                f"{bound:.2f}x; peak memory {r[peak_key] / full[peak_key]:.2f}x"
            )
    for name in ("fusion", *FUSION_VARIANTS):
        if name not in by:
            continue
        r = by[name]
        bound = r["multiply_adds"]["total"] / full["multiply_adds"]["total"]
        lines += [
            _verdict(f"{name} step time (wall)", r["median_seconds"] / full["median_seconds"], FUSION_TARGETS["time"])
            + ", "
            + _verdict("CPU time", r["median_cpu_seconds"] / full["median_cpu_seconds"], FUSION_TARGETS["time"])
            + f" (arithmetic bound {bound:.2f}x)",
            _verdict(f"{name} peak memory", r[peak_key] / full[peak_key], FUSION_TARGETS["memory"]),
        ]
    return lines


def w2v_bert_ratios(results: list[dict[str, Any]], cuda: bool) -> list[str]:
    """Each w2v-BERT configuration's step time (wall and CPU) and peak memory as ratios to w2v-BERT's full
    fine-tuning and to XLS-R's (``full``), where those were measured."""
    by = {r["config"]: r for r in results if "error" not in r}
    peak_key = _peak_key(cuda)
    lines = []
    for name in W2V_BERT_CONFIGS:
        if name not in by:
            continue
        r = by[name]
        for base_name, base_label in ((W2V_BERT_PREFIX + "full", "w2v-BERT full fine-tuning"),
                                      ("full", "XLS-R 300M full fine-tuning")):
            if base_name in by and base_name != name:
                base = by[base_name]
                lines.append(
                    f"{name} vs {base_label}: step time {_ratio(r['median_seconds'], base['median_seconds'])} "
                    f"(wall), {_ratio(r['median_cpu_seconds'], base['median_cpu_seconds'])} (CPU time); peak memory "
                    f"{_ratio(r[peak_key], base[peak_key])}"
                )
    return lines


def run_worker(configuration: str, label: str, args: argparse.Namespace) -> dict[str, Any]:
    """Measure ``configuration`` in its own Python process; its figures, or ``{"config", "error"}``."""
    print(f"[{label}] building and training ...", flush=True)
    t0 = time.perf_counter()
    command = [sys.executable, __file__, "--worker", configuration, "--device", args.device, "--dtype", args.dtype]
    for option in ("layers", "batch", "seconds", "steps", "warmup", "threads"):
        if getattr(args, option) is not None:
            command += [f"--{option}", str(getattr(args, option))]
    for flag in ("checkpointing", "freeze_feature_encoder", "fused"):
        if getattr(args, flag):
            command.append(f"--{flag.replace('_', '-')}")
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        return {"config": configuration, "error": f"exit code {done.returncode} (see the messages above)"}
    r = json.loads(done.stdout.strip().splitlines()[-1])
    print(
        f"[{label}] {r['median_seconds']:.2f} s/step ({r['median_cpu_seconds']:.2f} s CPU time), "
        f"peak RSS {r['peak_rss_mib']:,.0f} MiB, {time.perf_counter() - t0:.0f} s; 1-min load average "
        f"{r['load_average'][0]:.1f} -> {r['load_average'][1]:.1f} on {os.cpu_count()} CPUs",
        flush=True,
    )
    return r


def merge_rounds(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """One configuration's figures over its rounds (``--rounds``): the median of all its timed steps, the median
    of its peak memories; the first failure if any round failed."""
    failed = next((r for r in rounds if "error" in r), None)
    if failed is not None or len(rounds) == 1:
        return failed or rounds[0]
    merged = dict(rounds[0])
    for key, median_key in (("step_seconds", "median_seconds"), ("cpu_step_seconds", "median_cpu_seconds")):
        merged[key] = [value for r in rounds for value in r[key]]
        merged[median_key] = statistics.median(merged[key])
    for key in ("peak_rss_mib", "peak_above_baseline_mib", "rss_baseline_mib", "rss_before_mib"):
        merged[key] = statistics.median(r[key] for r in rounds)
    if merged.get("peak_cuda_mib") is not None:
        merged["peak_cuda_mib"] = statistics.median(r["peak_cuda_mib"] for r in rounds)
    merged["audio_seconds_per_second"] = rounds[0]["audio_seconds_per_second"] * rounds[0]["median_seconds"] / (
        merged["median_seconds"]
    )
    merged["load_average"] = [rounds[0]["load_average"][0], rounds[-1]["load_average"][1]]
    merged["rounds"] = len(rounds)
    return merged


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=24, help="encoder layers (XLS-R 300M: 24)")
    parser.add_argument("--batch", type=int, default=4, help="utterances per step")
    parser.add_argument("--seconds", type=float, default=4.0, help="seconds of 16 kHz audio per utterance")
    parser.add_argument("--steps", type=int, default=3, help="timed steps (the median is reported)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    parser.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32", help="bf16: autocast, fp32 weights")
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: cuda when available)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument(
        "--checkpointing", action="store_true", help="activation checkpointing of every encoder layer (non-re-entrant)"
    )
    parser.add_argument(
        "--freeze-feature-encoder",
        action="store_true",
        help="call model.freeze_feature_encoder() in every configuration (full fine-tuning does already): no "
        "autograd through the convolutional front end",
    )
    parser.add_argument("--fused", action="store_true", help="torch.optim.AdamW(fused=True) (CUDA)")
    parser.add_argument(
        "--configs", default=",".join(CONFIGS), help=f"among {', '.join(ALL_CONFIGS)} (the last two: the peer)"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="measure the configurations this many times, interleaved (full, fusion, full, fusion, ...): on a "
        "machine shared with other work the ratios then see the same changing load",
    )
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the figures here")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.device is None:
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.worker:
        print(json.dumps(measure(args.worker, args)))
        return 0

    configs = [c for c in args.configs.split(",") if c]
    unknown = sorted(set(configs) - set(ALL_CONFIGS))
    if unknown:
        parser.error(f"--configs: unknown {', '.join(unknown)}; allowed: {', '.join(ALL_CONFIGS)}")
    cuda = args.device.startswith("cuda")
    print(
        f"XLS-R 300M{' and w2v-BERT 2.0' if set(configs) & set(W2V_BERT_CONFIGS) else ''} shape ({args.layers} "
        f"layers), batch {args.batch} x {args.seconds:g} s, {args.dtype}, "
        f"activation checkpointing {'on' if args.checkpointing else 'off'}, "
        f"{'feature encoder frozen everywhere, ' if args.freeze_feature_encoder else ''}"
        f"{args.device}, {args.warmup} warm-up + {args.steps} timed steps, one process per configuration; "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
        flush=True,
    )
    runs: dict[str, list[dict[str, Any]]] = {configuration: [] for configuration in configs}
    start = time.perf_counter()
    for round_index in range(args.rounds):
        for configuration in configs:
            label = configuration if args.rounds == 1 else f"{configuration}, round {round_index + 1}/{args.rounds}"
            runs[configuration].append(run_worker(configuration, label, args))
    results = [merge_rounds(runs[configuration]) for configuration in configs]
    for r in results:
        if "error" not in r and r["config"] not in PEERS + W2V_BERT_CONFIGS:
            r["multiply_adds"] = multiply_adds(r["config"], args.layers, args.batch, args.seconds)
    print()
    print(table(results, cuda))
    for line in verdicts(results, cuda) + w2v_bert_ratios(results, cuda):
        print(line)
    print(f"\nwall time {time.perf_counter() - start:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "results": results}, indent=1) + "\n")
    return 0 if all("error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
