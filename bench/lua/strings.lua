-- strings.lua: a string-heavy benchmark. Generates a pseudo-random DNA-like text
-- (fasta-style, LCG), then: k-mer frequency counting with string.sub and tables,
-- reverse complement with gsub, pattern matching (find/gmatch/gsub with captures),
-- string.format/concat building, string.rep/upper/lower/byte/char, and a word
-- index. Usage: lua strings.lua [N]   (default 400000 characters)
-- check-size: 20000  (the small size scripts/check-lua.sh runs)
local N = tonumber(arg and arg[1]) or 400000

-- 1. text generation (LCG from the fasta benchmark)
local IM, IA, IC = 139968, 3877, 29573
local last = 42
local function random(max)
  last = (last * IA + IC) % IM
  return max * last / IM
end
local alphabet = { { "a", 0.27 }, { "c", 0.12 }, { "g", 0.12 }, { "t", 0.27 },
  { "B", 0.02 }, { "D", 0.02 }, { "H", 0.02 }, { "K", 0.02 }, { "M", 0.02 },
  { "N", 0.02 }, { "R", 0.02 }, { "S", 0.02 }, { "V", 0.02 }, { "W", 0.02 }, { "Y", 0.02 } }
local acc = 0
for _, p in ipairs(alphabet) do acc = acc + p[2]; p[2] = acc end
local function pick()
  local r = random(1.0)
  for _, p in ipairs(alphabet) do if r < p[2] then return p[1] end end
  return alphabet[#alphabet][1]
end
local chunks = {}
local line = {}
for i = 1, N do
  line[#line + 1] = pick()
  if #line == 60 then chunks[#chunks + 1] = table.concat(line); line = {} end
end
if #line > 0 then chunks[#chunks + 1] = table.concat(line) end
local text = table.concat(chunks, "\n")
local seq = text:gsub("\n", ""):upper()
print(string.format("generated %d chars, %d lines", #seq, #chunks))

-- 2. k-mer frequencies
local function freqs(s, k)
  local t = {}
  for i = 1, #s - k + 1 do
    local m = s:sub(i, i + k - 1)
    t[m] = (t[m] or 0) + 1
  end
  return t
end
for _, k in ipairs({ 1, 2 }) do
  local t = freqs(seq, k)
  local keys = {}
  for m in pairs(t) do if not m:find("[^ACGT]") then keys[#keys + 1] = m end end
  table.sort(keys, function(a, b) if t[a] ~= t[b] then return t[a] > t[b] end return a < b end)
  local total = #seq - k + 1
  for _, m in ipairs(keys) do print(string.format("%s %.3f", m, 100 * t[m] / total)) end
end
for _, m in ipairs({ "GGT", "GGTA", "GGTATT", "GGTATTTTAATT", "GGTATTTTAATTTATAGT" }) do
  local c, pos = 0, 1
  while true do
    local s = seq:find(m, pos, true)
    if not s then break end
    c = c + 1
    pos = s + 1
  end
  print(string.format("%d\t%s", c, m))
end

-- 3. reverse complement (gsub with a table) of each line, then checksum
local comp = { A = "T", C = "G", G = "C", T = "A", B = "V", D = "H", H = "D", K = "M",
  M = "K", N = "N", R = "Y", S = "S", V = "B", W = "W", Y = "R" }
local rc = seq:reverse():gsub(".", comp)
local h = 0
for i = 1, #rc, 7 do h = (h * 31 + rc:byte(i)) % 1000000007 end
print("revcomp hash", h, rc:sub(1, 30))

-- 4. regex-redux-like pattern counting and substitutions
local variants = { "agggtaaa|tttaccct", "[cgt]gggtaaa|tttaccc[acg]", "a[act]ggtaaa|tttacc[agt]t",
  "ag[act]gtaaa|tttac[agt]ct", "agg[act]taaa|ttta[agt]cct" }
local lower = text:gsub("\n", "")
for _, v in ipairs(variants) do
  local c = 0
  for alt in v:gmatch("[^|]+") do
    local _, n = lower:gsub(alt, "")
    c = c + n
  end
  print(v, c)
end
local subst = { { { "tHa[Nt]" }, "<4>" }, { { "aND", "caN", "Ha[DS]", "WaS" }, "<3>" },
  { { "a[NSt]", "BY" }, "<2>" }, { { "<[^>]*>" }, "|" }, { { "|[^|][^|]*|" }, "-" } }
local s2 = lower
for _, p in ipairs(subst) do
  for _, alt in ipairs(p[1]) do s2 = s2:gsub(alt, p[2]) end
end
print("after substitutions", #s2)

-- 5. formatting and word index
local words = {}
for w in (text:lower()):gmatch("[acgt]+") do
  if #w >= 8 then words[w] = (words[w] or 0) + 1 end
end
local wl = {}
for w, c in pairs(words) do wl[#wl + 1] = string.format("%-20s %5d %08x", w:sub(1, 20), c, #w * c) end
table.sort(wl)
print("distinct long words", #wl)
for i = 1, math.min(5, #wl) do print(wl[i]) end
local parts = {}
for i = 1, #chunks, 17 do parts[#parts + 1] = string.format("%5d:%s:%s", i, chunks[i]:sub(1, 10):upper(), chunks[i]:sub(-5):rep(2)) end
local joined = table.concat(parts, ";")
print("joined", #joined, joined:sub(1, 60))
local bytes = 0
for i = 1, #seq, 13 do bytes = bytes + seq:byte(i) end
print("byte sum", bytes, string.char(seq:byte(1, 20)))
