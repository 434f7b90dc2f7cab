/* checked(n): 2n for n in [0, 1000]; otherwise report(level, n), which exits for a level of
   2 or more but may return as far as any analysis can tell. The code after those calls is
   unreachable (the source's __builtin_unreachable()), so gcc ends the function with the
   second call and lets the cold part, which makes the first, jump to the address after it:
   the end of the function, where only padding follows. PostgreSQL's palloc and its
   relatives have this shape (elog(ERROR) then pg_unreachable()). The jump is never taken;
   a rewriter must not give up on the function for it. */
	.text
	.globl	checked
	.type	checked, @function
checked:
	.cfi_startproc
	push	%rbx
	.cfi_def_cfa_offset 16
	.cfi_offset %rbx, -16
	mov	%rdi, %rbx
	test	%rdi, %rdi
	js	checked.cold
	cmp	$1000, %rdi
	jg	.Ltoo_big
	lea	(%rdi,%rdi), %rax
	pop	%rbx
	.cfi_remember_state
	.cfi_def_cfa_offset 8
	ret
.Ltoo_big:
	.cfi_restore_state
	mov	%rbx, %rsi
	mov	$2, %edi
	call	report
.Lunreachable:
	.cfi_endproc
	.size	checked, .-checked
	.p2align 4

	.section .text.unlikely,"ax",@progbits
	.type	checked.cold, @function
checked.cold:
	.cfi_startproc
	.cfi_def_cfa_offset 16
	.cfi_offset %rbx, -16
	mov	%rbx, %rsi
	mov	$3, %edi
	call	report
	jmp	.Lunreachable
	.cfi_endproc
	.size	checked.cold, .-checked.cold

	.section .note.GNU-stack,"",@progbits
