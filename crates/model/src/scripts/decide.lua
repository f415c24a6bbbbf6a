-- One decision, atomically: the Lua twin of step() (step.rs). KEYS/ARGV are built by
-- DecideCall only, and the reply is read by StepReply: see call.rs for the contract. The
-- inputs are locals named by contract.rs's table (the prelude before this file).
local n = tonumber(tokens)
local hot = static_hot == '1'
-- peek(): the same decision, nothing written.
local peek = peek == '1'
-- A reservation: tokens there within maxw µs are taken now (never more than a full bucket).
local maxw = tonumber(max_wait_us)
-- Lane i's bucket is KEYS[bucket_keys + i]; its interval ARGV[lane_args + 2 * i - 1],
-- its tolerance the next.
local v = redis.call('MGET', hot_flag_key, KEYS[bucket_keys + 1], KEYS[bucket_keys + 2], KEYS[bucket_keys + 3], version_key, settings_key)
if (v[5] or '') ~= version then return {-1, 0} end
local mark_ms = -2
if not hot and v[1] then
  hot = true
  mark_ms = redis.call('PTTL', hot_flag_key)
end
local last = 1
if hot then last = 3 end
local change = string.match(version, '^%d+%-%w+%-(%d+)$') or ''
local tat = {-1, -1, -1}
local moved = {false, false, false}
local reason = 0
for i = 1, last do
  local si = ARGV[lane_args + 2 * i - 1]
  local interval = tonumber(si)
  if interval > 0 then
    local st = ARGV[lane_args + 2 * i]
    local tol = tonumber(st)
    local x = now
    local s = v[i + 1]
    if s then
      local y, m = carry(s, si, st, interval, tol, now, change)
      if y then x, moved[i] = y, m end
      if x < now then x = now end
    end
    tat[i] = x
    if reason == 0 and (n * interval > tol or x + n * interval - now > tol + maxw) then reason = i end
  end
end
local became, share = 0, 0
local w = 0
local cur, c, p
if reason == 0 then
  w = tonumber(window_us)
  if w > 0 then
    local win = math.floor(now / w)
    cur = window_prefix .. string.format('%d', win)
    c = redis.call('HMGET', cur, shop, '')
    p = redis.call('HMGET', window_prefix .. string.format('%d', win - 1), shop, '')
  end
end
-- Every bucket takes the tokens as of the instant the slowest one holds them (now, or a
-- reservation's wake-up): see step_auto_hot.
local take_at = now
if reason == 0 then
  for i = 1, last do
    if tat[i] >= 0 then
      local v = tat[i] + n * tonumber(ARGV[lane_args + 2 * i - 1]) - tonumber(ARGV[lane_args + 2 * i])
      if v > take_at then take_at = v end
    end
  end
end
for i = 1, last do
  if tat[i] >= 0 and (reason == 0 or moved[i]) then
    local si, st = ARGV[lane_args + 2 * i - 1], ARGV[lane_args + 2 * i]
    if reason == 0 then
      if tat[i] < take_at then tat[i] = take_at end
      tat[i] = tat[i] + n * tonumber(si)
    end
    if not peek then redis.call('SET', KEYS[bucket_keys + i], string.format('%d:%s:%s:%s', tat[i], si, st, change), 'PX', math.floor((tat[i] - now) / 1000) + slack_ms) end
  end
end
-- A peek reads the window (it fails where acquire() would) but counts nothing.
if w > 0 and not peek then
  local all0 = tonumber(c[2]) or 0
  local mine = (tonumber(c[1]) or 0) + n
  local all = all0 + n
  redis.call('HSET', cur, shop, mine, '', all)
  if all0 == 0 then redis.call('PEXPIRE', cur, math.floor(2 * w / 1000) + 1000) end
  local f = 1 - (now % w) / w
  mine = mine + (tonumber(p[1]) or 0) * f
  all = all + (tonumber(p[2]) or 0) * f
  share = math.floor(1000 * mine / all)
  if not hot and mine >= tonumber(hot_min_tokens) and mine > tonumber(hot_share) * all then
    redis.call('SET', hot_flag_key, 'auto', 'EX', hot_ttl_s)
    became = 1
  end
end
if not peek and v[6] ~= settings then redis.call('SET', settings_key, settings, 'EX', 86400) end
if hot then hot = 1 else hot = 0 end
return {reason, hot, now, tat[1], tat[2], tat[3], became, share, mark_ms}
