/* run(code): a byte-code machine in the shape of python3.11's interpreter loop (Debian's
   build, non-PIE, no relocations kept). The next handler's address is read from `handlers`,
   a table of 256 labels, at an index zero-extended from a byte: no range check is needed,
   so none is there, and only the `movzbl` bounds the table. Most handlers load it and jump
   to one shared `jmp *%rax`; the last one falls into it. Opcodes: 0 halt (returns the
   accumulator), 1 add one, 2 double, 3 subtract one; every other byte halts too.
   Built with -DDISPATCH_IN_TABLE, the table also leads to the shared jump itself. */
	.text
	.globl	run
	.type	run, @function
run:
	.cfi_startproc
	xor	%edx, %edx
	movzbl	(%rdi), %ecx
	jmp	*handlers(,%rcx,8)
.Linc:
	add	$1, %rdx
	add	$1, %rdi
	movzbl	(%rdi), %ecx
	mov	handlers(,%rcx,8), %rax
	jmp	.Ldispatch
.Ldouble:
	add	%rdx, %rdx
	add	$1, %rdi
	movzbl	(%rdi), %ecx
	mov	handlers(,%rcx,8), %rax
	jmp	.Ldispatch
.Ldec:
	sub	$1, %rdx
	add	$1, %rdi
	movzbl	(%rdi), %ecx
	mov	handlers(,%rcx,8), %rax
.Ldispatch:
	mov	%rdi, %rsi
	jmp	*%rax
.Lhalt:
	mov	%rdx, %rax
	ret
	.cfi_endproc
	.size	run, .-run

	.section .rodata
	.p2align 3
handlers:
	.quad	.Lhalt, .Linc, .Ldouble, .Ldec
#ifdef DISPATCH_IN_TABLE
	/* Opcode 4 (never used) enters the shared jump from the table itself, with %rax
	   holding its own address rather than a handler loaded from the table: on that way in
	   nothing bounds the jump. */
	.quad	.Ldispatch
	.rept	251
#else
	.rept	252
#endif
	.quad	.Lhalt
	.endr
	.section	.note.GNU-stack,"",@progbits
