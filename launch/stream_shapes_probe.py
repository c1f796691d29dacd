"""Engine shapes with streams beyond the default one, for checking tracerecon on real traces
against the engine's own CUDA events (issue 6's rule: what would events recorded on the stream at
each phase boundary read, cycle by cycle?). Each cycle is a ``cycle N`` NVTX range holding the
phases ``prepare``, ``forward`` and ``sample`` (torch.cuda.nvtx); an event is recorded on the
current (default) stream at every phase boundary, where an engine's own timers would put them.
Ground truth per cycle goes to ``--gt`` as JSON lines: each phase's milliseconds between its two
events, and the CPU time of the cycle.

Shapes (``--shape``):
- ``side_join_same``: forward forks a side stream off the default one (shared experts beside
  the routed ones), runs the longer chain there and joins it back within forward.
- ``side_join_later``: forward forks the side stream and leaves it running; sample joins it
  (the README's not-handled case: measured here, not assumed).
- ``copy_event_sync``: vLLM's asynchronous output: sample's results are copied to pinned memory
  on a copy stream that waits for the default one; prepare waits on the CPU for the copy's event
  (cudaEventSynchronize) of the cycle two back, so the CPU runs up to a cycle ahead of the GPU.
- ``graph_fork_join``: forward replays a CUDA graph captured with a fork onto a side stream and a
  join back (multi-stream MoE in a captured decode step).
- ``side_join_next``: forward forks the side stream and only the next cycle's prepare joins it
  (the README's not-handled case).
- ``own_stream``: the whole loop runs under ``torch.cuda.stream(s)`` (a non-default current
  stream, where the events go) and forward forks and joins a side stream off it.
- ``background_kernels``: a second thread, with no phase of its own, keeps launching kernels on a
  stream of its own (a KV-cache offload or a monitor thread) while the loop runs.
- ``input_stream_copy``: prepare copies the inputs (64 MB from pinned memory, non_blocking) on an
  input stream and records an event; forward's stream waits for it before the model runs.
- ``copy_only_prepare``: prepare's only GPU work is a non_blocking 64 MB copy from pinned memory on
  the current stream (a phase made of a copy).
- ``pageable_h2d``: prepare copies the inputs from pageable memory (a blocking copy), forward runs.
- ``graph_side_stream``: forward replays a CUDA graph on a side stream forked off the current
  one and joins it back, then runs one more layer on the current stream.
- ``piecewise_graphs``: forward replays two CUDA graphs with eager work between (vLLM's piecewise
  graphs with attention run eagerly).
- ``device_sync_mid``: forward synchronizes the device halfway (a timer or a debug check inside).
- ``dtoh_pinned_event``: sample copies its tokens to pinned memory (non_blocking) on the current
  stream and waits for an event recorded after the copy (no `.item()`).
- ``idle_sample``: sample launches nothing (bookkeeping on the CPU while forward runs); the next
  cycle's prepare reads the previous forward's result with `.item()` (the CPU a phase ahead).
- ``worker_stream_handoff``: forward hands its model to a worker thread with a stream of its own
  through events (the worker's stream waits for the loop's event, the loop's stream for the
  worker's); the loop thread waits on a queue meanwhile.
- ``model_thread``: the loop thread marks the cycle and prepare; a model thread marks and runs
  forward and sample (handed over through a queue), on the same default stream.
- ``range_start_end``: the basic loop with every range marked by ``nvtxRangeStart/End`` instead of
  push/pop (ranges that do not nest).
- ``ahead_graph``: vLLM-style asynchronous scheduling with a CUDA graph: forward replays a graph,
  sample copies the tokens to pinned memory and records an event, and the next cycle's prepare
  waits for that event only then (the CPU a cycle ahead of the GPU, graphs queued behind graphs).
- ``event_poll``: sample polls an event (``Event.query()`` in a loop) instead of blocking on
  ``.item()``.
- ``two_graph_streams``: forward forks two side streams off the current one, replays a CUDA graph
  on each (two halves of a layer at once), joins both back and runs one more layer.
- ``graph_copy_nodes``: forward replays a CUDA graph whose capture holds copies: the inputs from
  pinned memory (a host-to-device memcpy node), the layers, a device-to-device copy of their
  output (a memcpy node), one more layer.
- ``draft_steps``: forward is three ranges of the same name a cycle (EAGLE's draft steps), each
  its own events; between them, outside any phase, a small bookkeeping kernel. The phase's truth
  is the sum of its three instances' event times.
- ``nested_same_name``: forward's range holds a second ``forward`` range (the engine's and the
  model's own decorator, both named alike) around the layers.
- ``empty_cache_sync``: forward frees a 256 MB buffer and calls ``torch.cuda.empty_cache()``
  halfway (``cudaFree``: an implicit device synchronize that no synchronization record names).
- ``triton_kernel``: forward ends with a Triton kernel (launched through the driver API,
  ``cuLaunchKernel``, as torch.compile's kernels are) over a 64 M-element buffer.
- ``join_then_fork``: forward first joins the side stream (the previous cycle's side work), then
  forks it again and leaves the new side work running into the next cycle.
- ``fork_early``: prepare forks the side stream (it waits for the current one) and launches
  nothing on it; forward runs the longer chain there and joins it back.
- ``thread_pool``: every phase runs on one of two worker threads that share a queue (whichever
  is free: the threads alternate, so a phase moves between threads from cycle to cycle); the loop
  thread marks the cycle and waits for each phase. Each phase's thread records events at its
  range's edges (kept as ``edge_ms``); the ground truth reads each boundary once, as phases tile
  their cycle (issue 6): where one thread hands the cycle to another, at the earlier phase's end,
  where the handing thread would record the next phase's start (the pick-up is the later
  phase's, as in ``model_thread``).
- ``stream_sync``: sample copies its tokens to pinned memory (non_blocking) and waits with
  ``cudaStreamSynchronize`` (``torch.cuda.current_stream().synchronize()``).
- ``async_alloc``: the plain loop under PyTorch's ``cudaMallocAsync`` allocator backend (every
  tensor allocated and freed stream-ordered: ``cudaMallocAsync``/``cudaFreeAsync`` in every phase).
- ``plan_stream``: SGLang's plan stream beside the current one, taking turns: forward forks the
  plan stream, copies metadata to it from pinned memory and plans (a small kernel) there, hands
  back (the current stream waits), runs four layers, forks the plan stream again to plan the next
  step while the current one waits for nothing, hands back, runs two more layers.
- ``plan_joined``: SGLang EAGLE V2's plan stream, fed from the CPU: forward copies the batch's
  metadata from pinned memory to the plan stream and plans there (four layers' worth, more than
  the current stream's own work in forward) without the plan stream ever waiting for the current
  one; the current stream waits for it (joins) and runs one layer.
- ``input_prefetch``: an input stream that computes: prepare's input kernel runs there (the
  current stream waits for it); forward lets the input stream reuse its buffers (it waits for the
  current one), preps a micro-batch there, hands it over, runs the model on the current stream
  and prefetches the next batch on the input stream beside it.
- ``lone_input_stream``: one phase a cycle, ``forward`` (an engine that times only its step): the
  inputs' preprocessing runs on an input stream fed from the CPU (four layers, more than the
  current stream's own work), a step counter is read back on the current stream (`.item()`), the
  current stream waits for the input stream and runs two layers. The ground truth has forward only.
- ``worker_input_stream``: the loop thread holds prepare and sample on the default stream; a
  worker thread holds forward on a stream of its own (its current stream, made to wait for the
  default one as forward begins), where an input stream fed from the CPU copies metadata and
  preprocesses (two layers) with no wait first, the worker's stream waits for it and runs a layer,
  the input stream waits for that and post-processes (three layers), the worker's stream waits
  again and runs a layer: the input stream busier than the worker's. Sample joins the worker's
  stream into the default one and reads a value back.
- ``two_workers``: a pipeline of threads: the loop thread holds the cycle and prepare on the
  default stream; a forward worker holds forward on its own stream (made to wait for the default
  one), five layers; a sample worker holds sample on a third stream (made to wait for the forward
  worker's), one layer and a read-back. Each phase's events are on its own thread's stream.
- ``shared_input_stream``: one input stream for two threads: the loop thread's prepare uploads
  metadata and preprocesses there (two layers, fed from the CPU) and joins it into the default
  stream; a worker thread's forward, on its own stream (made to wait for the default one),
  post-processes on the same input stream (three layers), joins it and runs a layer; sample joins
  the worker's stream into the default one and reads back.
- ``kv_offload``: the loop thread marks the cycle and prepare; a model thread marks and runs
  forward and sample on a stream of its own (its current stream, forked off the default stream as
  forward begins),
  handed over through a queue; as forward begins, a KV-offload helper thread with no phase forks
  its stream off the default one (its current stream, shared with the loop) and copies 512 MB of
  KV cache to pinned memory (longer than the cycle's model work), then waits for it itself. The next cycle's prepare joins the model's
  stream and the offload stream into the default one before reusing the blocks; it launches a
  kernel of its own only every fourth cycle (a new request's inputs), else nothing.
- ``two_processes``: a second process (the plain loop, its own ground truth in
  ``NAME.child.gt.jsonl``) runs the same loop at the same time on the same GPU (time-sliced contexts).

    nsys profile -t cuda,nvtx --cuda-graph-trace=node -o out python3 launch/stream_shapes_probe.py --shape S --gt gt.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import subprocess
import sys
import threading
import time

if "async_alloc" in sys.argv:  # read when CUDA first allocates: set before torch is imported
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync")

import torch  # noqa: E402

PHASES = ("prepare", "forward", "sample")


def spin(ms: float) -> None:
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        pass


class Model:
    """Matmul chains standing in for a model's layers (each 4096^2 bf16 matmul ~0.2 ms on an H200)."""

    def __init__(self, dev: torch.device):
        self.w = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16) / 64
        self.x = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
        self.state = torch.zeros(1024, device=dev)
        self.side = torch.cuda.Stream()
        self.copy = torch.cuda.Stream()
        self.host = torch.empty(1024, pin_memory=True)

    def chain(self, x: torch.Tensor, n: int) -> torch.Tensor:
        for _ in range(n):
            x = x @ self.w
        return x

    def warm_up(self, x: torch.Tensor) -> None:
        """The layers run on a stream of their own before a capture (cuBLAS picks its kernels
        outside the graph); the current stream waits for them."""
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                self.chain(x, 2)
        torch.cuda.current_stream().wait_stream(s)

    def warm_up_on(self, stream: torch.cuda.Stream, x: torch.Tensor) -> None:
        """One layer on ``stream`` before the loop (cuBLAS's workspace for that stream), joined back."""
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            self.chain(x, 1)
        torch.cuda.current_stream().wait_stream(stream)


