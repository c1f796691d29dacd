"""Event model of one rank's vLLM decode steps under Dual Batch Overlap (--enable-dbo), written
apart from tracerecon (no tracerecon import).

Shape (vLLM v0.11+ sources):
- vllm/v1/worker/gpu_model_runner.py execute_model: main thread; record_function_or_nullcontext
  scopes "gpu_model_runner: preprocess" / "forward" / "postprocess" / "sample" / "bookkeep"
  (NVTX when VLLM_NVTX_SCOPES_FOR_PROFILING=1).
- vllm/v1/worker/gpu_ubatch_wrapper.py UBatchWrapper.__call__: compute_stream =
  torch.cuda.current_stream() (the main thread's stream S), _run_ubatches: a new thread per
  micro-batch each step, ready_barrier.wait(), ctx[0].cpu_wait_event.set(), join both, then
  torch.cat of the results (a kernel on S, main thread). comm_stream: one side stream C made once.
- vllm/v1/worker/ubatching.py UBatchContext: both micro-batches share S and C; per micro-batch
  gpu_compute_done_event / gpu_comm_done_event. yield_and_switch_from_compute_to_comm:
  record compute_done on S, CPU yield (signal the peer, wait for own turn), C.wait(compute_done).
  yield_and_switch_from_comm_to_compute: record comm_done on C, yield, S.wait(comm_done).
  dbo_yield (DeepEP LL with recv hooks): CPU yield only, everything on S.
  Threads run by turns: ub0 seg0, ub1 seg0, ub0 seg1, ... ; __exit__ of ub0 signals ub1, which
  runs its last segment alone.

The model keeps, per stream, (CPU instant queued, GPU end) of everything queued on it, to answer
what a CUDA event recorded on a stream at a CPU instant reads. Times in us.
"""
from __future__ import annotations

from nsys_factory import FakeTrace
from stream_log import StreamLog

U = 1000
# DeepEP normal-mode kernels as nsys names them (tests/tbo_model.py uses the same)
N_DISPATCH = "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*, float*, int*, long*, int4*, float*, int*, int*, int*, int*, int, int, int, int, int, int, void**, int, int, int)"
N_COMBINE = "void deep_ep::intranode::combine<__nv_bfloat16, 8, 768>(int4*, float*, int4*, float const*, float const*, int const*, int*, int*, int, int, int, int, void**, int, int, int, int)"
N_NOTIFY = "void deep_ep::intranode::notify_dispatch<8>(int const*, int*, int, int const*, int*, int, int, bool const*, int*, int*, int*, int, int, void**, int**, int)"
LAYOUT = "void deep_ep::layout::get_dispatch_layout<256, 32, 8>(long const*, int*, int*, int*, bool*, int, int, int, int)"
REAL_NAMES = True
S, C, X = 7, 30, 40  # X: DeepEP Buffer comm stream; main thread's (compute) stream, UBatchWrapper.comm_stream
MAIN = None  # main thread tid (= pid)


