local finish, sortedkeys = dofile((arg[0]:gsub("[^/]*$", "")) .. "lib/harness.lua")
-- programs.lua: small complete programs (JSON, a stack VM, LZW, base64, bignums,
-- sorting algorithms, a text formatter, sieve, n-queens, a class system)
print("== JSON encode / decode")
local json = {}
do
  local escapes = { ['"'] = '\\"', ["\\"] = "\\\\", ["\b"] = "\\b", ["\f"] = "\\f",
    ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t" }
  local function enc(v, out)
    local t = type(v)
    if t == "nil" then out[#out + 1] = "null"
    elseif t == "boolean" then out[#out + 1] = tostring(v)
    elseif t == "number" then
      if math.type(v) == "integer" then out[#out + 1] = string.format("%d", v)
      else out[#out + 1] = string.format("%.14g", v) end
    elseif t == "string" then
      out[#out + 1] = '"' .. v:gsub('[%c"\\]', function(c)
        return escapes[c] or string.format("\\u%04x", c:byte())
      end) .. '"'
    elseif t == "table" then
      if #v > 0 or next(v) == nil then
        out[#out + 1] = "["
        for i = 1, #v do
          if i > 1 then out[#out + 1] = "," end
          enc(v[i], out)
        end
        out[#out + 1] = "]"
      else
        out[#out + 1] = "{"
        local keys = {}
        for k in pairs(v) do keys[#keys + 1] = tostring(k) end
        table.sort(keys)
        for i, k in ipairs(keys) do
          if i > 1 then out[#out + 1] = "," end
          enc(k, out); out[#out + 1] = ":"; enc(v[k], out)
        end
        out[#out + 1] = "}"
      end
    end
  end
  function json.encode(v) local out = {}; enc(v, out); return table.concat(out) end
  function json.decode(s)
    local pos = 1
    local function ws() pos = s:find("[^ \t\r\n]", pos) or #s + 1 end
    local value
    local function str()
      local out = {}
      pos = pos + 1
      while true do
        local c = s:sub(pos, pos)
        if c == '"' then pos = pos + 1; break
        elseif c == "\\" then
          local e = s:sub(pos + 1, pos + 1)
          local map = { b = "\b", f = "\f", n = "\n", r = "\r", t = "\t", ['"'] = '"', ["\\"] = "\\", ["/"] = "/" }
          if e == "u" then
            out[#out + 1] = utf8.char(tonumber(s:sub(pos + 2, pos + 5), 16)); pos = pos + 6
          else out[#out + 1] = map[e]; pos = pos + 2 end
        else out[#out + 1] = c; pos = pos + 1 end
      end
      return table.concat(out)
    end
    function value()
      ws()
      local c = s:sub(pos, pos)
      if c == "{" then
        local obj = {}
        pos = pos + 1; ws()
        if s:sub(pos, pos) == "}" then pos = pos + 1 return obj end
        while true do
          ws(); local k = str(); ws()
          assert(s:sub(pos, pos) == ":", "colon expected at " .. pos); pos = pos + 1
          obj[k] = value(); ws()
          local d = s:sub(pos, pos); pos = pos + 1
          if d == "}" then return obj end
          assert(d == ",", "comma expected")
        end
      elseif c == "[" then
        local arr = {}
        pos = pos + 1; ws()
        if s:sub(pos, pos) == "]" then pos = pos + 1 return arr end
        while true do
          arr[#arr + 1] = value(); ws()
          local d = s:sub(pos, pos); pos = pos + 1
          if d == "]" then return arr end
          assert(d == ",", "comma expected")
        end
      elseif c == '"' then return str()
      elseif s:find("^true", pos) then pos = pos + 4 return true
      elseif s:find("^false", pos) then pos = pos + 5 return false
      elseif s:find("^null", pos) then pos = pos + 4 return nil
      else
        local num = s:match("^-?%d+%.?%d*[eE]?[-+]?%d*", pos)
        assert(num and #num > 0, "bad json at " .. pos)
        pos = pos + #num
        return math.tointeger(tonumber(num)) or tonumber(num)
      end
    end
    local v = value()
    return v
  end
end
local doc = {
  name = "rivet", version = 3, ratio = 0.125, tags = { "elf", "x86-64", "bolt" },
  nested = { deep = { deeper = { list = { 1, 2, { 3, 4 }, "five" } } }, empty = {} },
  flags = { fast = true, safe = false }, text = 'quote " backslash \\ newline \n tab \t ctrl \1',
}
local enc = json.encode(doc)
print(enc)
local dec = json.decode(enc)
print(json.encode(dec) == enc, dec.nested.deep.deeper.list[3][2], dec.text == doc.text)
local arr = {}
for i = 1, 500 do arr[i] = { id = i, sq = i * i, name = "item" .. i, ok = i % 3 == 0 } end
local big = json.encode(arr)
local back = json.decode(big)
local s = 0
for _, r in ipairs(back) do s = s + r.sq + (r.ok and 1 or 0) end
print(#big, #back, s, json.encode(back) == big)

print("== a stack VM with an assembler")
local function assemble(src)
  local prog, labels, fix = {}, {}, {}
  for line in src:gmatch("[^\n]+") do
    line = line:gsub(";.*", "")
    local label = line:match("^%s*(%w+):")
    if label then labels[label] = #prog + 1; line = line:gsub("^%s*%w+:", "") end
    local op, arg = line:match("^%s*(%a+)%s*(%S*)")
    if op then
      local ins = { op, tonumber(arg) or (arg ~= "" and arg or nil) }
      prog[#prog + 1] = ins
      if op == "jz" or op == "jmp" or op == "jnz" then fix[#fix + 1] = ins end
    end
  end
  for _, ins in ipairs(fix) do ins[2] = assert(labels[ins[2]], "undefined label " .. tostring(ins[2])) end
  return prog
end
local function run(prog, input)
  local stack, sp, pc, out, mem, steps = {}, 0, 1, {}, {}, 0
  while true do
    local ins = prog[pc]
    steps = steps + 1
    pc = pc + 1
    local op, arg = ins[1], ins[2]
    if op == "push" then sp = sp + 1; stack[sp] = arg
    elseif op == "load" then sp = sp + 1; stack[sp] = mem[arg] or 0
    elseif op == "store" then mem[arg] = stack[sp]; sp = sp - 1
    elseif op == "dup" then sp = sp + 1; stack[sp] = stack[sp - 1]
    elseif op == "add" then stack[sp - 1] = stack[sp - 1] + stack[sp]; sp = sp - 1
    elseif op == "sub" then stack[sp - 1] = stack[sp - 1] - stack[sp]; sp = sp - 1
    elseif op == "mul" then stack[sp - 1] = stack[sp - 1] * stack[sp]; sp = sp - 1
    elseif op == "div" then stack[sp - 1] = stack[sp - 1] // stack[sp]; sp = sp - 1
    elseif op == "mod" then stack[sp - 1] = stack[sp - 1] % stack[sp]; sp = sp - 1
    elseif op == "lt" then stack[sp - 1] = (stack[sp - 1] < stack[sp]) and 1 or 0; sp = sp - 1
    elseif op == "jz" then if stack[sp] == 0 then pc = arg end; sp = sp - 1
    elseif op == "jnz" then if stack[sp] ~= 0 then pc = arg end; sp = sp - 1
    elseif op == "jmp" then pc = arg
    elseif op == "out" then out[#out + 1] = stack[sp]; sp = sp - 1
    elseif op == "in" then sp = sp + 1; stack[sp] = input
    elseif op == "halt" then return out, steps
    else error("bad op " .. tostring(op)) end
  end
end
local collatz_src = [[
        push 1
        store n
outer:  load n
        in
        lt
        jz done          ; while n < N
        load n
        store x
        push 0
        store len
inner:  push 1
        load x
        lt
        jz endin         ; while 1 < x
        load x
        push 2
        mod
        jnz odd
        load x
        push 2
        div
        store x
        jmp count
odd:    load x
        push 3
        mul
        push 1
        add
        store x
count:  load len
        push 1
        add
        store len
        jmp inner
endin:  load len
        load best
        lt
        jnz next         ; len < best: keep the old one
        load len
        store best
        load n
        store arg
next:   load n
        push 1
        add
        store n
        jmp outer
done:   load best
        out
        load arg
        out
        halt
]]
local prog = assemble(collatz_src)
local out, steps = run(prog, 3000)
print("vm collatz", #prog, out[1], out[2], steps)
local function collatz_ref(N)
  local best, arg = 0, 0
  for n = 1, N - 1 do
    local x, len = n, 0
    while x > 1 do if x % 2 == 0 then x = x // 2 else x = 3 * x + 1 end len = len + 1 end
    if not (len < best) then best, arg = len, n end
  end
  return best, arg
end
print("ref collatz", collatz_ref(3000))
local gcd_loop = [[
loop:  load b
       jz end
       load a
       load b
       mod
       load b
       store a
       store b
       jmp loop
end:   load a
       out
       halt
]]
local gcds = {}
for i = 1, 20 do
  local o = run(assemble(("push %d\nstore a\npush %d\nstore b\n"):format(i * 84, i * 36) .. gcd_loop), 0)
  gcds[i] = o[1]
end
print("vm gcd", table.concat(gcds, " "))
print(pcall(assemble, "jmp nowhere"))

print("== LZW and base64")
local function lzw_compress(str)
  local dict, size = {}, 256
  for i = 0, 255 do dict[string.char(i)] = i end
  local w, out = "", {}
  for c in str:gmatch(".") do
    local wc = w .. c
    if dict[wc] then w = wc else
      out[#out + 1] = dict[w]
      dict[wc] = size; size = size + 1
      w = c
    end
  end
  if w ~= "" then out[#out + 1] = dict[w] end
  return out
end
local function lzw_decompress(codes)
  local dict, size = {}, 256
  for i = 0, 255 do dict[i] = string.char(i) end
  local w = dict[codes[1]]
  local out = { w }
  for i = 2, #codes do
    local k = codes[i]
    local entry = dict[k] or (w .. w:sub(1, 1))
    out[#out + 1] = entry
    dict[size] = w .. entry:sub(1, 1); size = size + 1
    w = entry
  end
  return table.concat(out)
end
local text = ("TOBEORNOTTOBEORTOBEORNOT#"):rep(40) .. ("the rain in spain stays mainly in the plain "):rep(30)
local codes = lzw_compress(text)
print("lzw", #text, #codes, lzw_decompress(codes) == text, table.concat(codes, ",", 1, 16))
local b64chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
local function b64enc(data)
  return ((data:gsub(".", function(x)
    local r, b = "", x:byte()
    for i = 8, 1, -1 do r = r .. (b % 2 ^ i - b % 2 ^ (i - 1) > 0 and "1" or "0") end
    return r
  end) .. "0000"):gsub("%d%d%d?%d?%d?%d?", function(x)
    if #x < 6 then return "" end
    local c = 0
    for i = 1, 6 do c = c + (x:sub(i, i) == "1" and 2 ^ (6 - i) or 0) end
    return b64chars:sub(c + 1, c + 1)
  end) .. ({ "", "==", "=" })[#data % 3 + 1])
end
local function b64dec(data)
  data = data:gsub("[^" .. b64chars .. "=]", "")
  return (data:gsub(".", function(x)
    if x == "=" then return "" end
    local r, f = "", (b64chars:find(x, 1, true) - 1)
    for i = 6, 1, -1 do r = r .. (f % 2 ^ i - f % 2 ^ (i - 1) > 0 and "1" or "0") end
    return r
  end):gsub("%d%d%d?%d?%d?%d?%d?%d?", function(x)
    if #x ~= 8 then return "" end
    local c = 0
    for i = 1, 8 do c = c + (x:sub(i, i) == "1" and 2 ^ (8 - i) or 0) end
    return string.char(c)
  end))
end
for _, sample in ipairs({ "", "f", "fo", "foo", "foob", "fooba", "foobar", "Many hands make light work." }) do
  local e = b64enc(sample)
  printf("%-30s %-40s %s\n", sample, e, tostring(b64dec(e) == sample))
end
local binary = {}
for i = 0, 255 do binary[#binary + 1] = string.char((i * 37) % 256) end
binary = table.concat(binary)
print("b64 binary", #b64enc(binary), b64dec(b64enc(binary)) == binary)

print("== bignums")
local BASE = 10000000
local function bmul(a, m)
  local carry = 0
  for i = 1, #a do
    local v = a[i] * m + carry
    a[i] = v % BASE
    carry = v // BASE
  end
  while carry > 0 do a[#a + 1] = carry % BASE; carry = carry // BASE end
end
local function bstr(a)
  local parts = { tostring(a[#a]) }
  for i = #a - 1, 1, -1 do parts[#parts + 1] = string.format("%07d", a[i]) end
  return table.concat(parts)
end
local fact = { 1 }
for i = 2, 300 do bmul(fact, i) end
local fs = bstr(fact)
local digsum = 0
for d in fs:gmatch("%d") do digsum = digsum + tonumber(d) end
print("300!", #fs, fs:sub(1, 40), digsum)
local function badd(a, b)
  local r, carry = {}, 0
  for i = 1, math.max(#a, #b) do
    local v = (a[i] or 0) + (b[i] or 0) + carry
    r[i] = v % BASE; carry = v // BASE
  end
  if carry > 0 then r[#r + 1] = carry end
  return r
end
local fa, fb = { 0 }, { 1 }
for i = 1, 1000 do fa, fb = fb, badd(fa, fb) end
local f1000 = bstr(fa)
print("fib(1000)", #f1000, f1000:sub(1, 30), f1000:sub(-30))
local p2 = { 1 }
for i = 1, 1000 do bmul(p2, 2) end
print("2^1000", #bstr(p2), bstr(p2):sub(1, 30))

print("== sorting algorithms")
local function lcg(seed)
  return function(n) seed = (seed * 6364136223846793005 + 1442695040888963407); return ((seed >> 33) % n) + 1 end
end
local rnd = lcg(2024)
local data = {}
for i = 1, 3000 do data[i] = rnd(100000) end
local function copy(t) return table.move(t, 1, #t, 1, {}) end
local function quicksort(a, lo, hi)
  lo, hi = lo or 1, hi or #a
  while lo < hi do
    local p, i = a[(lo + hi) // 2], lo
    local j = hi
    while i <= j do
      while a[i] < p do i = i + 1 end
      while a[j] > p do j = j - 1 end
      if i <= j then a[i], a[j] = a[j], a[i]; i = i + 1; j = j - 1 end
    end
    if j - lo < hi - i then quicksort(a, lo, j); lo = i else quicksort(a, i, hi); hi = j end
  end
  return a
end
local function mergesort(a)
  if #a <= 1 then return a end
  local mid = #a // 2
  local l, r = mergesort(table.move(a, 1, mid, 1, {})), mergesort(table.move(a, mid + 1, #a, 1, {}))
  local out, i, j = {}, 1, 1
  while i <= #l and j <= #r do
    if l[i] <= r[j] then out[#out + 1] = l[i]; i = i + 1 else out[#out + 1] = r[j]; j = j + 1 end
  end
  for k = i, #l do out[#out + 1] = l[k] end
  for k = j, #r do out[#out + 1] = r[k] end
  return out
end
local function heapsort(a)
  local n = #a
  local function sift(start, stop)
    local root = start
    while root * 2 <= stop do
      local child = root * 2
      if child + 1 <= stop and a[child] < a[child + 1] then child = child + 1 end
      if a[root] < a[child] then a[root], a[child] = a[child], a[root]; root = child else return end
    end
  end
  for s2 = n // 2, 1, -1 do sift(s2, n) end
  for stop = n, 2, -1 do a[1], a[stop] = a[stop], a[1]; sift(1, stop - 1) end
  return a
end
local function insertion(a)
  for i = 2, #a do
    local v, j = a[i], i - 1
    while j >= 1 and a[j] > v do a[j + 1] = a[j]; j = j - 1 end
    a[j + 1] = v
  end
  return a
end
local ref = copy(data); table.sort(ref)
local refs = table.concat(ref, ",")
print("quick", table.concat(quicksort(copy(data)), ",") == refs)
print("merge", table.concat(mergesort(copy(data)), ",") == refs)
print("heap", table.concat(heapsort(copy(data)), ",") == refs)
print("insertion", table.concat(insertion(table.move(data, 1, 500, 1, {})), ",", 1, 10))
print("sorted sample", table.concat(ref, " ", 1, 12), ref[#ref])

print("== text formatting")
local lorem = "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation ullamco laboris nisi ut aliquip ex ea commodo consequat."
local function wrap(txt, width)
  local lines, line = {}, ""
  for word in txt:gmatch("%S+") do
    if #line + #word + 1 > width and #line > 0 then lines[#lines + 1] = line; line = word
    else line = (#line > 0) and (line .. " " .. word) or word end
  end
  if #line > 0 then lines[#lines + 1] = line end
  return lines
end
for _, w in ipairs({ 30, 45 }) do
  for i, l in ipairs(wrap(lorem, w)) do printf("%2d |%-" .. w .. "s|\n", i, l) end
end
local function justify(l, width)
  local words = {}
  for wd in l:gmatch("%S+") do words[#words + 1] = wd end
  if #words == 1 then return l end
  local total = 0
  for _, wd in ipairs(words) do total = total + #wd end
  local gaps, spaces = #words - 1, width - total
  local out = {}
  for i, wd in ipairs(words) do
    out[#out + 1] = wd
    if i <= gaps then out[#out + 1] = (" "):rep(spaces // gaps + ((i <= spaces % gaps) and 1 or 0)) end
  end
  return table.concat(out)
end
for _, l in ipairs(wrap(lorem, 40)) do print("[" .. justify(l, 40) .. "]") end

print("== sieve, n-queens, knapsack")
local function sieve(n)
  local comp, count, last = {}, 0, 0
  for i = 2, n do
    if not comp[i] then
      count = count + 1; last = i
      for j = i * i, n, i do comp[j] = true end
    end
  end
  return count, last
end
print("sieve", sieve(200000))
local function queens(n)
  local count, cols, d1, d2 = 0, {}, {}, {}
  local first
  local pos = {}
  local function place(r)
    if r > n then
      count = count + 1
      if not first then first = table.concat(pos, ",") end
      return
    end
    for c = 1, n do
      if not cols[c] and not d1[r + c] and not d2[r - c + n] then
        cols[c], d1[r + c], d2[r - c + n], pos[r] = true, true, true, c
        place(r + 1)
        cols[c], d1[r + c], d2[r - c + n] = false, false, false
      end
    end
  end
  place(1)
  return count, first
end
for n = 4, 8 do print("queens", n, queens(n)) end
local function knapsack(items, cap)
  local best = {}
  for w = 0, cap do best[w] = 0 end
  for _, it in ipairs(items) do
    for w = cap, it.w, -1 do
      local v = best[w - it.w] + it.v
      if v > best[w] then best[w] = v end
    end
  end
  return best[cap]
end
local items = {}
local r2 = lcg(99)
for i = 1, 60 do items[i] = { w = r2(50), v = r2(100) } end
print("knapsack", knapsack(items, 500), knapsack(items, 100))
-- edit distance
local function lev(a, b)
  local prev = {}
  for j = 0, #b do prev[j] = j end
  for i = 1, #a do
    local cur = { [0] = i }
    for j = 1, #b do
      local cost = a:byte(i) == b:byte(j) and 0 or 1
      cur[j] = math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
    end
    prev = cur
  end
  return prev[#b]
end
print("levenshtein", lev("kitten", "sitting"), lev("rivet", "revert"), lev(lorem:sub(1, 80), lorem:sub(40, 120)))

print("== class system with multiple inheritance and mixins")
local function class(...)
  local parents = { ... }
  local c = {}
  setmetatable(c, { __index = function(t, k)
    for _, p in ipairs(parents) do local v = p[k]; if v ~= nil then t[k] = v; return v end end
  end, __call = function(cls, ...) local o = setmetatable({}, cls); if cls.init then cls.init(o, ...) end return o end })
  c.__index = c
  return c
end
local Named = class()
function Named:init(name) self.name = name end
function Named:getname() return self.name end
local Counter = class()
function Counter:inc() self.count = (self.count or 0) + 1; return self end
function Counter:value() return self.count or 0 end
local Widget = class(Named, Counter)
function Widget:init(name, kind) Named.init(self, name); self.kind = kind end
function Widget:describe() return string.format("%s<%s>#%d", self:getname(), self.kind, self:value()) end
local ws = {}
for i = 1, 5 do ws[i] = Widget("w" .. i, i % 2 == 0 and "even" or "odd") end
for i, w in ipairs(ws) do for _ = 1, i * 3 do w:inc() end end
local descs = {}
for i, w in ipairs(ws) do descs[i] = w:describe() end
print(table.concat(descs, " "))
print(rawget(Widget, "getname") ~= nil, rawget(Widget, "missing"), Widget.missing)
finish()
