"""Reading prepared rows fast: array columns as numpy, whole columns as lists.

A prepared split stores each utterance's model input as an ``Array2D`` (``input_features`` ``[T, n_mels]``) or a
list of floats (``input_values`` ``[S]``). Read in ``datasets``' default (python) format, every row becomes nested
Python lists (``16 x 300 x 80`` floats per fbank batch) that the collator turns back into arrays: on the 2-core
demo that was 8% of a training step. :func:`with_array_rows` reads those columns as numpy arrays instead (the same
float32 values; the other columns unchanged), so the collator receives arrays.

``dataset["column"]`` is a lazy ``Column`` in ``datasets`` 5.x: indexing it one element at a time reads the arrow
table on every access (about 0.6 ms a row; 2.6 s for 4,800 rows). transformers' ``LengthGroupedSampler`` does exactly
that once per epoch with the length column; :func:`column_list` materialises a column in one pass (0.15 s).
"""

from __future__ import annotations

from typing import Any

ARRAY_COLUMNS = ("input_features", "input_values", "labels")
"""Columns read as numpy arrays by :func:`with_array_rows` (those of them the dataset has)."""


def with_array_rows(dataset: Any) -> Any:
    """``dataset`` with :data:`ARRAY_COLUMNS` read as numpy arrays (``input_features`` ``[T, n_mels]`` float32,
    ``input_values`` ``[S]`` float32, ``labels`` ``[L]`` int) and every other column as before; a dataset that is
    not a ``datasets.Dataset`` (or has none of those columns) is returned as it is."""
    names = getattr(dataset, "column_names", None)
    if names is None or not hasattr(dataset, "with_format"):
        return dataset
    columns = [name for name in ARRAY_COLUMNS if name in names]
    if not columns:
        return dataset
    return dataset.with_format("numpy", columns=columns, output_all_columns=True)


def column_list(dataset: Any, name: str) -> list[Any]:
    """The values of column ``name`` as a Python list, read in one pass (never element by element)."""
    values = dataset[name]
    if hasattr(values, "tolist"):  # numpy-formatted columns
        return values.tolist()
    return list(values)


def take_rows(dataset: Any, indices: list[int]) -> list[dict[str, Any]]:
    """Rows ``indices`` of ``dataset`` as a list of dicts, fetched in one read where the dataset supports it (the
    ``__getitems__`` that torch's ``DataLoader`` uses)."""
    if hasattr(dataset, "__getitems__"):
        return list(dataset.__getitems__(list(indices)))
    return [dataset[i] for i in indices]
