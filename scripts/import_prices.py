"""Refresh burst/data/prices/ from SkyPilot-catalog-format CSVs (aws.csv, gcp.csv, azure.csv).

    python scripts/import_prices.py ../shared/data/prices

Keeps every row and only the columns the catalog reads; see burst/data/prices/SOURCE.md.
"""

import sys
from pathlib import Path

from burst.cloud.catalog import shipped_csv
from burst.model import CLOUDS

source = Path(sys.argv[1])
target = Path(__file__).resolve().parent.parent / "burst" / "data" / "prices"
for cloud in CLOUDS:
    (target / f"{cloud}.csv").write_text(shipped_csv(cloud, (source / f"{cloud}.csv").read_text()))
    print(f"wrote {target / f'{cloud}.csv'}")
