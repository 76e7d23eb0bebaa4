"""CER of long-form decoding: N test utterances concatenated into one recording vs the same utterances one by one.

Usage::

    python scripts/bench_long_form_cer.py --model runs/demo_pre/base/model --prepared runs/demo_pre/prepared \\
        --corpus runs/demo_pre/corpus --language cs --concat 30

The first ``--concat`` rows of ``--language`` (and ``--voice``) in the prepared ``--split`` (its ``text`` column: the
normalised reference the model was scored on) give the utterances; their audio is read from the Common Voice layout
``<corpus>/<language>/clips/<path>`` and joined with ``--silence`` seconds of digital silence (zeros; or white noise at
``--pause-noise-db`` dBFS) between consecutive clips. The recording is transcribed with
:func:`adaptspeech.inference.transcriber.transcribe` at each ``--chunking CHUNK:STRIDE``, for CTC decoders with each
``--split-by`` (``pauses``: one speech region at a time, the default of ``transcribe``; ``chunks``: overlapping chunks
stitched), for attention / joint decoders in segments cut at pauses (STRIDE unused), and each utterance alone (one
encoder call each: every clip is shorter than the chunk), with the same decoder. Scores, corpus-level through
:func:`adaptspeech.metrics.compute_error_rates`:

- *separate*: the utterances' hypotheses joined with spaces against their references joined with spaces (the same
  reference string as the concatenation; the per-utterance corpus CER is printed beside it);
- *separate, locally normalised input*: each utterance decoded alone from its slice of the long recording's model
  input normalised by the sliding-window rule over the whole recording (``--norm-window`` seconds, digital silence
  left out; :mod:`adaptspeech.inference.long_form.local_norm`) instead of over the utterance: the share of the
  difference due to the normalisation statistics rather than to chunking;
- *pauses* / *chunks* / *segments*: the long recording's hypothesis against that reference string;
- *per-utterance normalised* (CTC greedy only): the same chunking over the recording's features with every frame
  normalised by its own utterance's statistics, as if the utterance boundaries were known (frames of the pauses take
  the preceding utterance's): what chunking alone costs, the floor for any normalisation rule (printed beside
  *chunks*).

The target: concatenated CER within 1 point of separate. ``boundaries in clips`` counts the chunk (or segment)
boundaries that fall inside a clip rather than in the added silence, to show that the chunking really cuts
utterances (a clip's own leading / trailing silence counts as inside it); for *pauses*, the middles between speech
regions.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path
from typing import Any

import numpy as np


def _chunking(text: str) -> tuple[float, float]:
    try:
        chunk, stride = (float(v) for v in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--chunking {text!r}: expected CHUNK:STRIDE seconds, e.g. 30:5") from None
    if chunk <= 2 * stride or stride < 0:
        raise argparse.ArgumentTypeError(f"--chunking {text!r}: the chunk must be longer than twice the stride")
    return chunk, stride


def load_utterances(prepared: Path, corpus: Path, split: str, language: str, count: int,
                    voice: str | None = None) -> tuple[list[Any], list[str]]:
    """``(waveforms [S_i] at 16 kHz, normalised references)`` of the first ``count`` rows of ``language`` (of speaker
    ``voice``, the ``client_id`` column, when given)."""
    import datasets

    from adaptspeech.data import load_audio

    folder = prepared / "dataset" / split
    if not folder.is_dir():
        raise SystemExit(f"--prepared {prepared}: no {folder} (a folder written by `adaptspeech prepare`)")
    rows = datasets.load_from_disk(str(folder)).select_columns(["path", "text", "language", "client_id"])
    picked = [row for row in rows if row["language"] == language and voice in (None, row["client_id"])][:count]
    if len(picked) < count:
        who = "" if voice is None else f" and speaker {voice!r}"
        raise SystemExit(f"--concat {count}: the {split} split has {len(picked)} rows of language {language!r}{who}")
    waves = [load_audio(corpus / language / "clips" / row["path"], 16000) for row in picked]
    return waves, [row["text"] for row in picked]


def concatenate(waves: list[np.ndarray], silence_s: float,
                noise_db: float | None = None) -> tuple[np.ndarray, list[tuple[float, float]]]:
    """``(recording [S], (start, end) seconds of each utterance in it)``: clips joined by ``silence_s`` of zeros, or
    of white noise at ``noise_db`` dBFS (RMS) when given (seeded: the same recording every run)."""
    gap = np.zeros(round(silence_s * 16000), dtype=np.float32)
    if noise_db is not None:
        gap = (np.random.default_rng(0).standard_normal(len(gap)) * 10 ** (noise_db / 20)).astype(np.float32)
    pieces, spans, now = [], [], 0
    for i, wave in enumerate(waves):
        if i:
            pieces.append(gap)
            now += len(gap)
        pieces.append(wave)
        spans.append((now / 16000, (now + len(wave)) / 16000))
        now += len(wave)
    return np.concatenate(pieces), spans


def locally_normalised_slices(model: Any, processor: Any, recording: np.ndarray, spans: list[tuple[float, float]],
                              method: str, lang_ids: Any, options: dict[str, Any], window_s: float) -> list[str]:
    """Each utterance decoded alone from its slice of the *recording's* locally normalised model input: the effect
    of sliding-window instead of utterance-level normalisation, without chunking."""
    from adaptspeech.data.feature_types import FeatureType
    from adaptspeech.decoding import transcribe_batch
    from adaptspeech.inference.long_form.local_norm import recording_input

    whole = recording_input(recording, processor.feature_extractor, window_s)
    inputs = whole.local(0, len(whole))
    features = FeatureType.of_model(model)
    window, hop = features.unit_window, features.unit_hop
    texts = []
    for start_s, end_s in spans:
        a, b = round(start_s * 16000), round(end_s * 16000)
        first, last = -(-a // hop), (b - window) // hop + 1  # the units whose samples lie inside [a, b)
        batch = {model.main_input_name: inputs[first:last][None]}
        if lang_ids is not None:
            batch["lang_ids"] = lang_ids
        ids = transcribe_batch(model, batch, method, **options)[0]
        texts.append(processor.tokenizer.decode(ids, group_tokens=False, skip_special_tokens=True).strip())
    return texts


def per_utterance_normalised(processor: Any, waves: list[np.ndarray], recording: np.ndarray,
                             spans: list[tuple[float, float]]) -> Any:
    """``[T, n_mels]`` or ``[S]``: the recording's features, each unit normalised with the statistics of the utterance
    its centre lies in (units in a pause: the preceding utterance's), from each utterance's own features."""
    import torch

    from adaptspeech.data.audio import frame_params
    from adaptspeech.inference.long_form.local_norm import recording_input

    raw = recording_input(recording, processor.feature_extractor).raw.astype(np.float64)
    fbank = raw.ndim == 2
    window, hop, _ = frame_params(16000)
    centres = (np.arange(len(raw)) * hop + window / 2) / 16000 if fbank else np.arange(len(raw)) / 16000
    owner = np.clip(np.searchsorted([a for a, _ in spans], centres, side="right") - 1, 0, len(spans) - 1)
    out = np.empty_like(raw)
    for i, wave in enumerate(waves):
        own = recording_input(wave, processor.feature_extractor).raw.astype(np.float64)
        rows = owner == i
        out[rows] = (raw[rows] - own.mean(axis=0)) / np.sqrt(own.var(axis=0) + 1e-7)
    return torch.from_numpy(out.astype(np.float32))


def oracle_text(model: Any, processor: Any, inputs: Any, chunk: float, stride: float, lang_ids: Any) -> str:
    """CTC greedy text of ``inputs`` (a normalised tensor) chunked at ``chunk`` / ``stride`` seconds."""
    from adaptspeech.decoding import ctc_greedy_decode
    from adaptspeech.inference.encoding import chunked_ctc_log_probs

    log_probs = chunked_ctc_log_probs(model, inputs, chunk, stride, lang_ids=lang_ids)
    ids = ctc_greedy_decode(log_probs[None], blank_id=model.config.pad_token_id)[0]
    return processor.tokenizer.decode(ids, group_tokens=False, skip_special_tokens=True)


def boundaries_s(model: Any, processor: Any, wave: np.ndarray, method: str, chunk: float, stride: float,
                 search_s: float) -> list[float]:
    """Seconds where one chunk's kept frames (CTC) or one segment (attention / joint) end and the next begin."""
    from adaptspeech.decoding import DECODING_METHODS
    from adaptspeech.inference.encoding import plan_chunks
    from adaptspeech.inference.long_form.local_norm import recording_input
    from adaptspeech.inference.long_form.recording import FrameGrid
    from adaptspeech.inference.transcriber import LongFormSettings, attention_segments

    inputs = recording_input(wave, processor.feature_extractor)
    grid = FrameGrid.of(model)
    seconds_per_frame = grid.seconds_per_frame
    if DECODING_METHODS.get(method).ctc_only:
        frames = round(chunk / seconds_per_frame)
        chunks = plan_chunks(len(inputs), grid.units_per_frame, frames, round(stride / seconds_per_frame))
        return [(c.first_frame + c.keep_from) * seconds_per_frame for c in chunks[1:]]
    settings = LongFormSettings(chunk_length_s=chunk, search_length_s=search_s, split_by="chunks")
    segments = attention_segments(model, inputs, wave, settings)
    return [s.first_frame * seconds_per_frame for s in segments[1:]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, type=Path, help="a model folder saved by `adaptspeech train`")
    parser.add_argument("--prepared", required=True, type=Path, help="the `adaptspeech prepare` output folder")
    parser.add_argument("--corpus", required=True, type=Path, help="the Common Voice layout folder of the clips")
    parser.add_argument("--language", required=True)
    parser.add_argument("--split", default="test")
    parser.add_argument("--voice", default=None, metavar="CLIENT_ID",
                        help="only this speaker's utterances (the prepared client_id column; default: any)")
    parser.add_argument("--concat", type=int, default=30, metavar="N", help="utterances in the long recording")
    parser.add_argument("--silence", type=float, default=0.3, metavar="SECONDS", help="pause between utterances")
    parser.add_argument("--pause-noise-db", type=float, default=None, metavar="DBFS",
                        help="fill the pauses with white noise at this RMS level (e.g. -60) instead of digital zeros")
    parser.add_argument("--speech-pad", type=float, nargs="+", default=[None], metavar="SECONDS",
                        help="--split-by pauses: seconds of pause kept around each speech region (default: "
                        "transcribe's; several values compare them)")
    parser.add_argument("--speech-finder", nargs="+", default=[None], metavar="NAME",
                        help="--split-by pauses: the speech-region finders to compare (energy, silero; default: "
                        "transcribe's)")
    parser.add_argument("--split-by", nargs="+", default=["pauses", "chunks"], choices=("pauses", "chunks"),
                        help="CTC decoders: the long-form splits to compare (default both)")
    parser.add_argument("--chunking", type=_chunking, nargs="+", default=[(30.0, 5.0), (6.0, 1.5)],
                        metavar="CHUNK:STRIDE", help="chunk and stride seconds to compare (default 30:5 6:1.5)")
    parser.add_argument("--method", default=None, help="decoding method (default: the head's default decoder)")
    parser.add_argument("--beam-size", type=int, default=None)
    parser.add_argument("--search-length", type=float, default=None, metavar="SECONDS",
                        help="attention / joint: cut search zone (default min(5, chunk / 4))")
    parser.add_argument("--norm-window", type=float, default=None, metavar="SECONDS",
                        help="sliding normalisation window (default: transcribe's, DEFAULT_NORM_WINDOW_S)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    import torch

    from adaptspeech.cli.common import CommandError, _load_model
    from adaptspeech.cli.transcribe import _model_language
    from adaptspeech.decoding import DECODING_METHODS
    from adaptspeech.heads import get_head
    from adaptspeech.inference.long_form.local_norm import DEFAULT_NORM_WINDOW_S
    from adaptspeech.inference.transcriber import transcribe
    from adaptspeech.metrics import compute_error_rates

    torch.set_num_threads(args.threads)
    try:
        model, processor = _load_model(str(args.model))
        adapter = args.language if args.language in model.adapter_languages else None  # a base model has none
        lang_ids = _model_language(model, adapter, str(args.model))
    except CommandError as err:
        sys.exit(f"bench_long_form_cer: error: {err}")
    method = args.method or get_head(model.config.head).default_decoder
    window_s = args.norm_window or DEFAULT_NORM_WINDOW_S
    options = {} if args.beam_size is None else {"beam_size": args.beam_size}
    waves, refs = load_utterances(args.prepared, args.corpus, args.split, args.language, args.concat,
                                  args.voice)
    recording, spans = concatenate(waves, args.silence, args.pause_noise_db)
    reference = " ".join(refs)

    separate = [transcribe(model, processor, [w], method=method, lang_ids=lang_ids, **options)[0].text.strip()
                for w in waves]
    per_utterance = compute_error_rates(separate, refs)["overall"]["cer"]
    joined = compute_error_rates([" ".join(separate)], [reference])["overall"]["cer"]
    print(f"{args.model} (head {model.config.head}), method {method}"
          f"{''.join(f', {k} {v}' for k, v in options.items())}, normalisation window {window_s:g} s, "
          f"{args.threads} thread(s)")
    print(f"{args.concat} {args.language} {args.split} utterances, {sum(len(w) for w in waves) / 16000:.1f} s of "
          f"speech + {args.silence:g} s of silence between clips = {len(recording) / 16000:.1f} s recording\n")
    oracle = method == "ctc_greedy"
    print(f"{'decoding':<40} {'CER %':>7} {'vs joined':>11} {'boundaries in clips':>20}   {'target':<26}"
          f"{'per-utterance normalised' if oracle else ''}")
    print(f"{'separate, per-utterance corpus CER':<40} {100 * per_utterance:>7.2f}")
    print(f"{'separate, joined':<40} {100 * joined:>7.2f}")
    sliced = locally_normalised_slices(model, processor, recording, spans, method, lang_ids, options, window_s)
    cer = compute_error_rates([" ".join(sliced)], [reference])["overall"]["cer"]
    print(f"{'separate, locally normalised input':<40} {100 * cer:>7.2f} {100 * (cer - joined):>+11.2f}")
    known = per_utterance_normalised(processor, waves, recording, spans) if oracle else None
    splits = args.split_by if DECODING_METHODS.get(method).ctc_only else ["segments"]
    runs = [(split, pad, finder) for split in splits for pad in (args.speech_pad if split == "pauses" else [None])
            for finder in (args.speech_finder if split != "chunks" else [None])]
    for split, pad, finder in runs:
        for chunk, stride in args.chunking:
            search_s = args.search_length or min(5.0, chunk / 4)
            result = transcribe(model, processor, [recording], method=method, chunk_length_s=chunk,
                                stride_length_s=stride, lang_ids=lang_ids, search_length_s=search_s,
                                norm_window_s=window_s, split_by="pauses" if split == "segments" else split,
                                **({} if pad is None else {"speech_pad_s": pad}),
                                **({} if finder is None else {"speech_finder": finder}), **options)[0]
            cer = compute_error_rates([result.text], [reference])["overall"]["cer"]
            if split == "pauses":
                regions = result.extra.get("speech", [])
                cuts = [(x["end"] + y["start"]) / 2 for x, y in itertools.pairwise(regions)]
            else:
                cuts = boundaries_s(model, processor, recording, method, chunk, stride, search_s)
            inside = sum(any(a < t < b for a, b in spans) for t in cuts)
            diff = 100 * (cer - joined)
            named = ", ".join(([] if pad is None else [f"pad {pad:g} s"]) + ([] if finder is None else [finder]))
            label = (f"{split}{f' ({named})' if named else ''}, chunk {chunk:g} s" if split != "chunks"
                     else f"chunks, chunk {chunk:g} s stride {stride:g} s")
            floor = ""
            if known is not None and split == "chunks":
                text = oracle_text(model, processor, known, chunk, stride, lang_ids)
                floor_cer = compute_error_rates([text], [reference])["overall"]["cer"]
                floor = f"{100 * floor_cer:.2f} ({100 * (floor_cer - joined):+.2f})"
            print(f"{label:<40} {100 * cer:>7.2f} {diff:>+11.2f} {f'{inside} of {len(cuts)}':>20}   "
                  f"{('met' if abs(diff) <= 1.0 else 'MISSED') + ' (within 1 point)':<26}{floor}")

if __name__ == "__main__":
    main()
