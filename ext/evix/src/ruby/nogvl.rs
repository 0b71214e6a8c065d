//! The GVL helper: runs a blocking wait without the GVL so other Ruby threads
//! run meanwhile, and lets Ruby interrupt it (Ctrl-C, Thread#raise/kill, trap
//! handlers) through an unblock function. Also the few direct calls into
//! Ruby's C API that the hot paths make, each behind a safe wrapper.

use magnus::{block::Proc, rb_sys::AsRawValue, Error, RFile, RString, Ruby, Value};
use std::ffi::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

struct Call<'a, R> {
    func: &'a mut dyn FnMut() -> R,
    result: Option<std::thread::Result<R>>,
}

extern "C" fn trampoline<R>(data: *mut c_void) -> *mut c_void {
    // SAFETY: `data` is the `Call` that `without_gvl` keeps alive on its stack
    // for the whole rb_thread_call_without_gvl call.
    let call = unsafe { &mut *(data as *mut Call<'_, R>) };
    call.result = Some(catch_unwind(AssertUnwindSafe(|| (call.func)())));
    std::ptr::null_mut()
}

extern "C" fn unblock(data: *mut c_void) {
    // SAFETY: `data` points at the `&dyn Fn` that `without_gvl` keeps alive for
    // the whole call; Ruby calls this from another thread, hence `Sync`.
    let wake = unsafe { &*(data as *const &(dyn Fn() + Sync)) };
    let _ = catch_unwind(AssertUnwindSafe(wake));
}

/// Runs `func` without the GVL; `wake` makes it return early. A pending
/// interrupt raised by Ruby before or after `func` comes back as `Err`
/// (through `protect`, so no Ruby exception unwinds through Rust frames).
/// `None` in `Ok` means `func` panicked.
pub fn without_gvl<R>(
    func: &mut dyn FnMut() -> R,
    wake: &(dyn Fn() + Sync),
) -> Result<Option<R>, Error> {
    let mut call = Call { func, result: None };
    let wake_ref: &(dyn Fn() + Sync) = wake;
    magnus::rb_sys::protect(|| {
        // SAFETY: both pointers refer to locals of this frame that outlive the
        // call; `call` never touches Ruby and `unblock` only runs `wake`.
        unsafe {
            rb_sys::rb_nogvl(
                Some(trampoline::<R>),
                &mut call as *mut Call<'_, R> as *mut c_void,
                Some(unblock),
                &wake_ref as *const &(dyn Fn() + Sync) as *mut c_void,
                // The unblock function only writes the waker (an eventfd or a
                // pipe), which is async-signal-safe; without this flag Ruby 3.1
                // starts a thread to run it on every blocking wait.
                rb_sys::RB_NOGVL_UBF_ASYNC_SAFE as i32,
            );
        }
        rb_sys::Qnil as rb_sys::VALUE
    })?;
    Ok(call.result.and_then(Result::ok))
}

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
/// closed or uninitialized IO), without a method call.
pub fn io_descriptor(_ruby: &Ruby, io: RFile) -> Result<c_int, Error> {
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

/// What a direct read or write may do with an IO (see `ruby/stream.rs`).
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
pub fn direct(_ruby: &Ruby, io: RFile, write: bool) -> Direct {
    // SAFETY: `_ruby` shows this is a Ruby thread holding the GVL, so nothing
    // changes the IO meanwhile; `io` is a live T_FILE object, whose `fptr` is
    // either null (not initialized, or closed and finalized) or points to its
    // rb_io_t, a struct of Ruby's public C API (ruby/io.h, 3.1 and 3.3 alike).
    let fptr = unsafe { (*(io.as_raw() as *const rb_sys::RFile)).fptr };
    if fptr.is_null() {
        return Direct::Closed;
    }
    // SAFETY: non-null, so it points to the IO's live rb_io_t (see above).
    let fptr = unsafe { &*fptr };
    let (mode, buffered) = if write {
        (rb_sys::FMODE_WRITABLE, fptr.wbuf.len)
    } else {
        (rb_sys::FMODE_READABLE, fptr.rbuf.len)
    };
    if fptr.fd < 0 {
        Direct::Closed
    } else if fptr.mode & mode as c_int == 0 || buffered != 0 {
        Direct::Ruby
    } else {
        Direct::Fd(fptr.fd)
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
