"""AdaptSpeechTrainer on the real transformers.Trainer: loss terms logged, adapter-only checkpoints, per-language
WER/CER at evaluation, and resume_from_checkpoint reproducing an uninterrupted run."""

import json

import pytest
import torch
from datasets import Dataset
from safetensors.torch import load_file
from transformers import TrainerCallback, TrainingArguments, Wav2Vec2CTCTokenizer

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.testing import tiny_config
from adaptspeech.training import AdaptSpeechTrainer, argmax_logits, build_compute_metrics, collapse_ctc

LANGS = ["cs", "pl", "ro"]
CHARS = list("abcdefg")


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    vocab = {"[PAD]": 0, "[UNK]": 1, "<s>": 2, "</s>": 3, "|": 4, **{c: 5 + i for i, c in enumerate(CHARS)}}
    path = tmp_path_factory.mktemp("tok") / "vocab.json"
    path.write_text(json.dumps(vocab))
    return Wav2Vec2CTCTokenizer(str(path), unk_token="[UNK]", pad_token="[PAD]", word_delimiter_token="|")


def make_dataset(n=12, seed=0):
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(n):
        frames = int(torch.randint(40, 60, (), generator=gen))
        rows.append(
            {
                "input_features": torch.randn(frames, 16, generator=gen).tolist(),
                "labels": torch.randint(5, 12, (4,), generator=gen).tolist(),
                "lang_ids": i % 3,
            }
        )
    return Dataset.from_list(rows)


def collate(rows):
    longest = max(len(r["input_features"]) for r in rows)
    feats = torch.zeros(len(rows), longest, 16)
    mask = torch.zeros(len(rows), longest, dtype=torch.bool)
    for i, r in enumerate(rows):
        x = torch.tensor(r["input_features"])
        feats[i, : len(x)] = x
        mask[i, : len(x)] = True
    labels = torch.nn.utils.rnn.pad_sequence(
        [torch.tensor(r["labels"]) for r in rows], batch_first=True, padding_value=-100
    )
    return {
        "input_features": feats,
        "attention_mask": mask,
        "labels": labels,
        "lang_ids": torch.tensor([r["lang_ids"] for r in rows]),
    }


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
    base = dict(
        output_dir=str(out),
        per_device_train_batch_size=4,
        per_device_eval_batch_size=4,
        max_steps=6,
        learning_rate=1e-2,
        logging_steps=2,
        save_steps=3,
        save_strategy="steps",
        report_to=[],
        seed=7,
        data_seed=7,
        use_cpu=True,
        disable_tqdm=True,
        label_names=["labels", "lang_ids"],
        dataloader_num_workers=0,
    )
    base.update(kw)
    return TrainingArguments(**base)


def test_collapse_ctc():
    assert collapse_ctc([0, 5, 5, 0, 5, 6, -100, -100], blank_id=0) == [5, 5, 6]


def test_trainer_logs_terms_writes_adapter_checkpoints_and_per_language_metrics(tmp_path, tokenizer):
    model = fused_model()
    trainer = AdaptSpeechTrainer(
        model=model,
        args=args(tmp_path),
        train_dataset=make_dataset(),
        eval_dataset=make_dataset(6, seed=1),
        data_collator=collate,
        compute_metrics=build_compute_metrics(tokenizer, model.adapter_languages),
        preprocess_logits_for_metrics=argmax_logits,
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
    for key in ("eval_wer", "eval_cer", "eval_wer_ro", "eval_cer_cs", "eval_cer_pl"):
        assert key in metrics and metrics[key] >= 0

    # the same figure by hand: greedy CTC over each utterance's real frames only (padding frames must not count)
    from adaptspeech.metrics import compute_error_rates

    model.eval()
    rows = make_dataset(6, seed=1)
    hyps, refs, langs = [], [], []
    with torch.no_grad():
        for start in range(0, len(rows), 4):
            batch = collate([rows[i] for i in range(start, min(len(rows), start + 4))])
            out = model(**{k: v for k, v in batch.items() if k != "labels"})
            for b in range(out.logits.shape[0]):
                ids = out.logits[b, : out.frame_lengths[b]].argmax(-1).tolist()
                hyps.append(tokenizer.decode(collapse_ctc(ids, 0), group_tokens=False))
                refs.append(tokenizer.decode([i for i in batch["labels"][b].tolist() if i >= 0], group_tokens=False))
                langs.append(model.adapter_languages[int(batch["lang_ids"][b])])
    by_hand = compute_error_rates(hyps, refs, languages=langs)
    assert metrics["eval_cer"] == pytest.approx(by_hand["overall"]["cer"])
    assert metrics["eval_cer_ro"] == pytest.approx(by_hand["per_language"]["ro"]["cer"])


class StopAt(TrainerCallback):
    def __init__(self, step):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            control.should_training_stop = True
        return control


def test_resume_from_checkpoint_matches_an_uninterrupted_run(tmp_path, tokenizer):
    full = fused_model()
    AdaptSpeechTrainer(
        model=full, args=args(tmp_path / "full"), train_dataset=make_dataset(), data_collator=collate
    ).train()

    interrupted = fused_model()
    AdaptSpeechTrainer(
        model=interrupted,
        args=args(tmp_path / "cut"),
        train_dataset=make_dataset(),
        data_collator=collate,
        callbacks=[StopAt(3)],
    ).train()
    assert (tmp_path / "cut" / "checkpoint-3").is_dir()

    resumed = fused_model()
    trainer = AdaptSpeechTrainer(
        model=resumed, args=args(tmp_path / "cut"), train_dataset=make_dataset(), data_collator=collate
    )
    trainer.train(resume_from_checkpoint=str(tmp_path / "cut" / "checkpoint-3"))
    assert trainer.state.global_step == 6
    reference = full.state_dict()
    for name, value in resumed.state_dict().items():
        assert torch.allclose(value, reference[name], atol=1e-6), name
    changed = [n for n, p in full.named_parameters() if p.requires_grad]
    assert changed  # the comparison covers trained tensors
