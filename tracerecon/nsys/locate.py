"""Find Nsight Systems (nsys) and its QdstrmImporter, and learn what that nsys supports."""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tracerecon.errors import NsysNotFoundError

ENV_NSYS = "TRACERECON_NSYS"
ENV_IMPORTER = "QDSTRM_IMPORTER"

# Usual install places, newest first within each pattern.
SEARCH_GLOBS = (
    "/opt/nvidia/nsight-systems*/bin/nsys",
    "/opt/nvidia/nsight-systems/*/bin/nsys",
    "/usr/local/cuda*/bin/nsys",
    "/usr/lib/nsight-systems/bin/nsys",
    "/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys",
)
IMPORTER_FIXED = ("/usr/lib/nsight-systems/host-linux-x64/QdstrmImporter",)

INSTALL_HINT = (
    "Nsight Systems (nsys) not found: install it (NVIDIA's installer or CUDA toolkit; on Debian "
    "`apt-get install nsight-systems` from the non-free component), or pass --nsys PATH or set TRACERECON_NSYS"
)


@dataclass(frozen=True)
class NsysInstall:
    path: str
    version: str | None  # "2022.4.2.1", "2025.3.1.90", ...
    profile_options: frozenset[str]  # long options `nsys profile --help` lists, e.g. "--cuda-graph-trace"

    @property
    def version_tuple(self) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", self.version or ""))

    def supports(self, option: str) -> bool:
        return option in self.profile_options


def before_2023(version: str | None) -> bool:
    """Whether an nsys version ("2022.4.2.1", as an export or ``nsys --version`` gives it) is of
    2022 or older (nsys 2022 records no ranges of nvtx 0.2.11+, and ends a range left open at the
    capture's end); False where it does not say."""
    try:
        return version is not None and int(version.split(".")[0]) < 2023
    except ValueError:
        return False


def _version(nsys: str) -> str | None:
    try:
        out = subprocess.run([nsys, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"(\d{4}\.\d+\.\d+(?:\.\d+)?)", out)
    return m.group(1) if m else None


def _profile_options(nsys: str) -> frozenset[str]:
    try:
        res = subprocess.run([nsys, "profile", "--help"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return frozenset()
    return frozenset(re.findall(r"(--[a-z][a-z0-9-]+)", res.stdout + res.stderr))


def candidates() -> list[str]:
    """Every nsys this machine offers, in search order (after --nsys and $TRACERECON_NSYS)."""
    out: list[str] = []
    on_path = shutil.which("nsys")
    if on_path:
        out.append(on_path)
    for pattern in SEARCH_GLOBS:
        out.extend(sorted(glob.glob(pattern), reverse=True))
    return out


def _install(p: str) -> NsysInstall | None:
    """The nsys at ``p``, or None where it answers neither ``--version`` nor ``profile --help``
    as Nsight Systems does (another program, or an nsys that fails at once)."""
    install = NsysInstall(p, _version(p), _profile_options(p))
    return install if install.version or "--trace" in install.profile_options else None


def find_nsys(explicit: str | None = None) -> NsysInstall:
    """Locate nsys: ``explicit``, ``$TRACERECON_NSYS``, PATH, then the usual install places."""
    for source in (explicit, os.environ.get(ENV_NSYS)):
        if source:
            p = shutil.which(source) or source
            if not (os.path.isfile(p) and os.access(p, os.X_OK)):
                raise NsysNotFoundError(f"nsys not found at {source}; {INSTALL_HINT}")
            install = _install(p)
            if install is None:
                raise NsysNotFoundError(f"{source} does not answer as Nsight Systems does (no version from `--version`, no options from `profile --help`): "
                                        "give the nsys program with --nsys PATH or TRACERECON_NSYS")
            return install
    for p in candidates():
        if os.path.isfile(p) and os.access(p, os.X_OK) and (install := _install(p)) is not None:
            return install
    raise NsysNotFoundError(INSTALL_HINT)


def find_importer(nsys_path: str) -> str | None:
    """QdstrmImporter next to this nsys install (``host-linux-x64/``, ``linux-desktop-*/``), or None."""
    env = os.environ.get(ENV_IMPORTER)
    if env and os.path.isfile(env):
        return env
    seen: list[Path] = []
    for start in (Path(nsys_path).absolute(), Path(os.path.realpath(nsys_path))):
        for anc in list(start.parents)[:4]:
            if anc not in seen:
                seen.append(anc)
    for anc in seen:
        for pattern in ("host-linux-x64/QdstrmImporter", "linux-desktop-*/QdstrmImporter", "host-linux-*/QdstrmImporter"):
            for hit in sorted(glob.glob(str(anc / pattern))):
                if os.access(hit, os.X_OK):
                    return hit
    for fixed in IMPORTER_FIXED:
        if os.access(fixed, os.X_OK):
            return fixed
    return None
