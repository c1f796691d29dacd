"""GPU ops whose times cannot be (an edited or corrupt export) are dropped and said, never left
to move every phase's boundaries: one kernel moved 5 s later made a stream look busy until
then, and every later phase read 0 GPU ms, with no word. The expected numbers are worked out
by hand from the ops' times."""

from __future__ import annotations

import pytest

from nsys_factory import FakeTrace
from tracerecon.analysis.config import PhaseConfig
from tracerecon.api import load as analyze

U = 1000  # 1 us


def three_cycles(t: FakeTrace, moved: dict | None = None, tid: int | None = None) -> None:
    """draft (b..b+100) with a kernel b+10..b+90, verify (b+100..b+200) with b+110..b+180;
    ``moved``: {(cycle, phase): (start_us, end_us)} gives that kernel other times."""
    moved = moved or {}
    for c in range(3):
        b = c * 1000
        t.cycle(c, b * U, (b + 100) * U, (b + 200) * U)
        for name, at, (s, e) in (("draft", b + 5, (b + 10, b + 90)), ("verify", b + 105, (b + 110, b + 180))):
            s, e = moved.get((c, name), (s, e))
            t.kernel(t.call("cudaLaunchKernel", at * U, (at + 2) * U, tid=tid), s * U, e * U, name=name)


def per_cycle(rank):
    return [(p["cycle"], p["phase"], p["gpu_ns"] // U) for p in rank.phases.to_pylist()]


EXPECTED = [(c, n, 100) for c in range(3) for n in ("draft", "verify")]


def test_a_kernel_moved_seconds_later_is_dropped_and_said(tmp_path):
    # GIVEN cycle 0's draft kernel moved 5 s later (after every later kernel on its stream)
    t = FakeTrace()
    three_cycles(t, {(0, "draft"): (5_000_010, 5_000_090)})
    # WHEN analysed
    a = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig())
    # THEN it is dropped with a warning, and the other phases read what their own kernels say:
    # events at b, b+100, b+200 on the idle-between-phases stream (cycle 0's draft, now with no
    # kernel, reads its CPU time: 100); kept, stream 7 looked busy until 5 s and every later
    # phase read 0
    assert per_cycle(a.ranks[0]) == EXPECTED
    assert any("dropped 1 GPU op(s) whose times cannot be" in w for w in a.warnings)


def test_a_kernel_lasting_an_hour_is_dropped(tmp_path):
    # GIVEN cycle 1's verify kernel ending an hour after it started (later kernels end first)
    t = FakeTrace()
    three_cycles(t, {(1, "verify"): (1110, 3_600_000_000)})
    a = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig())
    # THEN dropped: verify of cycle 1 reads its CPU time (100), the rest their kernels
    assert per_cycle(a.ranks[0]) == EXPECTED
    assert any("dropped 1 GPU op(s) whose times cannot be" in w for w in a.warnings)


def test_a_kernel_starting_before_its_launch_is_dropped(tmp_path):
    # GIVEN cycle 2's draft kernel starting 105 us before its launch call (at b+5) began (10 us
    # would be spared: a drift between the CPU and GPU clocks)
    t = FakeTrace()
    three_cycles(t, {(2, "draft"): (1900, 1990)})
    a = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig())
    assert per_cycle(a.ranks[0]) == EXPECTED
    assert any("dropped 1 GPU op(s) whose times cannot be" in w for w in a.warnings)


def test_overlapping_launch_calls_and_dependent_launch_overlap_drop_nothing(tmp_path):
    # GIVEN two threads whose launch calls overlap in time on one stream (either may be queued
    # first: the second call's kernel runs first), and a kernel that starts before the one
    # launched before it ends (programmatic dependent launch)
    t = FakeTrace()
    t.range("cycle 0", 0, 1000 * U)
    t.range("draft", 0, 500 * U)
    t.range("verify", 500 * U, 1000 * U)
    t.kernel(t.call("cudaLaunchKernel", 10 * U, 40 * U, tid=1), 60 * U, 100 * U)           # called first, ran second
    t.kernel(t.call("cudaLaunchKernel", 20 * U, 30 * U, tid=2), 35 * U, 55 * U)            # called second, ran first
    t.kernel(t.call("cudaLaunchKernel", 510 * U, 512 * U), 520 * U, 700 * U)
    t.kernel(t.call("cudaLaunchKernel", 514 * U, 516 * U), 690 * U, 800 * U)               # starts 10 us before the one before it ends
    a = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig())
    # THEN nothing is dropped
    assert a.ranks[0].gpu_ops.num_rows == 4
    assert not any("cannot be" in w for w in a.warnings)


