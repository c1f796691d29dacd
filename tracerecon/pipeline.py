"""How ``api.load`` analyses exports: each file read and analysed per rank (here, in worker
processes, or on a Dask cluster), then the cross-rank step, the whole run cached.

Imported by ``tracerecon.api`` when an analysis is needed; front ends call ``api``, not this.
"""

from __future__ import annotations

import os
import re
import shlex
import threading
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from tracerecon.analysis.config import DEFAULT_PHASES, PhaseConfig, is_cycle_name, parse_phase_spec, pattern_hint, patterns_of_several_names
from tracerecon.errors import EXIT_INTERNAL, BadTraceError, TraceReconError, UsageError, install_hint
from tracerecon.import_ahead import ImportAhead, join_all, reading_started
from tracerecon.json_text import one_line
from tracerecon.memory import release_free_memory
from tracerecon.nsys.locate import before_2023
from tracerecon.run_dir import MAX_RANK_IN_NAME, STREAM_MARK, accepted_of_mark, expand_inputs, folder_warnings, listed_by_one_run, number_in_filename, other_exports_beside, rank_of_mark, read_engine_timers, trace_stem

if TYPE_CHECKING:
    from tracerecon.model import Analysis
    from tracerecon.nsys.sqlite_export import TraceTables

Progress = Callable[[str], None]

# What analysing a read trace imports. This module imports neither these nor numpy and pyarrow:
# they are imported while an export is read (``_read_tables``), here or in a worker process, and
# in the parent of worker processes while those work.
ANALYSIS_MODULES = (
    "tracerecon.analysis.projection", "tracerecon.analysis.ranks", "tracerecon.analysis.rank",
    "tracerecon.analysis.cross_rank", "tracerecon.analysis.summary", "tracerecon.model",
)


def no_nvtx_message(path: str, nsys_version: str | None) -> str:
    """Why a trace has no NVTX ranges; the nvtx-package hint only where that nsys makes it likely."""
    msg = f"{path}: no NVTX ranges in the trace: was the program instrumented, and traced with `-t nvtx`?"
    if before_2023(nsys_version):
        msg += f" (Nsight Systems {nsys_version} records no ranges from the `nvtx` Python package 0.2.11 or newer: pip install 'nvtx==0.2.10')"
    return msg


# The start of the warning that phases were marked in a process that launched no GPU work.
PHASES_WITHOUT_GPU = "phase or cycle ranges in a process that launched no GPU work"
# Ends the warnings that no range is any phase, or that a --phase matched none: `tracerecon
# ranges` itself leaves those out (it lists ranges whatever the phases).
RANGES_HINT = "`tracerecon ranges` lists every range name"


def phases_without_gpu_message(path: str, pids: list[int], phases: list[str] = (), before: list[int] = ()) -> str:
    """Phases marked where tracerecon cannot read them: in processes that launched no GPU work
    (a scheduler process whose workers launch), so in no rank, or none after their start-up
    (``before``: ``ranks.start_up_only``); ``phases``: the phases named there (each as its repr:
    ``pipeline`` looks for them)."""
    of = f" (of {', '.join(map(repr, phases))})" if phases else ""
    which = ", ".join(f"{p}, which launched GPU work only before the file's first phase or cycle range" if p in before else str(p) for p in pids)
    return (f"{PHASES_WITHOUT_GPU} (pid {which}) in {path}: left out{of}, as a phase is read in the "
            "process that launches its GPU work; mark the phases there (tracerecon.instrument in the worker process)")


def phase_ranges(nvtx_ranges, config):
    """The NVTX ranges that are a phase or a cycle (``config``)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if nvtx_ranges.num_rows == 0:
        return nvtx_ranges
    names = pc.unique(nvtx_ranges["name"]).to_pylist()
    marked = [n for n in names if n is not None and (config.label_of(n) is not None or is_cycle_name(n, config.cycle_prefix))]
    return nvtx_ranges.filter(pc.is_in(nvtx_ranges["name"], value_set=pa.array(marked, pa.string())))


def phase_processes_left_out(nvtx_ranges, rank_pids: list[int], config) -> tuple[list[int], list[str]]:
    """Processes in no rank whose NVTX ranges include a phase or cycle range (``config``), and
    the phases (labels) their ranges are."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if nvtx_ranges.num_rows == 0:
        return [], []
    outside = nvtx_ranges.filter(pc.invert(pc.is_in(nvtx_ranges["pid"], value_set=pa.array(rank_pids, pa.int64()))))
    hit = phase_ranges(outside, config)
    if hit.num_rows == 0:
        return [], []
    domains = hit["domain"].to_pylist() if "domain" in hit.column_names else [""] * hit.num_rows
    labels = {config.label_of(n, d or "") for n, d in set(zip(hit["name"].to_pylist(), domains))} - {None}
    return sorted(set(hit["pid"].to_pylist())), [lab for lab in config.labels() if lab in labels]


def _read_tables(f: Path, while_reading: Sequence[str] = ()) -> TraceTables:
    """One export's tables (tracerecon.nsys), nothing analysed yet. Its two big reads start
    first (``read_plan.start_ahead``, which needs neither numpy nor pyarrow), so that importing
    those and the reader overlaps them; the modules ``while_reading`` are imported on a thread
    meanwhile (``import_ahead``), and joined before this returns."""
    from tracerecon.nsys import native_read, read_plan

    started, ahead = [], None
    try:
        started = read_plan.start_ahead(f)
        reading_started()
        # numpy and pyarrow first, here, while the reads run: only then may another thread
        # import (see import_ahead: two threads importing numpy at once is not safe).
        from tracerecon.nsys.sqlite_export import read_export

        ahead = ImportAhead(while_reading) if while_reading else None
        tables = read_export(f)
    except BaseException:
        ahead = None  # (not waited for where left by an exception: see import_ahead.once_reading)
        raise
    finally:
        if ahead is not None:
            ahead.join()
        native_read.discard_ahead(started)  # a read nobody asked for (its SQL differed)
    release_free_memory()  # what the reader threads freed (see tracerecon.memory)
    return tables


def _link(f: Path, tables: TraceTables):
    """The export's tables, its GPU ops linked to their launching calls, its warnings, and the
    kernel launches made after their process's last call that put an op in the trace
    (``launches_never_run``, before any op is dropped) as (pid, CPU start) arrays: which of them
    the capture ended before recording is told per rank (``_unrun_from``)."""
    from tracerecon.analysis.columns import copy_calls_without_ops, launches_lost, launches_never_run, ops_out_of_time
    from tracerecon.analysis.projection import int64s, launching_calls, link_launches
    from tracerecon.nsys.sqlite_export import read_all_api_calls

    warnings = list(tables.warnings)
    tables = replace(tables, gpu_ops=_without_repeats(f, tables.gpu_ops, GPU_OP_IDENTITY, "GPU op", warnings),
                     api_calls=_without_repeats(f, tables.api_calls, API_CALL_IDENTITY, "CUDA API call", warnings))
    # Tables that are there but hold no GPU op and no call that launches or waits for one (a
    # CPU-only run with CUDA traced) say what missing tables say.
    if not tables.info.has_cuda or (tables.gpu_ops.num_rows == 0 and tables.api_calls.num_rows == 0):
        warnings.append(f"{f}: no CUDA activity in the trace (traced without `-t cuda`, or a CPU-only run): CPU times only")
    call = launching_calls(tables.gpu_ops, tables.api_calls)
    linked = link_launches(tables.gpu_ops, tables.api_calls, call)
    launches = 0 if _kernels_or_graphs(tables.gpu_ops) else _kernel_launch_calls(tables.api_calls)
    if launches:
        warnings.append(f"{f}: {launches} kernel launch call(s) but no kernel in the trace (its kernel table is missing or empty): "
                        "GPU times cover copies and memsets only")
    for kind, calls in copy_calls_without_ops(tables.api_calls, tables.gpu_ops).items():
        warnings.append(f"{f}: {calls} {kind} call(s) but no {kind} in the trace (its {kind} table is missing or empty): GPU times leave that work out")
    if linked["launch_tid"].null_count:
        # The filtered read of API calls missed a launcher: read them all and link again.
        tables = replace(tables, api_calls=_without_repeats(f, read_all_api_calls(f), API_CALL_IDENTITY, "CUDA API call", warnings))
        call = launching_calls(tables.gpu_ops, tables.api_calls)
        linked = link_launches(tables.gpu_ops, tables.api_calls, call)
        if linked["launch_tid"].null_count:
            warnings.append(f"{f}: {linked['launch_tid'].null_count} GPU op(s) have no launching API call in the trace; they belong to no range")
    # (before any op is dropped: a dropped op's call is no launch that never ran)
    unrun = launches_never_run(tables.api_calls, linked)
    lost = launches_lost(tables.api_calls, tables.gpu_ops, call) if launches == 0 else ()
    if len(lost):
        warnings.append(f"{f}: {len(lost)} kernel launch call(s) made before later ones whose GPU work is in the trace have no GPU record of "
                        "their own (CUPTI dropped records mid-run, the export was trimmed, or the launches failed): the phases that made them read short")
    impossible = ops_out_of_time(linked)
    if len(impossible):
        warnings.append(f"{f}: dropped {len(impossible)} GPU op(s) whose times cannot be (starting before their launch call, or out of "
                        "their stream's launch order: a later-launched op started or ended first): a corrupt or edited export")
        tables, linked = replace(tables, gpu_ops=_without_rows(tables.gpu_ops, impossible)), _without_rows(linked, impossible)
    if len(unrun):
        start = int(int64s(tables.api_calls["start_ns"])[unrun].min())  # rows are in no time order
        warnings.append(f"{f}: the last {len(unrun)} kernel launch(es), from {(tables.trace_end_ns - start) / 1e6:.3f} ms before the trace's end, "
                        "have no GPU work in the trace (the capture ended before it ran or was recorded): phases there read short")
    return tables, linked, warnings, (int64s(tables.api_calls["pid"])[unrun], int64s(tables.api_calls["start_ns"])[unrun])


