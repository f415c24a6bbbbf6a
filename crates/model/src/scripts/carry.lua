-- A stored bucket read under other limits: its level in tokens carried over.
-- The Lua twin of StoredBucket::effective_tat (bucket.rs); contract in cmd/decide.rs.
-- A value this project does not write (another library's, a hand edit: see
-- StoredBucket::read_like_the_script) reads as nil: a missing key, a full bucket.
local function carry(s, si, st, interval, tol, now, change)
  local big = 9007199254740991
  local a, oi, ot, w = string.match(s, '^(%d+):(%d+):(%d+):?(%d*)$')
  if not a then
    a = string.match(s, '^%d+$')
    if a and tonumber(a) <= big then return tonumber(a), false end
    return nil, false
  end
  -- Written under these very limits (the common case): no carry, two tonumber() fewer;
  -- the checks below, as they fall when oi, ot read as interval, tol.
  if oi == si and ot == st then
    local x = tonumber(a)
    if x > big or interval > big or tol > big or interval < 1 or (w ~= '' and tonumber(w) > big) then return nil, false end
    return x, false
  end
  local x, i, o = tonumber(a), tonumber(oi), tonumber(ot)
  if x > big or i > big or o > big or i < 1 or (w ~= '' and tonumber(w) > big) then return nil, false end
  if i == interval and o == tol then return x, false end
  local c = now
  if change ~= '' and (w == '' or tonumber(w) ~= tonumber(change)) then
    c = tonumber(change)
    if c > now then c = now end
  end
  local credit = o - (x - c)
  if credit > o then credit = o end
  credit = math.floor(credit / i * interval)
  if credit > tol then credit = tol end
  -- Clamped to 2^53 - 1 (MAX_STORED_NUMBER), as effective_tat: a readable value far
  -- ahead can carry over beyond it (~1e24), which %d and PX cannot take.
  local x = c + tol - credit
  if x > big then x = big end
  return x, true
end
