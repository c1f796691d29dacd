"""`tracerecon scrub`: secrets, environment, paths and host names gone; the analysis unchanged."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from pathlib import Path

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


def edited_copy(tmp_path, edit, name: str = "in.sqlite") -> Path:
    """A copy of the README's engine export in ``tmp_path``, changed by ``edit(connection)``."""
    path = tmp_path / name
    shutil.copy(H200 / "eagle_gpu_bound.sqlite", path)
    con = sqlite3.connect(path)
    edit(con)
    con.commit()
    con.close()
    return path


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


def scrubbed_copy(tmp_path, *sql: str):
    """A copy of the real sample eagle_gpu_bound changed by ``sql``, and its scrubbed copy (scrub
    exit 0): the two paths."""
    src, out = tmp_path / "changed.sqlite", tmp_path / "out.sqlite"
    shutil.copy(H200 / "eagle_gpu_bound.sqlite", src)
    with sqlite3.connect(src) as con:
        for statement in sql:
            con.execute(statement)
    con.close()
    assert run_cli("scrub", str(src), "-o", str(out)).returncode == 0
    return src, out


def test_names_that_differ_only_in_bytes_that_are_not_utf8_stay_apart(tmp_path):
    # GIVEN a real export whose draft ranges are named b"ph\xfe" and verify ranges b"ph\xff"
    # (bytes that are not UTF-8; a fuzzing review's) WHEN scrubbed
    src, out = scrubbed_copy(tmp_path, "update NVTX_EVENTS set text = cast(X'7068fe' as text) where text = 'draft'",
                             "update NVTX_EVENTS set text = cast(X'7068ff' as text) where text = 'verify'")
    # THEN the copy holds the same bytes in those names, and its ranges read as the original's
    # (read as replacement characters, the two had become one name of 48 ranges)
    names = {r[0] for r in sqlite3.connect(out).execute("select distinct cast(text as blob) from NVTX_EVENTS")}
    assert sorted(n for n in names if n and n.startswith(b"ph")) == [b"ph\xfe", b"ph\xff"]
    a, b = (json.loads(run_cli("ranges", str(p), "--json").stdout) for p in (src, out))
    assert a["ranks"][0]["ranges"] == b["ranks"][0]["ranges"]


def test_a_host_name_or_a_capture_entry_not_utf8_is_scrubbed_and_a_utf16_database_refused(tmp_path):
    # GIVEN a real export whose export host is b"dgx\xffbox7", named in a string too, and whose
    # capture metadata holds an entry named b"CMD\xffLINE" (bytes that are not UTF-8; a review's)
    # WHEN scrubbed
    _, out = scrubbed_copy(tmp_path, "update META_DATA_EXPORT set value = cast(X'647367ff626f7837' as text) where name = 'EXPORT_HOST'",
                           "insert into StringIds (id, value) values (9999998, cast(X'7772697474656e206f6e20647367ff626f7837' as text))",
                           "insert into META_DATA_CAPTURE (name, value) values (cast(X'434d44ff4c494e45' as text), 'python3 serve.py --token hunter2')")
    # THEN the host is replaced where it is named, and the entry is gone (read with replacement
    # characters, the host matched nothing, and the entry was kept with its command line)
    data = out.read_bytes()
    assert b"dsg\xffbox7" not in data and b"hunter2" not in data and b"CMD\xffLINE" not in data
    (text,) = sqlite3.connect(out).execute("select cast(value as blob) from StringIds where id = 9999998").fetchone()
    assert text == b"written on [host]"
    # AND a database encoded in UTF-16 (nsys writes UTF-8; its text read as UTF-8 bytes passed
    # unscrubbed) is refused in one line, nothing written
    u16 = tmp_path / "u16.sqlite"
    con = sqlite3.connect(u16)
    con.execute("pragma encoding = 'UTF-16le'")
    con.executescript("create table StringIds (id integer primary key, value text); insert into StringIds values (1, 'HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz');")
    con.close()
    res = run_cli("scrub", str(u16), "-o", str(tmp_path / "u16_out.sqlite"))
    assert res.returncode == 2 and "UTF-16le-encoded" in res.stderr and len(res.stderr.splitlines()) == 1, res.stderr
    assert not (tmp_path / "u16_out.sqlite").exists()


