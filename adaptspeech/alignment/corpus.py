"""Long recordings and their transcripts -> training clips in the Common Voice layout ``prepare`` reads.

``out/<language>/clips/<recording>_<n>.wav`` (16 kHz mono PCM) and ``out/<language>/train.tsv`` / ``validated.tsv``
with the Common Voice columns (``client_id`` is the recording's name, ``sentence`` the line as written), plus
``clip_durations.tsv``; so ``adaptspeech prepare common-voice --root OUT --languages xx --splits train`` builds the
prepared dataset that ``train`` and the recipes read. Beside them ``alignments.tsv`` lists every line, kept or not,
with its source file, start / end seconds, alignment score, the CER of the model's own decoding of the clip against
the line and the reason it was dropped (:mod:`.filters`), and ``align_report.json`` (written last: the folder's
completion marker) counts lines kept and dropped by reason, per recording too, and the recordings refused.

**A recording is refused** (one line naming the file, and the line where one is at fault) when its text is empty,
its audio cannot be read, its audio is shorter than its text can be read in (:func:`~.lines.first_line_past`), or
its text does not match it: fewer than ``min_matched`` of its lines reach the score threshold (a wrong file is
refused, not cut into clips). Lines with no audio, and audio with no line, are not forced onto their neighbours
(:mod:`.segmentation`); their clips are dropped by the score and CER filters.

**Output folder.** The run writes into the hidden sibling ``.<out>.partial`` and swaps it in when every recording is
done (:mod:`~adaptspeech.data.output_folder`'s rule: an earlier complete output is replaced only with
``overwrite``). Interrupted, the partial folder stays: the next run resumes it, skipping the recordings it finished
(each recording's lines are written to ``alignments/<recording>.tsv`` last, atomically), when its settings are the
same (else it starts afresh).
"""

from __future__ import annotations

import csv
import json
import os
import shutil
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from ..data.common_voice import CV_COLUMNS
from .edges import clip_edges
from .filters import AlignmentFilters, fold_text
from .lines import AlignmentTextError, TextLine, first_line_past, text_lines
from .posteriors import SAMPLING_RATE, AlignmentModel
from .segmentation import DEFAULT_BLOCK_LABELS, LineAlignment, align_lines, label_gap_frames

COMPLETE_MARKER = "align_report.json"
SETTINGS_FILE = "align_settings.json"
AUDIO_SUFFIXES = (".wav", ".flac", ".mp3", ".ogg")
LINE_COLUMNS = ("source", "line", "path", "start", "end", "score", "margin", "cer", "cer_folded", "dropped", "sentence",
                "decoded")
DEFAULT_MIN_MATCHED = 0.5
DEFAULT_EDGE_PAD_S = 0.02


class AlignmentError(ValueError):
    """A recording that is refused; the message is one line naming its file (and line)."""


@dataclass(frozen=True)
class AlignSettings:
    """How lines become clips.

    Attributes:
        filters: the thresholds of the filters.
        oov: what a character outside the model's alphabet becomes (``"romanize"`` or ``"star"``).
        split_sentences: also cut lines at sentence ends.
        min_matched: the fraction of a recording's lines that must reach ``filters.min_score``, else its text is
            taken for another recording's and the recording is refused.
        edge_pad_s: seconds of pause kept before and after a line's speech (at most half the pause to the
            neighbouring line's speech; :mod:`.edges`).
        block_labels: labels aligned at once (:mod:`.segmentation`).
    """

    filters: AlignmentFilters = field(default_factory=AlignmentFilters)
    oov: str = "romanize"
    split_sentences: bool = False
    min_matched: float = DEFAULT_MIN_MATCHED
    edge_pad_s: float = DEFAULT_EDGE_PAD_S
    block_labels: int = DEFAULT_BLOCK_LABELS


@dataclass
class AlignedLine:
    """One line of a recording, placed: seconds in the recording, score and margin
    (:class:`~.segmentation.LineAlignment`), CER and CER after folding (percent; :func:`~.filters.fold_text`) and
    why it was dropped."""

    source: str
    line: int
    sentence: str
    text: str
    start: float
    end: float
    score: float
    margin: float
    cer: float
    cer_folded: float
    decoded: str
    dropped: str | None = None
    path: str = ""


