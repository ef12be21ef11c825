"""Where a Redis tier's commands go: one server, or the master of each key's hash slot in a Redis
Cluster.

A *node* is one server: its redis-py connection pool (URL options, password, TLS, timeouts) and
its own availability (kvoffload.tiers.health), so a dead master is one outage, logged once, while
the other masters keep serving. :class:`SingleServer` sends every key to its one node.
:class:`ClusterRoutes` keeps the cluster's slot table (from ``CLUSTER SLOTS``, asked of any node
it knows), groups a job's keys by their slot's master (CRC16, as redis-py's ``key_slot``), and
learns from the replies: a ``MOVED`` reply moves that slot at once; a node that could not be
reached, or answered ``CLUSTERDOWN``, makes the table stale, and it is asked again at the next job
(at most every ``REFRESH_INTERVAL_S``). Nothing here raises into a job: a slot with no known
master is a fault of its keys.

redis-py's own ``RedisCluster`` is not used: it builds every value into Python bytes (the tier
sends chunks straight from the CPU blocks, see kvoffload.tiers.resp), connects in its constructor,
and raises on a moved slot or a dead master, where the tier wants a per-chunk outcome.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import redis
from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from kvoffload.tiers.health import Availability

# Errors that mean "the server is unavailable right now" (unreachable, timed out, wrong password,
# a database the server lacks: redis-py raises ResponseError for that), never "the program is wrong".
UNAVAILABLE = (redis.exceptions.RedisError, OSError)

# How often, at most, a stale slot table is asked for again (a dead master keeps it stale).
REFRESH_INTERVAL_S = 0.5

Address = tuple[str, int]


class Node:
    """One server: a connection pool and whether it is reachable."""

    def __init__(self, options: dict[str, Any], name: str) -> None:
        self.address: Address = (str(options.get("host", "localhost")), int(options.get("port", 6379)))
        self.pool = redis.ConnectionPool(**options)
        self.health = Availability(name)

    def close(self) -> None:
        self.pool.disconnect()


class SingleServer:
    """Every key goes to the one server of the URL."""

    def __init__(self, options: dict[str, Any], display_url: str) -> None:
        self.seed = Node(options, f"redis tier {display_url}")

    def assign(self, names: Sequence[bytes]) -> list[tuple[Node, list[int]]]:
        """The keys (by index into ``names``) each node serves: all of them, the one server."""
        return [(self.seed, list(range(len(names))))]

    def redirected(self, reply: str) -> bool:
        """False: a single server that answers MOVED or ASK is a cluster node (misconfigured)."""
        return False

    def unreachable(self) -> None:
        """Nothing to learn: the one server is the only route."""

    def stats(self) -> dict[str, int]:
        return self.seed.health.stats()

    def close(self) -> None:
        self.seed.close()


def parse_address(text: str) -> Address | None:
    """``host:port`` of a MOVED/ASK reply (an IPv6 host keeps its colons), None if malformed."""
    host, _, port = text.rpartition(":")
    if not port.isdigit():
        return None
    return host, int(port)


def parse_slots(reply: Any, asked: Node) -> list[tuple[int, int, Address]]:
    """``(first slot, last slot, master address)`` of each range in a ``CLUSTER SLOTS`` reply; a
    master without a host (``""``) is the node that answered. Raises ValueError on a malformed
    reply."""
    ranges = []
    for start, end, master, *_replicas in reply:
        host = master[0].decode() if isinstance(master[0], bytes) else str(master[0])
        first, last = int(start), int(end)
        if not 0 <= first <= last < REDIS_CLUSTER_HASH_SLOTS:
            raise ValueError(f"slot range {first}-{last}")
        ranges.append((first, last, (host or asked.address[0], int(master[1]))))
    return ranges


class ClusterRoutes:
    """The slot table of a Redis Cluster and a node per master, shared by the tier's I/O threads."""

    def __init__(self, options: dict[str, Any], display_url: str) -> None:
        self.options = options
        self.display_url = display_url
        self._lock = threading.Lock()  # the slot table, the nodes and the counters
        self._refreshing = threading.Lock()  # one thread asks for the slot table at a time
        self.seed = Node(options, self._node_name(options))
        self._nodes: dict[Address, Node] = {self.seed.address: self.seed}
        self._slots: list[Node | None] = [None] * REDIS_CLUSTER_HASH_SLOTS
        self._stale = True
        self._refreshed_at = -REFRESH_INTERVAL_S
        self._refresh_error = "CLUSTER SLOTS not asked yet"
        self.topology = Availability(f"redis tier {display_url} (cluster slot table)")
        self.refreshes = 0
        self.redirections = 0

    def _node_name(self, options: dict[str, Any]) -> str:
        return f"redis tier {self.display_url}, node {options.get('host')}:{options.get('port')}"

    def _node(self, address: Address) -> Node:
        """The node at ``address``, made on first sight (the caller holds the lock)."""
        node = self._nodes.get(address)
        if node is None:
            options = dict(self.options, host=address[0], port=address[1])
            node = self._nodes[address] = Node(options, self._node_name(options))
        return node

    def assign(self, names: Sequence[bytes]) -> list[tuple[Node, list[int]]]:
        """The keys (by index into ``names``) each master serves; a key whose slot has no known
        master is in no group (the table is refreshed first when it is stale)."""
        self._refresh_if_stale()
        groups: dict[Address, tuple[Node, list[int]]] = {}
        unserved: list[int] = []
        slots = self._slots
        for index, name in enumerate(names):
            node = slots[key_slot(name)]
            if node is None:
                unserved.append(index)
            else:
                groups.setdefault(node.address, (node, []))[1].append(index)
        if unserved:
            self._stale = True
            self.topology.failed(f"{len(unserved)} key(s) in hash slots with no known master ({self._refresh_error})")
        else:
            self.topology.succeeded()
        return list(groups.values())

    def redirected(self, reply: str) -> bool:
        """A node answered ``MOVED slot host:port`` (that slot's master is now there: the table
        learns it at once) or ``ASK slot host:port`` (the slot is migrating: its keys are served
        again once the migration ends and the old master answers MOVED)."""
        kind, _, rest = reply.partition(" ")
        slot, _, address = rest.partition(" ")
        parsed = parse_address(address) if kind == "MOVED" else None
        with self._lock:
            self.redirections += 1
            if kind != "MOVED":
                return True
            if parsed is None or not slot.isdigit() or int(slot) >= REDIS_CLUSTER_HASH_SLOTS:
                self._stale = True
            else:
                self._slots[int(slot)] = self._node(parsed)
        return True

    def unreachable(self) -> None:
        """A node could not be reached or answered CLUSTERDOWN: its slots may have a new master."""
        self._stale = True

    def _refresh_if_stale(self) -> None:
        if not self._due():
            return
        with self._refreshing:
            if self._due():  # not refreshed by the thread this one waited for
                self._refresh()
                self._refreshed_at = time.monotonic()

    def _due(self) -> bool:
        return self._stale and time.monotonic() - self._refreshed_at >= REFRESH_INTERVAL_S

    def _refresh(self) -> None:
        """Ask the known nodes (reachable ones first) for ``CLUSTER SLOTS``; the first answer wins.
        The table lock is held only to install the answer, so ``stats`` and MOVED replies never
        wait for a node that does not answer."""
        with self._lock:
            candidates = sorted(self._nodes.values(), key=lambda node: not node.health.available)
        reasons = []
        for node in candidates:
            asked = f"{node.address[0]}:{node.address[1]}"
            try:
                ranges = parse_slots(redis.Redis(connection_pool=node.pool).execute_command("CLUSTER SLOTS"), node)
            except UNAVAILABLE as error:
                reasons.append(f"{asked}: {type(error).__name__}: {error}")
                continue
            except (TypeError, ValueError, IndexError) as error:
                reasons.append(f"{asked}: an unexpected CLUSTER SLOTS reply ({error})")
                continue
            with self._lock:
                slots: list[Node | None] = [None] * REDIS_CLUSTER_HASH_SLOTS
                for start, end, address in ranges:
                    slots[start : end + 1] = [self._node(address)] * (end + 1 - start)
                self._slots = slots
                self._stale = False
                self.refreshes += 1
            self._refresh_error = "not assigned in CLUSTER SLOTS"
            return
        self._refresh_error = "no node answered CLUSTER SLOTS: " + "; ".join(reasons)

    def masters(self) -> list[Node]:
        """The nodes that serve a slot, in slot order."""
        return list({id(node): node for node in self._slots if node is not None}.values())

    def stats(self) -> dict[str, int]:
        """``available`` (1 while every key has a known master and every master is reachable),
        ``outages`` and ``faulted_jobs`` summed over the nodes and the slot table (a job's keys
        on one node are one job there), ``redirected`` (keys answered MOVED or ASK),
        ``topology_refreshes`` (slot tables read) and ``masters``."""
        masters = self.masters()
        with self._lock:
            known = [self.topology.stats()] + [node.health.stats() for node in self._nodes.values()]
        serving = [self.topology.stats()] + [node.health.stats() for node in masters]
        return {
            "available": min(part["available"] for part in serving),
            "outages": sum(part["outages"] for part in known),
            "faulted_jobs": sum(part["faulted_jobs"] for part in known),
            "redirected": self.redirections,
            "topology_refreshes": self.refreshes,
            "masters": len(masters),
        }

    def close(self) -> None:
        for node in list(self._nodes.values()):
            node.close()
