local finish, sortedkeys = dofile((arg[0]:gsub("[^/]*$", "")) .. "lib/harness.lua")
-- functions.lua: closures, upvalues, varargs, tail calls, recursion, goto,
-- integer/float arithmetic and the math library
print("== closures and upvalues")
local function counter(start)
  local n = start
  return function(d) n = n + (d or 1); return n end, function() return n end
end
local inc, get = counter(10)
inc(); inc(5)
local inc2 = counter(100)
print(get(), inc2(), inc2(-50), get())
local fs = {}
for i = 1, 5 do fs[i] = function() return i * i end end
local outs = {}
for i = 1, 5 do outs[i] = fs[i]() end
print(table.concat(outs, ","))
local shared = {}
do
  local x = 0
  for i = 1, 3 do
    shared[i] = { get = function() return x end, set = function(v) x = v + i end }
  end
end
shared[1].set(10)
print(shared[2].get(), shared[3].get())
shared[3].set(1)
print(shared[1].get())
-- while-loop closures capture a fresh local each iteration
local ws, j = {}, 0
while j < 4 do
  j = j + 1
  local k = j * 3
  ws[j] = function() k = k + 1; return k end
end
print(ws[1](), ws[1](), ws[2](), ws[4]())
-- deeply nested upvalues
local function mk(a)
  return function(b)
    return function(c)
      return function(d) a = a + 1; return a + b + c + d end
    end
  end
end
local f4 = mk(1)(2)(3)
print(f4(4), f4(4), mk(10)(20)(30)(40))
-- memoize with closure
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
print(fib(80), fib(90))
-- y-combinator-ish
local function Y(f) return function(...) return f(Y(f), ...) end end
print(Y(function(self, n) if n == 0 then return 1 end return n * self(n - 1) end)(20))

print("== varargs")
local function va(...)
  local a, b = ...
  return select("#", ...), a, b, ...
