"""Test CER of a demo run's systems at full context and at several decoding chunk sizes (the chunk chosen at decoding
time, :func:`adaptspeech.attention.chunking.chunk_attention`), with the relative degradation against full context.

Usage::

    python scripts/bench_streaming_accuracy.py --run runs/demo_streaming [--reference-run runs/synthetic_demo]

``--run`` is the output folder of the demo recipe trained for streaming (dynamic chunks; the convolution causal,
``conv_lookahead: 0``, dynamic chunk, ``conv_lookahead: chunk``, or a look-ahead ``r``; see docs/streaming.md): its
``base`` is evaluated on the source languages' test sets (the mean of the per-language CERs, as
the demo reports it), its ``target_adapter`` and ``fusion`` on the target's. Decoding is CTC greedy (the figures
WeNet's and SpeechBrain's degradations quote) on the prepared features (normalised per utterance); chunk-by-chunk
streaming with a cache gives the same posteriors as this chunk-masked forward
(``tests/inference/streaming/test_inference_stream_encoding.py``); ``--stream-corpus`` also decodes the test clips'
audio through ``StreamingRecognizer``, whose features are normalised over past audio only (training normalises each
utterance over itself; under global CMVN the training set's statistics): the end-to-end streaming figure, on every
``--stream-every``-th clip, with its baseline on the same clips one at a time (``streamed_clips``: full context and the
chunk-masked forward; the streamed rows' relative change is against that full context). ``--reference-run``: the
same systems trained without chunks (today's settings) at full context, for the "within +0.3 points" comparison (every
system found in both runs).

``--lm DIR`` (an ``adaptspeech lm build`` folder or a model folder with a tuned LM; ``--alpha`` / ``--beta``) adds, for
every system and chunk size, the CER with the word n-gram LM two ways on the same posteriors: the offline LM decoder of
``transcribe --lm`` (pyctcdecode) and the streaming prefix beam search with the LM fused
(:func:`~adaptspeech.inference.streaming.recognizer.lm_prefix_beam`), fed the posteriors one decoding chunk at a time
(640 ms for full context), as a stream gives them. ``--sets sources`` / ``target`` limits the test sets. The demo's test
sentences are made of held-out words that no training or dev sentence holds, so an LM of the training transcripts knows
almost none of them: ``--lm-word-lists N --corpus DIR`` builds instead a word 3-gram LM (``lm build``) of N sentences
per source language drawn from the corpus's own word lists (``DIR/synthetic_config.json``: wordfreq's lists as the
corpus cleaned them, frequency-weighted, 3-10 words, no test sentence), as an LM from text in the language would be.

Each row names the system's convolution (``causal``, ``DCConv``, ``look-ahead r``, ``symmetric``), read from its
config, so that the tables of runs trained with each setting line up (the WeNet-style table: run the script once per
run). A symmetric model cannot stream (``encode_chunk`` refuses it): its chunk figures are the chunk-masked forward
(the attention chunked, the convolution crossing into the next chunk), which no stream computes, marked ``masked
only``, and ``--stream-corpus`` skips it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.attention.chunking import chunk_attention
from adaptspeech.data.prepared_data import load_prepared, select_languages
from adaptspeech.evaluation import evaluate_dataset


def convolution_label(model: Any) -> str:
    """The system's depthwise convolution: ``causal`` (``conv_lookahead: 0``), ``DCConv`` (``chunk``), ``look-ahead r``
    or ``symmetric`` (unset)."""
    setting = getattr(model.config.backbone_config, "conv_lookahead", None)
    if setting is None:
        return "symmetric"
    if setting == "chunk":
        return "DCConv"
    return "causal" if setting == 0 else f"look-ahead {setting}"


def _cer(model: Any, data: Any, processor: Any, chunk: int, languages: list[str], batch_size: int) -> float:
    """CER % of ``model`` on ``data`` decoded with chunks of ``chunk`` frames (0: full context), the mean over
    ``languages`` when there are several."""
    with chunk_attention(chunk):
        metrics = evaluate_dataset(model, data, processor, method="ctc_greedy", batch_size=batch_size, progress=False)
    if len(languages) > 1:
        present = [lang for lang in languages if lang in metrics["per_language"]]  # --max-rows may cut some
        return 100 * float(np.mean([metrics["per_language"][lang]["cer"] for lang in present]))
    return 100 * float(metrics["overall"]["cer"])


class _StreamedLM:
    """The streaming fused LM search as the ``lm_decoder`` of :func:`evaluate_dataset`: each utterance's CTC
    log-probabilities ``[T, V]`` fed ``chunk`` frames at a time, the text of the best hypothesis at its end."""

    def __init__(self, fusion: Any, tokenizer: Any, vocab_size: int, blank_id: int, chunk: int) -> None:
        self.fusion, self.tokenizer, self.vocab_size, self.blank_id, self.chunk = (fusion, tokenizer, vocab_size,
                                                                                  blank_id, chunk)

    def decode(self, log_probs: torch.Tensor, **_: Any) -> tuple[str, list]:
        from adaptspeech.inference.long_form.stitching import label_text
        from adaptspeech.inference.streaming.recognizer import lm_prefix_beam

        search = lm_prefix_beam(self.vocab_size, self.blank_id, self.fusion)
        for start in range(0, len(log_probs), self.chunk):
            search.accept(log_probs[start : start + self.chunk].float().log_softmax(-1))
        return label_text(self.tokenizer, search.finish(1)[0].tokens), []


def _word_list_lm(corpus: Path, languages: list[str], sentences: int, exclude: set[str], out: Path) -> Path:
    """A word 3-gram LM of ``sentences`` random sentences per language from the synthetic corpus's word lists."""
    from adaptspeech.data.synthetic import CONFIG_FILE, SyntheticConfig, load_word_list
    from adaptspeech.lm.build import build_arpa

    config = SyntheticConfig(**json.loads((corpus / CONFIG_FILE).read_text())["config"])
    rng = np.random.default_rng(12345)
    lines = []
    for language in languages:
        words, freqs = load_word_list(language, config)
        probs = freqs / freqs.sum()
        lo, hi = config.words_per_sentence
        count = 0
        while count < sentences:
            sentence = " ".join(words[i] for i in rng.choice(len(words), size=int(rng.integers(lo, hi + 1)), p=probs))
            if sentence not in exclude:
                lines.append(sentence)
                count += 1
    out.mkdir(parents=True, exist_ok=True)
    (out / "text.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return build_arpa(out / "text.txt", out / "lm", order=3, progress=False).parent


def _lm_cers(model: Any, data: Any, processor: Any, chunk: int, languages: list[str], batch_size: int,
             lm: Path, alpha: float | None, beta: float | None) -> dict[str, float]:
    """CER % with the offline LM decoder and with the streaming fused search at ``chunk`` frames, the share of clips
    on which their texts are the same, and each one's decoding seconds (the encoder included)."""
    from adaptspeech.lm.decoder import LMDecoder, build_decoder
    from adaptspeech.lm.shallow_fusion import NGramFusion

    offline = LMDecoder(build_decoder(processor.tokenizer, lm, alpha=alpha, beta=beta))
    fusion = NGramFusion.from_lm_dir(processor.tokenizer, lm, alpha=alpha, beta=beta)
    streamed = _StreamedLM(fusion, processor.tokenizer, model.config.vocab_size, model.config.pad_token_id,
                           chunk or round(640 / model.frame_milliseconds()))
    figures: dict[str, Any] = {}
    for name, decoder in (("offline", offline), ("streaming_search", streamed)):
        with chunk_attention(chunk):
            metrics = evaluate_dataset(model, data, processor, batch_size=batch_size, progress=False,
                                       lm_decoder=decoder, return_hypotheses=True)
        if len(languages) > 1:
            present = [lang for lang in languages if lang in metrics["per_language"]]
            figures[name] = 100 * float(np.mean([metrics["per_language"][lang]["cer"] for lang in present]))
        else:
            figures[name] = 100 * float(metrics["overall"]["cer"])
        figures[f"{name}_seconds"] = metrics["decode_seconds"]
        figures[f"{name}_texts"] = [" ".join(text.split()) for text in metrics["hypotheses"]]
    same = sum(a == b for a, b in zip(figures.pop("offline_texts"), figures.pop("streaming_search_texts"), strict=True))
    figures["same_text"] = same / len(data)
    return figures


def _streamed_cer(model: Any, data: Any, processor: Any, corpus: Path, chunk_ms: float, languages: list[str]) -> float:
    """CER % of the test clips' audio (``corpus/<language>/clips/<path>``) through :class:`StreamingRecognizer`
    (features normalised over past audio, the encoder chunk by chunk, greedy CTC across chunks), the mean over
    ``languages``."""
    from adaptspeech.data import load_audio
    from adaptspeech.inference.streaming.recognizer import StreamingRecognizer
    from adaptspeech.metrics import compute_error_rates

    recognizer = StreamingRecognizer(model, processor, chunk_ms=chunk_ms)
    hypotheses = []
    for path, language in zip(data["path"], data["language"], strict=True):
        recognizer.reset()
        recognizer.accept_waveform(load_audio(str(corpus / language / "clips" / path), 16000))
        hypotheses.append(recognizer.finalize())
    metrics = compute_error_rates(hypotheses, list(data["text"]), languages=list(data["language"]))
    present = [lang for lang in languages if lang in metrics["per_language"]]
    return 100 * float(np.mean([metrics["per_language"][lang]["cer"] for lang in present]))


def streamed_change(results: dict[str, Any], label: str) -> list[float]:
    """The relative CER change (%) of system ``label``'s streamed figures (``results["streamed"]``, one per chunk size)
    against the full context of the same clips (``results["streamed_clips"]``: ``--stream-every`` may stream a subset;
    the whole test set's full context, ``results["systems"]``, would mix two sets of clips)."""
    full = results["streamed_clips"][label][0]
    return [(cer / full - 1) * 100 for cer in results["streamed"][label]]


def _feature_label(processor: Any) -> str:
    """How the system's features are normalised: ``global CMVN`` (the training set's statistics, the same in a
    stream) or ``utterance CMVN`` (each utterance over itself; a stream over its past 4 s)."""
    from adaptspeech.data.feature_types import FeatureType

    return "global CMVN" if FeatureType.of(processor.feature_extractor).global_normalization else "utterance CMVN"


def _test_sets(test: Any, sources: list[str], args: argparse.Namespace) -> dict[str, tuple[Any, list[str]]]:
    """``{"sources": (rows, languages), "target": ...}`` of a prepared test split (``--max-rows`` rows each)."""
    sets = {
        "sources": (select_languages(test, sources, "test", "evaluation"), sources),
        "target": (select_languages(test, [args.target], "test", "evaluation"), [args.target]),
    }
    if args.max_rows:
        sets = {name: (data.select(range(min(args.max_rows, len(data)))), langs)
                for name, (data, langs) in sets.items()}
    return sets


def _evaluate_run(run: Path, sets: dict[str, tuple[Any, list[str]]], processor: Any,
                  systems: list[tuple[str, str, str]], chunks_ms: list[float], args: argparse.Namespace,
                  results: dict[str, Any], device: torch.device) -> None:
    """Every system of ``run`` at each chunk size (and streamed from audio, with the LM), into ``results``; each row
    labelled with the system's convolution and feature normalisation."""
    for label, stage, which in systems:
        folder = run / stage / "model"
        if not folder.is_dir():
            continue
        model = AdaptSpeechForCTC.from_pretrained(folder).to(device).eval()
        frame_ms = model.frame_milliseconds()
        data, languages = sets[which]
        label = f"{label}, {convolution_label(model)}, {_feature_label(processor)}"
        refusal = model.streaming_refusal()
        if refusal is not None:
            results.setdefault("masked_only", {})[label] = refusal
            print(label, "cannot stream, chunk figures are the masked forward only:", refusal, flush=True)
        row = [_cer(model, data, processor, round(c / frame_ms), languages, args.batch_size) for c in chunks_ms]
        results["systems"][label] = row
        print(label, row, flush=True)
        if args.lm is not None:
            figures = [_lm_cers(model, data, processor, round(c / frame_ms), languages, args.batch_size, args.lm,
                                args.alpha, args.beta) for c in chunks_ms]
            results.setdefault("lm_offline", {})[label] = [f["offline"] for f in figures]
            results.setdefault("lm_streamed_search", {})[label] = [f["streaming_search"] for f in figures]
            results.setdefault("lm_details", {})[label] = figures
            print(label, "LM offline / streaming search", figures, flush=True)
        if args.stream_corpus is not None and refusal is None:
            clips = data.select(range(0, len(data), args.stream_every))
            corpus = args.stream_corpus
            streamed = [_streamed_cer(model, clips, processor, corpus, c, languages) for c in chunks_ms if c]
            results.setdefault("streamed", {})[label] = streamed
            print(label, "streamed", streamed, flush=True)
            # the same clips one at a time (no padding in the batch): full context and the chunk-masked forward, the
            # baseline of the streamed figures (what the model loses, against what the stream adds to it)
            same = [_cer(model, clips, processor, round(c / frame_ms), languages, 1) for c in chunks_ms]
            results.setdefault("streamed_clips", {})[label] = same
            print(label, "streamed clips, one at a time, full context and masked", same, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, required=True, help="the demo run trained for streaming")
    parser.add_argument("--prepared", type=Path, default=None, help="its prepared data (default RUN/prepared)")
    parser.add_argument("--reference-run", type=Path, default=None,
                        help="a run trained without chunks, compared at full context on its own prepared data")
    parser.add_argument("--reference-prepared", type=Path, default=None,
                        help="its prepared data (default REFERENCE_RUN/prepared)")
    parser.add_argument("--sources", default="cs,pl,sl,it,es")
    parser.add_argument("--target", default="sk")
    parser.add_argument("--chunks-ms", default="0,640,320,160", help="0 = full context")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-rows", type=int, default=0, help="rows per test set (0: all)")
    parser.add_argument("--stream-corpus", type=Path, default=None,
                        help="the run's corpus folder: also decode the test clips' audio through StreamingRecognizer")
    parser.add_argument("--skip-base", action="store_true", help="evaluate the target systems only")
    parser.add_argument("--stream-every", type=int, default=1, help="stream every Nth test clip only (default 1: all)")
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    parser.add_argument("--lm", type=Path, default=None, help="also decode with this word n-gram LM, offline and "
                        "with the streaming fused search")
    parser.add_argument("--alpha", type=float, default=None, help="--lm: LM weight (default: the saved or 0.5)")
    parser.add_argument("--beta", type=float, default=None, help="--lm: word bonus (default: the saved or 1.0)")
    parser.add_argument("--sets", default="sources,target", help="test sets to evaluate: sources, target")
    parser.add_argument("--lm-word-lists", type=int, default=0, metavar="N",
                        help="--lm is built here (into the --lm folder) from N sentences per source language of the "
                        "corpus's word lists (--corpus)")
    parser.add_argument("--corpus", type=Path, default=None, help="the synthetic corpus folder (its config)")
    parser.add_argument("--global-cmvn-run", type=Path, default=None,
                        help="also evaluate this run of the same recipe prepared with global CMVN "
                        "(prepare.normalization=global): its rows beside --run's, streamed with the same statistics")
    parser.add_argument("--global-cmvn-prepared", type=Path, default=None,
                        help="its prepared data (default GLOBAL_CMVN_RUN/prepared)")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dataset, processor = load_prepared(args.prepared or args.run / "prepared")
    sources = args.sources.split(",")
    test = dataset["test"]
    sets = _test_sets(test, sources, args)
    systems = [("base (sources)", "base", "sources"), (f"{args.target} adapter", "target_adapter", "target"),
               (f"{args.target} SimAdapter fusion", "fusion", "target")]
    if args.lm_word_lists:
        exclude = set(test["text"])
        args.lm = _word_list_lm(args.corpus, sources, args.lm_word_lists, exclude, args.lm)
        print("LM of the word lists:", args.lm, flush=True)
    chunks_ms = [float(c) for c in args.chunks_ms.split(",")]
    results: dict[str, Any] = {"chunks_ms": chunks_ms, "systems": {}}
    if args.skip_base:
        systems = systems[1:]
    systems = [system for system in systems if system[2] in args.sets.split(",")]
    _evaluate_run(args.run, sets, processor, systems, chunks_ms, args, results, device)
    if args.global_cmvn_run is not None:  # the same systems trained on features normalised with global statistics
        global_data, global_processor = load_prepared(args.global_cmvn_prepared or args.global_cmvn_run / "prepared")
        _evaluate_run(args.global_cmvn_run, _test_sets(global_data["test"], sources, args), global_processor,
                      systems, chunks_ms, args, results, device)
    if args.reference_run is not None:  # the same systems trained without chunks, at full context
        results["reference_full_context"] = {}
        # on the reference run's own prepared features: its normalisation may differ from --run's (global CMVN)
        reference_data, reference_processor = load_prepared(args.reference_prepared or args.reference_run / "prepared")
        reference_sets = _test_sets(reference_data["test"], sources, args)
        for label, stage, which in systems:
            folder = args.reference_run / stage / "model"
            mine = next((name for name in results["systems"] if name.startswith(f"{label}, ")), None)
            if folder.is_dir() and mine is not None:
                model = AdaptSpeechForCTC.from_pretrained(folder).to(device).eval()
                data, languages = reference_sets[which]
                results["reference_full_context"][mine] = _cer(model, data, reference_processor, 0, languages,
                                                               args.batch_size)
    header = "| system | " + " | ".join("full" if c == 0 else f"{c:g} ms" for c in chunks_ms) + " |"
    print(header)
    print("|" + "---|" * (len(chunks_ms) + 1))
    for label, row in results["systems"].items():
        cells = [f"{row[0]:.2f}"] + [f"{cer:.2f} ({(cer / row[0] - 1) * 100:+.0f}%)" for cer in row[1:]]
        masked = ", masked only" if label in results.get("masked_only", {}) else ""
        print(f"| {label}{masked} | " + " | ".join(cells) + " |")
    for label, row in results.get("streamed", {}).items():
        same = results["streamed_clips"][label]
        cells = [f"{cer:.2f} ({(cer / same[0] - 1) * 100:+.1f}%)" for cer in same[1:]]
        print(f"| {label}, streamed clips, masked | {same[0]:.2f} | " + " | ".join(cells) + " |")
        changes = streamed_change(results, label)
        cells = [f"{cer:.2f} ({change:+.1f}%)" for cer, change in zip(row, changes, strict=True)]
        print(f"| {label}, streamed audio | - | " + " | ".join(cells) + " |")
    for name, title in (("lm_offline", "LM, offline decoder"), ("lm_streamed_search", "LM, streaming search")):
        for label, row in results.get(name, {}).items():
            print(f"| {label}, {title} | " + " | ".join(f"{cer:.2f}" for cer in row) + " |")
    for label, cer in results.get("reference_full_context", {}).items():
        mine = results["systems"].get(label, [float("nan")])[0]
        print(f"{label}: full context {mine:.2f}, trained without chunks {cer:.2f}: {mine - cer:+.2f} points")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
