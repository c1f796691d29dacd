"""SGLang's overlap loop in miniature, for checking tracerecon on a real trace (issue 6's rule:
what would CUDA events at each phase boundary read?). Each batch: schedule (a small kernel on the
default stream), forward (the forward stream waits for the default one, then ~2 ms of matmuls
on it, then a copy-done event), process (waits on the CPU for the previous batch's copy-done
event, then 0.3 ms of CPU work). The default stream never waits for the forward stream, as in
SGLang's event_loop_overlap. Phases are NVTX ranges at the scheduler's level (torch.cuda.nvtx),
inside a ``cycle N`` range; CUDA events are recorded on the default stream (current at every
boundary) and, around forward's own work, on the forward stream. Ground truth per batch goes to
``--gt`` as JSON lines.

    nsys profile -t cuda,nvtx -o out python3 launch/overlap_loop_probe.py --gt gt.jsonl
"""

from __future__ import annotations

import argparse
import json
import time

import torch


def spin(ms: float) -> None:
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        pass


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--gt", required=True)
    args = ap.parse_args()
    dev = torch.device("cuda")
    default = torch.cuda.current_stream()
    fwd = torch.cuda.Stream()
    a = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
    state = torch.zeros(1024, device=dev)
    nvtx = torch.cuda.nvtx
    pending = None
    rows = []
    for i in range(-args.warmup, args.batches):
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]  # default stream, at the 4 boundaries
        fev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]  # forward stream, around its work
        t0 = time.perf_counter()
        nvtx.range_push(f"cycle {i}" if i >= 0 else "warmup")
        ev[0].record(default)
        nvtx.range_push("schedule")
        state.add_(1.0)  # a small kernel on the default stream
        spin(0.2)
        nvtx.range_pop()
        ev[1].record(default)
        nvtx.range_push("forward")
        fwd.wait_stream(default)
        with torch.cuda.stream(fwd):
            fev[0].record(fwd)
            x = a
            for _ in range(4):
                x = x @ b
            fev[1].record(fwd)
            done = torch.cuda.Event()
            done.record(fwd)
        nvtx.range_pop()
        ev[2].record(default)
        nvtx.range_push("process")
        if pending is not None:
            pending.synchronize()  # the previous batch's results
        spin(0.3)
        nvtx.range_pop()
        ev[3].record(default)
        nvtx.range_pop()
        pending = done
        if i >= 0:
            rows.append((i, ev, fev, (time.perf_counter() - t0) * 1e3))
    torch.cuda.synchronize()
    with open(args.gt, "w") as fh:
        for i, ev, fev, cpu in rows:
            names = ("schedule", "forward", "process")
            rec = {"cycle": i, "cpu_ms": cpu,
                   "default_stream_ms": {n: ev[k].elapsed_time(ev[k + 1]) for k, n in enumerate(names)},
                   "forward_stream_work_ms": fev[0].elapsed_time(fev[1])}
            fh.write(json.dumps(rec) + "\n")
    print(f"{args.batches} batches", flush=True)


if __name__ == "__main__":
    main()
