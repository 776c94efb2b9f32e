"""Every file the package reads or writes, on a local disk or any filesystem TensorFlow knows
(gs://, s3://, hdfs://, ram://, through `tf.io.gfile`), and written so that a crash or a kill
never leaves half of one under its real name.

Writers go through `atomic_path`: the content is written under a temporary name beside the
target and renamed over it only when complete. A rename is atomic on a POSIX disk, so readers
see the old file or the new one. Elsewhere (gs://, s3://, ram://) a directory (an export,
best/, an averaged run) is copied into place file by file and a marker file,
`COMPLETE_MARKER`, written last inside it says it is whole (`is_complete_dir`), as
TensorFlow's own checkpoints are whole only once their state file names them. A single file
is one object, which appears whole or not at all.

Local paths use the operating system directly (and fsync before a rename); other paths
import TensorFlow on first use.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import shutil
import sys
from typing import Iterator

from t2t_keras.errors import UsageError

# Temporary and earlier versions are named DIR/.incomplete.NAME and DIR/.previous.NAME: hidden,
# never a number (TF Serving skips them), and never an extension of NAME, which a filesystem
# that treats any prefix of a name as a directory (ram://) would move along with NAME.
TEMP_PREFIX = ".incomplete."
PREVIOUS_PREFIX = ".previous."
COMPLETE_MARKER = ".t2t_keras_complete"
# The filesystem's refusals of a write that the user lifts outside the program: what happened, what to do.
WRITE_REFUSALS = {
    errno.ENOSPC: ("no space left on device writing", "free space on that filesystem"),
    errno.EDQUOT: ("disk quota exceeded writing", "free space within your quota"),
    errno.EFBIG: ("file too large writing", "raise the file size limit (ulimit -f)"),
    errno.EROFS: ("read-only file system: cannot write", "make that filesystem writable"),
}


def _gfile():
    import tensorflow as tf

    return tf.io.gfile


FILE_URI = "file://"


# --- paths ---
def native(path) -> str:
    """`path` as the operating system or tf.io.gfile takes it: a file:// URI becomes the local
    path it names (os calls know no scheme: os.makedirs("file:///x") makes ./file:/x). Every
    function here normalises its paths with it, so file:// works wherever a path is taken."""
    path = str(path)
    return path[len(FILE_URI):] if path.startswith(FILE_URI) else path


def is_local(path: str) -> bool:
    return "://" not in native(path)


def absolute(path: str) -> str:
    """A local path (or file:// URI) made a plain absolute path (and ~ expanded); a URL as it is."""
    path = native(path)
    return os.path.abspath(os.path.expanduser(path)) if is_local(path) else path


def renames_atomically(path: str) -> bool:
    """Whether a directory renamed to `path` appears whole at once (a local disk)."""
    return is_local(path)


# --- reading and listing ---
def exists(path: str) -> bool:
    path = native(path)
    if is_local(path):
        return os.path.exists(path)
    # By the parent's listing: some filesystems (ram://) call any prefix of a name a path, so
    # that DIR/best "exists" while only DIR/best.incomplete does.
    parent, name = os.path.split(str(path).rstrip("/"))
    if "://" not in parent or parent.endswith(":/"):
        return _gfile().exists(path)
    return _gfile().isdir(parent) and name in _listed(parent)


def isdir(path: str) -> bool:
    path = native(path)
    return os.path.isdir(path) if is_local(path) else exists(path) and _gfile().isdir(path)


def isfile(path: str) -> bool:
    path = native(path)
    if is_local(path):
        return os.path.isfile(path)
    return exists(path) and not _gfile().isdir(path)


def listdir(path: str) -> list[str]:
    path = native(path)
    if is_local(path):
        return os.listdir(path)
    # A prefix-matching filesystem (ram://) lists ".extra" under DIR/assets for DIR/assets.extra/x:
    # a real child is one that exists under DIR/.
    return [name for name in _listed(path) if _gfile().exists(join(path, name))]


def _listed(path: str) -> list[str]:
    """tf.io.gfile's listing of a directory elsewhere than on a local disk: one request (real
    children, and on ram:// a few names that only look like children)."""
    return [name.rstrip("/") for name in _gfile().listdir(path)]


