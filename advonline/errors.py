"""The error a problem raises for input it refuses (a setting, a trace, a policy file): the
command line prints its message as one line and exits with status 2. NumPy-only loaders use it
too, so this module imports nothing."""


class InputError(ValueError):
    """Input that cannot be used; the message says why, in one line."""


def shown(text: str, most: int = 40) -> str:
    """``text`` (a user's cell, a column's name) as a message quotes it: whole where it is
    short, else its first ``most`` characters and its length, so that the message stays one
    readable line."""
    return text if len(text) <= most else f"{text[:most]}... ({len(text)} characters)"


def quoted(value) -> str:
    """``value`` as a message quotes it: its ``repr``, shortened by :func:`shown`."""
    return shown(repr(value))