def test_a_range_name_of_forty_thousand_characters_is_scrubbed(tmp_path):
    # GIVEN an export whose range name is 40,000 characters of "a-a-a-..." (a review's: the
    # secret-name, path and URL patterns, tried at every position, backtracked over the whole run
    # each time: 78 s for 20,000 characters, four times that for each doubling)
    t = FakeTrace()
    t.range("draft-" + "a-" * 20_000, 0, 1000)
    t.kernel(t.call("cudaLaunchKernel", 10, 20), 30, 900)
    src = t.write(tmp_path / "long.sqlite")
    # WHEN scrubbed THEN it ends (well within two minutes: a run past them fails the test rather
    # than hanging the suite) and the name is kept whole
    assert run_cli("scrub", str(src), "-o", str(tmp_path / "out.sqlite"), timeout=120).returncode == 0
    (name,) = sqlite3.connect(tmp_path / "out.sqlite").execute("select text from NVTX_EVENTS").fetchone()
    assert name == "draft-" + "a-" * 20_000


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


PLANTED = ["hunter2", "abcd1234SECRET", "s3cr3tpw", "10.1.2.3", "ault43", "148.187.105.53", "sk-live-XYZ123", "alice",
           "secret_app_vm_root", "vmhost9", "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345",
           # IPv6 shortened with "::" (a review found these kept), an ssh target
           "fe80::1ff:fe23:4567:890a", "2001:db8::7", "bob@gpuhost9", "gpuhost9"]


def plant(path):
    """Secrets of every kind the issue found leaking, planted in a real H200 export."""
    con = sqlite3.connect(path)
    sid = con.execute("select max(id) from StringIds").fetchone()[0]
    texts = [
        "password hunter2\n['--password', 'hunter2']\n{\"api_key\": \"abcd1234SECRET\"}\npostgres://admin:s3cr3tpw@db.internal/x\n"
        "ault43:1234:1234 [0] NCCL INFO NET/Socket : Using [0]eth0:10.1.2.3<0>\nenp225s0f1:148.187.105.53",  # program output
        "auth --password hunter2 --api-key sk-live-XYZ123",
        "file:///home/alice/run.py https://alice:pw@host/x host=vmhost9 user=alice cwd=/srv/x/secret_app_vm_root",
        "peer fe80::1ff:fe23:4567:890a ok; addr=[2001:db8::7]:29500; ssh bob@gpuhost9",
        "log written to report_vmhost9_483927.txt",  # the export host inside a file name, next to '_'
    ]
    for i, t in enumerate(texts, start=1):
        con.execute("insert into StringIds (id, value) values (?, ?)", (sid + i, t))
    con.execute("create table if not exists ProcessStreams (globalPid INTEGER, filenameId INTEGER, contentId INTEGER)")
    con.execute("insert into ProcessStreams values (0, ?, ?)", (sid + 1, sid + 1))
    gtid = con.execute("select globalTid from NVTX_EVENTS limit 1").fetchone()[0]
    con.execute("insert into NVTX_EVENTS (start, end, eventType, globalTid, text) values (1, NULL, 34, ?, ?)", (gtid, texts[1]))
    con.execute("insert into NVTX_EVENTS (start, end, eventType, globalTid, textId) values (2, NULL, 34, ?, ?)", (gtid, sid + 3))
    con.execute("update META_DATA_EXPORT set value = 'vmhost9' where name = 'EXPORT_HOST'")
    con.execute("insert into META_DATA_EXPORT (name, value) values ('EXPORT_PARAM_OUTPUT_FILE', 'report_vmhost9_483927.sqlite')")
    con.execute("insert into META_DATA_CAPTURE (name, value) values ('PROCESS_COMMAND_LINE', ?)", ("python serve.py --api-key " + TOKEN,))
    con.execute("create table if not exists TARGET_INFO_SYSTEM_ENV (globalVid INTEGER, devStateName TEXT NOT NULL, name TEXT NOT NULL, nameEnum INTEGER NOT NULL, value TEXT NOT NULL)")
    con.execute("insert into TARGET_INFO_SYSTEM_ENV (globalVid, devStateName, name, nameEnum, value) values (1, 'env', 'HF_TOKEN', 0, ?)", ("HF_TOKEN=" + TOKEN,))
    con.commit()
    con.close()


