"""``kvoffload vllm check --checker engine``: vLLM's own connectors in live engines, by name.

This package is the only place that names every connector: :mod:`.registry` (the connectors by the
name ``--connector`` gives them, each row from its connector's folder) and the driver's entry point
(``python -m kvoffload_lab.vllm.live``, :mod:`.__main__`). The driver, the workloads and what every
judge reads the same way are in :mod:`kvoffload_lab.vllm.common.live`; each connector's row, judge and
in-engine pieces are in its folder's ``live`` package (:mod:`kvoffload_lab.vllm.offloading.live`,
:mod:`kvoffload_lab.vllm.simple.live`).
"""
