"""End to end through a real OpenAI-compatible gateway: LiteLLM's proxy, offline.

The proxy answers from `mock_response` (and `mock_tool_calls`), so no provider is asked
anything; our CLI talks to it over HTTP on 127.0.0.1 as it would to any gateway. This is
what the servers really send (ids, `finish_reason`, the errors of a gateway without a
database), where the fixtures of `tests/fixtures/providers/` are what public reports say.

Opt-in (`GRAPH_TEST_LITELLM=1`, marker `litellm`): the proxy lives in its own virtual
environment, installed once from `tests/fixtures/providers/litellm-requirements.txt`
(an exact, hash-checked LiteLLM pin) into `$XDG_CACHE_HOME/mandapi-resume/` (else
`~/.cache/...`), keyed by that file's hash and the Python running the tests. Installing
116 wheels (750 MB) took 40 to 95 s here from a cold cache, depending on the machine's load:
too long for every CI run. Starting the proxy takes 10 to 20 s more. pip's
install is the only network use: LiteLLM reads its bundled model cost map
(`LITELLM_LOCAL_MODEL_COST_MAP`), and every other outbound request of the proxy goes
to a dead proxy address.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from graph.run import main
from tests.conftest import stop_process_group

REQUIREMENTS = Path(__file__).resolve().parents[1] / "fixtures" / "providers" / "litellm-requirements.txt"
OPT_IN = "GRAPH_TEST_LITELLM"
TASK = "How long does shipping take at the demo shop?"
MASTER_KEY = "sk-gateway-test-master-key-0123"
ANSWER = "Shipping takes 3 days [ship-01]."
TOOL_CALL = {"type": "function", "function": {"name": "get_reference", "arguments": '{"ref_id": "ship-01"}'}}
MODELS = {
    "mock-answer": {"mock_response": ANSWER},
    # Real replies: finish_reason "stop" with tool calls and content "", and the same id
    # in every reply (or an empty one), as LiteLLM's mock sends them.
    "mock-tool-call": {"mock_response": "", "mock_tool_calls": [{"id": "call_gw_1", **TOOL_CALL}]},
    "mock-empty-id": {"mock_response": "", "mock_tool_calls": [{"id": "", **TOOL_CALL}]},
}

pytestmark = [
    pytest.mark.litellm,
    pytest.mark.skipif(os.environ.get(OPT_IN) != "1",
                       reason=f"LiteLLM gateway tests are opt-in: {OPT_IN}=1 (installs litellm[proxy], "
                              "see README 'Through a gateway')"),
]


def _proxy_venv() -> Path:
    """The proxy's virtual environment, installed once per requirements file (under a lock)."""
    digest = hashlib.sha256(REQUIREMENTS.read_bytes() + sys.executable.encode()
                            + sys.version.encode()).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mandapi-resume"
    cache.mkdir(parents=True, exist_ok=True)
    venv = cache / f"litellm-proxy-{digest}"
    complete = venv / "installed-from.txt"
    with open(cache / "litellm-proxy.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if complete.exists():
            return venv
        shutil.rmtree(venv, ignore_errors=True)  # a half-made one from an interrupted install
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        install = subprocess.run(
            [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
             "--require-hashes", "--no-deps", "--only-binary", ":all:", "-r", str(REQUIREMENTS)],
            capture_output=True, text=True)
        if install.returncode != 0:
            shutil.rmtree(venv, ignore_errors=True)
            pytest.fail(f"installing litellm[proxy] failed:\n{install.stderr[-3000:]}")
        complete.write_text(REQUIREMENTS.read_text())
    return venv


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass(frozen=True)
class Gateway:
    """A running proxy: its base URL (with /v1) and its master key."""

    base_url: str
    key: str


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """LiteLLM's proxy on 127.0.0.1, serving MODELS from mock responses; stopped afterwards."""
    venv = _proxy_venv()
    work = tmp_path_factory.mktemp("litellm")
    config = {"model_list": [{"model_name": name, "litellm_params": {"model": f"openai/{name}",
                                                                     "api_key": "unused", **params}}
                             for name, params in MODELS.items()]}
    (work / "config.yaml").write_text(json.dumps(config))  # JSON is YAML
    port = _free_port()
    dead = "http://127.0.0.1:9"  # the discard port: any request meant for the internet fails
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(work), "LITELLM_MASTER_KEY": MASTER_KEY,
           "LITELLM_LOCAL_MODEL_COST_MAP": "True", "HTTP_PROXY": dead, "HTTPS_PROXY": dead,
           "ALL_PROXY": dead, "NO_PROXY": "127.0.0.1,localhost"}
    log = (work / "proxy.log").open("w")
    proc = subprocess.Popen([str(venv / "bin" / "litellm"), "--config", str(work / "config.yaml"),
                             "--host", "127.0.0.1", "--port", str(port)],
                            cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the LiteLLM proxy did not start:\n{(work / 'proxy.log').read_text()[-3000:]}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health/liveliness", timeout=2,
                             trust_env=False).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        yield Gateway(f"http://127.0.0.1:{port}/v1", MASTER_KEY)
    finally:
        stop_process_group(proc)
        log.close()


