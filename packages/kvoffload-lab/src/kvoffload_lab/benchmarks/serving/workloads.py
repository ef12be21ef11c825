"""The benchmark's own workloads, generated from a seed: a multi-turn chat and prompts with no reuse.

The chat is shaped like vLLM's multi-turn benchmark and LMCache's multi-round QA: users sharing one
system prompt, each turn's prompt the whole history (system prompt, earlier questions and the
server's answers) plus a new question, a fixed answer length, a bounded number of requests at a time
and optionally a request rate. Before every later turn a flood of unrelated prompts evicts the GPU
prefix cache, as other traffic would, so a later turn's history comes back from an offload tier or
is computed again. The no-reuse workload shares nothing between prompts: offloading can only cost.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from kvoffload_lab.benchmarks.serving.model import text
from kvoffload_lab.benchmarks.serving.stats import Timing

# prompt, max_tokens -> the timed completion
Send = Callable[[str, int], Timing]


@dataclass(frozen=True)
class ChatShape:
    """A multi-turn chat's size; words are the tokenizer's pseudo-words (about 2.5 tokens each)."""

    users: int = 16
    turns: int = 3
    system_words: int = 400
    first_words: int = 40
    later_words: int = 15
    answer_tokens: int = 16
    concurrency: int = 4
    qps: float = 0.0  # requests started per second within a turn; 0: as fast as concurrency allows
    flood_prompts: int = 8
    flood_words: int = 320
    seed: int = 11


@dataclass(frozen=True)
class ChatScript:
    """The chat's text, fixed by its shape: what every server is asked."""

    system: str
    first: tuple[str, ...]
    later: tuple[tuple[str, ...], ...]  # [turn - 1][user]
    floods: tuple[tuple[str, ...], ...]  # [turn - 1][prompt]


def chat_script(shape: ChatShape) -> ChatScript:
    """The chat's text from ``shape.seed``: the same shape gives the same text."""
    rng = random.Random(shape.seed)
    system = text(rng, shape.system_words)
    first = tuple(text(rng, shape.first_words) for _ in range(shape.users))
    later = tuple(tuple(text(rng, shape.later_words) for _ in range(shape.users)) for _ in range(shape.turns - 1))
    floods = tuple(tuple(text(rng, shape.flood_words) for _ in range(shape.flood_prompts))
                   for _ in range(shape.turns - 1))
    return ChatScript(system, first, later, floods)


def chat_prompt(system: str, exchanges: list[tuple[str, str]], question: str) -> str:
    """A turn's prompt: the system prompt, the earlier (question, answer) pairs, the new question."""
    history = "".join(f"\nUser: {asked}\nAssistant:{answered}" for asked, answered in exchanges)
    return f"{system}{history}\nUser: {question}\nAssistant:"


@dataclass
class TurnResult:
    """One turn of the chat: every user's timed answer, in user order, and the turn's wall time."""

    timings: list[Timing]
    seconds: float


def _paced(send: Send, requests: list[tuple[str, int]], concurrency: int, qps: float) -> tuple[list[Timing], float]:
    """Send ``requests`` with at most ``concurrency`` in flight, the i-th not before i / qps."""
    start = time.monotonic()

    def one(index: int) -> Timing:
        if qps > 0:
            time.sleep(max(0.0, start + index / qps - time.monotonic()))
        return send(*requests[index])

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        timings = list(pool.map(one, range(len(requests))))
    return timings, time.monotonic() - start


def run_chat(send: Send, shape: ChatShape) -> list[TurnResult]:
    """The chat, turn by turn (every user's turn before the next turn's flood)."""
    script = chat_script(shape)
    exchanges: list[list[tuple[str, str]]] = [[] for _ in range(shape.users)]
    turns = []
    for turn in range(shape.turns):
        questions = script.first if turn == 0 else script.later[turn - 1]
        if turn:
            _paced(send, [(prompt, 1) for prompt in script.floods[turn - 1]], shape.concurrency, 0.0)
        requests = [(chat_prompt(script.system, exchanges[user], questions[user]), shape.answer_tokens)
                    for user in range(shape.users)]
        timings, seconds = _paced(send, requests, shape.concurrency, shape.qps)
        for user, timing in enumerate(timings):
            exchanges[user].append((questions[user], timing.text))
        turns.append(TurnResult(timings, seconds))
    return turns


@dataclass(frozen=True)
class NoReuseShape:
    """Prompts that share no prefix, not even a first block."""

    prompts: int = 32
    words: int = 200
    answer_tokens: int = 16
    concurrency: int = 4
    seed: int = 23


def no_reuse_prompts(shape: NoReuseShape) -> list[str]:
    """The prompts from ``shape.seed``, each opening with its own number so no two share a block."""
    rng = random.Random(shape.seed)
    return [f"{index}: {text(rng, shape.words)}" for index in range(shape.prompts)]


def run_no_reuse(send: Send, shape: NoReuseShape) -> TurnResult:
    """Every prompt once, ``shape.concurrency`` at a time."""
    requests = [(prompt, shape.answer_tokens) for prompt in no_reuse_prompts(shape)]
    timings, seconds = _paced(send, requests, shape.concurrency, 0.0)
    return TurnResult(timings, seconds)
