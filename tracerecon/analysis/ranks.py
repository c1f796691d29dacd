"""Which process or file is which rank."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tracerecon.analysis.cross_rank import comm_kernels, end_reference, ends_agree
from tracerecon.analysis.nccl import is_all_to_all
from tracerecon.analysis.intervals import covered_length
from tracerecon.analysis.projection import I64_MIN, int64s, string_mask


@dataclass(frozen=True)
class Candidate:
    """One rank-to-be of one input file: what numbering the ranks looks at."""

    file: int  # position of its file among the inputs
    pids: tuple[int, ...]
    device: int  # the CUDA device that ran most of its GPU ops (0: none)
    ran_kernels: bool  # False: copies or memsets only (a scheduler's or a helper's)
    mark: int | None  # its processes' tracerecon.rank mark (None: none, or they differ)
    name_rank: int | None  # the rank its file's name gives (None: none, or the number is a pid in it)
    name_is_pid: bool = False  # the number in its file's name is one of its file's pids (nsys -o %p)
    machine: str = ""  # its file's GPUs (UUIDs): files of one machine list the same
    start_up_only: bool = False  # its GPU work all ran before the file's first phase (``start_up_only``)
    # Its part of a process that runs a loop per GPU on threads of its own (``loops_per_gpu``):
    # the threads it takes (``tids``), or every thread but ``not_tids``, and GPU ops no call
    # launched on its ``device`` (or on none of ``not_devices``); all empty: the whole process.
    tids: tuple[int, ...] = ()
    not_tids: tuple[int, ...] = ()
    not_devices: tuple[int, ...] = ()
    cuda_device: int = -1  # its GPU as its process numbers it (``device``: the machine's)
    loop_tids: tuple[int, ...] = ()  # its process's loop threads, its own first


@dataclass(frozen=True)
class RankSource:
    """One rank: its number, the file it comes from, its processes, and how the number was found."""

    rank: int
    path: str
    pids: tuple[int, ...]
    how: str  # "file name" | "file order" | "nvtx mark" | "device/pid order" | "device order" | "single process"
    candidate: Candidate | None = None  # what its number was found from (None: read back from an export)
    # Its loop thread where it is one GPU's part of a process running a loop per GPU on threads of
    # its own (``split_by_loops``: several ranks then share a pid); None: its processes whole.
    tid: int | None = None


def gpu_processes(gpu_ops: pa.Table, nvtx_ranges: pa.Table, gpu_of=None) -> list[tuple[int, int, bool]]:
    """(pid, device, ran kernels or CUDA graphs) of each process that did GPU work (launchers
    such as torchrun's parent did none), its device the one that ran most of its GPU ops (a
    stray op on another device moves nothing); without GPU work in the file (a CPU-only run),
    the processes that have NVTX ranges, on device 0. ``gpu_of(pid, device)``: the machine's GPU
    of a process's CUDA device (``ExportInfo.gpu_of``; processes given each their own GPU by
    CUDA_VISIBLE_DEVICES all say device 0)."""
    if gpu_ops.num_rows == 0:
        pids = np.unique(nvtx_ranges["pid"].to_numpy()) if nvtx_ranges.num_rows else np.array([], dtype=np.int64)
        return [(int(p), 0, False) for p in pids]
    pid = gpu_ops["pid"].to_numpy()
    dev = gpu_ops["device_id"].to_numpy()
    runs_code = string_mask(gpu_ops["kind"], lambda k: k in ("kernel", "graph"))
    out = []
    pids = sorted(pc.unique(gpu_ops["pid"]).to_pylist())  # a hash, not a sort of every op
    for p in pids:
        mine = slice(None) if len(pids) == 1 else pid == p
        # Counted by distinct id, not by a bincount over the ids' range: a corrupt export's
        # device id near 2**63 would ask numpy for an array that size (seen to corrupt the heap).
        devices, counts = np.unique(dev[mine], return_counts=True)
        main = int(devices[np.argmax(counts)])  # ties: the lowest id
        out.append((int(p), gpu_of(int(p), main) if gpu_of is not None else main, bool(runs_code[mine].any())))
    return out


def start_up_only(gpu_ops: pa.Table, marked: pa.Table) -> frozenset[int]:
    """The processes whose every GPU op was launched (put on the GPU, where no launching call
    is linked) before the file's first phase or cycle range began (``marked``: those ranges),
    where another process launched GPU work after it: a scheduler's or a front end's start-up
    (CUDA's first allocation, a warm-up kernel, a tensor made on the GPU), not a rank that ran
    the phases. A scheduler whose workers launch is otherwise taken for a rank (numbered among
    them by its device and pid, its phases' GPU time read on its idle stream); one that
    launched nothing is no rank at all."""
    if gpu_ops.num_rows == 0 or marked.num_rows == 0:
        return frozenset()
    first = int(pc.min(marked["start_ns"]).as_py())
    start = int64s(gpu_ops["start_ns"])
    at = int64s(gpu_ops["launch_start_ns"], I64_MIN) if "launch_start_ns" in gpu_ops.column_names else np.full(len(start), I64_MIN)
    at = np.where(at == I64_MIN, start, at)
    pid = int64s(gpu_ops["pid"])
    pids, inverse = np.unique(pid, return_inverse=True)
    last = np.full(len(pids), I64_MIN, np.int64)
    np.maximum.at(last, inverse, at)
    before = last < first
    if before.all() or not before.any():
        return frozenset()
    return frozenset(pids[before].tolist())


def communicating_peers(gpu_ops: pa.Table, among: frozenset[int]) -> tuple[tuple[int, ...], frozenset[int]]:
    """The processes of ``among`` that ran communication kernels, and those of them that ran
    collectives with another of them: each joins the first group whose first process's
    collectives of some name its own end together with (``cross_rank.ends_agree``: one
    collective's kernels end together on every rank of its communicator) and of no name apart,
    else starts its own. The second are all the first where every one is in a group of two or
    more, else none: one the ends cannot tell (no name in common, too few kernels, or kernels
    too close together), or whose ends say apart from every other's, may be the rank of a GPU
    the others are not, or run on one of theirs (separate communicators on one GPU: a draft
    model's process beside the target's, a trainer beside inference), which the trace does not
    tell. Sends and receives and DeepEP's low-latency kernels, whose ends lie apart by the
    transfer, say nothing (``cross_rank.comm_kernels``), nor do all-to-alls ending apart (by
    each rank's share: a hot expert's process had been merged with its peer)."""
    idx, listed, code, in_order = comm_kernels(gpu_ops)
    pid = int64s(gpu_ops["pid"])[idx] if len(idx) else np.zeros(0, np.int64)
    talkers = sorted(set(np.unique(pid).tolist()) & among)
    if len(talkers) < 2:
        return tuple(talkers), frozenset()
    told = ~np.isin(code, in_order)
    start, end = int64s(gpu_ops["start_ns"])[idx], int64s(gpu_ops["end_ns"])[idx]

    def verdict(lead: int, other: int) -> bool | None:
        a, b = (pid == lead) & told, (pid == other) & told
        said = []
        for k in np.intersect1d(code[a], code[b]).tolist():
            ref = end_reference(start[a & (code == k)], end[a & (code == k)])
            agree = None if ref is None else ends_agree(ref, end[b & (code == k)])
            # (an all-to-all's kernels end apart by each rank's share: apart, they say nothing)
            said.append(None if agree is False and is_all_to_all(listed[k]) else agree)
        return False if False in said else True if True in said else None

    groups: list[list[int]] = []
    for p in talkers:
        said = [verdict(g[0], p) for g in groups]
        if True in said:
            groups[said.index(True)].append(p)
        else:  # (one that cannot be told from a group starts its own too: it holds no later process back)
            groups.append([p])
    return tuple(talkers), frozenset(talkers) if all(len(g) > 1 for g in groups) else frozenset()


def splits_by_process(processes: list[tuple[int, int, bool]], marks: dict[int, int], whole_tree: bool) -> bool:
    """Whether a file gives one rank per process whatever their collectives: a whole process
    tree (the only input), processes that ran code on two devices or more, or rank marks of
    their own (``file_candidates``)."""
    return whole_tree or len({d for _, d, k in processes if k}) > 1 or _distinct_marks([marks.get(p) for p, _, _ in processes])


def talkers_to_split(processes: list[tuple[int, int, bool]], marks: dict[int, int], whole_tree: bool, peers: frozenset[int]) -> list[int]:
    """The processes one file splits into a rank each by ``peers`` (``communicating_peers``: a
    communicator holds one rank per GPU, where workers given their GPUs by CUDA_VISIBLE_DEVICES
    all say device 0 and exports before nsys 2025.3 do not map that to the machine's GPU; their
    rank marks, ``tracerecon.instrument``'s 0 where RANK is unset, do not hold against that):
    where nothing else splits the file (``splits_by_process``); else none."""
    if splits_by_process(processes, marks, whole_tree):
        return []
    talking = sorted(p for p, _, k in processes if k and p in peers)
    return talking if len(talking) > 1 else []


def file_candidates(file: int, processes: list[tuple[int, int, bool]], marks: dict[int, int], name_number: int | None,
                    whole_tree: bool, all_pids: list[int], machine: str = "", name_may_be_rank: bool = True,
                    peers: frozenset[int] = frozenset(), start_up: frozenset[int] = frozenset()) -> list[Candidate]:
    """The rank candidates of one file: one per process of ``processes`` (``gpu_processes``)
    where the file is a whole process tree (``whole_tree``: the only input), where its processes
    that ran code sit on two devices or more (``nsys profile torchrun`` on a node, whatever its
    name says), or where they carry rank marks of their own; one per process that ran
    collectives with another of them, where every one that communicated did
    (``talkers_to_split`` of ``peers``), the file's other GPU processes with the first; else the
    whole file (``all_pids``: its rank's process with its launcher and copy-only helpers) as
    one. ``name_number``: the number its name ends in, if any (``name_may_be_rank`` False: too
    large for a rank); ``marks``: {pid: rank} from the processes' tracerecon.rank marks;
    ``start_up``: the processes whose GPU work all ran before the file's phases
    (``start_up_only``)."""
    name_is_pid = name_number is not None and name_number in all_pids + [p for p, _, _ in processes]
    name_rank = None if name_is_pid or not name_may_be_rank else name_number
    if not processes:  # nothing ran here (a rank that failed early): a rank all the same
        return [Candidate(file, tuple(all_pids), 0, False, None, name_rank, name_is_pid, machine)] if not whole_tree else []
    if splits_by_process(processes, marks, whole_tree):
        return [Candidate(file, (p,), d, k, marks.get(p), name_rank, name_is_pid, machine, p in start_up) for p, d, k in processes]
    if talking := talkers_to_split(processes, marks, whole_tree, peers):
        device = {p: d for p, d, _ in processes}
        # (the file's other GPU processes: one that did no GPU work, a launcher or a scheduler
        # marking cycles of its own, is no rank's, as where the file is one rank)
        rest = tuple(p for p, _, _ in processes if p not in talking)
        return [Candidate(file, (p,) + (rest if i == 0 else ()), device[p], True, marks.get(p), name_rank, name_is_pid, machine)
                for i, p in enumerate(talking)]
    own = {marks.get(p) for p in all_pids if p in marks}
    first = min(processes, key=lambda x: (not x[2], x[1], x[0]))
    return [Candidate(file, tuple(all_pids), first[1], any(k for _, _, k in processes), own.pop() if len(own) == 1 else None,
                      name_rank, name_is_pid, machine)]


def _distinct_marks(marks: list[int | None]) -> bool:
    """Several processes, each with a mark of its own."""
    return len(marks) > 1 and None not in marks and len(set(marks)) == len(marks)


def number_ranks(cands: list[Candidate], multi: bool) -> tuple[list[int], list[str], list[str]]:
    """Each candidate's rank, how it was found, and warnings.

    The processes' own tracerecon.rank marks decide where they are distinct; a candidate without
    one (a scheduler that did a copy, a helper process) takes the number the rules below give it
    where no mark holds that number, else one after the marked ones; either way with a warning.
    Without marks, with several files: the rank in each file's name (rank3, r3, _3; never a
    number that is one of the file's pids, as nsys's ``-o %p`` writes) where every file gives a
    different one and is one candidate; else the order: processes split out of a file that ran
    code (kernels, CUDA graphs) before the copy-only ones and those whose GPU work all ran before
    the file's phases, then files in the order given (a
    folder's sorted by name, numbers by value), then by CUDA device, then pid. Files named by
    pid, one candidate each, go by machine (in file order), then CUDA device: their names'
    order is the pids'."""
    files = sorted({c.file for c in cands})
    per_file = {f: [c for c in cands if c.file == f] for f in files}
    one_each = all(len(v) == 1 for v in per_file.values())
    names = [per_file[f][0].name_rank for f in files]
    by_name = multi and one_each and None not in names and len(set(names)) == len(names)
    pid_named = multi and one_each and all(c.name_is_pid for c in cands)
    warnings: list[str] = []
    if by_name:
        fallback, how = [c.name_rank for c in cands], "file name"
    else:
        machine_at = {}
        for c in sorted(cands, key=lambda c: c.file):
            machine_at.setdefault(c.machine, len(machine_at))
        # A copy-only process split out of a file goes after every process that ran code, and so
        # does one whose GPU work all ran before the file's phases (a scheduler's start-up); a
        # whole file is a rank as it is, even one where nothing ran.
        helper = [(not c.ran_kernels or c.start_up_only) and len(per_file[c.file]) > 1 for c in cands]
        if pid_named:
            key = lambda i: (machine_at[cands[i].machine], cands[i].device, cands[i].file)  # noqa: E731
        else:
            key = lambda i: (helper[i], cands[i].file, cands[i].device, cands[i].pids[0] if cands[i].pids else 0)  # noqa: E731
        fallback = [0] * len(cands)
        for rank, i in enumerate(sorted(range(len(cands)), key=key)):
            fallback[i] = rank
        how = ("device order" if pid_named else "file order") if multi else ("single process" if len(cands) <= 1 else "device/pid order")
    marks = [c.mark for c in cands]
    if any(c.loop_tids for c in cands):
        # A process split into a rank per GPU (``split_by_loops``): its one mark is its parts'.
        # Where every process carries a mark of its own, they go by mark, each one's parts by
        # GPU, numbered one after another (rank marks count processes, not GPUs); else by the
        # order above.
        of_process = {(c.file, c.pids): c.mark for c in cands}
        if None not in of_process.values() and len(set(of_process.values())) == len(of_process):
            ranks = [0] * len(cands)
            for n, i in enumerate(sorted(range(len(cands)), key=lambda i: (cands[i].mark, cands[i].device, cands[i].file))):
                ranks[i] = n
            return ranks, ["nvtx mark"] * len(cands), []
        marks = [None] * len(cands)
    marked = [m for m in marks if m is not None]
    if marked and len(set(marked)) == len(marked):
        ranks, hows = list(marks), ["nvtx mark" if m is not None else how for m in marks]
        unmarked = sorted((i for i, m in enumerate(marks) if m is None), key=lambda i: fallback[i])
        free = len({fallback[i] for i in unmarked} & set(marked)) == 0  # (fallback numbers are distinct)
        for n, i in enumerate(unmarked, max(marked) + 1):
            ranks[i] = fallback[i] if free else n
            if not free:
                hows[i] = "after the marked ones"
            warnings.append(f"process {', '.join(map(str, cands[i].pids))} carries no tracerecon.rank mark where {len(marked)} "
                            f"other{'s do' if len(marked) > 1 else ' does'}: rank {ranks[i]}, " + (f"by {how}" if free else "after the marked ones"))
        return ranks, hows, warnings
    if marked:
        repeated = sorted({m for m in marked if marked.count(m) > 1})
        warnings.append(f"the processes' tracerecon.rank marks repeat (rank {', '.join(map(str, repeated))} more than once): ranks follow {how}")
    if multi and not by_name:
        given = [c.name_rank for c in cands]
        if pid_named:
            warnings.append("the numbers in the file names are the processes' ids (nsys -o %p), not ranks: ranks follow each machine's "
                            "GPUs, machines in file order")
        elif not one_each:
            warnings.append("some files hold several ranks' processes (on several devices, or ranks of one communicator): each is "
                            "a rank, numbered in file order, then within a file by GPU and pid")
        elif None not in given:
            repeated = sorted({r for r in given if given.count(r) > 1})
            warnings.append(f"rank numbers in the file names repeat (rank {', '.join(map(str, repeated))} more than once); ranks follow file order")
        else:
            warnings.append("rank numbers not found in every file name (e.g. rank3, r3, _3); ranks follow file order")
    return fallback, [how] * len(cands), warnings


def loops_per_gpu(r_pid: np.ndarray, r_tid: np.ndarray, r_label: list[str | None], r_cycle: np.ndarray,
                  o_pid: np.ndarray, o_tid: np.ndarray, o_dev: np.ndarray, pid: int) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """Process ``pid``'s threads as one rank per GPU, where it runs a loop on each of two or more
    threads, each on a GPU of its own (a process driving its GPUs a thread each, as in-process
    tensor parallelism does): ((device, its threads, its loop thread first), ...) in device
    order, else ().

    ``r_*``: the file's phase and cycle ranges (process, thread, phase label or None for a
    cycle range, is a cycle range); ``o_*``: its GPU ops (process, launching thread or -1,
    device). A loop thread holds phase ranges, the same phases as every other loop thread, and
    launched all its GPU work on a device no other loop thread launched on; where the process
    has cycle ranges, the loop threads hold them and no other thread does (cycles of their
    own; a process with cycle ranges and no phase range: the threads holding them). Every other thread that launched GPU work launched it all on one device, and joins
    that device's loop thread (else the first). Anything else (a thread holding phases but
    launching nothing, two loops on one GPU, a thread pool serving both GPUs from each thread,
    a helper thread queueing work on both, a scheduler thread's cycle ranges around the GPU
    threads' phases) is one rank, as before: a part's stream clock then holds all the work its
    phases' boundaries can wait for (and ``parts_wait_for_nothing_of_each_other`` keeps one rank
    where a thread waits for an event another part's thread recorded)."""
    mine = r_pid == pid
    if not mine.any():
        return ()
    is_cycle = r_cycle[mine]
    tids = r_tid[mine]
    labels = [lab for lab, m in zip(r_label, mine.tolist()) if m]
    # (where it holds cycle ranges but no phase range, as where ``ranges`` lists every name with
    # no phases given, the cycle ranges' threads are the loops)
    loop_threads = sorted(set(tids[~is_cycle].tolist()) or set(tids[is_cycle].tolist()))
    if len(loop_threads) < 2:
        return ()
    cycle_threads = set(tids[is_cycle].tolist())
    if cycle_threads and cycle_threads != set(loop_threads):
        return ()
    held = {t: {lab for lab, tt, c in zip(labels, tids.tolist(), is_cycle.tolist()) if tt == t and not c} for t in loop_threads}
    if any(h != held[loop_threads[0]] for h in held.values()):
        return ()
    ops = o_pid == pid
    o_tid, o_dev = o_tid[ops], o_dev[ops]

    def only_device(t: int) -> int | None:
        devices = np.unique(o_dev[o_tid == t])
        return int(devices[0]) if len(devices) == 1 else None

    main = {t: only_device(t) for t in loop_threads}
    if None in main.values() or len(set(main.values())) < len(main):
        return ()
    by_device = {d: [t] for t, d in main.items()}
    first = min(by_device)
    for t in sorted(set(o_tid[o_tid >= 0].tolist()) - set(loop_threads)):
        if (d := only_device(t)) is None:
            return ()
        by_device[d if d in by_device else first].append(t)
    return tuple((d, (by_device[d][0],) + tuple(sorted(by_device[d][1:]))) for d in sorted(by_device))


def parts_wait_for_nothing_of_each_other(pid: int, loops: tuple[tuple[int, tuple[int, ...]], ...], api_calls: pa.Table, sync_records: pa.Table,
                                          event_records: pa.Table) -> bool:
    """Whether process ``pid``'s parts (``loops_per_gpu``) are read alike apart: each of
    its event records and synchronization records is a call of the process (a correlation id
    one of its calls has), and each stream or event wait's event was recorded by a thread of the
    waiting thread's part (a thread on GPU 1 waiting for an event recorded on GPU 0 would lose
    that wait)."""
    part_of = {t: i for i, (_, ts) in enumerate(loops) for t in ts}
    calls = select_pids(api_calls, [pid])
    call_part = dict(zip(int64s(calls["correlation_id"], -1).tolist(), (part_of.get(t, 0) for t in int64s(calls["tid"], -1).tolist())))
    records = select_pids(event_records, [pid])
    r_part = [call_part.get(c) for c in int64s(records["correlation_id"], -1).tolist()]
    if None in r_part:
        return False
    recorded = dict(zip(zip(int64s(records["event_id"], -1).tolist(), int64s(records["event_sync_id"], -1).tolist()), r_part))
    syncs = select_pids(sync_records, [pid])
    s_part = [call_part.get(c) for c in int64s(syncs["correlation_id"], -1).tolist()]
    if None in s_part:
        return False
    event = int64s(syncs["event_id"], -1) if "event_id" in syncs.column_names else np.full(syncs.num_rows, -1)
    on_event = np.flatnonzero(event >= 0)
    keys = zip(event[on_event].tolist(), int64s(syncs["event_sync_id"], -1)[on_event].tolist())
    return all(recorded.get(k, s_part[i]) == s_part[i] for k, i in zip(keys, on_event.tolist()))


def split_by_loops(cand: Candidate, loops: tuple[tuple[int, tuple[int, ...]], ...], gpu_of=None) -> list[Candidate]:
    """``cand`` (one process's) as one candidate per GPU of ``loops`` (``loops_per_gpu``: each
    GPU's threads, its loop thread first): the first takes every thread the others do not
    (those that launched nothing too). Each is numbered by the machine's GPU (``gpu_of``,
    ``ExportInfo.gpu_of``) after its process's rank mark (``number_ranks``)."""
    if not loops:
        return [cand]
    loop_tids = tuple(ts[0] for _, ts in loops)
    rest = tuple(t for _, ts in loops[1:] for t in ts)
    devices = tuple(d for d, _ in loops[1:])
    return [replace(cand, device=gpu_of(cand.pids[0], d) if gpu_of is not None else d, cuda_device=d,
                    tids=() if i == 0 else ts, not_tids=rest if i == 0 else (), not_devices=devices if i == 0 else (),
                    loop_tids=(own,) + tuple(t for t in loop_tids if t != own))
            for i, ((d, ts), own) in enumerate(zip(loops, loop_tids))]


def thread_rows(tid: np.ndarray, cand: Candidate, device: np.ndarray | None = None) -> np.ndarray | None:
    """Which rows (their thread ``tid``, -1 where none; GPU ops' ``device`` too) belong to
    ``cand``'s part of its process (``split_by_loops``); None: all of them."""
    if not cand.tids and not cand.not_tids:
        return None
    none = tid < 0
    if cand.tids:
        keep = np.isin(tid, cand.tids)
        return keep | (none & (device == cand.cuda_device)) if device is not None else keep
    keep = ~none & ~np.isin(tid, cand.not_tids)
    return keep | (none & ~np.isin(device, cand.not_devices)) if device is not None else keep | none


def mark_rows(tid: np.ndarray, cand: Candidate) -> np.ndarray | None:
    """Which NVTX marks (their thread ``tid``) are ``cand``'s part's: its own loop thread's and
    those of every thread that is no loop thread (a scheduler thread's ``tracerecon.accepted``
    marks count for every part); None: all."""
    if not cand.loop_tids:
        return None
    return (tid == cand.loop_tids[0]) | ~np.isin(tid, cand.loop_tids)


def ranks_sharing_a_gpu(gpus: list[tuple[int, object | None]]) -> list[tuple[list[int], object]]:
    """Ranks that ran on one GPU: ``gpus`` holds each rank's (number, the machine's GPU it ran
    most of its work on, as a key that is the same for the same GPU: its file and id; None
    where the export does not say which GPU a process's CUDA device is).
    Returns (the ranks, their GPU) per GPU of two ranks or more, in rank order."""
    on: dict[object, list[int]] = {}
    for rank, gpu in gpus:
        if gpu is not None:
            on.setdefault(gpu, []).append(rank)
    return sorted(((sorted(r), g) for g, r in on.items() if len(r) > 1), key=lambda x: x[0])


def gpu_time_beside_phases(phased_ops: pa.Table, phase_ranges: pa.Table, other_ops: pa.Table) -> tuple[int, int]:
    """The GPU time (ns, the time the ops' union covers) within the span of a rank's phase
    ranges (``phase_ranges``: its first start to its last end) of its own ops (``phased_ops``)
    and of another rank's (``other_ops``, a rank on the same GPU that has no phase range):
    (own, other's). A scheduler process that marks phases and makes a small copy a cycle beside
    a worker process that launches the phases' work reads its phases on its own stream: its own
    time is a sliver of the other's."""
    if phase_ranges.num_rows == 0 or phased_ops.num_rows == 0 or other_ops.num_rows == 0:
        return 0, 0
    lo, hi = int(pc.min(phase_ranges["start_ns"]).as_py()), int(pc.max(phase_ranges["end_ns"]).as_py())

    def within(ops: pa.Table) -> int:
        return int(covered_length(np.array([lo]), np.array([hi]), int64s(ops["start_ns"]), int64s(ops["end_ns"]))[0])

    return within(phased_ops), within(other_ops)


def select_pids(table: pa.Table, pids: list[int]) -> pa.Table:
    """Rows of ``table`` whose pid is in ``pids``."""
    if table.num_rows == 0:
        return table
    present = pc.unique(table["pid"]).to_pylist()
    if set(present) <= set(pids):
        return table  # the common case (one process per rank file): no copy
    return table.filter(pc.is_in(table["pid"], value_set=pa.array(pids, pa.int64())))
