/* dispatch(table, n): the sum over i in [0, n) of 1, 10, 100 or 1000 by i % 4, chosen by a
   jump through `table`, a table of offsets from its own start that the caller passes in.
   The jump's base comes from an argument, so no analysis of this function can find the
   table; the frame is still on the stack at the jump, so it is no tail call either. A
   rewriter that took it for one would leave the table pointing at the old code. */
	.text
	.globl	dispatch
	.type	dispatch, @function
dispatch:
	.cfi_startproc
	push	%rbp
	.cfi_def_cfa_offset 16
	.cfi_offset %rbp, -16
	push	%rbx
	.cfi_def_cfa_offset 24
	.cfi_offset %rbx, -24
	sub	$24, %rsp
	.cfi_def_cfa_offset 48
	mov	%rdi, %rbp
	mov	%esi, 12(%rsp)
	xor	%ebx, %ebx
	movl	$0, 8(%rsp)
.Lloop:
	cmp	12(%rsp), %ebx
	jge	.Ldone
	mov	%ebx, %eax
	and	$3, %eax
	movslq	(%rbp,%rax,4), %rax
	add	%rbp, %rax
	jmp	*%rax
.Lcase0:
	addl	$1, 8(%rsp)
	jmp	.Lnext
.Lcase1:
	addl	$10, 8(%rsp)
	jmp	.Lnext
.Lcase2:
	addl	$100, 8(%rsp)
	jmp	.Lnext
.Lcase3:
	addl	$1000, 8(%rsp)
.Lnext:
	inc	%ebx
	jmp	.Lloop
.Ldone:
	mov	8(%rsp), %eax
	add	$24, %rsp
	.cfi_def_cfa_offset 24
	pop	%rbx
	.cfi_def_cfa_offset 16
	pop	%rbp
	.cfi_def_cfa_offset 8
	ret
	.cfi_endproc
	.size	dispatch, .-dispatch

	.section .rodata
	.p2align 2
	.globl	dispatch_table
dispatch_table:
	.long	.Lcase0 - dispatch_table
	.long	.Lcase1 - dispatch_table
	.long	.Lcase2 - dispatch_table
	.long	.Lcase3 - dispatch_table

	.section .note.GNU-stack,"",@progbits
