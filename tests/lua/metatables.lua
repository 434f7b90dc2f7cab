local finish, sortedkeys = dofile((arg[0]:gsub("[^/]*$", "")) .. "lib/harness.lua")
-- metatables.lua: metamethods, inheritance, proxies, __close, __gc, weak tables
print("== arithmetic metamethods: a vector class")
local V = {}
V.__index = V
local function vec(x, y) return setmetatable({ x = x, y = y }, V) end
V.__add = function(a, b) return vec(a.x + b.x, a.y + b.y) end
V.__sub = function(a, b) return vec(a.x - b.x, a.y - b.y) end
V.__mul = function(a, b)
  if type(a) == "number" then return vec(a * b.x, a * b.y) end
  if type(b) == "number" then return vec(a.x * b, a.y * b) end
  return a.x * b.x + a.y * b.y
end
V.__div = function(a, s) return vec(a.x / s, a.y / s) end
V.__mod = function(a, s) return vec(a.x % s, a.y % s) end
V.__pow = function(a, n) return vec(a.x ^ n, a.y ^ n) end
V.__unm = function(a) return vec(-a.x, -a.y) end
V.__idiv = function(a, s) return vec(a.x // s, a.y // s) end
V.__band = function(a, b) return vec(a.x & b.x, a.y & b.y) end
V.__bor = function(a, b) return vec(a.x | b.x, a.y | b.y) end
V.__bxor = function(a, b) return vec(a.x ~ b.x, a.y ~ b.y) end
V.__shl = function(a, n) return vec(a.x << n, a.y << n) end
V.__shr = function(a, n) return vec(a.x >> n, a.y >> n) end
V.__bnot = function(a) return vec(~a.x, ~a.y) end
V.__eq = function(a, b) return a.x == b.x and a.y == b.y end
V.__lt = function(a, b) return a.x * a.x + a.y * a.y < b.x * b.x + b.y * b.y end
V.__le = function(a, b) return a.x * a.x + a.y * a.y <= b.x * b.x + b.y * b.y end
V.__len = function(a) return math.sqrt(a.x * a.x + a.y * a.y) end
V.__tostring = function(a) return string.format("(%g,%g)", a.x, a.y) end
V.__concat = function(a, b) return tostring(a) .. tostring(b) end
V.__call = function(self, k) return self[k] end
V.__name = "Vec"
local a, b = vec(3, 4), vec(1, 2)
print(tostring(a + b), tostring(a - b), a * b, tostring(2 * a), tostring(a * 3), tostring(a / 2))
print(tostring(a % 2), tostring(a ^ 2), tostring(-a), tostring(a // 2), #a)
print(tostring(a & b), tostring(a | b), tostring(a ~ b), tostring(a << 2), tostring(a >> 1), tostring(~a))
print(a == vec(3, 4), a ~= b, a == b, b < a, a <= a, a > b, b >= a, rawequal(a, vec(3, 4)))
print(a .. b, a .. "!", "?" .. b, 1 .. a)
print(a("x"), a("y"), a.missing)
print(pcall(function() return a < 1 end))
print(pcall(function() return {} < {} end))
print(pcall(function() return a + nil end))
print(select(2, pcall(function() local t = setmetatable({}, { __name = "MyType" }); return t + 1 end)))

print("== __index / __newindex chains and inheritance")
local Animal = {}
Animal.__index = Animal
function Animal.new(name, sound) return setmetatable({ name = name, sound = sound }, Animal) end
function Animal:speak() return self.name .. " says " .. self.sound end
function Animal:kind() return "animal" end
local Dog = setmetatable({}, { __index = Animal })
Dog.__index = Dog
function Dog.new(name) local d = Animal.new(name, "woof"); return setmetatable(d, Dog) end
function Dog:kind() return "dog" end
function Dog:fetch() return self.name .. " fetches" end
local Puppy = setmetatable({}, { __index = Dog })
Puppy.__index = Puppy
function Puppy.new(name) return setmetatable(Dog.new(name), Puppy) end
function Puppy:kind() return "puppy (" .. Dog.kind(self) .. ")" end
local an, d, p = Animal.new("cat", "meow"), Dog.new("rex"), Puppy.new("bit")
print(an:speak(), an:kind(), d:speak(), d:kind(), d:fetch())
print(p:speak(), p:kind(), p:fetch(), getmetatable(p) == Puppy, rawget(p, "speak"))
local defaults = setmetatable({}, { __index = function(t, k) return k .. "?" end })
print(defaults.foo, defaults[1], rawget(defaults, "foo"))
local log = {}
local ro = setmetatable({}, {
  __index = { a = 1, b = 2 },
  __newindex = function(t, k, v) log[#log + 1] = tostring(k) .. "=" .. tostring(v) end,
})
ro.c = 3; ro.a = 10; ro[1] = "one"
print(ro.a, ro.b, ro.c, table.concat(log, ","), rawget(ro, "a"))
local store = {}
local redirect = setmetatable({}, { __newindex = store, __index = store })
redirect.k = "v"
print(rawget(redirect, "k"), store.k, redirect.k)
-- __index chain depth
local base = { deep = "found" }
local cur = base
for i = 1, 50 do cur = setmetatable({}, { __index = cur }) end
print(cur.deep, cur.nothing)
local loopmt = {}
loopmt.__index = setmetatable({}, loopmt)
print(pcall(function() return setmetatable({}, loopmt).x end))
-- proxy that counts accesses
local function track(t)
  local reads, writes = 0, 0
  local proxy = setmetatable({}, {
    __index = function(_, k) reads = reads + 1; return t[k] end,
    __newindex = function(_, k, v) writes = writes + 1; t[k] = v end,
    __len = function() return #t end,
    __pairs = function() return next, t, nil end,
  })
  return proxy, function() return reads, writes end
end
local tp, stats = track({})
for i = 1, 10 do tp[i] = i * i end
local s = 0
for i = 1, #tp do s = s + tp[i] end
local pc = 0
for _ in pairs(tp) do pc = pc + 1 end
print(s, pc, stats())

print("== __call, __tostring, __name, __metatable")
local callable = setmetatable({}, { __call = function(self, a, b, ...) return a + b, select("#", ...) end })
print(callable(1, 2, 3, 4, 5))
local prot = setmetatable({}, { __metatable = "locked", __tostring = function() return "PROT" end })
print(getmetatable(prot), tostring(prot), pcall(setmetatable, prot, {}))
print(getmetatable("abc").__index == string, ("x"):rep(3), #getmetatable("").__index.format("%5s", ""))
local named = setmetatable({}, { __name = "Thing" })
print((tostring(named):gsub("0x%x+", "ADDR"):gsub(": [%x]+$", ": ADDR")))
print(pcall(setmetatable, {}, 1))
print(pcall(setmetatable, 1, {}))
print(select(2, pcall(function() local x = setmetatable({}, { __index = function(t, k) error("no field " .. k) end }); return x.abc end)))

print("== __close")
local order = {}
local function closer(name)
  return setmetatable({}, { __close = function(_, err) order[#order + 1] = name .. (err and ("!" .. tostring(err):gsub("^.-:%d+: ", "")) or "") end })
end
do
  local x <close> = closer("x")
  local y <close> = closer("y")
  local z <const> = 42
  order[#order + 1] = "body" .. z
end
print(table.concat(order, " "))
order = {}
print(pcall(function()
  local a1 <close> = closer("a1")
  local a2 <close> = closer("a2")
  error("oops")
end))
print(table.concat(order, " "))
order = {}
local function early(n)
  local c <close> = closer("early" .. n)
  if n > 0 then return "returned " .. n end
  order[#order + 1] = "fallthrough"
end
print(early(1), early(0), table.concat(order, " "))
order = {}
for i = 1, 3 do
  local c <close> = closer("loop" .. i)
  if i == 2 then goto skip end
  order[#order + 1] = "work" .. i
  ::skip::
end
print(table.concat(order, " "))
order = {}
local function iter()
  local i = 0
  return function() i = i + 1; if i <= 3 then return i end end, nil, nil, closer("forclose")
end
for i in iter() do order[#order + 1] = "i" .. i; if i == 2 then break end end
print(table.concat(order, " "))
print(pcall(function() local bad <close> = 42 end))
print(pcall(function() local fine <close> = nil; local f2 <close> = false; return "nil/false ok" end))
print(load("local x <const> = 1; x = 2"))
print(load("local x <foo> = 1"))
order = {}
print(pcall(function()
  local c1 <close> = setmetatable({}, { __close = function() order[#order + 1] = "c1"; error("c1 err", 0) end })
  local c2 <close> = setmetatable({}, { __close = function() order[#order + 1] = "c2"; error("c2 err", 0) end })
  return "never"
end))
print(table.concat(order, " "))

print("== __gc and weak tables")
collectgarbage()
collectgarbage()
local finalized = {}
do
  for i = 1, 10 do
    setmetatable({ id = i }, { __gc = function(o) finalized[#finalized + 1] = o.id end })
  end
end
collectgarbage()
collectgarbage()
table.sort(finalized)
print("finalized", #finalized, table.concat(finalized, ","))
-- finalizer order is the reverse of marking: check the count only, and resurrection
local resurrected
do
  setmetatable({ tag = "phoenix" }, { __gc = function(o) resurrected = o end })
end
collectgarbage(); collectgarbage()
print("resurrected", resurrected and resurrected.tag)
resurrected = nil
collectgarbage()
-- __gc set after setmetatable is not registered
local late = 0
do
  local mt = {}
  setmetatable({}, mt)
  mt.__gc = function() late = late + 1 end
end
collectgarbage(); collectgarbage()
print("late __gc calls", late)
-- weak-valued cache
local cache = setmetatable({}, { __mode = "v" })
local keep = {}
for i = 1, 100 do
  local obj = { i }
  cache[i] = obj
  if i % 10 == 0 then keep[#keep + 1] = obj end
end
collectgarbage(); collectgarbage()
local alive = 0
for _ in pairs(cache) do alive = alive + 1 end
print("weak values alive", alive, #keep)
-- weak keys (ephemeron)
local eph = setmetatable({}, { __mode = "k" })
local held = {}
for i = 1, 50 do
  local k = {}
  eph[k] = { ref = k, n = i }  -- value refers to key: still collectable (ephemeron)
  if i <= 5 then held[i] = k end
end
eph["strkey"] = "strings are not collected"
collectgarbage(); collectgarbage()
local ek, es = 0, 0
for k, v in pairs(eph) do if type(k) == "table" then ek = ek + 1; es = es + v.n end end
print("ephemeron alive", ek, es, eph.strkey)
-- fully weak
local kv = setmetatable({}, { __mode = "kv" })
kv[1] = {}; kv[{}] = 1; kv.x = "str"; kv[2] = 42
collectgarbage()
local kvn = 0
for _ in pairs(kv) do kvn = kvn + 1 end
print("kv weak", kvn, kv.x, kv[2])
-- objects with finalizers are collected in a later cycle than plain ones
local gcount = 0
local gcmt = { __gc = function() gcount = gcount + 1 end }
for round = 1, 5 do
  for i = 1, 200 do setmetatable({}, gcmt) end
  collectgarbage()
end
collectgarbage()
print("gc count", gcount)
print(collectgarbage("isrunning"), collectgarbage("stop"), collectgarbage("isrunning"), collectgarbage("restart"), collectgarbage("isrunning"))
print(collectgarbage("incremental"), collectgarbage("generational"), collectgarbage("generational"), collectgarbage("incremental"))
print(type(collectgarbage("step")), collectgarbage("setpause", 200), collectgarbage("setstepmul", 100))
-- generational mode with churn
collectgarbage("generational")
local survivors = {}
for i = 1, 30000 do
  local t = { i, tostring(i) }
  if i % 1000 == 0 then survivors[#survivors + 1] = t end
end
collectgarbage("incremental")
collectgarbage()
print("survivors", #survivors, survivors[30][2])
-- __gc errors are warnings, not errors
warn("@off")
do setmetatable({}, { __gc = function() error("gc error ignored") end }) end
collectgarbage()
print("after gc error")
-- finalizer that runs at close of state: prints at exit (after checksum line)
finish()
setmetatable({}, { __gc = function() io.write("finalizer at exit\n") end })