def size(path: str) -> int:
    path = native(path)
    return os.path.getsize(path) if is_local(path) else _gfile().stat(path).length


def glob(pattern: str) -> list[str]:
    pattern = native(pattern)
    import glob as local_glob

    return local_glob.glob(pattern, recursive=True) if is_local(pattern) else _gfile().glob(pattern)


def open_file(path: str, mode: str = "r", buffering: int = -1):
    """A file object (text is UTF-8): the builtin open for a local path (`buffering` as it takes
    it), tf.io.gfile.GFile otherwise."""
    path = native(path)
    if is_local(path):
        return open(path, mode, buffering, encoding=None if "b" in mode else "utf-8")
    handle = _gfile().GFile(path, mode)
    if "w" in mode:  # some filesystems create the file only at its first write, even an empty one
        handle.write(b"" if "b" in mode else "")
    return handle


def read_bytes(path: str) -> bytes:
    with open_file(path, "rb") as handle:
        return handle.read()


def read_text(path: str) -> str:
    return read_bytes(path).decode("utf-8")


def read_json(path: str, recovery: str) -> dict:
    """The JSON object a record file holds. A damaged one (cut short by a full disk or an
    interrupted copy, overwritten, not UTF-8) is one line naming it, what is wrong and
    `recovery` (what to do), never a parser's traceback."""
    import json

    try:
        value = json.loads(read_text(path))
    except json.JSONDecodeError as error:
        problem = f"{error.msg}: line {error.lineno} column {error.colno}"
    except UnicodeDecodeError:
        problem = "not UTF-8 text"
    else:
        if isinstance(value, dict):
            return value
        problem = f"a JSON {type(value).__name__}, not an object"
    raise UsageError(f"{path} is damaged ({problem}); {recovery}")


def sha256(path: str) -> str:
    """The SHA-256 hex digest of a file's bytes, read a megabyte at a time."""
    digest = hashlib.sha256()
    with open_file(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# --- writing ---
def makedirs(path: str) -> None:
    path = native(path)
    if is_local(path):
        os.makedirs(path, exist_ok=True)
    else:
        _gfile().makedirs(path)


def remove(path: str) -> None:
    """Deletes a file or a directory tree, if there is one."""
    path = native(path)
    if is_local(path):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
    elif exists(path):
        if not _gfile().isdir(path):
            _gfile().remove(path)
            return
        import tensorflow as tf

        try:
            _gfile().rmtree(path)
        except tf.errors.NotFoundError:  # ram:// deletes DIR/assets.extra with DIR/assets, then misses it
            if exists(path):
                raise


def remove_matching(directory: str, pattern: re.Pattern) -> list[str]:
    """Deletes the entries of `directory` whose whole name matches `pattern`; returns their names, sorted."""
    removed = sorted(name for name in listdir(directory) if pattern.fullmatch(name))
    for name in removed:
        remove(join(directory, name))
    return removed


def rename(source: str, target: str) -> None:
    """Renames a file or directory over `target` (which must not be a directory). Elsewhere
    than on a local disk a directory is copied file by file, then removed: object stores (and
    ram://) have no directories to rename."""
    source, target = native(source), native(target)
    if is_local(source):
        os.replace(source, target)
    elif not _gfile().isdir(source):
        _gfile().rename(source, target, overwrite=True)
    else:
        _copy_tree(source, target)
        remove(source)


def _copy_tree(source: str, target: str) -> None:
    """Copies a directory elsewhere than on a local disk, telling files from directories by
    `isdir` (not tf.io.gfile.walk, which a prefix-matching filesystem misleads)."""
    _gfile().makedirs(target)
    for name in listdir(source):
        if isdir(join(source, name)):
            _copy_tree(join(source, name), join(target, name))
        else:
            _gfile().copy(join(source, name), join(target, name), overwrite=True)


@contextlib.contextmanager
def atomic_path(path: str) -> Iterator[str]:
    """Yields a temporary path to write `path`'s content to; renamed to `path` on success.

    On an exception the temporary file is removed and `path` is left as it was. A directory
    may be written as well (an export): it is renamed as a whole, replacing an earlier
    version (see `recover`).
    """
    path = native(path)
    temporary = temporary_name(path)
    remove(temporary)
    try:
        yield temporary
        if is_local(temporary):
            _sync(temporary)
        if isdir(temporary):
            if isdir(path):
                _swap_directories(temporary, path)
            else:
                rename(temporary, path)
            if not renames_atomically(path):
                write_bytes_directly(join(path, COMPLETE_MARKER), b"")
        else:
            rename(temporary, path)
    except BaseException as e:
        remove(temporary)
        refused = refused_write(e)
        if refused is None:
            raise
        # Named by its final path (the temporary one is gone; Python names no file when a write fails).
        name = native(refused.filename) if refused.filename else temporary
        if name == temporary or name.startswith(temporary + "/"):
            name = path + name[len(temporary):]
        raise OSError(refused.errno, refused.strerror, name) from e


def join(*parts: str) -> str:
    return os.path.join(*parts)


def temporary_name(path: str) -> str:
    """Where `atomic_path` writes `path` until it is complete."""
    head, tail = os.path.split(path)
    return os.path.join(head, TEMP_PREFIX + tail)


def previous_name(path: str) -> str:
    """Where a directory swap keeps the earlier version of `path` for a moment (see `recover`)."""
    head, tail = os.path.split(path)
    return os.path.join(head, PREVIOUS_PREFIX + tail)


def is_complete_dir(path: str) -> bool:
    """Whether a directory `atomic_path` wrote is there whole (on an object store: its marker)."""
    if not isdir(path):
        return False
    return renames_atomically(path) or exists(join(path, COMPLETE_MARKER))


@contextlib.contextmanager
def atomic_paths(paths) -> Iterator[list[str]]:
    """`atomic_path` for several files that appear together: all renamed, or none."""
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(atomic_path(path)) for path in paths]


