local now = tonumber(test_now_us)
local slack_ms = 3600000
