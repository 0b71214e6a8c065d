//! The GVL helper: runs a blocking wait without the GVL so other Ruby threads
//! run meanwhile, and lets Ruby interrupt it (Ctrl-C, Thread#raise/kill, trap
//! handlers) through an unblock function.

use magnus::Error;
use std::ffi::c_void;
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
