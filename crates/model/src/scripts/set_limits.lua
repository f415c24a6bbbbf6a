-- The inputs are locals named by cmd/set_limits.rs's table (the prelude before this file).
local cur = redis.pcall('GET', version_key)
if type(cur) ~= 'string' then cur = '' end
if cur ~= expected then
  return redis.error_reply('live limits changed meanwhile (now version ' .. cur .. '): read them again')
end
local n = tonumber(string.match(cur, '^%d+') or '0') + 1
local epoch = string.match(cur, '^%d+%-(%w+)') or epoch
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local change = t[1] .. string.format('%06d', tonumber(t[2]))
local v = n .. '-' .. epoch .. '-' .. change
-- The carried buckets first, written only after the limits: nothing below can fail
-- half-way (carry() clamps its TAT to 2^53 - 1, so %d and PX stay in range).
local sets = {}
for j = 0, 1 do
  local oi, ot = ARGV[old_lanes + 2 * j + 1], ARGV[old_lanes + 2 * j + 2]
  local ni, nt = ARGV[new_lanes + 2 * j + 1], ARGV[new_lanes + 2 * j + 2]
  if tonumber(ni) > 0 then
    local s = redis.pcall('GET', KEYS[bucket_keys + j + 1])
    local x, moved
    if type(s) == 'string' then x, moved = carry(s, ni, nt, tonumber(ni), tonumber(nt), now, change) end
    -- Missing, another type or a value no engine reads: full at the old limits.
    if not x and tonumber(oi) > 0 then
      x, moved = carry(string.format('%d:%s:%s:', now, oi, ot), ni, nt, tonumber(ni), tonumber(nt), now, change)
    end
    if x and moved then
      if x > now then
        sets[#sets + 1] = {KEYS[bucket_keys + j + 1], string.format('%d:%s:%s:%s', x, ni, nt, change), math.floor((x - now) / 1000) + 1}
      else
        sets[#sets + 1] = {KEYS[bucket_keys + j + 1]}
      end
    end
  end
end
redis.call('DEL', limits_key, version_key)
for i = overrides + 1, #ARGV, 2 do redis.call('HSET', limits_key, ARGV[i], ARGV[i + 1]) end
redis.call('HSET', limits_key, 'by', by, 'at', at)
redis.call('SET', version_key, v)
redis.call('XADD', changes_key, 'MAXLEN', '~', 1000, '*', 'version', n, 'by', by, 'at', at, 'old', old, 'new', new)
for _, w in ipairs(sets) do
  if w[2] then redis.call('SET', w[1], w[2], 'PX', w[3]) else redis.call('DEL', w[1]) end
end
return v
