"""The serving benchmark's pure parts (packages/kvoffload-lab/src/kvoffload_lab/benchmarks/serving/): percentiles, the
workloads' text and order, /metrics arithmetic, and the JSON it reports, against a fake server."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from kvoffload_lab.benchmarks.serving.configs import SERVERS, connector_config, server_configs, spec_config
from kvoffload_lab.benchmarks.serving.prefix_repetition import PrefixRepetitionShape, bench_command, summarize
from kvoffload_lab.benchmarks.serving.prom import hit_tokens_by_source, metric
from kvoffload_lab.benchmarks.serving.report import Workloads, measure_server, ratios, replay_command
from kvoffload_lab.benchmarks.serving.stats import Timing, percentile, step_time_ms, throughput, ttft_summary
from kvoffload_lab.benchmarks.serving.workloads import (
    ChatShape,
    NoReuseShape,
    chat_script,
    no_reuse_prompts,
    run_chat,
)


def test_percentiles_interpolate_between_ranks_as_numpy_does() -> None:
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    assert percentile([1.0, 2.0, 3.0, 4.0], 90) == pytest.approx(3.7)
    assert percentile([1.0, 2.0, 3.0, 4.0], 100) == 4.0
    assert percentile([7.0], 99) == 7.0
    assert math.isnan(percentile([], 50))
    with pytest.raises(ValueError, match="outside"):
        percentile([1.0], 101)


def _timing(ttft: float, gaps: tuple[float, ...] = (0.01, 0.03), prompt: int = 100) -> Timing:
    return Timing(start=0.0, ttft=ttft, token_gaps=gaps, end=1.0, prompt_tokens=prompt,
                  output_tokens=len(gaps) + 1, cached_tokens=None)


def test_summaries_of_timings() -> None:
    timings = [_timing(0.1), _timing(0.3), _timing(0.2, gaps=(0.02,))]
    assert ttft_summary(timings)["median_ms"] == pytest.approx(200)
    assert step_time_ms(timings) == pytest.approx(20)
    rates = throughput(timings, 2.0)
    assert rates["requests_per_s"] == 1.5
    assert rates["total_tokens_per_s"] == (300 + 3 + 3 + 2) / 2
    with pytest.raises(ValueError):
        throughput(timings, 0.0)


def test_workload_text_is_fixed_by_its_seed() -> None:
    shape = ChatShape(users=3, turns=3, flood_prompts=2)
    assert chat_script(shape) == chat_script(shape)
    assert chat_script(shape) != chat_script(ChatShape(users=3, turns=3, flood_prompts=2, seed=12))
    script = chat_script(shape)
    assert len(script.first) == 3 and len(script.later) == 2 and len(script.floods[1]) == 2
    assert no_reuse_prompts(NoReuseShape(prompts=5)) == no_reuse_prompts(NoReuseShape(prompts=5))
    prompts = no_reuse_prompts(NoReuseShape(prompts=12))
    assert len({prompt.split()[0] for prompt in prompts}) == 12, "two no-reuse prompts open alike"


class FakeSend:
    """Answers every prompt with its length, recording what was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, int]] = []

    def __call__(self, prompt: str, max_tokens: int) -> Timing:
        self.asked.append((prompt, max_tokens))
        ttft = 0.1 if len(self.asked) <= 3 else 0.05
        return Timing(0.0, ttft, (0.01,) * (max_tokens - 1), 1.0, len(prompt), max_tokens, 0, text=f" a{len(prompt)}")


def test_chat_turns_carry_the_history_and_floods_come_between_turns() -> None:
    send = FakeSend()
    shape = ChatShape(users=2, turns=3, flood_prompts=3, answer_tokens=4, concurrency=1)
    turns = run_chat(send, shape)
    assert [len(turn.timings) for turn in turns] == [2, 2, 2]
    kinds = [max_tokens for _, max_tokens in send.asked]
    assert kinds == [4, 4, 1, 1, 1, 4, 4, 1, 1, 1, 4, 4], "a flood of 3 one-token prompts before turns 2 and 3"
    first, second = send.asked[0][0], send.asked[5][0]
    assert second.startswith(first + turns[0].timings[0].text), "turn 2 does not extend turn 1's prompt and answer"
    assert all(prompt.startswith(chat_script(shape).system) for prompt, tokens in send.asked if tokens == 4)


PROM = """# HELP vllm:prompt_tokens_by_source_total x
vllm:prompt_tokens_by_source_total{{engine="0",model_name="m",source="local_cache_hit"}} {gpu}
vllm:prompt_tokens_by_source_total{{engine="0",model_name="m",source="external_kv_transfer"}} {cpu}
vllm:prompt_tokens_by_source_total{{engine="0",model_name="m",source="local_compute"}} {computed}
vllm:kvoffload_tier_loaded_chunks_total{{engine="0",model_name="m",tier="file"}} {file}
"""


def _prom(gpu: int, cpu: int, computed: int, file: int) -> str:
    return PROM.format(gpu=gpu, cpu=cpu, computed=computed, file=file)


def test_prompt_tokens_by_source_are_differences_of_counters() -> None:
    before, after = _prom(10, 0, 5, 0), _prom(74, 96, 30, 2)
    assert metric(after, "vllm:prompt_tokens_by_source_total") == 200
    assert metric(after, "vllm:prompt_tokens_by_source_total", source="external_kv_transfer") == 96
    assert metric(after, "vllm:absent_total") is None
    assert hit_tokens_by_source(before, after, 32) == {"gpu_cache": 64, "offload": 96, "computed": 25,
                                                       "tier_file": 64}


