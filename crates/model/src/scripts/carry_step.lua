-- The inputs are locals named by cmd/carry_step.rs's table (the prelude before this file):
-- lane i's interval is ARGV[lane_args + 2 * i - 1], its tolerance the next.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local change = string.match(version, '^%d+%-%w+%-(%d+)$') or ''
local r = redis.call('SCAN', cursor, 'MATCH', pattern, 'COUNT', 1000)
local carried = 0
for _, k in ipairs(r[2]) do
  local i = 3
  if k == global_key then i = 1 elseif k == hot_lane_key then i = 2 end
  local si, st = ARGV[lane_args + 2 * i - 1], ARGV[lane_args + 2 * i]
  local interval = tonumber(si)
  local s = redis.pcall('GET', k)
  if interval > 0 and type(s) == 'string' then
    local x, moved = carry(s, si, st, interval, tonumber(st), now, change)
    if moved then
      if x <= now then redis.call('DEL', k)
      else redis.call('SET', k, string.format('%d:%s:%s:%s', x, si, st, change), 'PX', math.floor((x - now) / 1000) + 1) end
      carried = carried + 1
    end
  end
end
return {r[1], carried}
