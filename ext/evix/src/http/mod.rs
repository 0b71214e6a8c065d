//! HTTP/1.1 request framing for `Evix::HTTP::Server`: the request head
//! (parsed by `httparse`) and the chunked body decoder, with every limit a
//! request can hit. No Ruby here, so `cargo test` runs it; ruby/http_parser.rs
//! binds it.
//!
//! Strict where a guess could differ from a proxy's: a request that cannot be
//! framed with certainty is a [`Reject`] (answered, then the connection is
//! closed), never a best effort.

mod chunked;
mod head;

pub use chunked::Chunked;
pub use head::{parse_head, Body, Head, Version};

/// The bounds a request must stay within; each breach has its status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of the request line, its CRLF excluded (414).
    pub request_line: usize,
    /// Bytes of the whole head, request line and headers (431).
    pub head: usize,
    /// Header fields in a head (431).
    pub headers: usize,
    /// Bytes of a request body, by Content-Length or chunked (413).
    pub body: u64,
    /// Bytes of one chunk-size line, its extensions included (400).
    pub chunk_line: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            request_line: 8 * 1024,
            head: 64 * 1024,
            headers: 100,
            body: 64 * 1024 * 1024,
            chunk_line: 1024,
        }
    }
}

/// Why a request is refused: its status code and a short reason for the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reject {
    pub status: u16,
    pub reason: &'static str,
}

impl Reject {
    pub const fn bad(reason: &'static str) -> Self {
        Reject {
            status: 400,
            reason,
        }
    }
}

/// The request line is longer than [`Limits::request_line`].
pub const URI_TOO_LONG: Reject = Reject {
    status: 414,
    reason: "request line too long",
};
/// The head is larger than [`Limits::head`].
pub const HEAD_TOO_LARGE: Reject = Reject {
    status: 431,
    reason: "request head too large",
};
/// More header fields than [`Limits::headers`].
pub const TOO_MANY_HEADERS: Reject = Reject {
    status: 431,
    reason: "too many header fields",
};
/// A body longer than [`Limits::body`].
pub const BODY_TOO_LARGE: Reject = Reject {
    status: 413,
    reason: "request body too large",
};
/// A well-formed HTTP version other than 1.0 and 1.1.
pub const VERSION_NOT_SUPPORTED: Reject = Reject {
    status: 505,
    reason: "HTTP version not supported",
};
