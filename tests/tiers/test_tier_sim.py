"""The tiered simulator: two engines sharing a real Redis tier, each with a real file tier, under
faults (transfer failures, aborts, resets, tier I/O errors, corrupted chunks, Redis restarts)."""

from __future__ import annotations

import json

import pytest

from kvoffload_lab.cli import main
from kvoffload_lab.redis_server import RedisServer
from kvoffload_lab.sim.runner import SimulationOptions
from kvoffload_lab.sim.tiered.runner import TierSimOptions, simulate_tiered


def test_file_tier_only_serves_what_the_cpu_tier_evicted() -> None:
    base = SimulationOptions(users=10, turns=3, num_cpu_blocks=48, backend="model", seed=3)
    result = simulate_tiered(TierSimOptions(base, ("cpu", "file")))
    assert (result["violations"], result["leaks"], result["integrity_failures"]) == (0, 0, 0)
    assert result["tiers"]["file"]["promoted_keys"] > 0
    assert result["integrity_checked_blocks"] > 0
    assert result["promotion_steps_max"] == 1  # promotion adds one engine step at the default delay


def test_two_engines_share_redis_under_faults(redis_server: RedisServer) -> None:
    base = SimulationOptions(users=16, turns=4, num_cpu_blocks=96, backend="model", faults=0.05, seed=1)
    result = simulate_tiered(TierSimOptions(base, ("cpu", "file", "redis"), engines=2))
    assert (result["violations"], result["leaks"], result["integrity_failures"]) == (0, 0, 0), result
    assert result["cross_engine_hit_tokens"] > 0
    assert result["injected_tier_corruptions"] > 0 and result["injected_tier_io_errors"] > 0
    assert result["tier_faults"] >= result["injected_tier_io_errors"]


def test_the_command_prints_tier_figures(redis_server: RedisServer, capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["simulate", "--tiers", "cpu,file,redis", "--engines", "2", "--users", "6", "--turns", "2",
                   "--json", "--redis-url", redis_server.url])
    result = json.loads(capsys.readouterr().out)
    assert status == 0
    assert set(result["tiers"]) == {"file", "redis"}
    assert {"cascades", "promotions", "checksum_failures", "faults", "hit_tokens"} <= set(result["tiers"]["redis"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--tiers", "file,cpu"], "--tiers must start with cpu"),
        (["--tiers", "cpu,disk"], "each of file, redis may follow cpu once"),
        (["--tiers", "cpu,file", "--engines", "2"], "needs the shared redis tier"),
        (["--tiers", "cpu,file", "--tier-dir", "/nonexistent/kvoffload"], "engine0.tier: cannot open it"),
        (["--tiers", "cpu,redis", "--redis-url", "foo://x"], "url='foo://x': expected redis://"),
    ],
)
def test_bad_tier_options_are_one_line_and_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_the_table_output_names_every_tier(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--tiers", "cpu,file", "--users", "4", "--turns", "2", "--cpu-blocks", "32"]) == 0
    out = capsys.readouterr().out
    assert "secondary tiers" in out and "│ file" in out and "OK: no violation" in out


def test_an_unreachable_redis_is_misses_and_recomputation(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["simulate", "--tiers", "cpu,redis", "--redis-url", "redis://127.0.0.1:1/0", "--users", "4",
                   "--turns", "2", "--json"])
    result = json.loads(capsys.readouterr().out)
    assert status == 0
    assert result["tier_faults"] > 0 and result["tiers"]["redis"]["promoted_keys"] == 0
    assert (result["violations"], result["leaks"], result["integrity_failures"]) == (0, 0, 0)
