"""A folder's files as bytes: what a refused or failed write must leave exactly as it was."""

from __future__ import annotations

from pathlib import Path


def folder_bytes(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (hidden ones too): path relative to ``folder`` -> bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}
