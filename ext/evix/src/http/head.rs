//! The request head: request line and header fields, parsed by `httparse`
//! straight from the connection's buffer, then framed: how long the body
//! is, whether the connection stays open, whether the client waits for
//! `100 Continue`.

use super::{
    Limits, Reject, BODY_TOO_LARGE, HEAD_TOO_LARGE, TOO_MANY_HEADERS, URI_TOO_LONG,
    VERSION_NOT_SUPPORTED,
};
use std::mem::MaybeUninit;

/// Header slots kept on the stack; a larger `Limits::headers` uses the heap.
const STACK_HEADERS: usize = 128;
/// Content-Length digits past which the number cannot be a length.
const MAX_LENGTH_DIGITS: usize = 18;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    Http10,
    Http11,
}

/// How the request's body is framed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Body {
    /// No body (no Content-Length, or 0, and no Transfer-Encoding).
    Empty,
    /// Exactly this many bytes follow the head.
    Length(u64),
    /// `Transfer-Encoding: chunked`: see [`super::Chunked`].
    Chunked,
}

/// A complete, framed request head. The strings borrow the buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head<'b> {
    /// Bytes of the buffer the head takes, its final empty line included.
    pub len: usize,
    pub method: &'b str,
    /// The request-target as sent (Rack's REQUEST_URI).
    pub target: &'b str,
    /// The path of the target: "/" first, or "*" (OPTIONS *).
    pub path: &'b str,
    /// What follows the first "?" of the target ("" without one).
    pub query: &'b str,
    pub version: Version,
    pub body: Body,
    /// Whether the connection stays open after the response.
    pub keep_alive: bool,
    /// `Expect: 100-continue` on an HTTP/1.1 request.
    pub expect_continue: bool,
}

/// Parses the head at the start of `buf`. `Ok(None)`: incomplete, read more
/// (within the limits so far). On success `field` was called once per
/// header field, in order, with its name in Rack's form (`HTTP_ACCEPT`,
/// `CONTENT_TYPE`, `CONTENT_LENGTH`) and its value; a field whose name
/// holds "_" is left out (it would pass for the "-" one in Rack's form).
pub fn parse_head<'b>(
    buf: &'b [u8],
    limits: &Limits,
    mut field: impl FnMut(&[u8], &'b [u8]),
) -> Result<Option<Head<'b>>, Reject> {
    check_request_line(buf, limits)?;
    let mut stack = [MaybeUninit::<httparse::Header<'b>>::uninit(); STACK_HEADERS];
    let mut heap = Vec::new();
    let slots: &mut [MaybeUninit<httparse::Header<'b>>] = if limits.headers <= STACK_HEADERS {
        &mut stack[..limits.headers]
    } else {
        heap.resize_with(limits.headers, MaybeUninit::uninit);
        &mut heap
    };
    let mut request = httparse::Request::new(&mut []);
    let len = match request.parse_with_uninit_headers(buf, slots) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() >= limits.head => return Err(HEAD_TOO_LARGE),
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(TOO_MANY_HEADERS),
        Err(httparse::Error::Version) => return Err(version_error(buf)),
        Err(httparse::Error::HeaderName) => return Err(Reject::bad("invalid header name")),
        Err(httparse::Error::HeaderValue) => return Err(Reject::bad("invalid header value")),
        Err(httparse::Error::NewLine) => return Err(Reject::bad("invalid line ending")),
        Err(_) => return Err(Reject::bad("invalid request line")),
    };
    if len > limits.head {
        return Err(HEAD_TOO_LARGE);
    }
    if has_bare_lf(&buf[..len]) {
        return Err(Reject::bad("bare LF in the head (CRLF required)"));
    }
    let (Some(method), Some(target)) = (request.method, request.path) else {
        return Err(Reject::bad("invalid request line"));
    };
    let version = match request.version {
        Some(0) => Version::Http10,
        Some(1) => Version::Http11,
        _ => return Err(VERSION_NOT_SUPPORTED),
    };
    let (path, query) = split_target(target)?;
    let framing = Framing::of(request.headers, version, limits)?;
    let mut name = Vec::with_capacity(64);
    for header in request.headers.iter() {
        if rack_name(header.name, &mut name) {
            field(&name, header.value);
        }
    }
    Ok(Some(Head {
        len,
        method,
        target,
        path,
        query,
        version,
        body: framing.body,
        keep_alive: framing.keep_alive,
        expect_continue: framing.expect_continue,
    }))
}

/// 414 for a request line longer than the limit, before httparse looks at
/// it (empty lines before it, which RFC 9112 lets a server skip, do not count).
fn check_request_line(buf: &[u8], limits: &Limits) -> Result<(), Reject> {
    let mut start = 0;
    while buf[start..].starts_with(b"\r\n") {
        start += 2;
    }
    let rest = &buf[start..];
    // The line, its CR and its LF must fit in limit + 2 bytes.
    let window = &rest[..rest.len().min(limits.request_line + 2)];
    match window.iter().position(|&b| b == b'\n') {
        Some(at)
            if at.saturating_sub(usize::from(at > 0 && window[at - 1] == b'\r'))
                > limits.request_line =>
        {
            Err(URI_TOO_LONG)
        }
        Some(_) => Ok(()),
        None if rest.len() > limits.request_line + 1 => Err(URI_TOO_LONG),
        None => Ok(()),
    }
}

