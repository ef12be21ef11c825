"""A private ``redis-server`` on a free loopback port with a temporary directory.

Used by the tests' fixture, ``kvoffload simulate --tiers ...,redis`` (when no ``--redis-url`` is
given) and ``kvoffload bench tiers``. Nothing is persisted (no RDB, no AOF), so a restart loses
every key: exactly the "server restarted" fault the redis tier must survive.
"""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
from pathlib import Path

INSTALL_HINT = "install it with `apt-get install redis-server` (Debian/Ubuntu) or `make redis-server`"


class RedisServerMissing(RuntimeError):
    """No ``redis-server`` executable on PATH."""


PORTS_VARIABLE = "KVOFFLOAD_REDIS_PORTS"


def free_port() -> int:
    """A free loopback port: any, or the first free one of ``KVOFFLOAD_REDIS_PORTS`` (``LOW-HIGH``)
    when that is set, so that jobs sharing a machine keep to their own ports."""
    allowed = os.environ.get(PORTS_VARIABLE, "")
    if not allowed:
        candidates = [0]
    else:
        low, _, high = allowed.partition("-")
        try:
            candidates = list(range(int(low), int(high or low) + 1))
        except ValueError:
            raise ValueError(f"{PORTS_VARIABLE}={allowed!r}: expected LOW-HIGH, e.g. 16400-16499") from None
    for port in candidates:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(sock.getsockname()[1])
    raise RuntimeError(f"no free loopback port in {PORTS_VARIABLE}={allowed}")


class RedisServer:
    """Start with ``start()`` (or as a context manager); ``url`` to connect; ``restart()`` loses
    every key; ``stop()`` kills the server and removes its directory."""

    def __init__(
        self, maxmemory: str = "256mb", policy: str = "allkeys-lru", password: str | None = None, tls: bool = False
    ) -> None:
        executable = shutil.which("redis-server")
        if executable is None:
            raise RedisServerMissing(f"redis-server is not installed: {INSTALL_HINT}")
        if tls and shutil.which("openssl") is None:
            raise RedisServerMissing("a TLS redis-server needs the openssl command to make its certificate")
        self.executable = executable
        self.maxmemory = maxmemory
        self.policy = policy
        self.password = password
        self.tls = tls
        self.port = 0
        self.directory: str | None = None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"{'rediss' if self.tls else 'redis'}://{auth}127.0.0.1:{self.port}/0"

    @property
    def ca_file(self) -> str:
        """The self-signed certificate a TLS server presents (``ssl_ca_certs`` for clients)."""
        return str(Path(self.directory or ".", "cert.pem"))

    def _make_certificate(self) -> None:
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
             "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(Path(self.ca_file).with_name("key.pem")),
             "-out", self.ca_file],
            check=True, capture_output=True,
        )

    def start(self) -> RedisServer:
        if self.directory is None:
            self.directory = tempfile.mkdtemp(prefix="kvoffload-redis-")
            self.port = free_port()
            if self.tls:
                self._make_certificate()
        listen = ["--port", "0", "--tls-port", str(self.port)] if self.tls else ["--port", str(self.port)]
        args = [
            self.executable, *listen, "--bind", "127.0.0.1", "--dir", self.directory,
            "--save", "", "--appendonly", "no", "--maxmemory", self.maxmemory,
            "--maxmemory-policy", self.policy, "--protected-mode", "yes", "--logfile", "redis.log",
        ]
        if self.password:
            args += ["--requirepass", self.password]
        if self.tls:
            key = str(Path(self.ca_file).with_name("key.pem"))
            args += ["--tls-cert-file", self.ca_file, "--tls-key-file", key, "--tls-ca-cert-file", self.ca_file,
                     "--tls-auth-clients", "no"]
        self._process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._wait_ready()
        return self

    def _wait_ready(self, timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process is not None and self._process.poll() is not None:
                log = Path(self.directory or ".", "redis.log")
                tail = log.read_text()[-500:] if log.exists() else ""
                raise RuntimeError(f"redis-server exited with status {self._process.returncode}: {tail}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as raw:
                    sock = raw
                    if self.tls:
                        context = ssl.create_default_context(cafile=self.ca_file)
                        sock = context.wrap_socket(raw, server_hostname="127.0.0.1")
                    sock.sendall(b"PING\r\n")
                    if sock.recv(64):
                        return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError(f"redis-server did not answer on port {self.port} within {timeout_s} s")

    def _kill(self) -> None:
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None

    def restart(self) -> None:
        """Stop and start again on the same port: every key is lost (nothing is persisted)."""
        self._kill()
        self.start()

    def stop(self) -> None:
        self._kill()
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
