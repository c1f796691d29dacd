"""Command line: one small module per command (parse, call ``tracerecon.api``, render).

Every analysing command takes the same trace and phase options (``common``); only this package
turns a ``TraceReconError`` into one line on stderr and its exit code.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from typing import Sequence

from tracerecon import __version__
from tracerecon.cli import diff, export, plot, ranges, report, run, scrub, view
from tracerecon.cli.common import inputs_of, one_line, shown_message
from tracerecon.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_TERMINATED, TraceReconError
from tracerecon.interrupts import Terminated, WorkAbandoned, default_interrupt, end_on_signals, exit_now, signalled, stop_on_signals
from tracerecon.own_process import prepare

COMMANDS = (report, ranges, export, plot, diff, view, run, scrub)
# Commands that leave SIGTERM as it is: the terminal UI's own loop, and the launcher, whose
# engine under nsys gets the signals its own way.
_OWN_SIGTERM = frozenset({"view", "run"})


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (exit 2), like every other error:
    the usage it would print first is where ``--help`` points."""

    def error(self, message: str):
        self.exit(2, f"tracerecon: error: {message} (see `{self.prog} --help`)\n")

    def parse_args(self, args=None, namespace=None):
        ns, extras = self.parse_known_args(args, namespace)
        if extras:  # named here, where the command is known, so the hint is that command's help
            command = getattr(ns, "subcommand", None)
            prog = f"{self.prog} {command}" if command else self.prog
            self.exit(2, f"tracerecon: error: unrecognized arguments: {' '.join(extras)} (see `{prog} --help`)\n")
        return ns


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tracerecon", description="True GPU-side phase times from Nsight Systems traces, per rank, and where CPU timers lie.")
    parser.add_argument("--version", action="version", version=f"tracerecon {__version__}")
    sub = parser.add_subparsers(dest="subcommand", metavar="COMMAND")
    sub.required = True
    for command in COMMANDS:
        command.add(sub)
    return parser


def console_main() -> int:
    """The ``tracerecon`` program (and ``python -m tracerecon``): the command line in
    ``sys.argv``, run as ``main`` runs it, in a process set up as tracerecon's own
    (``tracerecon.own_process``: no pandas, OpenBLAS idle, malloc reuse, no cyclic collector
    but in ``view``). Its objects are frozen before the interpreter exits, so that the exit
    does not walk them all for cycles (0.08 s of a 2-s report on the 2-core machine)."""
    if sys.stdout is None or sys.stderr is None:  # started with `>&-` or `2>&-`
        if sys.stderr is not None:
            print("tracerecon: error: cannot write the output (standard output is closed)", file=sys.stderr)
        return EXIT_BAD_INPUT
    sys.stderr = _DropsWhatItCannotWrite(sys.stderr)
    # A terminal or pipe whose encoding lacks a name's characters (PYTHONIOENCODING=ascii, a
    # Latin-1 locale) gets them as escapes, not an error halfway through a table.
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="backslashreplace")
    args = build_parser().parse_args()
    prepare(args.subcommand)
    if args.subcommand not in _OWN_SIGTERM:
        stop_on_signals()
    else:
        default_interrupt()
    try:
        return _run(args, exit_when_interrupted=True)
    finally:
        try:
            pipeline = sys.modules.get("tracerecon.pipeline")  # loaded only where exports were analysed
            if pipeline is not None:
                pipeline.wait_pools_closed()  # none may still be closing as the interpreter exits
            # Nor may a module still be importing on an import-ahead thread (an error said before
            # the analysis needed them): the interpreter's exit beside it crashed 1 run in 20.
            ahead = sys.modules.get("tracerecon.import_ahead")
            if ahead is not None:
                ahead.join_all()
        except KeyboardInterrupt as exc:  # Ctrl-C (or SIGTERM) while waiting for them: said, and the end
            said, code = ("terminated", EXIT_TERMINATED) if isinstance(exc, Terminated) else ("interrupted", EXIT_INTERRUPTED)
            print(f"tracerecon: {said}", file=sys.stderr)
            exit_now(code)
        end_on_signals()  # (on the way out: a signal now ends the program in one line, as before)
        gc.freeze()


def _names_an_input(name: str, args: argparse.Namespace) -> bool:
    """Whether ``name`` is one of the command's inputs (scrub's one TRACE too), or a file inside an input directory."""
    given = inputs_of(args) + ([args.trace] if isinstance(getattr(args, "trace", None), str) else [])
    return any(name == g or name.startswith(g.rstrip(os.sep) + os.sep) for g in map(os.fsdecode, given))


