"""An event model of SGLang TBO / DeepEP / alt_stream decode steps, written apart from tracerecon.

Each rank runs the same program (a list of ops, in program order) on one CPU thread. The model
advances the CPU clock, queues GPU work on streams (FIFO), follows event records / stream waits,
and lets a DeepEP receive kernel finish no earlier than its peer's matching send was done
(cross-rank dependency, resolved in lock-step: both ranks run op i before op i+1).
It writes one FakeTrace per rank and keeps, per stream, (CPU instant queued, GPU end) of
everything queued on it, to answer what a CUDA event recorded on a stream at a CPU instant reads.
"""

from __future__ import annotations

import sqlite3

from nsys_factory import FakeTrace
from stream_log import StreamLog

U = 1000
LL_DISPATCH = "void deep_ep::internode_ll::dispatch<false, 3, 7168>(void*, void*, int*, long*, void*, int*, int*, long*, void const*, long const*, int*, int*, int, int, int, int, int, int, int, bool, int)"
LL_COMBINE = "void deep_ep::internode_ll::combine<false, 7168>(void*, void*, int*, void*, void const*, long const*, float const*, int const*, long const*, int*, int*, int, int, int, int, int, int, int, int, bool, int)"
N_DISPATCH = "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*, float*, int*, long*, int4*, float*, int*, int*, int*, int*, int, int, int, int, int, int, void**, int, int, int)"
N_COMBINE = "void deep_ep::intranode::combine<__nv_bfloat16, 8, 768>(int4*, float*, int4*, float const*, float const*, int const*, int*, int*, int, int, int, int, void**, int, int, int, int)"
N_NOTIFY = "void deep_ep::intranode::notify_dispatch<8>(int const*, int*, int, int const*, int*, int, int, bool const*, int*, int*, int*, int, int, void**, int**, int)"
LAYOUT = "void deep_ep::layout::get_dispatch_layout<256, 32, 8>(long const*, int*, int*, int*, bool*, int, int, int, int)"


EVENT_IDS: dict = {}


class Rank(StreamLog):
    def __init__(self, pid: int):
        super().__init__()
        self.pid = pid
        self.t = FakeTrace()
        self.cpu = 0
        self.open: dict[str, int] = {}
        self.phases: list[list] = []  # [cycle, label, name, stream, cpu_start, cpu_end]
        self.sends: dict[str, int] = {}  # tag -> GPU end of this rank's send



def run(program: list[tuple], n_ranks: int = 2, slow: dict | None = None):
    """``program``: ops; a duration may be a dict {rank: us} for per-rank times."""
    ranks = [Rank(10 + r) for r in range(n_ranks)]
    for op in program:
        kind = op[0]
        if kind == "coll":
            _, s, d, name = op
            dur0 = lambda d, r: d[r] if isinstance(d, dict) else d  # noqa: E731
            starts = [R.start(s, R.cpu + 2) for R in ranks]
            for r, R in enumerate(ranks):
                end = max(starts) + dur0(d, r)
                R.t.kernel(R.t.call("cudaLaunchKernel", R.cpu * U, (R.cpu + 2) * U, pid=R.pid), starts[r] * U, end * U, pid=R.pid, stream=s, name=name,
                           short=name.split("(")[0].split("<")[0].split("::")[-1])
                R.queue(s, R.cpu + 2, end)
                R.cpu += 3
            continue
        for r, R in enumerate(ranks):
            t = R.t
            dur = lambda d: d[r] if isinstance(d, dict) else d  # noqa: E731
            if kind == "cpu":
                R.cpu += dur(op[1])
            elif kind == "open":
                _, name, cycle, label, stream = op
                t.range(name, R.cpu * U, None, pid=R.pid)  # end filled at close
                R.open[name] = len(t.nvtx) - 1
                if label is not None:
                    R.phases.append([cycle, label, name, stream, R.cpu, None])
            elif kind == "close":
                i = R.open.pop(op[1])
                t.nvtx[i]["end"] = R.cpu * U
                for p in reversed(R.phases):
                    if p[2] == op[1] and p[5] is None:
                        p[5] = R.cpu
                        break
            elif kind == "cycle_open":
                t.range(f"cycle {op[1]}", R.cpu * U, None, pid=R.pid)
                R.open[f"cycle {op[1]}"] = len(t.nvtx) - 1
            elif kind == "cycle_close":
                i = R.open.pop(f"cycle {op[1]}")
                t.nvtx[i]["end"] = R.cpu * U
            elif kind in ("k", "send", "recv"):
                _, s, d, name = op[:4]
                tag = op[4] if len(op) > 4 else None
                start = R.start(s, R.cpu + 2)
                if kind == "recv":
                    # DeepEP's receive spins until every peer's matching send is done
                    peers = [Q.sends[tag] for q, Q in enumerate(ranks) if q != r]
                    end = max(start, *peers) + dur(d)
                else:
                    end = start + dur(d)
                if kind == "send":
                    R.sends[tag] = end
                t.kernel(t.call("cudaLaunchKernel", R.cpu * U, (R.cpu + 2) * U, pid=R.pid), start * U, end * U, pid=R.pid, stream=s, name=name,
                         short=name.split("(")[0].split("<")[0].split("::")[-1])
                R.queue(s, R.cpu + 2, end)
                R.cpu += 3
            elif kind == "record":
                _, ev, s = op
                ev = EVENT_IDS.setdefault(ev, len(EVENT_IDS) + 1)
                ev, n = R.recorded(ev, s, R.cpu + 1)
                t.event_record(event=ev, record=n, start=R.cpu * U, end=(R.cpu + 1) * U, pid=R.pid, stream=s)
                R.cpu += 1
            elif kind == "wait":
                _, s, ev = op
                ev = EVENT_IDS.setdefault(ev, len(EVENT_IDS) + 1)
                n = R.records[ev]
                t.stream_wait(event=ev, record=n, start=R.cpu * U, end=(R.cpu + 1) * U, pid=R.pid, stream=s)
                R.queue(s, R.cpu + 1, R.record_done[(ev, n)], work=False)
                R.cpu += 1
            elif kind == "spin":
                # DeepEP normal dispatch: the CPU busy-waits on host-mapped memory until the
                # notify kernel (the last op queued on stream s) is done; no CUDA call in the trace
                _, s = op
                R.cpu = max(R.cpu, R.free[s] + 1)
            else:
                raise ValueError(kind)
    return ranks


