"""One exception root for everything tracerecon refuses to do.

Only ``cli`` turns these into a line on stderr; library code raises them with a message a
user can act on and the exit code the CLI should use.
"""

from __future__ import annotations

# Exit codes the CLI contract promises (issue #2): 2 = bad input or missing tool.
EXIT_BAD_INPUT = 2
EXIT_TOOL_MISSING = 2
EXIT_INTERNAL = 1
EXIT_INTERRUPTED = 130  # Ctrl-C, as shells report a program ended by SIGINT
EXIT_TERMINATED = 143  # SIGTERM, likewise


class TraceReconError(Exception):
    """Base class: ``str(err)`` is the one line shown to the user, ``exit_code`` the status."""

    exit_code: int = EXIT_BAD_INPUT

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class BadTraceError(TraceReconError):
    """The input is not a usable nsys SQLite export (missing, not SQLite, truncated, wrong tool)."""


class NsysNotFoundError(TraceReconError):
    """No Nsight Systems installation could be located."""

    exit_code = EXIT_TOOL_MISSING


class LaunchError(TraceReconError):
    """Profiling or importing a report failed; the message says what to retry."""


class UsageError(TraceReconError):
    """An option value the command cannot use."""


def install_hint(extra: str) -> str:
    """How to install an optional extra, from an index or from a clone of the repository."""
    return f"pip install 'tracerecon[{extra}]' (in a clone of tracerecon: pip install -e '.[{extra}]')"


def plot_extra_missing() -> TraceReconError:
    """The error for a picture asked for without matplotlib (the `plot` extra)."""
    return TraceReconError(f"plots need the `plot` extra: {install_hint('plot')}")
