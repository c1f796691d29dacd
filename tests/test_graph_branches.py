"""CUDA graphs traced node by node (``--cuda-graph-trace=node``, what ``tracerecon run`` asks)
whose capture forked onto a stream of the graph's own (SGLang's MoE alternate stream, two-batch
overlap): a graph launch is one operation on the stream it was launched on, so an event recorded
there after the launch waits for every node, branches included, and the phase is read there.
Every expected number is worked out by hand from the ops' times; the same execution traced with
one record per launch (``--cuda-graph-trace=graph``) reads the same."""

from __future__ import annotations

from nsys_factory import FakeTrace
from tracerecon.analysis.config import PhaseConfig
from tracerecon.api import load

U = 1000  # 1 us
GRAPH_LAUNCH = "cudaGraphLaunch_v10000"


def launch(t: FakeTrace, at_us: int, gpu_us: tuple[int, int], stream: int = 7, tid: int | None = None) -> None:
    t.kernel(t.call("cudaLaunchKernel", at_us * U, (at_us + 2) * U, tid=tid), gpu_us[0] * U, gpu_us[1] * U, stream=stream)


def analysed(tmp_path, t: FakeTrace, phases: tuple[str, ...]):
    return load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=phases))


def gpu_us(a) -> list[tuple[str, int]]:
    return [(p["phase"], p["gpu_ns"] // U) for p in a.ranks[0].phases.to_pylist()]


def test_a_phase_whose_graph_branch_holds_most_of_its_time_is_read_on_the_launch_stream(tmp_path):
    # GIVEN cycles (b = 1000c us) of prepare (b..b+50, a kernel b+10..b+30) and forward
    # (b+50..b+150), which launches a graph at b+55 whose nodes run attention b+60..b+100 and the
    # shared expert b+100..b+150 on the launch stream 7, the routed experts b+100..b+400 on the
    # graph's own stream 142, the combine b+400..b+420 on 7; then eager logits on 7 b+420..b+470
    for mode in ("Node", "Graph"):
        t = FakeTrace(capture={"CUDA_GRAPH_TRACE_OPTIONS:MODE": mode})
        for c in range(4):
            b = 1000 * c
            t.cycle(c, b * U, (b + 50) * U, (b + 150) * U, names=("prepare", "forward"))
            launch(t, b + 5, (b + 10, b + 30))
            g = t.call(GRAPH_LAUNCH, (b + 55) * U, (b + 60) * U)
            if mode == "Node":
                for node, (s, e, stream) in enumerate([(60, 100, 7), (100, 150, 7), (100, 400, 142), (400, 420, 7)], 1):
                    t.kernel(g, (b + s) * U, (b + e) * U, stream=stream, node=node)
            else:
                t.graph(g, (b + 60) * U, (b + 420) * U)
            launch(t, b + 70, (b + 420, b + 470))
        (tmp_path / mode).mkdir()
        a = analysed(tmp_path / mode, t, ("prepare", "forward"))
        # THEN forward is read on 7, where an event at its end (b+150) waits for the logits
        # behind the whole graph: b+50..b+470 = 420 us (on 142 it read 350, and the cycle 400)
        assert gpu_us(a) == [("prepare", 50), ("forward", 420)] * 4, mode
        assert {p["stream_id"] for p in a.ranks[0].phases.to_pylist()} == {7}
        assert [c["gpu_ns"] // U for c in a.ranks[0].cycles.to_pylist()] == [470] * 4


def test_a_graph_whose_branch_node_starts_first_is_still_on_the_stream_it_was_launched_on(tmp_path):
    # GIVEN forward launching eager work on 7 (b+60..b+170) and then a graph whose capture forked
    # first: two root nodes, the routed experts on the graph's stream 142 (b+170..b+410, starting
    # first) and the shared expert on 7 (b+171..b+310); sample (b+150..b+450) waits for 7 with
    # cudaStreamSynchronize (b+160..b+411)
    t = FakeTrace(capture={"CUDA_GRAPH_TRACE_OPTIONS:MODE": "Node"})
    for c in range(4):
        b = 1000 * c
        t.cycle(c, b * U, (b + 50) * U, (b + 150) * U, (b + 450) * U, names=("prepare", "forward", "sample"))
        launch(t, b + 5, (b + 10, b + 30))
        launch(t, b + 55, (b + 60, b + 170))
        g = t.call(GRAPH_LAUNCH, (b + 62) * U, (b + 66) * U)
        t.kernel(g, (b + 170) * U, (b + 410) * U, stream=142, node=1)
        t.kernel(g, (b + 171) * U, (b + 310) * U, stream=7, node=2)
        sync = t.call("cudaStreamSynchronize_v3020", (b + 160) * U, (b + 411) * U)
        t.sync_record(sync, (b + 160) * U, (b + 411) * U, stream=7)
    a = analysed(tmp_path, t, ("prepare", "forward", "sample"))
    # THEN the graph was launched on 7 (the stream that runs work outside graphs): an event on 7
    # at forward's end (b+150) waits for the whole graph (b+410), so forward reads b+50..b+410 =
    # 360 us and sample b+410..b+450 = 40 (they read 260 and 140: the launch taken for 142's)
    assert gpu_us(a) == [("prepare", 50), ("forward", 360), ("sample", 40)] * 4
    # AND the synchronize waited for all of forward's work: b+160..b+410, 250 us
    syncs = [s for s in a.ranks[0].syncs.to_pylist() if s["api"].startswith("cudaStreamSynchronize")]
    assert [s["waited_gpu_ns"] // U for s in syncs] == [250] * 4


def test_a_graph_queued_before_a_boundary_is_waited_for_whole_though_its_launch_call_returns_after(tmp_path):
    # GIVEN phases on thread 1: forward (b..b+100) and post (b+100..b+200); a worker thread (2)
    # launches an eager kernel (b+12..b+60) and then a graph whose cudaGraphLaunch call runs
    # b+90..b+115 while its nodes run b+95..b+150, b+150..b+300, b+300..b+320 on 7
    t = FakeTrace(capture={"CUDA_GRAPH_TRACE_OPTIONS:MODE": "Node"})
    for c in range(4):
        b = 1000 * c
        t.cycle(c, b * U, (b + 100) * U, (b + 200) * U, names=("forward", "post"), tid=1)
        launch(t, b + 10, (b + 12, b + 60), tid=2)
        g = t.call(GRAPH_LAUNCH, (b + 90) * U, (b + 115) * U, tid=2)
        for node, (s, e) in enumerate([(95, 150), (150, 300), (300, 320)], 1):
            t.kernel(g, (b + s) * U, (b + e) * U, node=node)
    a = analysed(tmp_path, t, ("forward", "post"))
    # THEN the graph was on the stream by b+95 (its first node ran then), so an event at the
    # boundary (b+100) waits for all of it: forward b..b+320 = 320 us, post 0 (they read 150 and
    # 170: only the first node counted as launched before the boundary)
    assert gpu_us(a) == [("forward", 320), ("post", 0)] * 4


def test_a_synchronize_waits_for_every_node_of_a_graph_queued_before_it(tmp_path):
    # GIVEN forward (b..b+100) and post (b+100..b+400) on thread 1; a forward thread (2) whose
    # cudaGraphLaunch call runs b+90..b+115 while its nodes run b+95..b+98, b+101..b+300 and
    # b+300..b+320 on 7; in post, thread 1 calls cudaStreamSynchronize(7) b+100..b+321
    t = FakeTrace(capture={"CUDA_GRAPH_TRACE_OPTIONS:MODE": "Node"})
    for c in range(4):
        b = 1000 * c
        t.cycle(c, b * U, (b + 100) * U, (b + 400) * U, names=("forward", "post"), tid=1)
        g = t.call(GRAPH_LAUNCH, (b + 90) * U, (b + 115) * U, tid=2)
        for node, (s, e) in enumerate([(95, 98), (101, 300), (300, 320)], 1):
            t.kernel(g, (b + s) * U, (b + e) * U, node=node)
        sync = t.call("cudaStreamSynchronize_v3020", (b + 100) * U, (b + 321) * U, tid=1)
        t.sync_record(sync, (b + 100) * U, (b + 321) * U, stream=7)
    a = analysed(tmp_path, t, ("forward", "post"))
    # THEN the graph was on 7 by b+95, so the synchronize waited for nodes 2 and 3 (b+101..b+320:
    # 219 us), all of it forward's work (forward takes the forward thread's graph), which post
    # absorbed; the boundaries read forward b..b+320 = 320 us and post 80 (the wait read 0: only
    # the nodes ending inside it were asked when they were launched)
    assert gpu_us(a) == [("forward", 320), ("post", 80)] * 4
    syncs = a.ranks[0].syncs.to_pylist()
    assert [(s["waited_gpu_ns"] // U, s["waited_other_phase_ns"] // U, s["waited_for_phase"]) for s in syncs] == [(219, 219, "forward")] * 4
    assert [p["absorbed_ns"] // U for p in a.ranks[0].phases.to_pylist() if p["phase"] == "post"] == [219] * 4


def test_a_graph_on_a_side_stream_that_runs_only_graphs_is_on_that_stream_though_a_branch_starts_first(tmp_path):
    # GIVEN forward forking side stream 9 off 7 (record on 7 at b+51, 9 waits at b+52), launching
    # a graph on 9 (b+55..b+60) whose root nodes run on the graph's own stream 142 (b+60..b+100,
    # starting first) and on 9 (b+61..b+380), then b+380..b+400 on 9; 7 waits for 9 (record on 9
    # at b+62, wait at b+63) and runs logits b+400..b+470; sample (b+150..b+500) synchronizes 7
    # (b+160..b+471). Stream 9 runs nothing but graphs; the events name it, never 142
    t = FakeTrace(capture={"CUDA_GRAPH_TRACE_OPTIONS:MODE": "Node"})
    for c in range(4):
        b, r = 1000 * c, c + 1
        t.cycle(c, b * U, (b + 50) * U, (b + 150) * U, (b + 500) * U, names=("prepare", "forward", "sample"))
        launch(t, b + 5, (b + 10, b + 30))
        t.event_record(event=1, record=r, start=(b + 51) * U, end=(b + 51) * U + 500, stream=7)
        t.stream_wait(event=1, record=r, start=(b + 52) * U, end=(b + 52) * U + 500, stream=9)
        g = t.call(GRAPH_LAUNCH, (b + 55) * U, (b + 60) * U)
        t.kernel(g, (b + 60) * U, (b + 100) * U, stream=142, node=1)
        t.kernel(g, (b + 61) * U, (b + 380) * U, stream=9, node=2)
        t.kernel(g, (b + 380) * U, (b + 400) * U, stream=9, node=3)
        t.event_record(event=2, record=r, start=(b + 62) * U, end=(b + 62) * U + 500, stream=9)
        t.stream_wait(event=2, record=r, start=(b + 63) * U, end=(b + 63) * U + 500, stream=7)
        launch(t, b + 70, (b + 400, b + 470))
        sync = t.call("cudaStreamSynchronize_v3020", (b + 160) * U, (b + 471) * U)
        t.sync_record(sync, (b + 160) * U, (b + 471) * U, stream=7)
    a = analysed(tmp_path, t, ("prepare", "forward", "sample"))
    # THEN the launch is 9's (a stream the program names), forked off 7 and joined back: forward
    # is read on 7, b+50..b+470 = 420 us, sample b+470..b+500 = 30 (on 142: 350 and 100)
    assert gpu_us(a) == [("prepare", 50), ("forward", 420), ("sample", 30)] * 4
    assert {p["stream_id"] for p in a.ranks[0].phases.to_pylist()} == {7}
