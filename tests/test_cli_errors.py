"""Every command answers bad input with one error line naming what was wrong, and exit status 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["tla", "check", "missing.tla"], "kvoffload tla: error: missing.tla: no such spec file"),
        (["trace", "check", "missing.ndjson"], "kvoffload trace: error: missing.ndjson: no such file"),
        (["replay", "missing.jsonl"], "kvoffload replay: error: missing.jsonl: no such file"),
        (["explore", "--mutant", "nope"], "kvoffload explore: error: unknown mutant 'nope'"),
        (["simulate", "--mutant", "nope"], "kvoffload simulate: error: --mutant 'nope' is unknown; known: abort_"),
        (["simulate", "--policy", "nope"], "kvoffload simulate: error: --policy 'nope' is unknown"),
        (["simulate", "--blocks-per-chunk", "0"], "kvoffload simulate: error: --blocks-per-chunk must be >= 1"),
        (["bench", "mover", "--block-sizes", "4095"], "kvoffload bench: error: --block-sizes 4095: a block must"),
    ],
)
def test_bad_input_is_one_clear_line(args: list[str], message: str) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "kvoffload_lab.cli", *args], capture_output=True, text=True, check=False
    )
    assert completed.returncode == 2
    assert completed.stderr.startswith(message), completed.stderr
    assert "Traceback" not in completed.stderr
    assert len(completed.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(("module", "extra"), [("xxhash", "kvoffload[tiers]"),
                                                ("redis.connection", "kvoffload[tiers]"),
                                                ("matplotlib", "kvoffload-lab[plot]")])
def test_a_missing_extra_is_one_line_naming_it_and_exit_2(
    module: str, extra: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from kvoffload_lab import cli
    from kvoffload_lab.commands import simulate

    def needs_it(args: object) -> int:
        raise ModuleNotFoundError(f"No module named {module!r}", name=module)

    monkeypatch.setattr(simulate, "run", needs_it)
    assert cli.main(["simulate", "--tiers", "cpu,file"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"pip install '{extra}'" in err[0] and repr(module) in err[0]


def test_a_missing_module_of_no_extra_still_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    from kvoffload_lab import cli
    from kvoffload_lab.commands import simulate

    def broken(args: object) -> int:
        raise ModuleNotFoundError("No module named 'kvoffload.gone'", name="kvoffload.gone")

    monkeypatch.setattr(simulate, "run", broken)
    with pytest.raises(ModuleNotFoundError):
        cli.main(["simulate"])


@pytest.mark.parametrize(
    ("module", "extra", "args"),
    [
        ("xxhash", "kvoffload[tiers]", ["simulate", "--tiers", "cpu,file", "--users", "1", "--turns", "1", "--json"]),
        ("matplotlib", "kvoffload-lab[plot]", ["replay", "tiny.jsonl", "--sweep", "--cpu-sizes", "4,8",
                                               "--policies", "lru", "--gpu-blocks", "4", "--plot", "sweep.png"]),
    ],
)
def test_the_real_command_without_an_extras_module_names_the_extra(
    module: str, extra: str, args: list[str], tmp_path: Path
) -> None:
    # The module is made missing as an install without the extra has it (None in sys.modules makes
    # its import fail), in a fresh process, and the command runs its real code up to that import.
    lines = [{"timestamp": 1000 * i, "input_length": 1024, "output_length": 8, "hash_ids": [i % 3, 7]}
             for i in range(6)]
    (tmp_path / "tiny.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    program = (f"import sys; sys.modules[{module!r}] = None; from kvoffload_lab.cli import main; "
               f"sys.exit(main({args!r}))")
    completed = subprocess.run([sys.executable, "-c", program], cwd=tmp_path, capture_output=True, text=True,
                               check=False)
    assert completed.returncode == 2, completed.stderr
    err = completed.stderr.strip().splitlines()
    assert len(err) == 1 and f"pip install '{extra}'" in err[0] and repr(module) in err[0], err
    assert not (tmp_path / "sweep.png").exists()
