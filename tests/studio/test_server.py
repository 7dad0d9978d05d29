"""`langgraph dev` serves the Studio graph: a thread made and run over its HTTP API.

Needs the `studio` extra (`pip install -e ".[studio]"`, part of the README's test
command); nothing is installed here. The server runs on 127.0.0.1 in a temporary
folder (its own storage goes there), with the offline demo model.
"""

from __future__ import annotations

import shutil
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ROOT, stop_process_group, subprocess_env

pytestmark = pytest.mark.slow

TASK = "How long does shipping take at the demo shop?"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[httpx.Client, Path]]:
    """A `langgraph dev` on a free port, serving `langgraph.json` from a copy of it."""
    cli = Path(sys.executable).parent / "langgraph"
    if not cli.exists():
        pytest.fail("langgraph dev is not installed: pip install -e '.[studio]'")
    shutil.copy(ROOT / "langgraph.json", tmp_path / "langgraph.json")
    db, port = tmp_path / "studio.sqlite", _free_port()
    env = subprocess_env(GRAPH_DB=str(db), LANGSMITH_TRACING="false")
    with open(tmp_path / "server.log", "wb") as log:
        proc = subprocess.Popen([str(cli), "dev", "--no-browser", "--no-reload", "--port",
                                 str(port), "--host", "127.0.0.1"], cwd=tmp_path, env=env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60)
    try:
        for _ in range(240):  # up to 120 s on a loaded machine
            try:
                if client.get("/ok").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None:
                pytest.fail((tmp_path / "server.log").read_text()[-3000:])
            time.sleep(0.5)
        else:
            pytest.fail("langgraph dev did not start: " + (tmp_path / "server.log").read_text()[-3000:])
        yield client, db
    finally:
        client.close()
        stop_process_group(proc)


def _ledger(db: Path, thread_id: str) -> tuple[int, int, int] | None:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT attempts, claimed, max_attempts FROM attempt_ledger "
                            "WHERE thread_id = ?", (thread_id,)).fetchone()


def _run(client: httpx.Client, thread_id: str, assistant: str, **body: Any) -> dict[str, Any]:
    reply = client.post(f"/threads/{thread_id}/runs/wait", json={"assistant_id": assistant, **body})
    assert reply.status_code == 200, reply.text
    return dict(client.get(f"/threads/{thread_id}/state").json())


def test_langgraph_dev_runs_a_thread_one_counted_request_per_run(
        server: tuple[httpx.Client, Path]) -> None:
    client, db = server
    assistant = client.post("/assistants/search", json={"graph_id": "mandapi"}).json()[0]
    schemas = client.get(f"/assistants/{assistant['assistant_id']}/schemas")
    assert schemas.status_code == 200, schemas.text
    assert set(schemas.json()["context_schema"]["properties"]) == {"db", "model_id", "live"}
    drawn = client.get(f"/assistants/{assistant['assistant_id']}/graph").json()
    assert {"create", "budget", "reason", "tools"} <= {node["id"] for node in drawn["nodes"]}

    thread_id = client.post("/threads", json={}).json()["thread_id"]
    first = _run(client, thread_id, assistant["assistant_id"], input={"task": TASK},
                 context={"db": str(db)})
    assert first["next"] == ["tools"]  # stopped after reason: one request
    assert _ledger(db, thread_id) == (1, 1, 4)
    second = _run(client, thread_id, assistant["assistant_id"], input=None)
    assert second["values"]["progress"]["status"] == "done"
    assert _ledger(db, thread_id) == (2, 2, 4)  # counted and claimed once per run
    third = _run(client, thread_id, assistant["assistant_id"], input=None)
    assert third["values"]["progress"]["attempts"] == 2
    assert _ledger(db, thread_id) == (2, 2, 4)  # a finished thread sends nothing


def test_langgraph_dev_stops_a_thread_at_its_maximum(server: tuple[httpx.Client, Path]) -> None:
    client, db = server
    assistant = client.post("/assistants/search", json={"graph_id": "mandapi"}).json()[0]
    thread_id = client.post("/threads", json={}).json()["thread_id"]
    first = _run(client, thread_id, assistant["assistant_id"],
                 input={"task": TASK, "max_attempts": 1})
    assert first["values"]["progress"]["status"] == "exhausted"
    history = client.post(f"/threads/{thread_id}/history", json={"limit": 20}).json()
    before = [h for h in history if h["next"] == ["budget"]][-1]
    fork = client.post(f"/threads/{thread_id}/runs/wait", json={
        "assistant_id": assistant["assistant_id"], "input": None,
        "checkpoint_id": before["checkpoint"]["checkpoint_id"]})
    assert fork.status_code == 200, fork.text
    assert _ledger(db, thread_id) == (1, 1, 1)  # the fork counted nothing and sent nothing
