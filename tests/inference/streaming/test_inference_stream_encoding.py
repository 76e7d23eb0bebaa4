"""``model.encode_chunk``: the encoder fed piece by piece equals the whole-utterance forward under the same chunk mask
(every streaming attention kind, the fbank Conformer and the wav2vec2-conformer, with a language adapter, with the
SimAdapter fusion and with per-utterance languages), with a bounded cache; what cannot stream is refused."""

from __future__ import annotations

import pytest
import torch
from helpers.streaming import TOLERANCE, masked_forward, randomise_adapters, stream, streaming_model

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.testing import tiny_config, tiny_inputs


@pytest.mark.parametrize("kind", ["mhsa", "rel_pos", "ldsa"])
@pytest.mark.parametrize(
    ("backbone", "seconds", "piece"), [("fbank_conformer", 0.9, 7), ("wav2vec2_conformer", 0.3, 230)]
)
@pytest.mark.parametrize(("chunk_size", "num_left_chunks"), [(4, -1), (3, 1)])
def test_chunk_by_chunk_equals_the_masked_forward(kind, backbone, seconds, piece, chunk_size, num_left_chunks) -> None:
    model = streaming_model(backbone, kind)
    inputs = tiny_inputs(model.config, batch=2, seconds=seconds, pad_last=False)[model.main_input_name]
    full = masked_forward(model, inputs, chunk_size, num_left_chunks)
    streamed = stream(model, inputs, piece, chunk_size, num_left_chunks)
    assert streamed.shape == full.shape
    torch.testing.assert_close(streamed, full, atol=TOLERANCE, rtol=0)


def test_adapter_and_fusion_stream_unchanged() -> None:
    model = streaming_model(adapter_languages=["ro", "cs"], adapter_defaults={"bottleneck": 8})
    model.add_fusion(["ro", "cs"], target_language="ro")
    randomise_adapters(model)
    model.eval()
    inputs = tiny_inputs(model.config, batch=1, seconds=0.8, pad_last=False)["input_features"]
    results = {}
    for setting in ("ro", "cs", "fusion"):
        if setting == "fusion":
            model.set_fusion_active(True)
        else:
            model.set_fusion_active(False)
            model.set_active_languages([setting])
        full = masked_forward(model, inputs, 4, 2)
        torch.testing.assert_close(stream(model, inputs, 5, 4, 2), full, atol=TOLERANCE, rtol=0)
        results[setting] = full
    assert not torch.allclose(results["ro"], results["cs"])  # the adapters do act on the stream
    assert not torch.allclose(results["ro"], results["fusion"])


def test_per_utterance_languages_stream() -> None:
    model = streaming_model(adapter_languages=["ro", "cs"], adapter_defaults={"bottleneck": 8})
    randomise_adapters(model)
    model.set_active_languages(["ro", "cs"])
    inputs = tiny_inputs(model.config, batch=2, seconds=0.6, pad_last=False)["input_features"]
    lang_ids = torch.tensor([1, 0])
    full = masked_forward(model, inputs, 4, -1, lang_ids=lang_ids)
    torch.testing.assert_close(stream(model, inputs, 9, 4, -1, lang_ids=lang_ids), full, atol=TOLERANCE, rtol=0)


def test_one_frame_at_a_time_and_bounded_cache() -> None:
    model = streaming_model()
    inputs = tiny_inputs(model.config, batch=1, seconds=2.0, pad_last=False)["input_features"]
    torch.testing.assert_close(stream(model, inputs, 1, 2, 1), masked_forward(model, inputs, 2, 1), atol=TOLERANCE,
                               rtol=0)
    cache, sizes = None, []
    for start in range(0, inputs.shape[1], 8):  # 8 filterbank frames = 2 encoder frames = one chunk
        _, cache = model.encode_chunk(inputs[:, start : start + 8], cache, chunk_size=2, num_left_chunks=1)
        sizes.append(cache.cached_elements())
    assert len(set(sizes[5:])) == 1  # keys / values of one left chunk, k - 1 conv frames per layer: flat


def test_what_cannot_stream_is_refused() -> None:
    x = torch.randn(1, 40, 16)
    cases = [
        (dict(attention={"kind": "default"}), r"attention\.kind='default' cannot stream.*kinds that can: ldsa, mhsa"),
        (dict(attention={"kind": "synthesizer_dense"}), r"'synthesizer_dense' cannot stream"),
        (dict(attention={"kind": "mhsa", "layers": [0]}), r"leaves layers \[1\] with the backbone's own attention"),
    ]
    for settings, message in cases:
        model = AdaptSpeechForCTC(tiny_config("fbank_conformer", backbone_overrides={"conv_lookahead": 0},
                                              **settings)).eval()
        with pytest.raises(ValueError, match=message):
            model.encode_chunk(x)
    symmetric = AdaptSpeechForCTC(tiny_config("fbank_conformer", attention={"kind": "mhsa"})).eval()
    with pytest.raises(ValueError, match=r"looks 1 frame\(s\) ahead .*conv_lookahead=None.*conv_lookahead: 0"):
        symmetric.encode_chunk(x)
    wav2vec2 = AdaptSpeechForCTC(tiny_config("wav2vec2", attention={"kind": "mhsa"})).eval()
    with pytest.raises(ValueError, match=r"wav2vec2 backbone cannot stream: its convolutional position embedding"):
        wav2vec2.encode_chunk(torch.randn(1, 800))
    group_norm = AdaptSpeechForCTC(tiny_config("wav2vec2_conformer", backbone_overrides={
        "conv_lookahead": 0, "feat_extract_norm": "group"}, attention={"kind": "mhsa"})).eval()
    with pytest.raises(ValueError, match=r"feat_extract_norm='group'"):
        group_norm.encode_chunk(torch.randn(1, 800))


def test_chunk_limits_warnings_and_misuse() -> None:
    model = streaming_model(kind="mhsa")
    with pytest.raises(ValueError, match=r"chunk of 26 frames \(1040 ms\) is larger than the model's maximum, "
                                         r"attention\.max_chunk_size=25 \(1000 ms\)"):
        model.encode_chunk(torch.randn(1, 8, 16), chunk_size=26)
    static = AdaptSpeechForCTC(tiny_config("fbank_conformer", backbone_overrides={"conv_lookahead": 0},
                                           attention={"kind": "mhsa", "chunk_size": 4})).eval()
    with pytest.raises(ValueError, match=r"attention\.chunk_size=4 \(160 ms\)"):
        static.encode_chunk(torch.randn(1, 8, 16), chunk_size=8)
    unchunked = AdaptSpeechForCTC(tiny_config("fbank_conformer", backbone_overrides={"conv_lookahead": 0},
                                              attention={"kind": "mhsa"})).eval()
    with pytest.warns(UserWarning, match="trained without chunk masks"):
        unchunked.encode_chunk(torch.randn(1, 8, 16))
    _, cache = model.encode_chunk(torch.randn(1, 8, 16), final=True)
    with pytest.raises(ValueError, match="was finalised"):
        model.encode_chunk(torch.randn(1, 8, 16), cache)
    with pytest.raises(ValueError, match=r"model\.eval\(\)"):
        model.train().encode_chunk(torch.randn(1, 8, 16))
