"""``encode_chunk`` with the dynamic chunk convolution (``conv_lookahead: chunk``) and the look-ahead within the chunk
(``conv_lookahead: r``): chunk by chunk equals the whole forward under the same chunk mask (attention and convolution),
for both conformer backbones, with a language adapter and with the SimAdapter fusion, the convolution's cache holding
its ``k - 1 - r`` left frames per layer (``(k-1)/2`` for the dynamic chunk convolution)."""

from __future__ import annotations

import pytest
import torch
from helpers.streaming import TOLERANCE, masked_forward, randomise_adapters, stream, streaming_model

from adaptspeech.testing import tiny_inputs


@pytest.mark.parametrize(
    ("backbone", "seconds", "piece"), [("fbank_conformer", 0.9, 7), ("wav2vec2_conformer", 0.3, 230)]
)
@pytest.mark.parametrize(("chunk_size", "num_left_chunks"), [(4, -1), (3, 1), (1, -1)])
@pytest.mark.parametrize("conv_lookahead", ["chunk", 1])  # kernel 5: chunk sees 2 frames ahead, 1 one
def test_chunk_by_chunk_equals_the_masked_forward(backbone, seconds, piece, chunk_size, num_left_chunks,
                                                  conv_lookahead) -> None:
    model = streaming_model(backbone, conv_lookahead=conv_lookahead)
    inputs = tiny_inputs(model.config, batch=2, seconds=seconds, pad_last=False)[model.main_input_name]
    full = masked_forward(model, inputs, chunk_size, num_left_chunks)
    streamed = stream(model, inputs, piece, chunk_size, num_left_chunks)
    assert streamed.shape == full.shape
    torch.testing.assert_close(streamed, full, atol=TOLERANCE, rtol=0)
    # the reference is the chunked convolution: the full-context one (the kernel seeing past the chunk) is another
    assert not torch.allclose(streamed, masked_forward(model, inputs, 0, -1)[:, : full.shape[1]], atol=1e-3)


@pytest.mark.parametrize("backbone", ["fbank_conformer", "wav2vec2_conformer"])
@pytest.mark.parametrize("conv_lookahead", ["chunk", 1])
def test_adapter_and_fusion_stream_with_the_chunk_convolutions(backbone, conv_lookahead) -> None:
    model = streaming_model(backbone, conv_lookahead=conv_lookahead, adapter_languages=["ro", "cs"],
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


def test_the_cache_holds_the_left_frames_of_the_kernel_per_layer() -> None:
    """Kernel 5: the dynamic chunk convolution caches 2 left frames, the look-ahead of 1 frame 3, the causal one 4."""
    caches = {}
    for lookahead in ("chunk", 1, 0):
        model = streaming_model(conv_lookahead=lookahead)
        inputs = tiny_inputs(model.config, batch=1, seconds=0.6, pad_last=False)["input_features"]
        _, cache = model.encode_chunk(inputs, chunk_size=4, num_left_chunks=1)
        convs = [layer.conv_module.depthwise_conv for layer in model._encoder_layers()]
        caches[lookahead] = [tuple(cache.state.get(conv).shape) for conv in convs]
    hidden = model.config.hidden_size
    assert caches == {"chunk": [(1, hidden, 2)] * 2, 1: [(1, hidden, 3)] * 2, 0: [(1, hidden, 4)] * 2}
