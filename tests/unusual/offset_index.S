/* Two dispatches whose index is the value minus a constant, as LLVM writes a `match` on a
   range that does not start at 0 (Rust: `match n { 4..=10 => ... }`; Rivet's own main,
   translate_bolt_args and serde field visitors; libLLVM's switches on enum ranges).

   - classify(n): `lea -4(%rdi),%rax; cmp $6,%rax; ja`: the check and the table read use the
     difference, so the table starts where the difference is 0. Taken for an index of n,
     the table would start 16 bytes earlier, in the table of the function before it.
   - pick(n): n is checked against 8 and 11 first; the index `lea -8(%rdi),%rax` is checked
     by nothing after it. Only the relocations of its entries size the table, from where the
     difference is 0.

   - niche(tag, fixed): a tag stored with an offset (Rust's niche-encoded enums) is turned
     into an index by `movabs $0x7ffffffffffffffe,%rcx; add %rax,%rcx`, unchecked, sized by
     relocations. With `fixed` set, the code computes the tag itself as a constant
     (`movabs $0x8000000000000000,%rax; add $4,%rax`, what LLVM leaves after inlining), so the
     same dispatch reads one entry at a fixed place: a view of one entry, inside the table,
     which must not end it.

   Each table follows another function's table in .rodata, so reading from the wrong start
   meets entries that lead into that other function. */
	.text
	.globl	before
	.type	before, @function
before:
	.cfi_startproc
	and	$3, %edi
	lea	table0(%rip), %rcx
	movslq	(%rcx,%rdi,4), %rax
	add	%rcx, %rax
	jmp	*%rax
.L0case0:
	mov	$7, %eax
	ret
.L0case1:
	mov	$11, %eax
	ret
.L0case2:
	mov	$13, %eax
	ret
.L0case3:
	mov	$17, %eax
	ret
	.cfi_endproc
	.size	before, .-before

	.globl	classify
	.type	classify, @function
classify:
	.cfi_startproc
	lea	-4(%rdi), %rax
	cmp	$6, %rax
	ja	.L1default
	lea	table1(%rip), %rcx
	movslq	(%rcx,%rax,4), %rax
	add	%rcx, %rax
	jmp	*%rax
.L1four:
	mov	$400, %eax
	ret
.L1five:
	mov	$500, %eax
	ret
.L1six:
	lea	(%rdi,%rdi,2), %rax
	ret
.L1even:
	mov	%rdi, %rax
	shl	$4, %rax
	ret
.L1nine:
	mov	$900, %eax
	ret
.L1default:
	mov	$-1, %rax
	ret
	.cfi_endproc
	.size	classify, .-classify

	.globl	pick
	.type	pick, @function
pick:
	.cfi_startproc
	cmp	$8, %rdi
	jb	.L2small
	cmp	$11, %rdi
	ja	.L2big
	lea	-8(%rdi), %rax
	lea	table2(%rip), %rcx
	movslq	(%rcx,%rax,4), %rax
	add	%rcx, %rax
	jmp	*%rax
.L2eight:
	mov	$80, %eax
	ret
.L2nine:
	mov	$91, %eax
	ret
.L2ten:
	lea	1000(%rdi), %rax
	ret
.L2eleven:
	mov	$111, %eax
	ret
.L2small:
	mov	%rdi, %rax
	ret
.L2big:
	lea	(%rdi,%rdi), %rax
	ret
	.cfi_endproc
	.size	pick, .-pick

	.globl	niche
	.type	niche, @function
niche:
	.cfi_startproc
	test	%esi, %esi
	jne	.L4fixed
	movabs	$0x7ffffffffffffffe, %rcx
	add	%rdi, %rcx
	lea	table4(%rip), %rdx
	movslq	(%rdx,%rcx,4), %rcx
	add	%rdx, %rcx
	jmp	*%rcx
.L4fixed:
	movabs	$0x8000000000000000, %rax
	add	$4, %rax
	movabs	$0x7ffffffffffffffe, %rcx
	add	%rax, %rcx
	lea	table4(%rip), %rdx
	movslq	(%rdx,%rcx,4), %rcx
	add	%rdx, %rcx
	jmp	*%rcx
.L4zero:
	mov	$700, %eax
	ret
.L4one:
	mov	$701, %eax
	ret
.L4two:
	mov	$702, %eax
	ret
.L4three:
	mov	$703, %eax
	ret
.L4four:
	mov	$704, %eax
	ret
	.cfi_endproc
	.size	niche, .-niche

	.section .rodata
	.p2align 2
table0:
	.long	.L0case0 - table0
	.long	.L0case1 - table0
	.long	.L0case2 - table0
	.long	.L0case3 - table0
table1:
	.long	.L1four - table1
	.long	.L1five - table1
	.long	.L1six - table1
	.long	.L1even - table1
	.long	.L1even - table1
	.long	.L1nine - table1
	.long	.L1even - table1
table3:
	.long	.L0case3 - table3
	.long	.L0case2 - table3
	.long	.L0case1 - table3
	.long	.L0case0 - table3
	.long	.L0case0 - table3
	.long	.L0case1 - table3
	.long	.L0case2 - table3
	.long	.L0case3 - table3
table2:
	.long	.L2eight - table2
	.long	.L2nine - table2
	.long	.L2ten - table2
	.long	.L2eleven - table2
table4:
	.long	.L4zero - table4
	.long	.L4one - table4
	.long	.L4two - table4
	.long	.L4three - table4
	.long	.L4four - table4

	.section .note.GNU-stack,"",@progbits
