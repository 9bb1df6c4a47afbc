"""The build: pure Python, or with BURST_COMPILE=1 the decision's modules (burst/decide, which a
replay spends nine tenths of its time in) compiled to C extensions by mypyc, from the same typed
source; a replay then runs about 1.5 times as fast (docs/benchmarks.md). Install it so with
`BURST_COMPILE=1 pip install .`; an editable install refuses it (build_backend/), as it would
leave the extensions beside the source, imported in its place until built again.

Everything else about the package is in pyproject.toml."""

from __future__ import annotations

import os
from pathlib import Path

from setuptools import Extension, setup


def compiled() -> list[Extension]:
    if os.environ.get("BURST_COMPILE") != "1":
        return []
    from mypyc.build import mypycify  # asked for by build_backend/burst_build.py

    # The package's __init__ stays Python: compiled, the names it re-exports are not found by
    # modules that import them while it is still being imported.
    modules = sorted(str(p) for p in Path("burst/decide").glob("*.py") if p.name != "__init__.py")
    return mypycify(modules, opt_level="3")


setup(ext_modules=compiled())
