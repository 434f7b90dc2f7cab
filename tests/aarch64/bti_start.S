// Start-up code for a dynamically linked C program whose every page is guarded by BTI.
//
// Debian 12's arm64 start files (crt1.o, crti.o, crtbegin.o) have no BTI landing pads and no
// GNU property note, so a program linked with them loses the BTI bit, or, forced with
// `-z force-bti`, dies with SIGILL the first time the C library calls into them
// (`__wrap_main`, `_init`, `frame_dummy` are reached by `blr`). A program linked with
// `-nostartfiles` and this file instead keeps BTI enforced on all of its own code: it is how
// scripts/build-real-aarch64.sh builds its `clang-bti` variant of Lua.
//
// What the usual start files do that this one does not: no DT_INIT `_init`/`_fini` (glibc
// 2.34 and later run the program's init and fini arrays itself when `__libc_start_main` is
// given no init function), no transactional-memory clone registration (crtbegin's
// `register_tm_clones`: nothing here uses libitm).

        .text
        .p2align 2
        .globl  _start
        .type   _start, %function
_start:
        // Entered by the kernel (not by a branch), so no landing pad is needed; `bti c`
        // costs nothing and keeps the rule "every function starts with one" simple.
        bti     c
        mov     x29, #0                 // the outermost frame
        mov     x30, #0
        mov     x5, x0                  // rtld_fini, from the dynamic loader
        ldr     x1, [sp]                // argc
        add     x2, sp, #8              // argv
        mov     x6, sp                  // stack_end
        adrp    x0, main                // main, reached by the C library's `blr`
        add     x0, x0, :lo12:main
        mov     x3, #0                  // init: none, glibc runs the init arrays
        mov     x4, #0                  // fini: none
        bl      __libc_start_main
        bl      abort
        .size   _start, . - _start

        // atexit() (from libc_nonshared.a) passes it to __cxa_atexit: 0 in an executable,
        // as crtbegin.o defines it.
        .data
        .p2align 3
        .globl  __dso_handle
        .hidden __dso_handle
        .type   __dso_handle, %object
__dso_handle:
        .quad   0
        .size   __dso_handle, 8

        .section .note.GNU-stack, "", %progbits

        .section .note.gnu.property, "a"
        .p2align 3
        .word   4                       // n_namesz
        .word   16                      // n_descsz
        .word   5                       // NT_GNU_PROPERTY_TYPE_0
        .asciz  "GNU"
        .word   0xc0000000              // GNU_PROPERTY_AARCH64_FEATURE_1_AND
        .word   4
        .word   3                       // BTI | PAC
        .word   0