def test_no_planted_secret_survives_anywhere(tmp_path):
    import shutil

    src = tmp_path / "planted.sqlite"
    shutil.copy(H200 / "eagle_gpu_bound.sqlite", src)
    plant(src)
    text = all_text(src)
    assert all(p in text for p in PLANTED if p != "vmhost9")  # they are there before
    out = tmp_path / "clean.sqlite"
    res = run_cli("scrub", str(src), "-o", str(out))
    assert res.returncode == 0, res.stderr
    text, raw = all_text(out), out.read_bytes()
    for p in PLANTED:
        assert p not in text and p.encode() not in raw, p
    # and the analysis is the same as the planted original's
    a = json.loads(run_cli("report", "--json", str(src)).stdout)
    b = json.loads(run_cli("report", "--json", str(out)).stdout)
    assert [r["phases"] for r in a["ranks"]] == [r["phases"] for r in b["ranks"]]


def test_non_utf8_text_is_scrubbed_not_fatal(tmp_path):
    import shutil

    src = tmp_path / "bytes.sqlite"
    shutil.copy(H200 / "eagle_gpu_bound.sqlite", src)
    con = sqlite3.connect(src)
    con.execute("insert into StringIds (id, value) values (9999999, cast(X'ff70617373776f726420687574657232' as text))")
    con.commit()
    con.close()
    res = run_cli("scrub", str(src), "-o", str(tmp_path / "out.sqlite"))
    assert res.returncode == 0, res.stderr
    assert b"hunter2" not in (tmp_path / "out.sqlite").read_bytes()


import pytest  # noqa: E402

from conftest import DEMO2, SAMPLES  # noqa: E402


@pytest.mark.parametrize("trace", [DEMO2 / "nccl_skew" / "rank1.sqlite", SAMPLES / "demo_h200" / "gpu_bound" / "report.sqlite", H200 / "eagle_graph_verify.sqlite"],
                         ids=lambda p: p.parent.name + "/" + p.name)
def test_scrub_keeps_every_sample_analysis(tmp_path, trace):
    out = tmp_path / "s.sqlite"
    assert run_cli("scrub", str(trace), "-o", str(out)).returncode == 0
    a = json.loads(run_cli("report", str(trace), "--json").stdout)
    b = json.loads(run_cli("report", str(out), "--json").stdout)
    assert [r["phases"] for r in a["ranks"]] == [r["phases"] for r in b["ranks"]]
    assert [r["cycles"] for r in a["ranks"]] == [r["cycles"] for r in b["ranks"]]


def test_an_interrupted_scrub_leaves_no_copy_behind(tmp_path, monkeypatch):
    # GIVEN a scrub interrupted (Ctrl-C) inside its SQL pass over its copy, which still holds every secret
    import pytest

    from tracerecon.nsys import scrub

    def interrupted(value, hosts=()):  # what SIGINT does when it lands in scrub's SQL function
        raise KeyboardInterrupt

    monkeypatch.setattr(scrub, "scrub_text", interrupted)
    dst = tmp_path / "out.sqlite"
    # WHEN it runs THEN the interrupt goes through, and neither the output nor a hidden
    # half-scrubbed copy is left in its folder
    with pytest.raises(KeyboardInterrupt):
        scrub.scrub_export(H200 / "eagle_gpu_bound.sqlite", dst)
    assert list(tmp_path.iterdir()) == []


