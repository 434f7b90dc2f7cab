local finish, sortedkeys = dofile((arg[0]:gsub("[^/]*$", "")) .. "lib/harness.lua")
-- tables.lua: the table library, large arrays and hashes, next/pairs, # and sorting
print("== constructors and length")
local t = { 10, 20, 30, nil, 50 }
print(#{ 1, 2, 3 }, #{}, select("#", table.unpack({ 1, 2, 3 })), #"abc", t[5], t[4])
local p = table.pack(1, nil, 3, nil)
print(p.n, p[1], p[2], p[3], p[4])
print(table.unpack({ 1, 2, 3, 4, 5 }, 2, 4))
print(table.unpack({ 1, 2, 3 }, -1, 1))
print(select(-1, 1, 2, 3), select(2, "a", "b", "c"))
print(pcall(select, 0, 1))
local mixed = { 1, 2, 3, x = "x", y = "y", [10] = 10, [1.5] = "f", [true] = "t", [-1] = "neg" }
local ks = sortedkeys(mixed)
for i, k in ipairs(ks) do ks[i] = tostring(k) .. "=" .. tostring(mixed[k]) end
print(table.concat(ks, " "))
print(mixed[1.0], mixed[2^53] == nil, mixed[3.0], math.type(next({ [2.0] = 1 })))

print("== insert / remove / move / concat")
local a = {}
for i = 1, 10 do table.insert(a, i) end
table.insert(a, 1, 0)
table.insert(a, 6, 55)
print(#a, table.concat(a, ","))
print(table.remove(a), table.remove(a, 1), table.remove(a, 5), #a, table.concat(a, ","))
print(table.remove({}), table.remove({}, 0), #a)
print(pcall(table.insert, a, 100, 1))
print(pcall(table.insert, a, 1, 2, 3))
local b = table.move(a, 2, 5, 1)
print(table.concat(b, ","))
local c = table.move({ 1, 2, 3 }, 1, 3, 3, { "a", "b" })
print(table.concat(c, ","))
print(table.concat(table.move({ 1, 2, 3, 4, 5 }, 1, 5, 2), ","))
print(table.concat({}, "x"), table.concat({ 1 }, "x"), table.concat({ 1, 2.5, "s" }, ", ", 2, 3))
print(pcall(table.concat, { 1, {}, 3 }))
print(table.concat({ "a", "b", "c", "d" }, "-", 3), table.concat({ "a", "b" }, "-", 3))

print("== sort")
local nums = {}
local seed = 12345
local function rnd(n)
  seed = (seed * 1103515245 + 12345) % 2147483648
  return seed % n
end
for i = 1, 2000 do nums[i] = rnd(1000) end
table.sort(nums)
local okS = true
for i = 2, #nums do okS = okS and nums[i - 1] <= nums[i] end
print("sorted", okS, nums[1], nums[500], nums[1000], nums[2000])
table.sort(nums, function(x, y) return x > y end)
print("desc", nums[1], nums[2], nums[1999], nums[2000])
local recs = {}
for i = 1, 500 do recs[i] = { id = i, key = rnd(20), name = "n" .. rnd(100) } end
table.sort(recs, function(x, y)
  if x.key ~= y.key then return x.key < y.key end
  if x.name ~= y.name then return x.name < y.name end
  return x.id < y.id
end)
local out = {}
for i = 1, 500, 25 do out[#out + 1] = recs[i].key .. "/" .. recs[i].name .. "/" .. recs[i].id end
print(table.concat(out, " "))
local ws = { "pear", "Apple", "fig", "banana", "cherry", "apple", "Fig", "date" }
table.sort(ws)
print(table.concat(ws, " "))
table.sort(ws, function(x, y)
  local lx, ly = x:lower(), y:lower()
  if lx ~= ly then return lx < ly end
  return x < y
end)
print(table.concat(ws, " "))
table.sort(ws, function(x, y) if #x ~= #y then return #x < #y end return x < y end)
print(table.concat(ws, " "))
print(pcall(table.sort, { 3, 1, "x" }))
print(pcall(table.sort, { 1, 2, 3 }, function(x, y) return true end))
local floats = { 3.5, -1, 2, 1e10, -1e-3, 0, math.huge, -math.huge, 7 // 2, 2^0.5 }
table.sort(floats)
for i, v in ipairs(floats) do floats[i] = string.format("%.4g", v) end
print(table.concat(floats, " "))

print("== large arrays")
local big = {}
for i = 1, 200000 do big[i] = i * 2 end
local s = 0
for i = 1, #big do s = s + big[i] end
print(#big, s, big[100000])
for i = 1, 100000 do big[#big] = nil end
print(#big, big[#big])
local sq = {}
for i = 1, 1000 do sq[#sq + 1] = i * i end
local s2 = 0
for _, v in ipairs(sq) do s2 = s2 + v end
print(#sq, s2)
-- sparse / holes via table.move and nil fills
local holes = {}
for i = 1, 100 do holes[i] = i end
for i = 1, 100, 2 do holes[i] = nil end
local cnt = 0
for _ in pairs(holes) do cnt = cnt + 1 end
print("holes", cnt, holes[2], holes[3])
-- 2D matrix
local N = 60
local m = {}
for i = 1, N do
  m[i] = {}
  for j = 1, N do m[i][j] = (i * j) % 7 end
end
local m2 = {}
for i = 1, N do
  m2[i] = {}
  for j = 1, N do
    local acc = 0
    for k = 1, N do acc = acc + m[i][k] * m[k][j] end
    m2[i][j] = acc
  end
end
local tr = 0
for i = 1, N do tr = tr + m2[i][i] end
print("matrix trace", tr, m2[1][1], m2[N][N], m2[17][33])

print("== large hashes")
local h = {}
for i = 1, 50000 do h["k" .. i] = i end
for i = 1, 50000, 3 do h["k" .. i] = nil end
local n, sum = 0, 0
for k, v in pairs(h) do n = n + 1; sum = sum + v end
print(n, sum, h.k2, h.k4, h.k50000)
local nx, k = 0, next(h)
while k do nx = nx + 1; k = next(h, k) end
print("next count", nx)
-- keys of many types
local keyed = {}
for i = 1, 1000 do
  keyed[i] = "int" .. i
  keyed[i + 0.5] = "float" .. i
  keyed["s" .. i] = i
end
keyed[true], keyed[false] = "T", "F"
local tk = { number = 0, string = 0, boolean = 0 }
for kk in pairs(keyed) do tk[type(kk)] = tk[type(kk)] + 1 end
print(tk.number, tk.string, tk.boolean, keyed[500], keyed[500.5], keyed.s500, keyed[true], keyed[false])
local sk = sortedkeys(keyed)
print(#sk, tostring(sk[1]), tostring(sk[2]), tostring(sk[2000]), tostring(sk[2001]), tostring(sk[#sk]))
-- rehash churn: insert and delete repeatedly
local churn = {}
for round = 1, 20 do
  for i = 1, 1000 do churn[round * 10000 + i] = i end
  for i = 1, 1000, 2 do churn[round * 10000 + i] = nil end
end
local cc = 0
for _ in pairs(churn) do cc = cc + 1 end
print("churn", cc)
-- table as set / word frequency
local text = ("the quick brown fox jumps over the lazy dog and the dog sleeps while the fox runs "):rep(50)
local freq = {}
for w in text:gmatch("%a+") do freq[w] = (freq[w] or 0) + 1 end
local fk = sortedkeys(freq)
for i, w in ipairs(fk) do fk[i] = w .. ":" .. freq[w] end
print(table.concat(fk, " "))
-- modification during traversal (assigning existing fields / clearing is allowed)
local mod = {}
for i = 1, 100 do mod[i] = i; mod["x" .. i] = i end
for kk, v in pairs(mod) do
  if type(kk) == "string" then mod[kk] = nil else mod[kk] = v * 2 end
end
local ms = 0
for _, v in pairs(mod) do ms = ms + v end
print("mod", ms, mod.x1)
print(pcall(next, {}, "nope"))

print("== integer / float keys, # border")
local fk2 = {}
fk2[1] = "a"; fk2[2.0] = "b"; fk2[3] = "c"
print(#fk2, fk2[2], math.type(sortedkeys(fk2)[2]))
local border = { 1, 2, 3 }
border[5] = 5
print(#border == 3 or #border == 5)
local nan = 0 / 0
print(pcall(function() local x = {}; x[nan] = 1 end))
print(pcall(function() local x = {}; x[nil] = 1 end))
print(({})[nan], ({})[nil])

print("== table functions with metamethods")
local proxy = setmetatable({}, {
  __index = function(_, i) if i <= 5 then return i * 10 end end,
  __len = function() return 5 end,
})
print(table.concat(proxy, ","), table.unpack(proxy))
local log = {}
local logged = setmetatable({}, { __newindex = function(tt, kk, v) log[#log + 1] = kk; rawset(tt, kk, v) end })
table.insert(logged, "a"); table.insert(logged, "b")
print(#log, table.concat(log, ","), rawlen(logged), rawget(logged, 1), rawequal(logged, logged))
finish()
