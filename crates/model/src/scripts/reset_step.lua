local r = redis.call('SCAN', cursor, 'MATCH', pattern, 'COUNT', 1000)
if #r[2] > 0 then redis.call('UNLINK', unpack(r[2])) end
return {r[1], #r[2]}
