"""The head registry (adaptspeech/heads/__init__.py): every head names its model class and output layers (which give
its decoders), and the model class chosen from a saved config loads every head."""

import pytest
import torch
from transformers import AutoConfig

from adaptspeech.decoding import DECODING_METHODS, check_decoder, decoders_for
from adaptspeech.heads import HEADS, get_head
from adaptspeech.testing import tiny_config, tiny_inputs

LAS = {"decoder_hidden": 16, "embedding_dim": 8, "attention_dim": 8}


@pytest.mark.parametrize("name", HEADS.names())
def test_every_head_builds_its_model_class_and_round_trips(tmp_path, name):
    spec = get_head(name)
    decoders = decoders_for(spec.outputs)
    assert set(decoders) <= set(DECODING_METHODS.names()) and spec.default_decoder in decoders
    torch.manual_seed(0)
    config = tiny_config("fbank_conformer", head=name, las=LAS)
    model = spec.model_class(config).eval()
    assert (model.ctc_head is not None) == spec.has_ctc and (model.las_head is not None) == spec.has_las
    model.save_pretrained(tmp_path)
    loaded = get_head(AutoConfig.from_pretrained(tmp_path).head).model_class.from_pretrained(tmp_path).eval()
    assert type(loaded) is type(model)
    inputs = tiny_inputs(config)
    with torch.no_grad():
        a, b = model(**inputs), loaded(**inputs)
    assert torch.equal(a.encoder_hidden_states, b.encoder_hidden_states)


def test_a_decoder_the_head_lacks_is_refused_naming_head_and_supported_decoders():
    with pytest.raises(ValueError, match=r"'joint' needs a CTC head and an attention \(LAS\) head; head 'ctc' "
                                         r"\(CTC only\) supports: ctc_greedy, ctc_beam"):
        check_decoder(get_head("ctc"), "joint")
    with pytest.raises(ValueError, match=r"'ctc_beam' needs a CTC head; head 'las'"):
        check_decoder(get_head("las"), "ctc_beam")
    check_decoder(get_head("ctc_las"), "joint")


def test_unknown_head_lists_the_registered_ones():
    with pytest.raises(ValueError, match="allowed values: ctc, ctc_las, las"):
        tiny_config(head="rnnt")
