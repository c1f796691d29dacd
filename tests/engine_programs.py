"""Random engine programs, their GPU times and the events on their current streams, simulated
independently of tracerecon (a differential fuzzer's core, from this repo's review rounds).

A program is a list of cycles; a cycle a list of phases ``(name, tid, current stream, ops)``;
an op one of (optionally led by an int id that ties the ops of one unit together):

- ``("k", s, us[, name])``: a kernel on stream s
- ``("cp", s, us, kind)``: an asynchronous copy on s (1: host to device, 2: device to host)
- ``("item", s, us)``: ``.item()``: a device-to-host copy on s and ``cudaStreamSynchronize(s)``;
  the CPU goes on when the copy is done
- ``("w", waiter, src)``: ``waiter.wait_stream(src)``: an event recorded on src, waited for by waiter
- ``("esync", s)``: an event recorded on s and ``cudaEventSynchronize`` on it
- ``("hcp", s0, s, us, kind, wait)``: a helper thread that holds no phase (a KV-cache offload
  thread) forks its stream s off s0 (``s.wait_stream(s0)``: the default stream is shared by
  threads) and copies on s; with ``wait`` it synchronises s itself (its own thread blocks, not
  the phase's); the phase's thread joins s later only through a ``("w", cur, s)`` of its own
- ``("gap", us)``: CPU time
- ``("g", s, durs, whole, branch)``: a CUDA graph replayed on s (``cudaGraphLaunch``): its nodes'
  kernels ``durs`` run one after another on s, and ``branch`` (a list of durations, maybe empty)
  on stream s + 40 beside them from the graph's start (a capture that forked); s is done when the
  last node is. ``whole``: traced as one graph record (``--cuda-graph-trace graph``), else node
  by node under the launch's correlation id

A phase is ``(name, tid, current stream, ops)``, or ``(name, tid, current stream, ops, launcher)``
where a thread ``launcher`` that holds no phase launches every op of it (a worker thread that
the scheduler's phase hands its work to, waiting for its acknowledgement), or ``(name, tid,
current stream, ops, launcher, said)`` where the range's thread's own current stream, the one
it says (``say_streams``), is ``said``, not the launcher's current stream where the phase's
work goes (a worker whose current stream is its own). A cycle of entries that are all code
between phases (no phase) is code run after the last cycle, in no cycle range (shutdown).

``simulate`` runs a program: every op starts at max(its launch + 1 us, its stream free, what its
stream waited for), and the truth of each phase is what events on the phase's current stream
read under tracerecon's contract (phases tile their cycle: a boundary between two phases of a
cycle is read on both their current streams, each event completing at max(its CPU instant, all
work queued on its stream by then)). ``program`` draws one at random.
"""

from __future__ import annotations

import random

from nsys_factory import FakeTrace
from tracerecon.run_dir import STREAM_MARK

U = 1000  # ns per us
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"
LOOP, WORKER, HELPER, LAUNCHER = 11, 12, 14, 15  # thread ids
SAID_EVENT = 500  # + thread id: the event tracerecon.instrument records on each phase's current stream


