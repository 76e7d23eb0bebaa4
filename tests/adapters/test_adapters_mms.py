"""MMS adapters against transformers' own ``Wav2Vec2ForCTC`` with ``adapter_attn_dim``: wrapping an MMS
checkpoint, reading MMS adapter files, several MMS languages resident, writing files transformers loads, and the
vocabulary switch. Every number is compared with what transformers computes on the same tiny checkpoint."""

import json

import pytest
import torch
from helpers.mms import (
    ADAPTER_DIM,
    BUILTIN,
    BUILTIN_VOCAB,
    HIDDEN,
    mms_inputs,
    save_mms_checkpoint,
    transformers_logits,
    write_mms_adapter,
)
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCTC, Wav2Vec2CTCTokenizer

from adaptspeech import AdaptSpeechConfig, AdaptSpeechForCTC
from adaptspeech.adapters import BottleneckAdapterConfig
from adaptspeech.adapters.files import AdapterLoadError
from adaptspeech.testing import tiny_config

TOL = 1e-5


@pytest.fixture(scope="module")
def mms_folder(tmp_path_factory):
    """A tiny MMS checkpoint (built-in ``eng``, vocabulary 10) with MMS adapter files for fra (12) and deu (9)."""
    folder = save_mms_checkpoint(tmp_path_factory.mktemp("mms"))
    write_mms_adapter(folder, "fra", vocab_size=12, seed=1)
    write_mms_adapter(folder, "deu", vocab_size=9, seed=2)
    return folder


def wrap(folder, **kwargs):
    model = AdaptSpeechForCTC.from_backbone(str(folder), mms_language=BUILTIN, **kwargs)
    return model.eval()


def logits(model, inputs, **kwargs):
    with torch.no_grad():
        return model(**inputs, **kwargs).logits


def max_diff(a, b):
    assert a.shape == b.shape, (a.shape, b.shape)
    return float((a - b).abs().max())


def test_wrapping_turns_the_builtin_adapter_into_a_language_adapter(mms_folder, tmp_path):
    model = wrap(mms_folder)
    layers = model.backbone.encoder.layers
    assert all(layer.adapter_layer is None for layer in layers)
    assert model.config.backbone_config.adapter_attn_dim is None
    assert not any("adapter_layer" in name for name, _ in model.named_parameters())
    assert model.config.adapters[BUILTIN] == BottleneckAdapterConfig(bottleneck=ADAPTER_DIM, bias=True, layer_norm=True)
    assert model.config.language_heads == {BUILTIN: {"vocab_size": BUILTIN_VOCAB}}
    assert model.config.active_languages == [BUILTIN]
    inputs = mms_inputs()
    expected = transformers_logits(mms_folder, None, inputs)
    assert max_diff(logits(model, inputs), expected) < TOL
    # the saved model rebuilds without a built-in adapter and gives the same logits
    model.save_pretrained(tmp_path / "wrapped")
    again = AutoModelForCTC.from_pretrained(tmp_path / "wrapped").eval()
    assert all(layer.adapter_layer is None for layer in again.backbone.encoder.layers)
    assert max_diff(logits(again, inputs), expected) < TOL


def test_an_mms_file_loads_to_transformers_logits(mms_folder):
    model = wrap(mms_folder)
    model.load_adapter("fra", mms_folder)
    assert model.config.active_languages == ["fra"] and model.config.language_heads["fra"] == {"vocab_size": 12}
    inputs = mms_inputs()
    ours = logits(model, inputs)
    assert ours.shape[-1] == 12
    assert max_diff(ours, transformers_logits(mms_folder, "fra", inputs)) < TOL
    # the comparison means something: the adapter moves the encoder output well beyond the tolerance
    with torch.no_grad():
        with_fra = model.encode(inputs["input_values"], inputs["attention_mask"])[0]
        model.set_active_languages([])
        without = model.encode(inputs["input_values"], inputs["attention_mask"])[0]
    assert max_diff(with_fra, without) > 0.1


def test_two_mms_languages_resident_switch_to_each_languages_logits(mms_folder):
    model = wrap(mms_folder)
    model.load_adapter("fra", mms_folder)
    model.load_adapter("deu", mms_folder)
    inputs = mms_inputs()
    for language in ("deu", "fra", BUILTIN, "deu"):
        model.set_target_language(language)
        reference = transformers_logits(mms_folder, None if language == BUILTIN else language, inputs)
        assert max_diff(logits(model, inputs), reference) < TOL, language
    # a routed batch whose languages use different heads is refused in one line; one language's rows run
    model.set_active_languages(["fra", "deu"])
    ids = model.language_to_id
    with pytest.raises(ValueError, match=r"different CTC heads .*fra's head \(vocabulary 12\).*deu's head"):
        model(**inputs, lang_ids=torch.tensor([ids["fra"], ids["deu"]]))
    routed = logits(model, inputs, lang_ids=torch.tensor([ids["fra"], ids["fra"]]))
    assert max_diff(routed, transformers_logits(mms_folder, "fra", inputs)) < TOL


