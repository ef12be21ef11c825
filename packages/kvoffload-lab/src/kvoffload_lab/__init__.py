"""kvoffload-lab: the simulator, the explorer, the checkers of vLLM's connectors, the benchmarks and
the ``kvoffload`` command, built on the kvoffload product (which never imports this package)."""
