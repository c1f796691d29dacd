"""Does ``module:Class.method`` exist in an installed package? Answered from its sources alone.

Importing an engine to check a name takes seconds and may initialise CUDA (vLLM), so nothing
here imports the package looked at: the top-level package is located with
``importlib.util.find_spec`` (which, for a top-level name, does not run it), submodules are
found on disk, and the source is parsed with ``ast``. A method a class inherits is found through
the classes it names as bases when the module imports them with ``from X import Base``.

This module imports only the standard library and nothing of tracerecon, so that
``python resolve.py REQUEST_JSON`` answers for another interpreter (the one a profiled program
runs in), whether or not tracerecon is installed there. It prints one JSON object::

    {"versions": {"vllm": "0.28.0" | null, ...},
     "found": {"module:Qual": true | false, ...},
     "modules": {"module": true | false, ...},
     "python": "3.11.9"}
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import json
import sys
from pathlib import Path

# Base classes are followed this many levels deep (EagleSpeculator -> AutoRegressiveSpeculator
# -> DraftModelSpeculator -> ...).
MAX_BASE_DEPTH = 6


def dist_version(dist: str) -> str | None:
    """The installed version of distribution ``dist`` (its dist-info), or None."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def module_file(module: str) -> Path | None:
    """The source file of ``module`` (``a.b.c``) without importing ``a`` or ``a.b``: the
    top-level package from its spec, each submodule from the package directories on disk."""
    parts = module.split(".")
    try:
        spec = importlib.util.find_spec(parts[0])
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if len(parts) == 1:
        return Path(spec.origin) if spec.origin and spec.origin.endswith(".py") else None
    dirs = [Path(d) for d in (spec.submodule_search_locations or [])]
    for i, part in enumerate(parts[1:], start=1):
        last = i == len(parts) - 1
        found_dirs = []
        for d in dirs:
            pkg = d / part
            if last:
                for cand in (d / f"{part}.py", pkg / "__init__.py"):
                    if cand.is_file():
                        return cand
            elif pkg.is_dir():
                found_dirs.append(pkg)
        dirs = found_dirs
        if not dirs:
            return None
    return None


def _parse(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_text(encoding="utf-8", errors="replace"), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return None


def _absolute(module: str, node: ast.ImportFrom, is_package: bool) -> str | None:
    """The absolute module name of ``from X import ...`` written inside ``module``."""
    if node.level == 0:
        return node.module
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    if not base:
        return None
    return ".".join(base + ([node.module] if node.module else []))


def _imported_names(tree: ast.Module, module: str, is_package: bool) -> dict[str, tuple[str, str]]:
    """``{local name: (module, name there)}`` for every ``from X import Y [as Z]`` in the module."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            src = _absolute(module, node, is_package)
            if src:
                for alias in node.names:
                    out[alias.asname or alias.name] = (src, alias.name)
    return out


def _defines(body: list, name: str) -> ast.AST | None:
    """The def, class or assignment of ``name`` in ``body``, including under ``if`` / ``try`` /
    ``with`` at that level (a class defined per platform); None: not there."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return node
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name and node.value is not None:
            return node
        if isinstance(node, (ast.If, ast.Try, ast.With)):
            blocks = [node.body, getattr(node, "orelse", []), getattr(node, "finalbody", [])]
            for block in blocks + [h.body for h in getattr(node, "handlers", [])]:
                found = _defines(block, name)
                if found is not None:
                    return found
    return None


def _in_class(cls: ast.ClassDef, module: str, tree: ast.Module, path: Path, name: str, depth: int) -> bool:
    """Whether class ``cls`` has attribute ``name``: its own body, else a base class that the
    module defines or imports by ``from X import Base``."""
    if _defines(cls.body, name) is not None:
        return True
    if depth >= MAX_BASE_DEPTH:
        return False
    imported = None
    for base in cls.bases:
        if not isinstance(base, ast.Name):
            continue
        local = _defines(tree.body, base.id)
        if isinstance(local, ast.ClassDef):
            if _in_class(local, module, tree, path, name, depth + 1):
                return True
            continue
        if imported is None:
            imported = _imported_names(tree, module, path.name == "__init__.py")
        if base.id in imported:
            src_module, src_name = imported[base.id]
            if has_attribute(src_module, f"{src_name}.{name}", depth + 1):
                return True
    return False


def has_attribute(module: str, qualname: str, depth: int = 0) -> bool:
    """Whether ``module`` defines ``qualname`` (``function``, ``Class.method``,
    ``Outer.Inner.method``), read from its source; inherited methods count."""
    path = module_file(module)
    tree = _parse(path) if path else None
    if tree is None:
        return False
    parts = qualname.split(".")
    body, owner = tree.body, None
    for i, part in enumerate(parts):
        node = _defines(body, part)
        if node is None:
            if owner is not None:
                return _in_class(owner, module, tree, path, ".".join(parts[i:]), depth) if i == len(parts) - 1 else False
            imported = _imported_names(tree, module, path.name == "__init__.py") if i == 0 else {}
            if part in imported and depth < MAX_BASE_DEPTH:
                src_module, src_name = imported[part]
                return has_attribute(src_module, ".".join([src_name] + parts[i + 1:]), depth + 1)
            return False
        if i < len(parts) - 1:
            if not isinstance(node, ast.ClassDef):
                return False
            body, owner = node.body, node
    return True


def answer(request: dict) -> dict:
    """``{"dists": [...], "targets": ["module:Qual", ...]}`` -> versions and which targets exist."""
    found, modules = {}, {}
    for target in request.get("targets", []):
        module, _, qual = target.partition(":")
        if module not in modules:
            modules[module] = bool(module) and module_file(module) is not None
        found[target] = modules[module] and bool(qual) and has_attribute(module, qual)
    return {
        "versions": {d: dist_version(d) for d in request.get("dists", [])},
        "found": found,
        "modules": modules,
        "python": ".".join(map(str, sys.version_info[:3])),
    }


if __name__ == "__main__":
    # Run by another interpreter: its sys.path[0] is this file's directory, which must not
    # shadow anything (this directory is tracerecon's package, named like no engine).
    sys.path.pop(0)
    request = json.loads(sys.argv[1])
    sys.path[:0] = [p for p in request.get("path", []) if isinstance(p, str)]  # the program's own import roots
    print(json.dumps(answer(request)))
