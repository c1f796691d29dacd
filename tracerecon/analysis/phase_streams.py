"""Which stream a phase's events are read on (the stream clock's ``done`` is asked there).

A phase whose thread said which stream was current as it began is read there
(``declared_streams``: ``tracerecon.instrument`` records an event there and marks it) unless all
its stream-deciding GPU work came from other threads that did not work from that stream within
the phase. Otherwise a phase's stream is the one that received most of its kernel time (``phase_streams``: the sum of its ops' durations; a graph's
branch nodes count on the graph's launch stream, ``graphs.graph_branches``; copies decide only in
a phase that ran no kernel, and not on a stream that only copies where the phase's thread
launches kernels: there the stream those copies feed, else the one the phase's thread forked
them off (else any thread's fork: ``StreamClock.partner``), else the thread's own,
``CopyStreams``; ties go to more ops, then the lower stream id), unless the phase forked that
stream off another one and joined it back (``caller_streams``). A phase that launched nothing
keeps the stream of the phase before it on its thread among the phases in sequence (else the
one after it there); where its thread launched nothing in sequence, of its thread's phases
outside the cycle ranges (a warm-up); where its thread launched nothing at all, of the phase
before it in the same process (else the first one after).
"""

from __future__ import annotations

import functools

import numpy as np
import pyarrow as pa

from tracerecon.analysis.columns import computes, runs_model, thread_keys
from tracerecon.analysis.intervals import distinct_few, isin_few, segmented_min_max
from tracerecon.analysis.projection import int64s, string_mask
from tracerecon.analysis.stream_clock import StreamClock, forks_joined_back
from tracerecon.analysis.stream_keys import device_of_keys, pack_keys, stream_of_keys
from tracerecon.schema import STREAM_NON_BLOCKING


# Up to this many phase x stream cells, phase_streams counts on a dense grid instead of sorting.
_DENSE_CELLS = 20_000_000


