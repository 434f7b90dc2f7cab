//! `.rivet.bat`: the address translation table Rivet leaves in its output.
//!
//! For every block of every rewritten function, its original and its new start address. With
//! the input binary this is enough to translate any address of the output back to the input
//! (blocks are copied whole), which is what `rivet verify` needs to check an output after the
//! fact, and what lets a profile collected on an optimized binary be mapped to the original.
//!
//! Format (little-endian): the magic `RVTBAT1\0`, a u64 count, then `count` pairs of u64
//! (original address, new address), sorted by original address.

use rivet_elf::Vaddr;

pub const SECTION: &str = ".rivet.bat";
/// The functions `--icf` folded, in the same format: pairs of (folded function's entry, kept
/// copy's entry), both input addresses, sorted. Written only when something was folded, so
/// that `rivet verify` can check an output after the fact.
pub const FOLDS_SECTION: &str = ".rivet.icf";
const MAGIC: &[u8; 8] = b"RVTBAT1\0";

/// Encodes sorted (old, new) block start pairs.
pub fn encode(pairs: &[(Vaddr, Vaddr)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + pairs.len() * 16);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(pairs.len() as u64).to_le_bytes());
    for (old, new) in pairs {
        out.extend_from_slice(&old.get().to_le_bytes());
        out.extend_from_slice(&new.get().to_le_bytes());
    }
    out
}

/// A table that is not one Rivet wrote.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("malformed {SECTION} section: {0}")]
pub struct BatError(&'static str);

/// Decodes a table written by `encode`.
pub fn decode(bytes: &[u8]) -> Result<Vec<(Vaddr, Vaddr)>, BatError> {
    if bytes.len() < 16 || &bytes[..8] != MAGIC {
        return Err(BatError("bad magic"));
    }
    let count = u64::from_le_bytes(bytes[8..16].try_into().unwrap());
    let body = &bytes[16..];
    if (body.len() as u64) / 16 != count || !body.len().is_multiple_of(16) {
        return Err(BatError("size does not match the count"));
    }
    let word = |c: &[u8]| u64::from_le_bytes(c.try_into().unwrap());
    let pairs: Vec<(Vaddr, Vaddr)> = body
        .chunks_exact(16)
        .map(|c| (Vaddr(word(&c[..8])), Vaddr(word(&c[8..]))))
        .collect();
    if pairs.windows(2).any(|w| w[0].0 >= w[1].0) {
        return Err(BatError("entries are not sorted"));
    }
    Ok(pairs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rejects_garbage() {
        let pairs = vec![
            (Vaddr(0x1000), Vaddr(0x9000)),
            (Vaddr(0x1010), Vaddr(0x9100)),
        ];
        assert_eq!(decode(&encode(&pairs)).unwrap(), pairs);
        assert!(decode(b"nonsense").is_err());
        let mut bad = encode(&pairs);
        bad.pop();
        assert!(decode(&bad).is_err());
    }
}
