"""The ``adaptspeech`` command.

Each subcommand is one function ``_add_<name>(subparsers)`` that declares its parser and sets ``func`` to the
function that runs it; :data:`SUBCOMMANDS` lists them. Heavy imports happen inside the runners, so that
``adaptspeech --help`` stays fast. Expected errors (a missing folder, a bad value) end with one line
``adaptspeech: error: ...`` and exit status 1; usage errors (an unknown option) are one line too, exit status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

PROG = "adaptspeech"


class CommandError(Exception):
    """An expected failure of a subcommand, printed as one line without a traceback."""


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _float_range(text: str) -> tuple[float, float]:
    parts = text.split(",")
    try:
        low, high = (float(p) for p in parts) if len(parts) == 2 else (float(text), float(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected MIN,MAX (e.g. 10,30), got {text!r}") from None
    return low, high


# ---- prepare -------------------------------------------------------------------------------------------


def _add_prepare(subparsers: argparse._SubParsersAction) -> None:
    prepare = subparsers.add_parser("prepare", help="build corpora and prepared datasets")
    kinds = prepare.add_subparsers(dest="kind", metavar="{synthetic,common-voice}", required=True)

    synth = kinds.add_parser(
        "synthetic",
        help="synthesise an offline multilingual corpus (wordfreq + espeak-ng) in the Common Voice layout",
        description="Synthesise sentences from wordfreq word lists with espeak-ng; write clips/*.mp3 and "
        "train/dev/test.tsv per language. Test voices and test words are held out of train and dev. "
        "Resumable: clips already written are kept.",
    )
    synth.add_argument("--out", required=True, help="corpus folder (created; resumed if it exists)")
    synth.add_argument(
        "--languages", default=None, help="comma-separated codes (default: ro,cs,pl,sl,sk,it,es,pt,nl,de)"
    )
    synth.add_argument(
        "--clips-per-language", type=_positive_int, default=1000, help="clips per language (default 1000)"
    )
    synth.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    synth.add_argument("--workers", type=_positive_int, default=2, help="synthesis processes (default 2)")
    synth.add_argument(
        "--noise-snr-db", type=_float_range, default=None, help="add white noise at an SNR in MIN,MAX dB"
    )
    synth.add_argument(
        "--sample-rate",
        type=_positive_int,
        default=None,
        help="sampling rate of the clips (default 16000; 22050 keeps espeak-ng's)",
    )
    synth.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    synth.set_defaults(func=_run_prepare_synthetic)

    cv = kinds.add_parser(
        "common-voice",
        help="prepare a Common Voice folder (or Hub id): decode, normalise, vocabulary, processor, skip report",
        description="Load Common Voice splits, build the character vocabulary from the training text, save a "
        "Wav2Vec2Processor and the prepared DatasetDict under --out, and report skipped clips.",
    )
    cv.add_argument(
        "--root", required=True, help="Common Voice release folder, synthetic corpus folder or Hub dataset id"
    )
    cv.add_argument("--languages", required=True, help="comma-separated language codes")
    cv.add_argument("--out", required=True, help="output folder (processor/, dataset/, skip_report.json)")
    cv.add_argument(
        "--splits", default="train,dev,test", help="comma-separated splits; the first builds the vocabulary"
    )
    cv.add_argument(
        "--feature-type", choices=("waveform", "fbank"), default="waveform", help="model input (default waveform)"
    )
    cv.add_argument("--per-language-vocab", action="store_true", help="one vocabulary per language (nested, MMS-style)")
    cv.add_argument("--train-subset", default=None, help="low-resource budget per language, e.g. 30min, 1h, 200utt")
    cv.add_argument(
        "--subset-exclude-splits",
        default="test",
        help="the training subset avoids the speakers of these splits (default test; dev,test for a validated pool)",
    )
    cv.add_argument("--seed", type=int, default=0, help="seed of the subset (default 0)")
    cv.add_argument("--max-seconds", type=float, default=20.0, help="skip longer clips (default 20)")
    cv.add_argument("--skip-digits", action="store_true", help="skip sentences containing digits")
    cv.add_argument("--num-proc", type=_positive_int, default=None, help="processes for datasets.map")
    cv.set_defaults(func=_run_prepare_common_voice)


def _run_prepare_synthetic(args: argparse.Namespace) -> int:
    from .data.synthetic import DEFAULT_LANGUAGES, build_synthetic_corpus

    settings = {}
    if args.noise_snr_db is not None:
        settings["noise_snr_db"] = args.noise_snr_db
    if args.sample_rate is not None:
        settings["sample_rate"] = args.sample_rate
    summary = build_synthetic_corpus(
        args.out,
        args.languages or DEFAULT_LANGUAGES,
        args.clips_per_language,
        seed=args.seed,
        num_workers=args.workers,
        progress=not args.no_progress,
        **settings,
    )
    print(
        f"wrote {summary['clips_written']} clips (kept {summary['clips_kept']} already on disk) for "
        f"{len(summary['languages'])} languages in {summary['synthesis_seconds']:.1f} s: "
        f"{summary['clips_per_second']:.1f} clips/s with {summary['num_workers']} workers; "
        f"{summary['audio_hours']:.2f} h of audio; total {summary['seconds']:.1f} s -> {summary['out_dir']}"
    )
    print(f"test voices (not in train/dev): {', '.join(summary['test_voices'])}")
    return 0


def _run_prepare_common_voice(args: argparse.Namespace) -> int:
    from .data.pipeline import prepare_corpus

    splits = [s.strip() for s in args.splits.split(",") if s.strip()]
    result = prepare_corpus(
        args.root,
        args.languages,
        args.out,
        splits=splits,
        feature_type=args.feature_type,
        per_language_vocab=args.per_language_vocab,
        train_subset=args.train_subset,
        subset_exclude_splits=[x.strip() for x in args.subset_exclude_splits.split(",") if x.strip()],
        seed=args.seed,
        max_seconds=args.max_seconds,
        skip_digits=args.skip_digits,
        num_proc=args.num_proc,
    )
    rows = {split: len(part) for split, part in result.dataset.items()}
    print(f"prepared {json.dumps(rows)} -> {result.dataset_dir}; processor -> {result.processor_dir}")
    print(result.report.summary())
    return 0


# ---- shared helpers of the model commands ----------------------------------------------------------------

DECODING_CHOICES = ("ctc_greedy", "ctc_beam", "attention_greedy", "attention_beam", "joint")
"""``adaptspeech.decoding.DECODING_METHODS.names()``, spelled out so that ``--help`` does not import torch."""
_NEEDS_LAS = ("attention_greedy", "attention_beam")
_NEEDS_CTC = ("ctc_greedy", "ctc_beam", "joint")
_BEAM_METHODS = ("ctc_beam", "attention_beam", "joint")


def _split_list(text: str | None) -> list[str]:
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def _process_rank() -> int:
    """This process's rank under torchrun / accelerate launch (0 when not distributed)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return int(os.environ.get("RANK", "0"))


