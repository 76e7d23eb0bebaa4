"""The bottleneck adapter (and SimAdapter fusion) as a PEFT method, and stock LoRA the peft way, on HF wav2vec2 /
wav2vec2-conformer models and on AdaptSpeechForCTC: equations, trainability and save / load round trips."""

import pytest
import torch
from helpers.numerics import assert_paths_agree
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import Wav2Vec2BertForCTC, Wav2Vec2ConformerForCTC, Wav2Vec2ForCTC

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.adapters.peft_method import SpeechAdapterConfig, SpeechAdapterLayer
from adaptspeech.testing import tiny_config, tiny_inputs

pytestmark = pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")

HF_MODELS = {
    "wav2vec2": (Wav2Vec2ForCTC, "wav2vec2", False),
    "wav2vec2_stable": (Wav2Vec2ForCTC, "wav2vec2", True),
    "wav2vec2_conformer": (Wav2Vec2ConformerForCTC, "wav2vec2_conformer", False),
    "wav2vec2_bert": (Wav2Vec2BertForCTC, "wav2vec2_bert", False),
}


def hf_model(kind="wav2vec2", seed=0):
    """A tiny plain transformers CTC model (no adaptspeech code in it)."""
    model_cls, backbone_type, stable = HF_MODELS[kind]
    config = tiny_config(backbone_type, stable_layer_norm=stable).backbone_config
    config.vocab_size = 12
    torch.manual_seed(seed)
    return model_cls(config).eval()


def hf_inputs(model):
    """Inputs in the feature type the model reads (w2v-BERT: stacked filterbanks; the others: waveforms)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return tiny_inputs(tiny_config("wav2vec2_bert" if base.main_input_name == "input_features" else "wav2vec2"))


def adaptspeech_model(backbone_type="fbank_conformer", seed=0, **kwargs):
    torch.manual_seed(seed)
    return AdaptSpeechForCTC(tiny_config(backbone_type, **kwargs)).eval()


def logits(model, inputs):
    with torch.no_grad():
        return model(**inputs).logits


def randomize(model, marker, std=0.3, seed=1):
    """Random values for the parameters whose name contains ``marker`` (e.g. ``.cs.``)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if marker in name:
                param.copy_(torch.randn(param.shape, generator=gen) * std)


def wrapped_layers(model):
    return sorted(name for name, module in model.named_modules() if isinstance(module, SpeechAdapterLayer))


def reference_bottleneck(adapter, z):
    """``a(z) - z = up(relu(down(LN(z))))`` with explicit loops over utterances and frames."""
    out = torch.zeros_like(z)
    for b in range(z.shape[0]):
        for t in range(z.shape[1]):
            x = z[b, t]
            ln = (x - x.mean()) / torch.sqrt(x.var(unbiased=False) + adapter.layer_norm.eps)
            ln = ln * adapter.layer_norm.weight + adapter.layer_norm.bias
            out[b, t] = adapter.up.weight @ torch.relu(adapter.down.weight @ ln)
    return out


def test_default_targets_are_the_encoder_layers():
    model = get_peft_model(hf_model(), SpeechAdapterConfig(bottleneck=8), adapter_name="ro")
    assert wrapped_layers(model) == [f"base_model.model.wav2vec2.encoder.layers.{i}" for i in (0, 1)]
    only = get_peft_model(hf_model(), SpeechAdapterConfig(bottleneck=8, target_layers=[1]), adapter_name="ro")
    assert wrapped_layers(only) == ["base_model.model.wav2vec2.encoder.layers.1"]
    excluded = get_peft_model(
        adaptspeech_model(), SpeechAdapterConfig(bottleneck=8, exclude_modules=["layers.0"]), adapter_name="ro"
    )
    assert wrapped_layers(excluded) == ["base_model.model.backbone.encoder.layers.1"]


def test_layer_output_equals_the_bottleneck_equation_and_several_active_adapters_route_per_utterance():
    model = get_peft_model(hf_model(), SpeechAdapterConfig(bottleneck=8), adapter_name="ro")
    model.add_adapter("cs", SpeechAdapterConfig(bottleneck=4))
    model.eval()
    layer = model.base_model.model.wav2vec2.encoder.layers[1]
    captured = {}
    layer.base_layer.register_forward_hook(lambda m, a, out: captured.__setitem__("z", out))
    layer.register_forward_hook(lambda m, a, out: captured.__setitem__("y", out))
    inputs = hf_inputs(model)
    logits(model, inputs)
    z = captured["z"]
    ro, cs = (layer.speech_adapter_bottleneck[name] for name in ("ro", "cs"))
    with torch.no_grad():
        assert torch.allclose(captured["y"], z + reference_bottleneck(ro, z), atol=1e-5)
        model.base_model.set_adapter(["ro", "cs"])
        with pytest.raises(ValueError, match=r"several adapters are active .*adapter_names"):
            model(**inputs)
        model(**inputs, adapter_names=["cs", "__base__"])
        z = captured["z"]
        # utterance 0 through cs only, utterance 1 untouched: never the sum of the two adapters
        assert torch.allclose(captured["y"][0], z[0] + reference_bottleneck(cs, z[:1])[0], atol=1e-5)
        assert torch.equal(captured["y"][1], z[1])
        with pytest.raises(ValueError, match=r"adapter_names \['xx'\] are not speech adapters"):
            model(**inputs, adapter_names=["xx", "ro"])
    with model.disable_adapter():
        base = logits(model, inputs)
    assert_paths_agree(base, logits(hf_model(), inputs))  # the wrapped layers against the plain model


