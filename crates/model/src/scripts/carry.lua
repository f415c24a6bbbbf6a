-- A stored bucket read under other limits: its level in tokens carried over.
-- The Lua twin of StoredBucket::effective_tat (bucket.rs); contract in call.rs.
local function carry(s, si, st, interval, tol, now, change)
  local a, oi, ot, w = string.match(s, '^(%d+):(%d+):(%d+):?(%d*)$')
  if not a then return tonumber(s), false end
  local x = tonumber(a)
  if oi == si and ot == st then return x, false end
  local c = now
  if change ~= '' and w ~= change then
    c = tonumber(change)
    if c > now then c = now end
  end
  local credit = tonumber(ot) - (x - c)
  if credit > tonumber(ot) then credit = tonumber(ot) end
  credit = math.floor(credit / tonumber(oi) * interval)
  if credit > tol then credit = tol end
  return c + tol - credit, true
end