/// httparse knows HTTP/1.0 and 1.1 only: a well-formed other version
/// ("HTTP/2.0", "HTTP/1.2") is 505, anything else 400.
fn version_error(buf: &[u8]) -> Reject {
    let line = buf
        .split(|&b| b == b'\n')
        .find(|line| !line.is_empty() && *line != b"\r");
    let line = line.map(|line| line.strip_suffix(b"\r").unwrap_or(line));
    match line.and_then(|line| line.rsplit(|&b| b == b' ').next()) {
        Some([b'H', b'T', b'T', b'P', b'/', major, b'.', minor])
            if major.is_ascii_digit() && minor.is_ascii_digit() =>
        {
            VERSION_NOT_SUPPORTED
        }
        _ => Reject::bad("invalid HTTP version"),
    }
}

fn has_bare_lf(head: &[u8]) -> bool {
    head.iter()
        .enumerate()
        .any(|(at, &b)| b == b'\n' && (at == 0 || head[at - 1] != b'\r'))
}

/// The path and query of an origin-form ("/a?b"), absolute-form
/// ("http://host/a?b") or asterisk-form ("*") target.
fn split_target(target: &str) -> Result<(&str, &str), Reject> {
    let origin = if target == "*" || target.starts_with('/') {
        target
    } else if let Some(rest) = strip_scheme(target) {
        match rest.find(['/', '?']) {
            Some(at) => &rest[at..],
            None => "",
        }
    } else {
        return Err(Reject::bad("invalid request target"));
    };
    let (path, query) = origin.split_once('?').unwrap_or((origin, ""));
    Ok((if path.is_empty() { "/" } else { path }, query))
}

fn strip_scheme(target: &str) -> Option<&str> {
    let lower = |prefix: &str| {
        target
            .get(..prefix.len())
            .filter(|head| head.eq_ignore_ascii_case(prefix))
            .map(|_| &target[prefix.len()..])
    };
    lower("http://").or_else(|| lower("https://"))
}

/// What the header fields say about the body and the connection.
struct Framing {
    body: Body,
    keep_alive: bool,
    expect_continue: bool,
}

impl Framing {
    fn of(
        headers: &[httparse::Header<'_>],
        version: Version,
        limits: &Limits,
    ) -> Result<Self, Reject> {
        let mut length: Option<u64> = None;
        let mut chunked = false;
        let mut encodings = 0;
        let mut close = false;
        let mut keep_alive = false;
        let mut expect_continue = false;
        let mut hosts = 0;
        for header in headers {
            let name = header.name;
            if name.eq_ignore_ascii_case("content-length") {
                let value = parse_length(header.value)?;
                if length.is_some_and(|seen| seen != value) {
                    return Err(Reject::bad("conflicting Content-Length fields"));
                }
                length = Some(value);
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                for coding in tokens(header.value) {
                    // Only one coding, chunked, and last: anything else
                    // frames the body in a way this server does not decode.
                    if chunked || !coding.eq_ignore_ascii_case(b"chunked") {
                        return Err(Reject::bad("unsupported Transfer-Encoding"));
                    }
                    chunked = true;
                }
                encodings += 1;
            } else if name.eq_ignore_ascii_case("connection") {
                for option in tokens(header.value) {
                    close |= option.eq_ignore_ascii_case(b"close");
                    keep_alive |= option.eq_ignore_ascii_case(b"keep-alive");
                }
            } else if name.eq_ignore_ascii_case("expect") {
                expect_continue |= header.value.eq_ignore_ascii_case(b"100-continue");
            } else if name.eq_ignore_ascii_case("host") {
                hosts += 1;
            }
        }
        if encodings > 0 && !chunked {
            return Err(Reject::bad("empty Transfer-Encoding"));
        }
        if chunked && length.is_some() {
            return Err(Reject::bad("both Content-Length and Transfer-Encoding"));
        }
        if chunked && version == Version::Http10 {
            return Err(Reject::bad("Transfer-Encoding in an HTTP/1.0 request"));
        }
        if version == Version::Http11 && hosts != 1 {
            return Err(Reject::bad(
                "an HTTP/1.1 request needs exactly one Host field",
            ));
        }
        let body = match length {
            _ if chunked => Body::Chunked,
            None | Some(0) => Body::Empty,
            Some(n) if n > limits.body => return Err(BODY_TOO_LARGE),
            Some(n) => Body::Length(n),
        };
        Ok(Framing {
            body,
            keep_alive: !close && (version == Version::Http11 || keep_alive),
            expect_continue: expect_continue && version == Version::Http11,
        })
    }
}

/// A Content-Length value: digits only (no sign, no list, no spaces; httparse
/// already trimmed the field's surrounding whitespace).
fn parse_length(value: &[u8]) -> Result<u64, Reject> {
    if value.is_empty() || value.len() > MAX_LENGTH_DIGITS || !value.iter().all(u8::is_ascii_digit)
    {
        return Err(Reject::bad("invalid Content-Length"));
    }
    Ok(value
        .iter()
        .fold(0, |n, &digit| n * 10 + u64::from(digit - b'0')))
}

/// The comma-separated elements of a field value, trimmed, empty ones skipped.
fn tokens(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&b| b == b',')
        .map(|token| token.trim_ascii())
        .filter(|token| !token.is_empty())
}

/// Writes `name` in Rack's form into `out`: upper case, "-" as "_",
/// `HTTP_` in front except for Content-Type and Content-Length. False (and
/// nothing to pass on) for a name with "_" in it.
fn rack_name(name: &str, out: &mut Vec<u8>) -> bool {
    if name.contains('_') {
        return false;
    }
    out.clear();
    if !name.eq_ignore_ascii_case("content-type") && !name.eq_ignore_ascii_case("content-length") {
        out.extend_from_slice(b"HTTP_");
    }
    out.extend(name.bytes().map(|b| {
        if b == b'-' {
            b'_'
        } else {
            b.to_ascii_uppercase()
        }
    }));
    true
}

#[cfg(test)]
mod tests;
