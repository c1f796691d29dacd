"""The timeline export (issue 13): Chrome trace-event JSON that ui.perfetto.dev opens, read back
with ``json`` and checked against the report's own tables (the native Perfetto format:
test_perfetto_export.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pytest

from conftest import H200, SAMPLES, run_cli
from tracerecon import api
from tracerecon.analysis.config import PhaseConfig
from tracerecon.api import load
from tracerecon.plot import plot_runs


@pytest.mark.parametrize("trace", [H200 / "eagle_gpu_bound.sqlite", SAMPLES / "demo_shapes_h200x2" / "nccl_skew_phases"], ids=lambda p: p.name)
def test_the_timeline_reads_back_with_the_reports_counts(tmp_path, trace):
    out = tmp_path / "t.json"
    res = run_cli("export", "--format", "chrome-json", str(trace), "-o", str(out))
    assert res.returncode == 0, res.stderr
    events = json.loads(out.read_text())
    analysis = api.load([trace])
    by = Counter((e.get("cat"), e["pid"] - 1) for e in events if e["ph"] == "X")  # pid = rank + 1
    for r in analysis.ranks:
        # THEN one CPU slice and one GPU slice per phase, one slice per GPU op and per wait
        assert by[("phase", r.rank)] == r.phases.num_rows
        assert by[("gpu_phase", r.rank)] == sum(1 for g in r.phases["gpu_ns"].to_pylist() if g is not None)
        assert by[("cycle", r.rank)] == r.cycles.num_rows
        assert by[("wait", r.rank)] == r.syncs.num_rows
        assert sum(v for (cat, pid), v in by.items() if pid == r.rank and cat in ("kernel", "memcpy", "memset", "graph")) == r.gpu_ops.num_rows
        # and their durations are the report's
        gpu = sorted(round(e["dur"], 3) for e in events if e["ph"] == "X" and e.get("cat") == "gpu_phase" and e["pid"] == r.rank + 1)
        assert gpu == sorted(round(g / 1000, 3) for g in r.phases["gpu_ns"].to_pylist() if g is not None)
    # every flow has both ends
    starts = Counter(e["id"] for e in events if e["ph"] == "s")
    ends = Counter(e["id"] for e in events if e["ph"] == "f")
    assert starts == ends and all(v == 1 for v in starts.values())
    assert_flows_run_forward(events)
    if len(analysis.ranks) > 1:
        assert sum(1 for e in events if e["ph"] == "s" and e.get("cat") == "collective") > 1000
        assert sum(1 for e in events if e["ph"] == "i" and e.get("cat") == "critical_path") == analysis.cross.critical_path.num_rows
    # slices on one track nest or follow each other, never cross (what the viewers need)
    tracks: dict = {}
    for e in events:
        if e["ph"] == "X" and e.get("cat") in ("phase", "cycle", "gpu_phase", "gpu_cycle"):
            tracks.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in tracks.values():
        spans.sort(key=lambda x: (x[0], -x[1]))
        stack = []
        for s, e in spans:
            while stack and stack[-1] <= s + 1e-3:
                stack.pop()
            assert not stack or e <= stack[-1] + 1e-3
            stack.append(e)


def test_one_process_driving_two_gpus_has_a_track_per_gpu_and_stream(tmp_path):
    # GIVEN one process launching on GPU 0 and GPU 1, each context's stream numbered 7, and a
    # second stream (13) on GPU 1 only: each cycle 2 kernels on GPU 0, 1 on each stream of GPU 1
    from nsys_factory import FakeTrace

    u, t = 1000, FakeTrace()
    for c in range(3):
        b = 1000 * c
        t.cycle(c, b * u, (b + 100) * u, (b + 400) * u)
        for k, (dev, stream) in enumerate([(0, 7), (0, 7), (1, 7), (1, 13)]):
            at = b + 10 + 100 * k
            t.kernel(t.call("cudaLaunchKernel", at * u, (at + 2) * u), (at + 5) * u, (at + 60) * u, device=dev, stream=stream, name=f"k{dev}_{stream}")
    out = tmp_path / "t.json"
    # WHEN exported as a timeline
    res = run_cli("export", "--format", "chrome-json", str(t.write(tmp_path / "t.sqlite")), "-o", str(out))
    assert res.returncode == 0, res.stderr
    events = json.loads(out.read_text())
    # THEN one track per (GPU, stream), named so, each with its own kernels only
    names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name" and e["args"]["name"].startswith("GPU ") and "stream" in e["args"]["name"]}
    on = Counter((names[e["tid"]], e["name"]) for e in events if e["ph"] == "X" and e.get("cat") == "kernel")
    assert sorted(names.values()) == ["GPU 0 stream 7", "GPU 1 stream 13", "GPU 1 stream 7"]
    assert on == {("GPU 0 stream 7", "k0_7"): 6, ("GPU 1 stream 7", "k1_7"): 3, ("GPU 1 stream 13", "k1_13"): 3}


def assert_flows_run_forward(events: list[dict]) -> None:
    """Every flow starts no later than it ends (Perfetto's JSON importer drops an end that comes
    before its start), its "s" inside a wait or GPU op and its "f" inside a GPU phase or GPU op
    of its own track (bound to the enclosing slice); a wait's flow leads to a GPU phase."""
    slices: dict = {}
    for e in events:
        if e["ph"] == "X":
            slices.setdefault((e["pid"], e["tid"]), []).append(e)

    def enclosing(ev):
        return [x for x in slices.get((ev["pid"], ev["tid"]), []) if x["ts"] <= ev["ts"] <= x["ts"] + x["dur"]]

    out = {e["id"]: e for e in events if e["ph"] == "s"}
    for f in (e for e in events if e["ph"] == "f"):
        s = out[f["id"]]
        assert s["ts"] <= f["ts"], (s, f)
        assert f.get("bp") == "e"
        src, dst = {x["cat"] for x in enclosing(s)}, {x["cat"] for x in enclosing(f)}
        if s["cat"] == "wait":
            assert "wait" in src and "gpu_phase" in dst, (s, f)
        else:
            assert src & {"kernel", "memcpy", "memset", "graph"} and dst & {"kernel", "memcpy", "memset", "graph"}, (s, f)