def _add_decoding_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--method",
        choices=DECODING_CHOICES,
        default=None,
        help="decoder (default: ctc_greedy, or attention_beam for a model without a CTC head)",
    )
    parser.add_argument("--beam-size", type=_positive_int, default=None, help="beam size of the beam methods")
    parser.add_argument("--ctc-weight", type=float, default=None, help="CTC weight of the joint method (0..1)")
    parser.add_argument("--batch-size", type=_positive_int, default=16, help="utterances per batch (default 16)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def _decoding_options(args: argparse.Namespace, model: Any) -> tuple[str, dict[str, float | int]]:
    """``(method, options)`` for :func:`adaptspeech.decoding.transcribe_batch`, checked against the model's heads."""
    has_ctc = getattr(model, "ctc_head", None) is not None
    has_las = getattr(model, "las_head", None) is not None
    method = args.method or ("ctc_greedy" if has_ctc else "attention_beam")
    head = getattr(getattr(model, "config", None), "head", "?")
    if method in _NEEDS_LAS and not has_las:
        raise CommandError(f"--method {method} needs an attention (LAS) head; this model has head={head!r} "
                           "(use ctc_greedy or ctc_beam)")
    if method in _NEEDS_CTC and not has_ctc:
        raise CommandError(f"--method {method} needs a CTC head; this model has head={head!r} "
                           "(use attention_greedy or attention_beam)")
    options: dict[str, float | int] = {}
    if args.beam_size is not None:
        if method not in _BEAM_METHODS:
            raise CommandError(f"--beam-size applies to {', '.join(_BEAM_METHODS)}, not to --method {method}")
        options["beam_size"] = args.beam_size
    if args.ctc_weight is not None:
        if method != "joint":
            raise CommandError(f"--ctc-weight applies to --method joint, not to --method {method}")
        if not 0.0 <= args.ctc_weight <= 1.0:
            raise CommandError(f"--ctc-weight must be between 0 and 1, got {args.ctc_weight}")
        options["ctc_weight"] = args.ctc_weight
    return method, options


def _load_model(model_dir: str) -> tuple[Any, Any | None]:
    """``(model in eval mode, the processor saved beside it or None)`` from a folder written by ``train``."""
    from transformers import Wav2Vec2Processor
    from transformers.utils import logging as hf_logging

    from .configuration import AdaptSpeechConfig
    from .modeling import AdaptSpeechForCTC, AdaptSpeechForJointCTCAttention

    path = Path(model_dir)
    if not (path / "config.json").is_file():
        raise CommandError(f"--model {path}: no config.json there (pass a folder saved by `adaptspeech train`, "
                           "i.e. OUTPUT_DIR/model)")
    config = AdaptSpeechConfig.from_pretrained(path)
    cls = AdaptSpeechForCTC if config.head in AdaptSpeechForCTC.supported_heads else AdaptSpeechForJointCTCAttention
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a local folder loads in a blink: no "Loading weights" bar on stderr
    try:
        model = cls.from_pretrained(path)
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    model.eval()
    processor = None
    if (path / "tokenizer_config.json").is_file() or (path / "processor_config.json").is_file():
        processor = Wav2Vec2Processor.from_pretrained(path)
    return model, processor


def _check_vocabulary(model: Any, processor: Any, where: str) -> None:
    size = len(processor.tokenizer)
    if model.config.vocab_size != size:
        raise CommandError(f"the model's vocabulary ({model.config.vocab_size} tokens) does not match the "
                           f"processor's in {where} ({size} tokens)")


# ---- train ---------------------------------------------------------------------------------------------------


def _add_train(subparsers: argparse._SubParsersAction) -> None:
    train = subparsers.add_parser(
        "train",
        help="train one stage from a YAML spec (also under accelerate launch / torchrun)",
        description="Train one stage (recipes/*/stage_*.yaml) on a prepared dataset with AdaptSpeechTrainer, save "
        "OUTPUT_DIR/model with its processor, and evaluate per language on the eval split. Override any setting "
        "as section.key=value (YAML values), e.g. training.max_steps=200. Runs unchanged under "
        "`accelerate launch --config_file configs/accelerate/ddp.yaml -m adaptspeech.cli train ...` and "
        "`torchrun --nproc_per_node N -m adaptspeech.cli train ...` (see docs/multi_gpu.md).",
    )
    train.add_argument("--config", required=True, metavar="STAGE.yaml", help="the stage spec")
    train.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="overrides, e.g. training.max_steps=200")
    train.add_argument(
        "--resume",
        nargs="?",
        const=True,
        default=False,
        metavar="CHECKPOINT",
        help="resume from the last complete checkpoint in OUTPUT_DIR/checkpoints, or from CHECKPOINT "
        "(optimizer, scheduler, sampler and RNG state included)",
    )
    train.add_argument("--threads", type=_positive_int, default=None, help="torch CPU threads per process")
    train.add_argument(
        "--rank-weights",
        metavar="DIR",
        default=None,
        help="every process writes its final weights to DIR/rank<k>.safetensors (to check that DDP replicas agree)",
    )
    train.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    train.set_defaults(func=_run_train)


