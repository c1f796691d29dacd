"""The real Textual app driven by Pilot, plus snapshots at 80x24 and 160x48."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("textual")

from textual.widgets import DataTable, Static, TabbedContent  # noqa: E402

from conftest import DEMO2, H200, PUBLIC, SAMPLES, run_cli  # noqa: E402
from tracerecon.analysis.config import PhaseConfig  # noqa: E402
from tracerecon.analysis.summary import summarize_phases  # noqa: E402
from tracerecon.api import load  # noqa: E402
from tracerecon.tui.app import HelpScreen, TraceReconApp  # noqa: E402
from tracerecon.tui.timeline_widget import Timeline  # noqa: E402

GPU_BOUND = str(H200 / "eagle_gpu_bound.sqlite")


def make_app(*paths):
    return TraceReconApp(lambda: load(list(paths), PhaseConfig()), source=", ".join(paths))


async def ready(pilot):
    # The load runs on a thread of its own (not a Textual worker): wait for it, then for the
    # messages it posted to be handled.
    await pilot.app.workers.wait_for_complete()
    for _ in range(1200):
        if pilot.app.load_ended.is_set():
            break
        await pilot.pause(0.05)
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


def status_text(app) -> str:
    return str(app.query_one("#status", Static).render())


async def test_overview_shows_the_reports_numbers():
    app = make_app(GPU_BOUND)
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        table = app.query_one("#overview-table", DataTable)
        r0 = load([GPU_BOUND], PhaseConfig()).ranks[0]
        want = summarize_phases(r0.phases, PhaseConfig().labels(), r0.cycles)
        assert table.row_count == 3
        for i, p in enumerate(want):
            row = [str(c) for c in table.get_row_at(i)]
            assert row[1] == p.phase and row[3] == f"{p.cpu_ms_median:.3f}" and row[4] == f"{p.gpu_ms_median:.3f}"
        notes = str(app.query_one("#overview-notes", Static).render())
        assert "rank 0: most misleading: draft_re_extend" in notes


async def test_cycle_navigation_zoom_and_worst_cycle():
    app = make_app(GPU_BOUND)
    async with app.run_test(size=(120, 36)) as pilot:
        await ready(pilot)
        await pilot.press("2")
        assert app.query_one("#tabs", TabbedContent).active == "timeline"
        assert app.cycle == 1  # cycle 0 is the trace's warm-up cycle (the report leaves it out): not where it opens
        await pilot.press("n", "n", "p")
        assert app.cycle == 2
        span = app.window.span
        await pilot.press("plus")
        assert app.window.span == span // 2
        await pilot.press("minus", "minus")
        assert app.window.span == (span // 2) * 4
        await pilot.press("0")
        assert app.window.span == span
        await pilot.press("right")
        assert app.window.start_ns > app.query_one(Timeline).window.start_ns - 1
        # worst disagreement: by the CUDA-event ground truth, the cycle whose CPU timers miss most
        gt = [json.loads(line) for line in open(H200 / "eagle_gpu_bound.gt.jsonl")]
        worst = max(gt, key=lambda g: sum(abs(g["cpu_ms"][p] - g["gpu_event_ms"][p]) for p in ("draft", "verify", "draft_re_extend")))
        await pilot.press("w")
        assert app.cycle == worst["cycle"]
        await pilot.press("g")
        await pilot.press("1", "2", "enter")
        assert app.cycle == 12


async def test_cycles_table_sorts_and_opens_the_timeline():
    app = make_app(GPU_BOUND)
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await pilot.press("3")
        table = app.query_one("#cycles-table", DataTable)
        assert table.row_count == 24
        col = list(table.columns.keys()).index("|error| ms")
        # WHEN `s` is pressed once per column up to |error| ms (the cursor is a row: `s` steps
        # the sort along the columns, largest first) THEN the cycles are by that column
        for _ in range(col + 1):
            await pilot.press("s")
        values = [float(table.get_row_at(i)[col]) for i in range(table.row_count)]
        assert values == sorted(values, reverse=True)
        table.move_cursor(row=5)
        await pilot.press("enter")
        assert app.query_one("#tabs", TabbedContent).active == "timeline"
        assert app.cycle == table.get_row_at(5)[1]


async def test_cycles_fill_in_batches_after_the_first_screen_and_sort_whole():
    # GIVEN an app that adds cycle rows 5 at a time, a second apart (24 cycles: 5 batches)
    app = make_app(GPU_BOUND)
    app.CYCLE_ROWS_PER_BATCH, app.CYCLE_BATCH_GAP_S = 5, 1.0
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.app.workers.wait_for_complete()
        table = app.query_one("#cycles-table", DataTable)
        overview = app.query_one("#overview-table", DataTable)
        while not table.row_count:
            await pilot.pause(0.01)
        # WHEN the first batch is in THEN the overview was there first, the other cycles to come
        assert overview.row_count == 3 and table.row_count == 5
        await pilot.press("3")
        col = list(table.columns.keys()).index("cycle")
        # WHEN sorting by cycle (`s` once per column up to it) before the last batch THEN every
        # cycle is sorted, once each
        for _ in range(col + 1):
            await pilot.press("s")
        values = [table.get_row_at(i)[col] for i in range(table.row_count)]
        assert values == sorted(set(values), reverse=True) and len(values) == 24
        await pilot.pause(1.3)  # the batch that was still scheduled adds nothing twice
        assert table.row_count == 24


async def test_the_overview_shows_from_the_report_before_the_analysis_loads():
    # GIVEN an app whose report is at hand and whose analysis is held back
    import threading

    from tracerecon.api import report

    release = threading.Event()
    rep = report([GPU_BOUND], PhaseConfig())

    def slow_load():
        release.wait(10)
        return load([GPU_BOUND], PhaseConfig())

    app = TraceReconApp(slow_load, source=GPU_BOUND, report_loader=lambda: rep)
    async with app.run_test(size=(160, 48)) as pilot:
        table = app.query_one("#overview-table", DataTable)
        while not table.row_count:
            await pilot.pause(0.01)
        # WHEN the overview is up THEN it holds the report's numbers, and timeline keys wait
        assert [str(c) for c in table.get_row_at(1)][1:5] == ["verify", "23", f"{rep.ranks[0].phases[1].cpu_ms_median:.3f}", f"{rep.ranks[0].phases[1].gpu_ms_median:.3f}"]
        assert app.analysis is None
        await pilot.press("n")
        assert any("still loading" in str(n.message) for n in app._notifications)
        # (all of them: `a` once stacked the ranks unseen, and the timeline then opened stacked)
        await pilot.press("a")
        assert not app.all_ranks and sum("still loading" in str(n.message) for n in app._notifications) == 2
        # WHEN the analysis arrives THEN the timeline works
        release.set()
        await app.workers.wait_for_complete()
        await pilot.pause()
        await pilot.press("2", "n")
        assert app.analysis is not None and app.cycle is not None


async def test_a_failure_after_the_overview_is_shown_and_run_b_failing_keeps_run_a():
    # GIVEN the overview from a report, then an analysis that cannot load
    from tracerecon.api import report
    from tracerecon.errors import BadTraceError

    rep = report([GPU_BOUND], PhaseConfig())

    def broken():
        raise BadTraceError("x.sqlite: corrupt or truncated export")

    app = TraceReconApp(broken, source="x", report_loader=lambda: rep)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        # THEN the overview stays and says why the timeline is missing; timeline keys say it too
        assert app.query_one("#overview-table", DataTable).row_count == 3
        assert "cannot load the timeline: x.sqlite: corrupt" in str(app.query_one("#overview-notes", Static).render())
        await pilot.press("n")
        assert any("cannot load the timeline" in str(n.message) for n in app._notifications)
    # GIVEN run B of a Diff tab failing WHEN loaded THEN run A is browsable and the Diff tab says why
    app = TraceReconApp(lambda: load([GPU_BOUND], PhaseConfig()), source=GPU_BOUND, diff_loader=broken)
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        assert app.analysis is not None
        assert "cannot compare: x.sqlite: corrupt" in str(app.query_one("#diff-notes", Static).render())
        await pilot.press("2", "n")
        assert app.cycle is not None


@pytest.mark.parametrize("delay", [0.0, 0.05, 0.1, 0.2])
async def test_closing_while_cycle_rows_are_still_coming_is_clean(delay):
    # GIVEN the cycles table still to fill (its first timer 0.1 s after the analysis, then batches)
    # WHEN the app closes around then THEN no timer fires into a torn-down screen
    import time

    from tracerecon.api import report

    rep = report([GPU_BOUND], PhaseConfig())
    app = TraceReconApp(lambda: load([GPU_BOUND], PhaseConfig()), source=GPU_BOUND, report_loader=lambda: rep)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        time.sleep(delay)  # the timers come due while the loop is blocked, then fire at teardown


async def test_phase_detail_explains_the_disagreement():
    app = make_app(GPU_BOUND)
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await pilot.press("down", "down", "enter")
        assert app.query_one("#tabs", TabbedContent).active == "detail"
        body = str(app.query_one("#detail-body", Static).render())
        assert "draft_re_extend (all 23 instances; 1 range(s) of warm-up, incomplete or empty cycles or in no cycle left out)" in body  # as report: 23 cycles
        assert "over-reports" in body and "verify's GPU work" in body
        assert "blocking calls" in body and "kernels by total time" in body


async def test_search_jumps_to_a_kernel():
    app = make_app(GPU_BOUND)
    async with app.run_test(size=(120, 36)) as pilot:
        await ready(pilot)
        await pilot.press("slash")
        await pilot.press(*"nvjet", "enter")
        await pilot.pause()
        assert "found nvjet" in status_text(app)
        lanes = app.query_one(Timeline).lanes_by_rank[0][1]
        assert any("nvjet" in s.label for lane in lanes for s in lane.segments)


async def test_search_finds_a_kernel_by_its_namespace():
    # GIVEN the real trace of DeepEP-named kernels (nsys shows `dispatch`, `combine`)
    app = make_app(str(SAMPLES / "probes_h200" / "comm_names" / "deepep_names.sqlite.xz"))
    async with app.run_test(size=(120, 36)) as pilot:
        await ready(pilot)
        # WHEN searching for a namespace only the demangled names hold
        await pilot.press("slash")
        await pilot.press(*"intranode::comb", "enter")
        await pilot.pause()
        # THEN the timeline jumps to a combine kernel
        assert "found combine" in status_text(app), status_text(app)


async def test_click_selects_a_segment_and_help_opens():
    app = make_app(GPU_BOUND)
    async with app.run_test(size=(120, 36)) as pilot:
        await ready(pilot)
        await pilot.press("2", "n")
        tl = app.query_one(Timeline)
        # the CPU phases lane is row 1; click a third of the way in
        await pilot.click(Timeline, offset=(19 + (tl.size.width - 19) // 3, 1))
        assert tl.selected is not None and "verdict" in status_text(app)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)
        await pilot.press("q")
    assert app.return_code == 0 or app.return_code is None


async def test_all_ranks_stacked():
    app = make_app(str(DEMO2 / "nccl_skew"))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await pilot.press("2", "a")
        ranks = [r for r, _ in app.query_one(Timeline).lanes_by_rank]
        assert ranks == [0, 1]
        await pilot.press("r")
        assert app.current_rank().rank == 1
        notes = str(app.query_one("#overview-notes", Static).render())
        assert "straggler: rank 1" in notes


async def test_a_load_failure_with_nothing_to_browse_ends_the_app_with_the_failure_kept():
    # GIVEN an input that cannot load and no report to show meanwhile
    app = TraceReconApp(lambda: load(["/nonexistent.sqlite"], PhaseConfig()), source="x")
    async with app.run_test(size=(80, 24)) as pilot:
        # WHEN the load fails
        await app.workers.wait_for_complete()
        await pilot.pause()
    # THEN the app has ended by itself, no error of its own, the failure kept for the command
    assert app.return_code == 0 and "nonexistent" in str(app.load_failure)


def _ready_then(*keys):
    async def run_before(pilot):
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        if keys:
            await pilot.press(*keys)
            await pilot.pause()

    return run_before


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_snapshot_overview(snap_compare, size):
    assert snap_compare(make_app(GPU_BOUND), terminal_size=size, run_before=_ready_then())


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_snapshot_timeline(snap_compare, size):
    assert snap_compare(make_app(GPU_BOUND), terminal_size=size, run_before=_ready_then("2", "n"))


async def test_diff_tab_explains_graph_replay():
    from conftest import DEMO

    app = TraceReconApp(
        lambda: load([str(DEMO / "launch_bound")], PhaseConfig()), source="a",
        diff_loader=lambda: load([str(DEMO / "verify_graph")], PhaseConfig()),
    )
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await pilot.press("5")
        assert app.query_one("#tabs", TabbedContent).active == "diff"
        assert app.query_one("#diff-table", DataTable).row_count == 3
        assert "now a CUDA-graph replay" in str(app.query_one("#diff-notes", Static).render())


def test_ruler_ticks_are_round_offsets_with_units():
    from tracerecon.tui.timeline_window import Window, ruler_ticks

    # 2.87 ms over 80 cells, about 6 ticks: every 500 us, at column floor(80 * k * 0.5 / 2.87)
    assert ruler_ticks(Window(123_456, 123_456 + 2_870_000), 80, 6) == [(13, "500us"), (27, "1ms"), (41, "1.5ms"), (55, "2ms"), (69, "2.5ms")]


def test_rasterize_covers_partial_cells_in_eighths():
    from tracerecon.tui.timeline_window import Segment, Window
    from tracerecon.tui.timeline_widget import rasterize

    # a segment from 25% to 62.5% of a 4-cell window: cell 1 full, cell 2 half
    cells = rasterize((Segment(250, 625, "k", "kernel"),), Window(0, 1000), 4)
    assert [round(c, 3) for c, _ in cells] == [0.0, 1.0, 0.5, 0.0]


async def test_a_clicked_wait_lights_up_the_phase_it_waited_for():
    app = make_app(GPU_BOUND)
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await pilot.press("2", "n")
        tl = app.query_one(Timeline)
        rows = [lane.title for _, lane in tl._rows]
        waits_row = rows.index("CPU waits") + 1
        lane = tl._rows[waits_row - 1][1]
        longest = max(lane.segments, key=lambda s: s.end_ns - s.start_ns)
        width = tl.size.width - 19
        x = 19 + int(((longest.start_ns + longest.end_ns) / 2 - app.window.start_ns) / app.window.span * width)
        await pilot.click(Timeline, offset=(x, waits_row))
        assert tl.selected == longest and longest.ref is not None
        gpu_lane = next(lane for _, lane in tl._rows if lane.title == "GPU phases")
        linked = [s for s in gpu_lane.segments if tl._linked(s, gpu_lane)]
        assert [s.label for s in linked] == ["verify"]
        assert "verify" in status_text(app)


async def test_s_steps_the_overview_sort_along_its_columns():
    app = make_app(GPU_BOUND)
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        table = app.query_one("#overview-table", DataTable)
        table.focus()
        for _ in range(5):  # to the GPU ms column (the fifth)
            await pilot.press("s")
        await pilot.pause()
        assert any("sorted by GPU ms" in str(n.message) for n in app._notifications)
        gpu = [float(str(table.get_row_at(i)[4])) for i in range(table.row_count)]
        assert gpu == sorted(gpu) or gpu == sorted(gpu, reverse=True)
        assert [str(table.get_row_at(i)[1]) for i in range(table.row_count)] != ["draft", "verify", "draft_re_extend"]  # not by rank any more


def test_view_of_an_input_that_fails_to_load_exits_like_report(tmp_path):
    # GIVEN a compressed export cut short (its header reads, its load fails) and a terminal (Textual
    # draws on the terminal's stderr)
    import lzma
    import os
    import pty
    import select
    import subprocess
    import sys
    import time
    from pathlib import Path

    bad = tmp_path / "cut.sqlite.xz"
    bad.write_bytes(lzma.compress(Path(GPU_BOUND).read_bytes(), preset=0)[:200_000])
    exe = str(Path(sys.executable).parent / "tracerecon")
    master, slave = pty.openpty()
    env = dict(os.environ, TERM="xterm-256color", TRACERECON_NO_CACHE="1")
    proc = subprocess.Popen([exe, "view", str(bad)], stdin=slave, stdout=slave, stderr=slave, env=env)
    os.close(slave)

    def read_until(done, seconds: float) -> bytes:
        got, deadline = b"", time.monotonic() + seconds
        while not done(got) and time.monotonic() < deadline:
            if select.select([master], [], [], 0.2)[0]:
                try:
                    got += os.read(master, 65536)
                except OSError:  # the program ended and closed the terminal
                    break
        return got

    try:
        # WHEN viewed (no key pressed)
        screen = read_until(lambda b: proc.poll() is not None, 60)
        proc.wait(timeout=30)
        after = read_until(lambda b: False, 2)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    # THEN the command ends by itself as `report` does: exit 2, and the same one line last
    report = run_cli("report", str(bad))
    assert proc.returncode == report.returncode == 2
    last = (screen + after).decode(errors="replace").replace("\r", "").rstrip("\n").rsplit("\n", 1)[-1]
    assert last.endswith(report.stderr.strip()), last[-300:]


@pytest.mark.parametrize("typed", ["--5", "\u00b2", "abc"])
async def test_going_to_a_cycle_that_is_no_number_says_so(typed):
    # GIVEN the app on the README's trace WHEN `g` is answered with something int() refuses
    app = make_app(GPU_BOUND)
    async with app.run_test(size=(120, 36)) as pilot:
        await ready(pilot)
        await pilot.press("2")
        was = app.cycle
        await pilot.press("g", *typed, "enter")
        await pilot.pause()
        # THEN the app is still up and on the cycle it was on (a crash would end the test here)
        assert app.is_running and app.cycle == was


async def test_the_cycles_tab_sums_a_phase_that_runs_several_times_a_cycle(tmp_path):
    # GIVEN cycles with three draft ranges each (CPU 100, 50, 20 us; kernels 80, 40, 10 us on one
    # stream, each done before the next draft begins) and a verify
    from nsys_factory import FakeTrace

    U = 1000
    t = FakeTrace()
    for c in range(3):
        b = c * 1000
        t.range(f"cycle {c}", b * U, (b + 900) * U)
        s = b
        for dur, k in ((100, 80), (50, 40), (20, 10)):
            t.range("draft", s * U, (s + dur) * U)
            t.kernel(t.call("cudaLaunchKernel", (s + 1) * U, (s + 2) * U), (s + 3) * U, (s + 3 + k) * U)
            s += dur + 10
        t.range("verify", s * U, (s + 300) * U)
        t.kernel(t.call("cudaLaunchKernel", (s + 1) * U, (s + 2) * U), (s + 3) * U, (s + 250) * U)
    path = str(t.write(tmp_path / "t.sqlite"))
    app = make_app(path)
    # WHEN its cycles tab is shown
    async with app.run_test(size=(200, 40)) as pilot:
        await ready(pilot)
        await pilot.press("3")
        await pilot.pause(0.5)
        table = app.query_one("#cycles-table", DataTable)
        cols = [str(c.label) for c in table.columns.values()]
        row = table.get_row_at(0)
        # THEN draft's cells hold the three instances together, as the phases table sums them
        (r,) = load([path], PhaseConfig()).ranks
        drafts = [p for p in r.phases.to_pylist() if p["cycle"] == row[1] and p["phase"] == "draft"]
        assert len(drafts) == 3
        assert float(row[cols.index("draft CPU")]) == round(sum(p["cpu_ns"] for p in drafts) / 1e6, 3) == 0.17
        assert row[cols.index("draft CPU")] == "0.170"  # three decimals, as everywhere (a DataTable shows floats to two)
        assert float(row[cols.index("draft GPU")]) == round(sum(p["gpu_ns"] for p in drafts) / 1e6, 3)


async def test_worst_cycle_where_no_timer_misses_says_so(tmp_path):
    # GIVEN cycles whose phases' CPU timers read what the GPU read (error 0 everywhere)
    from nsys_factory import FakeTrace

    U = 1000
    t = FakeTrace()
    for c in range(3):
        b = c * 1000
        t.cycle(c, b * U, (b + 100) * U, (b + 200) * U)
        t.kernel(t.call("cudaLaunchKernel", (b + 1) * U, (b + 2) * U), (b + 2) * U, (b + 50) * U)
        t.kernel(t.call("cudaLaunchKernel", (b + 101) * U, (b + 102) * U), (b + 102) * U, (b + 150) * U)
    path = str(t.write(tmp_path / "t.sqlite"))
    app = make_app(path)
    async with app.run_test(size=(120, 36)) as pilot:
        await ready(pilot)
        assert {p["error_ns"] for p in app.analysis.ranks[0].phases.to_pylist()} == {0}
        first = app.cycle
        # WHEN `w` is pressed THEN it stays where it was and says there is no worst cycle
        await pilot.press("2", "w")
        await pilot.pause()
        assert app.cycle == first
        assert any("no cycle's CPU timers miss the GPU" in str(n.message) for n in app._notifications)


async def test_worst_cycle_on_a_rank_with_no_cycles_says_it_has_none(tmp_path):
    # GIVEN a trace whose ranges are no phase (no cycles at all)
    from nsys_factory import FakeTrace

    U = 1000
    t = FakeTrace()
    t.range("step", 0, 100 * U)
    t.kernel(t.call("cudaLaunchKernel", 1 * U, 2 * U), 2 * U, 50 * U)
    app = make_app(str(t.write(tmp_path / "t.sqlite")))
    async with app.run_test(size=(120, 36)) as pilot:
        await ready(pilot)
        assert app.analysis.ranks[0].cycles.num_rows == 0
        # WHEN `w` is pressed THEN it says the rank has no cycles, as `n` does (it had said no
        # cycle's timers miss the GPU: the timers right)
        await pilot.press("2", "w")
        await pilot.pause()
        said = [str(n.message) for n in app._notifications]
        assert "this rank has no cycles" in said and not any("miss the GPU" in m for m in said), said


async def test_the_overview_fits_its_terminal_and_follows_each_resize():
    # GIVEN two ranks whose labels carry a cause's own share ("agree 19/30: launch_bound 13/30"),
    # their overview 101 columns wide with span and busy, 85 without, 72 with the labels on two
    # lines (cells padded a column either side, two for the scrollbar)
    from tracerecon.present import verdict_cause_label

    app = make_app(str(SAMPLES / "demo_shapes_h200x2" / "nccl_skew_phases"))
    async with app.run_test(size=(120, 30)) as pilot:
        await ready(pilot)
        want = [verdict_cause_label(p) for r in app.report.ranks for p in r.phases]
        assert any(": " in w and len(w) > 30 for w in want)
        # WHEN the terminal is resized, wider and narrower in turn
        for width, span, split in ((120, True, False), (80, False, True), (99, False, False), (100, False, False), (103, True, False),
                                   (80, False, True), (140, True, False)):
            await pilot.resize_terminal(width, 30)
            await pilot.pause()
            await pilot.pause()
            t = app.query_one("#overview-table")
            labels = [str(t.get_row_at(i)[-1]) for i in range(t.row_count)]
            # THEN each time the layout is the first that fits: span and busy while they fit, then
            # without them, then each label on two lines at its ": " (at 80 one line had been cut:
            # "agree 19/30: launch_bound 1"; and a resize had laid it out for the width before)
            assert ("span" in [c.label.plain for c in t.columns.values()], labels == [w.replace(": ", ":\n", 1) for w in want]) == (span, split), width
            assert [label.replace(":\n", ": ") for label in labels] == want
            assert t.virtual_size.width <= width, (width, t.virtual_size.width)


async def test_the_diff_tab_says_what_tracerecon_diff_says_under_its_table():
    # GIVEN run A of two ranks (NCCL) against run B of one
    a_path, b_path = str(DEMO2 / "nccl_gpu_bound"), GPU_BOUND
    app = TraceReconApp(lambda: load([a_path], PhaseConfig()), source="a", diff_loader=lambda: load([b_path], PhaseConfig()))
    async with app.run_test(size=(200, 60)) as pilot:
        await ready(pilot)
        await pilot.press("5")
        await pilot.pause()
        shown = str(app.query_one("#diff-notes", Static).render())
    # THEN every line `tracerecon diff` prints under its table is in the tab, the rank only A
    # has among them
    import os

    res = run_cli("diff", a_path, b_path, env={**os.environ, "COLUMNS": "400"})
    assert res.returncode == 0, res.stderr
    under_table = [ln.strip() for ln in res.stdout.splitlines() if ln.startswith(("  cycle", "  rank"))]
    assert under_table and any("ranks on one side only: rank 1 in A alone (not compared)" in ln for ln in under_table)
    assert all(ln in shown.replace("\n", " ") or ln in shown for ln in under_table), (under_table, shown)


def _segment_x(tl, app, seg) -> int:
    """The column of a segment's middle on the timeline (after its lane titles)."""
    tw = tl._title_width
    width = tl.size.width - tw - 1
    return tw + 1 + int(((seg.start_ns + seg.end_ns) / 2 - app.window.start_ns) / app.window.span * width)