def write_bytes_directly(path: str, data: bytes) -> None:
    with open_file(path, "wb") as handle:
        handle.write(data)


def write_atomically(path: str, content: str | bytes) -> None:
    """Writes `content` (text as UTF-8) to `path` through a temporary name."""
    data = content.encode("utf-8") if isinstance(content, str) else content
    with atomic_path(path) as temporary:
        write_bytes_directly(temporary, data)


def copy_atomically(source: str, path: str) -> None:
    source, path = native(source), native(path)
    with atomic_path(path) as temporary:
        if is_local(source) and is_local(temporary):
            shutil.copyfile(source, temporary)
        else:
            _gfile().copy(source, temporary, overwrite=True)


def remove_incomplete(directory: str, prefix: str = "") -> None:
    """Deletes what a killed writer left behind in `directory`: the temporary files of names
    starting with `prefix`."""
    for name in listdir(directory):
        if name.startswith(TEMP_PREFIX + prefix):
            remove(join(directory, name))


def recover(path: str) -> None:
    """Repairs what a kill during a directory swap left at `path`: the earlier version is put
    back if the new one never arrived (or arrived in part, on an object store), and the
    leftovers are removed."""
    previous = previous_name(path)
    if isdir(previous) and not is_complete_dir(path):
        remove(path)
        rename(previous, path)
    remove(previous)
    remove(temporary_name(path))


def ensure_writable_dir(path: str, flag: str) -> None:
    """Creates `path` if needed and checks a file can be written there; a UsageError naming
    `flag` otherwise."""
    try:
        makedirs(path)
        probe = join(path, ".t2t_keras_write_test")
        write_bytes_directly(probe, b"")
        remove(probe)
    except Exception as e:  # OSError locally, tf.errors.OpError elsewhere
        reason = getattr(e, "strerror", None) or getattr(e, "message", None) or str(e)
        raise UsageError(f"{flag}={path} is not writable ({reason.splitlines()[0] if reason else e}); pick another directory.") from None


