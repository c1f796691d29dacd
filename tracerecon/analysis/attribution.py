"""Cross-thread attribution: GPU work launched by a thread that has no phase open.

Engines often hold their phase ranges (and timers) on a scheduler thread while a worker thread
launches the kernels. nsys's projection (same thread only) then gives every phase nothing.
The rule, written once here: a GPU op (or blocking call) that no phase owns on its own thread,
launched by a thread other than the phase's, belongs to the phase open at that moment on the
thread that holds the phases in that process.

Which phases take such work (``--phase-thread``):
- ``auto`` (default): a phase name most of whose instances, in a process, launched nothing on
  their own thread (``own_launches``: on a thread that never launches a kernel or graph, its own
  copies, a scheduler's input copies or `.tolist()` reads, do not count; a one-off launch on the
  phases' thread, in a warm-up cycle, does not turn
  the rule off for the rest: such an instance takes other threads' work too); the other phase
  names keep nsys's same-thread projection exactly (one that launches in every other cycle too).
- ``same``: none (nsys's rule everywhere).
- a thread id: every phase held by that thread.
"""

from __future__ import annotations

import numpy as np

from tracerecon.analysis.intervals import last_reaching
from tracerecon.analysis.config import SAME

def own_launches(op_phase: np.ndarray, n_phases: int, computes: np.ndarray, thread_computes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per phase instance: (how many of its own ops count for ``--phase-thread auto``, whether it
    launched nothing at all itself). ``op_phase``: each op's same-thread owner (-1: none);
    ``computes`` / ``thread_computes``, per op: it runs code (a kernel or graph) / its launching
    thread launches one somewhere. On a thread that launches kernels every op counts (its
    copy-only phase is no phase whose work others launch: other threads' kernels then are
    background); on one that never does, only kernels and graphs (none), so a scheduler's own
    input copies or `.tolist()` reads leave its phase one that takes other threads' work."""
    mine = op_phase >= 0
    counted = mine & (np.asarray(computes, dtype=bool) | np.asarray(thread_computes, dtype=bool))
    own = np.bincount(op_phase[counted], minlength=n_phases)[:n_phases]
    return own, np.bincount(op_phase[mine], minlength=n_phases)[:n_phases] == 0


def cross_thread_phases(pid: np.ndarray, tid: np.ndarray, name: list[str], own_ops: np.ndarray, mode: str | int) -> np.ndarray:
    """Per phase instance: does it take work launched by other threads? (module doc)"""
    n = len(pid)
    if mode == SAME or n == 0:
        return np.zeros(n, dtype=bool)
    if isinstance(mode, int):
        return np.asarray(tid) == mode
    codes: dict[str, int] = {}
    name_code = np.array([codes.setdefault(x, len(codes)) for x in name], dtype=np.int64)
    _, group = np.unique(np.asarray(pid, np.int64) * max(len(codes), 1) + name_code, return_inverse=True)
    group = group.ravel()
    instances = np.bincount(group)
    launched_nothing = np.bincount(group, weights=(np.asarray(own_ops) == 0)).astype(np.int64)
    return (2 * launched_nothing > instances)[group]


def attribute_other_threads(
    call_pid: np.ndarray,
    call_tid: np.ndarray,
    call_time: np.ndarray,
    owner: np.ndarray,
    phase_pid: np.ndarray,
    phase_tid: np.ndarray,
    phase_start: np.ndarray,
    phase_end: np.ndarray,
    takes_cross: np.ndarray,
    launched_nothing: np.ndarray | None = None,
) -> np.ndarray:
    """Owner phase of every call, after cross-thread attribution.

    ``owner`` is the same-thread owner (-1: none). A call still unowned, made on a thread other
    than the phase's, gets the ``takes_cross`` phase of its process whose CPU span
    ``[start, end)`` holds ``call_time``; if several do (spans nest, or phases of two threads
    overlap), one that launched nothing itself (``launched_nothing``, where given) before one
    that made copies of its own (an output thread's `.tolist()`), then the latest-starting
    one (one that started later but had closed does not count).
    """
    out = owner.copy()
    if launched_nothing is not None and (takes_cross & launched_nothing).any() and (takes_cross & ~launched_nothing).any():
        out = _attribute(call_pid, call_tid, call_time, out, phase_pid, phase_tid, phase_start, phase_end, takes_cross & launched_nothing)
    return _attribute(call_pid, call_tid, call_time, out, phase_pid, phase_tid, phase_start, phase_end, takes_cross)


def _attribute(call_pid: np.ndarray, call_tid: np.ndarray, call_time: np.ndarray, owner: np.ndarray, phase_pid: np.ndarray, phase_tid: np.ndarray,
               phase_start: np.ndarray, phase_end: np.ndarray, takes_cross: np.ndarray) -> np.ndarray:
    """``attribute_other_threads`` among the ``takes_cross`` phases alone: the latest-starting
    one open at each unowned call of another thread."""
    out = owner.copy()
    cand = np.flatnonzero(takes_cross)
    if len(cand) == 0 or len(out) == 0:
        return out
    free = np.flatnonzero(out < 0)
    for p in np.unique(phase_pid[cand]):
        ph = cand[phase_pid[cand] == p]
        ph = ph[np.argsort(phase_start[ph], kind="stable")]
        sel = free[call_pid[free] == p]
        if len(sel) == 0:
            continue
        pos = _latest_open(phase_end[ph], np.searchsorted(phase_start[ph], call_time[sel], side="right") - 1, call_time[sel])
        ok = pos >= 0
        k = ph[np.maximum(pos, 0)]
        ok &= call_tid[sel] != phase_tid[k]
        out[sel[ok]] = k[ok]
    return out


def stream_deciding_ops(thread_computes: np.ndarray, moved: np.ndarray) -> np.ndarray:
    """Which ops may decide a phase's stream (``phase_streams.phase_streams``) once work of other
    threads was attributed (``moved``: those ops' rows): all of them, except the moved ops of
    a thread that never runs a kernel in its process (``thread_computes``, per op: whether its
    launching thread does, ``phase_streams.CopyStreams``; such a thread only copies, as a KV-cache
    offload thread does). Such a thread's copies still count in the phase's ops, but they never
    make their stream the one the phase's events would be recorded on: a phase with nothing
    else reads like one that launched nothing."""
    prefer = np.ones(len(thread_computes), dtype=bool)
    prefer[moved] = np.asarray(thread_computes, dtype=bool)[moved]
    return prefer


def _latest_open(ends: np.ndarray, pos: np.ndarray, t: np.ndarray) -> np.ndarray:
    """For each query: the largest j <= ``pos`` with ``ends[j] > t`` (-1: none); ``ends`` in
    the spans' start order (``intervals.last_reaching``)."""
    return last_reaching(np.asarray(ends, dtype=np.int64), pos, np.asarray(t, dtype=np.int64), strict=True)