async def test_a_phase_whose_timer_misses_shows_its_verdict_in_the_cell():
    # GIVEN the README trace, where draft_re_extend's timer over-reports and verify's under-reports
    app = make_app(GPU_BOUND)
    async with app.run_test(size=(120, 36)) as pilot:
        await ready(pilot)
        await pilot.press("2", "n")
        tl = app.query_one(Timeline)
        text = tl.render()
        # WHEN the timeline is drawn THEN a full cell of the CPU phases lane is the upper half
        # block, the phase's colour above and the verdict's (magenta over, red under) below
        row = text.plain.split("\n").index(next(ln for ln in text.plain.split("\n") if ln.startswith("r0 CPU phases")))
        start = sum(len(ln) + 1 for ln in text.plain.split("\n")[:row])
        line = text.plain.split("\n")[row]
        backgrounds = {str(span.style.bgcolor.name) for span in text.spans
                       if start <= span.start < start + len(line) and text.plain[span.start] == "▀" and span.style.bgcolor is not None}
        assert {"magenta", "red"} <= backgrounds
        # and the legend under the timeline says so
        assert "lower half" in status_text(app) and "under" in status_text(app) and "over" in status_text(app)


async def test_enter_after_clicking_a_kernel_opens_the_phase_that_launched_it():
    app = make_app(GPU_BOUND)
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await pilot.press("2", "n")
        tl = app.query_one(Timeline)
        # GIVEN a click on a phase (draft), then on a kernel of another phase
        cpu_row = next(i for i, (_, lane) in enumerate(tl._rows) if lane.title == "CPU phases") + 1
        draft = next(s for s in tl._rows[cpu_row - 1][1].segments if s.label == "draft")
        await pilot.click(Timeline, offset=(_segment_x(tl, app, draft), cpu_row))
        stream_row = next(i for i, (_, lane) in enumerate(tl._rows) if lane.title.startswith("GPU0 stream")) + 1
        r = app.analysis.ranks[0]
        phase_of = r.gpu_ops["phase_id"].to_pylist()
        names = r.phases["phase"].to_pylist()
        kernel = max((s for s in tl._rows[stream_row - 1][1].segments if phase_of[s.ref] is not None and names[phase_of[s.ref]] != "draft"),
                     key=lambda s: s.end_ns - s.start_ns)
        await pilot.click(Timeline, offset=(_segment_x(tl, app, kernel), stream_row))
        assert tl.selected == kernel
        # WHEN enter is pressed THEN the detail is the kernel's launching phase, not draft
        await pilot.press("enter")
        assert app.query_one("#tabs", TabbedContent).active == "detail"
        body = str(app.query_one("#detail-body", Static).render())
        assert f"{names[phase_of[kernel.ref]]} (cycle" in body