def truth(R: Rank):
    """Per phase instance: events on its stream at its boundaries; with no GPU work queued between
    two phases of a cycle, the earlier one ends at the later one's CPU start. Summed per (cycle, label)."""
    out: dict[tuple[int, str], int] = {}
    ph = R.phases
    for k, (c, label, name, s, a, b) in enumerate(ph):
        nxt = ph[k + 1] if k + 1 < len(ph) else None
        if nxt is not None and nxt[0] == c and not any(b <= q <= nxt[4] for q in R.launches):
            b = nxt[4]
        out[(c, label)] = out.get((c, label), 0) + R.reads(s, b) - R.reads(s, a)
    return out


def write(ranks, tmp_path, prefix="rank"):
    return [on_one_machine(R.t.write(tmp_path / f"{prefix}{i}.sqlite")) for i, R in enumerate(ranks)]


def on_one_machine(path):
    """Give a rank's export the machine's two GPUs and one session start time (per-rank reports
    taken on one machine share its clock); returns the path."""
    con = sqlite3.connect(path)
    con.executescript(
        "create table TARGET_INFO_GPU (id integer, name text, uuid text, busLocation text, smCount integer);"
        "insert into TARGET_INFO_GPU values (0, 'H200', 'A-gpu0', '0', 132), (1, 'H200', 'A-gpu1', '1', 132);"
        "create table TARGET_INFO_SESSION_START_TIME (utcEpochNs integer); insert into TARGET_INFO_SESSION_START_TIME values (5000000000000000000);")
    con.commit()
    con.close()
    return path


# ---------------------------------------------------------------- programs

S, COMM, ALT = 7, 30, 40  # forward stream, DeepEP comm stream, alt_stream


