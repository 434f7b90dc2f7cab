//! The AArch64 decoder and encoder against disarm64: every branch and PC-relative reading
//! of `rivet_arch::aarch64` must agree with the operand fields disarm64's instruction
//! tables describe, and every word the encoder writes must decode (by disarm64) as the
//! same instruction aimed where it was asked to aim.

use disarm64::InsnOpcode;
use disarm64_defn::{InsnBitField as F, InsnClass as C, InsnOperandKind as K};
use rivet_arch::aarch64::{
    self, CondForm, Control, EncodeError, Exclusive, Guard, PcRelative, Reach,
};

/// What disarm64's tables say a word does: (class, PC-relative target), the target from
/// the operand's offset fields (concatenated high first, sign-extended, scaled).
fn oracle(word: u32, addr: u64) -> Option<(C, Option<u64>)> {
    let i = disarm64::decoder::decode(word)?;
    let def = i.definition();
    let target = def.operands.iter().find_map(|op| {
        let scale = match op.kind {
            K::ADDR_PCREL14 | K::ADDR_PCREL19 | K::ADDR_PCREL26 => 4,
            K::ADDR_PCREL21 => 1,
            K::ADDR_ADRP => 4096,
            _ => return None,
        };
        let (mut v, mut width) = (0i64, 0u32);
        for f in op.bit_fields.iter().filter(|f| {
            matches!(
                f.bitfield,
                F::imm14 | F::imm19 | F::imm26 | F::immhi | F::immlo
            )
        }) {
            v = (v << f.width) | ((word >> f.lsb) & ((1u32 << f.width) - 1)) as i64;
            width += f.width as u32;
        }
        let off = ((v << (64 - width)) >> (64 - width)) * scale;
        let base = if op.kind == K::ADDR_ADRP {
            addr & !0xfff
        } else {
            addr
        };
        Some(base.wrapping_add_signed(off))
    });
    Some((def.class, target))
}

fn mnemonic(word: u32, addr: u64) -> String {
    let inst = aarch64::decode(word, addr).unwrap();
    aarch64::text(&inst)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

/// xorshift64: a fixed sequence, so a failure reproduces.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Rivet's reading of a word's PC-relative target, if any.
fn our_target(inst: &aarch64::Inst) -> Option<u64> {
    match inst.control {
        Control::Jump { target } | Control::Call { target } => return Some(target),
        Control::Conditional { target, .. } => return Some(target),
        _ => {}
    }
    match inst.pc_relative? {
        PcRelative::Adr { target, .. } | PcRelative::Literal { target, .. } => Some(target),
        PcRelative::Adrp { page, .. } => Some(page),
    }
}

#[test]
fn every_branch_and_pc_relative_reading_agrees_with_disarm64() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut checked, mut with_target) = (0, 0);
    // Random words, and random words forced into each PC-relative opcode space so that
    // every form is met thousands of times.
    let spaces: [(u32, u32); 9] = [
        (0, 0),
        (0x7c00_0000, 0x1400_0000), // b, bl
        (0xff00_0000, 0x5400_0000), // b.cond, bc.cond
        (0x7e00_0000, 0x3400_0000), // cbz, cbnz
        (0x7e00_0000, 0x3600_0000), // tbz, tbnz
        (0x1f00_0000, 0x1000_0000), // adr, adrp
        (0x3b00_0000, 0x1800_0000), // literal loads
        (0xfe1f_fc1f, 0xd61f_0000), // br/blr/ret and authenticating forms
        (0xffff_f01f, 0xd503_201f), // hints: bti, pac, aut
    ];
    for round in 0..120_000u32 {
        let (mask, value) = spaces[round as usize % spaces.len()];
        let word = (rng.next() as u32 & !mask) | value;
        let addr = (rng.next() & 0x0000_ffff_ffff_fffc) | 0x1000;
        let Some((class, target)) = oracle(word, addr) else {
            assert!(aarch64::decode(word, addr).is_err(), "{word:#010x}");
            continue;
        };
        let inst = aarch64::decode(word, addr)
            .unwrap_or_else(|e| panic!("{word:#010x}: disarm64 decodes it, Rivet says {e}"));
        checked += 1;
        let ours = our_target(&inst);
        assert_eq!(ours, target, "{word:#010x} at {addr:#x} ({class:?})");
        with_target += usize::from(target.is_some());
        let is_branch = matches!(
            class,
            C::BRANCH_IMM | C::CONDBRANCH | C::COMPBRANCH | C::TESTBRANCH
        );
        assert_eq!(
            is_branch,
            matches!(
                inst.control,
                Control::Jump { .. }
                    | Control::Call { .. }
                    | Control::Conditional { .. }
                    | Control::Unmodelled
            ),
            "{word:#010x}"
        );
        if class == C::BRANCH_REG {
            assert!(!matches!(inst.control, Control::Next), "{word:#010x}");
        }
    }
    assert!(
        checked > 50_000 && with_target > 40_000,
        "{checked} {with_target}"
    );
}

