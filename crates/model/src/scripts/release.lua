-- The end of an in-flight lease, atomically: the Lua twin of server::release_on. KEYS/ARGV:
-- cmd/release.rs, read by name (the prelude before this file). Reply: {outcome, now}
-- (ReleaseOutcome: 0 not held, 1 released, 2 expired). Every set is read before any write.
local found = {}
local expiry
for i = 1, 3 do
  local s = redis.call('ZSCORE', KEYS[lease_keys + i], lease_id)
  if s then
    found[i] = true
    if not expiry then expiry = tonumber(s) end
  end
end
for i = 1, 3 do
  if found[i] then redis.call('ZREM', KEYS[lease_keys + i], lease_id) end
end
if not expiry then return {0, now} end
if expiry <= now then
  -- Counted once a lease: gone from the global set (where every lease is) but left in a
  -- hot level's, a decision removed it there and counted it.
  if found[1] then redis.call('HINCRBY', lease_stats_key, 'expired', 1) end
  return {2, now}
end
redis.call('HINCRBY', lease_stats_key, 'released', 1)
local hold = now - (expiry - lease_us)
if hold < 0 then hold = 0 end
redis.call('HINCRBY', lease_stats_key, 'hold_us', string.format('%d', hold))
if leaked == '1' then redis.call('HINCRBY', lease_stats_key, 'leaked', 1) end
return {1, now}
