"""The ``advonline`` command (and ``python -m advonline``): start with huge pages for XLA's
large CPU buffers (:mod:`advonline.huge_pages`), then run the command line."""

import sys

from advonline.huge_pages import relaunch_with_huge_pages


def main() -> int:
    relaunch_with_huge_pages()
    from advonline.cli import main as command_line  # imported after the restart: JAX once

    return command_line()


if __name__ == "__main__":
    sys.exit(main())
