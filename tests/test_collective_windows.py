"""Collectives across rank traces that cover different stretches of the run.

The k-th kernel of a name is one collective on every rank only where the traces start at the
same point of the run. A rank whose trace began later (``nsys profile --delay``, a timed capture)
holds fewer kernels; its kernels are then matched by end time, where a clock relates the traces,
and the renumbering is a warning. Expected numbers are worked out by hand from the kernels'
times, or read from the SQLite files with SQL.
"""

from __future__ import annotations

import shutil
import sqlite3
import lzma

from conftest import SAMPLES
from nsys_factory import FakeTrace
from tracerecon.api import load as analyze

U = 1000  # 1 us
AR = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"
SEND_RECV = "ncclDevKernel_SendRecv"


def rank_file(tmp_path, rank: int, collectives: list[tuple[int, int]], session_utc: int | None = 5 * 10**18, machine: str = "A",
              name: str = AR) -> str:
    """One rank's export: a verify range over 10 ms and a communication kernel (an all-reduce,
    or ``name``) per (start, end) in us, taken on ``machine`` (its two GPUs' UUIDs in TARGET_INFO_GPU)."""
    t = FakeTrace()
    t.range("verify", 0, 10_000 * U)
    for start, end in collectives:
        t.kernel(t.call("cudaLaunchKernel", (start - 5) * U, (start - 4) * U), start * U, end * U, name=name)
    path = t.write(tmp_path / f"rank{rank}.sqlite")
    sqlite3.connect(path).executescript(
        "create table TARGET_INFO_GPU (id integer, name text, uuid text, busLocation text, smCount integer);"
        f"insert into TARGET_INFO_GPU values (0, 'H200', '{machine}-gpu0', '0', 132), (1, 'H200', '{machine}-gpu1', '1', 132);")
    if session_utc is not None:
        sqlite3.connect(path).executescript(
            f"create table TARGET_INFO_SESSION_START_TIME (utcEpochNs integer); insert into TARGET_INFO_SESSION_START_TIME values ({session_utc});")
    return path


