"""A private ``redis-server`` on a free loopback port with a temporary directory, and a private
Redis Cluster of such servers.

Used by the tests' fixtures, ``kvoffload simulate --tiers ...,redis`` (when no ``--redis-url`` is
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
from collections.abc import Sequence
from pathlib import Path

INSTALL_HINT = "install it with `apt-get install redis-server redis-tools` (Debian/Ubuntu) or `make redis-server`"


class RedisServerMissing(RuntimeError):
    """No ``redis-server`` (or, for a cluster, ``redis-cli``) executable on PATH."""


PORTS_VARIABLE = "KVOFFLOAD_REDIS_PORTS"


def free_port() -> int:
    """A free loopback port: any, or the first free one of ``KVOFFLOAD_REDIS_PORTS`` (``LOW-HIGH``)
    when that is set, so that jobs sharing a machine keep to their own ports."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` distinct free loopback ports (see :func:`free_port`); each is held until all are
    found, so none is handed out twice."""
    allowed = os.environ.get(PORTS_VARIABLE, "")
    if not allowed:
        candidates = [0] * count
    else:
        low, _, high = allowed.partition("-")
        try:
            candidates = list(range(int(low), int(high or low) + 1))
        except ValueError:
            raise ValueError(f"{PORTS_VARIABLE}={allowed!r}: expected LOW-HIGH, e.g. 16400-16499") from None
    held: list[socket.socket] = []
    try:
        for port in candidates:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                sock.close()
                continue
            held.append(sock)
            if len(held) == count:
                return [int(bound.getsockname()[1]) for bound in held]
    finally:
        for sock in held:
            sock.close()
    wanted = "port" if count == 1 else f"{count} ports"
    raise RuntimeError(f"no free loopback {wanted} in {PORTS_VARIABLE}={allowed}")


class RedisServer:
    """Start with ``start()`` (or as a context manager); ``url`` to connect; ``restart()`` loses
    every key; ``stop()`` kills the server and removes its directory."""

    def __init__(
        self,
        maxmemory: str = "256mb",
        policy: str = "allkeys-lru",
        password: str | None = None,
        tls: bool = False,
        port: int = 0,
        options: Sequence[str] = (),
    ) -> None:
        """``port`` 0 takes a free one at the first start; ``options`` are more ``redis-server``
        arguments (e.g. cluster mode's)."""
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
        self.requested_port = port
        self.port = port
        self.options = tuple(options)
        self.directory: str | None = None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"{'rediss' if self.tls else 'redis'}://{auth}127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int | None:
        """The running server's process id (None while stopped)."""
        return None if self._process is None else self._process.pid

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
            self.port = self.requested_port or free_port()
            if self.tls:
                self._make_certificate()
        listen = ["--port", "0", "--tls-port", str(self.port)] if self.tls else ["--port", str(self.port)]
        args = [
            self.executable, *listen, "--bind", "127.0.0.1", "--dir", self.directory,
            "--save", "", "--appendonly", "no", "--maxmemory", self.maxmemory,
            "--maxmemory-policy", self.policy, "--protected-mode", "yes", "--logfile", "redis.log", *self.options,
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

    def kill(self) -> None:
        """SIGKILL the server (a crash: nothing is flushed or closed); ``start()`` brings it back on
        the same port and directory."""
        if self._process is not None:
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


class LocalRedisCluster:
    """A Redis Cluster of ``masters`` private servers on loopback ports (no replicas), created with
    ``redis-cli --cluster create``; ``start()`` returns once every node reports ``cluster_state:ok``.
    ``url`` is the first node's (any node serves as the seed); ``stop()`` stops every server.

    Each node also needs a cluster bus port: both come from ``KVOFFLOAD_REDIS_PORTS`` when set. A
    dead master's slots are not taken over (no replica), and ``cluster-require-full-coverage no``
    lets the other masters keep serving theirs, as a cache cluster should.
    """

    def __init__(self, masters: int = 3, node_timeout_ms: int = 1000, maxmemory: str = "64mb") -> None:
        cli = shutil.which("redis-cli")
        if cli is None:
            raise RedisServerMissing(f"redis-cli is not installed: {INSTALL_HINT}")
        self.cli = cli
        ports = free_ports(2 * masters)
        self.nodes = [
            RedisServer(
                maxmemory=maxmemory,
                port=port,
                options=("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-port",
                         str(bus), "--cluster-node-timeout", str(node_timeout_ms),
                         "--cluster-require-full-coverage", "no"),
            )
            for port, bus in zip(ports[:masters], ports[masters:], strict=True)
        ]

    @property
    def url(self) -> str:
        return self.nodes[0].url

    def start(self, timeout_s: float = 30.0) -> LocalRedisCluster:
        try:
            for node in self.nodes:
                node.start()
            addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
            subprocess.run(
                [self.cli, "--cluster", "create", *addresses, "--cluster-replicas", "0", "--cluster-yes"],
                check=True, capture_output=True, timeout=timeout_s,
            )
            self.wait_ok(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def command(self, node: RedisServer, *args: str) -> str:
        """``redis-cli`` on ``node``: its reply as text (errors included)."""
        done = subprocess.run(
            [self.cli, "-h", "127.0.0.1", "-p", str(node.port), *args], capture_output=True, text=True, timeout=30
        )
        return done.stdout.strip()

    def node_id(self, node: RedisServer) -> str:
        return self.command(node, "CLUSTER", "MYID")

    def reshard_command(self, source: RedisServer, target: RedisServer, slots: int) -> list[str]:
        """The ``redis-cli`` command that moves ``slots`` hash slots, keys included, from ``source``
        to ``target`` (a resharding: each slot migrates key by key while both nodes serve)."""
        return [
            self.cli, "--cluster", "reshard", f"127.0.0.1:{source.port}", "--cluster-from", self.node_id(source),
            "--cluster-to", self.node_id(target), "--cluster-slots", str(slots), "--cluster-yes",
        ]

    def wait_ok(self, timeout_s: float = 30.0, nodes: Sequence[RedisServer] | None = None) -> None:
        """Until every given node (all by default) reports ``cluster_state:ok`` and all 16384 slots."""
        deadline = time.monotonic() + timeout_s
        waiting = list(self.nodes if nodes is None else nodes)
        while waiting:
            info = self.command(waiting[0], "CLUSTER", "INFO")
            if "cluster_state:ok" in info and "cluster_slots_assigned:16384" in info:
                waiting.pop(0)
            elif time.monotonic() > deadline:
                raise RuntimeError(f"redis cluster node {waiting[0].port} not ok within {timeout_s} s: {info!r}")
            else:
                time.sleep(0.05)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> LocalRedisCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
