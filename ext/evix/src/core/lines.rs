//! Line search for `Evix::IO#gets` (ext/evix/src/ruby/io.rs binds it):
//! bytes only, no Ruby, so `cargo test` covers it.

/// Where the line of `bytes` that starts at `offset` ends (exclusive): the
/// first `separator` after `offset` ends it, if it ends within `limit` bytes;
/// with `chomp` the line ends before the separator (and before a "\r" in
/// front of a "\n" one). None when there is no such line, or for an empty
/// separator (paragraph mode is not a plain search).
pub fn find_line(
    bytes: &[u8],
    offset: usize,
    separator: &[u8],
    limit: Option<usize>,
    chomp: bool,
) -> Option<usize> {
    if separator.is_empty() {
        return None; // paragraph mode
    }
    let rest = bytes.get(offset..)?;
    // The separator must end within the limit: no need to look further.
    let window = &rest[..limit.map_or(rest.len(), |limit| limit.min(rest.len()))];
    let at = find(window, separator)?;
    if !chomp {
        return Some(offset + at + separator.len());
    }
    let cr = separator == b"\n" && at > 0 && rest[at - 1] == b'\r';
    Some(offset + at - usize::from(cr))
}

/// The first position of `needle` (not empty) in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    let (&first, tail) = needle.split_first()?;
    let last_start = haystack.len().checked_sub(needle.len())?;
    let mut from = 0;
    while from <= last_start {
        let at = from + find_byte(&haystack[from..=last_start], first)?;
        if haystack[at + 1..at + needle.len()] == *tail {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// The first position of `byte` in `haystack`, eight bytes per step: a
/// byte-by-byte loop costs as much as the rest of a line's #gets.
fn find_byte(haystack: &[u8], byte: u8) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let pattern = ONES * u64::from(byte);
    let mut words = haystack.chunks_exact(8);
    let mut at = 0;
    for word in &mut words {
        // Bytes equal to `byte` are 0 in `x`; the lowest 0 byte sets the
        // lowest flag (any wrong flags come from a borrow, above a true one).
        let x = u64::from_le_bytes(word.try_into().expect("8 bytes")) ^ pattern;
        let flags = x.wrapping_sub(ONES) & !x & HIGHS;
        if flags != 0 {
            return Some(at + (flags.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    let tail = words.remainder();
    tail.iter().position(|&b| b == byte).map(|i| at + i)
}

#[cfg(test)]
mod tests {
    use super::{find, find_byte, find_line};
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn find_byte_agrees_with_a_plain_search(haystack in proptest::collection::vec(0u8..4, 0..40), byte in 0u8..4) {
            prop_assert_eq!(find_byte(&haystack, byte), haystack.iter().position(|&b| b == byte));
        }

        #[test]
        fn find_agrees_with_a_plain_search(
            haystack in proptest::collection::vec(0u8..3, 0..40),
            needle in proptest::collection::vec(0u8..3, 1..4),
        ) {
            let plain = haystack.windows(needle.len()).position(|w| w == needle.as_slice());
            prop_assert_eq!(find(&haystack, &needle), plain);
        }
    }

    #[test]
    fn finds_a_separator_of_any_length() {
        assert_eq!(find(b"abc\ndef", b"\n"), Some(3));
        assert_eq!(find(b"ab\r\r\n", b"\r\n"), Some(3));
        assert_eq!(find(b"ab\r", b"\r\n"), None);
        assert_eq!(find(b"", b"\n"), None);
        assert_eq!(find(b";;", b";;;"), None);
    }

    #[test]
    fn finds_the_line_after_offset_within_the_limit() {
        let buffer = b"one\r\ntwo\nthree";
        assert_eq!(find_line(buffer, 0, b"\n", None, false), Some(5));
        assert_eq!(find_line(buffer, 0, b"\n", None, true), Some(3)); // "\r\n" chomped
        assert_eq!(find_line(buffer, 5, b"\n", None, true), Some(8));
        assert_eq!(find_line(buffer, 5, b"\n", Some(4), false), Some(9));
        assert_eq!(find_line(buffer, 5, b"\n", Some(3), false), None); // longer than the limit
        assert_eq!(find_line(buffer, 9, b"\n", None, false), None); // no separator yet
        assert_eq!(find_line(buffer, 99, b"\n", None, false), None);
        assert_eq!(find_line(buffer, 0, b"", None, false), None);
        assert_eq!(find_line(b"\r\n", 0, b"\r\n", None, true), Some(0));
    }
}
