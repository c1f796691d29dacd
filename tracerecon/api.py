"""The one core every front end calls: ``load``, ``compare``, ``export``.

    from tracerecon import api
    run = api.load(["out/rank0.sqlite", "out/rank1.sqlite"])      # -> model.Analysis
    api.export(run, "parquet_dir")                                # -> manifest dict
    doc = api.compare(api.load(["before/"]), api.load(["after/"]))
    rep = api.report(["out/"])                                    # -> report_model.Report

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

__all__ = ["Analysis", "PhaseConfig", "RankResult", "Report", "check_inputs", "compare", "export", "export_timeline", "load", "report"]


def __getattr__(name: str):
    # The value types, imported on first use (they import pyarrow).
    if name in ("Analysis", "RankResult"):
        from tracerecon import model

        return getattr(model, name)
    if name == "Report":
        from tracerecon.report_model import Report

        return Report
    raise AttributeError(f"module 'tracerecon.api' has no attribute {name!r}")


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

    return analyze(inputs, options or PhaseConfig(), progress or (lambda _m: None), jobs, scheduler)


def report(inputs: Sequence[str | os.PathLike], options: PhaseConfig | None = None, progress: Progress | None = None, jobs: int | None = None,
           scheduler: str | None = None, analysis: Analysis | None = None) -> Report:
    """What ``report`` prints and ``report --json`` returns, for the same inputs as ``load``.

    The report is cached on its own (a few kB, keyed like ``load``'s entry): a warm call stats
    the inputs and reads that entry, importing neither pyarrow nor numpy. A miss runs ``load``
    (which caches the whole analysis for ``view``, ``export`` and ``diff``), or uses
    ``analysis`` when the caller has already loaded these inputs with these options. The
    engine's own timers (``cpu_timers.rank*.jsonl`` in a run directory) are read fresh every time."""
    config = options or PhaseConfig()
    from tracerecon.present import build_report

    def made() -> Report:
        if analysis is not None:
            return build_report(analysis)
        from tracerecon.memory import free_in_background

        loaded = [load(inputs, config, progress, jobs, scheduler)]
        built = build_report(loaded[0])
        # Nothing else holds the analysis: its tables are freed while the report is printed.
        free_in_background(loaded)
        return built

    if len(inputs) == 1 and holds_manifest(inputs[0]):
        return made()
    from tracerecon.cache import cached

    files = expand_inputs(inputs)
    # What is read anew on every call (the engine's timers, what the input folders hold beside
    # the exports read) is not kept in the cached report.
    notes = folder_warnings(inputs)
    fresh = cached(files, _report_key(files, config), lambda: made().with_read_anew(EngineTimers(), (), stale=notes), _is_report)
    return fresh.with_read_anew(read_engine_timers(inputs, config.label_of), notes)


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
    config = options or PhaseConfig()
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


