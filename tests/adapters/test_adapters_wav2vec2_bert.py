"""Per-language parts on the w2v-BERT 2.0 backbone (tiny random ``Wav2Vec2BertModel``): adapters and LoRA in every
layer routed per utterance, SimAdapter fusion, adapter files, the language-ID head, bf16 with activation
checkpointing, and the attention swap."""

import pytest
import torch
from helpers.numerics import assert_paths_agree

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.testing import tiny_config, tiny_inputs

LANGUAGES = ["ro", "cs", "pl"]
ADAPTERS = {"ro": {"bottleneck": 8}, "cs": {"adapter_type": "lora", "lora_r": 4}, "pl": {"bottleneck": 4}}


def make_model(seed: int = 0, **kwargs) -> AdaptSpeechForCTC:
    """Bottleneck adapters (ro, pl) and LoRA (cs) in every layer, none of them the identity."""
    torch.manual_seed(seed)
    model = AdaptSpeechForCTC(tiny_config("wav2vec2_bert", adapters=ADAPTERS, **kwargs)).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if ".language_adapters." in name or ".lora_" in name:
                parameter.add_(0.2 * torch.randn_like(parameter))
    return model


def test_every_layer_has_each_adapter_and_each_changes_the_output():
    model = make_model()
    assert sorted(model.adapter_blocks) == [0, 1]
    inputs = tiny_inputs(model.config)
    with torch.no_grad():
        base = model(**inputs).logits
        for language in LANGUAGES:
            model.set_target_language(language)
            assert not torch.allclose(model(**inputs).logits, base, atol=1e-4), language


def test_per_utterance_routing_equals_one_language_batches():
    model = make_model()
    inputs = tiny_inputs(model.config, batch=3)
    model.set_active_languages(LANGUAGES)
    ids = torch.tensor([model.language_to_id[lang] for lang in ("cs", "ro", "pl")])
    with torch.no_grad():
        routed = model(**inputs, lang_ids=ids).logits
        for row, language in enumerate(("cs", "ro", "pl")):
            model.set_target_language(language)
            assert_paths_agree(routed[row], model(**inputs).logits[row])


def test_fusion_trains_only_itself_and_the_target_adapter():
    model = make_model()
    model.add_fusion(["ro", "pl"], target_language="ro")
    model.set_trainable(adapters=["ro"], fusion=True)
    model.train()
    inputs = tiny_inputs(model.config)
    out = model(**inputs, labels=torch.tensor([[4, 5, 6], [5, 6, 7]]), output_fusion_weights=True)
    assert len(out.fusion_weights) == 2 and out.loss_fusion_reg is not None
    out.loss.backward()
    with_grad = {n for n, p in model.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}
    assert with_grad and all(".fusion." in n or ".adapters.ro." in n for n in with_grad), sorted(with_grad)
    assert any(".fusion." in n for n in with_grad) and any(".adapters.ro." in n for n in with_grad)


@pytest.mark.parametrize("language", ["ro", "cs"], ids=["bottleneck", "lora"])
def test_adapter_file_round_trip_is_bit_identical(tmp_path, language):
    model = make_model()
    model.set_target_language(language)
    inputs = tiny_inputs(model.config)
    with torch.no_grad():
        expected = model(**inputs).logits
    path = model.save_adapter(language, tmp_path, include_head=True)
    assert path.name == f"adapter.{language}.safetensors"
    other = make_model(seed=1)  # other adapters; the same backbone and head below
    shared = {k: v for k, v in model.state_dict().items() if ".language_adapters." not in k and ".lora_" not in k}
    other.load_state_dict(shared, strict=False)
    with torch.no_grad():
        other.set_target_language(language)
        assert not torch.equal(other(**inputs).logits, expected)
    other.load_adapter(language, tmp_path)
    with torch.no_grad():
        assert torch.equal(other.eval()(**inputs).logits, expected)


def test_mms_format_is_refused_in_one_line(tmp_path):
    model = make_model()
    with pytest.raises(ValueError, match=r"^save_adapter\('ro', format='mms'\): ") as info:
        model.save_adapter("ro", tmp_path, format="mms")
    assert "\n" not in str(info.value)


def test_language_id_head_reads_the_encoder_and_trains():
    model = make_model()
    model.add_lid_head(LANGUAGES, pooling="mean_std", layer=1)
    inputs = tiny_inputs(model.config, batch=3)
    logits = model.lid_logits(inputs["input_features"], inputs["attention_mask"])
    assert logits.shape == (3, 3)
    model.set_trainable(lid=True)
    out = model(**inputs, lid_targets=torch.tensor([0, 1, 2]))
    out.loss.backward()
    assert all(p.grad is not None for n, p in model.named_parameters() if n.startswith("lid_head"))


def test_bf16_with_activation_checkpointing_matches_the_plain_backward():
    model = make_model()
    model.set_target_language("ro")
    model.set_trainable(adapters=["ro"])
    model.train()
    inputs = tiny_inputs(model.config)
    labels = torch.tensor([[4, 5, 6], [5, 6, 7]])
    grads = []
    for checkpointing in (False, True):
        model.zero_grad()
        if checkpointing:
            model.gradient_checkpointing_enable()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(**inputs, labels=labels).loss
        loss.backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad})
    assert torch.isfinite(loss) and grads[0]
    for name, grad in grads[0].items():
        torch.testing.assert_close(grads[1][name], grad, atol=1e-2, rtol=1e-2, msg=name)


def test_attention_swap_from_pretrained_is_refused_naming_the_distance_embedding():
    with pytest.raises(ValueError, match=r"^attention\.kind='rel_pos' with init_from_pretrained: .*"
                                         r"self_attn\.distance_embedding, 7 distances x 16") as info:
        AdaptSpeechForCTC(tiny_config("wav2vec2_bert", attention={"kind": "rel_pos"}))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("kind", ["mhsa", "rel_pos"])
def test_attention_swap_from_scratch_replaces_every_layer_and_trains(kind):
    torch.manual_seed(0)
    model = AdaptSpeechForCTC(tiny_config("wav2vec2_bert", attention={"kind": kind, "init_from_pretrained": False}))
    assert model.swapped_attention_layers == [0, 1]
    assert not any("distance_embedding" in n for n in model.state_dict())
    inputs = tiny_inputs(model.config)
    model.train()
    model(**inputs, labels=torch.tensor([[4, 5, 6], [5, 6, 7]])).loss.backward()
    assert model.backbone.encoder.layers[0].self_attn.value_proj.weight.grad is not None


def test_attention_swap_copies_q_k_v_out_of_a_relative_attention_by_role():
    """w2v-BERT with ``position_embeddings_type: relative`` (Transformer-XL positions) has nothing a kind lacks."""
    torch.manual_seed(0)
    overrides = {"position_embeddings_type": "relative"}
    plain = AdaptSpeechForCTC(tiny_config("wav2vec2_bert", backbone_overrides=overrides)).eval()
    swapped = AdaptSpeechForCTC(tiny_config("wav2vec2_bert", backbone_overrides=overrides,
                                            attention={"kind": "rel_pos"}), backbone=None)
    swapped.load_state_dict(plain.state_dict(), strict=False)
    inputs = tiny_inputs(plain.config)
    with torch.no_grad():
        assert_paths_agree(swapped.eval()(**inputs).logits, plain(**inputs).logits)
