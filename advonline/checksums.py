"""SHA-256 checksums on the files a run keeps for later: checkpoints and policy files.

A file can parse and still not be what was written (a flipped bit on disk, an edit by hand, a
copy cut short at a boundary the format happens to accept). Every checkpoint and policy file
therefore carries the SHA-256 of its payload, checked on every read:

- a checkpoint (binary) starts with one header line, ``advonline-checkpoint sha256=<hex>``,
  followed by the payload the digest covers (:func:`framed`, :func:`unframed`);
- a policy file (JSON) ends with two entries: ``"checksum"`` naming the scheme and
  ``"sha256"``, the digest of every other entry written canonically (keys sorted, no spaces),
  so it does not depend on how the file was indented (:func:`signed`, :func:`verified`). Two
  entries, so that one damaged key name cannot pass a file off as one from before checksums.

A mismatch raises the caller's error with one line, "... is corrupted: checksum mismatch". A
checkpoint without the header is refused (any checkpoint that old was written with another
config schema). A policy file without the two entries (written before checksums, or by hand)
still loads, and the reader warns with :class:`UnverifiedFile` (:func:`note_unverified`; the
command line prints it as a note).

Standard library only, so NumPy-only policy loaders can use it.
"""

from __future__ import annotations

import hashlib
import json
import warnings

KEY = "sha256"
SCHEME_KEY = "checksum"
SCHEME = "sha256 of the canonical JSON of every other entry"
HEADER = b"advonline-checkpoint sha256="
DIGEST_LENGTH = 64  # hexadecimal characters of a SHA-256


class UnverifiedFile(UserWarning):
    """A policy file without a checksum: loaded, but nothing vouches for its bytes."""


def digest(payload: bytes) -> str:
    return hashlib.sha256(payload).hexdigest()


def framed(payload: bytes) -> bytes:
    """``payload`` behind a header line carrying its SHA-256."""
    return HEADER + digest(payload).encode() + b"\n" + payload


def unframed(data: bytes, what: str, error: type[Exception]) -> bytes:
    """The payload of a :func:`framed` file (``data``); ``error`` names ``what`` when the
    header is missing or the digest does not match."""
    if not data.startswith(HEADER):
        raise error(f"{what} has no checksum: not a checkpoint of this version of advonline")
    end = len(HEADER) + DIGEST_LENGTH
    stored, payload = data[len(HEADER) : end], data[end + 1 :]
    if data[end : end + 1] != b"\n" or stored.decode("ascii", "replace") != digest(payload):
        raise error(f"{what} is corrupted: checksum mismatch")
    return payload


def _canonical(document: dict) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def signed(document: dict) -> dict:
    """``document`` with the checksum entries last: :data:`SCHEME_KEY` naming the scheme and
    :data:`KEY` the SHA-256 of the canonical JSON of everything else (the scheme included)."""
    body = {k: v for k, v in document.items() if k not in (KEY, SCHEME_KEY)}
    body[SCHEME_KEY] = SCHEME
    return {**body, KEY: digest(_canonical(body))}


def verified(document, what: str, error: type[Exception]) -> bool:
    """Whether ``document`` (a parsed JSON file) carries a checksum, which then matches;
    ``error`` naming ``what`` when it does not match, or when one of the two checksum entries
    is missing (a damaged key name: either entry alone means the file was written with
    checksums)."""
    if not isinstance(document, dict) or (KEY not in document and SCHEME_KEY not in document):
        return False
    body = {k: v for k, v in document.items() if k != KEY}
    if document.get(KEY) != digest(_canonical(body)) or body.get(SCHEME_KEY) != SCHEME:
        raise error(f"{what} is corrupted: checksum mismatch")
    return True


def note_unverified(what: str) -> None:
    """Warn that ``what``, which loaded, was written before checksums (no digest to check):
    called once the file has parsed, so a file that does not parse gets one error only."""
    warnings.warn(
        f"{what} has no checksum (written before checksums); loaded unverified",
        UnverifiedFile,
        stacklevel=2,
    )
