"""One writer at a time: a run dir for one trainer, a data dir for one datagen, an output file
for one decoder.

    with locks.holding(os.path.join(run_dir, locks.LOCK_FILE), "--output_dir", run_dir):
        ...  # a second process asking for the same lock is refused in one line naming the holder

The lock is the kernel's `flock` on a file beside what it guards: released when its holder ends
in any way (a crash, kill -9), so a dead holder never blocks the next start; on NFS the server
releases a lost host's lock when its lease ends (about 90 s). The file holds who holds it (host,
process, command, since when) for the refusal to name, and is removed by its holder on release.
Object stores (gs://, s3://, ram://) have no atomic exclusive create: there nothing is locked,
and two writers on one path are the user's to avoid (docs/training.md, "One trainer per run dir").
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time

from t2t_keras import files
from t2t_keras.errors import UsageError

LOCK_FILE = ".lock"  # in a run dir or data dir
FILE_LOCK_SUFFIX = ".lock"  # an output file's: <file>.lock


@contextlib.contextmanager
def holding(lock_path: str, flag: str, guarded: str):
    """Holds the lock at `lock_path` (of `guarded`, given as `flag`) for the block; a UsageError
    naming the holder if another process holds it. Where no lock file can be made (an object
    store, a read-only or full filesystem) the block runs unlocked: the writes themselves then
    say what is wrong."""
    import fcntl

    if not files.is_local(lock_path):
        yield
        return
    lock_path = files.native(lock_path)
    while True:
        try:
            descriptor = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            yield
            return
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(descriptor)
            os.close(descriptor)
            raise UsageError(f"{flag}={guarded} is in use by {holder}; wait for it to end or stop it: two processes "
                             "writing one place overwrite each other's files.") from None
        if _same_file(descriptor, lock_path):  # not a file its last holder removed while we opened it
            break
        os.close(descriptor)
    try:
        _write_holder(descriptor)
        yield
    finally:
        with contextlib.suppress(OSError):
            os.remove(lock_path)
        os.close(descriptor)  # releases the lock


def _same_file(descriptor: int, path: str) -> bool:
    try:
        return os.path.samestat(os.fstat(descriptor), os.stat(path))
    except OSError:
        return False


def _write_holder(descriptor: int) -> None:
    """Who holds the lock, for a refused process to name (best effort: a full disk only loses it)."""
    record = {"host": socket.gethostname(), "pid": os.getpid(), "command": os.path.basename(sys.argv[0] or "python"),
              "since": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    with contextlib.suppress(OSError):
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, (json.dumps(record) + "\n").encode(), 0)


def _holder(descriptor: int) -> str:
    try:
        record = json.loads(os.pread(descriptor, 4096, 0).decode())
        return f"{record['command']} (process {record['pid']} on {record['host']}, since {record['since']})"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process"