async def _whole_trace_runs(pilot, app):
    """The timeline zoomed out to the whole trace: its widget, the screen row of GPU0's first
    stream, and a function giving the widest merged run of ops there now."""
    await ready(pilot)
    await pilot.press("2", "n", "-", "-", "-", "-", "-", "-", "-", "-")
    tl = app.query_one(Timeline)
    stream_row = next(i for i, (_, lane) in enumerate(tl._rows) if lane.title.startswith("GPU0 stream")) + 1
    return tl, stream_row, lambda: max((s for s in tl._rows[stream_row - 1][1].segments if s.ops > 1), key=lambda s: s.end_ns - s.start_ns)


async def test_enter_on_a_merged_run_of_gpu_ops_zooms_in_to_it(monkeypatch):
    # (ops merge into runs past MAX_OP_SEGMENTS in a window: 20,000, more than this trace holds)
    monkeypatch.setattr("tracerecon.tui.timeline_model.MAX_OP_SEGMENTS", 50)
    app = make_app(GPU_BOUND)
    async with app.run_test(size=(160, 48)) as pilot:
        # GIVEN the whole trace on the timeline, where a stream's ops merge into runs
        tl, stream_row, widest_run = await _whole_trace_runs(pilot, app)
        run = widest_run()
        assert run.label == f"{run.ops} GPU ops (zoom in for each)"
        # WHEN the run is clicked and enter pressed
        await pilot.click(Timeline, offset=(_segment_x(tl, app, run), stream_row))
        assert "enter: zoom in to its ops" in status_text(app)
        await pilot.press("enter")
        # THEN the timeline shows that run's span (and 5 % of it each side), no phase detail opens
        # (its ops may belong to several phases), and the run's ops are drawn apart again
        assert app.query_one("#tabs", TabbedContent).active == "timeline"
        margin = (run.end_ns - run.start_ns) // 20
        assert (app.window.start_ns, app.window.end_ns) == (run.start_ns - margin, run.end_ns + margin)
        segments = [s for s in tl._rows[stream_row - 1][1].segments if run.start_ns <= s.start_ns and s.end_ns <= run.end_ns]
        assert len(segments) > 1 and sum(s.ops for s in segments) == run.ops


