# Jump tables: an absolute table (non-PIC dispatch through memory), a relative table
# (PIC dispatch: lea base; movslq; add; jmp *reg) and a table sized only by relocations.
    .text
    .globl _start
    .type _start, @function
_start:
    .cfi_startproc
    mov $3, %edi
    call abs_switch
    mov %eax, %ebx
    mov $2, %edi
    call pic_switch
    add %eax, %ebx
    mov $1, %edi
    call reloc_sized
    add %eax, %ebx
    mov %ebx, %edi
    mov $60, %eax
    syscall
    hlt
    .cfi_endproc
    .size _start, .-_start

    .globl abs_switch
    .type abs_switch, @function
abs_switch:
    .cfi_startproc
    cmp $3, %edi
    ja .Ldefault
    mov %edi, %eax
    jmp *.Labs_table(,%rax,8)
.Lcase0:
    mov $10, %eax
    ret
.Lcase1:
    mov $11, %eax
    ret
.Lcase2:
    mov $12, %eax
    ret
.Ldefault:
    mov $0, %eax
    ret
    .cfi_endproc
    .size abs_switch, .-abs_switch

    .globl pic_switch
    .type pic_switch, @function
pic_switch:
    .cfi_startproc
    cmp $2, %edi
    ja .Lpdefault
    lea .Lpic_table(%rip), %rdx
    mov %edi, %edi
    movslq (%rdx,%rdi,4), %rax
    add %rdx, %rax
    jmp *%rax
.Lp0:
    mov $20, %eax
    ret
.Lp1:
    mov $21, %eax
    ret
.Lp2:
    mov $22, %eax
    ret
.Lpdefault:
    xor %eax, %eax
    ret
    .cfi_endproc
    .size pic_switch, .-pic_switch

# No range check: only the relocations of the table tell its size. (The index is a flag
# from setne, a byte as far as the code shows: its 256 values would cover more than the
# table, so its width proves nothing here.)
    .globl reloc_sized
    .type reloc_sized, @function
reloc_sized:
    .cfi_startproc
    test $1, %dil
    setne %al
    movzbl %al, %eax
    jmp *.Lreloc_table(,%rax,8)
.Lr0:
    mov $30, %eax
    ret
.Lr1:
    mov $31, %eax
    ret
    .cfi_endproc
    .size reloc_sized, .-reloc_sized

    .section .rodata
    .p2align 3
.Labs_table:
    .quad .Lcase0, .Lcase1, .Lcase2, .Lcase2
.Lpic_table:
    .long .Lp0-.Lpic_table, .Lp1-.Lpic_table, .Lp2-.Lpic_table, 0
    .p2align 3
.Lreloc_table:
    .quad .Lr0, .Lr1
    .quad 0
