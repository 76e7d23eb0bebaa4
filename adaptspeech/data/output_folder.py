"""An output folder that appears complete or not at all: build in a hidden sibling, then swap it in.

``adaptspeech prepare`` writes a processor, a dataset and reports into ``--out``. Interrupted half-way (Ctrl-C, a
killed job, a full disk) a folder written in place would hold a mix of the old and the new run, or a processor
without its dataset, and the next command would take it for a prepared corpus. :func:`atomic_output_folder`
instead yields ``.<name>.partial`` beside ``--out``; when the block ends normally and the completion marker is
there, the old ``--out`` (if any) is moved aside and the new folder renamed into place. On an exception the
partial folder is removed; after a SIGKILL it stays and the next run removes it before it starts.

A folder being written holds ``.owner_pid`` with the writer's process id (:func:`writing_process` reads it): a
second run into it is refused while that process lives, and takes it over once it is gone. The partial folder of
``prepare`` and the corpus folder of ``prepare synthetic`` (:func:`owned_folder`, a corpus resumed in place) use it.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..run_lock import process_alive

OWNER_FILE = ".owner_pid"


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


def writing_process(folder: Path) -> int | None:
    """The process id in ``folder/.owner_pid`` when that process is alive and not this one (None: no other writer;
    a file left by a dead process, or one that cannot be read, names none)."""
    try:
        pid = int((folder / OWNER_FILE).read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if pid != os.getpid() and process_alive(pid) else None


@contextmanager
def owned_folder(folder: str | os.PathLike[str], label: str = "--out") -> Iterator[Path]:
    """Hold ``folder/.owner_pid`` (created atomically, with this process's id) while the block writes ``folder`` in
    place; removed at the end. A file left by a dead process is taken over.

    Args:
        folder: the folder (created if missing).
        label: names the folder in the error (``--out``).

    Raises:
        FileExistsError: another live process holds it.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    owner = folder / OWNER_FILE
    for attempt in range(20):
        try:
            fd = os.open(owner, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            pid = writing_process(folder)
            if pid is not None:
                raise FileExistsError(
                    f"{label} {folder}: another process (pid {pid}) is writing it; wait for it to finish or choose "
                    f"another {label} (if that process is not writing it, remove {owner})"
                ) from None
            try:
                content = owner.read_text().strip()
            except OSError:
                continue  # released in the meantime
            if not content and attempt < 3:
                time.sleep(0.05)  # created by another run a moment ago, its pid not written yet
                continue
            owner.unlink(missing_ok=True)  # left by a run that died
            continue
        with os.fdopen(fd, "w") as handle:
            handle.write(str(os.getpid()))
        break
    else:
        raise FileExistsError(f"{label} {folder}: could not take {owner}: other runs keep taking it")
    try:
        yield folder
    finally:
        try:
            if owner.read_text().strip() == str(os.getpid()):
                owner.unlink()
        except OSError:
            pass  # already gone


def _claim(partial: Path, out: Path) -> None:
    """Remove a partial folder left by a dead run; refuse one that a running process is writing."""
    if partial.exists():
        pid = writing_process(partial)
        if pid is not None:
            raise FileExistsError(
                f"--out {out}: another process (pid {pid}) is writing it in {partial}; wait for it or remove {partial}"
            )
        shutil.rmtree(partial)
    partial.mkdir(parents=True)
    (partial / OWNER_FILE).write_text(str(os.getpid()))


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
        (partial / OWNER_FILE).unlink()
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
