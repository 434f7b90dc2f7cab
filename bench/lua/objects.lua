-- objects.lua: object-style Lua, the parts of the interpreter the other benchmarks leave
-- cold: metatables (__index chains, __add/__eq/__lt/__le/__len/__call/__tostring/__concat),
-- closures and upvalues, varargs and select, coroutines (generators, a producer/consumer
-- pipeline), table.sort with a Lua comparator, table.insert/remove/move/unpack, pcall/error
-- with tables as errors, string.format and integer/float conversions, goto, integer division
-- and bitwise operators. Deterministic: no os.time, no iteration over pairs() in output order.
-- Usage: lua objects.lua [N]   (default 20000)
-- check-size: 500  (the small size scripts/check-lua.sh runs)
local N = tonumber(arg and arg[1]) or 20000

-- 1. a small class hierarchy with inheritance through __index chains
local Shape = {}
Shape.__index = Shape
function Shape.new(kind) return setmetatable({ kind = kind }, Shape) end
function Shape:area() return 0 end
function Shape:describe() return string.format("%s(%.3f)", self.kind, self:area()) end
Shape.__tostring = function(s) return s:describe() end
Shape.__lt = function(a, b) return a:area() < b:area() end
Shape.__le = function(a, b) return a:area() <= b:area() end
Shape.__eq = function(a, b) return a.kind == b.kind and a:area() == b:area() end

local Rect = setmetatable({}, { __index = Shape })
Rect.__index = Rect
Rect.__tostring, Rect.__lt, Rect.__le, Rect.__eq = Shape.__tostring, Shape.__lt, Shape.__le, Shape.__eq
function Rect.new(w, h)
  local r = Shape.new("rect")
  r.w, r.h = w, h
  return setmetatable(r, Rect)
end
function Rect:area() return self.w * self.h end

local Square = setmetatable({}, { __index = Rect })
Square.__index = Square
Square.__tostring, Square.__lt, Square.__le, Square.__eq = Shape.__tostring, Shape.__lt, Shape.__le, Shape.__eq
function Square.new(s)
  local q = Rect.new(s, s)
  q.kind = "square"
  return setmetatable(q, Square)
end

local Circle = setmetatable({}, { __index = Shape })
Circle.__index = Circle
Circle.__tostring, Circle.__lt, Circle.__le, Circle.__eq = Shape.__tostring, Shape.__lt, Shape.__le, Shape.__eq
function Circle.new(r)
  local c = Shape.new("circle")
  c.r = r
  return setmetatable(c, Circle)
end
function Circle:area() return 3.0 * self.r * self.r end -- a rational "pi": exact, portable output

local seed = 12345
local function rnd(n) -- LCG, integers only
  seed = (seed * 1103515245 + 12345) % 2147483648
  return seed % n + 1
end

local shapes = {}
for i = 1, N do
  local k = rnd(3)
  if k == 1 then shapes[i] = Rect.new(rnd(20), rnd(20))
  elseif k == 2 then shapes[i] = Square.new(rnd(15))
  else shapes[i] = Circle.new(rnd(10)) end
end
table.sort(shapes, function(a, b)
  if a:area() ~= b:area() then return a < b end
  return a.kind < b.kind
end)
local total, equal = 0, 0
for i = 1, #shapes do
  total = total + shapes[i]:area()
  if i > 1 and shapes[i] == shapes[i - 1] then equal = equal + 1 end
