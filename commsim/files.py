"""Files in and out, with the environment's faults turned into one-line errors.

Reading is bounded (size and JSON nesting are checked before parsing, so a hostile or broken file
is one line, never a RecursionError or a machine out of memory).  Writing is all-or-nothing: every
output of one command is staged as a temporary file beside its target and renamed into place only
when all of them were written, so a missing folder, a read-only or full file system, or an
interrupt leaves neither half a file nor half a set of files.  ``check_output`` runs the same
checks before the work starts, so an hour of ``validate`` never ends on an unwritable ``--out``.

Two kinds of error leave this module: ``UserError`` (exit 2: the user named something unusable,
e.g. a folder where a file is wanted, an existing file without ``--force``) and
``EnvironmentFault`` (exit 1: the machine refused, the message names the path and the reason).
"""
from __future__ import annotations

import errno
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Mapping

from commsim.errors import EnvironmentFault, UserError

# A profile is ~50 KB, a validation a few KB: these leave room for any real one.
MAX_JSON_BYTES = 64 * 1024 * 1024
MAX_JSON_DEPTH = 64

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)


def reason(exc: OSError) -> str:
    """What the operating system said, in words (``Permission denied``, ``No space left...``)."""
    if exc.errno is not None:
        return os.strerror(exc.errno)
    return exc.strerror or type(exc).__name__


def fault(action: str, path: str | os.PathLike, exc: OSError) -> EnvironmentFault:
    """The one-line environment error for ``action`` (read, write) on ``path``."""
    where = f" ({exc.filename})" if exc.filename and str(exc.filename) != str(path) else ""
    return EnvironmentFault(f"cannot {action} {path}: {reason(exc)}{where}")


# ----------------------------------------------------------------------------------------------
# Reading
# ----------------------------------------------------------------------------------------------

def read_text(path: str | os.PathLike, what: str, *, max_bytes: int = MAX_JSON_BYTES) -> str:
    """A UTF-8 text file named by the user as ``what`` (e.g. ``profile``, ``--validation``).

    Missing, a folder, too large or not text: UserError (the user named the wrong thing).
    Unreadable (permission, I/O error): EnvironmentFault.
    """
    p = Path(path)
    try:
        size = p.stat().st_size
        if p.is_dir():
            raise UserError(f"{what} {p} is a directory, not a file")
        if size > max_bytes:
            raise UserError(f"{what} {p} is {size:,} bytes; at most {max_bytes:,} are read")
        with open(p, "rb") as fh:
            data = fh.read(max_bytes + 1)
    except FileNotFoundError:
        raise UserError(f"{what} {p} does not exist") from None
    except NotADirectoryError:
        raise UserError(f"{what} {p} does not exist (a part of the path is a file)") from None
    except OSError as exc:
        raise fault("read", p, exc) from None
    if len(data) > max_bytes:  # grew after stat, or a device that reports no size
        raise UserError(f"{what} {p} is larger than the {max_bytes:,} bytes that are read")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{what} {p} is not UTF-8 text") from None


def json_depth(text: str) -> int:
    """How deeply ``[`` and ``{`` nest in JSON ``text`` (strings are skipped); linear time."""
    import numpy as np

    brackets = re.sub(r"[^\[\]{}]", "", _STRING.sub("", text)).encode("ascii")
    if not brackets:
        return 0
    codes = np.frombuffer(brackets, dtype=np.uint8)
    steps = np.where((codes == ord("[")) | (codes == ord("{")), 1, -1)
    return int(np.cumsum(steps).max())


