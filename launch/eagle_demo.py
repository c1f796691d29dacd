"""A small tensor-parallel EAGLE-style speculative decoder that shows why CPU phase timers lie.

Run it alone (``python launch/eagle_demo.py --device cpu``) or under torchrun on 1-8 GPUs
(NCCL) or CPUs (gloo, ``--device cpu``); the code is the same. Each cycle has three phases,
each an NVTX range from ``tracerecon.instrument`` and each timed the naive way
(``time.perf_counter()``, no synchronize):

- ``draft``: the drafter proposes ``--draft-len`` tokens (a CUDA-graph replay on GPU);
- ``verify``: the target model scores them (eager; ``--verify-graph`` replays a CUDA graph);
  its row-parallel linears all-reduce across ranks;
- ``draft_re_extend``: reads the acceptance (``.tolist()``: the CPU now waits for all queued
  GPU work) and runs the drafter once more on the accepted tokens.

On GPU, CUDA events recorded on the stream at every phase boundary give the ground truth,
written with the CPU times to ``--gt PATH`` (one JSON line per cycle; ``{rank}`` in PATH is
replaced by the rank).

Presets: ``launch-bound`` (48 thin layers: many tiny kernels) and ``gpu-bound`` (6 wide
layers: big matmuls). ``--skew RANK:PHASE:US[:even|odd]`` (repeatable) makes RANK a straggler:
it spins US microseconds on the CPU at the start of PHASE (on even or odd cycles only, if
given), so the other ranks wait in that phase's all-reduces (``--tp-draft`` gives draft
all-reduces too). ``--skew-rank R --skew-us X`` is ``--skew R:verify:X``.

Engine shapes beyond the synchronous loop (what SGLang's V2 speculative worker, vLLM's async
scheduling and older worker-thread engines do):

- ``--overlap``: one thread, a forward stream and an input stream, the CPU one cycle ahead.
  Each cycle prepares its inputs on the input stream (after the previous cycle's forward work,
  whose accepted tokens it reads), the forward stream waits for them, draft / verify /
  draft_re_extend are queued without any CPU read, the acceptance is copied to pinned memory,
  and only after the whole cycle is queued does the CPU read the *previous* cycle's result.
- ``--worker-thread``: the scheduler thread holds the cycle and phase ranges and the timers;
  a worker thread launches every kernel (the scheduler waits for the worker's ack).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout too
from tracerecon.instrument import accepted, cycle, mark_rank, phase  # noqa: E402

PRESETS = {
    "launch-bound": {"layers": 48, "hidden": 256, "tokens": 8, "vocab": 512},
    "gpu-bound": {"layers": 6, "hidden": 8192, "tokens": 512, "vocab": 4096},
}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", choices=sorted(PRESETS), default="launch-bound")
    p.add_argument("--layers", type=int)
    p.add_argument("--hidden", type=int)
    p.add_argument("--tokens", type=int, help="tokens per verify step (batch x (draft_len+1))")
    p.add_argument("--vocab", type=int)
    p.add_argument("--draft-len", type=int, default=4)
    p.add_argument("--cycles", type=int, default=20)
    p.add_argument("--warmup", type=int, default=2, help="cycles run before the measured ones (not instrumented)")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--backend", choices=["auto", "nccl", "gloo"], default="auto")
    p.add_argument("--verify-graph", action="store_true", help="replay verify from a CUDA graph (needs NCCL or one rank)")
    p.add_argument("--no-draft-graph", action="store_true", help="run draft eagerly on GPU")
    p.add_argument("--skew-rank", type=int, default=-1, help="with --skew-us: same as --skew R:verify:US")
    p.add_argument("--skew-us", type=float, default=0.0)
    p.add_argument("--skew", action="append", default=[], metavar="RANK:PHASE:US[:even|odd]",
                   help="rank RANK spins US us on the CPU at the start of PHASE (every cycle, or even/odd ones); repeatable")
    p.add_argument("--tp-draft", action="store_true", help="tensor-parallel drafter: draft all-reduces too (draft runs eagerly)")
    p.add_argument("--overlap", action="store_true", help="forward + input streams, CPU one cycle ahead (needs --device cuda)")
    p.add_argument("--worker-thread", action="store_true", help="a worker thread launches; the main thread holds phases and timers")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gt", default=None, help="write per-cycle CPU and CUDA-event times to this JSONL ({rank} expands)")
    p.add_argument("--exit-code", type=int, default=0, help="exit with this code at the end (for testing launchers)")
    args = p.parse_args(argv)
    for k, v in PRESETS[args.preset].items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    args.skews = parse_skews(args.skew) + ([(args.skew_rank, "verify", args.skew_us, "all")] if args.skew_rank >= 0 and args.skew_us > 0 else [])
    if args.overlap and args.worker_thread:
        p.error("--overlap and --worker-thread are separate engine shapes; pick one")
    return args


def parse_skews(specs: list[str]) -> list[tuple[int, str, float, str]]:
    out = []
    for spec in specs:
        parts = spec.split(":")
        if len(parts) not in (3, 4) or (len(parts) == 4 and parts[3] not in ("even", "odd", "all")):
            raise SystemExit(f"--skew {spec!r}: expected RANK:PHASE:US[:even|odd]")
        out.append((int(parts[0]), parts[1], float(parts[2]), parts[3] if len(parts) == 4 else "all"))
    return out


def skew_us(skews, rank: int, phase_name: str, cycle_index: int) -> float:
    """CPU spin planted on (rank, phase) in this cycle."""
    total = 0.0
    for r, ph, us, parity in skews:
        if r == rank and ph == phase_name and (parity == "all" or (cycle_index % 2 == 0) == (parity == "even")):
            total += us
    return total


class Dist:
    """World size, rank and the collectives; a world of one when not under torchrun."""

    def __init__(self, device: str, backend: str) -> None:
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        if device == "cuda":
            n = torch.cuda.device_count()
            self.device = torch.device("cuda", self.local_rank % n)
            torch.cuda.set_device(self.device)
        else:
            n = 0
            self.device = torch.device("cpu")
        if backend == "auto":
            # NCCL needs one GPU per rank; ranks sharing a GPU (or CPUs) use gloo.
            backend = "nccl" if device == "cuda" and n >= self.world else "gloo"
        self.backend = backend
        if self.world > 1:
            dist.init_process_group(backend=backend, device_id=self.device if backend == "nccl" else None)

    def all_reduce(self, t: torch.Tensor) -> torch.Tensor:
        if self.world > 1:
            dist.all_reduce(t)
        return t

    def close(self) -> None:
        if self.world > 1:
            dist.barrier()
            dist.destroy_process_group()


class ParallelBlock(torch.nn.Module):
    """A transformer-style MLP block split Megatron-style: column-parallel up, row-parallel down + all-reduce."""

    def __init__(self, hidden: int, world: int, comm: Dist | None, gen: torch.Generator) -> None:
        super().__init__()
        inner = max(4 * hidden // max(world, 1), 8)
        self.norm = torch.nn.LayerNorm(hidden)
        self.up = torch.nn.Parameter(torch.randn(hidden, inner, generator=gen) / hidden**0.5)
        self.down = torch.nn.Parameter(torch.randn(inner, hidden, generator=gen) / inner**0.5)
        self.comm = comm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.norm(x) @ self.up) @ self.down
        if self.comm is not None:
            h = self.comm.all_reduce(h)  # row-parallel: partial sums from every rank
        return x + h


class TinyLM(torch.nn.Module):
    def __init__(self, layers: int, hidden: int, vocab: int, world: int, comm: Dist | None, seed: int) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.embed = torch.nn.Parameter(torch.randn(vocab, hidden, generator=gen) * 0.02)
        self.blocks = torch.nn.ModuleList(ParallelBlock(hidden, world, comm, gen) for _ in range(layers))
        self.head = torch.nn.Parameter(torch.randn(hidden, vocab, generator=gen) / hidden**0.5)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed[tokens]
        for b in self.blocks:
            x = b(x)
        return x @ self.head


class Engine:
    def __init__(self, args: argparse.Namespace, comm: Dist) -> None:
        self.args = args
        self.comm = comm
        dev = comm.device
        dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
        self.on_gpu = dev.type == "cuda"
        # Target: tensor-parallel over all ranks. Drafter: one small replicated block (no collectives).
        self.target = TinyLM(args.layers, args.hidden, args.vocab, comm.world, comm if comm.world > 1 else None, args.seed).to(dev, dtype)
        tp_draft = args.tp_draft and comm.world > 1
        self.drafter = TinyLM(1, args.hidden, args.vocab, comm.world if tp_draft else 1, comm if tp_draft else None, args.seed + 1).to(dev, dtype)
        self.tokens = torch.randint(0, args.vocab, (args.tokens,), device=dev, generator=torch.Generator(device=dev).manual_seed(args.seed))
        self.draft_tokens = torch.zeros(args.tokens, dtype=torch.long, device=dev)
        self.verify_logits = None
        self.schedule = random.Random(args.seed)
        self.draft_graph = None
        self.verify_graph = None
        # Overlap mode: a forward stream (current during the cycles) and an input stream.
        self.fwd = torch.cuda.Stream() if self.on_gpu else None
        self.inp = torch.cuda.Stream() if self.on_gpu and args.overlap else None
        if args.overlap and not self.on_gpu:
            raise SystemExit("--overlap needs --device cuda")
        self.accepted_gpu = torch.zeros((), dtype=torch.long, device=dev)
        self.next_inputs = torch.zeros_like(self.tokens)
        self.pinned = [torch.zeros((), dtype=torch.long).pin_memory() for _ in range(2)] if self.on_gpu else []
        self.accepted_log: list[int] = []
        if self.on_gpu and not args.no_draft_graph and not tp_draft:
            self.draft_graph = self._capture(self._draft_eager)
        if args.verify_graph:
            if not self.on_gpu:
                raise SystemExit("--verify-graph needs --device cuda")
            if comm.world > 1 and comm.backend != "nccl":
                raise SystemExit("--verify-graph with several ranks needs NCCL (one GPU per rank)")
            self.verify_graph = self._capture(self._verify_eager)

    @torch.no_grad()
    def _draft_eager(self) -> None:
        t = self.tokens
        for _ in range(self.args.draft_len):
            t = self.drafter(t).argmax(-1)
        self.draft_tokens.copy_(t)

    @torch.no_grad()
    def _verify_eager(self) -> None:
        self.verify_logits = self.target(self.draft_tokens)
        self.target_tokens = self.verify_logits.argmax(-1)

    def _capture(self, fn):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                fn()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        return g

    def draft(self) -> None:
        if self.args.overlap:
            # Inputs for this cycle depend on the previous cycle's accepted tokens: the input
            # stream waits for the forward stream, prepares them, and the forward stream waits
            # for the input stream (cudaEventRecord + cudaStreamWaitEvent both ways).
            self.inp.wait_stream(self.fwd)
            with torch.cuda.stream(self.inp):
                shifted = torch.roll(self.next_inputs, 1) * 31 + 7
                self.next_inputs.copy_(torch.remainder(shifted + self.tokens, self.args.vocab))
            self.fwd.wait_stream(self.inp)
        if self.draft_graph is not None:
            self.draft_graph.replay()
        else:
            self._draft_eager()

    def verify(self) -> None:
        if self.verify_graph is not None:
            self.verify_graph.replay()
        else:
            self._verify_eager()

    @torch.no_grad()
    def draft_re_extend(self) -> int:
        if self.args.overlap:
            return self._draft_re_extend_on_gpu()
        # Greedy acceptance: compare drafted tokens with the target's; reading the result on
        # the CPU (.tolist()) waits for every queued kernel, verify's included.
        matches = (self.draft_tokens == self.target_tokens).tolist()
        accepted = min(self.schedule.randint(0, self.args.draft_len), len(matches))  # seeded schedule
        # In place: the draft CUDA graph reads this very buffer on every replay.
        self.tokens.copy_(torch.roll(self.tokens, -accepted - 1))
        self.tokens[-1] = self.target_tokens[accepted]
        self.drafter(self.tokens[: self.args.draft_len + 1])  # re-extend the drafter's cache
        return accepted

    @torch.no_grad()
    def _draft_re_extend_on_gpu(self) -> int:
        """Overlap mode: acceptance stays on the GPU; the CPU learns it a cycle later."""
        n = self.args.draft_len
        match = (self.draft_tokens[:n] == self.target_tokens[:n]).long()
        self.accepted_gpu.copy_(torch.cumprod(match, 0).sum())
        t = self.tokens.numel()
        idx = torch.remainder(torch.arange(t, device=self.tokens.device) + self.accepted_gpu + 1, t)
        self.tokens.copy_(self.tokens[idx])
        self.tokens[-1:].copy_(self.target_tokens.gather(0, self.accepted_gpu.view(1)))
        self.drafter(self.tokens[: n + 1])
        return -1

    def copy_result_out(self, i: int) -> torch.cuda.Event:
        """Overlap mode: queue the acceptance's copy to pinned memory; the event says when it landed."""
        buf = self.pinned[i % 2]
        buf.copy_(self.accepted_gpu, non_blocking=True)
        ev = torch.cuda.Event()
        ev.record()
        return ev


