-- One decision, atomically: the Lua twin of step() (step.rs). KEYS/ARGV are built by
-- DecideCall only, and the reply is read by StepReply: see cmd/decide.rs for the contract.
-- The inputs are locals named by its table (the prelude before this file).
-- Cost (cmd/decide.rs): every redis.call, C function call and table costs; none is spent on a
-- lane that is not configured, and no table but the reply is built unless a bucket carries.
-- The numbers DecideCall encodes are read by arithmetic (`x + 0`: Lua converts a numeric
-- string as tonumber() does, without a function call), and only when not "0"; a value read
-- from the store, which may be anything, by tonumber(). A call sends its inputs up to the
-- end of the last group it needs (FORMS, cmd/decide.rs): an input not sent is nil, off.
local n = 1
if tokens ~= '1' then n = tokens + 0 end
local hot = static_hot == '1'
-- peek(): the same decision, nothing written.
local peek = peek == '1'
-- A reservation: tokens there within maxw µs are taken now (never more than a full bucket).
local maxw = 0
if max_wait_us ~= '0' then maxw = max_wait_us + 0 end
-- Lane i's bucket is KEYS[bucket_keys + i], read into v[3 + i]; its interval
-- ARGV[lane_args + 2 * i - 1], its tolerance the next. The hot lanes' buckets are read
-- only when one of them is configured.
-- With the adaptive option (adapt_floor not "0") its state is read last in the same MGET.
local af = 0
if adapt_floor and adapt_floor ~= '0' then af = adapt_floor + 0 end
-- in_flight (in_flight.rs): the global level's limit, 0 when the option is off.
local fg = 0
if lease_id and ARGV[in_flight_args + 1] ~= '0' then fg = ARGV[in_flight_args + 1] + 0 end
-- The call's endpoint (docs/endpoints.md): its bucket's interval, 0 when it names none;
-- e = 1 when it names one. Its bucket is decided after global's, before the hot ones'.
local e = 0
if share_ppm and ARGV[endpoint_args + 1] ~= '0' then e = 1 end
-- The call's class: the share (ppm) of every bucket it leaves untouched (0: none).
local ppm = 0
if share_ppm and share_ppm ~= '0' then ppm = share_ppm + 0 end
-- One MGET reads every string the decision needs: the mark, the version, the settings,
-- the buckets (the hot lanes' only when one is configured), the adaptive state and the
-- endpoint's bucket when they apply (a key of another type reads as nil).
local v, sa, ev
local hl = ARGV[lane_args + 3]
if hl and (hl ~= '0' or ARGV[lane_args + 5] ~= '0') then
  if af > 0 then
    if e > 0 then
      v = redis.call('MGET', hot_flag_key, version_key, settings_key, KEYS[bucket_keys + 1], KEYS[bucket_keys + 2], KEYS[bucket_keys + 3], adapt_key, endpoint_key)
      ev = v[8]
    else
      v = redis.call('MGET', hot_flag_key, version_key, settings_key, KEYS[bucket_keys + 1], KEYS[bucket_keys + 2], KEYS[bucket_keys + 3], adapt_key)
    end
    sa = v[7]
  elseif e > 0 then
    v = redis.call('MGET', hot_flag_key, version_key, settings_key, KEYS[bucket_keys + 1], KEYS[bucket_keys + 2], KEYS[bucket_keys + 3], endpoint_key)
    ev = v[7]
  else
    v = redis.call('MGET', hot_flag_key, version_key, settings_key, KEYS[bucket_keys + 1], KEYS[bucket_keys + 2], KEYS[bucket_keys + 3])
  end
else
  if af > 0 then
    if e > 0 then
      v = redis.call('MGET', hot_flag_key, version_key, settings_key, KEYS[bucket_keys + 1], adapt_key, endpoint_key)
      ev = v[6]
    else
      v = redis.call('MGET', hot_flag_key, version_key, settings_key, KEYS[bucket_keys + 1], adapt_key)
    end
    sa = v[5]
  elseif e > 0 then
    v = redis.call('MGET', hot_flag_key, version_key, settings_key, KEYS[bucket_keys + 1], endpoint_key)
    ev = v[5]
  else
    v = redis.call('MGET', hot_flag_key, version_key, settings_key, KEYS[bucket_keys + 1])
  end
end
if (v[2] or '') ~= version then return {-1, 0} end
local mark_ms = -2
if not hot and v[1] then
  hot = true
  mark_ms = redis.call('PTTL', hot_flag_key)
end
-- The adaptive budget (adaptive.rs): the share in force, permille (p), from the state
-- "<t0>:<k>:<wmax>:<pause_until>" (anything else: no state, as
-- AdaptState::read_like_the_script); while the provider's pause holds, every shop is
-- denied (reason 4) and nothing is written.
local p = 1000
local ad = false
if sa then
  local a, b, c, d = string.match(sa, '^(%d+):(%d+):(%d+):(%d+)$')
  if a then
    a, b, c, d = tonumber(a), tonumber(b), tonumber(c), tonumber(d)
    if a <= 9007199254740991 and b <= 9007199254740991 and c <= 1000 and d <= 9007199254740991 then
      ad = true
      local dt = now - a
      if dt < 0 then dt = 0 end
      local x = (dt - b) / adapt_recover_us
      p = math.floor(c + (1000 - af) * (x * x * x))
      if p > 1000 then p = 1000 elseif p < af then p = af end
      if d > now then
        local h = 0
        if hot then h = 1 end
        if e > 0 then
          local fr = -1
          if fg > 0 then fr = 0 end
          return {4, h, now, -1, -1, -1, 0, 0, mark_ms, p, d, fr, -1}
        end
        if fg > 0 then return {4, h, now, -1, -1, -1, 0, 0, mark_ms, p, d, 0} end
        return {4, h, now, -1, -1, -1, 0, 0, mark_ms, p, d}
      end
    end
  end
end
local last = 1
if hot then last = 3 end
local change = ''
if version ~= '' then change = string.match(version, '^%d+%-%w+%-(%d+)$') or '' end
-- carry()'s check of a stored change: the fast read below takes a bucket only where it holds.
local change_ok = change == '' or tonumber(change) <= 9007199254740991
-- The reply, built once: lane i's TAT is r[3 + i] (-1: not configured). When only the
-- global bucket applies (not hot, no auto_hot) its short form {reason, hot, now,
-- tat_global}, the rest at their defaults (StepReply::from_ints): Valkey converts a
-- reply's every element (about 60 ns each, docs/performance.md).
-- With in_flight always the twelve of its form: the adaptive share (0: its state not
-- read), the pause, an in-flight denial's retry estimate.
-- With an endpoint always the thirteen of its form: the twelve (the retry estimate -1
-- without in_flight, the share and pause 0 when the adaptive state was not read) and the
-- endpoint bucket's TAT.
local r
if e > 0 then
  local fr = -1
  if fg > 0 then fr = 0 end
  if ad then r = {0, 0, now, -1, -1, -1, 0, 0, mark_ms, p, 0, fr, -1}
  else r = {0, 0, now, -1, -1, -1, 0, 0, mark_ms, 0, 0, fr, -1} end
elseif fg > 0 then
  if ad then r = {0, 0, now, -1, -1, -1, 0, 0, mark_ms, p, 0, 0}
  else r = {0, 0, now, -1, -1, -1, 0, 0, mark_ms, 0, 0, 0} end
elseif ad then r = {0, 0, now, -1, -1, -1, 0, 0, mark_ms, p, 0}
elseif last == 1 and (not window_us or window_us == '0') then r = {0, 0, now, -1}
else r = {0, 0, now, -1, -1, -1, 0, 0, mark_ms} end
-- At a share below the limits every bucket is scaled (adaptive::scaled_args), and the
-- scaled interval and tolerance are what its key stores: a table only then.
local sc
-- The lanes carried over from other limits (written back even when denied): a table only
-- when one is.
local moved
local reason = 0
-- Every bucket takes the tokens as of the instant the slowest one holds them (now, or a
-- reservation's wake-up): see step_auto_hot.
local take_at = now
-- Slot i: the lanes 1..3, the endpoint 4 (its TAT r[13]), in the order a denial is
-- named: global, the endpoint, the hot lane, the hot shop.
for k = 1, last + e do
  local i = k
  if e > 0 and k > 1 then
    i = k - 1
    if k == 2 then i = 4 end
  end
  local si, st, ri, s
  if i == 4 then
    si, st, ri, s = ARGV[endpoint_args + 1], ARGV[endpoint_args + 2], 13, ev
  else
    si, st, ri, s = ARGV[lane_args + 2 * i - 1], ARGV[lane_args + 2 * i], 3 + i, v[3 + i]
  end
  local interval = 0
  if si and si ~= '0' then interval = si + 0 end
  if interval > 0 then
    local tol = st + 0
    if p < 1000 then
      local cap = math.floor(math.floor(tol / interval) * p / 1000)
      if cap < 1 then cap = 1 end
      interval = math.ceil(interval * 1000 / p)
      tol = cap * interval
      si = string.format('%d', interval)
      st = string.format('%d', tol)
      sc = sc or {}
      sc[2 * i - 1] = si
      sc[2 * i] = st
    end
    local x = now
    if s then
      -- Written under these very limits and this change (the common case): its TAT alone,
      -- by one anchored match of what this decision would write, taken where carry()
      -- would return it as it stands; anything else is carry()'s to read.
      local y, m
      local a = string.match(s, '^(%d+):' .. si .. ':' .. st .. ':' .. change .. '$')
      if a then
        y = tonumber(a)
        if y > 9007199254740991 or interval > 9007199254740991 or tol > 9007199254740991 or not change_ok then y = nil end
      end
      if y then m = false else y, m = carry(s, si, st, interval, tol, now, change) end
      if y then
        if m then
          moved = moved or {}
          moved[i] = true
        end
        if y > now then x = y end
      end
    end
    r[ri] = x
    local need = n * interval
    -- The class's reserve, ceil(tol * ppm / 1e6) (endpoints::reserve_us), split as
    -- q * 1e6 + rr so every term stays exact below 2^53.
    local room = tol
    if ppm > 0 then
      local q = math.floor(tol / 1000000)
      local rr = tol - q * 1000000
      if rr < 0 then q, rr = q - 1, rr + 1000000 elseif rr >= 1000000 then q, rr = q + 1, rr - 1000000 end
      room = tol - (q * ppm + math.ceil(rr * ppm / 1000000))
    end
    if reason == 0 and (need > room or x + need - now > room + maxw) then
      reason = i
      if i == 4 then reason = 8 end
    end
    local at = x + need - room
    if at > take_at then take_at = at end
  end
end
-- The buckets allow: every in-flight level that applies (global; for a hot shop the hot
-- levels with a limit) must hold fewer leases than its limit, read in order up to the
-- first full one, which denies (reason 4 + level: 5, 6, 7) with a retry estimate
-- (in_flight::retry_after_us). A lease is held while its expiry (score) is after now.
local nows
if fg > 0 and reason == 0 then
  nows = string.format('%d', now)
  for i = 1, last do
    local lim = ARGV[in_flight_args + i] + 0
    if lim > 0 then
      local k = KEYS[lease_keys + i]
      local held = redis.call('ZCOUNT', k, '(' .. nows, '+inf')
      if held >= lim then
        reason = 4 + i
        local o = redis.call('ZRANGEBYSCORE', k, '(' .. nows, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
        local oe = tonumber(o[2]) or 0
        local bound = oe - now
        if bound < 1000 then bound = 1000 end
        local st = redis.call('HMGET', lease_stats_key, 'released', 'hold_us')
        local rel, hu = tonumber(st[1]) or 0, tonumber(st[2]) or 0
        -- The longer of the recorded mean hold and the oldest lease's age, over the held.
        local basis = 0
        if rel > 0 and hu > 0 then basis = math.floor(hu / rel) end
        if oe > 0 then
          local age = now - (oe - lease_us)
          if age > basis then basis = age end
        end
        local e = bound
        if basis > 0 then
          e = math.floor(basis / held)
          if e < 1000 then e = 1000 elseif e > bound then e = bound end
        end
        r[12] = e
        break
      end
    end
  end
end
local w = 0
-- The current and the previous window's counts (not `p`: the adaptive share above).
local cur, c, pw
if reason == 0 then
  if window_us and window_us ~= '0' then w = window_us + 0 end
  if w > 0 then
    local win = math.floor(now / w)
    cur = window_prefix .. string.format('%d', win)
    c = redis.call('HMGET', cur, shop, '')
    pw = redis.call('HMGET', window_prefix .. string.format('%d', win - 1), shop, '')
  end
end
for k = 1, last + e do
  local i = k
  if e > 0 and k > 1 then
    i = k - 1
    if k == 2 then i = 4 end
  end
  local ri, si, st, bk = 3 + i
  if i == 4 then
    ri, si, st, bk = 13, ARGV[endpoint_args + 1], ARGV[endpoint_args + 2], endpoint_key
  else
    si, st, bk = ARGV[lane_args + 2 * i - 1], ARGV[lane_args + 2 * i], KEYS[bucket_keys + i]
  end
  local x = r[ri]
  if x >= 0 and (reason == 0 or (moved and moved[i])) then
    if sc then si, st = sc[2 * i - 1], sc[2 * i] end
    if reason == 0 then
      if x < take_at then x = take_at end
      x = x + n * si
      r[ri] = x
    end
    -- The key lives until the bucket is full again: floor((x - now) / 1000) ms, by
    -- arithmetic (exact: x and now are integers below 2^53).
    local d = x - now
    -- %d: Lua's own number formatting keeps 14 digits only; the rest concatenated (cheaper
    -- than more %s).
    if not peek then redis.call('SET', bk, string.format('%d', x) .. ':' .. si .. ':' .. st .. ':' .. change, 'PX', (d - d % 1000) / 1000 + slack_ms) end
  end
end
r[1] = reason
-- A peek reads the window (it fails where acquire() would) but counts nothing.
if w > 0 and not peek then
  local all0 = tonumber(c[2]) or 0
  local mine = (tonumber(c[1]) or 0) + n
  local all = all0 + n
  redis.call('HSET', cur, shop, mine, '', all)
  if all0 == 0 then redis.call('PEXPIRE', cur, math.floor(2 * w / 1000) + 1000) end
  local f = 1 - (now % w) / w
  mine = mine + (tonumber(pw[1]) or 0) * f
  all = all + (tonumber(pw[2]) or 0) * f
  r[8] = math.floor(1000 * mine / all)
  if not hot and mine >= hot_min_tokens + 0 and mine > hot_share * all then
    redis.call('SET', hot_flag_key, 'auto', 'EX', hot_ttl_s)
    r[7] = 1
  end
end
-- Allowed: a lease on every in-flight level that applies (expired ones removed first;
-- those of the global level, where every lease is, counted).
if fg > 0 and reason == 0 and not peek then
  local exp = string.format('%d', now + lease_us)
  for i = 1, last do
    if ARGV[in_flight_args + i] + 0 > 0 then
      local k = KEYS[lease_keys + i]
      local gone = redis.call('ZREMRANGEBYSCORE', k, '-inf', nows)
      redis.call('ZADD', k, exp, lease_id)
      redis.call('PEXPIRE', k, 601000)
      if i == 1 and gone > 0 then redis.call('HINCRBY', lease_stats_key, 'expired', gone) end
    end
  end
end
if not peek and v[3] ~= settings then redis.call('SET', settings_key, settings, 'EX', 86400) end
-- Back at the limits with no pause: the budget recovered, its state removed (the reply's
-- long form with p = 1000 says so: StepReply::recovered).
if ad and p >= 1000 and not peek then redis.call('DEL', adapt_key) end
if hot then r[2] = 1 end
return r
