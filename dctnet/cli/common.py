"""What every command module of the ``dctnet`` command line shares: an argparse type and the one
line an ``OSError`` prints."""

from __future__ import annotations

import argparse


def positive(text: str) -> int:
    """argparse type: an integer >= 1 (a clear usage error instead of a traceback later)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def os_error_line(exc: OSError) -> str:
    """``PATH: reason`` for an ``OSError`` (the file it names, its errno's message), else its text."""
    if exc.filename is not None and exc.strerror:
        return f"{exc.filename}: {exc.strerror}"
    return str(exc)
