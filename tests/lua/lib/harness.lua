-- The output harness every tests/lua script loads first: everything printed goes
-- through emit(), which folds each byte into a 64-bit FNV-1a checksum that
-- finish() prints last. Scripts must never print table/function/thread values
-- (addresses), pairs() order, collectgarbage("count"), times or unseeded random
-- numbers. Returns finish and sortedkeys; print and printf become globals.
local H = 0xcbf29ce484222325
local byte, write = string.byte, io.write
local function emit(s)
  local h = H
  for i = 1, #s do h = (h ~ byte(s, i)) * 0x100000001b3 end
  H = h
  write(s)
end
function print(...)
  local n, t = select("#", ...), { ... }
  for i = 1, n do t[i] = tostring(t[i]) end
  emit(table.concat(t, "\t", 1, n) .. "\n")
end
function printf(fmt, ...) emit(string.format(fmt, ...)) end
local function finish() write(string.format("checksum %016x\n", H)) end
-- keys of t in a total order (numbers < strings < booleans, then by value)
local function sortedkeys(t)
  local ks, rank = {}, { number = 1, string = 2, boolean = 3 }
  for k in pairs(t) do ks[#ks + 1] = k end
  table.sort(ks, function(a, b)
    local ta, tb = rank[type(a)] or 9, rank[type(b)] or 9
    if ta ~= tb then return ta < tb end
    if ta == 3 then return (a and 1 or 0) < (b and 1 or 0) end
    return a < b
  end)
  return ks
end
return finish, sortedkeys
