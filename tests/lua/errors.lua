local finish, sortedkeys = dofile((arg[0]:gsub("[^/]*$", "")) .. "lib/harness.lua")
-- errors.lua: error values and levels, pcall/xpcall with tracebacks, debug info,
-- load of generated code (text, reader functions, env), string.dump round trips
print("== error values")
print(pcall(error, "msg"))
print(pcall(error, "msg", 0))
print(pcall(error))
print(pcall(error, nil))
print(pcall(error, 42))
local ok, e = pcall(error, { code = 7, text = "table error" })
print(ok, type(e), e.code, e.text)
local function lvl1() error("level 1 error", 1) end
local function lvl2() error("level 2 error", 2) end
local function callslvl2() lvl2() end
print(pcall(lvl1))
print(pcall(callslvl2))
local E = setmetatable({}, { __tostring = function(s) return "E<" .. s.m .. ">" end })
E.__index = E
local ok2, e2 = pcall(function() error(setmetatable({ m = "custom" }, getmetatable(E))) end)
print(ok2, tostring(e2))
print(pcall(function() local t = nil; return t.x end))
print(pcall(function() local t = {}; return t.x.y end))
print(pcall(function() return undefinedglobal.field end))
print(pcall(function() undefinedfunc() end))
print(pcall(function() local s = "x"; s:nomethod() end))
print(pcall(function() return #nil end))
print(pcall(function() return -{} end))
print(pcall(function() return ("x")() end))
print(pcall(function() local a = {}; a.b.c = 1 end))
print(pcall(function() return 1 < "2" end))
print(pcall(function() return {} .. "x" end))
print(pcall(string.rep))
print(pcall(("x").rep, "x", "y"))
print(pcall(setmetatable))
print(pcall(ipairs))
print(pcall(tostring))
print(pcall(rawlen, 5))
print(pcall(string.char, 256))
print(pcall(math.floor, "a"))
print(pcall(table.concat, {}, 1, 2, 3))
print(select("#", pcall(error)))
-- nested pcall and rethrow
local function inner() error({ depth = 1 }) end
local function middle()
  local ok3, err = pcall(inner)
  err.depth = err.depth + 1
  error(err)
end
local ok4, e4 = pcall(middle)
print(ok4, e4.depth)
-- error in error handling
print(xpcall(function() error("first") end, function(m) error("in handler") end))
-- pcall returns all values
print(pcall(function(...) return ... end, 1, nil, 3))
print(pcall(pcall, error, "x"))

print("== xpcall and tracebacks")
local function handler(m)
  return debug.traceback("handled: " .. tostring(m), 2)
end
local function c3() error("deep error") end
local function c2() c3() end
local function c1() c2() end
local okx, tb = xpcall(c1, handler)
print(okx)
print(tb)
print(xpcall(function(a, b) return a + b end, handler, 3, 4))
print(debug.traceback("message"))
print(debug.traceback("lvl", 1))
print(debug.traceback(42))
local cot = coroutine.create(function() local x = 1; coroutine.yield(); error("x") end)
coroutine.resume(cot)
print(debug.traceback(cot))
print(debug.traceback(cot, "co msg"))
print(xpcall(function() local t = setmetatable({}, { __index = function() error("idx fail") end }); return t.k end,
  function(m) return "H:" .. m end))
-- stack overflow in message handler chain
print(xpcall(function() error("orig") end, function(m) return #m end))

print("== debug info")
local function info_of(f)
  local i = debug.getinfo(f, "Slnu")
  return string.format("%s %s %d-%d params=%d vararg=%s ups=%d", i.what, i.short_src, i.linedefined,
    i.lastlinedefined, i.nparams, tostring(i.isvararg), i.nups)
end
print(info_of(info_of))
print(info_of(string.len))
print(info_of(print))
print(info_of(function(a, b, ...) return a, b end))
local function where() local i = debug.getinfo(2, "l"); return i.currentline end
print("called at line", where())
local function locals()
  local alpha, beta = 1, "two"
  local names = {}
  local idx = 1
  while true do
    local n, v = debug.getlocal(1, idx)
    if not n then break end
    names[#names + 1] = n .. "=" .. tostring(type(v))
    idx = idx + 1
  end
  return table.concat(names, ",")
end
print(locals())
local upA, upB = 10, 20
local function useups() return upA + upB end
print(debug.getupvalue(useups, 1), debug.getupvalue(useups, 2))
debug.setupvalue(useups, 1, 100)
print(useups(), upA)
local hookcount = 0
debug.sethook(function() hookcount = hookcount + 1 end, "", 100)
for i = 1, 10000 do local _ = i * 2 end
debug.sethook()
print("hook fired", hookcount > 0)
local lines = {}
debug.sethook(function(ev, line) lines[#lines + 1] = line end, "l")
local zz = 1
zz = zz + 1
debug.sethook()
print("line hook", #lines, lines[1] and lines[2] and lines[2] - lines[1])

print("== load")
local f = load("return 1 + 2")
print(f())
print(load("syntax error here"))
print(load("return ...", "=varargs")(5, 6, 7))
local env = { x = 5, print = print }
local fe = load("y = x * 2; return y", "envchunk", "t", env)
print(fe(), env.y, rawget(_G, "y"))
local parts = { "return ", "10", " * ", "20" }
local pi = 0
print(load(function() pi = pi + 1; return parts[pi] end)())
print(type(load(function() return nil end)), load(function() return nil end)())
print(load(function() return {} end))
print(load("return 1", "=name", "b"))
-- generated code: build a big function with many locals and branches
local src = { "local acc = 0" }
for i = 1, 150 do
  src[#src + 1] = string.format("local v%d = %d", i, i)
end
for i = 1, 150 do
  src[#src + 1] = string.format("if v%d %% 3 == 0 then acc = acc + v%d elseif v%d %% 3 == 1 then acc = acc - 1 else acc = acc * 1 end", i, i, i)
end
src[#src + 1] = "return acc"
local gen = assert(load(table.concat(src, "\n"), "=generated"))
print("generated", gen())
print(load(string.rep("local x = 1\n", 300), "=toomany"))
local deep = string.rep("(", 300) .. "1" .. string.rep(")", 300)
print(load("return " .. deep, "=deep"))
local nested = string.rep("do ", 100) .. string.rep("end ", 100)
print(pcall(load(nested, "=nestdo")))
local exprs = {}
for i = 1, 100 do
  exprs[i] = string.format("return (%d * %d + %d) // %d, %d %% %d, %d .. 'x'", i, i + 1, i * 3, i % 7 + 1, i * 13, i % 9 + 1, i)
end
local acc = {}
for i = 1, 100 do
  local a1, a2, a3 = load(exprs[i])()
  acc[#acc + 1] = a1 + a2 + #a3
end
print("exprs", table.concat(acc, " ", 1, 20))
-- a small code generator: compile arithmetic expressions into Lua functions
local function compile(expr)
  local code = "return function(x, y) return " .. expr:gsub("%^", "^") .. " end"
  return assert(load(code, "=expr:" .. expr))()
end
for _, ex in ipairs({ "x + y", "x * y - 3", "(x - y) / 2", "x ^ 2 + y ^ 2", "x // y + x % y", "-x + -y" }) do
  local fn = compile(ex)
  printf("%-12s %s %s %s\n", ex, tostring(fn(7, 3)), tostring(fn(-4, 5)), tostring(fn(10, 10)))
end
print(pcall(load("local t = {} ; return t.a.b", "=runtime")))
print(dofile == nil, loadfile ~= nil, select("#", load("return")()))
print(load("return 2^53 // 1 | 0")())

print("== string.dump")
local function target(a, b)
  local t = {}
  for i = 1, a do t[i] = i * b end
  return #t, t[a], "const-string", 1.5
end
local bin = string.dump(target)
local bin_s = string.dump(target, true)
print(#bin > #bin_s, bin:sub(1, 4) == "\27Lua", bin:byte(5))
local loaded = load(bin, "dumped", "b")
print(loaded(10, 3))
print(load(bin_s, "stripped", "b")(4, 4))
print(load(bin, "x", "t"))
local upf
do
  local captured = 99
  upf = function() return captured end
end
local dumped_up = load(string.dump(upf))
print(pcall(function() return type(dumped_up()) end))
debug.setupvalue(dumped_up, 1, "restored")
print(dumped_up())
print(pcall(string.dump, string.len))
local gen2 = load(string.dump(gen))
print("dumped generated", gen2())
local dd = string.dump(load(string.dump(target)))
print("dump of dump identical", dd == bin)
print(pcall(load, bin:sub(1, 30)))
print(load(bin:sub(1, 30)))
-- dump a closure-producing function and compare results
local function maker(n) return function(x) return x * n + #("abc"):rep(n) end end
local m2 = load(string.dump(maker))
print(maker(3)(4), m2(3)(4))
finish()
