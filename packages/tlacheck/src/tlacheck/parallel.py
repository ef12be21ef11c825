"""Successor generation in worker processes, for a search whose counts equal the sequential one.

A :class:`Pool` forks its worker processes once, when the search first has enough queued states;
they inherit the compiled model, the stored states and the fingerprint table, and each later job
sends a worker only the states stored since its previous job. The checker keeps each worker up to
:data:`DEPTH` runs of queued states ahead (:meth:`Pool.submit`) and expands the states between
the runs itself. A worker expands each state of its run and sends back, per state and in
generation order, one small record per successor and then the state's fairness results, so that
the checker processes them exactly as it would have generated them itself: same order, same
counters, same first violation.

Successors stored before the job was sent come back as their index only (``KNOWN``, after
checking the implied actions on the step). An out-of-model successor whose invariants hold is only
counted (``OUTSIDE``). Every other successor comes back whole (``FULL``) with its fingerprint key
the first time it appears in the job, and as the ordinal of that first ``FULL`` record after
(``AGAIN``, after checking the implied actions on the step; on KVOffload.cfg, 60% of the ``FULL``
records repeated an earlier one of their job). The checker runs its usual per-successor logic on
each ``FULL`` record. The worker does not evaluate the invariants of the successors it sends
whole: measured on KVOffload.cfg, that cost the worker about twice what it saved the checker.

A failure while generating (an evaluation error, a successor that leaves a variable unassigned)
is recorded after the successors generated before it and re-raised at the same point. States
travel encoded (:class:`Values`): each value of a variable as its number, and only the values the
other side has not numbered yet as themselves, so that little is pickled.
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import queue
import signal
import struct
import threading
import time
from collections.abc import Callable, Sequence
from typing import IO, Any

from tlacheck.result import EXIT_ERROR_SYSTEM

from .monitor import Halt
from .steps import StepOutcomes
from .syntax import EMPTY, UNSET, Ctx, Gen
from .values import Value

State = tuple[Value, ...]
# Per state: records (KNOWN, label, index, suffix_ok), (OUTSIDE, label), (FULL, label, codes, raws,
# key) (the successor as Values.split gives it), (AGAIN, label, ordinal of the job's
# FULL record of the same successor, suffix_ok), then optionally (UNASSIGNED, label, variable index)
# or (FAILED, exception), or else (FAIR, the checker's fair_steps of the state, with the records'
# positions as targets).
Successors = list[tuple[Any, ...]]
KNOWN, OUTSIDE, FULL, UNASSIGNED, FAILED, FAIR, AGAIN = 0, 1, 2, 3, 4, 5, 6
# How many jobs a worker holds at once (see Worker).
DEPTH = 2
# How much one run's waits move the checker's share of the states (see Pool), in percent points.
SHARE_STEP = 5
# Waits shorter than this (seconds) do not count.
_NOTICEABLE = 0.001


class Values:
    """Per variable, its distinct values in the order they were numbered. The checker numbers
    them; a worker learns the numbers with each job (``Values.extend``)."""

    def __init__(self, nv: int) -> None:
        self.ids: list[dict[Value, int]] = [{} for _ in range(nv)]
        self.values: list[list[Value]] = [[] for _ in range(nv)]

    def encode(self, t: State) -> tuple[int, ...]:
        """``t`` as the numbers of its values, numbering the new ones (the checker's side)."""
        out = []
        for x, ids, values in zip(t, self.ids, self.values, strict=True):
            k = ids.get(x)
            if k is None:
                k = ids[x] = len(values)
                values.append(x)
            out.append(k)
        return tuple(out)

    def extend(self, new: list[list[Value]]) -> None:
        """Learn the values the checker numbered since the last job (a worker's side)."""
        for fresh, ids, values in zip(new, self.ids, self.values, strict=True):
            for x in fresh:
                ids[x] = len(values)
                values.append(x)

    def decode(self, codes: tuple[int, ...]) -> State:
        return tuple([values[k] for k, values in zip(codes, self.values, strict=True)])

    def split(self, t: State) -> tuple[tuple[int, ...], tuple[Value, ...]]:
        """A successor for the record: the numbers of its known values (-1 for the others), and
        the other values themselves."""
        codes = tuple([ids.get(x, -1) for x, ids in zip(t, self.ids, strict=True)])
        if -1 not in codes:
            return codes, ()
        return codes, tuple([x for x, k in zip(t, codes, strict=True) if k < 0])

    def join(self, codes: tuple[int, ...], raws: tuple[Value, ...]) -> State:
        """The successor that :meth:`split` gave (known values are the checker's own objects)."""
        if not raws:
            return self.decode(codes)
        rest = iter(raws)
        return tuple([values[k] if k >= 0 else next(rest) for k, values in zip(codes, self.values, strict=True)])


class Expansion:
    """What a child needs to expand states like the checker (the checker's own tables)."""

    def __init__(
        self, nxt: Gen, states: list[State], seen: dict[Any, int], nv: int,
        key: Callable[[State], Any] | None, in_model: Callable[[State, Ctx], bool] | None,
        invariants_hold: Callable[[State], bool], implied: StepOutcomes[str | None] | None,
        suffix: StepOutcomes[bool] | None, memos: list[list[Any]],
        fair_steps: Callable[[State, dict[Any, int]], list[Any]] | None,
    ) -> None:
        self.nxt, self.states, self.seen, self.nv = nxt, states, seen, nv
        self.key, self.in_model, self.invariants_hold = key, in_model, invariants_hold
        self.implied, self.suffix = implied, suffix
        # The successor memos of the fairness actions (emptied by fair_steps after each state).
        self.memos = memos
        self.fair_steps = fair_steps
        self.values = Values(nv)

    def expand(self, ids: Sequence[int]) -> list[Successors]:
        out: list[Successors] = []
        nv, nxt, seen, key, in_model = self.nv, self.nxt, self.seen, self.key, self.in_model
        implied, suffix, holds = self.implied, self.suffix, self.invariants_hold
        unset_id = id(UNSET)
        fair_steps = self.fair_steps
        split = self.values.split
        # Each successor stored by none of the checker's states this worker holds, by key, and the
        # ordinal of its first FULL record in this job. Only without constraints: the checker then
        # stores every such successor (or stops on it).
        firsts: dict[Any, int] | None = {} if in_model is None else None
        fulls = 0  # the FULL records of this job so far
        for i in ids:
            s = self.states[i]
            c = Ctx(s, [UNSET] * nv)
            found: Successors = []
            position: dict[State, int] = {}  # each successor's first position among the records
            try:
                for lab in nxt(c, EMPTY):
                    n = c.n
                    assert n is not None
                    t = tuple(n)
                    if fair_steps is not None:
                        position.setdefault(t, len(found))
                    if unset_id in map(id, t):
                        found.append((UNASSIGNED, lab, next(k for k, v in enumerate(t) if v is UNSET)))
                        break
                    try:
                        steps_ok = implied is None or implied.of(s, c, t) is None
                        if in_model is not None and not in_model(t, c):
                            if steps_ok and holds(t):
                                found.append((OUTSIDE, lab))
                                continue
                            record = (FULL, lab, *split(t), None)
                        else:
                            k = key(t) if key is not None else t
                            j = seen.get(k, -1)
                            if steps_ok and (j >= 0 or (firsts is not None and k in firsts)):
                                on_suffix = suffix is not None and suffix.of(s, c, t)
                                found.append((KNOWN, lab, j, on_suffix) if j >= 0
                                             else (AGAIN, lab, firsts[k], on_suffix))  # type: ignore[index]
                                continue
                            if j < 0 and firsts is not None:
                                firsts.setdefault(k, fulls)
                            record = (FULL, lab, *split(t), k if key is not None else None)
                    except Exception:
                        # The checker evaluates this successor again and reports the error in order.
                        record = (FULL, lab, *split(t), None)
                    found.append(record)
                    fulls += 1
                if fair_steps is not None and (not found or found[-1][0] != UNASSIGNED):
                    found.append((FAIR, fair_steps(s, position)))
            except Exception as exc:  # re-raised by replay() in the checker, at this state
                found.append((FAILED, exc))
            out.append(found)
        return out

    def serve(self, jobs: IO[bytes], results: IO[bytes]) -> None:
        """The worker's loop: store the states a job brings, expand its run, send the records."""
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the checker's to handle
        for box in self.memos:
            box[0].clear()
        first = True
        while True:
            job, idle = _receive_waiting(jobs)
            if job is None:
                return
            if first:  # the worker's start is not a wait on the checker
                idle, first = 0.0, False
            new_values, codes, keys, start, end = job
            self.values.extend(new_values)
            states = [self.values.decode(k) for k in codes]
            base = len(self.states)
            self.states.extend(states)
            for k, key in enumerate(keys if keys is not None else states):
                self.seen[key] = base + k
            _send(results, (idle, self.expand(range(start, end))))
            gc.freeze()  # like the checker's SearchHeap: later collections skip what this job stored


def _send(pipe: IO[bytes], obj: Any) -> None:
    _write(pipe, pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


def _write(pipe: IO[bytes], data: bytes) -> None:
    pipe.write(struct.pack("<Q", len(data)))
    pipe.write(data)
    pipe.flush()


def _receive_waiting(pipe: IO[bytes]) -> tuple[Any, float]:
    """The next object on the pipe (None when the other side closed it), and how long the read
    waited for it to start arriving."""
    asked = time.perf_counter()
    pipe.peek(1)  # type: ignore[attr-defined]  # blocks until the message starts arriving
    return _receive(pipe), time.perf_counter() - asked


def _receive(pipe: IO[bytes]) -> Any:
    """The next object on the pipe, or None when the other side closed it."""
    head = pipe.read(8)
    if len(head) < 8:
        return None
    (size,) = struct.unpack("<Q", head)
    data = pipe.read(size)
    if len(data) < size:
        return None
    return pickle.loads(data)


def _died(pid: int) -> Halt:
    return Halt(f"worker process {pid} stopped without sending its results (killed, or out of memory?); "
                "the check is incomplete (rerun with --workers 1)", EXIT_ERROR_SYSTEM)


class Worker:
    """One forked worker process, its two pipes, and the thread that writes its jobs.

    A worker holds up to :data:`DEPTH` jobs, so that it expands the next run while the checker
    replays the previous one. The jobs are written by a thread: the checker writing a job while
    the worker writes the results of the previous one would otherwise block both once the two
    messages outgrow the pipes' buffers.
    """

    def __init__(self, expansion: Expansion, others: list[Worker]) -> None:
        job_read, job_write = os.pipe()
        result_read, result_write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the worker: serve jobs, then exit without running the parent's cleanup
            os.close(job_write)
            os.close(result_read)
            for other in others:  # else another worker would never read EOF on its jobs pipe
                os.close(other.jobs.fileno())
                os.close(other.results.fileno())
            try:
                with os.fdopen(job_read, "rb") as jobs, os.fdopen(result_write, "wb") as results:
                    expansion.serve(jobs, results)
            finally:
                os._exit(0)
        os.close(job_read)
        os.close(result_write)
        self.pid = pid
        self.jobs = os.fdopen(job_write, "wb")
        self.results = os.fdopen(result_read, "rb")
        self.synced = len(expansion.states)  # the states this worker holds
        self.known = [len(values) for values in expansion.values.values]  # the values it has numbered
        self.outstanding = 0  # jobs sent whose results the checker has not taken yet
        self.pending: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self.writer = threading.Thread(target=self.write_jobs, name=f"tla-jobs-{pid}", daemon=True)
        self.writer.start()

    def write_jobs(self) -> None:
        """The writer thread: send each pickled job, until None."""
        while (data := self.pending.get()) is not None:
            try:
                _write(self.jobs, data)
            except OSError:  # the worker died: the checker finds out when it reads the results
                return

    def stop(self) -> None:
        """Close the pipes (an idle worker reads EOF, a busy one fails to write) and reap it.
        The results pipe first: a worker blocked writing results the search no longer reads then
        exits, so the writer thread, maybe blocked writing it a job, finishes too."""
        with contextlib.suppress(OSError):
            self.results.close()
        self.pending.put(None)
        self.writer.join()
        with contextlib.suppress(OSError):  # a worker that died: nothing left to flush to
            self.jobs.close()
        os.waitpid(self.pid, 0)


class Batch:
    """The successor records of the states ``start .. end-1``, expanded by one worker and read
    when the checker first needs them."""

    def __init__(self, start: int, end: int, worker: Worker, pool: Pool) -> None:
        self.start, self.end, self.worker, self.pool = start, end, worker, pool
        self.records: list[Successors] | None = None
        # Per FULL record replayed so far, the index the checker stored its successor at (AGAIN).
        self.stored: list[int] = []

    def take(self, i: int) -> Successors:
        """The records of state ``i`` (waiting for the worker the first time)."""
        if self.records is None:
            sent, waited = _receive_waiting(self.worker.results)
            if sent is None:
                raise _died(self.worker.pid)
            idle, self.records = sent
            self.pool.balance(waited, idle)
        if i == self.end - 1:
            self.worker.outstanding -= 1
        return self.records[i - self.start]


class Pool:
    """``workers`` worker processes, started on the first :meth:`submit`.

    ``share`` is how many states the checker expands itself before each run it hands out, in
    percent of the run's length. Each run's results adjust it by :data:`SHARE_STEP`: up when the
    checker waited for them longer than the worker waited for the run, else down, so that neither
    process waits for the other for long whatever the relative cost of expanding and replaying.
    """

    def __init__(self, expansion: Expansion, workers: int, keys: list[Any] | None, share: int) -> None:
        self.expansion, self.size, self.keys, self.share = expansion, workers, keys, share
        self.workers: list[Worker] = []
        self.codes: list[tuple[int, ...]] = []  # each stored state, encoded (Values.encode)

    def idle(self) -> Worker | None:
        """The worker with the fewest outstanding jobs, if it can take one more."""
        if not self.workers:
            for _ in range(self.size):
                self.workers.append(Worker(self.expansion, list(self.workers)))
        worker = min(self.workers, key=lambda w: w.outstanding)
        return worker if worker.outstanding < DEPTH else None

    def submit(self, worker: Worker, start: int, end: int) -> Batch:
        """Have ``worker`` expand the states ``start .. end-1``."""
        states, values = self.expansion.states, self.expansion.values
        while len(self.codes) < len(states):
            self.codes.append(values.encode(states[len(self.codes)]))
        codes = self.codes[worker.synced:]
        keys = self.keys[worker.synced:] if self.keys is not None else None
        new_values = [vals[known:] for vals, known in zip(values.values, worker.known, strict=True)]
        worker.pending.put(pickle.dumps((new_values, codes, keys, start, end), protocol=pickle.HIGHEST_PROTOCOL))
        worker.synced = len(states)
        worker.known = [len(vals) for vals in values.values]
        worker.outstanding += 1
        return Batch(start, end, worker, self)

    def balance(self, waited: float, idle: float) -> None:
        """Adjust ``share`` after the checker waited ``waited`` seconds for a run's records, whose
        worker had waited ``idle`` seconds for the run."""
        if waited > idle + _NOTICEABLE:
            self.share += SHARE_STEP
        elif idle > waited + _NOTICEABLE:
            self.share = max(0, self.share - SHARE_STEP)

    def close(self) -> None:
        for worker in self.workers:
            worker.stop()
        self.workers = []