#[test]
fn marks_and_control_of_the_forms_a_rewrite_must_respect() {
    let cases: &[(u32, Control, Option<Exclusive>, Option<Guard>)] = &[
        (0xd61f_0200, Control::IndirectJump { reg: 16 }, None, None),
        (0xd63f_0200, Control::IndirectCall { reg: 16 }, None, None),
        (0xd71f_0a00, Control::IndirectJump { reg: 16 }, None, None), // braa x16, x0
        (0xd63f_081f, Control::IndirectCall { reg: 0 }, None, None),  // blraaz x0
        (0xd65f_03c0, Control::Return, None, None),
        (0xd65f_0bff, Control::Return, None, None), // retaa
        (0xd69f_03e0, Control::ExceptionReturn, None, None),
        (0x0000_0000, Control::Trap, None, None), // udf #0
        (0xd420_0000, Control::Trap, None, None), // brk #0
        (0xd400_0001, Control::Next, None, None), // svc #0
        (0xc85f_7c20, Control::Next, Some(Exclusive::Load), None), // ldxr x0, [x1]
        (0xc85f_fc20, Control::Next, Some(Exclusive::Load), None), // ldaxr
        (0xc87f_0c20, Control::Next, Some(Exclusive::Load), None), // ldxp x0, x3, [x1]
        (0xc802_7c20, Control::Next, Some(Exclusive::Store), None), // stxr w2, x0, [x1]
        (0xd503_305f, Control::Next, Some(Exclusive::Clear), None), // clrex
        (0xc802_fc20, Control::Next, Some(Exclusive::Store), None), // stlxr w2, x0, [x1]
        // Same encoding class, no monitor: ordered accesses and compare-and-swap.
        (0xc8df_fc20, Control::Next, None, None), // ldar x0, [x1]
        (0xc89f_fc20, Control::Next, None, None), // stlr x0, [x1]
        (0xc8a0_7c41, Control::Next, None, None), // cas x0, x1, [x2]
        (
            aarch64::BTI_C,
            Control::Next,
            None,
            Some(Guard::Bti {
                calls: true,
                jumps: false,
            }),
        ),
        (
            aarch64::BTI_J,
            Control::Next,
            None,
            Some(Guard::Bti {
                calls: false,
                jumps: true,
            }),
        ),
        (
            aarch64::BTI_JC,
            Control::Next,
            None,
            Some(Guard::Bti {
                calls: true,
                jumps: true,
            }),
        ),
        (0xd503_233f, Control::Next, None, Some(Guard::Sign)), // paciasp
        (0xd503_237f, Control::Next, None, Some(Guard::Sign)), // pacibsp
        (0xd503_23bf, Control::Next, None, Some(Guard::Authenticate)), // autiasp
        (0xd503_23ff, Control::Next, None, Some(Guard::Authenticate)), // autibsp
        (aarch64::NOP, Control::Next, None, None),
        // cblt x14, #51 (FEAT_CMPBR): a branch, but not one Rivet can aim elsewhere.
        (0xf539_a9ee, Control::Unmodelled, None, None),
    ];
    for &(word, control, exclusive, guard) in cases {
        let inst = aarch64::decode(word, 0x4000).unwrap();
        assert_eq!(inst.control, control, "{word:#010x}");
        assert_eq!(inst.exclusive, exclusive, "{word:#010x}");
        assert_eq!(inst.guard, guard, "{word:#010x}");
    }
    // The words Rivet writes itself are what they claim.
    assert_eq!(mnemonic(aarch64::NOP, 0), "nop");
    assert_eq!(mnemonic(aarch64::FILL, 0), "udf");
    assert_eq!(
        aarch64::text(&aarch64::decode(aarch64::BTI_JC, 0).unwrap()),
        "bti jc"
    );
    // Data is not an instruction, and a partial word is reported.
    let all = aarch64::decode_all(&[0x1f, 0x20, 0x03, 0xd5, 0xff, 0xff], 0x100);
    assert_eq!(all.len(), 2);
    assert!(all[0].is_ok() && all[1].is_err());
}

