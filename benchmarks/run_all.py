"""Run every benchmark in this folder and write docs/benchmarks.md: the machine, each benchmark's
description (its docstring), the command, and its figures as a table of the JSON it printed.

    python benchmarks/run_all.py [--only plan,simulate] [--out docs/benchmarks.md]

With --only, the other benchmarks' sections are kept from the existing file, each with the day it
was run.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import re
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MARK = "<!-- benchmark: {} -->"


def machine() -> str:
    cpu = "unknown CPU"
    with open("/proc/cpuinfo", encoding="utf-8") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{os.cpu_count()} cores ({cpu}), {memory:.0f} GiB, Python {platform.python_version()}, "
        f"{platform.system()} {platform.release()}"
    )


def describe(path: Path) -> tuple[str, str, str]:
    """(title, description, command) from a benchmark's docstring."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or path.stem
    title, _, rest = doc.partition("\n\n")
    command = next(
        (line.strip() for line in rest.splitlines() if line.strip().startswith("python ")),
        f"python benchmarks/{path.name}",
    )
    prose = "\n".join(line for line in rest.splitlines() if line.strip() != command).strip()
    prose = re.sub(r"\n{3,}", "\n\n", prose)
    return " ".join(title.split()), prose, command


def table(rows: list[dict[str, object]]) -> str:
    if not rows:
        return "(no figures printed)"
    columns: list[str] = []
    for row in rows:
        columns += [k for k in row if k not in columns and k not in ("benchmark", "bench")]
    lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(str(row.get(c, "")) for c in columns) + " |")
    return "\n".join(lines)


def run(path: Path) -> str:
    title, prose, command = describe(path)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(path)], cwd=ROOT, capture_output=True, text=True, check=False
    )
    seconds = time.perf_counter() - started
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    status = (
        ""
        if done.returncode == 0
        else f"\n\nFailed (exit {done.returncode}):\n\n```\n{done.stderr[-2000:]}\n```"
    )
    print(f"{path.name}: {len(rows)} figures in {seconds:.0f} s", file=sys.stderr, flush=True)
    when = datetime.now(UTC).strftime("%Y-%m-%d")
    return (
        f"{MARK.format(path.stem)}\n## {title}\n\n{prose}\n\n```sh\n{command}\n```\n\n"
        f"{table(rows)}\n\n(whole run: {seconds:.0f} s, on {when}){status}\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default="", help="Comma-separated names, e.g. plan,simulate.")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks.md")
    args = parser.parse_args()
    wanted = {f"bench_{n}" for n in args.only.split(",") if n}
    kept: dict[str, str] = {}
    if wanted and args.out.exists():
        for section in re.split(r"(?=<!-- benchmark: )", args.out.read_text(encoding="utf-8")):
            found = re.match(r"<!-- benchmark: (\S+) -->", section)
            if found:
                kept[found.group(1)] = section.rstrip() + "\n"
    sections = []
    for path in sorted(HERE.glob("bench_*.py")):
        if wanted and path.stem not in wanted:
            sections.append(kept.get(path.stem, ""))
        else:
            sections.append(run(path))
    head = (
        "# Benchmarks\n\nWritten by `python benchmarks/run_all.py`, which runs every benchmark in "
        "`benchmarks/`; each prints one JSON object per measurement, tabled below, and the day it "
        f"ran (`--only` runs some and keeps the others).\n\nMachine: {machine()}.\n"
    )
    args.out.write_text(head + "\n" + "\n".join(s for s in sections if s), encoding="utf-8")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