def parse_json(text: str, what: str, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads`` with the nesting checked first; every malformed input is one UserError."""
    depth = json_depth(text)
    if depth > max_depth:
        raise UserError(f"{what}: JSON nested {depth} levels deep; at most {max_depth} are read")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"{what}: not valid JSON ({exc.msg} at line {exc.lineno}, "
                        f"column {exc.colno})") from None
    except (ValueError, RecursionError) as exc:  # e.g. an integer of too many digits
        raise UserError(f"{what}: not usable JSON ({' '.join(str(exc).split())})") from None


def read_json(path: str | os.PathLike, what: str) -> Any:
    return parse_json(read_text(path, what), f"{what} {path}")


# ----------------------------------------------------------------------------------------------
# Writing
# ----------------------------------------------------------------------------------------------

def _existing_ancestor(p: Path) -> Path:
    """The nearest folder (or file) on ``p``'s path that exists: where new folders would go."""
    q = p
    while not q.exists() and q != q.parent:
        q = q.parent
    return q


def check_output(path: str | os.PathLike, *, force: bool = False, folder: bool = False) -> None:
    """Fail now, not after the work, if ``path`` cannot be written.

    ``folder``: ``path`` is a folder the command fills (``--csv-dir``).  Checks, in order: a file
    is not a folder (and a folder not a file); an existing file is not replaced without
    ``force``; the nearest existing folder on the path is a folder in which a file can be made
    (a probe file, removed at once), which finds missing, read-only and unwritable folders.
    """
    p = Path(path)
    if folder:
        if p.exists() and not p.is_dir():
            raise UserError(f"{p} is a file; name a folder")
    elif p.is_dir():
        raise UserError(f"{p} is a folder; name a file to write")
    elif p.exists() and not force:
        raise FileExistsError(f"{p} exists; pass --force to overwrite it")
    home = p if folder else p.parent
    base = _existing_ancestor(home)
    if not base.is_dir():
        raise EnvironmentFault(f"cannot write {p}: {base} is a file, not a folder")
    try:
        fd, probe = tempfile.mkstemp(prefix=".commsim-probe-", dir=base)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        if base != home:
            raise EnvironmentFault(f"cannot write {p}: folder {home} does not exist and cannot "
                                   f"be made in {base} ({reason(exc)})") from None
        raise EnvironmentFault(f"cannot write {p}: {reason(exc)}") from None


def _make_folders(folder: Path, made: list[Path]) -> None:
    """``mkdir -p folder``, appending each folder it creates to ``made`` (to undo on failure)."""
    missing = []
    q = folder
    while not q.exists() and q != q.parent:
        missing.append(q)
        q = q.parent
    for q in reversed(missing):
        q.mkdir()
        made.append(q)


def _stage(p: Path, data: bytes) -> str:
    """Write ``data`` to a temporary file beside ``p`` (synced, with a plain open()'s mode)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return tmp


def _place(tmp: str, p: Path, force: bool) -> str | None:
    """Move the staged file onto ``p``; the backup of a file it replaced (None if none)."""
    if force and p.exists():
        backup = f"{tmp}.old"
        try:
            os.link(p, backup)
        except OSError:     # no hard links here: the old file cannot be restored on failure
            backup = None
        os.replace(tmp, p)
        return backup
    try:
        # link() fails if the name appeared since the check: never clobber it.
        os.link(tmp, p)
    except FileExistsError:
        raise FileExistsError(f"{p} exists; pass --force to overwrite it") from None
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
            raise
        if p.exists():      # a file system without hard links: best effort
            raise FileExistsError(f"{p} exists; pass --force to overwrite it") from None
        os.replace(tmp, p)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return None


def write_files(files: Mapping[str | os.PathLike, bytes], *, force: bool = False) -> None:
    """Write every file or none: stage all beside their targets, then rename all into place.

    Missing folders are created (and removed again if the write fails).  A file that exists is
    replaced only with ``force``; if a later file then fails, the replaced one is restored.
    """
    targets = {Path(p): data for p, data in files.items()}
    for p in targets:
        check_output(p, force=force)
    made: list[Path] = []
    staged: dict[Path, str] = {}
    placed: list[tuple[Path, str | None]] = []
    current = next(iter(targets), Path("."))
    try:
        for current, data in targets.items():
            _make_folders(current.parent, made)
            staged[current] = _stage(current, data)
        for current, tmp in list(staged.items()):
            placed.append((current, _place(tmp, current, force)))
            del staged[current]
    except BaseException as exc:
        for tmp in staged.values():
            Path(tmp).unlink(missing_ok=True)
        for p, backup in reversed(placed):
            if backup is not None:
                os.replace(backup, p)
            else:
                p.unlink(missing_ok=True)
        for q in reversed(made):
            try:
                q.rmdir()
            except OSError:
                pass
        if isinstance(exc, OSError) and not isinstance(exc, FileExistsError):
            raise fault("write", current, exc) from None
        raise
    for _, backup in placed:
        if backup is not None:
            Path(backup).unlink(missing_ok=True)


def atomic_write_bytes(path: str | os.PathLike, data: bytes, *, force: bool = False) -> None:
    """One file, all or nothing (see ``write_files``)."""
    write_files({path: data}, force=force)


def atomic_write_text(path: str | os.PathLike, text: str, *, force: bool = False) -> None:
    write_files({path: text.encode("utf-8")}, force=force)
