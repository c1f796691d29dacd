"""What a loaded run is: per-rank tables plus the cross-rank findings, as frozen values.

Every front end (CLI, TUI, exports, benchmarks) receives an ``Analysis`` from ``tracerecon.api``
and reads it; nothing patches it afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from tracerecon.analysis.cross_rank import CrossRank
from tracerecon.analysis.config import PhaseConfig
from tracerecon.analysis.ranks import RankSource
from tracerecon.nsys.gpu_identity import GpuIdentity
from tracerecon.nsys.sqlite_export import ExportInfo


@dataclass(frozen=True)
class RankResult:
    """Everything tracerecon knows about one rank. Tables follow ``tracerecon.schema``."""

    source: RankSource
    info: ExportInfo
    ranges: pa.Table
    gpu_ops: pa.Table
    syncs: pa.Table
    phases: pa.Table
    cycles: pa.Table

    @property
    def rank(self) -> int:
        return self.source.rank

    @property
    def gpus(self) -> tuple[GpuIdentity, ...]:
        """The GPUs this rank's GPU ops ran on, by device id: as the export lists them, or
        with the device id alone where its list lacks the id."""
        used = sorted(d for d in pc.unique(self.gpu_ops["device_id"]).to_pylist() if d is not None) if self.gpu_ops.num_rows else []
        listed = {}
        for g in self.info.gpus:
            listed.setdefault(g.device, []).append(g)
        return tuple(g for d in used for g in listed.get(d, [GpuIdentity(d)]))


@dataclass(frozen=True)
class Analysis:
    """One run: its ranks (sorted), where they came from, the phase definition used, warnings
    (one line each), the cross-rank findings, and the engine's own timers
    (``{rank: {phase: median ms}}``, from ``run --cpu-timers``)."""

    ranks: tuple[RankResult, ...]
    inputs: tuple[str, ...]
    config: PhaseConfig
    warnings: tuple[str, ...] = field(default=())
    cross: CrossRank | None = None
    engine_timers: dict = field(default_factory=dict)
