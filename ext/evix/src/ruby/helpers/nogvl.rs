//! The GVL helper: runs a blocking wait without the GVL so other Ruby threads
//! run meanwhile, and lets Ruby interrupt it (Ctrl-C, Thread#raise/kill, trap
//! handlers) through an unblock function; runs the interrupts afterwards;
//! sleeps a thread as `Kernel#sleep` does.

use magnus::{Error, Ruby};
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

/// How a [`without_gvl`] call went.
pub enum Blocked<R> {
    Done(R),
    /// An interrupt was pending, so `func` did not run.
    Interrupted,
    Panicked,
}

/// Runs `func` without the GVL; `wake` makes it return early. Ruby runs no
/// interrupt handler (trap handlers, Thread#raise) around it: the caller
/// does that with [`check_interrupts`] once it holds no borrows, since those
/// handlers may call back into the loop. `wake` must be async-signal-safe.
pub fn without_gvl<R>(func: &mut dyn FnMut() -> R, wake: &(dyn Fn() + Sync)) -> Blocked<R> {
    // The unblock function only writes the waker (an eventfd or a pipe),
    // which is async-signal-safe; without this flag Ruby 3.1 starts a thread
    // to run it on every blocking wait.
    nogvl(func, wake, rb_sys::RB_NOGVL_UBF_ASYNC_SAFE)
}

/// [`without_gvl`] for a `wake` that is not async-signal-safe (it takes a
/// lock): for calls made seldom, off the loop thread.
pub fn without_gvl_locking<R>(func: &mut dyn FnMut() -> R, wake: &(dyn Fn() + Sync)) -> Blocked<R> {
    nogvl(func, wake, 0)
}

fn nogvl<R>(func: &mut dyn FnMut() -> R, wake: &(dyn Fn() + Sync), flags: u32) -> Blocked<R> {
    let mut call = Call { func, result: None };
    let wake_ref: &(dyn Fn() + Sync) = wake;
    // SAFETY: both pointers refer to locals of this frame that outlive the
    // call; `call` never touches Ruby and `unblock` only runs `wake`. With
    // RB_NOGVL_INTR_FAIL Ruby neither raises nor runs handlers here, so no
    // Ruby exception can unwind through this frame.
    unsafe {
        rb_sys::rb_nogvl(
            Some(trampoline::<R>),
            &mut call as *mut Call<'_, R> as *mut c_void,
            Some(unblock),
            &wake_ref as *const &(dyn Fn() + Sync) as *mut c_void,
            (flags | rb_sys::RB_NOGVL_INTR_FAIL) as i32,
        );
    }
    match call.result {
        None => Blocked::Interrupted,
        Some(Ok(result)) => Blocked::Done(result),
        Some(Err(_)) => Blocked::Panicked,
    }
}

/// Runs pending interrupts (trap handlers, Thread#raise, Thread#kill): what
/// they raise comes back as `Err`.
pub fn check_interrupts(_ruby: &Ruby) -> Result<(), Error> {
    magnus::rb_sys::protect(|| {
        // SAFETY: `_ruby` shows this is a Ruby thread holding the GVL;
        // `protect` catches whatever the handlers raise or throw.
        unsafe { rb_sys::rb_thread_check_ints() };
        rb_sys::Qnil as rb_sys::VALUE
    })
    .map(drop)
}

/// Sleeps the thread like `Kernel#sleep` does without a scheduler (the GVL
/// released, interruptible): `duration`, or until interrupted.
pub fn sleep_thread(_ruby: &Ruby, duration: Option<std::time::Duration>) -> Result<(), Error> {
    magnus::rb_sys::protect(|| {
        // SAFETY: `_ruby` shows this is a Ruby thread holding the GVL; both
        // functions release it while they sleep and raise (caught by
        // `protect`) for an interrupt.
        unsafe {
            match duration {
                Some(d) => rb_sys::rb_thread_wait_for(rb_sys::timeval {
                    tv_sec: d.as_secs() as _,
                    tv_usec: d.subsec_micros() as _,
                }),
                None => rb_sys::rb_thread_sleep_forever(),
            }
        }
        rb_sys::Qnil as rb_sys::VALUE
    })
    .map(drop)
}