class Model(StreamLog):
    def __init__(self):
        super().__init__()
        self.t = FakeTrace()
        self.cpu = 0
        self.phases: list[list] = []  # [cycle, label, tid, stream, a, b]
        self.next_event = 1
        self.rec_stream = {}

    def kernel(self, s, dur, tid, name="k"):
        cpu = self.cpu
        start = self.start(s, cpu + 2)
        self.t.kernel(self.t.call("cudaLaunchKernel", cpu * U, (cpu + 2) * U, tid=tid), start * U, (start + dur) * U, stream=s, name=name)
        self.queue(s, cpu + 2, start + dur)
        self.cpu += 3

    def copy(self, s, dur, tid, kind):  # noqa
        cpu = self.cpu
        start = self.start(s, cpu + 2)
        self.t.copy(self.t.call("cudaMemcpyAsync", cpu * U, (cpu + 2) * U, tid=tid), start * U, (start + dur) * U, kind=kind, stream=s)
        self.queue(s, cpu + 2, start + dur)
        self.cpu += 3

    def new_event(self):
        self.next_event += 1
        return self.next_event

    def record(self, ev, s, tid):
        ev, r = self.recorded(ev, s, self.cpu + 1)
        self.t.event_record(event=ev, record=r, start=self.cpu * U, end=(self.cpu + 1) * U, tid=tid, stream=s)
        self.rec_stream[ev] = s
        self.cpu += 1
        return ev, r

    def wait(self, s, ev, tid):
        r = self.records[ev]
        self.t.stream_wait(event=ev, record=r, start=self.cpu * U, end=(self.cpu + 1) * U, tid=tid, stream=s)
        self.queue(s, self.cpu + 1, self.record_done[(ev, r)], work=False)
        self.cpu += 1

    def event_sync(self, ev, tid):
        r = self.records[ev]
        back = max(self.cpu + 2, self.record_done[(ev, r)] + 1)
        self.t.sync_record(self.t.call("cudaEventSynchronize", self.cpu * U, back * U, tid=tid), self.cpu * U, back * U, sync_type=1, stream=S)
        self.cpu = back + 1

    # ranges -------------------------------------------------------------
    def open(self, name, tid, cycle, label, stream=S):
        self.t.range(name, self.cpu * U, None, tid=tid)
        idx = len(self.t.nvtx) - 1
        if label is not None:
            self.phases.append([cycle, label, tid, stream, self.cpu, None])
        return (idx, len(self.phases) - 1 if label is not None else None)

    def close(self, h):
        idx, p = h
        self.t.nvtx[idx]["end"] = self.cpu * U
        if p is not None:
            self.phases[p][5] = self.cpu


def ubatch_ops(layers, u, cfg, c):
    """Ops of micro-batch u's model forward: 'k' kernels, 'c2m' / 'm2c' yield-and-switch,
    'y' plain dbo_yield (LL), 'open'/'close' ubatch-thread ranges."""
    ops = []
    attn = cfg["attn"][u] if isinstance(cfg["attn"], (list, tuple)) else cfg["attn"]
    if callable(attn):
        attn = attn(c)
    comm = cfg["comm"]
    if callable(comm):
        comm = comm(c)
    lw = cfg.get("layerwise")
    for L in range(layers):
        if lw:
            ops += [("open", "attn"), ("cpu", cfg["cpu_layer"]), ("k", S, attn, "attn"), ("close", "attn"), ("open", "moe"), ("k", S, 5, "gate")]
        else:
            ops += [("cpu", cfg["cpu_layer"]), ("k", S, attn, "attn"), ("k", S, 5, "gate")]
        if cfg["mode"] == "ht":
            ops += [("c2m",), ("k", C, comm, "dispatch"), ("m2c",), ("k", S, cfg["mlp"], "mlp"),
                    ("c2m",), ("k", C, comm, "combine"), ("m2c",), ("k", S, 4, "residual")]
        elif cfg["mode"] == "deepep_ht":
            # deepep_ht_prepare_finalize._do_dispatch / _finalize under DBO (see module doc)
            ops += [("c2m",), ("rec", "pe", C), ("wait", X, "pe"), ("k", X, 3, LAYOUT if REAL_NAMES else "get_dispatch_layout"), ("rec", "x", X), ("wait", C, "x"),
                    ("wait", X, "pe"), ("k", X, 3, N_NOTIFY if REAL_NAMES else "notify_dispatch"), ("spin", X), ("k", X, comm, N_DISPATCH if REAL_NAMES else "dispatch"), ("rec", "x", X), ("wait", C, "x"),
                    ("rec", "md", C), ("wait", S, "md"),  # dbo_switch_to_compute_sync: no yield
                    ("copy", S, 1, 1), ("k", S, 2, "where"), ("k", S, cfg["mlp"], "experts"), ("k", S, 3, "weight_and_reduce"),
                    ("c2m",), ("rec", "pe", C), ("wait", X, "pe"), ("k", X, comm, N_COMBINE if REAL_NAMES else "combine"), ("rec", "x", X), ("wait", C, "x"),
                    ("switch",),  # dbo_switch_to_compute: no sync
                    ("k", S, cfg.get("shared", 15), "shared_experts"),
                    ("copy", C, 2, 8),  # _receiver: dbo_switch_to_comm, output.copy_ (device to device)
                    ("m2c",), ("k", S, 4, "residual")]
        else:  # LL: send, yield, recv hook on S
            ops += [("k", S, 4, "dispatch_send"), ("y",), ("k", S, comm, "dispatch_recv"), ("k", S, cfg["mlp"], "mlp"),
                    ("k", S, 4, "combine_send"), ("y",), ("k", S, comm, "combine_recv"), ("k", S, 4, "residual")]
        if lw:
            ops += [("close", "moe")]
    ops += [("k", S, 6, "norm")]
    return ops


