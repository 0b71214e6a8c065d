//! Raw accessors into Ruby's C API that the hot paths use instead of a
//! method call or magnus's `rb_protect`-wrapped conversions, each behind a
//! safe function whose SAFETY note says why the access is sound.

use magnus::{
    block::Proc, rb_sys::AsRawValue, Error, RFile, RString, RTypedData, Ruby, TypedData, Value,
};
use std::ffi::{c_int, c_void};

/// Calls `block` with `arg` (if any) and no block, as `Proc#call` does, but
/// without looking `call` up as a method each time. A Ruby exception (or
/// `throw`, `break`...) comes back as `Err`.
pub fn call_proc(_ruby: &Ruby, block: Proc, arg: Option<Value>) -> Result<(), Error> {
    let argv = [arg.map_or(rb_sys::Qnil as rb_sys::VALUE, |v| v.as_raw())];
    let argc = c_int::from(arg.is_some());
    let block = block.as_raw();
    magnus::rb_sys::protect(|| {
        // SAFETY: `_ruby` shows this is a Ruby thread holding the GVL; `block`
        // is a live Proc (the caller holds it, and it stays on this stack for
        // the conservative GC scan); `argv` outlives the call and its first
        // `argc` entries are valid VALUEs; Qnil as the block argument means
        // "no block"; `protect` catches every non-local exit.
        unsafe {
            rb_sys::rb_proc_call_with_block(
                block,
                argc,
                argv.as_ptr(),
                rb_sys::Qnil as rb_sys::VALUE,
            )
        }
    })
    .map(drop)
}

/// The fd of an IO, as `IO#fileno` returns it (raising `IOError` for a
/// closed or uninitialized IO), without a method call. An open IO's fd is
/// read straight from its `rb_io_t`; only the error cases pay
/// `rb_io_descriptor` under `protect`, so they raise what Ruby raises.
pub fn io_descriptor(ruby: &Ruby, io: RFile) -> Result<c_int, Error> {
    if let Some(file) = open_file(ruby, io) {
        return Ok(file.fd);
    }
    let io = io.as_raw();
    let mut fd = -1;
    magnus::rb_sys::protect(|| {
        // SAFETY: `_ruby` shows this is a Ruby thread holding the GVL; `io` is a
        // live T_FILE object (an `RFile`), which rb_io_descriptor accepts;
        // `protect` catches the IOError it raises for a closed IO.
        fd = unsafe { rb_sys::rb_io_descriptor(io) };
        rb_sys::Qnil as rb_sys::VALUE
    })?;
    Ok(fd)
}

/// `io`'s `rb_io_t` while it is open (None: closed or uninitialized).
/// `RFile` and `rb_io_t` are ruby/io.h's public structs as rb-sys generates
/// them for the Ruby it builds against (3.3 marks `fd` deprecated in favour
/// of `rb_io_descriptor`; should a later Ruby hide it, this stops compiling,
/// and `io_descriptor`'s `protect` path and Ruby's own `*_nonblock` methods
/// are what is left).
fn open_file(_ruby: &Ruby, io: RFile) -> Option<&rb_sys::rb_io_t> {
    // SAFETY: `_ruby` shows this is a Ruby thread holding the GVL, so no other
    // thread closes or frees the IO while the reference lives (it is only used
    // before the caller next runs Ruby code); `io` is a live T_FILE, whose
    // `fptr` is NULL (uninitialized) or its rb_io_t, whose `fd` is -1 once
    // closed.
    let file = unsafe { (*(io.as_raw() as *const rb_sys::RFile)).fptr.as_ref()? };
    (file.fd >= 0).then_some(file)
}

/// Starts loading the VM's struct behind `block` (a Proc's data lives apart
/// from its object), as the timer phase does a few callbacks ahead.
pub fn prefetch_proc_data(_ruby: &Ruby, block: Proc) {
    // SAFETY: `_ruby` shows this is a Ruby thread holding the GVL, so no GC
    // runs meanwhile; `block` is a live Proc, which Ruby implements as a typed
    // T_DATA object, so reading its data pointer is what RTYPEDDATA_GET_DATA
    // is for. The pointer is only handed to a prefetch hint, never read.
    let data = unsafe { rb_sys::RTYPEDDATA_GET_DATA(block.as_raw()) };
    crate::sys::prefetch(data.cast::<u8>());
}

