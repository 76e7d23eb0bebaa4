"""``AdaptSpeechTrainer``: a thin ``transformers.Trainer`` subclass.

What it adds to the stock Trainer:

* the loss terms the model reports (``loss_ctc``, ``loss_att``, ``loss_distill``, ``loss_fusion_reg``,
  ``loss_fusion_guide``) are averaged over the logging window (and over processes) and logged beside ``loss``; the
  fusion regulariser, the guide loss and the distillation term are already part of the model's ``loss``
  (``loss_distill`` is averaged over the batches that have it: the chunked half of dynamic chunk training);
* the guide-loss weight follows ``guide_weight * guide_decay ** step`` (:class:`FusionGuideScheduleCallback`);
* every checkpoint also gets an adapter-only copy (:class:`AdapterCheckpointCallback`);
* evaluation (``decoding=``) decodes the evaluation split with the engine of ``adaptspeech evaluate``
  (:class:`~adaptspeech.training.decoding_evaluation.DecodingEvaluation`) and logs ``eval_wer``, ``eval_cer``,
  per-language ``eval_wer_<lang>`` / ``eval_cer_<lang>`` and ``eval_loss``: the logged figure is the one
  ``adaptspeech evaluate`` gives for the same weights;
* ``language_sampling_temperature=T`` draws training utterances by language with ``p_l ∝ n_l^(1/T)``
  (:class:`~adaptspeech.data.subsets.TemperatureSampler`, redrawn each epoch, the same draw on every process;
  accelerate hands each process its own batches of it);
* a trainable parameter that receives no gradient stops the run (:class:`GradientCheckCallback`);
* a step whose loss has no autograd graph because LayerDrop skipped every layer holding a trainable parameter
  (adapter-only training with a frozen head) gives the trainable parameters zero gradients instead of crashing in
  ``backward`` (:func:`attach_to_trainable`; every DDP process must run ``backward`` anyway);
* a loss that is NaN or infinite stops the run before the optimizer step, naming the step and the loss terms (the
  checkpoints already written stay as they are; the stock Trainer only leaves such steps out of the logged mean);
* a checkpoint that cannot be written (disk full) stops the run with one line; the incomplete folder is removed and
  the previous complete checkpoint stays the one ``--resume`` picks;
* resuming from a checkpoint at (or past) ``max_steps`` trains no step: the run ends with that checkpoint's weights
  and the checkpoint folders as they were (the stock Trainer stops only after a step, so where ``max_steps`` ends
  in the middle of an epoch it trained one step more and, with ``save_total_limit``, saved it over the last
  checkpoint).

Everything else (optimizer, scheduler, gradient accumulation, mixed precision, DDP / DeepSpeed through accelerate,
``resume_from_checkpoint`` with optimizer, scheduler, sampler and RNG state) is the stock Trainer's.
"""

from __future__ import annotations

import math
import shutil
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
from transformers import Trainer, TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.trainer_pt_utils import LengthGroupedSampler

from ..data.array_rows import column_list
from ..data.source_mix import SourceMixSampler
from ..data.subsets import TemperatureSampler
from ..errors import StageConfigError, TrainingError
from .callbacks import AdapterCheckpointCallback, FusionGuideScheduleCallback, unwrap
from .decoding_evaluation import DecodingEvaluation
from .gradient_check import DEFAULT_GRADIENT_CHECK_STEPS, GradientCheckCallback
from .resume import last_checkpoint

LOSS_TERMS = ("loss_ctc", "loss_att", "loss_distill", "loss_fusion_reg", "loss_fusion_guide", "loss_lid")


def attach_to_trainable(loss: torch.Tensor, model: torch.nn.Module) -> torch.Tensor:
    """``loss`` (a scalar without autograd graph) plus ``0 *`` one element of every trainable parameter.

    LayerDrop can skip every encoder layer in a step; when only adapters inside those layers train, nothing in the
    loss depends on a trainable parameter and ``backward`` would fail. The value stays the same, the trainable
    parameters get zero gradients (no update but the optimizer's own decay), and under DDP every process still
    runs a backward that reaches every parameter the reducer waits for.
    """
    trainable = [p for p in model.parameters() if p.requires_grad]
    if not trainable:
        return loss
    zero = sum(p.reshape(-1)[:1].sum() for p in trainable) * 0.0
    return loss + zero.to(loss.dtype)


