"""Redis servers for the vLLM tier tests on loopback ports, each stopped by its pid: a single
server on 16500-16599 (:class:`LoopbackRedis`) and a Redis Cluster of three masters on
16600-16699 (:class:`LoopbackCluster`, from ``redis-server --cluster-enabled yes`` and
``redis-cli --cluster create``)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import pytest

SINGLE_PORTS = range(16500, 16600)
CLUSTER_PORTS = range(16600, 16700)


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class LoopbackRedis:
    """``start()`` on the first free port of :data:`PORTS`; ``kill()`` SIGKILLs it (every key is
    lost: nothing is persisted); ``start()`` again restarts it empty on the same port."""

    def __init__(self, password: str | None = None) -> None:
        executable = shutil.which("redis-server")
        if executable is None:
            raise FileNotFoundError("redis-server is not installed: make redis-server")
        self.executable = executable
        self.password = password
        self.port = next(port for port in SINGLE_PORTS if _free(port))
        self.directory = tempfile.mkdtemp(prefix="kvoffload-vllm-redis-")
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> LoopbackRedis:
        args = [self.executable, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.directory,
                "--save", "", "--appendonly", "no", "--maxmemory", "256mb", "--maxmemory-policy", "allkeys-lru"]
        if self.password:
            args += ["--requirepass", self.password]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"redis-server did not listen on port {self.port}")

    def client(self) -> Any:
        """A redis-py client (imported here: only the Redis tests need it)."""
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, password=self.password)

    def kill(self) -> None:
        if self.process is not None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()
            self.process = None

    def stop(self) -> None:
        self.kill()
        shutil.rmtree(self.directory, ignore_errors=True)


def _cli(*args: str) -> str:
    done = subprocess.run(["redis-cli", *args], capture_output=True, text=True, timeout=120, check=True)
    return done.stdout


class LoopbackCluster:
    """``start()``; ``url`` names the first master; ``migrate(slots)`` moves slots from the first
    master to the second; ``kill(index)`` SIGKILLs a master; ``stop()`` ends every server."""

    def __init__(self, masters: int = 3) -> None:
        for tool in ("redis-server", "redis-cli"):
            if shutil.which(tool) is None:
                raise FileNotFoundError(f"{tool} is not installed: make redis-server")
        free = [port for port in CLUSTER_PORTS if _free(port) and _free(port + 10000)]
        self.ports = free[:masters]
        self.directory = tempfile.mkdtemp(prefix="kvoffload-cluster-")
        self.processes: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    def start(self) -> LoopbackCluster:
        for port in self.ports:
            self.processes[port] = subprocess.Popen(
                ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", self.directory,
                 "--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{port}.conf",
                 "--cluster-node-timeout", "1000", "--cluster-require-full-coverage", "no",
                 "--save", "", "--appendonly", "no", "--maxmemory", "128mb", "--maxmemory-policy", "allkeys-lru"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
        for port in self.ports:
            self._wait(lambda port=port: _cli("-p", str(port), "ping").strip() == "PONG")
        _cli("--cluster", "create", *(f"127.0.0.1:{port}" for port in self.ports), "--cluster-replicas", "0",
             "--cluster-yes")
        for port in self.ports:
            self._wait(lambda port=port: "cluster_state:ok" in _cli("-p", str(port), "cluster", "info"))
        return self

    @staticmethod
    def _wait(ready: object, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if ready():  # type: ignore[operator]
                    return
            except subprocess.CalledProcessError:
                pass
            time.sleep(0.1)
        raise RuntimeError("the Redis Cluster did not come up")

    def node_id(self, index: int) -> str:
        return _cli("-p", str(self.ports[index]), "cluster", "myid").strip()

    def migrate(self, slots: int) -> None:
        """Move ``slots`` hash slots, keys included, from the first master to the second."""
        _cli("--cluster", "reshard", f"127.0.0.1:{self.ports[0]}", "--cluster-from", self.node_id(0),
             "--cluster-to", self.node_id(1), "--cluster-slots", str(slots), "--cluster-yes")

    def kill(self, index: int) -> None:
        port = self.ports[index]
        process = self.processes.pop(port, None)
        if process is not None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()

    def stop(self) -> None:
        for index in range(len(self.ports)):
            self.kill(index)
        shutil.rmtree(self.directory, ignore_errors=True)


def started_cluster() -> Iterator[LoopbackCluster]:
    """A started cluster, stopped afterwards (a fixture body); skips when redis is not installed."""
    try:
        cluster = LoopbackCluster()
    except FileNotFoundError as missing:
        pytest.skip(str(missing))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