/// One template per form Rivet retargets, with a register, condition or bit set so that a
/// re-encoding that disturbed other fields would show.
const FORMS: &[(&str, u32, Reach)] = &[
    ("b", 0x1400_0000, Reach::Imm26),
    ("bl", 0x9400_0000, Reach::Imm26),
    ("b.ne", 0x5400_0001, Reach::Imm19),
    ("bc.gt", 0x5400_001c, Reach::Imm19),
    ("cbz w3", 0x3400_0003, Reach::Imm19),
    ("cbnz x17", 0xb500_0011, Reach::Imm19),
    ("tbz w5, #3", 0x3618_0005, Reach::Imm14),
    ("tbnz x9, #63", 0xb7f8_0009, Reach::Imm14),
    ("adr x2", 0x1000_0002, Reach::Adr),
    ("adrp x20", 0x9000_0014, Reach::Adrp),
    ("ldr w1 literal", 0x1800_0001, Reach::Imm19),
    ("ldr x1 literal", 0x5800_0001, Reach::Imm19),
    ("ldrsw x4 literal", 0x9800_0004, Reach::Imm19),
    ("ldr q7 literal", 0x9c00_0007, Reach::Imm19),
    ("prfm literal", 0xd800_0000, Reach::Imm19),
];

#[test]
fn retargeted_forms_decode_as_the_same_instruction_aimed_at_the_new_target() {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    for &(name, template, reach) in FORMS {
        assert_eq!(aarch64::reach_of(template), Some(reach), "{name}");
        let (lo, hi) = reach.bounds();
        let step = match reach {
            Reach::Adr => 1,
            Reach::Adrp => 4096,
            _ => 4,
        };
        let fixed_bits = {
            // The bits no target may change: the word with every offset field zeroed.
            let zero = aarch64::retarget(template, 0x10_0000, 0x10_0000 & !0xfff).unwrap();
            match reach {
                Reach::Adrp => zero,
                _ => aarch64::retarget(template, 0x10_0000, 0x10_0000).unwrap(),
            }
        };
        for k in 0..400 {
            let at = (rng.next() & 0x0000_7fff_ffff_fffc) + (1 << 33);
            let off = match k {
                0 => lo,
                1 => hi,
                2 => 0,
                _ => {
                    let span = ((hi - lo) / step) as u64;
                    lo + (rng.next() % span) as i64 * step
                }
            };
            let base = if reach == Reach::Adrp {
                at & !0xfff
            } else {
                at
            };
            let target = base.wrapping_add_signed(off);
            let word =
                aarch64::retarget(template, at, target).unwrap_or_else(|e| panic!("{name}: {e}"));
            let (class, oracle_target) = oracle(word, at).expect("decodes");
            assert_eq!(
                oracle_target,
                Some(target),
                "{name} {word:#010x} at {at:#x}"
            );
            let inst = aarch64::decode(word, at).unwrap();
            assert_eq!(our_target(&inst), Some(target), "{name}");
            assert_eq!(
                oracle(template, at).unwrap().0,
                class,
                "{name}: another instruction class"
            );
            assert_eq!(
                mnemonic(word, at),
                mnemonic(template, at),
                "{name}: another instruction"
            );
            // Only the offset field moved.
            let back = aarch64::retarget(word, 0x10_0000, base_of(reach, 0x10_0000)).unwrap();
            assert_eq!(back, fixed_bits, "{name}: other fields changed");
        }
        // One step beyond either bound, and a misaligned target, are refused.
        let at = 1u64 << 34;
        let base = if reach == Reach::Adrp {
            at & !0xfff
        } else {
            at
        };
        for off in [lo - step, hi + step] {
            let target = base.wrapping_add_signed(off);
            assert!(
                matches!(
                    aarch64::retarget(template, at, target),
                    Err(EncodeError::OutOfReach { .. })
                ),
                "{name}: {off:#x} accepted"
            );
        }
        if !matches!(reach, Reach::Adr | Reach::Adrp) {
            assert!(aarch64::retarget(template, at, at + 2).is_err(), "{name}");
        }
    }
    assert!(matches!(
        aarch64::retarget(aarch64::NOP, 0, 0),
        Err(EncodeError::NotPcRelative { .. })
    ));
}