def test_an_adapter_exported_as_mms_loads_in_transformers_with_identical_logits(mms_folder, tmp_path):
    folder = save_mms_checkpoint(tmp_path / "mms")  # the same checkpoint, in a folder of its own
    model = wrap(folder)
    model.add_language_adapter("xx", bottleneck=ADAPTER_DIM, bias=True)
    model.add_language_head("xx", 7)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".adapters.xx." in name or "language_heads.xx." in name:
                param.copy_(0.3 * torch.randn_like(param))
    model.set_target_language("xx")
    path = model.save_adapter("xx", folder, format="mms")
    assert path.name == "adapter.xx.safetensors" and not (folder / "adapter.xx.json").exists()
    inputs = mms_inputs()
    assert max_diff(logits(model, inputs), transformers_logits(folder, "xx", inputs)) < TOL


def test_read_then_write_an_mms_file_gives_the_same_tensors(mms_folder, tmp_path):
    model = wrap(mms_folder)
    model.load_adapter("fra", mms_folder)
    model.save_adapter("fra", tmp_path, format="mms")
    original = load_file(mms_folder / "adapter.fra.safetensors")
    written = load_file(tmp_path / "adapter.fra.safetensors")
    assert original.keys() == written.keys()
    assert all(torch.equal(original[k], written[k]) for k in original)
    # and the built-in adapter exports to the tensors transformers holds for it
    model.save_adapter(BUILTIN, tmp_path, format="mms")
    reference = AutoModelForCTC.from_pretrained(mms_folder)._get_adapters()
    exported = load_file(tmp_path / f"adapter.{BUILTIN}.safetensors")
    assert exported.keys() == reference.keys()
    assert all(torch.equal(exported[k], reference[k].detach()) for k in exported)


def test_export_refuses_adapters_mms_cannot_hold(mms_folder, tmp_path):
    model = wrap(mms_folder)
    model.add_language_adapter("nb", bottleneck=ADAPTER_DIM)  # no bias: the official SimAdapter adapter
    model.add_language_adapter("lo", adapter_type="lora", lora_r=2)
    with pytest.raises(ValueError, match=r"format='mms'\): adapter of 'nb' has \{'bias': False\}"):
        model.save_adapter("nb", tmp_path, format="mms")
    with pytest.raises(ValueError, match="'lora'; MMS files hold bottleneck adapters"):
        model.save_adapter("lo", tmp_path, format="mms")
    with pytest.raises(ValueError, match="always hold the language's lm_head"):
        model.save_adapter(BUILTIN, tmp_path, format="mms", include_head=False)
    post_ln = AdaptSpeechForCTC(tiny_config(adapters={"ro": {"bottleneck": 4, "bias": True}}))
    with pytest.raises(ValueError, match=r"post-LN layers \(do_stable_layer_norm=False\)"):
        post_ln.save_adapter("ro", tmp_path, format="mms")
    subset = AdaptSpeechForCTC(
        tiny_config(stable_layer_norm=True, adapter_layers=[1], adapters={"ro": {"bottleneck": 4, "bias": True}})
    )
    with pytest.raises(ValueError, match=r"in all 2 encoder layers; this model has adapter layers \[1\]"):
        subset.save_adapter("ro", tmp_path, format="mms")
    mms_shaped = {"ro": {"bottleneck": 4, "bias": True}}
    swapped = AdaptSpeechForCTC(tiny_config(stable_layer_norm=True, attention={"kind": "ldsa"}, adapters=mms_shaped))
    with pytest.raises(ValueError, match="attention is swapped \\('ldsa'\\)"):
        swapped.save_adapter("ro", tmp_path, format="mms")
    model.save_adapter(BUILTIN, tmp_path / "native")
    with pytest.raises(ValueError, match=r"adapter\.eng\.json exists"):
        model.save_adapter(BUILTIN, tmp_path / "native", format="mms")
    assert not list(tmp_path.glob("adapter.*"))  # nothing was written by the refused calls


def snapshot(model):
    return {k: v.clone() for k, v in model.state_dict().items()}, json.dumps(model.config.to_dict(), sort_keys=True)


def assert_unchanged(model, before):
    state, config = before
    now = model.state_dict()
    assert now.keys() == state.keys() and all(torch.equal(now[k], v) for k, v in state.items())
    assert json.dumps(model.config.to_dict(), sort_keys=True) == config