end
print(va())
print(va(nil))
print(va(1, nil, 3, nil))
print((va(1, 2, 3)))
local function pass(...) return ... end
print(pass(1, 2, 3), pass(4, 5), (pass(6, 7)))
print(({ pass(1, 2, 3) })[3], #{ pass(1, 2, 3), pass(4) }, select("#", pass(table.unpack({}, 1, 50))))
local function sum(...)
  local s = 0
  for i = 1, select("#", ...) do s = s + (select(i, ...)) end
  return s
end
print(sum(), sum(1), sum(1, 2, 3, 4, 5, 6, 7, 8, 9, 10))
local many = {}
for i = 1, 200 do many[i] = i end
print(sum(table.unpack(many)), select("#", table.unpack(many)), select(-1, table.unpack(many)))
local function tailva(n, ...)
  if n == 0 then return select("#", ...), ... end
  return tailva(n - 1, n, ...)
end
print(tailva(10))
print(string.format("%s-%s-%s", pass("x", "y", "z")))
local packed = table.pack(pass(nil, nil, nil))
print(packed.n)

print("== tail calls and recursion")
local function loop(n, acc) if n == 0 then return acc end return loop(n - 1, acc + n) end
print(loop(1000000, 0))
local function even(n) if n == 0 then return true end return odd(n - 1) end
function odd(n) if n == 0 then return false end return even(n - 1) end
print(even(100001), odd(77777))
local function depth(n) if n == 0 then return 0 end return 1 + depth(n - 1) end
print(depth(150000))
local function ack(m, n)
  if m == 0 then return n + 1 end
  if n == 0 then return ack(m - 1, 1) end
  return ack(m - 1, ack(m, n - 1))
end
print(ack(2, 300), ack(3, 5))
local function hanoi(n, from, to, via, moves)
  if n == 0 then return moves end
  moves = hanoi(n - 1, from, via, to, moves)
  moves[#moves + 1] = from .. to
  return hanoi(n - 1, via, to, from, moves)
end
local mv = hanoi(10, "A", "C", "B", {})
print(#mv, table.concat(mv, " ", 1, 12), mv[#mv])
local ok, err = pcall(function() local function inf(n) return 1 + inf(n + 1) end return inf(1) end)
print(ok, (tostring(err):gsub("^.-:%d+: ", "")))
local function perms(a, n, out)
  n = n or #a
  if n <= 1 then out[#out + 1] = table.concat(a) return out end
  for i = 1, n do
    a[n], a[i] = a[i], a[n]
    perms(a, n - 1, out)
    a[n], a[i] = a[i], a[n]
  end
  return out
end
local ps = perms({ "a", "b", "c", "d" }, nil, {})
table.sort(ps)
print(#ps, table.concat(ps, " "))

print("== goto")
do
  local i, out2 = 1, {}
  ::top::
  if i <= 5 then
    out2[#out2 + 1] = i
    i = i + 1
    goto top
  end
  print(table.concat(out2, ","))
end
for i = 1, 3 do
  for jj = 1, 3 do
    if jj == 2 then goto continue end
    printf("%d%d ", i, jj)
    ::continue::
  end
end
print()
do
  local found
  for i = 1, 10 do
    for jj = 1, 10 do
      if i * jj == 42 then found = i .. "x" .. jj goto done end
    end
  end
  ::done::
  print("found", found)
end
print(load("goto nowhere") == nil, select(2, load("goto nowhere")))
print(select(2, load("do local x ::l1:: ::l1:: end")))

print("== integer arithmetic")
local mi, ma = math.mininteger, math.maxinteger
print(ma, mi, ma + 1 == mi, mi - 1 == ma, -mi == mi, ma * 2, mi * -1)
print(7 // 2, -7 // 2, 7 // -2, -7 // -2, 7 % 3, -7 % 3, 7 % -3, -7 % -3)
print(7 / 2, 6 / 2, math.type(6 / 2), 2 ^ 10, math.type(2 ^ 2), 10 // 3.0, 10 % 3.5)
print(1 << 62, 1 << 63, 1 << 64, -1 >> 1, -1 >> 63, 5 & 3, 5 | 3, 5 ~ 3, ~0, 1 << -1, 2 >> -1)
print(0xFF, 0x7fffffffffffffff, 0xffffffffffffffff, 1e2, 0x.8p1, 0xA.8p0, 3e-2)
print(pcall(function() return 1 // 0 end))
print(pcall(function() return 1 % 0 end))
print(1 // 0.0, -1 // 0.0, 1 % math.huge, -1 % math.huge, 5.5 // 1, -5.5 // 1)
print(mi // -1, mi % -1, pcall(function() return 1.5 | 0 end))
print(pcall(function() return "abc" + 1 end))
print(pcall(function() return {} + 1 end))
print(3 | 0, pcall(function() return "10" | 0 end))
print(pcall(function() return 1.5 | 0 end))
print(1 == 1.0, math.type(1), math.type(1.0), math.type("1"), 2^53 == 2^53 + 1, ma + 0.0 == 2^63, ma == 2^63)
print(1 < 1.5, -1 > mi, ma < math.huge, mi > -math.huge, 2^63 > ma, -2^63 == mi, -2^63 <= mi)
local nanv = 0 / 0
print(nanv ~= nanv, nanv == nanv, nanv < 1, nanv > 1, math.huge > ma, -math.huge < mi)
local acc = 0
for i = 1, 100000 do acc = acc + i * i % 97 - (i ~ (i >> 3)) end
print("int loop", acc)
local facc = 0.0
for i = 1, 100000 do facc = facc + 1 / i end
printf("harmonic %.12f\n", facc)
for i = 10, 1, -3 do printf("%d ", i) end
for x = 0.0, 1.0, 0.25 do printf("%.2f ", x) end
for i = ma - 2, ma do printf("%d ", i) end
for i = mi, mi + 2 do printf("%d ", i) end
print()
print(pcall(function() for i = 1, 10, 0 do end end))
print(pcall(function() for i = "a", 2 do end end))

print("== math library")
printf("%.10f %.10f %.10f %.10f\n", math.sin(1), math.cos(1), math.tan(1), math.asin(0.5))
printf("%.10f %.10f %.10f %.10f\n", math.acos(0.5), math.atan(1), math.atan(1, -1), math.atan(-1, -1))
printf("%.10f %.10f %.10f %.10f\n", math.exp(1), math.log(10), math.log(8, 2), math.log(100, 10))
printf("%.10f %.10f %.3f %.3f\n", math.sqrt(2), math.log(2, 3), math.fmod(7.5, 2), math.fmod(-7.5, 2))
print(math.floor(3.7), math.floor(-3.7), math.ceil(3.2), math.ceil(-3.2), math.floor(5), math.ceil(2^70) == 2^70)
print(math.abs(-5), math.abs(-5.5), math.abs(mi), math.max(1, 5, 3), math.min(1.5, -2, 0), math.max(2, 2.0))
print(math.fmod(7, 3), math.fmod(-7, 3), math.fmod(7, -3), pcall(math.fmod, 1, 0))
print(math.modf(3.7), math.modf(-3.7), math.modf(5), math.modf(math.huge))
print(math.tointeger(3.0), math.tointeger(3.5), math.tointeger("x"), math.ult(1, -1), math.ult(-1, 1))
print(math.huge, -math.huge, math.pi, math.maxinteger, math.mininteger)
printf("%.6f %.6f %.6f\n", math.rad(180), math.deg(math.pi / 2), math.exp(0))
math.randomseed(42)
local rs = {}
for i = 1, 10 do rs[i] = math.random(1, 100) end
print("random(1,100)", table.concat(rs, " "))
math.randomseed(42)
local rs2 = {}
for i = 1, 10 do rs2[i] = math.random(1, 100) end
print("repeatable", table.concat(rs, " ") == table.concat(rs2, " "))
math.randomseed(7, 11)
printf("%.12f %.12f %d %d\n", math.random(), math.random(), math.random(10), math.random(0))
print(pcall(math.random, 2, 1))
local hist = {}
math.randomseed(123)
for i = 1, 60000 do local r = math.random(6); hist[r] = (hist[r] or 0) + 1 end
print("dice", table.concat(hist, " "))
-- numeric algorithms
local function gcd(x, y) while y ~= 0 do x, y = y, x % y end return x end
print(gcd(1071, 462), gcd(2^40 | 0, 6^15 | 0), gcd(17, 5))
local function isprime(n)
  if n < 2 then return false end
  for d = 2, math.floor(math.sqrt(n)) do if n % d == 0 then return false end end
  return true
end
local primes = {}
for i = 1, 2000 do if isprime(i) then primes[#primes + 1] = i end end
print(#primes, primes[#primes], primes[100])
local function powmod(b, e, m)
  local r = 1
  b = b % m
  while e > 0 do
    if e & 1 == 1 then r = r * b % m end
    b = b * b % m
    e = e >> 1
  end
  return r
end
print(powmod(2, 1000000, 1000000007), powmod(3, 12345, 998244353))
local x = 1.0
for i = 1, 50 do x = math.sqrt(x + i) end
printf("nested sqrt %.15g\n", x)
local pi = 0
for k = 0, 100000 do pi = pi + (k % 2 == 0 and 1 or -1) / (2 * k + 1) end
printf("leibniz %.12f\n", 4 * pi)
printf("%.17g %.17g %.17g\n", 0.1 + 0.2, 1e308 * 10, 2 ^ -1074)
print(string.format("%.0f", 2^63), 2^63 // 1, math.floor(-0.0), 1/(-0.0) < 0, -0.0 == 0.0)
print(math.floor(2^62) == 2^62 | 0, math.type(math.floor(2.0^62)), math.type(math.floor(2.0^64)))
print(8 // 3 * 3 + 8 % 3, -8 // 3 * 3 + -8 % 3, 2^-1, (-2)^2, -2^2, 2^3^2)
print(1 .. "", 1.0 .. "", -0.0 .. "", 1e100 .. "", (2^63) .. "", 255 // 1 | 0)
finish()
