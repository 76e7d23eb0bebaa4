"""``adaptspeech lm build``: a word n-gram model in ARPA format (KenLM loads it) from a text file.

The estimator is kaldingram's (``pip install kaldingram``; Kaldi's ``make_kn_lm.py`` packaged by the next-gen Kaldi
team): interpolated Kneser-Ney with back-off, one discount per order ``D_n = n1 / (n1 + 2 n2)``, no discount of the
unigrams, the same model as SRILM's ``ngram-count -ukndiscount -kn-modify-counts-at-end -gtNmin 0``. Sentences
are the text's lines, read as UTF-8 bytes (kaldingram splits on spaces and tabs only, so any script works), each
wrapped in ``<s> ... </s>``. Beside ``lm.arpa`` the folder gets ``unigrams.txt`` (the words, one a line), which
pyctcdecode uses to tell in-vocabulary words from partial ones. A second ``build_arpa`` into an ``out_dir`` that
another one is writing is refused (the ``adaptspeech.lock`` of :mod:`adaptspeech.run_lock`).
"""

from __future__ import annotations

import functools
import os
from collections import Counter
from pathlib import Path
from typing import Any

from ..run_lock import OutputDirLock

ARPA_NAME = "lm.arpa"
UNIGRAMS_NAME = "unigrams.txt"
MAX_ORDER = 5


def build_arpa(text: str | os.PathLike, out_dir: str | os.PathLike, order: int = 4, progress: bool = True) -> Path:
    """Estimate an ``order``-gram Kneser-Ney model of ``text`` and write ``out_dir/lm.arpa`` and ``unigrams.txt``.

    Args:
        text: a UTF-8 text file, one sentence a line, words separated by spaces (normalise it the way the model's
            transcripts are, e.g. with :func:`adaptspeech.data.text.normalize_text`).
        out_dir: the output folder (created).
        order: 2..5.
        progress: show kaldingram's progress bars (on stderr).

    Raises:
        FileNotFoundError: no ``text``.
        ValueError: a bad order; text that is not UTF-8 (``FILE:LINE: not UTF-8 text``), has no words or is too
            small for the discounts; another run is writing ``out_dir`` (``StageConfigError``).

    Returns:
        The path of ``lm.arpa``.
    """
    import kaldingram.train as kaldingram_train

    from ..data.common_voice import first_non_utf8_line

    if not 2 <= order <= MAX_ORDER:
        raise ValueError(f"order={order}; allowed values: 2..{MAX_ORDER} (kaldingram's estimator)")
    path = Path(text)
    if not path.is_file():
        raise FileNotFoundError(f"--text {path}: no such file")
    try:
        text_lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise ValueError(
            f"{path}:{first_non_utf8_line(path)}: not UTF-8 text (convert the file to UTF-8, e.g. with iconv)"
        ) from None
    lines = [words for words in (line.split() for line in text_lines) if words]
    if not lines:
        raise ValueError(f"--text {path}: no words in it")
    bars = kaldingram_train.tqdm
    if not progress:  # kaldingram draws its bars unconditionally
        kaldingram_train.tqdm = functools.partial(bars, disable=True)
    out = Path(out_dir)
    created = not out.exists()
    try:
        with OutputDirLock(out, what="--out"):
            return _estimate(kaldingram_train.NgramCounts(order), lines, path, out)
    except BaseException:
        if created and out.is_dir() and not any(out.iterdir()):
            out.rmdir()  # made for the lock: leave no empty folder behind
        raise
    finally:
        kaldingram_train.tqdm = bars


def _estimate(counts: Any, lines: list[list[str]], path: Path, out: Path) -> Path:
    """Count ``lines`` (words of each sentence) into kaldingram's ``counts``, estimate, write the ARPA file and
    the unigram list into ``out``; ``path`` (the text) names the input in errors."""
    for words in lines:  # kaldingram reads latin-1; feed it the UTF-8 bytes as latin-1 so that any script passes
        counts.add_raw_counts_from_line(" ".join(words).encode("utf-8").decode("latin-1"))
    counts.cal_discounting_constants()
    for n, discount in enumerate(counts.d[1:], start=2):
        if discount >= 1.0:  # no n-gram seen twice: kaldingram would give every seen n-gram probability 0
            raise ValueError(
                f"--text {path}: no {n}-gram occurs twice, so the Kneser-Ney discount of order {n} is 1 and every "
                f"seen {n}-gram would get probability 0; give more text or a lower --order"
            )
    counts.cal_f()
    counts.cal_bow()
    out.mkdir(parents=True, exist_ok=True)
    arpa = out / ARPA_NAME
    partial, unigrams_partial = out / f".{ARPA_NAME}.partial", out / f".{UNIGRAMS_NAME}.partial"
    try:  # both files written beside, then renamed: a failure (a full disk) leaves an earlier LM whole
        unigrams = Counter(word for words in lines for word in words)
        unigrams_partial.write_text("".join(f"{w}\n" for w in sorted(unigrams)), encoding="utf-8")
        with open(partial, "w", encoding="latin-1") as handle:
            counts.print_as_arpa(fout=handle)
    except BaseException:
        partial.unlink(missing_ok=True)
        unigrams_partial.unlink(missing_ok=True)
        raise
    partial.replace(arpa)
    unigrams_partial.replace(out / UNIGRAMS_NAME)
    return arpa
