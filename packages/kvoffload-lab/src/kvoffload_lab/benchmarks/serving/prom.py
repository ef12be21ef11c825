"""Reading a server's ``/metrics`` (Prometheus text): sums of samples by name and labels."""

from __future__ import annotations

import re

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def metric(text: str, name: str, **labels: str) -> float | None:
    """The sum of ``name``'s samples in a /metrics text whose labels include ``labels`` (None
    when the metric has no such sample)."""
    total = None
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is None or match.group(1) != name:
            continue
        found = dict(_LABEL.findall(match.group(2) or ""))
        if all(found.get(key) == value for key, value in labels.items()):
            total = (total or 0.0) + float(match.group(3))
    return total


def label_values(text: str, name: str, label: str) -> list[str]:
    """The values ``label`` takes in ``name``'s samples, sorted."""
    values = set()
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is not None and match.group(1) == name:
            found = dict(_LABEL.findall(match.group(2) or ""))
            if label in found:
                values.add(found[label])
    return sorted(values)


def hit_tokens_by_source(before: str, after: str, chunk_tokens: int) -> dict[str, float]:
    """Prompt tokens between two /metrics texts by where they came from: vLLM's GPU prefix cache,
    the connector (kvoffload's CPU tier, or vLLM's own), computed, and of the connector's, those
    each secondary tier (file, redis) supplied (its promoted chunks a load used, times
    ``chunk_tokens``)."""

    def delta(name: str, **labels: str) -> float:
        return (metric(after, name, **labels) or 0.0) - (metric(before, name, **labels) or 0.0)

    sources = {
        "gpu_cache": delta("vllm:prompt_tokens_by_source_total", source="local_cache_hit"),
        "offload": delta("vllm:prompt_tokens_by_source_total", source="external_kv_transfer"),
        "computed": delta("vllm:prompt_tokens_by_source_total", source="local_compute"),
    }
    for tier in label_values(after, "vllm:kvoffload_tier_loaded_chunks_total", "tier"):
        sources[f"tier_{tier}"] = delta("vllm:kvoffload_tier_loaded_chunks_total", tier=tier) * chunk_tokens
    return sources
