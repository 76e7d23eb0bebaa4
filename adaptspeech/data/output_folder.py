"""An output folder that appears complete or not at all: build in a hidden sibling, then swap it in.

``adaptspeech prepare`` writes a processor, a dataset and reports into ``--out``. Interrupted half-way (Ctrl-C, a
killed job, a full disk) a folder written in place would hold a mix of the old and the new run, or a processor
without its dataset, and the next command would take it for a prepared corpus. :func:`atomic_output_folder`
instead yields ``.<name>.partial`` beside ``--out``; when the block ends normally and the completion marker is
there, the old ``--out`` (if any) is moved aside and the new folder renamed into place. On an exception the
partial folder is removed; after a SIGKILL it stays and the next run removes it before it starts.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_OWNER_FILE = ".owner_pid"


def partial_folder(out: Path) -> Path:
    """The hidden sibling ``.<name>.partial`` in which ``out`` is built."""
    return out.parent / f".{out.name}.partial"


def _old_folder(out: Path) -> Path:
    return out.parent / f".{out.name}.old"


def check_output_folder(out: Path, marker: str, what: str) -> None:
    """Refuse an ``out`` that exists and is neither an empty folder nor a complete earlier output (one with
    ``marker``): it may hold the user's files, which must not be replaced.

    Raises:
        NotADirectoryError: ``out`` is a file.
        FileExistsError: ``out`` holds files but no ``marker``.
    """
    if not out.exists():
        return
    if not out.is_dir():
        raise NotADirectoryError(f"--out {out}: a file, not a folder")
    if any(out.iterdir()) and not (out / marker).is_file():
        raise FileExistsError(
            f"--out {out}: the folder holds files but no {marker}, so it is not a complete {what} output; "
            "remove it or choose another --out"
        )


def process_alive(pid: int) -> bool:
    """Whether a process ``pid`` runs on this host (also one owned by another user)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _claim(partial: Path, out: Path) -> None:
    """Remove a partial folder left by a dead run; refuse one that a running process is writing."""
    if partial.exists():
        owner = partial / _OWNER_FILE
        try:
            pid = int(owner.read_text().strip())
        except (OSError, ValueError):
            pid = None
        if pid is not None and pid != os.getpid() and process_alive(pid):
            raise FileExistsError(
                f"--out {out}: another process (pid {pid}) is writing it in {partial}; wait for it or remove {partial}"
            )
        shutil.rmtree(partial)
    partial.mkdir(parents=True)
    (partial / _OWNER_FILE).write_text(str(os.getpid()))


@contextmanager
def atomic_output_folder(out: str | os.PathLike[str], marker: str, what: str = "adaptspeech prepare") -> Iterator[Path]:
    """Yield a fresh folder to write ``out``'s content into; swap it in as ``out`` when the block succeeds.

    Args:
        out: the final folder. An existing one must be empty or hold ``marker`` (a complete earlier output, which
            is replaced only once the new one is complete).
        marker: the file written last inside the block; the swap refuses a folder without it.
        what: names the output in errors.

    Raises:
        NotADirectoryError, FileExistsError: see :func:`check_output_folder`; another live process is writing
            the same ``out``.
        RuntimeError: the block ended without writing ``marker``.
    """
    out = Path(out).absolute()
    partial, old = partial_folder(out), _old_folder(out)
    if old.is_dir() and not out.exists() and (old / marker).is_file():
        old.rename(out)  # killed between the two renames of a swap: the earlier output comes back
    check_output_folder(out, marker, what)
    out.parent.mkdir(parents=True, exist_ok=True)
    _claim(partial, out)
    try:
        yield partial
        if not (partial / marker).is_file():
            raise RuntimeError(f"{partial}: {marker} was not written; {out} is left as it was")
        (partial / _OWNER_FILE).unlink()
        if old.exists():
            shutil.rmtree(old)
        if out.exists():
            out.rename(old)
        partial.rename(out)
    except BaseException:
        if old.is_dir() and not out.exists():
            old.rename(out)
        shutil.rmtree(partial, ignore_errors=True)
        raise
    shutil.rmtree(old, ignore_errors=True)
