"""``lm build`` (adaptspeech.lm.build): kaldingram's ARPA scored by KenLM equals the Kneser-Ney equations computed here
by brute force; a text too small for a discount, a text that is not UTF-8, a second build into the same folder and a
full disk are refused in one line and leave the earlier LM as it was."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers.cli import one_error_line, run_main
from helpers.files import folder_bytes

from adaptspeech.cli import main
from adaptspeech.lm.build import build_arpa

kenlm = pytest.importorskip("kenlm")
pytest.importorskip("pyctcdecode")


TEXT = ["a b c", "a b c", "a b d", "b c a", "c a b", "a b c d", "d c b a", "b c d"]


def kn_log10(sentences: list[list[str]], order: int, sentence: list[str]) -> float:
    """log10 p(<s> sentence </s>) of the back-off Kneser-Ney model SRILM's ``-ukndiscount -kn-modify-counts-at-end``
    defines (kaldingram's documentation), from the equations:

    - D_n = n1 / (n1 + 2 n2) over the order's raw counts (unigrams: D = 0);
    - highest order f(hw) = max(c(hw) - D, 0) / c(h); lower orders use the number of distinct words before hw,
      n(*hw), in place of c (raw counts for histories only ever seen at the sentence start, i.e. after <s>);
    - bow(h) = (1 - sum_{w seen after h} f(hw)) / (1 - sum_{same w} f(h[1:] w));
    - p(w | h) = f(hw) if hw was seen, else bow(h) p(w | h[1:]).
    """
    raw = [defaultdict(Counter) for _ in range(order)]  # raw[n][history][word], len(history) == n
    before = [defaultdict(lambda: defaultdict(set)) for _ in range(order)]
    for words in sentences:
        padded = ["<s>", *words, "</s>"]
        for i in range(len(padded)):
            for n in range(1, order + 1):
                if i + n > len(padded):
                    break
                history, word = tuple(padded[i : i + n - 1]), padded[i + n - 1]
                raw[n - 1][history][word] += 1
                if i > 0 and n < order:
                    before[n - 1][history][word].add(padded[i - 1])
    discount = [0.0]
    for n in range(1, order):
        counts = Counter(c for words in raw[n].values() for c in words.values())
        discount.append(max(0.1, counts[1]) / (counts[1] + 2 * counts[2]))
    f: list[dict[tuple[str, ...], dict[str, float]]] = [{} for _ in range(order)]
    for n in range(order):
        for history, words in raw[n].items():
            modified = {w: len(before[n][history][w]) for w in words}
            use_raw = n == order - 1 or sum(modified.values()) == 0
            counts = words if use_raw else modified
            total = sum(counts.values())
            f[n][history] = {w: max(c - discount[n], 0) / total for w, c in counts.items()}

    def prob(history: tuple[str, ...], word: str) -> float:
        n = len(history)
        if word in f[n].get(history, {}):
            return f[n][history][word]
        if n == 0:
            raise KeyError(word)
        seen = f[n].get(history)
        bow = 1.0
        if seen is not None:
            lower = f[n - 1][history[1:]]
            bow = (1 - sum(seen.values())) / (1 - sum(lower[w] for w in seen))
        return bow * prob(history[1:], word)

    padded = ["<s>", *sentence, "</s>"]
    total = 0.0
    for i in range(1, len(padded)):
        history = tuple(padded[max(0, i - order + 1) : i])
        while history and history not in f[len(history)]:
            history = history[1:]  # a history never seen has no back-off weight (1)
        total += math.log10(prob(history, padded[i]))
    return total


@pytest.mark.parametrize("sentence", ["a b c", "c a b d", "d d a", "b a"])
def test_built_lm_scores_as_the_kneser_ney_equations(tmp_path: Path, sentence: str) -> None:
    text = tmp_path / "corpus.txt"
    text.write_text("\n".join(TEXT) + "\n", encoding="utf-8")
    assert main(["lm", "build", "--text", str(text), "--order", "3", "--out", str(tmp_path / "lm")]) == 0
    model = kenlm.Model(str(tmp_path / "lm" / "lm.arpa"))
    expected = kn_log10([s.split() for s in TEXT], 3, sentence.split())
    assert model.score(sentence, bos=True, eos=True) == pytest.approx(expected, abs=1e-5)


def test_a_text_too_small_for_a_discount_is_refused(tmp_path: Path) -> None:
    text = tmp_path / "corpus.txt"
    text.write_text("a b c\nd e f\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no 2-gram occurs twice"):
        build_arpa(text, tmp_path / "lm", order=3)


def test_lm_build_of_text_that_is_not_utf8_names_the_file_and_line(tmp_path: Path, capsys) -> None:
    text = tmp_path / "corpus.txt"
    text.write_bytes("a b c\na b c\npři tom\n".encode("cp1250"))
    code, out, err = run_main(["lm", "build", "--text", text, "--order", "2", "--out", tmp_path / "lm"], capsys)
    assert (code, out) == (1, "")
    assert one_error_line(err).startswith(f"adaptspeech: error: {text}:3: not UTF-8 text")
    assert not (tmp_path / "lm").exists()


def test_a_second_lm_build_into_the_same_out_is_refused(lm_setup: SimpleNamespace, capsys) -> None:
    """While another ``lm build`` holds ``--out`` (this test's own process stands for it), a second one is refused
    in one line naming the process, prints no "wrote", and the LM there stays as it was, byte for byte."""
    import json
    import os
    import socket

    from adaptspeech.run_lock import LOCK_FILE

    before = folder_bytes(lm_setup.lm)
    lock = lm_setup.lm / LOCK_FILE
    lock.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": "2026-01-01 10:00:00"}))
    other = lm_setup.root / "other.txt"
    other.write_text("x y z\nx y z\nx y\n", encoding="utf-8")
    argv = ["lm", "build", "--text", other, "--order", "2", "--out", lm_setup.lm]
    code, out, err = run_main(argv, capsys)
    assert (code, out) == (1, "")
    assert one_error_line(err) == (
        f"adaptspeech: error: --out {lm_setup.lm} is in use by another run (process {os.getpid()}, started "
        f"2026-01-01 10:00:00); wait for it to finish or pick another --out (if that run is over, delete {lock})"
    )
    lock.unlink()
    assert folder_bytes(lm_setup.lm) == before
    code, out, _ = run_main(argv, capsys)
    assert code == 0 and out.startswith("wrote ") and not lock.exists()
    assert (lm_setup.lm / "unigrams.txt").read_text() == "x\ny\nz\n"


def test_a_full_disk_during_lm_build_keeps_the_earlier_lm(lm_setup: SimpleNamespace, capsys, monkeypatch) -> None:
    """The disk fills up while ``lm build`` writes ``lm.arpa`` over an earlier LM: one line, and the earlier
    ``lm.arpa`` and ``unigrams.txt`` stay byte for byte, with no partial file left beside them."""
    import errno
    import os

    import kaldingram.train

    before = folder_bytes(lm_setup.lm)

    def disk_full(self, fout) -> None:
        fout.write("\\data\\\n")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(kaldingram.train.NgramCounts, "print_as_arpa", disk_full)
    other = lm_setup.root / "other.txt"
    other.write_text("x y z\nx y z\nx y\n", encoding="utf-8")
    code, out, err = run_main(["lm", "build", "--text", other, "--order", "2", "--out", lm_setup.lm], capsys)
    assert (code, out) == (1, "")
    assert "No space left on device" in one_error_line(err)
    assert folder_bytes(lm_setup.lm) == before