def test_a_short_dependent_kernel_ending_before_a_long_one_drops_nothing(tmp_path):
    # GIVEN a long kernel (b+10..b+2500) and one launched 4 us later that starts 10 us after it
    # and ends long before it (programmatic dependent launch without a wait)
    t = FakeTrace()
    t.range("cycle 0", 0, 3000 * U)
    t.range("verify", 0, 3000 * U)
    t.kernel(t.call("cudaLaunchKernel", 2 * U, 4 * U), 10 * U, 2500 * U)
    t.kernel(t.call("cudaLaunchKernel", 6 * U, 8 * U), 20 * U, 90 * U)
    a = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("verify",)))
    # THEN both are kept, and verify reads until the long one's end
    assert a.ranks[0].gpu_ops.num_rows == 2 and not any("cannot be" in w for w in a.warnings)


def test_a_dropped_op_is_not_also_said_to_have_never_run(tmp_path):
    # GIVEN the trace's last kernel starting 105 us before its launch call
    t = FakeTrace()
    three_cycles(t, {(2, "verify"): (2000, 2090)})
    a = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig())
    # THEN one warning says it was dropped, none that the last launch never ran
    assert any("dropped 1 GPU op(s) whose times cannot be" in w for w in a.warnings)
    assert not any("have no GPU work in the trace" in w for w in a.warnings), a.warnings


def test_a_kernel_ending_milliseconds_after_later_ones_is_dropped(tmp_path):
    # GIVEN cycle 0's verify kernel ending at 5 ms: after the four kernels launched after it,
    # which all ended first (one dependent kernel may end first, never every later one)
    t = FakeTrace()
    three_cycles(t, {(0, "verify"): (110, 5000)})
    a = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig())
    # THEN dropped and said: kept, every later phase read 0 (verify 4900 us), with no word
    assert per_cycle(a.ranks[0]) == EXPECTED
    assert any("dropped 1 GPU op(s) whose times cannot be" in w for w in a.warnings)


def test_process_codes_hold_a_process_the_sample_missed():
    # GIVEN one op of process 7 among 20,000 of process 5 (the sample of every 4th... value skips it)
    import numpy as np

    from tracerecon.analysis.columns import _stream_codes

    pid = np.array([5] * 10_001 + [7] + [5] * 10_000, dtype=np.int64)
    codes = _stream_codes(pid, np.zeros(len(pid), np.int64), np.full(len(pid), 7, np.int64))
    # THEN its stream code differs from the others', which all agree
    assert len(set(codes.tolist())) == 2 and codes[10_001] != codes[0]


def graph_cycles(t: FakeTrace, moved: dict | None = None, graph_stream: int = 7, branch_stream: int = 142) -> None:
    """draft (b..b+100) with a kernel b+10..b+90 on stream 7; verify (b+100..b+200) one CUDA
    graph launched at b+105 on ``graph_stream``: nodes 1 (b+110..b+130) and 2 (b+130..b+180)
    there, and a branch, node 3 (b+112..b+170), on ``branch_stream`` (the driver's stream 142).
    ``moved``: {(cycle, node): (start_us, end_us)}."""
    moved = moved or {}
    for c in range(3):
        b = c * 1000
        t.cycle(c, b * U, (b + 100) * U, (b + 200) * U)
        t.kernel(t.call("cudaLaunchKernel", (b + 5) * U, (b + 7) * U), (b + 10) * U, (b + 90) * U, name="draft")
        launch = t.call("cudaGraphLaunch", (b + 105) * U, (b + 107) * U)
        for node, stream, (s, e) in ((1, graph_stream, (b + 110, b + 130)), (2, graph_stream, (b + 130, b + 180)), (3, branch_stream, (b + 112, b + 170))):
            s, e = moved.get((c, node), (s, e))
            t.kernel(launch, s * U, e * U, name=f"node{node}", stream=stream, node=node)