@pytest.mark.parametrize("args", [[str(H200 / "eagle_gpu_bound.sqlite")], [str(SAMPLES / "demo_shapes_h200x2" / "nccl_skew_phases")],
                                  [str(H200 / "eagle_gpu_bound.sqlite"), "--diff", str(H200 / "eagle_graph_verify.sqlite")]],
                         ids=["one-rank", "two-ranks", "diff"])
def test_plot_writes_a_picture(tmp_path, args):
    pytest.importorskip("matplotlib")
    out = tmp_path / "p.svg"
    res = run_cli("plot", *args, "-o", str(out))
    assert res.returncode == 0, res.stderr
    svg = out.read_text()
    assert svg.startswith("<?xml") and "GPU time per cycle" in svg and "CPU timer vs GPU time" in svg
    assert svg.count("rank 1") >= (1 if "nccl" in args[0] else 0)


def test_a_picture_named_only_by_its_suffix_is_written_in_that_format(tmp_path):
    # GIVEN an output whose whole name is its suffix (a hidden file: no extension to os.path)
    pytest.importorskip("matplotlib")
    for name, head in ((".svg", b"<?xml"), (".png", b"\x89PNG")):
        # WHEN plotted there
        res = run_cli("plot", str(H200 / "eagle_gpu_bound.sqlite"), "-o", str(tmp_path / name))
        # THEN the picture is written in that format (matplotlib read no format: exit 1)
        assert res.returncode == 0, res.stderr
        assert (tmp_path / name).read_bytes().startswith(head)