def read_recording(path: Path) -> np.ndarray:
    """The recording at 16 kHz mono, or :class:`AlignmentError` naming it (missing, unreadable, empty, silent)."""
    from ..data.audio import BadClipError, load_audio

    try:
        return load_audio(path, SAMPLING_RATE)
    except BadClipError as err:
        raise AlignmentError(f"{path}: the audio cannot be used: {err.reason}" +
                             (f" ({err.detail})" if err.detail else "")) from None


def cer_percent(reference: str, hypothesis: str) -> float:
    """Character error rate in percent of ``hypothesis`` against ``reference`` (jiwer's, as ``evaluate``'s)."""
    from ..metrics.scoring import count_edits

    return 100.0 * count_edits([hypothesis], [reference], "char").rate


def align_recording(model: AlignmentModel, audio_path: str | os.PathLike[str], text_path: str | os.PathLike[str],
                    settings: AlignSettings = AlignSettings()) -> tuple[list[AlignedLine], np.ndarray]:
    """Align one recording's lines: ``(lines placed, each with its drop reason or None; the 16 kHz waveform)``.

    Raises:
        AlignmentError: see the module docstring (one line naming the file, and the line where one is at fault).
    """
    audio_path, text_path = Path(audio_path), Path(text_path)
    try:
        lines = text_lines(text_path, model.language, model.vocab, model.word_delimiter_id, settings.oov,
                           settings.split_sentences)
    except AlignmentTextError as err:
        raise AlignmentError(str(err)) from None
    waveform = read_recording(audio_path)
    log_probs = model.log_probs(waveform)
    past = first_line_past(lines, len(log_probs))
    if past is not None:
        raise AlignmentError(
            f"{text_path}:{past.line_no}: the audio {audio_path} ({len(waveform) / SAMPLING_RATE:.1f} s) is shorter "
            f"than its text can be read in: the text up to this line needs more than {len(log_probs)} frames of "
            f"{model.seconds_per_frame * 1000:.0f} ms")
    spans = align_lines(log_probs, [line.labels for line in lines], model.blank_id, settings.block_labels,
                        max_label_gap=label_gap_frames(model.seconds_per_frame))
    check_match(lines, spans, settings, audio_path, text_path)
    edges = clip_edges(spans, waveform, model.seconds_per_frame, settings.edge_pad_s)
    out = []
    for line, span, (start, end) in zip(lines, spans, edges, strict=True):
        decoded = model.greedy_text(log_probs[span.first_frame : span.end_frame])
        cer, folded = cer_percent(line.text, decoded), cer_percent(fold_text(line.text), fold_text(decoded))
        dropped = settings.filters.drop_reason(span.score, folded if settings.filters.fold_cer else cer, end - start,
                                               len(line.text))
        out.append(AlignedLine(audio_path.name, line.line_no, line.raw, line.text, round(start, 3), round(end, 3),
                               round(span.score, 4), round(span.margin, 4), round(cer, 2), round(folded, 2), decoded,
                               dropped))
    return out, waveform


def check_match(lines: Sequence[TextLine], spans: Sequence[LineAlignment], settings: AlignSettings,
                 audio_path: Path, text_path: Path) -> None:
    """Refuse a text whose lines mostly do not match the audio (a wrong file), naming its first unmatched line."""
    matched = [span.score >= settings.filters.min_score for span in spans]
    if sum(matched) >= settings.min_matched * len(lines):
        return
    first = next(line for line, ok in zip(lines, matched, strict=True) if not ok)
    median = float(np.median([span.score for span in spans]))
    raise AlignmentError(
        f"{text_path}:{first.line_no}: the text does not match the audio {audio_path}: {sum(matched)} of {len(lines)} "
        f"lines align with a score >= {settings.filters.min_score} (median {median:.2f}; at least "
        f"{settings.min_matched:.0%} needed): a transcript of another recording?")


