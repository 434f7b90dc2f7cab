//! Reads qemu-user's log of `-d in_asm,exec,nochain,page` as a stream of events, one line at a
//! time (a long run's log is gigabytes: it is never held whole).
//!
//! The log of qemu 7.2 (Debian 12's), as its `accel/tcg` and `disas/capstone.c` print it:
//!
//! - `in_asm`: each time qemu translates a block of guest code (a "TB": straight-line code
//!   up to a branch, a page end or 512 instructions), a line `IN: SYMBOL`, then one line per
//!   instruction, `0xADDRESS:  UNITS  MNEMONIC OPERANDS`, with the instruction's bytes as hex
//!   units (one 8-digit word on AArch64, bytes on x86-64), then a blank line. An x86-64
//!   instruction longer than 8 bytes continues on lines of bytes alone, each at its own
//!   address. A block qemu translates again (its code was replaced, or its cached
//!   translation flushed) is listed again, and the newest listing is the one that runs.
//! - `exec` with `nochain`: every time a block runs, `Trace CPU: HOST [CS_BASE/PC/FLAGS/CFLAGS]
//!   SYMBOL`. `nochain` stops qemu from jumping from block to block without logging.
//! - `page`: at start-up the loaded program's layout, with `start_code ADDRESS`: the lowest
//!   address of the main program's executable segments, after its load bias.
//!
//! Anything else (the memory map qemu prints after each mmap) is skipped. When capstone
//! cannot list an instruction, qemu prints `Disassembler disagrees with translator` and stops
//! listing the block; the block's count is then short, and the reader reports it.

use std::io::{self, BufRead};

/// The most bytes a listing may span: qemu's blocks stay within two guest pages, and a
/// bogus listing spanning more would make the replay walk its lines for ever.
const MAX_BLOCK_BYTES: u64 = 1 << 20;

/// A translated block: where its code is and how many instructions it has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Block {
    pub start: u64,
    /// One past its last byte.
    pub end: u64,
    pub instructions: u32,
    /// One past the first instruction's last byte.
    pub first_end: u64,
}

/// What one or more log lines said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// A block was translated (its listing ended).
    Translated(Block),
    /// The block at this address ran.
    Executed(u64),
    /// The main program's executable code starts here (`start_code`).
    StartCode(u64),
    /// The disassembler gave up on a block: its listing, and so its count, is short.
    Unlisted,
}

/// The block being listed.
#[derive(Debug)]
struct Listing {
    start: Option<u64>,
    end: u64,
    instructions: u32,
    first_end: Option<u64>,
}

/// Reads events from a qemu log.
#[derive(Debug)]
pub(crate) struct LogReader<R> {
    input: R,
    line: Vec<u8>,
    listing: Option<Listing>,
    /// An event found while closing a listing, returned after it.
    queued: Option<Event>,
}

impl<R: BufRead> LogReader<R> {
    pub(crate) fn new(input: R) -> LogReader<R> {
        LogReader {
            input,
            line: Vec::with_capacity(256),
            listing: None,
            queued: None,
        }
    }

