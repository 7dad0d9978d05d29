"""The ledger's operations as Lua scripts: each one atomic on the server (`graph.store.redis.ledger`).

A script runs alone on the server and its writes reach the append-only file as one
`MULTI`/`EXEC` block, so a crash or a reload keeps all of a claim (the thread's count
and its request cap) or none of it. Each script checks everything it reads before it
writes anything (Redis does not undo the writes of a script that fails halfway):
stored counts must be canonical whole numbers with `claimed <= attempts <= maximum`,
times must look like ISO 8601 with a zone, keys must be of the right type and a row
exactly its five fields; anything else answers `damaged` and changes nothing. Scripts
only ever raise a count by one, set a row that does not exist yet, or touch
`updated_at`: none lowers a count or changes a maximum.

Every script answers a list whose first item is a status: `ok` (changed), `same`
(nothing to change), `none` (no row), `exists`, `busy` (the thread's writer lease is
another's, or this writer's lease is gone), `nocap`, `capfull`, or `damaged` followed
by the table and what is wrong. Counts follow as `attempts, claimed, max_attempts`.
"""

from __future__ import annotations

_PRELUDE = r"""
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
  if n ~= 5 then return nil, 'the row has ' .. n .. ' fields, not 5' end
  local f = redis.call('HMGET', key, 'attempts', 'claimed', 'max_attempts', 'created_at', 'updated_at')
  local a, c, m = int(f[1]), int(f[2]), int(f[3])
  if not (a and c and m) then return nil, 'a count is missing or not a whole number' end
  if not (time(f[4]) and time(f[5])) then return nil, 'a time is missing or not ISO 8601' end
  if m < 1 or c > a or a > m then
    return nil, 'claimed ' .. c .. ', attempts ' .. a .. ', maximum ' .. m
  end
  return {a, c, m}, nil
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
"""

COUNT = _PRELUDE + r"""
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

CLAIM = _PRELUDE + r"""
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

CREATE = _PRELUDE + r"""
-- KEYS: ledger. ARGV: max_attempts, now. Keeps an existing row as it is.
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

INSERT_ROW = _PRELUDE + r"""
-- KEYS: ledger. ARGV: attempts, claimed, max_attempts, created_at, updated_at.
if kind(KEYS[1]) ~= 'none' then return {'exists'} end
redis.call('HSET', KEYS[1], 'attempts', ARGV[1], 'claimed', ARGV[2], 'max_attempts', ARGV[3],
           'created_at', ARGV[4], 'updated_at', ARGV[5])
return {'ok'}
"""

ENSURE_CAP = _PRELUDE + r"""
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

TOUCH = _PRELUDE + r"""
-- KEYS: ledger. ARGV: now. Only an existing, intact row.
local row, bad = ledger(KEYS[1])
if bad then return {'damaged', 'attempt_ledger', bad} end
if not row then return {'none'} end
redis.call('HSET', KEYS[1], 'updated_at', ARGV[1])
return {'ok', row[1], row[2], row[3]}
"""
