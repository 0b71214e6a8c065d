//! `Evix::HTTP::ChunkedDecoder`: one chunked request body's decoder
//! (src/http/chunked.rs) for lib/evix/http/input.rb, fed the connection's
//! buffer in place. As `Parser#parse`, a refused body is not an exception:
//! `decode` returns the status code, negated, and `reason` says why.

use super::helpers::{capi, errors};
use super::http_parser::RbParser;
use crate::http::{Chunked, Limits};
use magnus::{
    function, method, prelude::*, DataTypeFunctions, Error, RModule, RString, Ruby, TypedData,
};
use std::cell::{Cell, RefCell};

#[derive(TypedData)]
#[magnus(class = "Evix::HTTP::ChunkedDecoder", free_immediately, size)]
pub struct RbChunkedDecoder {
    limits: Limits,
    state: RefCell<Chunked>,
    reason: Cell<Option<&'static str>>,
}

impl DataTypeFunctions for RbChunkedDecoder {}

impl RbChunkedDecoder {
    /// `ChunkedDecoder.new(parser)`: a decoder within `parser`'s limits.
    fn new(parser: &RbParser) -> Self {
        RbChunkedDecoder {
            limits: parser.limits(),
            state: RefCell::new(Chunked::new()),
            reason: Cell::new(None),
        }
    }

    /// `decode(buffer, offset, out)`: decodes from byte `offset` of `buffer`,
    /// appending the data to `out`; returns how many bytes it used (>= 0), or
    /// the refusal's status, negated.
    fn decode(
        ruby: &Ruby,
        rb_self: &Self,
        buffer: RString,
        offset: usize,
        out: RString,
    ) -> Result<i64, Error> {
        // The data is gathered first and appended after: `out` may be
        // `buffer` itself for all Ruby knows, and no borrow of the state or
        // of a string's bytes is held while Ruby allocates.
        let mut data = Vec::new();
        let result = errors::guard(ruby, || {
            let mut state = rb_self
                .state
                .try_borrow_mut()
                .map_err(|_| errors::evix(ruby, "ChunkedDecoder#decode re-entered"))?;
            Ok(capi::with_bytes(ruby, buffer, |bytes| {
                let input = bytes.get(offset..).unwrap_or_default();
                state.decode(input, &rb_self.limits, |run| data.extend_from_slice(run))
            }))
        })?;
        out.cat(&data);
        match result {
            Ok(used) => Ok(used as i64),
            Err(reject) => {
                rb_self.reason.set(Some(reject.reason));
                Ok(-i64::from(reject.status))
            }
        }
    }

    /// `done?`: whether the last chunk and the trailers were read.
    fn done(&self) -> bool {
        self.state.try_borrow().is_ok_and(|state| state.done())
    }

    /// `reason`: why the body was refused, or nil.
    fn reason(&self) -> Option<&'static str> {
        self.reason.get()
    }
}

pub fn init(ruby: &Ruby, http: RModule) -> Result<(), Error> {
    let class = http.define_class("ChunkedDecoder", ruby.class_object())?;
    class.define_singleton_method("new", function!(RbChunkedDecoder::new, 1))?;
    class.define_method("decode", method!(RbChunkedDecoder::decode, 3))?;
    class.define_method("done?", method!(RbChunkedDecoder::done, 0))?;
    class.define_method("reason", method!(RbChunkedDecoder::reason, 0))?;
    Ok(())
}