class SamplerEpochCallback(TrainerCallback):
    """Give the trainer's own sampler (temperature sampling, the mix of labelled and pseudo-labelled rows) and the
    speed-perturbed training rows the epoch at every epoch start (accelerate does not reach a sampler under its
    batch-skipping wrapper when a distributed run resumes in the middle of an epoch)."""

    def __init__(self, trainer: AdaptSpeechTrainer) -> None:
        self.trainer = trainer

    def on_epoch_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any):
        for follower in (self.trainer.language_sampler, self.trainer.train_dataset):
            if follower is not None and hasattr(follower, "set_epoch"):
                follower.set_epoch(math.floor(state.epoch or 0))
        return control


class AdaptSpeechTrainer(Trainer):
    """``Trainer`` for adaptspeech models; takes the arguments of ``transformers.Trainer`` and:

    Args:
        decoding (`DecodingEvaluation`, *optional*): evaluate by decoding (WER / CER as ``adaptspeech evaluate``);
            the evaluation dataset must be a prepared split (``text`` and ``language`` columns).
        language_sampling_temperature (`float`, *optional*): draw training rows by language with
            ``p_l ∝ n_l^(1/T)`` (the dataset needs a ``language`` column); None: the stock random sampler.
        gradient_check_steps (`int`, defaults to 10): optimizer steps checked by :class:`GradientCheckCallback`
            (0: no check).
        source_mix (`tuple[int, float]`, *optional*): ``(labelled rows, pseudo-labelled share)``: the training rows
            are the labelled rows then the pseudo-labelled ones, and every batch holds that share of the latter
            (:class:`~adaptspeech.data.source_mix.SourceMixSampler`).
    """

    def __init__(
        self,
        *args: Any,
        decoding: DecodingEvaluation | None = None,
        language_sampling_temperature: float | None = None,
        gradient_check_steps: int = DEFAULT_GRADIENT_CHECK_STEPS,
        source_mix: tuple[int, float] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.decoding = decoding
        self.language_sampling_temperature = language_sampling_temperature
        self.language_sampler: Any = None
        self.source_mix = source_mix
        mixed = language_sampling_temperature is not None or self.args.train_sampling_strategy != "random"
        if source_mix is not None and mixed:
            raise StageConfigError(
                "data.pseudo_labelled_dir mixes its rows into every batch with its own sampler: it cannot be "
                "combined with data.language_sampling_temperature or training.train_sampling_strategy="
                f"{self.args.train_sampling_strategy!r} (remove one of them)"
            )
        if language_sampling_temperature is not None:
            if not language_sampling_temperature > 0:
                raise StageConfigError(
                    f"data.language_sampling_temperature: expected a number > 0, got {language_sampling_temperature!r}"
                )
            if self.args.train_sampling_strategy != "random":
                raise StageConfigError(
                    "data.language_sampling_temperature replaces the training sampler: it cannot be combined with "
                    f"training.train_sampling_strategy={self.args.train_sampling_strategy!r} (remove one of the two)"
                )
        self.add_callback(SamplerEpochCallback(self))
        self._decoding_dataset: Any = None
        self.gradient_check = GradientCheckCallback(gradient_check_steps, any_process=self._any_process)
        self.add_callback(FusionGuideScheduleCallback())
        self.add_callback(AdapterCheckpointCallback())
        self.add_callback(self.gradient_check)
        self._loss_sums: dict[str, torch.Tensor] = defaultdict(lambda: torch.zeros((), dtype=torch.float64))
        self._loss_counts: dict[str, int] = defaultdict(int)
        self._last_terms: dict[str, torch.Tensor] = {}

    # --- loss ------------------------------------------------------------------------------------------------------
    def compute_loss(
        self,
        model: torch.nn.Module,
        inputs: dict[str, Any],
        return_outputs: bool = False,
        num_items_in_batch: torch.Tensor | int | None = None,
    ) -> torch.Tensor | tuple[torch.Tensor, Any]:
        outputs = model(**inputs)
        loss = outputs["loss"]
        if model.training and torch.is_grad_enabled() and not loss.requires_grad:
            loss = attach_to_trainable(loss, model)
        if model.training:
            self._last_terms = {}
            for term in LOSS_TERMS:
                value = outputs.get(term)
                if value is not None:
                    value = value.detach().to("cpu", torch.float64)
                    self._last_terms[term] = value
                    self._loss_sums[term] = self._loss_sums[term] + value
                    self._loss_counts[term] += 1
        return (loss, outputs) if return_outputs else loss

    def training_step(
        self, model: torch.nn.Module, inputs: dict[str, Any], num_items_in_batch: torch.Tensor | int | None = None
    ) -> torch.Tensor:
        self.gradient_check.observe_batch(inputs)
        loss = super().training_step(model, inputs, num_items_in_batch)
        self._stop_on_non_finite(loss)
        return loss

    def _any_process(self, flag: bool) -> bool:
        """``flag`` or-ed over all processes (every process must call this at the same point)."""
        if self.args.world_size <= 1:
            return flag
        flags = self.accelerator.gather(torch.tensor([float(flag)], device=self.args.device))
        return bool(flags.any())

    def _stop_on_non_finite(self, loss: torch.Tensor) -> None:
        if not self._any_process(not bool(torch.isfinite(loss).all())):
            return
        terms = ", ".join(f"{k}={float(v):.6g}" for k, v in self._last_terms.items()) or "no separate terms"
        last = last_checkpoint(Path(self.args.output_dir))
        kept = f"the last complete checkpoint is {last}" if last else "no checkpoint was written yet"
        raise TrainingError(
            f"step {self.state.global_step + 1}: the training loss is {float(loss):.6g} ({terms}) on this process or "
            f"another; stopped before the optimizer step, {kept}. Check the data of this step (NaN features?) or "
            "lower training.learning_rate"
        )

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs and self._loss_counts:
            for term, count in self._loss_counts.items():
                mean = (self._loss_sums[term] / count).to(self.args.device, torch.float32)
                logs[term] = round(self.accelerator.gather(mean.reshape(1)).mean().item(), 6)
            self._loss_sums.clear()
            self._loss_counts.clear()
        super().log(logs, start_time)

    # --- sampling ----------------------------------------------------------------------------------------------
    def _get_train_sampler(self, train_dataset: Any = None) -> torch.utils.data.Sampler | None:
        if self.source_mix is not None:
            dataset = train_dataset if train_dataset is not None else self.train_dataset
            num_labelled, share = self.source_mix
            seed = self.args.data_seed if self.args.data_seed is not None else self.args.seed
            self.language_sampler = SourceMixSampler(num_labelled, len(dataset) - num_labelled, share,
                                                     self.args.train_batch_size, seed=seed)
            return self.language_sampler
        if self.language_sampling_temperature is None:
            dataset = train_dataset if train_dataset is not None else self.train_dataset
            column = self.args.length_column_name
            if self.args.train_sampling_strategy == "group_by_length" and column in getattr(
                dataset, "column_names", ()
            ):
                # transformers passes the lazy datasets Column and the sampler reads it one element at a time
                # (2.6 s per epoch for 4,800 rows); the same lengths as a list, read in one pass
                return LengthGroupedSampler(
                    self.args.train_batch_size * self.args.gradient_accumulation_steps,
                    dataset=dataset,
                    lengths=column_list(dataset, column),
                )
            return super()._get_train_sampler(train_dataset)
        dataset = train_dataset if train_dataset is not None else self.train_dataset
        # read the languages from the dataset as given: the Trainer may have removed unused columns from its copy
        source = self.train_dataset if "language" in getattr(self.train_dataset, "column_names", ()) else dataset
        if "language" not in getattr(source, "column_names", ()):
            raise StageConfigError("data.language_sampling_temperature needs a 'language' column in the training data")
        # a whole number of batches on every process: accelerate then never wraps around to repeat rows
        block = self.args.train_batch_size * max(1, self.args.world_size)
        num_samples = -(-len(dataset) // block) * block
        seed = self.args.data_seed if self.args.data_seed is not None else self.args.seed
        self.language_sampler = TemperatureSampler(
            source["language"], self.language_sampling_temperature, num_samples=num_samples, seed=seed
        )
        return self.language_sampler

    # --- evaluation ----------------------------------------------------------------------------------------------
    def evaluate(
        self, eval_dataset: Any = None, ignore_keys: list[str] | None = None, metric_key_prefix: str = "eval"
    ) -> dict[str, float]:
        dataset = eval_dataset if eval_dataset is not None else self.eval_dataset
        if isinstance(dataset, str) and isinstance(self.eval_dataset, dict):
            dataset = self.eval_dataset[dataset]
        if isinstance(dataset, dict):
            return super().evaluate(eval_dataset, ignore_keys, metric_key_prefix)  # comes back here per dataset
        self._decoding_dataset = dataset
        try:
            return super().evaluate(eval_dataset, ignore_keys, metric_key_prefix)
        finally:
            self._decoding_dataset = None

    def evaluation_loop(
        self,
        dataloader: Any,
        description: str,
        prediction_loss_only: bool | None = None,
        ignore_keys: list[str] | None = None,
        metric_key_prefix: str = "eval",
    ) -> Any:
        if self.decoding is None or self._decoding_dataset is None:
            return super().evaluation_loop(
                dataloader, description, prediction_loss_only, ignore_keys, metric_key_prefix
            )
        # the loss from the stock loop (gathered over processes), the rates from the decoding engine
        output = super().evaluation_loop(dataloader, description, True, ignore_keys, metric_key_prefix)
        rates = self.decoding(unwrap(self.model), self._decoding_dataset)
        output.metrics.update({f"{metric_key_prefix}_{key}": value for key, value in rates.items()})
        return output

    # --- resume ------------------------------------------------------------------------------------------------
    def _init_training_state(
        self,
        max_steps: int,
        num_update_steps_per_epoch: int,
        num_train_epochs: int,
        resume_from_checkpoint: str | None,
        trial: Any,
    ) -> tuple[int, int]:
        """The stock state (``(epochs_trained, steps_trained_in_current_epoch)``), except that a checkpoint at or past
        ``max_steps`` leaves no epoch to run: the stock loop checks ``max_steps`` only after a step, so it would
        train one more (module docstring)."""
        epochs_trained, steps_in_epoch = super()._init_training_state(
            max_steps, num_update_steps_per_epoch, num_train_epochs, resume_from_checkpoint, trial
        )
        if resume_from_checkpoint is None or self.state.global_step < max_steps:
            return epochs_trained, steps_in_epoch
        if self.is_world_process_zero():
            print(
                f"adaptspeech: {resume_from_checkpoint} is at step {self.state.global_step} of max_steps "
                f"{max_steps}: nothing left to train, its weights are the result",
                file=sys.stderr,
            )
        return num_train_epochs, 0

    # --- checkpoints ---------------------------------------------------------------------------------------------
    def _save_checkpoint(self, model: torch.nn.Module, trial: Any) -> None:
        folder = Path(self._get_output_dir(trial=trial)) / f"checkpoint-{self.state.global_step}"
        existed = folder.exists()
        failure: OSError | None = None
        try:
            super()._save_checkpoint(model, trial)
        except OSError as err:
            failure = err
        if not self._any_process(failure is not None):
            return
        if self.args.should_save and not existed:
            shutil.rmtree(folder, ignore_errors=True)
        last = last_checkpoint(Path(self.args.output_dir))
        cause = (failure.strerror or str(failure)) if failure is not None else "it failed on another process"
        kept = f"the last complete checkpoint is {last} (resume with --resume)" if last else "no complete checkpoint"
        raise TrainingError(
            f"step {self.state.global_step}: writing checkpoint {folder} failed ({cause}); the incomplete folder was "
            f"removed, {kept}"
        ) from failure
