"""Secondary tiers: file tier and Redis tier throughput against dd / redis-benchmark / a raw
pipelined client in the same run, and the engine steps a promotion adds in the simulator.

File tier: chunks are written through the tier driver (thread pool, one record with key and
CRC-32 per slot, O_DIRECT where allowed) and read back and verified; the reference is ``dd`` with
the same block size and the same direct-I/O flags on the same file system, and a bare sequential
``os.pwrite``/``os.preadv`` loop of whole slots. Redis tier: pipelined batches through
``RedisTier`` (header, checksum, zero-copy RESP pipeline) against ``redis-benchmark -P -r`` (one
connection, keys spread like ours) and a raw redis-py pipeline of the same values, on a private
``redis-server`` emptied before each run. Figures are MB/s (10^6 bytes).
"""

from __future__ import annotations

import argparse
import mmap
import os
import re
import shutil
import subprocess
import tempfile
import time
from typing import Any

from kvoffload.tiers.driver import TierDriver
from kvoffload.tiers.protocol import OK, TierJob
from kvoffload_lab.benchmarks.errors import BenchmarkError

KIB = 1024
DEFAULT_SIZES = (64 * KIB, 256 * KIB, 1024 * KIB)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", default=None, help="directory for the file tier (default: a temp dir under ./)")
    parser.add_argument("--mib", type=int, default=64, help="MiB moved per chunk size and direction (default 64)")
    parser.add_argument("--batch", type=int, default=8, help="chunks per tier job / pipeline (default 8)")
    parser.add_argument("--threads", type=int, default=4, help="tier I/O threads (default 4)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per figure; medians are reported (default 3)")
    parser.add_argument("--skip-redis", action="store_true", help="file tier only")


class ArenaChunks:
    """CPU blocks as one byte arena (what the driver reads from and writes into)."""

    def __init__(self, num_blocks: int, chunk_bytes: int) -> None:
        self.chunk_bytes = chunk_bytes
        # Page-aligned, like pinned CPU tensors.
        self._view = memoryview(mmap.mmap(-1, num_blocks * chunk_bytes))
        self._view[:] = os.urandom(chunk_bytes) * num_blocks

    def snapshot(self) -> bytes:
        return bytes(self._view)

    def clear(self) -> None:
        self._view[:] = bytes(len(self._view))

    def chunk_view(self, block_id: int) -> memoryview:
        return self._view[block_id * self.chunk_bytes : (block_id + 1) * self.chunk_bytes]


def _mbps(nbytes: int, seconds: float) -> float:
    return round(nbytes / seconds / 1e6, 1) if seconds > 0 else 0.0


def _dd(path: str, block: int, count: int, direct: bool, write: bool) -> float | None:
    """dd's own MB/s figure, or None when dd is missing or fails."""
    if shutil.which("dd") is None:
        return None
    flag = ["oflag=direct"] if direct and write else ["iflag=direct"] if direct else []
    args = ["dd", f"bs={block}", f"count={count}", *flag]
    args += ["if=/dev/zero", f"of={path}", "conv=notrunc,fsync"] if write else [f"if={path}", "of=/dev/null"]
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    match = re.search(r"(\d+) bytes .* copied, ([\d.]+) s", done.stderr)
    if done.returncode or not match:
        return None
    return _mbps(int(match[1]), float(match[2]))


