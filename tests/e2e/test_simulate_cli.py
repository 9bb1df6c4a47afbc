"""`burst simulate`: the shipped OpenB trace through burst and the baselines, as JSON (the same
twice for one seed) and as HTML with the sweep chart; clear errors for bad input."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from burst import config
from burst.cloud import catalog
from burst.sim import simulate as sim
from burst.sim import trace, variants
from tests.conftest import ROOT, burst_cli

CONFIG = str(ROOT / "docs" / "examples" / "simulate")
POLICIES = ["burst", "never", "no-wait", "constant-wait", "compute-wait", "starburst"]


def simulate(*args: str) -> subprocess.CompletedProcess[str]:
    return burst_cli("simulate", *args, timeout=600)


def openb_head(tmp_path: Path, jobs: int) -> Path:
    """The first `jobs` jobs of the shipped OpenB trace, as a trace file."""
    rows = (ROOT / "burst" / "data" / "traces" / "alibaba-openb-2023-public.csv").read_text()
    path = tmp_path / f"openb-{jobs}.csv"
    path.write_text("\n".join(rows.splitlines()[: jobs + 1]) + "\n")
    return path


def test_burst_and_the_baselines_on_openb_the_same_twice() -> None:
    args = ("--trace", "openb", "-c", CONFIG, "--baselines", "--format", "json", "--seed", "3")
    first, again = simulate(*args), simulate(*args)
    assert first.returncode == 0, first.stderr[-2000:]
    assert first.stdout == again.stdout  # one seed, one result
    # Not on a terminal (a CI log): progress as lines, every tenth of each policy's replay.
    lines = first.stderr.splitlines()
    assert "burst: 100 %" in lines and "starburst: 100 %" in lines, first.stderr
    assert len([x for x in lines if x.startswith("burst: ")]) >= 4, first.stderr
    result = json.loads(first.stdout)
    assert result["trace"] == "alibaba-openb-2023-public.csv" and result["jobs"] == 4330
    assert "cost" in result["lower_bound"]
    by_name = {p["name"]: p for p in result["policies"]}
    assert list(by_name) == [
        "burst",
        "never",
        "no-wait",
        "constant-wait",
        "compute-wait",
        "starburst",
    ]
    assert by_name["never"]["cost"] == 0 and by_name["never"]["pools_created"] == 0
    for p in by_name.values():
        assert 0 <= p["deadlines_met"] <= 1 and p["mean_jct_s"] >= p["mean_queue_s"] >= 0
        assert p["deadlines_missed"] == round(4330 * (1 - p["deadlines_met"]))
        assert 0 <= p["idle_share"] + p["overhead_share"] <= 1
    # Bursting shortens the queue that never-bursting leaves, and costs money for it.
    assert by_name["burst"]["deadlines_met"] > by_name["never"]["deadlines_met"]
    assert by_name["burst"]["cost"] > 0 and by_name["burst"]["jobs_burst"] > 0
    spend = by_name["burst"]["spend_by_provider"].values()
    assert sum(spend) == pytest.approx(by_name["burst"]["cost"], abs=0.05)


def test_the_html_report_draws_the_sweep_and_only_charts_with_data(tmp_path: Path) -> None:
    """The first 1,000 OpenB jobs (the whole trace takes five times as long, to the same page)."""
    trace = openb_head(tmp_path, 1000)
    out = tmp_path / "openb.html"
    done = simulate(
        "--trace", str(trace), "-c", CONFIG, "--sweep", "--format", "html", "--out", str(out)
    )
    assert done.returncode == 0, done.stderr[-2000:]
    page = out.read_text()
    # The sweep: burst's margin and its price on waiting, and the two baselines.
    assert page.count('class="curve"') == 4 and "burst, wait price" in page
    # At these deadlines the lower bound is 0: no empty chart under its heading, a sentence.
    plain = simulate("--trace", str(trace), "-c", CONFIG, "--format", "json")
    assert json.loads(plain.stdout)["lower_bound"]["cost"] == 0
    assert page.count("<svg") == 1 and "The lower bound is 0" in page


def test_bad_input_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("job_id,submit_time,duration_s,gpus\nj1,0,-5,1\n")
    done = simulate("--trace", str(bad), "-c", CONFIG)
    assert done.returncode == 1 and "bad.csv:2: duration_s: -5 is not within 1.." in done.stderr
    done = simulate("--trace", "openb", "-c", CONFIG, "--deadline-slack", "soon")
    assert done.returncode == 1 and "expected uniform:LO:HI" in done.stderr


def test_the_windowed_optimum_is_a_plan_no_cheaper_than_the_bound(tmp_path: Path) -> None:
    """The first 400 OpenB jobs on 8 GPUs with tight deadlines (so that the plan needs a cloud),
    planned in windows of 200 beside burst and the baselines."""
    trace = openb_head(tmp_path, 400)
    args = (
        "--trace",
        str(trace),
        "-c",
        CONFIG,
        "--onprem-gpus",
        "8",
        "--deadline-slack",
        "fixed:1",
    )
    done = simulate(*args, "--baselines", "--optimum", "200", "--format", "json")
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    optimum = result["optimum"]
    assert optimum["windows"] == 2 and optimum["windows_needing_a_cloud"] >= 1
    # A schedule a cluster could run, knowing the future: the fluid bound is below it.
    assert optimum["cost"] >= result["lower_bound"]["cost"] > 0
    by_name = optimum["by_policy"]
    assert list(by_name) == [
        "burst",
        "never",
        "no-wait",
        "constant-wait",
        "compute-wait",
        "starburst",
    ]
    assert by_name["never"]["ratio"] == 0  # it pays nothing, and misses deadlines for it
    assert by_name["no-wait"]["ratio"] > 1  # it pays for every wait, needed or not
    # The page's section, on one window of the first 100 (two of 200 take the MILP 15 s more).
    head = openb_head(tmp_path, 100)
    page = simulate("--trace", str(head), *args[2:], "--optimum", "100", "--format", "html").stdout
    assert "Against the windowed optimum" in page and "in 1 window of 100 jobs" in page


def test_a_price_on_waiting_from_the_command_line(tmp_path: Path) -> None:
    """--wait-price sets burst's trigger.waitPrice for the replay: at 1.6 CHF per GPU-hour it
    completes jobs sooner on OpenB's first 1,000 than at none, and pays for it; a price that is
    none is named."""
    base = ("--trace", str(openb_head(tmp_path, 1000)), "-c", CONFIG, "--format", "json")
    plain = json.loads(simulate(*base).stdout)["policies"][0]
    priced = json.loads(simulate(*base, "--wait-price", "1.6").stdout)["policies"][0]
    assert priced["mean_jct_s"] < plain["mean_jct_s"] and priced["cost"] > plain["cost"]
    done = simulate(*base, "--wait-price", "-1")
    assert done.returncode == 1 and "--wait-price: '-1' is not a price of 0 or more" in done.stderr


def test_on_the_ideal_clouds_a_high_price_on_waiting_completes_as_soon_as_no_wait(
    tmp_path: Path,
) -> None:
    """--clouds ideal tells burst's targets that a launch takes no time: at a price on waiting
    that outweighs any cloud bill, burst then sends what no-wait sends, as soon, and pays less
    (spot, fuller pools). Planning for the targets' default launch estimates instead, it kept
    jobs on-prem that a pool would have started sooner: 1.2 s later on OpenB's first 1,000."""
    base = ("--trace", str(openb_head(tmp_path, 1000)), "-c", CONFIG, "--format", "json")
    done = simulate(*base, "--clouds", "ideal", "--wait-price", "100000", "--baselines")
    by_name = {p["name"]: p for p in json.loads(done.stdout)["policies"]}
    burst, no_wait = by_name["burst"], by_name["no-wait"]
    assert burst["mean_jct_s"] <= no_wait["mean_jct_s"]
    assert burst["cost"] < no_wait["cost"] and burst["deadlines_missed"] == 0


