"""The migrations ship with the package: a wheel built from the checkout, installed in a fresh
virtual environment, upgrades a new database with `burst db upgrade` (no checkout on the path)."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

from tests.conftest import ROOT


def test_a_wheel_installed_elsewhere_upgrades_a_database(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"),
            *("-w", str(dist), str(ROOT)),
        ],
        check=True,
        capture_output=True,
    )
    wheel = next(dist.glob("burst-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "migrations/env.py" in names and "migrations/script.py.mako" in names
    assert any(n.startswith("migrations/versions/") and n.endswith(".py") for n in names)

    # A fresh environment with the wheel alone; its dependencies are borrowed from this one
    # through a path entry (not a site directory, so this checkout's editable install stays out).
    env = tmp_path / "env"
    venv.create(env, with_pip=False)
    python = env / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    (Path(site) / "borrowed-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(python), *args], cwd=tmp_path, capture_output=True, text=True, check=False
        )

    db = tmp_path / "fresh.db"
    upgrade = run("-m", "burst", "db", "upgrade", "--url", f"sqlite:///{db}")
    assert upgrade.returncode == 0, upgrade.stdout + upgrade.stderr
    assert "is at revision" in upgrade.stdout
    where = run("-c", "import burst, migrations; print(burst.__file__, migrations.__file__)")
    assert str(ROOT) not in where.stdout and site in where.stdout
    check = run("-m", "burst", "db", "check", "--url", f"sqlite:///{db}")
    assert check.returncode == 0, check.stdout + check.stderr
