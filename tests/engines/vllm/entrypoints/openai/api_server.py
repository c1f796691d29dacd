"""``python -m vllm.entrypoints.openai.api_server``: the stand-in's API server process starts
the EngineCore process (multiprocessing spawn), as vLLM's AsyncLLM does, waits for a fixed
number of engine steps (one prefill step, then EAGLE decode steps) and exits."""

import argparse
import multiprocessing as mp
import sys


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="vllm.entrypoints.openai.api_server")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--num-steps", type=int, default=12, help="engine steps: 1 prefill + N-1 decode")
    p.add_argument("--num-reqs", type=int, default=4)
    p.add_argument("--num-speculative-tokens", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-async-scheduling", dest="async_scheduling", action="store_false")
    args = p.parse_args(argv)
    from vllm.v1.engine.core import run_engine_core

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=run_engine_core, args=(vars(args), child), name="EngineCore_DP0")
    proc.start()
    outputs = parent.recv() if parent.poll(600) else []
    proc.join()
    print(f"vllm stand-in: {len(outputs)} steps, {sum(o['tokens'] for o in outputs)} tokens", flush=True)
    return proc.exitcode or 0


if __name__ == "__main__":
    sys.exit(main())
