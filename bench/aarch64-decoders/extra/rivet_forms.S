// Hand-written AArch64: every encoding form Rivet rewrites or must recognise, in
// both directions and at range limits, plus system and PAC/BTI forms compilers
// rarely emit. Assembled only (never run); feeds the decoder comparison.
        .arch armv8.5-a+crc+crypto+lse+sve2+memtag
        .text
        .globl forms
        .type forms, %function
forms:
        bti c
        paciasp
        pacibsp
        b 1f
        bl forms
1:      b.eq 2f
        b.hs forms
        b.lo 2f
        b.nv 2f
        cbz w3, 2f
        cbnz x30, forms
        tbz w0, #0, 2f
        tbnz x9, #63, forms
        tbz x1, #33, 2f
2:      adr x0, forms
        adr x28, 3f
        adrp x1, forms
        adrp x2, data_sym
        ldr x3, 3f
        ldr w4, 3f
        ldrsw x5, 3f
        ldr q6, 3f
        ldr d7, 3f
        ldr s8, 3f
        prfm pldl1keep, 3f
        br x16
        blr x17
        ret
        ret x1
        braa x1, x2
        brab x3, sp
        braaz x4
        brabz x5
        blraa x6, x7
        blrab x8, x9
        blraaz x10
        blrabz x11
        retaa
        retab
        eretaa
        autiasp
        autibsp
        paciaz
        autiaz
        pacia1716
        autib1716
        xpaclri
        xpaci x3
        pacia x1, x2
        autda x3, sp
        pacga x1, x2, x3
        bti
        bti j
        bti jc
        ldxr w0, [x1]
        ldxr x0, [sp]
        ldxrb w2, [x3]
        ldxrh w2, [x3]
        ldaxr x4, [x5]
        stxr w6, x7, [x8]
        stxrb w6, w7, [x8]
        stlxr w9, w10, [x11]
        ldxp x0, x1, [x2]
        ldaxp w0, w1, [x2]
        stxp w3, x4, x5, [x6]
        stlxp w3, x4, x5, [sp]
        clrex
        ldar x0, [x1]
        stlr w2, [x3]
        ldapr x4, [x5]
        cas w0, w1, [x2]
        casal x3, x4, [sp]
        casb w5, w6, [x7]
        caslh w5, w6, [x7]
        casp x0, x1, x2, x3, [x4]
        caspal w6, w7, w8, w9, [x10]
        ldadd w1, w2, [x3]
        ldaddal x1, x2, [x3]
        ldclrb w4, w5, [x6]
        ldeorl x7, x8, [x9]
        ldset w10, w11, [sp]
        ldsmax x12, x13, [x14]
        ldumin w15, w16, [x17]
        stadd w1, [x3]
        staddl x1, [x3]
        stclr w2, [x4]
        swp x0, x1, [x2]
        swpal w3, w4, [x5]
        svc #0
        brk #0x3e8
        udf #0
        hlt #0x1
        irg x0, x1
        stg x2, [x3]
        dsb sy
        isb
        dmb ish
        mrs x0, tpidr_el0
        msr fpcr, x1
        sb
3:      .quad 0x1122334455667788
        .quad 0
        .size forms, .-forms
        .data
data_sym: .quad forms