def write_clips(lines: Sequence[AlignedLine], waveform: np.ndarray, clips_dir: Path, stem: str) -> None:
    """Write each kept line's clip as ``clips_dir/<stem>_<line>_<n>.wav`` (16 kHz PCM-16) and set its ``path``."""
    clips_dir.mkdir(parents=True, exist_ok=True)
    for n, line in enumerate(lines):
        if line.dropped is not None:
            continue
        line.path = f"{stem}_{n:05d}.wav"
        first, last = round(line.start * SAMPLING_RATE), round(line.end * SAMPLING_RATE)
        target = clips_dir / line.path
        partial = target.with_name(f".{target.name}.partial")
        sf.write(partial, waveform[first:last], SAMPLING_RATE, subtype="PCM_16", format="WAV")
        os.replace(partial, target)


def _write_tsv(path: Path, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    partial = path.with_name(f".{path.name}.partial")
    with partial.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, delimiter="\t", quoting=csv.QUOTE_NONE, escapechar="\\", lineterminator="\n")
        writer.writerow(columns)
        writer.writerows(rows)
    os.replace(partial, path)


def _line_row(line: AlignedLine) -> list[Any]:
    return [line.source, line.line, line.path, line.start, line.end, line.score, line.margin, line.cer,
            line.cer_folded, line.dropped or "", _tsv_text(line.sentence), _tsv_text(line.decoded)]


def _tsv_text(text: str) -> str:
    return " ".join(text.replace("\t", " ").split())


def _read_lines_tsv(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE, escapechar="\\"))


def recording_pairs(audio_dir: str | os.PathLike[str], text_dir: str | os.PathLike[str] | None = None
                    ) -> list[tuple[Path, Path]]:
    """``[(REC.wav, REC.txt), ...]``: the audio files of ``audio_dir`` (wav, flac, mp3, ogg; sorted) and the
    transcript of the same name in ``text_dir`` (default: ``audio_dir``)."""
    audio_dir = Path(audio_dir)
    if not audio_dir.is_dir():
        raise AlignmentError(f"--audio-dir {audio_dir}: not a folder")
    texts = Path(text_dir) if text_dir is not None else audio_dir
    audio = sorted(p for p in audio_dir.iterdir() if p.suffix.lower() in AUDIO_SUFFIXES and p.is_file())
    if not audio:
        raise AlignmentError(f"--audio-dir {audio_dir}: no audio files ({', '.join(AUDIO_SUFFIXES)})")
    return [(path, texts / f"{path.stem}.txt") for path in audio]


def align_corpus(model: AlignmentModel, pairs: Sequence[tuple[Path, Path]], out_dir: str | os.PathLike[str],
                 settings: AlignSettings = AlignSettings(), *, overwrite: bool = False, progress: bool = True,
                 stop_on_error: bool = False) -> dict[str, Any]:
    """Align recordings with their transcripts into ``out_dir`` (module docstring); returns the report.

    Args:
        pairs: ``[(audio file, transcript), ...]``; their names (audio stems) must differ.
        stop_on_error: raise the first refused recording's :class:`AlignmentError` (one recording) instead of
            reporting it and going on.

    Raises:
        AlignmentError: a refused recording with ``stop_on_error``; ``out_dir`` holds something else
            (:func:`~adaptspeech.data.output_folder.check_output_folder`: ``FileExistsError``, ``NotADirectoryError``).
    """
    from tqdm.auto import tqdm

    from ..data.output_folder import check_output_folder, owned_folder, partial_folder, swap_in

    out = Path(out_dir).absolute()
    stems = Counter(audio.stem for audio, _ in pairs)
    repeated = sorted(stem for stem, n in stems.items() if n > 1)
    if repeated:
        raise AlignmentError(f"recordings named alike: {', '.join(repeated)} (the clips are named after them)")
    check_output_folder(out, COMPLETE_MARKER, "adaptspeech prepare align", overwrite=overwrite)
    partial = partial_folder(out)
    recorded = {"settings": _settings_dict(settings), "model": str(getattr(model.model, "name_or_path", "")),
                "language": model.language}
    if partial.is_dir():
        previous = partial / SETTINGS_FILE
        if not previous.is_file() or json.loads(previous.read_text(encoding="utf-8")) != recorded:
            shutil.rmtree(partial)  # another run's settings: start afresh
    with owned_folder(partial) as staging:
        (staging / SETTINGS_FILE).write_text(json.dumps(recorded, indent=1), encoding="utf-8")
        lang_dir = staging / model.language
        done_dir = lang_dir / "alignments"
        done_dir.mkdir(parents=True, exist_ok=True)
        refused: dict[str, str] = {}
        resumed = 0
        for audio, text in tqdm(pairs, desc="align", unit="recording", disable=not progress):
            done = done_dir / f"{audio.stem}.tsv"
            if done.is_file():
                resumed += 1
                continue
            try:
                lines, waveform = align_recording(model, audio, text, settings)
            except AlignmentError as err:
                if stop_on_error:
                    raise
                refused[audio.name] = str(err)
                continue
            write_clips(lines, waveform, lang_dir / "clips", audio.stem)
            _write_tsv(done, LINE_COLUMNS, (_line_row(line) for line in lines))
        report = _finish(lang_dir, [done_dir / f"{audio.stem}.tsv" for audio, _ in pairs], refused, resumed)
        (staging / COMPLETE_MARKER).write_text(json.dumps(report, indent=1), encoding="utf-8")
    swap_in(partial, out, COMPLETE_MARKER)
    return report


