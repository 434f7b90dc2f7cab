local finish, sortedkeys = dofile((arg[0]:gsub("[^/]*$", "")) .. "lib/harness.lua")
-- coroutines.lua: create/resume/yield/wrap/status/close/isyieldable/running,
-- yields across pcall and metamethods, generators, producer/consumer
print("== basics")
local co = coroutine.create(function(a, b)
  print("start", a, b)
  local c = coroutine.yield(a + b)
  print("got", c)
  local d, e = coroutine.yield(c * 2)
  print("got", d, e)
  return "done", d + e
end)
print(coroutine.status(co))
print(coroutine.resume(co, 1, 2))
print(coroutine.status(co))
print(coroutine.resume(co, 10))
print(coroutine.resume(co, 3, 4))
print(coroutine.status(co))
print(coroutine.resume(co))
local main, ismain = coroutine.running()
print(type(main), ismain, coroutine.isyieldable())
print(coroutine.resume(coroutine.create(function() return coroutine.isyieldable(), select(2, coroutine.running()) end)))
print(pcall(coroutine.yield, 1))

print("== wrap / generators")
local function range(n, step)
  return coroutine.wrap(function()
    for i = 1, n, step or 1 do coroutine.yield(i) end
  end)
end
local r = {}
for v in range(20, 3) do r[#r + 1] = v end
print(table.concat(r, ","))
local function permgen(a, n)
  n = n or #a
  if n <= 1 then coroutine.yield(a) else
    for i = 1, n do
      a[n], a[i] = a[i], a[n]
      permgen(a, n - 1)
      a[n], a[i] = a[i], a[n]
    end
  end
end
local function permutations(a)
  return coroutine.wrap(function() permgen(a) end)
end
local all = {}
for p in permutations({ 1, 2, 3, 4 }) do all[#all + 1] = table.concat(p) end
table.sort(all)
print(#all, table.concat(all, " "))
-- fibonacci generator
local fibg = coroutine.wrap(function()
  local a, b = 0, 1
  while true do coroutine.yield(a); a, b = b, a + b end
end)
local fl = {}
for i = 1, 30 do fl[i] = fibg() end
print(table.concat(fl, " "))
-- tree walk with coroutines
local function tree(depth, val)
  if depth == 0 then return { v = val } end
  return { v = val, l = tree(depth - 1, val * 2), r = tree(depth - 1, val * 2 + 1) }
end
local function walk(t)
  if not t then return end
  walk(t.l); coroutine.yield(t.v); walk(t.r)
end
local tw = {}
for v in coroutine.wrap(function() walk(tree(4, 1)) end) do tw[#tw + 1] = v end
print(#tw, table.concat(tw, " "))
local dead = coroutine.wrap(function() return 1 end)
dead()
print(pcall(dead))

print("== errors inside coroutines")
local ce = coroutine.create(function() local x = nil; return x.field end)
print(coroutine.resume(ce))
print(coroutine.status(ce))
local ce2 = coroutine.create(function() error({ code = 42 }) end)
local okc, ev = coroutine.resume(ce2)
print(okc, type(ev), ev.code)
local ce3 = coroutine.create(function() error("plain", 0) end)
print(coroutine.resume(ce3))
print(pcall(coroutine.wrap(function() error("wrapped error") end)))
print(coroutine.resume(coroutine.running()))
print(pcall(coroutine.resume, 42))
-- resume a running coroutine / non-suspended
local selfco
selfco = coroutine.create(function() return coroutine.resume(selfco) end)
print(coroutine.resume(selfco))

print("== yield across pcall / metamethods / iterators")
local cy = coroutine.create(function()
  local ok, v = pcall(function()
    local got = coroutine.yield("inside pcall")
    if got == "boom" then error("exploded: " .. got) end
    return got
  end)
  coroutine.yield("pcall returned", ok, v)
  local ok2, v2 = pcall(function()
    local got = coroutine.yield("second")
    error({ msg = got })
  end)
  coroutine.yield("pcall2", ok2, type(v2) == "table" and v2.msg)
  local ok3, v3 = xpcall(function() coroutine.yield("in xpcall"); error("x") end,
    function(m) return "handled: " .. tostring(m):gsub("^.-:%d+: ", "") end)
  return "end", ok3, v3
end)
print(coroutine.resume(cy))
print(coroutine.resume(cy, "hello"))
print(coroutine.resume(cy))
print(coroutine.resume(cy, "payload"))
print(coroutine.resume(cy))
print(coroutine.resume(cy))
print(coroutine.status(cy))
local mt = {
  __add = function(a, b) return coroutine.yield("add") + a.v + b.v end,
  __index = function(t, k) return coroutine.yield("index " .. k) end,
  __lt = function(a, b) return coroutine.yield("lt") end,
  __concat = function(a, b) return coroutine.yield("concat") end,
  __eq = function(a, b) return coroutine.yield("eq") end,
}
local cm = coroutine.wrap(function()
  local a, b = setmetatable({ v = 1 }, mt), setmetatable({ v = 2 }, mt)
  local s = a + b
  local i = a.missing
  local l = a < b
  local c = a .. b
  local e = a == b
  return "results", s, i, l, c, e
end)
print(cm())
print(cm(100))
print(cm("idx"))
print(cm(true))
print(cm("cat"))
print(cm(false))
-- yield from inside table.sort comparator is not allowed (C call boundary)
local cs = coroutine.create(function()
  table.sort({ 3, 2, 1 }, function(a, b) coroutine.yield() return a < b end)
end)
print(coroutine.resume(cs))
-- yield inside for-in iterator function
local ci = coroutine.wrap(function()
  local function it(_, i) i = i + 1; if i <= 3 then coroutine.yield("iter " .. i) return i end end
  local acc = {}
  for i in it, nil, 0 do acc[#acc + 1] = i end
  return table.concat(acc, "+")
end)
print(ci(), ci(), ci(), ci())

print("== close and to-be-closed")
local closed = {}
local cc = coroutine.create(function()
  local x <close> = setmetatable({}, { __close = function(_, e) closed[#closed + 1] = "x:" .. tostring(e) end })
  local y <close> = setmetatable({}, { __close = function(_, e) closed[#closed + 1] = "y:" .. tostring(e) end })
  coroutine.yield(1)
  coroutine.yield(2)
end)
print(coroutine.resume(cc))
print(coroutine.close(cc), coroutine.status(cc), table.concat(closed, " "))
print(coroutine.close(coroutine.create(print)))
local cerr = coroutine.create(function() error("in co") end)
coroutine.resume(cerr)
print(coroutine.close(cerr))
local cerr2 = coroutine.create(function()
  local z <close> = setmetatable({}, { __close = function() error("close failed", 0) end })
  coroutine.yield()
end)
coroutine.resume(cerr2)
print(coroutine.close(cerr2))
print(pcall(coroutine.close, coroutine.running()))

print("== producer / consumer pipeline")
local function producer(n)
  return coroutine.create(function()
    for i = 1, n do coroutine.yield(string.format("item%03d", i)) end
    return nil
  end)
end
local function filter(src, pred)
  return coroutine.create(function()
    while true do
      local _, v = coroutine.resume(src)
      if v == nil then return nil end
      if pred(v) then coroutine.yield(v:upper()) end
    end
  end)
end
local function consume(src)
  local out = {}
  while true do
    local _, v = coroutine.resume(src)
    if v == nil then break end
    out[#out + 1] = v
  end
  return out
end
local got = consume(filter(producer(200), function(v) return tonumber(v:sub(5)) % 7 == 0 end))
print(#got, table.concat(got, " "))

print("== many coroutines, deep stacks")
local cos = {}
for i = 1, 2000 do
  cos[i] = coroutine.create(function(x)
    local s = 0
    while true do s = s + x; x = coroutine.yield(s) end
  end)
end
local total = 0
for round = 1, 10 do
  for i = 1, #cos do
    local _, v = coroutine.resume(cos[i], i * round)
    total = total + v
  end
end
print("total", total)
local deep = coroutine.wrap(function()
  local function rec(n) if n == 0 then coroutine.yield("bottom") return 0 end return 1 + rec(n - 1) end
  return rec(10000)
end)
print(deep(), deep())
-- nested coroutines: resume inside resume
local outer = coroutine.wrap(function()
  local inner = coroutine.wrap(function()
    coroutine.yield("inner1")
    coroutine.yield("inner2")
  end)
  coroutine.yield("outer got " .. inner())
  coroutine.yield("outer got " .. inner())
  return "outer done"
end)
print(outer(), outer(), outer())
-- round-robin scheduler
local tasks, log = {}, {}
for id = 1, 4 do
  tasks[#tasks + 1] = coroutine.create(function()
    for step = 1, id + 1 do log[#log + 1] = id .. "." .. step; coroutine.yield() end
  end)
end
while #tasks > 0 do
  for i = #tasks, 1, -1 do
    coroutine.resume(tasks[i])
    if coroutine.status(tasks[i]) == "dead" then table.remove(tasks, i) end
  end
end
print(#log, table.concat(log, " "))
finish()
