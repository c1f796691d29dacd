"""Which GPU each rank ran on (``report``, ``report --json``, ``manifest.json``), and the
export layout's version: checked against the traces' own tables read with sqlite3."""

from __future__ import annotations

import json
import shutil
import sqlite3

from conftest import DEMO2, H200, run_cli


def _gpus_by_sqlite(path) -> list[dict]:
    """The GPUs the export's kernels ran on, as its own tables say (an independent read)."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = con.execute(
            "select id, name, uuid, busLocation from TARGET_INFO_GPU "
            "where id in (select distinct deviceId from CUPTI_ACTIVITY_KIND_KERNEL) order by id"
        ).fetchall()
    finally:
        con.close()
    return [{"device": i, "name": n, "uuid": u, "bus_location": b} for i, n, u, b in rows]


def test_each_rank_names_the_gpu_its_kernels_ran_on_in_the_report_and_the_export(tmp_path):
    # GIVEN the two-GPU run (rank 0 on device 0, rank 1 on device 1: two UUIDs)
    run = DEMO2 / "nccl_skew"
    want = [_gpus_by_sqlite(run / "rank0.sqlite"), _gpus_by_sqlite(run / "rank1.sqlite")]
    assert [[g["device"] for g in w] for w in want] == [[0], [1]] and want[0][0]["uuid"] != want[1][0]["uuid"]
    # WHEN reported (JSON and text) and exported, and the export reported
    rep = run_cli("report", "--json", str(run))
    text = run_cli("report", str(run), env={"COLUMNS": "200"})
    out = tmp_path / "out"
    exp = run_cli("export", str(run), "-o", str(out))
    back = run_cli("report", "--json", str(out))
    assert rep.returncode == text.returncode == exp.returncode == back.returncode == 0, (rep.stderr, exp.stderr, back.stderr)
    # THEN each rank lists its own GPU as the trace's tables do, in all three
    assert [r["gpus"] for r in json.loads(rep.stdout)["ranks"]] == want
    manifest = json.loads((out / "manifest.json").read_text())
    assert [r["gpus"] for r in manifest["ranks"]] == want
    assert manifest["layout_version"] == 1
    assert [r["gpus"] for r in json.loads(back.stdout)["ranks"]] == want
    # and the text report's rank lines say so
    heads = [ln for ln in text.stdout.splitlines() if ln.startswith("rank ") and ".sqlite" in ln]
    assert [("GPU 0 NVIDIA H200" in heads[0]), ("GPU 1 NVIDIA H200" in heads[1])] == [True, True], heads


def _edited(tmp_path, sql: str | None):
    p = tmp_path / "t.sqlite"
    shutil.copy(H200 / "eagle_gpu_bound.sqlite", p)
    if sql:
        con = sqlite3.connect(p)
        con.execute(sql)
        con.commit()
        con.close()
    return p


def test_a_gpu_the_trace_does_not_list_is_named_by_its_device_alone(tmp_path):
    # GIVEN the README's trace (one GPU, device 0) with its GPU list emptied, or gone
    for sql in ("delete from TARGET_INFO_GPU", "drop table TARGET_INFO_GPU"):
        p = _edited(tmp_path, sql)
        # WHEN reported
        res = run_cli("report", "--json", str(p))
        text = run_cli("report", str(p), env={"COLUMNS": "200"})
        # THEN the rank ran on device 0, of no known name or UUID; the phases read as before
        assert res.returncode == 0 and text.returncode == 0, res.stderr
        assert json.loads(res.stdout)["ranks"][0]["gpus"] == [{"device": 0, "name": None, "uuid": None, "bus_location": None}], sql
        assert "pid 1115  GPU 0  nsys 2025.3.2.0" in text.stdout.splitlines()[0]


def _export(tmp_path):
    out = tmp_path / "out"
    assert run_cli("export", str(H200 / "eagle_gpu_bound.sqlite"), "-o", str(out)).returncode == 0
    return out


def _edit_manifest(out, change) -> None:
    doc = json.loads((out / "manifest.json").read_text())
    change(doc)
    (out / "manifest.json").write_text(json.dumps(doc))


def test_an_export_of_a_newer_layout_is_read_with_a_warning_naming_it(tmp_path):
    # GIVEN an export whose manifest says layout 2 (a newer tracerecon's)
    out = _export(tmp_path)
    want = json.loads(run_cli("report", "--json", str(out)).stdout)
    _edit_manifest(out, lambda d: d.update(layout_version=2))
    # WHEN reported THEN read as before, with one warning naming both layouts
    res = run_cli("report", "--json", str(out))
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    said = [w for w in doc["warnings"] if "layout 2" in w]
    assert len(said) == 1 and "reads layout 1" in said[0]
    assert doc["ranks"] == want["ranks"]


def test_an_export_whose_gpus_or_layout_are_not_as_written_is_refused_in_one_line(tmp_path):
    out = _export(tmp_path)
    doc = json.loads((out / "manifest.json").read_text())
    for change, needle in [
        (lambda d: d["ranks"][0].update(gpus="GPU 0"), "'gpus'"),
        (lambda d: d["ranks"][0].update(gpus=[{"device": "0"}]), "'gpus'"),
        (lambda d: d["ranks"][0].update(gpus=[{"device": 0, "name": 7}]), "'gpus'"),
        (lambda d: d.update(layout_version="1"), "'layout_version'"),
    ]:
        # GIVEN the manifest with one value of another type
        (out / "manifest.json").write_text(json.dumps(doc))
        _edit_manifest(out, change)
        # WHEN reported THEN exit 2 and one line naming the value
        res = run_cli("report", str(out))
        assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and needle in res.stderr, res.stderr
    # and a manifest of an older tracerecon (no gpus, no layout) reads with its GPU ops' device
    # alone (the export's gpu_ops say device 0; its name is not in the export)
    (out / "manifest.json").write_text(json.dumps(doc))
    _edit_manifest(out, lambda d: (d.pop("layout_version"), d["ranks"][0].pop("gpus")))
    res = run_cli("report", "--json", str(out))
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["ranks"][0]["gpus"] == [{"device": 0, "name": None, "uuid": None, "bus_location": None}]


def test_diff_says_where_a_rank_ran_on_another_gpu_model(tmp_path):
    # GIVEN the README's trace (NVIDIA H200) and a copy whose GPU is listed as another model
    other = _edited(tmp_path, "update TARGET_INFO_GPU set name = 'NVIDIA H100 80GB HBM3'")
    same = str(H200 / "eagle_gpu_bound.sqlite")
    # WHEN diffed against each other, and the trace against itself
    res = run_cli("diff", same, str(other), "--json")
    text = run_cli("diff", same, str(other), env={"COLUMNS": "200"})
    itself = run_cli("diff", same, same, "--json")
    assert res.returncode == text.returncode == itself.returncode == 0, res.stderr
    # THEN the pair is named with both models, in JSON and in a line; not where they are alike
    assert json.loads(res.stdout)["other_gpu_models"] == [{"rank": 0, "a": ["NVIDIA H200"], "b": ["NVIDIA H100 80GB HBM3"]}]
    assert "rank 0 ran on NVIDIA H200 in A and NVIDIA H100 80GB HBM3 in B" in text.stdout
    assert json.loads(itself.stdout)["other_gpu_models"] == []


def test_a_timeline_names_each_rank_s_gpu_in_its_process_name(tmp_path):
    # GIVEN the two-GPU run WHEN exported as a Chrome JSON timeline
    out = tmp_path / "t.json"
    res = run_cli("export", str(DEMO2 / "nccl_skew"), "--format", "chrome-json", "-o", str(out))
    assert res.returncode == 0, res.stderr
    # THEN each rank's process is named with its file and the GPU its kernels ran on
    names = {e["pid"]: e["args"]["name"] for e in json.loads(out.read_text())
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    assert names == {1: "rank 0 (rank0.sqlite) GPU 0 NVIDIA H200", 2: "rank 1 (rank1.sqlite) GPU 1 NVIDIA H200"}


def test_a_blank_gpu_name_is_no_name_and_an_export_of_a_newer_layout_it_cannot_read_says_to_upgrade(tmp_path):
    # GIVEN the README's trace with its GPU's name blank
    blank = _edited(tmp_path, "update TARGET_INFO_GPU set name = '  '")
    # WHEN reported and diffed against the original
    res = run_cli("report", "--json", str(blank))
    diff = run_cli("diff", str(H200 / "eagle_gpu_bound.sqlite"), str(blank), "--json")
    # THEN the name is null, and no other model is claimed
    assert json.loads(res.stdout)["ranks"][0]["gpus"][0]["name"] is None
    assert json.loads(diff.stdout)["other_gpu_models"] == []
    # and so where an edited manifest gives a blank name
    edited = _export(tmp_path / "blank")
    _edit_manifest(edited, lambda d: d["ranks"][0]["gpus"][0].update(name=" "))
    assert json.loads(run_cli("report", "--json", str(edited)).stdout)["ranks"][0]["gpus"][0]["name"] is None
    # GIVEN an export of layout 2 whose GPUs this reader cannot read, or of layout 0
    out = _export(tmp_path)
    doc = json.loads((out / "manifest.json").read_text())
    _edit_manifest(out, lambda d: (d.update(layout_version=2), d["ranks"][0].update(gpus={"0": "H200"})))
    refused = run_cli("report", str(out))
    (out / "manifest.json").write_text(json.dumps({**doc, "layout_version": 0}))
    zero = run_cli("report", str(out))
    # THEN one line each, exit 2: the first names the layout and says to upgrade
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "export layout 2 by tracerecon" in refused.stderr and "upgrade tracerecon" in refused.stderr
    assert zero.returncode == 2 and "'layout_version' other than a whole number from 1" in zero.stderr


def test_a_phase_that_launched_work_on_two_gpus_says_which_one_it_is_read_on(tmp_path):
    # GIVEN one thread driving two GPUs: each phase launches a kernel on GPU 0 and one on GPU 1
    # (stream 7 of each), 4 cycles
    from nsys_factory import FakeTrace

    u = 1000
    t = FakeTrace()
    for c in range(4):
        b = 1000 * (c + 1) * u
        t.range(f"cycle {c}", b, b + 300 * u)
        t.range("draft", b, b + 100 * u)
        t.kernel(t.call("cudaLaunchKernel", b + 10 * u, b + 12 * u), b + 20 * u, b + 60 * u, stream=7, device=0)
        t.kernel(t.call("cudaLaunchKernel", b + 14 * u, b + 16 * u), b + 20 * u, b + 150 * u, stream=7, device=1)
        t.range("verify", b + 100 * u, b + 300 * u)
        t.kernel(t.call("cudaLaunchKernel", b + 110 * u, b + 112 * u), b + 160 * u, b + 200 * u, stream=7, device=0)
        t.kernel(t.call("cudaLaunchKernel", b + 114 * u, b + 116 * u), b + 160 * u, b + 260 * u, stream=7, device=1)
    path = t.write(tmp_path / "two.sqlite")
    # WHEN reported and exported
    res = run_cli("report", "--json", str(path))
    out = tmp_path / "out"
    assert res.returncode == 0 and run_cli("export", str(path), "-o", str(out)).returncode == 0, res.stderr
    import pyarrow.parquet as pq

    (read_on,) = set(pq.read_table(out / "phases").column("device_id").to_pylist())
    # THEN each phase says it ran on GPUs 0 and 1 in all 4 instances, and names the GPU the
    # phases table reads it on; the rank names both GPUs
    doc = json.loads(res.stdout)
    for name in ("draft", "verify"):
        said = [w for w in doc["warnings"] if f"{name!r}: in 4 of 4 instances it launched GPU work on GPUs 0, 1" in w]
        assert len(said) == 1 and f"GPU {read_on} in 4" in said[0], doc["warnings"]
    assert [g["device"] for g in doc["ranks"][0]["gpus"]] == [0, 1]
