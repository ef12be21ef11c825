"""copy_calibration: the rule that picks a CUDA copy path, the bounded calibration, the table file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvoffload.dataplane.copy_calibration import (
    PREFERENCE,
    Direction,
    Measurement,
    calibrate,
    choose,
    read_table,
    write_table,
)

ALL = list(PREFERENCE)
KIB = 1024


def m(
    path: str, gbps: float, slowdown: float | None, direction: Direction = "store", size: int = 64 * KIB
) -> Measurement:
    return Measurement(path, direction, size, gbps, slowdown)


def test_highest_bandwidth_within_the_slowdown_limit_wins() -> None:
    table = [m("gather", 50.0, 0.12), m("vector", 48.0, 0.04), m("batched", 45.0, 0.0), m("naive", 9.0, 0.0)]
    choice = choose(table, "store", 64 * KIB, ALL)
    assert choice.path == "vector"
    assert "highest bandwidth (48.0 GB/s)" in choice.reason and "4.0% <= 5%" in choice.reason


def test_the_limit_is_inclusive_and_configurable() -> None:
    table = [m("gather", 50.0, 0.05), m("batched", 45.0, 0.0)]
    assert choose(table, "store", 64 * KIB, ALL).path == "gather"
    assert choose(table, "store", 64 * KIB, ALL, max_slowdown=0.01).path == "batched"


def test_bandwidth_ties_go_to_lower_slowdown_then_preference_order() -> None:
    assert choose([m("gather", 40.0, 0.03), m("vector", 40.0, 0.01)], "store", 64 * KIB, ALL).path == "vector"
    tied = [m("naive", 40.0, 0.0), m("merged", 40.0, 0.0), m("batched", 40.0, 0.0)]
    assert choose(tied, "store", 64 * KIB, ALL).path == "batched"
    assert choose(tied, "store", 64 * KIB, ["naive", "merged"]).path == "merged"


def test_every_path_over_the_limit_takes_the_least_slowdown() -> None:
    table = [m("gather", 50.0, 0.20), m("vector", 52.0, 0.09), m("batched", 30.0, 0.07)]
    choice = choose(table, "store", 64 * KIB, ALL)
    assert choice.path == "batched"
    assert "no path within 5% slowdown; least slowdown (7.0%)" in choice.reason
    # Equal least slowdown: the higher bandwidth.
    assert choose([m("merged", 20.0, 0.07), m("batched", 30.0, 0.07)], "store", 64 * KIB, ALL).path == "batched"


def test_unknown_slowdown_never_counts_as_within_the_limit() -> None:
    assert choose([m("gather", 90.0, None), m("merged", 20.0, 0.02)], "store", 64 * KIB, ALL).path == "merged"
    only_unknown = choose([m("gather", 90.0, None), m("vector", 80.0, None)], "store", 64 * KIB, ALL)
    assert only_unknown.path == "gather" and "least slowdown (unknown)" in only_unknown.reason


def test_missing_and_unavailable_paths_are_not_chosen() -> None:
    table = [m("gather", 50.0, 0.0), m("batched", 40.0, 0.0)]
    assert choose(table, "store", 64 * KIB, ["merged", "batched", "naive"]).path == "batched"
    # No measurement of any available path (or none for this direction): preference order.
    fallback = choose(table, "store", 64 * KIB, ["naive", "merged"])
    assert fallback.path == "merged" and "no measurement" in fallback.reason
    assert choose(table, "load", 64 * KIB, ["naive", "vector"]).path == "vector"
    assert choose([], "load", 4 * KIB, ALL).path == PREFERENCE[0]
    with pytest.raises(ValueError, match="no CUDA copy path is available"):
        choose(table, "store", 64 * KIB, [])


def test_each_direction_is_chosen_from_its_own_measurements() -> None:
    table = [m("gather", 50.0, 0.0, "store"), m("gather", 10.0, 0.0, "load"), m("batched", 30.0, 0.0, "load")]
    assert choose(table, "store", 64 * KIB, ALL).path == "gather"
    assert choose(table, "load", 64 * KIB, ALL).path == "batched"


def test_the_nearest_measured_block_size_is_used() -> None:
    table = [
        m("vector", 30.0, 0.0, size=4 * KIB),
        m("batched", 10.0, 0.0, size=4 * KIB),
        m("vector", 40.0, 0.0, size=1024 * KIB),
        m("batched", 50.0, 0.0, size=1024 * KIB),
    ]
    assert choose(table, "store", 4 * KIB, ALL).path == "vector"
    assert choose(table, "store", 16 * KIB, ALL).path == "vector"  # 4x from 4 KiB, 64x from 1 MiB
    assert choose(table, "store", 512 * KIB, ALL).path == "batched"
    assert choose(table, "store", 64 * KIB, ALL).path == "vector"  # equally far (16x): the smaller size
    # A size measured for one path only still counts: the other paths are missing there.
    partial = [m("gather", 40.0, 0.0, size=4 * KIB), m("batched", 50.0, 0.0, size=1024 * KIB)]
    assert choose(partial, "store", 8 * KIB, ALL).path == "gather"


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_calibration_stops_at_its_budget_leaving_whole_paths_missing() -> None:
    clock = FakeClock()
    calls: list[tuple[str, str]] = []

    def measure(path: str, direction: Direction) -> Measurement:
        calls.append((path, direction))
        clock.now += 0.03
        return m(path, 10.0, 0.0, direction)

    got = calibrate(measure, ["naive", "gather", "batched"], budget_s=0.1, clock=clock)
    # Preference order, store then load per path; the 4th measurement starts at 0.09 < 0.1.
    assert calls == [("batched", "store"), ("batched", "load"), ("gather", "store"), ("gather", "load")]
    assert [(x.path, x.direction) for x in got] == calls
    assert calibrate(measure, ["naive"], budget_s=0.0, clock=clock) == []


def test_a_path_that_fails_to_measure_is_missing_not_chosen() -> None:
    def measure(path: str, direction: Direction) -> Measurement:
        if path == "vector":
            raise RuntimeError("triton kernel failed to compile")
        return m(path, 5.0 if path == "naive" else 1.0, 0.0, direction)

    got = calibrate(measure, ["vector", "naive"], budget_s=10.0)
    assert {x.path for x in got} == {"naive"}
    assert choose(got, "load", 64 * KIB, ["vector", "naive"]).path == "naive"


def test_table_round_trips_through_json(tmp_path: Path) -> None:
    table = [m("gather", 50.5, 0.031), m("batched", 45.0, None, "load", 4 * KIB)]
    path = tmp_path / "copy_table.json"
    write_table(path, table, "cuda:0 NVIDIA H200")
    assert json.loads(path.read_text())["device"] == "cuda:0 NVIDIA H200"
    assert read_table(path) == table


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ("{", "Expecting property name"),
        ('{"version": 9, "measurements": []}', "not a version 1 table \\(key 'version'\\)"),
        ('{"version": 1}', "key 'measurements' must be a list"),
        ('{"version": 1, "measurements": [3]}', r"measurements\[0\]: expected an object, got int"),
        (
            '{"version": 1, "measurements": [{"path": "gather", "direction": "up", "block_bytes": 4, "gbps": 1}]}',
            r"measurements\[0\]\.direction: expected 'store' or 'load', got 'up'",
        ),
        (
            '{"version": 1, "measurements": [{"path": "gather", "direction": "load", "block_bytes": "4", "gbps": 1}]}',
            r"measurements\[0\]\.block_bytes: expected int, got '4'",
        ),
        (
            '{"version": 1, "measurements": [{"path": "gather", "direction": "load", "block_bytes": 4, "gbps": 1,'
            ' "slowdown": "low"}]}',
            r"measurements\[0\]\.slowdown: expected a number or null, got 'low'",
        ),
    ],
)
def test_a_bad_table_is_refused_naming_the_file_and_entry(tmp_path: Path, doc: str, message: str) -> None:
    path = tmp_path / "t.json"
    path.write_text(doc)
    with pytest.raises(ValueError, match=f"^copy table {path}: .*{message}"):
        read_table(path)


def test_a_missing_table_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"copy table .*nope.json: .*No such file"):
        read_table(tmp_path / "nope.json")
