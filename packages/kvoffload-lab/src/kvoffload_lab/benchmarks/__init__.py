"""Benchmarks behind ``kvoffload bench``: each module has ``add_arguments`` and ``run -> dict``.

Bad input raises :class:`kvoffload_lab.benchmarks.errors.BenchmarkError`.
"""