@pytest.mark.parametrize("moved, streams", [
    # cycle 0's node 2, on the stream the graph was launched on (where draft's kernels run too),
    # ending 5 s later (the edit a real H200 trace met: every phase read 0 ms)
    pytest.param({(0, 2): (130, 5_000_180)}, {}, id="node_on_its_launch_stream"),
    # cycle 1's branch node (stream 142, which only the graph's branches use) ending 5 s later:
    # after cycle 2's draft kernel and graph, queued on the launch stream after the graph
    pytest.param({(1, 3): (1112, 5_001_170)}, {}, id="branch_node_on_the_drivers_stream"),
    # the graphs launched on stream 13, which runs nothing else (draft's kernels on 7), every
    # node there (the branch too): a whole launch ran on 13, so it is a launch stream
    pytest.param({(0, 1): (110, 5_000_130)}, {"graph_stream": 13, "branch_stream": 13}, id="stream_of_graph_launches_only"),
])
def test_a_graph_node_moved_seconds_later_is_dropped(tmp_path, moved, streams):
    # GIVEN the graph loop with one node ending 5 s late
    t = FakeTrace()
    graph_cycles(t, moved, **streams)
    # WHEN analysed
    a = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig())
    # THEN it is dropped and said; every phase reads its own kernels: draft b..b+100 (kernel
    # ends at b+90), verify b+100..b+200 (the graph's other nodes end by b+180)
    assert per_cycle(a.ranks[0]) == EXPECTED
    assert any("dropped 1 GPU op(s) whose times cannot be" in w for w in a.warnings)


def test_graph_branches_running_at_once_and_in_any_order_drop_nothing(tmp_path):
    # GIVEN the graph loop as recorded: one launch's nodes overlapping and starting out of node
    # order (the branch on 142 starts before node 2 and ends after node 1), and in cycle 2 the
    # branch starting before node 1 and ending last
    t = FakeTrace()
    graph_cycles(t, {(2, 3): (2108, 2185)})
    a = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig())
    # THEN nothing is dropped, every phase reads 100 us
    assert a.ranks[0].gpu_ops.num_rows == 12
    assert not any("cannot be" in w for w in a.warnings)
    assert per_cycle(a.ranks[0]) == EXPECTED


def test_two_graphs_at_once_sharing_a_branch_stream_drop_nothing(tmp_path):
    # GIVEN two graphs launched at the same time on streams 13 and 29 (each stream runs kernels
    # of its own too), whose branches both run on the driver's stream 142, overlapping
    t = FakeTrace()
    t.range("cycle 0", 0, 1000 * U)
    t.range("verify", 0, 1000 * U)
    for k, stream in enumerate((13, 29)):
        t.kernel(t.call("cudaLaunchKernel", (2 + k) * U, (3 + k) * U), 10 * U, 20 * U, stream=stream)
    a_launch, b_launch = t.call("cudaGraphLaunch", 30 * U, 32 * U), t.call("cudaGraphLaunch", 33 * U, 35 * U)
    t.kernel(a_launch, 40 * U, 300 * U, stream=13, node=1)
    t.kernel(a_launch, 45 * U, 400 * U, stream=142, node=2)
    t.kernel(b_launch, 41 * U, 200 * U, stream=29, node=1)
    t.kernel(b_launch, 42 * U, 350 * U, stream=142, node=2)   # launched after a's, ends first
    a = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("verify",)))
    # THEN nothing is dropped: each branch counts on its own launch stream
    assert a.ranks[0].gpu_ops.num_rows == 6
    assert not any("cannot be" in w for w in a.warnings)


