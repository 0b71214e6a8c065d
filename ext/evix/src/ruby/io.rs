//! `Evix::IO`'s native private methods (the class is lib/evix/io/io.rb).
//!
//! Reads and writes on sockets: one `recv`/`send` with MSG_DONTWAIT and a
//! String: what `read_nonblock`/`write_nonblock` do, without their Ruby
//! wrapper, keyword arguments and buffer bookkeeping, and without SIGPIPE.
//! Anything unusual (bytes in Ruby's own IO buffers, an IO not open for the
//! direction, a read larger than the scratch buffer, not a socket) is left
//! to Ruby's method, so the result is always what Ruby would have given.
//!
//! The line reader of #gets and #each_line: the search, the limit and chomp
//! on the input buffer (`core::lines`), one call per line; Ruby only reads
//! more input while the buffer holds no whole line.

use super::helpers::{
    capi::{self, Direct},
    errors,
};
use crate::core::lines::{chomped_len, line_end};
use crate::sys::stream;
use magnus::{
    method,
    prelude::*,
    value::{LazyId, OpaqueId},
    Error, Integer, IntoValue, KwArgs, RFile, RModule, RString, Ruby, Value,
};
use std::cell::RefCell;
use std::io;

/// The largest read done here; larger ones go to `read_nonblock`.
const SCRATCH: usize = 64 * 1024;

static READ_NONBLOCK: LazyId = LazyId::new("read_nonblock");
static WRITE_NONBLOCK: LazyId = LazyId::new("write_nonblock");
static EXCEPTION: LazyId = LazyId::new("exception");
static WAIT_READABLE: LazyId = LazyId::new("wait_readable");
static WAIT_WRITABLE: LazyId = LazyId::new("wait_writable");

thread_local! {
    // Heap, not stack: the machine stack of every parked fiber would keep
    // the pages of a stack buffer resident.
    static SCRATCH_BUF: RefCell<Box<[u8]>> = RefCell::new(vec![0; SCRATCH].into_boxed_slice());
}

/// `read_socket(io, maxlen)`: up to `maxlen` bytes as a new binary String,
/// nil at end of stream, `:wait_readable` when nothing is there; as
/// `io.read_nonblock(maxlen, exception: false)`.
fn read_socket(ruby: &Ruby, _rb_self: Value, io: RFile, maxlen: Value) -> Result<Value, Error> {
    // Any other length (and its errors) is read_nonblock's business.
    let len = Integer::from_value(maxlen)
        .and_then(|n| n.to_usize().ok())
        .filter(|n| (1..=SCRATCH).contains(n));
    let (fd, len) = match (capi::direct(ruby, io, false), len) {
        (Direct::Closed, _) => return Err(closed_stream(ruby)),
        (Direct::Fd(fd), Some(len)) => (fd, len),
        _ => return by_ruby(ruby, io, *READ_NONBLOCK, maxlen),
    };
    let read = SCRATCH_BUF.with(|scratch| {
        let mut scratch = scratch.borrow_mut();
        stream::recv(fd, &mut scratch[..len])
            .map(|n| (n > 0).then(|| ruby.str_from_slice(&scratch[..n])))
    });
    match read {
        Ok(Some(string)) => Ok(string.as_value()),
        Ok(None) => Ok(ruby.qnil().as_value()),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(WAIT_READABLE.into_value_with(ruby)),
        Err(e) if e.raw_os_error() == Some(libc::ENOTSOCK) => {
            by_ruby(ruby, io, *READ_NONBLOCK, maxlen)
        }
        Err(e) => Err(errors::os(ruby, e, "recv")),
    }
}

/// `write_socket(io, data)`: how many bytes of `data` the kernel took, or
/// `:wait_writable` when it took none; as
/// `io.write_nonblock(data, exception: false)`, but never raising SIGPIPE.
fn write_socket(ruby: &Ruby, _rb_self: Value, io: RFile, data: RString) -> Result<Value, Error> {
    let fd = match capi::direct(ruby, io, true) {
        Direct::Fd(fd) => fd,
        Direct::Closed => return Err(closed_stream(ruby)),
        Direct::Ruby => return by_ruby(ruby, io, *WRITE_NONBLOCK, data.as_value()),
    };
    match capi::with_bytes(ruby, data, |bytes| stream::send(fd, bytes)) {
        Ok(n) => Ok(n.into_value_with(ruby)),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(WAIT_WRITABLE.into_value_with(ruby)),
        Err(e) if e.raw_os_error() == Some(libc::ENOTSOCK) => {
            by_ruby(ruby, io, *WRITE_NONBLOCK, data.as_value())
        }
        Err(e) => Err(errors::os(ruby, e, "send")),
    }
}

