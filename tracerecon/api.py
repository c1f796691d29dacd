"""The one core every front end calls: ``load``, ``report``, ``compare``, ``export``, and views of one loaded rank.

    from tracerecon import api
    run = api.load(["out/rank0.sqlite", "out/rank1.sqlite"])      # -> model.Analysis
    api.export(run, "parquet_dir")                                # -> manifest dict
    doc = api.compare(api.load(["before/"]), api.load(["after/"]))
    rep = api.report(["out/"])                                    # -> report_model.Report
    api.phase_detail(run.ranks[0], phase="verify")                # one phase in detail (also cycle_rows, ...)

``load`` reads nsys exports (``tracerecon.nsys``), splits them into ranks, runs the per-rank
analysis and then the cross-rank step (``tracerecon.analysis``, driven by
``tracerecon.pipeline``); a parquet export directory reads back as the same Analysis. Errors
are ``tracerecon.errors.TraceReconError`` with one line that names the file; warnings come
back in ``Analysis.warnings``.

Importing this module imports neither pyarrow nor numpy: the machinery is imported by the
call that needs it, so a warm ``report`` (``api.report``) starts as fast as Python does.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import TYPE_CHECKING, Callable, Sequence

from tracerecon.analysis.config import PhaseConfig
from tracerecon.run_dir import EngineTimers, expand_inputs, export_ignores, folder_warnings, holds_manifest, read_engine_timers

if TYPE_CHECKING:
    from tracerecon.model import Analysis, RankResult
    from tracerecon.report_model import Report

Progress = Callable[[str], None]

__all__ = ["Analysis", "PhaseConfig", "RankResult", "Report", "check_inputs", "compare", "counted_cycles", "cycle_rows", "export", "export_timeline", "load",
           "phase_config", "phase_detail", "range_summaries", "report", "worst_cycle"]


def __getattr__(name: str):
    # The value types, imported on first use (they import pyarrow).
    if name in ("Analysis", "RankResult"):
        from tracerecon import model

        return getattr(model, name)
    if name == "Report":
        from tracerecon.report_model import Report

        return Report
    raise AttributeError(f"module 'tracerecon.api' has no attribute {name!r}")


def phase_config(inputs: Sequence[str | os.PathLike], *, phases: Sequence[str] = (), presets: Sequence[str] = (), cycle: str | None = None,
                 skip_cycles: int | None = None, phase_thread: str | None = None) -> PhaseConfig:
    """The phase options for ``inputs``: ``phases`` (specs, ``--phase``) after ``presets``'
    (their specs, ``presets.get(name).phases``); where neither is given, those the run
    directories among ``inputs`` recorded in run.json (``tracerecon run --preset`` / ``--phase``),
    else the defaults. ``cycle``, ``skip_cycles``, ``phase_thread``: None takes the recorded
    value, else the default. What ``load`` and ``report`` use when given no options. Raises
    UsageError on a spec or value it cannot use, naming the run.json it came from."""
    from tracerecon.analysis.config import DEFAULT_CYCLE, DEFAULT_PHASES, parse_phase_spec, parse_phase_thread
    from tracerecon.errors import UsageError
    from tracerecon.run_dir import recorded_phase_options, recorded_in

    phases, presets = tuple(phases), tuple(presets)
    recorded = {} if phases or presets else (recorded_phase_options(inputs) or {})
    try:
        # (a run directory's recorded phase thread and cycles to skip where not given now)
        thread = parse_phase_thread(phase_thread if phase_thread is not None else recorded.get("phase_thread"))
        specs = tuple(dict.fromkeys(presets + phases)) if phases or presets else tuple(recorded.get("phases") or DEFAULT_PHASES)
        for spec in specs:
            parse_phase_spec(spec)
    except (ValueError, TypeError) as exc:
        raise UsageError(f"{exc}{f' (phases recorded in {recorded_in(inputs)})' if recorded else ''}") from None
    if skip_cycles is not None and skip_cycles < 0:
        raise UsageError("--skip-cycles takes 0 or more")
    # A recorded "" (a run made with --cycle "": no cycle ranges) is kept, not the default.
    prefix = cycle if cycle is not None else str(recorded["cycle_prefix"] if recorded.get("cycle_prefix") is not None else DEFAULT_CYCLE)
    given = tuple(flag for flag, value in (("--preset", presets or None), ("--phase", phases or None), ("--cycle", cycle),
                                           ("--skip-cycles", skip_cycles), ("--phase-thread", phase_thread)) if value is not None)
    # (a preset's list, like a recorded one, covers several engine versions: its names a trace
    # lacks are not said)
    return PhaseConfig(phases=specs, cycle_prefix=prefix, phase_thread=thread,
                       skip_cycles=skip_cycles if skip_cycles is not None else recorded.get("skip_cycles"),
                       phases_recorded=bool(not phases and not presets and recorded.get("phases")),
                       preset_phases=tuple(s for s in presets if s not in phases), given=given)


def load(inputs: Sequence[str | os.PathLike], options: PhaseConfig | None = None, progress: Progress | None = None, jobs: int | None = None,
         scheduler: str | None = None) -> Analysis:
    """Traces (``.sqlite``, ``.sqlite.xz``), run directories, or one parquet export directory ->
    the finished Analysis (an export's as it was analysed when written: ``options`` are not
    applied to it, and a warning names those given: ``PhaseConfig.given``). Raises BadTraceError (exit 2) when no input is usable. Several
    exports are read and analysed in ``jobs`` worker processes (default: one per file, at most
    one per core), or with ``scheduler`` (a Dask scheduler address or scheduler file) on that
    cluster's workers; the cross-rank step runs after, here. The result is cached (see
    ``tracerecon.cache``) unless caching is off."""
    if len(inputs) == 1 and holds_manifest(inputs[0]):
        from tracerecon.export import read_parquet_export

        analysis = read_parquet_export(inputs[0])
        ignored = export_ignores(inputs[0], options.given) if options else None
        return replace(analysis, warnings=(ignored,) + tuple(analysis.warnings)) if ignored else analysis
    from tracerecon.pipeline import analyze

    return analyze(inputs, options or phase_config(inputs), progress or (lambda _m: None), jobs, scheduler)


def report(inputs: Sequence[str | os.PathLike], options: PhaseConfig | None = None, progress: Progress | None = None, jobs: int | None = None,
           scheduler: str | None = None, analysis: Analysis | None = None) -> Report:
    """What ``report`` prints and ``report --json`` returns, for the same inputs as ``load``.

    The report is cached on its own (a few kB, keyed like ``load``'s entry): a warm call stats
    the inputs and reads that entry, importing neither pyarrow nor numpy. A miss runs ``load``
    (which caches the whole analysis for ``view``, ``export`` and ``diff``), or uses
    ``analysis`` when the caller has already loaded these inputs with these options. The
    engine's own timers (``cpu_timers.rank*.jsonl`` in a run directory) are read fresh every time."""
    config = options or phase_config(inputs)
    from tracerecon.present import build_report

    this_load_only: list[str] = []  # (``Analysis.load_notices``: said now, not cached)

    def made() -> Report:
        if analysis is not None:
            this_load_only.extend(analysis.load_notices)
            return build_report(analysis)
        from tracerecon.memory import free_in_background

        loaded = [load(inputs, config, progress, jobs, scheduler)]
        this_load_only.extend(loaded[0].load_notices)
        built = build_report(loaded[0])
        # Nothing else holds the analysis: its tables are freed while the report is printed.
        free_in_background(loaded)
        return built

    if len(inputs) == 1 and holds_manifest(inputs[0]):
        return made()
    from tracerecon.cache import cached

    files = expand_inputs(inputs)
    # What is read anew on every call (the engine's timers, what the input folders hold beside
    # the exports read), and what happened to this load only, is not kept in the cached report.
    notes = folder_warnings(inputs)

    ran: list[bool] = []

    def to_keep() -> Report:
        ran.append(True)
        built = made()
        return built.with_read_anew(EngineTimers(), (), stale=[*notes, *this_load_only])

    fresh = cached(files, _report_key(files, config), to_keep, _is_report)
    if scheduler is not None and not ran:
        from tracerecon.pipeline import scheduler_not_used

        this_load_only.append(scheduler_not_used(scheduler))
    said = fresh.with_read_anew(read_engine_timers(inputs, config.label_of), notes)
    return replace(said, warnings=tuple(this_load_only) + said.warnings) if this_load_only else said


def cached_report(inputs: Sequence[str | os.PathLike], options: PhaseConfig | None = None) -> Report | None:
    """``report``'s result when the cache holds it for these very files (same paths, sizes,
    times), else None; never reads an export. A hit also says the inputs were analysable."""
    from tracerecon.cache import lookup

    if len(inputs) == 1 and holds_manifest(inputs[0]):
        return None
    try:
        files = expand_inputs(inputs)
    except Exception:  # anything wrong with the inputs is for check_inputs to word
        return None
    config = options or phase_config(inputs)
    hit = lookup(files, _report_key(files, config), _is_report)
    return hit.with_read_anew(read_engine_timers(inputs, config.label_of), folder_warnings(inputs)) if hit is not None else None


def _is_report(value) -> bool:
    """Whether a cache entry's value is a report (unpickling it imported its module already)."""
    from tracerecon.report_model import Report

    return isinstance(value, Report)


def _report_key(files, config: PhaseConfig) -> tuple:
    return ("report", config, tuple(map(str, files)))


def check_inputs(inputs: Sequence[str | os.PathLike]) -> None:
    """Fail now (BadTraceError, naming the file) on inputs ``load`` could not read at all,
    without reading them: for front ends that load in the background (the TUI)."""
    if len(inputs) == 1 and holds_manifest(inputs[0]):
        return
    from tracerecon.errors import BadTraceError
    from tracerecon.nsys.sqlite_export import check_export
    from tracerecon.pipeline import no_nvtx_message

    files = expand_inputs(inputs)
    infos = [check_export(f) for f in files]
    if all(i is not None and "NVTX_EVENTS" not in i.tables for i in infos):  # what load would refuse
        raise BadTraceError(no_nvtx_message(", ".join(map(str, files)), infos[0].nsys_version))


def compare(a: Analysis, b: Analysis, a_given: Sequence[str] | None = None, b_given: Sequence[str] | None = None) -> dict:
    """The ``diff`` document: ranks paired by number, phase by phase, with explanations;
    ``a_given`` / ``b_given``: what was given for each side, named in it as such."""
    from tracerecon.present import diff_document

    return diff_document(a, b, a_given, b_given)


def export(analysis: Analysis, out_dir: str | os.PathLike, force: bool = False) -> dict:
    """Per-rank parquet datasets and ``manifest.json`` in ``out_dir``, replacing it whole;
    returns the manifest. ``force``: replace a directory that is not a tracerecon export."""
    from tracerecon.export import export_parquet

    return export_parquet(analysis, out_dir, force)


def export_timeline(analysis: Analysis, out_file: str | os.PathLike, format: str = "chrome-json") -> dict:
    """The run as one timeline file for ui.perfetto.dev: ``format`` "chrome-json" (Chrome
    trace-event JSON) or "perfetto" (native protobuf trace; needs the ``perfetto`` extra).
    Returns counts per kind of event, the same for both formats."""
    from tracerecon.timeline_export import export_timeline as write

    return write(analysis, out_file, format)


# --- one rank of a loaded run, as the front ends browse it --------------------------------------

def counted_cycles(rank: RankResult) -> set[int]:
    """The cycles ``rank``'s medians count (warm-up, incomplete and empty ones left out)."""
    from tracerecon.analysis.summary import steady_cycles

    return set(steady_cycles(rank.cycles)["cycle"].to_pylist())


def cycle_rows(rank: RankResult) -> list:
    """Every cycle of ``rank`` in its order, each with its phases' CPU and GPU ms (a phase run
    several times in a cycle: their sum, as ``report`` has it) and whether it is left out
    (``analysis.summary.CycleRow``)."""
    from tracerecon.analysis.summary import cycle_rows as rows

    return rows(rank.phases, rank.cycles)


def worst_cycle(rank: RankResult) -> int | None:
    """The counted cycle of ``rank`` whose phases' CPU timers miss the GPU by the most (sum of
    each phase's |CPU - GPU|); None where none misses at all."""
    from tracerecon.analysis.summary import worst_cycle as worst

    return worst(rank.phases, rank.cycles)


def phase_detail(rank: RankResult, *, phase_id: int | None = None, phase: str | None = None):
    """One phase instance (``phase_id``) or every counted cycle of a phase (``phase``) of
    ``rank`` in detail: kernels, launches, streams, blocking calls and one sentence on why its
    CPU timer says what it says (``analysis.detail.PhaseDetail``)."""
    from tracerecon.analysis.detail import phase_detail as detail

    return detail(rank.phases, rank.gpu_ops, rank.syncs, phase_id=phase_id, phase=phase, cycles=rank.cycles)


def range_summaries(rank: RankResult, cycle_prefix: str | None = None, families: bool = False) -> list:
    """Per NVTX range name of ``rank`` (``ranges``): count, CPU median, GPU span median, GPU
    busy total, ops; with ``cycle_prefix`` the cycle ranges as one row, with ``families`` the
    names of a domain that differ only in their numbers too (``analysis.summary.RangeSummary``)."""
    from tracerecon.analysis.summary import summarize_ranges

    return summarize_ranges(rank.ranges, cycle_prefix, families)