async def test_a_clicked_run_is_forgotten_when_the_cycle_changes_and_enter_always_zooms_in(monkeypatch):
    monkeypatch.setattr("tracerecon.tui.timeline_model.MAX_OP_SEGMENTS", 50)
    app = make_app(GPU_BOUND)
    async with app.run_test(size=(160, 48)) as pilot:
        tl, stream_row, widest_run = await _whole_trace_runs(pilot, app)
        # GIVEN a merged run clicked, then the next cycle opened
        await pilot.click(Timeline, offset=(_segment_x(tl, app, widest_run()), stream_row))
        await pilot.press("n")
        cycle_window = (app.window.start_ns, app.window.end_ns)
        # WHEN enter is pressed THEN the old run is not zoomed to: the cycle's window stays
        await pilot.press("enter")
        assert (app.window.start_ns, app.window.end_ns) == cycle_window
    # and GIVEN a run as wide as the window (ops back to back stay merged at any zoom past the
    # limit): each enter zooms in at least as far as `+`
    monkeypatch.setattr("tracerecon.tui.timeline_model.MAX_OP_SEGMENTS", 1)
    app = make_app(GPU_BOUND)
    async with app.run_test(size=(160, 48)) as pilot:
        tl, stream_row, widest_run = await _whole_trace_runs(pilot, app)
        for _ in range(2):
            before = app.window.span
            await pilot.click(Timeline, offset=(_segment_x(tl, app, widest_run()), stream_row))
            await pilot.press("enter")
            assert app.window.span <= before * 0.5 + 1


