"""Find vLLM: the installed package, or a folder of vLLM sources (``--vllm-src`` / ``KVOFFLOAD_VLLM_SRC``).

A folder is an unpacked release wheel (``vllm/`` next to ``vllm-X.dist-info/``) or a git checkout
(``vllm/`` at its root). Its version comes from the wheel's ``METADATA``, else from
``vllm/_version.py`` (written by setuptools-scm in a built checkout), else from the imported
module's ``__version__``. Finding vLLM imports the modules the check needs, so a module that moved
is reported here, naming the module and the folder it was looked for in.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ENV_VAR = "KVOFFLOAD_VLLM_SRC"

# What ``kvoffload vllm check`` imports; all of it has been pure Python since 0.26.0.
REQUIRED_MODULES: tuple[str, ...] = (
    "vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler",
    "vllm.distributed.kv_transfer.kv_connector.v1.offloading.common",
    "vllm.distributed.kv_transfer.kv_connector.v1.offloading.config",
    "vllm.v1.kv_offload.base",
    "vllm.v1.kv_offload.factory",
    "vllm.v1.kv_offload.cpu.manager",
    "vllm.v1.kv_offload.tiering.manager",
    "vllm.v1.core.sched.output",
    "vllm.v1.core.kv_cache_utils",
    "vllm.v1.request",
)
# What ``--connector simple`` imports besides: vLLM's scheduler and its second connector (0.26.0 on).
SIMPLE_MODULES: tuple[str, ...] = (
    "vllm.v1.core.sched.scheduler",
    "vllm.v1.simple_kv_offload.manager",
    "vllm.v1.simple_kv_offload.worker",
    "vllm.distributed.kv_transfer.kv_connector.v1.simple_cpu_offload_connector",
)


class VllmNotFound(Exception):
    """vLLM is missing, or a module the check needs is not where it was looked for."""


@dataclass(frozen=True)
class VllmInstall:
    """The vLLM that was found: its version, its package folder, and how it was found."""

    version: str
    package_dir: Path
    source: str  # "installed", "--vllm-src" or the environment variable's name

    def describe(self) -> str:
        return f"vLLM {self.version} from {self.package_dir} ({self.source})"


def _version_from_folder(root: Path) -> str | None:
    for info in sorted(root.glob("vllm-*.dist-info")):
        metadata = info / "METADATA"
        if metadata.is_file():
            match = re.search(r"^Version: (\S+)$", metadata.read_text(errors="replace"), re.MULTILINE)
            if match:
                return match.group(1)
    version_file = root / "vllm" / "_version.py"
    if version_file.is_file():
        match = re.search(r"""^(?:__version__|version)\s*(?::\s*str\s*)?=\s*['"]([^'"]+)['"]""",
                          version_file.read_text(errors="replace"), re.MULTILINE)
        if match:
            return match.group(1)
    return None


def locate_vllm(src: str | None = None, simple: bool = False) -> VllmInstall:
    """Import vLLM from ``src`` (or ``$KVOFFLOAD_VLLM_SRC``, or the installed package), and the
    modules of ``SimpleCPUOffloadConnector`` too when ``simple``.

    Raises :class:`VllmNotFound` with one line saying what was looked for and where.
    """
    source = "installed"
    if src is None and os.environ.get(ENV_VAR):
        src, source = os.environ[ENV_VAR], ENV_VAR
    elif src is not None:
        source = "--vllm-src"
    folder_version = None
    if src is not None:
        root = Path(src).expanduser().resolve()
        if not (root / "vllm" / "__init__.py").is_file():
            raise VllmNotFound(f"{source} {src}: no vllm/__init__.py there (want an unpacked wheel or a git checkout)")
        loaded = sys.modules.get("vllm")
        if loaded is not None and Path(loaded.__file__ or "").resolve().parent != root / "vllm":
            raise VllmNotFound(f"{source} {src}: another vLLM ({loaded.__file__}) is already imported in this process")
        sys.path.insert(0, str(root))
        # vLLM inspects model architectures in a subprocess, which must find the same sources.
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
        folder_version = _version_from_folder(root)
        where = str(root)
    else:
        where = "the installed packages (sys.path)"
    try:
        vllm = importlib.import_module("vllm")
    except ImportError as error:
        raise VllmNotFound(f"cannot import vllm from {where}: {error}") from None
    package_dir = Path(vllm.__file__ or ".").resolve().parent
    version = folder_version or getattr(vllm, "__version__", None) or "unknown"
    for name in REQUIRED_MODULES:
        try:
            importlib.import_module(name)
        except ImportError as error:
            raise VllmNotFound(f"vLLM at {package_dir}: cannot import {name} ({error})") from None
    for name in SIMPLE_MODULES if simple else ():
        try:
            importlib.import_module(name)
        except ImportError as error:
            raise VllmNotFound(f"vLLM {version} at {package_dir}: cannot import {name} ({error}); "
                               "this vLLM has no SimpleCPUOffloadConnector") from None
    return VllmInstall(str(version), package_dir, source)
