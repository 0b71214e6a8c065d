//! `Evix::IO`'s line reader (ext/evix/src/ruby/io.rs binds it): where the
//! next line of the input buffer ends, and what chomp leaves of it. Bytes
//! only, no Ruby, so `cargo test` covers it.

/// Where the line of `bytes` that starts at `offset` ends (exclusive): after
/// the first `separator` (not empty) if it ends within `limit` bytes, else
/// after `limit` bytes if that many are there; None while the buffer holds
/// neither (more input decides). `searched` bytes after `offset` were
/// searched before without a separator: the search resumes where it
/// stopped, so a line that takes many reads has each byte looked at once.
/// A nil separator (`None`) ends lines only at the limit.
pub fn line_end(
    bytes: &[u8],
    offset: usize,
    searched: usize,
    separator: Option<&[u8]>,
    limit: Option<usize>,
) -> Option<usize> {
    let rest = bytes.get(offset..)?;
    if let Some(separator) = separator.filter(|s| !s.is_empty()) {
        // The separator must end within the limit: no need to look further.
        let window = &rest[..limit.map_or(rest.len(), |limit| limit.min(rest.len()))];
        // A separator may straddle the end of what was searched.
        let from = searched
            .saturating_sub(separator.len() - 1)
            .min(window.len());
        if let Some(at) = find(&window[from..], separator) {
            return Some(offset + from + at + separator.len());
        }
    }
    limit
        .filter(|&limit| rest.len() >= limit)
        .map(|limit| offset + limit)
}

/// The length of `line` without its trailing `separator` (and a "\r"
/// before a "\n" one, as `String#chomp("\n")` drops); all of it when it
/// does not end with the separator (a line cut at the limit, or the last
/// one before end of file).
pub fn chomped_len(line: &[u8], separator: &[u8]) -> usize {
    if separator.is_empty() || !line.ends_with(separator) {
        return line.len();
    }
    let end = line.len() - separator.len();
    let cr = separator == b"\n" && end > 0 && line[end - 1] == b'\r';
    end - usize::from(cr)
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
    use super::{chomped_len, find, find_byte, line_end};
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

        // Resuming after a miss on the first `split` bytes finds what one
        // search of the whole buffer finds.
        #[test]
        fn a_resumed_search_agrees_with_a_whole_one(
            bytes in proptest::collection::vec(0u8..3, 0..40),
            split in 0usize..40,
            separator in proptest::collection::vec(0u8..3, 1..4),
            limit in proptest::option::of(0usize..40),
        ) {
            let split = split.min(bytes.len());
            prop_assume!(line_end(&bytes[..split], 0, 0, Some(&separator), limit).is_none());
            prop_assert_eq!(
                line_end(&bytes, 0, split, Some(&separator), limit),
                line_end(&bytes, 0, 0, Some(&separator), limit)
            );
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
    fn ends_the_line_after_offset_at_the_separator_or_the_limit() {
        let buffer = b"one\r\ntwo\nthree";
        let newline = Some(&b"\n"[..]);
        assert_eq!(line_end(buffer, 0, 0, newline, None), Some(5));
        assert_eq!(line_end(buffer, 5, 0, newline, None), Some(9));
        assert_eq!(line_end(buffer, 5, 0, newline, Some(4)), Some(9));
        assert_eq!(line_end(buffer, 5, 0, newline, Some(3)), Some(8)); // cut at the limit
        assert_eq!(line_end(buffer, 9, 0, newline, None), None); // no separator yet
        assert_eq!(line_end(buffer, 9, 0, newline, Some(9)), None); // nor the limit
        assert_eq!(line_end(buffer, 9, 0, newline, Some(5)), Some(14));
        assert_eq!(line_end(buffer, 9, 0, None, Some(2)), Some(11));
        assert_eq!(line_end(buffer, 9, 0, None, None), None); // to end of file
        assert_eq!(line_end(buffer, 0, 0, newline, Some(0)), Some(0));
        assert_eq!(line_end(buffer, 99, 0, newline, None), None);
        // Resumed: the "\r\n" straddles the 4 bytes searched before.
        assert_eq!(line_end(buffer, 0, 4, Some(&b"\r\n"[..]), None), Some(5));
        assert_eq!(
            line_end(b"a\n\nb\n\n", 0, 0, Some(&b"\n\n"[..]), None),
            Some(3)
        );
    }

    #[test]
    fn chomp_drops_the_separator_and_a_carriage_return_before_a_newline() {
        assert_eq!(chomped_len(b"one\r\n", b"\n"), 3);
        assert_eq!(chomped_len(b"one\n", b"\n"), 3);
        assert_eq!(chomped_len(b"\n", b"\n"), 0);
        assert_eq!(chomped_len(b"one\r", b"\n"), 4); // cut before its "\n"
        assert_eq!(chomped_len(b"one\r\n", b"\r\n"), 3);
        assert_eq!(chomped_len(b"one\r;", b";"), 4); // "\r" goes only with "\n"
        assert_eq!(chomped_len(b"para\n\n", b"\n\n"), 4);
        assert_eq!(chomped_len(b"tail", b"\n"), 4);
    }
}
