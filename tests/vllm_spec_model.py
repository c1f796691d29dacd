"""An event model of vLLM V1's GPU model runner, async scheduling + EAGLE speculative decoding,
one rank (UniProcExecutor: engine core, model runner and the get_output helper thread in one
process), written apart from tracerecon.

Shape, from vllm-project/vllm (stored copy @000fc94b754f) vllm/v1/worker/gpu_model_runner.py:
  execute_model: "gpu_model_runner: preprocess" (synchronize_input_prep: cudaEventSynchronize on
      prepare_inputs_event recorded at the previous preprocess's end, then _update_states,
      _prepare_inputs: H2D copies, update_num_computed_tokens_for_batch_change kernel using the
      previous step's valid_sampled_token_count_gpu, prev_sampled_token_ids / draft ids scatter;
      prepare_inputs_event.record() on the current stream at the range's end),
      "gpu_model_runner: forward" (target model, CUDA graph), "gpu_model_runner: postprocess"
      (compute_logits), then, in no range, deferred_state_corrections_fn ->
      _get_valid_sampled_token_count -> valid_sampled_token_count_event.synchronize().
  sample_tokens: [apply_grammar_bitmask, no range], "gpu_model_runner: sample" (rejection
      sampler), [_update_states_after_model_execute, no range: hybrid models' kernels],
      "gpu_model_runner: draft" (prepare_next_token_ids_padded, _copy_valid_sampled_token_count:
      copy stream waits for the current stream, D2H copy, event record; prepare_inputs_padded;
      EagleProposer.propose: drafter forward + k-1 more steps, CUDA graphs), "bookkeep",
      "eplb", "ModelRunnerOutput", "AsyncGPUModelRunnerOutput" (async_output_copy_stream
      .wait_stream(current), D2H copy, async_copy_ready_event.record() on the copy stream),
      "set_async_sampled_token_ids".
  vllm/v1/engine/core.py step_with_batch_queue: schedule(k), execute_model(k), sample_tokens(k),
      then (queue full) pop k-1 and future.result(): get_output on a helper thread does
      async_copy_ready_event.synchronize().
Truth: CUDA events on the default stream at each phase range's start (and at the cycle's last
range's end); a phase's end is the next phase's start where no GPU work was queued on the
stream between them, else its own end (tracerecon's documented tiling convention).
"""

from __future__ import annotations

from collections import defaultdict

from nsys_factory import FakeTrace
from stream_log import StreamLog

U = 1000
D, C, K, DT = 7, 20, 21, 22  # current stream, async output copy, valid-count copy, draft-token copy
HELPER = 2  # tid of the get_output thread

# The phase each of vLLM's scopes is, as tracerecon's vLLM preset names them (the tests read with the preset itself).
LABEL = {"gpu_model_runner: preprocess": "prepare", "gpu_model_runner: forward": "verify",
         "gpu_model_runner: postprocess": "verify", "gpu_model_runner: sample": "sample",
         "gpu_model_runner: draft": "draft", "gpu_model_runner: bookkeep": "bookkeep",
         "gpu_model_runner: ModelRunnerOutput": "bookkeep"}


class Model(StreamLog):
    def __init__(self, node_mode=False):
        super().__init__()
        self.node_mode = node_mode
        self.t = FakeTrace()
        self.ranges = []  # (name, start, end) on the main thread

    def kernel(self, s, cpu, dur, name="k"):
        st = self.start(s, cpu + 2)
        self.t.kernel(self.t.call("cudaLaunchKernel", cpu * U, (cpu + 2) * U), st * U, (st + dur) * U, stream=s, name=name)
        self.queue(s, cpu + 2, st + dur)
        return cpu + 3

    def graph(self, s, cpu, dur):
        st = self.start(s, cpu + 3)
        corr = self.t.call("cudaGraphLaunch_v10000", cpu * U, (cpu + 3) * U)
        if self.node_mode:  # nsys --cuda-graph-trace=node: the graph's kernels, with the launch's correlation id
            a = st
            for i in range(3):
                b = st + dur * (i + 1) // 3
                self.t.kernel(corr, a * U, b * U, stream=s, node=1000 + i, name=f"graph_node_{i}")
                a = b
        else:
            self.t.graph(corr, st * U, (st + dur) * U, stream=s)
        self.queue(s, cpu + 3, st + dur)
        return cpu + 4

    def copy(self, s, cpu, dur, kind):
        st = self.start(s, cpu + 2)
        self.t.copy(self.t.call("cudaMemcpyAsync", cpu * U, (cpu + 2) * U), st * U, (st + dur) * U, kind=kind, stream=s)
        self.queue(s, cpu + 2, st + dur)
        return cpu + 3

    def record(self, ev, s, cpu, tid=None):
        ev, r = self.recorded(ev, s, cpu + 1)
        self.t.event_record(ev, r, cpu * U, (cpu + 1) * U, tid=tid, stream=s)
        return (ev, r), cpu + 1

    def wait(self, waiter, er, cpu):
        self.t.stream_wait(er[0], er[1], cpu * U, (cpu + 1) * U, stream=waiter)
        self.queue(waiter, cpu + 1, self.record_done[er], work=False)
        return cpu + 1

    def wait_stream(self, waiter, src, cpu):
        er, cpu = self.record(100 + src * 10 + waiter, src, cpu)
        return self.wait(waiter, er, cpu)

    def event_sync(self, er, cpu, tid=None, stream=D):
        back = max(cpu + 2, self.record_done[er] + 1)
        self.t.sync_record(self.t.call("cudaEventSynchronize", cpu * U, back * U, tid=tid), cpu * U, back * U, sync_type=1, stream=stream)
        return back

    def rng(self, name, a, b, pid=10, tid=None):
        self.t.range(name, a * U, b * U, pid=pid, tid=tid)
        if pid == 10:
            self.ranges.append((name, a, b))