async def test_enter_that_answers_the_go_to_prompt_only_goes_to_the_cycle():
    app = make_app(GPU_BOUND)
    async with app.run_test(size=(120, 36)) as pilot:
        await ready(pilot)
        await pilot.press("2")
        notified = []
        app.notify = lambda message, **kw: notified.append(message)
        # WHEN `g 5 enter` on the timeline, nothing selected
        await pilot.press("g", "5", "enter")
        await pilot.pause()
        # THEN cycle 5 opens and the enter is not also taken as "open the selected phase"
        assert app.cycle == 5 and app.query_one("#tabs", TabbedContent).active == "timeline"
        assert not any("click" in str(m) for m in notified), notified


async def test_worst_cycle_is_one_the_report_counts():
    # GIVEN SGLang's overlap run, whose warm-up cycle's timers miss the most (the report leaves it out)
    run = SAMPLES / "engines_h200" / "sglang_overlap"
    (r,) = load([str(run)], PhaseConfig()).ranks
    warm = {c for c, w in zip(r.cycles["cycle"].to_pylist(), r.cycles["warmup"].to_pylist()) if w}
    assert warm
    app = TraceReconApp(lambda: load([str(run)], PhaseConfig()), source=str(run))
    async with app.run_test(size=(120, 36)) as pilot:
        await ready(pilot)
        await pilot.press("2", "w")
        # THEN `w` goes to a counted cycle: the one whose phases' |CPU - GPU| sum most
        steady = [p for p in r.phases.to_pylist() if p["cycle"] is not None and p["cycle"] not in warm]
        totals: dict = {}
        for p in steady:
            totals[p["cycle"]] = totals.get(p["cycle"], 0) + abs(p["error_ns"] or 0)
        assert app.cycle not in warm and app.cycle == max(totals, key=totals.get)


