"""AdaptSpeechTrainer on the real transformers.Trainer: loss terms logged, adapter-only checkpoints, per-language
WER/CER at evaluation, and resume_from_checkpoint reproducing an uninterrupted run."""

import pytest
import torch
from helpers.training import LANGS, CountSteps, StopAt, make_dataset, training_args
from safetensors.torch import load_file

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.data import DataCollatorCTCWithPadding
from adaptspeech.evaluation import evaluate_dataset
from adaptspeech.testing import tiny_config
from adaptspeech.training import AdaptSpeechTrainer, DecodingEvaluation


def fused_model():
    torch.manual_seed(0)
    config = tiny_config(
        "fbank_conformer",
        adapter_languages=LANGS,
        adapter_defaults={"bottleneck": 8},
        backbone_overrides={"hidden_dropout": 0.1},
    )
    model = AdaptSpeechForCTC(config)
    model.add_fusion(LANGS, target_language="ro", guide_weight=0.5, guide_decay=0.9)
    model.set_trainable(adapters=["ro"], fusion=True)
    return model


def args(out, **kw):
    return training_args(out, save_steps=3, save_strategy="steps", **kw)


def test_trainer_logs_terms_writes_adapter_checkpoints_and_per_language_metrics(tmp_path, processor):
    model = fused_model()
    collator = DataCollatorCTCWithPadding(processor, feature_type="fbank")
    trainer = AdaptSpeechTrainer(
        model=model,
        args=args(tmp_path),
        train_dataset=make_dataset(),
        eval_dataset=make_dataset(6, seed=1),
        data_collator=collator,
        decoding=DecodingEvaluation(processor, method="ctc_greedy", batch_size=4),
    )
    trainer.train()
    train_logs = [entry for entry in trainer.state.log_history if "loss" in entry and "train_runtime" not in entry]
    assert len(train_logs) == 3
    for entry in train_logs:
        assert {"loss_ctc", "loss_fusion_reg", "loss_fusion_guide"} <= set(entry)
        assert entry["loss_fusion_reg"] >= 0
    # the guide weight follows guide_weight * decay ** step
    assert model.fusion_guide_weight == pytest.approx(0.5 * 0.9**5)

    checkpoint = tmp_path / "checkpoint-3"
    trainable = load_file(checkpoint / "trainable.safetensors")
    expected = {n for n, p in model.named_parameters() if p.requires_grad}
    assert set(trainable) == expected
    assert (checkpoint / "adapters" / "adapter.ro.safetensors").is_file()
    assert (checkpoint / "adapters" / "fusion.safetensors").is_file()
    assert not (checkpoint / "adapters" / "adapter.cs.safetensors").exists()  # frozen: not an output of the run

    metrics = trainer.evaluate()
    assert metrics["eval_loss"] > 0
    # one engine: the figures of `adaptspeech evaluate` (evaluate_dataset) for the same weights, split and decoder
    reference = evaluate_dataset(model, make_dataset(6, seed=1), processor, method="ctc_greedy", batch_size=4)
    assert metrics["eval_cer"] == reference["overall"]["cer"]
    assert metrics["eval_wer"] == reference["overall"]["wer"]
    for lang in LANGS:
        assert metrics[f"eval_cer_{lang}"] == reference["per_language"][lang]["cer"]
        assert metrics[f"eval_wer_{lang}"] == reference["per_language"][lang]["wer"]


@pytest.mark.parametrize("rows", [12, 16])  # 3 steps an epoch (6 = 2 epochs), 4 steps an epoch (6 = 1.5 epochs)
def test_resume_from_checkpoint_matches_an_uninterrupted_run(tmp_path, processor, rows):
    collate = DataCollatorCTCWithPadding(processor, feature_type="fbank")
    full = fused_model()
    AdaptSpeechTrainer(
        model=full, args=args(tmp_path / "full"), train_dataset=make_dataset(rows), data_collator=collate
    ).train()

    interrupted = fused_model()
    AdaptSpeechTrainer(
        model=interrupted,
        args=args(tmp_path / "cut"),
        train_dataset=make_dataset(rows),
        data_collator=collate,
        callbacks=[StopAt(3)],
    ).train()
    assert (tmp_path / "cut" / "checkpoint-3").is_dir()

    resumed = fused_model()
    steps = CountSteps()
    trainer = AdaptSpeechTrainer(
        model=resumed, args=args(tmp_path / "cut"), train_dataset=make_dataset(rows), data_collator=collate,
        callbacks=[steps],
    )
    trainer.train(resume_from_checkpoint=str(tmp_path / "cut" / "checkpoint-3"))
    assert trainer.state.global_step == 6 and steps.steps == [4, 5, 6]
    reference = full.state_dict()
    for name, value in resumed.state_dict().items():
        assert torch.allclose(value, reference[name], atol=1e-6), name
    changed = [n for n, p in full.named_parameters() if p.requires_grad]
    assert changed  # the comparison covers trained tensors


@pytest.mark.parametrize("rows", [12, 16])
def test_resuming_a_finished_run_trains_no_step_and_keeps_its_last_checkpoint(tmp_path, processor, rows):
    """Before: with 16 rows (4 steps an epoch: max_steps 6 ends mid-epoch) the stock Trainer resumed from the final
    checkpoint-6 trained a step 7 (it stops only after a step) and, keeping one checkpoint, saved checkpoint-7 in place
    of checkpoint-6. Now the run ends at step 6 without a step: the weights are checkpoint-6's, the folder unchanged."""
    collate = DataCollatorCTCWithPadding(processor, feature_type="fbank")
    out = tmp_path / "run"
    finished = fused_model()
    AdaptSpeechTrainer(
        model=finished, args=args(out, save_total_limit=1), train_dataset=make_dataset(rows), data_collator=collate
    ).train()
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint-6"]
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}

    again = fused_model()
    steps = CountSteps()
    trainer = AdaptSpeechTrainer(
        model=again, args=args(out, save_total_limit=1), train_dataset=make_dataset(rows), data_collator=collate,
        callbacks=[steps],
    )
    result = trainer.train(resume_from_checkpoint=str(out / "checkpoint-6"))
    assert steps.steps == [] and trainer.state.global_step == 6 and result.global_step == 6
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    reference = finished.state_dict()
    for name, value in again.state_dict().items():
        assert torch.equal(value, reference[name]), name
    # a budget lowered below the checkpoint's step: taken as it is, no step either
    lowered = CountSteps()
    trainer = AdaptSpeechTrainer(
        model=fused_model(), args=args(out, save_total_limit=1, max_steps=5), train_dataset=make_dataset(rows),
        data_collator=collate, callbacks=[lowered],
    )
    assert trainer.train(resume_from_checkpoint=str(out / "checkpoint-6")).global_step == 6 and lowered.steps == []
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