def decode_ll_stages(layers: int, slow_attn: dict, tag: str):
    """Stages of the DeepSeek decode strategy (tbo_delta_stages=2) for ``layers`` layers, LL
    DeepEP with return_recv_hook: every kernel on the forward stream. Returns a list of stages,
    each a function of the micro-batch name giving its ops."""
    def st(fn):
        return fn
    stages = []
    for L in range(layers):
        prep = [("k", S, 8, "qkv_a_proj")]
        if L == 0:
            stages.append(lambda mb, L=L, prep=prep: [("cpu", 5)] + prep)
        else:
            prev = stages.pop()
            stages.append(lambda mb, L=L, prev=prev, prep=prep: prev(mb) + [("cpu", 4)] + prep)
        stages.append(lambda mb, L=L: [("cpu", 4), ("k", S, slow_attn if mb == "a" else 20, "mla_attn"), ("k", S, 5, "gate"), ("k", S, 3, "topk")])
        stages.append(lambda mb, L=L: [("cpu", 3), ("send", S, 4, LL_DISPATCH, f"{tag}d{L}{mb}"), ("k", S, 15, "shared_experts")])
        stages.append(lambda mb, L=L: [("cpu", 3), ("recv", S, 5, LL_DISPATCH, f"{tag}d{L}{mb}"), ("k", S, 25, "deepgemm_masked"),
                                       ("send", S, 4, LL_COMBINE, f"{tag}c{L}{mb}")])
        stages.append(lambda mb, L=L: [("cpu", 3), ("recv", S, 5, LL_COMBINE, f"{tag}c{L}{mb}")])
        stages.append(lambda mb, L=L: [("cpu", 3), ("k", S, 4, "add_residual")])
    return stages


def tbo_program(stages, delta: int, cycle: int, stage_phases: bool = True):
    """execute_overlapped_operations: a runs ``delta`` stages ahead, then a/b by turns; one NVTX
    range per stage (a0, b0, ...) as SGLANG_ENABLE_NVTX_OPERATIONS writes them."""
    n = len(stages)
    order = [("a", i) for i in range(delta)]
    for i in range(n - delta):
        order += [("a", delta + i), ("b", i)]
    order += [("b", n - delta + i) for i in range(delta)]
    ops = []
    for mb, i in order:
        name = f"{mb}{i}"
        body = stages[i](mb)
        if not stage_phases:
            body = [(o[0], o[1], cycle, o[1], S) if o[0] == "open" else o for o in body]
        ops += [("open", name, cycle, f"mb_{mb}" if stage_phases else None, S)] + body + [("cpu", 2), ("close", name)]
    return ops


def decode_tbo(cycles=3, layers=2, slow_rank1_attn=(60, 20, 20)):
    """Decode steps: pre (embedding), the TBO forward, post (lm_head, sampling)."""
    prog = []
    for c in range(cycles):
        prog += [("cpu", 100), ("cycle_open", c), ("open", "pre", c, "pre", S), ("cpu", 5), ("k", S, 10, "embedding"), ("cpu", 5), ("close", "pre")]
        stages = decode_ll_stages(layers, {0: 20, 1: slow_rank1_attn[c]}, tag=f"c{c}")
        prog += tbo_program(stages, 2, c)
        prog += [("open", "post", c, "post", S), ("cpu", 5), ("k", S, 30, "lm_head"), ("k", S, 10, "sample"), ("cpu", 5), ("close", "post"),
                 ("cycle_close", c)]
    return prog


def normal_stages(layers: int, slow_attn: dict):
    """DeepSeek prefill strategy (tbo_delta_stages=0), DeepEP normal mode with async_finish:
    Buffer.capture() on the forward stream, layout / notify / dispatch / combine on DeepEP's comm
    stream, waiting for the captured event; event.current_stream_wait() joins it back."""
    stages = []
    for L in range(layers):
        s0 = lambda mb, L=L: [("cpu", 4), ("k", S, 8, "qkv_a_proj"), ("k", S, slow_attn if mb == "a" else 20, "mla_attn"), ("k", S, 5, "gate"),
                              ("k", S, 3, "topk"), ("cpu", 2), ("record", f"capd{mb}", S)]
        if L == 0:
            stages.append(s0)
        else:
            prev = stages.pop()
            stages.append(lambda mb, prev=prev, s0=s0: prev(mb) + s0(mb))
        stages.append(lambda mb, L=L: [("cpu", 3), ("wait", COMM, f"capd{mb}"), ("k", COMM, 3, LAYOUT), ("k", COMM, 3, N_NOTIFY), ("spin", COMM),
                                       ("coll", COMM, 12, N_DISPATCH), ("record", f"dd{mb}", COMM), ("wait", S, f"dd{mb}"),
                                       ("cpu", 2), ("k", S, 25, "deepgemm_contiguous"), ("record", f"capc{mb}", S)])
        stages.append(lambda mb, L=L: [("cpu", 3), ("k", S, 15, "shared_experts"), ("wait", COMM, f"capc{mb}"), ("coll", COMM, 10, N_COMBINE),
                                       ("record", f"cc{mb}", COMM), ("wait", S, f"cc{mb}"), ("k", S, 4, "add_residual")])
    return stages