async def test_zooming_out_stops_at_the_whole_trace():
    app = make_app(GPU_BOUND)
    async with app.run_test(size=(120, 36)) as pilot:
        await ready(pilot)
        await pilot.press("2", *["minus"] * 30)
        r = app.analysis.ranks[0]
        # THEN the window is the trace: from its first phase or op to its last end, no wider
        first = min(r.phases["cpu_start_ns"].to_pylist() + r.gpu_ops["start_ns"].to_pylist())
        last = max(r.phases["cpu_end_ns"].to_pylist() + r.gpu_ops["end_ns"].to_pylist() + r.syncs["end_ns"].to_pylist())
        assert (app.window.start_ns, app.window.end_ns) == (first, last)


async def test_ranks_stacked_beyond_the_screen_say_what_is_not_shown():
    # GIVEN two ranks stacked (2 ranks x 2 phase lanes)
    app = make_app(str(DEMO2 / "nccl_skew"))
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(pilot)
        await pilot.press("2", "a")
        tl = app.query_one(Timeline)
        # THEN each rank shows its phase lanes
        assert [(r, lane.title) for r, lane in tl._rows] == [(0, "CPU phases"), (0, "GPU phases"), (1, "CPU phases"), (1, "GPU phases")]
        # WHEN the widget has room for three rows under its ruler only
        tl.styles.height = 4
        await pilot.pause()
        text = tl.render().plain
        # THEN rank 0's two lanes are drawn, and the last row says that rank 1's two are not
        assert len(tl._rows) == 2 and "+2 lanes not shown (rank 1)" in text


async def test_the_overview_fits_80_columns():
    app = make_app(GPU_BOUND)
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(pilot)
        t = app.query_one("#overview-table", DataTable)
        # THEN no column is cut: verdict and cause in one column, span and busy in the detail
        assert t.virtual_size.width <= t.size.width
        assert [str(c.label) for c in t.columns.values()] == ["rank", "phase", "n", "CPU ms", "GPU ms", "CPU-GPU", "verdict: cause"]
        assert "over: absorbed_wait" in [str(t.get_row_at(i)[-1]) for i in range(t.row_count)]


async def test_narrower_than_80_columns_the_overview_shows_the_gpu_time_first():
    # GIVEN two ranks on a 50-column terminal, where no layout of the overview fits
    app = make_app(str(DEMO2 / "nccl_skew"))
    async with app.run_test(size=(50, 24)) as pilot:
        await ready(pilot)
        t = app.query_one("#overview-table", DataTable)
        # THEN the GPU time, the error and the verdict come before the CPU timer and n (the
        # table scrolls sideways; before, the screen's 50 columns ended inside GPU ms)
        assert [str(c.label) for c in t.columns.values()] == ["rank", "phase", "GPU ms", "CPU-GPU", "verdict: cause", "CPU ms", "n"]
        row = [str(c) for c in t.get_row_at(0)]
        # (the same cells, moved: rank 0's draft as `report` has it)
        assert row[:2] == ["0", "draft"] and (row[2], row[5], row[6]) == ("0.141", "0.058", "30")
        # WHEN the terminal grows to 80 columns THEN the usual order is back
        await pilot.resize_terminal(80, 24)
        await pilot.pause(0.3)
        assert [str(c.label) for c in t.columns.values()] == ["rank", "phase", "n", "CPU ms", "GPU ms", "CPU-GPU", "verdict: cause"]