def test_plot_of_a_rank_without_phases_says_so_on_the_picture(tmp_path):
    # GIVEN the README's trace reported with a phase name it does not hold
    pytest.importorskip("matplotlib")
    out = tmp_path / "p.svg"
    # WHEN plotted
    res = run_cli("plot", str(H200 / "eagle_gpu_bound.sqlite"), "--phase", "nothing_here", "-o", str(out))
    # THEN the picture says it has no phases, and stderr holds only tracerecon's own lines
    assert res.returncode == 0, res.stderr
    assert "no phase ranges in this rank" in out.read_text()
    assert all(ln.startswith("tracerecon: ") for ln in res.stderr.splitlines()), res.stderr


def test_long_phase_names_are_cut_in_the_middle_on_the_picture(tmp_path):
    # GIVEN phases labelled with 77- and 92-character names (an engine's own scope names)
    pytest.importorskip("matplotlib")
    from tracerecon.json_text import shown_names
    from tracerecon.plot import NAME_CHARS

    long_draft = "draft_generation_step_for_eagle3_speculative_tokens_on_the_small_draft_model"
    long_verify = "model_forward_pass_with_speculative_decoding_verification_of_all_draft_tokens_and_kv_cache_update"
    out = tmp_path / "p.svg"
    # WHEN plotted
    res = run_cli("plot", str(H200 / "eagle_gpu_bound.sqlite"), "--phase", f"{long_draft}=draft", "--phase", f"{long_verify}=verify",
                  "--phase", "draft_re_extend", "-o", str(out))
    # THEN each is drawn as its first 15 and last 8 characters around an ellipsis (24 in all),
    # short names whole, and the full names nowhere on the picture
    assert res.returncode == 0, res.stderr
    assert shown_names([long_draft, long_verify, "draft_re_extend"], NAME_CHARS) == ["draft_generatio\u2026ft_model", "model_forward_p\u2026e_update", "draft_re_extend"]
    svg = out.read_text()
    assert "draft_generatio\u2026ft_model" in svg and long_draft not in svg and long_verify not in svg


def test_names_that_cut_alike_stay_apart():
    # GIVEN two long names that differ only in the middle
    from tracerecon.json_text import shown_names
    from tracerecon.plot import NAME_CHARS

    a, b = "prefill_attention_layer_" + "A" * 20 + "_kernel_x", "prefill_attention_layer_" + "B" * 20 + "_kernel_x"
    # WHEN cut
    # THEN the second gets a number, cut shorter to stay within the width, so the legend still
    # tells them apart
    assert shown_names([a, b], NAME_CHARS) == ["prefill_attenti\u2026kernel_x", "prefill_atte\u2026ernel_x (2)"]
    # (and a width under 4 is taken as 4: the first two characters, the ellipsis, the last one)
    assert shown_names(["abcdefgh"], width=0) == ["ab\u2026h"]


def test_plot_diff_reads_each_run_with_its_own_recorded_phases(tmp_path):
    # GIVEN two run directories whose run.json record different phase maps (SGLang's preset and vLLM's)
    pytest.importorskip("matplotlib")
    out = tmp_path / "p.svg"
    engines = SAMPLES / "engines_h200"
    # WHEN one is plotted with --diff the other
    res = run_cli("plot", str(engines / "sglang_overlap"), "--diff", str(engines / "vllm_v1"), "-o", str(out))
    # THEN B's phases are found as `diff` finds them: every panel has phases, no warning of none
    assert res.returncode == 0, res.stderr
    assert "no phase ranges" not in out.read_text() and "no phase ranges" not in res.stderr


