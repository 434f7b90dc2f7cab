/* pick(k): a switch over k in [0, 15] through a table of offsets from the table's start,
   followed directly by apply(fn, x), which calls fn(x + 1) as a tail call through a register
   once its frame is gone. The assembler stores each entry as the case's label plus the
   entry's distance from the table's start (S + A of a PC-relative relocation), so the later
   entries of pick's table, which lead to its last case, seem to point into apply. They are
   pick's, read by pick's dispatch, and prove nothing about apply: its jump is a tail call.
   PostgreSQL's expression_tree_walker and the functions next to it have this shape. */
	.text
	.globl	pick
	.type	pick, @function
pick:
	.cfi_startproc
	cmp	$15, %edi
	ja	.Lother
	mov	%edi, %edi
	lea	.Ltable(%rip), %rdx
	movslq	(%rdx,%rdi,4), %rax
	add	%rdx, %rax
	jmp	*%rax
.Lzero:
	mov	$100, %eax
	ret
.Lone:
	mov	$101, %eax
	ret
.Lother:
	mov	$-1, %eax
	ret
	.cfi_endproc
	.size	pick, .-pick

	.globl	apply
	.type	apply, @function
apply:
	.cfi_startproc
	push	%rbx
	.cfi_def_cfa_offset 16
	.cfi_offset %rbx, -16
	mov	%rdi, %rbx
	lea	1(%rsi), %rdi
	mov	%rbx, %rcx
	pop	%rbx
	.cfi_def_cfa_offset 8
	jmp	*%rcx
	.cfi_endproc
	.size	apply, .-apply

	.section .rodata
	.p2align 2
.Ltable:
	.long	.Lzero-.Ltable
	.long	.Lone-.Ltable
	.rept 14
	.long	.Lother-.Ltable
	.endr

	.section .note.GNU-stack,"",@progbits
