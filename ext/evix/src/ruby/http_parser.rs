//! `Evix::HTTP::Parser`: the request head parser (src/http/) bound for
//! lib/evix/http/connection.rb. One per server, holding its limits; each
//! `parse` writes the request's CGI keys and `HTTP_*` fields straight into
//! the Rack env it is given, so Ruby never looks at the head's bytes, and
//! keeps the framing of that head for the readers below.
//!
//! A refused request is not an exception: `parse` returns its status code,
//! negated (-400, -413, -414, -431, -505), and `reason` says why.

use super::helpers::{capi, errors};
use crate::http::{parse_head, Body, Limits, Reject, Version};
use magnus::{
    function, method, prelude::*, value::Opaque, DataTypeFunctions, Error, IntoValue, RHash,
    RModule, RString, Ruby, TypedData, Value,
};
use std::cell::Cell;
use std::sync::OnceLock;

#[derive(TypedData)]
#[magnus(class = "Evix::HTTP::Parser", free_immediately, size)]
pub struct RbParser {
    limits: Limits,
    last: Cell<Last>,
}

impl DataTypeFunctions for RbParser {}

/// The framing of the last head `parse` completed, or why it refused one.
#[derive(Clone, Copy, Default)]
struct Last {
    length: u64,
    chunked: bool,
    keep_alive: bool,
    expect_continue: bool,
    reason: Option<&'static str>,
}

/// The env keys `parse` sets, frozen and interned once, so that `Hash#[]=`
/// neither copies nor looks them up as new strings.
struct Keys {
    method: Opaque<RString>,
    path: Opaque<RString>,
    query: Opaque<RString>,
    uri: Opaque<RString>,
    protocol: Opaque<RString>,
    http10: Opaque<RString>,
    http11: Opaque<RString>,
}

static KEYS: OnceLock<Keys> = OnceLock::new();

fn keys() -> &'static Keys {
    KEYS.get().expect("http_parser::init ran in Init_evix")
}

fn interned(ruby: &Ruby, text: &str) -> Opaque<RString> {
    let string = ruby.str_new(text).to_interned_str();
    ruby.gc_register_mark_object(string);
    string.into()
}

impl RbParser {
    /// `Parser.new(request_line, head, headers, body, chunk_line)`, each a
    /// positive Integer (lib/evix/http/limits.rb checks and names them).
    fn new(
        ruby: &Ruby,
        request_line: usize,
        head: usize,
        headers: usize,
        body: u64,
        chunk_line: usize,
    ) -> Result<Self, Error> {
        for (name, value) in [
            ("request_line", request_line as u64),
            ("head", head as u64),
            ("headers", headers as u64),
            ("body", body),
            ("chunk_line", chunk_line as u64),
        ] {
            if value == 0 {
                return Err(errors::argument(
                    ruby,
                    format!("{name} must be positive (got 0)"),
                ));
            }
        }
        Ok(RbParser {
            limits: Limits {
                request_line,
                head,
                headers,
                body,
                chunk_line,
            },
            last: Cell::default(),
        })
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// `parse(buffer, offset, env)`: the head at byte `offset` of `buffer`.
    /// nil: incomplete; an Integer >= 0: the head's length (env filled in);
    /// < 0: the request is refused with that status, negated.
    fn parse(
        ruby: &Ruby,
        rb_self: &Self,
        buffer: RString,
        offset: usize,
        env: RHash,
    ) -> Result<Value, Error> {
        // The head is copied out of the buffer before anything is stored in
        // env: a Hash#[]= may run the GC, which must not see a borrowed slice.
        let mut fields: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let parsed = errors::guard(ruby, || {
            Ok(capi::with_bytes(ruby, buffer, |bytes| {
                let Some(bytes) = bytes.get(offset..) else {
                    return Err(Reject::bad("offset past the buffer"));
                };
                let head = parse_head(bytes, &rb_self.limits, |name, value| {
                    fields.push((name.to_vec(), value.to_vec()))
                })?;
                Ok(head.map(|head| Parsed {
                    len: head.len,
                    method: head.method.to_owned(),
                    target: head.target.to_owned(),
                    path: head.path.to_owned(),
                    query: head.query.to_owned(),
                    http11: head.version == Version::Http11,
                    last: Last {
                        length: match head.body {
                            Body::Length(n) => n,
                            _ => 0,
                        },
                        chunked: head.body == Body::Chunked,
                        keep_alive: head.keep_alive,
                        expect_continue: head.expect_continue,
                        reason: None,
                    },
                }))
            }))
        })?;
        let parsed = match parsed {
            Ok(Some(parsed)) => parsed,
            Ok(None) => return Ok(ruby.qnil().as_value()),
            Err(reject) => return Ok(rb_self.refuse(ruby, reject)),
        };
        let keys = keys();
        let protocol = if parsed.http11 {
            keys.http11
        } else {
            keys.http10
        };
        // env must be a Hash without these keys (a copy of the template).
        let mut batch = capi::HashBatch::new(env);
        for (key, value) in [
            (keys.method, capi::interned(ruby, parsed.method.as_bytes())),
            (keys.path, ruby.str_new(&parsed.path).as_value()),
            (keys.query, ruby.str_new(&parsed.query).as_value()),
            (keys.uri, ruby.str_new(&parsed.target).as_value()),
            (keys.protocol, ruby.get_inner(protocol).as_value()),
        ] {
            batch.push(ruby, ruby.get_inner(key).as_value(), value)?;
        }
        for (name, value) in join_repeated(fields) {
            let key = capi::interned(ruby, &name);
            batch.push(ruby, key, ruby.str_from_slice(&value).as_value())?;
        }
        batch.flush(ruby)?;
        rb_self.last.set(parsed.last);
        Ok(parsed.len.into_value_with(ruby))
    }

    fn refuse(&self, ruby: &Ruby, reject: Reject) -> Value {
        self.last.set(Last {
            reason: Some(reject.reason),
            ..Last::default()
        });
        (-i64::from(reject.status)).into_value_with(ruby)
    }

    /// `content_length`: the body's length by Content-Length (0 without one,
    /// and for a chunked body).
    fn content_length(&self) -> u64 {
        self.last.get().length
    }

    fn chunked(&self) -> bool {
        self.last.get().chunked
    }

    fn keep_alive(&self) -> bool {
        self.last.get().keep_alive
    }

    fn expect_continue(&self) -> bool {
        self.last.get().expect_continue
    }

    /// `reason`: why the last refused request was refused, or nil.
    fn reason(&self) -> Option<&'static str> {
        self.last.get().reason
    }