def run_ubatches(m: Model, c, cfg, tids, ub_ranges):
    """Two ubatch threads taking turns (one CPU runs at a time)."""
    if cfg.get("reuse_events"):  # the same CUDA event ids every step (a driver reusing freed handles)
        ev = {u: {k: 500 + 10 * u + j for j, k in enumerate(("cd", "md", "pe", "x"))} for u in (0, 1)}
    else:
        ev = {u: {"cd": m.new_event(), "md": m.new_event(), "pe": m.new_event(), "x": m.new_event()} for u in (0, 1)}
    progs = [ubatch_ops(cfg["layers"], u, cfg, c) for u in (0, 1)]

    def thread(u):
        tid = tids[u]
        h = None
        hs = {}
        if ub_ranges:
            name = ub_ranges if isinstance(ub_ranges, str) else ub_ranges[u]
            label = name if isinstance(ub_ranges, str) else ("ub0", "ub1")[u]
            h = m.open(name, tid, c, cfg.get("ub_label", {}).get(name, label))
        for op in progs[u]:
            k = op[0]
            if k == "cpu":
                m.cpu += op[1]
            elif k == "k":
                m.kernel(op[1], op[2], tid, op[3])
            elif k == "c2m":
                m.record(ev[u]["cd"], S, tid)
                yield
                m.wait(C, ev[u]["cd"], tid)
            elif k == "m2c":
                m.record(ev[u]["md"], C, tid)
                yield
                m.wait(S, ev[u]["md"], tid)
            elif k == "y":
                yield
            elif k == "rec":
                m.record(ev[u][op[1]], op[2], tid)
            elif k == "wait":
                m.wait(op[1], ev[u][op[2]], tid)
            elif k == "spin":  # DeepEP normal dispatch: the CPU busy-waits for notify (host-mapped memory)
                m.cpu = max(m.cpu, m.free[op[1]] + 1)
            elif k == "copy":
                m.copy(op[1], op[2], tid, op[3])
            elif k == "switch":
                pass
            elif k == "open":
                hs[op[1]] = m.open(op[1], tid, c, op[1])
            elif k == "close":
                m.close(hs.pop(op[1]))
        m.cpu += 2
        if h is not None:
            m.close(h)

    gens = [thread(0), thread(1)]
    alive = [True, True]
    cur = 0
    m.cpu += cfg["wake"]
    while any(alive):
        if alive[cur]:
            try:
                next(gens[cur])
            except StopIteration:
                alive[cur] = False
            m.cpu += cfg["wake"]  # hand-off: the other thread wakes
        cur = 1 - cur


def run_plain(m: Model, c, cfg):
    """The model on the main thread, DBO's switches no-ops: every 'comm' op on the current stream S."""
    ev = {k: m.new_event() for k in ("cd", "md", "pe", "x")}
    for op in ubatch_ops(cfg["layers"], 0, cfg, c):
        k = op[0]
        sm = lambda s: S if s == C else s  # noqa: E731
        if k == "cpu":
            m.cpu += op[1]
        elif k == "k":
            m.kernel(sm(op[1]), op[2], MAIN, op[3])
        elif k == "rec":
            m.record(ev[op[1]], sm(op[2]), MAIN)
        elif k == "wait":
            if sm(op[1]) != m_last_stream(m, ev[op[2]]):
                m.wait(sm(op[1]), ev[op[2]], MAIN)
        elif k == "spin":
            m.cpu = max(m.cpu, m.free[op[1]] + 1)
        elif k == "copy":
            m.copy(sm(op[1]), op[2], MAIN, op[3])