def test_a_scrub_interrupted_with_its_transaction_open_leaves_no_journal_behind(tmp_path, monkeypatch):
    # GIVEN an export with a secret in its strings (its scrub rewrites a row, opening the copy's
    # write transaction: SQLite's rollback journal beside the copy holds the unscrubbed pages),
    # and a scrub interrupted (Ctrl-C, SIGTERM) at the first text it scrubs once that journal is there
    import shutil

    import pytest

    from tracerecon.nsys import scrub

    src = tmp_path / "in" / "t.sqlite"
    src.parent.mkdir()
    shutil.copy(H200 / "eagle_gpu_bound.sqlite", src)
    con = sqlite3.connect(src)
    con.execute("insert into StringIds values (990001, 'HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz123456')")
    con.commit()
    con.close()
    out = tmp_path / "out"
    out.mkdir()
    journals = []
    real = scrub.scrub_text

    def interrupted(value, hosts=()):
        journals.extend(p.name for p in out.iterdir() if p.name.endswith("-journal"))
        if journals:
            raise KeyboardInterrupt
        return real(value, hosts)

    monkeypatch.setattr(scrub, "scrub_text", interrupted)
    # WHEN it runs
    with pytest.raises(KeyboardInterrupt):
        scrub.scrub_export(src, out / "s.sqlite")
    # THEN the journal was there when it stopped, and nothing is left in the output's folder
    # (the copy was removed, its journal left: one more each time, named by the process id)
    assert journals
    assert list(out.iterdir()) == []


def test_a_scrub_onto_a_full_disk_names_the_output_not_the_input(tmp_path, monkeypatch):
    # GIVEN a copy that can hold one page (as a full disk: SQLITE_FULL while the export is copied)
    import sqlite3 as real_sqlite3

    import pytest

    from tracerecon.errors import BadTraceError, TraceReconError
    from tracerecon.nsys import scrub

    connect = real_sqlite3.connect

    def one_page(path, *args, **kwargs):
        con = connect(path, *args, **kwargs)
        con.execute("pragma max_page_count = 1")
        return con

    monkeypatch.setattr(scrub.sqlite3, "connect", one_page)
    # WHEN scrubbed THEN the error names the output (the input's copy failed: "cannot copy"
    # naming the export, as if it were damaged), and nothing is left
    with pytest.raises(TraceReconError) as err:
        scrub.scrub_export(H200 / "eagle_gpu_bound.sqlite", tmp_path / "s.sqlite")
    assert not isinstance(err.value, BadTraceError) and str(err.value).startswith(f"{tmp_path / 's.sqlite'}: cannot write ("), str(err.value)
    assert list(tmp_path.iterdir()) == []


def test_a_scrub_whose_copy_another_holds_locked_names_the_output(tmp_path, monkeypatch):
    # GIVEN a scrub whose temporary copy another connection holds an exclusive lock on (another
    # process, an NFS lock daemon) when the scrub of the copy begins
    import pytest

    from tracerecon.errors import BadTraceError, TraceReconError
    from tracerecon.nsys import scrub

    scrub_copy, holders = scrub._scrub_in_place, []

    def locked(path):
        holder = sqlite3.connect(path, isolation_level=None, timeout=0)
        holder.execute("begin exclusive")
        holders.append(holder)
        return scrub_copy(path)

    monkeypatch.setattr(scrub, "_scrub_in_place", locked)
    # WHEN scrubbed THEN the error names the output, not the input as damaged, and nothing is left
    try:
        with pytest.raises(TraceReconError) as err:
            scrub.scrub_export(H200 / "eagle_gpu_bound.sqlite", tmp_path / "s.sqlite")
    finally:
        for holder in holders:
            holder.close()
    assert not isinstance(err.value, BadTraceError) and str(err.value).startswith(f"{tmp_path / 's.sqlite'}: scrub failed ("), str(err.value)
    assert list(tmp_path.iterdir()) == []


