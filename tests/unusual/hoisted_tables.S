/* run(ops, n, acc): two passes over ops[0..n), each a loop around a `switch (ops[i] & 3)`
   through a table of offsets whose base the loop keeps in a callee-saved register, loaded
   once before it (gcc's shape for a switch in a loop when registers are plentiful; cppcheck's
   Token::addValue has three).

   - Pass 1 adds 1, 10, 100 or 1000 to *acc, kept in %r12; its table base is in %r14.
   - Pass 2 sums 1, 3, 5 or 7 into the result; its table base is in %r12, which held acc
     before, and one of its cases uses %r14, pass 1's base, as a scratch register. Each
     loop's cases are entered only from its table: a walk that takes them for targets of
     both jumps runs into the other loop's values, and each loop waits on the other.
   - The code right after pass 1's `call abort` (acc went negative: never, here) is a case
     of pass 2, entered only from its table. Walking back from pass 2's jump, what comes
     before that case is not a way into it: abort does not return. Taken for one, it carries
     acc's %r12 into pass 2 and the table is not found.
   - Each loop head follows the padding after a `jmp`: nothing falls into it from there.

   The result is the sum of pass 2 plus *acc, so both passes show in the output.

   Built with -DMASKED, the loops index their tables with `ops[i] & 3` and no range check
   (Rust's tagged `io::Error` in serde_json's writers): the mask bounds the table to 4
   entries as a check would. */
	.text
	.globl	run
	.type	run, @function
run:
	.cfi_startproc
	push	%r15
	.cfi_def_cfa_offset 16
	.cfi_offset %r15, -16
	push	%r14
	.cfi_def_cfa_offset 24
	.cfi_offset %r14, -24
	push	%r13
	.cfi_def_cfa_offset 32
	.cfi_offset %r13, -32
	push	%r12
	.cfi_def_cfa_offset 40
	.cfi_offset %r12, -40
	push	%rbp
	.cfi_def_cfa_offset 48
	.cfi_offset %rbp, -48
	push	%rbx
	.cfi_def_cfa_offset 56
	.cfi_offset %rbx, -56
	sub	$8, %rsp
	.cfi_def_cfa_offset 64
	mov	%rdi, %rbx
	mov	%esi, %ebp
	mov	%rdx, %r12
	xor	%r15d, %r15d
	jmp	.Lpass1
	.p2align 4
.Lpass2:
	lea	table2(%rip), %r12
	xor	%r13d, %r13d
	jmp	.L2cond
	.p2align 4
.L2next:
	inc	%r13d
.L2cond:
	cmp	%ebp, %r13d
	jge	.Lend
	mov	(%rbx,%r13,4), %eax
	and	$3, %eax
#ifndef MASKED
	cmp	$3, %eax
	ja	.L2next
#endif
	movslq	(%r12,%rax,4), %rax
	add	%r12, %rax
	jmp	*%rax
.L2case0:
	add	$1, %r15
	jmp	.L2next
.L2case1:
	add	$3, %r15
	jmp	.L2next
.L2case2:
	lea	5(%r15), %r14
	mov	%r14, %r15
	jmp	.L2next
	.p2align 4
.Lpass1:
	lea	table1(%rip), %r14
	xor	%r13d, %r13d
	jmp	.L1cond
	.p2align 4
.L1next:
	inc	%r13d
.L1cond:
	cmp	%ebp, %r13d
	jge	.Lsave
	mov	(%rbx,%r13,4), %eax
	and	$3, %eax
#ifndef MASKED
	cmp	$3, %eax
	ja	.L1next
#endif
	movslq	(%r14,%rax,4), %rax
	add	%r14, %rax
	jmp	*%rax
.L1case0:
	addq	$1, (%r12)
	jmp	.L1next
.L1case1:
	addq	$10, (%r12)
	jmp	.L1next
.L1case2:
	addq	$100, (%r12)
	jmp	.L1next
.L1case3:
	cmpq	$0, (%r12)
	jl	.Lbad
	addq	$1000, (%r12)
	jmp	.L1next
.Lbad:
	call	abort
.L2case3:
	add	$7, %r15
	jmp	.L2next
.Lsave:
	mov	(%r12), %rax
	mov	%rax, (%rsp)
	jmp	.Lpass2
.Lend:
	mov	%r15, %rax
	add	(%rsp), %rax
	add	$8, %rsp
	.cfi_def_cfa_offset 56
	pop	%rbx
	.cfi_def_cfa_offset 48
	pop	%rbp
	.cfi_def_cfa_offset 40
	pop	%r12
	.cfi_def_cfa_offset 32
	pop	%r13
	.cfi_def_cfa_offset 24
	pop	%r14
	.cfi_def_cfa_offset 16
	pop	%r15
	.cfi_def_cfa_offset 8
	ret
	.cfi_endproc
	.size	run, .-run

	.section .rodata
	.p2align 2
table1:
	.long	.L1case0 - table1
	.long	.L1case1 - table1
	.long	.L1case2 - table1
	.long	.L1case3 - table1
table2:
	.long	.L2case0 - table2
	.long	.L2case1 - table2
	.long	.L2case2 - table2
	.long	.L2case3 - table2

	.section .note.GNU-stack,"",@progbits