def test_a_wait_per_gpu_hour_and_a_max_spot_delay_from_the_command_line(tmp_path: Path) -> None:
    """--wait-per-gpu-hour sends a queued job once it has waited its share: at 6m per GPU-hour
    (compute-wait's allowance on OpenB) more of OpenB's first 1,000 jobs burst and all complete
    sooner on average than on the deadline trigger alone; a duration that is none is named."""
    base = ("--trace", str(openb_head(tmp_path, 1000)), "-c", CONFIG, "--format", "json")
    plain = json.loads(simulate(*base).stdout)["policies"][0]
    sized = json.loads(simulate(*base, "--wait-per-gpu-hour", "6m").stdout)["policies"][0]
    assert sized["jobs_burst"] > plain["jobs_burst"]
    assert sized["mean_jct_s"] < plain["mean_jct_s"]
    done = simulate(*base, "--max-spot-delay", "soon")
    assert done.returncode == 1 and "--max-spot-delay: bad duration 'soon'" in done.stderr


def test_a_margin_from_the_command_line_or_measured_on_a_replay(tmp_path: Path) -> None:
    """--margin sets burst's deadline safety margin for the replay (a share of each runtime
    here); 'measured-share' takes it from how much longer jobs ran than burst was told on a
    first replay (noisy guesses); a margin that is neither is named."""
    base = ("--trace", str(openb_head(tmp_path, 1000)), "-c", CONFIG, "--format", "json")
    share = json.loads(simulate(*base, "--margin", "25%").stdout)
    assert (share["burst_margin_s"], share["burst_margin_share"]) == (0, 0.25)
    done = simulate(*base, "--margin", "measured-share", "--runtimes", "noisy")
    assert done.returncode == 0, done.stderr[-2000:]
    told = json.loads(done.stdout)["policies"][0]["runtime_overrun_share_p90"]
    assert 0 < told <= json.loads(done.stdout)["burst_margin_share"] < told + 0.01
    assert "% of each runtime, measured on a replay of burst with --runtimes noisy" in done.stderr
    done = simulate(*base, "--margin", "soon")
    assert done.returncode == 1 and "--margin: " in done.stderr, done.stderr


