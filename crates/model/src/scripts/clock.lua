local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local slack_ms = 1
