"""Engine presets against the engine stand-ins in tests/engines (``sglang``, ``vllm``): the real
engines cannot be installed here, so these packages mirror their module paths, class and method
names, NVTX switches and process shapes, and log the tokens each step accepted."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, run_cli, run_profiled
from tracerecon import presets, wrap
from tracerecon.errors import UsageError

ENGINES = ROOT / "tests" / "engines"
NSYS = shutil.which("nsys")
needs_nsys = pytest.mark.skipif(NSYS is None and not os.environ.get("TRACERECON_REQUIRE_NSYS"), reason="nsys not installed")
SGLANG_V2 = "sglang.srt.speculative.eagle_worker_v2"


def engine_env(tmp_path: Path, engines: Path = ENGINES, **extra: str) -> dict:
    """The environment a stand-in runs in: on PYTHONPATH only here, with its acceptance log."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "SGLANG_"))}
    return dict(env, PYTHONPATH=str(engines), STANDIN_ACCEPT_LOG=str(tmp_path / "accepted.jsonl"), **extra)


def logged_acceptance(tmp_path: Path) -> list[int]:
    return [json.loads(line)["accepted"] for line in (tmp_path / "accepted.jsonl").read_text().splitlines()]


def stand_in_copy(tmp_path: Path, engine: str, version: str) -> Path:
    """A copy of a stand-in installed as another version (its own dist-info)."""
    root = tmp_path / "engines"
    shutil.copytree(ENGINES / engine, root / engine)
    shutil.copytree(ENGINES / "engine_standin", root / "engine_standin")
    meta = root / f"{engine}-{version}.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {engine}\nVersion: {version}\n")
    return root


# --- no profiler needed ----------------------------------------------------------------------


def test_every_preset_spec_parses_and_round_trips():
    for p in presets.PRESETS.values():
        for spec in presets.all_specs(p):
            t = wrap.WrapTarget.parse(spec)
            assert t.spec() == spec and t.target == presets.target_of(spec)
            if t.action == wrap.ACCEPTED:
                assert t.label in presets.EXTRACTORS


@pytest.mark.parametrize("spec, action, label", [
    ("m:C.f", wrap.PHASE, "f"), ("m:C.f=verify", wrap.PHASE, "verify"), ("m:C.f=verify:begin", wrap.SPAN_BEGIN, "verify"),
    ("m:C.f=draft:stop", wrap.SPAN_STOP, "draft"), ("m:C.f=@cycle:end", wrap.CYCLE_END, ""), ("m:C.f=@accepted:x", wrap.ACCEPTED, "x"),
])
def test_wrap_actions_parse(spec, action, label):
    t = wrap.WrapTarget.parse(spec)
    assert (t.action, t.label) == (action, label)


@pytest.mark.parametrize("bad", ["no_colon", "m:=x", "m:C.f=@nope", "m:C f=x", "1m:C.f=x"])
def test_bad_wrap_specs_are_refused(bad):
    with pytest.raises(ValueError):
        wrap.WrapTarget.parse(bad)


def test_resolver_finds_inherited_methods_without_importing_the_engine(monkeypatch):
    from tracerecon import resolve

    monkeypatch.syspath_prepend(str(ENGINES))
    eagle = "vllm.v1.worker.gpu.spec_decode.eagle.speculator:EagleSpeculator"
    doc = resolve.answer({"dists": ["vllm", "sglang", "no-such-dist"], "targets": [
        f"{eagle}.on_prefill_begin",  # defined in autoregressive/speculator.py, a base class imported with `from ... import`
        f"{eagle}.propose", f"{eagle}.no_such_method", f"{SGLANG_V2}:EagleDraftWorker._draft_extend_for_decode",
        "vllm.v1.worker.gpu.no_such_module:X.y",
    ]})
    assert doc["versions"] == {"vllm": "0.29.1", "sglang": "0.5.12", "no-such-dist": None}
    assert list(doc["found"].values()) == [True, True, False, True, False]
    assert doc["modules"]["vllm.v1.worker.gpu.no_such_module"] is False
    assert not any(m == "vllm" or m.startswith(("vllm.", "sglang")) for m in sys.modules)


