"""Text normalisation policy, vocabulary layout, and the saved processor's tokenizer round trip."""

from __future__ import annotations

import json
import unicodedata

import pytest
from transformers import AutoProcessor, Wav2Vec2CTCTokenizer, Wav2Vec2Processor

from adaptspeech.data.processor import build_processor
from adaptspeech.data.text import SPECIAL_TOKENS, build_vocab, check_vocab, count_oov, normalize_text


@pytest.mark.parametrize(
    ("raw", "lang", "expected"),
    [
        ("Şi-a spus: „L’ora e târziu!”", "ro", "și a spus l'ora e târziu"),  # cedilla -> comma, hyphen splits
        ("ŞŢşţ", "ro", "șțșț"),
        ("ŞŢ", "cs", "şţ"),  # the Romanian fix is Romanian only
        ("Příliš žluťoučký kůň.", "cs", "příliš žluťoučký kůň"),
        ("'Quoted' po' l'uomo", "it", "quoted po l'uomo"),  # apostrophes only between letters
        ("Zo'n foto’s", "nl", "zo'n foto's"),
        ("Straße   GROSS\tund\n klein", "de", "straße gross und klein"),
        ("In 2024 kamen 3 Leute.", "de", "in 2024 kamen 3 leute"),  # digits kept as characters
        ("İstanbul Irmak", "tr", "istanbul ırmak"),
        ("?!… — «»", "es", ""),
        ("", "ro", ""),
    ],
)
def test_normalisation_policy(raw, lang, expected):
    assert normalize_text(raw, lang) == expected


def test_decomposed_and_composed_spellings_normalise_alike():
    composed = "mână"
    decomposed = unicodedata.normalize("NFD", composed)
    assert decomposed != composed
    assert normalize_text(decomposed, "ro") == normalize_text(composed, "ro") == "mână"


def test_normalisation_is_idempotent():
    for raw, lang in [("Şi-a spus: „L’ora!”", "ro"), ("Zo'n foto’s", "nl"), ("İstanbul", "tr")]:
        once = normalize_text(raw, lang)
        assert normalize_text(once, lang) == once


def test_vocabulary_layout():
    vocab = build_vocab(["ba ca", "ăb"])
    assert list(vocab) == ["[PAD]", "[UNK]", "<s>", "</s>", "|", "a", "b", "c", "ă"]
    assert list(vocab.values()) == list(range(9))
    check_vocab(vocab)
    assert build_vocab(["aab"], min_count=2) == {**{t: i for i, t in enumerate(SPECIAL_TOKENS)}, "a": 5}


def test_shared_and_per_language_vocabularies():
    texts = {"ro": ["ăa"], "cs": ["ča"]}
    shared = build_vocab(texts)
    assert list(shared)[5:] == ["a", "ă", "č"]
    nested = build_vocab(texts, per_language=True)
    assert list(nested["ro"])[5:] == ["a", "ă"] and list(nested["cs"])[5:] == ["a", "č"]
    with pytest.raises(ValueError, match="mapping"):
        build_vocab(["a"], per_language=True)


def test_check_vocab_names_the_broken_token():
    with pytest.raises(ValueError, match=r"'\[UNK\]' must have id 1"):
        check_vocab({"[PAD]": 0, "a": 1, "<s>": 2, "</s>": 3, "|": 4})


def test_processor_round_trips_normalised_text(tmp_path):
    sentences = ["Şi-a spus: „L’ora e târziu!”", "Aaa bb, c.", "Ăla e bun"]
    texts = [normalize_text(s, "ro") for s in sentences]
    build_processor(build_vocab(texts), tmp_path)
    processor = AutoProcessor.from_pretrained(tmp_path)
    assert isinstance(processor, Wav2Vec2Processor)
    tokenizer = processor.tokenizer
    assert isinstance(tokenizer, Wav2Vec2CTCTokenizer)
    assert (tokenizer.pad_token_id, tokenizer.unk_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id) == (
        0,
        1,
        2,
        3,
    )
    assert tokenizer.word_delimiter_token_id == 4
    vocab = json.loads((tmp_path / "vocab.json").read_text(encoding="utf-8"))
    for text in texts:
        ids = tokenizer(text).input_ids
        assert ids == [vocab["|" if c == " " else c] for c in text]  # one id per character, no specials added
        assert tokenizer.decode(ids, group_tokens=False) == text
    assert processor.feature_extractor.sampling_rate == 16000
    assert processor.feature_extractor.feature_type == "waveform"


def test_out_of_vocabulary_characters_map_to_unk_and_are_counted(tmp_path):
    processor = build_processor(build_vocab(["ab"]), tmp_path)
    ids = processor.tokenizer("abx zb").input_ids
    assert ids == [5, 6, 1, 4, 1, 6]
    assert count_oov("abx zb", processor.tokenizer.get_vocab()) == {"x": 1, "z": 1}


def test_fbank_processor_keeps_its_settings(tmp_path):
    build_processor(build_vocab(["ab"]), tmp_path, sampling_rate=16000, feature_type="fbank", n_mels=40)
    fe = Wav2Vec2Processor.from_pretrained(tmp_path).feature_extractor
    assert (fe.feature_type, fe.n_mels, fe.feature_size) == ("fbank", 40, 40)


def test_per_language_processor_switches_vocabularies(tmp_path):
    build_processor(build_vocab({"ro": ["ăa"], "cs": ["ča"]}, per_language=True), tmp_path, target_lang="cs")
    tokenizer = Wav2Vec2Processor.from_pretrained(tmp_path).tokenizer
    assert tokenizer.target_lang == "cs"
    assert tokenizer("ač").input_ids == [5, 6]
    tokenizer.set_target_lang("ro")
    assert tokenizer("ăa č").input_ids == [6, 5, 4, 1]


def test_bad_processor_settings_list_the_allowed_values(tmp_path):
    with pytest.raises(ValueError, match="allowed values: fbank, stacked_fbank, waveform"):
        build_processor(build_vocab(["a"]), tmp_path, feature_type="mfcc")
    with pytest.raises(ValueError, match="allowed values: ro"):
        build_processor({"ro": build_vocab(["a"])}, tmp_path, target_lang="xx")