async def test_tab_on_a_short_terminal_keeps_the_tab_bar_and_the_table_header():
    # GIVEN two ranks on an 80x14 terminal: the overview's table and notes do not fit
    app = make_app(str(DEMO2 / "nccl_skew"))
    async with app.run_test(size=(80, 14)) as pilot:
        await ready(pilot)
        # WHEN tab moves to the notes
        await pilot.press("tab")
        await pilot.pause(0.3)
        lines = [s.text for s in app.screen._compositor.render_strips()]
        # THEN the notes scroll in their own box: the tab bar and the table's header stay (the
        # whole screen had scrolled, leaving rows of numbers without their column names)
        assert "Overview" in lines[1] and "Timeline" in lines[1]
        assert lines[3].split()[:4] == ["rank", "phase", "n", "CPU"]


async def test_the_overview_counts_the_warnings_it_has_no_room_for():
    # GIVEN an analysis with five warnings
    from dataclasses import replace

    analysis = replace(load([GPU_BOUND], PhaseConfig()), warnings=tuple(f"warning number {i}" for i in range(5)))
    app = TraceReconApp(lambda: analysis, source=GPU_BOUND)
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        notes = str(app.query_one("#overview-notes", Static).render())
    # WHEN the overview is up THEN it shows the first three and says how many more there are
    assert [f"warning number {i}" in notes for i in range(5)] == [True, True, True, False, False]
    assert "and 2 more warnings: printed when view closes" in notes


@pytest.mark.skipif(not (PUBLIC / "GindaChen__nsys-ai" / "mfu_2gpu_before.sqlite").is_file(), reason="public traces not found (set TRACERECON_SHARED)")
async def test_an_empty_overview_shows_why_first():
    # GIVEN a public trace with no range named as a default phase and several other warnings
    # (the one saying why the table is empty was folded into "and 2 more warnings")
    trace = str(PUBLIC / "GindaChen__nsys-ai" / "mfu_2gpu_before.sqlite")
    app = make_app(trace)
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        notes = str(app.query_one("#overview-notes", Static).render())
    # WHEN the overview is up THEN the first warning it shows is that one, with its --phase hint
    assert notes.split("warning: ", 1)[1].startswith("no range named as a phase"), notes[:400]
    assert "the likely phases here: --phase" in notes


async def test_an_incomplete_cycle_is_marked_in_the_cycles_table_and_said_on_the_overview(tmp_path):
    from test_incomplete_cycles import cut_in_cycle

    # GIVEN a capture of 4 cycles that ended inside the last, and one that holds only that cycle
    path = str(cut_in_cycle(4).write(tmp_path / "t.sqlite"))
    only = str(cut_in_cycle(1).write(tmp_path / "one.sqlite"))
    for trace, rows, said in ((path, 4, "cycles: 3 "), (only, 1, "rank 0 (GPU 0): cycles: none counted")):
        app = TraceReconApp(lambda trace=trace: load([trace], PhaseConfig(phases=("draft", "verify"), skip_cycles=0)), source=trace)
        async with app.run_test(size=(160, 48)) as pilot:
            await ready(pilot)
            # WHEN the overview and the cycles tab are shown
            notes = str(app.query_one("#overview-notes", Static).render())
            await pilot.press("3")
            table = app.query_one("#cycles-table", DataTable)
            # THEN the last cycle's row says it is not in the report, and the overview says how many
            # cycles it counts and that one incomplete cycle was left out
            assert table.row_count == rows
            cols = [str(c.label) for c in table.columns.values()]
            last = [str(c) for c in table.get_row_at(rows - 1)]
            assert last[cols.index("left out")] == "incomplete", last
            # (beside the cycle, where 80 columns show it: it had ended the row, past every phase)
            assert cols.index("left out") == cols.index("cycle") + 1
            assert said in notes and "1 incomplete cycle(s) left out (not whole in the trace)" in " ".join(notes.split()), notes


async def test_phases_read_on_two_gpus_get_a_gpu_phase_lane_each(tmp_path):
    from nsys_factory import FakeTrace

    # GIVEN one thread driving two GPUs, 3 cycles (b = 1000c us): draft [b, b+100] with a kernel
    # on GPU 1 (b+12..b+250), verify [b+100, b+300] with one on GPU 0 (b+110..b+290): draft reads
    # b..b+250 on GPU 1 and verify b+100..b+300 on GPU 0, overlapping
    u = 1000
    t = FakeTrace()
    for c in range(3):
        b = 1000 * c
        t.range(f"cycle {c}", b * u, (b + 300) * u)
        t.range("draft", b * u, (b + 100) * u)
        t.range("verify", (b + 100) * u, (b + 300) * u)
        t.kernel(t.call("cudaLaunchKernel", (b + 10) * u, (b + 12) * u), (b + 12) * u, (b + 250) * u, device=1, stream=21)
        t.kernel(t.call("cudaLaunchKernel", (b + 105) * u, (b + 107) * u), (b + 110) * u, (b + 290) * u, device=0, stream=7)
    path = str(t.write(tmp_path / "two.sqlite"))
    app = TraceReconApp(lambda: load([path], PhaseConfig(phases=("draft", "verify"))), source=path)
    async with app.run_test(size=(120, 36)) as pilot:
        await ready(pilot)
        await pilot.press("2")
        tl = app.query_one(Timeline)
        # THEN the GPU phases are drawn on a lane per GPU, each holding the phases read there
        lanes = {lane.title: lane for _, lane in tl._rows if lane.gpu_phases}
        assert sorted(lanes) == ["GPU0 phases", "GPU1 phases"]
        assert {s.label for s in lanes["GPU0 phases"].segments} == {"verify"} and {s.label for s in lanes["GPU1 phases"].segments} == {"draft"}
        # and stacked ranks keep both lanes
        await pilot.press("a")
        assert [lane.title for _, lane in tl._rows] == ["CPU phases", "GPU0 phases", "GPU1 phases"]