/// `value`'s `T` if it is a typed data object of `T`'s own data type: the
/// check `Obj::<T>::try_convert` makes, without the `rb_protect` around
/// `rb_check_typeddata` it pays on every call. The reference lives as long
/// as the borrow of `value`; the caller keeps the object alive meanwhile (a
/// method's receiver is, on the VM stack, for the whole call).
pub fn typed_ref<'a, T: TypedData>(_ruby: &Ruby, value: &'a Value) -> Option<&'a T> {
    let data = RTypedData::from_value(*value)?.as_raw();
    // magnus's `DataType` is `#[repr(transparent)]` over `rb_data_type_t`,
    // and is what it hands to Ruby when it wraps a `T`.
    let expected: *const rb_sys::rb_data_type_t = std::ptr::from_ref(T::data_type()).cast();
    // SAFETY: `_ruby` shows this is a Ruby thread holding the GVL; `data` is a
    // typed T_DATA object (`RTypedData::from_value` checked both), so reading
    // its type and data pointer is what these accessors are for. magnus wraps
    // every `T` with `T::data_type()` and no parent type, so an object of that
    // type holds a `T` (or NULL, refused by `as_ref`), which lives until the
    // object is freed.
    unsafe {
        if rb_sys::RTYPEDDATA_TYPE(data) != expected {
            return None;
        }
        rb_sys::RTYPEDDATA_GET_DATA(data).cast::<T>().as_ref()
    }
}

/// What a direct read or write may do with an IO (see `ruby/io.rs`).
pub enum Direct {
    /// Go ahead on this fd: open for the direction, nothing in Ruby's buffers.
    Fd(c_int),
    /// Closed (or never opened): `IOError`, as Ruby's own methods raise.
    Closed,
    /// Leave it to Ruby's own method: the IO has buffered bytes (an
    /// `ungetc`, a `gets` on the raw IO, an unflushed write) or is not
    /// open for the direction.
    Ruby,
}

/// Looks at `io`'s `rb_io_t`: its fd, whether it is open for writing
/// (`write`) or reading, and whether Ruby's read (or write) buffer holds
/// bytes that a direct syscall would skip over.
pub fn direct(ruby: &Ruby, io: RFile, write: bool) -> Direct {
    let Some(file) = open_file(ruby, io) else {
        return Direct::Closed;
    };
    let (mode, buffered) = if write {
        (rb_sys::FMODE_WRITABLE, file.wbuf.len)
    } else {
        (rb_sys::FMODE_READABLE, file.rbuf.len)
    };
    if file.mode & mode as c_int == 0 || buffered != 0 {
        Direct::Ruby
    } else {
        Direct::Fd(file.fd)
    }
}

/// The fd of `io` for a write Ruby itself asked for (the `io_write` hook:
/// Ruby has flushed, or is flushing, its write buffer in order, so bytes in
/// it are no reason to stay away): `Fd` when open for writing.
pub fn hook_write_fd(ruby: &Ruby, io: RFile) -> Direct {
    match open_file(ruby, io) {
        None => Direct::Closed,
        Some(file) if file.mode & rb_sys::FMODE_WRITABLE as c_int == 0 => Direct::Ruby,
        Some(file) => Direct::Fd(file.fd),
    }
}

/// Moves up to `max` of the bytes Ruby's read buffer holds for `io` (an
/// `ungetc`, a `gets` on the raw IO) into `buffer`, an `IO::Buffer`, at
/// `offset`, as Ruby's own reads take them before reading the fd: how many
/// (0: none held, or no room). `None` when `io` is closed or not open for
/// reading; `Err` for what the buffer's accessor raises, or an `offset`
/// past its end.
pub fn take_read_buffer(
    ruby: &Ruby,
    io: RFile,
    buffer: Value,
    offset: usize,
    max: usize,
) -> Result<Option<usize>, Error> {
    let (base, size) = buffer_memory(ruby, buffer, true)?;
    let room = size.checked_sub(offset).ok_or_else(|| {
        Error::new(
            ruby.exception_arg_error(),
            "offset exceeds the buffer's size",
        )
    })?;
    // SAFETY: `ruby` shows this thread holds the GVL and no Ruby code runs
    // below, so nothing else touches the IO or the buffer meanwhile; `io` is
    // a live T_FILE whose `fptr` is NULL or its rb_io_t (see `open_file`).
    // `rbuf.ptr + rbuf.off` holds `rbuf.len` bytes (io.c's
    // read_buffered_data reads them so, and moves `off`/`len` on as here);
    // `base + offset` has `room` writable bytes (the accessor for writing
    // said so). `copy` is a memmove: the buffer may be Ruby's own read buffer.
    unsafe {
        let Some(file) = (*(io.as_raw() as *const rb_sys::RFile)).fptr.as_mut() else {
            return Ok(None);
        };
        if file.fd < 0 || file.mode & rb_sys::FMODE_READABLE as c_int == 0 {
            return Ok(None);
        }
        let held = usize::try_from(file.rbuf.len).unwrap_or(0);
        let taken = held.min(room).min(max);
        if taken > 0 {
            let from = file.rbuf.ptr.add(file.rbuf.off as usize).cast::<u8>();
            std::ptr::copy(from, base.add(offset), taken);
            file.rbuf.off += taken as c_int;
            file.rbuf.len -= taken as c_int;
        }
        Ok(Some(taken))
    }
}

