"""One run per output folder: ``OUTPUT_DIR/adaptspeech.lock`` holds the host and process id of the run writing there.

Two runs writing the same ``output_dir`` at once interleave their checkpoints and overwrite each other's model; the
second one is refused with one line naming the first. A lock left by a run that died (a process id that no longer
exists on this host) is taken over. A lock from another host cannot be checked: it is refused, and the message says
which file to delete once that run is known to be over.

Under DDP only the main process (global rank 0) takes the lock; the other ranks share its run. The same lock keeps
two ``adaptspeech lm build`` runs out of one ``--out`` and two ``adaptspeech lm tune --save`` out of one model folder.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from types import TracebackType

from .errors import StageConfigError


def process_alive(pid: int) -> bool:
    """Whether a process ``pid`` runs on this host (also one owned by another user)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


LOCK_FILE = "adaptspeech.lock"


class OutputDirLock:
    """Context manager: hold ``OUTPUT_DIR/adaptspeech.lock`` for the duration of a run.

    Args:
        output_dir: the run's output folder (created if missing).
        enabled: False makes the lock a no-op (the non-main processes of a distributed run).
        what: how messages name the folder: the setting or option it comes from (``--out`` for ``lm build``).
    """

    def __init__(self, output_dir: str | os.PathLike, enabled: bool = True, what: str = "output_dir") -> None:
        self.path = Path(output_dir) / LOCK_FILE
        self.enabled = enabled
        self.what = what
        self.held = False

    def _create(self) -> bool:
        record = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%d %H:%M:%S")}
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as handle:
            handle.write(json.dumps(record) + "\n")
        return True

    def _holder(self) -> dict[str, object] | None:
        try:
            return json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        except (json.JSONDecodeError, UnicodeDecodeError):
            return {}

    def acquire(self) -> None:
        """Take the lock, or take over a stale one.

        Raises:
            StageConfigError: another live run holds it (or one on another host, which cannot be checked).
        """
        if not self.enabled or self.held:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(3):
            if self._create():
                self.held = True
                return
            holder = self._holder()
            if holder is None:
                continue  # released between our two calls: try again
            pid, host = holder.get("pid"), holder.get("host")
            if isinstance(pid, int) and host == socket.gethostname() and pid != os.getpid() and not process_alive(pid):
                self.path.unlink(missing_ok=True)  # stale: its run died without releasing it
                continue
            where = f"process {pid} on {host}" if host != socket.gethostname() else f"process {pid}"
            raise StageConfigError(
                f"{self.what} {self.path.parent} is in use by another run ({where}, started {holder.get('started')}); "
                f"wait for it to finish or pick another {self.what} (if that run is over, delete {self.path})"
            )
        raise StageConfigError(f"could not take the lock {self.path}: other runs keep taking it")

    def release(self) -> None:
        if self.held:
            holder = self._holder()
            if holder and holder.get("pid") == os.getpid():
                self.path.unlink(missing_ok=True)
            self.held = False

    def __enter__(self) -> OutputDirLock:
        self.acquire()
        return self

    def __exit__(
        self, error_type: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.release()