class FakeServer:
    """A server whose /metrics counts up by a fixed step per read."""

    url = "http://fake"

    def __init__(self, offload_per_read: int) -> None:
        self.reads = 0
        self.offload_per_read = offload_per_read

    def metrics(self) -> str:
        self.reads += 1
        return _prom(self.reads * 32, self.reads * self.offload_per_read, self.reads * 10, 0)


class FakeClient:
    def __init__(self, ttft: float) -> None:
        self.ttft = ttft

    def complete(self, prompt: str, max_tokens: int) -> Timing:
        return Timing(0.0, self.ttft, (0.02,) * (max_tokens - 1), 1.0, len(prompt), max_tokens, 0, text=" ok")

    def close(self) -> None:
        pass


def _measure(ttft: float, requests_per_s: float, offload: int) -> dict:
    workloads = Workloads(ChatShape(users=2, turns=2, flood_prompts=1, concurrency=2),
                          lambda url: {"requests_per_s": requests_per_s, "ttft_median_ms": 100.0},
                          NoReuseShape(prompts=2), chunk_tokens=32)
    return measure_server(FakeServer(offload), FakeClient(ttft), workloads)


def test_the_report_has_every_workload_and_the_ratios_to_the_baseline() -> None:
    servers = {"baseline": _measure(0.4, 2.0, 0), "connector": _measure(0.1, 5.0, 64)}
    chat = servers["connector"]["chat"]
    assert len(chat["turns"]) == 2 and chat["reused_turns"]["ttft"]["median_ms"] == pytest.approx(100)
    assert servers["connector"]["no_reuse"]["step_time_ms"] == pytest.approx(20)
    assert servers["connector"]["prefix_repetition"]["prompt_tokens_by_source"]["offload"] == 64
    assert servers["baseline"]["chat"]["prompt_tokens_by_source"]["gpu_cache"] == 32
    result = ratios(servers, "small")
    assert set(result) == {"connector"}
    assert result["connector"]["chat_reused_ttft_median"] == pytest.approx(0.25)
    assert result["connector"]["prefix_repetition_requests_per_s"] == pytest.approx(2.5)
    assert result["connector"]["no_reuse_ttft_median"] == pytest.approx(0.25)
    assert all(result["connector"]["goals"].values())
    slower = {**servers, "connector": _measure(0.3, 5.0, 64)}
    assert list(ratios(slower, "small")["connector"]["goals"].values()) == [False, True]
    # 0.4x: the small model's goal (0.5x) holds, the larger model's (0.3x) does not.
    faster = {**servers, "connector": _measure(0.16, 1.0, 64)}
    assert list(ratios(faster, "small")["connector"]["goals"].values()) == [True, False]
    assert list(ratios(faster, "prefill")["connector"]["goals"].values()) == [False, False]
    json.dumps(servers)  # the report is JSON


def test_server_configs_name_each_integration_and_policy() -> None:
    own_calls = []

    def own(chunks: int, policy: str) -> dict:
        own_calls.append((chunks, policy))
        return {"kv_connector": "OffloadingConnector"}

    found = server_configs(list(SERVERS), 64, own)
    assert found["baseline"] is None
    assert "eviction_policy" not in found["connector"]["kv_connector_extra_config"], "the default policy is named"
    assert found["spec-lru"] == spec_config(64, "lru")
    assert found["connector-lru"] == connector_config(64, "lru")
    assert own_calls == [(64, "lru"), (64, "arc")]
    with pytest.raises(ValueError, match="unknown server"):
        server_configs(["conector"], 64, own)
    with pytest.raises(ValueError, match="own manager"):
        server_configs(["vllm-own-lru"], 64, None)


def test_prefix_repetition_runs_vllm_bench_serve_and_reads_its_result(tmp_path: Path) -> None:
    command = bench_command(PrefixRepetitionShape(prefixes=3), "http://x", tmp_path, tmp_path / "r.json")
    assert command[command.index("--dataset-name") + 1] == "prefix_repetition"
    assert command[command.index("--prefix-repetition-num-prefixes") + 1] == "3"
    result = {"completed": 8, "request_throughput": 2.0, "output_throughput": 30.0, "total_token_throughput": 900.0,
              "duration": 4.0, "median_ttft_ms": 50.0, "p90_ttft_ms": 80.0, "p99_ttft_ms": 90.0, "median_itl_ms": 9.0}
    assert summarize(result)["requests_per_s"] == 2.0
    with pytest.raises(KeyError, match="median_itl_ms"):
        summarize({key: value for key, value in result.items() if key != "median_itl_ms"})


def test_the_plot_is_drawn_from_the_json(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from kvoffload_lab.benchmarks.serving.plot import plot

    servers = {"baseline": _measure(0.4, 2.0, 0), "connector": _measure(0.1, 5.0, 64)}
    report = {"servers": servers, "model": {"size": "small"}, "load_average": {"start": [1, 1, 1], "end": [2, 2, 2]}}
    plot(report, tmp_path / "serve.png")
    assert (tmp_path / "serve.png").stat().st_size > 0


def test_the_recorded_command_names_no_path_of_the_machine_it_ran_on() -> None:
    options = ["--model", "small", "--work-dir", "/tmp/sb/small", "--out=/tmp/sb/small.json", "--plot", "p.png",
               "--servers", "baseline,connector"]
    command = replay_command("scripts/measure/vllm_serve_bench.py", options)
    assert command == "python scripts/measure/vllm_serve_bench.py --model small --servers baseline,connector"
