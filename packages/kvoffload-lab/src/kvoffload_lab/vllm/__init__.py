"""The lab's vLLM checks, along one axis: one folder per vLLM connector on a common layer.

- :mod:`.common`: what every connector's check uses and that names no connector: the findings, the
  shared actions, the hypothesis machine, the explorer, the seeded run, the runner of cells, locating
  vLLM, the in-process engine (:mod:`.common.engine`) and the live check's driver (:mod:`.common.live`);
- :mod:`.offloading`: vLLM's ``OffloadingConnector`` with its managers (``--connector offloading``);
- :mod:`.simple`: vLLM's ``SimpleCPUOffloadConnector`` (``--connector simple``);
- :mod:`.own`: kvoffload's ``KVOffloadConnector`` under vLLM's schedulers (``--connector kvoffload``);
- :mod:`.live`: the live check's registry of connectors and the driver's entry point, the only
  modules that name every connector.

Each connector folder holds its simulated run, hypothesis machine and explorer, built from its one
list of actions (``actions.py``), and, where it runs in live engines, a ``live`` package with its
row and judge (``live/judge.py``) and the connector as the engine loads it (``live/connector.py``).
"""
