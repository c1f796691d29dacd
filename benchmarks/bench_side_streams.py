"""Which stream each phase is read on (``caller_streams``) where many side streams fork and
join: N cycles of prepare / forward / sample; forward forks one of K side streams off the compute
stream (500 us there) and sample joins it back (side_join_later of
``launch/stream_shapes_probe.py``), so K pairs of streams wait for each other; with ``--open M``,
also M ``sample`` ranges begun with nvtxRangeStart and never ended, on a thread that launches
nothing (each window reaches the trace's end). Writes the trace with the tests' factory, then
times ``api.load`` and ``caller_streams`` inside it, and the peak RSS.

    python benchmarks/bench_side_streams.py N K [--open M] [TRACE.sqlite]
"""

from __future__ import annotations

import os
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
os.environ["TRACERECON_NO_CACHE"] = "1"

from nsys_factory import FakeTrace  # noqa: E402

import tracerecon.analysis.caller_streams as side_streams  # noqa: E402
import tracerecon.analysis.rank as rank  # noqa: E402
from tracerecon.analysis.config import PhaseConfig  # noqa: E402
from tracerecon.api import load  # noqa: E402

U = 1000


def launch(t: FakeTrace, at_us: int, gpu_us: tuple[int, int], stream: int = 7) -> None:
    t.kernel(t.call("cudaLaunchKernel", at_us * U, (at_us + 2) * U), gpu_us[0] * U, gpu_us[1] * U, stream=stream)


def fork_join(t: FakeTrace, event: int, record: int, at_us: int, side: int, caller: int = 7) -> None:
    t.event_record(event=event, record=record, start=at_us * U, end=(at_us + 1) * U, stream=caller)
    t.stream_wait(event=event, record=record, start=(at_us + 1) * U, end=(at_us + 2) * U, stream=side)


def write_trace(path: Path, cycles: int, pairs: int, open_ranges: int = 0) -> None:
    t = FakeTrace()
    for k in range(open_ranges):
        t.range("sample", (k * 7 + 3) * U, None, tid=12, push_pop=False)
    for c in range(cycles):
        b = c * 2000
        s = 50 + c % pairs
        t.cycle(c, b * U, (b + 50) * U, (b + 100) * U, (b + 400) * U, names=("prepare", "forward", "sample"))
        launch(t, b + 5, (b + 10, b + 40))
        launch(t, b + 52, (b + 55, b + 58))
        fork_join(t, 1, c + 1, b + 60, side=s)
        launch(t, b + 65, (b + 66, b + 566), stream=s)
        launch(t, b + 70, (b + 72, b + 90))
        fork_join(t, 2, c + 1, b + 150, side=7, caller=s)
        launch(t, b + 160, (b + 566, b + 586))
    t.write(path)


def main() -> None:
    args = sys.argv[1:]
    open_ranges = 0
    if "--open" in args:
        i = args.index("--open")
        open_ranges = int(args[i + 1])
        del args[i:i + 2]
    cycles, pairs = int(args[0]), int(args[1])
    path = Path(args[2]) if len(args) > 2 else Path(tempfile.mkdtemp()) / f"side_{cycles}_{pairs}_{open_ranges}.sqlite"
    if not path.exists():
        write_trace(path, cycles, pairs, open_ranges)
    spent = [0.0]
    original = side_streams.caller_streams

    def timed(*args, **kwargs):
        t0 = time.perf_counter()
        out = original(*args, **kwargs)
        spent[0] += time.perf_counter() - t0
        return out

    rank.caller_streams = timed
    t0 = time.perf_counter()
    run = load([str(path)], PhaseConfig(phases=("prepare", "forward", "sample")), jobs=1)
    wall = time.perf_counter() - t0
    streams: dict[str, set] = {}
    for p in run.ranks[0].phases.to_pylist():
        streams.setdefault(p["phase"], set()).add(p["stream_id"])
    read_on = ", ".join(f"{name} on {sorted(s)[0] if len(s) == 1 else f'{len(s)} streams'}" for name, s in streams.items())
    rss_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"{cycles} cycles, {pairs} stream pairs, {open_ranges} open ranges: load {wall:.2f} s, caller_streams {spent[0]:.3f} s, "
          f"peak RSS {rss_gb:.2f} GB ({read_on})")


if __name__ == "__main__":
    main()
