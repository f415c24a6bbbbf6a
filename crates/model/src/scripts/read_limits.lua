local v = redis.pcall('GET', version_key)
if type(v) ~= 'string' then v = '' end
local h = redis.pcall('HGETALL', limits_key)
if h.err then return {v, {}, h.err} end
return {v, h, ''}