def test_diff_with_plot_writes_the_picture_plot_diff_writes_and_keeps_its_json_alone_on_stdout(tmp_path):
    # GIVEN two runs of the README's engine (eager verify, graph verify)
    pytest.importorskip("matplotlib")
    a, b = str(H200 / "eagle_gpu_bound.sqlite"), str(H200 / "eagle_graph_verify.sqlite")
    # WHEN diffed with --plot, as tables and as JSON
    res = run_cli("diff", a, b, "--plot", str(tmp_path / "d.svg"))
    as_json = run_cli("diff", a, b, "--json", "--plot", str(tmp_path / "j.svg"))
    # THEN each writes the picture of both runs, A above B, as `plot A --diff B` draws it
    assert res.returncode == 0 and as_json.returncode == 0, res.stderr + as_json.stderr
    svg = (tmp_path / "d.svg").read_text()
    assert "A (eagle_gpu_bound.sqlite) rank 0" in svg and "B (eagle_graph_verify.sqlite) rank 0" in svg
    assert svg.index("A (eagle_gpu_bound.sqlite)") < svg.index("B (eagle_graph_verify.sqlite)")
    assert res.stdout.rstrip().endswith(f"wrote {tmp_path / 'd.svg'}") and "verify" in res.stdout
    # and with --json standard output is the document alone (the file's name on stderr)
    assert json.loads(as_json.stdout)["phases"] and f"wrote {tmp_path / 'j.svg'}" in as_json.stderr
    assert (tmp_path / "j.svg").read_text().startswith("<?xml")


def test_diff_refuses_a_picture_it_cannot_write_before_reading_a_trace(tmp_path):
    # GIVEN a --plot path with no picture suffix, and one that is an input
    a, b = str(H200 / "eagle_gpu_bound.sqlite"), str(H200 / "eagle_graph_verify.sqlite")
    for path in (str(tmp_path / "d.txt"), a):
        # WHEN diffed
        res = run_cli("diff", a, b, "--plot", path)
        # THEN one line, exit 2, no diff printed, nothing written
        assert res.returncode == 2 and res.stderr.count("\n") == 1 and res.stdout == "", res.stderr
    assert not (tmp_path / "d.txt").exists()


def test_a_plot_without_the_plot_extra_is_one_line_before_any_trace_is_read(tmp_path):
    # GIVEN an interpreter where matplotlib cannot be imported
    hide = "import sys; sys.modules['matplotlib'] = None; from tracerecon.cli import main; sys.exit(main(sys.argv[1:]))"
    a, b = str(H200 / "eagle_gpu_bound.sqlite"), str(H200 / "eagle_graph_verify.sqlite")
    for args in (["diff", a, b, "--plot", str(tmp_path / "d.svg")], ["plot", a, "-o", str(tmp_path / "p.svg")]):
        # WHEN asked for a picture
        res = subprocess.run([sys.executable, "-c", hide, *args], capture_output=True, text=True, timeout=300)
        # THEN one line naming the extra, exit 2, and no diff printed first
        assert res.returncode == 2 and res.stderr.count("\n") == 1 and "`plot` extra" in res.stderr, res.stderr
        assert res.stdout == ""


def test_unwritable_outputs_are_one_line_and_exit_2(tmp_path):
    for args in (["plot", str(H200 / "eagle_gpu_bound.sqlite"), "-o", str(tmp_path / "no" / "x.png")],
                 ["export", "--format", "chrome-json", str(H200 / "eagle_gpu_bound.sqlite"), "-o", str(tmp_path / "no" / "x.json")],
                 ["export", "--format", "perfetto", str(H200 / "eagle_gpu_bound.sqlite"), "-o", str(tmp_path / "no" / "x.pftrace")]):
        if args[0] == "plot":
            pytest.importorskip("matplotlib")
        if "perfetto" in args:
            pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
        res = run_cli(*args)
        assert res.returncode == 2 and res.stderr.count("\n") == 1 and "cannot write" in res.stderr, res.stderr


