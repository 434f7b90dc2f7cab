# Constructs Rivet must refuse to model, each in its own function.
    .text
    .globl _start
    .type _start, @function
_start:
    .cfi_startproc
    mov $0, %edi
    mov $60, %eax
    syscall
    hlt
    .cfi_endproc
    .size _start, .-_start

# Data in the middle of code.
    .globl data_in_code
    .type data_in_code, @function
data_in_code:
    ret
    .byte 0x06, 0x07
    .size data_in_code, .-data_in_code

# A branch into the middle of an instruction.
    .globl overlapping
    .type overlapping, @function
overlapping:
    jmp .Lmid+1
.Lmid:
    mov $0x90c3, %eax
    ret
    .size overlapping, .-overlapping

# Execution continues into the next function.
    .globl falls_off
    .type falls_off, @function
falls_off:
    add $1, %eax
    .size falls_off, .-falls_off
    .globl next_one
    .type next_one, @function
next_one:
    ret
    .size next_one, .-next_one

# A call ends the symbol's size, but code no function claims follows (a size cut short): the
# call may return into it. (calls_next shows that next_one returns.)
    .globl sized_short
    .type sized_short, @function
sized_short:
    call next_one
    .size sized_short, .-sized_short
    add $1, %eax
    ret
    .globl calls_next
    .type calls_next, @function
calls_next:
    call next_one
    add $2, %eax
    ret
    .size calls_next, .-calls_next

# A table dispatch with neither range check nor relocations (the table is in code).
    .globl unbounded
    .type unbounded, @function
unbounded:
    lea .Lt(%rip), %rdx
    movslq (%rdx,%rdi,4), %rax
    add %rdx, %rax
    jmp *%rax
    ret
    .size unbounded, .-unbounded
    .section .rodata
.Lt:
    .long 0