def _run_train(args: argparse.Namespace) -> int:
    import torch

    from .training.stage import StageSpec, apply_overrides, last_checkpoint, load_yaml, run_stage

    overrides = list(args.overrides)
    resume = args.resume
    if isinstance(resume, str) and "=" in resume and not Path(resume).exists():
        overrides.append(resume)  # `--resume key=value`: argparse took an override for the checkpoint
        resume = True
    spec = StageSpec.from_dict(apply_overrides(load_yaml(args.config), overrides))
    if isinstance(resume, str) and not (Path(resume) / "trainer_state.json").is_file():
        raise CommandError(f"--resume {resume}: not a complete checkpoint folder (no trainer_state.json)")
    if resume is True:
        checkpoints = Path(spec.training.get("output_dir") or Path(spec.output_dir) / "checkpoints")
        resume = last_checkpoint(checkpoints) or False
        if not resume:
            print(f"{PROG}: no complete checkpoint in {checkpoints}; training from the start", file=sys.stderr)
    if args.threads:
        torch.set_num_threads(args.threads)
    rank = _process_rank()
    if resume and rank == 0:
        print(f"resuming from {resume}", flush=True)
    result = run_stage(spec, resume=resume, progress=not args.no_progress)
    if args.rank_weights:
        from safetensors.torch import save_file

        folder = Path(args.rank_weights)
        folder.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().cpu().clone().contiguous() for k, v in result.model.state_dict().items()}
        save_file(state, str(folder / f"rank{rank}.safetensors"))
    if rank == 0:
        steps = max((entry.get("step", 0) for entry in result.log_history), default=0)
        line = f"stage {result.name}: {steps} steps in {result.train_seconds:.1f} s"
        if result.eval is not None:
            overall = result.eval["overall"]
            split = spec.data.get("eval_split", "dev")
            line += f"; {split} CER {100 * overall['cer']:.2f}% WER {100 * overall['wer']:.2f}%"
        print(f"{line} -> {result.model_dir}")
    return 0


