"""Pipelined SET/GET of large values over one Redis connection, without copying the chunks.

redis-py builds every command into Python bytes and sends them piece by piece; for 64 KiB..1 MiB
values that costs about two thirds of the throughput ``redis-benchmark`` reaches. Here a batch of
commands goes out as one ``sendmsg`` of iovecs (RESP prefix, record header, the CPU block itself,
CRLF), and each GET reply is received straight into the destination CPU block. The connection
comes from redis-py's pool (so URL, password, TLS, db and timeouts are redis-py's); a TLS socket,
which has no ``sendmsg``, sends its buffers one by one. Any error leaves the connection's stream
in an unknown state: the caller disconnects it.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence

IOV_MAX = 1024


class RespError(Exception):
    """The server answered an error or something that is not the expected reply."""


class ErrorReply(RespError):
    """The server answered an error reply (``-WRONGTYPE ...``), which was read whole: the stream
    is still in step with the pipeline."""


def _unexpected(line: bytes) -> RespError:
    text = line.decode(errors="replace")
    return ErrorReply(text[1:]) if line.startswith(b"-") else RespError(text)


def set_command(key: bytes, header: bytes, payload: memoryview, ttl_s: int | None) -> list[bytes | memoryview]:
    """The iovecs of ``SET key header+payload [EX ttl]``."""
    length = len(header) + len(payload)
    if ttl_s is None:
        prefix = b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n" % (len(key), key, length)
        return [prefix, header, payload, b"\r\n"]
    ttl = str(ttl_s).encode()
    prefix = b"*5\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n" % (len(key), key, length)
    return [prefix, header, payload, b"\r\n$2\r\nEX\r\n$%d\r\n%s\r\n" % (len(ttl), ttl)]


def get_command(key: bytes) -> bytes:
    return b"*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" % (len(key), key)


def exists_command(key: bytes) -> bytes:
    return b"*2\r\n$6\r\nEXISTS\r\n$%d\r\n%s\r\n" % (len(key), key)


def send_all(sock: socket.socket, buffers: Sequence[bytes | memoryview]) -> None:
    """Send every buffer, in order, with as few system calls as the socket allows."""
    if not hasattr(sock, "sendmsg") or type(sock) is not socket.socket:
        for buffer in buffers:
            sock.sendall(buffer)
        return
    views = [memoryview(buffer).cast("B") for buffer in buffers if len(buffer)]
    while views:
        sent = sock.sendmsg(views[:IOV_MAX])
        while sent:
            if sent >= len(views[0]):
                sent -= len(views[0])
                views.pop(0)
            else:
                views[0] = views[0][sent:]
                sent = 0


class ReplyReader:
    """Reads RESP replies from a socket; bulk replies land in caller-given buffers."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buffer = bytearray()

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("the Redis server closed the connection")
        self._buffer += chunk

    def line(self) -> bytes:
        while True:
            end = self._buffer.find(b"\r\n")
            if end >= 0:
                line = bytes(self._buffer[:end])
                del self._buffer[: end + 2]
                return line
            self._fill()

    def read_into(self, target: memoryview) -> None:
        """Exactly ``len(target)`` bytes of the stream into ``target``."""
        taken = min(len(self._buffer), len(target))
        target[:taken] = self._buffer[:taken]
        del self._buffer[:taken]
        while taken < len(target):
            received = self.sock.recv_into(target[taken:])
            if not received:
                raise ConnectionError("the Redis server closed the connection")
            taken += received

    def simple(self) -> bytes:
        """A status reply (``+OK``); an error reply raises RespError."""
        line = self.line()
        if not line.startswith(b"+"):
            raise _unexpected(line)
        return line[1:]

    def integer(self) -> int:
        """An integer reply (``:1``); an error reply raises RespError."""
        line = self.line()
        if not line.startswith(b":"):
            raise _unexpected(line)
        return int(line[1:])

    def bulk_length(self) -> int:
        """The length of the next bulk reply, -1 for nil (``$-1`` in RESP2, ``_`` in RESP3, which
        redis-py may have negotiated with HELLO)."""
        line = self.line()
        if line == b"_":
            return -1
        if not line.startswith(b"$"):
            raise _unexpected(line)
        return int(line[1:])

    def skip(self, count: int) -> None:
        scratch = memoryview(bytearray(min(count, 1 << 20)))
        while count > 0:
            part = min(count, len(scratch))
            self.read_into(scratch[:part])
            count -= part
