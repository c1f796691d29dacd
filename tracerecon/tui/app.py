"""`tracerecon view`: a Textual app over the core analysis. It displays; it computes nothing.
A trace's text (names, file names, messages) is shown as ``one_line`` writes it: control and
invisible characters as escapes, never sent to the terminal as they are.

Data flow: a thread worker first gets the report (``api.report``: from the cache, a small
entry) and posts ``ReportReady``, which fills the overview, the first screen; it then runs the
loader (the same core as `report`) and posts ``Loaded`` for the timeline, cycles and detail.
The app hands each view its tables (attributes down); views post messages when the user picks a
cycle, a phase or a segment (messages up), and the app routes them. Modules that import pyarrow
are imported by the worker, so the first screen waits for neither.
"""

from __future__ import annotations

import importlib
import os
import threading
from typing import TYPE_CHECKING, Callable

from rich.text import Text
from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.css.query import NoMatches
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import DataTable, Header, Input, LoadingIndicator, Static, TabbedContent, TabPane

from tracerecon.json_text import one_line, shown_message, shown_names
from tracerecon.present import VERDICT_MEANING, VERDICT_STYLE, fmt_ms, gpus_text, rank_notes, verdict_cause_label
from tracerecon.report_model import Report
from tracerecon.tui.timeline_widget import Timeline
from tracerecon.tui.timeline_window import Window, format_duration

ZOOM_IN = 0.5  # `+`: the window's new span, as a fraction of its span
# A phase name in a table or a column head: at most this many cells (cut in the middle past it,
# as `report` cuts them: a 5,000-character name made a column as wide as itself).
NAME_CELLS = 48
# The overview shows this many of the report's warnings; the rest are counted there and printed
# when view closes (the first screen stays the report's).
OVERVIEW_WARNINGS = 3


def shown_names_by(names: list[str]) -> dict[str, str]:
    """Each of ``names`` as a table shows it (``json_text.shown_names``)."""
    return dict(zip(names, shown_names(names, NAME_CELLS)))

if TYPE_CHECKING:
    from tracerecon.model import Analysis
    from tracerecon.tui.timeline_model import TimelineIndex

HELP = """\
[b]tracerecon view[/b]: CPU phase timers against the GPU's truth

[b]Tabs[/b] 1 overview  2 timeline  3 cycles  4 detail  5 diff (--diff B)
[b]Overview[/b] enter: details of the phase under the cursor
[b]Timeline[/b]
  n / p   next / previous cycle      g  go to cycle N
  w       the cycle whose timers lie most
  + / -   zoom (mouse wheel too)     left / right  pan
  0       the whole cycle again      r  next rank   a  all ranks' phases
  click   select a segment           enter  its phase detail (a run of N GPU ops: zoom in to it)
[b]Tables[/b] s: sort by the next column (largest first); a header click: by that column; enter: open it
[b]Anywhere[/b] /  search a kernel or range   ?  this help   q  quit

Verdict letters (Cycles tab): O [magenta]over[/magenta] (CPU > GPU),
U [red]under[/red] (CPU < GPU), A [green]agree[/green], N [grey50]no GPU work[/grey50].
Causes: async_tail, absorbed_wait, queued_behind, comm_wait,
launch_bound (the README says what each means).
"""


def _sort_key(v):
    """Numbers as numbers (also when shown as text), then text, blanks last."""
    text = str(v.plain if hasattr(v, "plain") else v) if v is not None else ""
    try:
        return (0, float(text), "")
    except ValueError:
        return (1 if text and text != "-" else 2, 0.0, text)


class ReportReady(Message):
    def __init__(self, report: Report) -> None:
        self.report = report
        super().__init__()


class Loaded(Message):
    def __init__(self, analysis: Analysis) -> None:
        self.analysis = analysis
        super().__init__()


class LoadFailed(Message):
    def __init__(self, error: str) -> None:
        self.error = error
        super().__init__()


class HelpScreen(ModalScreen):
    BINDINGS = [Binding("escape,q,question_mark", "app.pop_screen", "close")]
    DEFAULT_CSS = "HelpScreen { align: center middle; } HelpScreen > VerticalScroll { width: 90%; height: 90%; border: round $accent; background: $panel; padding: 0 1; }"

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(HELP)