def per(v, k):
    return v[k % len(v)] if isinstance(v, (list, tuple)) else v


def vllm_spec(steps=12, sched=60, prep_cpu=150, fwd=(400,), logits=40, sample=(60,), draft_first=(80,), draft_step=(50,), k_spec=3,
              graphs=True, piecewise=False, out_copy=5, hybrid=0, grammar=0, draft_copy=False, bookkeep_cpu=40, rpc=30,
              update_cpu=60, node_mode=False, multiproc=False, no_draft_every=0, empty_every=0, empty_steps=()):
    """Writes the trace; returns (trace, truth {(cycle, phase): us})."""
    m = Model(node_mode)
    cpu = 100
    prep_evt = None
    count_evt = None
    helper_done = {}
    for k in range(steps):
        # engine core: schedule step k
        m.rng("schedule: schedule", cpu, cpu + sched, pid=9 if multiproc else 10)
        cpu += sched + 5
        if (empty_every and k % empty_every == empty_every - 1) or k in empty_steps:
            # nothing scheduled: preprocess (_update_states) returns EMPTY_MODEL_RUNNER_OUTPUT, no sample_tokens
            a = cpu
            cpu += 2
            if prep_evt is not None:
                cpu = m.event_sync(prep_evt, cpu)
            cpu += 40
            m.rng("gpu_model_runner: preprocess", a, cpu)
            cpu += 20
            helper_done[k] = cpu  # a finished (non-async) output
            if k > 0:
                cpu = max(cpu + 3, helper_done[k - 1] + 5) + update_cpu
            cpu += 10
            continue
        # execute_model(k)
        a = cpu
        cpu += 2
        if prep_evt is not None:
            cpu = m.event_sync(prep_evt, cpu)  # synchronize_input_prep
        cpu += per(prep_cpu, k) // 2
        for _ in range(3):
            cpu = m.copy(D, cpu, 2, kind=1)  # input_ids / positions / block table H2D
            cpu += 5
        if k > 0:
            cpu = m.kernel(D, cpu, 3, "update_num_computed_tokens")
            cpu = m.kernel(D, cpu, 3, "prepare_input_ids_scatter")
        cpu += per(prep_cpu, k) // 2
        prep_evt, cpu = m.record(1, D, cpu)  # prepare_inputs_event.record() on exit
        cpu += 1
        m.rng("gpu_model_runner: preprocess", a, cpu)
        cpu += 10
        a = cpu
        cpu += 3
        f = per(fwd, k)
        if graphs and not piecewise:
            cpu = m.graph(D, cpu, f)
        elif graphs:  # piecewise: graph pieces with eager attention between
            for i in range(4):
                cpu = m.graph(D, cpu, f * 3 // 20)
                cpu = m.kernel(D, cpu + 2, f // 10, "attn")
        else:
            for i in range(8):
                cpu = m.kernel(D, cpu + 6, f // 8, "layer")
        cpu += 3
        m.rng("gpu_model_runner: forward", a, cpu)
        a = cpu
        cpu += 2
        cpu = m.kernel(D, cpu, 2, "index")
        cpu = m.kernel(D, cpu, logits, "compute_logits")
        cpu += 3
        m.rng("gpu_model_runner: postprocess", a, cpu)
        cpu += 5
        if count_evt is not None:
            cpu = m.event_sync(count_evt, cpu)  # deferred_state_corrections_fn
        cpu += 15 + rpc
        # sample_tokens(k)
        if grammar:
            cpu = m.kernel(D, cpu, grammar, "apply_token_bitmask")  # apply_grammar_bitmask, no range
            cpu += 5
        a = cpu
        cpu += 3
        s = per(sample, k)
        for part in (s // 3, s // 3, s - 2 * (s // 3)):
            cpu = m.kernel(D, cpu + 4, part, "rejection_sample")
        cpu += 4
        m.rng("gpu_model_runner: sample", a, cpu)
        cpu += 8
        if hybrid:
            cpu = m.kernel(D, cpu, hybrid, "num_accepted_tokens")  # _update_states_after_model_execute
            _, cpu = m.record(2, D, cpu)
            cpu += 5
        skip_draft = no_draft_every and k % no_draft_every == no_draft_every - 1
        # The next token ids and the accepted counts' copy to the CPU: inside the draft range, or,
        # where the input does not fit in the drafter, in no range (no draft range at all).
        a = cpu
        cpu += 0 if skip_draft else 3
        cpu = m.kernel(D, cpu, 5, "prepare_next_token_ids_padded")
        cpu = m.wait_stream(K, D, cpu)
        cpu = m.copy(K, cpu, 2, kind=2)
        count_evt, cpu = m.record(3, K, cpu)
        if skip_draft:
            cpu = m.kernel(D, cpu + 3, 2, "zeros")
            cpu += 10
        else:
            cpu = m.kernel(D, cpu + 3, 4, "prepare_inputs_padded")
            cpu += 20
            df, ds = per(draft_first, k), per(draft_step, k)
            cpu = (m.graph(D, cpu, df) if graphs else m.kernel(D, cpu, df, "draft_fwd"))
            cpu = m.kernel(D, cpu + 2, 6, "argmax")
            for j in range(k_spec - 1):
                cpu = m.kernel(D, cpu + 8, 2, "update_metadata")
                cpu = (m.graph(D, cpu + 2, ds) if graphs else m.kernel(D, cpu + 2, ds, "draft_fwd"))
                cpu = m.kernel(D, cpu + 2, 6, "argmax")
            if draft_copy:  # _copy_draft_token_ids_to_cpu (structured output / penalties)
                cpu = m.wait_stream(DT, D, cpu + 2)
                cpu = m.copy(DT, cpu, 2, kind=2)
                _, cpu = m.record(4, DT, cpu)
            cpu += 4
            m.rng("gpu_model_runner: draft", a, cpu)
        cpu += 3
        m.rng("gpu_model_runner: bookkeep", cpu, cpu + bookkeep_cpu)
        cpu += bookkeep_cpu + 3
        m.rng("gpu_model_runner: eplb", cpu, cpu + 2)
        cpu += 4
        m.rng("gpu_model_runner: ModelRunnerOutput", cpu, cpu + 10)
        cpu += 12
        a = cpu
        cpu += 2
        cpu = m.wait_stream(C, D, cpu)
        cpu = m.copy(C, cpu, per(out_copy, k), kind=2)
        oe, cpu = m.record(5, C, cpu)
        cpu += 2
        m.rng("gpu_model_runner: AsyncGPUModelRunnerOutput", a, cpu)
        m.rng("gpu_model_runner: set_async_sampled_token_ids", cpu + 1, cpu + 4)
        cpu += 8
        # UniProcExecutor: get_output submitted to the helper thread
        h = max(cpu + 5, helper_done.get(k - 1, 0))
        back = m.event_sync(oe, h, tid=HELPER, stream=C)
        helper_done[k] = back + 20  # .tolist(), parse_output
        # step_with_batch_queue: queue full from step 1 on: pop k-1 and wait for its output
        if k > 0:
            cpu = max(cpu + 3, helper_done[k - 1] + 5)
            cpu += update_cpu  # update_from_output
        cpu += 10
    # the last step's output, drained
    return m, truth(m)


def truth(m: Model):
    # phase ranges in order, cycles start at each preprocess
    phases = []
    cyc = -1
    for name, a, b in m.ranges:
        if name == "gpu_model_runner: preprocess":
            cyc += 1
        if name in LABEL:
            phases.append((cyc, LABEL[name], a, b))
    out = defaultdict(int)
    m.per_range = {}
    for i, (c, label, a, b) in enumerate(phases):
        nxt = phases[i + 1] if i + 1 < len(phases) else None
        end = b
        if nxt is not None and nxt[0] == c and not any(b < q <= nxt[2] and s == D for q, s in zip(m.launches, m.launch_streams)):
            end = nxt[2]
        out[(c, label)] += m.reads(D, end) - m.reads(D, a)
        m.per_range[a] = (c, label, m.reads(D, end) - m.reads(D, a))
    return dict(out)
