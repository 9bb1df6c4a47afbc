"""The compiled build (setup.py, BURST_COMPILE=1): the decision's modules, built by mypyc from the
same source and installed from the wheel, are what is imported, and they answer as the source
does: the unit tests pass against them, and replays under both queueings, with the baselines,
give the same JSON byte for byte. mypyc checks each value against its annotation where Python
does not (a test that passed None for a sweep failed so), so the unit tests are run again. The
build backend asks for the compiler only when compiling, runs setup.py pure for metadata, and
refuses a compiled editable install."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import ROOT

# What the wheel is built from (pyproject.toml's packages, readme and build)
SOURCES = ["pyproject.toml", "setup.py", "README.md", "build_backend"]
SOURCES += ["burst", "providers", "migrations"]


def python(site: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Python with `site` first on its path and not the working directory (-P): the checkout's
    own burst/ must not shadow the one under test."""
    return subprocess.run(
        [sys.executable, "-P", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(site)},
        check=False,
    )


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built with BURST_COMPILE=1 from a copy of the sources, unpacked."""
    tmp = tmp_path_factory.mktemp("compiled")
    src = tmp / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.so", "*.egg-info")
    src.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=ignore)
        else:
            shutil.copy2(ROOT / name, src / name)
    # As `BURST_COMPILE=1 pip install .` builds it: in an environment of its own, with only what
    # the build backend asks for.
    pip = (sys.executable, "-m", "pip", "wheel", "-q", "--no-deps")
    built = subprocess.run(
        [*pip, "-w", str(tmp / "wheel"), str(src)],
        capture_output=True,
        text=True,
        cwd=tmp,
        timeout=600,
        env={**os.environ, "BURST_COMPILE": "1"},
        check=False,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (tmp / "wheel").glob("burst-*.whl")
    site = tmp / "site"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
    return site


def test_the_compiled_modules_are_imported(compiled: Path) -> None:
    shown = python(compiled, "-c", "import burst.decide.planner as p; print(p.__file__)")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == str(next((compiled / "burst" / "decide").glob("planner.*.so")))


def test_the_unit_tests_pass_against_the_compiled_build(compiled: Path) -> None:
    # --import-mode=append: the checkout goes on the path after the build, for tests/ alone.
    args = ("-m", "pytest", "tests/unit", "-q", "-n", "0", "-p", "no:cacheprovider")
    run = python(compiled, *args, "--import-mode=append")
    assert run.returncode == 0, run.stdout[-3000:]


def openb_head(tmp_path: Path, jobs: int) -> Path:
    rows = (ROOT / "burst" / "data" / "traces" / "alibaba-openb-2023-public.csv").read_text()
    path = tmp_path / f"openb-{jobs}.csv"
    path.write_text("\n".join(rows.splitlines()[: jobs + 1]) + "\n")
    return path


@pytest.mark.parametrize("config", ["config", "docs/examples/simulate"])
def test_a_replay_gives_the_same_json_compiled(compiled: Path, tmp_path: Path, config: str) -> None:
    """config/ queues BestEffortFIFO, under budgets and a pool limit; the simulation example
    StrictFIFO."""
    trace = openb_head(tmp_path, 1500)
    args = ("-m", "burst", "simulate", "--trace", str(trace), "-c", config, "--baselines")
    source, built = python(ROOT, *args, "-f", "json"), python(compiled, *args, "-f", "json")
    assert source.returncode == 0, source.stderr[-2000:]
    assert built.returncode == 0, built.stderr[-2000:]
    burst = json.loads(source.stdout)["policies"][0]
    assert burst["name"] == "burst" and burst["pools_created"] > 0  # it burst: placement ran
    assert built.stdout == source.stdout


def backend() -> ModuleType:
    """build_backend/burst_build.py, as pip loads it (pyproject.toml's backend-path)."""
    spec = importlib.util.spec_from_file_location(
        "burst_build", ROOT / "build_backend" / "burst_build.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_an_editable_compiled_install_is_refused_saying_what_to_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BURST_COMPILE", "1")
    with pytest.raises(SystemExit, match=r"run `BURST_COMPILE=1 pip install \.`"):
        backend().get_requires_for_build_editable()


@pytest.mark.parametrize("asked", [None, "0", "1"])
def test_setup_py_runs_pure_for_its_metadata_and_the_compiler_is_asked_for_only_when_compiling(
    monkeypatch: pytest.MonkeyPatch, asked: str | None
) -> None:
    if asked is None:
        monkeypatch.delenv("BURST_COMPILE", raising=False)
    else:
        monkeypatch.setenv("BURST_COMPILE", asked)
    with backend()._pure() as requires:
        assert os.environ["BURST_COMPILE"] == "0"
        assert ("mypy>=1.15" in requires) == (asked == "1")
    assert os.environ.get("BURST_COMPILE") == asked