def simulate(prog: list, say_streams: bool = False, cycles: bool = False):
    """The program's trace (``cycle N`` ranges, phase ranges, launches, copies, waits, syncs),
    its phase names, and the truth: (cycle, phase, GPU us, current stream) per phase.
    ``say_streams``: each phase begins as ``tracerecon.instrument`` begins one, with an event
    recorded on its current stream and then a ``tracerecon.stream`` mark. ``cycles``: also
    return, fourth, the cycles' truth: (cycle, GPU us) per cycle (``between``'s rule).

    An entry of a cycle whose name is ``""`` or begins with ``"~"`` is no phase but code run
    between two phases (``between``): its ops are launched by its thread with its stream
    current, in no phase range (``"~name"``: in a range ``name``, a phase not named to
    tracerecon, as one left out of ``--phase``); an entry with no ops takes no CPU time."""
    t = FakeTrace()
    ops_log: dict[int, list[tuple[int, int | None]]] = {}  # stream -> (CPU instant an op was queued, its thread)
    waits_log: dict[int, list[tuple[int, int, int]]] = {}  # stream -> (CPU instant of a wait, what it waits for, source stream)
    free: dict[int, int] = {}  # stream -> when everything queued on it is done
    queued: dict[int, list[tuple[int, int]]] = {}  # stream -> (CPU instant it was queued, GPU end)
    records: dict[int, int] = {}
    event_of: dict[tuple[int, int], int] = {}

    def push(s: int, at: int, end: int, who: int | None = None, src: int | None = None) -> None:
        free[s] = max(free.get(s, 0), end)
        queued.setdefault(s, []).append((at, end))
        if src is not None:  # a wait for src's work, done at ``end``
            waits_log.setdefault(s, []).append((at, end, src))
        else:  # an op its thread ``who`` put there
            ops_log.setdefault(s, []).append((at, who))

    def event(s: int, at: int) -> int:  # an event recorded on s at CPU instant `at` completes then
        return max([at] + [e for q, e in queued.get(s, []) if q <= at])

    cpu = 5

    def run(ops: list, ltid: int) -> None:
        nonlocal cpu
        for op in ops:
            op = op[1:] if isinstance(op[0], int) else op
            cpu += 3
            kind = op[0]
            if kind == "k":
                s, dur = op[1], op[2]
                start = max(cpu + 1, free.get(s, 0))
                t.kernel(t.call("cudaLaunchKernel", cpu * U, (cpu + 2) * U, tid=ltid), start * U, (start + dur) * U, stream=s,
                         name=op[3] if len(op) > 3 else (NCCL if s == 30 else "k"))
                push(s, cpu + 2, start + dur, who=ltid)
                cpu += 2
            elif kind in ("cp", "item"):
                s, dur = op[1], op[2]
                start = max(cpu + 1, free.get(s, 0))
                t.copy(t.call("cudaMemcpyAsync", cpu * U, (cpu + 2) * U, tid=ltid), start * U, (start + dur) * U,
                       kind=op[3] if kind == "cp" else 2, stream=s)
                push(s, cpu + 2, start + dur, who=ltid)
                if kind == "cp":
                    cpu += 2
                else:
                    back = max(cpu + 3, start + dur + 1)
                    c = t.call("cudaStreamSynchronize", (cpu + 2) * U, back * U, tid=ltid)
                    t.sync_record(c, (cpu + 2) * U, back * U, sync_type=3, stream=s)
                    cpu = back
            elif kind == "w":
                waiter, src = op[1], op[2]
                ev = event_of.setdefault((waiter, src), len(event_of) + 1)
                records[ev] = records.get(ev, 0) + 1
                t.event_record(event=ev, record=records[ev], start=cpu * U, end=(cpu + 1) * U, stream=src, tid=ltid)
                t.stream_wait(event=ev, record=records[ev], start=(cpu + 1) * U, end=(cpu + 2) * U, stream=waiter, tid=ltid)
                push(waiter, cpu + 2, free.get(src, 0), src=src)
                cpu += 2
            elif kind == "esync":
                s = op[1]
                ev = 90 + s
                records[ev] = records.get(ev, 0) + 1
                t.event_record(event=ev, record=records[ev], start=cpu * U, end=(cpu + 1) * U, stream=s, tid=ltid)
                back = max(cpu + 2, free.get(s, 0) + 1)
                c = t.call("cudaEventSynchronize", (cpu + 1) * U, back * U, tid=ltid)
                t.sync_record(c, (cpu + 1) * U, back * U, sync_type=1, stream=s)
                cpu = back
            elif kind == "hcp":
                s0, s, dur, ck, wait = op[1:6]
                ev = 700 + s
                records[ev] = records.get(ev, 0) + 1
                t.event_record(event=ev, record=records[ev], start=cpu * U, end=(cpu + 1) * U, stream=s0, tid=HELPER)
                t.stream_wait(event=ev, record=records[ev], start=(cpu + 1) * U, end=(cpu + 2) * U, stream=s, tid=HELPER)
                push(s, cpu + 2, free.get(s0, 0), src=s0)
                cpu += 2
                start = max(cpu + 1, free.get(s, 0))
                t.copy(t.call("cudaMemcpyAsync", cpu * U, (cpu + 2) * U, tid=HELPER), start * U, (start + dur) * U, kind=ck, stream=s)
                push(s, cpu + 2, start + dur, who=HELPER)
                cpu += 2
                if wait:  # the helper's own thread blocks, not the phase's: the CPU clock goes on
                    c = t.call("cudaStreamSynchronize", cpu * U, (start + dur + 1) * U, tid=HELPER)
                    t.sync_record(c, cpu * U, (start + dur + 1) * U, sync_type=3, stream=s)
            elif kind == "g":
                s, durs, whole, branch = op[1:5]
                corr = t.call("cudaGraphLaunch", cpu * U, (cpu + 2) * U, tid=ltid)
                first = at = max(cpu + 1, free.get(s, 0))
                nodes = []
                for d in durs:
                    nodes.append((s, at, at + d))
                    at += d + 1
                b_at = first
                for d in branch:
                    nodes.append((s + 40, b_at, b_at + d))
                    b_at += d + 1
                last = max(e for _, _, e in nodes)
                if whole:
                    t.graph(corr, first * U, last * U, stream=s)
                else:
                    for i, (ns, a, e) in enumerate(nodes):
                        t.kernel(corr, a * U, e * U, stream=ns, node=i + 1)
                push(s, cpu + 2, last, who=ltid)
                cpu += 2
            elif kind == "gap":
                cpu += op[1]

    bounds = []
    for ci, cyc in enumerate(prog):
        cycle_start = cpu
        rows = []
        hidden = []
        for name, tid, cur, ops, *launcher in cyc:
            said = launcher[1] if len(launcher) > 1 else cur  # the stream the range's thread says is current
            if name == "" or name.startswith("~"):  # code between two phases, in no phase
                lo = cpu
                if ops:
                    run(ops, launcher[0] if launcher else tid)
                    cpu += 1
                if name and cpu > lo:
                    hidden.append((name[1:], tid, lo, cpu))
                continue
            phase_start = cpu
            ltid = launcher[0] if launcher else tid  # the thread that launches the phase's ops
            if say_streams:
                records[SAID_EVENT + tid] = records.get(SAID_EVENT + tid, 0) + 1
                t.event_record(event=SAID_EVENT + tid, record=records[SAID_EVENT + tid], start=cpu * U + 200, end=cpu * U + 700, stream=said, tid=tid)
                t.mark(STREAM_MARK, cpu * U + 900, tid=tid)
            cpu += 2
            run(ops, ltid)
            cpu += 4
            rows.append((name, tid, cur, phase_start, cpu, ltid))
        bounds.append(rows)
        if rows:  # (no phase: code run after the last cycle, in no cycle)
            t.range(f"cycle {ci}", cycle_start * U, cpu * U, tid=LOOP)
        for name, tid, cur, start, end, _ in rows:
            t.range(name, start * U, end * U, tid=tid)
        for name, tid, start, end in hidden:
            t.range(name, start * U, end * U, tid=tid)
        cpu += 20  # between cycles, nothing launched
    truth, cycle_truth = _truth(bounds, event, queued, ops_log, waits_log)
    names = [row[0] for row in bounds[0]]
    return (t, names, truth, cycle_truth) if cycles else (t, names, truth)


