/* Tail calls the assembler wrote short, between functions packed without padding, as
   python3.11's (Debian) Py_Initialize ends with `jmp Py_InitializeEx` encoded `eb 00`.
   Rewritten in place, a tail call re-created in its near form (5 or 6 bytes) no longer fits
   where the function was; the callee's entry does not move, so the short form still reaches.

   plus_one(x)  = twice(x + 1)        ends with `jmp twice`, twice right after it: `eb 00`
   twice(x)     = 2 * x
   magnitude(x) = x < 0 ? negate(x) : x, through a short conditional tail call to `negate`,
                  with a loop so that a block order can differ from the original
   negate(x)    = -x
   back(x)      = plus_one(x - 3)     a short tail call backwards */
	.text
	.globl	plus_one
	.type	plus_one, @function
plus_one:
	.cfi_startproc
	lea	1(%rdi), %edi
	jmp	twice
	.cfi_endproc
	.size	plus_one, .-plus_one

	.type	twice, @function
twice:
	.cfi_startproc
	lea	(%rdi,%rdi), %eax
	ret
	.cfi_endproc
	.size	twice, .-twice

	.globl	magnitude
	.type	magnitude, @function
magnitude:
	.cfi_startproc
	test	%edi, %edi
	js	negate
	xor	%eax, %eax
	mov	%edi, %ecx
.Lcount:
	test	%ecx, %ecx
	je	.Lcounted
	add	$1, %eax
	sub	$1, %ecx
	jmp	.Lcount
.Lcounted:
	ret
	.cfi_endproc
	.size	magnitude, .-magnitude

	.type	negate, @function
negate:
	.cfi_startproc
	mov	%edi, %eax
	neg	%eax
	ret
	.cfi_endproc
	.size	negate, .-negate

	.globl	back
	.type	back, @function
back:
	.cfi_startproc
	sub	$3, %edi
	jmp	plus_one
	.cfi_endproc
	.size	back, .-back
	.section	.note.GNU-stack,"",@progbits
