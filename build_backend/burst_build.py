"""The build backend: setuptools' own, asking for what mypyc needs too when BURST_COMPILE=1 asks
setup.py to compile the decision, so that a plain install needs nothing more, and refusing a
compiled editable install. The wrapper is the one setuptools documents for build requirements
that depend on the build ("Dynamic build dependencies and other build_meta tweaks",
setuptools.pypa.io/en/latest/build_meta.html)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from setuptools import build_meta
from setuptools.build_meta import *  # noqa: F403 (every hook as setuptools has it)

# mypyc comes with mypy; it types the decision as the type checker does, so it needs what the
# decision's imports reach outside the standard library: pydantic, and yaml's stubs.
COMPILER = ["mypy>=1.15", "pydantic>=2.11", "types-PyYAML"]
Settings = dict[str, object] | None


@contextmanager
def _pure() -> Iterator[list[str]]:
    """setup.py run for what it needs and its metadata, neither of which compiling changes: mypy
    is not installed yet when it is asked what it needs, and compiling twice is a waste. Yields
    the requirements compiling adds."""
    asked = os.environ.get("BURST_COMPILE")
    os.environ["BURST_COMPILE"] = "0"
    try:
        yield COMPILER if asked == "1" else []
    finally:
        if asked is None:
            del os.environ["BURST_COMPILE"]
        else:
            os.environ["BURST_COMPILE"] = asked


def get_requires_for_build_wheel(config_settings: Settings = None) -> list[str]:
    with _pure() as compiler:
        return build_meta.get_requires_for_build_wheel(config_settings) + compiler


def get_requires_for_build_editable(config_settings: Settings = None) -> list[str]:
    _not_compiled_editable()
    return build_meta.get_requires_for_build_editable(config_settings)


def build_editable(
    wheel_directory: str, config_settings: Settings = None, metadata_directory: str | None = None
) -> str:
    _not_compiled_editable()
    return build_meta.build_editable(wheel_directory, config_settings, metadata_directory)


def _not_compiled_editable() -> None:
    """Compiled modules built in place would be imported instead of the source beside them,
    edits and all, until built again: refused, with what to run instead."""
    if os.environ.get("BURST_COMPILE") == "1":
        raise SystemExit(
            "BURST_COMPILE=1 compiles the decision for an installed copy: "
            "run `BURST_COMPILE=1 pip install .`, not `pip install -e .`"
        )


def prepare_metadata_for_build_wheel(directory: str, config_settings: Settings = None) -> str:
    with _pure():
        return build_meta.prepare_metadata_for_build_wheel(directory, config_settings)
