"""The native Perfetto export (issue 13): the file is read back through the perfetto package's
own message classes (``perfetto_trace_pb2.Trace``), its begin/end events are paired the way
Perfetto's trace processor pairs them, and the result is checked rank by rank against the
parquet export of the same traces and against the chrome-json export (one model, two formats).
Where a trace_processor_shell is at hand, Perfetto's own parser reads the same counts."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import H200, ROOT, SAMPLES, run_cli

try:
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
except ImportError:  # the extra is not installed: only the tests that need no reader run
    pb = None
needs_perfetto = pytest.mark.skipif(pb is None, reason="needs the perfetto extra: pip install 'tracerecon[perfetto]'")

SHAPES = SAMPLES / "demo_shapes_h200x2"
TRACES = [H200 / "eagle_gpu_bound.sqlite", SHAPES / "nccl_skew_phases", SHAPES / "worker_gpu_bound"]
GPU_OP_CATS = {"kernel", "memcpy", "memset", "graph"}


@dataclass
class ReadBack:
    """A Perfetto trace as its reader sees it: descriptors by uuid, and slices rebuilt from
    their begin/end events (sorted by time, ties in file order; an end closes the innermost
    open slice of its track)."""

    processes: dict = field(default_factory=dict)  # uuid -> ProcessDescriptor
    tracks: dict = field(default_factory=dict)  # uuid -> TrackDescriptor (threads and named tracks)
    slices: list = field(default_factory=list)  # dicts: track, name, cat, ts, dur, args, flows, flows_in
    flows: Counter = field(default_factory=Counter)  # flow id -> slices carrying it
    flow_times: dict = field(default_factory=dict)  # flow id -> [(timestamp, "out" | "in", slice category)]

    def rank_of(self, track_uuid: int) -> int:
        """The rank whose process holds the track (the process's pid is the rank + 1)."""
        t = self.tracks[track_uuid]
        return self.processes[t.parent_uuid].pid - 1


def read_back(path: Path) -> ReadBack:
    trace = pb.Trace.FromString(path.read_bytes())
    out, names = ReadBack(), defaultdict(dict)
    events = defaultdict(list)  # track uuid -> (ts, file order, kind, name, cat, args, flows)
    for i, p in enumerate(trace.packet):
        assert p.trusted_packet_sequence_id == trace.packet[0].trusted_packet_sequence_id != 0
        if i == 0:
            assert p.sequence_flags & pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
        for table in ("event_names", "event_categories", "debug_annotation_names", "debug_annotation_string_values"):
            for e in getattr(p.interned_data, table):
                assert e.iid not in names[table], "an iid is declared once"
                names[table][e.iid] = e.str.decode() if table == "debug_annotation_string_values" else e.name
        if p.HasField("track_descriptor"):
            d = p.track_descriptor
            assert d.uuid not in out.processes and d.uuid not in out.tracks
            (out.processes if d.HasField("process") else out.tracks)[d.uuid] = d.process if d.HasField("process") else d
        elif p.HasField("track_event"):
            te = p.track_event
            assert te.track_uuid in out.tracks, "every event's track is described before it"
            args = {names["debug_annotation_names"][a.name_iid]: _value(a, names) for a in te.debug_annotations}
            assert not (te.type == pb.TrackEvent.TYPE_SLICE_END and te.flow_ids), "a flow leaves a slice at its BEGIN"
            assert not (te.type != pb.TrackEvent.TYPE_SLICE_END and te.terminating_flow_ids), "a flow reaches a slice at its END"
            events[te.track_uuid].append((p.timestamp, i, te.type, names["event_names"].get(te.name_iid), names["event_categories"].get(te.category_iids[0]) if te.category_iids else None,
                                          args, list(te.flow_ids) + list(te.terminating_flow_ids)))
    for uuid, evs in events.items():
        out.slices += _paired(uuid, sorted(evs, key=lambda e: (e[0], e[1])))
    for s in out.slices:
        out.flows.update(s["flows"] + s["flows_in"])
        for f in s["flows"]:
            out.flow_times.setdefault(f, []).append((s["ts"], "out", s["cat"]))
        for f in s["flows_in"]:
            out.flow_times.setdefault(f, []).append((s["ts"] + s["dur"], "in", s["cat"]))
    return out


def _value(a, names):
    kind = a.WhichOneof("value")
    return names["debug_annotation_string_values"][a.string_value_iid] if kind == "string_value_iid" else getattr(a, kind)


def _paired(uuid, evs) -> list[dict]:
    slices, stack = [], []
    for ts, _i, kind, name, cat, args, flows in evs:
        if kind == pb.TrackEvent.TYPE_SLICE_BEGIN:
            stack.append({"track": uuid, "name": name, "cat": cat, "ts": ts, "args": args, "flows": flows})
        elif kind == pb.TrackEvent.TYPE_SLICE_END:
            s = stack.pop()
            s["dur"] = ts - s["ts"]
            s["flows_in"] = flows
            slices.append(s)
        else:
            slices.append({"track": uuid, "name": name, "cat": cat, "ts": ts, "dur": 0, "args": args, "flows": flows, "flows_in": [], "instant": True})
    assert not stack, "every slice is closed"
    return slices


def _table(export_dir: Path, name: str, rank: int):
    return pq.read_table(export_dir / name / f"rank={rank}" / "part-0.parquet")


@pytest.fixture(scope="module", params=TRACES, ids=lambda p: p.name)
def exported(request, tmp_path_factory):
    """The trace exported three ways by the CLI: perfetto, chrome-json and parquet."""
    d = tmp_path_factory.mktemp(request.param.name)
    for fmt, out in (("perfetto", d / "t.pftrace"), ("chrome-json", d / "t.json"), ("parquet", d / "pq")):
        res = run_cli("export", "--format", fmt, str(request.param), "-o", str(out))
        assert res.returncode == 0, res.stderr
    return d, read_back(d / "t.pftrace")


@needs_perfetto
def test_the_trace_reads_back_with_the_parquet_tables_counts(exported):
    d, rb = exported
    manifest = json.loads((d / "pq" / "manifest.json").read_text())
    ranks = [r["rank"] for r in manifest["ranks"]]
    assert sorted(p.pid - 1 for p in rb.processes.values()) == ranks  # pid 0 is Perfetto's idle task
    by = defaultdict(list)
    for s in rb.slices:
        by[(rb.rank_of(s["track"]), "gpu_op" if s["cat"] in GPU_OP_CATS else s["cat"])].append(s)
    for rank in ranks:
        phases, cycles = _table(d / "pq", "phases", rank), _table(d / "pq", "cycles", rank)
        syncs, ops = _table(d / "pq", "syncs", rank), _table(d / "pq", "gpu_ops", rank)
        # THEN one CPU slice per phase and cycle, one GPU slice per phase with GPU time, one per wait and per GPU op
        assert sorted(s["dur"] for s in by[(rank, "phase")]) == sorted(phases["cpu_ns"].to_pylist())
        assert sorted(s["dur"] for s in by[(rank, "cycle")]) == sorted(cycles["cpu_ns"].to_pylist())
        assert sorted(s["dur"] for s in by[(rank, "gpu_phase")]) == sorted(g for g in phases["gpu_ns"].to_pylist() if g is not None)
        assert sorted(s["dur"] for s in by[(rank, "wait")]) == sorted(syncs["blocked_ns"].to_pylist())
        d_ops = ops.to_pydict()
        assert sorted(s["dur"] for s in by[(rank, "gpu_op")]) == sorted(e - s for s, e in zip(d_ops["start_ns"], d_ops["end_ns"]))
        assert Counter(s["cat"] for s in by[(rank, "gpu_op")]) == Counter(d_ops["kind"])
        # and the args say what the report says
        gpu_ms = sorted(s["args"]["gpu_ms"] for s in by[(rank, "gpu_phase")])
        assert gpu_ms == sorted(g / 1e6 for g in phases["gpu_ns"].to_pylist() if g is not None)
        assert Counter(s["args"]["verdict"] for s in by[(rank, "phase")]) == Counter(phases["verdict"].to_pylist())
    marks = [s for s in rb.slices if s.get("instant")]
    assert all(m["cat"] == "critical_path" for m in marks)
    if len(ranks) > 1:
        assert len(marks) == pq.read_table(d / "pq" / "critical_path" / "part-0.parquet").num_rows


@needs_perfetto
def test_every_flow_has_both_ends_and_the_expected_count(exported):
    d, rb = exported
    assert rb.flows and set(rb.flows.values()) == {2}
    manifest = json.loads((d / "pq" / "manifest.json").read_text())
    waits = 0
    for r in manifest["ranks"]:
        phases = _table(d / "pq", "phases", r["rank"])["gpu_boundary_start_ns"].to_pylist()
        ends = _table(d / "pq", "phases", r["rank"])["gpu_boundary_end_ns"].to_pylist()
        syncs = _table(d / "pq", "syncs", r["rank"]).to_pydict()
        # a wait's arrow where the phase it waited for has GPU boundaries and ends after the wait began
        waits += sum(1 for w, s in zip(syncs["waited_for_phase_id"], syncs["start_ns"]) if w is not None and phases[w] is not None and ends[w] > s)
    colls = 0
    if len(manifest["ranks"]) > 1:
        per = Counter(pq.read_table(d / "pq" / "collectives")["collective"].to_pylist())
        colls = sum(n - 1 for n in per.values())
        assert colls > 1000
    assert len(rb.flows) == waits + colls
    # a wait's flow leads to a GPU phase
    ends = defaultdict(set)
    for s in rb.slices:
        for f in s["flows"] + s["flows_in"]:
            ends[f].add(s["cat"])
    assert sum(1 for cats in ends.values() if cats == {"wait", "gpu_phase"}) == waits
    # and each runs forward in time, from a wait to a GPU phase or from GPU op to GPU op
    for f, times in rb.flow_times.items():
        (t_out, _, c_out), (t_in, _, c_in) = sorted(times, key=lambda t: t[1] != "out")
        assert t_out <= t_in, (f, times)
        assert (c_out, c_in) == ("wait", "gpu_phase") or (c_out in GPU_OP_CATS and c_in in GPU_OP_CATS), (f, times)


@needs_perfetto
def test_tracks_are_described_and_parented(exported):
    _d, rb = exported
    for t in rb.tracks.values():
        # every track hangs off a rank's process; a thread names its pid and tid
        assert t.parent_uuid in rb.processes
        if t.HasField("thread"):
            assert t.thread.pid == rb.processes[t.parent_uuid].pid and t.thread.HasField("tid") and t.thread.thread_name
        else:
            assert t.name
    assert all(p.HasField("pid") and p.process_name.startswith(f"rank {p.pid - 1} (") for p in rb.processes.values())
    assert {s["track"] for s in rb.slices} <= set(rb.tracks)
    names = {t.name for t in rb.tracks.values()}
    assert "GPU phases (CUDA-event time)" in names and any(n.startswith("GPU 0 stream ") for n in names)


@needs_perfetto
def test_perfetto_and_chrome_json_hold_the_same_timeline(exported):
    d, rb = exported
    events = json.loads((d / "t.json").read_text())
    chrome = Counter((e["pid"] - 1, e["cat"], e["name"], round(e["ts"] * 1000), round(e["dur"] * 1000),
                      json.dumps({k: v for k, v in e["args"].items() if v is not None}, sort_keys=True))
                     for e in events if e["ph"] == "X")
    native = Counter((rb.rank_of(s["track"]), s["cat"], s["name"], s["ts"], s["dur"], json.dumps(s["args"], sort_keys=True))
                     for s in rb.slices if not s.get("instant"))
    assert native == chrome
    assert sum(1 for e in events if e["ph"] == "s") == len(rb.flows)


def test_without_the_extra_it_is_one_line_and_exit_2(tmp_path):
    # GIVEN a perfetto package that cannot be imported
    fake = tmp_path / "site" / "perfetto"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('No module named perfetto (test)')\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "site"))
    # WHEN the perfetto format is asked for
    res = run_cli("export", "--format", "perfetto", str(H200 / "eagle_gpu_bound.sqlite"), "-o", str(tmp_path / "t.pftrace"), env=env)
    # THEN one line says what to install, and nothing is written
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert "pip install 'tracerecon[perfetto]'" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "t.pftrace").exists()


