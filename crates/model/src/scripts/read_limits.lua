local v = redis.pcall('GET', KEYS[2])
if type(v) ~= 'string' then v = '' end
local h = redis.pcall('HGETALL', KEYS[1])
if h.err then return {v, {}, h.err} end
return {v, h, ''}