async def test_the_overview_keeps_every_phase_row_beside_many_notes_and_the_detail_scrolls_by_keyboard():
    # GIVEN a two-rank run whose overview notes (rank lines, most misleading phases, the
    #      straggler) run to 15 lines at 60 columns, under a table of six phase rows
    app = make_app(str(DEMO2 / "nccl_skew"))
    async with app.run_test(size=(60, 20)) as pilot:
        await ready(pilot)
        table = app.query_one("#overview-table", DataTable)
        notes = app.query_one("#overview-notes-box")
        # WHEN the overview opens at 60x20
        # THEN every phase row is on screen (the notes once took the whole pane: no row left)
        assert table.row_count == 6 and table.size.height >= table.row_count + 1
        # AND the notes that do not fit scroll, reached with tab
        assert notes.max_scroll_y > 0
        await pilot.press("tab", "end")
        await pilot.pause()
        assert app.focused is notes and notes.scroll_y == notes.max_scroll_y
        # WHEN a phase's detail opens (enter on its row) at 40x12
        await pilot.resize_terminal(40, 12)
        table.focus()
        await pilot.press("enter")
        await pilot.pause()
        box = app.query_one("#detail-box")
        # THEN its scroll has the focus: the keyboard reaches the kernels and blocking calls below
        assert app.focused is box and box.max_scroll_y > 0
        await pilot.press("end")
        await pilot.pause()
        assert box.scroll_y == box.max_scroll_y > 0


async def test_the_prompts_fit_a_40_column_terminal():
    # GIVEN the app at 40x12 WHEN the search prompt opens THEN it lies within the screen (it
    #      was 60 columns wide, its right border and end cut off)
    app = make_app(GPU_BOUND)
    async with app.run_test(size=(40, 12)) as pilot:
        await ready(pilot)
        await pilot.press("slash")
        await pilot.pause()
        box = app.screen.query_one("#ask").region
        assert box.x >= 0 and box.right <= 40, box


async def test_a_resize_across_100_columns_keeps_the_overviews_sort_and_cursor():
    # GIVEN a two-rank overview at 120 columns sorted by CPU ms (s four times), the cursor on
    #       its fourth row
    app = make_app(str(DEMO2 / "nccl_skew"))
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        t = app.query_one("#overview-table", DataTable)
        await pilot.press("s", "s", "s", "s")
        t.move_cursor(row=3)
        await pilot.pause()
        order = [str(t.coordinate_to_cell_key((i, 0)).row_key.value) for i in range(t.row_count)]
        under = order[3]
        cpu = [float(str(t.get_row(k)[3])) for k in order]
        assert cpu == sorted(cpu, reverse=True)
        # WHEN the terminal narrows below 100 columns (the table is rebuilt without span and busy)
        await pilot.resize_terminal(90, 30)
        await pilot.pause(0.3)
        # THEN the rows keep their order, the cursor its row, and the next `s` sorts by the
        #      column after CPU ms
        assert [str(t.coordinate_to_cell_key((i, 0)).row_key.value) for i in range(t.row_count)] == order
        assert str(t.coordinate_to_cell_key(t.cursor_coordinate).row_key.value) == under
        await pilot.press("s")
        assert [c.label.plain for c in t.columns.values()][app.sort_column["#overview-table"]] == "GPU ms"


def test_view_with_a_dask_address_the_cache_answered_for_says_the_cluster_was_not_asked(tmp_path):
    # GIVEN a trace reported once (its report and analysis cached) and a terminal
    import os
    import pty
    import select
    import subprocess
    import sys
    import time
    from pathlib import Path

    env = dict(os.environ, TERM="xterm-256color", TRACERECON_CACHE_DIR=str(tmp_path / "cache"))
    assert run_cli("report", GPU_BOUND, env=env).returncode == 0
    exe = str(Path(sys.executable).parent / "tracerecon")
    master, slave = pty.openpty()
    # WHEN viewed with --dask at an address where no scheduler listens, and closed once loaded
    proc = subprocess.Popen([exe, "view", GPU_BOUND, "--dask", "tcp://127.0.0.1:9"], stdin=slave, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    got = b""

    def read_for(seconds: float, done=lambda b: False) -> None:
        nonlocal got
        deadline = time.monotonic() + seconds
        while not done(got) and time.monotonic() < deadline:
            if select.select([master], [], [], 0.2)[0]:
                try:
                    got += os.read(master, 65536)
                except OSError:
                    break

    try:
        read_for(60, lambda b: b"draft_re_extend" in b)
        read_for(3)  # (the analysis, from the cache, loads behind the cached overview)
        os.write(master, b"q")
        read_for(30, lambda b: proc.poll() is not None)
        proc.wait(timeout=30)
        read_for(1)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    # THEN it ends well and says, once the screen is given back, that the cluster was not asked
    # (the cached report's warnings alone had been said: the address passed in silence)
    text = got.decode(errors="replace")
    assert proc.returncode == 0, text[-2000:]
    assert "--dask tcp://127.0.0.1:9: not contacted: the cache held the result (--no-cache runs it on the cluster)" in text, text[-2000:]


async def test_a_rank_per_gpu_thread_is_named_by_its_loop_thread_on_the_overview(tmp_path):
    from test_rank_roles import FakeTrace as Trace, thread_loop

    # GIVEN process 10 running a loop on thread 11 (GPU 0) and one on thread 12 (GPU 1): a rank per GPU
    t = Trace()
    thread_loop(t, 11, 0, 300)
    thread_loop(t, 12, 1, 600)
    trace = str(t.write(tmp_path / "run.sqlite"))
    app = TraceReconApp(lambda: load([trace], PhaseConfig(phases=("fwd", "sample"), skip_cycles=0)), source=trace)
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        notes = " ".join(str(app.query_one("#overview-notes", Static).render()).split())
    # WHEN the overview is up THEN each rank's first note names its GPU and its loop thread, as
    # `report`'s header does (before: its GPU only, both ranks of pid 10)
    assert "rank 0 (GPU 0, thread 11): " in notes and "rank 1 (GPU 1, thread 12): " in notes, notes[:400]
