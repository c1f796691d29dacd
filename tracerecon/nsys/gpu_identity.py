"""Which GPU an export names: a value of its own module, with no imports beyond the standard
library, so that a cached report holding it reads back without numpy or pyarrow."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuIdentity:
    """One GPU an export lists (TARGET_INFO_GPU): ``device`` is the id its GPU ops carry
    (``gpu_ops.device_id``); the name, UUID (as nsys writes it, without nvidia-smi's ``GPU-``) and
    PCI bus location are None where the export does not say."""

    device: int
    name: str | None = None
    uuid: str | None = None
    bus_location: str | None = None

    def to_json(self) -> dict:
        return {"device": self.device, "name": self.name, "uuid": self.uuid, "bus_location": self.bus_location}
