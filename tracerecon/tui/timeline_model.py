"""Timeline lanes for one rank and a time window: what the TUI draws, computed here.

Lanes: the CPU phases (NVTX), the projected GPU phases, blocking syncs (each linked to the
phase whose work it waited for), and one lane per GPU stream with its kernels, copies, graph
launches and NCCL kernels. ``TimelineIndex`` sorts a rank's ops once so that any window is a
binary search away (the 420k-kernel trace answers a window in well under a millisecond).
"""

from __future__ import annotations


import numpy as np
import pyarrow as pa

from tracerecon.analysis.nccl import comm_mask
from tracerecon.analysis.projection import int64s
from tracerecon.analysis.stream_keys import stream_label, stream_tracks
from tracerecon.tui.timeline_window import Lane, Segment, Window


# Past this many GPU ops in a window (the whole 76 MB trace holds 422,638), each stream's ops
# closer together than a cell's time are drawn as one segment: one object per op took seconds
# per key there, and a cell shows one of them anyway.
MAX_OP_SEGMENTS = 20_000


class TimelineIndex:
    """A rank's tables, sorted once for window queries."""

    def __init__(self, phases: pa.Table, gpu_ops: pa.Table, syncs: pa.Table) -> None:
        self.phases = phases
        self.syncs = syncs
        # The GPU each phase is read on (-1: none), and the GPUs that read any.
        has_device = phases.num_rows and "device_id" in phases.column_names
        self._phase_device = int64s(phases["device_id"], -1) if has_device else np.full(phases.num_rows, -1, np.int64)
        self._phase_devices = np.unique(self._phase_device[self._phase_device >= 0]).tolist()
        n = gpu_ops.num_rows
        self._ops = gpu_ops
        if n:
            end = int64s(gpu_ops["end_ns"])
            start = int64s(gpu_ops["start_ns"])
            self._order = np.argsort(end, kind="stable")
            self._end_sorted = end[self._order]
            self._start = start
            self._end = end
            self._track, keys = stream_tracks(int64s(gpu_ops["pid"]), int64s(gpu_ops["device_id"], -1), int64s(gpu_ops["stream_id"], -1))
            self._track_names = [stream_label(*k) for k in keys]
            self._comm = comm_mask(gpu_ops)
            self._kind = gpu_ops["kind"].cast(pa.string()).to_numpy(zero_copy_only=False) if n < 50_000 else None
            self._max_dur = int((end - start).max())
        else:
            self._order = np.zeros(0, np.int64)

    def extent(self) -> Window | None:
        """From the rank's first CPU phase, GPU op or wait to its last end."""
        starts, ends = [], []
        for t, a, b in ((self.phases, "cpu_start_ns", "cpu_end_ns"), (self.phases, "gpu_boundary_start_ns", "gpu_boundary_end_ns"),
                        (self.syncs, "start_ns", "end_ns")):
            if t.num_rows and a in t.column_names:
                lo, hi = int64s(t[a], np.iinfo(np.int64).max), int64s(t[b], np.iinfo(np.int64).min)
                starts.append(int(lo.min()))
                ends.append(int(hi.max()))
        if len(self._order):
            starts.append(int(self._start.min()))
            ends.append(int(self._end_sorted[-1]))
        starts = [x for x in starts if x != np.iinfo(np.int64).max]
        ends = [x for x in ends if x != np.iinfo(np.int64).min]
        if not starts or not ends:
            return None
        return Window(min(starts), max(max(ends), min(starts) + 1_000))

    def _kind_of(self, rows: np.ndarray) -> list[str]:
        if self._kind is not None:
            return self._kind[rows].tolist()
        return self._ops["kind"].take(pa.array(rows)).cast(pa.string()).to_pylist()

    def ops_in(self, w: Window) -> np.ndarray:
        """Rows of gpu_ops that overlap the window."""
        if len(self._order) == 0:
            return self._order
        lo = np.searchsorted(self._end_sorted, w.start_ns, "right")
        hi = np.searchsorted(self._end_sorted, w.end_ns + self._max_dur, "right")
        rows = self._order[lo:hi]
        return rows[self._start[rows] < w.end_ns]

    def cycle_window(self, cycle: int, margin: float = 0.03) -> Window | None:
        """From the cycle's first CPU or GPU start to its last end, with a small margin."""
        if self.phases.num_rows == 0:
            return None
        cyc = int64s(self.phases["cycle"], -1)
        sel = np.flatnonzero(cyc == cycle)
        if len(sel) == 0:
            return None
        cs, ce = int64s(self.phases["cpu_start_ns"])[sel], int64s(self.phases["cpu_end_ns"])[sel]
        gs = np.minimum(int64s(self.phases["gpu_start_ns"], np.iinfo(np.int64).max)[sel], int64s(self.phases["gpu_boundary_start_ns"], np.iinfo(np.int64).max)[sel])
        ge = np.maximum(int64s(self.phases["gpu_end_ns"], np.iinfo(np.int64).min)[sel], int64s(self.phases["gpu_boundary_end_ns"], np.iinfo(np.int64).min)[sel])
        t0, t1 = int(min(cs.min(), gs.min())), int(max(ce.max(), ge.max()))
        pad = int((t1 - t0) * margin)
        return Window(t0 - pad, t1 + pad)

    def lanes(self, w: Window, cells: int = 200, ops: bool = True) -> list[Lane]:
        """The lanes in window ``w``, drawn ``cells`` wide (where a window holds more than
        MAX_OP_SEGMENTS GPU ops, those of a stream closer than one cell's time are one segment);
        ``ops``: with the GPU streams' lanes (the stacked ranks show their phase lanes only)."""
        ph = self.phases
        lanes = []
        if ph.num_rows:
            cs, ce = int64s(ph["cpu_start_ns"]), int64s(ph["cpu_end_ns"])
            # The GPU phase is the stretch between its boundaries (what CUDA events read).
            gs, ge = int64s(ph["gpu_boundary_start_ns"], -1), int64s(ph["gpu_boundary_end_ns"], -1)
            names = ph["phase"].to_pylist()
            verdicts = ph["verdict"].to_pylist()
            vis = np.flatnonzero((cs < w.end_ns) & (ce > w.start_ns))
            lanes.append(Lane("CPU phases", tuple(Segment(int(cs[i]), int(ce[i]), names[i], names[i], verdicts[i], int(i)) for i in vis)))
            vis_g = np.flatnonzero((gs >= 0) & (gs < w.end_ns) & (ge > w.start_ns))
            # One lane per GPU where the rank's phases are read on several (one thread driving
            # two GPUs: their phases overlap in time, and one lane would draw one over the other).
            devices = self._phase_devices
            for d in devices if len(devices) > 1 else (None,):
                on = vis_g if d is None else vis_g[self._phase_device[vis_g] == d]
                lanes.append(Lane("GPU phases" if d is None else f"GPU{d} phases",
                                  tuple(Segment(int(gs[i]), int(ge[i]), names[i], names[i], verdicts[i], int(i)) for i in on), gpu_phases=True))
        if self.syncs.num_rows:
            ss, se = int64s(self.syncs["start_ns"]), int64s(self.syncs["end_ns"])
            vis_s = np.flatnonzero((ss < w.end_ns) & (se > w.start_ns))
            api = self.syncs["api"].to_pylist()
            wf = int64s(self.syncs["waited_for_phase_id"], -1)
            wfn = self.syncs["waited_for_phase"].to_pylist()
            lanes.append(Lane("CPU waits", tuple(
                Segment(int(ss[i]), int(se[i]), f"{api[i]}" + (f" -> {wfn[i]}" if wfn[i] else ""), "sync", None, int(wf[i]) if wf[i] >= 0 else None)
                for i in vis_s
            )))
        rows = self.ops_in(w) if ops else np.zeros(0, np.int64)
        if len(rows) > MAX_OP_SEGMENTS:
            lanes += self._merged_op_lanes(rows, max(w.span // max(cells, 1), 1))
        elif len(rows):
            kinds = self._kind_of(rows)
            names = self._ops["name"].take(pa.array(rows)).cast(pa.string()).to_pylist()
            by_stream: dict[int, list[Segment]] = {}
            for r, k, n in zip(rows.tolist(), kinds, names):
                kind = "nccl" if self._comm[r] else k
                by_stream.setdefault(int(self._track[r]), []).append(Segment(int(self._start[r]), int(self._end[r]), n or k, kind, None, r))
            for track, segs in sorted(by_stream.items()):
                segs.sort(key=lambda s: s.start_ns)
                lanes.append(Lane(self._track_names[track], tuple(segs)))
        return lanes

    def _merged_op_lanes(self, rows: np.ndarray, gap_ns: int) -> list[Lane]:
        """Per stream, runs of ops less than ``gap_ns`` apart as one segment each, labelled with
        how many ops it holds (the first op's row is its ref, its kind its colour)."""
        track, start, end = self._track[rows], self._start[rows], self._end[rows]
        order = np.lexsort((start, track))
        rows, track, start, end = rows[order], track[order], start[order], end[order]
        new_lane = np.r_[True, track[1:] != track[:-1]]
        lane_id = np.cumsum(new_lane) - 1
        # the latest end so far within each lane: a run goes on while the next op starts within gap_ns of it
        reach = _running_max_per_group(end, lane_id)
        first = np.r_[True, new_lane[1:] | (start[1:] > reach[:-1] + gap_ns)]
        run = np.cumsum(first) - 1
        heads = np.flatnonzero(first)
        run_end = np.full(len(heads), np.iinfo(np.int64).min, dtype=np.int64)
        np.maximum.at(run_end, run, end)
        count = np.bincount(run)
        kinds = self._kind_of(rows[heads])
        names = self._ops["name"].take(pa.array(rows[heads[count == 1]])).cast(pa.string()).to_pylist()
        singles = iter(names)
        lanes: dict[int, list[Segment]] = {}
        for k, h in enumerate(heads.tolist()):
            r = int(rows[h])
            kind = "nccl" if self._comm[r] else kinds[k]
            label = (next(singles) or kinds[k]) if count[k] == 1 else f"{count[k]} GPU ops (zoom in for each)"
            lanes.setdefault(int(track[h]), []).append(Segment(int(start[h]), int(run_end[k]), label, kind, None, r, int(count[k])))
        return [Lane(self._track_names[t], tuple(segs)) for t, segs in sorted(lanes.items())]


def _running_max_per_group(values: np.ndarray, group: np.ndarray) -> np.ndarray:
    """The running maximum of ``values`` restarting at each new ``group`` (groups contiguous,
    numbered from 0 in order)."""
    # Offsetting each group above every earlier one lets one accumulate serve them all.
    span = int(values.max() - values.min()) + 1 if len(values) else 1
    shifted = (values - values.min()) + group.astype(np.int64) * span
    return np.maximum.accumulate(shifted) - group.astype(np.int64) * span + values.min()


def find_next(index: "TimelineIndex", text: str, after_ns: int, ranges: pa.Table | None = None) -> Segment | None:
    """The first NVTX range or GPU op whose name contains ``text`` (case-insensitive) starting
    after ``after_ns``; wraps around to the beginning. None if nothing matches. A kernel is
    found by its demangled name too (``deep_ep::`` finds DeepEP's ``dispatch``)."""
    needle = text.lower()
    hits: list[Segment] = []
    if ranges is not None and ranges.num_rows:
        from tracerecon.analysis.projection import string_mask

        m = np.flatnonzero(string_mask(ranges["name"], lambda v: needle in v.lower()))
        if len(m):
            st = int64s(ranges["start_ns"])[m]
            for pick in (m[st > after_ns], m):
                if len(pick):
                    i = int(pick[np.argmin(int64s(ranges["start_ns"])[pick])])
                    hits.append(Segment(int(ranges["start_ns"][i].as_py()), int(ranges["end_ns"][i].as_py()), ranges["name"][i].as_py(), "range", None, i))
                    break
    ops = index._ops
    if ops.num_rows:
        from tracerecon.analysis.projection import string_mask

        found = string_mask(ops["name"], lambda v: needle in v.lower())
        if "demangled_name" in ops.column_names:
            found |= string_mask(ops["demangled_name"], lambda v: needle in v.lower())
        m = np.flatnonzero(found)
        if len(m):
            st = index._start[m]
            later = m[st > after_ns]
            pick = later if len(later) else m
            i = int(pick[np.argmin(index._start[pick])])
            hits.append(Segment(int(index._start[i]), int(index._end[i]), ops["name"][i].as_py(), "kernel", None, i))
    if not hits:
        return None
    after = [h for h in hits if h.start_ns > after_ns]
    return min(after or hits, key=lambda h: h.start_ns)
