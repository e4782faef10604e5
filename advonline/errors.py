"""The error a problem raises for input it refuses (a setting, a trace, a policy file): the
command line prints its message as one line and exits with status 2. NumPy-only loaders use it
too, so this module imports nothing."""


class InputError(ValueError):
    """Input that cannot be used; the message says why, in one line."""
