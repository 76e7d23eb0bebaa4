"""``adaptspeech`` in the tests: run in this process (:func:`run_main`, :func:`one_error_line`) or as a subprocess of
``python -m adaptspeech.cli`` or a launcher (:func:`run_command`), a tiny fbank Conformer stage spec, and the mean CTC
loss of a model over a prepared split."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from adaptspeech.cli import main
from adaptspeech.testing import TINY_BACKBONES

LANGUAGES = ("ro", "cs", "pl")
CLIPS_PER_LANGUAGE = 30  # 24 train, 3 dev, 3 test per language

#: the shape of the library's tiny fbank Conformer (width 32, 2 layers, 2 heads, ff 64, kernel 3), as stage specs
#: write it (the prepared corpora's 80 mel bins)
FBANK_SHAPE = {key: TINY_BACKBONES["fbank_conformer"][key] for key in (
    "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "conv_depthwise_kernel_size")}
#: ... with dropout and SpecAugment on (the random state matters to the CLI tests)
TINY_BACKBONE = {
    **FBANK_SHAPE,
    "hidden_dropout": 0.1,
    "attention_dropout": 0.0,
    "activation_dropout": 0.0,
    "spec_augment_time_masks": 1,
    "spec_augment_freq_masks": 1,
}


def stage_spec(prepared: Path, output_dir: Path, **training: Any) -> dict[str, Any]:
    """A tiny stage: fbank Conformer (width 32, 2 layers, dropout and SpecAugment on: RNG state matters), CTC head,
    trained on the three languages; ``training`` overrides the TrainingArguments fields."""
    return {
        "name": "tiny",
        "output_dir": str(output_dir),
        "seed": 0,
        "data": {"prepared_dir": str(prepared), "train_languages": list(LANGUAGES)},
        "model": {
            "init": "config",
            "config": {"backbone_type": "fbank_conformer", "backbone_config": dict(TINY_BACKBONE)},
            "trainable": {"backbone": True, "head": True},
        },
        "training": {
            "max_steps": 8,
            "per_device_train_batch_size": 4,
            "learning_rate": 0.005,
            "warmup_steps": 0,
            "logging_steps": 1,
            "save_steps": 100,
            "use_cpu": True,
            **training,
        },
        "evaluation": {"batch_size": 16},
    }


def write_yaml(path: Path, data: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def run_main(argv: list[Any], capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    """``(exit status, stdout, stderr)`` of ``adaptspeech ARGV`` run in this process, usage errors (argparse's
    ``SystemExit``) included; what was printed before the call is dropped."""
    capsys.readouterr()
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exit_:
        code = exit_.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_error_line(err: str) -> str:
    """The one error line of ``err`` (``adaptspeech: error: ...``, or argparse's ``adaptspeech lm tune: error: ...``);
    fails the test when there are several, none, or a traceback (a library's own logged notes may stand beside it)."""
    lines = [line for line in err.splitlines() if re.match(r"adaptspeech[\w -]*: error: ", line)]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def subprocess_env() -> dict[str, str]:
    """The environment of the training subprocesses: offline, one thread each, no inherited rank variables."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                            "MASTER_PORT", "LOCAL_WORLD_SIZE")}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               TRANSFORMERS_NO_ADVISORY_WARNINGS="1", PYTHONUNBUFFERED="1")
    return env


def run_command(argv: list[str], cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    """Run ``argv`` (a list starting with the program) and fail the test with its output when it fails."""
    done = subprocess.run(argv, cwd=cwd, env=subprocess_env(), capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        pytest.fail(f"{' '.join(argv[:6])} ... exited with {done.returncode}:\n{done.stdout[-3000:]}\n"
                    f"{done.stderr[-6000:]}")
    return done


def cli(*args: str) -> list[str]:
    """``python -m adaptspeech.cli ARGS`` with this interpreter."""
    return [sys.executable, "-m", "adaptspeech.cli", *args]


def load_prepared_split(prepared: Path, split: str = "train") -> tuple[Any, Any]:
    """``(rows of split, processor)`` of a prepared folder."""
    from adaptspeech.data.prepared_data import load_prepared

    dataset, processor = load_prepared(prepared)
    return dataset[split], processor


@torch.no_grad()
def mean_loss(model: Any, rows: Any, processor: Any, batch_size: int = 16) -> float:
    """Mean CTC loss of ``model`` (eval mode: no dropout, no SpecAugment) over every row of ``rows``."""
    from adaptspeech.data import DataCollatorCTCWithPadding
    from adaptspeech.data.feature_types import feature_type_of_model

    collator = DataCollatorCTCWithPadding(processor, feature_type=feature_type_of_model(model))
    model.eval()
    losses = []
    for start in range(0, len(rows), batch_size):
        batch = collator([rows[i] for i in range(start, min(len(rows), start + batch_size))])
        losses.append(float(model(**batch).loss))
    return sum(losses) / len(losses)


def prepare_ro_with_pool(root: Path) -> tuple[Path, Path]:
    """``ro`` in ``root``: 20 synthetic labelled clips and 12 unlabelled ones, prepared as fbank rows
    (``root/prepared``) and the pool of ``other.tsv`` read with their processor (``root/pool``) -> (prepared, pool)."""
    corpus, prepared, pool = root / "corpus", root / "prepared", root / "pool"
    assert main(["prepare", "synthetic", "--out", str(corpus), "--languages", "ro", "--clips-per-language", "20",
                 "--unlabelled-clips", "12", "--workers", "1", "--no-progress"]) == 0
    assert main(["prepare", "common-voice", "--root", str(corpus), "--languages", "ro", "--out", str(prepared),
                 "--feature-type", "fbank"]) == 0
    assert main(["prepare", "common-voice-other", "--root", str(corpus), "--language", "ro", "--out", str(pool),
                 "--processor", str(prepared / "processor"), "--no-progress"]) == 0
    return prepared, pool