# ---- evaluate ------------------------------------------------------------------------------------------------


def _add_evaluate(subparsers: argparse._SubParsersAction) -> None:
    evaluate = subparsers.add_parser(
        "evaluate",
        help="WER / CER of a model on a prepared split, overall and per language (JSON)",
        description="Decode a split of a prepared dataset (`adaptspeech prepare` output) with any head and decoder "
        "and score it with the shipped WER / CER modules (no network): overall and per language.",
    )
    evaluate.add_argument("--model", required=True, metavar="DIR", help="a model folder saved by `adaptspeech train`")
    evaluate.add_argument("--data", required=True, metavar="PREPARED_DIR", help="`adaptspeech prepare` output")
    evaluate.add_argument("--split", default="test", help="split to score (default test)")
    evaluate.add_argument("--languages", default=None, help="comma-separated languages (default: all of the split)")
    evaluate.add_argument("--max-rows", type=_positive_int, default=None, help="score only the first N rows")
    evaluate.add_argument("--output", default=None, metavar="results.json", help="write the rates as JSON")
    _add_decoding_options(evaluate)
    evaluate.set_defaults(func=_run_evaluate)


def _run_evaluate(args: argparse.Namespace) -> int:
    from .evaluation import evaluate_dataset
    from .metrics import write_error_rates_json
    from .training.stage import load_prepared, select_languages

    model, processor = _load_model(args.model)
    dataset, data_processor = load_prepared(args.data)
    if args.split not in dataset:
        raise CommandError(f"--split {args.split!r} is not prepared in {args.data}; prepared splits: "
                           f"{', '.join(sorted(dataset))}")
    data = dataset[args.split]
    languages = _split_list(args.languages)
    if languages:
        data = select_languages(data, languages, args.split, "--languages")
    if args.max_rows:
        data = data.select(range(min(len(data), args.max_rows)))
    processor = processor or data_processor
    _check_vocabulary(model, processor, args.model if processor is not data_processor else args.data)
    method, options = _decoding_options(args, model)
    result = evaluate_dataset(model, data, processor, method=method, batch_size=args.batch_size,
                              progress=not args.no_progress, **options)
    result.update(model=str(Path(args.model)), data=str(Path(args.data)), split=args.split, options=options)
    for code, entry in result["per_language"].items():
        print(f"{code}\tCER {100 * entry['cer']:.2f}%\tWER {100 * entry['wer']:.2f}%\t{entry['num_utterances']} utt")
    overall = result["overall"]
    print(f"overall\tCER {100 * overall['cer']:.2f}%\tWER {100 * overall['wer']:.2f}%\t"
          f"{overall['num_utterances']} utt ({method})")
    if args.output:
        print(f"wrote {write_error_rates_json(result, args.output)}")
    return 0