def forward_fork(m: Model, join: bool) -> torch.Tensor:
    main = torch.cuda.current_stream()
    y = m.chain(m.x, 2)
    m.side.wait_stream(main)
    with torch.cuda.stream(m.side):
        z = m.chain(y, 6)  # the longer branch
    y = m.chain(y, 1)
    if join:
        main.wait_stream(m.side)
        y = y + z
    m.pending_side = z
    return y


class MarkedRanges:
    """``torch.cuda.nvtx`` whose phase ranges (``PHASES``), once pushed or started, say their
    thread's current stream as ``tracerecon.instrument.phase`` does (``--marked``)."""

    def __init__(self, nvtx) -> None:
        from tracerecon.instrument import mark_current_stream

        self._nvtx, self._mark = nvtx, mark_current_stream

    def range_push(self, name: str):
        out = self._nvtx.range_push(name)
        if name in PHASES:
            self._mark()
        return out

    def range_start(self, name: str):
        out = self._nvtx.range_start(name)
        if name in PHASES:
            self._mark()
        return out

    def __getattr__(self, attr: str):
        return getattr(self._nvtx, attr)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", required=True, choices=["side_join_same", "side_join_later", "copy_event_sync", "graph_fork_join",
                                                       "side_join_next", "own_stream", "background_kernels", "input_stream_copy",
                                                       "copy_only_prepare", "pageable_h2d", "graph_side_stream", "piecewise_graphs",
                                                       "device_sync_mid", "dtoh_pinned_event", "idle_sample", "worker_stream_handoff",
                                                       "model_thread", "range_start_end", "ahead_graph", "event_poll",
                                                       "two_graph_streams", "graph_copy_nodes", "draft_steps", "nested_same_name",
                                                       "empty_cache_sync", "triton_kernel", "join_then_fork", "fork_early",
                                                       "thread_pool", "two_processes", "plain", "stream_sync", "async_alloc",
                                                       "plan_stream", "input_prefetch", "plan_joined", "kv_offload",
                                                       "lone_input_stream", "worker_input_stream", "two_workers",
                                                       "shared_input_stream"])
    ap.add_argument("--cycles", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--gt", required=True)
    ap.add_argument("--marked", action="store_true", help="each phase range, once pushed, says its current stream "
                    "(tracerecon.instrument.mark_current_stream, as tracerecon.instrument.phase does)")
    ap.add_argument("--wait-go", action="store_true", help="print 'ready' once set up, start the loop on a line from stdin")
    args = ap.parse_args()
    child = None
    if args.shape == "two_processes":  # the other process starts now and waits for the go
        child = subprocess.Popen([sys.executable, __file__, "--shape", "plain", "--cycles", str(args.cycles), "--warmup",
                                  str(args.warmup), "--gt", args.gt.replace(".gt.jsonl", ".child.gt.jsonl"), "--wait-go"] + (["--marked"] if args.marked else []),
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    dev = torch.device("cuda")
    m = Model(dev)
    nvtx = torch.cuda.nvtx
    if args.marked:
        nvtx = MarkedRanges(nvtx)
    graph = None
    if args.shape == "graph_fork_join":
        static_in = m.x.clone()
        m.warm_up(static_in)
        m.warm_up_on(m.side, static_in)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            cap = torch.cuda.current_stream()
            y = m.chain(static_in, 2)
            m.side.wait_stream(cap)
            with torch.cuda.stream(m.side):
                z = m.chain(y, 5)
            y = m.chain(y, 1)
            cap.wait_stream(m.side)
            static_out = y + z
    if args.shape in ("graph_side_stream", "piecewise_graphs", "ahead_graph", "two_graph_streams"):
        static_in = m.x.clone()
        m.warm_up(static_in)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = m.chain(static_in, 4)
        if args.shape == "piecewise_graphs":
            static_mid = m.x.clone()
            graph_b = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph_b):
                static_out_b = m.chain(static_mid, 3)
        if args.shape == "two_graph_streams":
            static_in_b = m.x.clone()
            graph_b = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph_b):
                static_out_b = m.chain(static_in_b, 3)
            side2 = torch.cuda.Stream()
            for st in (m.side, side2):
                m.warm_up_on(st, static_in)
        if args.shape == "graph_side_stream":
            m.warm_up_on(m.side, static_in)
    if args.shape == "graph_copy_nodes":
        pinned_in = torch.randn(4096, 4096, dtype=torch.bfloat16).pin_memory()
        static_in = m.x.clone()
        static_buf = m.x.clone()
        m.warm_up(static_in)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_in.copy_(pinned_in, non_blocking=True)  # a memcpy node, host to device
            static_buf.copy_(m.chain(static_in, 4))  # a memcpy node, device to device
            static_out = m.chain(static_buf, 1)
    if args.shape == "triton_kernel":
        import triton
        import triton.language as tl

        @triton.jit
        def scale_shift(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0 + 1.0, mask=mask)

        tri_x = torch.randn(64 * 1024 * 1024, device=dev)
        tri_y = torch.empty_like(tri_x)

        def triton_step() -> None:
            scale_shift[(triton.cdiv(tri_x.numel(), 1024),)](tri_x, tri_y, tri_x.numel(), BLOCK=1024)

        triton_step()  # compiled here, before the loop
    big_pinned = torch.empty(32 * 1024 * 1024, dtype=torch.bfloat16, pin_memory=True)  # 64 MB
    big_dev = torch.empty(32 * 1024 * 1024, dtype=torch.bfloat16, device=dev)
    pageable = torch.randn(4 * 1024 * 1024)  # 16 MB, not pinned
    input_stream = torch.cuda.Stream()
    meta_pinned = torch.randn(64 * 1024, pin_memory=True)  # plan_stream's metadata, 256 KB
    meta = torch.empty(64 * 1024, device=dev)
    plan_out = torch.zeros((), device=dev)
    next_in = torch.zeros(1024, 4096, device=dev, dtype=torch.bfloat16)
    handoff_in: "queue.Queue" = queue.Queue()
    handoff_out: "queue.Queue" = queue.Queue()
    if args.shape == "worker_stream_handoff":
        def worker_loop() -> None:
            ws = torch.cuda.Stream()
            with torch.cuda.stream(ws):
                m.chain(m.x, 1)  # cuBLAS's workspace for this thread's stream
            while True:
                item = handoff_in.get()
                if item is None:
                    return
                ws.wait_event(item)
                with torch.cuda.stream(ws):
                    y = m.chain(m.x, 6)
                    done = torch.cuda.Event()
                    done.record(ws)
                handoff_out.put((y, done))
        threading.Thread(target=worker_loop, daemon=True).start()
    previous_y = None
    if args.shape == "own_stream":
        loop_stream = torch.cuda.Stream()
        loop_stream.wait_stream(torch.cuda.current_stream())
        torch.cuda.set_stream(loop_stream)  # the loop's current stream from here on
    stop = threading.Event()
    if args.shape == "background_kernels":
        def background() -> None:
            s = torch.cuda.Stream()
            buf = torch.randn(2048, 2048, device=dev, dtype=torch.bfloat16)
            with torch.cuda.stream(s):
                while not stop.is_set():
                    buf = (buf @ buf.T) / 2048  # ~0.03 ms, every ~0.5 ms
                    s.synchronize()
                    time.sleep(0.0005)
        worker = threading.Thread(target=background, daemon=True)
        worker.start()
    if args.shape == "thread_pool":
        jobs: "queue.Queue" = queue.Queue()

        def pool_worker() -> None:
            while True:
                job = jobs.get()
                if job is None:
                    return
                name, fn, edges, reply = job
                edges[0].record(torch.cuda.current_stream())  # this thread's phase boundaries
                nvtx.range_push(name)
                out = fn()
                nvtx.range_pop()
                edges[1].record(torch.cuda.current_stream())
                reply.put(out)
        for _ in range(2):
            threading.Thread(target=pool_worker, daemon=True).start()

        def on_pool(name: str, fn, spans: dict):
            reply: "queue.Queue" = queue.Queue()
            spans[name] = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))]
            jobs.put((name, fn, spans[name][0], reply))
            return reply.get()
    torch.cuda.synchronize()
    if args.wait_go:
        print("ready", flush=True)
        sys.stdin.readline()
    if child is not None:
        child.stdout.readline()  # "ready"
        child.stdin.write("go\n")
        child.stdin.flush()
    ready: list = []  # copy_event_sync: the copy events of the cycles whose results are not yet read
    rows = []
    open_ids: list = []

    def push(name: str) -> None:
        if args.shape == "range_start_end":
            open_ids.append(nvtx.range_start(name))
        else:
            nvtx.range_push(name)

    def pop() -> None:
        if args.shape == "range_start_end":
            nvtx.range_end(open_ids.pop())
        else:
            nvtx.range_pop()

    to_model: "queue.Queue" = queue.Queue()
    from_model: "queue.Queue" = queue.Queue()

    def forward_and_sample(ev, stream, forked_off=None) -> None:
        """A model thread's two phases on ``stream`` (forked off ``forked_off`` as forward
        begins), each closed by its event; then the loop is told."""
        nvtx.range_push("forward")
        if forked_off is not None:
            stream.wait_stream(forked_off)
        y = m.chain(m.x, 6)
        spin(0.1)
        nvtx.range_pop()
        ev[2].record(stream)
        nvtx.range_push("sample")
        tok = y[0, :1024].float().softmax(0)
        _ = tok[0].item()
        nvtx.range_pop()
        ev[3].record(stream)
        from_model.put(True)

    def through_the_model_thread(i: int, ev, t0: float) -> None:
        """Hand the cycle to the model thread, wait for it, close the cycle."""
        to_model.put(ev)
        from_model.get()
        pop()
        if i >= 0:
            rows.append((i, ev, (time.perf_counter() - t0) * 1e3, {}))

    if args.shape == "model_thread":
        def model_loop() -> None:
            while True:
                job = to_model.get()
                if job is None:
                    return
                forward_and_sample(job, torch.cuda.current_stream())
        threading.Thread(target=model_loop, daemon=True).start()
    def start_forward_worker(stream: torch.cuda.Stream, layers, done) -> None:
        """A worker thread whose current stream, for good, is ``stream``: for each cycle handed
        over on ``to_model`` it holds forward, makes ``stream`` wait for the default one (the
        loop's hand-over), runs ``layers()`` (its output), closes forward with its event on
        ``stream`` and passes ``(ev, output)`` to ``done`` (None once the loop ends)."""
        def loop() -> None:
            torch.cuda.set_stream(stream)
            while True:
                ev = to_model.get()
                if ev is None:
                    done(None)
                    return
                nvtx.range_push("forward")
                stream.wait_stream(torch.cuda.default_stream())
                y = layers()
                spin(0.05)
                nvtx.range_pop()
                ev[2].record(stream)
                done((ev, y))
        threading.Thread(target=loop, daemon=True).start()

    worker_out: list = []  # worker_input_stream, shared_input_stream: forward's output, for sample

    def to_sample(job) -> None:
        if job is not None:
            worker_out[:] = [job[1]]
            from_model.put(True)

    if args.shape in ("worker_input_stream", "shared_input_stream"):
        worker_stream = torch.cuda.Stream()
        m.warm_up_on(worker_stream, m.x)
        m.warm_up_on(input_stream, m.x)

        def input_turns() -> torch.Tensor:
            with torch.cuda.stream(input_stream):  # fed from the CPU: waits for nothing first
                meta.copy_(meta_pinned, non_blocking=True)
                pre = m.chain(m.x, 2)
            worker_stream.wait_stream(input_stream)
            y = m.chain(pre, 1)
            input_stream.wait_stream(worker_stream)
            with torch.cuda.stream(input_stream):
                post = m.chain(y, 3)
            worker_stream.wait_stream(input_stream)
            return m.chain(post, 1)

        def shared_input() -> torch.Tensor:
            with torch.cuda.stream(input_stream):  # the input stream the loop uploads on too
                post = m.chain(m.x, 3)
            worker_stream.wait_stream(input_stream)
            return m.chain(post, 1)

        start_forward_worker(worker_stream, input_turns if args.shape == "worker_input_stream" else shared_input, to_sample)
    to_sampler: "queue.Queue" = queue.Queue()
    if args.shape == "two_workers":
        forward_stream, sample_stream = torch.cuda.Stream(), torch.cuda.Stream()
        m.warm_up_on(forward_stream, m.x)
        m.warm_up_on(sample_stream, m.x)

        def sample_worker() -> None:
            torch.cuda.set_stream(sample_stream)
            while True:
                job = to_sampler.get()
                if job is None:
                    return
                ev, y = job
                nvtx.range_push("sample")
                sample_stream.wait_stream(forward_stream)  # the forward worker's hand-over
                tok = m.chain(y, 1)[0, :1024].float().softmax(0)
                _ = tok[0].item()
                nvtx.range_pop()
                ev[3].record(sample_stream)
                from_model.put(True)
        start_forward_worker(forward_stream, lambda: m.chain(m.x, 5), to_sampler.put)
        threading.Thread(target=sample_worker, daemon=True).start()
    to_offload: "queue.Queue" = queue.Queue()
    offload_issued: "queue.Queue" = queue.Queue()
    if args.shape == "kv_offload":
        model_stream, offload_stream = torch.cuda.Stream(), torch.cuda.Stream()
        kv_dev = torch.empty(256 * 1024 * 1024, dtype=torch.bfloat16, device=dev)  # 512 MB: ~10 ms, longer than a cycle
        kv_host = torch.empty(256 * 1024 * 1024, dtype=torch.bfloat16, pin_memory=True)
        m.warm_up_on(model_stream, m.x)

        def kv_model_loop() -> None:
            torch.cuda.set_stream(model_stream)  # this thread's current stream, for good
            while True:
                ev = to_model.get()
                if ev is None:
                    return
                forward_and_sample(ev, model_stream, forked_off=torch.cuda.default_stream())

        def kv_offload_loop() -> None:
            while True:
                job = to_offload.get()
                if job is None:
                    return
                offload_stream.wait_stream(torch.cuda.current_stream())  # this thread's current: the shared default stream
                with torch.cuda.stream(offload_stream):
                    kv_host.copy_(kv_dev, non_blocking=True)
                offload_issued.put(True)
                offload_stream.synchronize()  # the helper waits for its own copy

        threading.Thread(target=kv_model_loop, daemon=True).start()
        threading.Thread(target=kv_offload_loop, daemon=True).start()
    for i in range(-args.warmup, args.cycles):
        main_stream = torch.cuda.current_stream()
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(len(PHASES) + 1)]
        steps: list = []  # draft_steps: each forward instance's two events
        t0 = time.perf_counter()
        push(f"cycle {i}" if i >= 0 else "warmup")
        ev[0].record(main_stream)

        if args.shape == "lone_input_stream":
            push("forward")
            with torch.cuda.stream(input_stream):
                prepped = m.chain(m.x, 4)  # the inputs' preprocessing: more than the current stream's own work
            _ = m.state[0].item()  # a step counter read back on the current stream
            main_stream.wait_stream(input_stream)
            y = m.chain(m.x, 2) + prepped
            m.state.add_(1.0)
            spin(0.1)
            pop()
            ev[1].record(main_stream)
            pop()
            if i >= 0:
                rows.append((i, ev[:2], (time.perf_counter() - t0) * 1e3, {"lone": True}))
            continue

        if args.shape == "thread_pool":
            def prepare_work() -> None:
                m.state.add_(1.0)
                spin(0.1)

            def forward_work() -> torch.Tensor:
                y = m.chain(m.x, 6)
                spin(0.1)
                return y

            spans: dict = {}  # each phase's events at its own range's edges, on its thread
            on_pool("prepare", prepare_work, spans)
            y = on_pool("forward", forward_work, spans)
            on_pool("sample", lambda: y[0, :1024].float().softmax(0)[0].item(), spans)
            pop()
            if i >= 0:
                rows.append((i, ev, (time.perf_counter() - t0) * 1e3, {"edges": spans}))
            continue

        push("prepare")
        if args.shape == "kv_offload":
            if i > -args.warmup:
                offload_issued.get()  # the previous cycle's offload copy is queued
                main_stream.wait_stream(model_stream)  # the model's output
                main_stream.wait_stream(offload_stream)  # the KV blocks are free again
            if i % 4 == 0:
                m.state.add_(1.0)  # a new request's inputs
            spin(0.1)
            pop()
            ev[1].record(main_stream)
            to_offload.put(i)
            through_the_model_thread(i, ev, t0)
            continue
        if args.shape == "copy_event_sync" and len(ready) == 2:
            ready.pop(0).synchronize()  # the sampled tokens of the cycle two back
            _ = m.host[:4].tolist()
        if args.shape == "ahead_graph" and ready:
            ready.pop(0).synchronize()  # the previous cycle's tokens
            _ = m.host[:4].tolist()
        m.state.add_(1.0)
        if graph is not None:
            static_in.copy_(m.x)
        if args.shape == "side_join_next" and i > -args.warmup:
            main_stream.wait_stream(m.side)  # the previous cycle's side work
            m.state.add_(m.pending_side[0, :1024].float())
        if args.shape == "input_stream_copy":
            input_stream.wait_stream(main_stream)
            with torch.cuda.stream(input_stream):
                big_dev.copy_(big_pinned, non_blocking=True)
                inputs_ready = torch.cuda.Event()
                inputs_ready.record(input_stream)
        elif args.shape == "copy_only_prepare":
            big_dev.copy_(big_pinned, non_blocking=True)
        elif args.shape == "pageable_h2d":
            big_dev[: pageable.numel()].copy_(pageable.to(torch.bfloat16), non_blocking=False)
        elif args.shape == "idle_sample" and previous_y is not None:
            _ = previous_y[0, 0].item()  # the previous cycle's result
        spin(0.1)
        if args.shape == "fork_early":
            m.side.wait_stream(main_stream)  # the fork: nothing launched on the side stream yet
        if args.shape == "shared_input_stream":
            with torch.cuda.stream(input_stream):  # fed from the CPU: waits for nothing first
                meta.copy_(meta_pinned, non_blocking=True)
                m.chain(m.x, 2)
            main_stream.wait_stream(input_stream)
        if args.shape == "input_prefetch":
            with torch.cuda.stream(input_stream):
                prepped = (next_in * 3.0).sum()  # the inputs' kernel, on the input stream
            main_stream.wait_stream(input_stream)
            m.state.add_(prepped)
        pop()
        ev[1].record(main_stream)
        if args.shape == "model_thread":
            through_the_model_thread(i, ev, t0)
            continue
        if args.shape == "two_workers":
            to_model.put(ev)
            from_model.get()
            pop()
            if i >= 0:
                rows.append((i, ev, (time.perf_counter() - t0) * 1e3, {}))
            continue
        if args.shape in ("worker_input_stream", "shared_input_stream"):
            to_model.put(ev)
            from_model.get()
            push("sample")
            main_stream.wait_stream(worker_stream)
            _ = worker_out[0][0, 0].item()
            pop()
            ev[3].record(main_stream)
            pop()
            if i >= 0:
                rows.append((i, ev, (time.perf_counter() - t0) * 1e3, {}))
            continue

        if args.shape == "draft_steps":
            y = m.x
            for k in range(3):
                if k:
                    m.state.add_(1.0)  # bookkeeping between the steps, in no phase
                    spin(0.03)
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record(main_stream)
                push("forward")
                y = m.chain(y, 2)
                spin(0.05)
                pop()
                b.record(main_stream)
                steps.append((a, b))
            ev[2].record(main_stream)
            push("sample")
            _ = y[0, :1024].float().softmax(0)[0].item()
            pop()
            ev[3].record(main_stream)
            pop()
            if i >= 0:
                rows.append((i, ev, (time.perf_counter() - t0) * 1e3, {"forward": steps}))
            continue

        push("forward")
        if args.shape == "nested_same_name":
            spin(0.02)
            push("forward")  # the model's own range, named as the engine's
            y = m.chain(m.x, 6)
            pop()
        elif args.shape == "empty_cache_sync":
            y = m.chain(m.x, 3)
            torch.empty(128 * 1024 * 1024, dtype=torch.bfloat16, device=dev)  # 256 MB, freed at once
            torch.cuda.empty_cache()  # cudaFree: waits for the device
            y = m.chain(y, 3)
        elif args.shape == "triton_kernel":
            y = m.chain(m.x, 5)
            triton_step()
        elif args.shape == "graph_copy_nodes":
            graph.replay()
            y = static_out
        elif args.shape in ("side_join_same", "own_stream"):
            y = forward_fork(m, join=True)
        elif args.shape in ("side_join_later", "side_join_next"):
            y = forward_fork(m, join=False)
        elif args.shape == "join_then_fork":
            if i > -args.warmup:
                main_stream.wait_stream(m.side)  # the previous cycle's side work, joined first
                m.state.add_(m.pending_side[0, :1024].float())
            y = forward_fork(m, join=False)  # then forked again, left running
        elif args.shape == "plan_stream":
            for k, layers in ((0, 4), (1, 2)):
                m.side.wait_stream(main_stream)  # the plan stream takes its turn
                with torch.cuda.stream(m.side):
                    if k == 0:
                        meta.copy_(meta_pinned, non_blocking=True)  # the batch's metadata
                    plan = (meta * 2.0 + 1.0).sum()  # planning: a small kernel
                main_stream.wait_stream(m.side)  # handed back
                y = m.chain(m.x if k == 0 else y, layers)
                plan_out.add_(plan)
        elif args.shape == "plan_joined":
            with torch.cuda.stream(m.side):  # never made to wait for the current stream
                meta.copy_(meta_pinned, non_blocking=True)  # the batch's metadata
                planned = m.chain(m.x, 4)  # planning, heavier than forward's own work here
            main_stream.wait_stream(m.side)  # joined
            y = m.chain(planned, 1)
        elif args.shape == "input_prefetch":
            input_stream.wait_stream(main_stream)  # to reuse the inputs' buffers
            with torch.cuda.stream(input_stream):
                staged = (m.x[:1024] * 0.5).float().sum()  # a micro-batch prepared there
            main_stream.wait_stream(input_stream)
            y = m.chain(m.x, 6)
            with torch.cuda.stream(input_stream):
                next_in.copy_(m.x[:1024] * 2.0)  # the next batch, beside the model
            plan_out.add_(staged)
        elif args.shape == "fork_early":
            with torch.cuda.stream(m.side):
                z = m.chain(m.x, 6)
            y = m.chain(m.x, 1)
            main_stream.wait_stream(m.side)
            y = y + z
        elif args.shape == "background_kernels":
            y = m.chain(m.x, 6)
        elif args.shape == "copy_event_sync":
            y = m.chain(m.x, 6)
        elif args.shape == "input_stream_copy":
            main_stream.wait_event(inputs_ready)
            y = m.chain(m.x, 6)
        elif args.shape in ("copy_only_prepare", "pageable_h2d", "dtoh_pinned_event", "idle_sample", "range_start_end",
                            "plain", "two_processes", "stream_sync", "async_alloc"):
            y = m.chain(m.x, 6)
        elif args.shape == "device_sync_mid":
            y = m.chain(m.x, 3)
            torch.cuda.synchronize()
            y = m.chain(y, 3)
        elif args.shape == "graph_side_stream":
            m.side.wait_stream(main_stream)
            with torch.cuda.stream(m.side):
                graph.replay()
            main_stream.wait_stream(m.side)
            y = m.chain(static_out, 1)
        elif args.shape == "ahead_graph":
            graph.replay()
            y = static_out
        elif args.shape == "event_poll":
            y = m.chain(m.x, 6)
        elif args.shape == "two_graph_streams":
            for st, g in ((m.side, graph), (side2, graph_b)):
                st.wait_stream(main_stream)
                with torch.cuda.stream(st):
                    g.replay()
            main_stream.wait_stream(m.side)
            main_stream.wait_stream(side2)
            y = m.chain(static_out + static_out_b, 1)
        elif args.shape == "piecewise_graphs":
            graph.replay()
            static_mid.copy_(m.chain(static_out, 1))
            graph_b.replay()
            y = static_out_b
        elif args.shape == "worker_stream_handoff":
            handed = torch.cuda.Event()
            handed.record(main_stream)
            handoff_in.put(handed)
            y, done = handoff_out.get()
            main_stream.wait_event(done)
        else:
            graph.replay()
            y = static_out
        spin(0.1)
        pop()
        ev[2].record(main_stream)

        push("sample")
        if args.shape == "side_join_later":
            main_stream.wait_stream(m.side)
            y = y + m.pending_side
        tok = y[0, :1024].float().softmax(0) if args.shape != "idle_sample" else None
        if args.shape == "copy_event_sync":
            m.copy.wait_stream(main_stream)
            with torch.cuda.stream(m.copy):
                m.host.copy_(tok, non_blocking=True)
                done = torch.cuda.Event()
                done.record(m.copy)
            ready.append(done)
            tok.record_stream(m.copy)
        elif args.shape == "ahead_graph":
            m.host.copy_(tok, non_blocking=True)
            done = torch.cuda.Event()
            done.record(main_stream)
            ready.append(done)
        elif args.shape == "event_poll":
            polled = torch.cuda.Event()
            polled.record(main_stream)
            while not polled.query():
                pass
        elif args.shape == "stream_sync":
            m.host.copy_(tok, non_blocking=True)
            main_stream.synchronize()
        elif args.shape == "dtoh_pinned_event":
            m.host.copy_(tok, non_blocking=True)
            copied = torch.cuda.Event()
            copied.record(main_stream)
            copied.synchronize()
        elif args.shape == "idle_sample":
            previous_y = y
            spin(0.2)  # bookkeeping on the CPU; launches nothing
        else:
            _ = tok[0].item()  # the sampled token, read on the CPU
        pop()
        ev[3].record(main_stream)
        pop()
        if i >= 0:
            rows.append((i, ev, (time.perf_counter() - t0) * 1e3, {}))
    stop.set()
    handoff_in.put(None)
    to_model.put(None)
    to_offload.put(None)
    torch.cuda.synchronize()
    with open(args.gt, "w") as fh:
        for i, ev, cpu, spans in rows:
            edges = spans.pop("edges", None)
            if edges is not None:
                # One event per boundary, as phases tile their cycle: the first phase's start,
                # then each phase's end (the handing thread's), the last phase's end.
                ev = [edges[PHASES[0]][0][0]] + [edges[n][0][1] for n in PHASES]
            # A phase timed by events at its own ranges' edges (``spans``, draft_steps): the sum
            # of its instances' times.
            phase_ms = {n: (sum(a.elapsed_time(b) for a, b in spans[n]) if n in spans else ev[k].elapsed_time(ev[k + 1]))
                        for k, n in enumerate(PHASES)} if not spans.pop("lone", False) else {"forward": ev[0].elapsed_time(ev[1])}
            rec = {"cycle": i, "cpu_ms": cpu, "shape": args.shape, "pid": os.getpid(), "phase_ms": phase_ms,
                   "cycle_ms": ev[0].elapsed_time(ev[-1])}
            if edges is not None:
                rec["edge_ms"] = {n: a.elapsed_time(b) for n, ((a, b),) in edges.items()}
            fh.write(json.dumps(rec) + "\n")
    if child is not None:
        child.stdin.close()
        child.wait()
    print(f"{args.shape}: {args.cycles} cycles", flush=True)


if __name__ == "__main__":
    main()
