"""cuda_copy_setup on the CPU: how ``cuda_copy`` becomes one path per direction, with the driver
replaced by a host backend (the probe and the calibration need a GPU and are stubbed)."""

from __future__ import annotations

import pytest
import torch

from kvoffload.dataplane import cuda_copy_setup
from kvoffload.dataplane.copy_backends import HostMemmove
from kvoffload.dataplane.copy_calibration import Measurement
from kvoffload.dataplane.cuda_paths import LayerRows


def rows(views: bool = True) -> LayerRows:
    gpu = [torch.zeros(8, 4, dtype=torch.int64)]
    cpu = [torch.zeros(8, 4, dtype=torch.int64)]
    return LayerRows(gpu, cpu, cpu if views else None, torch.device("cpu"))


@pytest.fixture
def host_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    """A driver whose single copies work and whose batched copy failed its probe."""
    monkeypatch.setattr(
        cuda_copy_setup,
        "_backends",
        lambda device: (HostMemmove(), None, ["ctypes-libcuda: probe returned other bytes"]),
    )


def test_a_named_path_serves_both_directions(host_driver: None) -> None:
    selection = cuda_copy_setup.select("merged", rows(), None, 0.1)
    assert {d: p.name for d, p in selection.paths.items()} == {"store": "merged", "load": "merged"}
    assert selection.unavailable == {"batched": "ctypes-libcuda: probe returned other bytes"}


def test_a_named_path_that_cannot_run_is_refused_with_why(host_driver: None) -> None:
    with pytest.raises(ValueError, match=r"^cuda_copy='batched' cannot run here: ctypes-libcuda: probe returned"):
        cuda_copy_setup.select("batched", rows(), None, 0.1)
    with pytest.raises(ValueError, match=r"^cuda_copy='vector' cannot run here: the vector path needs CUDA views"):
        cuda_copy_setup.select("vector", rows(views=False), None, 0.1)


def test_auto_follows_the_table_among_the_paths_that_run(host_driver: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cuda_copy_setup, "calibrate_paths", lambda *a: pytest.fail("a table means no calibration"))
    table = [
        Measurement("batched", "store", 32, 90.0, 0.0),  # cannot run here: not chosen
        Measurement("gather", "store", 32, 50.0, 0.01),
        Measurement("naive", "load", 32, 5.0, 0.0),
        Measurement("vector", "load", 32, 60.0, 0.2),
    ]
    selection = cuda_copy_setup.select("auto", rows(), table, 0.1)
    assert {d: p.name for d, p in selection.paths.items()} == {"store": "gather", "load": "naive"}
    assert "no path" not in selection.reasons["store"] and selection.measurements == table


def test_auto_without_a_table_calibrates_and_a_failed_calibration_chooses_without_data(
    host_driver: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    budgets: list[float] = []

    def calibration(r: LayerRows, names: list[str], budget_s: float) -> list[Measurement]:
        budgets.append(budget_s)
        assert "batched" not in names  # only the paths that can run are measured
        return [Measurement("merged", d, 32, 9.0, 0.0) for d in ("store", "load")]

    monkeypatch.setattr(cuda_copy_setup, "calibrate_paths", calibration)
    selection = cuda_copy_setup.select("auto", rows(), None, 0.3)
    assert budgets == [0.3] and {p.name for p in selection.paths.values()} == {"merged"}

    def no_room(*args: object) -> list[Measurement]:
        raise RuntimeError("CUDA out of memory")

    monkeypatch.setattr(cuda_copy_setup, "calibrate_paths", no_room)
    selection = cuda_copy_setup.select("auto", rows(), None, 0.3)
    assert {p.name for p in selection.paths.values()} == {"merged"}  # first by preference that runs
    assert "no measurement" in selection.reasons["load"]