def test_launch_python_is_the_commands_interpreter(tmp_path):
    script = tmp_path / "serve"
    script.write_text(f"#!{sys.executable}\nprint('hi')\n")
    script.chmod(0o755)
    assert wrap.launch_python([str(script), "--port", "1"]) == sys.executable
    assert wrap.launch_python([sys.executable, "-m", "x"]) == shutil.which(sys.executable)
    assert wrap.launch_python(["true"]) == sys.executable


def _found(*specs_groups) -> dict:
    return {presets.target_of(s): True for group in specs_groups for s in group}


def test_choose_takes_the_most_complete_name_set_that_exists():
    sg = presets.SGLANG
    both = presets.choose(sg, "0.5.9", _found(sg.sets[0].required, sg.sets[0].optional))
    assert both.name_set.name == "spec-v1+v2" and not both.warnings and not both.missing_optional
    v2 = presets.choose(sg, "0.5.12", _found(sg.sets[1].required))
    assert v2.name_set.name == "spec-v2"
    assert v2.missing_optional == (f"{SGLANG_V2}:EAGLEWorkerV2.on_verify_complete_cpu",)
    assert all("@accepted" not in s for s in v2.wraps)
    old = presets.choose(sg, "0.3.0", _found(sg.sets[2].required))
    assert old.name_set.name == "spec-v1" and "0.3.0 is older" in old.warnings[0]
    unknown = presets.choose(presets.VLLM, None, _found(presets.VLLM.sets[2].required))
    assert unknown.name_set.name == "v1" and "version unknown" in unknown.warnings[0]
    with pytest.raises(UsageError, match=r"EagleDraftWorker\.draft not found in sglang 0\.5\.12"):
        presets.choose(sg, "0.5.12", {t: v for t, v in _found(sg.sets[1].required).items() if not t.endswith(".draft")})


def test_multi_layer_eagle_workers_are_wrapped_where_the_release_has_them():
    # GIVEN SGLang's spec-v2 names, with and without the multi-layer EAGLE (MTP) worker module
    # (sgl-project/sglang multi_layer_eagle_worker_v2.py: MultiLayerEagleWorkerV2 runs instead of
    # EAGLEWorkerV2 for MTP draft models, with the same steps)
    sg = presets.SGLANG
    ml = "sglang.srt.speculative.multi_layer_eagle_worker_v2"
    alt = [s for s in sg.sets[1].alternatives]
    with_ml = presets.choose(sg, "0.5.12", _found(sg.sets[1].required, sg.sets[1].optional, alt))
    without = presets.choose(sg, "0.5.12", _found(sg.sets[1].required, sg.sets[1].optional))
    # THEN where it exists its steps are wrapped as the same phases and cycle; where not,
    # nothing is said
    assert {s for s in with_ml.wraps if s.startswith(ml)} == {
        f"{ml}:MultiLayerEagleWorkerV2.forward_batch_generation=@cycle", f"{ml}:MultiLayerEagleDraftWorker.draft=draft",
        f"{ml}:MultiLayerEagleWorkerV2.verify=verify", f"{ml}:MultiLayerEagleDraftWorker._draft_extend_for_decode=draft_extend",
        f"{ml}:MultiLayerEagleDraftWorker._draft_extend_for_prefill=draft_extend"}
    assert not any(s.startswith(ml) for s in without.wraps) and not without.warnings and not without.missing_optional


def test_a_missing_attribute_at_run_time_warns_once(capsys):
    import types

    mod = types.ModuleType("standin_mod")
    mod.Worker = type("Worker", (), {"draft": lambda self: 1})
    targets = [wrap.WrapTarget.parse("standin_mod:Worker.draft=draft"), wrap.WrapTarget.parse("standin_mod:Worker.gone=verify")]
    for _ in range(2):
        wrap._report_missing("standin_mod", wrap.apply(mod, targets))
    err = capsys.readouterr().err
    assert err.count("standin_mod has no Worker.gone") == 1 and "draft" not in err.split("Worker.gone")[0].split("warning:")[-1]
    assert mod.Worker().draft() == 1 and mod.Worker.draft.__tracerecon_wrapped__


