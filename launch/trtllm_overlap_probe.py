"""TensorRT-LLM's PyTorch executor loop with the overlap scheduler (``PyExecutor._executor_loop_overlap``)
in miniature, for checking tracerecon on a real trace against CUDA events (issue 6's rule).

The shape, from the executor's source: the loop runs on a worker thread; D is its current stream,
E the ``execution_stream``. Each iteration: ``_schedule`` (CPU only); CPU work in no range
(``prepare_resources``); ``E.wait_stream(D)`` right before the ``[Executor] _forward_step N: ...``
range (its name changes every iteration), the input copy and the forward on E;
``D.wait_stream(E)`` after it; ``_update_requests`` for the last batch
(``sampler_event.synchronize()``: the CPU's only wait, so it stays a forward ahead);
``_sample_async`` on D (sampling, a device-to-host copy of the tokens, ``sampler_event.record()``);
``_update_request_states``; ``_handle_responses``. No cycle ranges: TensorRT-LLM has none.

Ground truth: a CUDA event recorded at each phase's start on that phase's current stream (E for
the forward, after the fork; D for the rest) and one on D after the last phase. A phase's time is
its start event to the next phase's (the last: to the iteration's end event), so the phases of an
iteration add up to it. One JSON line per iteration to ``--gt``.

    nsys profile -t cuda,nvtx -o out python3 launch/trtllm_overlap_probe.py --gt gt.jsonl

``--fwd`` takes matmul counts per forward, cycled over the iterations ("2" every step alike,
"1,12" short and long by turns); ``--jitter`` draws each CPU phase's time from a seeded
random range, so the last sampling ends before, inside and after ``_schedule`` in different
iterations.
"""

from __future__ import annotations

import argparse
import json
import random
import threading
import time

import torch

PHASES = ("_schedule", "fwd", "_update_requests", "_sample_async", "_update_request_states", "_handle_responses")


def spin(ms: float) -> None:
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        pass


def loop(args, out: list) -> None:
    dev = torch.device("cuda")
    rng = random.Random(args.seed)
    fwd_counts = [int(x) for x in args.fwd.split(",")]
    D = torch.cuda.current_stream()
    E = torch.cuda.Stream()
    a = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
    w = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
    vocab = torch.randn(4096, 32000, device=dev, dtype=torch.bfloat16)
    ids_host = torch.zeros(4096, dtype=torch.int64).pin_memory()
    ids_dev = torch.zeros(4096, dtype=torch.int64, device=dev)
    tokens_host = torch.zeros(4096, dtype=torch.int64).pin_memory()
    (a @ w).sum().item()  # cuBLAS set up outside any range
    torch.cuda.synchronize()
    nvtx = torch.cuda.nvtx

    def cpu(lo: float, hi: float) -> None:
        spin(rng.uniform(lo, hi) if args.jitter else (lo + hi) / 2)

    sampler_event = None
    rows = []
    for i in range(args.iterations):
        starts = {}
        t0 = time.perf_counter()
        cpu_ms = {}

        def phase_start(name, stream):
            starts[name] = torch.cuda.Event(enable_timing=True)
            starts[name].record(stream)

        c = time.perf_counter()
        nvtx.range_push("_schedule")
        phase_start("_schedule", D)
        cpu(*args.schedule_ms)
        nvtx.range_pop()
        cpu(*args.prepare_ms)  # prepare_resources: in no range
        cpu_ms["_schedule"] = (time.perf_counter() - c) * 1e3
        c = time.perf_counter()
        E.wait_stream(D)
        n = fwd_counts[i % len(fwd_counts)]
        nvtx.range_push(f"[Executor] _forward_step {i}: {0 if i else 1} ctx reqs, {8 if i else 0} gen reqs")
        with torch.cuda.stream(E):
            phase_start("fwd", E)
            ids_dev.copy_(ids_host, non_blocking=True)
            x = a
            for _ in range(n):
                x = x @ w
            hidden = x[:64]
        nvtx.range_pop()
        D.wait_stream(E)
        cpu_ms["fwd"] = (time.perf_counter() - c) * 1e3
        c = time.perf_counter()
        nvtx.range_push("_update_requests")
        phase_start("_update_requests", D)
        if sampler_event is not None:
            sampler_event.synchronize()  # the last batch's tokens
        cpu(*args.update_ms)
        nvtx.range_pop()
        cpu_ms["_update_requests"] = (time.perf_counter() - c) * 1e3
        c = time.perf_counter()
        nvtx.range_push("_sample_async")
        phase_start("_sample_async", D)
        logits = hidden @ vocab
        y = a
        for _ in range(args.sample_mm):  # a heavier sampler (top-p over a large vocabulary, a drafter)
            y = y @ w
        new = (logits + y[:64, :1]).argmax(dim=-1)
        tokens_host[:64].copy_(new, non_blocking=True)
        sampler_event = torch.cuda.Event()
        sampler_event.record(D)
        nvtx.range_pop()
        cpu_ms["_sample_async"] = (time.perf_counter() - c) * 1e3
        for name, span in (("_update_request_states", args.states_ms), ("_handle_responses", args.responses_ms)):
            c = time.perf_counter()
            nvtx.range_push(name)
            phase_start(name, D)
            cpu(*span)
            nvtx.range_pop()
            cpu_ms[name] = (time.perf_counter() - c) * 1e3
        end = torch.cuda.Event(enable_timing=True)
        end.record(D)
        rows.append((i, n, starts, end, cpu_ms, (time.perf_counter() - t0) * 1e3))
    torch.cuda.synchronize()
    for i, n, starts, end, cpu_ms, cpu_total in rows:
        marks = [starts[p] for p in PHASES] + [end]
        out.append({"cycle": i, "fwd_matmuls": n, "cpu_ms": cpu_ms, "cpu_total_ms": cpu_total,
                    "gpu_event_ms": {**{p: marks[k].elapsed_time(marks[k + 1]) for k, p in enumerate(PHASES)},
                                     "total": marks[0].elapsed_time(end)}})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    span = lambda s: tuple(float(x) for x in s.split(","))  # noqa: E731  "LO,HI" in ms
    ap.add_argument("--iterations", type=int, default=80)
    ap.add_argument("--fwd", default="2", help="matmuls per forward, cycled: '2', '1,12'")
    ap.add_argument("--sample-mm", type=int, default=1, help="full-size matmuls in each sampling")
    ap.add_argument("--schedule-ms", type=span, default=(0.05, 0.3))
    ap.add_argument("--prepare-ms", type=span, default=(0.05, 0.3))
    ap.add_argument("--update-ms", type=span, default=(0.02, 0.1))
    ap.add_argument("--states-ms", type=span, default=(0.05, 0.2))
    ap.add_argument("--responses-ms", type=span, default=(0.05, 0.3))
    ap.add_argument("--jitter", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gt", required=True)
    args = ap.parse_args()
    out: list = []
    worker = threading.Thread(target=loop, args=(args, out), name="executor loop")  # as PyExecutor's worker_thread
    worker.start()
    worker.join()
    with open(args.gt, "w") as fh:
        for rec in out:
            fh.write(json.dumps(rec) + "\n")
    print(f"{len(out)} iterations", flush=True)


if __name__ == "__main__":
    main()
