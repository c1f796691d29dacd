"""Which GPU an export names: a value of its own module, with no imports beyond the standard
library, so that a cached report holding it reads back without numpy or pyarrow."""

from __future__ import annotations

from dataclasses import dataclass


def recorded(text: str | None) -> str | None:
    """``text`` where it says something, else None: a blank name, UUID or bus location is none."""
    return text if text is not None and text.strip() else None


@dataclass(frozen=True)
class GpuIdentity:
    """One GPU, by nsys's id for it (TARGET_INFO_GPU's ``id``): its name, UUID (as nsys writes
    it, without nvidia-smi's ``GPU-``) and PCI bus location as the export lists them, each None
    where it does not say (or does not list the id, or is blank). A GPU op's ``device_id`` is
    the CUDA device number inside its process (after CUDA_VISIBLE_DEVICES), which
    TARGET_INFO_CUDA_DEVICE maps, per process, to that id; ``cuda_device`` is that number where
    it is not the id (a process that saw this GPU as another CUDA device), else None."""

    device: int
    name: str | None = None
    uuid: str | None = None
    bus_location: str | None = None
    cuda_device: int | None = None

    def __post_init__(self) -> None:
        # (one rule for every reader, the export's table and an edited manifest alike)
        for name in ("name", "uuid", "bus_location"):
            object.__setattr__(self, name, recorded(getattr(self, name)))

    def to_json(self) -> dict:
        out = {"device": self.device, "name": self.name, "uuid": self.uuid, "bus_location": self.bus_location}
        if self.cuda_device is not None:
            out["cuda_device"] = self.cuda_device
        return out