def test_without_format_a_timeline_files_name_says_which_one(tmp_path):
    # GIVEN export with no --format and -o ending in .json (the same for .pftrace: perfetto)
    out = tmp_path / "t.json"
    res = run_cli("export", str(H200 / "eagle_gpu_bound.sqlite"), "-o", str(out))
    # THEN it writes the Chrome trace-event JSON file, not a parquet folder named t.json
    assert res.returncode == 0, res.stderr
    assert out.is_file() and isinstance(json.loads(out.read_text()), list)
    # AND a name without such an ending is a parquet export folder, as before
    res = run_cli("export", str(H200 / "eagle_gpu_bound.sqlite"), "-o", str(tmp_path / "exp"))
    assert res.returncode == 0 and (tmp_path / "exp" / "manifest.json").is_file()


def test_a_format_asked_for_against_the_files_name_is_written_and_said(tmp_path):
    # GIVEN --format naming another kind of output than -o's ending (JSON in a .pftrace file, a
    # parquet folder named .json, both written without a word)
    cases = (("t.pftrace", "chrome-json", "is named like a perfetto file; writing a chrome-json timeline"),
             ("t.json", "parquet", "is named like a chrome-json file; writing a folder of parquet tables"))
    for name, fmt, said in cases:
        # WHEN exported THEN written as asked, with one warning saying so
        res = run_cli("export", str(H200 / "eagle_gpu_bound.sqlite"), "-o", str(tmp_path / name), "--format", fmt)
        assert res.returncode == 0 and res.stderr == f"tracerecon: warning: -o {tmp_path / name} {said}, as --format {fmt} asks\n", res.stderr
    assert isinstance(json.loads((tmp_path / "t.pftrace").read_text()), list) and (tmp_path / "t.json" / "manifest.json").is_file()
    # and a format that agrees with the name says nothing
    res = run_cli("export", str(H200 / "eagle_gpu_bound.sqlite"), "-o", str(tmp_path / "u.json"), "--format", "chrome-json")
    assert res.returncode == 0 and res.stderr == "", res.stderr


def test_gating_marks_land_on_the_cycles_a_later_capture_numbers_its_own_way(tmp_path):
    import sqlite3

    from nsys_factory import FakeTrace

    U, AR = 1000, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"

    # GIVEN two per-rank exports of one machine (GPUs in common, session clocks 2.5 ms apart):
    # rank 0 ran cycles 0..9 (1 ms apart: draft 100 us, verify 300 us, an all-reduce at +200);
    # rank 1's capture began 2.5 ms later, so its cycles 0..6 are rank 0's 3..9, and its
    # all-reduce starts 40 us late in rank 0's cycles 5 and 7 (its own 2 and 4)
    def rank_file(rank: int, cycles, late: dict) -> str:
        t, pid = FakeTrace(), 100 + rank
        for own, c in enumerate(cycles):
            b = c * 1000 - 2500 * rank
            t.cycle(own, b * U, (b + 100) * U, (b + 400) * U, pid=pid)
            for at, (s, e), name in ((b + 10, (b + 20, b + 80), "k"), (b + 110, (b + 120, b + 200 + late.get(c, 0)), "k"),
                                     (b + 120, (b + 200 + late.get(c, 0), b + 300), AR)):
                t.kernel(t.call("cudaLaunchKernel", at * U, (at + 2) * U, pid=pid), s * U, e * U, pid=pid, device=rank, name=name)
        path = t.write(tmp_path / f"rank{rank}.sqlite")
        sqlite3.connect(path).executescript(
            "create table TARGET_INFO_GPU (id integer, name text, uuid text, busLocation text, smCount integer);"
            "insert into TARGET_INFO_GPU values (0, 'H200', 'A-gpu0', '0', 132), (1, 'H200', 'A-gpu1', '1', 132);"
            "create table TARGET_INFO_SESSION_START_TIME (utcEpochNs integer);"
            f"insert into TARGET_INFO_SESSION_START_TIME values ({10**18 + 2500 * U * rank});")
        return str(path)

    paths = [rank_file(0, range(10), {}), rank_file(1, range(3, 10), {5: 40, 7: 40})]
    out = tmp_path / "t.json"
    # WHEN exported as a timeline
    res = run_cli("export", "--format", "chrome-json", *paths, "-o", str(out))
    assert res.returncode == 0, res.stderr
    # THEN rank 1 (pid 2) is marked in its own cycles 2 and 4 (rank 0's 5 and 7, which the
    # critical path names it for), at the starts of its verify phases there: 5.1 and 7.1 ms on
    # the aligned timeline; rank 0 (pid 1) gates no cycle of those two
    marks = sorted((e["pid"], e["name"], e["ts"]) for e in json.loads(out.read_text()) if e.get("cat") == "critical_path")
    assert [m for m in marks if m[0] == 2] == [(2, "gated cycle 2 (critical path cycle 5)", 5100.0), (2, "gated cycle 4 (critical path cycle 7)", 7100.0)]
    assert not any(m[1] in ("gated cycle 5", "gated cycle 7") for m in marks if m[0] == 1)


