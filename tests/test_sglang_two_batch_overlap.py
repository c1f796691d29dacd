"""SGLang two-batch overlap (TBO) decode with DeepEP low-latency all-to-all in hook mode
(``return_recv_hook=True``, what SGLang's DeepEP dispatcher always passes): every DeepEP kernel is
launched on the forward stream, twice per dispatch or combine: ``dispatch_a`` launches the
send phase (it posts its RDMA writes and ends, waiting for nobody), the other micro-batch's
compute runs, then ``dispatch_b`` calls the hook, which launches the receive phase of the same
kernel (``deep_ep::internode_ll::dispatch``); it spins until every peer's send is done.

So the k-th ``dispatch`` kernel of two ranks is no collective whose kernels end together: a
send ends when its own rank posted, a receive when the peer's send landed. Read per rank file
on one machine, tracerecon matched them by end time, paired one rank's receive with the
other's send, told of records "dropped" though both ranks hold the same number, and named the
wrong micro-batch as the one that held the cycle up. Every number below is worked out by hand.

Open: waits. A receive waits for its peer's send, not its receive, and the k-th kernels' starts
are what waits are charged by: rank 0's 16 us receive spin reads 28 us (its sends' 4 + 4 too).
"""

from __future__ import annotations

from nsys_factory import FakeTrace
from tracerecon.analysis.config import PhaseConfig
from tracerecon.api import load

import tbo_model as M

U = 1000
LL = "void deep_ep::internode_ll::dispatch<false, 3, 7168>(void*, void*, int*, long*, void const*, long const*, int*, int*, int, int, int)"
PHASES = (r"mb_a=re:^a\d+$", r"mb_b=re:^b\d+$")


def rank_file(tmp_path, rank: int) -> str:
    """Three decode steps (cycle c from b = 1000c us), one layer, stages as
    execute_overlapped_operations runs them on one thread and one stream (7):
      a0 [b, b+20):  attention A (launch b+2), send A (launch b+5)
      b0 [b+20, b+40): attention B (b+22), send B (b+25)
      a1 [b+40, b+60): receive A (b+42), experts A (b+45)
      b1 [b+60, b+80): receive B (b+62), experts B (b+65)
    GPU times by hand: attention 20 us, send 4, receive 2 once the peer's send is done, experts 25.
    Rank 1's attention A takes 60 us in cycle 0 (it straggles in micro-batch A)."""
    t = FakeTrace()

    def k(cpu, s, e, name="k", short=None):
        t.kernel(t.call("cudaLaunchKernel", cpu * U, (cpu + 2) * U), s * U, e * U, name=name, short=short)

    for c in range(3):
        b = 1000 * c
        t.range(f"cycle {c}", b * U, (b + 100) * U)
        for name, s in (("a0", 0), ("b0", 20), ("a1", 40), ("b1", 60)):
            t.range(name, (b + s) * U, (b + s + 20) * U)
        slow = rank == 1 and c == 0
        if not slow:
            # (both ranks alike but for rank 0's receives in cycle 0)
            k(b + 2, b + 10, b + 30, "attn")
            k(b + 5, b + 30, b + 34, LL, "dispatch")    # send A
            k(b + 22, b + 34, b + 54, "attn")
            k(b + 25, b + 54, b + 58, LL, "dispatch")   # send B
            if rank == 0 and c == 0:
                # receive A from b+58 spins until rank 1's send A is done (b+74): ends b+76
                k(b + 42, b + 58, b + 76, LL, "dispatch")
                k(b + 45, b + 76, b + 101, "experts")
                # receive B from b+101: rank 1's send B was done at b+98: 2 us
                k(b + 62, b + 101, b + 103, LL, "dispatch")
                k(b + 65, b + 103, b + 128, "experts")
            else:
                k(b + 42, b + 58, b + 60, LL, "dispatch")
                k(b + 45, b + 60, b + 85, "experts")
                k(b + 62, b + 85, b + 87, LL, "dispatch")
                k(b + 65, b + 87, b + 112, "experts")
        else:
            k(b + 2, b + 10, b + 70, "attn")            # the straggler: attention A 60 us
            k(b + 5, b + 70, b + 74, LL, "dispatch")    # send A, done b+74
            k(b + 22, b + 74, b + 94, "attn")
            k(b + 25, b + 94, b + 98, LL, "dispatch")   # send B, done b+98
            k(b + 42, b + 98, b + 100, LL, "dispatch")  # receive A: rank 0's send A long done
            k(b + 45, b + 100, b + 125, "experts")
            k(b + 62, b + 125, b + 127, LL, "dispatch")
            k(b + 65, b + 127, b + 152, "experts")
    return M.on_one_machine(t.write(tmp_path / f"rank{rank}.sqlite"))


