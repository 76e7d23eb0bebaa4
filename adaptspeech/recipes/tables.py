"""The results table of a recipe run: ``<name>.md`` (markdown; CER / WER in percent, parameters with thousands
separators) and ``<name>.json`` (the rows and any other figures of the run)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

TABLE_COLUMNS = ("system", "cer", "wer", "trainable_params", "trainable_share", "train_seconds")


def _fmt(key: str, value: Any) -> str:
    if value is None:
        return "-"
    if key in ("cer", "wer") or key.startswith(("cer_", "wer_")):
        return f"{100 * value:.2f}"
    if key == "trainable_share":
        return f"{100 * value:.2f}%"
    if key == "trainable_params":
        return f"{int(value):,}"
    if key == "train_seconds":
        return f"{value:.0f}"
    return str(value)


def results_markdown(
    rows: Sequence[Mapping[str, Any]], columns: Sequence[str] = TABLE_COLUMNS, title: str | None = None
) -> str:
    """A markdown table; CER / WER in percent, parameters with thousands separators."""
    headers = {
        "cer": "CER %",
        "wer": "WER %",
        "trainable_params": "trainable params",
        "trainable_share": "trainable share",
        "train_seconds": "train s",
    }
    lines = [f"### {title}", ""] if title else []
    lines.append("| " + " | ".join(headers.get(c, c) for c in columns) + " |")
    lines.append("| " + " | ".join("---" for _ in columns) + " |")
    for row in rows:
        lines.append("| " + " | ".join(_fmt(c, row.get(c)) for c in columns) + " |")
    return "\n".join(lines) + "\n"


def write_results(
    rows: Sequence[Mapping[str, Any]],
    folder: str | os.PathLike,
    name: str = "results",
    columns: Sequence[str] = TABLE_COLUMNS,
    title: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> tuple[Path, Path]:
    """Write ``<name>.md`` and ``<name>.json``; returns both paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    md = folder / f"{name}.md"
    md.write_text(results_markdown(rows, columns, title))
    js = folder / f"{name}.json"
    js.write_text(json.dumps({"rows": list(rows), **(extra or {})}, indent=2, default=float) + "\n")
    return md, js
