//! `Evix::IO`'s native private methods (the rest of the class is in
//! lib/evix/io.rb and lib/evix/io_input.rb).
//!
//! Reads and writes on sockets: one `recv`/`send` with MSG_DONTWAIT and a
//! String: what `read_nonblock`/`write_nonblock` do, without their Ruby
//! wrapper, keyword arguments and buffer bookkeeping (about 1,800 fewer
//! instructions per echo round trip, bench/PROFILE.md), and without SIGPIPE.
//! Anything unusual (bytes in Ruby's own IO buffers, an IO not open for the
//! direction, a read larger than the scratch buffer, not a socket) is left
//! to Ruby's method, so the result is always what Ruby would have given.
//!
//! `#gets`'s fast path: find a whole line in the buffer and copy it out in
//! one call. In Ruby that is `String#index` and `String#byteslice`, two
//! method calls with encoding checks that cost more than stdlib `IO#gets`
//! does for the whole line.

use super::helpers::{
    capi::{self, Direct},
    errors,
};
use crate::core::lines::find_line;
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
    let found = capi::with_bytes(ruby, buffer, |bytes| {
        capi::with_bytes(ruby, separator, |separator| {
            find_line(bytes, offset, separator, limit, chomp).map(|end| (end, bytes.len()))
        })
    });
    Ok(match found {
        None => nil,
        Some((end, len)) if offset == 0 && end == len => buffer.as_value(),
        Some((end, _)) => capi::byteslice(ruby, buffer, offset..end).as_value(),
    })
}

pub fn init(ruby: &Ruby, evix: RModule) -> Result<(), Error> {
    let class = evix.define_class("IO", ruby.class_object())?;
    class.define_private_method("read_socket", method!(read_socket, 2))?;
    class.define_private_method("write_socket", method!(write_socket, 2))?;
    class.define_private_method("buffered_line", method!(buffered_line, 5))?;
    Ok(())
}