def declared_streams(clock: StreamClock, marks: tuple[np.ndarray, np.ndarray], calls: tuple[np.ndarray, np.ndarray, np.ndarray],
                     range_starts: tuple[np.ndarray, np.ndarray], phases: tuple[np.ndarray, np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Per phase instance: (device, stream) its thread said was current as the phase began, -1
    where none said. ``tracerecon.instrument`` says it right after pushing the phase's range:
    it records a CUDA event on the current stream, then emits a ``tracerecon.stream`` mark. A
    mark (``marks``: its thread, ``thread_keys``, and CPU instant) names the stream of its
    thread's last API call started before it (``calls``: thread, start, whether it is a
    ``cudaEventRecord``; the calls the export keeps for GPU work), where that call is an event
    record the export holds (in ``clock``); it names it for the phase instance (``phases``:
    thread, CPU start and end) whose range is the thread's latest to start by that record
    (``range_starts``: thread and start of every range, phases or not) and holds the mark. So a
    mark whose record is not in the export says nothing, nor one of a range nested in a phase
    that marked nothing itself."""
    n = len(phases[1])
    out = np.full(n, -1, dtype=np.int64)
    m_thread, m_t = (np.asarray(x, np.int64) for x in marks)
    if len(m_t) == 0 or n == 0 or len(clock.record_row) == 0:
        return out, out.copy()

    def by_thread(thread: np.ndarray, *cols: np.ndarray) -> tuple[np.ndarray, ...]:
        order = np.lexsort((np.asarray(cols[0]), np.asarray(thread)))
        return (np.asarray(thread, np.int64)[order],) + tuple(np.asarray(c)[order] for c in cols) + (order,)

    m_thread, m_t, _ = by_thread(m_thread, m_t)
    c_thread, c_start, c_record, _ = by_thread(*calls)
    r_thread, r_start, r_row, _ = by_thread(clock.record_thread, clock.record_call_start, clock.record_row)
    g_thread, g_start, _ = by_thread(*range_starts)
    p_thread, p_s, p_e, p_order = by_thread(*phases)
    for th in np.intersect1d(np.intersect1d(m_thread, p_thread), r_thread).tolist():
        ms, cs, rs, gs, ps = (slice(*np.searchsorted(x, [th, th + 1])) for x in (m_thread, c_thread, r_thread, g_thread, p_thread))
        t = m_t[ms]
        # The thread's last call before each mark, an event record the export holds
        k = np.searchsorted(c_start[cs], t, side="left") - 1
        ok = (k >= 0) & c_record[cs][np.maximum(k, 0)] if cs.stop > cs.start else np.zeros(len(t), bool)
        call = c_start[cs][np.maximum(k, 0)] if cs.stop > cs.start else np.zeros(len(t), np.int64)
        r = np.minimum(np.searchsorted(r_start[rs], call), rs.stop - rs.start - 1)
        ok &= r_start[rs][r] == call
        # ... made first thing in a phase range: the thread's latest range to start by it
        j = np.searchsorted(p_s[ps], call, side="right") - 1
        g = np.searchsorted(g_start[gs], call, side="right") - 1
        ok &= (j >= 0) & (g >= 0)
        jj, gg = np.maximum(j, 0), np.maximum(g, 0)
        ok &= (p_s[ps][jj] == g_start[gs][gg]) & (p_e[ps][jj] >= t)
        take = np.flatnonzero(ok)
        phase = p_order[ps][jj[take]]
        first = np.unique(phase, return_index=True)[1]  # (one mark a phase; the first if more)
        out[phase[first]] = r_row[rs][r[take[first]]]
    said = out >= 0
    return (np.where(said, device_of_keys(clock.keys, np.maximum(out, 0)), -1), np.where(said, stream_of_keys(clock.keys, np.maximum(out, 0)), -1))


def phase_streams(ops: pa.Table, op_phase: np.ndarray, n_phases: int, prefer: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per phase instance: (device_id, stream_id) that received most of its GPU time; -1 when
    it launched nothing. Ties: more ops, then the lower (device, stream). ``prefer`` (per op):
    where a phase has preferred ops, only they count (``attribution.stream_deciding_ops``)."""
    dev_out = np.full(n_phases, -1, dtype=np.int64)
    str_out = np.full(n_phases, -1, dtype=np.int64)
    if prefer is not None and not prefer.all():
        has_preferred = np.zeros(n_phases + 1, dtype=bool)
        has_preferred[op_phase[(op_phase >= 0) & prefer]] = True
        op_phase = np.where(prefer | ~has_preferred[np.where(op_phase >= 0, op_phase, n_phases)], op_phase, -1)
    sel = np.flatnonzero(op_phase >= 0)
    if len(sel) == 0 or n_phases == 0:
        return dev_out, str_out
    dev = int64s(ops["device_id"], -1)[sel]
    stream = int64s(ops["stream_id"], -1)[sel]
    dur = np.clip(int64s(ops["end_ns"])[sel] - int64s(ops["start_ns"])[sel], 0, None)
    ph = op_phase[sel]
    packed = (dev << 32) | (stream & 0xFFFFFFFF)
    streams = distinct_few(packed)
    s_dense = np.searchsorted(streams, packed)
    n_s = len(streams)
    # Best per phase: largest total, then most ops, then lowest (device, stream).
    if n_phases * n_s <= _DENSE_CELLS:
        # Few streams (the usual case): a phases x streams grid of totals and counts, no sort.
        cell = ph * n_s + s_dense
        total = np.bincount(cell, weights=dur, minlength=n_phases * n_s).astype(np.int64).reshape(n_phases, n_s)
        count = np.bincount(cell, minlength=n_phases * n_s).reshape(n_phases, n_s)
        top = total == total.max(axis=1, keepdims=True)
        count = np.where(top & (count > 0), count, -1)
        best = np.argmax(count == count.max(axis=1, keepdims=True), axis=1)  # the lowest of the ties
        has = count.max(axis=1) > 0
        k_phase, k_stream = np.flatnonzero(has), best[has]
    else:
        keys, inv = np.unique(ph * n_s + s_dense, return_inverse=True)
        inv = inv.ravel()
        total = np.bincount(inv, weights=dur).astype(np.int64)
        count = np.bincount(inv)
        kp, ks = keys // n_s, keys % n_s
        order = np.lexsort((ks, -count, -total, kp))
        first = np.r_[True, kp[order][1:] != kp[order][:-1]]
        k_phase, k_stream = kp[order[first]], ks[order[first]]
    # Each stream's own ids, from its first op (the packed key loses a negative stream's sign).
    s_first = np.full(n_s, len(packed), dtype=np.int64)
    np.minimum.at(s_first, s_dense, np.arange(len(packed)))
    dev_out[k_phase] = dev[s_first[k_stream]]
    str_out[k_phase] = stream[s_first[k_stream]]
    return dev_out, str_out


def narrowed_by_phase(op_phase: np.ndarray, n_phases: int, *masks: np.ndarray | None) -> np.ndarray:
    """Per op: whether it may decide its phase's stream (``phase_streams``), given masks in
    priority order. Each mask narrows a phase's deciding ops to those it marks, where the phase
    has any (a phase none of whose ops a mask marks keeps what it had)."""
    keep = np.ones(len(op_phase), dtype=bool)
    valid = op_phase >= 0
    slot = np.where(valid, op_phase, n_phases)
    for mask in masks:
        if mask is None:
            continue
        narrower = keep & np.asarray(mask, dtype=bool)
        has = np.zeros(n_phases + 1, dtype=bool)
        has[op_phase[valid & narrower]] = True
        keep = np.where(has[slot], narrower, keep)
    return keep


class CopyStreams:
    """Which streams only copy: streams of a process that ran kernels or CUDA graphs, none of
    them on that stream (an input stream, a KV-cache offload thread's stream). A thread that
    launches kernels records its events on the stream it computes on (torch's current stream),
    so such a stream is not where its phases are read (``thread_stream`` is), nor where the
    events of a process that launched nothing in its phases go; a thread that never launches a
    kernel (a loop thread that only uploads inputs and reads tokens) has only copy streams to
    record on. A thread whose only kernels are collectives runs them on NCCL's own stream,
    forked off its current stream: it has no stream of its own that computes (``thread_stream``,
    ``thread_runs_model``). Each answer is worked out when first asked."""

    def __init__(self, ops: pa.Table):
        self._ops = ops
        self._c = computes(ops) if ops.num_rows else np.zeros(0, bool)

    @functools.cached_property
    def _model(self) -> np.ndarray:
        """Per op: a kernel or graph that is no collective."""
        return runs_model(self._ops)

    def _columns(self, *names: str, model: bool = False) -> tuple[np.ndarray, ...]:
        """Columns of the computing ops, or (``model``) of those that are no collective (not
        kept: a copy of 8 bytes per op each)."""
        if self._ops.num_rows == 0:
            return tuple(np.zeros(0, np.int64) for _ in names)
        mask = self._model if model else self._c
        return tuple(int64s(self._ops[name], -1)[mask] for name in names)

    @functools.cached_property
    def _computing(self) -> np.ndarray:
        return distinct_few(pack_keys(*self._columns("pid", "device_id", "stream_id")))

    @functools.cached_property
    def _modelling(self) -> np.ndarray:
        return distinct_few(pack_keys(*self._columns("pid", "device_id", "stream_id", model=True)))

    @functools.cached_property
    def _computing_pids(self) -> np.ndarray:
        return distinct_few(self._columns("pid")[0])

    @functools.cached_property
    def _computing_threads(self) -> np.ndarray:
        return distinct_few(thread_keys(*self._columns("pid", "launch_tid")))

    @functools.cached_property
    def _threads(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The keys (sorted) of the threads that ran kernels or graphs other than collectives,
        and each one's (device, stream) those ran longest on (ties: the lower packed stream)."""
        pid, dev, stream, tid, start, end = self._columns("pid", "device_id", "stream_id", "launch_tid", "start_ns", "end_ns", model=True)
        thread_u, t_code = np.unique(thread_keys(pid, tid), return_inverse=True)
        stream_u, s_code = np.unique(pack_keys(pid, dev, stream), return_inverse=True)
        cell = t_code.ravel() * len(stream_u) + s_code.ravel()
        cells = np.unique(cell)
        total = np.bincount(np.searchsorted(cells, cell), weights=np.clip(end - start, 0, None), minlength=len(cells))
        t_of, s_of = cells // max(len(stream_u), 1), cells % max(len(stream_u), 1)
        order = np.lexsort((s_of, -total, t_of))
        best = order[np.r_[True, t_of[order][1:] != t_of[order][:-1]]] if len(order) else order
        first = np.full(len(stream_u), -1, dtype=np.int64)
        first[s_code.ravel()[::-1]] = np.arange(len(s_code))[::-1]  # a row of each stream
        rows = first[s_of[best]]
        return thread_u, dev[rows], stream[rows]

    def of(self, pid: np.ndarray, dev: np.ndarray, stream: np.ndarray) -> np.ndarray:
        """Per (pid, device, stream), streams < 0 excepted: whether it only copies."""
        pid = np.asarray(pid, dtype=np.int64)
        return (np.asarray(stream) >= 0) & isin_few(pid, self._computing_pids) & ~isin_few(pack_keys(pid, np.asarray(dev, np.int64), np.asarray(stream, np.int64)), self._computing)

    def collectives_only(self, keys: np.ndarray) -> np.ndarray:
        """Per stream key (``pack_keys``: ``StreamClock.keys``): whether it ran kernels, all of them
        collectives (NCCL's own stream, which no engine records its events on)."""
        keys = np.asarray(keys, np.int64)
        return isin_few(keys, self._computing) & ~isin_few(keys, self._modelling)

    def of_ops(self, ops: pa.Table) -> np.ndarray:
        if ops.num_rows == 0:
            return np.zeros(0, dtype=bool)
        return self.of(int64s(ops["pid"]), int64s(ops["device_id"], -1), int64s(ops["stream_id"], -1))

    def thread_computes(self, pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
        """Per (pid, tid): whether that thread launched a kernel or a CUDA graph."""
        return np.isin(thread_keys(np.asarray(pid, np.int64), np.asarray(tid, np.int64)), self._computing_threads)

    def thread_runs_model(self, pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
        """Per (pid, tid): whether that thread launched a kernel or a CUDA graph that is no
        collective (it has a stream of its own that computes: ``thread_stream``)."""
        if len(pid) == 0:
            return np.zeros(0, dtype=bool)
        return np.isin(thread_keys(np.asarray(pid, np.int64), np.asarray(tid, np.int64)), self._threads[0])

    def thread_stream(self, pid: np.ndarray, tid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per (pid, tid): the (device, stream) its kernels and graphs other than collectives
        ran longest on, where its events go (-1, -1 for a thread that launched none: collectives
        run on NCCL's stream, which no event of the thread's is recorded on)."""
        key = thread_keys(np.asarray(pid, np.int64), np.asarray(tid, np.int64))
        threads, dev, stream = self._threads
        if len(threads) == 0:
            return np.full(len(key), -1, np.int64), np.full(len(key), -1, np.int64)
        at = np.minimum(np.searchsorted(threads, key), len(threads) - 1)
        hit = threads[at] == key
        return np.where(hit, dev[at], -1), np.where(hit, stream[at], -1)


class UnsetStreams:
    """The stream a thread works on that never set one: its process's legacy default (NULL)
    stream on its device (CUDA's and PyTorch's default: the current stream is per thread), where
    an event it records waits for the work queued before on that stream and, as the stream
    clock reads it (``legacy_partners``), on the device's blocking streams. ``clock``: the
    rank's stream clock, which knows how each stream was made and each process's NULL streams
    (``TARGET_INFO_CUDA_STREAM``: none where the export does not say), and which thread
    launched, recorded or waited on each stream."""

    def __init__(self, clock: StreamClock):
        self._clock = clock
        self._legacy: dict[tuple[int, int], int] = clock.nulls
        self._non_blocking = {k for k, f in clock.made.items() if f == STREAM_NON_BLOCKING}

    @functools.cached_property
    def _threads_elsewhere(self) -> set[int]:
        """The threads (``thread_keys``) that launched work, recorded an event or made a stream
        wait on a stream that is no NULL stream: each has shown a stream of its own."""
        clock = self._clock
        nulls = {pack_keys(p, d, s) for (p, d), s in self._legacy.items()}
        rows = np.flatnonzero(~np.isin(clock.keys, np.array(sorted(nulls), np.int64))) if len(clock.keys) else np.zeros(0, np.int64)
        out: set[int] = set()
        for r in rows.tolist():
            index = clock.op_index[r] if r < len(clock.op_index) else np.zeros(0, np.int64)
            index = index[index >= 0]
            if len(index) and len(clock.launch_thread):
                out.update(np.unique(clock.launch_thread[index]).tolist())
        for thread, row in ((clock.record_thread, clock.record_row), (clock.join_thread, clock.join_into)):
            if len(row):
                out.update(np.unique(thread[np.isin(row, rows)]).tolist())
        out.discard(-1)
        return out

    def of_thread(self, pid: np.ndarray, tid: np.ndarray, dev: np.ndarray, inherited: np.ndarray) -> np.ndarray:
        """Per phase whose thread's phases launched nothing and said no stream, read so far on
        ``inherited`` (another thread's stream, on ``dev``): its process's NULL stream on that
        device where ``inherited`` is non-blocking (the NULL stream is not ordered after it) and
        the thread queued nothing on any other stream, anywhere in the trace; else -1 (keep
        ``inherited``: the NULL stream itself, or a blocking stream, whose work an event on the
        NULL stream waits for; a thread that worked on a stream of its own; nothing known)."""
        out = np.full(len(pid), -1, dtype=np.int64)
        if not self._legacy:
            return out
        threads = thread_keys(np.asarray(pid, np.int64), np.asarray(tid, np.int64))
        for i, (p, th, d, s) in enumerate(zip(np.asarray(pid).tolist(), threads.tolist(), np.asarray(dev).tolist(), np.asarray(inherited).tolist())):
            if (p, s) in self._non_blocking and th not in self._threads_elsewhere:
                out[i] = self._legacy.get((p, d), -1)
        return out


def busiest_streams(ops: pa.Table, copy_streams: CopyStreams | None = None) -> dict[int, tuple[int, int]]:
    """Per pid: the (device, stream) with the most GPU time, of the streams that compute where
    the process has any (where no phase launched anything, events would be recorded on the
    stream the process mostly works on; ``CopyStreams``)."""
    if ops.num_rows == 0:
        return {}
    pid = int64s(ops["pid"])
    dev = int64s(ops["device_id"], -1)
    stream = int64s(ops["stream_id"], -1)
    dur = np.clip(int64s(ops["end_ns"]) - int64s(ops["start_ns"]), 0, None)
    packed = pack_keys(pid, dev, stream)
    keys = distinct_few(packed)
    inv = np.searchsorted(keys, packed)
    first = np.full(len(keys), len(packed), dtype=np.int64)
    np.minimum.at(first, inv, np.arange(len(packed)))
    total = np.bincount(inv, weights=dur, minlength=len(keys))
    copies = (copy_streams or CopyStreams(ops)).of(pid[first], dev[first], stream[first])
    out: dict[int, tuple[int, int]] = {}
    for k in np.lexsort((-total, copies)):
        i = first[k]
        out.setdefault(int(pid[i]), (int(dev[i]), int(stream[i])))
    return out


def said_streams(clock: StreamClock, stream_marks: pa.Table | None, api_calls: pa.Table, ranges: pa.Table, ops: pa.Table, op_phase: np.ndarray,
                 stream_deciders: np.ndarray | None, ph_pid: np.ndarray, ph_tid: np.ndarray, ph_s: np.ndarray,
                 ph_e: np.ndarray, cycle_of: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Per phase instance: (device, stream) its thread said was current as it began
    (``declared_streams``; ``ranges``: every NVTX range of the rank), -1 where none did or
    where the phase's ops that decide its stream (``stream_deciders``, None: all) all came
    from other threads none of which worked from the said stream within the phase (a phase
    whose launches a worker thread makes on its own current stream: the range thread's is not
    where that work goes, and the work's stream decides as before; a launcher that launches
    kernels on the said stream, or forks a side stream off it and joins it back, works from
    it, where it joins it back by the cycle after the fork's: ``_launchers_use_said_stream``).
    ``cycle_of``: per phase, its cycle (-1: none). None where the rank has no marks."""
    n_ph = len(ph_s)
    if stream_marks is None or stream_marks.num_rows == 0 or n_ph == 0:
        return None
    deciding_phase = op_phase if stream_deciders is None else np.where(stream_deciders, op_phase, -1)
    calls = (thread_keys(int64s(api_calls["pid"]), int64s(api_calls["tid"])), int64s(api_calls["start_ns"]),
             string_mask(api_calls["name"], lambda name: "EventRecord" in name)) if api_calls.num_rows else (np.zeros(0, np.int64),) * 2 + (np.zeros(0, bool),)
    dev, stream = declared_streams(clock, (thread_keys(int64s(stream_marks["pid"]), int64s(stream_marks["tid"])), int64s(stream_marks["ts_ns"])), calls,
                                   (thread_keys(int64s(ranges["pid"]), int64s(ranges["tid"])), int64s(ranges["start_ns"])),
                                   (thread_keys(ph_pid, ph_tid), ph_s, ph_e))
    if ops.num_rows and (stream >= 0).any():
        has = np.flatnonzero(deciding_phase >= 0)
        ph = deciding_phase[has]
        launcher = thread_keys(int64s(ops["pid"]), int64s(ops["launch_tid"], -1))
        range_thread = thread_keys(ph_pid, ph_tid)
        own = launcher[has] == range_thread[ph]
        n_ops, n_own = np.bincount(ph, minlength=n_ph), np.bincount(ph[own], minlength=n_ph)
        others_only = (n_ops > 0) & (n_own == 0)
        if others_only.any():
            # The phase's threads are its range's and those that launched its work: where one
            # of those launchers worked from the said stream within the phase (a thread that
            # holds no phase launching the loop's work onto the loop's current stream, forking
            # a side stream off it), the said stream is where that work goes, and the phase's
            # events are recorded there.
            others_only &= ~_launchers_use_said_stream(clock, ops, launcher, has, ph, others_only, dev, stream, ph_pid, ph_s, ph_e,
                                                       range_thread, cycle_of)
        dev, stream = np.where(others_only, -1, dev), np.where(others_only, -1, stream)
    return dev, stream


def _launchers_use_said_stream(clock: StreamClock, ops: pa.Table, launcher: np.ndarray, has: np.ndarray, ph: np.ndarray, asked: np.ndarray,
                               dev: np.ndarray, stream: np.ndarray, ph_pid: np.ndarray, ph_s: np.ndarray, ph_e: np.ndarray,
                               range_thread: np.ndarray, cycle_of: np.ndarray) -> np.ndarray:
    """Per phase of ``asked`` (whose stream-deciding ops, ``has`` with their phases ``ph``, all
    came from other threads): whether a thread that launched one of them (``launcher``, per op:
    its ``thread_keys``) worked from the phase's said stream (``dev``, ``stream``) within the
    phase's range (CPU ``ph_s`` to ``ph_e``): launched a kernel there, or forked a side stream
    off it there that it joined back by the cycle after the fork's (``_current_stream_forks``;
    ``range_thread``, ``cycle_of``: per phase, its range's thread and its cycle). A worker
    thread whose kernels go to its own current stream is no such thread, whatever it did on the
    said stream at other times (a warm-up), whatever copies it put there (an input copied before
    it entered its own stream), and whatever waits for it it made its own stream make
    (`wait_stream`, never joined back, or only once, late)."""
    out = np.zeros(len(asked), dtype=bool)
    said_row = clock.stream_index(ph_pid, dev, stream)
    sel = asked[ph] & (said_row[ph] >= 0)
    if not sel.any():
        return out
    rows = clock.stream_index(int64s(ops["pid"]), int64s(ops["device_id"], -1), int64s(ops["stream_id"], -1))
    kernels = computes(ops) & (rows >= 0)
    k_who, k_where, k_when = launcher[kernels], rows[kernels], clock.op_instants[kernels]
    pairs = np.unique(np.stack([ph[sel], launcher[has[sel]]], 1), axis=0)  # (phase, launcher) pairs asked
    spans = _cycle_spans(range_thread, ph_s, ph_e, cycle_of)
    none = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    for th in np.unique(pairs[:, 1]).tolist():
        mine = pairs[pairs[:, 1] == th, 0]
        for r in np.unique(said_row[mine]).tolist():
            on = mine[said_row[mine] == r]
            # (a fork counts by the cycles of any loop whose phases these are: one launcher may
            # serve two loops, each with cycles of its own)
            forks = [_current_stream_forks(clock, r, th, *spans.get(k, none)) for k in np.unique(range_thread[on]).tolist()]
            t = np.sort(np.r_[k_when[(k_who == th) & (k_where == r)], np.unique(np.concatenate(forks))])
            if len(t) == 0:
                continue
            first = np.searchsorted(t, ph_s[on], side="left")  # (the first at or after the range's start)
            out[on] |= (first < len(t)) & (t[np.minimum(first, len(t) - 1)] <= ph_e[on])
    return out


def _cycle_spans(range_thread: np.ndarray, ph_s: np.ndarray, ph_e: np.ndarray, cycle_of: np.ndarray) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per thread (``thread_keys``) whose phases (``range_thread``, CPU ``ph_s`` to ``ph_e``)
    are in cycles (``cycle_of``, -1: none): the CPU starts of those cycles (each its earliest
    phase start there) and ends (its latest phase end), in order of their starts."""
    ok = cycle_of >= 0
    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for th in np.unique(range_thread[ok]).tolist():
        mine = ok & (range_thread == th)
        cycles, at = np.unique(cycle_of[mine], return_inverse=True)
        first, last = segmented_min_max(ph_s[mine], ph_e[mine], at.ravel(), len(cycles))
        order = np.argsort(first, kind="stable")
        out[th] = (first[order], last[order])
    return out


def _current_stream_forks(clock: StreamClock, row: int, thread: int, cycle_starts: np.ndarray, cycle_ends: np.ndarray) -> np.ndarray:
    """The CPU instants at which ``thread`` forked a side stream off stream row ``row`` (made
    it wait for a record there) and joined that side stream back into ``row`` by the end of the
    cycle after the fork's (``forks_joined_back``; ``cycle_starts``, ``cycle_ends``: the loop's
    cycles, ``_cycle_spans``; a cycle ends where the next begins, the last where its last phase
    ends, and the one after the last, not in the trace, a cycle period later: the lower median
    of the periods, so that one long warm-up cycle among few does not stretch it): the pattern
    of a thread whose current stream ``row`` is (`side.wait_stream(current)`, work there,
    `current.wait_stream(side)` in the phase, a later one, or the next cycle; forks of one cycle
    may share a join: a copy stream forked for prepare's inputs and again for forward, joined
    back once a cycle), not that of a worker making its own stream wait for another's now and
    then, never joined back, or joined back once, late (at shutdown, a weight update: 2 cycles
    or more after the fork). With fewer than two cycles nothing tells a late join: every join
    counts."""
    fork_at, _, join_at = forks_joined_back(clock.join_into, clock.join_from, clock.join_cpu, row, waits_counted=clock.join_thread == thread)
    n = len(cycle_starts)
    if len(fork_at) == 0 or n < 2:
        return fork_at
    periods = np.sort(np.diff(cycle_starts))
    period = int(periods[(len(periods) - 1) // 2])
    last_end = int(cycle_ends.max())
    # The end of the cycle after the fork's (-1: a fork before the first cycle): the start of
    # the one after that, the last cycle's end, or past it a period more.
    two_on = np.searchsorted(cycle_starts, fork_at, side="right") - 1 + 2
    limit = np.where(two_on < n, cycle_starts[np.minimum(two_on, n - 1)], np.where(two_on == n, last_end, last_end + period))
    return fork_at[join_at < limit]
