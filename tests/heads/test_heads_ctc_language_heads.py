"""Per-language CTC heads (MMS: one vocabulary per language): which head runs, what trains, how they are saved and
loaded, and what is refused (mixing languages whose heads differ in one batch)."""

import pytest
import torch

from adaptspeech import AdaptSpeechConfig, AdaptSpeechForCTC
from adaptspeech.adapters.files import AdapterLoadError
from adaptspeech.testing import tiny_config, tiny_inputs


def make_model(**kwargs):
    torch.manual_seed(0)
    config = tiny_config(
        adapter_languages=["ro", "cs", "pl"], adapter_defaults={"bottleneck": 8},
        language_heads={"cs": {"vocab_size": 7}, "pl": {"vocab_size": 9}}, **kwargs,
    )
    return AdaptSpeechForCTC(config).eval()


def run(model, **kwargs):
    with torch.no_grad():
        return model(**tiny_inputs(model.config), **kwargs).logits


def manual_logits(model, language, **kwargs):
    """The encoder output through the named output layer (None: the shared one), computed by hand."""
    with torch.no_grad():
        hidden = model.encode(tiny_inputs(model.config)["input_values"], tiny_inputs(model.config)["attention_mask"],
                              **kwargs)[0]
        layer = model.ctc_head.lm_head if language is None else model.ctc_head.language_heads[language]
        return hidden @ layer.weight.T + layer.bias


def test_the_target_languages_head_runs():
    model = make_model()
    for language, head, size in (("cs", "cs", 7), ("pl", "pl", 9), ("ro", None, 12)):
        model.set_target_language(language)
        out = run(model)
        assert out.shape[-1] == size
        assert torch.allclose(out, manual_logits(model, head), atol=1e-6)
    model.set_active_languages([])
    assert run(model).shape[-1] == 12
    model.add_fusion(["ro", "cs", "pl"], target_language="pl")
    assert run(model).shape[-1] == 9  # the fusion's target language's head
    model.add_fusion(["ro", "cs", "pl"], target_language="ro")
    assert run(model).shape[-1] == 12
    model.add_fusion(["ro", "cs"])  # no target: the shared head
    assert run(model).shape[-1] == 12


def test_routed_batches_need_one_head():
    model = make_model()
    ids = model.language_to_id
    model.set_active_languages(["ro", "cs"])
    assert run(model, lang_ids=torch.tensor([ids["cs"], ids["cs"]])).shape[-1] == 7
    with pytest.raises(ValueError, match=r"this batch's languages \['ro', 'cs'\] use different CTC heads \(ro uses "
                                         r"the shared head \(vocabulary 12\); cs uses cs's head \(vocabulary 7\)\)"):
        run(model, lang_ids=torch.tensor([ids["ro"], ids["cs"]]))
    # a decoder calling the head after encode() has no per-utterance languages: the active ones must agree
    hidden = torch.zeros(1, 3, 32)
    with pytest.raises(ValueError, match=r"the active languages \['ro', 'cs'\] use different CTC heads"):
        model.ctc_head(hidden)
    model.remove_language_head("cs")
    assert model.ctc_head(hidden).shape[-1] == 12


def test_only_the_named_heads_train():
    model = make_model()
    model.set_trainable(adapters=["pl"], heads=["pl"])
    groups = model.trainable_parameters()["groups"]
    assert groups["head:pl"] == {"total": 9 * 32 + 9, "trainable": 9 * 32 + 9}
    assert groups["head:cs"]["trainable"] == 0 and groups["head"]["trainable"] == 0
    model.train()
    model.set_target_language("pl")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    model(**tiny_inputs(model.config), labels=torch.tensor([[4, 5, 6], [5, 6, 7]])).loss.backward()
    optimizer.step()
    changed = {k for k, v in model.state_dict().items() if not torch.equal(before[k], v)}
    assert changed == {k for k, p in model.named_parameters() if p.requires_grad}
    assert all(".adapters.pl." in k or k.startswith("ctc_head.language_heads.pl.") for k in changed)
    with pytest.raises(KeyError, match=r"no CTC head of their own for \['ro'\]"):
        model.set_trainable(heads=["ro"])