def _graph_loop(draw_sizes: list[tuple[int, int]], gaps: list[int]):
    """Ops of launches queued one after another on stream 7 (process 1, device 0): per launch
    (n_nodes, n_branch): 0 nodes is a plain kernel; else a graph of n_nodes nodes on 7 and
    n_branch more on the driver's stream 142, overlapping within the graph's window, which
    begins after the previous launch's last op ended (``gaps``: idle us before it)."""
    import pyarrow as pa

    cols = {k: [] for k in ("launch_start_ns", "launch_end_ns", "start_ns", "end_ns", "graph_node_id", "global_pid", "device_id",
                            "stream_id", "correlation_id")}
    cpu, gpu = 0, 100 * U
    for corr, ((nodes, branch), gap) in enumerate(zip(draw_sizes, gaps)):
        cpu += 3 * U
        gpu = max(gpu, cpu + 5 * U) + gap * U
        ops = [(7, None, 0, 20)] if nodes == 0 else [(7, k, 3 * k, 3 * k + 10) for k in range(nodes)] + [
            (142, nodes + k, 2 * k + 1, 2 * k + 25) for k in range(branch)]
        for stream, node, s, e in ops:
            for k, v in (("launch_start_ns", cpu), ("launch_end_ns", cpu + 2 * U), ("start_ns", gpu + s * U), ("end_ns", gpu + e * U),
                         ("graph_node_id", node), ("global_pid", 1), ("device_id", 0), ("stream_id", stream), ("correlation_id", corr)):
                cols[k].append(v)
        gpu = max(cols["end_ns"][-len(ops):])
    return pa.table(cols)


try:
    from hypothesis import assume, given, settings
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover
    given = None

if given is not None:
    launches = st.lists(st.tuples(st.integers(0, 4), st.integers(0, 2)), min_size=4, max_size=30)

    @settings(max_examples=150, deadline=None)
    @given(launches, st.data())
    def test_property_graph_loops_drop_nothing_and_a_node_moved_late_is_the_one_dropped(sizes, data):
        # GIVEN a random loop of plain kernels and graphs (branches on the driver's stream) queued
        # one after another on one stream, as a real trace holds it, which says its launch stream
        # (a plain kernel there, or more graphs without branches than with; else its nodes are
        # left out)
        from tracerecon.analysis.columns import ops_out_of_time

        graphs = [branch == 0 for nodes, branch in sizes if nodes]
        assume(len(graphs) < len(sizes) or sum(graphs) > len(graphs) - sum(graphs))
        gaps = data.draw(st.lists(st.integers(0, 50), min_size=len(sizes), max_size=len(sizes)))
        ops = _graph_loop(sizes, gaps)
        # THEN nothing is dropped
        assert ops_out_of_time(ops).tolist() == []
        # and WHEN one op of a launch with two launches after it ends a second later
        corr = ops["correlation_id"].to_pylist()
        candidates = [i for i, c in enumerate(corr) if c < len(sizes) - 2]
        row = data.draw(st.sampled_from(candidates))
        end = ops["end_ns"].to_pylist()
        end[row] += 10**9
        import pyarrow as pa

        moved = ops.set_column(ops.column_names.index("end_ns"), "end_ns", pa.array(end))
        # THEN that op alone is dropped
        assert ops_out_of_time(moved).tolist() == [row]


def test_graph_nodes_whose_launch_calls_the_trace_lacks_are_left_out():
    # GIVEN graph nodes none of whose launch calls is in the trace (its API table dropped), one of
    # them ending a second late
    from tracerecon.analysis.columns import ops_out_of_time

    ops = _graph_loop([(2, 1), (0, 0), (2, 0), (1, 0)], [0, 0, 0, 0])
    import pyarrow as pa

    n = ops.num_rows
    end = ops["end_ns"].to_pylist()
    end[0] += 10**9
    ops = ops.set_column(ops.column_names.index("end_ns"), "end_ns", pa.array(end))
    for col in ("launch_start_ns", "launch_end_ns"):
        ops = ops.set_column(ops.column_names.index(col), col, pa.nulls(n, pa.int64()))
    # WHEN checked THEN nothing is said to be out of time (nothing to hold the ops against)
    assert ops_out_of_time(ops).tolist() == []


def _ops(rows: list[tuple]):
    """A linked-ops table from (launch_start_us, launch_end_us, start_us, end_us, node, stream,
    correlation id[, pid]) rows (device 0)."""
    import pyarrow as pa

    cols = ("launch_start_ns", "launch_end_ns", "start_ns", "end_ns", "graph_node_id", "global_pid", "device_id", "stream_id", "correlation_id")
    full = [(ls * U, le * U, s * U, e * U, node, (r[7] if len(r) > 7 else 1), 0, stream, corr)
            for r in rows for ls, le, s, e, node, stream, corr in [r[:7]]]
    return pa.table({k: pa.array([r[i] for r in full], pa.int64()) for i, k in enumerate(cols)})