    /// The next event, or `None` at the end of the log.
    pub(crate) fn next_event(&mut self) -> io::Result<Option<Event>> {
        if let Some(e) = self.queued.take() {
            return Ok(Some(e));
        }
        loop {
            self.line.clear();
            if self.input.read_until(b'\n', &mut self.line)? == 0 {
                return Ok(self.close_listing().map(Event::Translated));
            }
            let line = trim_end(&self.line);
            if let Some(pc) = line.strip_prefix(b"Trace ").and_then(traced_pc) {
                let event = Event::Executed(pc);
                match self.close_listing() {
                    Some(block) => {
                        self.queued = Some(event);
                        return Ok(Some(Event::Translated(block)));
                    }
                    None => return Ok(Some(event)),
                }
            }
            if line.starts_with(b"IN:") {
                let closed = self.close_listing();
                self.listing = Some(Listing {
                    start: None,
                    end: 0,
                    instructions: 0,
                    first_end: None,
                });
                if let Some(block) = closed {
                    return Ok(Some(Event::Translated(block)));
                }
                continue;
            }
            if let Some(listing) = self.listing.as_mut()
                && let Some((addr, bytes, has_mnemonic)) = instruction_line(line)
            {
                if has_mnemonic {
                    if listing.start.is_none() {
                        listing.start = Some(addr);
                    } else if listing.first_end.is_none() {
                        listing.first_end = Some(addr);
                    }
                    listing.instructions += 1;
                }
                listing.end = listing.end.max(addr + bytes);
                continue;
            }
            if line.starts_with(b"Disassembler disagrees") {
                let closed = self.close_listing();
                return Ok(Some(match closed {
                    Some(block) => {
                        self.queued = Some(Event::Unlisted);
                        Event::Translated(block)
                    }
                    None => Event::Unlisted,
                }));
            }
            let start_code = line
                .strip_prefix(b"start_code")
                .and_then(|rest| parse_hex(trim_start(rest).strip_prefix(b"0x")?));
            // A blank line ends a listing; any other line is not part of one.
            if let Some(block) = self.close_listing() {
                return Ok(Some(Event::Translated(block)));
            }
            if let Some(addr) = start_code {
                return Ok(Some(Event::StartCode(addr)));
            }
        }
    }

    /// Ends the current listing; the block, if it listed any instruction and its bytes are
    /// a block's (qemu's span at most two pages; a listing that claims more is not qemu's).
    fn close_listing(&mut self) -> Option<Block> {
        let listing = self.listing.take()?;
        let start = listing.start?;
        if listing.end <= start || listing.end - start > MAX_BLOCK_BYTES {
            return None;
        }
        Some(Block {
            start,
            end: listing.end,
            instructions: listing.instructions,
            first_end: listing.first_end.unwrap_or(listing.end),
        })
    }
}

/// The guest PC of a `Trace` line's `[CS_BASE/PC/FLAGS/CFLAGS]`.
fn traced_pc(rest: &[u8]) -> Option<u64> {
    let open = rest.iter().position(|&b| b == b'[')?;
    let fields = &rest[open + 1..];
    let slash = fields.iter().position(|&b| b == b'/')?;
    let pc = &fields[slash + 1..];
    let end = pc.iter().position(|&b| b == b'/')?;
    parse_hex(&pc[..end])
}

/// An instruction line of a listing: its address, the bytes its hex units stand for, and
/// whether it names a mnemonic (a continuation line of a long instruction does not).
fn instruction_line(line: &[u8]) -> Option<(u64, u64, bool)> {
    let rest = line.strip_prefix(b"0x")?;
    let colon = rest.iter().position(|&b| b == b':')?;
    let addr = parse_hex(&rest[..colon])?;
    let body = trim_start(&rest[colon + 1..]);
    // The units end at the first double space (padding before the mnemonic) or the line.
    let units_end = body
        .windows(2)
        .position(|w| w == b"  ")
        .unwrap_or(body.len());
    let units = &body[..units_end];
    let mut digits = 0u64;
    for unit in units.split(|&b| b == b' ').filter(|u| !u.is_empty()) {
        if !unit.iter().all(u8::is_ascii_hexdigit) || !unit.len().is_multiple_of(2) {
            return None;
        }
        digits += unit.len() as u64;
    }
    if digits == 0 {
        return None;
    }
    let has_mnemonic = !trim_start(&body[units_end..]).is_empty();
    // Code that would end past the top of the address space is not code.
    addr.checked_add(digits / 2)?;
    Some((addr, digits / 2, has_mnemonic))
}

fn parse_hex(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 16 {
        return None;
    }
    let mut v = 0u64;
    for &d in digits {
        v = (v << 4) | (d as char).to_digit(16)? as u64;
    }
    Some(v)
}