def _unrun_from(unrun: tuple, linked, pids: list[int]) -> int | None:
    """The CPU start of the first of a rank's (processes ``pids``) launches ``unrun`` (pid,
    start: ``_link``'s) made after every launch of the rank whose GPU work is in the trace
    (``linked``: the file's ops with their launching calls): a capture ends for all of a rank's
    processes at once, so a helper process's own unrun tail, before the worker's later launches
    ran, ends nothing; another rank's later launches in the file do not count. None: none."""
    import numpy as np

    from tracerecon.analysis.projection import I64_MIN, int64s

    mine = np.isin(unrun[0], pids)
    if not mine.any():
        return None
    launched = int64s(linked["launch_start_ns"], I64_MIN)[np.isin(int64s(linked["pid"]), pids)]
    after = unrun[1][mine][unrun[1][mine] > (launched.max() if len(launched) else I64_MIN)]
    return int(after.min()) if len(after) else None


# What tells two rows apart: rows equal in all of these are one op or call written twice.
GPU_OP_IDENTITY = ("start_ns", "end_ns", "device_id", "stream_id", "correlation_id", "global_pid", "graph_node_id")
API_CALL_IDENTITY = ("start_ns", "end_ns", "tid", "global_pid", "correlation_id")


def _without_repeats(f: Path, table, identity: tuple[str, ...], what: str, warnings: list[str]):
    """``table`` less the rows that repeat an earlier one (``repeated_rows``), with a warning
    saying how many were dropped: counted twice, they would double the phases' work."""
    from tracerecon.analysis.columns import repeated_rows

    again = repeated_rows(table, identity)
    if len(again) == 0:
        return table
    warnings.append(f"{f}: dropped {len(again)} duplicated {what} row(s) (the same times, stream or thread and correlation id as another row)")
    return _without_rows(table, again)


def _without_rows(table, rows):
    """``table`` less the rows at positions ``rows``."""
    import numpy as np
    import pyarrow as pa

    keep = np.ones(table.num_rows, dtype=bool)
    keep[rows] = False
    return table.filter(pa.array(keep))


def _kernel_launch_calls(api_calls) -> int:
    """How many of the API calls launch kernels or graphs."""
    from tracerecon.analysis.columns import is_launch_call

    return int(is_launch_call(api_calls).sum())


def _kernels_or_graphs(gpu_ops) -> bool:
    """Whether any GPU op runs code (a kernel or a graph launch): by the kind column's codes."""
    import pyarrow as pa

    if gpu_ops.num_rows == 0:
        return False
    for chunk in gpu_ops["kind"].chunks:
        if not pa.types.is_dictionary(chunk.type):
            from tracerecon.analysis.columns import computes

            return bool(computes(gpu_ops).any())
        codes = [i for i, v in enumerate(chunk.dictionary.to_pylist()) if v in ("kernel", "graph")]
        idx = chunk.indices.to_numpy(zero_copy_only=False)
        if any(bool((idx == c).any()) for c in codes):
            return True
    return False


def _session_span(info, trace_end_ns: int) -> tuple[int | None, int | None]:
    """(start, end) of a capture in UTC epoch ns, (None, None) where the export does not say. An
    export made with ``--ts-normalize`` has UTC timestamps already: its trace end is the end."""
    start = info.session_start_utc_ns or None
    if start is None or (info.time_normalized and trace_end_ns < start):  # not on the UTC clock after all
        return None, None
    return start, (max(trace_end_ns, start) if info.time_normalized else start + max(trace_end_ns, 0))


def _same_captures(files: list[Path], sessions: list[tuple]) -> list[str]:
    """Warnings for inputs that hold one capture (the same session start and end): a copy, or
    an export given compressed and not, read as two ranks (copies of one trace are also how
    several ranks are benchmarked, so this is no error). One warning per such group."""
    groups: dict[tuple, list[Path]] = {}
    for f, (start, end, _) in zip(files, sessions):
        if start and end:
            groups.setdefault((start, end), []).append(f)
    return [f"{', '.join(map(str, g))} hold the same capture (the same session start and end): read as {len(g)} files of one run, "
            "each with its own ranks" for g in groups.values() if len(g) > 1]


def _one_run(files: list[Path], sessions: list[tuple]) -> list[str]:
    """Refuse inputs that are not ranks of one run: their sessions (``_session_span``) must
    overlap in time (ranks of one job run at once; separate runs follow each other). Files of
    unknown session time are placed in neither; the others are still checked, and a warning
    names the unknown ones where they are read as ranks of the others' run."""
    spans = []
    for f, (start, end, _) in zip(files, sessions):
        if start:  # the others say nothing either way
            spans.append((start, end, f))
    spans.sort(key=lambda x: x[0])
    groups: list[list[Path]] = []
    last = None
    for s, e, f in spans:
        if last is None or s > last:
            groups.append([f])
            last = e
        else:
            groups[-1].append(f)
            last = max(last, e)
    if len(groups) > 1:
        shown = _told_apart(files)
        listed = " | ".join(", ".join(shown[p] for p in g) for g in groups)
        unknown = [shown[f] for f, (start, _, _) in zip(files, sessions) if not start]
        also = f" (and {', '.join(unknown)}, whose session time the export does not say)" if unknown else ""
        raise BadTraceError(f"the inputs are {len(groups)} separate runs (their sessions do not overlap in time): {listed}{also}; give the files of one run at a time")
    unknown = [f for f, (start, _, _) in zip(files, sessions) if not start]
    if unknown and len(unknown) < len(files):
        shown = _told_apart(files)
        return [f"{', '.join(shown[f] for f in unknown)}: the export does not say when its session began, so it cannot be told to be of "
                "the same run as the other inputs: read as ranks of that run"]
    return []


def _told_apart(files: list[Path]) -> dict[Path, str]:
    """Each file by the fewest trailing path parts that tell it from the others: its name, or
    with its folders where names repeat (``gpu_bound/report.sqlite``, ``launch_bound/report.sqlite``:
    run directories all hold a ``report.sqlite``)."""
    depth = 1
    while True:
        shown = {f: str(Path(*f.parts[-depth:])) for f in files}
        if len(set(shown.values())) == len(files) or all(depth >= len(f.parts) for f in files):
            return shown
        depth += 1


def _file_work(f: Path, config: PhaseConfig, multi: bool, name_number: int | None, order: int, use_cache: bool | None = None) -> tuple[list, list[str], tuple]:
    """Read one export and analyse its ranks as far as one rank can go alone (from the cache
    when it holds this file's result for these options). Runs in a worker process when several
    files are loaded. Returns ([(source, info, work)], warnings, (session start, trace end,
    nsys version))."""
    from tracerecon.cache import cached

    out, warnings, session = cached(Path(f), (config, multi, name_number, order), lambda: _file_work_uncached(f, config, multi, name_number, order),
                                    _is_file_work, use_cache)
    # A cache entry made when the file was given by another path (from another working
    # directory) names that path: the file is named as given now.
    shown, then = str(f), (out[0][0].path if out else str(f))
    if then != shown:
        out = [(replace(source, path=shown), info, work) for source, info, work in out]
        warnings = [w.replace(then, shown) for w in warnings]
    return out, warnings, session


def _file_work_remote(f: Path, shown: str, use_cache: bool, config: PhaseConfig, multi: bool, name_number: int | None, order: int) -> tuple[list, list[str], tuple]:
    """``_file_work`` on another machine: ``f`` is the absolute path there, ``shown`` the path as
    the user gave it, which the results carry (so they equal a local run's, cache entries
    included); ``use_cache`` is the client's choice (``--no-cache`` set nothing there)."""
    _take_dask_worker_share()
    out, warnings, session = _file_work(f, config, multi, name_number, order, use_cache)
    out = [(replace(source, path=shown), info, work) for source, info, work in out]
    return out, [w.replace(str(f), shown) for w in warnings], session