def test_a_launch_cut_off_with_only_its_branch_recorded_leaves_the_check_as_it_was(tmp_path):
    # GIVEN the graph loop with cycle 0's node 2 ending 5 s late, and one more launch at the
    # trace's end of which only the branch's node (on 142) was recorded: 142 holds a launch that
    # ran all its recorded nodes there
    t = FakeTrace()
    graph_cycles(t, {(0, 2): (130, 5_000_180)})
    t.kernel(t.call("cudaGraphLaunch", 3105 * U, 3107 * U), 3112 * U, 3170 * U, name="node3", stream=142, node=3)
    a = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig())
    # THEN 142 is still no launch stream (other launches ran nodes there and on 7): the late node
    # is dropped and said, the phases read their own kernels
    assert per_cycle(a.ranks[0]) == EXPECTED
    assert any("dropped 1 GPU op(s) whose times cannot be" in w for w in a.warnings)


def test_graphs_at_once_on_graph_only_streams_sharing_a_branch_stream_drop_nothing():
    # GIVEN the process's own kernels on 7; per cycle two graphs replayed at once on streams 13
    # and 29, which run nothing else, each with a branch on the driver's stream 142; and a last
    # launch cut off with only its branch recorded
    from tracerecon.analysis.columns import ops_out_of_time

    rows, corr = [], 0
    for c in range(5):
        b = c * 1000
        rows.append((b + 1, b + 2, b + 10, b + 20, None, 7, corr := corr + 1))
        rows += [(b + 30, b + 32, b + 40, b + 300, 1, 13, corr := corr + 1), (b + 30, b + 32, b + 41, b + 290, 2, 142, corr)]
        rows += [(b + 33, b + 35, b + 42, b + 200, 1, 29, corr := corr + 1), (b + 33, b + 35, b + 43, b + 250, 2, 142, corr)]
    rows.append((5000, 5002, 5010, 5020, 2, 142, corr + 1))
    # WHEN checked THEN nothing is dropped: no launch stream is known for the graphs (13 and 29
    # hold no launch of their own, 142 holds nodes of launches that ran elsewhere too), so they
    # are left out, never held against each other on 142 (they ran at once)
    assert ops_out_of_time(_ops(rows)).tolist() == []


def test_a_launch_whose_nodes_ran_on_two_of_the_processs_streams_is_left_out():
    # GIVEN streams 7 and 29, each running kernels of the process's own, and a graph launch with a
    # node on each (which was its launch stream, the trace cannot say): its node on 7 runs until
    # 2000 us, while two kernels launched on 29 after it run at 1112-1140 us (right if it was
    # launched on 7, where the next kernel starts at 2010 us)
    from tracerecon.analysis.columns import ops_out_of_time

    rows = [(1, 2, 10, 30, None, 29, 1), (3, 4, 12, 35, None, 7, 2),
            (5, 6, 40, 2000, 1, 7, 3), (5, 6, 45, 60, 2, 29, 3),
            (1100, 1101, 2010, 2020, None, 7, 4), (1102, 1103, 1112, 1130, None, 29, 5), (1104, 1105, 1132, 1140, None, 29, 6)]
    # WHEN checked THEN nothing is dropped (held against 29's kernels, its node on 7 would look late)
    assert ops_out_of_time(_ops(rows)).tolist() == []


def test_launches_of_two_processes_with_the_same_correlation_ids_are_told_apart():
    # GIVEN two processes running the same graph loop (own kernels and graphs on 7, branches on
    # 142), their calls numbered alike, and process 1's second graph node ending a second late
    from tracerecon.analysis.columns import ops_out_of_time

    rows = []
    for pid in (1, 2):
        for c in range(4):
            b = c * 1000
            rows.append((b + 1, b + 2, b + 10, b + 20, None, 7, 10 * c + 1, pid))
            late = 10**6 if (pid, c) == (1, 1) else 0
            rows += [(b + 30, b + 32, b + 40, b + 60 + late, 1, 7, 10 * c + 2, pid), (b + 30, b + 32, b + 41, b + 55, 2, 142, 10 * c + 2, pid)]
    # WHEN checked THEN that node alone is dropped (row 5: process 1, cycle 1, node 1)
    assert ops_out_of_time(_ops(rows)).tolist() == [4]
