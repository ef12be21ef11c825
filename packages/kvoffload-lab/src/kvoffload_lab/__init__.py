"""kvoffload-lab: the checkers, simulator, explorer, benchmarks and the `kvoffload` command built on the kvoffload product."""
