"""A phase whose current stream is not the loop's, instrumented with ``tracerecon.instrument``
(which marks each phase's current stream as it begins), for checking tracerecon on real traces
against the engine's own CUDA events, cycle by cycle.

Each cycle is ``cycle N`` holding ``prepare`` (one layer on the loop's stream), ``forward`` (six
layers on a forward stream F, forked off the loop's stream as forward begins) and ``sample``
(joins F back into the loop's stream, one small kernel, ``.item()``). The kernels and the waits
are the same in every shape; only the stream current at forward's boundaries differs:

- ``switch_outside``: forward's range runs inside ``with torch.cuda.stream(F)`` (SGLang's
  forward stream): F is current, events at its boundaries go on F.
- ``switch_inside``: forward's range runs on the loop's stream and forks F inside it (a side
  stream joined back in the next phase): the loop's stream is current.
- ``alternate``: even cycles as ``switch_outside``, odd ones as ``switch_inside``.
- ``ahead_outside``, ``ahead_inside``, ``ahead_alternate``: the same, with the CPU a cycle ahead
  of the GPU (SGLang's overlap scheduler, vLLM's async scheduling): sample copies its token to
  pinned memory without waiting and reads the previous cycle's token, so the CPU launches cycle
  N+1 while the GPU still runs cycle N's forward.
- ``graph_*`` (after ``ahead_`` where both): forward's six layers are one CUDA graph, captured
  before the loop and replayed on the stream current where forward launches them (the input
  copied into the graph's static buffer first), as engines replay their decode graphs.

Ground truth (``--gt``, JSON lines as ``stream_shapes_probe.py`` writes): at every boundary an
event on the current stream of the phase either side (phases tile their cycle, so a boundary is
read on both; the later of the two is the boundary), and each phase's milliseconds between its
two boundaries. ``TRACERECON_STREAM_MARKS=0`` leaves the marks out (the same trace as an engine
instrumented otherwise would give).

    nsys profile -t cuda,nvtx --sample=none --cpuctxsw=none -o out python3 launch/stream_marks_probe.py --shape S --gt gt.jsonl
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import time

import torch

from tracerecon.instrument import cycle, phase

PHASES = ("prepare", "forward", "sample")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", required=True, choices=[f"{a}{g}{s}" for a in ("", "ahead_") for g in ("", "graph_")
                                                            for s in ("switch_outside", "switch_inside", "alternate")])
    ap.add_argument("--cycles", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--gt", required=True)
    args = ap.parse_args()
    dev = torch.device("cuda")
    w = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16) / 64
    x = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
    loop = torch.cuda.current_stream()
    fwd = torch.cuda.Stream()

    def chain(y: torch.Tensor, n: int) -> torch.Tensor:
        for _ in range(n):
            y = y @ w
        return y

    fwd.wait_stream(loop)
    with torch.cuda.stream(fwd):
        chain(x, 1)  # cuBLAS's workspace for F, before the loop
    loop.wait_stream(fwd)
    torch.cuda.synchronize()
    ahead = args.shape.startswith("ahead_")
    graphed = args.shape.removeprefix("ahead_").startswith("graph_")
    shape = args.shape.removeprefix("ahead_").removeprefix("graph_")
    if graphed:
        static_in = x.clone()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):  # captured on a stream of its own, not a phase: no marks
            static_out = chain(static_in, 6)
        torch.cuda.synchronize()

    def layers(y: torch.Tensor) -> torch.Tensor:
        """Forward's six layers on the current stream: launched one by one, or the graph replayed."""
        if not graphed:
            return chain(y, 6)
        static_in.copy_(y)
        graph.replay()
        return static_out

    # No collector pauses in the loop: a pause between the engine's boundary events and the next
    # range (0.35-0.47 ms in earlier runs) moves that boundary by as much (tracerecon reads a
    # boundary at the later range's start; sample_traces/README.md).
    gc.collect()
    gc.disable()
    tokens = [torch.empty(8, device="cpu", dtype=torch.float32).pin_memory() for _ in range(2)]
    pending = None  # the previous cycle's (token, copy-done event), when the CPU runs ahead
    rows = []
    for i in range(-args.warmup, args.cycles):
        outside = shape.endswith("outside") or (shape == "alternate" and i % 2 == 0)
        current = [loop, fwd if outside else loop, loop]  # each phase's current stream

        def boundary(k: int) -> list:
            events = []
            for s in {id(s): s for s in current[max(k - 1, 0):k + 1]}.values():
                e = torch.cuda.Event(enable_timing=True)
                e.record(s)
                events.append(e)
            return events

        t0 = time.perf_counter()
        ranged = i >= 0  # warm-up cycles run unmarked
        span = phase if ranged else (lambda name: contextlib.nullcontext())
        with cycle(i) if ranged else contextlib.nullcontext():
            b = [boundary(0)]
            with span("prepare"):
                y = chain(x, 1)
            b.append(boundary(1))
            if outside:
                with torch.cuda.stream(fwd), span("forward"):
                    fwd.wait_stream(loop)
                    out = layers(y)
            else:
                with span("forward"):
                    fwd.wait_stream(loop)
                    with torch.cuda.stream(fwd):
                        out = layers(y)
            b.append(boundary(2))
            with span("sample"):
                loop.wait_stream(fwd)
                out.record_stream(loop)
                if ahead:
                    host = tokens[i % 2]
                    host.copy_(out[0, :8].float(), non_blocking=True)
                    done = torch.cuda.Event()
                    done.record(loop)
                    if pending is not None:
                        pending[1].synchronize()  # the previous cycle's token: the GPU is on this one
                    token = None if pending is None else pending[0].sum().item()
                    pending = (host, done)
                else:
                    token = out[0, :8].float().sum().item()
            b.append(boundary(3))
        cpu_ms = (time.perf_counter() - t0) * 1e3
        rows.append((i, b, cpu_ms, outside, token))
    torch.cuda.synchronize()
    gc.enable()
    with open(args.gt, "w") as fh:
        for i, b, cpu_ms, outside, _ in rows:
            if i < 0:
                continue
            ref = b[0][0]
            at = [max(ref.elapsed_time(e) for e in events) for events in b]
            rec = {"cycle": i, "cpu_ms": cpu_ms, "shape": args.shape, "pid": os.getpid(),
                   "forward_stream_current": outside, "phase_ms": {n: at[k + 1] - at[k] for k, n in enumerate(PHASES)},
                   "cycle_ms": at[-1] - at[0]}
            fh.write(json.dumps(rec) + "\n")
    print(f"{args.cycles} cycles of {args.shape}")


if __name__ == "__main__":
    main()
