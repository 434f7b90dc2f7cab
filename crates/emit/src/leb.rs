//! LEB128, the variable-length integers of DWARF, `.eh_frame` and LSDAs, as the emitters write
//! them (gimli's writer offers them only through `std::io::Write`, with an error no `Vec`
//! can produce).

/// Appends `value` as an unsigned LEB128.
pub(crate) fn uleb128(out: &mut Vec<u8>, value: u64) {
    uleb128_padded(out, value, 1);
}

/// Appends `value` as an unsigned LEB128 of at least `len` bytes (padded with continuation
/// bytes), so that a field can be written before its final value is known.
pub(crate) fn uleb128_padded(out: &mut Vec<u8>, mut value: u64, len: usize) {
    let mut written = 0;
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        written += 1;
        if value == 0 && written >= len {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// Bytes of the shortest unsigned LEB128 of `value`.
pub(crate) fn uleb128_len(mut value: u64) -> u64 {
    let mut len = 1;
    while value >= 0x80 {
        value >>= 7;
        len += 1;
    }
    len
}

/// Appends `value` as a signed LEB128.
pub(crate) fn sleb128(out: &mut Vec<u8>, mut value: i64) {
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        let done = (value == 0 && byte & 0x40 == 0) || (value == -1 && byte & 0x40 != 0);
        if done {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings() {
        let mut out = Vec::new();
        uleb128(&mut out, 624_485);
        assert_eq!(out, [0xe5, 0x8e, 0x26]);
        out.clear();
        uleb128_padded(&mut out, 3, 3);
        assert_eq!(out, [0x83, 0x80, 0x00]);
        assert_eq!(uleb128_len(127), 1);
        assert_eq!(uleb128_len(128), 2);
        out.clear();
        sleb128(&mut out, -123_456);
        assert_eq!(out, [0xc0, 0xbb, 0x78]);
        out.clear();
        sleb128(&mut out, 63);
        assert_eq!(out, [0x3f]);
        out.clear();
        sleb128(&mut out, 64);
        assert_eq!(out, [0xc0, 0x00]);
    }
}
