"""A small vLLM-shaped engine loop and workloads, for the demo, the tests and the benchmarks."""

from kvoffload_lab.sim.engine import Engine, EngineConfig, StepReport
from kvoffload_lab.sim.request import SimRequest
from kvoffload_lab.sim.workload import MultiTurnWorkload, WorkloadConfig

__all__ = ["Engine", "EngineConfig", "MultiTurnWorkload", "SimRequest", "StepReport", "WorkloadConfig"]