def test_language_heads_round_trip_and_travel_with_adapter_files(tmp_path):
    model = make_model()
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.05 * torch.randn_like(param))
    model.set_target_language("pl")
    expected = run(model)
    model.save_pretrained(tmp_path / "model")
    again = AdaptSpeechForCTC.from_pretrained(tmp_path / "model").eval()
    assert again.config.language_heads == {"cs": {"vocab_size": 7}, "pl": {"vocab_size": 9}}
    assert torch.equal(run(again), expected)

    model.save_adapter("pl", tmp_path / "adapters", include_head=True)
    fresh = AdaptSpeechForCTC(tiny_config(adapter_languages=["ro"], adapter_defaults={"bottleneck": 8})).eval()
    fresh.load_state_dict({k: v for k, v in model.state_dict().items() if "adapters.cs" not in k
                           and "adapters.pl" not in k and "language_heads" not in k})
    fresh.load_adapter("pl", tmp_path / "adapters")
    assert fresh.config.language_heads == {"pl": {"vocab_size": 9}}
    assert torch.equal(run(fresh), expected)
    # a joint CTC/attention model cannot hold a language's own head: refused before anything changes
    joint = AdaptSpeechForCTC(tiny_config(head="ctc_las", adapter_languages=["ro"])).eval()
    state = {k: v.clone() for k, v in joint.state_dict().items()}
    with pytest.raises(AdapterLoadError, match="per-language heads need head='ctc'"):
        joint.load_adapter("pl", tmp_path / "adapters")
    assert joint.state_dict().keys() == state.keys() and "pl" not in joint.config.adapters


def test_removing_a_language_removes_its_head_and_the_config_refuses_bad_heads():
    model = make_model()
    model.remove_language_adapter("cs")
    assert "cs" not in model.config.language_heads and "cs" not in model.ctc_head.language_heads
    with pytest.raises(ValueError, match=r"language_heads\['xx'\]: 'xx' has no adapter"):
        tiny_config(adapter_languages=["ro"], language_heads={"xx": {"vocab_size": 5}})
    with pytest.raises(ValueError, match="head='ctc_las' shares one vocabulary"):
        tiny_config(head="ctc_las", adapter_languages=["ro"], language_heads={"ro": {"vocab_size": 5}})
    with pytest.raises(ValueError, match=r"vocab_size=3: the CTC blank \(pad_token_id=4\) is outside it"):
        AdaptSpeechConfig(vocab_size=12, pad_token_id=4, adapter_languages=["ro"],
                          language_heads={"ro": {"vocab_size": 3}})
    with pytest.raises(ValueError, match="already has a CTC head"):
        model.add_language_head("pl", 5)


def test_decoding_a_routed_batch_uses_its_languages_head():
    """``transcribe_batch`` / ``model_decoding_inputs`` (what ``evaluate``, ``lm tune`` and training-time evaluation
    run) pick the head of the batch's language as the forward does; they used to ask for the active languages' head
    and refused a one-language batch of a routed model."""
    from adaptspeech.decoding import model_decoding_inputs, transcribe_batch

    model = make_model()
    ids = model.language_to_id
    model.set_active_languages(["ro", "cs"])
    inputs = tiny_inputs(model.config)
    lang_ids = torch.tensor([ids["cs"], ids["cs"]])
    expected = run(model, lang_ids=lang_ids).log_softmax(-1)
    encoded = model_decoding_inputs(model, inputs["input_values"], inputs["attention_mask"], lang_ids)
    assert encoded.ctc_log_probs.shape[-1] == 7
    assert torch.allclose(encoded.ctc_log_probs, expected, atol=1e-6)
    ids_out = transcribe_batch(model, {**inputs, "lang_ids": lang_ids}, method="ctc_greedy")
    lengths = encoded.ctc_lengths.tolist()
    for row, n, hyp in zip(expected.argmax(-1), lengths, ids_out, strict=True):
        collapsed = [int(t) for i, t in enumerate(row[:n]) if (i == 0 or t != row[i - 1]) and int(t) != 0]
        assert hyp == collapsed
    with pytest.raises(ValueError, match="use different CTC heads"):
        model_decoding_inputs(model, inputs["input_values"], inputs["attention_mask"],
                              torch.tensor([ids["ro"], ids["cs"]]))
