"""trace.py: reading traces, and the documented rules for what traces lack."""

from __future__ import annotations

from pathlib import Path

import pytest

from burst.sim import trace

SHIPPED = Path(__file__).parents[2] / "burst" / "data" / "traces"


def test_the_shipped_traces_read_as_their_source_says() -> None:
    philly = trace.read(SHIPPED / "microsoft-philly-2017-public.csv")
    openb = trace.read(SHIPPED / "alibaba-openb-2023-public.csv")
    assert len(philly) == 77_850 and max(j.gpus for j in philly) == 128  # SOURCE.md
    assert len(openb) == 4_330 and max(j.gpus for j in openb) == 8
    assert openb[0].owner == "LS"  # no user there: the QoS queue stands in


def test_bad_rows_name_file_line_and_column(tmp_path: Path) -> None:
    bad = tmp_path / "t.csv"
    bad.write_text("job_id,submit_time,duration_s,gpus\na,0,10,1\nb,5,ten,1\n")
    with pytest.raises(trace.TraceError, match=r"t\.csv:3: duration_s: not a number: 'ten'"):
        trace.read(bad)
    # Absurd times and sizes are refused by name, not replayed for ever.
    for row, message in (
        ("a,0,inf,1", r"t\.csv:2: duration_s: not a number: 'inf'"),
        ("a,1e30,10,1", r"t\.csv:2: submit_time: 1000000000000000019884624838656 is not within"),
        ("a,0,10,1000000", r"t\.csv:2: gpus: 1000000 is not within 1\.\.100000"),
        ("a,0,0,1", r"t\.csv:2: duration_s: 0 is not within 1\.\."),
    ):
        bad.write_text(f"job_id,submit_time,duration_s,gpus\n{row}\n")
        with pytest.raises(trace.TraceError, match=message):
            trace.read(bad)
    bad.write_text("job_id,submit_time,gpus\na,0,1\n")
    with pytest.raises(trace.TraceError, match=r"missing column.*duration_s"):
        trace.read(bad)
    with pytest.raises(trace.TraceError, match="expected uniform:LO:HI"):
        trace.slack_rule("uniform:3:2")


def test_deadlines_teams_and_pods_follow_the_rules() -> None:
    jobs = [
        trace.TraceJob("small", 0, 60, 1, "alice"),
        trace.TraceJob("long", 100, 36_000, 4, "bob"),
        trace.TraceJob("wide", 200, 600, 20, "alice"),
    ]
    derived = trace.derive(jobs, teams=["t1", "t2"], allowance_s=1200, slack=(2, 2), seed=7)
    small, long, wide = derived
    assert small.deadline == 0 + 60 + 1200  # a short job gets the cloud allowance
    assert long.deadline == 100 + 2 * 36_000  # a long one its slack
    assert (wide.pods, wide.gpus_per_pod) == (3, 7)  # 20 GPUs: three pods of at most 8
    assert small.team == wide.team  # one user, one team
    again = trace.derive(jobs, teams=["t1", "t2"], allowance_s=1200, slack=(1.5, 4), seed=7)
    assert again == trace.derive(jobs, teams=["t1", "t2"], allowance_s=1200, slack=(1.5, 4), seed=7)


def test_the_default_on_prem_size_is_below_the_offered_load() -> None:
    jobs = [trace.TraceJob(str(i), i * 100, 1000, 8, "u") for i in range(100)]
    # 800,000 GPU-seconds over 9,900 s of submissions: 80.8 GPUs on average; 0.8 x that is
    # 64.6, rounded up to 9 nodes of 8.
    assert trace.onprem_gpus(jobs) == 72
    assert trace.onprem_spec("V100:32, T4:16") == {"V100": 32, "T4": 16}


def test_jobs_ask_for_products_in_proportion_to_their_gpus_on_prem() -> None:
    jobs = [trace.SimJob(str(i), i, 60, 1, 1, 1, 3600, "t") for i in range(3000)]
    assert set(trace.products_asked(jobs, {"V100": 24}, seed=1)) == {None}  # one: any GPU
    asked = trace.products_asked(jobs, {"V100": 16, "T4": 8}, seed=1)
    assert 0.62 < asked.count("V100") / len(jobs) < 0.72  # 2 in 3
    assert asked == trace.products_asked(jobs, {"V100": 16, "T4": 8}, seed=1)
    assert asked != trace.products_asked(jobs, {"V100": 16, "T4": 8}, seed=2)
    # An 8-GPU pod cannot run on T4 nodes of 4: it asks for the V100s.
    wide = [trace.SimJob(str(i), i, 60, 8, 1, 8, 3600, "t") for i in range(50)]
    assert set(trace.products_asked(wide, {"V100": 16, "T4": 4}, seed=1)) == {"V100"}