# ---- transcribe ----------------------------------------------------------------------------------------------


def _add_transcribe(subparsers: argparse._SubParsersAction) -> None:
    transcribe = subparsers.add_parser(
        "transcribe",
        help="transcribe audio files (wav, flac, mp3, ogg) with any head and decoder",
        description="Decode audio files with a model saved by `adaptspeech train` and the processor saved beside it; "
        "prints PATH<TAB>TEXT per file. Audio is decoded with soundfile, mixed to mono and resampled with soxr.",
    )
    transcribe.add_argument("--model", required=True, metavar="DIR", help="a model folder saved by `adaptspeech train`")
    transcribe.add_argument("audio", nargs="+", metavar="AUDIO", help="audio files")
    transcribe.add_argument(
        "--language",
        default=None,
        help="the language's adapter to use (needed when the model routes several languages; ignored with fusion)",
    )
    _add_decoding_options(transcribe)
    transcribe.set_defaults(func=_run_transcribe)


def _transcription_rows(paths: list[str], processor: Any, language: str, progress: bool = True) -> Any:
    """A ``datasets.Dataset`` of model inputs for ``paths``, in the layout of a prepared dataset."""
    from datasets import Dataset
    from tqdm.auto import tqdm

    from .data import extract_features, load_audio

    rows: dict[str, list] = {"path": [], "language": [], "input_length": []}
    for path in tqdm(paths, desc="reading audio", disable=not progress or len(paths) < 2, leave=False):
        waveform = load_audio(path, int(processor.feature_extractor.sampling_rate))
        key, features = extract_features(waveform, processor.feature_extractor)
        rows.setdefault(key, []).append(features)
        rows["path"].append(path)
        rows["language"].append(language)
        rows["input_length"].append(int(features.shape[0]))
    return Dataset.from_dict(rows)


def _run_transcribe(args: argparse.Namespace) -> int:
    from .data import feature_type_of
    from .evaluation import _routing_languages, feature_type_of_model, transcribe_dataset

    model, processor = _load_model(args.model)
    if processor is None:
        raise CommandError(f"--model {args.model}: no processor saved beside the model (tokenizer_config.json, "
                           "preprocessor_config.json); folders written by `adaptspeech train` have one")
    _check_vocabulary(model, processor, args.model)
    if feature_type_of(processor.feature_extractor) == "fbank" and feature_type_of_model(model) == "waveform":
        raise CommandError(f"--model {args.model}: the processor makes fbank features but the model reads waveforms")
    language = args.language
    config = model.config
    if language is not None:
        if language not in model.adapter_languages:
            raise CommandError(f"--language {language!r}: the model has no adapter for it; languages with one: "
                               f"{', '.join(model.adapter_languages) or '(none)'}")
        if not config.fusion_active and not _routing_languages(model):
            model.set_active_languages([language])
    elif _routing_languages(model):
        raise CommandError(f"the model routes several languages ({', '.join(config.active_languages)}): "
                           "pass --language")
    method, options = _decoding_options(args, model)
    rows = _transcription_rows(args.audio, processor, language or "", progress=not args.no_progress)
    texts = transcribe_dataset(model, rows, processor, method=method, batch_size=args.batch_size,
                               progress=not args.no_progress, **options)
    for path, text in zip(args.audio, texts, strict=True):
        print(f"{path}\t{text}")
    return 0


# ---- push ----------------------------------------------------------------------------------------------------