def normal_tbo(cycles=3, layers=2, slow=(60, 20, 20)):
    prog = []
    for c in range(cycles):
        prog += [("cpu", 100), ("cycle_open", c), ("open", "pre", c, "pre", S), ("cpu", 5), ("k", S, 10, "embedding"), ("cpu", 5), ("close", "pre")]
        prog += tbo_program(normal_stages(layers, {0: 20, 1: slow[c]}), 0, c)
        prog += [("open", "post", c, "post", S), ("cpu", 5), ("k", S, 30, "lm_head"), ("k", S, 10, "sample"), ("cpu", 5), ("close", "post"),
                 ("cycle_close", c)]
    return prog


def alt_stream_forward(cycles=3, layers=3, routed=(40, 40, 40)):
    """deepseek_v2 forward_normal_dual_stream, eager: per layer attention on the forward stream,
    alt_stream.wait_stream(current), shared experts on current, gate + routed experts on
    alt_stream, current.wait_stream(alt_stream)."""
    prog = []
    for c in range(cycles):
        prog += [("cpu", 100), ("cycle_open", c), ("open", "prepare", c, "prepare", S), ("cpu", 5), ("k", S, 10, "embedding"), ("cpu", 5), ("close", "prepare")]
        prog += [("open", "forward", c, "forward", S)]
        for L in range(layers):
            prog += [("cpu", 3), ("k", S, 20, "mla_attn"), ("record", "fork", S), ("wait", ALT, "fork"), ("k", S, 10, "shared_experts"),
                     ("k", ALT, 5, "gate"), ("k", ALT, routed[c], "fused_moe"), ("record", "join", ALT), ("wait", S, "join"), ("cpu", 2)]
        prog += [("close", "forward"), ("open", "sample", c, "sample", S), ("cpu", 5), ("k", S, 30, "lm_head"), ("k", S, 10, "sample"), ("cpu", 5),
                 ("close", "sample"), ("cycle_close", c)]
    return prog


def _op(name, ops):
    return [("open", name, None, None, S)] + ops + [("close", name)]


def normal_stages_ops(layers: int, slow_attn: dict):
    """normal_stages with SGLANG_ENABLE_NVTX_OPERATIONS' op ranges inside each stage range."""
    stages = []
    for L in range(layers):
        s0 = lambda mb, L=L: (_op("attn", [("cpu", 4), ("k", S, 8, "qkv_a_proj"), ("k", S, slow_attn if mb == "a" else 20, "mla_attn")])
                              + _op("gate", [("k", S, 5, "gate"), ("k", S, 3, "topk")])
                              + _op("dispatch_a", [("cpu", 2), ("record", f"capd{mb}", S)]))
        if L == 0:
            stages.append(s0)
        else:
            prev = stages.pop()
            stages.append(lambda mb, prev=prev, s0=s0: prev(mb) + s0(mb))
        stages.append(lambda mb, L=L: _op("dispatch_b", [("cpu", 3), ("wait", COMM, f"capd{mb}"), ("k", COMM, 3, LAYOUT), ("k", COMM, 3, N_NOTIFY),
                                                         ("spin", COMM), ("coll", COMM, 12, N_DISPATCH), ("record", f"dd{mb}", COMM), ("wait", S, f"dd{mb}")])
                                      + _op("experts", [("cpu", 2), ("k", S, 25, "deepgemm_contiguous")])
                                      + _op("combine_a", [("record", f"capc{mb}", S)]))
        stages.append(lambda mb, L=L: _op("shared_experts", [("cpu", 3), ("k", S, 15, "shared_experts")])
                                      + _op("combine_b", [("wait", COMM, f"capc{mb}"), ("coll", COMM, 10, N_COMBINE), ("record", f"cc{mb}", COMM),
                                                          ("wait", S, f"cc{mb}")])
                                      + _op("output", [("k", S, 4, "add_residual")]))
    return stages


def normal_tbo_ops(cycles=3, layers=2, slow=(60, 20, 20)):
    prog = []
    for c in range(cycles):
        prog += [("cpu", 100), ("cycle_open", c), ("open", "pre", c, "pre", S), ("cpu", 5), ("k", S, 10, "embedding"), ("cpu", 5), ("close", "pre")]
        prog += tbo_program(normal_stages_ops(layers, {0: 20, 1: slow[c]}), 0, c, stage_phases=False)
        prog += [("open", "post", c, "post", S), ("cpu", 5), ("k", S, 30, "lm_head"), ("k", S, 10, "sample"), ("cpu", 5), ("close", "post"),
                 ("cycle_close", c)]
    return prog