def analyse(tmp_path):
    return load([rank_file(tmp_path, 0), rank_file(tmp_path, 1)], PhaseConfig(phases=PHASES, skip_cycles=0))


def test_phase_gpu_times_read_as_events_on_the_forward_stream(tmp_path):
    # GIVEN the TBO decode steps above, per-rank reports on one machine
    a = analyse(tmp_path)
    # WHEN read with the micro-batches as phases (stage ranges a*, b*)
    got = {r.rank: [(p["cycle"], p["phase"], p["gpu_ns"] // U) for p in r.phases.to_pylist()] for r in a.ranks}
    # THEN events on stream 7 at each stage boundary (by hand; one stream, so each stage reads
    # max(its CPU end, its work's end) minus the same at its start):
    # rank 0 cycle 0: a0 b+0..34 = 34, b0 34..58 = 24, a1 58..101 = 43, b1 101..128 = 27
    # rank 1 cycle 0: a0 0..74 = 74, b0 74..98 = 24, a1 98..125 = 27, b1 125..152 = 27
    # cycles 1, 2 (both): a0 34, b0 24, a1 58..85 = 27, b1 85..112 = 27
    per = lambda c0: [(0, "mb_a", c0[0]), (0, "mb_b", c0[1]), (0, "mb_a", c0[2]), (0, "mb_b", c0[3])]  # noqa: E731
    rest = [(c, ph, v) for c in (1, 2) for ph, v in (("mb_a", 34), ("mb_b", 24), ("mb_a", 27), ("mb_b", 27))]
    assert got[0] == per((34, 24, 43, 27)) + rest
    assert got[1] == per((74, 24, 27, 27)) + rest


def test_hook_mode_deepep_kernels_are_matched_in_order_without_a_dropped_record_warning(tmp_path):
    # GIVEN both ranks ran the same 12 LL dispatch kernels (4 a step: send A, send B, receive A,
    # receive B), the same program on each
    a = analyse(tmp_path)
    # THEN no record was dropped, and nothing says so
    assert not [w for w in a.warnings if "dropped" in w], a.warnings
    # AND the k-th with the k-th (program order): every matched pair is the same kernel of the
    # same stage on both ranks, so rank 0's kernels pair with rank 1's of the same micro-batch
    rows = a.cross.collectives.to_pylist()
    phases = {r.rank: r.phases.to_pylist() for r in a.ranks}
    by_coll: dict[int, list] = {}
    for row in rows:
        by_coll.setdefault(row["collective"], []).append(phases[row["rank"]][row["phase_id"]]["phase"])
    assert len(by_coll) == 12
    assert all(p0 == p1 for p0, p1 in by_coll.values())


def test_the_straggler_is_rank_1_in_micro_batch_a(tmp_path):
    # GIVEN rank 1's attention of micro-batch A took 60 us instead of 20 in cycle 0: its send A
    # started 40 us after rank 0's (b+70 vs b+30), and rank 0's receive A spun until b+74
    a = analyse(tmp_path)
    cp = {r["cycle"]: r for r in a.cross.critical_path.to_pylist()}
    # THEN cycle 0 was gated by rank 1, in mb_a (the stage holding its late send and its slow
    # attention), not in mb_b
    assert (cp[0]["gating_rank"], cp[0]["gating_phase"]) == (1, "mb_a")


def test_two_layers_the_straggler_is_named_in_micro_batch_a(tmp_path):
    # GIVEN the same shape over two layers with combines too (tbo_model.py, an event model written
    # apart from tracerecon: 11 stages a0..a10 / b0..b10 run a0 a1 a2 b0 a3 b1 ... a10 b8 b9 b10),
    # rank 1's attention of micro-batch A 60 us instead of 20 in cycle 0, in both layers
    ranks = M.run(M.decode_tbo(cycles=3, layers=2, slow_rank1_attn=(60, 20, 20)))
    a = load(M.write(ranks, tmp_path), PhaseConfig(phases=("pre",) + PHASES + ("post",), skip_cycles=0))
    # THEN every phase of every cycle reads what events on the forward stream read
    for r, R in zip(a.ranks, ranks):
        got: dict = {}
        for p in r.phases.to_pylist():
            got[(p["cycle"], p["phase"])] = got.get((p["cycle"], p["phase"]), 0) + p["gpu_ns"] // U
        assert got == M.truth(R)
    # AND cycle 0 was held up by rank 1 in mb_a (rank 0's receives of micro-batch A spun for its
    # sends), not in mb_b; and no record is said to be dropped (both ranks ran 24 dispatches)
    cp = {row["cycle"]: row for row in a.cross.critical_path.to_pylist()}
    assert (cp[0]["gating_rank"], cp[0]["gating_phase"]) == (1, "mb_a")
    assert not [w for w in a.warnings if "dropped" in w], a.warnings
