/* Branches from functions that stay into the second instruction of a function that moves,
   with no relocation: the assembler resolved them, as perlasm's `je .Lsqr8x_enter` from
   OpenSSL's bn_mul_mont into bn_sqr8x_mont+3 (libcrypto). The target lies within the
   5-byte jump a rewrite may leave at the moved function's old entry.

   scaled(x)    = ((x + 7) * (x + 7)) for a call through the entry, with a first instruction
                  of 2 bytes: its second instruction, `.Lscaled_second`, is at +2
   via_near(x)  = x odd ? scaled body from x * 3 : scaled(x) + 1; enters at +2 with a
                  `jne` of 6 bytes (rel32), which a rewrite can patch
   via_short(x) = the same with a `jne` of 2 bytes (rel8) right before `scaled`, which no
                  patch can send to moved code: the bytes at +2 must stay as they were
   far_away     = 300 bytes of padding between via_near and scaled, so that only the
                  explicit {disp32} form makes via_near's branch long */
	.text
	.globl	via_near
	.type	via_near, @function
via_near:
	.cfi_startproc
	lea	(%rdi,%rdi,2), %eax
	test	$1, %dil
	{disp32} jne	.Lscaled_second
	call	scaled
	add	$1, %eax
	ret
	.cfi_endproc
	.size	via_near, .-via_near

	.type	far_away, @function
far_away:
	.cfi_startproc
	.rept	300
	nop
	.endr
	ret
	.cfi_endproc
	.size	far_away, .-far_away

	.globl	via_short
	.type	via_short, @function
via_short:
	.cfi_startproc
	lea	(%rdi,%rdi,2), %eax
	test	$1, %dil
	jne	.Lscaled_second
	call	scaled
	add	$1, %eax
	ret
	.cfi_endproc
	.size	via_short, .-via_short

	.globl	scaled
	.type	scaled, @function
scaled:
	.cfi_startproc
	mov	%edi, %eax
.Lscaled_second:
	add	$7, %eax
	imul	%eax, %eax
	ret
	.cfi_endproc
	.size	scaled, .-scaled
	.section	.note.GNU-stack,"",@progbits
