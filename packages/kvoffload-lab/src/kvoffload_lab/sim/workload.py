"""A seeded multi-turn chat workload: each user's next turn extends its previous prompt and answer.

That is the traffic offloading exists for: by the time a user's next turn arrives, the GPU prefix
cache has usually evicted the conversation, and the CPU tier serves it instead of recomputing.
The users share a system prompt (or one of ``system_prompts``, in turn), so concurrent requests also
share a prefix; with ``arrival_spread_steps=0`` every first turn arrives in the same step, so requests
admitted together hit the shared prefix blocks that the first of them computes in that very step.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from kvoffload_lab.sim.engine import Engine
from kvoffload_lab.sim.request import SimRequest


@dataclass(frozen=True)
class WorkloadConfig:
    users: int = 24
    turns: int = 4
    system_prompt_tokens: int = 64
    message_tokens: tuple[int, int] = (24, 96)
    output_tokens: tuple[int, int] = (8, 48)
    think_steps: tuple[int, int] = (5, 40)
    arrival_spread_steps: int = 60
    # User i shares system prompt i % system_prompts with the others: with several, one group's
    # prefix can be evicted from the GPU while another group runs, and is then loaded from CPU.
    system_prompts: int = 1
    seed: int = 0


@dataclass
class _User:
    history: list[int] = field(default_factory=list)
    turns_left: int = 0
    due_step: int = 0
    active: str | None = None


class MultiTurnWorkload:
    """Feeds an :class:`Engine` step by step; ``done`` once every user finished every turn."""

    def __init__(self, config: WorkloadConfig) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        systems = [
            [self.rng.randrange(1, 32000) for _ in range(config.system_prompt_tokens)]
            for _ in range(config.system_prompts)
        ]
        spread = config.arrival_spread_steps
        self.users = [
            _User(list(systems[i % config.system_prompts]), config.turns, self.rng.randrange(spread + 1))
            for i in range(config.users)
        ]
        self._by_request: dict[str, _User] = {}
        self._step = 0
        self.truncated_conversations = 0

    @property
    def done(self) -> bool:
        return all(u.turns_left == 0 and u.active is None for u in self.users)

    @property
    def total_turns(self) -> int:
        return self.config.users * self.config.turns

    def attach(self, engine: Engine) -> None:
        engine.on_finished.append(self._finished)

    def tick(self, engine: Engine) -> None:
        """Add the turns that are due at this step."""
        self._step += 1
        low, high = self.config.message_tokens
        for user in self.users:
            if user.active is None and user.turns_left and user.due_step <= self._step:
                user.history += [self.rng.randrange(1, 32000) for _ in range(self.rng.randint(low, high))]
                max_tokens = self.rng.randint(*self.config.output_tokens)
                if len(user.history) + max_tokens > engine.max_model_tokens:
                    # The conversation outgrew the context: the user stops, as a chat UI would.
                    user.turns_left = 0
                    self.truncated_conversations += 1
                    continue
                request = engine.add_request(user.history, max_tokens)
                user.active = request.request_id
                user.turns_left -= 1
                self._by_request[request.request_id] = user

    def _finished(self, request: SimRequest, aborted: bool) -> None:
        user = self._by_request.pop(request.request_id, None)
        if user is None:
            return
        # An aborted turn keeps what was generated: the user re-asks from there next turn.
        user.history = list(request.prompt) + list(request.output)
        user.active = None
        user.due_step = self._step + self.rng.randint(*self.config.think_steps)
