"""``python -m sglang.launch_server``: the stand-in's server process starts the scheduler
process (multiprocessing spawn), as SGLang's Engine does, runs a fixed number of batches
(one prefill batch, then decode batches with EAGLE speculation) and exits."""

import argparse
import multiprocessing as mp
import sys


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="sglang.launch_server")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--num-batches", type=int, default=12, help="forward batches: 1 prefill + N-1 decode")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--speculative-num-steps", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--disable-overlap-schedule", action="store_true")
    args = p.parse_args(argv)
    from sglang.srt.managers.scheduler import run_scheduler_process

    ctx = mp.get_context("spawn")
    proc = ctx.Process(target=run_scheduler_process, args=(vars(args),), name="sglang::scheduler")
    proc.start()
    proc.join()
    return proc.exitcode or 0


if __name__ == "__main__":
    sys.exit(main())
