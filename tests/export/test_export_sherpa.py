"""The exported graph of a waveform model runs in sherpa-onnx's offline recogniser (its wav2vec2-family CTC entry
point, ``OfflineRecognizer.from_omnilingual_asr_ctc``: the raw waveform in, ``[N, T, V]`` logits out, blank id 0,
``tokens.txt`` with ``▁`` for a space) and gives the transcripts that adaptspeech's greedy decoding gives, with
PyTorch and with :class:`OnnxRecognizer`, on 100 utterances.

sherpa-onnx normalises the waveform itself (zero mean, unit variance, eps 1e-5) and feeds ``x`` alone; the graph
normalises again (eps 1e-7) and reads the whole row (the stored ``x_lengths`` default), so its input differs from
adaptspeech's by a relative 1e-7 / variance at most. sherpa-onnx writes the special tokens (``[UNK]``, ``<s>``) it
decodes and keeps runs of spaces, where adaptspeech drops them and collapses spaces: a trained CTC head never emits the
special tokens (they are not targets), so the random head here is kept off them, and texts are compared with runs of
spaces collapsed. (A random model's transcripts repeat a few labels; they still depend on each clip's length and
content, and one frame decoded otherwise would change one.)"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.model_folders import audio, model_folder

from adaptspeech.export import export_model
from adaptspeech.inference.transcriber import transcribe
from adaptspeech.runtime import OnnxRecognizer
from adaptspeech.runtime.folder import ExportFolderError
from adaptspeech.runtime.sherpa import sherpa_transcribe
from adaptspeech.saved_model import load_saved_model
from adaptspeech.testing.tiny_models import FRONT_END_320X

pytest.importorskip("sherpa_onnx")

UTTERANCES = 100


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    from transformers import Wav2Vec2Processor

    root = tmp_path_factory.mktemp("sherpa")
    model_folder(root / "model", backbone="wav2vec2", languages=("ro",), backbone_overrides=FRONT_END_320X)
    model = load_saved_model(root / "model", progress_bar=False)
    tokenizer = Wav2Vec2Processor.from_pretrained(root / "model").tokenizer
    special = [tokenizer.convert_tokens_to_ids(t) for t in tokenizer.all_special_tokens
               if t not in (tokenizer.pad_token, tokenizer.word_delimiter_token)]
    with torch.no_grad():  # a trained head never emits [UNK], <s>, </s>: keep the random one off them too
        model.ctc_head.lm_head.bias[special] = -30.0
    model.save_pretrained(root / "model")
    export_model(root / "model", root / "onnx", language="ro")
    return root


def _clips() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [audio(float(rng.uniform(0.4, 1.6)), seed=i) for i in range(UTTERANCES)]


def test_sherpa_onnx_transcribes_as_adaptspeech(folders):
    from adaptspeech.cli.common import _load_model

    clips = _clips()
    sherpa = sherpa_transcribe(folders / "onnx", clips)
    onnx = [r.text for r in OnnxRecognizer(folders / "onnx", precision="fp32").transcribe(clips)]
    model, processor = _load_model(str(folders / "model"))
    model.set_target_language("ro")
    pytorch = [t.text for t in transcribe(model, processor, clips, method="ctc_greedy")]
    assert len(set(pytorch)) >= 5, "the random model's transcripts vary with the clip"
    assert onnx == pytorch
    assert sherpa == pytorch


def test_an_fbank_folder_is_refused(tmp_path):
    """sherpa-onnx would feed an fbank graph the waveform and decode nonsense without an error."""
    model_folder(tmp_path / "model", languages=("ro",))
    export_model(tmp_path / "model", tmp_path / "onnx", language="ro")
    with pytest.raises(ExportFolderError, match=r"a fbank model; sherpa-onnx's wav2vec2-family entry point runs "
                                                r"waveform models only"):
        sherpa_transcribe(tmp_path / "onnx", [audio(1.0)])
