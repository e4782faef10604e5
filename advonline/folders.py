"""The folders the tool writes into are its own: new, or made and marked by it earlier.

``train``, ``run`` and ``plot`` write only into a folder that does not exist yet (or is empty),
or that carries the marker file ``.advonline`` this module writes when the tool takes a folder:
a small JSON object naming the tool, the kind of folder (``run`` or ``figures``), what made it
and when. Anything else is refused in one line, before any work starts, so a user's own files
are never replaced. A run folder from before markers existed is still recognised by its
checkpoint. Paths whose parent is a file are refused the same way.
"""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path

from advonline import __version__

MARKER_NAME = ".advonline"
KINDS = ("run", "figures")


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
    return folder.is_dir() and not any(folder.iterdir())


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


def atomic_write(path: Path, payload: bytes) -> None:
    """Write ``payload`` to ``path`` so that readers see the old file or the new, never half."""
    temporary = path.with_name(f".{path.name}.tmp")
    with open(temporary, "wb") as handle:
        handle.write(payload)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