def test_only_the_active_adapter_trains():
    model = get_peft_model(hf_model(), SpeechAdapterConfig(bottleneck=8), adapter_name="ro")
    model.add_adapter("cs", SpeechAdapterConfig(bottleneck=8))
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(".speech_adapter_bottleneck.ro." in n for n in trainable)
    model.set_adapter("cs")
    model.train()
    labels = torch.tensor([[1, 2, 3], [4, 5, -100]])
    model(**hf_inputs(model), labels=labels).loss.backward()
    with_grad = {n for n, p in model.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}
    cs = {n for n, _ in model.named_parameters() if ".speech_adapter_bottleneck.cs." in n}
    assert with_grad == cs


@pytest.mark.parametrize("kind", list(HF_MODELS))
def test_save_and_load_round_trips_on_hf_models(tmp_path, kind):
    model = get_peft_model(hf_model(kind), SpeechAdapterConfig(bottleneck=8), adapter_name="ro")
    model.add_adapter("cs", SpeechAdapterConfig(bottleneck=4, init="near_identity"))
    model.eval()
    inputs = hf_inputs(model)
    ro = logits(model, inputs)
    model.set_adapter("cs")
    assert_paths_agree(logits(model, inputs), logits(hf_model(kind), inputs))  # near-identity at init: adds zeros
    randomize(model, ".cs.")
    cs = logits(model, inputs)
    assert not torch.allclose(cs, ro)
    model.save_pretrained(tmp_path)

    loaded = PeftModel.from_pretrained(hf_model(kind), tmp_path / "ro", adapter_name="ro").eval()
    assert torch.equal(logits(loaded, inputs), ro)
    loaded.load_adapter(tmp_path / "cs", adapter_name="cs")
    loaded.set_adapter("cs")
    assert torch.equal(logits(loaded, inputs), cs)
    renamed = PeftModel.from_pretrained(hf_model(kind), tmp_path / "cs", adapter_name="czech").eval()
    assert torch.equal(logits(renamed, inputs), cs)  # saved keys do not hold the adapter name


def copy_native_adapters(native, peft_model, languages):
    """Copy the adapters and fusion of an AdaptSpeechForCTC into the PEFT layers of another one."""
    wrappers = peft_model.base_model.model.backbone.encoder.layers
    for i, block in native.adapter_blocks.items():
        for lang in languages:
            wrappers[i].speech_adapter_bottleneck[lang].load_state_dict(block.adapters[lang].state_dict())
        if block.fusion is not None and "fusion" in wrappers[i].speech_adapter_fusion:
            wrappers[i].speech_adapter_fusion["fusion"].load_state_dict(block.fusion.state_dict())


@pytest.mark.parametrize(
    ("backbone_type", "stable", "residual"),
    [
        ("wav2vec2", False, "ffn_input"),
        ("wav2vec2", True, "ffn_input"),
        ("fbank_conformer", False, "ffn_input"),
        ("fbank_conformer", False, "query"),
        ("wav2vec2_bert", False, "ffn_input"),
    ],
)
def test_peft_path_equals_the_native_adapters_and_fusion(backbone_type, stable, residual):
    languages = ["ro", "cs"]
    native = adaptspeech_model(
        backbone_type,
        stable_layer_norm=stable,
        adapters={lang: {"bottleneck": 8} for lang in languages},
        fusion={"languages": languages, "residual": residual},
    )
    randomize(native, "fusion.linear_v", std=0.2)  # W_V away from the identity so that the fusion matters
    inputs = tiny_inputs(native.config)
    base = adaptspeech_model(backbone_type, stable_layer_norm=stable, seed=5)
    missing, _ = base.load_state_dict(native.state_dict(), strict=False)
    assert missing == []
    model = get_peft_model(base, SpeechAdapterConfig(bottleneck=8), adapter_name="ro")
    model.add_adapter("cs", SpeechAdapterConfig(bottleneck=8))
    model.add_adapter("fusion", SpeechAdapterConfig(fusion_of=languages, fusion_residual=residual))
    copy_native_adapters(native, model, languages)
    model.eval()
    native.set_target_language("cs")
    model.set_adapter("cs")
    assert_paths_agree(logits(model, inputs), logits(native, inputs))  # the peft layers against the native blocks
    native.set_fusion_active(True)
    model.set_adapter("fusion")
    assert_paths_agree(logits(model, inputs), logits(native, inputs))
    assert torch.allclose(model.fusion_regularizer(), native.fusion_regularizer())


