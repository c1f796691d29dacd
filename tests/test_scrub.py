"""`tracerecon scrub`: secrets, environment, paths and host names gone; the analysis unchanged."""

from __future__ import annotations

import hashlib
import json
import sqlite3

from conftest import H200, run_cli
from nsys_factory import FakeTrace

TOKEN = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345"


def make_leaky(tmp_path):
    t = FakeTrace(
        capture={"CUDA_GRAPH_TRACE_OPTIONS:MODE": "Node", "PROCESS_COMMAND_LINE": "/home/alice/secret-project/serve.py --key abc"},
        env=["HF_TOKEN=" + TOKEN, "HOME=/home/alice", "PATH=/home/alice/bin:/usr/bin"],
    )
    t.meta.update({"EXPORT_HOST": "alice-laptop", "EXPORT_USER": "alice"})
    t.range("verify", 0, 100_000)
    t.range(f"Traceback: File /home/alice/secret-project/model.py, token={TOKEN}", 0, 10)
    c = t.call("cudaLaunchKernel", 10, 20)
    t.kernel(c, 30, 90_000, name="/home/alice/secret-project/kernels.cu:gemm")
    return t.write(tmp_path / "leaky.sqlite")


def all_text(path):
    con = sqlite3.connect(path)
    out = []
    for (table,) in con.execute("select name from sqlite_master where type='table'"):
        for row in con.execute(f'select * from "{table}"'):
            out.extend(str(v) for v in row if isinstance(v, str))
    return "\n".join(out)


def test_scrub_removes_what_leaks(tmp_path):
    src = make_leaky(tmp_path)
    before = hashlib.sha256(src.read_bytes()).hexdigest()
    res = run_cli("scrub", str(src), "-o", str(tmp_path / "clean.sqlite"))
    assert res.returncode == 0, res.stderr
    text = all_text(tmp_path / "clean.sqlite")
    for leak in (TOKEN, "/home/alice", "alice-laptop", "secret-project/serve.py", "PROCESS_COMMAND_LINE"):
        assert leak not in text, leak
    raw = (tmp_path / "clean.sqlite").read_bytes()
    assert TOKEN.encode() not in raw and b"/home/alice" not in raw  # not even in free pages
    assert "CUDA_GRAPH_TRACE_OPTIONS:MODE" in text  # what the analysis needs stays
    assert hashlib.sha256(src.read_bytes()).hexdigest() == before  # input untouched


def test_scrub_keeps_the_analysis_identical(tmp_path):
    out = tmp_path / "s.sqlite"
    assert run_cli("scrub", str(H200 / "eagle_launch_2proc.sqlite"), "-o", str(out)).returncode == 0
    a = json.loads(run_cli("report", str(H200 / "eagle_launch_2proc.sqlite"), "--json").stdout)
    b = json.loads(run_cli("report", str(out), "--json").stdout)
    for ra, rb in zip(a["ranks"], b["ranks"]):
        assert ra["phases"] == rb["phases"] and ra["cycles"] == rb["cycles"]


def test_scrub_refuses_to_overwrite_its_input(tmp_path):
    src = make_leaky(tmp_path)
    res = run_cli("scrub", str(src), "-o", str(src))
    assert res.returncode == 2 and "refusing" in res.stderr
