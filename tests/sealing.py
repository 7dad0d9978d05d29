"""Recomputes this project's checkpoint digest after a test edits stored values on purpose.

Tests that tamper with values *and* recompute every checksum (what someone with write
access and this program's code could do) use it, so the value checks behind the digest
are still exercised.
"""

from __future__ import annotations

from typing import Any


def reseal(db: str, thread_id: str) -> None:
    """Sets the digest of `thread_id`'s latest checkpoint to match what is stored now."""
    from graph.store import is_postgres
    from graph.store.digest import SqlDigests, checkpoint_digest
    from graph.store.serde import CheckpointIntegrityError, make_serde
    from graph.store.sql.conn import PostgresSql, SqliteSql

    if db.startswith(("redis://", "rediss://", "unix://")):
        from graph.store.redis.conn import connect
        from tests.redis_adapter import reseal_redis

        with connect(db) as client:
            reseal_redis(client, thread_id)
        return
    serde = make_serde()
    if is_postgres(db):
        import psycopg
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg.rows import dict_row

        saver_conn = psycopg.connect(db, autocommit=True, row_factory=dict_row)
        conn: Any = psycopg.connect(db, autocommit=True)
        saver: Any = PostgresSaver(saver_conn, serde=serde)
        digests, closing = SqlDigests(PostgresSql(conn)), (saver_conn, conn)
    else:
        import sqlite3

        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
        saver = SqliteSaver(conn, serde=serde)
        saver.is_setup = True
        digests, closing = SqlDigests(SqliteSql(conn)), (conn,)
    try:
        try:
            saved = saver.get_tuple({"configurable": {"thread_id": thread_id}})
        except CheckpointIntegrityError:
            return  # refused before any digest is compared: nothing to reseal
        conf = saved.config["configurable"]
        key = (thread_id, conf.get("checkpoint_ns", ""), conf["checkpoint_id"], "", 0)
        mark = "%s" if is_postgres(db) else "?"
        conn.execute(f"DELETE FROM checkpoint_digests WHERE thread_id = {mark} AND task_id = '' "
                     f"AND checkpoint_id = {mark}", (thread_id, conf["checkpoint_id"]))
        digests.record(key, checkpoint_digest(serde, saved.checkpoint))
    finally:
        for c in closing:
            c.close()


def checksummed_dumps(obj: Any) -> tuple[str, bytes]:
    """Serializes like the product, without its write-time refusal (to plant bad values)."""
    import hashlib

    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    from graph.store.serde import MAGIC

    type_, data = JsonPlusSerializer(pickle_fallback=False).dumps_typed(obj)
    return type_, MAGIC + hashlib.sha256(type_.encode() + b"\0" + data).digest() + data