def _figures_kept(monkeypatch) -> list:
    """The figures ``plot_runs`` draws from here on, kept open (it closes each once written);
    skipped without matplotlib."""
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kept = []
    monkeypatch.setattr(plt, "close", lambda fig: kept.append(fig))
    return kept


def test_plot_titles_stay_on_the_picture_and_legends_hide_no_verdict(monkeypatch, tmp_path):
    # GIVEN two runs plotted A against B, the first named by a long file name, ranks whose
    # tallest bar carries a verdict ("under 26/30") where matplotlib had put the legend
    kept = _figures_kept(monkeypatch)
    a = load([str(SAMPLES / "demo_h200x2" / "nccl_skew")], PhaseConfig())
    b = load([str(SAMPLES / "demo_h200x2" / "nccl_gpu_bound")], PhaseConfig())
    # WHEN drawn
    plot_runs([("A (a_run_directory_with_a_rather_long_name_nccl_skew)", a), ("B (nccl_gpu_bound)", b)], tmp_path / "d.png")
    plot_runs([("baseline run", b)], tmp_path / "e.png")  # (a label of the library's caller)
    fig, own = kept
    assert own.axes[0].title.get_text().startswith("baseline run rank 0: ")
    renderer = fig.canvas.get_renderer()
    box = fig.bbox
    # THEN every panel's title lies wholly within the picture and names its side and rank ...
    titles = [ax.title for ax in fig.axes]
    assert len(titles) == 8
    for t in titles:
        ext = t.get_window_extent(renderer)
        assert ext.x0 >= box.x0 - 0.5 and ext.x1 <= box.x1 + 0.5, t.get_text()
        assert t.get_text().startswith(("A ", "B ")), t.get_text()
    # ... and no legend covers a bar's verdict label
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is None:
            continue
        lb = legend.get_window_extent(renderer)
        for text in ax.texts:
            assert not lb.overlaps(text.get_window_extent(renderer)), text.get_text()


def test_the_plot_says_how_many_cycles_it_leaves_out(monkeypatch, tmp_path):
    # GIVEN the bundled sample, whose cycle 0 is the warm-up the report leaves out (24 cycles)
    kept = _figures_kept(monkeypatch)
    a = load([str(SAMPLES / "h200_nsys2025.3.1" / "eagle_gpu_bound.sqlite")], PhaseConfig())
    # WHEN drawn
    plot_runs([("", a)], tmp_path / "p.png")
    (fig,) = kept
    per_cycle = fig.axes[1]
    # THEN the per-cycle chart draws the report's 23 cycles and says it left one out (it had
    # no bar at cycle 0 and no word of why)
    assert sorted({round(p.get_x() + p.get_width() / 2) for p in per_cycle.patches}) == list(range(1, 24))
    assert per_cycle.get_xlabel() == "cycle (1 left out, as in the report: warm-up, incomplete or empty)"