    /// `max_body`: the body limit, for the chunked decoder and rack.input.
    fn max_body(&self) -> u64 {
        self.limits.body
    }
}

/// The fields with each repeated name's values joined into one, in the
/// order of their first appearance: the list RFC 9110 §5.3 allows (Cookie's
/// own separator is "; ", RFC 6265 §5.4).
fn join_repeated(fields: Vec<(Vec<u8>, Vec<u8>)>) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut joined: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(fields.len());
    for (name, value) in fields {
        match joined.iter_mut().find(|(seen, _)| *seen == name) {
            Some((_, values)) => {
                let separator: &[u8] = if name == b"HTTP_COOKIE" { b"; " } else { b", " };
                values.extend_from_slice(separator);
                values.extend_from_slice(&value);
            }
            None => joined.push((name, value)),
        }
    }
    joined
}

/// A complete head, owned, so env can be filled in without a borrow.
struct Parsed {
    len: usize,
    method: String,
    target: String,
    path: String,
    query: String,
    http11: bool,
    last: Last,
}

pub fn init(ruby: &Ruby, http: RModule) -> Result<(), Error> {
    let _ = KEYS.set(Keys {
        method: interned(ruby, "REQUEST_METHOD"),
        path: interned(ruby, "PATH_INFO"),
        query: interned(ruby, "QUERY_STRING"),
        uri: interned(ruby, "REQUEST_URI"),
        protocol: interned(ruby, "SERVER_PROTOCOL"),
        http10: interned(ruby, "HTTP/1.0"),
        http11: interned(ruby, "HTTP/1.1"),
    });
    let class = http.define_class("Parser", ruby.class_object())?;
    class.define_singleton_method("new", function!(RbParser::new, 5))?;
    class.define_method("parse", method!(RbParser::parse, 3))?;
    class.define_method("content_length", method!(RbParser::content_length, 0))?;
    class.define_method("chunked?", method!(RbParser::chunked, 0))?;
    class.define_method("keep_alive?", method!(RbParser::keep_alive, 0))?;
    class.define_method("expect_continue?", method!(RbParser::expect_continue, 0))?;
    class.define_method("reason", method!(RbParser::reason, 0))?;
    class.define_method("max_body", method!(RbParser::max_body, 0))?;
    Ok(())
}