def _raw_sequential(path: str, slot_bytes: int, count: int, direct: bool) -> tuple[float, float]:
    """A bare loop of whole-slot pwrite then preadv from one aligned buffer: (write, read) MB/s."""
    flags = os.O_RDWR | (os.O_DIRECT if direct else 0)
    fd = os.open(path, flags)
    buffer = mmap.mmap(-1, slot_bytes)
    buffer.write(os.urandom(slot_bytes))
    try:
        started = time.perf_counter()
        for index in range(count):
            os.pwrite(fd, buffer, index * slot_bytes)
        os.fsync(fd)
        write = time.perf_counter() - started
        started = time.perf_counter()
        for index in range(count):
            os.preadv(fd, [buffer], index * slot_bytes)
        read = time.perf_counter() - started
    finally:
        os.close(fd)
    return _mbps(count * slot_bytes, write), _mbps(count * slot_bytes, read)


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def bench_file(directory: str, chunk_bytes: int, mib: int, batch: int, threads: int, repeats: int) -> dict[str, Any]:
    """Write every slot once (cold: the file was only fallocate'd), then overwrite and read back
    ``repeats`` times (steady state: slots are reused as the tier evicts); references run on
    the same, already written file. Medians of ``repeats`` runs."""
    # Imported here: `kvoffload bench` imports this module to build every command's parser, and
    # the file tier needs xxhash (the tiers extra), which `kvoffload[vllm]` alone does not install.
    from kvoffload.tiers.file_tier import FileTier

    count = max(batch, mib * KIB * KIB // chunk_bytes)
    tier = FileTier(os.path.join(directory, f"bench-{chunk_bytes}.tier"), count, chunk_bytes)
    cpu = ArenaChunks(count, chunk_bytes)
    driver = TierDriver({"file": tier}, cpu, threads=threads, delay_steps=0)
    moved = count * chunk_bytes
    expected = cpu.snapshot()

    def run(kind: str) -> tuple[float, bool]:
        jobs = []
        for start in range(0, count, batch):
            ids = tuple(range(start, min(start + batch, count)))
            jobs.append(TierJob(1 + start, kind, "file", "bench", ids, ids, ids))  # type: ignore[arg-type]
        started = time.perf_counter()
        driver.submit(jobs, 0)
        outcomes = driver.drain()
        if kind == "cascade":
            os.fsync(tier.fd)
        return _mbps(moved, time.perf_counter() - started), all(r == OK for o in outcomes for r in o.results)

    try:
        cold_write, verified = run("cascade")
        writes, reads = [], []
        for _ in range(repeats):
            write_mbps, write_ok = run("cascade")
            cpu.clear()
            read_mbps, read_ok = run("promote")
            verified = verified and write_ok and read_ok and cpu.snapshot() == expected
            writes.append(write_mbps)
            reads.append(read_mbps)
        raws = [_raw_sequential(tier.path, tier.slot_bytes, count, tier.direct) for _ in range(repeats)]
        dd_writes = [_dd(tier.path, tier.slot_bytes, count, tier.direct, write=True) for _ in range(repeats)]
        dd_reads = [_dd(tier.path, tier.slot_bytes, count, tier.direct, write=False) for _ in range(repeats)]
    finally:
        driver.close()
        tier.close(remove=True)
    write_mbps, read_mbps = _median(writes), _median(reads)
    raw_write, raw_read = _median([w for w, _ in raws]), _median([r for _, r in raws])
    dd_write = _median([v for v in dd_writes if v]) if any(dd_writes) else None
    dd_read = _median([v for v in dd_reads if v]) if any(dd_reads) else None
    # Ratios count the tier's payload bytes against the references' whole-slot bytes.
    return {
        "chunk_kib": chunk_bytes // KIB,
        "chunks": count,
        "direct_io": tier.direct,
        "verified": verified,
        "tier_cold_write_mbps": cold_write,
        "tier_write_mbps": write_mbps,
        "tier_read_mbps": read_mbps,
        "dd_write_mbps": dd_write,
        "dd_read_mbps": dd_read,
        "raw_pwrite_mbps": raw_write,
        "raw_preadv_mbps": raw_read,
        "write_ratio_vs_dd": round(write_mbps / dd_write, 2) if dd_write else None,
        "read_ratio_vs_dd": round(read_mbps / dd_read, 2) if dd_read else None,
        "write_ratio_vs_raw": round(write_mbps / raw_write, 2) if raw_write else None,
        "read_ratio_vs_raw": round(read_mbps / raw_read, 2) if raw_read else None,
    }


def _redis_benchmark(port: int, size: int, count: int, pipeline: int) -> dict[str, float] | None:
    if shutil.which("redis-benchmark") is None:
        return None
    done = subprocess.run(
        ["redis-benchmark", "-p", str(port), "-t", "set,get", "-d", str(size), "-n", str(count),
         "-P", str(pipeline), "-c", "1", "-r", str(count), "-q", "--csv"],
        capture_output=True, text=True, check=False,
    )
    rates = dict(re.findall(r'"(SET|GET)","([\d.]+)"', done.stdout))
    if done.returncode or len(rates) != 2:
        return None
    return {name.lower(): round(float(rate) * size / 1e6, 1) for name, rate in rates.items()}


def bench_redis(url: str, port: int, size: int, mib: int, batch: int, repeats: int) -> dict[str, Any]:
    """Pipelined batches of ``batch`` values through RedisTier (header, checksum, copies) and
    through a raw redis-py pipeline of the same values; medians of ``repeats`` runs."""
    import redis

    from kvoffload.tiers.redis_tier import RedisTier, RedisTierConfig

    count = max(batch, mib * KIB * KIB // size)
    cpu = ArenaChunks(count, size)
    tier = RedisTier(RedisTierConfig(url, model="bench", layout=str(size)))
    client = redis.Redis.from_url(url)
    expected = cpu.snapshot()
    jobs = []
    for start in range(0, count, batch):
        ids = tuple(range(start, min(start + batch, count)))
        jobs.append(TierJob(start, "cascade", "redis", "bench", ids, ids))  # type: ignore[arg-type]
    moved = count * size

    def timed(work: Any) -> float:
        started = time.perf_counter()
        work()
        return _mbps(moved, time.perf_counter() - started)

    def tier_set() -> None:
        for job in jobs:
            assert tier.write(job, [cpu.chunk_view(k) for k in job.keys], [False] * len(job.keys)) == (OK,) * len(
                job.keys
            )

    def tier_get() -> None:
        for job in jobs:
            assert tier.read(job, [cpu.chunk_view(k) for k in job.keys])[0] == (OK,) * len(job.keys)

    def raw(op: str) -> None:
        for job in jobs:
            pipe = client.pipeline(transaction=False)
            for k in job.keys:
                if op == "set":
                    pipe.set(f"raw:{k}", expected[k * size : (k + 1) * size])
                else:
                    pipe.get(f"raw:{k}")
            pipe.execute()

    figures: dict[str, list[float]] = {name: [] for name in ("tier_set", "tier_get", "raw_set", "raw_get")}
    verified = True
    for _ in range(repeats):
        client.flushall()
        figures["tier_set"].append(timed(tier_set))
        cpu.clear()
        figures["tier_get"].append(timed(tier_get))
        verified = verified and cpu.snapshot() == expected
        client.flushall()
        figures["raw_set"].append(timed(lambda: raw("set")))
        figures["raw_get"].append(timed(lambda: raw("get")))
    client.flushall()
    reference = _redis_benchmark(port, size, count, batch)
    client.flushall()
    tier.close()
    client.close()
    result: dict[str, Any] = {"value_kib": size // KIB, "values": count, "verified": verified}
    for op in ("set", "get"):
        mbps, raw_mbps = _median(figures[f"tier_{op}"]), _median(figures[f"raw_{op}"])
        bench = reference[op] if reference else None
        result[f"tier_{op}_mbps"] = mbps
        result[f"raw_pipeline_{op}_mbps"] = raw_mbps
        result[f"redis_benchmark_{op}_mbps"] = bench
        result[f"{op}_ratio_vs_raw"] = round(mbps / raw_mbps, 2)
        result[f"{op}_ratio_vs_redis_benchmark"] = round(mbps / bench, 2) if bench else None
    return result


def bench_promotion_latency() -> dict[str, Any]:
    """Engine steps between a lookup answered "not yet" and the promoted chunks being ready."""
    from kvoffload_lab.sim.runner import SimulationOptions
    from kvoffload_lab.sim.tiered.runner import TierSimOptions, simulate_tiered

    base = SimulationOptions(users=16, turns=4, num_cpu_blocks=64, backend="model", seed=0)
    result = simulate_tiered(TierSimOptions(base, ("cpu", "file")))
    return {
        "default_delay_steps": base.delay,
        "promotions": result["tiers"]["file"]["promotions"],
        "promotion_steps_max": result["promotion_steps_max"],
        "promotion_steps_mean": result["promotion_steps_mean"],
        "violations": result["violations"],
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.dir is not None and not os.path.isdir(args.dir):
        raise BenchmarkError(f"--dir {args.dir}: not a directory")
    for name in ("mib", "batch", "threads", "repeats"):
        if getattr(args, name) < 1:
            raise BenchmarkError(f"--{name} must be >= 1, got {getattr(args, name)}")
    directory = tempfile.mkdtemp(prefix="kvoffload-bench-tiers-", dir=args.dir or os.getcwd())
    try:
        result: dict[str, Any] = {
            "file": [bench_file(directory, size, args.mib, args.batch, args.threads, args.repeats)
                     for size in DEFAULT_SIZES],
            "promotion": bench_promotion_latency(),
        }
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    if not args.skip_redis:
        from kvoffload_lab.redis_server import RedisServer, RedisServerMissing

        try:
            with RedisServer(maxmemory="1gb") as server:
                result["redis"] = [bench_redis(server.url, server.port, size, args.mib, args.batch, args.repeats)
                                   for size in DEFAULT_SIZES]
        except RedisServerMissing as missing:
            result["redis"] = str(missing)
    return result