def test_secrets_in_blobs_basic_credentials_and_private_keys_are_redacted(tmp_path):
    # GIVEN an export with a token in a blob (an NVTX payload), HTTP basic credentials and a
    # private key block in strings
    def plant_secrets(con):
        con.execute("update NVTX_EVENTS set binaryData = cast('HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz123456' as blob) where rowid = 1")
        con.execute("insert into StringIds values (990001, 'curl -H \"Authorization: Basic dXNlcjpodW50ZXIy\" x')")
        con.execute("insert into StringIds values (990002, 'key: -----BEGIN OPENSSH PRIVATE KEY----- b3BlbnNzaC1rZXktdjEAAAAABG5vbmU -----END OPENSSH PRIVATE KEY----- done')")
        con.execute("insert into StringIds values (990003, cast(x'00ff10' || cast('password=hunter2' as blob) as blob))")
        con.execute("insert into StringIds values (990004, cast('git clone https://alice:S3cretpw@github.com/org/repo' as blob))")

    src = edited_copy(tmp_path, plant_secrets, "t.sqlite")
    # WHEN scrubbed
    res = run_cli("scrub", str(src), "-o", str(tmp_path / "s.sqlite"))
    assert res.returncode == 0, res.stderr
    out = sqlite3.connect(tmp_path / "s.sqlite")
    dump = b"".join(v if isinstance(v, bytes) else str(v).encode() for (v,) in out.execute("select binaryData from NVTX_EVENTS where rowid = 1"))
    dump += b"".join(v if isinstance(v, bytes) else str(v).encode() for (v,) in out.execute("select value from StringIds where id > 990000"))
    # THEN none of the secrets is left, and the blob's other bytes are as they were
    for secret in (b"hf_abcdefghijklmnopqrstuvwxyz123456", b"dXNlcjpodW50ZXIy", b"b3BlbnNzaC1rZXktdjEAAAAABG5vbmU", b"hunter2", b"S3cretpw"):
        assert secret not in dump
    (blob,) = out.execute("select value from StringIds where id = 990003").fetchone()
    assert blob == b"\x00\xff\x10password=[REDACTED]"


def test_a_secret_in_a_binary_payload_ends_at_its_next_binary_byte():
    # GIVEN an NVTX payload of binary fields around a "password=..." text
    from tracerecon.nsys.scrub import scrub_secrets_in_bytes

    payload = b"\x01\x00\x00\x00password=blobpw123\x00\x07\x00\x00\x00\x2a\x00\x00\x00payloadtail"
    # WHEN scrubbed THEN the secret goes and every byte after it stays (they were eaten up to
    # the next whitespace)
    assert scrub_secrets_in_bytes(payload) == b"\x01\x00\x00\x00password=[REDACTED]\x00\x07\x00\x00\x00\x2a\x00\x00\x00payloadtail"
    assert scrub_secrets_in_bytes(b"token=abc123def\x00\x00\x00\x10 0") == b"token=[REDACTED]\x00\x00\x00\x10 0"


def test_what_looks_like_an_address_but_is_none_is_kept():
    # GIVEN texts with colons and at-signs that are no address: a time of day, C++ names, a MAC
    # address (no IPv6 form), a symbol version,
    from tracerecon.nsys.scrub import scrub_text

    # and PCI bus ids of GPUs (TARGET_INFO_GPU.busLocation; an older scrub wrote '[ip].0' for them)
    kept = ["at 12:30:45 done", "void at::native::vectorized_elementwise_kernel", "c10::cuda::stream", "memcpy@GLIBC_2.14",
            "0000:00:06.0", "0000:1b:00.0", "00000000:C1:00.0"]
    # WHEN scrubbed THEN they are as they were, and the addresses beside them are not
    assert [scrub_text(t) for t in kept] == kept
    assert scrub_text("::1 and fe80::1%eth0 and 1:2:3:4:5:6:7:8") == "[ip] and [ip] and [ip]"