class _DropsWhatItCannotWrite:
    """The program's stderr, but a line it cannot write (a full disk, a device that refuses) is
    dropped, not an error: the report on stdout and the exit status stand (an unwritable stderr
    made a trace with warnings print nothing and exit 1). After the first failure fd 2 points at
    /dev/null, so that nothing left in the stream's buffer fails again as the interpreter exits."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            n = self._stream.write(text)
            self._stream.flush()
            return n
        except OSError:
            self._give_up()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError:
            self._give_up()

    def _give_up(self) -> None:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
            self._stream.flush()
        except (OSError, ValueError):
            pass

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def main(argv: Sequence[str] | None = None) -> int:
    """The command line ``argv`` (default ``sys.argv[1:]``) in this process, whose settings it
    leaves as they are (embedding, tests): the exit status; errors as one line on stderr."""
    return _run(build_parser().parse_args(argv))


def _settings_ignored(env, uses_cache: bool = False) -> list[str]:
    """One line per tracerecon environment setting whose value it cannot use (and so ignores),
    by the rule of the module that reads it (imported only where the setting is given), and,
    for a command that ``uses_cache``, where the cache's folder by default (under
    ``XDG_CACHE_HOME``, else ``~/.cache``) cannot be made or written."""
    out = []
    if (reader := env.get("TRACERECON_READER", "")):
        from tracerecon.nsys.read_plan import READERS

        if reader not in READERS:
            out.append(f"TRACERECON_READER={reader!r} ignored: `sqlite3` reads through Python's sqlite3, anything else natively (ADBC)")
    no_cache = env.get("TRACERECON_NO_CACHE", "")
    if no_cache or env.get("TRACERECON_CACHE_DIR"):
        from pathlib import Path

        from tracerecon.cache import NO_CACHE_WORDS, enabled, unusable_dir

        if no_cache.strip().lower() not in NO_CACHE_WORDS:
            out.append(f"TRACERECON_NO_CACHE={no_cache!r} not understood (1 or 0, yes or no, true or false, on or off): the cache is off")
        folder = env.get("TRACERECON_CACHE_DIR")
        if folder and enabled(env) and (why := unusable_dir(Path(folder), make=uses_cache)):
            out.append(f"TRACERECON_CACHE_DIR={folder!r} {why}: nothing is cached")
    elif uses_cache:
        from tracerecon.cache import cache_dir, unusable_dir

        if (why := unusable_dir(folder := cache_dir(env), make=True)):
            out.append(f"the cache's folder {os.fsdecode(folder)} {why}: nothing is cached (TRACERECON_CACHE_DIR names another)")
    if (cap := env.get("TRACERECON_CACHE_MB", "")):
        from tracerecon.cache import cap_setting

        if cap_setting(cap) is None:
            out.append(f"TRACERECON_CACHE_MB={cap!r} ignored (expected a whole number of 0 or more): the default applies")
    if (threads := env.get("TRACERECON_READ_THREADS", "")):
        from tracerecon.nsys.native_read import threads_setting

        if threads_setting(threads) is None:
            out.append(f"TRACERECON_READ_THREADS={threads!r} ignored (expected a whole number of 1 or more): the default applies")
    return out


def _run(args: argparse.Namespace, exit_when_interrupted: bool = False) -> int:
    """Run the parsed command: its exit status, errors as one line on stderr. Ctrl-C says so
    and returns ``EXIT_INTERRUPTED`` (SIGTERM, where taken: ``EXIT_TERMINATED``); with ``exit_when_interrupted`` (the program, not an
    embedding) the process ends there, not after the reads still running, as it does when
    ``view`` is quit while it loads (``interrupts``)."""
    uses_cache = hasattr(args, "no_cache") and not args.no_cache
    for line in _settings_ignored(os.environ, uses_cache):
        print(f"tracerecon: {shown_message(f'warning: {line}')}", file=sys.stderr)
    try:
        try:
            code = int(args.func(args) or 0)
            if (interrupt := signalled()) is not None:  # taken, but swallowed where it landed: said all the same
                raise interrupt
            return code
        except Exception as exc:
            # A signal whose interrupt was swallowed where it landed (inside the import
            # machinery) and the work then failed another way (its workers, stopped by the same
            # signal, broke the pool): the signal is what is said.
            if (interrupt := signalled()) is not None and not isinstance(exc, BrokenPipeError):
                raise interrupt from None
            raise
    except TraceReconError as exc:
        print(f"tracerecon: error: {shown_message(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt as exc:
        said, code = ("terminated", EXIT_TERMINATED) if isinstance(exc, Terminated) else ("interrupted", EXIT_INTERRUPTED)
        print(f"tracerecon: {said}", file=sys.stderr)
        if exit_when_interrupted:
            exit_now(code)
        return code
    except WorkAbandoned:
        if exit_when_interrupted:
            exit_now(0)
        return 0
    except BrokenPipeError:
        return 0
    except OSError as exc:
        # What reaches here is the output's (stdout closed, the disk full: reads of the input are
        # said as BadTraceError where they happen), but for a path given as an input that cannot
        # even be looked at (a name too long for the file system).
        if os.environ.get("TRACERECON_DEBUG"):
            raise
        _quiet_stdout()
        name = os.fsdecode(exc.filename) if getattr(exc, "filename", None) else None
        if name is not None and _names_an_input(name, args):
            print(f"tracerecon: error: cannot read {one_line(name)} ({exc.strerror or exc})", file=sys.stderr)
            return EXIT_BAD_INPUT
        where = f" {one_line(name)}" if name is not None else ""
        print(f"tracerecon: error: cannot write the output{where} ({exc.strerror or exc})", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as exc:  # never a traceback for a user; TRACERECON_DEBUG=1 shows it
        if os.environ.get("TRACERECON_DEBUG"):
            raise
        print(f"tracerecon: internal error: {type(exc).__name__}: {shown_message(str(exc))} (set TRACERECON_DEBUG=1 for details)", file=sys.stderr)
        return EXIT_INTERNAL


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's flush at exit does not fail again."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass
