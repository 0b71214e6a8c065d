//! `Evix::IO#gets`'s fast path, as a private method (the rest of the class
//! is in lib/evix/io.rb and lib/evix/io_input.rb): find a whole line in the
//! buffer and copy it out in one call. In Ruby that is `String#index` and
//! `String#byteslice`, two method calls with encoding checks that cost more
//! than stdlib `IO#gets` does for the whole line.

use super::nogvl;
use crate::core::lines::find_line;
use magnus::{method, prelude::*, Error, Integer, RModule, RString, Ruby, Value};

/// `buffered_line(buffer, offset, separator, limit, chomp)`: the line that
/// starts at byte `offset` of `buffer` and ends with `separator`, at most
/// `limit` bytes long (nil or negative: no limit), without the separator
/// (and a "\r" before a "\n" one) when `chomp` is truthy; nil when there is
/// no such line in the buffer, or for a call that is not the usual one (a
/// nil or empty separator, a limit that is not an Integer): #gets then
/// takes its own path. When the line is the whole buffer it is `buffer`
/// itself, no copy.
fn buffered_line(
    ruby: &Ruby,
    _rb_self: Value,
    buffer: RString,
    offset: usize,
    separator: Value,
    limit: Value,
    chomp: bool,
) -> Result<Value, Error> {
    let nil = ruby.qnil().as_value();
    let Some(separator) = RString::from_value(separator) else {
        return Ok(nil);
    };
    let limit = if limit.is_nil() {
        None
    } else {
        match Integer::from_value(limit).map(|n| n.to_i64()) {
            Some(Ok(n)) => usize::try_from(n).ok(), // negative: no limit
            _ => return Ok(nil),
        }
    };
    let found = nogvl::with_bytes(ruby, buffer, |bytes| {
        nogvl::with_bytes(ruby, separator, |separator| {
            find_line(bytes, offset, separator, limit, chomp).map(|end| (end, bytes.len()))
        })
    });
    Ok(match found {
        None => nil,
        Some((end, len)) if offset == 0 && end == len => buffer.as_value(),
        Some((end, _)) => nogvl::byteslice(ruby, buffer, offset..end).as_value(),
    })
}

pub fn init(ruby: &Ruby, evix: RModule) -> Result<(), Error> {
    let class = evix.define_class("IO", ruby.class_object())?;
    class.define_private_method("buffered_line", method!(buffered_line, 5))?;
    Ok(())
}
