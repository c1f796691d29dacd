"""Keep pandas out of tracerecon's own processes (the CLI, the TUI, ``--jobs`` workers).

pyarrow imports pandas the first time it converts anything (Python side: to ask whether the
input is a pandas object; C++ side: to learn pandas' missing-value markers) and the C++ side
retries on every list conversion until it succeeds. With pandas installed that is 0.4-0.7 s of
a report that takes 1-3 s, and tracerecon never hands pyarrow a pandas object nor asks for one.
So these processes refuse the import: pyarrow treats pandas as absent, which is exactly right
for inputs that are numpy arrays and Python lists. Library users (``tracerecon.api``) keep
stock behaviour: nothing here runs on import.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys


class _RefusePandas(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds pandas (and only pandas) and fails to load it: ``import pandas`` raises
    ImportError, as for a missing package, while ``importlib.util.find_spec`` still answers
    (callers that probe first then guard the import, as pyarrow does, take the ImportError)."""

    def find_spec(self, name, path=None, target=None):
        return importlib.machinery.ModuleSpec(name, self) if name == "pandas" else None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        raise ImportError("pandas is not imported in tracerecon's own processes (tracerecon.no_pandas)")


def keep_pandas_out() -> None:
    """From now on ``import pandas`` raises ImportError in this process, unless pandas is
    already imported (then it is left alone). Idempotent."""
    if "pandas" in sys.modules or any(isinstance(f, _RefusePandas) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _RefusePandas())
