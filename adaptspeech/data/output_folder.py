"""An output folder that appears complete or not at all: build in a hidden sibling, then swap it in.

``adaptspeech prepare`` writes a processor, a dataset and reports into ``--out``. Interrupted half-way (Ctrl-C, a
killed job, a full disk) a folder written in place would hold a mix of the old and the new run, or a processor
without its dataset, and the next command would take it for a prepared corpus. :func:`atomic_output_folder`
instead yields ``.<name>.partial`` beside ``--out``; when the block ends normally and the completion marker is
there, the old ``--out`` (if any) is moved aside and the new folder renamed into place. On an exception the
partial folder is removed; after a SIGKILL it stays and the next run removes it before it starts.

Nothing is replaced without a word (:func:`check_output_folder`, the rule of ``prepare``, ``pseudo-label`` and
``export``): a complete earlier output is replaced only with ``--overwrite``, and never a file, a folder of other
files, or a folder that is, holds or lies inside the command's input (``export --out RUN`` of ``RUN/model``).
:func:`check_output_file` is the same rule for a command that writes one file (``evaluate --output``).

A folder being written holds ``.owner_pid`` with the writer's process id (:func:`writing_process` reads it): a
second run into it is refused while that process lives, and takes it over once it is gone. The partial folder of
``prepare`` and the corpus folder of ``prepare synthetic`` (:func:`owned_folder`, a corpus resumed in place) use it.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from ..run_lock import process_alive

OWNER_FILE = ".owner_pid"


def partial_folder(out: Path) -> Path:
    """The hidden sibling ``.<name>.partial`` in which ``out`` is built."""
    return out.parent / f".{out.name}.partial"


def _old_folder(out: Path) -> Path:
    return out.parent / f".{out.name}.old"


def check_output_folder(
    out: Path,
    marker: str,
    what: str,
    *,
    overwrite: bool = False,
    label: str = "--out",
    inputs: Mapping[str, str | os.PathLike[str]] | None = None,
) -> None:
    """Refuse to write ``out`` where that would lose work: the one rule of every command that writes a folder.

    Written: a missing ``out``, an empty folder, and with ``overwrite`` only, a complete earlier output of the same
    command (a folder holding ``marker``). Refused, in one line naming ``label`` and the path: a file (or a path
    under one); a folder that
    is, holds or lies inside one of ``inputs`` (``{"--model": model_dir}``: the input the command reads); a folder
    of other files (``overwrite`` does not replace those); an earlier output without ``overwrite``.

    Raises:
        NotADirectoryError: ``out`` is a file, or lies under one.
        FileExistsError: ``out`` is, holds or lies inside an input; holds files but no ``marker``; holds an earlier
            output and ``overwrite`` is off.
    """
    where = out.resolve()
    for option, path in (inputs or {}).items():
        read = Path(path).resolve()
        relation = ("is" if read == where else "holds" if where in read.parents
                    else "lies inside" if read in where.parents else None)
        if relation is not None:
            raise FileExistsError(f"{label} {out}: the folder {relation} {option} {path}, which this command reads; "
                                  f"choose another {label}")
    if not out.exists():
        above = next((parent for parent in out.parents if parent.exists()), None)
        if above is not None and not above.is_dir():
            raise NotADirectoryError(f"{label} {out}: {above} is a file, not a folder; choose another {label}")
        return
    if not out.is_dir():
        raise NotADirectoryError(f"{label} {out}: a file, not a folder; choose another {label}")
    if not any(out.iterdir()):
        return
    if not (out / marker).is_file():
        raise FileExistsError(
            f"{label} {out}: the folder holds files but no {marker}, so it is not a complete {what} output "
            f"(--overwrite replaces only those); remove it or choose another {label}"
        )
    if not overwrite:
        raise FileExistsError(f"{label} {out} already holds an earlier {what} output ({marker}): pass --overwrite "
                              f"to replace it, or choose another {label}")


def check_output_file(
    path: Path, is_earlier_output: Callable[[Path], bool], what: str, *, overwrite: bool = False,
    label: str = "--output", kind: str = "",
) -> None:
    """:func:`check_output_folder`'s rule for a command that writes one file: a missing ``path`` is written; an
    earlier output of the same command (``is_earlier_output(path)``) is replaced with ``overwrite`` only; any other
    file is refused, with ``overwrite`` too.

    Args:
        kind: what such an output holds, named when another file is refused (``"JSON with overall ... rates"``).

    Raises:
        FileExistsError: one line naming ``label``, ``path`` and ``--overwrite``.
    """
    if not path.is_file():
        return
    if not is_earlier_output(path):
        holds = f" ({kind}; --overwrite replaces only those)" if kind else " (--overwrite replaces only those)"
        raise FileExistsError(f"{label} {path}: the file is not an {what} output{holds}; remove it or choose another "
                              f"{label}")
    if not overwrite:
        raise FileExistsError(f"{label} {path} already holds an earlier {what} output: pass --overwrite to replace "
                              f"it, or choose another {label}")


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


def _claim(partial: Path, out: Path, label: str) -> None:
    """Remove a partial folder left by a dead run; refuse one that a running process is writing.

    Raises:
        FileExistsError: a live process writes ``partial``.
        OSError: ``out``'s folder cannot be written, naming ``out`` (not the hidden partial folder).
    """
    if partial.exists():
        pid = writing_process(partial)
        if pid is not None:
            raise FileExistsError(
                f"{label} {out}: another process (pid {pid}) is writing it in {partial}; wait for it or remove "
                f"{partial}"
            )
        shutil.rmtree(partial)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        partial.mkdir()  # the mode follows the umask, as any folder's
    except OSError as err:
        raise OSError(f"{label} {out}: cannot write there ({err.strerror or err})") from None
    (partial / OWNER_FILE).write_text(str(os.getpid()))


@contextmanager
def atomic_output_folder(
    out: str | os.PathLike[str],
    marker: str,
    what: str = "adaptspeech prepare",
    *,
    overwrite: bool = False,
    label: str = "--out",
    inputs: Mapping[str, str | os.PathLike[str]] | None = None,
) -> Iterator[Path]:
    """Yield a fresh folder to write ``out``'s content into; swap it in as ``out`` when the block succeeds.

    Args:
        out: the final folder. An existing one must be empty or, with ``overwrite``, hold ``marker`` (a complete
            earlier output, which is replaced only once the new one is complete): :func:`check_output_folder`.
        marker: the file written last inside the block; the swap refuses a folder without it.
        what: names the output in errors.
        overwrite, label, inputs: see :func:`check_output_folder`.

    Raises:
        NotADirectoryError, FileExistsError: see :func:`check_output_folder`; another live process is writing
            the same ``out``.
        OSError: ``out``'s folder cannot be written (naming ``label`` and ``out``).
        RuntimeError: the block ended without writing ``marker``.
    """
    out = Path(out).absolute()
    partial, old = partial_folder(out), _old_folder(out)
    if old.is_dir() and not out.exists() and (old / marker).is_file():
        old.rename(out)  # killed between the two renames of a swap: the earlier output comes back
    check_output_folder(out, marker, what, overwrite=overwrite, label=label, inputs=inputs)
    _claim(partial, out, label)
    try:
        yield partial
        swap_in(partial, out, marker)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise


def swap_in(partial: Path, out: Path, marker: str) -> None:
    """Replace ``out`` (if any) with the complete folder ``partial`` (holding ``marker``; its ``.owner_pid`` is
    removed): the old ``out`` is moved aside, ``partial`` renamed into place, the old one removed; on a failure
    between the renames the old ``out`` comes back.

    Raises:
        RuntimeError: ``partial`` has no ``marker``.
    """
    old = _old_folder(out)
    if not (partial / marker).is_file():
        raise RuntimeError(f"{partial}: {marker} was not written; {out} is left as it was")
    (partial / OWNER_FILE).unlink(missing_ok=True)
    try:
        if old.exists():
            shutil.rmtree(old)
        if out.exists():
            out.rename(old)
        partial.rename(out)
    except BaseException:
        if old.is_dir() and not out.exists():
            old.rename(out)
        raise
    shutil.rmtree(old, ignore_errors=True)
