"""Per-call routing (adaptspeech/adapters/routing.py) and the one adapter layer forward (adapters/layer_forward.py):
checkpoint recomputation, threads, and the native block against the peft ``speech_adapter`` layer."""

import threading

import pytest
import torch
from helpers.numerics import assert_paths_agree
from peft import get_peft_model

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.adapters.peft_method import SpeechAdapterConfig
from adaptspeech.adapters.routing import current_call
from adaptspeech.testing import tiny_config, tiny_inputs

LORA = {"adapter_type": "lora", "lora_r": 4, "lora_alpha": 8}
LABELS = torch.tensor([[4, 5, 6, 7], [5, 6, 7, -100], [6, 7, -100, -100]])

pytestmark = pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")


def randomize(model, markers=(".lora_", ".language_adapters.", ".speech_adapter_"), std=0.3, seed=1):
    """LoRA starts as the identity and the adapters near it: give them random values so they matter."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if any(m in name for m in markers) and "layer_norm" not in name:
                param.copy_(torch.randn(param.shape, generator=gen) * std)


def routed_model(backbone_type="wav2vec2", seed=0):
    """ro: LoRA, cs: bottleneck, pl: LoRA; all three active, routed per utterance."""
    torch.manual_seed(seed)
    config = tiny_config(backbone_type, adapters={"ro": LORA, "cs": {"bottleneck": 8}, "pl": LORA})
    model = AdaptSpeechForCTC(config)
    randomize(model)
    model.set_active_languages(["ro", "cs", "pl"])
    model.set_trainable(adapters=["ro", "cs", "pl"], head=True, backbone=True)
    return model


def gradients(model, inputs, lang_ids):
    model.zero_grad(set_to_none=True)
    torch.manual_seed(0)  # the same dropout masks (checkpointing replays the RNG state in its recomputation)
    out = model(**inputs, labels=LABELS, lang_ids=lang_ids)
    out.loss.backward()
    return out.loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("backbone_type", ["wav2vec2", "fbank_conformer"])
@pytest.mark.parametrize("use_reentrant", [False, True])
def test_routed_lora_under_activation_checkpointing_gives_the_gradients_without_it(backbone_type, use_reentrant):
    model = routed_model(backbone_type)
    model.train()
    config = model.config
    inputs = tiny_inputs(config, batch=3)
    lang_ids = torch.tensor([model.language_to_id[lang] for lang in ("ro", "cs", "pl")])
    loss, reference = gradients(model, inputs, lang_ids)
    lora_grads = [n for n in reference if ".lora_A.ro." in n or ".lora_B.pl." in n]
    assert lora_grads and all(reference[n].abs().sum() > 0 for n in lora_grads)

    model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": use_reentrant})
    layers = config.backbone_spec.encoder_layers(model.backbone)
    assert all(layer.gradient_checkpointing for layer in layers)
    checkpointed_loss, checkpointed = gradients(model, inputs, lang_ids)
    assert current_call() is None  # nothing left behind by the recomputation
    assert torch.allclose(checkpointed_loss, loss)
    assert checkpointed.keys() == reference.keys()
    for name, grad in reference.items():
        assert torch.allclose(checkpointed[name], grad, atol=1e-6), name


def test_fusion_under_activation_checkpointing_gives_the_gradients_without_it():
    torch.manual_seed(0)
    config = tiny_config("wav2vec2", stable_layer_norm=True, adapter_languages=["ro", "cs"],
                         adapter_defaults={"bottleneck": 8})
    model = AdaptSpeechForCTC(config)
    model.add_fusion(["ro", "cs"], target_language="ro", guide_weight=0.1)
    model.set_trainable(adapters=["ro"], fusion=True, backbone=True)
    model.train()
    inputs = tiny_inputs(config, batch=3)
    loss, reference = gradients(model, inputs, None)
    model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    checkpointed_loss, checkpointed = gradients(model, inputs, None)
    assert torch.allclose(checkpointed_loss, loss)
    for name, grad in reference.items():
        assert torch.allclose(checkpointed[name], grad, atol=1e-6), name


def test_threads_with_different_lang_ids_get_the_outputs_of_sequential_calls():
    model = routed_model().eval()
    inputs = tiny_inputs(model.config, batch=3)
    orders = [("ro", "cs", "pl"), ("pl", "ro", "cs"), ("cs", "pl", "ro"), ("ro", "ro", "cs")]
    ids = [torch.tensor([model.language_to_id[lang] for lang in order]) for order in orders]
    with torch.no_grad():
        expected = [model(**inputs, lang_ids=i).logits for i in ids]
    results: dict[tuple[int, int], torch.Tensor] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(len(ids))

    def worker(k: int) -> None:
        try:
            start.wait()
            for repeat in range(15):
                with torch.no_grad():
                    results[(k, repeat)] = model(**inputs, lang_ids=ids[k]).logits
        except BaseException as err:  # reported below
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(len(ids))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    for (k, _), logits in results.items():
        assert_paths_agree(logits, expected[k])  # a thread may run its ops on another intra-op thread count
    assert len(results) == 15 * len(ids)


def test_routing_needs_per_utterance_languages_and_names_the_active_ones():
    model = routed_model().eval()
    with pytest.raises(ValueError, match=r"several .*active .*ro.*cs.*pl.*lang_ids"):
        model(**tiny_inputs(model.config, batch=3))
    with pytest.raises(ValueError, match=r"lang_ids holds 7 but the model has 3 adapter languages"):
        model(**tiny_inputs(model.config, batch=3), lang_ids=torch.tensor([0, 1, 7]))


def native_and_peft(backbone_type):
    """The same backbone with native adapters ro, cs (model A) and with peft speech adapters ro, cs (model B)."""
    torch.manual_seed(0)
    config = tiny_config(backbone_type, adapter_languages=["ro", "cs"], adapter_defaults={"bottleneck": 8})
    native = AdaptSpeechForCTC(config).eval()
    randomize(native)
    torch.manual_seed(0)
    plain = AdaptSpeechForCTC(tiny_config(backbone_type)).eval()
    plain.load_state_dict({k: v for k, v in native.state_dict().items() if ".language_adapters." not in k})
    peft_model = get_peft_model(plain, SpeechAdapterConfig(bottleneck=8), adapter_name="ro")
    peft_model.add_adapter("cs", SpeechAdapterConfig(bottleneck=8))
    layers = config.backbone_spec.encoder_layers(peft_model.base_model.model.backbone)
    for i, layer in enumerate(layers):
        for lang in ("ro", "cs"):
            layer.speech_adapter_bottleneck[lang].load_state_dict(native.adapter_blocks[i].adapters[lang].state_dict())
    return native, peft_model.eval()


@pytest.mark.parametrize("backbone_type", ["wav2vec2", "fbank_conformer"])
def test_native_block_and_peft_layer_give_the_same_outputs(backbone_type):
    native, peft_model = native_and_peft(backbone_type)
    inputs = tiny_inputs(native.config, batch=3)
    with torch.no_grad():
        native.set_active_languages(["cs"])
        peft_model.base_model.set_adapter("cs")
        assert_paths_agree(native(**inputs).logits, peft_model(**inputs).logits)  # native block vs peft layer

        rows = ["cs", "ro", "cs"]
        native.set_active_languages(["ro", "cs"])
        peft_model.base_model.set_adapter(["ro", "cs"])
        routed = native(**inputs, lang_ids=torch.tensor([native.language_to_id[r] for r in rows])).logits
        assert_paths_agree(routed, peft_model(**inputs, adapter_names=rows).logits)
        # and it is per-utterance routing: each row equals its own language run alone
        native.set_active_languages(["ro"])
        alone = native(**inputs).logits
        assert_paths_agree(routed[1], alone[1])  # routed rows against a one-language batch
        assert not torch.allclose(routed[0], alone[0], atol=1e-3)


def test_native_and_peft_fusion_give_the_same_outputs():
    native, peft_model = native_and_peft("wav2vec2")
    native.add_fusion(["ro", "cs"], target_language="ro")
    peft_model.add_adapter("fusion", SpeechAdapterConfig(fusion_of=["ro", "cs"]))
    peft_model.base_model.set_adapter("fusion")
    layers = native.config.backbone_spec.encoder_layers(peft_model.base_model.model.backbone)
    for i, layer in enumerate(layers):
        fusion = native.adapter_blocks[i].fusion
        torch.nn.init.normal_(fusion.linear_q.weight, std=0.3)
        layer.speech_adapter_fusion["fusion"].load_state_dict(fusion.state_dict())
    inputs = tiny_inputs(native.config, batch=2)
    with torch.no_grad():
        assert_paths_agree(native(**inputs).logits, peft_model(**inputs).logits)  # native fusion vs peft fusion