def test_a_rank_whose_trace_began_two_collectives_later_is_matched_by_end_time(tmp_path):
    # GIVEN rank 0 holds six all-reduces, every 100 us, each starting at 100k+10 and ending at
    # 100k+60; rank 1's trace began two collectives later (same session clock): it holds only
    # k = 2..5, arriving 30 us after rank 0 (start 100k+40) and ending with it
    r0 = rank_file(tmp_path, 0, [(100 * k + 10, 100 * k + 60) for k in range(6)])
    r1 = rank_file(tmp_path, 1, [(100 * k + 40, 100 * k + 60) for k in range(2, 6)])
    # WHEN analysed together
    a = analyze([r0, r1])
    # THEN collectives k = 2..5 are matched, each with a 30 us skew, rank 1 last, rank 0 waiting
    # 30 us of its 50 us kernel; rank 0's first two match nothing
    rows = a.cross.collectives.to_pylist()
    assert [(r["rank"], r["start_ns"] // U, r["skew_ns"] // U, r["last_rank"], r["wait_ns"] // U) for r in rows] == [
        (rank, 100 * k + (10 if rank == 0 else 40), 30, 1, 30 if rank == 0 else 0) for k in range(2, 6) for rank in (0, 1)]
    assert [(c.n_collectives, c.wait_ns // U) for c in a.cross.comm] == [(6, 120), (4, 0)]
    # and the clock offset stays the session's (both 0), and the renumbering is said
    assert a.cross.alignment_of(1).offset_ns == 0
    assert any(f"rank 1 holds 4 {AR} kernels, rank 0 6" in w and "its first is rank 0's #3" in w for w in a.warnings)


def test_a_collective_record_dropped_mid_run_leaves_the_others_matched(tmp_path):
    # GIVEN one machine's clock, rank 0 with ten all-reduces (100k+10 .. 100k+60 us) and rank 1
    # with the same, arriving 30 us later (100k+40 .. 100k+60), but for k = 5: its record was
    # dropped (CUPTI's buffers overflowed)
    r0 = rank_file(tmp_path, 0, [(100 * k + 10, 100 * k + 60) for k in range(10)])
    r1 = rank_file(tmp_path, 1, [(100 * k + 40, 100 * k + 60) for k in range(10) if k != 5])
    # WHEN analysed
    a = analyze([r0, r1])
    # THEN the other nine are matched each with the kernel that ends with it: 30 us skew, rank 1
    # last, rank 0 waiting 30 us; rank 0's k = 5 matches nothing (no wait)
    rows = a.cross.collectives.to_pylist()
    assert [(r["rank"], r["start_ns"] // U, r["skew_ns"] // U, r["last_rank"], r["wait_ns"] // U) for r in rows] == [
        (rank, 100 * k + (10 if rank == 0 else 40), 30, 1, 30 if rank == 0 else 0) for k in range(10) if k != 5 for rank in (0, 1)]
    assert [(c.n_collectives, c.wait_ns // U) for c in a.cross.comm] == [(10, 270), (9, 0)]
    # and it is said
    assert any(f"rank 1 holds 9 {AR} kernels, rank 0 10: matched each to the one of rank 0's that ends with it" in w
               and "1 of rank 0's and 0 of rank 1's have no partner" in w for w in a.warnings)


def test_a_first_rank_whose_trace_began_later_is_matched_by_end_time(tmp_path):
    # GIVEN the other way round: rank 0's trace began one collective later than rank 1's
    r0 = rank_file(tmp_path, 0, [(100 * k + 40, 100 * k + 60) for k in range(1, 4)])
    r1 = rank_file(tmp_path, 1, [(100 * k + 10, 100 * k + 60) for k in range(4)])
    # WHEN analysed
    a = analyze([r0, r1])
    # THEN k = 1..3 are matched (rank 0 last, rank 1 waits 30 us each); rank 1's first matches nothing
    rows = a.cross.collectives.to_pylist()
    assert [(r["rank"], r["start_ns"] // U, r["last_rank"], r["wait_ns"] // U) for r in rows] == [
        (rank, 100 * k + (40 if rank == 0 else 10), 0, 0 if rank == 0 else 30) for k in range(1, 4) for rank in (0, 1)]
    assert any("its #2 is rank 0's first" in w for w in a.warnings)


def test_a_trace_that_ended_earlier_keeps_the_order_and_says_nothing(tmp_path):
    # GIVEN rank 1's trace ended two collectives before rank 0's: the k-th is still the k-th
    r0 = rank_file(tmp_path, 0, [(100 * k + 10, 100 * k + 60) for k in range(6)])
    r1 = rank_file(tmp_path, 1, [(100 * k + 40, 100 * k + 60) for k in range(4)])
    a = analyze([r0, r1])
    # THEN k = 0..3 are matched in order, 30 us skew each, and no warning about it
    rows = a.cross.collectives.to_pylist()
    assert [(r["rank"], r["start_ns"] // U, r["skew_ns"] // U) for r in rows] == [
        (rank, 100 * k + (10 if rank == 0 else 40), 30) for k in range(4) for rank in (0, 1)]
    assert not any("holds" in w for w in a.warnings)


def test_with_no_clock_to_tell_the_order_is_kept_and_the_counts_are_said(tmp_path):
    # GIVEN the same late start, but no session start in either trace: nothing relates the clocks
    r0 = rank_file(tmp_path, 0, [(100 * k + 10, 100 * k + 60) for k in range(6)], session_utc=None)
    r1 = rank_file(tmp_path, 1, [(100 * k + 40, 100 * k + 60) for k in range(2, 6)], session_utc=None)
    a = analyze([r0, r1])
    # THEN the k-th is matched with the k-th (4 collectives), and a warning says the counts differ
    assert a.cross.collectives.num_rows == 8
    assert any(f"rank 1 holds 4 {AR} kernels, rank 0 6: matched in order" in w and "no session times" in w for w in a.warnings)


def test_traces_of_two_machines_keep_the_order_where_the_counts_differ(tmp_path):
    # GIVEN two machines whose session clocks disagree by 1030 us (ten collectives' spacing),
    # and rank 1's trace ended two collectives early: the k-th is still the k-th
    r0 = rank_file(tmp_path, 0, [(100 * k + 10, 100 * k + 60) for k in range(12)], machine="A")
    r1 = rank_file(tmp_path, 1, [(100 * k + 40, 100 * k + 60) for k in range(10)], session_utc=5 * 10**18 - 1030 * U, machine="B")
    a = analyze([r0, r1])
    # THEN the ten are matched in order, 30 us skew each once the collectives correct the clocks
    # by 1030 us, and a warning says the counts differ and why the order was kept
    al = a.cross.alignment_of(1)
    assert (al.offset_ns, al.method) == (0, "session start + collectives")
    assert [r["skew_ns"] // U for r in a.cross.collectives.to_pylist()] == [30] * 20
    assert any(f"rank 1 holds 10 {AR} kernels, rank 0 12: matched in order" in w and "different machines" in w for w in a.warnings)
    # and, the 1.030 ms moved being more than half the 0.100 ms between collectives (a capture
    # begun ten collectives later there would read the same), the offset's uncertainty is
    # unknown, not 0, and a warning says so
    assert al.offset_uncertainty_ns is None
    assert any("rank 1: matching its collectives in order moved its clock +1.030 ms from its session start time, more than half the "
               "0.100 ms between collectives" in w for w in a.warnings), a.warnings


def test_traces_of_two_machines_whose_clocks_agree_keep_a_known_uncertainty(tmp_path):
    # GIVEN two machines whose session clocks disagree by 20 us (a fifth of the collectives'
    # 100 us spacing): rank 1's session began 30 us before rank 0's by the clocks, and its ten
    # all-reduces run 20..70 us after its k-th 100 us on its own clock (one ends at 83: jitter)
    # where rank 0's run 10..60
    r0 = rank_file(tmp_path, 0, [(100 * k + 10, 100 * k + 60) for k in range(10)], machine="A")
    r1 = rank_file(tmp_path, 1, [(100 * k + 20, 100 * k + (83 if k == 4 else 70)) for k in range(10)], session_utc=5 * 10**18 - 30 * U,
                   machine="B")
    a = analyze([r0, r1])
    # THEN the session clocks put its ends at 100k+40, 20 us before rank 0's; the collectives
    # move its offset from -30 to -10 us (the median end residual), the uncertainty is the
    # residuals' median absolute deviation (0: nine of ten agree), and nothing is said of whole
    # collectives
    al = a.cross.alignment_of(1)
    assert (al.offset_ns // U, al.offset_uncertainty_ns) == (-10, 0)
    assert not any("moved its clock" in w for w in a.warnings), a.warnings


def test_ends_that_fit_no_numbering_keep_the_order_and_are_said(tmp_path):
    # GIVEN one machine, and rank 1's kernels ending 70 us after rank 0's on the session clocks
    # (spacing 100 us): the nearest of rank 0's ends is the next one, 30 us off, against 70 us
    # for the same one; neither fits 4x better, as no collective's kernels would end so apart
    r0 = rank_file(tmp_path, 0, [(100 * k + 10, 100 * k + 60) for k in range(6)])
    r1 = rank_file(tmp_path, 1, [(100 * k + 10, 100 * k + 60) for k in range(5)], session_utc=5 * 10**18 + 70 * U)
    a = analyze([r0, r1])
    # THEN the order is kept (five collectives) and a warning says no numbering fits clearly better
    assert a.cross.collectives.num_rows == 10
    assert any("matched in order" in w and "fit no numbering clearly better" in w for w in a.warnings)


def test_real_two_rank_run_with_one_trace_begun_three_collectives_late(tmp_path):
    # GIVEN the two-H200 NCCL run (one export per rank) with rank 1's first three bf16
    # all-reduce kernels deleted, as if its capture had begun three collectives later
    src = SAMPLES / "demo_shapes_h200x2" / "nccl_skew_phases"
    for r in (0, 1):
        with lzma.open(src / f"rank{r}.sqlite.xz") as f, open(tmp_path / f"rank{r}.sqlite", "wb") as out:
            shutil.copyfileobj(f, out)
    kernels = ("select k.start, k.end from CUPTI_ACTIVITY_KIND_KERNEL k join StringIds s on s.id = k.shortName "
               f"where s.value = '{AR}' order by k.start")
    con1 = sqlite3.connect(tmp_path / "rank1.sqlite")
    full1 = con1.execute(kernels).fetchall()
    con1.execute(f"delete from CUPTI_ACTIVITY_KIND_KERNEL where rowid in (select k.rowid from CUPTI_ACTIVITY_KIND_KERNEL k join StringIds s "
                 f"on s.id = k.shortName where s.value = '{AR}' order by k.start limit 3)")
    con1.commit()
    con1.close()
    full0 = sqlite3.connect(tmp_path / "rank0.sqlite").execute(kernels).fetchall()
    (utc0,), (utc1,) = (sqlite3.connect(tmp_path / f"rank{r}.sqlite").execute("select utcEpochNs from TARGET_INFO_SESSION_START_TIME").fetchone() for r in (0, 1))
    # WHEN analysed
    a = analyze([tmp_path / "rank0.sqlite", tmp_path / "rank1.sqlite"])
    # THEN rank 0's k-th bf16 all-reduce (k >= 3) is paired with rank 1's k-th of the full trace,
    # as their ends show: on the session clocks they end within 50 us of each other
    rows = [r for r in a.cross.collectives.to_pylist() if r["name"] == AR]
    pairs = {(r["collective"], r["rank"]): r["start_ns"] for r in rows}
    n = len(full0)
    assert len(rows) == 2 * (n - 3)
    got = sorted((pairs[(c, 0)], pairs[(c, 1)]) for c in {c for c, _ in pairs})
    assert got == [(full0[k][0], full1[k][0]) for k in range(3, n)]
    assert max(abs((full1[k][1] + utc1 - utc0) - full0[k][1]) for k in range(3, n)) < 50 * U
    # and the offset is the session starts' difference refined by under 50 us, not by a collective period
    assert abs(a.cross.alignment_of(1).offset_ns - (utc1 - utc0)) < 50 * U
    assert any("its first is rank 0's #4" in w for w in a.warnings)


def test_two_machines_with_equal_counts_keep_the_order_where_the_session_clocks_disagree(tmp_path):
    # GIVEN two machines whose session clocks disagree by 100 us (more than half the 100 us
    # period of their all-reduces) and traces that hold the same six collectives
    r0 = rank_file(tmp_path, 0, [(100 * k + 10, 100 * k + 60) for k in range(6)], session_utc=5 * 10**18, machine="A")
    r1 = rank_file(tmp_path, 1, [(100 * k + 40, 100 * k + 60) for k in range(6)], session_utc=5 * 10**18 + 100 * U, machine="B")
    a = analyze([r0, r1])
    # THEN the k-th is the k-th (no renumbering, no warning), and the collectives correct the
    # session offset of +100 us back to 0: the ends line up
    assert not any("holds" in w for w in a.warnings)
    al = a.cross.alignment_of(1)
    assert (al.offset_ns, al.method) == (0, "session start + collectives")
    assert [r["skew_ns"] // U for r in a.cross.collectives.to_pylist()] == [30] * 12


def test_one_machines_traces_begun_and_ended_apart_with_equal_counts_are_matched_by_end_time(tmp_path):
    # GIVEN one machine; rank 0's trace holds collectives k = 0..5, rank 1's k = 2..7 (begun and
    # ended two later): six kernels each, so the counts alone cannot tell
    r0 = rank_file(tmp_path, 0, [(100 * k + 10, 100 * k + 60) for k in range(6)])
    r1 = rank_file(tmp_path, 1, [(100 * k + 40, 100 * k + 60) for k in range(2, 8)])
    a = analyze([r0, r1])
    # THEN k = 2..5 are matched (30 us skew each), and the renumbering is said
    rows = a.cross.collectives.to_pylist()
    assert [(r["rank"], r["start_ns"] // U, r["skew_ns"] // U) for r in rows] == [
        (rank, 100 * k + (10 if rank == 0 else 40), 30) for k in range(2, 6) for rank in (0, 1)]
    (said,) = [w for w in a.warnings if f"rank 1 holds 6 {AR} kernels, rank 0 6" in w]
    assert "its first is rank 0's #3" in said
    # AND as the counts are equal, the warning names the other way such ends come about: the
    # kernels of another communicator running at other times (a PP=2 x TP=2 stage's all-reduces
    # against the other stage's had been said to come from traces covering other stretches alone)
    assert "(their traces cover different stretches of the run, or these are another communicator's kernels" in said


def test_ranks_of_two_communicators_on_one_machine_are_matched_within_each(tmp_path):
    # GIVEN one machine, four rank traces: ranks 0 and 2 all-reduce together every 200 us (ends
    # at 200k+60, rank 2 arriving 30 us late), ranks 1 and 3 are another communicator
    # all-reducing every 260 us (ends at 260k+97, rank 3 arriving 35 us late)
    r = [rank_file(tmp_path, 0, [(200 * k + 10, 200 * k + 60) for k in range(50)]),
         rank_file(tmp_path, 1, [(260 * k + 45, 260 * k + 97) for k in range(50)]),
         rank_file(tmp_path, 2, [(200 * k + 40, 200 * k + 60) for k in range(50)]),
         rank_file(tmp_path, 3, [(260 * k + 80, 260 * k + 97) for k in range(50)])]
    a = analyze(r)
    # THEN ranks 0, 2 and ranks 1, 3 are matched within each group: rank 0 waited 30 us at
    # each of its 50, rank 1 35 us; each collective is two ranks'; nothing is said to look like
    # another communicator (rank 1's ends within rank 0's span, 38, fall 60k+37 us past rank 0's
    # modulo 200: within 20 us of one of them for k = 3, 6 (mod 10), 33, 36: 8 of 38)
    assert [c.wait_ns for c in a.cross.comm] == [30 * U * 50, 35 * U * 50, 0, 0]
    coll = a.cross.collectives
    assert coll.num_rows == 200
    pairs = set(zip(coll["collective"].to_pylist(), coll["rank"].to_pylist()))
    assert pairs == {(k, r) for k in range(100) for r in ((0, 2) if k < 50 else (1, 3))}
    assert [w for w in a.warnings if "communicators" in w] == [
        f"{AR}: the ranks run 2 communicators of these kernels (told apart by when their kernels end on one machine's "
        "clock): ranks 0, 2; ranks 1, 3; they are matched, waited for and gate cycles within each (a tensor-parallel group of each "
        "pipeline stage or data-parallel replica)"]
    assert not any("look like another communicator" in w for w in a.warnings)
    # Each rank on the first rank's timeline (the session clocks agree: offsets 0): rank 1, which
    # ran no collective with rank 0, by its session start alone, its uncertainty unknown; rank 3
    # refined on rank 1's by their collectives, and carried over by rank 1's session start
    assert [x.method for x in a.cross.alignment] == ["shared clock", "session start", "session start + collectives", "session start + collectives"]
    assert [x.offset_ns for x in a.cross.alignment] == [0, 0, 0, 0]
    assert [x.offset_uncertainty_ns for x in a.cross.alignment] == [0, None, 0, None]


def test_a_rank_alone_in_ending_its_collectives_apart_is_matched_with_the_rest_and_said(tmp_path):
    # GIVEN one machine, three rank traces: ranks 0 and 1 all-reduce together every 100 us (ends
    # at 100k+60), rank 2's kernels of the name end every 130 us (130k+97): no other rank's end
    # with them (a clock off, or a communicator whose other ranks were not traced)
    r = [rank_file(tmp_path, 0, [(100 * k + 10, 100 * k + 60) for k in range(50)]),
         rank_file(tmp_path, 1, [(100 * k + 40, 100 * k + 60) for k in range(50)]),
         rank_file(tmp_path, 2, [(130 * k + 45, 130 * k + 97) for k in range(50)])]
    a = analyze(r)
    # THEN one communicator is no split: the three are matched as one group, as before groups
    # were told, and rank 2 is said to look like another communicator's (+772 us, as above)
    assert not any("communicators of these kernels" in w for w in a.warnings)
    assert a.cross.collectives.num_rows == 150
    said = [w for w in a.warnings if "look like another communicator" in w]
    assert len(said) == 1 and said[0].startswith("rank 2's collectives end +772 us from rank 0's")


def test_a_send_and_its_receive_are_no_collective_to_end_together(tmp_path):
    # GIVEN one machine, rank 0 sends (its kernel ends at 100k+40) and rank 1 receives (ends 60 us
    # later, at 100k+100): a send and its receive need not end together
    a = analyze([rank_file(tmp_path, 0, [(100 * k + 10, 100 * k + 40) for k in range(5)], name=SEND_RECV),
                 rank_file(tmp_path, 1, [(100 * k + 10, 100 * k + 100) for k in range(5)], name=SEND_RECV)])
    # THEN they are matched in order (k-th send with k-th receive), and nothing is said about
    # communicators or numbering (the nearest end after each send is the next receive's, 40 us
    # off against 60: end times would have paired them wrongly)
    rows = a.cross.collectives.to_pylist()
    assert [(r["rank"], r["start_ns"] // U, r["end_ns"] // U) for r in rows] == [
        (rank, 100 * k + 10, 100 * k + (40 if rank == 0 else 100)) for k in range(5) for rank in (0, 1)]
    assert not any("communicator" in w or "matched" in w for w in a.warnings)


def test_sends_and_receives_on_one_machine_leave_its_session_clock_as_it_is(tmp_path):
    # GIVEN a two-stage pipeline on one machine (equal session starts, GPUs in common): rank 0's
    # send runs 100k+60..100k+80, after its compute; rank 1's receive waits for it from 100k+10
    # and ends 22 us after the send, at 100k+102 (the transfer)
    a = analyze([rank_file(tmp_path, 0, [(100 * k + 60, 100 * k + 80) for k in range(5)], name=SEND_RECV),
                 rank_file(tmp_path, 1, [(100 * k + 10, 100 * k + 102) for k in range(5)], name=SEND_RECV)])
    # THEN rank 1 stays on the session clock (offset 0: fitting the ends would move it by the
    # 22 us transfer) and waits 60 - 10 = 50 us for each send, not 72
    assert [(al.rank, al.offset_ns, al.method) for al in a.cross.alignment] == [(0, 0, "shared clock"), (1, 0, "session start")]
    assert [r["wait_ns"] // U for r in a.cross.collectives.to_pylist() if r["rank"] == 1] == [50] * 5


def test_offsets_stay_on_the_first_ranks_timeline_when_it_ran_no_collective(tmp_path):
    # GIVEN three per-rank exports of one machine whose sessions began at +0, +300 and +500 us:
    # rank 0 ran only compute; ranks 1 and 2 all-reduce, their kernels ending together on the
    # machine's clock (rank 1 at 100k+60 of its own clock, rank 2 200 us earlier of its own)
    t = FakeTrace()
    t.range("verify", 0, 10_000 * U)
    t.kernel(t.call("cudaLaunchKernel", 5 * U, 6 * U), 10 * U, 60 * U)
    r0 = t.write(tmp_path / "rank0.sqlite")
    sqlite3.connect(r0).executescript(
        "create table TARGET_INFO_GPU (id integer, name text, uuid text, busLocation text, smCount integer);"
        "insert into TARGET_INFO_GPU values (0, 'H200', 'A-gpu0', '0', 132), (1, 'H200', 'A-gpu1', '1', 132);"
        f"create table TARGET_INFO_SESSION_START_TIME (utcEpochNs integer); insert into TARGET_INFO_SESSION_START_TIME values ({5 * 10**18});")
    r1 = rank_file(tmp_path, 1, [(100 * k + 10, 100 * k + 60) for k in range(3, 8)], session_utc=5 * 10**18 + 300 * U)
    r2 = rank_file(tmp_path, 2, [(100 * k - 160, 100 * k - 140) for k in range(3, 8)], session_utc=5 * 10**18 + 500 * U)
    # WHEN analysed together
    a = analyze([r0, r1, r2])
    # THEN every offset leads to rank 0's timeline: 0, +300 us (its session start; no collective
    # relates it to rank 0), +500 us (through rank 1, its collectives refining nothing)
    assert [(al.rank, al.offset_ns // U, al.method) for al in a.cross.alignment] == [
        (0, 0, "shared clock"), (1, 300, "session start"), (2, 500, "session start + collectives")]
    assert any(w.startswith("rank 0 ran no communication kernels") for w in a.warnings)
    # and the collectives' aligned times are on that timeline too: own time + offset
    offset = {al.rank: al.offset_ns for al in a.cross.alignment}
    rows = a.cross.collectives.to_pylist()
    assert rows and all(r["aligned_start_ns"] == r["start_ns"] + offset[r["rank"]] and r["aligned_end_ns"] == r["end_ns"] + offset[r["rank"]] for r in rows)


def test_sends_and_receives_of_a_trace_begun_later_are_said_matched_by_end_time(tmp_path):
    # GIVEN one machine, rank 0 holds six SendRecv kernels (an all-to-all's, every 100 us, ending
    # together at 100k+60 on both ranks), rank 1's trace began one later: it holds k = 1..5
    a = analyze([rank_file(tmp_path, 0, [(100 * k + 10, 100 * k + 60) for k in range(6)], name=SEND_RECV),
                 rank_file(tmp_path, 1, [(100 * k + 20, 100 * k + 60) for k in range(1, 6)], name=SEND_RECV)])
    # THEN its first is matched with rank 0's second (each pair 10 us apart at the start), and
    # the warning says so as a reader counts (it read "the k-th with rank 0's +1-th"; -1-th the
    # other way)
    rows = a.cross.collectives.to_pylist()
    assert [(r["rank"], r["start_ns"] // U) for r in rows] == [(rank, 100 * k + (10 if rank == 0 else 20)) for k in range(1, 6) for rank in (0, 1)]
    assert any(f"rank 1 holds 5 {SEND_RECV} kernels, rank 0 6 (their traces cover different stretches of the run): matched by end time "
               "(the k-th with rank 0's (k+1)-th)" in w for w in a.warnings), a.warnings


A2A = "moeA2ADispatchKernel"  # TensorRT-LLM's expert-parallel dispatch: an all-to-all


def test_an_all_to_all_split_by_its_ends_is_said_to_be_perhaps_one_with_uneven_shares(tmp_path):
    # GIVEN one machine, four ranks running eight all-to-all dispatches (every 1 ms): rank r
    # arrives at 1000k + 10 + 10r, rank 3 last (+40); each rank's kernel ends once its own share
    # has landed: ranks 0, 1 at +60, ranks 2, 3 (hot experts, more tokens) at +120 (a multi-rank
    # review's shape), which two expert-parallel groups of one kernel name would look like too
    files = [rank_file(tmp_path, r, [(1000 * k + 10 + 10 * r, 1000 * k + (60 if r < 2 else 120)) for k in range(8)], name=A2A) for r in range(4)]
    # WHEN analysed together
    a = analyze(files)
    # THEN the ends split them into ranks 0, 1 and ranks 2, 3 (each rank waiting for its group's
    # last: 10, 0, 10, 0 us a dispatch, where one communicator would read 30, 20, 10, 0), and the
    # warning says so and that it may be one all-to-all whose shares differ, each rank then
    # having waited for all (it had named tensor-parallel groups alone)
    assert [(c.rank, c.wait_ns // U) for c in a.cross.comm] == [(0, 80), (1, 0), (2, 80), (3, 0)]
    (line,) = [w for w in a.warnings if "communicators of these kernels" in w]
    assert line.startswith(f"{A2A}: the ranks run 2 communicators of these kernels") and "ranks 0, 1; ranks 2, 3" in line, line
    assert line.endswith("(an expert-parallel group each; or one all-to-all whose ranks' shares differ, a hot expert's ranks ending later "
                         "each time: then each rank waited for all, not for its group alone)"), line


def test_a_rank_whose_all_to_alls_end_later_is_said_to_be_perhaps_a_hot_experts(tmp_path):
    # GIVEN one machine, four ranks running eight all-to-all dispatches (every 1 ms), arriving at
    # 1000k + 10 + 10r; ranks 0-2 end at +60, rank 3 (a hot expert's) 150 us later, at +210
    files = [rank_file(tmp_path, r, [(1000 * k + 10 + 10 * r, 1000 * k + (60 if r < 3 else 210)) for k in range(8)], name=A2A) for r in range(4)]
    # WHEN analysed together
    a = analyze(files)
    # THEN they are one group (rank 3 alone ends so): each waits for rank 3, 30, 20, 10, 0 us a
    # dispatch; the warning names rank 3's ends and says they may be a hot expert's (it had said
    # "another communicator's" alone, where every number was right)
    assert [(c.rank, c.wait_ns // U) for c in a.cross.comm] == [(0, 240), (1, 160), (2, 80), (3, 0)]
    (line,) = [w for w in a.warnings if "rank 3's" in w]
    assert line.startswith("rank 3's all-to-alls end +150 us from rank 0's on one machine's clock (median): the kernels of another "
                           "communicator (another expert-parallel group's), or of one whose ranks' shares differ"), line


def test_ranks_of_one_other_machine_share_one_offset(tmp_path):
    # GIVEN rank 0 on machine A, ranks 1 and 2 on machine B, whose clock reads 100 us ahead of
    # A's (their session starts say none); eight all-reduces every 1 ms: rank 0 arrives at
    # 1000k + 10, rank 1 at +30, rank 2 at +50 (A's time), all ending at +80, rank 2 3 us later
    # (a ring's order); B's files hold B's times (+100 us)
    r0 = rank_file(tmp_path, 0, [(1000 * k + 10, 1000 * k + 80) for k in range(8)])
    r1 = rank_file(tmp_path, 1, [(1000 * k + 130, 1000 * k + 180) for k in range(8)], machine="B")
    r2 = rank_file(tmp_path, 2, [(1000 * k + 150, 1000 * k + 183) for k in range(8)], machine="B")
    # WHEN analysed together
    a = analyze([r0, r1, r2])
    # THEN ranks 1 and 2, one clock, get one offset: the median of the -100 us and -103 us their
    # ends give, -101.5 us, +-1.5 us (each had its own, 3 us apart); so rank 1 waits 20 us a
    # collective for rank 2, as on B's one clock (it had read 17), and rank 0 38.5 us (true: 40,
    # the machine's offset is off by its ends' scatter)
    assert [(al.rank, al.offset_ns, al.offset_uncertainty_ns) for al in a.cross.alignment] == [(0, 0, 0), (1, -101_500, 1_500), (2, -101_500, 1_500)]
    assert [(c.rank, c.wait_ns) for c in a.cross.comm] == [(0, 8 * 38_500), (1, 8 * 20_000), (2, 0)]


def rank_file_of(tmp_path, rank: int, kernels: list[tuple[int, int, str]], machine: str) -> str:
    """``rank_file`` with kernels of several names: (start us, end us, name) each."""
    t = FakeTrace()
    t.range("verify", 0, 10_000 * U)
    for start, end, name in kernels:
        t.kernel(t.call("cudaLaunchKernel", (start - 5) * U, (start - 4) * U), start * U, end * U, name=name)
    path = t.write(tmp_path / f"rank{rank}.sqlite")
    sqlite3.connect(path).executescript(
        "create table TARGET_INFO_GPU (id integer, name text, uuid text, busLocation text, smCount integer);"
        f"insert into TARGET_INFO_GPU values (0, 'H200', '{machine}-gpu0', '0', 132), (1, 'H200', '{machine}-gpu1', '1', 132);"
        "create table TARGET_INFO_SESSION_START_TIME (utcEpochNs integer); insert into TARGET_INFO_SESSION_START_TIME values (5000000000000000000);")
    return path


def test_a_rank_aligned_through_another_of_its_machine_takes_the_machines_offset(tmp_path):
    # GIVEN machine B (its clock 100 us ahead of A's, the session starts saying none): ranks 1 and
    # 2 all-reduce with rank 0 (A) every 1 ms, arriving at 1000k + 30 and + 50 (A's time), rank 0
    # at + 10, ending at + 80, rank 2 3 or 5 us later in turn (a ring's order); rank 3 (B) meets
    # only rank 2, in an all-gather, rank 2 arriving at + 500, rank 3 at + 520, both ending at + 560
    # (a review's shape: rank 3, aligned through rank 2's own offset, had kept it, 2 us off rank
    # 2's, on one clock)
    AG = "ncclDevKernel_AllGather_RING_LL"
    r0 = rank_file_of(tmp_path, 0, [(1000 * k + 10, 1000 * k + 80, AR) for k in range(8)], "A")
    r1 = rank_file_of(tmp_path, 1, [(1000 * k + 130, 1000 * k + 180, AR) for k in range(8)], "B")
    r2 = rank_file_of(tmp_path, 2, [(1000 * k + 150, 1000 * k + 183 + 2 * (k % 2), AR) for k in range(8)]
                      + [(1000 * k + 600, 1000 * k + 660, AG) for k in range(8)], "B")
    r3 = rank_file_of(tmp_path, 3, [(1000 * k + 620, 1000 * k + 660, AG) for k in range(8)], "B")
    # WHEN analysed together
    a = analyze([r0, r1, r2, r3])
    # THEN ranks 1, 2 and 3 take one offset: the median of rank 1's -100 us and rank 2's -104 us
    # (the median of its 3 and 5 us), -102 us, +-2 us (half their spread), and rank 2 waits 20 us at
    # each all-gather for rank 3, on their one clock
    assert [(al.rank, al.offset_ns, al.offset_uncertainty_ns) for al in a.cross.alignment] == [
        (0, 0, 0), (1, -102_000, 2_000), (2, -102_000, 2_000), (3, -102_000, 2_000)]
    assert sorted({(r["rank"], r["wait_ns"]) for r in a.cross.collectives.to_pylist() if r["name"] == AG}) == [(2, 20_000), (3, 0)]


def test_a_machines_offset_goes_by_its_collectives_before_its_sends_and_receives(tmp_path):
    # GIVEN machine B (its clock 100 us ahead of A's, the session starts saying none): rank 1
    # all-reduces with rank 0 every 1 ms (rank 0 arriving at 1000k + 10, rank 1 at + 30, A's time,
    # both ending at + 80); rank 2 only receives rank 0's sends (rank 0's send + 200..+ 240, rank
    # 2's receive + 150..+ 262: ending 22 us after, the transfer), which refine its clock 22 us off
    # (a review's shape: the median of the two had moved rank 1's exact offset 11 us)
    SR = "ncclDevKernel_SendRecv"
    r0 = rank_file_of(tmp_path, 0, [(1000 * k + 10, 1000 * k + 80, AR) for k in range(10)] + [(1000 * k + 200, 1000 * k + 240, SR) for k in range(10)], "A")
    r1 = rank_file_of(tmp_path, 1, [(1000 * k + 130, 1000 * k + 180, AR) for k in range(10)], "B")
    r2 = rank_file_of(tmp_path, 2, [(1000 * k + 250, 1000 * k + 362, SR) for k in range(10)], "B")
    # WHEN analysed together
    a = analyze([r0, r1, r2])
    # THEN both take rank 1's offset, -100 us, +-0 (its ends meet rank 0's exactly); rank 0 waits
    # 20 us at each all-reduce, rank 2 50 us at each receive (from + 150 to rank 0's send at + 200)
    assert [(al.rank, al.offset_ns, al.offset_uncertainty_ns) for al in a.cross.alignment] == [(0, 0, 0), (1, -100_000, 0), (2, -100_000, 0)]
    rows = a.cross.collectives.to_pylist()
    assert sorted({(r["rank"], r["wait_ns"]) for r in rows if r["name"] == AR}) == [(0, 20_000), (1, 0)]
    assert sorted({(r["rank"], r["wait_ns"]) for r in rows if r["name"] == SR}) == [(0, 0), (2, 50_000)]


def test_another_machines_clock_goes_by_its_all_reduces_before_its_all_to_alls(tmp_path):
    # GIVEN rank 0 on machine A, rank 1 on machine B (its clock 100 us ahead, the session starts
    # saying none), each 1 ms an all-reduce (rank 0 arriving at + 10, rank 1 at + 30, A's time,
    # both ending at + 80) and an all-to-all dispatch (rank 0 at + 300, rank 1 at + 320; rank 0's
    # ends at + 360 once its share landed, rank 1's, a hot expert's, at + 420) (a fresh review's
    # shape: the dispatches' ends had moved B's clock 30 us, waits read the wrong way round)
    r0 = rank_file_of(tmp_path, 0, [(1000 * k + 10, 1000 * k + 80, AR) for k in range(8)] + [(1000 * k + 300, 1000 * k + 360, A2A) for k in range(8)], "A")
    r1 = rank_file_of(tmp_path, 1, [(1000 * k + 130, 1000 * k + 180, AR) for k in range(8)] + [(1000 * k + 420, 1000 * k + 520, A2A) for k in range(8)], "B")
    # WHEN analysed together
    a = analyze([r0, r1])
    # THEN B's clock is placed by the all-reduces' ends alone: -100 us, +-0; rank 0 waits 20 us at
    # each all-reduce and each dispatch, rank 1 none
    assert [(al.rank, al.offset_ns, al.offset_uncertainty_ns) for al in a.cross.alignment] == [(0, 0, 0), (1, -100_000, 0)]
    assert sorted({(r["name"], r["rank"], r["wait_ns"]) for r in a.cross.collectives.to_pylist()}) == [
        (A2A, 0, 20_000), (A2A, 1, 0), (AR, 0, 20_000), (AR, 1, 0)]


def test_another_machines_clock_placed_by_all_to_alls_alone_is_as_uncertain_as_their_kernels(tmp_path):
    # GIVEN the same dispatches alone (no all-reduce): B's clock can only be placed by them, and a
    # rank's share moves its ends (the hot expert's rank ends 60 us after rank 0's)
    r0 = rank_file_of(tmp_path, 0, [(1000 * k + 300, 1000 * k + 360, A2A) for k in range(8)], "A")
    r1 = rank_file_of(tmp_path, 1, [(1000 * k + 420, 1000 * k + 520, A2A) for k in range(8)], "B")
    # WHEN analysed together
    a = analyze([r0, r1])
    # THEN the ends put B's clock at -160 us, and the uncertainty holds the shorter kernel, 60 us
    # (it had claimed +-0, the ends' spread)
    assert [(al.rank, al.offset_ns, al.offset_uncertainty_ns) for al in a.cross.alignment] == [(0, 0, 0), (1, -160_000, 60_000)]


def test_a_machine_met_through_a_rank_of_the_first_ranks_machine_takes_one_offset(tmp_path):
    # GIVEN machine A: ranks 0 and 1 (per-rank files, one machine's session clock) all-reducing at
    # + 10..+ 80 each 1 ms; machine B (its clock 100 us ahead): ranks 2 and 3, which all-gather with
    # rank 1 alone: arriving (A's time) rank 1 at + 300, rank 2 at + 320, rank 3 at + 340 (last), all
    # ending at + 400, rank 2 3 us later (a ring's order) (a fresh review's shape: aligned through
    # rank 1, not rank 0, B's ranks had kept two offsets 3 us apart on one clock)
    AG = "ncclDevKernel_AllGather_RING_LL"
    r0 = rank_file_of(tmp_path, 0, [(1000 * k + 10, 1000 * k + 80, AR) for k in range(8)], "A")
    r1 = rank_file_of(tmp_path, 1, [(1000 * k + 10, 1000 * k + 80, AR) for k in range(8)] + [(1000 * k + 300, 1000 * k + 400, AG) for k in range(8)], "A")
    r2 = rank_file_of(tmp_path, 2, [(1000 * k + 420, 1000 * k + 503, AG) for k in range(8)], "B")
    r3 = rank_file_of(tmp_path, 3, [(1000 * k + 440, 1000 * k + 500, AG) for k in range(8)], "B")
    # WHEN analysed together
    a = analyze([r0, r1, r2, r3])
    # THEN ranks 2 and 3 take one offset, the median of -103 and -100 us, -101.5 us +-1.5; rank 2
    # waits 20 us at each all-gather for rank 3, as on their one clock (it had read 23)
    assert [(al.rank, al.offset_ns, al.offset_uncertainty_ns) for al in a.cross.alignment] == [
        (0, 0, 0), (1, 0, 0), (2, -101_500, 1_500), (3, -101_500, 1_500)]
    assert sorted({(r["rank"], r["wait_ns"]) for r in a.cross.collectives.to_pylist() if r["name"] == AG}) == [(1, 38_500), (2, 20_000), (3, 0)]


def test_a_drift_is_fitted_on_the_all_reduces_beside_a_hot_experts_all_to_alls(tmp_path):
    # GIVEN rank 0 on machine A, rank 1 on machine B, whose clock runs 100 us ahead and gains
    # 0.5 us a ms (500 ppm: 8 us over the 16 ms capture); each 1 ms (A's time) an all-reduce (rank
    # 0 arriving at + 10, rank 1 at + 30, both ending at + 80) and a dispatch (arriving at + 300 and
    # + 320; rank 0's share lands at + 360, rank 1's, a hot expert's, at + 420) (a fresh review's
    # shape: the dispatches' ends, 60 us apart, had made the fit's scatter too wide, the drift
    # unsaid, rank 0's waits read 0 and rank 1's made up)
    def b(t: int) -> int:
        return round(t + 100 + t * 0.0005)

    r0 = rank_file_of(tmp_path, 0, [(1000 * k + 10, 1000 * k + 80, AR) for k in range(16)] + [(1000 * k + 300, 1000 * k + 360, A2A) for k in range(16)], "A")
    r1 = rank_file_of(tmp_path, 1, [(b(1000 * k + 30), b(1000 * k + 80), AR) for k in range(16)]
                      + [(b(1000 * k + 320), b(1000 * k + 420), A2A) for k in range(16)], "B")
    # WHEN analysed together
    a = analyze([r0, r1])
    # THEN the drift is said (500 ppm, from the all-reduces), and rank 0 waits 20 us at every
    # all-reduce (within the 1 us the kernels' whole-us times round to), rank 1 none
    assert any("rank 1's clock drifts" in w and "ppm" in w for w in a.warnings), a.warnings
    rows = [r for r in a.cross.collectives.to_pylist() if r["name"] == AR]
    assert all(abs(r["wait_ns"] - 20_000) <= 1_000 for r in rows if r["rank"] == 0) and all(r["wait_ns"] <= 1_000 for r in rows if r["rank"] == 1)


def test_a_rank_placed_through_a_transfer_placed_rank_does_not_outvote_an_exact_one(tmp_path):
    # GIVEN machine A: rank 0; machine C (its clock 200 us ahead): rank 1, which meets rank 0 only
    # by sends and receives (rank 0's send + 200..+ 240 each 1 ms, A's time, rank 1's receive
    # + 150..+ 262: 22 us apart, the transfer); machine B (100 us ahead): rank 2 all-reduces with
    # rank 0 (rank 0 arriving at + 10, rank 2 at + 30, both ending at + 80), rank 3 all-gathers with
    # rank 1 (both + 500..+ 560) (a fresh review's shape: rank 3, placed through rank 1, had voted
    # beside rank 2 and moved B 11 us)
    SR, AG = "ncclDevKernel_SendRecv", "ncclDevKernel_AllGather_RING_LL"
    r0 = rank_file_of(tmp_path, 0, [(1000 * k + 200, 1000 * k + 240, SR) for k in range(10)] + [(1000 * k + 10, 1000 * k + 80, AR) for k in range(10)], "A")
    r1 = rank_file_of(tmp_path, 1, [(1000 * k + 350, 1000 * k + 462, SR) for k in range(10)] + [(1000 * k + 700, 1000 * k + 760, AG) for k in range(10)], "C")
    r2 = rank_file_of(tmp_path, 2, [(1000 * k + 130, 1000 * k + 180, AR) for k in range(10)], "B")
    r3 = rank_file_of(tmp_path, 3, [(1000 * k + 600, 1000 * k + 660, AG) for k in range(10)], "B")
    # WHEN analysed together
    a = analyze([r0, r1, r2, r3])
    # THEN B takes rank 2's offset, -100 us +-0 (its all-reduces' ends meet rank 0's), and rank 0
    # waits 20 us at each all-reduce
    assert [(al.rank, al.offset_ns, al.offset_uncertainty_ns) for al in a.cross.alignment][2:] == [(2, -100_000, 0), (3, -100_000, 0)]
    assert sorted({(r["rank"], r["wait_ns"]) for r in a.cross.collectives.to_pylist() if r["name"] == AR}) == [(0, 20_000), (2, 0)]


def test_a_drift_beside_few_all_reduces_is_fitted_on_the_all_to_alls_too_centred_on_the_all_reduces(tmp_path):
    # GIVEN rank 0 on machine A, rank 1 on machine B, whose clock runs 100 us ahead and gains 500
    # ppm; 50 steps of 1 ms (A's time), each a dispatch (arriving at + 300 and + 320; rank 0's
    # share lands at + 360, rank 1's, a hot expert's, 10 us later), and 7 all-reduces among them
    # (steps 0, 7, ..., 42: rank 0 arriving at + 10, rank 1 at + 30, both ending at + 80) (two
    # fresh reviews' shapes: fitted on all ends alike, the dispatches had moved the offset the
    # all-reduces gave, waits 11-12 us; fitted on the 7 all-reduces alone, no drift was fitted)
    def b(t: int) -> int:
        return round(t + 100 + t * 0.0005)

    ars = [(50 * i) // 7 for i in range(7)]
    r0 = rank_file_of(tmp_path, 0, [(1000 * k + 10, 1000 * k + 80, AR) for k in ars] + [(1000 * k + 300, 1000 * k + 360, A2A) for k in range(50)], "A")
    r1 = rank_file_of(tmp_path, 1, [(b(1000 * k + 30), b(1000 * k + 80), AR) for k in ars]
                      + [(b(1000 * k + 320), b(1000 * k + 370), A2A) for k in range(50)], "B")
    # WHEN analysed together
    a = analyze([r0, r1])
    # THEN the drift is said, and rank 0 waits 20 us at every all-reduce and every dispatch
    # (within the 1 us the whole-us times round to), rank 1 none
    assert any("rank 1's clock drifts" in w for w in a.warnings), a.warnings
    rows = a.cross.collectives.to_pylist()
    assert all(abs(r["wait_ns"] - 20_000) <= 1_000 for r in rows if r["rank"] == 0), sorted({r["wait_ns"] for r in rows if r["rank"] == 0})
    assert all(r["wait_ns"] <= 1_000 for r in rows if r["rank"] == 1)