def check_output_path(path: str, flag: str, directory: bool = False) -> None:
    """With the flags, before any work (and without TensorFlow): a UsageError naming `flag` and
    `path` as given unless the command can create `path`. The rule of every command: a file's
    directory must exist, as a shell's `>` wants, so that a mistyped directory is refused rather
    than made; a directory (--output_dir, --export_dir, --avg_dir) is created with its parents
    when written, so its nearest existing ancestor must be a writable directory. Not checked on
    an object store: asking would load TensorFlow, and its writer's refusal names the path."""
    if not is_local(path):
        return
    named, local = f"{flag}={path}", absolute(path)
    if os.path.exists(local) and os.path.isdir(local) != directory:
        raise UsageError(f"{named} is a {'file' if directory else 'directory'}; name a {'directory' if directory else 'file'}.")
    ancestor = local if directory else os.path.dirname(local)  # where the command creates an entry
    if not directory and not os.path.exists(ancestor):
        raise UsageError(f"{named}: {os.path.dirname(native(path))} does not exist; create it first, or choose another path.")
    while not os.path.exists(ancestor):
        ancestor = os.path.dirname(ancestor)
    if not os.path.isdir(ancestor):
        raise UsageError(f"{named}: {ancestor} is a file, not a directory; choose another path.")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise UsageError(f"{named}: {ancestor} is not writable; choose another path.")


def _swap_directories(new: str, path: str) -> None:
    """Puts directory `new` in the place of directory `path` (two renames; see `recover`)."""
    previous = previous_name(path)
    remove(previous)
    rename(path, previous)
    rename(new, path)
    remove(previous)


def _sync(path: str) -> None:
    """Flushes a written local file (or every file of a written directory) to the disk."""
    paths = [path] if os.path.isfile(path) else [os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs]
    for name in paths:
        with open(name, "rb") as handle:
            os.fsync(handle.fileno())


# --- refused writes ---
def refused_write(error: BaseException) -> OSError | None:
    """`error` as an OSError naming its path if it is the filesystem refusing a write
    (`WRITE_REFUSALS`: no space, over quota, file too large, read-only): Python's own, or
    TensorFlow's wrapping of one, whose message reads "PATH; No space left on device" (a
    genuine out-of-memory ResourceExhaustedError reads otherwise: None). The path is the one
    a reader knows, without the suffix of TensorFlow's temporary files."""
    if isinstance(error, OSError):
        return error if error.errno in WRITE_REFUSALS else None
    if "tensorflow" not in sys.modules:
        return None
    import tensorflow as tf

    if not isinstance(error, tf.errors.OpError):
        return None
    for number in WRITE_REFUSALS:
        head, found, _ = error.message.partition(f"; {os.strerror(number)}")
        if found:  # the path ends the line before, after any "{{function_node ...}} " of the op
            path = head.splitlines()[-1].rpartition("}} ")[2].strip() if head.strip() else ""
            return OSError(number, os.strerror(number), re.sub(r"\.tempstate\d+$", "", path) or None)
    return None


@contextlib.contextmanager
def writing(path: str) -> Iterator[None]:
    """Names `path` in a refused write raised inside: Python names the file when open() fails,
    not when write() or fsync() does."""
    try:
        yield
    except OSError as e:
        if e.errno in WRITE_REFUSALS and not e.filename:
            raise OSError(e.errno, e.strerror, native(path)) from e
        raise


@contextlib.contextmanager
def refused_writes_as_usage_errors(places: dict[str, str]) -> Iterator[None]:
    """A refused write raised inside becomes one UsageError line: what happened, the path, what
    to do, and the flag of `places` ({its value: "--flag"}) whose path holds it (the longest)."""
    try:
        yield
    except Exception as e:
        refused = refused_write(e)
        if refused is None:
            raise
        what, fix = WRITE_REFUSALS[refused.errno]
        path = refused.filename
        holders = sorted((len(absolute(value)), flag) for value, flag in places.items()
                         if path and absolute(path).startswith(absolute(value)))
        instead = f" or choose another {holders[-1][1]}" if holders else ""
        raise UsageError(f"{what} {path or 'a file'}: {fix}{instead}, then rerun the same command; "
                         "nothing half-written is left.") from None