/// Runs `f` on the bytes of `string`. `f` must not call into Ruby: the
/// slice is only valid while nothing can change, move or free the string.
pub fn with_bytes<R>(_ruby: &Ruby, string: RString, f: impl FnOnce(&[u8]) -> R) -> R {
    // SAFETY: `_ruby` shows this thread holds the GVL; `string` sits on this
    // stack (the conservative GC scan pins it), and `f` runs no Ruby code, so
    // no GC, compaction or mutation can happen while the slice lives.
    f(unsafe { string.as_slice() })
}

/// Runs `f` on the memory of `buffer`, an `IO::Buffer`, to read from it.
/// Whatever Ruby's accessor raises (not an IO::Buffer, freed) comes back as
/// `Err`. `f` must not call into Ruby: the memory is only valid while the
/// buffer can neither change nor be freed.
pub fn with_buffer<R>(ruby: &Ruby, buffer: Value, f: impl FnOnce(&[u8]) -> R) -> Result<R, Error> {
    let (base, size) = buffer_memory(ruby, buffer, false)?;
    if base.is_null() {
        return Ok(f(&[]));
    }
    // SAFETY: Ruby handed out `size` readable bytes at `base`; the buffer sits
    // on this stack (the caller's argument) and `f` runs no Ruby code, so
    // nothing frees, resizes or moves it while the slice lives.
    Ok(f(unsafe { std::slice::from_raw_parts(base, size) }))
}

/// Runs `f` on the memory of `buffer`, an `IO::Buffer`, to write into it.
/// As [`with_buffer`]; a read-only buffer raises what Ruby raises.
pub fn with_buffer_mut<R>(
    ruby: &Ruby,
    buffer: Value,
    f: impl FnOnce(&mut [u8]) -> R,
) -> Result<R, Error> {
    let (base, size) = buffer_memory(ruby, buffer, true)?;
    if base.is_null() {
        return Ok(f(&mut []));
    }
    // SAFETY: as in `with_buffer`; Ruby's accessor for writing checked that
    // the memory is writable, and no other reference to it exists in Rust.
    Ok(f(unsafe { std::slice::from_raw_parts_mut(base, size) }))
}

/// An IO::Buffer's base and size, from Ruby's accessor for writing or reading.
fn buffer_memory(_ruby: &Ruby, buffer: Value, write: bool) -> Result<(*mut u8, usize), Error> {
    let raw = buffer.as_raw();
    let mut base: *mut c_void = std::ptr::null_mut();
    let mut size: rb_sys::size_t = 0;
    magnus::rb_sys::protect(|| {
        // SAFETY: `_ruby` shows this is a Ruby thread holding the GVL; the
        // out-pointers are locals of this frame; the accessors check that
        // `raw` is an IO::Buffer (TypeError otherwise) and raise for a freed
        // or, when writing, read-only buffer; `protect` catches those.
        unsafe {
            if write {
                rb_sys::rb_io_buffer_get_bytes_for_writing(raw, &mut base, &mut size);
            } else {
                let mut readable: *const c_void = std::ptr::null();
                rb_sys::rb_io_buffer_get_bytes_for_reading(raw, &mut readable, &mut size);
                base = readable.cast_mut();
            }
        }
        rb_sys::Qnil as rb_sys::VALUE
    })?;
    Ok((base.cast::<u8>(), size as usize))
}

