-- The shared sliding window log: one sorted-set member per token granted,
-- scored with the Redis TIME (microseconds) it was granted for.
--
-- KEYS[1]  the log (sorted set); KEYS[2] its meta hash
-- ARGV[1]  operation: reserve | book | try | refund | rate | capacity |
--          limit | remaining | block | unblock | uncount | grow | edge | batch
--          (edge, a bound on the server's window's end, is the token
--          bucket's alone: a log is told of blocks, not windows)
-- ARGV[2]  milliseconds a key outlives the moment the log is empty again
-- ARGV[3]  default limit L (tokens per window), used while the hash holds none
-- ARGV[4]  default window W, microseconds (likewise)
-- ARGV[5], ARGV[6], ARGV[7]  the operation's operands; for reserve, book
--          and try: the weight, the longest wait to book (for book, the
--          longest wait for the turn's first unit) and the longest server
--          block to wait out, in ns (2^62 for no bound)
-- ARGV[8]  milliseconds the meta hash of a log that has learned a rate
--          lives at least
-- ARGV[9]  how many adjustments to apply first (none when absent): what a
--          response taught, sent with the next reservation or on its own
--          ('batch'), in order and saved with the operation
-- ARGV[10]… those adjustments, four arguments each (an operation and its
--          three operands, as ARGV[1], ARGV[5..7] of a call of its own)
--
-- Meta fields: L, W, n = member counter (a reservation's first id), e = block
-- counter, b = Retry-After block end (microseconds since 1970), a = units
-- granted so far (every process's), c = what asked for the block (its status
-- times 2, plus 1 for a spent quota), R = 1 once a rate was learned ('rate',
-- 'grow') rather than the limit the log was made with, F = ns per call of
-- the rate a server last refused (0: none), g = units granted so far, those
-- a server refused included, less those of the latest grant refunded (the
-- token bucket's g).
-- Members: 'r<id>' for grants (scored in the future for a reservation),
-- 'p<id>' for placeholders that stand for tokens the server says are spent.
--
-- Replies: {0, wait_ns, first_id, epoch, granted, ns, F, g} granted
-- (granted is the count, ns the window's time per call learned, or 0 while
-- none is, F the one last refused, or 0, g the turns), {1, wait_ns}
-- refused, {2, limit} weight over limit, {3, x} done, {4, block_ns, cause}
-- held by a block longer than the bound, {5, e} a batch applied, with the
-- block counter.

local log, meta = KEYS[1], KEYS[2]
local op = ARGV[1]
local idle = tonumber(ARGV[2])
local learned_ttl = tonumber(ARGV[8]) or 0

local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])

local m = redis.call('HMGET', meta, 'L', 'W', 'n', 'e', 'b', 'a', 'c', 'R', 'F', 'g')
local L = tonumber(m[1]) or tonumber(ARGV[3])
local W = tonumber(m[2]) or tonumber(ARGV[4])
local n = tonumber(m[3]) or 0
local e = tonumber(m[4]) or 0
local b = tonumber(m[5]) or 0
local a = tonumber(m[6]) or 0
local c = tonumber(m[7]) or 0
local R = tonumber(m[8]) or 0
local F = tonumber(m[9]) or 0
local g = tonumber(m[10]) or 0

local function int(x)
  return string.format('%.0f', x)
end

local function num(x)
  return string.format('%.17g', x)
end

-- A grant at s counts until s + W: it is out once s <= now - W.
redis.call('ZREMRANGEBYSCORE', log, '-inf', num(now - W))

-- Add count members named prefix..id at score(i), in chunks that stay under
-- Lua's limit on unpacked arguments.
local function add(count, prefix, score)
  local args = {}
  for i = 1, count do
    n = n + 1
    args[#args + 1] = num(score(i))
    args[#args + 1] = prefix .. int(n)
    if #args >= 1000 or i == count then
      redis.call('ZADD', log, unpack(args))
      args = {}
    end
  end
end

local function save()
  local last = redis.call('ZRANGE', log, -1, -1, 'WITHSCORES')
  local busy_until = b
  if last[2] then
    busy_until = math.max(busy_until, tonumber(last[2]) + W)
  end
  -- Empty and unblocked again at busy_until; milliseconds, never 0.
  local ttl = math.max(1, math.ceil(math.max(0, busy_until - now) / 1000) + idle)
  redis.call('HSET', meta, 'L', int(L), 'W', int(W), 'n', int(n), 'e', int(e), 'b', int(b),
    'a', int(a), 'c', int(c), 'R', int(R), 'F', int(F), 'g', int(g))
  -- What was learned outlives the window, so that a key used again
  -- starts from it.
  if R == 1 then
    redis.call('PEXPIRE', meta, math.max(ttl, learned_ttl))
  else
    redis.call('PEXPIRE', meta, ttl)
  end
  if last[2] then
    redis.call('PEXPIRE', log, ttl)
  end
end

local function at(score)
  return function() return score end
end

-- The adjustments: one operation and its operands x, y, z (ARGV[5], ARGV[6],
-- ARGV[7] of a call of its own). False for a name it does not know.
local ADJUSTMENTS = {rate = true, grow = true, limit = true, remaining = true,
  block = true, uncount = true, unblock = true, edge = true}
local function adjust(op, x, y, z)
  if not ADJUSTMENTS[op] then
    return false
  end
  if op == 'rate' then
    -- Keep the window; the count per window becomes the rate's share of it.
    -- x = ns per call, y = the largest count allowed; W is in us.
    local interval = math.max(1, x)
    L = math.min(y, math.max(1, math.floor(W * 1000 / interval)))
    R = 1
    -- A cut on a server's refusal names the rate that was too fast.
    if z > 0 then
      F = z
    end
  elseif op == 'grow' then
    -- The count per window x millionths of the one held now, at most
    -- one call per y ns and z calls; never fewer. A count is
    -- whole: a growth of less than one call is lost.
    local grown = math.floor(L * x / 1000000)
    local by_rate = math.floor(W * 1000 / math.max(1, y))
    L = math.max(L, math.min(grown, by_rate, z))
    R = 1
  elseif op == 'limit' then
    -- At most r more now: stand-ins for the tokens the server counts as spent.
    local r = x
    local count = redis.call('ZCARD', log)
    if L - count > r then
      add(L - count - r, 'p', at(now))
    end
  elseif op == 'remaining' then
    -- A new server window: forget the past, keep reservations still ahead.
    local r = x
    redis.call('ZREMRANGEBYSCORE', log, '-inf', num(now))
    local count = redis.call('ZCARD', log)
    if L - count > r then
      add(L - count - r, 'p', at(now))
    end
  elseif op == 'block' then
    -- Nothing before the end of the block, then one token, then one per W/L:
    -- L-1 stand-ins that leave the window one interval apart.
    local u = now + math.ceil(x / 1000)
    if u > b then
      c = y
    end
    b = math.max(b, u)
    local step = W / L
    if L > 1 then
      add(L - 1, 'p', function(i) return u - W + i * step end)
    end
    e = e + 1
  elseif op == 'uncount' then
    -- A server refused units granted: the count is of what it counted.
    a = math.max(0, a - x)
  elseif op == 'unblock' then
    -- As if the block ended now. The stand-ins in the window go with it
    -- (those for tokens a server said were spent too: its next answer says
    -- again what it counts); grants stay. Sleeping waiters book again.
    if b > now then
      local inside = redis.call('ZRANGEBYSCORE', log, num(now - W), '+inf')
      local names = {}
      for _, name in ipairs(inside) do
        if string.sub(name, 1, 1) == 'p' then
          names[#names + 1] = name
        end
        if #names >= 1000 then
          redis.call('ZREM', log, unpack(names))
          names = {}
        end
      end
      if #names > 0 then
        redis.call('ZREM', log, unpack(names))
      end
      b = 0
      c = 0
      e = e + 1
    end
  end
  return true
end

-- The adjustments sent with this call, applied before its operation. Every
-- name is checked first, so that they are applied whole or not at all.
-- (Written again in token_bucket.lua: a script is sent whole, and two cannot share
-- code.)
local pending = tonumber(ARGV[9]) or 0
for i = 0, pending - 1 do
  if not ADJUSTMENTS[ARGV[10 + 4 * i]] then
    return redis.error_reply('reqwest-pace: unknown sliding log operation')
  end
end
for i = 0, pending - 1 do
  local j = 10 + 4 * i
  adjust(ARGV[j], tonumber(ARGV[j + 1]), tonumber(ARGV[j + 2]), tonumber(ARGV[j + 3]))
end

-- A reply that writes nothing of its own still saves the adjustments sent
-- with it.
local function kept(reply)
  if pending > 0 then
    save()
  end
  return reply
end

if op == 'reserve' or op == 'book' or op == 'try' then
  local w = tonumber(ARGV[5])
  if w > L then
    save()
    return {2, L}
  end
  if (b - now) * 1000 > tonumber(ARGV[7]) then
    return kept({4, math.ceil((b - now) * 1000), c})
  end
  -- With the members sorted, the k-th oldest must leave the window before w
  -- more fit; every window holding the new grant then holds at most L.
  local count = redis.call('ZCARD', log)
  local function fits(units)
    local r = now
    if count + units > L then
      local k = count + units - L
      local entry = redis.call('ZRANGE', log, k - 1, k - 1, 'WITHSCORES')
      r = math.max(now, tonumber(entry[2]) + W)
    end
    return math.max(r, b)
  end
  local r = fits(w)
  local wait = math.ceil((r - now) * 1000)
  -- 'reserve' bounds the wait for the whole turn; 'book' the wait for its
  -- first unit, the queue ahead of it (see the token bucket's script).
  local bounded = wait
  if op == 'book' then
    bounded = math.ceil((fits(1) - now) * 1000)
  end
  if (op == 'try' and r > now) or bounded > tonumber(ARGV[6]) then
    save()
    return {1, bounded}
  end
  local first = n + 1
  add(w, 'r', at(r))
  a = a + w
  g = g + w
  save()
  return {0, wait, first, e, a, math.floor(W * 1000 / L) * R, F, g}
elseif op == 'refund' then
  -- Taking members out never lets a window exceed L, wherever they are.
  local first, w = tonumber(ARGV[5]), tonumber(ARGV[6])
  local names = {}
  local removed = 0
  for i = 0, w - 1 do
    names[#names + 1] = 'r' .. int(first + i)
    if #names >= 1000 or i == w - 1 then
      removed = removed + redis.call('ZREM', log, unpack(names))
      names = {}
    end
  end
  a = math.max(0, a - removed)
  -- Off the turns only where it was the latest grant (no member added
  -- since): a turn granted after it keeps its number (the token bucket's g).
  if first + w - 1 == n then
    g = math.max(0, g - removed)
  end
  save()
  return {3, removed}
elseif op == 'batch' then
  -- Nothing but the adjustments before it; the reply tells a waiter that
  -- carried them whether a block came while it slept.
  save()
  -- A log that was gone has had no block since any waiter booked.
  if not m[1] then
    return {5, -1}
  end
  return {5, e}
elseif not adjust(op, tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])) then
  return redis.error_reply('reqwest-pace: unknown sliding log operation')
end
save()
return {3, 0}