end
print(string.format("shapes %d  total area %.1f  equal neighbours %d", #shapes, total, equal))
print("smallest " .. tostring(shapes[1]) .. "  largest " .. tostring(shapes[#shapes]))
local le = 0
for i = 2, #shapes do if shapes[i - 1] <= shapes[i] then le = le + 1 end end
print("ordered pairs", le)

-- 2. a vector type with arithmetic metamethods
local Vec = {}
Vec.__index = Vec
local function vec(x, y) return setmetatable({ x = x, y = y }, Vec) end
Vec.__add = function(a, b) return vec(a.x + b.x, a.y + b.y) end
Vec.__sub = function(a, b) return vec(a.x - b.x, a.y - b.y) end
Vec.__mul = function(a, k) return vec(a.x * k, a.y * k) end
Vec.__unm = function(a) return vec(-a.x, -a.y) end
Vec.__len = function(a) return a.x * a.x + a.y * a.y end
Vec.__concat = function(a, b) return tostring(a) .. tostring(b) end
Vec.__tostring = function(a) return "(" .. a.x .. "," .. a.y .. ")" end
Vec.__call = function(a, k) return a.x * k + a.y end
local acc = vec(0, 0)
for i = 1, N do
  local v = vec(i % 7, -(i % 5))
  acc = acc + v * 2 - (-v)
  if #acc > 1e12 then acc = vec(0, 0) end
end
print("vector", tostring(acc), acc(3), vec(1, 2) .. vec(3, 4))

-- 3. closures: counters, memoization, function composition
local function counter(start, step)
  local n = start
  return function() n = n + step; return n end
end
local counters = {}
for i = 1, 50 do counters[i] = counter(i, i % 3 + 1) end
local csum = 0
for _ = 1, N // 50 do
  for i = 1, #counters do csum = csum + counters[i]() end
end
print("closures", csum)

local function memoize(f)
  local cache = {}
  return function(n)
    local v = cache[n]
    if v == nil then v = f(n); cache[n] = v end
    return v
  end
end
local fib
fib = memoize(function(n) if n < 2 then return n end return fib(n - 1) + fib(n - 2) end)
print("fib", fib(80))
local function compose(...)
  local fs = table.pack(...)
  return function(x)
    for i = fs.n, 1, -1 do x = fs[i](x) end
    return x
  end
end
local inc = function(x) return x + 1 end
local dbl = function(x) return x * 2 end
local f = compose(inc, dbl, inc, dbl)
local fsum = 0
for i = 1, N do fsum = fsum + f(i) end
print("compose", fsum)

-- 4. varargs
local function stats(...)
  local n = select("#", ...)
  local s, lo, hi = 0, math.huge, -math.huge
  for i = 1, n do
    local v = select(i, ...)
    s = s + v
    if v < lo then lo = v end
    if v > hi then hi = v end
  end
  return n, s, lo, hi
end
local vs = 0
for i = 1, N // 10 do
  local n, s, lo, hi = stats(i, i * 2, i % 17, -i, i // 3)
  vs = vs + n + s + lo + hi
end
print("varargs", vs, stats(table.unpack({ 5, 3, 9, 1 })))

-- 5. coroutines: a generator and a producer -> filter -> consumer pipeline
local function range_gen(n)
  return coroutine.wrap(function()
    for i = 1, n do coroutine.yield(i) end
  end)
end
local gsum = 0
for v in range_gen(N) do gsum = gsum + v end
print("generator", gsum)

local function producer(n)
  return coroutine.create(function()
    for i = 1, n do coroutine.yield(i * 3 % 101) end
    return nil
  end)
end
local function filter(src, pred)
  return coroutine.create(function()
    while true do
      local ok, v = coroutine.resume(src)
      if not ok or v == nil then return nil end
      if pred(v) then coroutine.yield(v) end
    end
  end)
end
local pipe = filter(producer(N), function(v) return v % 2 == 0 end)
local taken, psum = 0, 0
while true do
  local ok, v = coroutine.resume(pipe)
  if not ok or v == nil then break end
  taken, psum = taken + 1, psum + v
end
print("pipeline", taken, psum, coroutine.status(pipe))

-- 6. errors: pcall/error with strings and tables, error objects with metatables
local Err = { __tostring = function(e) return "Err<" .. e.code .. ">" end }
local function risky(i)
  if i % 97 == 0 then error(setmetatable({ code = i }, Err)) end
  if i % 89 == 0 then error("plain failure " .. i, 0) end
  return i
end
local okc, tabc, strc, last = 0, 0, 0, ""
for i = 1, N do
  local ok, e = pcall(risky, i)
  if ok then okc = okc + 1
  elseif type(e) == "table" then tabc = tabc + 1; last = tostring(e)
  else strc = strc + 1 end
end
print("errors", okc, tabc, strc, last)
print("xpcall", xpcall(function() error("deep") end, function(m) return "handled: " .. m:gsub("^.-:%d+: ", "") end))

-- 7. table library: insert/remove at the front, move, concat, sort of strings
local q = {}
for i = 1, 2000 do table.insert(q, 1, i) end
local rsum = 0
for _ = 1, 1000 do rsum = rsum + table.remove(q, 1) + table.remove(q) end
local moved = table.move({ 1, 2, 3, 4, 5 }, 2, 4, 1, {})
local words = {}
for i = 1, N // 20 do words[i] = string.format("w%05d", (i * 7919) % 10007) end
table.sort(words, function(a, b) return a > b end)
print("tables", rsum, #q, table.concat(moved, ","), words[1], words[#words])

-- 8. integers, floats, bitwise, goto
local bits = 0
for i = 1, N do
  local x = i * 2654435761 & 0xffffffff
  bits = bits ~ (x >> 7) ~ (x << 3 & 0xffff)
  if i % 1000 == 0 then goto continue end
  bits = bits + (i // 7) % 3
  ::continue::
end
print("bits", bits, 7 // 2, -7 // 2, 7 % -3, 2 ^ 10, math.tointeger(3.0), 1e15 // 1, math.type(1), math.type(1.0))
print(string.format("format %5.2f|%-6d|%x|%q|%g", 3.14159, 42, 255, "a\nb", 1e20))