def test_six_phases_plot_with_names_apart_and_the_legend_in_its_panel(monkeypatch, tmp_path):
    # GIVEN vLLM V1's trace with six phases of long names (their slanted names overlapped, and
    # the narrow panel's two-column legend ran past it into the wide one)
    kept = _figures_kept(monkeypatch)
    names = ("preprocess", "forward", "postprocess", "sample", "draft", "ModelRunnerOutput")
    a = load([str(SAMPLES / "engines_h200" / "vllm_v1")], PhaseConfig(phases=tuple(f"gpu_model_runner: {n}" for n in names)))
    empty = load([str(H200 / "eagle_gpu_bound.sqlite")], PhaseConfig(phases=("nothing_here",)))
    # WHEN drawn
    plot_runs([("", a)], tmp_path / "v1.png")
    plot_runs([("", empty)], tmp_path / "empty.png")
    fig, nothing = kept
    renderer = fig.canvas.get_renderer()
    bar_panel, cycle_panel = fig.axes[:2]
    # THEN no two of the six names on the axis overlap: drawn slanted alike from their ticks,
    # each lies on its own line, and neighbouring lines are further apart than a line is high
    import math

    labels = [t for t in bar_panel.get_xticklabels() if t.get_text()]
    assert len(labels) == 6 and len({t.get_rotation() for t in labels}) == 1
    slant = math.radians(labels[0].get_rotation())
    ticks = [bar_panel.transData.transform((i, 0))[0] for i in range(6)]
    high = labels[0].get_fontsize() * fig.dpi / 72
    assert 0 < slant < math.pi / 2 and min(b - a for a, b in zip(ticks, ticks[1:])) * math.sin(slant) > high
    # ... the narrow panel's legend lies within it, and both panels' scales start at 0
    legend = bar_panel.get_legend().get_window_extent(renderer)
    panel = bar_panel.get_window_extent(renderer)
    assert panel.x0 <= legend.x0 and legend.x1 <= panel.x1
    assert bar_panel.get_ylim()[0] == 0 and cycle_panel.get_ylim()[0] == 0
    # and a rank without phases draws no scale of nothing (it went down to -0.04)
    assert nothing.axes[0].get_ylim() == (0, 1)


def test_plot_draws_names_with_dollar_signs_as_written(tmp_path):
    # GIVEN phases named with dollar signs, one pair around an unknown TeX command (matplotlib
    #       reads text between two dollars as math)
    pytest.importorskip("matplotlib")
    from nsys_factory import FakeTrace

    t = FakeTrace().phase_cycles(["cost$\\undefinedmacro$x", "price$x$"])
    path = t.write(tmp_path / "run$a$.sqlite")
    out = tmp_path / "p.svg"
    # WHEN plotted with them as phases
    res = run_cli("plot", str(path), "--no-cache", "--phase", "cost$\\undefinedmacro$x", "--phase", "price$x$", "-o", str(out))
    # THEN the picture is made, the names on it as written (an SVG notes each text it draws)
    assert res.returncode == 0, res.stderr
    svg = out.read_text()
    assert "<!-- price$x$ -->" in svg and "<!-- cost$\\undefinedmacro$x -->" in svg