def _take_dask_worker_share() -> None:
    """A Dask worker runs as many tasks at once as it has threads: each task's reader
    connections and analysis threads get that share of the worker's cores (set once per worker
    process; a worker inside the client's own process shares it with the client)."""
    from tracerecon import cores

    if not cores.share_unset():
        return
    try:
        from distributed import get_worker

        threads = int(get_worker().state.nthreads)
    except Exception:  # not in a worker, or a distributed without this attribute: leave it
        return
    cores.set_worker_share(max(1, cores.usable_cores() // max(1, threads)))


def _is_file_work(value) -> bool:
    """Whether a cache entry's value has the shape ``_file_work_uncached`` returns (unpickling
    a real one imported the modules of its parts already)."""
    from tracerecon.analysis.ranks import RankSource

    return (isinstance(value, tuple) and len(value) == 3 and isinstance(value[0], list) and isinstance(value[1], list)
            and isinstance(value[2], tuple) and all(isinstance(o, tuple) and len(o) == 3 and isinstance(o[0], RankSource) for o in value[0]))


def _is_analysis(value) -> bool:
    """Whether a cache entry's value is a whole run's analysis."""
    from tracerecon.model import Analysis

    return isinstance(value, Analysis)


def _file_work_uncached(f: Path, config: PhaseConfig, multi: bool, name_number: int | None, order: int) -> tuple[list, list[str], tuple]:
    read = _read_tables(f, ANALYSIS_MODULES)
    _mark(order, ANALYSING)
    return _analyse_file(f, read, config, multi, name_number, order)


def _analyse_file(f: Path, read: TraceTables, config: PhaseConfig, multi: bool, name_number: int | None, order: int) -> tuple[list, list[str], tuple]:
    """``_file_work_uncached`` once the export's tables are read. Each rank's number is
    provisional with several files (``number_ranks`` needs them all); its source carries what
    numbering looks at, its notes are said once it is numbered (``_numbered``)."""
    import pyarrow as pa

    from tracerecon.analysis.projection import int64s
    from tracerecon.analysis.rank import RankTables, own_rank
    from tracerecon.analysis.ranks import (RankSource, communicating_peers, file_candidates, gpu_processes, number_ranks, select_pids, splits_by_process,
                                           mark_rows, start_up_only, talkers_to_split)

    tables, linked, warnings, unrun = _link(f, read)
    del read
    if tables.nvtx_ranges.num_rows == 0:
        warnings.append(no_nvtx_message(str(f), tables.info.nsys_version))
    named = {int(p): r for p, n in zip(tables.nvtx_marks["pid"].to_pylist(), tables.nvtx_marks["name"].to_pylist()) if (r := rank_of_mark(n)) is not None}
    if too_large := {p: r for p, r in named.items() if r > MAX_RANK_IN_NAME}:
        warnings.append(f"{f}: rank mark{'s' if len(too_large) > 1 else ''} "
                        + ", ".join(f"tracerecon.rank={r} (pid {p})" for p, r in sorted(too_large.items()))
                        + f" name{'' if len(too_large) > 1 else 's'} no rank (over {MAX_RANK_IN_NAME}): ignored")
        named = {p: r for p, r in named.items() if p not in too_large}
    processes = gpu_processes(tables.gpu_ops, tables.nvtx_ranges, tables.info.gpu_of)
    if tables.gpu_ops.num_rows and tables.info.renumbered:
        # Some processes numbered their GPUs otherwise than the machine: one the export does not
        # map is read as numbered like the machine, which may name a GPU it never ran on.
        mapped = {pid for pid, _, _ in tables.info.cuda_devices}
        if unmapped := sorted({pid for pid, _, _ in processes} - mapped):
            warnings.append(f"{f}: process{'es' if len(unmapped) > 1 else ''} {', '.join(map(str, unmapped))} ran GPU work on CUDA devices "
                            "that TARGET_INFO_CUDA_DEVICE does not map to the machine's GPUs, where it maps other processes' devices to "
                            "GPUs of other numbers (CUDA_VISIBLE_DEVICES): read as the machine's GPUs of the same numbers")
    all_pids = sorted(set(int64s(tables.gpu_ops["pid"]).tolist()) | set(int64s(tables.nvtx_ranges["pid"]).tolist())) if multi else []
    # Processes whose CUDA devices the export maps to the machine's GPUs are told apart by those.
    unmapped = frozenset(p for p, _, _ in processes) - {p for p, _, _ in tables.info.cuda_devices}
    # (asked only where the file is not split by process anyway, as by its devices)
    asked = multi and len(unmapped) > 1 and not splits_by_process(processes, named, False)
    talkers, peers = communicating_peers(tables.gpu_ops, unmapped) if asked else ((), frozenset())
    # A process whose GPU work all ran before the file's first phase (a scheduler's start-up)
    # ran no phase: numbered after the ranks that did, its phase ranges left out (below).
    marked = phase_ranges(tables.nvtx_ranges, config)
    start_up = start_up_only(linked, marked) if len(processes) > 1 else frozenset()
    cands = file_candidates(order, processes, named, name_number if multi else None, not multi, all_pids, ",".join(sorted(tables.info.gpu_uuids)),
                            name_number is not None and name_number <= MAX_RANK_IN_NAME, peers, start_up)
    cands, split = _split_by_loops(cands, processes, linked, marked, config, tables.api_calls, tables.sync_records, tables.event_records,
                                   tables.info.gpu_of)
    warnings.extend(f"{f}: {line}" for line in split)
    if start_up_ranks := sorted(p for c in cands if len(c.pids) == 1 and c.start_up_only for p in c.pids):
        many = len(start_up_ranks) > 1
        # (rank marks, where they number the ranks, number it too)
        after = "" if named else " numbered after those that ran the phases,"
        warnings.append(f"{f}: process{'es' if many else ''} {', '.join(map(str, start_up_ranks))} launched GPU work only before the first phase "
                        f"or cycle range began (start-up or warm-up: a scheduler or front end beside the workers): read as {'ranks' if many else 'a rank'}"
                        f"{after} with no phase")
    if talking := talkers_to_split(processes, named, not multi, peers):
        others = [p for p, _, _ in processes if p not in talking]
        with_first = f", the file's other GPU process{'es' if len(others) > 1 else ''} ({', '.join(map(str, others))}) with the first" if others else ""
        warnings.append(f"{f}: processes {', '.join(map(str, talking))} ran collectives with each other, all on what they call CUDA device "
                        f"{dict((p, d) for p, d, _ in processes)[talking[0]]}: read as a rank each{with_first} (workers given their GPUs by "
                        "CUDA_VISIBLE_DEVICES; the export does not map their devices to the machine's GPUs, as nsys 2025.3+ does in "
                        "TARGET_INFO_CUDA_DEVICE: each is said to run on that device's GPU)")
    elif not multi and len(unmapped) > 1 and len(cands) > 1 and len(pair := communicating_peers(tables.gpu_ops, unmapped)[1]) > 1 \
            and len(devices := {d for p, d, _ in processes if p in pair}) == 1:
        # (a whole process tree, a rank per process: where those that ran collectives with each
        # other all say one device, the GPU each is said to run on is not known)
        warnings.append(f"{f}: processes {', '.join(map(str, sorted(pair)))} ran collectives with each other, all on what they call CUDA device "
                        f"{devices.pop()}: a communicator holds one rank per GPU, so they ran on different GPUs (given them by "
                        "CUDA_VISIBLE_DEVICES), which this export does not map to the machine's GPUs (as nsys 2025.3+ does in "
                        "TARGET_INFO_CUDA_DEVICE): each is said to run on that device's GPU")
    elif len(talkers) > 1 and len(cands) == 1 and len(said := {d for p, d, _ in processes if p in talkers}) == 1:
        warnings.append(f"{f}: processes {', '.join(map(str, talkers))} ran communication kernels, all on what they call CUDA device "
                        f"{said.pop()}, but their collectives do not tell which of them are ranks of one communicator (separate "
                        "communicators on one GPU, or collectives too few or too close together): read as one rank (an export of nsys "
                        "2025.3+ maps each process's device to the machine's GPU)")
    if not cands:
        raise BadTraceError(f"{f}: empty trace: no GPU work and no NVTX ranges")
    if len(cands) == 1 and multi:  # as the run will most likely number it (``_numbered`` has the last word)
        rank = cands[0].name_rank
        numbers, hows = [rank if rank is not None else order], ["file name" if rank is not None else "file order"]
    else:
        numbers, hows, _ = number_ranks(cands, multi=False)
    # Phase or cycle ranges of a process that launched no GPU work are no rank's: left out, with
    # a warning (in a file read as one rank too, whose candidate holds every process of the file:
    # a launcher or scheduler marking its own cycles would renumber the rank's).
    gpu_pids = [p for p, _, _ in processes]
    rank_pids = gpu_pids if multi and len(cands) == 1 and gpu_pids else [p for c in cands for p in c.pids]
    # (and so are those of a process whose GPU work all ran before the phases: a rank of its own,
    # or one of a rank's processes where the file is one rank)
    left_out, left_out_phases = phase_processes_left_out(tables.nvtx_ranges, [p for p in rank_pids if p not in start_up], config)
    if left_out:
        warnings.append(phases_without_gpu_message(str(f), left_out, left_out_phases, [p for p in left_out if p in start_up]))
    out = []
    marks = tables.nvtx_marks.to_pydict()
    # tracerecon.instrument's stream marks (which stream each phase's thread had current)
    said = [i for i, name in enumerate(marks["name"]) if name == STREAM_MARK]
    stream_marks = tables.nvtx_marks.select(["pid", "tid", "ts_ns"]).take(pa.array(said, pa.int64()))
    mark_tids = int64s(tables.nvtx_marks["tid"], -1)
    for cand, rank, how in zip(cands, numbers, hows):
        pids = list(cand.pids)
        in_part = mark_rows(mark_tids, cand)
        in_part = in_part.tolist() if in_part is not None else [True] * len(mark_tids)
        accepted = tuple((pl, ts, n) for pid, mine, name, pl, ts in zip(marks["pid"], in_part, marks["name"], marks["payload"], marks["ts_ns"])
                         if pid in pids and mine and (n := accepted_of_mark(name)) is not None)
        api_calls = _thread_part(select_pids(tables.api_calls, pids), cand)
        rt = RankTables(
            nvtx_ranges=_thread_part(select_pids(tables.nvtx_ranges, [p for p in pids if p not in left_out]), cand),
            gpu_ops=_thread_part(select_pids(linked, pids), cand, "launch_tid"), api_calls=api_calls,
            sync_records=_calls_part(select_pids(tables.sync_records, pids), cand, api_calls),
            event_records=_calls_part(select_pids(tables.event_records, pids), cand, api_calls),
            accepted_marks=accepted, stream_marks=_thread_part(select_pids(stream_marks, pids), cand),
            unrun_from_ns=_unrun_from(unrun, linked, pids),
            cuda_devices=tuple(m for m in tables.info.cuda_devices if m[0] in pids and m[1] != m[2]),
            cuda_streams=select_pids(tables.cuda_streams, pids),
        )
        out.append((RankSource(rank, str(f), tuple(pids), how, cand, cand.loop_tids[0] if cand.loop_tids else None), tables.info, own_rank(rt, rank, config)))
    session = (*_session_span(tables.info, tables.trace_end_ns), tables.info.nsys_version)
    return out, warnings, session


def _split_by_loops(cands: list, processes: list[tuple[int, int, bool]], linked, marked, config, api_calls, sync_records, event_records,
                    gpu_of=None) -> tuple[list, list[str]]:
    """Each candidate of one GPU process that runs a loop per GPU on threads of its own, as one
    candidate per GPU (``ranks.loops_per_gpu``; ``marked``: the file's phase and cycle ranges,
    ``phase_ranges``); the others as they are. And a line per process so split, or kept whole
    for waiting on another GPU's thread (``ranks.parts_wait_for_nothing_of_each_other``)."""
    import numpy as np

    from tracerecon.analysis.projection import int64s
    from tracerecon.analysis.ranks import loops_per_gpu, parts_wait_for_nothing_of_each_other, split_by_loops

    gpu_pids = {p for p, _, k in processes if k}
    singles = [c for c in cands if len([p for p in c.pids if p in gpu_pids]) == 1]
    if not singles or linked.num_rows == 0 or "launch_tid" not in linked.column_names or marked.num_rows == 0:
        return cands, []
    r_pid, r_tid = int64s(marked["pid"]), int64s(marked["tid"], -1)
    if len(np.unique(r_pid * (1 << 32) + r_tid)) == len(np.unique(r_pid)):
        return cands, []  # (one thread a process holds them all: the common case)
    names = marked["name"].to_pylist()
    domains = marked["domain"].to_pylist() if "domain" in marked.column_names else [""] * len(names)
    label_of = {pair: config.label_of(pair[0], pair[1] or "") for pair in set(zip(names, domains))}
    labels = [label_of[pair] for pair in zip(names, domains)]
    r_cycle = np.array([lab is None for lab in labels], bool)
    o_pid, o_tid, o_dev = int64s(linked["pid"]), int64s(linked["launch_tid"], -1), int64s(linked["device_id"], -1)
    out, lines = [], []
    for c in cands:
        if c in singles:
            (pid,) = [p for p in c.pids if p in gpu_pids]
            loops = loops_per_gpu(r_pid, r_tid, labels, r_cycle, o_pid, o_tid, o_dev, pid)
            if loops and not parts_wait_for_nothing_of_each_other(pid, loops, api_calls, sync_records, event_records):
                lines.append(f"process {pid} runs a loop of its own on a thread per GPU, but a thread of one waits for an event another's "
                             "recorded, or a record names no call: read as one rank")
                loops = ()
            out.extend(split_by_loops(c, loops, gpu_of))
            if loops:
                lines.append(f"process {pid} runs a loop of its own on a thread per GPU: read as a rank per GPU ("
                             + "; ".join(f"GPU {gpu_of(pid, d) if gpu_of is not None else d}: thread{'s' if len(ts) > 1 else ''} {', '.join(map(str, ts))}"
                                         for d, ts in loops)
                             + "; the first also with the threads that launched nothing), numbered by GPU")
        else:
            out.append(c)
    return out, lines


def _thread_part(table, cand, tid_column: str = "tid"):
    """The rows of ``table`` (one process's) in ``cand``'s part of it (``ranks.thread_rows``; GPU
    ops by their launching thread, ``tid_column``, and device)."""
    import pyarrow as pa

    from tracerecon.analysis.projection import int64s
    from tracerecon.analysis.ranks import thread_rows

    if table.num_rows == 0 or (not cand.tids and not cand.not_tids):
        return table
    device = int64s(table["device_id"], -1) if tid_column == "launch_tid" else None
    return table.filter(pa.array(thread_rows(int64s(table[tid_column], -1), cand, device)))


def _calls_part(table, cand, api_calls):
    """The rows of ``table`` (sync or event records) whose call is among ``api_calls`` (those of
    ``cand``'s part of its process)."""
    import pyarrow.compute as pc

    if table.num_rows == 0 or (not cand.tids and not cand.not_tids):
        return table
    return table.filter(pc.fill_null(pc.is_in(table["correlation_id"], value_set=api_calls["correlation_id"]), False))


def _numbered(work: list[tuple], multi: bool) -> tuple[list[tuple], list[str]]:
    """Every file's ranks (``_analyse_file``'s (source, info, work)) with their numbers
    (``number_ranks`` over all of them), sorted by rank; the numbering's warnings, then each
    rank's notes."""
    from tracerecon.analysis.rank import with_rank
    from tracerecon.analysis.ranks import number_ranks

    if any(s.candidate is None for s, _, _ in work):  # a cache entry of an earlier tracerecon: as it was numbered
        ranks, hows, warnings = [s.rank for s, _, _ in work], [s.how for s, _, _ in work], []
    else:
        ranks, hows, warnings = number_ranks([s.candidate for s, _, _ in work], multi)
    out = []
    for (s, info, w), rank, how in zip(work, ranks, hows):
        out.append((replace(s, rank=rank, how=how), info, w if w.rank == rank else with_rank(w, rank)))
    out.sort(key=lambda x: x[0].rank)
    warnings.extend(_sharing_a_gpu(out))
    per_file = {}
    for s, _, _ in out:
        per_file[s.path] = per_file.get(s.path, 0) + 1
    for s, _, w in out:
        warnings.extend(f"{s.path}{f' (rank {s.rank})' if per_file[s.path] > 1 else ''}: {note}" for note in w.notes)
    return out, warnings


def _gpu_key(source, info, kernels_only: bool = True) -> tuple | None:
    """Which of the machine's GPUs a rank (``source``, of the file ``info`` describes) ran its
    work on, as ranks that share one are told (``_sharing_a_gpu``): ("uuid", UUID, PCI bus
    location) where the export names it, (file, device) where only the file's device number
    does, None where unknown (before nsys 2025.3, processes given their GPUs by
    CUDA_VISIBLE_DEVICES all say device 0) or where the rank ran no kernel (``kernels_only``:
    copies take no turns), or none after its start-up (a process whose GPU work all ran before
    the phases took no turns with anyone's)."""
    c = source.candidate
    known = c is not None and (c.ran_kernels or not kernels_only) and not c.start_up_only and (
        len(info.gpus) == 1 == len(info.gpu_uuids) or any(p in c.pids and gpu == c.device for p, _, gpu in info.cuda_devices))
    if not known:
        return None
    # (an id listed with two UUIDs, virtual machines of one host, names no one GPU; its PCI
    # bus location too, where the export records it: a placeholder UUID of two hosts)
    named = {(g.uuid, g.bus_location) for g in info.gpus if g.device == c.device}
    gpu = next(iter(named)) if len(named) == 1 else (None, None)
    return ("uuid", *gpu) if gpu[0] is not None else (source.path, c.device)


def _sharing_a_gpu(ranks: list[tuple]) -> list[str]:
    """A line per GPU that several ranks (``_numbered``'s, of one file or several) ran on: two
    servers on one GPU (a draft model's beside the target's, two workers given one GPU), whose
    kernels take turns on it. A rank's GPU is known where the export maps each process's CUDA
    device to the machine's GPU (TARGET_INFO_CUDA_DEVICE, nsys 2025.3+) or the machine has one
    GPU: before 2025.3, processes given their GPUs by CUDA_VISIBLE_DEVICES all say device 0.
    Ranks of several files share one where the GPU's UUID and PCI bus location are the same
    (exports list them: TARGET_INFO_GPU); without a UUID, only ranks of one file are told."""
    from tracerecon.analysis.ranks import ranks_sharing_a_gpu

    keys = [(s.rank, _gpu_key(s, info)) for s, info, _ in ranks]
    lines = []
    for shared, _ in ranks_sharing_a_gpu(keys):
        s, info, _ = next(r for r in ranks if r[0].rank == shared[0])
        named = next((g for g in info.gpus if g.device == s.candidate.device), None)
        what = f"GPU {s.candidate.device}" + (f", {named.name}" if named is not None and named.name else "") + (f" {named.bus_location}" if named is not None and named.bus_location else "")
        lines.append(f"ranks {', '.join(map(str, shared))} ran their work on one GPU ({what}): their kernels take turns on it, so each one's "
                     "GPU times hold time the GPU gave the others' work, and the across-ranks section sets side by side work that "
                     "competed for the GPU rather than waited at collectives")
    return lines


# A worker's peak memory for an export of S bytes (its SQLite file; an .xz one's taken as
# XZ_RATIO times its size): the interpreter and libraries, and the tables read and analysed.
# Measured: the 76 MB trace's worker 0.40 GB (H200 host, 2026-12-03), a 1 GiB export's
# 2.65-2.85 GB (earlier passes; benchmarks/README.md).
WORKER_BASE_BYTES = 150 << 20
WORKER_BYTES_PER_EXPORT_BYTE = 3.5
XZ_RATIO = 8  # nsys exports shrink 5-8x under xz


def worker_peak_bytes(f: Path) -> int:
    """What one worker process analysing the export ``f`` may take at its peak (an estimate on
    the large side: the workers are bounded by it so that they fit in memory together)."""
    try:
        size = f.stat().st_size
    except OSError:
        size = 0
    if f.name.endswith(".xz"):
        size *= XZ_RATIO
    return int(WORKER_BASE_BYTES + WORKER_BYTES_PER_EXPORT_BYTE * size)


def workers_that_fit(n_files: int, cores: int, available: int | None, peak_each: int) -> int:
    """Worker processes for ``n_files``: one per file, at most one per core, and no more than
    fit in ``available`` bytes at ``peak_each`` (None: unknown, not bounded); at least one."""
    n = min(n_files, cores)
    if available is not None and peak_each > 0:
        n = min(n, available // peak_each)
    return max(1, n)


def default_jobs(files: Sequence[Path], say: Progress | None = None) -> int:
    """Worker processes for ``files`` (``workers_that_fit`` with this process's cores and
    available memory); ``say`` is told when memory, not the cores, sets the number."""
    from tracerecon.cores import available_memory_bytes, usable_cores

    cores, available = usable_cores(), available_memory_bytes()
    peak = max((worker_peak_bytes(Path(f)) for f in files), default=0)
    n = workers_that_fit(len(files), cores, available, peak)
    if say is not None and n < min(len(files), cores):
        say(f"{n} of {len(files)} exports at a time: about {peak / 2**30:.1f} GB each, {available / 2**30:.1f} GB of memory available")
    return n


# Where each export of a multi-process load stands (``_file_work_here``): a byte per export in
# memory shared with the workers, which write their exports' stages; the parent reads them for
# its progress line.
WAITING, READING, ANALYSING, DONE = 0, 1, 2, 3
_STAGE_WORDS = {WAITING: "waiting", READING: "reading", ANALYSING: "analysing", DONE: "done"}
_BOARD = None  # in a worker process: the load's board (``_start_worker``)
_READERS = None  # in a worker process: the pid of the worker that took each export
# Up to this many exports the progress line names each one's stage; more, it counts them.
BOARD_LINES_MAX = 8


def _start_worker(threads: int, board, readers, scratch_prefix: str) -> None:
    """A worker process's start: ``prepare_worker``'s settings, the load's board and its
    readers (which worker took each export: the parent names the export of one that died),
    and its names for decompressed copies (``nsys.scratch``: the parent removes those of a
    worker it stopped)."""
    from tracerecon.nsys import scratch
    from tracerecon.own_process import prepare_worker

    global _BOARD, _READERS
    prepare_worker(threads)
    _BOARD, _READERS = board, readers
    scratch.use_prefix(scratch_prefix)


def _mark(order: int, stage: int) -> None:
    """In a worker process, export ``order`` is at ``stage`` (a no-op outside one)."""
    if _BOARD is not None and 0 <= order < len(_BOARD):
        _BOARD[order] = stage
        if stage == READING and _READERS is not None:
            _READERS[order] = os.getpid()


def _died_reading(processes: dict, readers, taken: dict) -> list[tuple[int, str]]:
    """(export, how its worker ended) for each export not ``taken`` whose worker process (of
    ``processes``, pid: ``multiprocessing.Process``, ended) ended on its own: by a signal other
    than the SIGTERM the pool sends the others when one dies (SIGKILL: the system's
    out-of-memory killer; SIGSEGV: a crash), or with an exit status."""
    import signal

    out = []
    for pid, proc in processes.items():
        code = proc.exitcode
        if code is None or code in (0, -signal.SIGTERM):
            continue
        try:
            how = signal.Signals(-code).name if code < 0 else f"exit status {code}"
        except ValueError:
            how = f"signal {-code}"
        out += [(i, how) for i in range(len(readers)) if readers[i] == pid and i not in taken]
    return sorted(out)


def board_line(names: Sequence[str], stages: Sequence[int], workers: int) -> str:
    """The progress line of a multi-process load: each export's stage (up to BOARD_LINES_MAX
    exports, one line each), else how many are at each stage."""
    head = f"{sum(s == DONE for s in stages)}/{len(names)} exports done, {workers} processes"
    if len(names) <= BOARD_LINES_MAX:
        return "\n".join([head] + [f"  {name}: {_STAGE_WORDS[s]}" for name, s in zip(names, stages)])
    counts = [f"{sum(s == k for s in stages)} {_STAGE_WORDS[k]}" for k in (READING, ANALYSING, WAITING) if any(s == k for s in stages)]
    return head + (": " + ", ".join(counts) if counts else "")


def _file_work_here(args: list[tuple], jobs: int, say: Progress, notices: list[str]) -> list[tuple]:
    """``_file_work`` for every file, in ``jobs`` worker processes of this machine. Where a
    worker process ends abruptly (a crash, or killed by the system for memory), every export
    not yet done is read again, one at a time, each in a new process of its own, and
    ``notices`` is told; an export whose own process ends abruptly too is an error naming it."""
    if len(args) == 1:  # the whole run's cache entry covers it: no second entry
        say(f"reading {one_line(args[0][0].name)}")
        return [_file_work_uncached(*args[0])]
    if jobs == 1:
        results = []
        for a in args:
            say(f"reading {one_line(a[0].name)}")
            results.append(_file_work(*a))
        return results
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool
    from multiprocessing.sharedctypes import RawArray

    from tracerecon import handoff
    from tracerecon.cores import usable_cores
    from tracerecon.interrupts import ctrl_c_held, signalled, stop_worker_processes, undone_at_exit_now
    from tracerecon.nsys import scratch

    workers = min(jobs, len(args))
    say(f"reading {len(args)} exports in {workers} processes")
    # The ADBC driver imported once here (the cache module already is): forked workers start with
    # it. Numpy, pyarrow and the analysis are not: each worker imports them while its reads run
    # (``_read_tables``), and this process while the workers work.
    from tracerecon.nsys import native_read

    native_read.available()
    _quiet_before_fork()
    # Each process reads with its share of the cores (8 processes x 8 reader threads on 16
    # cores made 8 ranks 2.3x slower than one).
    threads = max(1, usable_cores() // workers)
    results: dict[int, tuple] = {}
    owner = handoff.new_owner()
    handoff.discard_orphans()
    handoff.allow_open_files(len(args))
    board, readers = RawArray("b", len(args)), RawArray("q", len(args))
    names = [one_line(a[0].name) for a in args]  # (a file name's control characters as escapes)
    scratch_prefix = scratch.load_prefix(owner)
    pools = [ProcessPoolExecutor(max_workers=workers, initializer=_start_worker, initargs=(threads, board, readers, scratch_prefix))]

    def stop_all() -> None:  # the program ending at once on another thread (``view`` quit while this loads)
        for pool in pools:
            stop_worker_processes(pool)
        scratch.remove(scratch_prefix)

    all_in = False
    try:
        with undone_at_exit_now(stop_all):
            with ctrl_c_held():  # the workers start (fork) at the first submit
                futures = {pools[0].submit(_file_work_handed_off, owner, *a): i for i, a in enumerate(args)}
            reading_started()
            _import_analysis()  # while the workers work (forked ones all start at the first submit)
            pending, shown, broken = set(futures), None, False
            while pending and not broken:
                if (interrupt := signalled()) is not None:  # one swallowed where it landed (an import's callback)
                    raise interrupt
                done, pending = wait(pending, timeout=0.25, return_when=FIRST_COMPLETED)
                for fut in done:
                    # Taken as each arrives: the first failure stops the load, but for a worker
                    # process that ended abruptly (below).
                    if isinstance(fut.exception(), BrokenProcessPool):
                        broken = True
                        continue
                    results[futures[fut]] = handoff.take(fut.result())
                    board[futures[fut]] = DONE
                line = board_line(names, list(board), workers)
                if line != shown:
                    say(line)
                    shown = line
            if broken:
                # The pool's other workers are stopped by the pool itself; once it is shut,
                # every future is settled: those done before the break are taken, and every
                # other handoff file (a result no future brought back) removed at once.
                # (the pool's processes, read before ``shutdown`` forgets them: Python's own
                # ``_processes``, private; without it the exports under way are named)
                processes = dict(getattr(pools[0], "_processes", None) or {})
                pools[0].shutdown(wait=True)
                for fut, i in futures.items():
                    if i not in results and not fut.cancelled() and fut.exception() is None:
                        results[i] = handoff.take(fut.result())
                        board[i] = DONE
                handoff.discard_leftovers(owner)
                scratch.remove(scratch_prefix)  # (the dead worker's decompressed copy)
                died = _died_reading(processes, readers, results)
                left = [i for i in range(len(args)) if i not in results]
                under_way = [names[i] for i in left if board[i] in (READING, ANALYSING)]
                what = ("; ".join(f"{names[i]} (its process ended by {how})" for i, how in died)
                        or f"one of {', '.join(under_way)}" if died or under_way else "an export")
                notices.append(f"a worker process ended abruptly (a crash, or killed by the system for memory) while reading {what}: "
                               f"the {len(left)} export{'s' if len(left) != 1 else ''} not yet done {'were' if len(left) != 1 else 'was'} "
                               "read again, one at a time, each in a process of its own")
                for i in left:
                    say(f"reading {names[i]} again, alone")
                    _quiet_before_fork()
                    pools.append(ProcessPoolExecutor(max_workers=1, initializer=_start_worker, initargs=(usable_cores(), board, readers, scratch_prefix)))
                    with ctrl_c_held():  # (its worker starts, forked, at the submit)
                        alone = pools[-1].submit(_file_work_handed_off, owner, *args[i])
                    while not wait([alone], timeout=0.25).done:
                        if (interrupt := signalled()) is not None:
                            raise interrupt
                    if isinstance(alone.exception(), BrokenProcessPool):
                        raise TraceReconError(f"{names[i]}: the process reading it alone ended abruptly too (a crash, or killed by the system for memory); "
                                              "--jobs 1 reads it in tracerecon's own process", exit_code=EXIT_INTERNAL)
                    results[i] = handoff.take(alone.result())
                    board[i] = DONE
                    pools[-1].shutdown(wait=True)
            all_in = True
    except KeyboardInterrupt:
        # Ctrl-C (or SIGTERM): the workers under way are stopped (their reads would run to
        # their ends), and the decompressed copies of those stopped mid-file removed.
        stop_all()
        raise
    finally:
        if all_in:
            # Only the workers' exits are left (0.03-0.05 s): waited for on a thread of its own
            # while the cross-rank step runs (the interpreter joins it before it exits).
            # ``shutdown(wait=False)`` instead can close the pool's pipes under its manager
            # thread (Python 3.11: "OSError: handle is closed" on stderr at exit).
            closing = threading.Thread(target=pools[-1].shutdown, name="tracerecon-pool-close")
            closing.start()
            with _CLOSING_LOCK:
                _CLOSING.append(closing)
        else:
            # The exports not started are cancelled and those under way waited for.
            for pool in pools:
                pool.shutdown(wait=True, cancel_futures=True)
            scratch.remove(scratch_prefix)  # (a worker that died mid-file)
        handoff.discard_leftovers(owner)  # results of workers that finished after a failure
    return [results[i] for i in range(len(args))]


# Threads waiting for earlier pools' workers to exit (loads may run on several threads at once).
_CLOSING: list = []
_CLOSING_LOCK = threading.Lock()


def wait_pools_closed() -> None:
    """Return once the worker pools of earlier loads are closed (their workers exited). Called
    before the process exits: Python 3.11 wakes every pool's manager thread at exit without a
    lock, and one closing its pipe meanwhile made that "OSError: [Errno 9] Bad file descriptor"
    in a traceback after the error line (an error raised just after the workers were done)."""
    with _CLOSING_LOCK:
        closing = _CLOSING[:]
        _CLOSING.clear()
    for thread in closing:
        thread.join()


def _quiet_before_fork() -> None:
    """Wait for what may still run on another thread of this process before workers fork: an
    import (``import_ahead``), a read (``native_read``; a dropped read runs to its end), the
    freeing of an earlier analysis (``memory.free_in_background``) and the exits of an earlier
    load's workers. A forked child gets none of those threads, but whatever lock one held; it
    gets this process's temporary directory, settled first."""
    import tempfile

    from tracerecon.memory import wait_freed
    from tracerecon.nsys import native_read

    # The temporary directory, settled here: Python finds it by writing and removing a probe
    # file (an 8-letter name), which a worker stopped at that moment left behind; forked
    # workers inherit the answer and write no probe.
    tempfile.gettempdir()
    join_all()
    native_read.wait_idle()
    wait_freed()
    wait_pools_closed()


def _import_analysis() -> None:
    import importlib

    for name in ANALYSIS_MODULES:
        importlib.import_module(name)


def _file_work_handed_off(owner: str, *args):
    """``_file_work`` in a worker process, its result handed to ``owner`` through shared
    memory (see ``tracerecon.handoff``) rather than pickled through the pool's pipe."""
    from tracerecon import handoff

    order = args[4]
    _mark(order, READING)
    handed = handoff.put(_file_work(*args), owner)
    # A worker that is done waits for the others: what its malloc keeps free for reuse
    # (tracerecon.memory) goes back to the system meanwhile (about 90 MB per rank of 76 MB).
    release_free_memory()
    return handed


def _file_work_on_dask(scheduler: str, args: list[tuple], say: Progress) -> list[tuple]:
    """``_file_work`` for every file on a Dask distributed cluster (``scheduler``: its address,
    or the path of a scheduler file). The workers read the exports by their absolute paths
    (shared storage) with their own cache; the cross-rank step then runs here, as nsys's
    multi-report recipes do."""
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise UsageError(f"--dask needs Dask distributed: {install_hint('dask')}") from None
    from tracerecon.cache import enabled

    as_file = Path(scheduler).is_file()
    # An address is PROTOCOL://HOST:PORT or HOST:PORT; anything else names a scheduler file.
    if not as_file and "://" not in scheduler and not re.fullmatch(r"[\w.\-\[\]:]+:\d+", scheduler):
        raise UsageError(f"--dask {scheduler}: no such scheduler file, and no scheduler address (tcp://HOST:PORT)")
    if as_file:  # (distributed said only "AssertionError" of a file that is none)
        from tracerecon.run_dir import read_json_file

        try:
            doc = read_json_file(Path(scheduler))
        except (OSError, ValueError):
            doc = None
        if not (isinstance(doc, dict) and isinstance(doc.get("address"), str)):
            raise UsageError(f"--dask {scheduler}: not a Dask scheduler file (a JSON object with the scheduler's 'address', as `dask scheduler --scheduler-file` writes)")
    address = doc["address"] if as_file else scheduler
    if _refused(address):  # said at once: distributed retried a refused address for its whole 20 s
        what = "the scheduler file names no scheduler that answers" if as_file else "cannot reach the scheduler"
        raise TraceReconError(f"--dask {scheduler}: {what} (connection refused: nothing listens there)")
    try:
        client = Client(scheduler_file=scheduler, timeout="20s") if as_file else Client(scheduler, timeout="20s")
    except Exception as exc:  # unreachable, refused, a scheduler file without an address, ...
        what = "the scheduler file names no scheduler that answers" if as_file else "cannot reach the scheduler"
        raise TraceReconError(f"--dask {scheduler}: {what} ({_why_no_scheduler(exc)})") from None
    try:
        say(f"reading {len(args)} exports on the Dask cluster at {scheduler}")
        futures = [client.submit(_file_work_remote, Path(f).resolve(), str(f), enabled(), *rest, pure=False) for f, *rest in args]
        reading_started()
        index = {fut.key: i for i, fut in enumerate(futures)}
        for n, fut in enumerate(as_completed(futures), 1):
            name = args[index[fut.key]][0]
            if fut.status != "finished":
                _raise_remote(fut, name, scheduler)
            say(f"{n}/{len(args)} exports done ({one_line(name.name)})")
        return [fut.result() for fut in futures]
    finally:
        client.close()


def _refused(address: str) -> bool:
    """Whether a TCP scheduler address (``tcp://HOST:PORT`` or ``HOST:PORT``) refuses a
    connection outright; anything else (another protocol, no answer in 2 s, a name that does
    not resolve) is left to distributed, which says it in its own time."""
    import socket

    m = re.fullmatch(r"(?:tcp://)?\[?([^\[\]/]+?)\]?:(\d+)/?", address)
    if m is None:
        return False
    try:
        socket.create_connection((m.group(1), int(m.group(2))), timeout=2).close()
    except ConnectionRefusedError:
        return True
    except (OSError, ValueError, OverflowError):
        return False
    return False


def _why_no_scheduler(exc: BaseException) -> str:
    """Why ``Client`` found no scheduler, in the user's words where distributed's are about its
    own insides (a program there that is no Dask scheduler answers with bytes distributed reads
    as a message length: "Unable to allocate 3.07 EiB", or it closes the stream)."""
    text = f"{type(exc).__name__}: {exc}"
    chain, seen = [], exc
    while seen is not None and len(chain) < 16:  # (distributed's retries chain their causes)
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    # A refusal first: its chain holds a CommClosedError too (a stream closed on connecting).
    if any(isinstance(e, ConnectionRefusedError) or "Connection refused" in str(e) for e in chain):
        return "connection refused: nothing listens there"
    if any(isinstance(e, MemoryError) or type(e).__name__ in ("CommClosedError", "ProtocolError", "ExtraData", "UnpackValueError") for e in chain):
        return f"the address answered, but not as a Dask scheduler: {text[:120]}"
    if isinstance(exc, (OSError, TimeoutError)) and "Timed out" in text:
        return "no answer within 20 s"
    return text


def _raise_remote(fut, name: Path, scheduler: str) -> None:
    """A worker's failure as this library's error: a TraceReconError as it was raised (it names
    the file), anything else (a lost worker, tracerecon missing there) as one naming file and cluster."""
    try:
        fut.result()
    except TraceReconError:
        raise
    except BaseException as exc:
        raise TraceReconError(f"{name}: failed on the Dask cluster at {scheduler} ({type(exc).__name__}: {exc})") from None
    raise TraceReconError(f"{name}: {fut.status} on the Dask cluster at {scheduler}")


def analyze(paths: Sequence[str | os.PathLike], config: PhaseConfig, say: Progress, jobs: int | None = None, scheduler: str | None = None) -> Analysis:
    """``api.load`` for exports (not a parquet export directory)."""
    from tracerecon.cache import cached

    files = expand_inputs(paths)
    # The whole run is cached too (keyed by every file): a warm report skips the cross-rank
    # step and the phase tables, not only the reading. The paths as given are part of the key
    # (they are shown); engine timers (run.json) are read fresh.
    # What happened to this load only (a worker process that died) is said, never cached.
    notices: list[str] = []
    ran: list[bool] = []

    def analysed() -> Analysis:
        ran.append(True)
        return _analyze_files(files, config, say, jobs, scheduler, notices)

    analysis = cached(files, ("run", config, tuple(map(str, files))), analysed, _is_analysis)
    if scheduler is not None and not ran:
        notices.append(scheduler_not_used(scheduler))
    timers = read_engine_timers(paths, config.label_of)
    return replace(analysis, engine_timers=timers.medians, warnings=tuple(folder_warnings(paths)) + timers.warnings + tuple(notices) + analysis.warnings,
                   load_notices=tuple(notices))


def scheduler_not_used(scheduler: str) -> str:
    """What a load with ``--dask`` says where the cache answered: the cluster was not asked
    (an address that reaches no scheduler would otherwise pass unnoticed)."""
    return f"--dask {scheduler}: not contacted: the cache held the result (--no-cache runs it on the cluster)"


def _analyze_files(files: list[Path], config: PhaseConfig, say: Progress, jobs: int | None, scheduler: str | None, notices: list[str]) -> Analysis:
    multi = len(files) > 1
    args = [(f, config, multi, number_in_filename(trace_stem(f)) if multi else None, i) for i, f in enumerate(files)]
    if scheduler is not None:
        results = _file_work_on_dask(scheduler, args, say)
    else:
        results = _file_work_here(args, default_jobs(files, say) if jobs is None else max(1, jobs), say, notices)
    try:
        return _analyze_results(files, config, say, results)
    except BaseException:
        # The process may exit at once (the CLI prints the error and ends): not while the
        # workers' pool is still closing (``wait_pools_closed``).
        wait_pools_closed()
        raise


def _peers_missing(source, cross, gpu_ops) -> list[str]:
    """A warning where the one rank read ran communication kernels on one GPU: its collectives'
    partners' traces are not in the input, so the time they waited for other ranks cannot be
    told from their own (no phase's cause is comm_wait, its wait reads 0), naming the other
    exports beside its file (the run's other ranks, where it came from a run or rank files).
    Not where they ran on several GPUs: one process driving them is its own partners (said
    apart, as one rank)."""
    from tracerecon.analysis.nccl import comm_mask
    from tracerecon.analysis.projection import int64s

    comm = cross.comm_of(source.rank)
    if comm is None or comm.n_collectives == 0:
        return []
    if len(set(int64s(gpu_ops["device_id"], -1)[comm_mask(gpu_ops)].tolist())) > 1:
        return []
    others = other_exports_beside(Path(source.path))
    beside = (f"; {Path(source.path).parent} holds {len(others)} other export{'s' if len(others) > 1 else ''} "
              f"({', '.join(g.name for g in others[:3])}{', ...' if len(others) > 3 else ''})") if others else ""
    n = comm.n_collectives
    return [f"{source.path}: its {n} communication kernel{'s' if n > 1 else ''} ran with other ranks whose traces are not in the input: how long "
            f"{'they' if n > 1 else 'it'} waited for those ranks is not told from {'their' if n > 1 else 'its'} own transfer time (its wait ms reads 0, "
            f"no phase's cause is comm_wait): give every rank's trace of the run together{beside}"]


def _ranks_missing(sources, cross) -> list[str]:
    """A warning where every rank's number was told by its file's name or its own rank mark,
    numbers between the lowest and the highest are missing (no more of them than ranks read:
    ``iter_100``, ``iter_200`` number no ranks), and the ranks read ran collectives: the missing
    ranks' traces are not in the input (an export failed, a file was left out), so where the
    ranks read ran collectives with them, a collective's last arrival is the last of those read:
    time waited for the missing ranks reads as none and a straggler among them is named nowhere.
    Not below the lowest: names may count from 1 (``trace_1``), or from the first GPU a run was
    given (``gpu_4`` .. ``gpu_7``). Ranks numbered by file order or by their processes have no
    gaps to tell."""
    if any(s.how not in ("file name", "nvtx mark") for s in sources):
        return []
    if not any((c := cross.comm_of(s.rank)) is not None and c.n_collectives for s in sources):
        return []
    have = {s.rank for s in sources}
    missing = sorted(set(range(min(have), max(have) + 1)) - have)
    if not missing or len(missing) > len(have):
        return []
    spans, first = [], missing[0]
    for a, b in zip(missing, missing[1:] + [None]):
        if b != a + 1:
            spans.append(str(first) if first == a else f"{first}-{a}")
            first = b
    told = " and ".join(sorted({"their files' names" if s.how == "file name" else "their rank marks" for s in sources}))
    them = "them" if len(missing) > 1 else "it"
    return [f"rank{'s' if len(missing) > 1 else ''} {', '.join(spans)} not in the input (ranks {', '.join(map(str, sorted(have)))} read, "
            f"numbered by {told}): where the ranks read ran collectives with {them}, a collective's last arrival is the last of the ranks "
            f"read, so time waited for {them} reads as none and a straggler there is not named; give every rank's trace of the run together"]


def _work_beside_phases(bare_source, bare_info, bare, work: list) -> list[str]:
    """Where a rank with no phase range (``bare``) ran on the same GPU (``_gpu_key``, known) as
    a rank of the same file that has phases, and within those phases' span ran over
    ``SLIVER_TIMES`` the GPU time that rank did: the phases were likely marked in a process
    other than the one that launches their work (a scheduler that makes a small copy a cycle
    beside its worker; with no GPU work at all, its phases are left out,
    ``PHASES_WITHOUT_GPU``). A phase is read in its own process, by its own stream: said,
    naming both. Two servers on one GPU, both working, are said by ``_sharing_a_gpu`` only."""
    import pyarrow as pa

    from tracerecon.analysis.ranks import gpu_time_beside_phases
    from tracerecon.present import processes_text

    gpu = _gpu_key(bare_source, bare_info, kernels_only=False)
    out = []
    for s, info, w in work:
        rows = w.phase_inputs.phase_rows
        if gpu is None or s.path != bare_source.path or len(rows) == 0 or _gpu_key(s, info, kernels_only=False) != gpu:
            continue
        own, other = gpu_time_beside_phases(w.gpu_ops, w.phase_inputs.ranges.take(pa.array(rows)), bare.gpu_ops)
        if other > SLIVER_TIMES * own:
            out.append(f"rank {bare_source.rank} ({processes_text(bare_source.pids, bare_source.tid)}), which has no phase range, ran "
                       f"{other / 1e6:.3f} ms of GPU work on the GPU it shares with rank {s.rank} ({processes_text(s.pids, s.tid)}) during rank "
                       f"{s.rank}'s phases, which launched {own / 1e6:.3f} ms there themselves: a phase is read in the process that "
                       f"launches its GPU work, so rank {s.rank}'s phases time only their own; if rank {bare_source.rank}'s work is theirs, mark "
                       "the phases there (tracerecon.instrument in the worker process)")
    return out


# A rank's phases' own GPU time this many times over, run by a phaseless rank on its GPU meanwhile,
# is what a scheduler's phases beside its worker look like (4 us against 2,480 us in a review's
# shape); two servers both working on one GPU (1.00 against 1.06 ms) are not that.
SLIVER_TIMES = 10


def _counted_cycles(cycles, offset: int) -> tuple[list[int], list[int]]:
    """A rank's cycles that are neither warm-up nor incomplete: their CPU starts on the first
    rank's timeline (``offset`` added) and their CPU lengths, ns."""
    rows = [(s + offset, n) for s, n, w, i in zip(cycles["cpu_start_ns"].to_pylist(), cycles["cpu_ns"].to_pylist(),
                                                  cycles["warmup"].to_pylist(), cycles["incomplete"].to_pylist())
            if s is not None and n is not None and not w and not i]
    return [s for s, _ in rows], [n for _, n in rows]


# Ranks with fewer counted cycles than this tell nothing of their steps' lengths.
UNLIKE_CYCLES_MIN = 3


def _unlike_cycle_counts(counts: list[tuple[int, list[int], list[int]]]) -> list[str]:
    """Where cycles were found from the phases (no cycle range) and the ranks found unlike
    ones: (rank, counted cycles' starts on the first rank's timeline, their CPU lengths) each,
    ``UNLIKE_CYCLES_MIN`` cycles or more; two ranks whose median cycle lengths are 1.5x apart
    or more and whose counts of cycles begun in the stretch both cover are 1.5x apart too, 4
    cycles at least: their cycles are not the same steps (a public 2-GPU trace: 79 of 1.6 ms on
    one rank, 33 of 8.3 ms on the other over the stretch both cover, the first cut at leading
    copies the second does not run), so the cross-rank step, which takes the k-th cycle of each rank
    as one step where collectives do not say otherwise, compares unlike ones. Steps of one
    length on every rank (a capture begun later, a pause), or of unlike lengths as many times
    over the same stretch (a data-parallel rank's larger batch, a pipeline stage's shorter
    work), are the same steps: nothing said."""
    import numpy as np

    timed = [(r, np.asarray(st, np.int64), int(np.median(n))) for r, st, n in counts if len(n) >= UNLIKE_CYCLES_MIN]
    for i, (ra, sa, la) in enumerate(timed):
        for rb, sb, lb in timed[i + 1:]:
            lo, hi = max(sa.min(), sb.min()), min(sa.max(), sb.max())
            na, nb = int(((sa >= lo) & (sa <= hi)).sum()), int(((sb >= lo) & (sb <= hi)).sum())
            if max(la, lb) >= 1.5 * min(la, lb) and max(na, nb) >= 1.5 * min(na, nb) and abs(na - nb) >= 4:
                return [f"the ranks found unlike cycles from their phases (no cycle range): rank {ra} {na} of {la / 1e6:.3f} ms, rank {rb} {nb} of "
                        f"{lb / 1e6:.3f} ms (median CPU) over the stretch both cover: their cycles are not the same steps, so per-cycle numbers "
                        "across ranks (the critical path, waits by cycle) compare unlike ones; mark each step with a cycle range "
                        "(tracerecon.instrument.cycle) or give --phase the phase that starts every step first"]
    return []


def _analyze_results(files: list[Path], config: PhaseConfig, say: Progress, results: list[tuple]) -> Analysis:
    """``_analyze_files`` once every file's own work (``_file_work``) is in ``results``."""
    multi = len(files) > 1
    warnings: list[str] = []
    # Imported only now: with one export they were imported while it was read (ImportAhead).
    from tracerecon.analysis.cross_rank import RankView, analyze_cross_rank
    from tracerecon.analysis.rank import finish_rank
    from tracerecon.analysis.summary import phase_candidates
    from tracerecon.model import Analysis, RankResult

    work = []
    for out, w, _ in results:
        work.extend(out)
        warnings.extend(w)
    if multi:
        if not listed_by_one_run(files):  # (a run directory's ranks are one run by how they were made)
            warnings.extend(_one_run(files, [session for _, _, session in results]))
        warnings.extend(_same_captures(files, [session for _, _, session in results]))
    work, said = _numbered(work, multi)
    warnings.extend(said)
    if len({w[0].rank for w in work}) != len(work):
        raise BadTraceError("two inputs map to the same rank (" + ", ".join(f"{s.path}: {s.rank}" for s, _, _ in work) + "); rename the files (rank0, rank1, ...)")
    if all(w.ranges.num_rows == 0 for _, _, w in work):
        from tracerecon.nsys.sqlite_export import NVTX_ROWS_DROPPED

        elsewhere = [w for w in warnings if w.startswith(PHASES_WITHOUT_GPU)]
        dropped = [w for w in warnings if NVTX_ROWS_DROPPED in w]
        if not elsewhere and dropped:  # ranges there, but none of them readable
            raise BadTraceError(f"no NVTX range left to read: {'; '.join(dropped)}")
        raise BadTraceError(elsewhere[0] if elsewhere else no_nvtx_message(", ".join(str(f) for f in files), results[0][2][2]))
    if all(len(w.phase_inputs.phase_rows) == 0 for _, _, w in work):
        names = phase_candidates(work[0][2].ranges, config.cycle_prefix)
        # (--phase=VALUE where the value starts with '-': it would read as an option)
        hint = ("; the likely phases here: " + " ".join(f"--phase={shlex.quote(n)}" if n.startswith("-") else f"--phase {shlex.quote(n)}" for n in names)) if names else ""
        # First: it says why every table is empty (``view`` shows the first few warnings only);
        # where phases were marked in a process that launched no GPU work, that comes first (the
        # likely phases among the other ranges, a worker's own, would only be a guess).
        warnings.insert(0, f"no range named as a phase ({', '.join(config.phases)}) in {', '.join(str(f) for f in files)}{hint} "
                        f"({RANGES_HINT}){pattern_hint(config.phases)}")
        elsewhere = [w for w in warnings if w.startswith(PHASES_WITHOUT_GPU)]
        warnings[:] = elsewhere + [w for w in warnings if not w.startswith(PHASES_WITHOUT_GPU)]
    else:
        # Some ranks without phases (others have them): said per rank, not only when none has.
        for s, info, w in work:
            # (a process whose GPU work all ran before the phases: said where it was found)
            if len(w.phase_inputs.phase_rows) == 0 and not (s.candidate is not None and s.candidate.start_up_only):
                warnings.append(f"rank {s.rank} ({s.path}): no range named as a phase ({', '.join(config.phases)})")
                warnings.extend(_work_beside_phases(s, info, w, work))
        # A phase asked for by name (not the default list, whose names an engine has some of)
        # that no rank has: a pattern that matches nothing drops it from the report unsaid.
        if config.phases != DEFAULT_PHASES and not config.phases_recorded:
            present = {label for _, _, w in work for label in w.phase_inputs.labels}
            missing = [spec for spec in config.phases if parse_phase_spec(spec)[0] not in present and spec not in config.preset_phases]
            # Ranges that are this phase (no earlier spec takes them), each inside another phase's
            # range, are part of that phase.
            labels_seen, taking_cycles, named = set(), set(), set()
            for _, _, w in work:
                if w.ranges is None or w.ranges.num_rows == 0:
                    continue
                names = w.ranges["name"].to_pylist()
                domains = w.ranges["domain"].to_pylist() if "domain" in w.ranges.column_names else [""] * len(names)
                for n, d in set(zip(names, domains)):
                    if n:
                        named.add((n, d or ""))
                        label = config.label_of(n, d or "")
                        labels_seen.add(label)
                        if label is not None and is_cycle_name(n, config.cycle_prefix):
                            taking_cycles.add(label)
            warnings.extend(patterns_of_several_names(config, named))
            # A range a phase takes is that phase, not a cycle (``--phase 'cycle 1'``: a user who
            # wanted to see one cycle would get one phase instance and no word).
            if cycles_taken := [spec for spec in config.phases if parse_phase_spec(spec)[0] in taking_cycles]:
                warnings.append(f"--phase {', '.join(shlex.quote(m) for m in cycles_taken)} matched ranges named as cycles (their names start with "
                                f"{config.cycle_prefix!r}, the --cycle prefix): they are read as that phase, not as cycles; a phase is a part of a cycle "
                                "(one cycle's phases: `tracerecon view`, or the phases table of `tracerecon export` by cycle)")
            inside = [m for m in missing if parse_phase_spec(m)[0] in labels_seen]
            if absent := [m for m in missing if m not in inside]:
                # Ranges of a process that launched no GPU work are no rank's: said above, naming
                # their phases; this does not say those matched nothing.
                elsewhere = [w for w in warnings if w.startswith(PHASES_WITHOUT_GPU)]
                left_out = [m for m in absent if any(repr(parse_phase_spec(m)[0]) in w for w in elsewhere)]
                # A spec whose ranges an earlier one took (`--phase x=verify --phase y=verify`)
                # matched them: said as such, naming what took them.
                alone = {m: replace(config, phases=(m,)) for m in absent if m not in left_out}  # (each spec by itself, made once)
                taken = {m: sorted({config.label_of(n, d) for n, d in named if one.label_of(n, d) is not None} - {None}) for m, one in alone.items()}
                if unmatched := [m for m in absent if m not in left_out and not taken[m]]:
                    warnings.append(f"no range matched --phase {', '.join(shlex.quote(m) for m in unmatched)} (the other phases did); "
                                    f"{RANGES_HINT}{pattern_hint(unmatched)}")
                for m in (m for m in absent if m not in left_out and taken[m]):
                    warnings.append(f"--phase {shlex.quote(m)} matched only ranges an earlier --phase takes (as {', '.join(map(repr, taken[m]))}): "
                                    "a range is the first matching phase's")
                if left_out:
                    warnings.append(f"--phase {', '.join(shlex.quote(m) for m in left_out)} matched only ranges of a process that launched no GPU "
                                    "work, left out (above)")
            if inside:
                warnings.append(f"--phase {', '.join(shlex.quote(m) for m in inside)} matched only ranges inside another phase's range: "
                                "a phase in a phase is part of it, so they are read as part of that one; to time them, leave the enclosing "
                                "phase out of --phase")
    from_phases = any(len(w.phase_inputs.phase_rows) for _, _, w in work) and all(len(w.cycle_rows) == 0 for _, _, w in work if len(w.phase_inputs.phase_rows))
    if config.cycle_prefix and from_phases:
        # Cycle ranges in another process (a parent that marks the cycles of a worker process
        # running the phases) are read with that process's ranges, not the phases'.
        # (Not the phase ranges themselves: `--cycle draft` names no cycle.)
        elsewhere = [s.rank for s, _, w in work if w.ranges is not None and w.ranges.num_rows
                     and any(is_cycle_name(n, config.cycle_prefix) and config.label_of(n) is None for n in w.ranges["name"].unique().to_pylist())]
        named = f"a range whose name starts with {config.cycle_prefix!r}, as {config.cycle_prefix + ' 3'!r} does"
        where = (f"no cycle range ({named}) in the processes with phases (rank {', '.join(map(str, elsewhere))} holds "
                 "such ranges, in another process: cycles are read per process)") if elsewhere else \
            f"no cycle range ({named}; phase ranges are not)"
        warnings.append(f"{where}: a cycle starts where the first phase of --phase (that occurs) begins again after other phases")
    say("across ranks")
    cross = analyze_cross_rank(
        [RankView(s.rank, s.path, info.session_start_utc_ns, w.gpu_ops, w.provisional_phases(), info.time_normalized, info.gpu_uuids, w.syncs) for s, info, w in work]
    )
    warnings.extend(cross.warnings)
    if len(work) == 1:
        warnings.extend(_peers_missing(work[0][0], cross, work[0][2].gpu_ops))
    elif not listed_by_one_run(files):  # (a run folder says which of its exports failed)
        warnings.extend(_ranks_missing([s for s, _, _ in work], cross))
    ranks = []
    for s, info, w in work:
        comm = cross.comm_of(s.rank)
        phases, cycles = finish_rank(w, comm.phase_wait_ns if comm is not None else None)
        ranks.append(RankResult(source=s, info=info, ranges=w.ranges, gpu_ops=w.gpu_ops, syncs=w.syncs, phases=phases, cycles=cycles))
        if config.skip_cycles and cycles.num_rows and config.skip_cycles >= cycles.num_rows:
            warnings.append(f"rank {s.rank}: --skip-cycles {config.skip_cycles} leaves out all of its {cycles.num_rows} cycle(s): no medians")
    if from_phases:
        offsets = {a.rank: a.offset_ns for a in cross.alignment}
        warnings.extend(_unlike_cycle_counts([(r.source.rank, *_counted_cycles(r.cycles, offsets.get(r.source.rank, 0))) for r in ranks if r.cycles.num_rows]))
    return Analysis(
        ranks=tuple(ranks), inputs=tuple(str(f) for f in files), config=config, warnings=tuple(warnings), cross=cross,
    )
