"""Where decompressed copies of ``.xz`` exports go: the temporary directory (``TMPDIR``), never
beside the input, named ``PREFIX...sqlite``. A ``--jobs`` worker process names its copies with its
load's prefix (``use_prefix``), so that the parent, having stopped a worker mid-file (Ctrl-C,
SIGTERM), removes what it left (``remove``). Standard library only: a worker sets its prefix as
it starts, before numpy and pyarrow are imported.
"""

from __future__ import annotations

import glob
import os
import tempfile

_PREFIX = "tracerecon-"


def prefix() -> str:
    """This process's prefix for its decompressed copies."""
    return _PREFIX


def load_prefix(owner: str) -> str:
    """The prefix of one multi-process load's copies (``owner``: ``handoff.new_owner``'s name)."""
    return f"tracerecon-{owner}-"


def use_prefix(name: str) -> None:
    """Name this process's decompressed copies ``name...sqlite`` from now on."""
    global _PREFIX
    _PREFIX = name


def remove(name: str) -> None:
    """Remove the copies named ``name...sqlite`` in the temporary directory. Never raises."""
    for path in glob.glob(os.path.join(glob.escape(tempfile.gettempdir()), glob.escape(name) + "*.sqlite")):
        unlink_quietly(path)


def unlink_quietly(path: str) -> None:
    """``os.unlink``, a file already gone or not removable left as it is."""
    try:
        os.unlink(path)
    except OSError:
        pass
