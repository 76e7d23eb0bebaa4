"""Temperature-based language sampling in the Trainer: ``language_sampling_temperature=T`` draws the
languages of the training rows with ``p_l ∝ n_l^(1/T)``; two processes take disjoint halves of the same seeded draw
(as accelerate shards it); ``set_epoch`` redraws; a resumed run continues the same draw."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch
from accelerate.data_loader import prepare_data_loader
from helpers.training import StopAt, make_dataset, training_args
from torch.utils.data import DataLoader

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.data import DataCollatorCTCWithPadding, TemperatureSampler
from adaptspeech.data.subsets import language_sampling_probabilities
from adaptspeech.testing import tiny_config
from adaptspeech.training import AdaptSpeechTrainer, StageConfigError

COUNTS = {"ro": 10, "cs": 90, "pl": 300}


def unbalanced_languages() -> list[str]:
    rng = np.random.default_rng(0)
    languages = [lang for lang, n in COUNTS.items() for _ in range(n)]
    return [languages[i] for i in rng.permutation(len(languages))]


def tiny_model() -> AdaptSpeechForCTC:
    return AdaptSpeechForCTC(tiny_config("fbank_conformer"))


class Recorder:
    """A collator that remembers the ``row`` of every utterance it batches, in order."""

    def __init__(self, collator):
        self.collator, self.rows = collator, []

    def __call__(self, rows):
        self.rows.append([r["row"] for r in rows])
        return self.collator(rows)


def rows_with_ids(n: int, languages: list[str] | None = None):
    dataset = make_dataset(n)
    if languages is not None:
        dataset = dataset.remove_columns("language").add_column("language", languages[:n])
    return dataset.add_column("row", list(range(n)))


def test_drawn_language_shares_follow_the_temperature():
    """Over 4 epochs of 400 draws the share of each language is within 4 binomial sigmas of p_l (and ro, 2.5% of
    the rows, is drawn 6x more often than its share at T=3)."""
    languages = unbalanced_languages()
    sampler = TemperatureSampler(languages, temperature=3.0, seed=11)
    drawn: Counter[str] = Counter()
    for epoch in range(4):
        sampler.set_epoch(epoch)
        drawn.update(languages[i] for i in sampler)
    total = sum(drawn.values())
    probs = language_sampling_probabilities(COUNTS, 3.0)
    for lang, p in probs.items():
        sigma = (total * p * (1 - p)) ** 0.5
        assert abs(drawn[lang] - total * p) <= 4 * sigma, (lang, drawn[lang], total * p)
    assert drawn["ro"] / total > 6 * COUNTS["ro"] / sum(COUNTS.values())


def test_the_trainer_uses_the_temperature_sampler(tmp_path, processor):
    languages = unbalanced_languages()[:96]
    dataset = rows_with_ids(96, languages)
    recorder = Recorder(DataCollatorCTCWithPadding(processor, feature_type="fbank"))
    trainer = AdaptSpeechTrainer(
        model=tiny_model(), args=training_args(tmp_path, max_steps=2, per_device_train_batch_size=5),
        train_dataset=dataset, data_collator=recorder, language_sampling_temperature=4.0,
    )
    sampler = trainer._get_train_sampler()
    assert isinstance(sampler, TemperatureSampler) and len(sampler) == 100  # a whole number of batches of 5
    trainer.train()
    sampler.set_epoch(0)
    expected = list(sampler)
    seen = [row for batch in recorder.rows for row in batch]
    assert len(seen) >= 10 and seen == expected[: len(seen)]  # (the loader may fetch a batch ahead)


def test_two_processes_take_disjoint_halves_of_the_same_draw():
    languages = unbalanced_languages()
    dataset = list(range(len(languages)))
    sampler = TemperatureSampler(languages, temperature=2.0, num_samples=400, seed=3)
    for epoch in (0, 1):
        sampler.set_epoch(epoch)
        draw = list(sampler)
        shards = []
        for rank in (0, 1):
            loader = prepare_data_loader(DataLoader(dataset, batch_size=8, sampler=sampler), num_processes=2,
                                         process_index=rank, put_on_device=False)
            loader.set_epoch(epoch)
            shards.append([batch.tolist() for batch in loader])
        assert len(shards[0]) == len(shards[1]) == 25  # each rank its share: 400 / (2 x 8) batches
        # rank r takes batches r, r + 2, ... of the one draw: nothing drawn twice, nothing left out
        merged = [row for pair in zip(*shards, strict=True) for batch in pair for row in batch]
        assert merged == draw
    sampler.set_epoch(0)
    first = list(sampler)
    sampler.set_epoch(1)
    assert list(sampler) != first  # each epoch is a new draw


def test_a_resumed_run_continues_the_same_draw(tmp_path, processor):
    """12 rows, batches of 4: 3 steps per epoch; stopped at step 4 (inside epoch 1) and resumed, the run sees the
    rows an uninterrupted run sees at steps 5 to 8."""
    dataset = rows_with_ids(12, ["ro", "ro", "cs", "pl"] * 3)

    def run(out, stop=None, resume=None):
        recorder = Recorder(DataCollatorCTCWithPadding(processor, feature_type="fbank"))
        trainer = AdaptSpeechTrainer(
            model=tiny_model(), args=training_args(out, max_steps=8, save_strategy="steps", save_steps=2),
            train_dataset=dataset, data_collator=recorder, language_sampling_temperature=2.0,
            callbacks=[StopAt(stop)] if stop else None,
        )
        trainer.train(resume_from_checkpoint=resume)
        return recorder.rows

    # (the loader fetches one batch ahead: a run that stops records one batch more than it trains on)
    full = run(tmp_path / "full")[:8]
    cut = run(tmp_path / "cut", stop=4)
    assert cut[:4] == full[:4]
    resumed = run(tmp_path / "cut", resume=str(tmp_path / "cut" / "checkpoint-4"))
    assert resumed[:4] == full[4:8]
    assert full[3:6] != full[0:3]  # epoch 1 is a new draw (set_epoch)


def test_temperature_sampling_and_group_by_length_are_refused_together(tmp_path):
    with pytest.raises(StageConfigError, match=r"cannot be combined with training\.train_sampling_strategy"):
        AdaptSpeechTrainer(model=tiny_model(), args=training_args(tmp_path, train_sampling_strategy="group_by_length"),
                           train_dataset=make_dataset(4), language_sampling_temperature=2.0)


def test_length_grouped_sampler_reads_the_lengths_as_a_list(tmp_path):
    """group_by_length: the sampler gets the length column as a list (transformers passes the lazy datasets Column,
    read one element at a time every epoch: 2.6 s for 4,800 rows) and draws the same order as transformers' own
    sampler for the same seed."""
    from transformers.trainer_pt_utils import LengthGroupedSampler

    from adaptspeech.data.array_rows import column_list, with_array_rows

    dataset = with_array_rows(make_dataset(24))
    args = training_args(tmp_path, train_sampling_strategy="group_by_length", length_column_name="input_length")
    trainer = AdaptSpeechTrainer(model=tiny_model(), args=args, train_dataset=dataset)
    sampler = trainer._get_train_sampler()
    assert isinstance(sampler, LengthGroupedSampler)
    assert isinstance(sampler.lengths, list) and sampler.lengths == column_list(dataset, "input_length")
    stock = LengthGroupedSampler(args.train_batch_size, dataset=dataset, lengths=dataset["input_length"])
    torch.manual_seed(3)
    ours = list(sampler)
    torch.manual_seed(3)
    assert ours == list(stock)
