from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_traces"
H200 = SAMPLES / "h200_nsys2025.3.1"
DEMO = SAMPLES / "demo_h200"
DEMO2 = SAMPLES / "demo_h200x2"
SHARED = Path(os.environ.get("TRACERECON_SHARED", ROOT.parent / "shared"))
PUBLIC = SHARED / "traces" / "public"
BIG = SHARED / "traces" / "big" / "big_launch.sqlite.xz"

sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory):
    """Tests (and the CLI they run) cache into a folder of this session, not ~/.cache."""
    os.environ["TRACERECON_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    yield


def need_public() -> Path:
    if not PUBLIC.is_dir():
        pytest.skip(f"public traces not found at {PUBLIC} (set TRACERECON_SHARED)")
    return PUBLIC


def run_cli(*args: str, env: dict | None = None, cwd: str | None = None, timeout: int = 600):
    """Run the installed `tracerecon` console script for real, as a user would."""
    import shutil
    import subprocess

    exe = shutil.which("tracerecon") or str(Path(sys.executable).parent / "tracerecon")
    return subprocess.run([exe, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)