def test_a_phase_has_one_look_in_every_panel_and_no_two_phases_share_one(monkeypatch, tmp_path):
    # GIVEN run A with phases p0..p7 (eight: past the six colours) and run B with only p7 and p2,
    # in that order (each cycle 100 us per phase, one kernel each)
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_hex

    from nsys_factory import FakeTrace
    from tracerecon.analysis.config import PhaseConfig
    from tracerecon.api import load
    from tracerecon.plot import plot_runs

    names = [f"p{i}" for i in range(8)]
    a = FakeTrace().phase_cycles(names).write(tmp_path / "a.sqlite")
    b = FakeTrace().phase_cycles(["p7", "p2"]).write(tmp_path / "b.sqlite")
    kept = []
    monkeypatch.setattr(plt, "close", lambda fig: kept.append(fig))
    # WHEN plotted A against B
    plot_runs([("A", load([a], PhaseConfig(phases=tuple(names)))), ("B", load([b], PhaseConfig(phases=("p7", "p2"))))], tmp_path / "d.png")
    (fig,) = kept

    def looks(ax) -> dict:  # each stacked bar's phase (its legend label) -> (colour, hatch)
        return {c.get_label(): (to_hex(c.patches[0].get_facecolor()), c.patches[0].get_hatch() or "") for c in ax.containers}

    in_a, in_b = looks(fig.axes[1]), looks(fig.axes[3])
    # THEN p7 and p2 look in B as they do in A, and A's eight phases look eight ways
    assert list(in_a) == names and list(in_b) == ["p7", "p2"]
    assert in_b == {"p7": in_a["p7"], "p2": in_a["p2"]}
    assert len(set(in_a.values())) == 8


def test_a_rank_of_two_processes_draws_each_processs_stream_on_its_own_track(tmp_path):
    # GIVEN a rank file before nsys 2025.3 holding a target worker (pid 100) and a draft
    # model's worker (pid 101), each its own process on its CUDA device 0 and each launching on
    # its stream 7 (every context numbers its own streams), in communicators of their own: one
    # rank of both processes
    from test_cuda_visible_devices import AR, _node_file

    files = [_node_file(tmp_path / f"rank{rank}.sqlite", {pid: ([80] * 6, at) for pid, at in zip(pids, (0, 400))})
             for rank, pids in enumerate(((100, 101), (110, 111)))]
    a = api.load(files)
    assert [r.source.pids for r in a.ranks] == [(100, 101), (110, 111)]
    out = tmp_path / "t.json"
    # WHEN exported as a timeline, browsed, and a phase shown in detail
    res = run_cli("export", "--format", "chrome-json", *files, "-o", str(out))
    assert res.returncode == 0, res.stderr
    events = json.loads(out.read_text())
    from tracerecon.tui.timeline_model import TimelineIndex
    from tracerecon.tui.timeline_window import Window

    r0 = a.ranks[0]
    index = TimelineIndex(r0.phases, r0.gpu_ops, r0.syncs)
    lanes = {lane.title: lane for lane in index.lanes(Window(0, 10_000_000))}
    # THEN each process's stream 7 is a track of its own, named with its pid, holding that
    # process's 6 GEMMs and 6 all-reduces only (one track would draw the two processes' ops
    # over each other)
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name" and "stream" in e["args"]["name"]}
    assert sorted(n for (pid, _), n in names.items() if pid == 1) == ["GPU 0 stream 7 (pid 100)", "GPU 0 stream 7 (pid 101)"]
    starts = {n: sorted(e["ts"] for e in events if e["ph"] == "X" and e.get("cat") == "kernel" and names.get((e["pid"], e["tid"])) == n)
              for (pid, _), n in names.items() if pid == 1}
    ops = r0.gpu_ops.to_pylist()
    mine = {pid: sorted(o["start_ns"] for o in ops if o["pid"] == pid) for pid in (100, 101)}
    shift = starts["GPU 0 stream 7 (pid 100)"][0] - mine[100][0] / 1000  # (the rank's one shift onto the timeline)
    for pid in (100, 101):
        assert len(mine[pid]) == 12
        assert [round(ts - shift, 3) for ts in starts[f"GPU 0 stream 7 (pid {pid})"]] == [s / 1000 for s in mine[pid]]
        assert sorted(s.start_ns for s in lanes[f"GPU0 stream 7 pid {pid}"].segments) == mine[pid]
    assert "GPU0 stream 7" not in lanes
    # and a phase's detail lists both processes' streams so
    assert api.phase_detail(r0, phase="verify").streams == ("GPU0 stream 7 pid 100", "GPU0 stream 7 pid 101")
    assert AR in {k.name for k in api.phase_detail(r0, phase="verify").kernels}
