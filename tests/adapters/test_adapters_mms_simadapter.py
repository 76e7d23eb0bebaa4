"""SimAdapter over imported MMS adapters: three MMS languages' adapters (without their heads) fused with a
new target adapter on a wrapped MMS checkpoint; only the target adapter and the fusion train, and the result saves
and loads (adapter files and the whole model)."""

import pytest
import torch
from helpers.mms import ADAPTER_DIM, BUILTIN, save_mms_checkpoint, write_mms_adapter

from adaptspeech import AdaptSpeechForCTC

SOURCES = ["ces", "pol", "slk"]
TARGET = "hsb"


@pytest.fixture(scope="module")
def mms_folder(tmp_path_factory):
    folder = save_mms_checkpoint(tmp_path_factory.mktemp("mms"))
    for seed, language in enumerate(SOURCES, start=1):
        write_mms_adapter(folder, language, vocab_size=9 + seed, seed=seed)
    return folder


def sources_model(folder):
    """The wrapped checkpoint with the source adapters loaded without their heads."""
    model = AdaptSpeechForCTC.from_backbone(str(folder), mms_language=BUILTIN)
    for language in SOURCES:
        model.load_adapter(language, folder, load_head=False, activate=False)
    return model


def batch(seed=0):
    gen = torch.Generator().manual_seed(seed)
    values = torch.randn(2, 4000, generator=gen)
    return {"input_values": values, "attention_mask": torch.ones(2, 4000, dtype=torch.long)}


def test_simadapter_over_mms_adapters_trains_the_target_and_the_fusion_only(mms_folder, tmp_path):
    torch.manual_seed(0)
    model = sources_model(mms_folder)
    assert set(model.config.language_heads) == {BUILTIN}  # the sources' heads were not loaded
    model.add_language_adapter(TARGET, bottleneck=ADAPTER_DIM, bias=True)
    model.add_fusion([*SOURCES, TARGET], target_language=TARGET)
    model.set_trainable(adapters=[TARGET], fusion=True)
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    labels = torch.tensor([[5, 6, 7], [6, 7, 8]])
    losses = []
    for step in range(3):
        out = model(**batch(step), labels=labels, output_fusion_weights=True)
        assert out.logits.shape[-1] == model.config.vocab_size  # the target uses the shared head
        assert out.loss_fusion_reg is not None and len(out.fusion_weights) == 2
        assert out.fusion_weights[0].shape[-1] == len(SOURCES) + 1
        losses.append(float(out.loss.detach()))
        optimizer.zero_grad()
        out.loss.backward()
        optimizer.step()
    assert all(torch.isfinite(torch.tensor(losses)))
    after = model.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed == {k for k, p in model.named_parameters() if p.requires_grad}
    assert changed and all(f".adapters.{TARGET}." in k or ".fusion." in k for k in changed)
    assert any(".fusion.linear_v." in k for k in changed) and any(f".adapters.{TARGET}.down.bias" in k for k in changed)

    # save the target adapter and the fusion; a fresh wrap with the same MMS sources reproduces the model
    model.eval()
    with torch.no_grad():
        expected = model(**batch(9)).logits
    model.save_adapter(TARGET, tmp_path / "trained", include_head=True)
    model.save_fusion(tmp_path / "trained")
    fresh = sources_model(mms_folder)
    fresh.load_adapter(TARGET, tmp_path / "trained")
    fresh.load_fusion(tmp_path / "trained")
    fresh.eval()
    with torch.no_grad():
        assert torch.equal(fresh(**batch(9)).logits, expected)
    # and the whole model
    model.save_pretrained(tmp_path / "model")
    again = AdaptSpeechForCTC.from_pretrained(tmp_path / "model").eval()
    assert again.config.fusion_active and again.config.fusion.languages == [*SOURCES, TARGET]
    with torch.no_grad():
        assert torch.equal(again(**batch(9)).logits, expected)
    # the trained target adapter has MMS's shape: it exports for transformers too
    assert model.save_adapter(TARGET, tmp_path / "mms_export", format="mms").is_file()


def test_the_target_may_bring_its_own_head(mms_folder):
    model = sources_model(mms_folder)
    model.add_language_adapter(TARGET, bottleneck=ADAPTER_DIM, bias=True)
    model.add_language_head(TARGET, 6)
    model.add_fusion([*SOURCES, TARGET], target_language=TARGET)
    model.set_trainable(adapters=[TARGET], fusion=True, heads=[TARGET])
    report = model.trainable_parameters()["groups"]
    assert report[f"head:{TARGET}"]["trainable"] == 6 * 32 + 6 and report["head"]["trainable"] == 0
    assert report[f"head:{BUILTIN}"]["trainable"] == 0
    out = model(**batch(), labels=torch.tensor([[1, 2], [3, 4]]))
    assert out.logits.shape[-1] == 6
    out.loss.backward()
    assert model.ctc_head.language_heads[TARGET].weight.grad is not None