class Worker:
    """--worker-thread: a thread that launches every phase's GPU work when told to."""

    def __init__(self, engine: "Engine") -> None:
        import queue
        import threading

        self.engine = engine
        self.todo: "queue.Queue" = queue.Queue()
        self.done: "queue.Queue" = queue.Queue()
        self.thread = threading.Thread(target=self._loop, name="launcher", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        if self.engine.on_gpu:
            torch.cuda.set_device(self.engine.comm.device)
        while True:
            name = self.todo.get()
            if name is None:
                return
            try:
                with torch.cuda.stream(self.engine.fwd) if self.engine.on_gpu else _null():
                    self.done.put(getattr(self.engine, name)())
            except BaseException as exc:  # hand it to the scheduler thread
                self.done.put(exc)

    def call(self, name: str):
        self.todo.put(name)
        out = self.done.get()
        if isinstance(out, BaseException):
            raise out
        return out

    def close(self) -> None:
        self.todo.put(None)
        self.thread.join()


def spin_us(us: float) -> None:
    end = time.perf_counter() + us / 1e6
    while time.perf_counter() < end:
        pass


def main(argv=None) -> int:
    args = parse_args(argv)
    comm = Dist(args.device, args.backend)
    torch.manual_seed(args.seed)
    engine = Engine(args, comm)
    worker = Worker(engine) if args.worker_thread else None
    mark_rank(comm.rank)
    names = ("draft", "verify", "draft_re_extend")
    gt_path = args.gt.replace("{rank}", str(comm.rank)) if args.gt else None
    rows = []
    tokens: dict[int, int] = {}  # cycle -> accepted tokens, as the engine logs them
    pending = None  # overlap: (cycle, event) of the result not yet read by the CPU
    # Every cycle runs with the forward stream current: the CUDA events of the ground truth are
    # recorded on it at each phase boundary (the worker thread launches on it too).
    with (torch.cuda.stream(engine.fwd) if engine.on_gpu else _null()):
        for i in range(-args.warmup, args.cycles):
            measured = i >= 0
            evs = [torch.cuda.Event(enable_timing=True) for _ in range(4)] if engine.on_gpu else None
            cpu = {}
            planted = []
            ctx = cycle(i) if measured else _null()
            with ctx:
                t_cycle = time.perf_counter()
                for k, name in enumerate(names):
                    if evs:
                        evs[k].record()
                    t0 = time.perf_counter()
                    with (phase(name) if measured else _null()):
                        us = skew_us(args.skews, comm.rank, name, i) if measured else 0.0
                        if us > 0:
                            spin_us(us)  # the straggler: late into this phase's collectives
                            planted.append(name)
                        result = worker.call(name) if worker else getattr(engine, name)()
                    cpu[name] = (time.perf_counter() - t0) * 1e3
                    if name == "draft_re_extend" and result is not None and result >= 0 and measured:
                        tokens[i] = result + 1  # accepted draft tokens + the target's own token
                        accepted(tokens[i])
                if evs:
                    evs[3].record()
                cpu["total"] = (time.perf_counter() - t_cycle) * 1e3
                if args.overlap:
                    # The previous cycle's result, read only now that this cycle is queued.
                    done = engine.copy_result_out(i)
                    if pending is not None:
                        pending[1].synchronize()
                        n = int(engine.pinned[pending[0] % 2].item())
                        engine.accepted_log.append(n)
                        if pending[0] >= 0:
                            tokens[pending[0]] = n + 1
                            accepted(n + 1, cycle_index=pending[0])  # cycle N-1's acceptance, learnt in cycle N
                    pending = (i, done)
            if measured:
                rows.append((i, cpu, evs, planted))
    if worker:
        worker.close()
    if engine.on_gpu:
        torch.cuda.synchronize()
    if gt_path:
        with open(gt_path, "w") as fh:
            for i, cpu, evs, planted in rows:
                rec = {"rank": comm.rank, "cycle": i, "cpu_ms": cpu}
                if evs:
                    g = {n: evs[k].elapsed_time(evs[k + 1]) for k, n in enumerate(names)}
                    g["total"] = evs[0].elapsed_time(evs[3])
                    rec["gpu_event_ms"] = g
                    # Where the next cycle's first event landed: cycles tile the GPU timeline.
                    nxt = next((r for r in rows if r[0] == i + 1), None)
                    if nxt is not None and nxt[2]:
                        rec["gpu_event_ms"]["to_next_cycle"] = evs[0].elapsed_time(nxt[2][0])
                if planted:
                    rec["planted"] = planted  # phases where this rank was made a straggler
                if i in tokens:
                    rec["accepted_tokens"] = tokens[i]
                fh.write(json.dumps(rec) + "\n")
    comm.close()
    mode = "overlap" if args.overlap else "worker-thread" if args.worker_thread else "sync"
    print(f"rank {comm.rank}: {args.cycles} cycles on {comm.device} ({comm.backend}, world {comm.world}, {mode})", flush=True)
    return args.exit_code


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


if __name__ == "__main__":
    raise SystemExit(main())
