"""Names from the trace (NVTX ranges, phases, kernels, files) are text, never markup: a range
named ``load [/models/llama]`` or ``[rank0] verify`` is printed as it is, by the CLI and the
terminal UI, and is no internal error (rich and Textual read ``[...]`` as style tags)."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import run_cli
from nsys_factory import FakeTrace
from tracerecon.analysis.config import PhaseConfig
from tracerecon.api import load

U = 1000
VERIFY = "[rank0] verify"
LOAD = "load [/models/llama]"


def bracketed_trace(tmp_path):
    """Three cycles of draft / '[rank0] verify' (one kernel each) and a 'load [/models/llama]'
    range before them."""
    t = FakeTrace()
    t.range(LOAD, 0, 500 * U)
    for c in range(3):
        b = 1000 * (c + 1)
        t.range(f"cycle {c}", b * U, (b + 300) * U)
        t.range("draft", b * U, (b + 100) * U)
        t.range(VERIFY, (b + 100) * U, (b + 300) * U)
        t.kernel(t.call("cudaLaunchKernel", (b + 10) * U, (b + 12) * U), (b + 20) * U, (b + 90) * U, stream=7)
        t.kernel(t.call("cudaLaunchKernel", (b + 110) * U, (b + 112) * U), (b + 120) * U, (b + 250) * U, stream=7)
    return t.write(tmp_path / "brackets [1].sqlite")


def test_the_cli_prints_bracketed_names_as_they_are(tmp_path):
    # GIVEN a trace whose range, phase and file names hold square brackets
    path = str(bracketed_trace(tmp_path))
    # WHEN its ranges are listed and it is reported with those phases, one given a bracketed label
    wide = {**os.environ, "COLUMNS": "400"}
    ranges = run_cli("ranges", path, "--no-cache", env=wide)
    report = run_cli("report", path, "--no-cache", "--phase", "draft", "--phase", "[/x]=glob:*verify", env=wide)
    # THEN both succeed and show the names as written
    assert ranges.returncode == 0, ranges.stderr
    assert LOAD in ranges.stdout and VERIFY in ranges.stdout
    assert report.returncode == 0, report.stderr
    assert "[/x]" in report.stdout and "brackets [1].sqlite" in report.stdout


@pytest.mark.parametrize("tab", ["overview", "cycles"])
async def test_the_terminal_ui_shows_bracketed_phase_names_as_they_are(tmp_path, tab):
    pytest.importorskip("textual")
    from textual.widgets import DataTable
    from textual.widgets._data_table import default_cell_formatter

    from tracerecon.tui.app import TraceReconApp

    # GIVEN the bracketed trace with 'draft' and '[rank0] verify' as phases
    path = bracketed_trace(tmp_path)
    config = PhaseConfig(phases=("draft", VERIFY))
    app = TraceReconApp(lambda: load([path], config), source=str(path))
    # WHEN the app shows its overview, or its cycles table
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        if tab == "overview":
            table = app.query_one("#overview-table", DataTable)
            # (as the table draws a cell: its formatter reads a str as markup)
            shown = [default_cell_formatter(table.get_row_at(i)[1]).plain for i in range(table.row_count)]
            # THEN the phase column holds the names as written
            assert shown == ["draft", VERIFY]
        else:
            await pilot.press("3")
            await pilot.pause()
            table = app.query_one("#cycles-table", DataTable)
            # THEN the per-phase columns are headed by the names as written
            assert f"{VERIFY} GPU" in [str(c.label) for c in table.columns.values()]
            assert table.row_count == 3


def test_control_characters_in_names_reach_the_terminal_as_escapes(tmp_path):
    # GIVEN ranges named with a newline and terminal escape sequences, none a known phase
    t = FakeTrace()
    for c in range(3):
        b = 1000 * c
        t.range("dr\x1baft", b * U, (b + 100) * U)
        t.range("loop\n\x1b[31mstep", (b + 100) * U, (b + 300) * U)
        t.kernel(t.call("cudaLaunchKernel", (b + 10) * U, (b + 12) * U), (b + 20) * U, (b + 90) * U, stream=7)
        t.kernel(t.call("cudaLaunchKernel", (b + 110) * U, (b + 112) * U), (b + 120) * U, (b + 290) * U, stream=7)
    path = t.write(tmp_path / "t.sqlite")
    # WHEN reported (the warning suggests them as phases)
    res = run_cli("report", "--no-cache", str(path))
    # THEN every line on stderr is one of tracerecon's, with no control character in it
    lines = res.stderr.splitlines()
    assert lines and all(ln.startswith("tracerecon: ") for ln in lines), lines
    assert not any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in res.stderr.replace("\n", "")), res.stderr
    # (suggested as a pattern that writes them as escapes: pasted, it matches the range)
    assert "=re:^loop\\x0a\\x1b\\[31mstep$" in res.stderr


def test_names_that_hold_emoji_codes_are_printed_as_they_are(tmp_path):
    # GIVEN a trace (in a file named with ':cd:') whose phases are named with ':a:' and ':smile:',
    #       which rich would print as emoji
    t = FakeTrace().phase_cycles(["step:a:forward", "draft:smile:"])
    path = str(t.write(tmp_path / "run:cd:.sqlite"))
    # WHEN reported with those phases
    wide = {**os.environ, "COLUMNS": "400"}
    report = run_cli("report", path, "--no-cache", "--phase", "step:a:forward", "--phase", "draft:smile:", env=wide)
    # THEN the names and the file name are printed as written
    assert report.returncode == 0, report.stderr
    assert "step:a:forward" in report.stdout and "draft:smile:" in report.stdout and "run:cd:.sqlite" in report.stdout, report.stdout


def _trace_named(path, first: str, second: str):
    return str(FakeTrace().phase_cycles([first, second]).write(path))


def test_control_characters_in_names_reach_stdout_as_escapes_in_tables_and_lines(tmp_path):
    # GIVEN phases named with escape sequences and a newline, in a file named with one
    path = _trace_named(tmp_path / "run\x1b[31m.sqlite", "\x1b[31mred", "a\nb")
    # WHEN reported with them as phases, and its ranges listed
    report = run_cli("report", path, "--no-cache", "--phase", "\x1b[31mred", "--phase", "a\nb")
    ranges = run_cli("ranges", path, "--no-cache")
    # THEN no control character reaches stdout: each is an escape, each row stays one line
    for res in (report, ranges):
        assert res.returncode == 0, res.stderr
        assert not any(ord(ch) < 0x20 and ch != "\n" for ch in res.stdout), repr(res.stdout)
        assert "\\x1b[31mred" in res.stdout and "a\\nb" in res.stdout and "run\\x1b[31m.sqlite" in res.stdout, res.stdout


@pytest.mark.parametrize("first, second", [("\x1b[31mred", "a\nb"), ("-x", "  "), ("ver\u200bify", "draft\u00a0x")],
                         ids=["control", "dash-and-blank", "invisible"])
def test_the_phases_suggested_for_odd_names_work_when_pasted(tmp_path, first, second):
    import shlex

    # GIVEN a trace whose phase ranges are named so that they cannot be typed as they are
    path = _trace_named(tmp_path / "t.sqlite", first, second)
    # WHEN reported without phases THEN the warning suggests --phase values
    res = run_cli("report", path, "--no-cache")
    hint = res.stderr.split("the likely phases here: ", 1)[1].split(" (`tracerecon ranges`", 1)[0]
    # THEN pasted into a shell they report both phases, three cycles each
    again = run_cli("report", "--json", path, "--no-cache", *shlex.split(hint))
    assert again.returncode == 0, again.stderr
    import json

    phases = json.loads(again.stdout)["ranks"][0]["phases"]
    assert len(phases) == 2 and all(p["n"] == 3 for p in phases), (hint, phases)


def test_the_plot_escapes_control_characters_and_says_missing_glyphs_once(tmp_path):
    pytest.importorskip("matplotlib")
    import xml.dom.minidom

    # GIVEN phases named with an escape sequence, and with characters the plot's font lacks
    path = _trace_named(tmp_path / "t.sqlite", "\x1b[31mred", "\u8349\u7a3f")
    out = tmp_path / "p.svg"
    # WHEN plotted with them as phases
    res = run_cli("plot", path, "--no-cache", "--phase", "\x1b[31mred", "--phase", "\u8349\u7a3f", "-o", str(out))
    # THEN the picture is valid XML with the name's escape drawn as text, and stderr holds one
    #      line of tracerecon's for the missing glyphs, no matplotlib warning
    assert res.returncode == 0, res.stderr
    xml.dom.minidom.parse(str(out))
    assert "\\x1b[31mred" in out.read_text()
    lines = res.stderr.splitlines()
    assert all(ln.startswith("tracerecon: ") for ln in lines) and sum("not in the plot's font" in ln for ln in lines) == 1, res.stderr


def test_text_shown_to_a_person_escapes_control_characters_and_undecodable_bytes():
    from tracerecon.json_text import one_line

    # GIVEN a file name with a byte that was no UTF-8, an escape sequence, a newline and a tab
    # THEN each is written as an escape (the byte as the JSON writes it)
    assert one_line("bad\udcffname \x1b[31m a\nb\tc") == "bad\\xffname \\x1b[31m a\\nb\\tc"


def test_text_shown_to_a_person_escapes_characters_that_show_as_nothing():
    from tracerecon.json_text import one_line

    # GIVEN names with a zero-width space, a no-break space, a right-to-left override and a tag
    #       character past the first plane, beside letters that are not ASCII
    # THEN each invisible one is written as its escape, the letters as they are
    assert one_line("ver\u200bify draft\u00a0x \u202eabc \U000e0001 caf\u00e9 \u8349") == (
        "ver\\u200bify draft\\u00a0x \\u202eabc \\U000e0001 caf\u00e9 \u8349")
    # (and the default-ignorable ones that are no format characters, private-use code points)
    assert one_line("a\u3164b\ufe0fc\u034fd\ue000") == "a\\u3164b\\ufe0fc\\u034fd\\ue000"


def test_a_warning_naming_a_very_long_range_is_cut_on_the_terminal_and_kept_whole_in_json(tmp_path):
    import json
    import shutil
    import sqlite3

    from conftest import H200
    from tracerecon.json_text import MESSAGE_CHARS

    # GIVEN the bundled EAGLE sample whose 'verify' ranges are renamed to a 40,006-character name
    #       (work queued between two phases is warned with the range that launched it: 'verify...')
    path = tmp_path / "long.sqlite"
    shutil.copy(H200 / "eagle_gpu_bound.sqlite", path)
    long_name = "verify" + "0123456789ABCDEF" * 2_500
    with sqlite3.connect(path) as con:
        con.execute("update NVTX_EVENTS set text = ? where text = 'verify'", (long_name,))
    # WHEN it is reported, as text and as JSON
    text = run_cli("report", str(path), "--no-cache")
    as_json = run_cli("report", str(path), "--no-cache", "--json")
    # THEN every stderr line stays within the message limit, the cut one saying how much it left
    #      out (the name's start and the warning's end kept), and the JSON keeps the warning whole
    assert text.returncode == 0 and as_json.returncode == 0, text.stderr
    lines = text.stderr.splitlines()
    cut = [line for line in lines if "characters left out]" in line]
    assert cut and all(len(line) <= len("tracerecon: ") + MESSAGE_CHARS + 60 for line in lines)
    assert "launched in the range 'verify0123456789ABCDEF" in cut[0]
    whole = [w for w in json.loads(as_json.stdout)["warnings"] if long_name in w]
    assert whole and all(w.endswith(c.split("]\u2026", 1)[1]) for w, c in zip(whole, cut))
    # (the number said: the whole message, "warning: " and the warning, less what was kept)
    assert f"[{len('warning: ' + whole[0]) - MESSAGE_CHARS:,} characters left out]" in cut[0]


def test_a_message_within_the_limit_is_shown_whole_and_a_longer_one_keeps_its_ends():
    from tracerecon.json_text import MESSAGE_CHARS, shown_message

    # GIVEN a message of exactly the limit and one of 10,000 characters
    at_limit = "a" * MESSAGE_CHARS
    longer = "S" + "x" * 9_998 + "E"
    # THEN the first is whole; the second keeps 2/3 of the limit from its start and 1/3 from its end
    assert shown_message(at_limit) == at_limit
    head, tail = MESSAGE_CHARS * 2 // 3, MESSAGE_CHARS - MESSAGE_CHARS * 2 // 3
    assert shown_message(longer) == longer[:head] + f"\u2026[{10_000 - head - tail:,} characters left out]\u2026" + longer[-tail:]
    # and a long one of zero-width spaces is cut between characters, each kept one written whole
    # as its escape, the count in the message's own characters (cut after escaping, one had been
    # split and the count was of escapes' characters)
    hidden = "\u200b" * 3_000
    assert shown_message(hidden) == "\\u200b" * head + f"\u2026[{3_000 - head - tail:,} characters left out]\u2026" + "\\u200b" * tail


def test_names_that_differ_by_an_invisible_character_are_told_apart_in_the_table(tmp_path):
    # GIVEN two phases named 'verify' and 'verify' with a zero-width space at its end
    path = _trace_named(tmp_path / "t.sqlite", "verify", "verify\u200b")
    # WHEN reported with both as phases
    wide = {**os.environ, "COLUMNS": "400"}
    res = run_cli("report", path, "--no-cache", "--phase", "verify", "--phase", "verify\u200b", env=wide)
    # THEN the table shows the second with its escape, and no zero-width space reaches stdout
    assert res.returncode == 0, res.stderr
    assert "verify\\u200b" in res.stdout and "\u200b" not in res.stdout, res.stdout


def test_a_very_long_name_takes_four_table_lines_and_stays_told_apart(tmp_path):
    # GIVEN two phases of 5,000-character names that differ only in their middle, and one short
    long_a = "step_" + "a" * 2500 + "X" + "a" * 2494
    long_b = "step_" + "a" * 2500 + "Y" + "a" * 2494
    path = str(FakeTrace().phase_cycles([long_a, long_b, "short"]).write(tmp_path / "t.sqlite"))
    # WHEN reported (80 columns) with them as phases, and its ranges listed
    narrow = {**os.environ, "COLUMNS": "80"}
    report = run_cli("report", path, "--no-cache", "--phase", long_a, "--phase", long_b, "--phase", "short", env=narrow)
    ranges = run_cli("ranges", path, "--no-cache", env=narrow)
    as_json = run_cli("report", "--json", path, "--no-cache", "--phase", long_a, "--phase", long_b, "--phase", "short")
    # THEN each table holds a few lines, not ~160 per name: the names cut in the middle, the
    #      second with a number, and the JSON keeps both names whole
    for res in (report, ranges):
        assert res.returncode == 0, res.stderr
        assert len(res.stdout.splitlines()) < 30, len(res.stdout.splitlines())
        assert "(2)" in res.stdout and "short" in res.stdout, res.stdout
    import json

    assert [p["phase"] for p in json.loads(as_json.stdout)["ranks"][0]["phases"]] == [long_a, long_b, "short"]


async def test_the_terminal_ui_shows_control_and_invisible_characters_as_escapes(tmp_path):
    pytest.importorskip("textual")
    from tracerecon.tui.app import TraceReconApp

    # GIVEN phases named with an escape sequence (which would recolour the terminal) and a
    #       right-to-left override (which would reorder the line), in a file named with an ESC
    red, rtl = "\x1b[31mred", "a\u202eb"
    path = _trace_named(tmp_path / "t\x1b[1m.sqlite", red, rtl)
    app = TraceReconApp(lambda: load([path], PhaseConfig(phases=(red, rtl))), source=str(path))
    # WHEN each tab is drawn
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        for key in "12341":
            await pilot.press(key)
            await pilot.pause()
            screen = app.export_screenshot()
            # THEN no control or invisible character reaches the screen: each is its escape
            assert "\x1b" not in screen and "\u202e" not in screen, key
            if key in "13":
                assert "\\x1b[31mred" in screen and "a\\u202eb" in screen, key


def test_the_phase_suggested_for_a_numbered_family_of_odd_names_works_when_pasted(tmp_path):
    import json
    import shlex

    # GIVEN phase ranges 'layer<TAB>1' and 'layer<TAB>2' (one family, numbered)
    path = _trace_named(tmp_path / "t.sqlite", "layer\t1", "layer\t2")
    # WHEN reported without phases THEN the warning suggests one pattern for the family
    res = run_cli("report", path, "--no-cache")
    hint = res.stderr.split("the likely phases here: ", 1)[1].split(" (`tracerecon ranges`", 1)[0]
    assert "\\d+" in hint, hint
    # THEN pasted into a shell it matches them (the tab as an escape the pattern reads)
    again = run_cli("report", "--json", path, "--no-cache", *shlex.split(hint))
    assert again.returncode == 0, again.stderr
    phases = json.loads(again.stdout)["ranks"][0]["phases"]
    assert [p["phase"] for p in phases] == ["layer"] and phases[0]["n"] == 3, (hint, phases)


_NAME_CHARS = st.text(alphabet=st.sampled_from(["a", "b", "_", " ", "\u200b", "\u8349", "\x1b", "\u2026", "(", "2", ")"]), max_size=40)


@given(st.lists(_NAME_CHARS, max_size=25), st.integers(12, 60))
def test_shown_names_keep_names_apart_within_the_width(names, width):
    from tracerecon.json_text import _cells, one_line, shown_names

    shown = shown_names(names, width)
    # each name shown one way; distinct names never alike; within the width in terminal cells;
    # a name that fits shown whole (unless another name is written alike: one of them numbered)
    by_name = dict(zip(names, shown))
    assert all(by_name[n] == s for n, s in zip(names, shown))
    assert len(set(by_name.values())) == len(by_name)
    assert all(_cells(s) <= width for s in shown), (names, width, shown)
    for n, s in zip(names, shown):
        if _cells(one_line(n)) <= width and sum(one_line(m) == one_line(n) for m in set(names)) == 1:
            assert s == one_line(n)


def test_a_wide_characters_name_is_cut_by_the_cells_it_takes():
    from tracerecon.json_text import _cells, shown_names

    # GIVEN a name of 120 wide (East Asian) characters, 240 cells WHEN shown in 32 cells
    (shown,) = shown_names(["\u8349\u7a3f" * 60], 32)
    # THEN it takes at most 32 cells, not 32 characters (64 cells)
    assert _cells(shown) <= 32 and shown.count("\u2026") == 1


def test_outputs_named_with_bytes_that_are_no_utf8_are_written_read_back_and_said(tmp_path):
    # GIVEN a trace, and output names holding a byte that is no UTF-8 (a Latin-1 file system's)
    path = _trace_named(tmp_path / "t.sqlite", "draft", "verify")
    out_dir = os.path.join(os.fsencode(tmp_path), b"run\xff")
    plot_file = os.path.join(os.fsencode(tmp_path), b"p\xff.svg")
    # WHEN exported as parquet (and plotted, where matplotlib is), and the export reported
    written = run_cli("export", path, "--no-cache", "--phase", "draft", "--phase", "verify", "-o", os.fsdecode(out_dir))
    again = run_cli("report", "--json", os.fsdecode(out_dir))
    # THEN each is written and said with the byte as an escape (Arrow's own paths took UTF-8 only:
    #      an internal error), and the export reads back
    assert written.returncode == 0, written.stderr
    assert "wrote " in written.stdout and "run\\xff" in written.stdout, written.stdout
    assert again.returncode == 0, again.stderr
    assert [p["phase"] for p in __import__("json").loads(again.stdout)["ranks"][0]["phases"]] == ["draft", "verify"]
    pytest.importorskip("matplotlib")
    drawn = run_cli("plot", path, "--no-cache", "--phase", "draft", "-o", os.fsdecode(plot_file))
    assert drawn.returncode == 0 and "p\\xff.svg" in drawn.stdout and os.path.exists(plot_file), drawn.stderr


async def test_the_terminal_ui_cuts_a_very_long_phase_name_in_its_tables(tmp_path):
    pytest.importorskip("textual")
    from textual.widgets import DataTable

    from tracerecon.json_text import _cells
    from tracerecon.tui.app import NAME_CELLS, TraceReconApp

    # GIVEN phases named with 5,000 characters (two differing only in their middle) and 'short'
    long_a, long_b = "step_" + "a" * 2500 + "X" + "a" * 2494, "step_" + "a" * 2500 + "Y" + "a" * 2494
    path = FakeTrace().phase_cycles([long_a, long_b, "short"]).write(tmp_path / "t.sqlite")
    app = TraceReconApp(lambda: load([path], PhaseConfig(phases=(long_a, long_b, "short"))), source=str(path))
    # WHEN the overview and the cycles table are shown
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        overview = app.query_one("#overview-table", DataTable)
        names = [str(overview.get_row_at(i)[1]) for i in range(overview.row_count)]
        await pilot.press("3")
        await pilot.pause()
        heads = [str(c.label) for c in app.query_one("#cycles-table", DataTable).columns.values()]
    # THEN each name takes at most NAME_CELLS cells, the two long ones told apart, 'short' whole
    assert len(names) == 3 and len(set(names)) == 3 and "short" in names, names
    assert all(_cells(n) <= NAME_CELLS for n in names), [len(n) for n in names]
    assert all(_cells(h) <= NAME_CELLS + len(" GPU") for h in heads) and "short GPU" in heads, heads


def test_names_that_differ_only_in_bytes_that_are_not_utf8_stay_two_names(tmp_path):
    import json
    import shutil
    import sqlite3

    from conftest import H200

    # GIVEN the bundled sample whose 24 verify ranges are renamed, by turns, to the bytes
    # b"v\xfe" and b"v\xff" (a program writing Latin-1 names: not UTF-8)
    path = tmp_path / "t.sqlite"
    shutil.copy(H200 / "eagle_gpu_bound.sqlite", path)
    con = sqlite3.connect(path)
    rows = [r[0] for r in con.execute("select rowid from NVTX_EVENTS where text = 'verify' order by start")]
    for i, r in enumerate(rows):
        con.execute("update NVTX_EVENTS set text = cast(? as text) where rowid = ?", (b"v\xff" if i % 2 else b"v\xfe", r))
    con.commit()
    con.close()
    # WHEN its ranges are listed
    res = run_cli("ranges", "--json", str(path))
    assert res.returncode == 0, res.stderr
    names = {r["name"]: r["n"] for r in json.loads(res.stdout)["ranks"][0]["ranges"]}
    # THEN each name is kept with its byte as an escape, 12 ranges each (replacement characters
    # had made one name 'v\ufffd' of 24)
    assert names.get("v\\xfe") == 12 and names.get("v\\xff") == 12, names
    assert "v\ufffd" not in names
