use super::*;
use proptest::prelude::*;

/// A parsed head and its fields as (name, value) Strings.
type Parsed<'b> = Option<(Head<'b>, Vec<(String, String)>)>;

fn parse(buf: &[u8]) -> Result<Parsed<'_>, Reject> {
    parse_with(buf, &Limits::default())
}

fn parse_with<'b>(buf: &'b [u8], limits: &Limits) -> Result<Parsed<'b>, Reject> {
    let mut fields = Vec::new();
    let head = parse_head(buf, limits, |name, value| {
        fields.push((
            String::from_utf8(name.to_vec()).unwrap(),
            String::from_utf8(value.to_vec()).unwrap(),
        ))
    })?;
    Ok(head.map(|head| (head, fields)))
}

fn status(buf: &[u8]) -> u16 {
    match parse(buf) {
        Err(reject) => reject.status,
        Ok(Some(_)) => 200,
        Ok(None) => 0,
    }
}

#[test]
fn a_simple_get() {
    let buf = b"GET /a/b?x=1&y HTTP/1.1\r\nHost: h\r\nAccept: */*\r\nX-Multi-Word: v\r\n\r\nnext";
    let (head, fields) = parse(buf).unwrap().unwrap();
    assert_eq!(head.len, buf.len() - 4);
    assert_eq!(
        (head.method, head.target, head.path, head.query),
        ("GET", "/a/b?x=1&y", "/a/b", "x=1&y")
    );
    assert_eq!(head.version, Version::Http11);
    assert_eq!(head.body, Body::Empty);
    assert!(head.keep_alive && !head.expect_continue);
    assert_eq!(
        fields,
        [
            ("HTTP_HOST", "h"),
            ("HTTP_ACCEPT", "*/*"),
            ("HTTP_X_MULTI_WORD", "v")
        ]
        .map(|(n, v)| (n.to_string(), v.to_string()))
    );
}

#[test]
fn content_type_and_length_have_no_prefix() {
    let buf =
        b"POST / HTTP/1.1\r\nHost: h\r\nContent-Type: text/plain\r\ncontent-length: 5\r\n\r\n";
    let (head, fields) = parse(buf).unwrap().unwrap();
    assert_eq!(head.body, Body::Length(5));
    assert_eq!(fields[1].0, "CONTENT_TYPE");
    assert_eq!(fields[2].0, "CONTENT_LENGTH");
}

#[test]
fn names_with_underscores_are_dropped() {
    let (_, fields) = parse(b"GET / HTTP/1.1\r\nHost: h\r\nX_Forwarded_For: 1.2.3.4\r\n\r\n")
        .unwrap()
        .unwrap();
    assert_eq!(fields.len(), 1);
}

#[test]
fn incomplete_heads_ask_for_more() {
    assert_eq!(status(b"GET / HTTP/1.1\r\nHost: h\r\n"), 0);
    assert_eq!(status(b"GE"), 0);
    assert_eq!(status(b""), 0);
}