def test_help_and_chrome_json_import_neither_perfetto_nor_protobuf(tmp_path):
    code = ("import sys, contextlib, io\n"
            "from tracerecon.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try: main(['--help'])\n"
            "    except SystemExit: pass\n"
            f"    main(['export', '--format', 'chrome-json', {str(H200 / 'eagle_gpu_bound.sqlite')!r}, '-o', {str(tmp_path / 't.json')!r}])\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] == 'perfetto' or m.startswith('google.protobuf'))\n"
            "assert not bad, bad\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert res.returncode == 0, res.stderr


def _trace_processor_shell() -> str | None:
    """A trace_processor_shell already on this machine ($TRACE_PROCESSOR_SHELL, PATH, or the
    perfetto package's download cache); tests never download one."""
    found = os.environ.get("TRACE_PROCESSOR_SHELL") or shutil.which("trace_processor_shell")
    if found:
        return found
    cache = Path.home() / ".local" / "share" / "perfetto" / "prebuilts"
    return next((str(p) for p in sorted(cache.glob("trace_processor_shell*")) if os.access(p, os.X_OK) and not p.name.endswith(".tmp")), None)


PER_RANK_SQL = """
with t as (
  select tt.id as track_id, p.pid as pid from thread_track tt join thread using (utid) join process p using (upid)
  union all
  select pt.id as track_id, p.pid as pid from process_track pt join process p using (upid)
)
select t.pid as pid, s.category as cat, count(*) as n, sum(s.dur) as dur
from slice s join t on s.track_id = t.track_id
group by 1, 2
"""


@needs_perfetto
def test_perfettos_own_parser_reads_the_same_counts(exported):
    shell = _trace_processor_shell()
    if shell is None:
        pytest.skip("no trace_processor_shell here (set TRACE_PROCESSOR_SHELL to run this check)")
    from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig

    d, rb = exported
    mine = Counter()
    for s in rb.slices:
        mine[(rb.rank_of(s["track"]), s["cat"])] += 1
    tp = TraceProcessor(trace=str(d / "t.pftrace"), config=TraceProcessorConfig(bin_path=shell, load_timeout=120))
    try:
        theirs = Counter({(int(r.pid) - 1, r.cat): int(r.n) for r in tp.query(PER_RANK_SQL)})
        n_flows = next(iter(tp.query("select count(*) as n from flow"))).n
        errors = [(r.name, r.value) for r in tp.query("select name, value from stats where severity in ('error', 'data_loss') and value > 0")]
    finally:
        tp.close()
    assert theirs == mine
    assert n_flows == len(rb.flows)
    assert errors == []


def _crossing_trace(path: Path, kernel_name: str = "verify_b") -> Path:
    """Two cycles where a wait crosses the end of its phase on the CPU thread, and two kernels
    cross on one GPU stream: what begin/end slices on one track cannot hold."""
    from nsys_factory import FakeTrace

    t = FakeTrace()
    for c in range(2):
        base = c * 2_000_000
        t.range(f"cycle {c}", base, base + 1_000_000)
        t.range("draft", base, base + 400_000)
        t.range("verify", base + 400_000, base + 1_000_000)
        t.kernel(t.call("cudaLaunchKernel", base + 10_000, base + 20_000), base + 50_000, base + 300_000, name="draft_gemm")
        t.kernel(t.call("cudaLaunchKernel", base + 410_000, base + 420_000), base + 500_000, base + 700_000, name="verify_a")
        t.kernel(t.call("cudaLaunchKernel", base + 430_000, base + 440_000), base + 600_000, base + 800_000, name=kernel_name)
        sync = t.call("cudaStreamSynchronize", base + 350_000, base + 450_000)
        t.sync_record(sync, base + 350_000, base + 450_000)
    return t.write(path)


def _nested_per_track(events) -> bool:
    tracks = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            tracks[(e["pid"], e["tid"])].append((round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000)))
    for spans in tracks.values():
        stack = []
        for s, e in sorted(spans, key=lambda x: (x[0], -x[1])):
            while stack and stack[-1] <= s:
                stack.pop()
            if stack and e > stack[-1]:
                return False
            stack.append(e)
    return True


