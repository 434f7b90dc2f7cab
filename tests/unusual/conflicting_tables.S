/* dispatch(kind, x): two range-checked dispatches whose tables share two entries but read
   them from different bases. The first reads 4 entries at `ta`, relative to `ta`; the second
   reads 4 entries at `ta + 8`, relative to `ta + 8`. The shared entries, cases 2 and 3 of the
   first, lead the second 8 bytes further, past 8 nops: valid code both ways, and each check
   proves its table's length, so neither table can be cut.

   No compiler writes this; a misread table would look like it. A rewriter that moves the
   cases must write each shared entry once for each base, which cannot be done: the function
   is left as it is. */
	.text
	.globl	dispatch
	.type	dispatch, @function
dispatch:
	.cfi_startproc
	test	%edi, %edi
	jne	.Lsecond
	cmp	$3, %esi
	ja	.Ldefault
	mov	%esi, %esi
	lea	ta(%rip), %rcx
	movslq	(%rcx,%rsi,4), %rax
	add	%rcx, %rax
	jmp	*%rax
.Lsecond:
	cmp	$3, %esi
	ja	.Ldefault
	mov	%esi, %esi
	lea	ta+8(%rip), %rcx
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
	.rept	8
	nop
	.endr
	mov	$12, %eax
	ret
.La3:
	.rept	8
	nop
	.endr
	mov	$13, %eax
	ret
.Lb2:
	mov	$22, %eax
	ret
.Lb3:
	mov	$23, %eax
	ret
.Ldefault:
	mov	$-1, %eax
	ret
	.cfi_endproc
	.size	dispatch, .-dispatch

	.section .rodata
	.p2align 2
ta:
	.long	.La0 - ta
	.long	.La1 - ta
	.long	.La2 - ta
	.long	.La3 - ta
	.long	.Lb2 - (ta + 8)
	.long	.Lb3 - (ta + 8)

	.section .note.GNU-stack,"",@progbits