fn trim_end(line: &[u8]) -> &[u8] {
    let n = line
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(0, |i| i + 1);
    &line[..n]
}

fn trim_start(s: &[u8]) -> &[u8] {
    let n = s.iter().position(|b| *b != b' ').unwrap_or(s.len());
    &s[n..]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(log: &str) -> Vec<Event> {
        let mut r = LogReader::new(log.as_bytes());
        let mut out = Vec::new();
        while let Some(e) = r.next_event().unwrap() {
            out.push(e);
        }
        out
    }

    #[test]
    fn reads_aarch64_listings_and_executions() {
        // Lines as qemu-aarch64 7.2 printed them for a small program.
        let log = "\
start_code  0x0000005500000000
----------------
IN: main
0x00400580:  a9bf7bfd  stp      x29, x30, [sp, #-0x10]!
0x00400584:  52945b81  movz     w1, #0xa2dc
0x00400588:  97ffffea  bl       #0x400540

Trace 0: 0x7fa6040a2bc0 [0000000001009331/0000000000400580/00000001/00000200] main
----------------
IN: 
0x004005a4:  d65f03c0  ret      

Trace 0: 0x7fa6040c34c0 [0000000001009331/00000000004005a4/00000001/00000200] main
Trace 0: 0x7fa6040a2bc0 [0000000001009331/0000000000400580/00000001/00000200] main
";
        assert_eq!(
            events(log),
            vec![
                Event::StartCode(0x55_0000_0000),
                Event::Translated(Block {
                    start: 0x400580,
                    end: 0x40058c,
                    instructions: 3,
                    first_end: 0x400584
                }),
                Event::Executed(0x400580),
                Event::Translated(Block {
                    start: 0x4005a4,
                    end: 0x4005a8,
                    instructions: 1,
                    first_end: 0x4005a8
                }),
                Event::Executed(0x4005a4),
                Event::Executed(0x400580),
            ]
        );
    }

    #[test]
    fn joins_the_continuation_lines_of_long_x86_instructions() {
        let log = "\
IN: 
0x400081a7df:  48 89 4c 24 d0           movq     %rcx, -0x30(%rsp)
0x400081a7e4:  48 c7 44 24 b8 00 10 00  movq     $0x1000, -0x48(%rsp)
0x400081a7ec:  00
0x400081a7ed:  48 85 c0                 testq    %rax, %rax
Trace 0: 0x7faa00000100 [0000000000000000/000000400081a7df/1040c0b3/00000200] 
";
        assert_eq!(
            events(log),
            vec![
                Event::Translated(Block {
                    start: 0x4000_81a7df,
                    end: 0x4000_81a7f0,
                    instructions: 3,
                    first_end: 0x4000_81a7e4
                }),
                Event::Executed(0x4000_81a7df),
            ]
        );
    }

    #[test]
    fn reports_blocks_the_disassembler_gave_up_on() {
        let log = "\
IN: f
0x00401000:  d503201f  nop      
Disassembler disagrees with translator over instruction decoding
Please report this to qemu-devel@nongnu.org
";
        assert_eq!(
            events(log),
            vec![
                Event::Translated(Block {
                    start: 0x401000,
                    end: 0x401004,
                    instructions: 1,
                    first_end: 0x401004
                }),
                Event::Unlisted,
            ]
        );
    }

    #[test]
    fn refuses_listings_no_block_could_have() {
        let log = "\
IN: f
0x00401000:  d503201f  nop      
0x90401000:  d503201f  nop      

IN: g
0xfffffffffffffffe:  d503201f  nop      

";
        assert_eq!(events(log), vec![]);
    }

    #[test]
    fn skips_memory_maps_and_garbage() {
        let log = "\
page layout changed following mmap
start            end              size             prot
0000005500000000-0000005500001000 0000000000001000 r-x
0x12zz: nonsense
Trace 0: broken
Trace 0: 0x1 [0/1000/0/0]
";
        assert_eq!(events(log), vec![Event::Executed(0x1000)]);
    }
}
