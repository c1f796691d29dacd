"""vLLM V1 async scheduling (batch queue of 2) with an async output thread and EAGLE-like drafts,
for checking tracerecon on a real trace: a thread whose ranges run beside the loop's.

Main thread, cycle i (``cycle i``): schedule (CPU only), prepare_inputs (pinned H2D copy + a
scatter of the previous step's GPU-sampled ids: no CPU sync), forward (CUDA-graph replay, eager
every 6th cycle), sample, draft x k (k in 0..3; step 0 eager, later steps graph replays),
async_output (copy stream waits for the main one, non_blocking D2H of tokens and drafts into
pinned memory, a blocking event recorded on the copy stream; handed to the output thread),
update_from_output (waits for batch i-1's result from the output thread, then CPU work).
Output thread: ``output`` per batch: copy_event.synchronize(), .tolist(), CPU work; no cycle
range (``--out-cycle``: one of its own). Truth (``--gt``, JSON lines): enable_timing events on
the thread's current stream at every phase boundary (per cycle ``phases_ms``, ``draft_steps_ms``),
and around each output range (``output_of``, ``ms``). Written by a review helper; the traces in
``sample_traces/probes_h100/async_output`` came from ``launch/h100_async_output_batch.sh``.

    nsys profile -t cuda,nvtx -o out python3 launch/async_output_probe.py --gt gt.jsonl
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import random
import sys
import threading
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from launch.overlap_loop_probe import spin  # noqa: E402  (CPU work that holds the GIL, as engines' Python does)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cycles", type=int, default=80)
    ap.add_argument("--warmup", type=int, default=6)
    ap.add_argument("--marks", choices=("instr", "nvtx"), default="instr")
    ap.add_argument("--own-stream", action="store_true", help="main loop under a non-default stream")
    ap.add_argument("--gt", required=True)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--out-work", choices=("spin", "sleep"), default="spin")
    ap.add_argument("--out-cycle", action="store_true", help="the output thread marks cycle <batch> around its phase")
    args = ap.parse_args()
    sys.setswitchinterval(5e-5)
    if args.marks == "instr":
        from tracerecon.instrument import cycle as _cycle, phase as _phase

        def cyc(i):
            return _cycle(i) if i >= 0 else contextlib.nullcontext()

        def ph(name):
            return _phase(name)
    else:
        nv = torch.cuda.nvtx

        @contextlib.contextmanager
        def cyc(i):
            if i < 0:
                yield
                return
            nv.range_push(f"cycle {i}")
            try:
                yield
            finally:
                nv.range_pop()

        @contextlib.contextmanager
        def ph(name):
            nv.range_push(name)
            try:
                yield
            finally:
                nv.range_pop()

    dev = torch.device("cuda")
    torch.manual_seed(0)
    H, T, V, NS = 4096, args.tokens, 8192, 256  # hidden, tokens, vocab, sequences
    bf = torch.bfloat16
    W = [torch.randn(H, H, device=dev, dtype=bf) * 0.02 for _ in range(8)]
    Wv = torch.randn(H, V, device=dev, dtype=bf) * 0.02
    Wd = torch.randn(H, H, device=dev, dtype=bf) * 0.02
    emb = torch.randn(V, H, device=dev, dtype=bf)
    input_ids = torch.zeros(T, device=dev, dtype=torch.long)
    x_static = torch.zeros(T, H, device=dev, dtype=bf)
    h_static = torch.zeros(512, H, device=dev, dtype=bf)
    prev_sampled = torch.zeros(NS, device=dev, dtype=torch.long)
    prev_drafts = torch.zeros(NS, 3, device=dev, dtype=torch.long)
    ids_pinned = [torch.randint(0, V, (T,), dtype=torch.long).pin_memory() for _ in range(4)]
    out_pinned = [torch.zeros(NS, dtype=torch.long).pin_memory() for _ in range(6)]
    drf_pinned = [torch.zeros(NS, 3, dtype=torch.long).pin_memory() for _ in range(6)]

    def fwd_body(x, L):
        y = x
        for l in range(L):
            y = torch.relu(y @ W[l])
        return y[:NS] @ Wv, y

    def draft_body(h):
        h2 = torch.relu(h @ Wd)
        return torch.argmax(h2[:NS] @ Wv, dim=-1), h2

    # graphs: forward for each layer count, one drafter step
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for L in (4, 6, 8):
            fwd_body(x_static, L)
        draft_body(h_static)
    torch.cuda.current_stream().wait_stream(side)
    fgraphs, fouts = {}, {}
    for L in (4, 6, 8):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fouts[L] = fwd_body(x_static, L)
        fgraphs[L] = g
    dgraph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(dgraph):
        dout = draft_body(h_static)
    torch.cuda.synchronize()

    main_stream = torch.cuda.Stream() if args.own_stream else torch.cuda.current_stream()
    copy_stream = torch.cuda.Stream()
    rng = random.Random(args.seed)
    inq: queue.Queue = queue.Queue()
    out_rows = []  # (batch, ev0, ev1)

    class Fut:
        def __init__(self):
            self.ev = threading.Event()
            self.val = None

    def output_thread():
        while True:
            item = inq.get()
            if item is None:
                return
            b, cev, pin_t, pin_d, fut, _keep = item
            e0 = torch.cuda.Event(enable_timing=True)
            e1 = torch.cuda.Event(enable_timing=True)
            oc = cyc(b) if args.out_cycle else contextlib.nullcontext()
            with oc:
                e0.record()  # this thread's current stream (the default one)
                with ph("output"):
                    cev.synchronize()
                    toks = pin_t.tolist()
                    drs = pin_d.tolist()
                    if args.out_work == "spin":
                        spin(0.15)  # detokenize / build outputs
                    else:
                        time.sleep(0.00015)
                e1.record()
            fut.val = (toks[0], drs[0][0])
            fut.ev.set()
            if b >= 0:
                out_rows.append((b, e0, e1))

    th = threading.Thread(target=output_thread, name="async_output", daemon=True)
    th.start()

    rows = []
    pending = None  # previous batch's future
    ctx = torch.cuda.stream(main_stream) if args.own_stream else contextlib.nullcontext()
    with ctx:
        for i in range(-args.warmup, args.cycles):
            k = rng.choice((0, 1, 2, 3))
            L = rng.choice((4, 6, 8))
            eager = i % 6 == 0
            cur = torch.cuda.current_stream()
            evs = []  # (phase name, event at its start)

            def bound(name):
                e = torch.cuda.Event(enable_timing=True)
                e.record(cur)
                evs.append((name, e))

            t0 = time.perf_counter()
            with cyc(i):
                bound("schedule")
                with ph("schedule"):
                    spin(0.12)
                bound("prepare_inputs")
                with ph("prepare_inputs"):
                    input_ids.copy_(ids_pinned[i % 4], non_blocking=True)
                    input_ids[:NS] = prev_sampled
                    torch.index_select(emb, 0, input_ids, out=x_static)
                bound("forward")
                with ph("forward"):
                    if eager:
                        logits, hid = fwd_body(x_static, L)
                    else:
                        fgraphs[L].replay()
                        logits, hid = fouts[L]
                bound("sample")
                with ph("sample"):
                    probs = torch.softmax(logits.float(), dim=-1)
                    tokens = torch.argmax(probs, dim=-1)
                    acc = (prev_drafts[:, 0] == tokens).long()
                    tokens = tokens + 0 * acc
                    prev_sampled.copy_(tokens)
                    prev_drafts.zero_()
                    drafts = prev_drafts  # the draft steps fill it in place
                for s in range(k):
                    bound("draft")
                    with ph("draft"):
                        if s == 0:
                            h_static.copy_(hid[:512])
                            d, hnext = draft_body(h_static)
                            drafts[:, 0] = d
                        else:
                            h_static.copy_(hnext)
                            dgraph.replay()
                            drafts[:, s] = dout[0]
                            hnext = dout[1]
                        spin(0.02)
                bound("async_output")
                with ph("async_output"):
                    cev = torch.cuda.Event(blocking=True)
                    copy_stream.wait_stream(cur)
                    with torch.cuda.stream(copy_stream):
                        out_pinned[i % 6].copy_(tokens, non_blocking=True)
                        drf_pinned[i % 6].copy_(drafts, non_blocking=True)
                        cev.record(copy_stream)
                    fut = Fut()
                    inq.put((i, cev, out_pinned[i % 6], drf_pinned[i % 6], fut, (tokens, drafts)))
                bound("update_from_output")
                with ph("update_from_output"):
                    if pending is not None:
                        pending.ev.wait()
                    spin(0.08)
                bound("_end")
            pending = fut
            if i >= 0:
                rows.append(dict(cycle=i, k=k, L=L, eager=eager, cpu_ms=(time.perf_counter() - t0) * 1e3, evs=evs))
        if pending is not None:
            pending.ev.wait()
    inq.put(None)
    th.join()
    torch.cuda.synchronize()
    with open(args.gt, "w") as fh:
        for r in rows:
            evs = r.pop("evs")
            steps = []
            for j in range(len(evs) - 1):
                steps.append((evs[j][0], evs[j][1].elapsed_time(evs[j + 1][1])))
            ph_ms: dict = {}
            for n, ms in steps:
                ph_ms[n] = ph_ms.get(n, 0.0) + ms
            r["phases_ms"] = ph_ms
            r["draft_steps_ms"] = [ms for n, ms in steps if n == "draft"]
            r["gpu_ms"] = evs[0][1].elapsed_time(evs[-1][1])
            fh.write(json.dumps(r) + "\n")
        for b, e0, e1 in out_rows:
            fh.write(json.dumps({"output_of": b, "ms": e0.elapsed_time(e1)}) + "\n")
    print(f"{len(rows)} cycles, {len(out_rows)} outputs", flush=True)


if __name__ == "__main__":
    main()
