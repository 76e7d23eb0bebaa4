"""What ``--resume`` may continue from: a complete, readable checkpoint, and a stage spec that did not change.

* :func:`checkpoint_problem` reads the structure of every file the Trainer restores (``trainer_state.json`` parses,
  each safetensors file is as long as its header says, each ``torch.save`` archive has its zip directory) without
  loading the tensors, so a checkpoint cut short by a full disk or a killed process is found in milliseconds;
* :func:`last_checkpoint` returns the complete checkpoint of the highest step, skipping (and reporting) broken ones;
* :func:`save_stage_spec` / :func:`changed_settings` keep the spec of the first start in ``OUTPUT_DIR/stage_spec.json``
  (and the spec of the run that wrote it in each ``checkpoint-N/stage_spec.json``) and list what a resumed run
  changed. Only the step budget, logging, saving, evaluation and data-loader settings and the folders
  (:data:`RESUMABLE_CHANGES`) may change on resume; anything else would continue one run with another run's
  settings and give a model that neither configuration describes;
* :func:`check_output_dir_free` refuses a fresh start into an ``output_dir`` that holds another run's results
  (checkpoints, ``model/``, ``stage_summary.json``): the fresh start would replace its model and its spec, and the
  Trainer's checkpoint rotation would delete its checkpoints. :func:`remove_earlier_run` clears them for
  ``--overwrite``.
"""

from __future__ import annotations

import json
import shutil
import struct
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from ..errors import StageConfigError

STAGE_SPEC_FILE = "stage_spec.json"
RESUMABLE_CHANGES: tuple[str, ...] = (
    "output_dir",
    "training.output_dir",
    "training.max_steps",
    "training.num_train_epochs",
    "training.logging_steps",
    "training.logging_strategy",
    "training.logging_first_step",
    "training.logging_dir",
    "training.save_steps",
    "training.save_strategy",
    "training.save_total_limit",
    "training.eval_steps",
    "training.eval_strategy",
    "training.per_device_eval_batch_size",
    "training.report_to",
    "training.disable_tqdm",
    "training.dataloader_num_workers",
    "training.dataloader_prefetch_factor",
    "training.dataloader_persistent_workers",
    "training.dataloader_pin_memory",
    "data.max_eval_rows",
    "data.eval_languages",
    "data.eval_split",
    "evaluation",
)
"""Settings (or whole sections) that a resumed run may change: where the run is, how long to train and what to log,
save and evaluate, not what the optimizer does."""
RUN_FILES = ("model", ".model.partial", "stage_summary.json", "log_history.json", STAGE_SPEC_FILE)
"""What a stage writes into ``output_dir`` beside its checkpoints (removed by :func:`remove_earlier_run`)."""

_TORCH_ARCHIVES = ("optimizer.pt", "scheduler.pt", "scaler.pt", "rng_state.pth", "training_args.bin")


