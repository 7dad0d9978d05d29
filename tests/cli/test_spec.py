"""A thread's fixed settings are checked once: `graph.run` flags and tasks lines agree."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from graph.settings import LIMITS, ThreadSpec

TASK = "How long does shipping take at the demo shop?"
BOUNDARIES = [(key, value, ok) for key, limit in LIMITS.items()
              for value, ok in ((0, False), (1, True), (limit, True), (limit + 1, False))]
"""Each limit at both of its boundaries and one past each."""


def _run_exit(key: str, value: int, db: Path, capsys: pytest.CaptureFixture[str]) -> int:
    from graph.run import main

    code = main(["--thread", "r1", "--task", TASK, "--once", "--db", str(db), "--json",
                 "--" + key.replace("_", "-"), str(value)])
    assert json.loads(capsys.readouterr().out)["exit_code"] == code
    return code


def _batch_exit(key: str, value: int, db: Path, tmp_path: Path,
                capsys: pytest.CaptureFixture[str]) -> int:
    from graph.batch import main

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"thread_id": "b1", "task": TASK, key: value}) + "\n")
    code = main([str(tasks), "--db", str(db), "--once", "--json"])
    assert json.loads(capsys.readouterr().out)["exit_code"] == code
    return code


@pytest.mark.parametrize(("key", "value", "ok"), BOUNDARIES,
                         ids=[f"{k}={v}" for k, v, _ in BOUNDARIES])
def test_run_and_batch_agree_on_every_limit_at_and_past_its_boundary(
        key: str, value: int, ok: bool, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    run_code = _run_exit(key, value, tmp_path / "run.sqlite", capsys)
    batch_code = _batch_exit(key, value, tmp_path / "batch.sqlite", tmp_path, capsys)
    # Accepted: the thread ran its one step (0, or 3 when that spent its only attempt;
    # a batch reports exhausted threads as advanced). Refused: a usage error.
    assert (run_code in (0, 3), batch_code == 0) == (ok, ok), (run_code, batch_code)
    assert ok or run_code == batch_code == 2, (run_code, batch_code)
    assert (tmp_path / "run.sqlite").exists() == ok == (tmp_path / "batch.sqlite").exists()


@pytest.mark.parametrize("key", sorted(LIMITS))
def test_both_sources_give_one_message_naming_the_setting_their_way(key: str) -> None:
    from graph.errors import UsageError

    messages = []
    for source in ("flags", "line"):
        with pytest.raises(UsageError) as info:
            ThreadSpec("t1", **{key: LIMITS[key] + 1}, source=source)  # type: ignore[arg-type]
        messages.append(info.value.message)
    assert messages == [f"--{key.replace('_', '-')} must be at most {LIMITS[key]}",
                        f"{key} must be at most {LIMITS[key]}"]


@pytest.mark.parametrize("data", [{"task": TASK, "max_attempts": True},
                                  {"task": TASK, "max_tokens": 1.5},
                                  {"task": TASK, "context_tokens": "9"},
                                  {"task": TASK, "model": 7}, {"task": None},
                                  {"task": TASK, "colour": "red"}, {"task": TASK, "source": "x"}])
def test_a_line_with_a_wrong_type_or_field_is_a_usage_error(data: dict) -> None:
    from graph.errors import UsageError

    with pytest.raises(UsageError) as info:
        ThreadSpec.from_line({"thread_id": "t1", **data}, live=False)
    assert info.value.error_code == "usage" and int(info.value.exit_code) == 2


def test_stored_settings_are_compared_as_given(tmp_path: Path) -> None:
    from graph.errors import RefusedError

    stored = {"task": TASK, "model": "offline-demo", "max_attempts": 4, "max_tokens": None,
              "context_tokens": 16_000, "workspace": str(tmp_path.resolve()),
              "allow_writes": None}
    ThreadSpec("t1", max_attempts=4, workspace=str(tmp_path)).check_against(stored, None)
    for given in ({"max_attempts": 5}, {"max_tokens": 10}, {"task": "other"},
                  {"model": "m2"}):
        with pytest.raises(RefusedError) as info:
            ThreadSpec("t1", **given).check_against(stored, None)  # type: ignore[arg-type]
        assert (info.value.error_code, info.value.thread_id) == ("identity_mismatch", "t1")
    with pytest.raises(RefusedError):
        ThreadSpec("t1").check_against(stored, env_model="m2")


def test_readme_documents_the_limits_that_are_enforced() -> None:
    from tests.conftest import ROOT

    readme = (ROOT / "README.md").read_text()
    for limit in LIMITS.values():
        assert f"{limit:,}" in readme, limit