def _truth(bounds: list, event, queued: dict, ops_log: dict, waits_log: dict) -> tuple[list, list]:
    """Per phase (cycle, phase, GPU us, current stream) and per cycle (cycle, GPU us), as events
    on the phases' current streams read them (``simulate``). The streams' timelines are
    simulated here on their own; which instants the events are recorded at restates tracerecon's
    boundary rule (README), so a campaign over it checks the code against that rule, the
    hand-reckoned tests (test_between_phases) against events. Phases tile their cycle: a boundary
    between two of a cycle is read on both their current streams at the later one's CPU start (at
    the earlier one's CPU end where the later runs on another thread: a hand-off, the later one
    then begins there), a cycle's last phase ends at its CPU end read also on the next cycle's
    first phase's stream, and boundaries never run backwards. Unless GPU work was queued on
    either's stream between two phases of a cycle (``between``: an op put there, or a wait made
    there for work still running after the earlier phase's CPU end, other than for work all
    queued by then that an event on the earlier phase's stream at its end reads anyway): then
    the earlier one ends at its CPU end on its own stream, the later one begins at its CPU start
    on its own stream alone (not held back by the earlier one's end), and where the later is
    its cycle's last, its end reads the next cycle's stream only where its own thread (or its
    launcher) put an op there within its range. A cycle runs from its first phase's start to the latest of its
    phases' ends, the next cycle's first stream at its last phase's CPU end, and, at each stretch
    with work between, the two phases' streams at the later one's CPU start (what was queued on
    them by then: the cycle holds that work)."""

    def done(s: int, at: int) -> int:  # what was queued on s by `at` is done then (0: nothing)
        return max([0] + [e for q, e in queued.get(s, []) if q <= at])

    def work_between(s: int, lo: int, hi: int, read_by: int) -> bool:
        if any(lo < q <= hi for q, _ in ops_log.get(s, [])):
            return True
        for q, dep, src in waits_log.get(s, []):
            if lo < q <= hi and dep > lo and not (dep <= read_by and dep <= done(src, lo)):
                return True
        return False

    flat = [(ci, row) for ci, rows in enumerate(bounds) for row in rows]
    n = len(flat)
    same_next = [i + 1 < n and flat[i + 1][0] == flat[i][0] for i in range(n)]
    between = [False] * n
    for i in range(n):
        if same_next[i]:
            (_, (_, _, cur, _, end_cpu, _)), (_, (_, _, nxt, next_start, _, _)) = flat[i], flat[i + 1]
            if end_cpu < next_start:
                read_by = event(cur, end_cpu)
                between[i] = work_between(cur, end_cpu, next_start, read_by) or work_between(nxt, end_cpu, next_start, read_by)
    starts, ends, truth = [], [], []
    prev_end = 0
    moved = {}  # a hand-off: the later phase begins at the earlier one's CPU end
    for i, (ci, (name, tid, cur, start_cpu, end_cpu, ltid)) in enumerate(flat):
        start_cpu = moved.get(i, start_cpu)
        apart_before = i > 0 and between[i - 1]
        start = event(cur, start_cpu)
        if i > 0 and not apart_before:
            start = max(start, prev_end)
            if flat[i - 1][0] == ci:  # the boundary with the phase before, on its stream too
                start = max(start, event(flat[i - 1][1][2], start_cpu))
        if between[i]:
            end = max(start, event(cur, end_cpu))
        elif same_next[i]:
            nxt_tid, nxt, nxt_start = flat[i + 1][1][1], flat[i + 1][1][2], flat[i + 1][1][3]
            at = end_cpu if nxt_tid != tid else nxt_start
            if nxt_tid != tid:
                moved[i + 1] = end_cpu
            end = max(start, event(cur, at), event(nxt, at))
        else:
            end = max(start, event(cur, end_cpu))
            if i + 1 < n:  # a cycle ends where the next one starts, read on its stream too ...
                nxt = flat[i + 1][1][2]
                # ... but a phase begun apart only for what it put there in its range (its own
                # thread, or the launcher thread that launches its work)
                if not apart_before or any(start_cpu < q <= end_cpu and who in (tid, ltid) for q, who in ops_log.get(nxt, [])):
                    end = max(end, event(nxt, end_cpu))
        truth.append((ci, name, end - start, cur))
        starts.append(start)
        ends.append(end)
        prev_end = end
    cycle_truth, cycle_bounds = [], []
    for ci, rows in enumerate(bounds):
        idx = [i for i in range(n) if flat[i][0] == ci]
        if not idx:
            continue
        first, last = idx[0], idx[-1]
        end = max(ends[i] for i in idx)
        if last + 1 < n:
            end = max(end, event(flat[last + 1][1][2], flat[last][1][4]))
        for i in idx:
            if between[i]:
                at = flat[i + 1][1][3]
                end = max(end, done(flat[i][1][2], at), done(flat[i + 1][1][2], at))
        cycle_truth.append((ci, end - starts[first]))
        cycle_bounds.append((starts[first], end))
    return truth, cycle_truth


