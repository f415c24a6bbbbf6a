local cur = redis.pcall('GET', KEYS[2])
if type(cur) ~= 'string' then cur = '' end
if cur ~= ARGV[1] then
  return redis.error_reply('live limits changed meanwhile (now version ' .. cur .. '): read them again')
end
local n = tonumber(string.match(cur, '^%d+') or '0') + 1
local epoch = string.match(cur, '^%d+%-(%w+)') or ARGV[6]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local change = t[1] .. string.format('%06d', tonumber(t[2]))
local v = n .. '-' .. epoch .. '-' .. change
-- The carried buckets first, written only after the limits: nothing below can fail
-- half-way (carry() clamps its TAT to 2^53 - 1, so %d and PX stay in range).
local sets = {}
for j = 0, 1 do
  local oi, ot, ni, nt = ARGV[7 + 2 * j], ARGV[8 + 2 * j], ARGV[11 + 2 * j], ARGV[12 + 2 * j]
  if tonumber(ni) > 0 then
    local s = redis.pcall('GET', KEYS[4 + j])
    local x, moved
    if type(s) == 'string' then x, moved = carry(s, ni, nt, tonumber(ni), tonumber(nt), now, change) end
    -- Missing, another type or a value no engine reads: full at the old limits.
    if not x and tonumber(oi) > 0 then
      x, moved = carry(string.format('%d:%s:%s:', now, oi, ot), ni, nt, tonumber(ni), tonumber(nt), now, change)
    end
    if x and moved then
      if x > now then
        sets[#sets + 1] = {KEYS[4 + j], string.format('%d:%s:%s:%s', x, ni, nt, change), math.floor((x - now) / 1000) + 1}
      else
        sets[#sets + 1] = {KEYS[4 + j]}
      end
    end
  end
end
redis.call('DEL', KEYS[1], KEYS[2])
for i = 15, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('HSET', KEYS[1], 'by', ARGV[2], 'at', ARGV[3])
redis.call('SET', KEYS[2], v)
redis.call('XADD', KEYS[3], 'MAXLEN', '~', 1000, '*', 'version', n, 'by', ARGV[2], 'at', ARGV[3], 'old', ARGV[4], 'new', ARGV[5])
for _, w in ipairs(sets) do
  if w[2] then redis.call('SET', w[1], w[2], 'PX', w[3]) else redis.call('DEL', w[1]) end
end
return v
