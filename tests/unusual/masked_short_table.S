/* dispatch(kind, x): a table indexed by `x & 7` that has only 4 entries, followed at once by
   another table of the same function, read from another base.

   The compiler may make a table shorter than its index's width when it knows the index
   smaller: C's `switch (x & 7)` with cases 0 to 3 and `default: __builtin_unreachable()`.
   The mask says at most 8 entries; the table has 4. Entries 4 to 7, read as the first table's,
   are the second table's entries taken from the wrong base: 16 bytes before each of its
   cases. Those places are instructions of the function too (each case is 6 bytes and 10 nops
   long), so nothing in the entries themselves shows where the first table ends. Only the
   second table's start does: a table sized by its index ends where a table read differently
   begins. Read with 8 entries, rewriting would write entries 4 to 7 twice, once from each
   base. */
	.text
	.globl	dispatch
	.type	dispatch, @function
dispatch:
	.cfi_startproc
	test	%edi, %edi
	jne	.Lsecond
	and	$7, %esi
	lea	jt0(%rip), %rcx
	movslq	(%rcx,%rsi,4), %rax
	add	%rcx, %rax
	jmp	*%rax
.La0:
	mov	$10, %eax
	ret
.La1:
	mov	$11, %eax
	ret
.La2:
	mov	$12, %eax
	ret
.La3:
	mov	$13, %eax
	ret
.Lsecond:
	cmp	$3, %esi
	ja	.Ldefault
	mov	%esi, %esi
	lea	jt1(%rip), %rcx
	movslq	(%rcx,%rsi,4), %rax
	add	%rcx, %rax
	jmp	*%rax
	.rept	16
	nop
	.endr
.Lb0:
	mov	$20, %eax
	ret
	.rept	10
	nop
	.endr
.Lb1:
	mov	$21, %eax
	ret
	.rept	10
	nop
	.endr
.Lb2:
	mov	$22, %eax
	ret
	.rept	10
	nop
	.endr
.Lb3:
	mov	$23, %eax
	ret
	.rept	10
	nop
	.endr
.Ldefault:
	mov	$-1, %eax
	ret
	.cfi_endproc
	.size	dispatch, .-dispatch

	.section .rodata
	.p2align 2
jt0:
	.long	.La0 - jt0
	.long	.La1 - jt0
	.long	.La2 - jt0
	.long	.La3 - jt0
jt1:
	.long	.Lb0 - jt1
	.long	.Lb1 - jt1
	.long	.Lb2 - jt1
	.long	.Lb3 - jt1

	.section .note.GNU-stack,"",@progbits
