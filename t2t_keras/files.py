"""Writing files so that a crash or a kill never leaves half of one under its real name.

Everything the package writes (run records, vocabularies, TFRecord shards, manifests,
checkpoint copies, decoded text, plots, exports) goes through `atomic_path`: the content is
written under a temporary name beside the target, flushed to disk, and renamed over the
target only when complete. A rename within a directory is atomic on POSIX, so readers see
the old file or the new one, never a mixture.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from typing import Iterator

from t2t_keras.errors import UsageError

TEMP_SUFFIX = ".incomplete"
PREVIOUS_SUFFIX = ".previous"


@contextlib.contextmanager
def atomic_path(path: str, suffix: str = "") -> Iterator[str]:
    """Yields a temporary path to write `path`'s content to; renamed to `path` on success.

    `suffix` is appended to the temporary name for writers that choose a format by
    extension (matplotlib's savefig). On an exception the temporary file is removed and
    `path` is left as it was. A directory may be written as well (an export): it is
    renamed as a whole, replacing an earlier version (see `recover`).
    """
    temporary = path + TEMP_SUFFIX + suffix
    remove(temporary)
    try:
        yield temporary
        _sync(temporary)
        if os.path.isdir(temporary) and os.path.isdir(path):
            _swap_directories(temporary, path)
        else:
            os.replace(temporary, path)
    except BaseException:
        remove(temporary)
        raise


@contextlib.contextmanager
def atomic_paths(paths) -> Iterator[list[str]]:
    """`atomic_path` for several files that appear together: all renamed, or none."""
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(atomic_path(path)) for path in paths]


def write_atomically(path: str, content: str | bytes) -> None:
    """Writes `content` (text as UTF-8) to `path` through a temporary name."""
    data = content.encode("utf-8") if isinstance(content, str) else content
    with atomic_path(path) as temporary, open(temporary, "wb") as handle:
        handle.write(data)


def copy_atomically(source: str, path: str) -> None:
    with atomic_path(path) as temporary:
        shutil.copyfile(source, temporary)


def remove_incomplete(directory: str, prefix: str = "") -> None:
    """Deletes what a killed writer left behind in `directory` (names starting with `prefix`)."""
    for name in os.listdir(directory):
        if name.startswith(prefix) and TEMP_SUFFIX in name:
            remove(os.path.join(directory, name))


def recover(path: str) -> None:
    """Repairs what a kill during a directory swap left at `path`: the earlier version is put
    back if the new one never arrived, and the leftovers are removed."""
    previous = path + PREVIOUS_SUFFIX
    if not os.path.exists(path) and os.path.isdir(previous):
        os.rename(previous, path)
    remove(previous)
    remove(path + TEMP_SUFFIX)


def remove(path: str) -> None:
    """Deletes a file or a directory tree, if there is one."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


def ensure_writable_dir(path: str, flag: str) -> None:
    """Creates `path` if needed and checks a file can be written there; a UsageError naming
    `flag` otherwise."""
    try:
        os.makedirs(path, exist_ok=True)
        probe = os.path.join(path, ".t2t_keras_write_test")
        open(probe, "w").close()
        os.remove(probe)
    except OSError as e:
        raise UsageError(f"{flag}={path} is not writable ({e.strerror}); pick another directory.") from None


def _swap_directories(new: str, path: str) -> None:
    """Puts directory `new` in the place of directory `path` (two renames; see `recover`)."""
    previous = path + PREVIOUS_SUFFIX
    remove(previous)
    os.rename(path, previous)
    os.rename(new, path)
    remove(previous)


def _sync(path: str) -> None:
    """Flushes a written file (or every file of a written directory) to the disk."""
    paths = [path] if os.path.isfile(path) else [os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs]
    for name in paths:
        with open(name, "rb") as handle:
            os.fsync(handle.fileno())