def test_fusion_adapter_trains_alone_saves_and_loads(tmp_path):
    model = get_peft_model(hf_model(), SpeechAdapterConfig(bottleneck=8), adapter_name="ro")
    model.add_adapter("cs", SpeechAdapterConfig(bottleneck=8))
    model.add_adapter("fusion", SpeechAdapterConfig(fusion_of=["ro", "cs"], fusion_reg_weight=0.5))
    model.set_adapter("fusion")
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(".speech_adapter_fusion.fusion." in n for n in trainable)
    randomize(model, "speech_adapter_fusion.fusion.linear", std=0.2)
    expected = 0.0
    for layer in model.base_model.model.wav2vec2.encoder.layers:
        w = layer.speech_adapter_fusion["fusion"].linear_v.weight
        for i in range(w.shape[0]):
            for j in range(w.shape[1]):
                expected += (float(i == j) - w[i, j].item()) ** 2
    assert model.fusion_loss().item() == pytest.approx(0.5 * expected, rel=1e-5)

    model.eval()
    inputs = hf_inputs(model)
    fused = logits(model, inputs)
    model.save_pretrained(tmp_path)
    loaded = PeftModel.from_pretrained(hf_model(), tmp_path / "ro", adapter_name="ro")
    loaded.load_adapter(tmp_path / "cs", adapter_name="cs")
    loaded.load_adapter(tmp_path / "fusion", adapter_name="fusion")
    loaded.set_adapter("fusion")
    assert torch.equal(logits(loaded.eval(), inputs), fused)


def test_fusion_misuse_is_reported(tmp_path):
    model = get_peft_model(hf_model(), SpeechAdapterConfig(bottleneck=8), adapter_name="ro")
    with pytest.raises(ValueError, match=r"fuses \['cs'\], which this layer does not have"):
        model.add_adapter("fusion", SpeechAdapterConfig(fusion_of=["ro", "cs"]))
    model.add_adapter("cs", SpeechAdapterConfig(bottleneck=8))
    model.add_adapter("fusion", SpeechAdapterConfig(fusion_of=["ro", "cs"]))
    model.base_model.set_adapter(["fusion", "ro"])
    with pytest.raises(ValueError, match="must be the only active adapter"):
        logits(model, hf_inputs(model))
    with pytest.raises(ValueError, match="fused by"):
        model.delete_adapter("cs")
    with pytest.raises(ValueError, match="not a fusion adapter"):
        model.fusion_loss("ro")
    model.save_pretrained(tmp_path, selected_adapters=["fusion"])
    with pytest.raises(ValueError, match="add or load the fused adapters"):
        PeftModel.from_pretrained(hf_model(), tmp_path / "fusion", adapter_name="fusion")


@pytest.mark.parametrize(
    ("make_config", "marker"),
    [
        (lambda: SpeechAdapterConfig(bottleneck=8, modules_to_save=["ctc_head"]), ".speech_adapter_"),
        (lambda: LoraConfig(r=4, target_modules=["linear_q", "linear_v"], modules_to_save=["ctc_head"]), ".lora_"),
    ],
    ids=["speech_adapter", "lora"],
)
def test_adaptspeech_model_round_trips_the_peft_way(tmp_path, make_config, marker):
    model = get_peft_model(adaptspeech_model(), make_config(), adapter_name="ro")
    model.add_adapter("cs", make_config())
    randomize(model, marker)
    randomize(model, "ctc_head.modules_to_save", seed=2)
    model.eval()
    inputs = tiny_inputs(model.base_model.model.config)
    ro = logits(model, inputs)
    model.set_adapter("cs")
    cs = logits(model, inputs)
    assert not torch.allclose(ro, cs)
    model.save_pretrained(tmp_path)
    loaded = PeftModel.from_pretrained(adaptspeech_model(), tmp_path / "ro", adapter_name="ro").eval()
    assert torch.equal(logits(loaded, inputs), ro)
    loaded.load_adapter(tmp_path / "cs", adapter_name="cs")
    loaded.set_adapter("cs")
    assert torch.equal(logits(loaded, inputs), cs)


def test_half_precision_model_keeps_float32_adapters_and_its_own_output_dtype():
    model = hf_model().to(torch.bfloat16)
    model = get_peft_model(model, SpeechAdapterConfig(bottleneck=8), adapter_name="ro")
    model.add_adapter("cs", SpeechAdapterConfig(bottleneck=8))
    model.add_adapter("fusion", SpeechAdapterConfig(fusion_of=["ro", "cs"]))
    assert {p.dtype for n, p in model.named_parameters() if ".speech_adapter_" in n} == {torch.float32}
    inputs = hf_inputs(model)
    inputs["input_values"] = inputs["input_values"].to(torch.bfloat16)
    with model.disable_adapter():
        base = logits(model, inputs)
    for name in ("ro", "fusion"):
        model.set_adapter(name)
        out = logits(model, inputs)
        assert out.dtype == torch.bfloat16 and not torch.equal(out, base)