def program(seed: int, joins: str = "any", stream_switch: bool = False, helper: bool = False, graphs: str | None = None,
            launcher: bool = False, repeats: bool = False, gaps: str | None = None, forks: str | None = None) -> list:
    """A random program: 4-6 cycles of two or three phases on one thread (a quarter of them
    with forward on a worker thread whose current stream is 20), side streams 13/14 that compute,
    an input stream 9, a copy stream 12 that copies results off, NCCL's stream 30, `.item()`
    reads on the current stream, CPU gaps. ``joins``: where side streams and collectives are
    joined back: "phase" (in the phase that forked them), "cycle" (that phase or a later one,
    where the program allows), "any" (also the next cycle's first phase). ``stream_switch``:
    forward runs on the loop's own thread with 20 current (``with torch.cuda.stream(...)``
    around its range, SGLang's forward stream), forked off 7 as it begins and joined back into 7
    as process begins: from the kernels alone the same as 7 current with 20 a side stream.
    ``helper``: some units are a helper thread's copies on stream 16 forked off 7 (``"hcp"``),
    joined into the phase's stream in the next phase or the next cycle's first, or never.
    ``forks``: ``fork_program(seed, forks)`` instead (a launcher's forks and their join policy).
    ``graphs`` ("node" or "whole", the trace's graph mode): half of the kernels that are no
    collective become CUDA graphs of 1-4 nodes, a third of those with a branch that ran beside
    them. ``launcher``: where every phase is the loop thread's, a worker thread that holds no
    phase launches all their work. ``repeats``: the first phase runs three times a cycle (draft
    steps). These three draw from a generator of their own, so a seed's program is otherwise the
    same with them as without. ``gaps`` ("code" or "unnamed"): code runs between some phases of
    a cycle (``simulate``'s entries named ``""``, or ``"~between"``: in a range of a phase not named
    to tracerecon), after a phase's range ends and before the next begins, on the earlier
    phase's thread with its stream current: kernels or a read-back there or on the later phase's
    stream, a copy taken off on the copy stream, a side stream or a collective forked and joined
    into the later phase's stream, a join of a side stream forked earlier, CPU time; drawn from
    a generator of its own too, at the same places in every cycle, empty in some."""
    if forks:
        return fork_program(seed, forks)
    r = random.Random(seed)
    ncyc = r.randint(4, 6)
    worker = r.random() < 0.25 or stream_switch
    if worker:
        layout = [("schedule", LOOP, 7), ("forward", LOOP if stream_switch else WORKER, 20), ("process", LOOP, 7)]
    else:
        names = [("draft", "verify"), ("prepare", "forward", "sample"), ("verify", "draft", "draft_extend")][r.randint(0, 2)]
        if repeats:
            names = (names[0],) * 3 + names[1:]
        layout = [(n, LOOP, 7) for n in names]
    sides = r.sample([13, 14], r.randint(0, 2))
    use_input, use_copy, use_nccl = r.random() < 0.4, r.random() < 0.4, r.random() < 0.35
    prog = [[(n, tid, cur, []) for n, tid, cur in layout] for _ in range(ncyc)]
    pending: list = []  # (cycle, phase index, op): joins and syncs placed in a later phase
    n_phases = len(layout)
    unit = 0

    def dur(a: int, b: int) -> int:
        return r.randint(a, b)

    for ci in range(ncyc):
        for pi, (n, tid, cur) in enumerate(layout):
            ops = prog[ci][pi][3]

            def add(op: tuple) -> None:
                ops.append(op if isinstance(op[0], int) else (unit,) + op)

            due = [p for p in pending if (p[0], p[1]) == (ci, pi)]
            pending[:] = [p for p in pending if (p[0], p[1]) != (ci, pi)]
            if worker and n == "forward":
                add((-1, "w", 20, 7))
            if worker and n == "process":
                add((-1, "w", 7, 20))
            for _ in range(dur(1, 5)):
                unit += 1
                for p in list(due):
                    if r.random() < 0.5:
                        add(p[2])
                        due.remove(p)
                x = r.random()
                if x < 0.3:
                    add(("k", cur, dur(5, 300)))
                elif x < 0.5 and sides:
                    s = r.choice(sides)
                    for p in list(due):  # a pending join of s goes before its new fork
                        if p[2][1] == "w" and p[2][3] == s:
                            add(p[2])
                            due.remove(p)
                    if any(p[2][1] == "w" and p[2][3] == s for p in pending):
                        continue
                    add(("w", s, cur))
                    for _ in range(dur(1, 2)):
                        add(("k", s, dur(10, 900)))
                    if r.random() < 0.6:
                        add(("k", cur, dur(5, 200)))
                    where = 0.0 if joins == "phase" else r.random() * (0.65 if joins == "cycle" else 1.0)
                    if where < 0.45:
                        add(("w", cur, s))
                        if r.random() < 0.5:
                            add(("k", cur, dur(5, 100)))
                    elif where < 0.65 and pi + 1 < n_phases and layout[pi + 1][1] == tid:
                        later = dur(pi + 1, n_phases - 1) if all(lay[1] == tid for lay in layout[pi + 1:]) else pi + 1
                        pending.append((ci, later, (unit, "w", cur, s)))
                    elif ci + 1 < ncyc and layout[0][1] == tid and joins == "any":
                        pending.append((ci + 1, [i for i in range(n_phases) if layout[i][1] == tid][0], (unit, "w", cur, s)))
                    else:  # joined at the end of this phase
                        pending.append((ci, pi, (unit, "w", cur, s)))
                elif x < 0.62 and use_input:
                    if r.random() < 0.4:
                        add(("w", 9, cur))
                    if r.random() < 0.7:
                        add(("cp", 9, dur(2, 50), 1))
                    if r.random() < 0.5:
                        add(("k", 9, dur(5, 60)))
                    add(("w", cur, 9))
                elif x < 0.72 and use_copy:
                    add(("w", 12, cur))
                    add(("cp", 12, dur(2, 400), 2))
                    y = r.random()
                    if y < 0.3:
                        add(("esync", 12))
                    elif y < 0.6 and pi + 1 < n_phases and layout[pi + 1][1] == tid:
                        pending.append((ci, pi + 1, (unit, "esync", 12)))
                elif x < 0.82 and use_nccl:
                    add(("w", 30, cur))
                    add(("k", 30, dur(20, 900)))
                    if r.random() < 0.5:
                        add(("k", cur, dur(5, 100)))
                    if joins == "phase" or r.random() < 0.7 or not (pi + 1 < n_phases and layout[pi + 1][1] == tid):
                        add(("w", cur, 30))
                    else:
                        pending.append((ci, pi + 1, (unit, "w", cur, 30)))
                elif helper and x < 0.86:
                    add(("hcp", 7, 16, dur(50, 1500), r.choice([1, 2]), r.random() < 0.5))
                    if r.random() < 0.5:
                        if pi + 1 < n_phases and layout[pi + 1][1] == tid and r.random() < 0.5:
                            pending.append((ci, pi + 1, (unit, "w", cur, 16)))
                        elif ci + 1 < ncyc and layout[0][1] == tid:
                            pending.append((ci + 1, 0, (unit, "w", cur, 16)))
                elif x < 0.9:
                    add(("item", cur, dur(1, 10)))
                else:
                    add(("gap", dur(5, 150)))
            for p in due:
                add(p[2])
            for p in [p for p in pending if (p[0], p[1]) == (ci, pi)]:
                add(p[2])
            pending[:] = [p for p in pending if (p[0], p[1]) != (ci, pi)]
    r2 = random.Random(seed * 7919 + 17)
    if graphs:
        for cyc in prog:
            for _, _, _, ops in cyc:
                for i, op in enumerate(ops):
                    unit_id, kind, *rest = op
                    if kind == "k" and rest[0] != 30 and r2.random() < 0.5:
                        n = r2.randint(1, 4)
                        durs = [max(1, rest[1] // n)] * n
                        branch = [r2.randint(5, 400) for _ in range(r2.randint(1, 2))] if r2.random() < 0.33 else []
                        ops[i] = (unit_id, "g", rest[0], durs, graphs == "whole", branch)
    if gaps:
        prog = _with_gaps(prog, random.Random(seed * 104729 + 71), "~between" if gaps == "unnamed" else "", sides)
    if launcher and not worker:
        # (the code between phases too, in half the programs: the launcher queues the loop's work)
        gaps_too = random.Random(seed * 15485863 + 3).random() < 0.5
        prog = [[(n, tid, cur, ops, LAUNCHER) if gaps_too or not (n == "" or n.startswith("~")) else (n, tid, cur, ops) for n, tid, cur, ops in cyc]
                for cyc in prog]
    return prog


def _with_gaps(prog: list, r: random.Random, name: str, sides: list) -> list:
    """``program``'s code between phases: at each chosen place between two phases, in every
    cycle, an entry ``(name, thread, stream, ops)`` of the earlier phase's thread and stream."""
    n_phases = len(prog[0])
    places = [pi for pi in range(n_phases - 1) if r.random() < 0.6] or [r.randrange(n_phases - 1)]
    out = []
    for cyc in prog:
        new = []
        for pi, ph in enumerate(cyc):
            new.append(ph)
            if pi not in places:
                continue
            cur, nxt = ph[2], cyc[pi + 1][2]
            ops: list = []
            if r.random() < 0.75:
                for _ in range(r.randint(1, 3)):
                    x = r.random()
                    if x < 0.2:
                        ops.append(("k", cur, r.randint(5, 300)))
                    elif x < 0.3:
                        ops.append(("k", nxt, r.randint(5, 300)))
                    elif x < 0.4:
                        ops.append(("item", cur, r.randint(1, 10)))
                    elif x < 0.5:  # results copied off, never joined
                        ops += [("w", 12, cur), ("cp", 12, r.randint(2, 400), 2)]
                    elif x < 0.6:  # a side stream forked and joined into the later phase's stream
                        s = r.choice(sides or [13])
                        ops += [("w", s, cur), ("k", s, r.randint(10, 900)), ("w", nxt, s)]
                    elif x < 0.7:  # a collective, joined
                        ops += [("w", 30, cur), ("k", 30, r.randint(20, 900), NCCL), ("w", nxt, 30)]
                    elif x < 0.8:  # a join of what a side stream (or the copy stream) holds from before
                        ops.append(("w", nxt, r.choice(sides + [12, 30])))
                    elif x < 0.9:  # an input copy joined
                        ops += [("cp", 9, r.randint(2, 50), 1), ("w", nxt, 9)]
                    else:
                        ops.append(("gap", r.randint(5, 150)))
            new.append((name, ph[1], cur, [(-2,) + op for op in ops]))
        out.append(new)
    return out


FORK_POLICIES = ("phase", "cycle_end", "next_start", "every_k", "shutdown", "never", "worker_own")
OWN = 25  # the worker's own current stream (``worker_own``)


def fork_program(seed: int, policy: str) -> list:
    """A launcher program (every phase on the loop thread, whose current stream is 7; a worker
    thread ``LAUNCHER`` that holds no phase launches all their work) in which the launcher forks
    side streams off its current stream (``side.wait_stream(current)``: side streams 13/14 that
    compute, the copy stream 12 that copies) in one or several phases of a cycle, working on
    its current stream before, between and after, and joins them back (``current.wait_stream(side)``)
    by ``policy``: "phase" (right after their work, in the same phase), "cycle_end" (once at
    the end of the cycle's last phase, for all its forks), "next_start" (as the next cycle's
    first phase begins), "every_k" (at the end of every 2nd or 3rd cycle), "shutdown" (once,
    after the last cycle, in no cycle), "never". "worker_own": the launcher's current stream is
    its own, ``OWN`` (the phases' work and their events go there; the loop still says 7), which it
    makes wait for the loop's stream 7 every cycle (input copies it put on 7 first, now and then),
    joining 7 back to it never, once in one cycle, or once at shutdown; its own forks off ``OWN``
    follow one of the other policies."""
    r = random.Random(seed * 2654435761 + 97)
    ncyc = r.randint(4, 7)
    names = [("draft", "verify"), ("prepare", "forward", "sample"), ("schedule", "forward", "process"), ("forward",)][r.choice([0, 1, 1, 2, 2, 3])]
    n_ph = len(names)
    own = policy == "worker_own"
    join = r.choice(FORK_POLICIES[:-1]) if own else policy
    cur = OWN if own else 7
    sides = r.sample([13, 14, 12], r.randint(1, 2))
    fixed = sorted(r.sample(range(n_ph), r.randint(1, n_ph)))
    vary = r.random() < 0.3  # the phases that fork drawn anew each cycle
    k = r.choice([2, 3])
    own_wait_phase = r.randrange(n_ph)
    own_join = r.choice(["never", "once", "shutdown"]) if own else "never"
    own_join_cycle = r.randrange(ncyc)
    prog = [[(n, LOOP, cur, [], LAUNCHER) + ((7,) if own else ()) for n in names] for _ in range(ncyc)]
    unjoined: list = []  # side streams forked and not joined back yet (in fork order)

    def d(a: int, b: int) -> int:
        return r.randint(a, b)

    def work_on_cur(ops: list, lo: int, hi: int) -> None:
        for _ in range(d(lo, hi)):
            x = r.random()
            if x < 0.65:
                ops.append(("k", cur, d(5, 300)))
            elif x < 0.78:
                ops.append(("item", cur, d(1, 10)))
            elif x < 0.88:
                ops.append(("gap", d(5, 150)))
            else:
                ops.append(("cp", cur, d(2, 60), 1))

    def join_all(ops: list) -> None:
        for s in list(unjoined):
            ops.append(("w", cur, s))
        unjoined.clear()

    for ci in range(ncyc):
        forking = sorted(r.sample(range(n_ph), r.randint(1, n_ph))) if vary else fixed
        for pi in range(n_ph):
            ops = prog[ci][pi][3]
            if join == "next_start" and pi == 0:
                join_all(ops)
            if own and pi == own_wait_phase:
                if r.random() < 0.4:  # an input copied on the loop's stream first
                    ops.append(("cp", 7, d(2, 50), 1))
                ops.append(("w", OWN, 7))
            work_on_cur(ops, 0, 3)
            if pi in forking:
                for s in r.sample(sides, r.randint(1, len(sides))):
                    ops.append(("w", s, cur))
                    for _ in range(d(1, 2)):
                        ops.append(("cp", s, d(2, 400), r.choice([1, 2])) if s == 12 else ("k", s, d(10, 900)))
                    if s not in unjoined:
                        unjoined.append(s)
                    if r.random() < 0.5:
                        work_on_cur(ops, 1, 2)
                    if join == "phase":
                        ops.append(("w", cur, s))
                        unjoined.remove(s)
                if r.random() < 0.6:
                    work_on_cur(ops, 1, 2)
            if pi == n_ph - 1:
                if join == "cycle_end" or (join == "every_k" and (ci + 1) % k == 0):
                    join_all(ops)
                if own and own_join == "once" and ci == own_join_cycle:
                    ops.append(("w", 7, OWN))
    tail: list = []
    if join == "shutdown":
        join_all(tail)
    if own and own_join == "shutdown":
        tail.append(("w", 7, OWN))
    if tail:
        prog.append([("", LOOP, cur, [("gap", 50)] + tail, LAUNCHER)])
    return [[(n, tid, c, [(i,) + op for i, op in enumerate(ops)], *rest) for n, tid, c, ops, *rest in cyc] for cyc in prog]
