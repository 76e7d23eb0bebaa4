"""Half precision: everything the toolkit adds to a bf16 model is bf16 and on the model's device, and a real
``transformers.Trainer`` step with ``bf16=True`` runs for every head and every attention kind."""

import pytest
import torch
from datasets import Dataset
from transformers import Trainer, TrainingArguments, Wav2Vec2Model

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.attention import ATTENTION
from adaptspeech.heads import HEADS, get_head
from adaptspeech.testing import tiny_config, tiny_inputs

LAS = {"decoder_hidden": 16, "embedding_dim": 8, "attention_dim": 8}
EXTRA = {"ldsa": {"context_width": 3}}
LABELS = torch.tensor([[4, 5, 6], [5, 6, -100]])


def dtypes(model, marker):
    return {p.dtype for n, p in model.named_parameters() if marker in n}


@pytest.mark.parametrize("backbone_type", ["wav2vec2", "fbank_conformer"])
def test_adapters_lora_and_fusion_added_to_a_bf16_model_are_bf16_and_run(backbone_type):
    torch.manual_seed(0)
    config = tiny_config(backbone_type, adapter_languages=["ro"], adapter_defaults={"bottleneck": 8})
    model = AdaptSpeechForCTC(config).to(torch.bfloat16)
    model.add_language_adapter("cs", bottleneck=8)
    model.add_language_adapter("uk", adapter_type="lora", lora_r=4)
    model.add_fusion(["ro", "cs"], target_language="cs")
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert dtypes(model, ".adapters.cs.") == dtypes(model, ".fusion.") == dtypes(model, ".lora_A.uk.") == {
        torch.bfloat16}
    model.set_trainable(adapters=["cs"], fusion=True)
    inputs = {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in tiny_inputs(config).items()}
    out = model(**inputs, labels=LABELS)
    assert out.logits.dtype == torch.bfloat16 and torch.isfinite(out.loss)
    out.loss.backward()
    assert all(p.grad is not None and p.grad.dtype == torch.bfloat16 for p in model.parameters() if p.requires_grad)
    model.set_fusion_active(False)
    model.set_active_languages(["cs", "uk"])
    routed = model(**inputs, lang_ids=torch.tensor([model.language_to_id["uk"], model.language_to_id["cs"]]))
    assert routed.logits.dtype == torch.bfloat16


def test_a_model_built_around_a_bf16_pretrained_backbone_puts_heads_and_adapters_in_bf16(tmp_path):
    torch.manual_seed(0)
    Wav2Vec2Model(tiny_config("wav2vec2").backbone_config).to(torch.bfloat16).save_pretrained(tmp_path)
    for head in HEADS.names():
        model = get_head(head).model_class.from_backbone(
            str(tmp_path), backbone_kwargs={"dtype": torch.bfloat16}, vocab_size=12, head=head, las=LAS,
            adapter_languages=["ro"], adapter_defaults={"bottleneck": 8},
        )
        assert {p.dtype for p in model.parameters()} == {torch.bfloat16}, head


def toy_dataset(config, rows=4):
    inputs = tiny_inputs(config, batch=rows, pad_last=False)
    key = "input_features" if config.backbone_type == "fbank_conformer" else "input_values"
    labels = [[4, 5, 6], [5, 6, 7], [6, 7, 8], [7, 8, 9]][:rows]
    return Dataset.from_dict({key: inputs[key].tolist(), "labels": labels}), key


def collate(key):
    def collate_fn(rows):
        return {key: torch.tensor([r[key] for r in rows]), "labels": torch.tensor([r["labels"] for r in rows])}

    return collate_fn


@pytest.mark.parametrize("kind", ["default", *ATTENTION.names()])
@pytest.mark.parametrize("head", HEADS.names())
def test_a_bf16_trainer_step_runs_for_every_head_and_attention_kind(tmp_path, head, kind):
    torch.manual_seed(0)
    attention = {"kind": kind, **EXTRA.get(kind, {})}
    config = tiny_config("fbank_conformer", head=head, las=LAS, attention=attention,
                         adapter_languages=["ro"], adapter_defaults={"bottleneck": 8}, active_languages=["ro"])
    model = get_head(head).model_class(config)
    model.set_trainable(adapters=["ro"], head=True)
    before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    dataset, key = toy_dataset(config)
    args = TrainingArguments(
        output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=2, bf16=True, use_cpu=True,
        report_to=[], save_strategy="no", learning_rate=1e-2, remove_unused_columns=False, disable_tqdm=True,
        activation_checkpointing=True,
    )
    trainer = Trainer(model=model, args=args, train_dataset=dataset, data_collator=collate(key))
    result = trainer.train()
    assert result.global_step == 2 and torch.isfinite(torch.tensor(result.training_loss))
    changed = [n for n, p in model.named_parameters() if p.requires_grad and not torch.equal(p, before[n])]
    assert any(".adapters.ro." in n for n in changed) and len(changed) == len(before)
