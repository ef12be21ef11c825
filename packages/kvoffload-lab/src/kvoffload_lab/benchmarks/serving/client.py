"""One streamed ``/v1/completions`` request, timed from the client."""

from __future__ import annotations

import itertools
import json
import time
from typing import Any

from kvoffload_lab.benchmarks.serving.server import MODEL_NAME
from kvoffload_lab.benchmarks.serving.stats import Timing

REQUEST_TIMEOUT_S = 600.0


class CompletionClient:
    """Streams completions from one server; times are seconds since this client was made."""

    def __init__(self, url: str) -> None:
        import httpx

        self._http = httpx.Client(base_url=url, timeout=REQUEST_TIMEOUT_S)
        self.origin = time.monotonic()

    def close(self) -> None:
        self._http.close()

    def complete(self, prompt: str, max_tokens: int) -> Timing:
        """Greedy, exactly ``max_tokens`` tokens, streamed: the time to the first token and the
        gaps between the next ones."""
        body = {
            "model": MODEL_NAME, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0, "seed": 0,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True},
        }
        start = time.monotonic()
        token_times: list[float] = []
        usage: dict[str, Any] = {}
        text = []
        with self._http.stream("POST", "/v1/completions", json=body) as response:
            if response.status_code != 200:
                raise RuntimeError(f"/v1/completions: HTTP {response.status_code}: {response.read()[:500]!r}")
            for line in response.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[len("data: "):])
                if chunk.get("choices"):
                    token_times.append(time.monotonic())
                    text.append(chunk["choices"][0].get("text") or "")
                usage = chunk.get("usage") or usage
        if not token_times:
            raise RuntimeError("/v1/completions streamed no token")
        details = usage.get("prompt_tokens_details") or {}
        return Timing(
            start=start - self.origin, ttft=token_times[0] - start,
            token_gaps=tuple(b - a for a, b in itertools.pairwise(token_times)),
            end=token_times[-1] - self.origin, prompt_tokens=int(usage.get("prompt_tokens", 0)),
            output_tokens=int(usage.get("completion_tokens", len(token_times))),
            cached_tokens=details.get("cached_tokens"), text="".join(text),
        )
