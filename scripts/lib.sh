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