def test_mms_loads_that_do_not_fit_change_nothing(mms_folder, tmp_path):
    model = wrap(mms_folder)
    model.load_adapter("fra", mms_folder)
    before = snapshot(model)
    tensors = load_file(mms_folder / "adapter.deu.safetensors")
    # a missing tensor, a wrong width, an unknown key, a file from a deeper encoder
    cases = {
        "missing": ({k: v for k, v in tensors.items() if "layers.1.adapter_layer.linear_2.bias" not in k},
                    r"misses keys \['wav2vec2\.encoder\.layers\.1\.adapter_layer\.linear_2\.bias'\]"),
        "width": ({**tensors, "wav2vec2.encoder.layers.0.adapter_layer.linear_2.weight": torch.zeros(HIDDEN, 8)},
                  r"layers\.0\.up\.weight.*\(32, 8\).*\(32, 4\)"),
        "unknown": ({**tensors, "wav2vec2.encoder.layers.0.feed_forward.x": torch.zeros(2)}, "unexpected keys"),
        "deeper": ({**tensors, **{k.replace("layers.1.", "layers.2."): v.clone() for k, v in tensors.items()
                                  if "layers.1." in k}}, r"covers encoder layers \[0, 1, 2\]"),
    }
    for case, (damaged, message) in cases.items():
        folder = tmp_path / case
        folder.mkdir()
        save_file(damaged, str(folder / "adapter.fra.safetensors"))
        with pytest.raises(AdapterLoadError, match=message):
            model.load_adapter("fra", folder)
        assert_unchanged(model, before)
    # an MMS file into a model whose adapters are not where MMS has them
    post_ln = AdaptSpeechForCTC(tiny_config(adapter_languages=["ro"])).eval()
    before = snapshot(post_ln)
    with pytest.raises(AdapterLoadError, match="MMS adapters follow stable-layer-norm wav2vec2 layers"):
        post_ln.load_adapter("deu", mms_folder)
    assert_unchanged(post_ln, before)


def test_load_head_false_loads_the_adapter_alone(mms_folder):
    model = wrap(mms_folder)
    model.load_adapter("deu", mms_folder, load_head=False, activate=False)
    assert "deu" in model.config.adapters and "deu" not in model.config.language_heads
    assert model.config.active_languages == [BUILTIN]


def test_the_builtin_language_must_be_known(mms_folder, tmp_path):
    with pytest.raises(ValueError, match="pass mms_language='<code>' to from_backbone"):
        AdaptSpeechForCTC.from_backbone(str(mms_folder))
    folder = save_mms_checkpoint(tmp_path / "with_tokenizer")
    (folder / "tokenizer_config.json").write_text(json.dumps({"target_lang": "spa"}))
    assert AdaptSpeechForCTC.from_backbone(str(folder)).config.active_languages == ["spa"]
    with pytest.raises(ValueError, match="has no built-in MMS adapter"):
        plain = tmp_path / "plain"
        AdaptSpeechForCTC(tiny_config(stable_layer_norm=True)).backbone.save_pretrained(plain)
        AdaptSpeechForCTC.from_backbone(str(plain), mms_language="eng")
    with pytest.raises(ValueError, match=r"built-in MMS adapter is in encoder layers \[0, 1\]"):
        AdaptSpeechForCTC.from_backbone(str(mms_folder), mms_language="eng", adapter_layers=[1])
    with pytest.raises(ValueError, match="adapter_attn_dim=4: MMS's built-in adapter would run beside"):
        AdaptSpeechForCTC(AdaptSpeechConfig(backbone_config={"adapter_attn_dim": 4, "do_stable_layer_norm": True},
                                            vocab_size=12))


def mms_tokenizer(tmp_path):
    """transformers' MMS tokenizer layout: one nested vocab.json, one vocabulary per language."""
    special = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3, "|": 4}
    vocab = {
        BUILTIN: {**special, **{c: 5 + i for i, c in enumerate("abcde")}},  # 10
        "fra": {**special, **{c: 5 + i for i, c in enumerate("abcdefgé")}},  # 13, not the 12 of fra's head
        "deu": {**special, **{c: 5 + i for i, c in enumerate("abcd")}},  # 9
    }
    (tmp_path / "vocab.json").write_text(json.dumps(vocab))
    return Wav2Vec2CTCTokenizer(str(tmp_path / "vocab.json"), target_lang=BUILTIN)


def test_set_target_language_switches_the_vocabulary_and_refuses_a_mismatch(mms_folder, tmp_path):
    model = wrap(mms_folder)
    model.load_adapter("fra", mms_folder, activate=False)
    model.load_adapter("deu", mms_folder, activate=False)
    tokenizer = mms_tokenizer(tmp_path)
    model.set_target_language("deu", tokenizer=tokenizer)
    assert tokenizer.target_lang == "deu" and model.config.active_languages == ["deu"]
    assert tokenizer.decode([5, 6, 4, 8]) == "ab d"
    before = snapshot(model)
    with pytest.raises(ValueError, match=r"head used for 'fra' has 12 outputs but the Wav2Vec2CTCTokenizer vocabulary "
                                         r"for 'fra' has 13 tokens"):
        model.set_target_language("fra", tokenizer=tokenizer)
    assert tokenizer.target_lang == "deu"  # neither the tokenizer nor the model changed
    assert_unchanged(model, before)
    assert model.config.active_languages == ["deu"]
    with pytest.raises(ValueError, match="no vocabulary for 'xx'"):
        model.add_language_adapter("xx")
        model.set_target_language("xx", tokenizer=tokenizer)