def _settings_dict(settings: AlignSettings) -> dict[str, Any]:
    return json.loads(json.dumps(asdict(settings)))


def _finish(lang_dir: Path, done: Sequence[Path], refused: dict[str, str], resumed: int) -> dict[str, Any]:
    """Write the Common Voice TSVs and ``alignments.tsv`` from the recordings' line files; the report."""
    rows = [row for path in done if path.is_file() for row in _read_lines_tsv(path)]
    kept = [row for row in rows if not row["dropped"]]
    cv_rows = [[row["source"].rsplit(".", 1)[0] if c == "client_id" else row["path"] if c == "path"
                else row["sentence"] if c == "sentence" else "" for c in CV_COLUMNS] for row in kept]
    for split in ("train", "validated"):
        _write_tsv(lang_dir / f"{split}.tsv", CV_COLUMNS, cv_rows)
    _write_tsv(lang_dir / "clip_durations.tsv", ("clip", "duration[ms]"),
               ([row["path"], round(1000 * (float(row["end"]) - float(row["start"])))] for row in kept))
    _write_tsv(lang_dir / "alignments.tsv", LINE_COLUMNS, ([row[c] for c in LINE_COLUMNS] for row in rows))
    per_recording: dict[str, dict[str, Any]] = {}
    for row in rows:
        entry = per_recording.setdefault(row["source"], {"lines": 0, "kept": 0, "dropped": Counter()})
        entry["lines"] += 1
        entry["kept"] += not row["dropped"]
        if row["dropped"]:
            entry["dropped"][row["dropped"]] += 1
    dropped = Counter(row["dropped"] for row in rows if row["dropped"])
    return {
        "recordings": len(done), "recordings_aligned": len(per_recording), "recordings_resumed": resumed,
        "recordings_refused": refused, "lines": len(rows), "kept": len(kept), "dropped": dict(sorted(dropped.items())),
        "kept_seconds": round(sum(float(r["end"]) - float(r["start"]) for r in kept), 2),
        "per_recording": {k: {**v, "dropped": dict(v["dropped"])} for k, v in per_recording.items()},
    }


def report_summary(report: dict[str, Any]) -> str:
    """One line: lines kept, dropped by reason, recordings refused."""
    dropped = ", ".join(f"{reason}={n}" for reason, n in report["dropped"].items()) or "none"
    return (f"kept {report['kept']} of {report['lines']} lines ({report['kept_seconds'] / 60:.1f} min) from "
            f"{report['recordings_aligned']} recordings ({report['recordings_resumed']} resumed); dropped: {dropped}; "
            f"refused recordings: {len(report['recordings_refused'])}")
