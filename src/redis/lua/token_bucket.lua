-- The shared token bucket: the GCRA of src/limiter/gcra.rs, run inside Redis.
--
-- KEYS[1]  the bucket's hash
-- ARGV[1]  operation: reserve | book | try | refund | confirm | rate |
--          capacity | limit | remaining | block | unblock | uncount | grow |
--          edge | batch
-- ARGV[2]  milliseconds a key outlives the moment it is back to a fresh bucket
-- ARGV[3]  default time per token, ns (used while the hash holds none)
-- ARGV[4]  default capacity (likewise)
-- ARGV[5], ARGV[6], ARGV[7]  the operation's operands; for reserve, book
--          and try: the weight, the longest wait to book (for book, the
--          longest wait for the turn's first token) and the longest server
--          block to wait out, in ns (2^62 for no bound); for refund and confirm:
--          the reservation's id and weight, and for confirm how long ago
--          its turn came, in ns
-- ARGV[8]  milliseconds a key that has learned a rate lives at least
-- ARGV[9]  how many adjustments to apply first (none when absent): what a
--          response taught, sent with the next reservation or on its own
--          ('batch'), in order and saved with the operation
-- ARGV[10]… those adjustments, four arguments each (an operation and its
--          three operands, as ARGV[1], ARGV[5..7] of a call of its own)
--
-- Fields: t = when the state was written (Redis TIME, microseconds), d = ns
-- of refill still owed at t (the GCRA's full_at - t), b = ns of Retry-After
-- block left at t, T = ns per token, C = capacity, n = write counter (a
-- reservation's id), e = block counter (tells a sleeping waiter a block came),
-- a = units granted so far (every process's), c = what asked for the block
-- (its status times 2, plus 1 for a spent quota), L = 1 once a rate was
-- learned (set by 'rate' or 'grow') rather than the one the bucket was made
-- with, F = ns per token of the rate a server last refused (0: none),
-- u = ns from t to the end of the latest block (below zero once it is past,
-- no further back than 2^52), v = the block counter when u was written
-- (a block counted by a script that keeps no u leaves them apart),
-- w = ns from t to the earliest end of the server's current window any
-- process read ('edge'; 0 or below: none known), g = units granted so far,
-- those a server refused included, less those of the last grant when a
-- refund gives its slot back (two grants of one process a weight apart had
-- no other grant between them).
-- Times are kept relative to t so every figure stays an exact integer in a
-- Lua double: absolute nanoseconds since 1970 would not (2^53 ns ~ 104 days).
--
-- Replies: {0, wait_ns, id, epoch, granted, T, F, g} granted (after wait_ns
-- for a reservation; granted is the count, T the time per token learned, or
-- 0 while none is, F the one last refused, or 0, g the turns), {1, wait_ns} refused, {2, capacity} weight over capacity,
-- {3, x} done (x = 1: a refund gave the turn back; 2: a confirmed turn
-- stands), {4, block_ns, cause} held by a block longer than the bound,
-- {5, e} a batch applied, with the block counter.

local key = KEYS[1]
local op = ARGV[1]
local idle = tonumber(ARGV[2])
local learned_ttl = tonumber(ARGV[8]) or 0

local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])

local s = redis.call('HMGET', key, 't', 'd', 'b', 'T', 'C', 'n', 'e', 'a', 'c', 'L', 'F', 'u', 'v', 'w', 'g')
local T = tonumber(s[4]) or tonumber(ARGV[3])
local C = tonumber(s[5]) or tonumber(ARGV[4])
local n = tonumber(s[6]) or 0
local e = tonumber(s[7]) or 0
local a = tonumber(s[8]) or 0
local c = tonumber(s[9]) or 0
local L = tonumber(s[10]) or 0
local F = tonumber(s[11]) or 0
local g = tonumber(s[15]) or 0
-- The block's end may lie in the past, where a waiter's turn can still be:
-- kept down to 2^52 ns back, so that it stays an exact integer.
local LONG_AGO = -4503599627370496
local d, b, u, w = 0, 0, LONG_AGO, 0
local v = tonumber(s[13]) or -1
if s[1] then
  -- A clock that steps back counts as no time passed, never as time owed.
  local elapsed = math.max(0, now - tonumber(s[1])) * 1000
  d = math.max(0, (tonumber(s[2]) or 0) - elapsed)
  b = math.max(0, (tonumber(s[3]) or 0) - elapsed)
  u = math.max(LONG_AGO, (tonumber(s[12]) or LONG_AGO) - elapsed)
  w = math.max(0, (tonumber(s[14]) or 0) - elapsed)
end

local function int(x)
  return string.format('%.0f', x)
end

-- floor(a * b / c), exactly, for integers 0 <= a, b < 2^53 and 0 < c <= 2^52
-- whose result is below 2^53: the product itself may pass 2^53, where a Lua
-- number stops holding every integer, so it is formed bit by bit, modulo c.
local function mul_div(a, b, c)
  local q = math.floor(a / c)
  local r = a - q * c
  -- a / c rounded up past an integer (a at 2^52 or more): one back.
  if r < 0 then
    q, r = q - 1, r + c
  end
  local result = q * b
  local bit = 1
  while bit * 2 <= b do
    bit = bit * 2
  end
  local hi, lo = 0, 0
  local rest = b
  while bit >= 1 do
    hi, lo = hi * 2, lo * 2
    if lo >= c then
      hi, lo = hi + 1, lo - c
    end
    if rest >= bit then
      rest = rest - bit
      lo = lo + r
      if lo >= c then
        hi, lo = hi + 1, lo - c
      end
    end
    bit = bit / 2
  end
  return result + hi
end

local function save()
  n = n + 1
  redis.call('HSET', key, 't', int(now), 'd', int(d), 'b', int(b),
    'T', int(T), 'C', int(C), 'n', int(n), 'e', int(e), 'a', int(a), 'c', int(c), 'L', int(L),
    'F', int(F), 'u', int(u), 'v', int(v), 'w', int(w), 'g', int(g))
  -- Fresh again once refilled and unblocked; milliseconds, never 0. What
  -- was learned outlives that, so that a key used again starts from it.
  local ttl = math.ceil(math.max(d, b) / 1000000) + idle
  if L == 1 then
    ttl = math.max(ttl, learned_ttl)
  end
  redis.call('PEXPIRE', key, math.max(1, ttl))
end

-- Turns booked beyond one bucket (counted from the block's end) keep their
-- instants, since their waiters go then whatever the rate: only the bucket
-- behind the last of them, what is at hand or owed, is counted at the new
-- rate. The next turn then comes one new interval after the last booked,
-- where rescaling every turn would leave a gap (a cut) or book among them
-- (a raise). The rescaled part is kept to at most `most` ns.
local function rescale(T2, most)
  local owed = math.max(0, d - b)
  local booked = math.max(0, owed - C * T)
  d = b + booked + math.min(mul_div(owed - booked, T2, T), most)
  T = T2
end

-- The adjustments: one operation and its operands x, y, z (ARGV[5], ARGV[6],
-- ARGV[7] of a call of its own). False for a name it does not know.
local ADJUSTMENTS = {rate = true, grow = true, capacity = true, limit = true,
  remaining = true, block = true, uncount = true, unblock = true, edge = true}
local function adjust(op, x, y, z)
  if not ADJUSTMENTS[op] then
    return false
  end
  if op == 'rate' then
    -- Keep the tokens earned: the deficit in tokens stays, its time scales.
    -- Time inside a block is not owed tokens: measure from the block's end,
    -- so the block keeps its length whatever the new rate.
    -- A bucket scaled past 2^52 ns (52 days: a rate far slower than the
    -- one it was booked at) is kept at that, where a double still holds
    -- every integer; gcra.rs computes it in 128 bits.
    rescale(x, 4503599627370496)
    L = 1
    -- A cut on a server's refusal names the rate that was too fast (ns per
    -- token), for the processes that did not see the refusal.
    if z > 0 then
      F = z
    end
  elseif op == 'grow' then
    -- A rate x millionths of the one held now (whoever set it), at most
    -- one token per y ns; never slower. Tokens earned are kept, as for
    -- 'rate'.
    local T2 = math.max(math.floor(T * 1000000 / x), y, 1)
    if T2 < T then
      rescale(T2, math.huge)
    end
    L = 1
  elseif op == 'capacity' then
    -- As in gcra.rs: from the block's end, a deficit beyond one full bucket is
    -- time already booked (reservations, a block's resume schedule) and is
    -- kept as it is; only the bucket part changes.
    local owed = math.max(0, d - b)
    local booked = math.max(0, owed - C * T)
    local tokens = math.max(0, C * T - owed)
    C = math.max(1, x)
    d = b + booked + C * T - math.min(tokens, C * T)
  elseif op == 'limit' then
    local r = x
    d = math.max(d, (C - math.min(r, C)) * T)
  elseif op == 'remaining' then
    -- A new server window: set what is at hand now, but keep what is booked
    -- beyond one full bucket (sleeping reservations keep their turns).
    local r = x
    local booked = math.max(0, d - C * T)
    d = booked + (C - math.min(r, C)) * T
  elseif op == 'block' then
    -- Nothing before the block ends, then one token, then one per interval.
    -- A spent quota (an odd cause) waits for the window's end no longer
    -- than the earliest end any process read.
    local r = x
    if y % 2 == 1 and w > 0 then
      r = math.min(r, w)
    end
    if r > b then
      c = y
    end
    -- A turn booked past the block's end stays booked (the deficit already
    -- counts it); only those before it are handed back.
    b = math.max(b, r)
    d = math.max(d, r + (C - 1) * T)
    u = math.max(u, r)
    e = e + 1
    v = e
  elseif op == 'uncount' then
    -- A server refused units granted: the count is of what it counted.
    a = math.max(0, a - x)
  elseif op == 'edge' then
    -- The server's window ends within x ns: the earliest bound of a window
    -- stands until it passes. One more than y ns later than the bound held
    -- is a later window's (the earlier ended with no block to shorten), of
    -- which the bound held says nothing.
    if x > 0 then
      if w > 0 and x <= w + y then
        w = math.min(w, x)
      else
        w = x
      end
    end
  elseif op == 'unblock' then
    -- As if the block ended now: one token now, then one per interval.
    -- Sleeping waiters see the counter move and book again.
    if b > 0 then
      -- Every turn booked so far lies before the old deficit's end, and is
      -- dropped from it here: its waiter must book again.
      u = math.max(u, d)
      d = math.min(d, (C - 1) * T)
      b = 0
      c = 0
      e = e + 1
      v = e
    end
  end
  return true
end

-- The adjustments sent with this call, applied before its operation. Every
-- name is checked first, so that they are applied whole or not at all.
-- (Written again in sliding_log.lua: a script is sent whole, and two cannot share
-- code.)
local pending = tonumber(ARGV[9]) or 0
for i = 0, pending - 1 do
  if not ADJUSTMENTS[ARGV[10 + 4 * i]] then
    return redis.error_reply('reqwest-pace: unknown token bucket operation')
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

if op == 'confirm' then
  -- A waiter woke at its turn to find a block written (or lifted) since it
  -- booked. A turn at or after the latest block's end stands: the block
  -- kept it in the deficit. One inside the block is handed back like a
  -- refund, and its waiter books again. A key gone has no block to heed.
  -- A block u does not describe (v behind e) may cover any turn.
  if not s[1] or (v == e and u <= -tonumber(ARGV[7])) then
    return kept({3, 2})
  end
  op = 'refund'
end

if op == 'reserve' or op == 'book' or op == 'try' then
  local weight = tonumber(ARGV[5])
  if weight > C then
    return kept({2, C})
  end
  if b > tonumber(ARGV[7]) then
    return kept({4, b, c})
  end
  local need = weight * T
  -- Earliest instant (ns from now) with max(d, t) + w*T - t <= C*T.
  local ready = math.max(0, d + need - C * T, b)
  -- 'reserve' bounds the wait for the whole turn; 'book' the wait for its
  -- first token, the queue ahead of it, so that a heavy turn is booked as
  -- soon as a light one would be (bounded by the whole turn, a waiter of
  -- many tokens is refused while lighter ones keep the queue long).
  local bounded = ready
  if op == 'book' then
    bounded = math.max(0, d + T - C * T, b)
  end
  if (op == 'try' and ready > 0) or bounded > tonumber(ARGV[6]) then
    return kept({1, bounded})
  end
  d = math.max(d, ready) + need
  a = a + weight
  g = g + weight
  save()
  return {0, ready, n, e, a, T * L, F, g}
elseif op == 'refund' then
  -- Only the last write may be undone: a later reservation was placed after
  -- this one, and a hole in the middle cannot be given back safely.
  -- The turn goes unused either way: it is off the count. It leaves the
  -- turns only with its slot: a turn granted after it keeps its number, so
  -- that two turns apart by a weight have no other grant between them.
  a = math.max(0, a - tonumber(ARGV[6]))
  if s[1] and n == tonumber(ARGV[5]) then
    d = math.max(0, d - tonumber(ARGV[6]) * T)
    g = math.max(0, g - tonumber(ARGV[6]))
    save()
    return {3, 1}
  end
  if s[1] then
    redis.call('HSET', key, 'a', int(a))
  end
  return kept({3, 0})
elseif op == 'batch' then
  -- Nothing but the adjustments before it; the reply tells a waiter that
  -- carried them whether a block came while it slept.
  save()
  -- A key that was gone has had no block since any waiter booked.
  if not s[1] then
    return {5, -1}
  end
  return {5, e}
elseif not adjust(op, tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])) then
  return redis.error_reply('reqwest-pace: unknown token bucket operation')
end
save()
return {3, 0}