def test_a_bad_wrap_target_is_an_error_before_nsys_starts(tmp_path):
    res = run_cli("run", "-o", str(tmp_path / "run"), "--wrap", f"{SGLANG_V2}:EagleDraftWorker.draft_v3=draft",
                  "--", sys.executable, "-m", "sglang.launch_server", env=engine_env(tmp_path))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    (line,) = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert "EagleDraftWorker.draft_v3" in line and "sglang 0.5.12" in line
    assert not (tmp_path / "run").exists()  # nothing ran


@pytest.mark.parametrize("module", ["engine_main", "__main__"])
def test_wrapping_the_script_that_runs_as_main_is_an_error_before_nsys_starts(tmp_path, module):
    # GIVEN a script whose own functions are the steps, and --wrap naming them by the script's
    # module name (or as __main__)
    script = tmp_path / "engine_main.py"
    script.write_text("def step(i):\n    return i\n\nfor i in range(3):\n    step(i)\n")
    # WHEN run
    res = run_cli("run", "-o", str(tmp_path / "run"), "--wrap", f"{module}:step=@cycle", "--", sys.executable, str(script))
    # THEN one line says the script runs as __main__ (the pre-check passed engine_main, and the
    # run ended with an empty trace; __main__ read "no module __main__"), and nothing ran
    assert res.returncode == 2 and "Traceback" not in res.stderr
    (line,) = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert "runs as __main__" in line and "move the functions into a module" in line
    assert not (tmp_path / "run").exists()


def test_a_module_named_by_a_later_script_argument_can_be_wrapped():
    # GIVEN `python run.py --config model.py`: run.py runs as __main__, model.py is an argument
    from tracerecon.wrap import scripts_run

    here = Path(__file__)
    # THEN only the first script counts as __main__
    assert scripts_run([sys.executable, str(here), "--config", str(ROOT / "tests" / "conftest.py")]) == [str(here)]
    # and under -m or -c no script runs as __main__ (a .py argument is the module's own argument)
    assert scripts_run([sys.executable, "-m", "engine", "--config", str(here)]) == []
    assert scripts_run([sys.executable, "-c", "import engine", str(here)]) == []


def test_a_renamed_engine_method_is_an_error_naming_it_and_the_version(tmp_path):
    engines = stand_in_copy(tmp_path, "sglang", "0.6.0")
    worker = engines / "sglang" / "srt" / "speculative" / "eagle_worker_v2.py"
    worker.write_text(worker.read_text().replace("def _draft_extend_for_decode(", "def _draft_extend_after_decode("))
    res = run_cli("run", "-o", str(tmp_path / "run"), "--preset", "sglang", "--", sys.executable, "-m", "sglang.launch_server",
                  env=engine_env(tmp_path, engines))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    (line,) = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert "EagleDraftWorker._draft_extend_for_decode not found in sglang 0.6.0" in line


def test_an_old_version_warns_and_says_which_names_it_uses(tmp_path):
    engines = stand_in_copy(tmp_path, "sglang", "0.4.0")
    # The old --phases name still works: it is the version-aware preset now.
    res = run_cli("run", "-o", str(tmp_path / "run"), "--nsys", str(tmp_path / "no-nsys"), "--phases", "sglang-eagle",
                  "--", sys.executable, "-m", "sglang.launch_server", env=engine_env(tmp_path, engines))
    assert res.returncode == 2 and "nsys not found" in res.stderr  # stopped at nsys, after the preset was checked
    assert "--phases sglang-eagle is now --preset sglang" in res.stderr
    assert "sglang 0.4.0 is older than the versions this preset follows" in res.stderr and "spec-v2 names" in res.stderr


# --- under Nsight Systems -------------------------------------------------------------------


def _report(out: Path) -> dict:
    # No --phase: run.json says what a phase is. --skip-cycles 0: a slow first cycle on a busy
    # machine would otherwise be warm-up and change the counts.
    res = run_cli("report", str(out), "--json", "--skip-cycles", "0")
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout)


def _cycles(out: Path, rank_index: int = 0) -> dict:
    from tracerecon import api
    from tracerecon.analysis.config import PhaseConfig
    from tracerecon.run_dir import recorded_phase_options

    opts = recorded_phase_options([out])
    analysis = api.load([str(out)], PhaseConfig(phases=tuple(opts["phases"])))
    return analysis.ranks[rank_index].cycles.select(["cycle", "accepted_tokens", "n_phases"]).to_pydict()


