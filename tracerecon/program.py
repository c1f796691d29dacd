"""The ``tracerecon`` program's first instant (``python -m tracerecon`` too).

Ctrl-C while the command line's modules load (the first 0.1 s) ends the program as it does
later, one line and exit 130, not with a traceback from inside an import. Standard library and
``tracerecon.errors``' constants only: this runs before the rest of tracerecon is imported.
"""

from __future__ import annotations

import os
import signal
import sys

from tracerecon.errors import EXIT_INTERRUPTED  # (a module of constants: nothing else loads)



def _interrupted_while_starting(signum, frame) -> None:
    try:
        sys.stderr.write("tracerecon: interrupted\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # no stderr to say it on
        pass
    os._exit(EXIT_INTERRUPTED)  # nothing was started: nothing to undo


# ``tracerecon.interrupts`` replaces a handler so marked as it takes the signals its own way.
_interrupted_while_starting.tracerecon_starting = True  # type: ignore[attr-defined]


def main() -> int:
    """Run the command line (``tracerecon.cli.console_main``) with Ctrl-C ending the program at
    once until the command takes the signals its own way (``interrupts.stop_on_signals``, or
    the default back for ``view`` and ``run``: ``interrupts.default_interrupt``)."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # (not where Ctrl-C is ignored: nohup, &)
        signal.signal(signal.SIGINT, _interrupted_while_starting)
    from tracerecon.cli import console_main

    return console_main()
