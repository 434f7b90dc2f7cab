-- fannkuch-redux (Benchmarks Game algorithm): checksum and max flips over all
-- permutations of 1..N. Usage: lua fannkuch.lua [N]   (default 9)
-- check-size: 7  (the small size scripts/check-lua.sh runs)
local n = tonumber(arg and arg[1]) or 9

local function fannkuch(n)
  local perm, perm1, count = {}, {}, {}
  for i = 0, n - 1 do perm1[i] = i end
  local maxflips, checksum, permcount = 0, 0, 0
  local r = n
  while true do
    while r ~= 1 do count[r - 1] = r; r = r - 1 end
    for i = 0, n - 1 do perm[i] = perm1[i] end
    local flips = 0
    local k = perm[0]
    while k ~= 0 do
      local i, j = 0, k
      while i < j do perm[i], perm[j] = perm[j], perm[i]; i = i + 1; j = j - 1 end
      flips = flips + 1
      k = perm[0]
    end
    if flips > maxflips then maxflips = flips end
    if permcount % 2 == 0 then checksum = checksum + flips else checksum = checksum - flips end
    -- next permutation
    while true do
      if r == n then return checksum, maxflips, permcount + 1 end
      local p0 = perm1[0]
      for i = 0, r - 1 do perm1[i] = perm1[i + 1] end
      perm1[r] = p0
      count[r] = count[r] - 1
      if count[r] > 0 then break end
      r = r + 1
    end
    permcount = permcount + 1
  end
end

local checksum, flips, perms = fannkuch(n)
print(string.format("%d\nPfannkuchen(%d) = %d\npermutations %d", checksum, n, flips, perms))