def test_an_environment_block_of_nul_separated_entries_is_redacted_entry_by_entry():
    # GIVEN a text value as nsys stores a child process's environment (a real H200 trace of a
    # process that started another: one StringIds value, entries separated by NUL, names in any
    # case), with a path and a proxy with credentials among them
    from tracerecon.nsys.scrub import scrub_text

    block = "PMIX_MCA_gds=hash\x00http_proxy=http://alice:pw@10.0.0.1:3128\x00NSYS_AGENT_TMP_DIR=/tmp\x00/usr/bin/python3\x00PATH=/home/alice/bin:/usr/bin"
    # WHEN scrubbed THEN every NAME=VALUE entry keeps its name only, and the rest is scrubbed as text
    assert scrub_text(block).split("\x00") == ["PMIX_MCA_gds=[REDACTED]", "http_proxy=[REDACTED]", "NSYS_AGENT_TMP_DIR=[REDACTED]", "[path]", "PATH=[REDACTED]"]


def test_a_command_line_keeps_the_engines_settings_and_loses_its_secrets():
    from tracerecon.nsys.scrub import REDACTED, redact_command, scrub_argv

    # GIVEN an engine's command line: settings whose names hold "token" or "auth", and secrets
    # given as the next argument, after '=', or with a space in them
    argv = ["vllm", "serve", "--max-num-batched-tokens", "8192", "--speculative-num-draft-tokens", "4", "--tokenizer", "tok",
            "--author", "me", "--hf-token", "hf_abcdefghijklmnopqrstuvwxyz12", "--password", "my secret",
            "--api-key=sk-1234567890abcdefgh", "--aws-secret-access-key", "AKIAXXXX"]
    # WHEN scrubbed as run.json's list and as the echoed command line
    for got in (scrub_argv(argv), redact_command(argv)):
        # THEN the settings stay and every secret is gone, whole
        assert got[2:10] == ["--max-num-batched-tokens", "8192", "--speculative-num-draft-tokens", "4", "--tokenizer", "tok", "--author", "me"]
        assert got[10:] == ["--hf-token", REDACTED, "--password", REDACTED, f"--api-key={REDACTED}", "--aws-secret-access-key", REDACTED]


def test_a_host_name_goes_from_words_and_file_names_and_stays_in_kernel_and_phase_names():
    # GIVEN a host called "gpu" and one called "ault43.cscs.ch"
    from tracerecon.nsys.scrub import scrub_text

    # THEN a host goes as a word of its own and inside file names: kernel and phase names that
    # hold it stay (the copy's analysis is the original's)
    assert scrub_text("at::native::gpu_kernel_impl<float> prefill_gpu on gpu", ("gpu",)) == "at::native::gpu_kernel_impl<float> prefill_gpu on [host]"
    assert scrub_text("report_ault43.cscs.ch_1.txt", ("ault43.cscs.ch",)) == "report_[host]_1.txt"
    assert scrub_text("saving report_dgxbox_1.sqlite, trace-dgxbox.nsys-rep", ("dgxbox",)) == "saving report_[host]_1.sqlite, trace-[host].nsys-rep"
    assert scrub_text("inference_step on inference", ("inference",)) == "inference_step on [host]"


def test_a_secret_holding_utf8_in_a_payload_is_redacted_whole_and_binary_bytes_after_one_stay():
    from tracerecon.nsys.scrub import scrub_secrets_in_bytes

    # UTF-8 text is text: the secret goes whole
    assert scrub_secrets_in_bytes(b"password=p\xc3\xa4ssw0rd-Secret123") == b"password=[REDACTED]"
    # bytes no UTF-8 text holds (a float's, a length's) end the secret and stay
    assert scrub_secrets_in_bytes(b"\n\x10password=hunter2\xf8?\x12\x05hello") == b"\n\x10password=[REDACTED]\xf8?\x12\x05hello"
    assert scrub_secrets_in_bytes(b"\n\x0eapi_key: s3cr3t\x96\x01\x10\x07") == b"\n\x0eapi_key: [REDACTED]\x96\x01\x10\x07"