def test_a_deadline_runtime_share_from_the_command_line_or_measured_on_a_replay(
    tmp_path: Path,
) -> None:
    """--deadline-runtime-share sets the share of each runtime told that burst's deadline
    trigger counts: the replay reports it and decides differently with noisy guesses;
    'measured' takes the share nine runs in ten reached on a first replay (noisy guesses: about
    e^(-1.28 x 0.5)); a share out of range is named before any replay."""
    trace = str(openb_head(tmp_path, 1000))
    base = ("--trace", trace, "-c", CONFIG, "--format", "json", "--runtimes", "noisy")
    whole = json.loads(simulate(*base).stdout)
    half = json.loads(simulate(*base, "--deadline-runtime-share", "0.5").stdout)
    assert (whole["burst_deadline_runtime_share"], half["burst_deadline_runtime_share"]) == (1, 0.5)
    assert half["policies"][0]["cost"] != whole["policies"][0]["cost"]
    done = simulate(*base, "--deadline-runtime-share", "measured")
    assert done.returncode == 0, done.stderr[-2000:]
    counted = json.loads(done.stdout)["burst_deadline_runtime_share"]
    told = whole["policies"][0]["runtime_share_p10"]
    assert told - 0.01 < counted <= told and 0.4 < counted < 0.7, (counted, told)
    assert "deadline runtime share: " in done.stderr and "--runtimes noisy" in done.stderr
    done = simulate(*base, "--deadline-runtime-share", "0")
    assert done.returncode == 1 and "--deadline-runtime-share: '0' is not a share" in done.stderr


def test_several_policies_sharing_their_pools_from_the_command_line(tmp_path: Path) -> None:
    """`--policy a,b,c`: the trace's teams spread over the namespaces of all three, each job under
    its own namespace's policy; here the example policy made one per namespace, sharing pools, as
    benchmarks/bench_shared_pools.py replays it. The baselines replay one policy: asked for with
    several, a one-line error."""
    example = (ROOT / "docs" / "examples" / "simulate" / "policies.yaml").read_text()
    namespaces = ("cms-ml", "atlas-ml", "ml-research")
    documents = [
        example.replace("name: ml-training", f"name: {ns}")
        .replace("namespaces: [cms-ml, atlas-ml, ml-research]", f"namespaces: [{ns}]")
        .replace("capacity: spot-if-slack", "capacity: spot-if-slack\n    sharePools: true")
        for ns in namespaces
    ]
    (tmp_path / "policies.yaml").write_text("\n---\n".join(documents))
    (tmp_path / "burst.yaml").write_text(
        (ROOT / "docs" / "examples" / "simulate" / "burst.yaml").read_text()
    )
    named = ",".join(namespaces)
    done = simulate("--trace", "openb", "-c", str(tmp_path), "--policy", named, "-f", "json")
    assert done.returncode == 0, done.stderr[-2000:]
    (burst,) = json.loads(done.stdout)["policies"]
    # The replay the benchmark makes of the same split (sim/variants.py), on the same jobs.
    shipped = catalog.shipped()
    cfg = config.load([Path(CONFIG)], config.Vocabulary(shipped.regions(), shipped.accelerators()))
    split = variants.per_namespace(cfg, "ml-training", share=True)
    raw = trace.read(ROOT / "burst" / "data" / "traces" / "alibaba-openb-2023-public.csv")
    jobs = trace.derive(raw, teams=list(namespaces), slack=(1.5, 4.0), seed=1)
    assert cfg.service is not None
    offers = shipped.with_overrides(cfg.service.spec.catalog)
    world = sim.World(jobs, {"V100": trace.onprem_gpus(raw)}, split, offers, seed=1)
    expected = world.run(sim.Burst(split))
    assert burst["pools_created"] == expected.pools_created
    assert burst["decisions"] == expected.decisions
    assert burst["idle_share"] == round(expected.idle_usd_micros / expected.cost_usd_micros, 4)
    refused = simulate("--trace", "openb", "-c", str(tmp_path), "--policy", named, "--baselines")
    assert refused.returncode == 1
    assert (
        refused.stderr == "error: --baselines, --sweep and --optimum replay one policy: name one\n"
    )
