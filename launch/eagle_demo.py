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
layers: big matmuls). ``--skew-rank R --skew-us X`` makes rank R a straggler: it spins X us
on the CPU before verify, so the other ranks wait in verify's all-reduce.
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
from tracerecon.instrument import cycle, mark_rank, phase  # noqa: E402

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
    p.add_argument("--skew-rank", type=int, default=-1)
    p.add_argument("--skew-us", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gt", default=None, help="write per-cycle CPU and CUDA-event times to this JSONL ({rank} expands)")
    p.add_argument("--exit-code", type=int, default=0, help="exit with this code at the end (for testing launchers)")
    args = p.parse_args(argv)
    for k, v in PRESETS[args.preset].items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    return args


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
        self.drafter = TinyLM(1, args.hidden, args.vocab, 1, None, args.seed + 1).to(dev, dtype)
        self.tokens = torch.randint(0, args.vocab, (args.tokens,), device=dev, generator=torch.Generator(device=dev).manual_seed(args.seed))
        self.draft_tokens = torch.zeros(args.tokens, dtype=torch.long, device=dev)
        self.verify_logits = None
        self.schedule = random.Random(args.seed)
        self.draft_graph = None
        self.verify_graph = None
        if self.on_gpu and not args.no_draft_graph:
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
        # Greedy acceptance: compare drafted tokens with the target's; reading the result on
        # the CPU (.tolist()) waits for every queued kernel, verify's included.
        matches = (self.draft_tokens == self.target_tokens).tolist()
        accepted = min(self.schedule.randint(0, self.args.draft_len), len(matches))  # seeded schedule
        # In place: the draft CUDA graph reads this very buffer on every replay.
        self.tokens.copy_(torch.roll(self.tokens, -accepted - 1))
        self.tokens[-1] = self.target_tokens[accepted]
        self.drafter(self.tokens[: self.args.draft_len + 1])  # re-extend the drafter's cache
        return accepted


def spin_us(us: float) -> None:
    end = time.perf_counter() + us / 1e6
    while time.perf_counter() < end:
        pass


def main(argv=None) -> int:
    args = parse_args(argv)
    comm = Dist(args.device, args.backend)
    torch.manual_seed(args.seed)
    engine = Engine(args, comm)
    mark_rank(comm.rank)
    names = ("draft", "verify", "draft_re_extend")
    gt_path = args.gt.replace("{rank}", str(comm.rank)) if args.gt else None
    rows = []
    for i in range(-args.warmup, args.cycles):
        measured = i >= 0
        evs = [torch.cuda.Event(enable_timing=True) for _ in range(4)] if engine.on_gpu else None
        cpu = {}
        ctx = cycle(i) if measured else _null()
        with ctx:
            t_cycle = time.perf_counter()
            for k, name in enumerate(names):
                if evs:
                    evs[k].record()
                t0 = time.perf_counter()
                with (phase(name) if measured else _null()):
                    if name == "verify" and comm.rank == args.skew_rank and args.skew_us > 0:
                        spin_us(args.skew_us)  # the straggler: late into verify's all-reduces
                    getattr(engine, name)()
                cpu[name] = (time.perf_counter() - t0) * 1e3
            if evs:
                evs[3].record()
            cpu["total"] = (time.perf_counter() - t_cycle) * 1e3
        if measured:
            rows.append((i, cpu, evs))
    if engine.on_gpu:
        torch.cuda.synchronize()
    if gt_path:
        with open(gt_path, "w") as fh:
            for i, cpu, evs in rows:
                rec = {"rank": comm.rank, "cycle": i, "cpu_ms": cpu}
                if evs:
                    g = {n: evs[k].elapsed_time(evs[k + 1]) for k, n in enumerate(names)}
                    g["total"] = evs[0].elapsed_time(evs[3])
                    rec["gpu_event_ms"] = g
                fh.write(json.dumps(rec) + "\n")
    comm.close()
    print(f"rank {comm.rank}: {args.cycles} cycles on {comm.device} ({comm.backend}, world {comm.world})", flush=True)
    return args.exit_code


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


if __name__ == "__main__":
    raise SystemExit(main())
