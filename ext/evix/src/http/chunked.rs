//! The chunked transfer coding (RFC 9112 §7.1), decoded as bytes arrive:
//! chunk-size lines (parsed by `httparse`), data, and the trailer section,
//! whose fields are read and dropped.

use super::{Limits, Reject, BODY_TOO_LARGE, HEAD_TOO_LARGE};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// A chunk-size line is next.
    Size,
    /// This many bytes of chunk data are next.
    Data(u64),
    /// The CRLF after a chunk's data.
    DataEnd,
    /// Trailer fields, then an empty line.
    Trailer,
    Done,
}

/// One request body's decoder: feed it the bytes that follow the head.
#[derive(Clone, Debug)]
pub struct Chunked {
    state: State,
    /// Data bytes so far, against `Limits::body`.
    total: u64,
    /// Trailer bytes so far, against `Limits::head`.
    trailer: usize,
}

impl Default for Chunked {
    fn default() -> Self {
        Self::new()
    }
}

impl Chunked {
    pub fn new() -> Self {
        Chunked {
            state: State::Size,
            total: 0,
            trailer: 0,
        }
    }

    /// Whether the last chunk and the trailer section were read.
    pub fn done(&self) -> bool {
        self.state == State::Done
    }

    /// Decodes what it can of `input`, handing each run of data to `data`;
    /// returns how many bytes of `input` it used (the rest, an incomplete
    /// line, waits for more input). Stops after the body's end: what
    /// follows is the next request.
    pub fn decode(
        &mut self,
        input: &[u8],
        limits: &Limits,
        mut data: impl FnMut(&[u8]),
    ) -> Result<usize, Reject> {
        let mut used = 0;
        loop {
            let rest = &input[used..];
            match self.state {
                State::Done => return Ok(used),
                State::Size => {
                    let Some((line, size)) = chunk_size(rest, limits)? else {
                        return Ok(used);
                    };
                    if size > limits.body - self.total.min(limits.body) {
                        return Err(BODY_TOO_LARGE);
                    }
                    used += line;
                    self.state = if size == 0 {
                        State::Trailer
                    } else {
                        State::Data(size)
                    };
                }
                State::Data(left) => {
                    if rest.is_empty() {
                        return Ok(used);
                    }
                    let n = rest.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                    data(&rest[..n]);
                    used += n;
                    self.total += n as u64;
                    let left = left - n as u64;
                    self.state = if left == 0 {
                        State::DataEnd
                    } else {
                        State::Data(left)
                    };
                }
                State::DataEnd => match rest {
                    [b'\r', b'\n', ..] => {
                        used += 2;
                        self.state = State::Size;
                    }
                    [] | [b'\r'] => return Ok(used),
                    _ => return Err(Reject::bad("chunk data not followed by CRLF")),
                },
                State::Trailer => {
                    let Some(at) = rest.iter().position(|&b| b == b'\n') else {
                        if self.trailer + rest.len() > limits.head {
                            return Err(HEAD_TOO_LARGE);
                        }
                        return Ok(used);
                    };
                    if at == 0 || rest[at - 1] != b'\r' {
                        return Err(Reject::bad("bare LF in the trailer section"));
                    }
                    self.trailer += at + 1;
                    if self.trailer > limits.head {
                        return Err(HEAD_TOO_LARGE);
                    }
                    if at > 1 && !is_field_line(&rest[..at - 1]) {
                        return Err(Reject::bad("invalid trailer field"));
                    }
                    used += at + 1;
                    if at == 1 {
                        self.state = State::Done;
                    }
                }
            }
        }
    }
}

/// The length of the chunk-size line at the start of `input` and the size
/// it gives; None while the line is incomplete.
fn chunk_size(input: &[u8], limits: &Limits) -> Result<Option<(usize, u64)>, Reject> {
    // The line with its CRLF must fit in the limit.
    let window = &input[..input.len().min(limits.chunk_line + 2)];
    if window.first().is_some_and(|b| !b.is_ascii_hexdigit()) {
        return Err(Reject::bad("invalid chunk size"));
    }
    match httparse::parse_chunk_size(window) {
        Ok(httparse::Status::Complete((len, size))) => {
            // httparse lets any byte through in an extension; a control
            // character there (a bare LF above all) is where parsers disagree.
            let line = &window[..len - 2];
            if line.iter().any(|&b| (b < b' ' && b != b'\t') || b == 0x7f) {
                return Err(Reject::bad("control character in a chunk-size line"));
            }
            Ok(Some((len, size)))
        }
        Ok(httparse::Status::Partial) if window.len() > limits.chunk_line + 1 => {
            Err(Reject::bad("chunk-size line too long"))
        }
        Ok(httparse::Status::Partial) => Ok(None),
        Err(_) => Err(Reject::bad("invalid chunk size")),
    }
}

/// A trailer line "name: value": a token name and no control characters.
fn is_field_line(line: &[u8]) -> bool {
    let Some(colon) = line.iter().position(|&b| b == b':') else {
        return false;
    };
    colon > 0
        && line[..colon]
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
        && line[colon + 1..].iter().all(|&b| b >= b' ' || b == b'\t')
}

#[cfg(test)]
mod tests;
