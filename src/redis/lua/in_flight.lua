-- A cap on calls in flight shared by a fleet: a semaphore of leases, and
-- the cap learned from concurrency refusals, run inside Redis. The Rust
-- side is src/redis/in_flight.rs; the learning is that of
-- src/client/concurrency.rs (`Cap`), read on the fleet's count.
--
-- KEYS[1]  the holders: a sorted set of calls in flight, each member a
--          holder's id, its score the end of its lease (Redis TIME, ms)
-- KEYS[2]  the cap's hash
-- ARGV[1]  operation: take | done | renew
-- ARGV[2]  the lease, in ms
-- ARGV[3]  the configured cap (0: none)
-- ARGV[4]  milliseconds the cap's hash outlives its last write (what was
--          learned is forgotten after it)
-- ARGV[5]  the least share of the calls in flight an episode of refusals
--          cuts the cap to (Tuning::decrease)
-- ARGV[6]  rounds at the cap before a cap below what was admitted goes one
--          higher (Tuning::recover_rounds)
-- take:  ARGV[7] the holder's id
-- done:  ARGV[7] the holder's id, ARGV[8] how its call went (0: no answer
--        to learn from, 1: answered, the server admitted it, 2: refused
--        for concurrency), ARGV[9] its number among the key's takes,
--        ARGV[10] the fleet's calls in flight as it was taken, itself
--        among them
-- renew: ARGV[7]… the ids of the holders whose lease goes on
--
-- Fields: cap = the cap learned (absent: none), admitted = the most calls
-- the fleet had in flight as one the server admitted was answered, run =
-- calls answered at the cap since it last moved, floor = the least cap the
-- current episode of refusals cuts to, takes = slots taken so far (a
-- holder's number), cut = takes when a refusal last cut the cap, first =
-- takes when one first did.
--
-- Replies: take {1, in flight with this one, cap (-1: none), number}
-- granted, {0, in flight, cap, ms until the earliest lease ends} refused;
-- done {2, cap (-1: none)}; renew {3, leases renewed}.

local held = KEYS[1]
local caps = KEYS[2]
local op = ARGV[1]
local lease = tonumber(ARGV[2])
local configured = tonumber(ARGV[3])
local ttl = tonumber(ARGV[4])
local decrease = tonumber(ARGV[5])
local recover_rounds = tonumber(ARGV[6])

local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)

-- A lease that ended is a holder gone (its process died, or lost Redis
-- for longer than the lease): its slot is free again.
redis.call('ZREMRANGEBYSCORE', held, '-inf', now)

local function cap_in_force()
  local cap = tonumber(redis.call('HGET', caps, 'cap'))
  if configured > 0 and (cap == nil or cap > configured) then
    cap = configured
  end
  return cap
end

local function keep()
  redis.call('PEXPIRE', held, lease * 2)
  if redis.call('EXISTS', caps) == 1 then
    redis.call('PEXPIRE', caps, ttl)
  end
end

if op == 'take' then
  local n = redis.call('ZCARD', held)
  local cap = cap_in_force()
  if cap ~= nil and n >= cap then
    local first = redis.call('ZRANGE', held, 0, 0, 'WITHSCORES')
    local wait = lease
    if first[2] then
      wait = math.max(tonumber(first[2]) - now, 0)
    end
    return {0, n, cap, wait}
  end
  local number = redis.call('HINCRBY', caps, 'takes', 1)
  redis.call('ZADD', held, now + lease, ARGV[7])
  keep()
  return {1, n + 1, cap or -1, number}
end

if op == 'done' then
  local holder = ARGV[7]
  local outcome = tonumber(ARGV[8])
  local number = tonumber(ARGV[9])
  -- The fleet's calls in flight as this one's answer is read, itself
  -- among them (counted back in when its lease ran out first).
  local n = redis.call('ZCARD', held)
  if redis.call('ZREM', held, holder) == 0 then
    n = n + 1
  end
  local learned = tonumber(redis.call('HGET', caps, 'cap'))
  if outcome == 1 then
    -- Calls granted before a cut landed, past the cap it set, are not
    -- counted as admitted beside this one.
    local counted = n
    if learned ~= nil and counted > learned then
      counted = learned
    end
    local admitted = math.max(tonumber(redis.call('HGET', caps, 'admitted')) or 0, counted)
    redis.call('HSET', caps, 'admitted', admitted)
    -- Below what the fleet was seen to admit, a learned cap climbs back
    -- one call per round at the cap; at it, it stays (no probe above).
    if learned ~= nil and learned < admitted and n >= learned then
      local run = redis.call('HINCRBY', caps, 'run', 1)
      if run >= learned * recover_rounds then
        learned = learned + 1
        redis.call('HSET', caps, 'cap', learned, 'run', 0)
      end
    end
  elseif outcome == 2 then
    -- Refused with at most the calls in flight as it was taken (the
    -- others then) at the server: its cap is at most that count less
    -- one, no lower than the episode's floor. (The count as its refusal
    -- is read holds the calls taken since, the refusals among them not
    -- yet read: a burst read that way cuts one call per refusal from the
    -- burst's size, not to the cap.) A call taken after the last cut
    -- opens a new episode.
    n = tonumber(ARGV[10])
    local floor = tonumber(redis.call('HGET', caps, 'floor')) or 1
    if number > (tonumber(redis.call('HGET', caps, 'cut')) or 0) then
      floor = math.ceil(n * decrease)
      redis.call('HSET', caps, 'floor', floor)
    end
    local to = math.max(n - 1, floor, 1)
    -- The refusals of calls taken before the first cut bound what the
    -- fleet was seen to admit: until then a count read as a call was
    -- answered holds the calls granted past the server's cap and not yet
    -- refused, and a cap recovering to it would be refused again. (Later
    -- refusals do not: those of an outage would leave nothing to recover
    -- to.)
    local first = tonumber(redis.call('HGET', caps, 'first'))
    if first == nil or number <= first then
      local admitted = tonumber(redis.call('HGET', caps, 'admitted')) or 0
      redis.call('HSET', caps, 'admitted', math.min(admitted, math.max(n - 1, 1)))
    end
    redis.call('HSET', caps, 'run', 0)
    if learned == nil or learned > to then
      learned = to
      local takes = tonumber(redis.call('HGET', caps, 'takes')) or 0
      redis.call('HSET', caps, 'cap', learned, 'cut', takes)
      if first == nil then
        redis.call('HSET', caps, 'first', takes)
      end
    end
  end
  keep()
  return {2, learned or -1}
end

if op == 'renew' then
  local renewed = 0
  for i = 7, #ARGV do
    renewed = renewed + redis.call('ZADD', held, 'XX', 'CH', now + lease, ARGV[i])
  end
  keep()
  return {3, renewed}
end

return redis.error_reply('unknown operation ' .. tostring(op))
