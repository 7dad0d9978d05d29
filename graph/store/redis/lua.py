"""The ledger's operations as Lua scripts: each one atomic on the server (`graph.store.redis.ledger`).

A script runs alone on the server and its writes reach the append-only file as one
`MULTI`/`EXEC` block, so a crash or a reload keeps all of a claim (the thread's count
and its request cap) or none of it. Each script checks everything it reads before it
writes anything (Redis does not undo the writes of a script that fails halfway):
stored counts must be canonical whole numbers with `claimed <= attempts <= maximum`,
times must look like ISO 8601 with a zone, keys must be of the right type and a row
exactly its five fields (six once its log is counted: `logged`, which `APPEND` sets);
anything else answers `damaged` and changes nothing. Scripts only ever raise a count
by one, set a row that does not exist yet, touch `updated_at` or set the log's count:
none lowers a count or changes a maximum.

Every script answers a list whose first item is a status: `ok` (changed), `same`
(nothing to change), `none` (no row), `exists`, `busy` (the thread's writer lease is
another's, or this writer's lease is gone), `nocap`, `capfull`, `changed` (a compare-and-set
found another value), `moved` (the log is not the length its rows were encoded for), or
`damaged` followed by the table and what is wrong. Counts follow as `attempts, claimed,
max_attempts`.

Fencing (INVARIANTS I8): every script that writes a thread's keys takes the thread's lock
key and the writer's lease token, and checks them first (`fenced`): the write happens only
while that token is the lock's value, or, for a writer holding no lease (token `''`:
`graph.copy`, a Studio edit, a sweep), while nobody holds the thread. The checkpoints and
pending writes (`PUT`, `PUT_WRITES`, `DROP`), the attempt log (`APPEND`), the decisions
(`ADD_DECISION`, `SET_DECISION`), the tombstones (`ADD_TOMBSTONE`) and plain deletions
(`DELETE`) are all scripts here, so a writer whose lease ran out changes nothing.
"""

from __future__ import annotations

from typing import Any

from graph.errors import BusyError
from graph.store.rows import damaged

__all__ = ["ADD_DECISION", "ADD_TOMBSTONE", "APPEND", "CLAIM", "COUNT", "CREATE", "DELETE", "DROP",
           "ENSURE_CAP", "INSERT_ROW", "PRELUDE", "PUT", "PUT_WRITES", "SET_DECISION", "TOUCH",
           "answer", "lost_lease"]

PRELUDE = r"""
local function int(v)
  if type(v) ~= 'string' or #v == 0 or #v > 15 or not string.match(v, '^%d+$') then return nil end
  if #v > 1 and string.sub(v, 1, 1) == '0' then return nil end
  return tonumber(v)
end
-- ISO 8601 with a zone, as this program writes times (`graph.store.redis.rows` checks them fully).
local function time(v)
  return type(v) == 'string' and string.match(v, '^%d%d%d%d%-%d%d%-%d%d[T ]%d%d:%d%d') ~= nil
    and (string.match(v, '[+-]%d%d:?%d%d$') ~= nil or string.sub(v, -1) == 'Z')
end
local function kind(key) return redis.call('TYPE', key).ok end
local function ledger(key)
  local t = kind(key)
  if t == 'none' then return nil, nil end
  if t ~= 'hash' then return nil, 'the row is a ' .. t .. ', not a hash' end
  local n = redis.call('HLEN', key)
  local logged = redis.call('HGET', key, 'logged')
  if n ~= (logged and 6 or 5) then return nil, 'the row has ' .. n .. ' fields, not 5 or 6' end
  if logged and not int(logged) then return nil, 'its log count is not a whole number' end
  local f = redis.call('HMGET', key, 'attempts', 'claimed', 'max_attempts', 'created_at', 'updated_at')
  local a, c, m = int(f[1]), int(f[2]), int(f[3])
  if not (a and c and m) then return nil, 'a count is missing or not a whole number' end
  if not (time(f[4]) and time(f[5])) then return nil, 'a time is missing or not ISO 8601' end
  if m < 1 or c > a or a > m then
    return nil, 'claimed ' .. c .. ', attempts ' .. a .. ', maximum ' .. m
  end
  return {a, c, m, logged}, nil  -- logged: false when not counted yet
end
local function cap(key)
  local t = kind(key)
  if t == 'none' then return nil, nil end
  if t ~= 'hash' or redis.call('HLEN', key) ~= 2 then return nil, 'the cap is not a hash of 2 fields' end
  local f = redis.call('HMGET', key, 'requests', 'max_requests')
  local r, m = int(f[1]), int(f[2])
  if not (r and m) then return nil, 'a field is missing or not a whole number' end
  if r > m then return nil, 'it counts ' .. r .. ' requests, more than its maximum ' .. m end
  return {r, m}, nil
end
-- 'ok' when the caller may write the thread: it holds the lease (token), or nobody does
-- and the caller holds none (token '').
local function holder(lock, token)
  local t = kind(lock)
  if t == 'none' then return token == '' and 'ok' or 'busy' end
  if t ~= 'string' then return 'damaged' end
  if token ~= '' and redis.call('GET', lock) == token then return 'ok' end
  return 'busy'
end
local function fenced(lock, token)
  local h = holder(lock, token)
  if h == 'damaged' then return {'damaged', 'locks', 'the lock is not a string'} end
  if h == 'busy' then return {'busy'} end
  return nil
end
-- The first of `pairs` ({key, type}, ...) holding a key of another type, as a message; nil if none.
local function mistyped(pairs)
  for _, p in ipairs(pairs) do
    local t = kind(p[1])
    if t ~= 'none' and t ~= p[2] then return 'key ' .. string.sub(p[1], 1, 80) .. ' is a ' .. t end
  end
  return nil
end
-- Adds `digest` to field `field` of a checkpoint's digest hash (`graph.store.redis.digests`).
local function record(hash, set, field, digest)
  local cur = redis.call('HGET', hash, field)
  if not cur then
    redis.call('HSET', hash, field, digest)
  elseif not string.find(' ' .. cur .. ' ', ' ' .. digest .. ' ', 1, true) then
    redis.call('HSET', hash, field, cur .. ' ' .. digest)
  end
  redis.call('SADD', set, hash)
end
local JSON = 'ReJSON-RL'
"""
"""The helpers every script here starts with (`fenced`, `ledger`, `mistyped`, ...); a script
of another module that writes a thread's keys starts with it too (`graph.store.redis.ttl`)."""

