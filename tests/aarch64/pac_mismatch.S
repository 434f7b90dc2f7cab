// PAC check: `f` signs its return address with one SP and authenticates it with
// another, so the authenticated address is corrupt. On a CPU with pointer
// authentication the `ret` faults (SIGSEGV); where the PAC hints are NOPs the
// program exits 0.
        .text
        .globl _start
_start:
        bl      f
        mov     x0, #0
        mov     x8, #93          // exit
        svc     #0
f:
        paciasp
        sub     sp, sp, #16
        autiasp
        add     sp, sp, #16
        ret
