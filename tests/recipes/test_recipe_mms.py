"""The MMS SimAdapter recipe (``recipes/mms_simadapter``) offline, at toy scale: a tiny MMS-shaped checkpoint built and
saved by transformers stands in for ``facebook/mms-1b-all`` (with MMS adapter files for the recipe's source
languages), a tiny prepared target corpus for Common Voice; ``import_sources.py`` and the recipe's two stage files
run as committed, with only paths and sizes overridden."""

import importlib.util
import json
from pathlib import Path

import torch
from datasets import Dataset, DatasetDict
from helpers.paths import RECIPES
from safetensors.torch import load_file, save_file
from transformers import Wav2Vec2Config, Wav2Vec2ForCTC

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.data.prepared_corpus import COMPLETE_MARKER
from adaptspeech.data.processor import build_processor
from adaptspeech.overrides import apply_overrides, load_yaml
from adaptspeech.testing import TINY_BACKBONES
from adaptspeech.training.stage import run_stage

RECIPE = RECIPES / "mms_simadapter"
VOCAB = {"[PAD]": 0, "[UNK]": 1, "<s>": 2, "</s>": 3, "|": 4, **{c: 5 + i for i, c in enumerate("abcdefg")}}


def recipe_module():
    spec = importlib.util.spec_from_file_location("import_sources", RECIPE / "import_sources.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def mms_config(vocab_size: int) -> Wav2Vec2Config:
    return Wav2Vec2Config(**{**TINY_BACKBONES["wav2vec2"], "do_stable_layer_norm": True, "adapter_attn_dim": 4,
                             "vocab_size": vocab_size})


def fake_mms_checkpoint(folder: Path, sources: list[str]) -> Path:
    """A tiny MMS checkpoint (built-in adapter: eng) and one MMS adapter file per source language."""
    torch.manual_seed(0)
    Wav2Vec2ForCTC(mms_config(10)).save_pretrained(folder)
    for seed, language in enumerate(sources, start=1):
        torch.manual_seed(seed)
        model = Wav2Vec2ForCTC(mms_config(8 + seed))
        with torch.no_grad():
            for param in model._get_adapters().values():
                param.add_(0.1 * torch.randn_like(param))
        tensors = {k: v.detach().contiguous() for k, v in model._get_adapters().items()}
        save_file(tensors, str(folder / f"adapter.{language}.safetensors"))
    return folder


def prepared_corpus(folder: Path, language: str) -> Path:
    """``adaptspeech prepare``'s layout: processor/ (waveform input) and dataset/ (train, dev, test)."""
    build_processor(VOCAB, folder / "processor", feature_type="waveform")
    gen = torch.Generator().manual_seed(0)

    def rows(n):
        out = []
        for _ in range(n):
            samples = int(torch.randint(3000, 4000, (), generator=gen))
            labels = torch.randint(5, 12, (3,), generator=gen).tolist()
            out.append({"input_values": torch.randn(samples, generator=gen).tolist(), "labels": labels,
                        "text": "".join("abcdefg"[i - 5] for i in labels), "language": language,
                        "input_length": samples, "duration": samples / 16000, "client_id": "x"})
        return Dataset.from_list(out)

    DatasetDict({"train": rows(8), "dev": rows(2), "test": rows(2)}).save_to_disk(str(folder / "dataset"))
    (folder / COMPLETE_MARKER).write_text("{}\n")  # what prepare writes last: the folder is complete
    return folder


def toy(spec: dict, **paths: str) -> dict:
    overrides = [f"{key}={value}" for key, value in paths.items()]
    overrides += [
        "training.max_steps=2", "training.save_steps=2", "training.per_device_train_batch_size=4",
        "training.per_device_eval_batch_size=4", "training.gradient_accumulation_steps=1", "training.bf16=false",
        "training.activation_checkpointing=false", "training.dataloader_num_workers=0", "training.eval_strategy=no",
        "training.logging_steps=1", "training.warmup_steps=0", "training.use_cpu=true", "evaluation.batch_size=4",
    ]
    return apply_overrides(spec, overrides)


def test_the_recipe_runs_offline_on_a_tiny_mms_checkpoint(tmp_path):
    fusion_spec = load_yaml(RECIPE / "stage_fusion.yaml")
    adapter_spec = load_yaml(RECIPE / "stage_target_adapter.yaml")
    target = fusion_spec["model"]["fusion"]["target_language"]
    sources = [lang for lang in fusion_spec["model"]["fusion"]["languages"] if lang != target]
    assert adapter_spec["data"]["train_languages"] == [target] and target in adapter_spec["model"]["add_adapters"]
    checkpoint = fake_mms_checkpoint(tmp_path / "mms", sources)
    prepared = prepared_corpus(tmp_path / "prepared", target)

    # stage 0: import the sources (the command line of the README, in-process)
    recipe_module().main(["--checkpoint", str(checkpoint), "--mms-language", "eng", "--sources", ",".join(sources),
                          "--processor", str(prepared / "processor"), "--out", str(tmp_path / "sources")])
    imported = AdaptSpeechForCTC.from_pretrained(tmp_path / "sources")
    assert imported.adapter_languages == sorted(sources) and imported.config.language_heads == {}
    assert imported.config.vocab_size == len(VOCAB)

    # stage 1: the target adapter (+ the shared head); stage 2: SimAdapter over the sources and the target
    first = run_stage(toy(adapter_spec, **{"data.prepared_dir": prepared, "output_dir": tmp_path / "target_adapter",
                                           "model.path": tmp_path / "sources"}), progress=False)
    second = run_stage(toy(fusion_spec, **{"data.prepared_dir": prepared, "output_dir": tmp_path / "fusion",
                                           "model.path": first.model_dir}), progress=False)
    assert second.eval is not None
    trained = AdaptSpeechForCTC.from_pretrained(second.model_dir)
    assert trained.config.fusion_active and trained.config.fusion["languages"] == [*sources, target]
    groups = second.trainable["groups"]
    assert {g for g, v in groups.items() if v["trainable"]} == {f"adapter:{target}", "fusion"}

    # the sources are still MMS's adapters, tensor for tensor (the frozen encoder likewise)
    for language in sources:
        original = load_file(checkpoint / f"adapter.{language}.safetensors")
        ours = trained._adapter_type_of(language).tensors(trained, language)
        for key, tensor in ours.items():
            layer, module, param = key.split(".")[1:]
            part = {"layer_norm": "norm", "down": "linear_1", "up": "linear_2"}[module]
            assert torch.equal(tensor, original[f"wav2vec2.encoder.layers.{layer}.adapter_layer.{part}.{param}"])
    reference = Wav2Vec2ForCTC.from_pretrained(checkpoint).wav2vec2.state_dict()
    backbone = trained.backbone.state_dict()
    assert all(torch.equal(backbone[k], v) for k, v in reference.items() if "adapter_layer" not in k)
    summary = json.loads((tmp_path / "fusion" / "stage_summary.json").read_text())
    assert summary["active_languages"] == [*sources, target]