/// Ruby's own `read_nonblock`/`write_nonblock` with `exception: false`.
fn by_ruby(ruby: &Ruby, io: RFile, method: OpaqueId, arg: Value) -> Result<Value, Error> {
    let options = ruby.hash_new();
    options.aset(*EXCEPTION, false)?;
    io.funcall(method, (arg, KwArgs(options)))
}

/// The `IOError` Ruby raises for a closed IO.
fn closed_stream(ruby: &Ruby) -> Error {
    Error::new(ruby.exception_io_error(), "closed stream")
}

/// `buffered_line(buffer, offset, searched, separator, limit)`: the line
/// that starts at byte `offset` of `buffer` (`core::lines::line_end`), as it
/// is there, so its bytesize is what it used of the buffer; `buffer` itself,
/// no copy, when it is the whole buffer. False while the buffer holds no
/// whole line: then every byte from `offset` on was searched. Nil for
/// arguments #gets has to make usual first (a separator that is not a
/// String or nil, or an empty one; a limit that is not an Integer or nil).
fn buffered_line(
    ruby: &Ruby,
    _rb_self: Value,
    buffer: RString,
    offset: usize,
    searched: usize,
    separator: Value,
    limit: Value,
) -> Result<Value, Error> {
    let unusual = Ok(ruby.qnil().as_value());
    let separator = if separator.is_nil() {
        None
    } else {
        match RString::from_value(separator) {
            Some(separator) if !separator.is_empty() => Some(separator),
            _ => return unusual,
        }
    };
    let limit = if limit.is_nil() {
        None
    } else {
        match Integer::from_value(limit) {
            // Negative: no limit; past i64 a limit no buffer reaches.
            Some(n) => n.to_i64().ok().and_then(|n| usize::try_from(n).ok()),
            None => return unusual,
        }
    };
    let found = capi::with_bytes(ruby, buffer, |bytes| {
        let end = match separator {
            Some(separator) => capi::with_bytes(ruby, separator, |separator| {
                line_end(bytes, offset, searched, Some(separator), limit)
            }),
            None => line_end(bytes, offset, searched, None, limit),
        };
        end.map(|end| (end, bytes.len()))
    });
    Ok(match found {
        None => ruby.qfalse().as_value(),
        Some((end, len)) if offset == 0 && end == len => buffer.as_value(),
        Some((end, _)) => capi::byteslice(ruby, buffer, offset..end).as_value(),
    })
}

/// `chomp_line(line, separator)`: `line` without its trailing `separator`
/// (`core::lines::chomped_len`). `line` is one #gets just handed out and
/// owns: it is cut in place, no second String.
fn chomp_line(
    ruby: &Ruby,
    _rb_self: Value,
    line: RString,
    separator: RString,
) -> Result<RString, Error> {
    let (kept, len) = capi::with_bytes(ruby, line, |bytes| {
        capi::with_bytes(ruby, separator, |separator| {
            (chomped_len(bytes, separator), bytes.len())
        })
    });
    if kept == len {
        Ok(line)
    } else if line.is_frozen() {
        Ok(capi::byteslice(ruby, line, 0..kept))
    } else {
        capi::truncate(ruby, line, kept)?;
        Ok(line)
    }
}

pub fn init(ruby: &Ruby, evix: RModule) -> Result<(), Error> {
    let class = evix.define_class("IO", ruby.class_object())?;
    class.define_private_method("read_socket", method!(read_socket, 2))?;
    class.define_private_method("write_socket", method!(write_socket, 2))?;
    class.define_private_method("buffered_line", method!(buffered_line, 5))?;
    class.define_private_method("chomp_line", method!(chomp_line, 2))?;
    Ok(())
}
