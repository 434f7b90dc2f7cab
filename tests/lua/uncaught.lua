-- uncaught.lua: the stand-alone interpreter's own paths: output buffering across
-- an uncaught error (message handler, traceback on stderr) and the exit status (1). scripts/check-lua.sh compares stdout, stderr
-- and the exit status.
io.write("buffered line without flush\n")
io.stdout:setvbuf("full")
for i = 1, 100 do io.write(string.format("%3d%s", i, i % 10 == 0 and "\n" or " ")) end
io.stderr:write("to stderr: ", 42, "\n")
print(#arg, arg[0])
local function fail(n)
  if n == 0 then error("uncaught failure at depth " .. n) end
  return (fail(n - 1))
end
local function level1() fail(3) end
print("before the error")
level1()
print("never printed")
