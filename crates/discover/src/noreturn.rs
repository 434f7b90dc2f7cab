//! Functions that never return.
//!
//! A call to such a function ends its basic block: the bytes after it belong to whatever comes
//! next (often another function), so treating it as an ordinary call would invent a
//! fall-through edge. Known library functions are listed by name; functions of the binary are
//! found by a fixpoint over their CFGs (no reachable way out but traps and noreturn calls).

/// Library and runtime functions that never return. Matched against symbol names, PLT names
/// (version suffix stripped) and demangled-prefix families below.
const NORETURN_NAMES: &[&str] = &[
    "exit",
    "_exit",
    "_Exit",
    "quick_exit",
    "abort",
    "__assert_fail",
    "__assert_perror_fail",
    "__assert",
    "__stack_chk_fail",
    "__stack_chk_fail_local",
    "__fortify_fail",
    "__chk_fail",
    "__libc_fatal",
    "__cxa_throw",
    "__cxa_rethrow",
    "__cxa_bad_cast",
    "__cxa_bad_typeid",
    "__cxa_throw_bad_array_new_length",
    "__cxa_call_unexpected",
    "__cxa_call_terminate",
    "__cxa_pure_virtual",
    "__cxa_deleted_virtual",
    "_Unwind_Resume",
    "longjmp",
    "_longjmp",
    "siglongjmp",
    "__longjmp_chk",
    "pthread_exit",
    "err",
    "errx",
    "verr",
    "verrx",
    "thrd_exit",
    "__ubsan_handle_builtin_unreachable",
    "_ZSt9terminatev",
    "_ZSt10unexpectedv",
    "_ZN10__cxxabiv111__terminateEPFvvE",
];

/// True when `name` (a symbol or PLT name, possibly with `@VERSION`) never returns.
pub fn is_known_noreturn(name: &str) -> bool {
    let base = name.split('@').next().unwrap_or(name);
    // libstdc++'s std::__throw_* helpers (std::__throw_bad_alloc(), ...).
    if base.starts_with("_ZSt") && base.contains("__throw_") {
        return true;
    }
    NORETURN_NAMES.contains(&base)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(is_known_noreturn("abort"));
        assert!(is_known_noreturn("exit@GLIBC_2.2.5"));
        assert!(is_known_noreturn("_ZSt20__throw_length_errorPKc"));
        assert!(!is_known_noreturn("printf"));
        assert!(!is_known_noreturn("exit_handler"));
    }
}