COUNT = PRELUDE + r"""
-- KEYS: ledger, lock. ARGV: now, token.
local refused = fenced(KEYS[2], ARGV[2])
if refused then return refused end
local row, bad = ledger(KEYS[1])
if bad then return {'damaged', 'attempt_ledger', bad} end
if not row then return {'none'} end
local a, c, m = row[1], row[2], row[3]
if c == a and a < m then
  redis.call('HSET', KEYS[1], 'attempts', tostring(a + 1), 'updated_at', ARGV[1])
  return {'ok', a + 1, c, m}
end
return {'same', a, c, m}
"""

CLAIM = PRELUDE + r"""
-- KEYS: ledger, lock[, cap]. ARGV: attempt, now, token.
local refused = fenced(KEYS[2], ARGV[3])
if refused then return refused end
local row, bad = ledger(KEYS[1])
if bad then return {'damaged', 'attempt_ledger', bad} end
if not row then return {'none'} end
local a, c, m = row[1], row[2], row[3]
local n = tonumber(ARGV[1])
if c ~= n - 1 or a < n then return {'same', a, c, m} end
if KEYS[3] then
  local caps, badcap = cap(KEYS[3])
  if badcap then return {'damaged', 'request_caps', badcap} end
  if not caps then return {'nocap', a, c, m} end
  if caps[1] >= caps[2] then return {'capfull', a, c, m} end
  redis.call('HSET', KEYS[3], 'requests', tostring(caps[1] + 1))
end
redis.call('HSET', KEYS[1], 'claimed', tostring(n), 'updated_at', ARGV[2])
return {'ok', a, n, m}
"""

CREATE = PRELUDE + r"""
-- KEYS: ledger, lock. ARGV: max_attempts, now, token. Keeps an existing row as it is.
local refused = fenced(KEYS[2], ARGV[3])
if refused then return refused end
local status = 'same'
if kind(KEYS[1]) == 'none' then
  redis.call('HSET', KEYS[1], 'attempts', '0', 'claimed', '0', 'max_attempts', ARGV[1],
             'created_at', ARGV[2], 'updated_at', ARGV[2])
  status = 'ok'
end
local row, bad = ledger(KEYS[1])
if bad then return {'damaged', 'attempt_ledger', bad} end
return {status, row[1], row[2], row[3]}
"""

INSERT_ROW = PRELUDE + r"""
-- KEYS: ledger, lock. ARGV: attempts, claimed, max_attempts, created_at, updated_at, token.
local refused = fenced(KEYS[2], ARGV[6])
if refused then return refused end
if kind(KEYS[1]) ~= 'none' then return {'exists'} end
redis.call('HSET', KEYS[1], 'attempts', ARGV[1], 'claimed', ARGV[2], 'max_attempts', ARGV[3],
           'created_at', ARGV[4], 'updated_at', ARGV[5])
return {'ok'}
"""

