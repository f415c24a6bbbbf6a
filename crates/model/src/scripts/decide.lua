-- One decision, atomically: the Lua twin of step() (step.rs). KEYS/ARGV are built by
-- DecideCall only, and the reply is read by StepReply: see call.rs for the contract.
local n = tonumber(ARGV[1])
local hot = ARGV[2] == '1'
-- peek(): the same decision, nothing written.
local dry = ARGV[16] == '1'
-- A reservation: tokens there within maxw µs are taken now (never more than a full bucket).
local maxw = tonumber(ARGV[17])
local v = redis.call('MGET', KEYS[4], KEYS[1], KEYS[2], KEYS[3], KEYS[5], KEYS[7])
if (v[5] or '') ~= ARGV[9] then return {-1, 0} end
local mark_ms = -2
if not hot and v[1] then
  hot = true
  mark_ms = redis.call('PTTL', KEYS[4])
end
local last = 1
if hot then last = 3 end
local change = string.match(ARGV[9], '^%d+%-%w+%-(%d+)$') or ''
local tat = {-1, -1, -1}
local moved = {false, false, false}
local reason = 0
for i = 1, last do
  local interval = tonumber(ARGV[1 + 2 * i])
  if interval > 0 then
    local tol = tonumber(ARGV[2 + 2 * i])
    local x = now
    local s = v[i + 1]
    if s then
      local y, m = carry(s, ARGV[1 + 2 * i], ARGV[2 + 2 * i], interval, tol, now, change)
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
  w = tonumber(ARGV[11])
  if w > 0 then
    local win = math.floor(now / w)
    cur = KEYS[6] .. string.format('%d', win)
    c = redis.call('HMGET', cur, ARGV[10], '')
    p = redis.call('HMGET', KEYS[6] .. string.format('%d', win - 1), ARGV[10], '')
  end
end
-- Every bucket takes the tokens as of the instant the slowest one holds them (now, or a
-- reservation's wake-up): see step_auto_hot.
local take_at = now
if reason == 0 then
  for i = 1, last do
    if tat[i] >= 0 then
      local v = tat[i] + n * tonumber(ARGV[1 + 2 * i]) - tonumber(ARGV[2 + 2 * i])
      if v > take_at then take_at = v end
    end
  end
end
for i = 1, last do
  if tat[i] >= 0 and (reason == 0 or moved[i]) then
    if reason == 0 then
      if tat[i] < take_at then tat[i] = take_at end
      tat[i] = tat[i] + n * tonumber(ARGV[1 + 2 * i])
    end
    if not dry then redis.call('SET', KEYS[i], string.format('%d:%s:%s:%s', tat[i], ARGV[1 + 2 * i], ARGV[2 + 2 * i], change), 'PX', math.floor((tat[i] - now) / 1000) + slack_ms) end
  end
end
-- A peek reads the window (it fails where acquire() would) but counts nothing.
if w > 0 and not dry then
  local all0 = tonumber(c[2]) or 0
  local mine = (tonumber(c[1]) or 0) + n
  local all = all0 + n
  redis.call('HSET', cur, ARGV[10], mine, '', all)
  if all0 == 0 then redis.call('PEXPIRE', cur, math.floor(2 * w / 1000) + 1000) end
  local f = 1 - (now % w) / w
  mine = mine + (tonumber(p[1]) or 0) * f
  all = all + (tonumber(p[2]) or 0) * f
  share = math.floor(1000 * mine / all)
  if not hot and mine >= tonumber(ARGV[14]) and mine > tonumber(ARGV[12]) * all then
    redis.call('SET', KEYS[4], 'auto', 'EX', ARGV[13])
    became = 1
  end
end
if not dry and v[6] ~= ARGV[15] then redis.call('SET', KEYS[7], ARGV[15], 'EX', 86400) end
if hot then hot = 1 else hot = 0 end
return {reason, hot, now, tat[1], tat[2], tat[3], became, share, mark_ms}
