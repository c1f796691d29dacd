"""The sitecustomize ``tracerecon run --wrap`` / ``--preset`` puts first on PYTHONPATH: it wraps
the engine's callables and then runs the program's own sitecustomize, which it shadows."""

from __future__ import annotations

import subprocess
import sys


def test_a_wrapped_run_still_runs_the_programs_own_sitecustomize(tmp_path):
    # GIVEN the sitecustomize `tracerecon run --wrap` writes, first on PYTHONPATH, wrapping
    # mymod:step as the phase draft, and the program's own sitecustomize further on (it sets a flag)
    import os

    from tracerecon.wrap import ENV_SPEC, SITECUSTOMIZE

    ours, theirs = tmp_path / "site", tmp_path / "user"
    ours.mkdir()
    theirs.mkdir()
    (ours / "sitecustomize.py").write_text(SITECUSTOMIZE)
    (theirs / "sitecustomize.py").write_text("import builtins\nbuiltins.USER_SITE_RAN = True\n")
    (theirs / "mymod.py").write_text("def step(x):\n    return x + 1\n")
    pkg = str(__import__("pathlib").Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ours), pkg, str(theirs)]), ENV_SPEC: "mymod:step=draft"}
    code = ("import builtins, sys, mymod\n"
            "print(getattr(builtins, 'USER_SITE_RAN', False), mymod.step(1), getattr(mymod.step, '__wrapped__', None) is not None)")
    # WHEN a program starts there
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    # THEN both ran: the program's flag is set, and step is wrapped and still returns its value
    assert out.stdout.split() == ["True", "2", "True"], (out.stdout, out.stderr)
    # AND an error in the program's own sitecustomize is said as Python says it, and the program goes on
    (theirs / "sitecustomize.py").write_text("raise RuntimeError('boom')\n")
    out = subprocess.run([sys.executable, "-c", "print('ran')"], capture_output=True, text=True, env=env, check=True)
    assert out.stdout == "ran\n" and "Error in sitecustomize" in out.stderr and "RuntimeError: boom" in out.stderr
