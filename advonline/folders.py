"""The folders the tool writes into are its own: new, or made and marked by it earlier.

``train``, ``run`` and ``plot`` write only into a folder that does not exist yet (or is empty),
or that carries the marker file ``.advonline`` this module writes when the tool takes a folder:
a small JSON object naming the tool, the kind of folder (``run`` or ``figures``), what made it
and when. Anything else is refused in one line, before any work starts, so a user's own files
are never replaced. A run folder from before markers existed is still recognised by its
checkpoint. Paths whose parent is a file are refused the same way.

One writer at a time: ``train``, ``run`` and ``plot`` hold :class:`FolderLock` on the folder
they write (an ``flock`` on ``.advonline.lock``, which the system releases however the process
ends). A second writer is refused at once in one line naming the holder; a lock file left by a
process that died is taken over, with one line saying so, and the temporary files that process
left half-written are removed. Readers (``evaluate``, ``export``,
``archive``) take no lock and never wait.
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import secrets
import sys
from collections.abc import Callable
from pathlib import Path

from advonline import __version__
from advonline.errors import InputError

MARKER_NAME = ".advonline"
LOCK_NAME = ".advonline.lock"
KINDS = ("run", "figures", "seeds")


class FolderError(ValueError):
    """A folder the tool may not write into; the message says why and what to do."""


def check_path(path: str | Path, flag: str = "--out") -> Path:
    """``path`` as a Path, refused if it or one of its parents is an existing file where a
    folder is needed."""
    path = Path(path)
    for parent in reversed(path.parents):
        if parent.exists() and not parent.is_dir():
            raise FolderError(f"{flag} {path}: {parent} is a file, not a folder")
    return path


def marker(folder: str | Path) -> dict | None:
    """The folder's marker, or None when it has none (or one the tool did not write)."""
    try:
        document = json.loads((Path(folder) / MARKER_NAME).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(document, dict) or document.get("tool") != "advonline":
        return None
    return document if document.get("kind") in KINDS else None


def is_empty(folder: Path) -> bool:
    """Whether ``folder`` holds nothing (but perhaps the lock its writer took first)."""
    return folder.is_dir() and all(entry.name == LOCK_NAME for entry in folder.iterdir())


def check_own(folder: str | Path, kinds: tuple[str, ...], flag: str = "--out", legacy=()) -> Path:
    """Refuse ``folder`` unless it is new, empty, marked by the tool as one of ``kinds``, or
    holds one of the ``legacy`` files (a run from before markers). Returns it as a Path."""
    folder = check_path(folder, flag)
    if not folder.exists() or is_empty(folder):
        return folder
    if not folder.is_dir():
        raise FolderError(f"{flag} {folder} is a file; name a folder")
    found = marker(folder)
    if found is not None and found["kind"] in kinds:
        return folder
    if found is None and any((folder / name).is_file() for name in legacy):
        return folder
    what = f"an advonline {found['kind']} folder" if found else "not a folder advonline made"
    raise FolderError(
        f"{flag} {folder} already exists and is {what}; nothing was written: choose a new folder"
    )


def claim(folder: str | Path, kind: str, about: dict) -> Path:
    """Create ``folder`` (if new) and mark it as the tool's ``kind`` folder, with ``about``
    (what made it: the command, the setting, the runs) in the marker. Call after
    :func:`check_own`; an existing marker is kept."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / MARKER_NAME
    if marker(folder) is None:
        document = {
            "tool": "advonline",
            "version": __version__,
            "kind": kind,
            "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            **about,
        }
        path.write_text(json.dumps(document, indent=1) + "\n")
    return folder


#: The largest file :func:`read_text` reads (every file a user gives is text to parse whole).
MAX_TEXT_BYTES = 1 << 30


def read_text(path: str | Path, what: str, error: type[Exception] = InputError) -> str:
    """The UTF-8 text of the file at ``path`` (a leading byte-order mark, which spreadsheet
    programs write, dropped); otherwise ``error``, one line naming ``what`` the file is and why
    it cannot be read (no such file, a folder, not UTF-8, unreadable, larger than
    :data:`MAX_TEXT_BYTES`: a device such as ``/dev/zero`` never ends). Every file a user
    gives (configs, traces, policy files, run reports) is read through here, so the wording is
    the same for all."""
    path = Path(path)
    try:
        with open(path, "rb") as handle:
            payload = handle.read(MAX_TEXT_BYTES + 1)
        if len(payload) > MAX_TEXT_BYTES:
            raise error(f"{what} {path} is larger than {MAX_TEXT_BYTES / 2**20:g} MiB")
        return payload.decode("utf-8").removeprefix("\ufeff")
    except FileNotFoundError:
        raise error(f"{what} {path}: no such file") from None
    except IsADirectoryError:
        raise error(f"{what} {path} is a folder, not a file") from None
    except UnicodeDecodeError:
        raise error(f"{what} {path} is not UTF-8 text") from None
    except OSError as failure:
        raise error(f"cannot read {what} {path}: {failure.strerror or failure}") from None


def atomic_write(path: Path, payload: bytes) -> None:
    """Write ``payload`` to ``path`` so that readers see the old file or the new, never half:
    into a temporary file whose name no other process uses (its PID and a random suffix),
    synced to disk, renamed over ``path``, and the folder synced so the rename survives a
    crash."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with open(temporary, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except OSError as error:
        temporary.unlink(missing_ok=True)
        if error.filename == str(temporary):  # named by the file it was to write instead
            raise OSError(error.errno, error.strerror, str(path)) from None
        raise
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def atomic_link(path: Path, target: Path) -> None:
    """Make ``target`` name the file ``path`` names (the same bytes, no copy), replacing what
    ``target`` named, so that at every moment ``target`` names a whole file: a hard link under
    a temporary name (its PID, as :func:`atomic_write`'s) renamed over ``target``."""
    link = target.with_name(f".{target.name}.{os.getpid()}.link")
    link.unlink(missing_ok=True)
    os.link(path, link)
    os.replace(link, target)


#: The folders this process holds locked (their lock files' descriptors), so that a command
#: that locks a folder may call another that locks it too.
_HELD: dict[Path, int] = {}


class FolderLock:
    """The exclusive right to write into ``folder`` (created if new), held inside a ``with``
    block; FolderError, at once, if another process holds it. ``say`` hears the one line
    printed when a lock left by a process that died is taken over."""

    def __init__(self, folder: str | Path, say: Callable[[str], None] | None = None):
        self.folder = Path(folder)
        self.say = say or (lambda line: print(line, file=sys.stderr))
        self.nested = False

    def __enter__(self) -> FolderLock:
        key = self.folder.resolve()
        if key in _HELD:
            self.nested = True
            return self
        self.folder.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(self.folder / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = _holder(descriptor)
            os.close(descriptor)
            raise FolderError(
                f"{self.folder} is in use by process {holder.get('pid', '?')} (started "
                f"{holder.get('started', '?')}); wait for it to end or choose another folder"
            ) from None
        left = _holder(descriptor)
        if left.get("pid") not in (None, os.getpid()):
            self.say(
                f"advonline: {self.folder}: taking over the lock of process {left['pid']} "
                f"(started {left.get('started', '?')}), which is no longer running"
            )
        _sweep_leftovers(self.folder)
        started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, json.dumps({"pid": os.getpid(), "started": started}).encode(), 0)
        _HELD[key] = descriptor
        return self

    def __exit__(self, *exc) -> None:
        if self.nested:
            return
        descriptor = _HELD.pop(self.folder.resolve())
        os.ftruncate(descriptor, 0)  # a clean end leaves no holder behind
        fcntl.flock(descriptor, fcntl.LOCK_UN)
        os.close(descriptor)


def _sweep_leftovers(folder: Path) -> None:
    """Remove the temporary files (:func:`atomic_write`'s ``.NAME.PID.*.tmp``,
    :func:`atomic_link`'s ``.NAME.PID.link``) that writers killed part-way left in ``folder``:
    only the lock holder writes there, so a temporary file of any process that is no longer
    running is a leftover. The files they were to replace are untouched."""
    for path in [*folder.glob(".*.tmp"), *folder.glob(".*.link")]:
        fields = path.name.split(".")
        pid = fields[-3] if path.suffix == ".tmp" else fields[-2]
        if pid.isdigit() and int(pid) != os.getpid() and not _running(int(pid)):
            path.unlink(missing_ok=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _holder(descriptor: int) -> dict:
    """Who a lock file names as its holder (empty when it names nobody)."""
    try:
        document = json.loads(os.pread(descriptor, 4096, 0) or b"{}")
    except ValueError:
        return {}
    return document if isinstance(document, dict) else {}