def _add_push(subparsers: argparse._SubParsersAction) -> None:
    push = subparsers.add_parser(
        "push",
        help="publish one language's adapter (or the fusion) on the Hugging Face Hub",
        description="Write adapter.<lang>.safetensors, its config, the fusion files with --fusion and a model card "
        "(base model and revision, languages, metrics) into --folder, then upload the folder. Without network the "
        "folder stays ready to upload and the command ends with one line saying so.",
    )
    push.add_argument("--model", required=True, metavar="DIR", help="a model folder saved by `adaptspeech train`")
    push.add_argument("--language", default=None, help="the language whose adapter to publish")
    push.add_argument("--fusion", action="store_true", help="publish the SimAdapter fusion (also without --language)")
    push.add_argument("--repo-id", required=True, metavar="ORG/NAME", help="the Hub repository")
    push.add_argument("--folder", default=None, help="where to write the files (default: DIR/hub/<language or fusion>)")
    push.add_argument("--token", default=None, help="Hub token (default: HF_TOKEN or the cached login)")
    push.add_argument("--metrics", default=None, metavar="results.json", help="`adaptspeech evaluate --output` JSON")
    push.add_argument("--include-head", action="store_true", help="also publish the CTC head (own vocabulary)")
    push.add_argument("--private", action="store_true", help="create the repository as private")
    push.set_defaults(func=_run_push)


def _card_metrics(path: str, language: str | None) -> dict[str, float | int]:
    """Metrics for the model card from an ``evaluate --output`` JSON (the language's entry, else overall)."""
    try:
        data = json.loads(Path(path).read_text())
    except json.JSONDecodeError as err:
        raise CommandError(f"--metrics {path}: not JSON ({err})") from None
    if not isinstance(data, dict):
        raise CommandError(f"--metrics {path}: expected a JSON object, found {type(data).__name__}")
    if "overall" not in data:
        return {k: v for k, v in data.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    entry = (data.get("per_language") or {}).get(language) or data["overall"]
    split = data.get("split", "test")
    return {f"{split}_cer": entry["cer"], f"{split}_wer": entry["wer"], f"{split}_utterances": entry["num_utterances"]}


def _run_push(args: argparse.Namespace) -> int:
    import re

    from .hub import prepare_adapter_folder, push_folder

    if args.language is None and not args.fusion:
        raise CommandError("name the adapter to publish with --language, or pass --fusion")
    if not re.fullmatch(r"[\w.-]+(/[\w.-]+)?", args.repo_id):
        raise CommandError(f"--repo-id {args.repo_id!r} is not of the form ORG/NAME")
    model, _ = _load_model(args.model)
    metrics = _card_metrics(args.metrics, args.language) if args.metrics else None
    folder = Path(args.folder) if args.folder else Path(args.model) / "hub" / (args.language or "fusion")
    prepare_adapter_folder(model, folder, language=args.language, include_fusion=args.fusion, metrics=metrics,
                           include_head=args.include_head)
    url = push_folder(folder, args.repo_id, token=args.token, private=args.private)
    print(f"pushed {folder} to {args.repo_id}: {url}")
    return 0


# ---- recipe / demo -------------------------------------------------------------------------------------------


def _add_recipe_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                        help="overrides, e.g. target=ro or base.training.max_steps=200")
    parser.add_argument("--only", default=None, metavar="STAGE,STAGE",
                        help="run only these stages / baselines (the others must have run before)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bars")


def _add_recipe(subparsers: argparse._SubParsersAction) -> None:
    recipe = subparsers.add_parser(
        "recipe",
        help="run a SimAdapter recipe: base, source adapters, target adapter, fusion, baselines",
        description="Run every stage of a recipe folder (recipe.yaml + stage_*.yaml), evaluate on the test sets "
        "and write results.md / results.json, fusion_heatmap.png and training_curves.png in its output_dir.",
    )
    recipe.add_argument("recipe_dir", metavar="RECIPE_DIR", help="a folder with recipe.yaml")
    _add_recipe_options(recipe)
    recipe.set_defaults(func=_run_recipe)


def _add_demo(subparsers: argparse._SubParsersAction) -> None:
    demo = subparsers.add_parser(
        "demo",
        help="the offline synthetic SimAdapter demo (recipes/synthetic_demo)",
        description="Build the synthetic corpus, train the multilingual base, the adapters and the fusion and the "
        "baselines, and print the results table; fully offline. Same as `adaptspeech recipe recipes/synthetic_demo`.",
    )
    demo.add_argument("--recipe", default=None, metavar="RECIPE_DIR", help="another recipe folder")
    _add_recipe_options(demo)
    demo.set_defaults(func=_run_demo)