def test_range_names_that_held_a_path_are_said_as_they_read_in_the_copy(tmp_path):
    # GIVEN phases named with an absolute path and an address, and one plain
    t = FakeTrace().phase_cycles(["load /models/llama", "10.0.0.1 draft", "verify"])
    src = t.write(tmp_path / "t.sqlite")
    # WHEN scrubbed
    res = run_cli("scrub", "-o", str(tmp_path / "s.sqlite"), str(src))
    # THEN one warning names the two renamed ranges as they now read (not as they were), and
    #      a --phase naming them so finds them in the copy
    assert res.returncode == 0, res.stderr
    warning = [ln for ln in res.stderr.splitlines() if "range name(s)" in ln]
    assert len(warning) == 1 and "2 NVTX range name(s)" in warning[0] and "'[ip] draft'" in warning[0] and "'load [path]'" in warning[0], res.stderr
    assert "/models" not in res.stderr and "10.0.0.1" not in res.stderr
    rep = run_cli("report", "--json", "--no-cache", str(tmp_path / "s.sqlite"), "--phase", "load [path]", "--phase", "[ip] draft", "--phase", "verify")
    assert [p["n"] for p in json.loads(rep.stdout)["ranks"][0]["phases"]] == [3, 3, 3], rep.stderr


def test_an_authorization_header_loses_its_credentials_whatever_their_length():
    # GIVEN authorization headers as a program prints them: a scheme word, then credentials
    # (short ones too: a review found "Authorization: Bearer abc.def.ghi" kept its token, the
    # scheme word taken for the value)
    from tracerecon.nsys.scrub import scrub_secrets_in_bytes, scrub_text

    # WHEN scrubbed THEN the scheme and the credentials go; the rest of the text stays
    assert scrub_text('curl -H "Authorization: Bearer abc.def.ghi" http') == 'curl -H "Authorization: [REDACTED]" http'
    assert scrub_text("Proxy-Authorization: Basic dXNlcjpw done") == "Proxy-Authorization: [REDACTED] done"
    # a Digest or AWS signature header's fields all go (the user and the response hash were kept),
    # and no word of the next line does
    digest = 'Authorization: Digest username="bob", realm="x", nonce="abc", response="6629fae4"\nnext line'
    assert scrub_text(digest) == "Authorization: [REDACTED]\nnext line"
    assert scrub_text("Authorization: AWS4-HMAC-SHA256 Credential=AKID/2026/s3, Signature=abcdef") == "Authorization: [REDACTED]"
    assert scrub_text("Authorization: Bearer\nnext line here") == "Authorization: [REDACTED]\nnext line here"
    assert scrub_text("auth=token ghp_xx") == "auth=[REDACTED]"
    assert scrub_secrets_in_bytes(b"\x01Authorization: Bearer abc.def\x00tail") == b"\x01Authorization: [REDACTED]\x00tail"
    # and a word that is a scheme's name elsewhere stays
    assert scrub_text("basic block 3, token count 12") == "basic block 3, token count 12"


def test_secret_options_named_by_key_pass_or_secret_lose_their_values_whole():
    # GIVEN argument lists with secrets after options named --secret-key, --aws-secret-key, --key,
    # --db-pass, --bearer, --jwt, and engine settings whose names only look alike
    from tracerecon.nsys.scrub import REDACTED, scrub_argv, scrub_text

    for option in ("--secret-key", "--aws-secret-key", "--key", "--pass", "--db-pass", "--ssh-key", "--bearer", "--jwt", "--client-secret"):
        # WHEN scrubbed THEN the value after each is gone
        assert scrub_argv(["serve", option, "Zq9Priv8"]) == ["serve", option, REDACTED], option
        # and in a trace's text (a command line, a printed argv list) the same
        assert scrub_text(f"serve {option} Zq9Priv8 --x 1") == f"serve {option} {REDACTED} --x 1", option
        assert scrub_text(f"serve {option}=Zq9Priv8") == f"serve {option}={REDACTED}", option
        assert scrub_text(f"['serve', '{option}', 'Zq9Priv8']") == f"['serve', '{option}', '{REDACTED}']", option
    for setting in ("--tokenizer", "--num-speculative-tokens", "--bypass", "--kv-cache-dtype"):
        assert scrub_argv(["serve", setting, "auto"]) == ["serve", setting, "auto"], setting
    for setting in ("--bypass", "--kv-cache-dtype", "--key-size", "--monkey"):
        assert scrub_text(f"serve {setting} auto") == f"serve {setting} auto", setting
    # key=value and JSON pairs whose compound key ends in pass or key; the word alone is too
    # common in range and kernel names ("pass: 3", "KeyT=int") to be taken as one
    assert scrub_text('db_pass=Zq9 {"ssh_key": "Zq9"}') == f'db_pass={REDACTED} {{"ssh_key": "{REDACTED}"}}'
    assert scrub_text("forward pass: 3, key=2, radix<KeyT=int>") == "forward pass: 3, key=2, radix<KeyT=int>"
    # and a quoted value is hidden whole, not only its first word
    assert scrub_text('run --password="two words" --x') == f'run --password="{REDACTED}" --x'
    assert scrub_text("run --password 'two words' --x") == f"run --password '{REDACTED}' --x"


