"""What a loaded run is: per-rank tables plus the cross-rank findings, as frozen values.

Every front end (CLI, TUI, exports, benchmarks) receives an ``Analysis`` from ``tracerecon.api``
and reads it; nothing patches it afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

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
        """The GPUs this rank's GPU ops ran on, by TARGET_INFO_GPU id: each op's (process, CUDA
        device) mapped through TARGET_INFO_CUDA_DEVICE (``ExportInfo.gpu_of``; a device it does
        not map is taken as the id, as where nothing was renumbered); as the export lists them,
        or with the id alone where its list lacks the id."""
        if not self.gpu_ops.num_rows:
            return ()
        if self.info.renumbered:
            ops = self.gpu_ops.select(["pid", "device_id"]).drop_null().group_by(["pid", "device_id"]).aggregate([])
            used = sorted(zip(ops["pid"].to_pylist(), ops["device_id"].to_pylist()))
        else:  # (nothing renumbered, as in most runs: the devices alone, without a pass over the processes)
            used = [(None, d) for d in sorted(d for d in pc.unique(self.gpu_ops["device_id"]).to_pylist() if d is not None)]
        listed: dict[int, list[GpuIdentity]] = {}
        for g in self.info.gpus:
            listed.setdefault(g.device, []).append(g)
        out = {}
        for pid, dev in used:
            gpu = self.info.gpu_of(pid, dev)
            for g in listed.get(gpu, [GpuIdentity(gpu)]):
                out.setdefault((gpu, g.uuid), replace(g, cuda_device=dev if dev != gpu else None))
        return tuple(out[k] for k in sorted(out, key=lambda k: (k[0], k[1] or "")))


@dataclass(frozen=True)
class Analysis:
    """One run: its ranks (sorted), where they came from, the phase definition used, warnings
    (one line each), the cross-rank findings, and the engine's own timers
    (``{rank: {phase: median ms}}``, from ``run --cpu-timers``). ``load_notices``: those of the
    warnings that tell of this load only (a worker process that died), never kept in a cache."""

    ranks: tuple[RankResult, ...]
    inputs: tuple[str, ...]
    config: PhaseConfig
    warnings: tuple[str, ...] = field(default=())
    cross: CrossRank | None = None
    engine_timers: dict = field(default_factory=dict)
    load_notices: tuple[str, ...] = field(default=())
