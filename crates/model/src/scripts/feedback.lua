-- A throttling answer of the provider, atomically: the Lua twin of adaptive::feedback
-- (adaptive.rs, where the arithmetic is explained). KEYS/ARGV: cmd::feedback, read
-- by name (the prelude before this file). Reply: {decreased, from, to, paused,
-- pause_until, now} (FeedbackOutcome).
local fl = floor + 0
local rec = recover_us + 0
local dec = decrease + 0
local ra = retry_after_us + 0
local big = 9007199254740991
-- The stored state "<t0>:<k>:<wmax>:<pause_until>"; anything else (MGET: a key of
-- another type reads as nil) is no state, as AdaptState::read_like_the_script.
local t0, k, wmax, pause = 0, 0, 1000, 0
local stored = false
local s = redis.call('MGET', adapt_key)[1]
if s then
  local a, b, c, d = string.match(s, '^(%d+):(%d+):(%d+):(%d+)$')
  if a then
    a, b, c, d = tonumber(a), tonumber(b), tonumber(c), tonumber(d)
    if a <= big and b <= big and c <= 1000 and d <= big then
      t0, k, wmax, pause, stored = a, b, c, d, true
    end
  end
end
-- The share at `at`, permille: AdaptState::permille_at.
local function share(at)
  local dt = at - t0
  if dt < 0 then dt = 0 end
  local x = (dt - k) / rec
  local w = math.floor(wmax + (1000 - fl) * (x * x * x))
  if w > 1000 then return 1000 elseif w < fl then return fl end
  return w
end
local from = share(now)
local decreased = 0
-- At most one decrease per adaptive::COOLDOWN_US (1 s).
if fl < 1000 and (not stored or now - t0 >= 1000000) then
  local s0 = math.floor(from * dec)
  if s0 < fl then s0 = fl end
  k = math.floor(rec * ((from - s0) / (1000 - fl)) ^ (1 / 3))
  t0, wmax, decreased = now, from, 1
end
-- The provider's Retry-After, at most adaptive::MAX_PAUSE_US (60 s), never shortened.
local paused = 0
if ra > 0 then
  if ra > 60000000 then ra = 60000000 end
  local u = now + ra
  if u > pause then pause, paused = u, 1 end
end
local to = share(now)
if decreased == 1 or paused == 1 then
  -- Kept until the budget is back at the limits and the pause is over, and a minute
  -- (AdaptState::recovered_at).
  local done = t0
  if fl < 1000 then
    local rest = 1000 - wmax
    if rest < 0 then rest = 0 end
    done = t0 + k + math.ceil(rec * (rest / (1000 - fl)) ^ (1 / 3))
  end
  if pause > done then done = pause end
  local d = done - now
  if d < 0 then d = 0 end
  redis.call('SET', adapt_key, string.format('%d:%d:%d:%d', t0, k, wmax, pause), 'PX', (d - d % 1000) / 1000 + 59999 + slack_ms)
end
-- Every throttling answer is remembered for `limiter status` and health() (a day).
redis.call('SET', last_key, status .. ':' .. string.format('%d', now) .. ':' .. retry_after_us, 'PX', 86400000)
local pu = 0
if pause > now then pu = pause end
return {decreased, from, to, paused, pu, now}
