"""The adapter alone's self-training student with LoRA beside its bottleneck adapter (``self_training.adapter_lora``):
its stage spec, what it trains (the language's bottleneck adapter and LoRA, nothing of the model it starts from), its
trainable parameter count, and the saved student read back bit-identically; on a tiny fbank model and a pool of 12
synthetic clips labelled by a random model."""

from __future__ import annotations

import json

import pytest
import torch
from helpers.cli import prepare_ro_with_pool
from helpers.model_folders import labelling_model

from adaptspeech.cli import main
from adaptspeech.recipes import RecipeError
from adaptspeech.recipes.simadapter.self_training import student_spec_from
from adaptspeech.recipes.simadapter.self_training_settings import SelfTrainingSettings

RANK = 4
BOTTLENECK = 8


@pytest.fixture(scope="module")
def student(tmp_path_factory):
    """ro: 20 labelled clips, a pool of 12 labelled by a random model; the adapter alone's system (a ``cs`` model
    given a ``ro`` bottleneck adapter) and its student with ``adapter_lora: 4``, trained 4 steps."""
    from adaptspeech.training.stage import run_stage

    root = tmp_path_factory.mktemp("lora_student")
    prepared, pool = prepare_ro_with_pool(root)
    start = labelling_model(root / "start", prepared / "processor", languages=("cs",))
    assert main(["pseudo-label", "--model", str(start), "--data", str(pool), "--out", str(root / "labels"),
                 "--target", str(prepared), "--keep-fraction", "1", "--no-progress"]) == 0
    system = {
        "name": "target_adapter", "output_dir": str(root / "system"), "seed": 0,
        "data": {"prepared_dir": str(prepared), "train_languages": ["ro"]},
        "model": {"init": "pretrained", "path": str(start), "add_adapters": {"ro": {"bottleneck": BOTTLENECK}},
                  "trainable": {"backbone": False, "head": False, "adapters": ["ro"]}},
        "training": {"max_steps": 2, "per_device_train_batch_size": 4, "learning_rate": 0.01, "logging_steps": 1,
                     "use_cpu": True},
        "evaluation": {"batch_size": 16},
    }
    settings = SelfTrainingSettings(adapter_lora=RANK, speed_perturb=None, share=0.5)
    spec = student_spec_from(system, settings, "target_adapter_student", root / "labels", root / "student",
                             system="target_adapter")
    result = run_stage(spec, progress=False)
    return root, start, spec, result


def test_the_student_spec_gives_the_adapter_lora(student):
    _, _, spec, _ = student
    assert spec["model"]["add_adapters"] == {"ro": {"bottleneck": BOTTLENECK, "adapter_type": "bottleneck_lora",
                                                    "lora_r": RANK, "lora_alpha": 2 * RANK}}
    assert spec["training"]["max_steps"] == 4  # steps_scale 2


def _base_name(name: str) -> str:
    """A student parameter's name in the model it started from (peft's wrapper adds ``base_layer``)."""
    return name.replace(".base_layer.", ".")


def test_the_student_trains_its_adapter_and_lora_and_nothing_else(student):
    from adaptspeech.modeling import AdaptSpeechForCTC

    root, start, _, result = student
    before = dict(AdaptSpeechForCTC.from_pretrained(start).named_parameters())
    after = dict(AdaptSpeechForCTC.from_pretrained(root / "student" / "model").named_parameters())
    lora = {n: p for n, p in after.items() if ".lora_A.ro." in n or ".lora_B.ro." in n}
    bottleneck = {n: p for n, p in after.items() if ".language_adapters.adapters.ro." in n}
    # LoRA on q and v of both layers, the bottleneck adapter of both layers
    assert len(lora) == 2 * 2 * 2 and len(bottleneck) == 2 * 4
    assert all(p.abs().sum() > 0 for n, p in lora.items() if ".lora_B." in n)  # lora_B starts at zero: it trained
    counts = result.trainable["groups"]["adapter:ro"]
    assert counts["trainable"] == counts["total"] == sum(p.numel() for p in [*lora.values(), *bottleneck.values()])
    assert result.trainable["trainable"] == counts["trainable"]
    summary = json.loads((root / "student" / "stage_summary.json").read_text())
    assert summary["trainable"]["trainable"] == counts["trainable"]
    rest = {_base_name(n): p for n, p in after.items() if n not in lora and n not in bottleneck}
    assert set(rest) == set(before)  # the backbone, the head and the cs adapter, nothing else
    changed = [n for n, p in rest.items() if not torch.equal(p, before[n])]
    assert changed == []


def test_the_saved_student_reads_back_bit_identically(student, tmp_path):
    from adaptspeech.modeling import AdaptSpeechForCTC
    from adaptspeech.testing import tiny_inputs

    root, _, _, result = student
    model = AdaptSpeechForCTC.from_pretrained(root / "student" / "model").eval()
    assert model.config.adapters["ro"].adapter_type == "bottleneck_lora"
    assert model.config.adapters["ro"].lora_r == RANK and model.config.adapters["ro"].bottleneck == BOTTLENECK
    model.set_active_languages(["ro"])
    inputs = tiny_inputs(model.config)
    trained = result.model.eval()
    trained.set_active_languages(["ro"])
    with torch.no_grad():
        assert torch.equal(model(**inputs).logits, trained(**inputs).logits)
    # saved again (adapter file and whole folder): the same tensors
    model.save_adapter("ro", tmp_path / "adapter")
    again = AdaptSpeechForCTC.from_pretrained(root / "student" / "model")
    with torch.no_grad():
        for tensor in again._adapter_type_of("ro").tensors(again, "ro").values():
            tensor.zero_()
    again.load_adapter("ro", tmp_path / "adapter")
    again.eval().set_active_languages(["ro"])
    with torch.no_grad():
        assert torch.equal(again(**inputs).logits, trained(**inputs).logits)


def test_lora_beside_an_adapter_of_another_type_is_refused_in_one_line(tmp_path):
    system = {"name": "target_adapter", "output_dir": str(tmp_path / "s"), "data": {"prepared_dir": str(tmp_path)},
              "model": {"init": "config", "add_adapters": {"ro": {"adapter_type": "lora", "lora_r": 8}}},
              "training": {"max_steps": 2}}
    with pytest.raises(RecipeError) as err:
        student_spec_from(system, SelfTrainingSettings(adapter_lora=RANK), "s", tmp_path, tmp_path / "out",
                          system="target_adapter")
    assert str(err.value) == ("self_training.adapter_lora: the stage's adapter for 'ro' is of type 'lora'; LoRA is "
                              "added beside a bottleneck adapter only")
