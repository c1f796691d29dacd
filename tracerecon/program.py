"""The ``tracerecon`` program's first instant (``python -m tracerecon`` too).

Ctrl-C while the command line's modules load (the first 0.1 s) ends the program as it does
later, one line and exit 130, not with a traceback from inside an import. Standard library only:
this runs before anything else of tracerecon is imported.
"""

from __future__ import annotations

import os
import signal
import sys

EXIT_INTERRUPTED = 130  # (``tracerecon.errors``' value, not imported here: that is what loads)


def _interrupted_while_starting(signum, frame) -> None:
    try:
        sys.stderr.write("tracerecon: interrupted\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # no stderr to say it on
        pass
    os._exit(EXIT_INTERRUPTED)  # nothing was started: nothing to undo


def main() -> int:
    """Load the command line with Ctrl-C ending the program at once, then run it
    (``tracerecon.cli.console_main``, which takes the signals its own way)."""
    ours = signal.getsignal(signal.SIGINT) is signal.default_int_handler  # (not where Ctrl-C is ignored: nohup, &)
    if ours:
        signal.signal(signal.SIGINT, _interrupted_while_starting)
    from tracerecon.cli import console_main

    if ours:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    return console_main()