@pytest.fixture
def run(gateway: Gateway, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture[str]):
    """Runs `graph.run ... --live --json` against the gateway; returns its JSON outcome."""
    monkeypatch.setenv("MANDAPI_BASE_URL", gateway.base_url)
    monkeypatch.setenv("MANDAPI_API_KEY", gateway.key)
    monkeypatch.delenv("MANDAPI_MODEL_ID", raising=False)
    monkeypatch.chdir(tmp_path)

    def invoke(*args: str, key: str | None = None) -> dict:
        if key is not None:
            monkeypatch.setenv("MANDAPI_API_KEY", key)
        capfd.readouterr()
        code = main([*args, "--db", str(tmp_path / "gw.sqlite"), "--timeout", "60", "--json"])
        out = capfd.readouterr().out
        outcome = json.loads(out)
        assert outcome["exit_code"] == code, out
        assert gateway.key not in out and (key is None or key not in out)
        return outcome

    return invoke


def test_a_thread_reaches_done_with_the_gateways_answer(run) -> None:
    first = run("--thread", "gw-answer", "--task", TASK, "--model", "mock-answer", "--live", "--once")
    assert (first["status"], first["exit_code"], first["attempts"]) == ("done", 0, 1), first
    assert first["answer"] == ANSWER and first["partial_answer"] is None
    assert first["model"] == "mock-answer" and first["error_code"] is None
    again = run("--thread", "gw-answer", "--live", "--once")
    assert (again["status"], again["attempts"], again["answer"]) == ("done", 1, ANSWER)


@pytest.mark.parametrize("model", ["mock-tool-call", "mock-empty-id"])
def test_gateway_tool_calls_run_and_their_results_go_back_through_it(run, model: str) -> None:
    # Each reply is finish_reason "stop" with a tool call: a call, not an answer. The
    # second request carries the first call's result; the gateway takes it (no 400), and
    # its reply, the same call again (same id, or none), is a call too, so the budget of
    # 2 ends the thread, with its attempts counted and nothing stored as an answer.
    first = run("--thread", "gw-tools", "--task", TASK, "--model", model, "--max-attempts", "2",
                "--live", "--once")
    assert (first["status"], first["exit_code"], first["attempts"]) == ("ready", 0, 1), first
    assert first["error_code"] is None and first["answer"] is None
    second = run("--thread", "gw-tools", "--live", "--once")
    assert (second["status"], second["exit_code"], second["attempts"]) == ("exhausted", 3, 2), second
    assert second["stop_reason"] == "budget" and second["answer"] is None


def test_a_wrong_key_at_the_gateway_is_a_stop_the_person_can_undo(run, gateway: Gateway) -> None:
    # LiteLLM without a database answers an unknown key with HTTP 400 "No connected db.":
    # read as invalid_request, the thread stops after one counted attempt, until --reopen.
    wrong = "sk-not-the-master-key-9876"
    stopped = run("--thread", "gw-key", "--task", TASK, "--model", "mock-answer", "--live", "--once",
                  key=wrong)
    assert (stopped["status"], stopped["exit_code"], stopped["attempts"]) == ("exhausted", 3, 1), stopped
    assert stopped["stop_reason"] == "invalid_request" and stopped["error_code"] == "http_status"
    assert "HTTP 400" in stopped["error"] and "No connected db" in stopped["error"]
    still = run("--thread", "gw-key", "--live", "--once", key=gateway.key)
    assert (still["status"], still["attempts"]) == ("exhausted", 1)  # no request without the person
    reopened = run("--thread", "gw-key", "--reopen")
    assert (reopened["status"], reopened["exit_code"], reopened["attempts"]) == ("ready", 0, 1), reopened
    done = run("--thread", "gw-key", "--live", "--once")
    assert (done["status"], done["exit_code"], done["attempts"], done["answer"]) == ("done", 0, 2, ANSWER)