def demo_recipe_dir() -> Path:
    """``recipes/synthetic_demo`` beside the package (a source checkout), else in the current folder."""
    from . import __file__ as package_file

    for candidate in (Path(package_file).resolve().parents[1] / "recipes" / "synthetic_demo",
                      Path.cwd() / "recipes" / "synthetic_demo"):
        if (candidate / "recipe.yaml").is_file():
            return candidate
    raise CommandError("cannot find recipes/synthetic_demo beside the package or in the current folder; "
                       "pass --recipe RECIPE_DIR")


def _run_recipe_folder(recipe_dir: str | Path, args: argparse.Namespace) -> int:
    from .recipes.simadapter import BASELINE_NAMES, STAGE_NAMES, load_recipe, run_recipe

    only = _split_list(args.only) or None
    unknown = sorted(set(only or []) - set(STAGE_NAMES + BASELINE_NAMES))
    if unknown:
        raise CommandError(f"--only: unknown stage(s) {', '.join(unknown)}; allowed values: "
                           f"{', '.join(STAGE_NAMES + BASELINE_NAMES)}")
    if not Path(recipe_dir).exists():
        raise CommandError(f"{recipe_dir}: no such recipe folder (a folder with recipe.yaml and the stage files)")
    overrides = list(args.overrides) + (["progress=false"] if args.no_progress else [])
    recipe = load_recipe(recipe_dir, overrides)
    run_recipe(recipe, only=only)
    out = Path(recipe["output_dir"])
    print((out / "results.md").read_text())
    written = [str(out / name) for name in ("results.md", "results.json", "fusion_heatmap.png", "training_curves.png")
               if (out / name).is_file()]
    print(f"wrote {', '.join(written)}")
    return 0


def _run_recipe(args: argparse.Namespace) -> int:
    return _run_recipe_folder(args.recipe_dir, args)


def _run_demo(args: argparse.Namespace) -> int:
    return _run_recipe_folder(args.recipe or demo_recipe_dir(), args)


# ---- the command ---------------------------------------------------------------------------------------

SUBCOMMANDS: tuple[Callable[[argparse._SubParsersAction], None], ...] = (
    _add_prepare,
    _add_train,
    _add_evaluate,
    _add_transcribe,
    _add_push,
    _add_recipe,
    _add_demo,
)
"""Each adds one subcommand."""


class _Parser(argparse.ArgumentParser):
    """``ArgumentParser`` whose usage errors are one line (``PROG: error: ...``, exit status 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG, description="Low-resource speech recognition with per-language adapters on the Hugging Face stack."
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add in SUBCOMMANDS:
        add(subparsers)
    return parser


def _expected_errors() -> tuple[type[BaseException], ...]:
    """Errors that end the command with one line: bad input, missing files, offline pushes, bad clips.

    ``StageConfigError``, ``RecipeError`` and ``AdapterLoadError`` are ``ValueError`` subclasses; the classes of
    modules not imported yet cannot have been raised.
    """
    errors: list[type[BaseException]] = [CommandError, OSError, ValueError, KeyError, ImportError]
    for module, name in (("adaptspeech.hub", "PushError"), ("adaptspeech.data.audio", "BadClipError")):
        cls = getattr(sys.modules.get(module), name, None)
        if cls is not None:
            errors.append(cls)
    return tuple(errors)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``adaptspeech`` with ``argv`` (default ``sys.argv[1:]``); return the exit status.

    ``KEY=VALUE`` overrides may also follow other options (``train --config s.yaml --threads 1 a.b=1``). Set
    ``ADAPTSPEECH_TRACEBACK=1`` to see the traceback of an expected error.
    """
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        if hasattr(args, "overrides") and all("=" in t and not t.startswith("-") for t in extra):
            args.overrides = [*args.overrides, *extra]
        else:
            where = f"{PROG} {args.command}"
            parser.exit(2, f"{where}: error: unrecognized arguments: {' '.join(extra)} (see `{where} --help`)\n")
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except Exception as err:
        if not isinstance(err, _expected_errors()) or os.environ.get("ADAPTSPEECH_TRACEBACK"):
            raise
        message = err.args[0] if isinstance(err, KeyError) and err.args else str(err)
        print(f"{PROG}: error: {' '.join(str(message).split()) or type(err).__name__}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