@pytest.mark.nsys
@needs_nsys
def test_sglang_preset_gives_phases_and_accepted_tokens(tmp_path):
    out = tmp_path / "run"
    res = run_profiled("run", "-o", str(out), "--preset", "sglang", "--", sys.executable, "-m", "sglang.launch_server",
                  "--num-batches", "10", env=engine_env(tmp_path))
    assert res.returncode == 0, res.stderr[-3000:]
    assert "preset sglang: sglang 0.5.12" in res.stderr and "spec-v2 names" in res.stderr
    meta = json.loads((out / "run.json").read_text())
    assert meta["phase_options"]["phases"] == ["draft", "verify", "draft_extend"]
    assert meta["phase_options"]["presets"] == [{"name": "sglang", "engine": "sglang", "version": "0.5.12", "names": "spec-v2"}]
    doc = _report(out)
    (rank,) = doc["ranks"]  # the scheduler process: the only one with phases
    assert {p["phase"]: p["n"] for p in rank["phases"]} == {"draft": 9, "verify": 9, "draft_extend": 10}
    cycles = _cycles(out)
    assert cycles["n_phases"] == [1] + [3] * 9  # the prefill batch, then decode batches
    # Learnt one batch later (overlap scheduler), reported for the batch that verified them.
    assert cycles["accepted_tokens"] == [None] + logged_acceptance(tmp_path)
    ranges = json.loads(run_cli("ranges", str(out), "--json").stdout)["ranks"][0]["ranges"]
    assert "scheduler.run_batch" in {r["name"] for r in ranges}  # SGLANG_ENABLE_NVTX_SCHEDULER reached the engine


@pytest.mark.nsys
@needs_nsys
@pytest.mark.parametrize("runner", ["2", "0"], ids=["model-runner-v2", "model-runner-v1"])
def test_vllm_preset_gives_phases_and_accepted_tokens(tmp_path, runner):
    out = tmp_path / "run"
    res = run_profiled("run", "-o", str(out), "--preset", "vllm", "--", sys.executable, "-m", "vllm.entrypoints.openai.api_server",
                  "--num-steps", "10", env=engine_env(tmp_path, VLLM_USE_V2_MODEL_RUNNER="1" if runner == "2" else "0"))
    assert res.returncode == 0, res.stderr[-3000:]
    assert "preset vllm: vllm 0.29.1" in res.stderr and "mrv2+v1 names" in res.stderr
    doc = _report(out)
    (rank,) = doc["ranks"]  # the EngineCore process (scheduler + model runner), not the API server
    phases = {p["phase"]: p["n"] for p in rank["phases"]}
    if runner == "2":  # all wrapped: verify ends where drafting starts; draft prefill = draft_extend
        assert phases == {"draft": 10, "verify": 10, "draft_extend": 10}
    else:  # vLLM's own scopes ("gpu_model_runner: preprocess" / "forward" / "sample" / "draft" / "bookkeep"); V1 has no separate draft_extend
        assert phases == {"prepare": 10, "draft": 10, "verify": 10, "sample": 10, "bookkeep": 10}
        assert not any("GPU work was queued" in w for w in doc["warnings"])  # every scope's work is in a phase
    cycles = _cycles(out)
    # Async scheduling: a step's tokens are read (get_output) after the next step was launched.
    assert cycles["accepted_tokens"] == logged_acceptance(tmp_path)


ENGINES_H200 = ROOT / "sample_traces" / "engines_h200"


