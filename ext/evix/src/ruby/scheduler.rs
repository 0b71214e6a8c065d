//! The `Evix::Scheduler` hooks that suspend a fiber with no IO, written in
//! Rust (the rest of the class is in lib/evix/scheduler.rb). Ruby calls
//! these hooks from C, often under a C iterator (`n.times { sleep 0.01 }`);
//! a hook written in Ruby re-enters the VM there, and the frames of that
//! re-entry stay on the machine stack of every fiber parked in the hook: in
//! the fibers benchmark one more resident page per sleeping fiber.

use super::{args, event_loop::RbLoop};
use magnus::{method, prelude::*, value::LazyId, Error, RHash, RModule, RObject, Ruby, Value};

static LOOP: LazyId = LazyId::new("@loop");
static BLOCKED: LazyId = LazyId::new("@blocked");

/// `Fiber::Scheduler#kernel_sleep(duration = nil)`: suspends the calling
/// fiber for `duration` seconds (without one, until `unblock`); nil.
fn kernel_sleep(ruby: &Ruby, rb_self: RObject, args: &[Value]) -> Result<(), Error> {
    args::arity(ruby, args, 0, 1)?;
    suspend_blocked(ruby, rb_self, args).map(drop)
}

/// `Fiber::Scheduler#block(blocker, timeout = nil)` (Mutex, Queue,
/// ConditionVariable, Thread#join…): suspends the calling fiber until
/// `unblock`; false if `timeout` seconds passed first.
fn block(ruby: &Ruby, rb_self: RObject, args: &[Value]) -> Result<bool, Error> {
    args::arity(ruby, args, 1, 2)?;
    suspend_blocked(ruby, rb_self, &args[1..]).map(Value::to_bool)
}

/// Suspends the calling fiber on the scheduler's loop for the optional
/// timeout in `timeout`, noted in `@blocked` meanwhile so that `unblock`
/// may resume it. Returns what resumed it (nil: the timeout).
fn suspend_blocked(ruby: &Ruby, rb_self: RObject, timeout: &[Value]) -> Result<Value, Error> {
    let evloop: Value = rb_self.ivar_get(*LOOP)?;
    let blocked: RHash = rb_self.ivar_get(*BLOCKED)?;
    let fiber = ruby.fiber_current();
    blocked.aset(fiber, true)?;
    let resumed = RbLoop::suspend(ruby, evloop, timeout);
    // Whatever ended the wait (the timer, unblock, an exception raised into
    // the fiber), the fiber no longer waits.
    blocked.delete::<_, Value>(fiber)?;
    resumed
}

pub fn init(ruby: &Ruby, evix: RModule) -> Result<(), Error> {
    let class = evix.define_class("Scheduler", ruby.class_object())?;
    class.define_method("kernel_sleep", method!(kernel_sleep, -1))?;
    class.define_method("block", method!(block, -1))?;
    Ok(())
}
