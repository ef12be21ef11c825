"""``vllm serve`` (through ``python -m kvoffload.vllm.cpu_cli``) in a process group of its own."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MODEL_NAME = "tiny-llama"


@dataclass(frozen=True)
class ServerShape:
    """What every server of one comparison shares: the model, its KV cache and the engine's limits."""

    model_dir: Path
    block_size: int = 32  # vLLM's CPU attention takes multiples of 32 only
    gpu_blocks: int = 96
    max_model_len: int = 2048
    max_num_seqs: int = 8
    start_timeout_s: float = 300.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def server_env(root: Path, extra_paths: tuple[Path, ...] = ()) -> dict[str, str]:
    """The servers' environment: ``root``'s kvoffload, its lab and tlacheck first (and ``extra_paths``, where a spec
    module lives), nothing downloaded, and one core reserved whether or not a connector is
    configured (vLLM reserves one for a connector's thread on its own), so every server computes
    on the same threads."""
    env = dict(os.environ)
    # kvoffload_lab.vllm.common.engine turns vLLM's multiprocessing off for in-process engines; a server runs
    # as users run it, its engine core in a process of its own.
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
    paths = [str(root / "src"), str(root / "packages" / "kvoffload-lab" / "src"),
             str(root / "packages" / "tlacheck" / "src"), *map(str, extra_paths), env.get("PYTHONPATH", "")]
    env.update({
        "PYTHONPATH": os.pathsep.join(p for p in paths if p),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_CPU_NUM_OF_RESERVED_CPU": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    })
    return env


def serve_command(shape: ServerShape, port: int, transfer: dict[str, Any] | None) -> list[str]:
    """The ``vllm serve`` command line of one server."""
    command = [
        sys.executable, "-m", "kvoffload.vllm.cpu_cli", "serve", str(shape.model_dir),
        "--host", "127.0.0.1", "--port", str(port), "--served-model-name", MODEL_NAME,
        "--dtype", "float32", "--block-size", str(shape.block_size),
        "--num-gpu-blocks-override", str(shape.gpu_blocks), "--max-model-len", str(shape.max_model_len),
        "--enable-prefix-caching", "--enforce-eager", "--seed", "0", "--max-num-seqs", str(shape.max_num_seqs),
        "--disable-uvicorn-access-log", "--enable-prompt-tokens-details",
    ]
    if transfer is not None:
        command += ["--kv-transfer-config", json.dumps(transfer)]
    return command


class Server:
    """One server in a process group of its own, stopped by that group: SIGTERM, then SIGKILL, then
    checked gone."""

    def __init__(self, shape: ServerShape, log: Path, transfer: dict[str, Any] | None, env: dict[str, str]) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log
        self.start_timeout_s = shape.start_timeout_s
        self._log = log.open("wb")
        self.process = subprocess.Popen(
            serve_command(shape, self.port, transfer), stdout=self._log, stderr=subprocess.STDOUT, env=env,
            cwd=log.parent, start_new_session=True,
        )
        self.pgid = self.process.pid  # start_new_session: the server leads its own group

    def wait_ready(self) -> None:
        import httpx

        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode} at start:\n{self.log_tail()}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1)
        raise RuntimeError(f"server not ready after {self.start_timeout_s:.0f} s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        self._log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def metrics(self) -> str:
        import httpx

        return httpx.get(self.url + "/metrics", timeout=30).text

    def stop(self) -> None:
        """Stop every process of the server's group; raises if one survives."""
        for sig, grace in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(self.pgid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and group_alive(self.pgid):
                if self.process.poll() is None:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        self.process.wait(timeout=0.5)
                else:
                    time.sleep(0.2)
            if not group_alive(self.pgid):
                break
        self.process.poll()
        self._log.close()
        if group_alive(self.pgid):
            raise RuntimeError(f"processes of server group {self.pgid} survived SIGKILL")


@contextlib.contextmanager
def running(shape: ServerShape, log: Path, transfer: dict[str, Any] | None, env: dict[str, str]) -> Iterator[Server]:
    """A ready server, stopped on leaving (also on failure, whose error then carries the log's tail)."""
    server = Server(shape, log, transfer, env)
    try:
        server.wait_ready()
        yield server
    except BaseException as error:
        error.add_note(f"server log {log} tail:\n{server.log_tail()}")
        raise
    finally:
        server.stop()


def group_alive(pgid: int) -> bool:
    """Whether any process of group ``pgid`` is still running (zombies count as gone)."""
    for status in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = status.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # After the command's ")": state, ppid, pgrp.
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False