def m_last_stream(m, ev):
    return m.rec_stream.get(ev)


DEFAULT = dict(mode="ht", layers=3, attn=20, mlp=25, comm=15, cpu_layer=4, wake=8, gap=60, cycles=4,
               pre_copy=5, logits=30, sample=10)


def decode_steps(marks="main", **kw):
    """``marks``: 'main' (the V1 runner's scopes on the main thread), 'ubatch_same' (a range
    'model_forward' on each ubatch thread, e.g. a wrapped model.forward), 'ubatch_named'
    ('ubatch 0' / 'ubatch 1'), 'both' (main scopes + ubatch ranges). Returns model and truth."""
    cfg = dict(DEFAULT, **kw)
    m = Model()
    m.cpu = 100
    tid_next = 1000
    for c in range(cfg["cycles"]):
        m.cpu += cfg["gap"]  # scheduler / output processing, in no phase
        h = m.open("gpu_model_runner: preprocess", MAIN, c, "prepare")
        m.cpu += 5
        m.copy(S, cfg["pre_copy"], MAIN, kind=1)
        m.kernel(S, 3, MAIN, "prepare_inputs")
        m.cpu += 5
        m.close(h)
        m.cpu += 2
        fwd_label = "verify" if marks in ("main", "both") else None
        h = m.open("gpu_model_runner: forward", MAIN, c, fwd_label)
        m.cpu += 10  # UBatchWrapper: metadata, thread start, barrier
        tids = (tid_next, tid_next + 1)
        tid_next += 2
        ub = {"main": None, "both": "model_forward", "ubatch_same": "model_forward", "ubatch_named": ("ubatch 0", "ubatch 1"),
              "main_noforward": None}[marks]
        if c in cfg.get("no_dbo", ()):  # ubatching skipped this step (below the DBO token threshold): main runs the model
            run_plain(m, c, cfg)
        else:
            run_ubatches(m, c, cfg, tids, ub)
        m.cpu += 5  # join
        if not cfg.get("no_cat"):
            m.kernel(S, 3, MAIN, "cat")
        m.cpu += 2
        m.close(h)
        m.cpu += 2
        h = m.open("gpu_model_runner: postprocess", MAIN, c, "verify")
        m.kernel(S, cfg["logits"], MAIN, "logits")
        m.cpu += 3
        m.close(h)
        m.cpu += 2
        h = m.open("gpu_model_runner: sample", MAIN, c, "sample")
        m.kernel(S, cfg["sample"], MAIN, "sample")
        m.cpu += 3
        m.close(h)
        m.cpu += 2
        h = m.open("gpu_model_runner: bookkeep", MAIN, c, "bookkeep")
        m.copy(S, 2, MAIN, kind=2)
        e = m.new_event()
        m.record(e, S, MAIN)
        m.event_sync(e, MAIN)
        m.cpu += 5
        m.close(h)
    return m, truth(m)


def truth(m: Model):
    """Per (cycle, label): events on the phase's stream at its boundaries. Phases sorted by CPU
    start; where the next phase (same cycle) starts after this one ends and no GPU work was queued
    between, this one ends at the next one's start; overlapping ranges are read alone."""
    ph = [list(p) for p in sorted(m.phases, key=lambda p: p[4])]
    out: dict[tuple[int, str], int] = {}
    for k, (c, label, tid, s, a, b) in enumerate(ph):
        nxt = ph[k + 1] if k + 1 < len(ph) else None
        if nxt is not None and nxt[0] == c and nxt[4] >= b and not any(b <= q <= nxt[4] for q in m.launches):
            if nxt[2] == tid:
                b = nxt[4]
            else:  # hand-off to another thread: tracerecon's convention, the boundary is this one's end
                nxt[4] = b
        out[(c, label)] = out.get((c, label), 0) + m.reads(s, b) - m.reads(s, a)
    return out
