use super::*;
use proptest::prelude::*;

/// Feeds `input` in pieces of `step` bytes the way a connection does (what
/// the decoder leaves stays in the buffer); the decoded data, or the reject.
fn decode_in_steps(input: &[u8], step: usize, limits: &Limits) -> Result<(Vec<u8>, usize), Reject> {
    let mut decoder = Chunked::new();
    let mut out = Vec::new();
    let (mut start, mut end) = (0, 0);
    while !decoder.done() {
        if end == input.len() {
            break;
        }
        end = (end + step).min(input.len());
        start += decoder.decode(&input[start..end], limits, |data| {
            out.extend_from_slice(data)
        })?;
    }
    Ok((out, start))
}

fn decode(input: &[u8]) -> Result<(Vec<u8>, usize), Reject> {
    decode_in_steps(input, input.len().max(1), &Limits::default())
}

#[test]
fn chunks_trailers_and_what_follows() {
    let input = b"4\r\nWiki\r\n5;name=value\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nX-Sum: 1\r\n\r\nGET";
    let (data, used) = decode(input).unwrap();
    assert_eq!(data, b"Wikipedia in\r\n\r\nchunks.");
    assert_eq!(used, input.len() - 3);
}

#[test]
fn bad_chunks_are_400() {
    for input in [
        &b"x\r\n"[..],
        b"\r\n",
        b";ext\r\n",
        b"-1\r\n",
        b"4\r\nWikiX\r\n",
        b"4\nWiki\r\n0\r\n\r\n",
        b"4;a\nb\r\nWiki\r\n0\r\n\r\n",
        b"4;\0\r\nWiki\r\n0\r\n\r\n",
        b"10000000000000000\r\n",
        b"0\r\nX-Bad\r\n\r\n",
        b"0\r\nX: y\n\r\n",
    ] {
        assert_eq!(
            decode(input).unwrap_err().status,
            400,
            "{}",
            String::from_utf8_lossy(input)
        );
    }
}

#[test]
fn limits() {
    let limits = Limits {
        body: 8,
        chunk_line: 16,
        head: 32,
        ..Limits::default()
    };
    assert!(decode_in_steps(b"8\r\n12345678\r\n0\r\n\r\n", 100, &limits).is_ok());
    let too_big = decode_in_steps(b"5\r\n12345\r\n4\r\n1234\r\n0\r\n\r\n", 100, &limits);
    assert_eq!(too_big.unwrap_err().status, 413);
    let long_ext = format!("1;{}\r\nx\r\n0\r\n\r\n", "e".repeat(15));
    assert_eq!(
        decode_in_steps(long_ext.as_bytes(), 3, &limits)
            .unwrap_err()
            .status,
        400
    );
    let short_ext = format!("1;{}\r\nx\r\n0\r\n\r\n", "e".repeat(14));
    assert!(decode_in_steps(short_ext.as_bytes(), 3, &limits).is_ok());
    let trailer = format!("0\r\nX: {}\r\n\r\n", "t".repeat(40));
    assert_eq!(
        decode_in_steps(trailer.as_bytes(), 5, &limits)
            .unwrap_err()
            .status,
        431
    );
}

fn encode(data: &[u8], sizes: &[usize]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut rest = data;
    let mut sizes = sizes.iter().cycle();
    while !rest.is_empty() {
        let n = (*sizes.next().unwrap()).clamp(1, rest.len());
        out.extend_from_slice(format!("{n:x}\r\n").as_bytes());
        out.extend_from_slice(&rest[..n]);
        out.extend_from_slice(b"\r\n");
        rest = &rest[n..];
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

proptest! {
    /// Whatever the chunk sizes and read boundaries, the data comes back
    /// whole and the decoder stops right after the body.
    #[test]
    fn round_trip(data in prop::collection::vec(any::<u8>(), 0..2000),
                  sizes in prop::collection::vec(1usize..300, 1..5),
                  step in 1usize..64) {
        let mut input = encode(&data, &sizes);
        let len = input.len();
        input.extend_from_slice(b"NEXT");
        let (out, used) = decode_in_steps(&input, step, &Limits::default()).unwrap();
        prop_assert_eq!(out, data);
        prop_assert_eq!(used, len);
    }

    /// Any bytes: no panic; used never passes the input.
    #[test]
    fn any_bytes(input in prop::collection::vec(any::<u8>(), 0..300), step in 1usize..32) {
        if let Ok((_, used)) = decode_in_steps(&input, step, &Limits::default()) {
            prop_assert!(used <= input.len());
        }
    }
}