fn base_of(reach: Reach, at: u64) -> u64 {
    if reach == Reach::Adrp {
        at & !0xfff
    } else {
        at
    }
}

#[test]
fn inverted_conditions_keep_their_target_and_operands() {
    let at = 0x40_0000;
    for (word, inverse) in [
        (0x5400_0080u32, "b.ne"), // b.eq +0x10
        (0x5400_008bu32, "b.ge"), // b.lt
        (0x3400_0083, "cbnz"),
        (0xb500_0083, "cbz"),
        (0x3618_0085, "tbnz"),
        (0xb7f8_0089, "tbz"),
    ] {
        let inverted = aarch64::invert(word).unwrap();
        assert_eq!(mnemonic(inverted, at), inverse, "{word:#010x}");
        let (a, b) = (
            aarch64::decode(word, at).unwrap(),
            aarch64::decode(inverted, at).unwrap(),
        );
        assert_eq!(our_target(&a), our_target(&b));
        match (a.control, b.control) {
            (
                Control::Conditional {
                    form:
                        CondForm::Compare {
                            reg: r1, wide: w1, ..
                        },
                    ..
                },
                Control::Conditional {
                    form:
                        CondForm::Compare {
                            reg: r2, wide: w2, ..
                        },
                    ..
                },
            ) => assert_eq!((r1, w1), (r2, w2)),
            (
                Control::Conditional {
                    form:
                        CondForm::TestBit {
                            reg: r1, bit: b1, ..
                        },
                    ..
                },
                Control::Conditional {
                    form:
                        CondForm::TestBit {
                            reg: r2, bit: b2, ..
                        },
                    ..
                },
            ) => assert_eq!((r1, b1), (r2, b2)),
            (Control::Conditional { .. }, Control::Conditional { .. }) => {}
            other => panic!("{other:?}"),
        }
        assert_eq!(aarch64::invert(inverted).unwrap(), word);
    }
    // b.al and b.nv are always taken; b and bl are not conditional.
    for word in [0x5400_008eu32, 0x5400_008f, 0x1400_0004, 0x9400_0004] {
        assert!(matches!(
            aarch64::invert(word),
            Err(EncodeError::NotInvertible { .. })
        ));
    }
}

