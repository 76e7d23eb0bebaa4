"""``adaptspeech train``: one training stage from a YAML spec (single process, accelerate or torchrun)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..progress import library_progress_bars
from .common import PROG, CommandError, _positive_int, _process_rank

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
    start = train.add_mutually_exclusive_group()
    start.add_argument(
        "--resume",
        nargs="?",
        const=True,
        default=False,
        metavar="CHECKPOINT",
        help="resume from the last complete checkpoint in OUTPUT_DIR/checkpoints, or from CHECKPOINT "
        "(optimizer, scheduler, sampler and RNG state included); refused when the settings differ from those of the "
        "run that wrote it (beyond the step budget, logging, saving and evaluation)",
    )
    start.add_argument(
        "--overwrite",
        action="store_true",
        help="start afresh in an OUTPUT_DIR that holds another run, removing that run's checkpoints, model/ and "
        "records first (without it such an OUTPUT_DIR is refused: nothing is replaced silently)",
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

    from ..overrides import apply_overrides, load_yaml
    from ..training.resume import checkpoint_problem
    from ..training.stage import StageConfigError, StageSpec, last_checkpoint, run_stage

    overrides = list(args.overrides)
    resume = args.resume
    if isinstance(resume, str) and "=" in resume and not Path(resume).exists():
        overrides.append(resume)  # `--resume key=value`: argparse took an override for the checkpoint
        resume = True
    values = apply_overrides(load_yaml(args.config), overrides)
    try:
        spec = StageSpec.from_dict(values)
    except StageConfigError as err:  # a setting of the file (or of an override of it) that does not fit
        raise StageConfigError(f"{args.config}: {err}") from None
    if isinstance(resume, str):
        problem = checkpoint_problem(resume) if Path(resume).is_dir() else f"{resume} is not a folder"
        if problem:
            raise CommandError(f"--resume {resume}: not a complete checkpoint: {problem}")
    if resume is True:
        checkpoints = spec.checkpoint_dir
        report = (lambda line: print(f"{PROG}: {line}", file=sys.stderr)) if _process_rank() == 0 else None
        resume = last_checkpoint(checkpoints, report=report) or False
        if not resume:
            print(f"{PROG}: no complete checkpoint in {checkpoints}; training from the start", file=sys.stderr)
    if args.threads:
        torch.set_num_threads(args.threads)
    rank = _process_rank()
    if resume and rank == 0:
        print(f"resuming from {resume}", flush=True)
    with library_progress_bars(enabled=not args.no_progress):
        result = run_stage(spec, resume=resume, progress=not args.no_progress, overwrite=args.overwrite)
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
            split = spec.data.eval_split
            line += f"; {split} CER {100 * overall['cer']:.2f}% WER {100 * overall['wer']:.2f}%"
        print(f"{line} -> {result.model_dir}")
    return 0