/// Bytes `range` of `string` as a new binary String: what `String#byteslice`
/// makes of a binary String, without a method call. The caller checks the
/// range against the string's length (a bad one panics, never reads out of
/// bounds).
pub fn byteslice(ruby: &Ruby, string: RString, range: std::ops::Range<usize>) -> RString {
    // SAFETY: `ruby` shows this thread holds the GVL; `string` sits on this
    // stack, so the conservative GC scan pins it and a GC run by the
    // allocation below neither moves nor frees its bytes, and no Ruby code
    // runs that could change it before Ruby has copied them (as Ruby's own
    // rb_str_new(RSTRING_PTR(str) + beg, len) does).
    let bytes = unsafe { string.as_slice() };
    ruby.str_from_slice(&bytes[range])
}

/// The first `len` bytes of `string`, in place: `rb_str_resize`, so a
/// string that shares its bytes gets its own first. No allocation for a
/// string that keeps them on the heap. Ruby's refusal (a frozen or locked
/// string, a chilled one whose warning raises) comes back as the error.
pub fn truncate(_ruby: &Ruby, string: RString, len: usize) -> Result<(), Error> {
    let len = std::ffi::c_long::try_from(len.min(string.len())).unwrap_or(0);
    magnus::rb_sys::protect(|| {
        // SAFETY: `_ruby` shows this thread holds the GVL; `string` is a live
        // String held by the caller's frame; `len` is within its length and a
        // c_long; whatever Ruby raises in rb_str_resize, `protect` catches.
        unsafe { rb_sys::rb_str_resize(string.as_raw(), len) }
    })?;
    Ok(())
}

/// The frozen, interned String with `bytes` (as `-"..."`): one look-up in
/// Ruby's table of interned strings, no allocation when it is there already.
/// A Hash takes such a key as it is, without copying and freezing it.
pub fn interned(_ruby: &Ruby, bytes: &[u8]) -> Value {
    // SAFETY: `_ruby` shows this thread holds the GVL; the pointer and length
    // describe `bytes`, which Ruby copies if it makes a new string; the result
    // is a live String VALUE (interned strings are never freed while in use).
    unsafe {
        let raw = rb_sys::rb_interned_str(bytes.as_ptr().cast(), bytes.len() as std::ffi::c_long);
        <Value as magnus::rb_sys::FromRawValue>::from_raw(raw)
    }
}

/// Key-value pairs on their way into a Hash, stored a batch at a time with
/// `rb_hash_bulk_insert` (what a Hash literal does): a `Hash#[]=` each would
/// cost a protected call per key. The batch is an array inside this struct,
/// which lives on the machine stack, so the conservative GC scan keeps the
/// pending keys and values alive until they are in the Hash. The keys must
/// be distinct and new to the Hash.
pub struct HashBatch {
    hash: rb_sys::VALUE,
    pending: [rb_sys::VALUE; Self::CAPACITY],
    len: usize,
}

impl HashBatch {
    const CAPACITY: usize = 32;

    pub fn new(hash: magnus::RHash) -> Self {
        HashBatch {
            hash: hash.as_raw(),
            pending: [rb_sys::Qnil as rb_sys::VALUE; Self::CAPACITY],
            len: 0,
        }
    }

    pub fn push(&mut self, ruby: &Ruby, key: Value, value: Value) -> Result<(), Error> {
        if self.len == Self::CAPACITY {
            self.flush(ruby)?;
        }
        self.pending[self.len] = key.as_raw();
        self.pending[self.len + 1] = value.as_raw();
        self.len += 2;
        Ok(())
    }

    /// Stores what is pending; what Ruby raises (a frozen Hash) comes back as `Err`.
    pub fn flush(&mut self, _ruby: &Ruby) -> Result<(), Error> {
        let (hash, len, pending) = (self.hash, self.len, self.pending.as_ptr());
        self.len = 0;
        if len == 0 {
            return Ok(());
        }
        magnus::rb_sys::protect(|| {
            // SAFETY: `_ruby` shows this thread holds the GVL; the first `len`
            // entries of `pending` are live VALUEs (kept by the stack scan, see
            // the struct), `hash` is the live Hash given to `new` (the caller
            // holds it); `protect` catches what Ruby raises.
            unsafe { rb_sys::rb_hash_bulk_insert(len as std::ffi::c_long, pending, hash) };
            rb_sys::Qnil as rb_sys::VALUE
        })
        .map(drop)
    }
}