#[test]
fn veneers_and_long_branches_reach_their_targets() {
    let mut rng = Rng(0xdead_beef_cafe_f00d);
    for _ in 0..2000 {
        let at = (rng.next() & 0x0000_00ff_ffff_fffc) + (1 << 33);
        let off = (rng.next() % (1 << 32)) as i64 - (1 << 31);
        let target = at.wrapping_add_signed(off) & !3;
        let [adrp, add, br] = aarch64::veneer(at, target).unwrap();
        let page = match aarch64::decode(adrp, at).unwrap().pc_relative {
            Some(PcRelative::Adrp { reg: 16, page }) => page,
            other => panic!("{other:?}"),
        };
        assert_eq!(mnemonic(add, at + 4), "add");
        // add x16, x16, #imm12: the low 12 bits of the target.
        assert_eq!(add & 0xffc0_03ff, 0x9100_0210);
        assert_eq!(page + u64::from((add >> 10) & 0xfff), target);
        assert_eq!(
            aarch64::decode(br, at + 8).unwrap().control,
            Control::IndirectJump { reg: 16 }
        );
    }
    // b and bl at their limits.
    let at = 1u64 << 30;
    assert_eq!(
        aarch64::decode(aarch64::b(at, at + (1 << 27) - 4).unwrap(), at)
            .unwrap()
            .control,
        Control::Jump {
            target: at + (1 << 27) - 4
        }
    );
    assert_eq!(
        aarch64::decode(aarch64::bl(at, at - (1 << 27)).unwrap(), at)
            .unwrap()
            .control,
        Control::Call {
            target: at - (1 << 27)
        }
    );
    assert!(aarch64::b(at, at + (1 << 27)).is_err());
}

/// Landing pads for veneers where BTI is enforced, and the functions that are only a
/// veneer (the linker's `__*_veneer`): every pad word disarm64 reads as the `bti`/`pac` it
/// is, the pad Rivet writes jumps where asked, and a veneer's destination is found from its
/// decoded instructions, not from anything that merely looks like one.
#[test]
fn landing_pads_and_forwarding_veneers() {
    use rivet_arch::Isa;
    use rivet_elf::Vaddr;
    for (word, name) in [
        (aarch64::BTI_C, "bti"),
        (aarch64::BTI_J, "bti"),
        (aarch64::BTI_JC, "bti"),
        (aarch64::PACIASP, "paciasp"),
        (aarch64::PACIBSP, "pacibsp"),
    ] {
        assert!(aarch64::lands_veneer(word), "{word:#x}");
        assert!(
            mnemonic(word, 0).starts_with(name),
            "{word:#x}: {}",
            mnemonic(word, 0)
        );
    }
    // `bti` without targets and the non-SP `pac` forms are no pads for a `br x16`.
    for word in [0xd503_241f_u32, 0xd503_211f, aarch64::NOP] {
        assert!(!aarch64::lands_veneer(word), "{word:#x}");
    }
    let isa = Isa::Aarch64;
    for (at, to) in [
        (0x40_0000u64, 0x83f_fff8u64),
        (0x8c2_1000, 0xc2_1008),
        (0x1000, 0x1004),
    ] {
        let pad = isa.encode_landing_pad(Vaddr(at), Vaddr(to)).unwrap();
        assert_eq!(isa.landing_pad_target(&pad, Vaddr(at)), Some(Vaddr(to)));
        let jump = u32::from_le_bytes(pad[4..8].try_into().unwrap());
        assert_eq!(oracle(jump, at + 4).and_then(|(_, t)| t), Some(to));
        let veneer = isa.encode_veneer(Vaddr(at), Vaddr(to)).unwrap();
        let insts = isa.decode_all(&veneer, Vaddr(at));
        assert_eq!(isa.forwarding_destination(&insts), Some(Vaddr(to)));
        // Any other register, or a call instead of the jump, is not a veneer.
        let mut call = veneer.clone();
        call[8..12].copy_from_slice(&0xd63f_0200_u32.to_le_bytes()); // blr x16
        assert_eq!(
            isa.forwarding_destination(&isa.decode_all(&call, Vaddr(at))),
            None
        );
    }
    // Out of a `b`'s reach, no landing pad.
    assert!(isa.encode_landing_pad(Vaddr(0), Vaddr(1 << 28)).is_err());
    assert_eq!(Isa::X86_64.forwarding_destination(&[]), None);
}