@pytest.mark.parametrize("name,phases", [
    ("sglang_overlap", {"draft", "verify", "draft_extend"}), ("sglang_normal", {"draft", "verify", "draft_extend"}),
    ("vllm_mrv2", {"draft", "verify", "draft_extend"}), ("vllm_mrv2_sync", {"draft", "verify", "draft_extend"}),
    ("vllm_v1", {"draft", "verify"}),
])
def test_h200_stand_in_runs_report_their_phases_and_logged_tokens_with_no_flags(name, phases):
    # GIVEN a preset run made on the H200 (GPU work on CUDA) and the engine's own acceptance log
    run = ENGINES_H200 / name
    logged = [json.loads(line)["accepted"] for line in (ENGINES_H200 / f"{name}.accepted.jsonl").read_text().splitlines()]
    # WHEN reported with no phase flags (run.json holds the preset's maps)
    res = run_cli("report", str(run), "--json", "--skip-cycles", "0", "--no-cache")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    (rank,) = doc["ranks"]
    # THEN the preset's phases are there, and every cycle's accepted tokens equal the log's
    assert {p["phase"] for p in rank["phases"]} == phases
    from tracerecon import api
    from tracerecon.cli.common import config_from
    from tracerecon.cli import build_parser

    args = build_parser().parse_args(["report", str(run)])
    analysis = api.load([str(run)], config_from(args))
    got = [t for t in analysis.ranks[0].cycles["accepted_tokens"].to_pylist() if t is not None]
    assert got == logged


def test_wrap_targets_beside_the_script_and_in_the_working_directory_resolve(tmp_path):
    # GIVEN a script whose own module sits beside it, run from another directory, and a module
    # in the working directory run with -m
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "mymodel.py").write_text("class Model:\n    def forward(self):\n        return 1\n")
    (proj / "train.py").write_text("import mymodel\nmymodel.Model().forward()\n")
    for cwd, command in ((tmp_path, [sys.executable, str(proj / "train.py")]), (proj, [sys.executable, "-m", "train"])):
        # WHEN run with a --wrap of that module (nsys made unfindable: the run stops right after the check)
        res = run_cli("run", "-o", str(tmp_path / "run"), "--nsys", str(tmp_path / "no-nsys"), "--wrap", "mymodel:Model.forward=verify",
                      "--", *command, cwd=str(cwd))
        # THEN the target resolves: the run gets as far as looking for nsys
        assert res.returncode == 2 and "nsys not found" in res.stderr, res.stderr
        assert "mymodel" not in res.stderr


def test_a_wrap_module_missing_under_a_guessed_interpreter_is_a_warning(tmp_path):
    # GIVEN a command whose Python cannot be told (a shell script) and a module it may import
    script = tmp_path / "launch.sh"
    script.write_text("#!/bin/sh\nexec python3 -c pass\n")
    script.chmod(0o755)
    res = run_cli("run", "-o", str(tmp_path / "run"), "--nsys", str(tmp_path / "no-nsys"), "--wrap", "elsewhere.engine:Worker.step=verify",
                  "--", str(script))
    # THEN a warning, and the run goes on (to the missing nsys here)
    assert res.returncode == 2 and "nsys not found" in res.stderr
    assert "warning: --wrap elsewhere.engine:Worker.step=verify: no module elsewhere.engine" in res.stderr


def _run_recording_cycle_prefix(tmp_path, prefix: str):
    """A copy of the sglang_normal run directory whose run.json recorded ``prefix``."""
    run = tmp_path / "run"
    shutil.copytree(ROOT / "sample_traces" / "engines_h200" / "sglang_normal", run)
    doc = json.loads((run / "run.json").read_text())
    doc["phase_options"]["cycle_prefix"] = prefix
    (run / "run.json").write_text(json.dumps(doc))
    return run


def _config_of(*argv):
    from tracerecon.cli import build_parser
    from tracerecon.cli.common import config_from

    return config_from(build_parser().parse_args(["report", *map(str, argv)]))


def test_an_explicit_cycle_prefix_wins_over_the_recorded_one(tmp_path):
    # GIVEN a run directory whose run.json recorded a cycle prefix
    run = _run_recording_cycle_prefix(tmp_path, "step")
    # WHEN reported with and without --cycle (even --cycle cycle, the default's value)
    recorded = _config_of(run)
    explicit = _config_of(run, "--cycle", "cycle")
    # THEN the recorded prefix applies only when none is given
    assert recorded.cycle_prefix == "step" and explicit.cycle_prefix == "cycle"


