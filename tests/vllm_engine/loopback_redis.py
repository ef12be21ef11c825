"""A redis-server for the tier tests on a loopback port of 16500-16999, stopped by its pid."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from typing import Any

PORTS = range(16500, 17000)


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
        self.port = next(port for port in PORTS if _free(port))
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
