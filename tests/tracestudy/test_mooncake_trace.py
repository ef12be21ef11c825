"""Reading Mooncake traces: valid lines, every kind of malformed line, strict vs lenient, empty."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvoffload_lab.cli import main
from kvoffload_lab.tracestudy.mooncake import ChainKeys, TraceError, block_chains, read_trace


def _line(timestamp: float = 0, input_length: int = 1024, output_length: int = 10, hash_ids: object = None) -> str:
    if hash_ids is None:
        hash_ids = list(range(-(-input_length // 512)))
    return json.dumps(
        {"timestamp": timestamp, "input_length": input_length, "output_length": output_length, "hash_ids": hash_ids}
    )


def _write(tmp_path: Path, lines: list[str], name: str = "trace.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


MALFORMED = {
    "bad JSON": ('{"timestamp": 0, "input_length":', "invalid JSON"),
    "not an object": ("[1, 2, 3]", "expected a JSON object"),
    "missing field": ('{"timestamp": 0, "input_length": 10, "output_length": 1}', "missing field(s): hash_ids"),
    "negative input": (_line(input_length=-5, hash_ids=[]), "negative input_length -5"),
    "negative output": (_line(output_length=-1), "negative output_length -1"),
    "negative timestamp": (_line(timestamp=-3), "negative timestamp"),
    "float length": (_line(input_length=1.5, hash_ids=[1]), "input_length must be an integer"),  # type: ignore[arg-type]
    "short hash ids": (_line(input_length=1025, hash_ids=[1, 2]), "needs ceil(1025/512) = 3"),
    "hash ids not ints": (_line(input_length=10, hash_ids=["a"]), "hash_ids must be a list of integers"),
}


def test_valid_trace_is_sorted_stably_by_timestamp(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        [_line(5, hash_ids=[1, 2]), "", _line(1, hash_ids=[3, 4]), _line(5, hash_ids=[5, 6]), _line(0, 600)],
    )
    trace = read_trace(path)
    assert [r.line for r in trace.requests] == [5, 3, 1, 4]  # blank line 2 ignored; ties keep file order
    assert trace.skipped_lines == 0
    first = trace.requests[0]
    assert first.input_length == 600 and first.full_blocks() == 1 and first.hash_ids == (0, 1)


def test_limit_keeps_the_first_usable_requests(tmp_path: Path) -> None:
    path = _write(tmp_path, ["oops", *[_line(i) for i in range(5)]])
    trace = read_trace(path, limit=2)
    assert [r.line for r in trace.requests] == [2, 3]
    assert trace.skipped_lines == 1


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_each_malformed_line_is_reported_with_its_line_number(tmp_path: Path, kind: str) -> None:
    text, expected = MALFORMED[kind]
    path = _write(tmp_path, [_line(0), _line(1), text, _line(2)])
    lenient = read_trace(path)
    assert len(lenient.requests) == 3
    assert lenient.skipped_lines == 1
    assert lenient.skipped[0].startswith(f"{path}:3: ")
    assert expected in lenient.skipped[0]
    with pytest.raises(TraceError) as caught:
        read_trace(path, strict=True)
    assert str(caught.value).startswith(f"{path}:3: ")
    assert expected in str(caught.value)


def test_empty_or_all_bad_or_missing_trace_is_an_error(tmp_path: Path) -> None:
    empty = _write(tmp_path, [""], "empty.jsonl")
    with pytest.raises(TraceError, match="no usable request: it has no request"):
        read_trace(empty)
    bad = _write(tmp_path, ["x", "{}"], "bad.jsonl")
    with pytest.raises(TraceError, match="all 2 line"):
        read_trace(bad)
    with pytest.raises(TraceError, match="no such file"):
        read_trace(tmp_path / "absent.jsonl")


def test_chain_keys_identify_prefixes() -> None:
    keys = ChainKeys()
    a = keys.chain([7, 8, 9], 3)
    b = keys.chain([7, 8, 10, 11], 4)
    c = keys.chain([8, 7], 2)
    assert a[:2] == b[:2] and a[2] != b[2]
    # The same id at the same position under another prefix is another block.
    assert c[0] != a[1] and c[1] != a[0]
    assert len(set(a + b + c)) == 7
    assert keys.chain([7, 8, 9], 2) == a[:2]


def test_block_chains_count_full_blocks_only(tmp_path: Path) -> None:
    path = _write(tmp_path, [_line(0, 1024, hash_ids=[1, 2]), _line(1, 1500, hash_ids=[1, 2, 3])])
    chains = block_chains(read_trace(path).requests)
    assert [len(c) for c in chains] == [2, 2]
    assert chains[0] == chains[1]


def test_cli_strict_lenient_empty_and_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, [_line(0), "{broken", _line(1)])
    assert main(["replay", str(path), "--strict", "--json", "--gpu-blocks", "8", "--cpu-blocks", "8"]) == 2
    err = capsys.readouterr().err
    assert f"{path}:2: invalid JSON" in err and len(err.strip().splitlines()) == 1
    assert main(["replay", str(path), "--json", "--gpu-blocks", "8", "--cpu-blocks", "8"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["skipped_lines"] == 1
    assert f"{path}:2: invalid JSON" in captured.err
    empty = _write(tmp_path, [], "empty.jsonl")
    assert main(["replay", str(empty)]) == 2
    assert "no usable request" in capsys.readouterr().err
    assert main(["replay", str(tmp_path / "nope.jsonl")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("no such file") and len(err.splitlines()) == 1
