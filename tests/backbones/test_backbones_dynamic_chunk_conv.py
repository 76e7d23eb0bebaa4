"""``backbone_config.conv_lookahead: chunk``: the dynamic chunk convolution (Li et al. 2023) of the fbank Conformer and
the wav2vec2-conformer: the symmetric convolution at full context (same weights and keys), the frames past the end of
the running chunk masked to zero otherwise, the chunk taken from the call (chosen, drawn in training, or configured)."""

from __future__ import annotations

import pytest
import torch

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.attention.chunking import chunk_attention, draw_dynamic_chunk
from adaptspeech.backbones.causal_conv import ChunkDepthwiseConv1d
from adaptspeech.testing import tiny_config, tiny_inputs

BACKBONES = ["fbank_conformer", "wav2vec2_conformer"]
ATTENTION = {"kind": "rel_pos", "dynamic_chunks": True}


def reference(conv: torch.nn.Conv1d, x: torch.Tensor, chunk: int, lookahead: int | None = None) -> torch.Tensor:
    """The definition frame by frame: output ``t`` sums ``w[i] x[t - l + i]`` (``l = k - 1 - r`` left frames, ``r``
    the look-ahead, ``(k-1)/2`` by default) over the inputs ``0 <= s < T`` that do not lie past the end of ``t``'s
    chunk (``chunk = 0``: none does)."""
    kernel = conv.kernel_size[0]
    weight, half = conv.weight[:, 0], kernel - 1 - ((kernel - 1) // 2 if lookahead is None else lookahead)  # [D, k]
    frames = x.shape[-1]
    out = torch.zeros_like(x)
    for t in range(frames):
        end = frames if chunk <= 0 else min((t // chunk + 1) * chunk, frames)
        for i in range(conv.kernel_size[0]):
            s = t - half + i
            if 0 <= s < end:
                out[..., t] += weight[:, i] * x[..., s]
        if conv.bias is not None:
            out[..., t] += conv.bias
    return out


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("lookahead", [None, 1, 2, 3])  # None: the dynamic chunk convolution (3 of kernel 7)
def test_chunked_convolution_is_the_definition(bias: bool, lookahead: int | None) -> None:
    torch.manual_seed(0)
    conv = ChunkDepthwiseConv1d(6, 7, bias=bias, lookahead=lookahead)
    x = torch.randn(2, 6, 17)
    with torch.no_grad():
        for chunk in (0, 1, 2, 4, 5, 17, 30):  # 0: full context; 5 does not divide 17; 17 and 30: one chunk
            with chunk_attention(chunk):
                torch.testing.assert_close(conv(x), reference(conv, x, chunk, lookahead), atol=1e-6, rtol=0)


def test_a_frame_sees_its_left_context_and_its_own_chunk_only() -> None:
    torch.manual_seed(0)
    conv = ChunkDepthwiseConv1d(4, 7)  # 3 frames each side
    x = torch.randn(1, 4, 16)
    changed = x.clone()
    changed[..., 8] += 1.0  # the first frame of the third chunk of 4
    with torch.no_grad(), chunk_attention(4):
        moved = (conv(changed) - conv(x)).abs().amax(dim=1)[0]  # [T]
    assert moved[:8].eq(0).all()  # earlier chunks never see it, however close (frames 5-7 would without chunks)
    assert (moved[8:12] > 0).all()  # its own chunk, frame 8 and the three after it
    assert moved[12:].eq(0).all()  # past its reach of 3 frames (frame 11 is the last it reaches)


def test_a_lookahead_within_the_chunk_sees_its_left_context_and_r_frames_of_its_chunk() -> None:
    torch.manual_seed(0)
    conv = ChunkDepthwiseConv1d(4, 7, lookahead=1)  # 5 frames behind, 1 ahead
    x = torch.randn(1, 4, 16)
    changed = x.clone()
    changed[..., 8] += 1.0  # the first frame of the third chunk of 4
    with torch.no_grad(), chunk_attention(4):
        moved = (conv(changed) - conv(x)).abs().amax(dim=1)[0]  # [T]
    assert moved[:8].eq(0).all()  # frame 7 would see it one frame ahead without chunks: not across the chunk's end
    assert (moved[8:12] > 0).all()  # its own chunk
    assert (moved[12:14] > 0).all() and moved[14:].eq(0).all()  # the next chunk's first 5 frames reach back to it
    with torch.no_grad():
        moved = (conv(changed) - conv(x)).abs().amax(dim=1)[0]
    assert moved[:7].eq(0).all() and moved[7] > 0  # full context: one frame ahead, across any chunk


@pytest.mark.parametrize("backbone", BACKBONES)
def test_full_context_is_the_symmetric_model_with_the_same_weights(backbone: str) -> None:
    """A normally trained (symmetric) checkpoint initialises the dynamic chunk model unchanged: the same state-dict
    keys, and at full context the same logits, to the bit (the same conv1d over the same zero padding)."""
    overrides = {"conv_depthwise_kernel_size": 5}
    torch.manual_seed(0)
    symmetric = AdaptSpeechForCTC(tiny_config(backbone, backbone_overrides=overrides, attention=ATTENTION)).eval()
    chunked = AdaptSpeechForCTC(tiny_config(backbone, backbone_overrides={**overrides, "conv_lookahead": "chunk"},
                                            attention=ATTENTION)).eval()
    chunked.load_state_dict(symmetric.state_dict())  # strict: the same keys and shapes
    assert isinstance(chunked._encoder_layers()[0].conv_module.depthwise_conv, ChunkDepthwiseConv1d)
    inputs = tiny_inputs(chunked.config, batch=2, seconds=0.5)  # a padded batch
    with torch.no_grad():
        torch.testing.assert_close(chunked(**inputs).logits, symmetric(**inputs).logits, atol=0, rtol=0)
        with chunk_attention(4):  # with chunks the convolution differs (the attention masks are the same)
            assert not torch.allclose(chunked(**inputs).logits, symmetric(**inputs).logits, atol=1e-3)


def test_the_convolution_gets_the_chunk_of_the_call() -> None:
    """Dynamic chunk training's draw of the batch and a configured ``attention.chunk_size`` reach every layer's
    convolution (the chunk it reads while it runs)."""
    torch.manual_seed(0)
    model = AdaptSpeechForCTC(tiny_config("fbank_conformer", backbone_overrides={"conv_lookahead": "chunk"},
                                          attention=ATTENTION))
    seen: list[int] = []
    for layer in model._encoder_layers():
        layer.conv_module.depthwise_conv.register_forward_hook(lambda conv, args, out: seen.append(conv.chunk_size()))
    inputs = tiny_inputs(model.config, batch=2, seconds=2.0)
    frames = model.config.backbone_spec.num_frames(model.backbone, inputs["input_features"].shape[1])
    drawn = []
    for seed in range(4):  # a few batches: chunked and full-context draws
        torch.manual_seed(seed)
        drawn.append(draw_dynamic_chunk(frames, model.config.attention.max_chunk_size)[0])
        torch.manual_seed(seed)
        model.train()(**inputs)
    assert seen == [chunk for chunk in drawn for _ in range(2)]  # two layers, each with the batch's draw
    assert any(drawn) and 0 in drawn
    seen.clear()
    model.eval()(**inputs)
    assert seen == [0, 0]  # evaluation: full context unless chosen
    static = AdaptSpeechForCTC(tiny_config("fbank_conformer", backbone_overrides={"conv_lookahead": "chunk"},
                                           attention={"kind": "rel_pos", "chunk_size": 3})).eval()
    inputs = tiny_inputs(static.config, batch=1, seconds=1.0)
    with torch.no_grad():
        configured = static(**inputs).logits
        with chunk_attention(3):
            torch.testing.assert_close(configured, static(**inputs).logits, atol=0, rtol=0)
        with chunk_attention(0):
            assert not torch.allclose(configured, static(**inputs).logits, atol=1e-3)


@pytest.mark.parametrize("backbone", BACKBONES)
def test_a_chunk_model_saves_loads_and_trains(tmp_path, backbone: str) -> None:
    overrides = {"conv_lookahead": "chunk"}
    if backbone == "wav2vec2_conformer":
        overrides["feat_extract_norm"] = "layer"
    torch.manual_seed(0)
    model = AdaptSpeechForCTC(tiny_config(backbone, backbone_overrides=overrides, attention=ATTENTION))
    inputs = tiny_inputs(model.config, batch=2, seconds=0.5)
    with chunk_attention(2):  # a chunked training step: the gradient reaches the depthwise kernel
        model.train()(**inputs, labels=torch.tensor([[4, 5], [6, -100]])).loss.backward()
    assert model._encoder_layers()[0].conv_module.depthwise_conv.weight.grad.abs().sum() > 0
    model.eval().save_pretrained(tmp_path)
    loaded = AdaptSpeechForCTC.from_pretrained(tmp_path).eval()
    assert loaded.config.backbone_config.conv_lookahead == "chunk"
    with torch.no_grad(), chunk_attention(2):
        torch.testing.assert_close(loaded(**inputs).logits, model(**inputs).logits, atol=0, rtol=0)


def test_a_symmetric_checkpoint_loads_as_a_chunk_model(tmp_path) -> None:
    """The documented way to start a dynamic chunk model from a normally trained folder: its config with
    ``conv_lookahead: chunk``; every weight loads (none missing, none new) and full context gives the same logits."""
    torch.manual_seed(0)
    symmetric = AdaptSpeechForCTC(tiny_config("fbank_conformer", attention=ATTENTION)).eval()
    symmetric.save_pretrained(tmp_path)
    config = AdaptSpeechForCTC.config_class.from_pretrained(tmp_path)
    config.backbone_config.conv_lookahead = "chunk"
    chunked = AdaptSpeechForCTC.from_pretrained(tmp_path, config=config)
    expected = symmetric.state_dict()
    loaded = chunked.state_dict()
    assert loaded.keys() == expected.keys()
    assert all(torch.equal(loaded[key], expected[key]) for key in expected)  # every weight came from the folder
    assert isinstance(chunked._encoder_layers()[0].conv_module.depthwise_conv, ChunkDepthwiseConv1d)
    inputs = tiny_inputs(config, batch=2, seconds=0.5)
    with torch.no_grad():
        torch.testing.assert_close(chunked.eval()(**inputs).logits, symmetric(**inputs).logits, atol=0, rtol=0)
