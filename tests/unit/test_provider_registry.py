"""The provider registry builds one provider per target without touching a cloud, and loads a
cloud SDK only for the targets that need it."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT

PROBE = """
import sys
from burst import config
from burst.cloud import catalog
from burst.clock import SystemClock
import providers
shipped = catalog.shipped()
cfg = config.load(["config"], config.Vocabulary(shipped.regions(), shipped.accelerators()))
built = providers.build(cfg.service, shipped, SystemClock())
print(sorted((name, p.name, p.region) for name, p in built.items()))
print(len(built["aws-eu-central-1"].offers()) > 10, all(o.region == "europe-west4" for o in built["gcp-europe-west4"].offers()))
print(sorted({m.split(".")[0] for m in sys.modules} & {"google", "azure", "boto3", "kubernetes"}))
"""


def test_build_from_the_example_config() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
        env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"},
    ).stdout.splitlines()
    assert out[0] == (
        "[('aws-eu-central-1', 'aws', 'eu-central-1'), ('azure-eastus', 'azure', 'eastus'), "
        "('gcp-europe-west4', 'gcp', 'europe-west4')]"
    )
    assert out[1] == "True True"
    # No cloud SDK is loaded until a provider makes its first call.
    assert out[2] == "[]"