class AskScreen(ModalScreen[str]):
    """One line of input (cycle number, search text)."""

    DEFAULT_CSS = "AskScreen { align: center middle; } AskScreen > Input { width: 60; max-width: 100%; }"
    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def __init__(self, placeholder: str) -> None:
        super().__init__()
        self.placeholder = placeholder

    def compose(self) -> ComposeResult:
        yield Input(placeholder=self.placeholder, id="ask")

    @on(Input.Submitted)
    def done(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss("")


class TraceReconApp(App):
    TITLE = "tracerecon"
    CSS = """
    #loading { height: 3; }
    #status { height: 3; padding: 0 1; background: $boost; }
    #overview-notes { height: auto; padding: 0 1; }
    #detail-body { padding: 0 1; }
    DataTable { height: 1fr; }
    #overview-table, #diff-table { height: auto; max-height: 70%; min-height: 3; }
    #overview-notes-box, #diff-notes-box { height: 1fr; }
    #keys { dock: bottom; height: 1; background: $panel; color: $text-muted; padding: 0 1; }
    #tabs, #tabs > ContentSwitcher, TabPane { height: 1fr; }
    """
    BINDINGS = [
        Binding("q", "quit", "quit"),
        Binding("question_mark", "help", "help"),
        Binding("slash", "search", "search"),
        Binding("1", "tab('overview')", "overview", show=False),
        Binding("2", "tab('timeline')", "timeline", show=False),
        Binding("3", "tab('cycles')", "cycles", show=False),
        Binding("4", "tab('detail')", "detail", show=False),
        Binding("5", "tab('diff')", "diff", show=False),
        # (n, p, + and - are on the timeline's own status line: the footer fits 80 columns)
        Binding("n", "cycle(1)", "next cycle", show=False),
        Binding("p", "cycle(-1)", "prev cycle", show=False),
        Binding("g", "goto", "go to cycle"),
        Binding("w", "worst", "worst cycle"),
        Binding("plus,equals_sign", f"zoom({ZOOM_IN})", "zoom in", show=False),
        Binding("minus", "zoom(2.0)", "zoom out", show=False),
        Binding("left", "pan(-0.25)", "pan", show=False),
        Binding("right", "pan(0.25)", "pan", show=False),
        Binding("0", "reset", "whole cycle", show=False),
        Binding("r", "next_rank", "rank"),
        Binding("a", "all_ranks", "all ranks", show=False),
        Binding("s", "sort", "sort", show=False),
    ]

    def __init__(self, loader: Callable[[], Analysis], source: str = "", diff_loader: Callable[[], Analysis] | None = None,
                 report_loader: Callable[[], Report] | None = None, report_of: Callable[[Analysis], Report] | None = None) -> None:
        """``loader``: the Analysis; ``report_loader``: its report, quicker (a cached one), shown
        before the analysis loads; else ``report_of(analysis)`` (default: built from it) after;
        ``diff_loader``: run B of a Diff tab."""
        super().__init__()
        # No animations unless the user asks for them (TEXTUAL_ANIMATIONS): the tab underline's
        # slide redrew the tab bar 20 times per switch, every frame sent down an ssh link, and
        # held each switch at 500 ms before the screen settled.
        if "TEXTUAL_ANIMATIONS" not in os.environ:
            self.animation_level = "none"
        self.loader = loader
        self.report_loader = report_loader
        self.report_of = report_of
        self.report: Report | None = None
        self.first_screen_shown = threading.Event()
        self.load_ended = threading.Event()  # the load (``load``) returned or failed
        self.load_error: str | None = None
        # What failed to load (run A, else run B), for the command line once the app ends.
        self.load_failure: Exception | None = None
        self.diff_error: str | None = None
        self.diff_loader = diff_loader
        self.diff_result: dict | None = None
        self.source = source
        self.analysis: Analysis | None = None
        self.indexes: dict[int, TimelineIndex] = {}
        self.rank_pos = 0
        self.all_ranks = False
        self.cycle: int | None = None
        self.window: Window | None = None
        self.sort_reverse = False
        self.sort_column: dict[str, int] = {}  # per table: the column `s` sorted by last
        self.overview_sort: tuple[str, bool] | None = None  # the overview's sort (column label, largest first), kept through a resize
        self.detail_target: tuple[int, int | None, str | None] | None = None
        self.zoom_target: Window | None = None  # a merged run of GPU ops clicked: enter zooms in to it
        self._overview_layout = (True, False, False)  # (span and busy shown, labels on two lines, GPU first): ``overview_layout``
        self.pending_cycle_rows: list[tuple[list, str]] = []

    # --- layout ---------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Header()
        with Vertical(id="loading-box"):
            yield Static(Text(f"loading {one_line(self.source)} ..."), id="loading-text")
            yield LoadingIndicator(id="loading")
        with TabbedContent(id="tabs", initial="overview"):
            with TabPane("Overview", id="overview"):
                yield DataTable(id="overview-table", cursor_type="row", zebra_stripes=True)
                # The table as tall as its rows, up to 70 % of the pane; the notes (rank lines,
                # stragglers, warnings) scroll in the rest (tab reaches them): grown to fit
                # them, they had left the table no row on 80x24.
                with VerticalScroll(id="overview-notes-box"):
                    yield Static("", id="overview-notes")
            with TabPane("Timeline", id="timeline"):
                yield Timeline(id="timeline-view")
                yield Static("", id="status")
            with TabPane("Cycles", id="cycles"):
                yield DataTable(id="cycles-table", cursor_type="row", zebra_stripes=True)
            with TabPane("Phase detail", id="detail"):
                with VerticalScroll(id="detail-box"):
                    yield Static("select a phase (enter on the overview, or click one on the timeline)", id="detail-body")
            if self.diff_loader is not None:
                with TabPane("Diff", id="diff"):
                    yield DataTable(id="diff-table", cursor_type="row", zebra_stripes=True)
                    with VerticalScroll(id="diff-notes-box"):
                        yield Static("", id="diff-notes")
        yield Static(self.key_hints(), id="keys")

    def key_hints(self) -> Text:
        """The shown bindings on one line. Textual's Footer would re-compose a widget per key
        on every focus change (0.2-0.4 s of the first screen); the keys never change here."""
        line = Text(no_wrap=True, overflow="ellipsis")
        for b in self.BINDINGS:
            if b.show:
                key = {"question_mark": "?", "slash": "/", "plus,equals_sign": "+", "minus": "-"}.get(b.key, b.key)
                line.append(f" {key} ", style="bold reverse")
                line.append(f" {b.description}  ")
        return line

    def on_mount(self) -> None:
        self.query_one("#tabs").display = False
        # The load runs on a thread of its own, not a Textual thread worker: those run in
        # asyncio's default executor, which the app waits for as it quits (`q` during the load
        # of a 1 GiB export returned after 15-16 s on 2 cores). A read cannot be stopped, so a
        # quit leaves the load to the program's end (``cli.view``: ``WorkAbandoned``).
        threading.Thread(target=self.load, name="tracerecon-load", daemon=True).start()

    def load(self) -> None:
        """The analysis (and its report, and run B for a Diff tab), posted to the app as
        messages; runs off the UI thread."""
        try:
            self._load()
        finally:
            self.load_ended.set()

    def _load(self) -> None:
        try:
            if self.report_loader is not None:
                self.post_message(ReportReady(self.report_loader()))
                # Reading the analysis holds the GIL for long stretches: let the overview paint first.
                self.first_screen_shown.wait(timeout=2.0)
            analysis = self.loader()
            # The modules behind the timeline and the details import pyarrow and numpy: done
            # here, off the UI thread.
            for module in ("tracerecon.analysis.detail", "tracerecon.tui.timeline_model"):
                importlib.import_module(module)

            if self.report_loader is None:
                from tracerecon.present import build_report

                self.post_message(ReportReady((self.report_of or build_report)(analysis)))
        except Exception as exc:  # shown in the app; the CLI says it again when the app ends (load_failure)
            self.load_failure = exc
            self.post_message(LoadFailed(str(exc)))
            return
        if self.diff_loader is not None:
            try:
                from tracerecon.api import compare

                self.diff_result = compare(analysis, self.diff_loader())
            except Exception as exc:  # run B failing leaves run A to browse
                self.diff_error = str(exc)
                self.load_failure = exc
        self.post_message(Loaded(analysis))

    @on(LoadFailed)
    def load_failed(self, event: LoadFailed) -> None:
        self.load_error = event.error
        self.query_one("#loading").display = False
        self.query_one("#loading-text", Static).update(Text.assemble(("cannot load: ", "red"), one_line(str(event.error))))
        if self.report is not None:  # the overview is up, the loading box gone: say it there
            self.query_one("#overview-notes", Static).update(Text(f"cannot load the timeline: {one_line(str(event.error))}", style="bold red"))
            self.notify(f"cannot load the timeline: {one_line(str(event.error))}", severity="error", timeout=30, markup=False)
        else:
            # Nothing to browse: the app ends at once and the command says why in one line and
            # exits as `report` does (``load_failure``), not after a key press.
            self.exit()

    @on(ReportReady)
    def report_ready(self, event: ReportReady) -> None:
        """The first screen: the overview, from the report alone."""
        rep = self.report = event.report
        self.query_one("#loading-box").display = False
        self.query_one("#tabs").display = True
        self.sub_title = f"{len(rep.ranks)} rank(s): " + ", ".join(sorted({one_line(r.source.rsplit('/', 1)[-1]) for r in rep.ranks}))
        self.fill_overview()
        self.query_one("#overview-table", DataTable).focus()
        self.call_after_refresh(self.first_screen_shown.set)

    def analysis_ready(self) -> bool:
        """Whether the timeline, cycles and details can be shown yet (says so when not)."""
        if self.analysis is None:
            self.notify(f"cannot load the timeline: {one_line(str(self.load_error))}" if self.load_error else "still loading the timeline ...",
                        severity="error" if self.load_error else "warning", markup=False)
        return self.analysis is not None

    @on(Loaded)
    def loaded(self, event: Loaded) -> None:
        from tracerecon.tui.timeline_model import TimelineIndex

        a = event.analysis
        self.analysis = a
        self.indexes = {r.rank: TimelineIndex(r.phases, r.gpu_ops, r.syncs) for r in a.ranks}
        self.query_one(Timeline).phase_order = a.config.labels()
        # The cycles table (a row per cycle: 30,000 cells to lay out on a 2,500-cycle trace, 1-2 s)
        # fills after the first screen has been painted, a batch of rows at a time, so keys
        # stay answered.
        self.set_timer(0.1, self.fill_cycles)
        if self.diff_result is not None:
            self.fill_diff()
        elif self.diff_error is not None:
            self.query_one("#diff-notes", Static).update(Text(f"cannot compare: {one_line(self.diff_error)}", style="bold red"))
            self.notify(f"cannot compare: {one_line(self.diff_error)}", severity="error", timeout=30, markup=False)
        first = self.current_rank()
        cycles = first.phases["cycle"].drop_null().to_pylist() if first and first.phases.num_rows else []
        # The timeline opens on the first cycle the medians count (a warm-up cycle's graph
        # capture or first prefill would show its ops as slivers), else the first one.
        from tracerecon.api import counted_cycles

        counted = counted_cycles(first) if first else set()
        self.cycle = min([c for c in cycles if c in counted] or cycles) if cycles else None
        self.reset_window()

    # --- data helpers ---------------------------------------------------------------------
    def current_rank(self):
        if not self.analysis or not self.analysis.ranks:
            return None
        return self.analysis.ranks[self.rank_pos % len(self.analysis.ranks)]

    def cycle_ids(self) -> list[int]:
        r = self.current_rank()
        if r is None or r.cycles.num_rows == 0:
            return []
        return r.cycles["cycle"].to_pylist()

    # --- overview -------------------------------------------------------------------------
    # The overview's columns; span and busy only where they fit (the phase detail has them).
    OVERVIEW_COLUMNS = ("rank", "phase", "n", "CPU ms", "GPU ms", "span", "busy", "CPU-GPU", "verdict: cause")
    # (each column's cells are padded a column either side; the table's scrollbar takes two)
    CELL_PADDING, SCROLLBAR = 2, 2

    def overview_rows(self) -> list[tuple]:
        """The overview's rows as text, one cell per ``OVERVIEW_COLUMNS`` (the label on one line)."""
        rep = self.report
        shown = shown_names_by([p.phase for r in rep.ranks for p in r.phases])
        return [(str(r.rank), shown[p.phase], str(p.n), fmt_ms(p.cpu_ms_median), fmt_ms(p.gpu_ms_median), fmt_ms(p.gpu_span_ms_median),
                 fmt_ms(p.gpu_busy_ms_median), fmt_ms(p.error_ms_median), verdict_cause_label(p)) for r in rep.ranks for p in r.phases]

    def overview_layout(self, width: int) -> tuple[bool, bool, bool]:
        """(span and busy shown, each verdict: cause label on two lines at its ": ", the GPU
        columns before the CPU timer's and ``n`` last) for a terminal ``width`` wide: the first
        layout that fits of span and busy with one-line labels, neither with one-line labels,
        and neither with two-line labels; where none fits, that last with the GPU first (the
        table scrolls sideways: what shows is the GPU time, not the timer it corrects). A label
        cut at the screen's edge read wrong counts ("agree 19/30: launch_bound 1" for 13/30);
        span and busy, shown from 100 columns on, had run past it."""
        rows = self.overview_rows()

        def need(wide: bool, split: bool) -> int:
            total = self.SCROLLBAR
            for i, col in enumerate(self.OVERVIEW_COLUMNS):
                if col in ("span", "busy") and not wide:
                    continue
                cells = [row[i] for row in rows]
                if split and col == "verdict: cause":
                    cells = [part for cell in cells for part in cell.split(": ", 1)]
                total += max([len(col)] + [len(c) + (1 if split and col == "verdict: cause" else 0) for c in cells]) + self.CELL_PADDING
            return total

        return next((layout + (False,) for layout in ((True, False), (False, False), (False, True)) if need(*layout) <= width), (False, True, True))

    def overview_columns(self, layout: tuple[bool, bool, bool]) -> list[str]:
        """The overview's columns in a layout (``overview_layout``), in the order shown."""
        wide, _, gpu_first = layout
        cols = [c for c in self.OVERVIEW_COLUMNS if wide or c not in ("span", "busy")]
        if gpu_first:
            cols = ["rank", "phase", "GPU ms", "CPU-GPU", "verdict: cause", "CPU ms", "n"]
        return cols

    def on_resize(self, event) -> None:
        if self.report is not None and self.overview_layout(event.size.width) != self._overview_layout:
            # Rebuilt with the other columns: its sort (by a column both layouts have) and the
            # row under the cursor kept.
            t = self.query_one("#overview-table", DataTable)
            row = t.coordinate_to_cell_key(t.cursor_coordinate).row_key if t.row_count else None
            self.fill_overview(event.size.width)
            sort, self.overview_sort = self.overview_sort, None
            labels = [c.label.plain for c in t.columns.values()]
            if sort is not None and sort[0] in labels:
                self.overview_sort = sort
                self.sort_column["#overview-table"] = labels.index(sort[0])
                t.sort(list(t.columns.keys())[labels.index(sort[0])], key=_sort_key, reverse=sort[1])
            else:
                self.sort_column.pop("#overview-table", None)
            if row is not None:
                t.move_cursor(row=t.get_row_index(row))

    def fill_overview(self, width: int | None = None) -> None:
        """The overview's table and notes, laid out for ``width`` columns (``overview_layout``;
        default: the app's; a resize gives its new width, which the app's size does not hold
        yet when it is handled)."""
        rep = self.report
        t = self.query_one("#overview-table", DataTable)
        t.clear(columns=True)
        layout = self._overview_layout = self.overview_layout(self.size.width if width is None else width)
        split = layout[1]
        columns = self.overview_columns(layout)
        # verdict and cause in one column, as `report` has them
        t.add_columns(*columns)
        notes = Text()
        rows = iter(self.overview_rows())
        for r in rep.ranks:
            for p in r.phases:
                cells = dict(zip(self.OVERVIEW_COLUMNS, next(rows)))
                style = VERDICT_STYLE.get(p.dominant_verdict, "")
                cells["phase"] = Text(cells["phase"])
                cells["CPU-GPU"] = Text(cells["CPU-GPU"], style=style)
                label = cells["verdict: cause"]
                cells["verdict: cause"] = Text(label.replace(": ", ":\n", 1) if split else label, style=style)
                t.add_row(*(cells[c] for c in columns), key=f"{r.rank}:{p.phase}", height=None)
        for r in rep.ranks:
            # (a rank that is one GPU's part of a process: its loop thread too, as `report`'s header says)
            on = f" ({', '.join(x for x in (gpus_text(r.gpus), f'thread {r.tid}' if r.tid is not None else '') if x)})" if r.gpus or r.tid is not None else ""
            for i, (line, verdict) in enumerate(rank_notes(r, rep.skip_cycles)):
                # (the rank's GPUs with its first line; the misleading phase in its verdict's colour)
                notes.append(f"rank {r.rank}{on if i == 0 else ''}: {one_line(line)}\n", style="bold " + VERDICT_STYLE.get(verdict, "") if verdict else "")
        for line in rep.straggler_lines:
            notes.append(one_line(line) + "\n", style="bold")
        for w in rep.warnings[:OVERVIEW_WARNINGS]:
            notes.append(f"warning: {shown_message(w)}\n", style="yellow")
        if len(rep.warnings) > OVERVIEW_WARNINGS:
            more = len(rep.warnings) - OVERVIEW_WARNINGS
            notes.append(f"and {more} more warning{'s' if more > 1 else ''}: printed when view closes, as `tracerecon report` prints them\n", style="yellow")
        self.query_one("#overview-notes", Static).update(notes)

    @on(DataTable.RowSelected, "#overview-table")
    def overview_pick(self, event: DataTable.RowSelected) -> None:
        rank, phase = str(event.row_key.value).split(":", 1)
        self.show_detail(int(rank), None, phase)

    # --- diff -----------------------------------------------------------------------------
    def fill_diff(self) -> None:
        d = self.diff_result
        t = self.query_one("#diff-table", DataTable)
        t.clear(columns=True)
        t.add_columns("rank", "phase", "A GPU ms", "B GPU ms", "delta GPU", "A CPU ms", "B CPU ms")
        shown = shown_names_by([p["phase"] for p in d["phases"]])
        for p in d["phases"]:
            delta = p["delta_gpu_ms"]
            t.add_row(str(p["rank"]), Text(shown[p["phase"]]), fmt_ms(p["a_gpu_ms"]), fmt_ms(p["b_gpu_ms"]),
                      Text("-" if delta is None else f"{delta:+.3f}", style="red" if (delta or 0) > 0 else "green"), fmt_ms(p["a_cpu_ms"]), fmt_ms(p["b_cpu_ms"]))
        from tracerecon.present import diff_notes

        notes = Text()
        for text, style in diff_notes(d):  # what `tracerecon diff` prints under its table
            notes.append(one_line(text) + "\n", style=style)
        self.query_one("#diff-notes", Static).update(notes)

    # --- cycles ---------------------------------------------------------------------------
    def _cycles_table(self) -> DataTable | None:
        """The cycles table, or None once the app is closing (a batch timer may still fire)."""
        if not self.is_running:
            return None
        try:
            return self.query_one("#cycles-table", DataTable)
        except NoMatches:
            return None

    CYCLE_ROWS_PER_BATCH = 250
    CYCLE_BATCH_GAP_S = 0.01

    def fill_cycles(self) -> None:
        a = self.analysis
        t = self._cycles_table()
        if t is None:
            return
        t.clear(columns=True)
        phases = [p for p in a.config.labels() if any(p in r.phases["phase"].to_pylist() for r in a.ranks)]
        from tracerecon.api import cycle_rows

        rows = [(r, c) for r in a.ranks for c in cycle_rows(r)]  # a phase run several times a cycle: one row a cycle, as `report` has it
        # Which cycles the report leaves out, in a column beside the cycle where any is (at the
        # end of a row, past the per-phase columns, 80 columns never showed it); the GPU columns
        # before the CPU timers', which the GPU times correct.
        marked = any(c.warmup or c.incomplete or c.empty for _, c in rows)
        shown = shown_names_by(phases)
        cols = ["rank", "cycle"] + ["left out"] * marked + ["GPU ms", "CPU ms"] + [f"{p} GPU" for p in phases] + [f"{p} CPU" for p in phases] + ["|error| ms", "verdicts"]
        heads = ["rank", "cycle"] + ["left out"] * marked + ["GPU ms", "CPU ms"] + [f"{shown[p]} GPU" for p in phases] + [f"{shown[p]} CPU" for p in phases] + ["|error| ms", "verdicts"]
        for c, head in zip(cols, heads):
            t.add_column(Text(head), key=c)  # phase names are the trace's text: no markup, escapes
        for r, c in rows:
            row = [r.rank, c.cycle] + [c.left_out] * marked + [fmt_ms(c.gpu_ms), fmt_ms(c.cpu_ms)]  # ms as text: a DataTable shows floats to 2 decimals
            row += [fmt_ms(c.phase_gpu_ms.get(p)) for p in phases] + [fmt_ms(c.phase_cpu_ms.get(p)) for p in phases]
            row += [fmt_ms(c.abs_error_ms), c.verdicts]
            self.pending_cycle_rows.append((row, f"{r.rank}:{c.cycle}"))
        self.add_cycle_rows()

    def add_cycle_rows(self, everything: bool = False) -> None:
        """Add the next batch of pending cycle rows (all of them with ``everything``) and
        schedule the next batch after the table has been laid out."""
        t = self._cycles_table()
        if t is None:
            return
        n = len(self.pending_cycle_rows) if everything else self.CYCLE_ROWS_PER_BATCH
        batch, self.pending_cycle_rows = self.pending_cycle_rows[:n], self.pending_cycle_rows[n:]
        for row, key in batch:
            t.add_row(*row, key=key)
        if self.pending_cycle_rows and not everything:
            self.set_timer(self.CYCLE_BATCH_GAP_S, self.add_cycle_rows)

    def action_sort(self) -> None:
        """Sort the table of the tab in view (Overview or Cycles) by the next column (``s`` again:
        the one after), largest first."""
        table_id = {"overview": "#overview-table", "cycles": "#cycles-table"}.get(self.query_one("#tabs", TabbedContent).active)
        if table_id is None:
            return
        t = self.query_one(table_id, DataTable)
        if not t.columns:
            return
        if table_id == "#cycles-table":
            self.add_cycle_rows(everything=True)  # sort them all, not the ones added so far
        # The tables' cursor is a row, so `s` steps the sort to the next column (largest first),
        # and says which; a header click sorts by that column.
        keys = list(t.columns.keys())
        k = (self.sort_column.get(table_id, -1) + 1) % len(keys)
        self.sort_column[table_id] = k
        self.sort_reverse = True
        t.sort(keys[k], key=_sort_key, reverse=True)
        if table_id == "#overview-table":
            self.overview_sort = (t.columns[keys[k]].label.plain, True)
        self.notify(f"sorted by {t.columns[keys[k]].label.plain} (s: the next column)", timeout=3, markup=False)

    @on(DataTable.HeaderSelected)
    def header_sort(self, event: DataTable.HeaderSelected) -> None:
        if event.data_table.id == "cycles-table":
            self.add_cycle_rows(everything=True)
        self.sort_reverse = not self.sort_reverse
        event.data_table.sort(event.column_key, key=_sort_key, reverse=self.sort_reverse)
        if event.data_table.id == "overview-table":
            self.overview_sort = (event.data_table.columns[event.column_key].label.plain, self.sort_reverse)

    @on(DataTable.RowSelected, "#cycles-table")
    def cycle_pick(self, event: DataTable.RowSelected) -> None:
        rank, cycle = (int(x) for x in str(event.row_key.value).split(":"))
        self.rank_pos = [r.rank for r in self.analysis.ranks].index(rank)
        self.open_cycle(cycle)

    # --- timeline -------------------------------------------------------------------------
    def open_cycle(self, cycle: int) -> None:
        self.cycle = cycle
        self.reset_window()
        self.action_tab("timeline")

    def reset_window(self) -> None:
        self.zoom_target = None  # a run clicked in the window before is not this one's
        r = self.current_rank()
        if r is None:
            return
        w = self.indexes[r.rank].cycle_window(self.cycle) if self.cycle is not None else None
        if w is None:
            ph = r.phases
            if ph.num_rows:
                w = Window(int(ph["cpu_start_ns"][0].as_py()), int(ph["cpu_end_ns"][min(ph.num_rows, 6) - 1].as_py()))
            elif r.gpu_ops.num_rows:
                s = int(r.gpu_ops["start_ns"][0].as_py())
                w = Window(s, s + 1_000_000)
            else:
                return
        self.window = w
        self.redraw()

    def redraw(self) -> None:
        if self.window is None or self.analysis is None:
            return
        ranks = self.analysis.ranks if self.all_ranks else [self.current_rank()]
        lanes = []
        for r in ranks:
            off = self.analysis.cross.alignment_of(r.rank).offset_ns if (self.all_ranks and self.analysis.cross) else 0
            ref_off = self.analysis.cross.alignment_of(self.current_rank().rank).offset_ns if (self.all_ranks and self.analysis.cross) else 0
            # Other ranks are shown on the current rank's timeline through their offsets.
            w = Window(self.window.start_ns + ref_off - off, self.window.end_ns + ref_off - off)
            mine = self.indexes[r.rank].lanes(w, cells=max(self.query_one(Timeline).size.width - 20, 10), ops=not self.all_ranks)
            if self.all_ranks:  # ranks stacked: each one's phase lanes, so that they fit one screen
                mine = [lane for lane in mine if lane.title == "CPU phases" or lane.gpu_phases]
            lanes.append((r.rank, [self._shift(lane, off - ref_off) for lane in mine]))
        self.query_one(Timeline).set_view(self.window, lanes)
        cyc = f"cycle {self.cycle}" if self.cycle is not None else "no cycles"
        self.query_one("#status", Static).update(
            f"rank {self.current_rank().rank}{' (all ranks)' if self.all_ranks else ''}  {cyc}  window {format_duration(self.window.span)}  "
            f"[dim]n/p cycle  w worst  +/- zoom  ←/→ pan  ? help[/dim]\n"
            "[dim]a phase's lower half: its CPU timer[/dim] [red]under[/red] [dim]or[/dim] [magenta]over[/magenta] [dim](click: details)[/dim]"
        )

    @staticmethod
    def _shift(lane, delta: int):
        if delta == 0:
            return lane
        from dataclasses import replace

        return replace(lane, segments=tuple(replace(s, start_ns=s.start_ns + delta, end_ns=s.end_ns + delta) for s in lane.segments))

    def action_tab(self, tab: str) -> None:
        if tab == "diff" and self.diff_loader is None:
            return
        self.query_one("#tabs", TabbedContent).active = tab
        focus = {"timeline": "#timeline-view", "overview": "#overview-table", "cycles": "#cycles-table", "detail": "#detail-box", "diff": "#diff-table"}.get(tab)
        if focus:
            self.query_one(focus).focus()

    def action_cycle(self, step: int) -> None:
        if not self.analysis_ready():
            return
        ids = self.cycle_ids()
        if not ids:
            self.notify("this rank has no cycles", severity="warning")
            return
        cur = ids.index(self.cycle) if self.cycle in ids else 0
        nxt = cur + step
        if not 0 <= nxt < len(ids):
            self.notify(f"already at the {'last' if step > 0 else 'first'} cycle ({ids[cur]})", severity="warning")
            return
        self.open_cycle(ids[nxt])

    def action_worst(self) -> None:
        r = self.current_rank()
        if not self.analysis_ready() or r is None:
            return
        from tracerecon.api import worst_cycle

        c = worst_cycle(r)
        if c is None:
            # (a rank with no cycles at all is said as n and p say it: "no cycle misses" read as
            # "the timers are right")
            self.notify("this rank has no cycles" if not self.cycle_ids() else "no cycle's CPU timers miss the GPU (nothing to go to)", severity="warning")
        else:
            self.open_cycle(c)
            self.notify(f"cycle {c}: the CPU timers miss the GPU by the most here")

    def action_goto(self) -> None:
        if not self.analysis_ready():
            return

        def go(value: str) -> None:
            try:
                number = int(value.strip())  # '²' is a digit to str.isdigit, not to int()
            except ValueError:
                number = None
            if number is not None and number in self.cycle_ids():
                self.open_cycle(number)
            elif value:
                self.notify(f"no cycle {one_line(value)}", severity="warning", markup=False)

        self.push_screen(AskScreen("cycle number"), go)

    def action_zoom(self, factor: float) -> None:
        if self.window is not None:
            self.window = self.window.zoom(factor, within=self._extent())
            self.redraw()

    def _extent(self) -> Window | None:
        """The current rank's whole trace: the widest the timeline zooms out to."""
        r = self.current_rank()
        return self.indexes[r.rank].extent() if r is not None else None

    @on(Timeline.Zoom)
    def mouse_zoom(self, event: Timeline.Zoom) -> None:
        if self.window is not None:
            self.window = self.window.zoom(event.factor, event.center, within=self._extent())
            self.redraw()

    def action_pan(self, fraction: float) -> None:
        if self.window is not None and self.query_one("#tabs", TabbedContent).active == "timeline":
            self.window = self.window.pan(fraction)
            self.redraw()

    def action_reset(self) -> None:
        self.reset_window()

    def action_next_rank(self) -> None:
        if not self.analysis_ready():
            return
        if len(self.analysis.ranks) == 1:
            self.notify("this trace has one rank", markup=False)
        else:
            self.rank_pos = (self.rank_pos + 1) % len(self.analysis.ranks)
            ids = self.cycle_ids()
            if self.cycle not in ids:  # the same cycle where this rank has it, else its first (or none)
                self.cycle = ids[0] if ids else None
            self.reset_window()

    def action_all_ranks(self) -> None:
        if not self.analysis_ready():  # (toggled unseen, the timeline then opened stacked)
            return
        self.all_ranks = not self.all_ranks
        self.zoom_target = None
        self.redraw()

    @on(Timeline.SegmentClicked)
    def segment_clicked(self, event: Timeline.SegmentClicked) -> None:
        s = event.segment
        text = f"r{event.rank} {one_line(s.label)}: {format_duration(s.end_ns - s.start_ns)} at +{format_duration(s.start_ns - self.window.start_ns)}"
        # enter opens the phase the segment belongs to: a phase's own, the phase a wait waited
        # for, the phase that launched a GPU op (none: nothing to open)
        self.zoom_target = None
        if s.ops > 1:
            # A run of ops merged at this zoom, maybe of several phases: enter zooms in to it.
            text += "  (enter: zoom in to its ops)"
            target, self.zoom_target = None, Window(s.start_ns, max(s.end_ns, s.start_ns + 1))
        elif s.verdict:
            text += f"  verdict {s.verdict}: {VERDICT_MEANING.get(s.verdict, '')}"
            target = s.ref
        elif s.kind == "sync":
            target = s.ref
            if s.ref is not None:
                text += "  (its wait ended with that phase's GPU work; enter: that phase)"
        else:
            r = next(x for x in self.analysis.ranks if x.rank == event.rank)
            target = r.gpu_ops["phase_id"][s.ref].as_py() if s.ref is not None and "phase_id" in r.gpu_ops.column_names else None
            text += "  (enter: the phase that launched it)" if target is not None else "  (launched in no phase)"
        self.detail_target = (event.rank, target, None) if target is not None else None
        self.query_one("#status", Static).update(Text(text))

    def on_key(self, event) -> None:
        # Only an enter the timeline itself gets: not one that answers a prompt (g, /) above it.
        if event.key == "enter" and isinstance(self.focused, Timeline) and self.query_one("#tabs", TabbedContent).active == "timeline":
            if self.zoom_target is not None:
                run, self.zoom_target = self.zoom_target, None
                margin = run.span // 20  # a little of each side, so the run's first and last ops show whole
                target = Window(run.start_ns - margin, run.end_ns + margin)
                if self.window is not None and target.span > self.window.span * ZOOM_IN:
                    # A run as wide as the window (ops back to back, still merged there): in at
                    # least as far as `+` goes, about its middle, so that enter never stays put.
                    middle = ((run.start_ns + run.end_ns) / 2 - self.window.start_ns) / self.window.span
                    target = self.window.zoom(ZOOM_IN, min(max(middle, 0.0), 1.0), within=self._extent())
                self.window = target
                self.redraw()
                return
            if not self.detail_target:
                self.notify("nothing to open: click a phase, a wait or a GPU op launched in a phase first", severity="warning")
                return
            rank, pid, _ = self.detail_target
            self.show_detail(rank, pid, None)

    # --- detail ---------------------------------------------------------------------------
    def show_detail(self, rank: int, phase_id: int | None, phase: str | None) -> None:
        if not self.analysis_ready():
            return
        from tracerecon.api import phase_detail

        r = next(x for x in self.analysis.ranks if x.rank == rank)
        d = phase_detail(r, phase_id=phase_id, phase=phase)
        t = Text()
        t.append(f"rank {rank}  {one_line(d.title)}\n\n", style="bold")
        t.append(one_line(d.explanation) + "\n\n", style="italic")
        per = "this instance" if phase_id is not None else "median per cycle"
        t.append(f"CPU {fmt_ms(d.cpu_ms)} ms   GPU {fmt_ms(d.gpu_ms)} ms   span {fmt_ms(d.gpu_span_ms)} ms   busy {fmt_ms(d.gpu_busy_ms)} ms   ({per})\n")
        t.append(f"launches: {d.eager_launches} eager, {d.graph_launches} CUDA-graph replays   streams: {one_line(', '.join(d.streams)) or '-'}\n")
        if d.comm_ms or d.wait_ms:
            t.append(f"communication kernels {fmt_ms(d.comm_ms)} ms, of which waiting for other ranks {fmt_ms(d.wait_ms)} ms\n")
        t.append("verdicts (causes: " + ", ".join(f"{c} {n}" for c, n in d.causes.items()) + "): ")
        for i, (v, n) in enumerate(d.verdicts.items()):
            t.append((", " if i else "") + f"{v} {n}", style=VERDICT_STYLE.get(v, ""))
        t.append("\n\nkernels by total time\n", style="bold")
        for k in d.kernels[:15]:
            t.append(f"  {k.total_ms:10.3f} ms  {k.count:6d}x  {one_line(k.name)[:90]}\n")
        if d.syncs:
            t.append("\nblocking calls\n", style="bold")
            for line in d.syncs:
                t.append(f"  {one_line(line)}\n")
        self.query_one("#detail-body", Static).update(t)
        self.action_tab("detail")

    # --- search, help ---------------------------------------------------------------------
    def action_search(self) -> None:
        if not self.analysis_ready():
            return
        from tracerecon.tui.timeline_model import find_next

        def go(value: str) -> None:
            if not value:
                return
            r = self.current_rank()
            after = self.window.start_ns + self.window.span // 2 if self.window else -1
            hit = find_next(self.indexes[r.rank], value, after, r.ranges)
            if hit is None:
                self.notify(f"nothing named like {value!r} on rank {r.rank}", severity="warning", markup=False)
                return
            pad = max((hit.end_ns - hit.start_ns) * 2, 20_000)
            self.window = Window(hit.start_ns - pad, hit.end_ns + pad)
            self.redraw()
            self.action_tab("timeline")
            self.query_one("#status", Static).update(Text(f"found {one_line(hit.label)[:80]}: {format_duration(hit.end_ns - hit.start_ns)}"))

        self.push_screen(AskScreen("kernel or range name"), go)

    def action_help(self) -> None:
        self.push_screen(HelpScreen())
