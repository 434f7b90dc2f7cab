// BTI check: branch indirectly (br) to `target`, which starts with a landing pad
// only when LANDING is defined. Exit status 0 means the branch landed.
        .text
        .globl _start
_start:
        adr     x1, target
        br      x1
        .p2align 4
target:
#ifdef LANDING
        bti     j
#endif
        mov     x0, #0
        mov     x8, #93          // exit
        svc     #0

#ifdef PROPERTY
        .section .note.gnu.property, "a"
        .p2align 3
        .word   4                // n_namesz
        .word   16               // n_descsz
        .word   5                // NT_GNU_PROPERTY_TYPE_0
        .asciz  "GNU"
        .word   0xc0000000       // GNU_PROPERTY_AARCH64_FEATURE_1_AND
        .word   4
        .word   1                // GNU_PROPERTY_AARCH64_FEATURE_1_BTI
        .word   0
#endif
