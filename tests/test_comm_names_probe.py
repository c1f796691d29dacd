"""A real H200 trace (nsys 2025.3.2) of kernels that are communication only by their namespace:
``launch/comm_names_probe.cu`` names its kernels as DeepEP does (``deep_ep::intranode::dispatch``,
``deep_ep::intranode::combine``, ``deep_ep::layout::get_dispatch_layout``), which nsys's short
name cuts to ``dispatch`` / ``combine``; CUDA events around the two communication kernels are the
ground truth (``deepep_names.gt.jsonl``, one line per cycle). Recorded with
``launch/h200_comm_names.sh``."""

from __future__ import annotations

import json
import lzma
import shutil
import sqlite3

import pyarrow as pa
import pyarrow.compute as pc
from conftest import SAMPLES

from tracerecon.api import load

PROBE = SAMPLES / "probes_h200" / "comm_names"


def test_deepep_kernels_named_short_by_nsys_count_as_communication_every_cycle(tmp_path):
    # GIVEN the real trace: per cycle one "verify" phase running layout (local), dispatch, an
    # expert kernel and combine on one stream; nsys's own kernel table, read apart, gives each
    # kernel's short and demangled names and its times
    plain = tmp_path / "t.sqlite"
    with lzma.open(PROBE / "deepep_names.sqlite.xz") as src, open(plain, "wb") as dst:
        shutil.copyfileobj(src, dst)
    con = sqlite3.connect(plain)
    rows = con.execute("select k.start, k.end, s.value, d.value from CUPTI_ACTIVITY_KIND_KERNEL k join StringIds s on s.id = k.shortName "
                       "join StringIds d on d.id = k.demangledName order by k.start").fetchall()
    con.close()
    assert {short for _, _, short, full in rows if full.startswith("void deep_ep::intranode::")} == {"dispatch", "combine"}
    gt = [json.loads(line) for line in (PROBE / "deepep_names.gt.jsonl").read_text().splitlines()]
    # WHEN loaded
    a = load([str(PROBE / "deepep_names.sqlite.xz")])
    phases = a.ranks[0].phases
    assert phases["phase"].to_pylist() == ["verify"] * len(gt) and phases["cycle"].to_pylist() == list(range(len(gt)))
    # THEN each cycle's communication time is exactly its dispatch and combine kernels' time in
    # nsys's table, within 15 us of what the events around them read (they also hold the launch
    # gap before each kernel), and the layout and expert kernels are compute
    for p in phases.to_pylist():
        inside = [(s, e, full) for s, e, _, full in rows if p["gpu_start_ns"] <= s and e <= p["gpu_end_ns"]]
        comm = sum(e - s for s, e, full in inside if "deep_ep::intranode::" in full)
        compute = sum(e - s for s, e, full in inside if "deep_ep::intranode::" not in full)
        events = (gt[p["cycle"]]["dispatch_ms"] + gt[p["cycle"]]["combine_ms"]) * 1e6
        assert p["comm_ns"] == comm and p["compute_ns"] == compute and p["overlap_ns"] == 0, p
        assert abs(p["comm_ns"] - events) < 15_000, (p["cycle"], p["comm_ns"], events)
    # and the ops keep nsys's short name, with the demangled one beside it
    ops = a.ranks[0].gpu_ops
    dispatch = ops.filter(pc.equal(ops["name"].cast(pa.string()), "dispatch"))
    assert dispatch.num_rows == len(gt)
    assert set(dispatch["demangled_name"].cast(pa.string()).to_pylist()) == {"void deep_ep::intranode::dispatch<(int)8, (int)768>(long long)"}
