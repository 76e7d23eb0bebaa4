"""The word LM of the fused streaming search (adaptspeech.lm.shallow_fusion.NGramFusion): the folders and tuned weights
of ``transcribe --lm``, and pyctcdecode's scores."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from helpers.lm import CORPUS
from helpers.model_folders import model_folder
from transformers import AutoProcessor

from adaptspeech.lm.build import build_arpa
from adaptspeech.lm.decoder import build_decoder
from adaptspeech.lm.processor import save_processor_with_lm
from adaptspeech.lm.shallow_fusion import NGramFusion

pytest.importorskip("kenlm")
pytest.importorskip("pyctcdecode")


def test_tuned_weights_of_a_saved_lm_and_the_scores(tmp_path: Path) -> None:
    folder = model_folder(tmp_path / "model")
    processor = AutoProcessor.from_pretrained(folder)
    (tmp_path / "corpus.txt").write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    build_arpa(tmp_path / "corpus.txt", tmp_path / "lm", order=2, progress=False)
    built = NGramFusion.from_lm_dir(processor.tokenizer, tmp_path / "lm")
    assert (built.alpha, built.beta) == (0.5, 1.0)  # an `lm build` folder: the offline decoder's defaults
    save_processor_with_lm(processor, build_decoder(processor.tokenizer, tmp_path / "lm", alpha=0.7, beta=2.5), folder)
    tuned = NGramFusion.from_lm_dir(processor.tokenizer, folder)  # a model folder with `lm tune --save`'s LM
    assert (tuned.alpha, tuned.beta) == (0.7, 2.5)
    assert NGramFusion.from_lm_dir(processor.tokenizer, folder, alpha=0.2).alpha == 0.2  # given weights win
    assert tuned.labels[processor.tokenizer.pad_token_id] == "" and " " in tuned.labels
    state = tuned.start_state()
    score, after = tuned.word(state, "abc", False)
    last, _ = tuned.word(state, "abc", True)
    assert last - score == pytest.approx(tuned.end(after))  # the end of sentence is the only difference
    assert tuned.end(after) < 0 and score < tuned.max_word_gain() == 2.5
    assert tuned.partial("ab") == 0.0 and tuned.partial("xq") == -10.0  # begins a word / begins none
    raw = tuned.language_model._kenlm_model.BaseScore(state, "abc", type(state)())
    assert score == pytest.approx(0.7 * raw * math.log(10) + 2.5)
