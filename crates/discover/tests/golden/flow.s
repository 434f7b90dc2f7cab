# Calls and exits: direct and conditional tail calls, a tail call through a pointer slot,
# a computed goto, noreturn functions found by name (abort) and by analysis (die),
# a secondary entry point, a function known only from its FDE, and a symbol without size.
    .text
    .globl _start
    .type _start, @function
_start:
    .cfi_startproc
    mov $0, %edi
    call interp
    mov %eax, %edi
    call tail_user
    mov %eax, %edi
    call second_entry
    mov %eax, %edi
    call second_entry_inner
    call .Lhidden
    call nosize
    mov $0, %edi
    mov $60, %eax
    syscall
    hlt
    .cfi_endproc
    .size _start, .-_start

    .globl abort
    .type abort, @function
abort:
    .cfi_startproc
    ud2
    .cfi_endproc
    .size abort, .-abort

# Never returns: every path ends in abort.
    .globl die
    .type die, @function
die:
    .cfi_startproc
    sub $8, %rsp
    .cfi_def_cfa_offset 16
    call abort
    .cfi_endproc
    .size die, .-die

    .globl tail_user
    .type tail_user, @function
tail_user:
    .cfi_startproc
    test %edi, %edi
    js .Lbad
    je helper
    cmp $100, %edi
    jg .Lviaptr
    jmp helper
.Lviaptr:
    jmp *fnptr(%rip)
.Lbad:
    call die
    .cfi_endproc
    .size tail_user, .-tail_user

    .globl helper
    .type helper, @function
helper:
    .cfi_startproc
    lea 1(%rdi), %eax
    ret
    .cfi_endproc
    .size helper, .-helper

# A threaded interpreter: the label table is in data, the dispatch loads through a register
# set up in another block, so only the stored label addresses tell where it can go.
    .globl interp
    .type interp, @function
interp:
    .cfi_startproc
    lea .Lops(%rip), %rcx
    xor %eax, %eax
    mov (%rcx), %rdx
    jmp *%rdx
.Lop_inc:
    add $1, %eax
    mov 16(%rcx), %rdx
    jmp *%rdx
.Lop_end:
    ret
    .cfi_endproc
    .size interp, .-interp

    .globl second_entry
    .type second_entry, @function
second_entry:
    .cfi_startproc
    add $1, %edi
    .globl second_entry_inner
    .type second_entry_inner, @function
second_entry_inner:
    lea 2(%rdi), %eax
    ret
    .cfi_endproc
    .size second_entry, .-second_entry

.Lhidden:
    .cfi_startproc
    mov $7, %eax
    ret
    .cfi_endproc

# A call ends the function's extent: the compiler emitted nothing after it, so that path ends
# at the call, though `helper` returns to its other callers.
    .globl ends_in_call
    .type ends_in_call, @function
ends_in_call:
    .cfi_startproc
    test %edi, %edi
    jz 1f
    ret
1:  call helper
    .cfi_endproc
    .size ends_in_call, .-ends_in_call

# That trailing call does not make `helper` noreturn: its own `ret` shows it returns. (Were it
# taken for noreturn, so would tail_only be, and the code after the call to it would be lost.)
    .globl tail_only
    .type tail_only, @function
tail_only:
    jmp helper
    .size tail_only, .-tail_only
    .globl calls_tail_only
    .type calls_tail_only, @function
calls_tail_only:
    call tail_only
    add $1, %eax
    ret
    .size calls_tail_only, .-calls_tail_only
    .p2align 4

    .globl nosize
    .type nosize, @function
nosize:
    xor %eax, %eax
    ret
    .p2align 4

    .data
    .p2align 3
fnptr:
    .quad helper
.Lops:
    .quad .Lop_inc, .Lop_end, .Lop_end
