"""What a phase is, as the user says it: the phase range names, the cycle prefix, and which
phases take work launched by other threads. Light on purpose: the command line reads it
before any heavy module is imported."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_PHASES = ("draft", "verify", "draft_re_extend", "draft_extend", "target_verify")
DEFAULT_CYCLE = "cycle"
AUTO = "auto"
SAME = "same"


@dataclass(frozen=True)
class PhaseConfig:
    """Which NVTX range names are phases, and which enclose a cycle (prefix match)."""

    phases: tuple[str, ...] = DEFAULT_PHASES
    cycle_prefix: str = DEFAULT_CYCLE
    # Which phases take GPU work launched by other threads: "auto" | "same" | a thread id
    # (analysis.attribution).
    phase_thread: str | int = AUTO


def parse_phase_thread(value: str | int | None) -> str | int:
    """``auto`` | ``same`` | a thread id (int). Raises ValueError for anything else."""
    if value is None:
        return AUTO
    if isinstance(value, int):
        return value
    v = str(value).strip().lower()
    if v in (AUTO, SAME):
        return v
    if v.isdigit():
        return int(v)
    raise ValueError(f"--phase-thread {value!r}: expected auto, same or a thread id")
