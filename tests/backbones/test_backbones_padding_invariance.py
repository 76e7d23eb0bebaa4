"""An utterance padded in a batch gets exactly the encoder output it gets alone (backbones/conv_padding.py and the
fbank front end): the conformer convolution and the stride-2 subsampling convolutions never see padding, also when
a checkpointed layer recomputes in backward."""

import pytest
import torch

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.backbones.conv_padding import frame_padding, mask_convolution_padding
from adaptspeech.testing import tiny_config, tiny_inputs

pytestmark = pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
BACKBONES = ["fbank_conformer", "wav2vec2_conformer"]


def model_for(backbone_type):
    torch.manual_seed(0)
    overrides = {"conv_depthwise_kernel_size": 7}
    if backbone_type == "wav2vec2_conformer":
        # XLS-R's per-frame LayerNorm front end; wav2vec2-base's GroupNorm normalises over the whole padded
        # waveform, which no masking after it can undo (transformers: pass no attention_mask to such models)
        overrides["feat_extract_norm"] = "layer"
    model = AdaptSpeechForCTC(tiny_config(backbone_type, backbone_overrides=overrides,
                                          adapter_languages=["ro"], active_languages=["ro"])).eval()
    with torch.no_grad():  # a trained convolution module's LayerNorm has a bias (0 at initialisation): a zeroed padded
        for layer in model._encoder_layers():  # frame leaves it as LayerNorm(0) = bias, not zero
            layer.conv_module.layer_norm.bias.normal_(0.0, 0.5)
    return model


@pytest.mark.parametrize("backbone_type", BACKBONES)
def test_a_padded_utterance_gets_the_hidden_states_it_gets_alone(backbone_type):
    model = model_for(backbone_type)
    batch = tiny_inputs(model.config, batch=2, seconds=0.4)  # the last utterance is 70% real, then padding
    key = model.main_input_name
    real = int(batch["attention_mask"][1].sum())
    with torch.no_grad():
        padded = model(**batch)
        alone = model(**{key: batch[key][1:, :real]})
    frames = int(alone.frame_lengths[0])
    assert int(padded.frame_lengths[1]) == frames
    difference = (padded.encoder_hidden_states[1, :frames] - alone.encoder_hidden_states[0]).abs().max()
    assert difference < 1e-5, float(difference)


@pytest.mark.parametrize("backbone_type", BACKBONES)
def test_padding_stays_masked_when_checkpointed_layers_recompute(backbone_type):
    model = model_for(backbone_type)
    model.set_trainable(adapters=["ro"], head=True, backbone=True)
    model.train()
    batch = tiny_inputs(model.config, batch=2, seconds=0.4)
    labels = torch.tensor([[4, 5, 6], [5, 6, -100]])

    def grads():
        model.zero_grad(set_to_none=True)
        torch.manual_seed(0)
        model(**batch, labels=labels).loss.backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    reference = grads()
    model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    checkpointed = grads()
    assert checkpointed.keys() == reference.keys()
    for name, grad in reference.items():
        assert torch.allclose(checkpointed[name], grad, atol=1e-6), name


def test_the_hook_zeroes_only_marked_frames_and_only_inside_a_call():
    conv = torch.nn.Module()
    conv.glu = torch.nn.GLU(dim=1)  # the conformer convolution module's GLU: [B, 2D, T] -> [B, D, T]
    layer = torch.nn.Module()
    layer.conv_module = conv
    assert mask_convolution_padding(torch.nn.ModuleList([layer, layer])) == 1  # hooked once
    x = torch.ones(2, 4, 3)
    expected = torch.nn.functional.glu(x, dim=1)
    assert torch.equal(conv.glu(x), expected)  # outside a call: transformers' behaviour
    with frame_padding(torch.tensor([[True, True, True], [True, False, False]])):
        y = conv.glu(x)
    assert torch.equal(y[0], expected[0]) and torch.equal(y[1, :, 0], expected[1, :, 0]) and not y[1, :, 1:].any()
