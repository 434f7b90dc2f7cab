local finish, sortedkeys = dofile((arg[0]:gsub("[^/]*$", "")) .. "lib/harness.lua")
-- strings.lua: the string library (format, patterns, pack/unpack, utf8, ...)
print("== basics")
local s = "Hello, Lua World!"
print(#s, s:upper(), s:lower(), s:reverse(), s:len())
print(s:sub(1, 5), s:sub(-6), s:sub(-100, 3), s:sub(8, -8), s:sub(0), s:sub(10, 5) == "")
print(s:byte(1), s:byte(-1), s:byte(1, 5))
print(string.char(72, 105, 33, 0, 255):byte(1, -1))
print(("ab"):rep(5), ("ab"):rep(3, ","), ("x"):rep(0), ("x"):rep(-1) == "")
print(("%d items"):format(3), tostring(12), tostring(1.5), tostring(-0.0), tostring(1e300 * 10))
print(string.len("\0\1\2"), #"\u{10FFFF}", "\x41\66\z
       C", "a\tb\\n")
print(tonumber("0x10"), tonumber("  12  "), tonumber("1e2"), tonumber("z", 36), tonumber("777", 8),
  tonumber("ff", 16), tonumber(""), tonumber("1 2"), tonumber("0x1p4"), tonumber(".5"), tonumber("5."))
print(math.type(tonumber("10")), math.type(tonumber("10.0")), math.type(tonumber("9223372036854775808")))
print("10" + 5, "3.5" * 2, 10 .. 20, "2" ^ 2, -"3", "0x10" + 0, 7 // "2")
print(("abc"):find("b"), ("abc"):find("x"), ("a.b"):find(".", 1, true), ("aaa"):find("a", -1))

print("== string.format")
local fmts = {
  "%d", "%5d", "%-5d|", "%05d", "%+d", "% d", "%x", "%X", "%#x", "%o", "%#o", "%c",
  "%i", "%.3d", "%10.4d|",
}
for _, f in ipairs(fmts) do
  local vals = { 0, 1, -1, 42, 255, 65, 1000000, math.maxinteger, math.mininteger }
  local out = {}
  for _, v in ipairs(vals) do
    if f ~= "%c" or (v >= 0 and v < 256) then out[#out + 1] = string.format(f, v) end
  end
  print(f, table.concat(out, " "))
end
local ffmts = { "%f", "%.0f", "%.2f", "%10.3f|", "%-10.1f|", "%e", "%.3E", "%g", "%.10g", "%G",
  "%a", "%A", "%.3a", "%+.1f", "%#.0f", "%08.2f", "% .3g" }
for _, f in ipairs(ffmts) do
  local vals = { 0.0, -0.0, 1.0, -1.5, 3.14159265358979, 1e10, 1.5e-7, 2 ^ 63, 123456789.125,
    1 / 3, math.huge, -math.huge }
  local out = {}
  for _, v in ipairs(vals) do out[#out + 1] = string.format(f, v) end
  print(f, table.concat(out, " "))
end
print(string.format("%s|%10s|%-10s|%.2s|%5.1s|", "abc", "abc", "abc", "abc", "abc"))
print(string.format("%s %s %s %s", nil, true, 12, 1.25))
print(string.format("%q", "line1\nline2\0tab\t\"quoted\"\\ \200\r"))
print(string.format("%q %q %q %q", 42, 1.5, math.mininteger, 2 ^ 63))
print(string.format("%q %q", math.huge, -math.huge))
print(string.format("%%|%5s%%|%c%c%c", "x", 76, 117, 97))
print(pcall(string.format, "%d", 1.5))
print(pcall(string.format, "%d", "x"))
print(pcall(string.format, "%z", 1))
print(pcall(string.format, "%10.123f", 1))
print(string.format("%-20s|%20s|", ("x"):rep(25), "y"))
print(string.format("%.14g %.17g %.3f", 0.1, 0.1, 2.0005))
print(string.format("%5.2f%%", 99.555), string.format("%d%%", 100))

print("== patterns: find / match")
local pats = {
  { "hello world", "o w" }, { "hello world", "(o)(r)" }, { "hello world", "%a+" },
  { "  trim me  ", "^%s*(.-)%s*$" }, { "key = value", "(%w+)%s*=%s*(%w+)" },
  { "2024-01-15", "(%d+)-(%d+)-(%d+)" }, { "THE (quick) fox", "%((%a+)%)" },
  { "f(a(b)c)d", "%b()" }, { "THE (quick) fox", "%f[%a]%a+" }, { "abc123def", "%d+" },
  { "abc", "()b()" }, { "aaa", "a-" }, { "aaa", "a-$" }, { "aaab", "a*b" }, { "b", "a?b" },
  { "[x]", "[%[%]]" }, { "x^y", "[%^]" }, { "a.b", "%." }, { "hello", "l+" },
  { "one two  three", "(%S+)%s+(%S+)" }, { "\0abc\0", "%z?abc" }, { "caps AND lower", "%u+" },
  { "a,b;c", "[,;]" }, { "x=1, y=22, z=333", "y=(%d+)" }, { "abcabc", "(abc)%1" },
  { "hello", "[^aeiou]+" }, { "tab\there", "%c" }, { "punct!?", "%p+" }, { "0xFF", "%x+$" },
}
for i, p in ipairs(pats) do
  print(i, p[2], string.find(p[1], p[2]))
  print(i, p[2], string.match(p[1], p[2]))
end
print(string.match("hello", "()ll()"))
print(string.match("  x", "^%s*()"))
print(pcall(string.match, "x", "%"))
print(pcall(string.find, "x", "[a"))
print(pcall(string.match, "x", "(()"))
print(pcall(string.rep, "x", 1 << 40))

print("== gsub / gmatch")
print(string.gsub("hello world", "o", "0"))
print(string.gsub("hello world", "o", "0", 1))
print(string.gsub("hello world", "(%w+)", "<%1>"))
print(string.gsub("hello world", "%w+", "%0 %0"))
print(string.gsub("abc", "", "-"))
print(string.gsub("hello", "(l)(l)", "%2%1"))
print(string.gsub("$name is $age", "%$(%w+)", { name = "Lua", age = 30 }))
print(string.gsub("$name is $unknown", "%$(%w+)", { name = "Lua" }))
print(string.gsub("1 2 3 4", "%d", function(d) return d * d end))
print(string.gsub("1 2 3 4", "%d", function(d) if d == "2" then return false end return "x" end))
print(string.gsub("abc", ".", { a = 1, b = false }))
print(pcall(string.gsub, "abc", ".", { a = 1, b = true }))
print(pcall(string.gsub, "abc", "(a)", "%2"))
print(string.gsub("hello world from lua", "(%w+) (%w+)", "%2 %1"))
print(string.gsub("x = 1 + 2", "%s", ""))
print(string.gsub("%d", "%%", "%%%%"))
local words = {}
for w in string.gmatch("The quick brown fox jumps over the lazy dog", "%a+") do words[#words + 1] = w end
print(#words, table.concat(words, "|"))
for k, v in string.gmatch("a=1, b=2, c=3, dd=44", "(%w+)=(%w+)") do printf("%s->%s ", k, v) end
print()
for pos, w in string.gmatch("one two three", "()(%a+)") do printf("%d:%s ", pos, w) end
print()
local n = 0
for _ in string.gmatch(("ab"):rep(1000), "ab") do n = n + 1 end
print("gmatch count", n)
print(select("#", string.gsub(("a"):rep(10000), "a", "bb")), #string.gsub(("a"):rep(10000), "a", "bb"))
-- CSV-ish parsing with patterns
local csv = 'name,age,"city, state",zip\nBob,42,"Austin, TX",78701\n"Al ""Q""",7,Nowhere,00000'
for line in csv:gmatch("[^\n]+") do
  local fields, pos = {}, 1
  line = line .. ","
  while pos <= #line do
    local c = line:sub(pos, pos)
    if c == '"' then
      local txt, i = "", pos + 1
      while true do
        local a, b = line:find('"', i, true)
        if line:sub(b + 1, b + 1) == '"' then
          txt = txt .. line:sub(i, a)
          i = b + 2
        else
          txt = txt .. line:sub(i, a - 1)
          pos = b + 2
          break
        end
      end
      fields[#fields + 1] = txt
    else
      local e = line:find(",", pos, true)
      fields[#fields + 1] = line:sub(pos, e - 1)
      pos = e + 1
    end
  end
  print(#fields, table.concat(fields, " | "))
end

print("== pack / unpack")
local packs = {
  { "i4", -2 }, { "<i4", 1 }, { ">i4", 1 }, { "=I2", 65535 }, { "b", -128 }, { "B", 255 },
  { "<h", -1 }, { "<H", 4660 }, { "<j", math.mininteger }, { "<J", -1 }, { "<T", 12345 },
  { "<d", 1.5 }, { ">d", -0.1 }, { "<f", 0.25 }, { "<n", math.pi }, { "z", "zero-terminated" },
  { "s1", "short" }, { "<s4", "len4" }, { "c8", "fixed" }, { "<i3", -8388608 }, { "<I7", 2 ^ 50 | 0 },
  { "<i16", -3 }, { ">I16", 7 },
}
for _, p in ipairs(packs) do
  local bin = string.pack(p[1], p[2])
  local hex = bin:gsub(".", function(c) return string.format("%02x", c:byte()) end)
  print(p[1], #bin, hex, string.unpack(p[1], bin))
end
local rec = string.pack("<i4 d s2 z B", 100, 2.5, "name", "tail", 7)
print(#rec, string.unpack("<i4 d s2 z B", rec))
print(string.packsize("<i4 d"), string.packsize("!8 i1 i8"), string.packsize("<i1 !4 i8"), string.packsize("c10"))
print(string.unpack("<i2", "\1\2\3\4", 3))
print(pcall(string.pack, "i17", 1))
print(pcall(string.pack, "<i1", 200))
print(pcall(string.unpack, "<i4", "abc"))
print(string.pack(">!4 i1 Xi4 i4", 1, 2):byte(1, -1))
local t = {}
for i = 1, 50 do t[i] = string.pack("<i8", i * i * i) end
local blob = table.concat(t)
local sum, pos = 0, 1
while pos <= #blob do
  local v
  v, pos = string.unpack("<i8", blob, pos)
  sum = sum + v
end
print("pack sum", sum, #blob)

print("== utf8")
local u = "héllo wörld ✓ 𝄞 ∑"
print(utf8.len(u), #u, utf8.char(72, 233, 8364, 119070), utf8.charpattern)
for p, c in utf8.codes(u) do printf("%d:%X ", p, c) end
print()
print(utf8.codepoint(u, 1, -1))
print(utf8.offset(u, 3), utf8.offset(u, -1), utf8.offset(u, 0, 3), utf8.offset(u, 100))
print(utf8.len("\xff"), utf8.len(u, 3), pcall(utf8.len, u, 3, 100))
print(pcall(utf8.codepoint, "\xff"))
print(utf8.len("\u{7FFFFFFF}", 1, -1, true), utf8.len("\u{7FFFFFFF}"))
local cps = {}
for _, c in utf8.codes("∀x∈ℝ") do cps[#cps + 1] = c end
print(table.concat(cps, ","), utf8.char(table.unpack(cps)))
for w in u:gmatch(utf8.charpattern) do printf("[%s]", w) end
print()
-- reverse a utf8 string codepoint-wise
local rev = {}
for _, c in utf8.codes(u) do table.insert(rev, 1, utf8.char(c)) end
print(table.concat(rev))

print("== comparison and conversion")
local strs = { "b", "a", "ab", "", "B", "a\0b", "a\0a", "Z", "zz", "10", "9" }
table.sort(strs)
for i, v in ipairs(strs) do strs[i] = string.format("%q", v) end
print(table.concat(strs, " "))
print("a" < "b", "a" < "a\0", "Z" < "a", "" < "a", "abc" <= "abc", "10" < "9")
print(pcall(function() return "a" < 1 end))
print(math.tointeger("8"), math.tointeger(8.0), math.tointeger(8.5), tostring(2^63) , math.tointeger(2^62))
print(string.format("%.3f", "1e3"), ("x"):rep(3, "ab"))

print("== long string building")
local parts = {}
for i = 1, 20000 do parts[i] = string.format("%05d;", i) end
local big = table.concat(parts)
print(#big, big:sub(1, 30), big:sub(-30))
local acc = ""
for i = 1, 2000 do acc = acc .. string.char(65 + i % 26) end
print(#acc, acc:sub(1, 52))
local cnt = select(2, big:gsub("0", "0"))
print("zeros", cnt, big:find("19999;", 1, true), #big:upper(), big:reverse():sub(1, 12))
local lines = {}
for i = 1, 300 do lines[i] = ("line %d: %s"):format(i, ("*"):rep(i % 40)) end
local text = table.concat(lines, "\n")
local nl, longest = 0, 0
for l in text:gmatch("[^\n]+") do nl = nl + 1; if #l > longest then longest = #l end end
print("lines", nl, longest, #text)
-- string keys interning / equality
local a1, a2 = ("abc"):rep(100), ("abc"):rep(99) .. "abc"
print(a1 == a2, #a1, a1 < a2, a1:sub(1, 10) == ("abcabcabca"))
-- string.byte/char round trip over all bytes
local all = {}
for i = 0, 255 do all[#all + 1] = i end
local allstr = string.char(table.unpack(all))
local round = { allstr:byte(1, -1) }
local ok = #round == 256
for i = 1, 256 do ok = ok and round[i] == i - 1 end
print("byte round trip", ok, #allstr, allstr:upper():sub(98, 123), allstr:lower():sub(66, 91))
print("%q round trip", load("return " .. string.format("%q", allstr))() == allstr)
finish()
