"""Prepared rows read as numpy arrays (``with_array_rows``) batch exactly as the python-format rows do; whole
columns are read in one pass (``column_list``). (The Trainer's length-grouped sampler: tests/training/
test_training_sampler.py.)"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from datasets import Array2D, Dataset, Features, List, Value

from adaptspeech.data import DataCollatorCTCWithPadding, build_processor, build_vocab
from adaptspeech.data.array_rows import column_list, take_rows, with_array_rows


@pytest.fixture(scope="module")
def toy_processor(tmp_path_factory):
    return build_processor(build_vocab(["abc d"]), tmp_path_factory.mktemp("toy"))


def fbank_rows(n: int = 9) -> Dataset:
    """Rows as `prepare` writes them: ``input_features`` an ``Array2D`` of varying length, int32 labels."""
    rng = np.random.default_rng(0)
    frames = rng.integers(5, 40, n)
    features = Features({
        "input_features": Array2D(shape=(None, 8), dtype="float32"),
        "labels": List(Value("int32")),
        "language": Value("string"),
        "input_length": Value("int32"),
        "text": Value("string"),
    })
    return Dataset.from_dict({
        "input_features": [rng.standard_normal((t, 8)).astype(np.float32) for t in frames],
        "labels": [rng.integers(5, 9, rng.integers(0, 6)).tolist() for _ in frames],
        "language": ["ro" if i % 2 else "cs" for i in range(n)],
        "input_length": frames.tolist(),
        "text": [f"row {i}" for i in range(n)],
    }, features=features)


def waveform_rows(n: int = 5) -> Dataset:
    rng = np.random.default_rng(1)
    return Dataset.from_dict({
        "input_values": [rng.standard_normal(int(s)).astype(np.float32).tolist() for s in rng.integers(800, 3000, n)],
        "labels": [[5, 6, 7]] * n,
        "language": ["ro"] * n,
    })


@pytest.mark.parametrize("make, feature_type", [(fbank_rows, "fbank"), (waveform_rows, "waveform")])
def test_array_rows_collate_to_the_same_batch(make, feature_type, toy_processor):
    dataset = make()
    fast = with_array_rows(dataset)
    row = fast[0]
    key = "input_features" if feature_type == "fbank" else "input_values"
    assert isinstance(row[key], np.ndarray) and row[key].dtype == np.float32
    assert isinstance(row["labels"], np.ndarray) and isinstance(row["language"], str)
    collator = DataCollatorCTCWithPadding(toy_processor, {"ro": 0, "cs": 1}, feature_type=feature_type)
    indices = [4, 0, 2, 1]
    slow_batch = collator([dataset[i] for i in indices])
    fast_batch = collator(take_rows(fast, indices))
    assert set(slow_batch) == set(fast_batch)
    for name in slow_batch:
        assert slow_batch[name].dtype == fast_batch[name].dtype, name
        torch.testing.assert_close(fast_batch[name], slow_batch[name], rtol=0, atol=0)


def test_array_rows_keep_other_columns_and_leave_other_datasets_alone():
    dataset = fbank_rows()
    fast = with_array_rows(dataset)
    assert fast.column_names == dataset.column_names
    assert list(fast["text"]) == list(dataset["text"])
    plain = Dataset.from_dict({"text": ["a", "b"]})
    assert with_array_rows(plain) is plain  # no array column: unchanged
    rows = [{"labels": [1]}]
    assert with_array_rows(rows) is rows  # not a datasets.Dataset


def test_column_list_reads_the_values_in_order():
    dataset = fbank_rows()
    expected = [dataset[i]["input_length"] for i in range(len(dataset))]
    assert column_list(dataset, "input_length") == expected
    assert column_list(with_array_rows(dataset), "input_length") == expected
    assert column_list(dataset, "language") == [dataset[i]["language"] for i in range(len(dataset))]


def test_take_rows_equals_row_by_row():
    fast = with_array_rows(fbank_rows())
    for got, i in zip(take_rows(fast, [3, 1, 3]), [3, 1, 3], strict=True):
        np.testing.assert_array_equal(got["input_features"], fast[i]["input_features"])
        assert got["text"] == fast[i]["text"]
    assert take_rows([{"a": 1}, {"a": 2}], [1]) == [{"a": 2}]
