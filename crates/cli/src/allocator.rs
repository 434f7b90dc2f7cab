//! How the process uses glibc's allocator: two settings at startup and a way to hand freed
//! memory back, for the peak memory of large programs.
//!
//! Rivet's phases allocate in rayon's worker threads and free much of it before the next
//! phase (discovery's instructions and blocks of code that stays, fragment plans, debug
//! info). By default glibc gives each thread an arena of its own (up to eight per core) and
//! raises its mmap threshold past every large block it frees, so that later large buffers come
//! from the arenas too. The freed space stays in the arenas, in pages that the long-lived
//! allocations between them keep from being returned: on bench/scale's 50 MB program, 0.77 GB
//! of free arena space at the end of `optimize` for 0.41 GB in use, and a resident peak of
//! 1.49 GiB. Two arenas and a fixed 256 KiB mmap threshold (large buffers map and unmap
//! their own pages) bring that peak to 1.27 GiB at the same speed; one arena costs a third
//! more time in lock contention.
//!
//! No safe wrapper for `mallopt` or `malloc_trim` exists (std, nix and rustix have none); both
//! take integers only and touch nothing but the allocator's own state.

/// Sets the arena count and the mmap threshold. Called once, first thing in `main`.
pub(crate) fn tune() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[allow(unsafe_code)]
    // SAFETY: mallopt(3) only sets allocator parameters; called before any thread starts.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 * 1024);
    }
}

/// Hands the memory freed so far back to the system: the free pages of every arena
/// (`malloc_trim`), which glibc otherwise keeps for later allocations of the thread that
/// freed them.
pub(crate) fn return_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[allow(unsafe_code)]
    // SAFETY: malloc_trim(3) is thread-safe and only releases unused heap pages.
    unsafe {
        libc::malloc_trim(0);
    }
}
