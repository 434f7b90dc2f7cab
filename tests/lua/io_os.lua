local finish, sortedkeys = dofile((arg[0]:gsub("[^/]*$", "")) .. "lib/harness.lua")
-- io_os.lua: io library on a temporary file (removed at the end), io.lines,
-- read formats, seek, buffering, popen, and the deterministic parts of os
print("== write and read back")
local name = os.tmpname()
-- the temp file name is random: hide it in messages
local function clean(...)
  local t = table.pack(...)
  for i = 1, t.n do
    if type(t[i]) == "string" then t[i] = t[i]:gsub(name:gsub("%p", "%%%0"), "TMP") end
  end
  return table.unpack(t, 1, t.n)
end
local f = assert(io.open(name, "w"))
print(io.type(f), io.type(io.stdout), io.type(42))
f:write("line one\n", "line two\n", 42, " ", 3.5, "\n")
for i = 1, 100 do f:write(string.format("%d %s %.2f\n", i, ("x"):rep(i % 7), i / 8)) end
f:write("no newline at end")
print(f:seek("cur"), f:seek("end"), f:seek("set", 5))
f:close()
print(io.type(f), pcall(f.write, f, "x"))
f = assert(io.open(name, "r"))
print(f:read("l"))
print(f:read("L"))
print(f:read("n", "n"))
print(f:read("l"))
local cnt, total = 0, 0
for line in f:lines() do
  cnt = cnt + 1
  local n = line:match("^(%d+)")
  if n then total = total + tonumber(n) end
end
print("lines", cnt, total, f:read("a") == "", f:read("l"), f:read(0))
f:seek("set", 0)
print(f:read(4), f:read(0), f:read(5), f:seek("cur"))
local all = f:read("a")
print(#all, select(2, all:gsub("\n", "")))
f:seek("set")
local chunks = {}
repeat
  local c = f:read(256)
  if c then chunks[#chunks + 1] = #c end
until not c
print("chunks", #chunks, table.concat(chunks, ","))
f:close()
-- io.lines with formats
local nums = {}
for a, b in io.lines(name, 1, 2) do
  nums[#nums + 1] = a .. b
  if #nums == 5 then break end
end
print(table.concat(nums, "|"))
local ln = 0
for l in io.lines(name, "L") do ln = ln + #l end
print("total bytes via lines L", ln)
print(clean(pcall(io.lines, name .. ".does-not-exist")))

print("== append, update modes, numbers")
f = assert(io.open(name, "w"))
f:write("0x10 1e2 -7 .5 12abc\n3.25\n  99  \nnotanumber\n")
f:close()
f = assert(io.open(name, "r"))
print(f:read("n", "n", "n", "n"))
print(f:read("n"), f:read("l"))
print(f:read("n"), f:read("n"), f:read("n"), f:read("l"))
f:close()
f = assert(io.open(name, "a"))
f:write("appended\n")
f:close()
f = assert(io.open(name, "r+"))
f:write("XXXX")
f:seek("set", 0)
print(f:read("l"))
f:close()
local lines = {}
for l in io.lines(name) do lines[#lines + 1] = l end
print(#lines, lines[#lines])
f = assert(io.open(name, "wb"))
local bytes = {}
for i = 0, 255 do bytes[#bytes + 1] = string.char(i) end
f:write(table.concat(bytes):rep(64))
f:close()
f = assert(io.open(name, "rb"))
local data = f:read("a")
f:close()
local sum = 0
for i = 1, #data, 97 do sum = sum + data:byte(i) end
print("binary", #data, sum, data:sub(1, 3) == "\0\1\2")
print(pcall(io.open, name, "rw"))

print("== buffering and io.output/io.input")
f = assert(io.open(name, "w"))
print(f:setvbuf("full", 1024), f:setvbuf("line"), f:setvbuf("no"))
local old = io.output()
io.output(f)
io.write("via io.write ", 1, " ", 2.5, "\n")
io.output():write("via io.output():write\n")
io.output(old)
f:close()
io.input(name)
print(io.read("l"))
print(io.read("L"))
print(io.read("l"))
io.input():close()
io.input(io.stdin)
print(pcall(io.close))
f = assert(io.open(name, "w"))
f:write(string.rep("0123456789", 1000))
print(f:flush() == f, f:seek("end"))
f:close()
print(#io.lines(name, "a")())

print("== files and errors")
print(io.open("/nonexistent-dir/x", "r"))
print(io.open("/", "w"))
print(clean(os.remove(name .. ".nope")))
print(clean(os.rename(name .. ".nope", name .. ".nope2")))
local name2 = name .. ".renamed"
print(os.rename(name, name2), io.open(name) == nil)
print(os.remove(name2), io.open(name2) == nil)
f = io.tmpfile()
f:write("tmpfile content\n")
f:seek("set")
print(f:read("a"))
f:close()

print("== popen")
local p = io.popen("printf 'a\\nb\\nc\\n'", "r")
local got = {}
for l in p:lines() do got[#got + 1] = l end
print(table.concat(got, ","), p:close())
local p2 = io.popen("exit 3")
print(p2:close())
local p3 = io.popen("cat > /dev/null", "w")
p3:write("discarded")
print(p3:close())

print("== os")
print(os.date("!%Y-%m-%d %H:%M:%S", 0), os.date("!%Y-%m-%d %H:%M:%S", 1700000000))
print(os.date("!%A %B %d %j %U %w %y %p", 1234567890))
local t = os.date("!*t", 1700000000)
print(t.year, t.month, t.day, t.hour, t.min, t.sec, t.wday, t.yday, t.isdst)
print(os.date("!%c", 86400 * 365), os.date("!%x %X", 0), os.date("!%%"))
print(pcall(os.date, "%Ez", 0))
local t1 = os.time({ year = 2020, month = 1, day = 1, hour = 12 })
local t2 = os.time({ year = 2020, month = 3, day = 1, hour = 12 })
print("days", (t2 - t1) // 86400, os.difftime(t2, t1), math.type(os.difftime(t2, t1)))
local norm = os.date("*t", os.time({ year = 2021, month = 14, day = 35, hour = 12 }))
print("normalized", norm.year, norm.month, norm.day)
print(type(os.time()), type(os.clock()), os.getenv("RIVET_SURELY_UNSET_VARIABLE"))
print(pcall(os.time, { year = 2020 }))
print(os.execute() ~= nil, os.execute("exit 0"))
print(os.execute("exit 5"))
print(os.execute("kill -9 $$"))
print(os.setlocale(), os.setlocale("C"), os.setlocale(nil, "numeric"))
local tn = os.tmpname() -- creates the file (mkstemp)
print(type(tn), io.open(tn) ~= nil, os.remove(tn), io.open(tn) == nil)
finish()
