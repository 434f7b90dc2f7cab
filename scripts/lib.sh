# Shared helpers for the scripts in this directory (sourced, not run).

# need_packages PKG...: installs the Debian packages that are missing (as root, or via sudo).
need_packages() {
    local missing=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    echo "installing missing packages: ${missing[*]}" >&2
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >&2
}

# need_cargo: fails with instructions when the Rust toolchain is missing.
need_cargo() {
    command -v cargo >/dev/null 2>&1 || {
        echo "error: cargo not found; install the Rust toolchain (https://rustup.rs) first" >&2
        exit 1
    }
}

# --- Recipes shared by build-real-programs.sh (x86-64) and build-real-aarch64.sh ---------
# One definition of how Lua and the SQLite shell are compiled, so that both architectures'
# builds differ only in the compiler, its target and the PIE flags.

# Lua's string hashes are seeded from time(NULL) and from addresses (luai_makeseed in
# lstate.c); one fixed seed makes a binary do the same work on every run (see build_lua in
# build-real-programs.sh for the measurements that asked for it).
LUA_FIXED_SEED=0x2545f491

# write_lua_build DIR LUA_SRC "CC" "CFLAGS" "LDFLAGS" MULTIARCH: DIR/Makefile whose `lua`
# target is the interpreter with liblua linked statically: every src/*.c except the two
# programs (upstream's LUA_A set) into liblua.a, lua.c against it. -DLUA_USE_LINUX as
# `make linux` (dlopen, POSIX), no readline, the fixed seed; DIR/gen holds the header that
# Debian's luaconf.h includes and debian/rules generates (the source tree stays untouched).
# CC may be several words (clang-19 --target=...). CFLAGS get the Lua defines appended.
write_lua_build() {
    local dir=$1 src=$2 cc=$3 cflags=$4 ldflags=$5 multiarch=$6 f objs=()
    mkdir -p "$dir/gen"
    printf '#ifndef _LUA_DEB_MULTIARCH_\n#define _LUA_DEB_MULTIARCH_\n#define DEB_HOST_MULTIARCH "%s"\n#endif\n' \
        "$multiarch" >"$dir/gen/lua5.4-deb-multiarch.h"
    for f in "$src"/src/*.c; do
        case "$(basename "$f")" in lua.c | luac.c) continue ;; esac
        objs+=("obj/$(basename "$f" .c).o")
    done
    cflags="${cflags% } -std=gnu99 -DLUA_COMPAT_5_3 -DLUA_USE_LINUX -Igen '-Dluai_makeseed(L)=$LUA_FIXED_SEED'"
    # shellcheck disable=SC2016  # $(CC) ... are Makefile text
    {
        printf 'CC = %s\nCFLAGS = %s\nLDFLAGS = %s\nLIBS = -lm -ldl\n' "$cc" "$cflags" "$ldflags"
        printf 'SRC = %s/src\nOBJS = %s\n' "$src" "${objs[*]}"
        printf 'lua: obj/lua.o liblua.a\n\t$(CC) $(CFLAGS) $(LDFLAGS) -o $@ obj/lua.o liblua.a $(LIBS)\n'
        printf 'liblua.a: $(OBJS)\n\t$(AR) rcs $@ $(OBJS)\n'
        printf 'obj/%%.o: $(SRC)/%%.c\n\t@mkdir -p obj\n\t$(CC) $(CFLAGS) -c -o $@ $<\n'
    } >"$dir/Makefile"
}

# Debian's feature set for the SQLite shell (and testfixture), from debian/rules.
SQLITE_DEFS="-DSQLITE_SECURE_DELETE -DSQLITE_ENABLE_COLUMN_METADATA -DSQLITE_ENABLE_FTS3 \
-DSQLITE_ENABLE_FTS3_PARENTHESIS -DSQLITE_ENABLE_FTS4 -DSQLITE_ENABLE_FTS5 -DSQLITE_ENABLE_RTREE=1 \
-DSQLITE_SOUNDEX=1 -DSQLITE_ENABLE_UNLOCK_NOTIFY -DSQLITE_ENABLE_DBSTAT_VTAB \
-DSQLITE_ENABLE_UPDATE_DELETE_LIMIT=1 -DSQLITE_ENABLE_LOAD_EXTENSION -DSQLITE_ENABLE_JSON1 \
-DSQLITE_ENABLE_MATH_FUNCTIONS -DSQLITE_LIKE_DOESNT_MATCH_BLOBS -DSQLITE_THREADSAFE=1 \
-DSQLITE_USE_URI=1 -DSQLITE_ENABLE_PREUPDATE_HOOK -DSQLITE_ENABLE_SESSION -DSQLITE_ENABLE_STMTVTAB \
-DSQLITE_ENABLE_EXPLAIN_COMMENTS -DHAVE_USLEEP=1"

# write_sqlite_shell_build DIR AMALGAMATION "CC" "CFLAGS" "LDFLAGS": DIR/Makefile whose
# `sqlite3` target is the shell from the amalgamation (sqlite3.c + shell.c), SQLITE_DEFS.
write_sqlite_shell_build() {
    local dir=$1 amalg=$2 cc=$3 cflags=$4 ldflags=$5
    # shellcheck disable=SC2016  # $(CC) ... are Makefile text
    {
        printf 'CC = %s\nCFLAGS = %s\nDEFS = %s\nA = %s\n' "$cc" "$cflags" "$SQLITE_DEFS" "$amalg"
        printf 'LDFLAGS = %s\nLIBS = -lm -ldl -lpthread\n' "$ldflags"
        printf 'sqlite3: sqlite3.o shell.o\n\t$(CC) $(CFLAGS) $(LDFLAGS) -o $@ shell.o sqlite3.o $(LIBS)\n'
        printf '%%.o: $(A)/%%.c\n\t$(CC) $(CFLAGS) $(DEFS) -I$(A) -c -o $@ $<\n'
    } >"$dir/Makefile"
}