ENSURE_CAP = PRELUDE + r"""
-- KEYS: cap. ARGV: max_requests, requests (0, or the count copied from elsewhere), only_new.
local t = kind(KEYS[1])
if t == 'none' then
  redis.call('HSET', KEYS[1], 'requests', ARGV[2], 'max_requests', ARGV[1])
elseif ARGV[3] == '1' then
  return {'exists'}
end
local caps, bad = cap(KEYS[1])
if bad then return {'damaged', 'request_caps', bad} end
return {t == 'none' and 'ok' or 'same', caps[1], caps[2]}
"""

TOUCH = PRELUDE + r"""
-- KEYS: ledger, lock. ARGV: now, token. Only an existing, intact row.
local refused = fenced(KEYS[2], ARGV[2])
if refused then return refused end
local row, bad = ledger(KEYS[1])
if bad then return {'damaged', 'attempt_ledger', bad} end
if not row then return {'none'} end
redis.call('HSET', KEYS[1], 'updated_at', ARGV[1])
return {'ok', row[1], row[2], row[3]}
"""

PUT = PRELUDE + r"""
-- A checkpoint as `RedisSaver.put` stores it, with our digests and saved mark, in one step.
-- KEYS: lock, checkpoint document, latest pointer, digest hash, digests set, saved set.
-- ARGV: token, document (JSON), pointer value (the document's key), saved member,
--       the digest hash's written-mark prefix, the whole-document digest's field and
--       value (set, not added: it is the digest of the document stored now), then pairs
--       of digest field and digest.
local refused = fenced(KEYS[1], ARGV[1])
if refused then return refused end
local bad = mistyped({{KEYS[2], JSON}, {KEYS[3], 'string'}, {KEYS[4], 'hash'}, {KEYS[5], 'set'},
                      {KEYS[6], 'set'}})
if bad then return {'damaged', 'checkpoints', bad} end
for i = 8, #ARGV, 2 do record(KEYS[4], KEYS[5], ARGV[i], ARGV[i + 1]) end
redis.call('HSET', KEYS[4], ARGV[6], ARGV[7])
redis.call('JSON.SET', KEYS[2], '$', ARGV[2])
for _, field in ipairs(redis.call('HKEYS', KEYS[4])) do
  if string.sub(field, 1, #ARGV[5]) == ARGV[5] then  -- its writes were saved first
    redis.call('JSON.SET', KEYS[2], '$.has_writes', 'true')
    break
  end
end
redis.call('SET', KEYS[3], ARGV[3])
redis.call('SADD', KEYS[6], ARGV[4])
return {'ok'}
"""

PUT_WRITES = PRELUDE + r"""
-- A task's pending writes as `RedisSaver.put_writes` stores them, with their digests and
-- written marks, in one step.
-- KEYS: lock, checkpoint document, write-key registry, digest hash, digests set, then each
--       write's key. ARGV: token, then per write: document (JSON), digest field, digest,
--       written-mark field, the mark's value (the whole write document's digest).
local refused = fenced(KEYS[1], ARGV[1])
if refused then return refused end
local want = {{KEYS[2], JSON}, {KEYS[3], 'zset'}, {KEYS[4], 'hash'}, {KEYS[5], 'set'}}
for i = 6, #KEYS do want[#want + 1] = {KEYS[i], JSON} end
local bad = mistyped(want)
if bad then return {'damaged', 'checkpoint_writes', bad} end
for i = 6, #KEYS do
  local a = 2 + (i - 6) * 5
  record(KEYS[4], KEYS[5], ARGV[a + 1], ARGV[a + 2])
  redis.call('JSON.SET', KEYS[i], '$', ARGV[a])
  redis.call('ZADD', KEYS[3], i - 6, KEYS[i])
  redis.call('HSET', KEYS[4], ARGV[a + 3], ARGV[a + 4])
end
if #KEYS > 5 and kind(KEYS[2]) ~= 'none' then
  redis.call('JSON.SET', KEYS[2], '$.has_writes', 'true')
end
return {'ok'}
"""

