local r = redis.call('SCAN', cursor, 'MATCH', pattern, 'COUNT', 1000)
local out = {r[1]}
for _, k in ipairs(r[2]) do
  out[#out + 1] = k
  out[#out + 1] = redis.call('GET', k) or ''
  out[#out + 1] = redis.call('PTTL', k)
end
return out