def test_program_output_an_nsys_2025_export_keeps_is_removed(tmp_path):
    # GIVEN nsys 2025's export of the README's engine, its program output (ANALYSIS_FILE's
    # pid_N_stdout.log and stderr.log) holding a user's name and a prompt
    src = edited_copy(tmp_path, lambda con: con.execute(
        "update StringIds set value = 'engine started by alice; prompt: my ssn is 123-45-6789' where id = (select distinct contentId from ANALYSIS_FILE)"))
    (content,) = sqlite3.connect(src).execute("select distinct contentId from ANALYSIS_FILE").fetchone()
    # WHEN scrubbed THEN neither is in the copy, and the analysis is the same
    out = tmp_path / "out.sqlite"
    assert run_cli("scrub", str(src), "-o", str(out)).returncode == 0
    data = out.read_bytes()
    assert b"alice" not in data and b"123-45-6789" not in data
    got = sqlite3.connect(out).execute("select value from StringIds where id = ?", (content,)).fetchone()
    assert got == ("[program output removed]",)


def test_scrub_refuses_to_write_over_the_inputs_write_ahead_log(tmp_path):
    # GIVEN an export WHEN scrubbed with -o naming its -wal, -shm or -journal THEN one line, exit 2
    src = tmp_path / "in.sqlite"
    shutil.copy(H200 / "eagle_gpu_bound.sqlite", src)
    for side in ("-wal", "-shm", "-journal"):
        res = run_cli("scrub", str(src), "-o", f"{src}{side}")
        assert res.returncode == 2 and "is part of the input" in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
        assert not Path(f"{src}{side}").exists()


def test_program_output_an_nsys_2024_export_holds_as_its_own_text_is_removed(tmp_path):
    # GIVEN an export whose ANALYSIS_FILE holds the program's output as its own text, as nsys
    # 2024.5 writes it (id, filename, content, globalPid: no contentId), a user's name and a
    # prompt in the stdout log, the stderr log empty
    def inline_output(con):
        con.execute("drop table if exists ANALYSIS_FILE")
        con.execute("create table ANALYSIS_FILE(id INTEGER NOT NULL PRIMARY KEY, filename TEXT NOT NULL, content TEXT NOT NULL, globalPid INTEGER NOT NULL)")
        con.executemany("insert into ANALYSIS_FILE values (?, ?, ?, 0)",
                        [(0, "pid_1115_stdout.log", "engine started by alice; prompt: my ssn is 123-45-6789"), (1, "pid_1115_stderr.log", "")])

    src = edited_copy(tmp_path, inline_output)
    # WHEN scrubbed THEN neither is in the copy: the log says the output was removed, the empty
    # one stays empty
    out = tmp_path / "out.sqlite"
    assert run_cli("scrub", str(src), "-o", str(out)).returncode == 0
    data = out.read_bytes()
    assert b"alice" not in data and b"123-45-6789" not in data
    got = sqlite3.connect(out).execute("select filename, content from ANALYSIS_FILE order by id").fetchall()
    assert got == [("pid_1115_stdout.log", "[program output removed]"), ("pid_1115_stderr.log", "")]