DROP = PRELUDE + r"""
-- Deletes checkpoints (a window's trim, a thread's deletion) with their digests and saved marks.
-- KEYS: lock, digests set, saved set, then the keys to delete.
-- ARGV: token, then the saved set's members to remove.
local refused = fenced(KEYS[1], ARGV[1])
if refused then return refused end
if kind(KEYS[2]) == 'set' then
  for i = 4, #KEYS do redis.call('SREM', KEYS[2], KEYS[i]) end
end
if kind(KEYS[3]) == 'set' then
  for i = 2, #ARGV do redis.call('SREM', KEYS[3], ARGV[i]) end
end
local n = 0
for i = 4, #KEYS do n = n + redis.call('DEL', KEYS[i]) end
return {'ok', n}
"""

DELETE = PRELUDE + r"""
-- KEYS: lock, then the thread's keys to delete. ARGV: token.
local refused = fenced(KEYS[1], ARGV[1])
if refused then return refused end
for i = 2, #KEYS do redis.call('DEL', KEYS[i]) end
return {'ok'}
"""

APPEND = PRELUDE + r"""
-- KEYS: log, lock, ledger. ARGV: token, the first row's place (`seq`: the list's length
-- before the push, which each row and its digest hold), then the rows to append. A list
-- of another length answers 'moved' and its length, nothing pushed. The ledger row, when
-- the thread has one, counts the rows (`logged`, set to the new length): a row popped off
-- the list's end, which no `seq` can show, is then damage (`RedisAttemptLog.rows`).
local refused = fenced(KEYS[2], ARGV[1])
if refused then return refused end
local bad = mistyped({{KEYS[1], 'list'}})
if bad then return {'damaged', 'attempt_log', bad} end
local row, badrow = ledger(KEYS[3])
if badrow then return {'damaged', 'attempt_ledger', badrow} end
local n = redis.call('LLEN', KEYS[1])
local logged = row and row[4]
if logged and tonumber(logged) ~= n then
  return {'damaged', 'attempt_log', 'the log holds ' .. n .. ' rows, but its ledger row counted ' .. logged}
end
if n ~= tonumber(ARGV[2]) then return {'moved', n} end
for i = 3, #ARGV do redis.call('RPUSH', KEYS[1], ARGV[i]) end
if row then redis.call('HSET', KEYS[3], 'logged', tostring(n + #ARGV - 2)) end
return {'ok'}
"""

ADD_TOMBSTONE = PRELUDE + r"""
-- KEYS: tombstone, lock. ARGV: token, final_status, pruned_at. A thread that has one keeps it.
local refused = fenced(KEYS[2], ARGV[1])
if refused then return refused end
if kind(KEYS[1]) == 'none' then
  redis.call('HSET', KEYS[1], 'final_status', ARGV[2], 'pruned_at', ARGV[3])
  return {'ok'}
end
return {'same'}
"""

ADD_DECISION = PRELUDE + r"""
-- KEYS: decisions, lock. ARGV: token, field, row. A call with a decision keeps it.
local refused = fenced(KEYS[2], ARGV[1])
if refused then return refused end
local bad = mistyped({{KEYS[1], 'hash'}})
if bad then return {'damaged', 'write_approvals', bad} end
if redis.call('HSETNX', KEYS[1], ARGV[2], ARGV[3]) == 1 then return {'ok'} end
return {'exists'}
"""

SET_DECISION = PRELUDE + r"""
-- Compare and set. KEYS: decisions, lock. ARGV: token, field, the row as read, the new row.
local refused = fenced(KEYS[2], ARGV[1])
if refused then return refused end
local bad = mistyped({{KEYS[1], 'hash'}})
if bad then return {'damaged', 'write_approvals', bad} end
if redis.call('HGET', KEYS[1], ARGV[2]) ~= ARGV[3] then return {'changed'} end
redis.call('HSET', KEYS[1], ARGV[2], ARGV[4])
return {'ok'}
"""


def answer(reply: list[Any], thread_id: str, location: str | None) -> list[Any]:
    """A fenced script's reply with its status as text, refusals raised.

    Raises:
        BusyError: `busy` (exit 5): the thread's lease is another's, or this writer lost
            it; the script changed nothing.
        RefusedError: `damaged` (exit 4), naming the table; the script changed nothing.
    """
    status = reply[0].decode() if isinstance(reply[0], bytes) else str(reply[0])
    if status == "damaged":
        raise damaged(_text(reply[1]), _text(reply[2])).at(location=location)
    if status == "busy":
        raise lost_lease(thread_id, location)
    return [status, *reply[1:]]


def lost_lease(thread_id: str, location: str | None) -> BusyError:
    """The refusal of a write by a writer that does not hold the thread's lease (exit 5)."""
    return BusyError("its writer lease is another process's, or this process lost it (it was "
                     "paused or cut off past the lease); nothing was written",
                     thread_id=thread_id, location=location)


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