def test_a_recorded_empty_cycle_prefix_is_kept(tmp_path):
    # GIVEN a run directory made with --cycle "" (no cycle ranges: cycles from the phases)
    run = _run_recording_cycle_prefix(tmp_path, "")
    # WHEN reported without --cycle THEN the recorded "" applies, not the default "cycle"
    assert _config_of(run).cycle_prefix == ""


def test_the_vllm_preset_lists_its_phases_in_a_steps_order():
    # GIVEN the vLLM preset's phase maps THEN its phases run in a step's order, so that without
    # cycle ranges a cycle starts where a step does: V1 prepare (preprocess) first, V2 verify
    from tracerecon.analysis.config import PhaseConfig

    assert PhaseConfig(phases=presets.VLLM.phases).labels() == ("prepare", "verify", "draft_extend", "sample", "draft", "bookkeep")


def test_wrapping_a_module_the_wrappers_import_leaves_the_program_running(tmp_path):
    # GIVEN --wrap json:dumps=verify (json is one of tracerecon.instrument's own imports) and a
    # program that imports tracerecon.instrument before json
    prog = tmp_path / "p.py"
    prog.write_text("import tracerecon.instrument as ti\nimport json\nwith ti.cycle(0):\n    print(json.dumps({'a': 1}))\n")
    code = "from tracerecon.wrap import install; install()\nimport runpy; runpy.run_path(%r, run_name='__main__')\n" % str(prog)
    env = dict(os.environ, TRACERECON_WRAP="json:dumps=verify")
    # WHEN it runs with the wrappers installed (what sitecustomize does in every process)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    # THEN it runs (it died: "cannot import name 'cycle' from partially initialized module"), dumps wrapped
    assert res.returncode == 0 and res.stdout.strip() == '{"a": 1}', res.stderr


def test_an_analysing_command_reads_with_a_presets_phases(tmp_path):
    # GIVEN vLLM V1's export (its own NVTX scopes), not as its run directory
    trace = str(ROOT / "sample_traces" / "engines_h200" / "vllm_v1" / "report.sqlite.xz")
    # WHEN reported with --preset vllm, and with the preset's phases given as --phase flags
    by_preset = run_cli("report", "--json", trace, "--preset", "vllm")
    by_flags = run_cli("report", "--json", trace, *[a for spec in presets.VLLM.phases for a in ("--phase", spec)])
    # THEN both read the same, with the preset's phases that the trace has and no word of
    # those it lacks (a preset's list covers several versions: draft_extend is V2's)
    assert by_preset.returncode == 0 and by_flags.returncode == 0, (by_preset.stderr, by_flags.stderr)
    a, b = json.loads(by_preset.stdout), json.loads(by_flags.stdout)
    assert a["ranks"] == b["ranks"]
    assert [p["phase"] for p in a["ranks"][0]["phases"]] == ["prepare", "verify", "sample", "draft", "bookkeep"]
    assert not any("draft_extend" in w for w in a["warnings"]) and any("draft_extend" in w for w in b["warnings"])
    # AND with a --phase of the user's too, only that one is said where it matches nothing (a
    # review found the preset's draft_extend named with it)
    both = run_cli("report", trace, "--preset", "vllm", "--phase", "gpu_model_runner")
    assert "no range matched --phase gpu_model_runner (the other phases did)" in both.stderr and "draft_extend" not in both.stderr, both.stderr
    # AND a --phase the user gives that the preset has too is the user's: said where it matches nothing
    own = run_cli("report", trace, "--preset", "vllm", "--phase", "draft_extend")
    assert "no range matched --phase draft_extend" in own.stderr, own.stderr
    # AND an unknown preset is one line and exit 2, naming the known ones
    bad = run_cli("report", trace, "--preset", "nope")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "unknown preset 'nope' (known: sglang, vllm)" in bad.stderr, bad.stderr


def test_a_preset_for_a_command_that_names_no_python_says_where_it_looked(tmp_path):
    # GIVEN a command that is no Python program and names none (`true`), with no sglang in
    # tracerecon's own Python
    res = run_cli("run", "-o", str(tmp_path / "run"), "--preset", "sglang", "--", "true")
    # THEN one line, exit 2: sglang not found in tracerecon's own Python, and why that one
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert "(tracerecon's own: true names no Python interpreter)" in res.stderr, res.stderr