def safetensors_problem(path: Path) -> str | None:
    """Why ``path`` is not a complete safetensors file (None: it is).

    The format is an 8-byte little-endian header length, a JSON header whose entries carry ``data_offsets``, then the
    data: a complete file is exactly ``8 + header length + the largest end offset`` bytes long.
    """
    size = path.stat().st_size
    if size < 8:
        return f"{path} is truncated ({size} bytes)"
    with path.open("rb") as handle:
        (header_length,) = struct.unpack("<Q", handle.read(8))
        if 8 + header_length > size:
            return f"{path} is truncated (its header needs {8 + header_length} bytes, the file has {size})"
        try:
            header = json.loads(handle.read(header_length))
        except (json.JSONDecodeError, UnicodeDecodeError):
            return f"{path} has an unreadable header"
    ends = [entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"]
    expected = 8 + header_length + max(ends, default=0)
    if size != expected:
        return f"{path} is truncated ({size} of {expected} bytes)"
    return None


def checkpoint_problem(folder: str | Path) -> str | None:
    """Why ``folder`` is not a complete checkpoint (None: it is), naming the file at fault."""
    folder = Path(folder)
    state = folder / "trainer_state.json"
    if not state.is_file():
        return f"{state} is missing (the run stopped while saving this checkpoint)"
    try:
        json.loads(state.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return f"{state} is not valid JSON (cut short)"
    weights = sorted(folder.glob("*.safetensors"))
    if not weights and not any(folder.glob("pytorch_model*.bin")):
        return f"{folder} holds no model weights (*.safetensors)"
    for path in weights:
        problem = safetensors_problem(path)
        if problem:
            return problem
    for name in _TORCH_ARCHIVES:
        path = folder / name
        if path.is_file():
            try:
                with zipfile.ZipFile(path):
                    pass
            except (zipfile.BadZipFile, OSError):
                return f"{path} is truncated (not a complete torch archive)"
    return None


def last_checkpoint(folder: Path, report: Callable[[str], None] | None = None) -> str | None:
    """The complete checkpoint of the highest step in ``folder`` (None: none).

    A checkpoint cut short (killed while saving, disk full, a truncated file) is skipped, so ``--resume`` picks the
    previous complete one; ``report`` receives one line per skipped checkpoint naming the file at fault.
    """
    for path in reversed(_checkpoint_folders(folder)):
        problem = checkpoint_problem(path)
        if problem is None:
            return str(path)
        if report is not None:
            report(f"skipping {path.name}: {problem}")
    return None


def _flatten(spec: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in spec.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and name != "evaluation":  # (an empty section adds no setting)
            flat.update(_flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def _resumable(name: str) -> bool:
    return any(name == allowed or name.startswith(f"{allowed}.") for allowed in RESUMABLE_CHANGES)


def changed_settings(
    before: Mapping[str, Any], after: Mapping[str, Any], include_resumable: bool = False
) -> list[str]:
    """``"setting: old -> new"`` for every setting that differs and may not change on resume (with
    ``include_resumable``: every setting that differs)."""
    old, new = _flatten(json.loads(json.dumps(before))), _flatten(json.loads(json.dumps(after)))
    changes = []
    for name in sorted(set(old) | set(new)):
        if old.get(name) != new.get(name) and (include_resumable or not _resumable(name)):
            show = lambda v: "(unset)" if v is None else json.dumps(v)  # noqa: E731
            changes.append(f"{name}: {show(old.get(name))} -> {show(new.get(name))}")
    return changes


def save_stage_spec(output_dir: Path, spec: Mapping[str, Any]) -> None:
    """Write the spec of a fresh start to ``OUTPUT_DIR/stage_spec.json``."""
    path = output_dir / STAGE_SPEC_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(spec, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


def _recorded_spec(path: Path, what: str) -> dict[str, Any] | None:
    """The spec recorded in ``path`` (None: no record)."""
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        reason = err.msg if isinstance(err, json.JSONDecodeError) else "not UTF-8"
        raise StageConfigError(f"--resume: {path} is not valid JSON ({reason}); it records {what}") from None


def check_resumed_spec(output_dir: Path, spec: Mapping[str, Any], checkpoint: str | Path | None = None) -> None:
    """Refuse to resume when the spec differs in anything but :data:`RESUMABLE_CHANGES` from the first start's
    (``OUTPUT_DIR/stage_spec.json``) or from that of the run that wrote ``checkpoint`` (its ``stage_spec.json``): a
    checkpoint of another run (another folder's, or one left by a run before this check) is not continued.

    Raises:
        StageConfigError: one line listing every changed setting with its old and new value.
    """
    records = [(output_dir / STAGE_SPEC_FILE, "the first start", "the stage spec changed since the first start")]
    if checkpoint is not None:
        records.append((Path(checkpoint) / STAGE_SPEC_FILE, "the run that wrote this checkpoint",
                        f"{checkpoint} was written by a run of other settings"))
    for path, what, problem in records:
        before = _recorded_spec(path, what)
        if before is None:
            continue  # a run or a checkpoint from before these records: nothing to compare with
        changes = changed_settings(before, spec)
        if changes:
            raise StageConfigError(
                f"--resume: {problem} ({path}): {'; '.join(changes)}; restore these settings or train into a new "
                "output_dir (only the step budget, logging, saving and evaluation may change)"
            )


def _checkpoint_folders(checkpoints: Path) -> list[Path]:
    """The ``checkpoint-N`` folders in ``checkpoints``, by step."""
    if not checkpoints.is_dir():
        return []
    found = []
    for path in checkpoints.glob(f"{PREFIX_CHECKPOINT_DIR}-*"):
        suffix = path.name[len(PREFIX_CHECKPOINT_DIR) + 1 :]
        if suffix.isdigit() and path.is_dir():
            found.append((int(suffix), path))
    return [path for _, path in sorted(found)]


def earlier_results(output_dir: Path, checkpoints: Path) -> list[str]:
    """What an earlier run left that a fresh start would replace or delete: its checkpoints, ``model/`` and
    ``stage_summary.json`` (``stage_spec.json`` alone, of a run stopped before its first checkpoint, holds nothing
    to lose)."""
    found = [path.name for path in _checkpoint_folders(checkpoints)]
    if (output_dir / "model").exists():
        found.append("model/")
    elif (output_dir / "stage_summary.json").is_file():
        found.append("stage_summary.json")
    return found


def check_output_dir_free(output_dir: Path, checkpoints: Path, spec: Mapping[str, Any]) -> None:
    """Refuse a fresh start into an ``output_dir`` that holds another run's results.

    Raises:
        StageConfigError: one line naming the earlier run (its stage name and results), how its settings differ from
            this run's, and how to proceed: ``--resume``, ``--overwrite`` or another output_dir.
    """
    found = earlier_results(output_dir, checkpoints)
    if not found:
        return
    try:
        before = json.loads((output_dir / STAGE_SPEC_FILE).read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        before = None
    if before is None:
        run, settings, resumable = f"a run without a readable {STAGE_SPEC_FILE}", "", False
    else:
        run = f"stage {before.get('name')!r}"
        differences = changed_settings(before, spec, include_resumable=True)
        settings = (f", whose settings differ from this one's: {'; '.join(differences)}" if differences
                    else ", of the same settings")
        resumable = not changed_settings(before, spec)
    if resumable and any(name.startswith("checkpoint-") for name in found):
        how = "Continue it with --resume, replace it with --overwrite, or pick another output_dir"
    else:
        how = "Replace it with --overwrite or pick another output_dir"
    raise StageConfigError(f"output_dir {output_dir} holds another run: {run} ({', '.join(found)}){settings}. {how}")


def remove_earlier_run(output_dir: Path, checkpoints: Path) -> list[str]:
    """Remove what an earlier run left in ``output_dir`` (its checkpoints and :data:`RUN_FILES`); returns what was
    there (:func:`earlier_results`). Other files in the folder are kept."""
    found = earlier_results(output_dir, checkpoints)
    for path in _checkpoint_folders(checkpoints):
        shutil.rmtree(path)
    for name in RUN_FILES:
        path = output_dir / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    return found
