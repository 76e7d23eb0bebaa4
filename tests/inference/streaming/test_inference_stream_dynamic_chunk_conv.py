"""``encode_chunk`` with the dynamic chunk convolution (``conv_lookahead: chunk``): chunk by chunk equals the whole
forward under the same chunk mask (attention and convolution), for both conformer backbones, with a language adapter
and with the SimAdapter fusion, the convolution's cache holding its ``(k-1)/2`` left frames per layer; a look-ahead
convolution (``r > 0``) is refused with the reason."""

from __future__ import annotations

import pytest
import torch
from helpers.streaming import TOLERANCE, masked_forward, randomise_adapters, stream, streaming_model

from adaptspeech.testing import tiny_inputs


@pytest.mark.parametrize(
    ("backbone", "seconds", "piece"), [("fbank_conformer", 0.9, 7), ("wav2vec2_conformer", 0.3, 230)]
)
@pytest.mark.parametrize(("chunk_size", "num_left_chunks"), [(4, -1), (3, 1), (1, -1)])
def test_chunk_by_chunk_equals_the_masked_forward(backbone, seconds, piece, chunk_size, num_left_chunks) -> None:
    model = streaming_model(backbone, conv_lookahead="chunk")
    inputs = tiny_inputs(model.config, batch=2, seconds=seconds, pad_last=False)[model.main_input_name]
    full = masked_forward(model, inputs, chunk_size, num_left_chunks)
    streamed = stream(model, inputs, piece, chunk_size, num_left_chunks)
    assert streamed.shape == full.shape
    torch.testing.assert_close(streamed, full, atol=TOLERANCE, rtol=0)
    # the reference is the chunked convolution: the full-context one (the symmetric kernel) is another output
    assert not torch.allclose(streamed, masked_forward(model, inputs, 0, -1)[:, : full.shape[1]], atol=1e-3)


@pytest.mark.parametrize("backbone", ["fbank_conformer", "wav2vec2_conformer"])
def test_adapter_and_fusion_stream_with_the_dynamic_chunk_convolution(backbone) -> None:
    model = streaming_model(backbone, conv_lookahead="chunk", adapter_languages=["ro", "cs"],
                            adapter_defaults={"bottleneck": 8})
    model.add_fusion(["ro", "cs"], target_language="ro")
    randomise_adapters(model)
    model.eval()
    seconds, piece = (0.8, 5) if backbone == "fbank_conformer" else (0.3, 300)
    inputs = tiny_inputs(model.config, batch=1, seconds=seconds, pad_last=False)[model.main_input_name]
    results = {}
    for setting in ("ro", "fusion"):
        model.set_fusion_active(setting == "fusion")
        if setting != "fusion":
            model.set_active_languages([setting])
        full = masked_forward(model, inputs, 4, 2)
        torch.testing.assert_close(stream(model, inputs, piece, 4, 2), full, atol=TOLERANCE, rtol=0)
        results[setting] = full
    assert not torch.allclose(results["ro"], results["fusion"])  # the fusion does act on the stream


def test_the_cache_holds_half_the_kernel_per_layer() -> None:
    model = streaming_model(conv_lookahead="chunk")  # kernel 5: 2 left frames, against 4 for the causal kernel
    causal = streaming_model(conv_lookahead=0)
    inputs = tiny_inputs(model.config, batch=1, seconds=0.6, pad_last=False)["input_features"]
    caches = {}
    for name, each in (("chunk", model), ("causal", causal)):
        _, cache = each.encode_chunk(inputs, chunk_size=4, num_left_chunks=1)
        convs = [layer.conv_module.depthwise_conv for layer in each._encoder_layers()]
        caches[name] = [tuple(cache.state.get(conv).shape) for conv in convs]
    hidden = model.config.hidden_size
    assert caches["chunk"] == [(1, hidden, 2)] * 2
    assert caches["causal"] == [(1, hidden, 4)] * 2


@pytest.mark.parametrize("lookahead", [1, 2])
def test_a_lookahead_convolution_is_refused_with_the_reason(lookahead) -> None:
    model = streaming_model(conv_lookahead=lookahead)
    with pytest.raises(ValueError, match=rf"this model cannot stream: layer 0's depthwise convolution looks "
                                         rf"{lookahead} frame\(s\) ahead \(backbone_config\.conv_lookahead="
                                         rf"{lookahead}\): a frame of the next chunk depends on that whole chunk .*"
                                         r"conv_lookahead: 0 \(causal\) or chunk"):
        model.encode_chunk(torch.randn(1, 40, 16))