#[test]
fn keep_alive_by_version_and_connection() {
    let keep = |buf: &[u8]| parse(buf).unwrap().unwrap().0.keep_alive;
    assert!(keep(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n"));
    assert!(!keep(
        b"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n"
    ));
    assert!(!keep(
        b"GET / HTTP/1.1\r\nHost: h\r\nConnection: Upgrade, Close\r\n\r\n"
    ));
    assert!(!keep(b"GET / HTTP/1.0\r\n\r\n"));
    assert!(keep(b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"));
}

#[test]
fn expect_continue_only_in_http11() {
    let expect = |buf: &[u8]| parse(buf).unwrap().unwrap().0.expect_continue;
    assert!(expect(
        b"PUT / HTTP/1.1\r\nHost: h\r\nExpect: 100-Continue\r\nContent-Length: 1\r\n\r\n"
    ));
    assert!(!expect(
        b"PUT / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n"
    ));
}

#[test]
fn targets() {
    let split = |buf: &'static [u8]| {
        let (head, _) = parse(buf).unwrap().unwrap();
        (head.path, head.query)
    };
    assert_eq!(
        split(b"GET http://example.com/p?q HTTP/1.1\r\nHost: h\r\n\r\n"),
        ("/p", "q")
    );
    assert_eq!(
        split(b"GET HTTPS://example.com HTTP/1.1\r\nHost: h\r\n\r\n"),
        ("/", "")
    );
    assert_eq!(
        split(b"GET http://example.com?q HTTP/1.1\r\nHost: h\r\n\r\n"),
        ("/", "q")
    );
    assert_eq!(split(b"OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n"), ("*", ""));
    assert_eq!(
        status(b"CONNECT example.com:443 HTTP/1.1\r\nHost: h\r\n\r\n"),
        400
    );
}

#[test]
fn smuggling_shapes_are_400() {
    for buf in [
        &b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"[..],
        b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3, 3\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: -3\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: +3\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0x3\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: \r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 99999999999999999999\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: xchunked\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: \r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding : chunked\r\n\r\n",
        b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: h\r\nX-A: 1\r\n folded\r\n\r\n",
        b"GET / HTTP/1.1\nHost: h\n\n",
        b"GET / HTTP/1.1\r\nHost: h\nX: y\r\n\r\n",
        b"GET / HTTP/1.1\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: h\r\nX\0: y\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: h\r\nX: a\0b\r\n\r\n",
        b"GET /\0 HTTP/1.1\r\nHost: h\r\n\r\n",
        b"GET  / HTTP/1.1\r\nHost: h\r\n\r\n",
        b"GET / HTTP/1.1 \r\nHost: h\r\n\r\n",
        b"GET / HTTP/1.x\r\nHost: h\r\n\r\n",
        b"GET /\r\n\r\n",
    ] {
        assert_eq!(status(buf), 400, "{}", String::from_utf8_lossy(buf));
    }
}

#[test]
fn chunked_and_lengths() {
    let body = |buf: &[u8]| parse(buf).unwrap().unwrap().0.body;
    assert_eq!(
        body(b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: Chunked\r\n\r\n"),
        Body::Chunked
    );
    assert_eq!(
        body(b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n"),
        Body::Empty
    );
    assert_eq!(
        body(b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 7\r\ncontent-length: 7\r\n\r\n"),
        Body::Length(7)
    );
}

#[test]
fn unknown_versions_are_505() {
    assert_eq!(status(b"GET / HTTP/2.0\r\nHost: h\r\n\r\n"), 505);
    assert_eq!(status(b"GET / HTTP/1.2\r\nHost: h\r\n\r\n"), 505);
    assert_eq!(status(b"GET / HTTP/0.9\r\n\r\n"), 505);
}

#[test]
fn limits() {
    let limits = Limits {
        request_line: 32,
        head: 128,
        headers: 3,
        ..Limits::default()
    };
    let status = |buf: &[u8]| match parse_with(buf, &limits) {
        Err(reject) => reject.status,
        Ok(Some(_)) => 200,
        Ok(None) => 0,
    };
    // "GET / HTTP/1.1" is 14 bytes plus the path: a 32-byte line is the most.
    let line = |path: usize| format!("GET /{} HTTP/1.1\r\nHost: h\r\n\r\n", "x".repeat(path));
    assert_eq!(status(line(18).as_bytes()), 200);
    assert_eq!(status(line(19).as_bytes()), 414);
    assert_eq!(status(&line(19).as_bytes()[..33]), 0, "not known yet");
    assert_eq!(
        status(format!("GET /{}", "x".repeat(40)).as_bytes()),
        414,
        "known before its end"
    );
    assert_eq!(
        status(b"GET / HTTP/1.1\r\nHost: h\r\nA: 1\r\nB: 2\r\n\r\n"),
        200
    );
    assert_eq!(
        status(b"GET / HTTP/1.1\r\nHost: h\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n"),
        431
    );
    let big = format!(
        "GET / HTTP/1.1\r\nHost: h\r\nA: {}\r\n\r\n",
        "v".repeat(100)
    );
    assert_eq!(status(big.as_bytes()), 431);
    assert_eq!(status(&big.as_bytes()[..127]), 0);
    assert_eq!(
        status(&big.as_bytes()[..128]),
        431,
        "incomplete at the limit"
    );
    let body = Limits {
        body: 10,
        ..Limits::default()
    };
    let post = |n: u64| format!("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: {n}\r\n\r\n");
    assert!(parse_with(post(10).as_bytes(), &body).is_ok());
    assert_eq!(
        parse_with(post(11).as_bytes(), &body).unwrap_err().status,
        413
    );
    let many = Limits {
        headers: 300,
        ..Limits::default()
    };
    let fields: String = (0..299).map(|i| format!("X-{i}: v\r\n")).collect();
    let buf = format!("GET / HTTP/1.1\r\nHost: h\r\n{fields}\r\n");
    assert_eq!(
        parse_with(buf.as_bytes(), &many).unwrap().unwrap().1.len(),
        300
    );
}

#[test]
fn leading_empty_lines_are_skipped() {
    let (head, _) = parse(b"\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n")
        .unwrap()
        .unwrap();
    assert_eq!(head.len, 31);
}

fn request() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::sample::select(vec!["GET", "POST", "PUT", "DELETE", "PATCH"]),
        "/[a-z0-9/._~-]{0,20}(\\?[a-z0-9=&]{0,10})?",
        prop::collection::vec(("[A-Za-z][A-Za-z0-9-]{0,10}", "[ -~]{0,20}"), 0..8),
    )
        .prop_map(|(method, path, fields)| {
            let mut head = format!("{method} {path} HTTP/1.1\r\nHost: h\r\n");
            for (name, value) in fields {
                head.push_str(&format!("X-{name}: {}\r\n", value.trim()));
            }
            head.push_str("\r\n");
            head.into_bytes()
        })
}

proptest! {
    /// A head is found whatever the read boundaries: every proper prefix
    /// asks for more, the whole parses the same.
    #[test]
    fn prefixes_ask_for_more(buf in request(), cut in 0usize..200) {
        let cut = cut % buf.len();
        prop_assert_eq!(status(&buf[..cut]), 0);
        let mut extended = buf.clone();
        extended.extend_from_slice(b"GET / HTTP/1.1\r\n");
        let (head, fields) = parse(&extended).unwrap().unwrap();
        prop_assert_eq!(head.len, buf.len());
        prop_assert_eq!(fields.len(), parse(&buf).unwrap().unwrap().1.len());
    }

    /// Any bytes: no panic, and a head never claims more than the buffer.
    #[test]
    fn any_bytes(buf in prop::collection::vec(any::<u8>(), 0..300)) {
        if let Ok(Some((head, _))) = parse(&buf) {
            prop_assert!(head.len <= buf.len());
        }
    }

    /// Any bytes after a valid request line: no panic, no overrun.
    #[test]
    fn any_fields(tail in prop::collection::vec(any::<u8>(), 0..300)) {
        let mut buf = b"POST / HTTP/1.1\r\n".to_vec();
        buf.extend_from_slice(&tail);
        if let Ok(Some((head, _))) = parse(&buf) {
            prop_assert!(head.len <= buf.len());
        }
    }
}