@needs_perfetto
def test_crossing_slices_go_to_overlap_lanes_in_both_formats(tmp_path):
    # GIVEN a trace whose slices would cross on their tracks
    trace = _crossing_trace(tmp_path / "crossing.sqlite")
    # WHEN it is exported in both formats
    for fmt, out in (("perfetto", tmp_path / "t.pftrace"), ("chrome-json", tmp_path / "t.json")):
        res = run_cli("export", "--format", fmt, str(trace), "-o", str(out))
        assert res.returncode == 0, res.stderr
    # THEN every slice keeps its duration (pairing begins and ends as Perfetto does), the crossing
    # ones on overlap tracks, and the JSON tracks nest too
    rb = read_back(tmp_path / "t.pftrace")
    durs = Counter((s["cat"], s["dur"]) for s in rb.slices)
    assert durs[("wait", 100_000)] == 2 and durs[("phase", 400_000)] == 2 and durs[("phase", 600_000)] == 2 and durs[("cycle", 1_000_000)] == 2
    assert durs[("kernel", 200_000)] == 4 and durs[("kernel", 250_000)] == 2
    lanes = {u for u, t in rb.tracks.items() if "(overlap 1)" in t.name}
    assert {s["cat"] for s in rb.slices if s["track"] in lanes} == {"wait", "kernel"}
    events = json.loads((tmp_path / "t.json").read_text())
    assert _nested_per_track(events)
    assert sum(1 for e in events if e["ph"] == "X") == len(rb.slices) - sum(1 for s in rb.slices if s.get("instant"))


@needs_perfetto
def test_a_scrubbed_trace_gives_a_scrubbed_timeline(tmp_path):
    # GIVEN a trace whose kernel names hold a home directory, and its scrubbed copy
    leaky = _crossing_trace(tmp_path / "leaky.sqlite", kernel_name="/home/alice/secret-project/kernels.cu:gemm")
    assert run_cli("scrub", str(leaky), "-o", str(tmp_path / "clean.sqlite")).returncode == 0
    # WHEN both are exported
    for src in ("leaky", "clean"):
        for fmt, suffix in (("perfetto", "pftrace"), ("chrome-json", "json")):
            res = run_cli("export", "--format", fmt, str(tmp_path / f"{src}.sqlite"), "-o", str(tmp_path / f"{src}.{suffix}"))
            assert res.returncode == 0, res.stderr
    # THEN the timeline of the scrubbed copy holds none of it (the original's does: the check can fail)
    for suffix in ("pftrace", "json"):
        assert b"/home/alice" in (tmp_path / f"leaky.{suffix}").read_bytes()
        assert b"/home/alice" not in (tmp_path / f"clean.{suffix}").read_bytes()
