//! The binding's side of the core: what the core stores for Ruby (a block,
//! or a fiber to resume, plus an object to keep alive with it) and the
//! `RubyDriver` that calls them on the loop thread and blocks without the GVL.

use super::helpers::{capi, errors, nogvl};
use crate::core::{Driver, Fire, Loop, LoopWaker, WaitKey};
use magnus::{
    block::Proc,
    gc::Marker,
    prelude::*,
    rb_sys::AsRawValue,
    value::{LazyId, Opaque},
    Error, Fiber, IntoValue, Ruby, Value,
};
use std::io;

#[derive(Clone, Copy)]
enum Target {
    Block(Opaque<Proc>),
    /// A parked fiber, resumed with what ended its wait: the ready bits
    /// (I/O), nil (timer), `:closed` (its fd was released), or the value in
    /// `keep` (a wake). A waiting fiber costs no Proc and no extra call.
    Fiber(Opaque<Fiber>, Switch),
    /// Raises the exception in `keep` in the fiber (a cancellation).
    Raise(Opaque<Fiber>, Switch),
    /// Switches back to a fiber the loop ran that is neither waiting nor
    /// done: user code switched away from it by hand (`other.raise`,
    /// `other.transfer`), and control came back to the loop instead (see
    /// `RubyDriver::recover`).
    Recover(Opaque<Fiber>),
    /// Ends that wait, if it still goes on, with the value in `keep` (a
    /// resume another thread posted: `RbLoop::resume_soon`).
    Unpark(WaitKey),
    /// Only kept alive (a pinned IO).
    Nothing,
}

/// How a parked fiber is switched back to: the loop transfers to the fibers
/// it runs; a fiber that user code resumed outside the loop's run suspended
/// with `Fiber.yield` and is resumed.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Switch {
    Transfer,
    Resume,
}

#[derive(Clone, Copy)]
pub struct Callback {
    target: Target,
    keep: Option<Opaque<Value>>,
}

static CLOSED: LazyId = LazyId::new("closed");

impl Callback {
    pub fn new(block: Proc) -> Callback {
        Callback {
            target: Target::Block(block.into()),
            keep: None,
        }
    }

    pub fn keeping(block: Proc, keep: Value) -> Callback {
        Callback {
            target: Target::Block(block.into()),
            keep: Some(keep.into()),
        }
    }

    pub fn resume(fiber: Fiber, switch: Switch) -> Callback {
        Callback {
            target: Target::Fiber(fiber.into(), switch),
            keep: None,
        }
    }

    /// Ends the wait `key` with `value` when the loop runs it.
    pub fn unpark(key: WaitKey, value: Value) -> Callback {
        Callback {
            target: Target::Unpark(key),
            keep: Some(value.into()),
        }
    }

    pub fn keep_alive(keep: Value) -> Callback {
        Callback {
            target: Target::Nothing,
            keep: Some(keep.into()),
        }
    }

    /// This fiber's resume, delivering `value` when called as an immediate.
    pub fn with_value(self, value: Value) -> Callback {
        Callback {
            target: self.target,
            keep: Some(value.into()),
        }
    }

    /// This fiber's resume turned into raising `exception` in it.
    pub fn raising(self, exception: Value) -> Callback {
        let target = match self.target {
            Target::Fiber(fiber, switch) | Target::Raise(fiber, switch) => {
                Target::Raise(fiber, switch)
            }
            other => other,
        };
        Callback {
            target,
            keep: Some(exception.into()),
        }
    }

    /// The exception a `raising` callback carries.
    pub fn exception(&self, ruby: &Ruby) -> Option<Value> {
        match self.target {
            Target::Raise(..) => self.keep.map(|keep| ruby.get_inner(keep)),
            _ => None,
        }
    }

    /// The loop's mark function calls this for everything it holds: the loop
    /// is not write-barrier protected, so that is what keeps these objects
    /// alive across minor GCs as well as full ones.
    pub fn mark(&self, marker: &Marker) {
        match self.target {
            Target::Block(block) => marker.mark(block),
            Target::Fiber(fiber, _) | Target::Raise(fiber, _) | Target::Recover(fiber) => {
                marker.mark(fiber)
            }
            Target::Unpark(_) | Target::Nothing => {}
        }
        if let Some(keep) = self.keep {
            marker.mark(keep);
        }
    }
}

/// Calls blocks on the loop thread and releases the GVL while the backend blocks.
pub struct RubyDriver<'a> {
    pub ruby: &'a Ruby,
    pub core: &'a Loop<Callback>,
    /// The loop's fork generation: a callback that forked returns, in the
    /// child, into a loop that is the parent's; the run stops there.
    pub fork_generation: u64,
}

impl RubyDriver<'_> {
    fn call(&mut self, callback: Callback, fire: Fire) -> Result<(), Error> {
        let ruby = self.ruby;
        match callback.target {
            Target::Block(block) => {
                // Straight into the VM's block call: `Proc::call` would
                // allocate an Array per dispatch, and `funcall(:call)` looks
                // the method up each time.
                let block = ruby.get_inner(block);
                let arg = match fire {
                    Fire::Io(ready) => Some(ruby.into_value(ready.bits())),
                    _ => None,
                };
                capi::call_proc(ruby, block, arg)
            }
            Target::Fiber(fiber, switch) => {
                let fiber = ruby.get_inner(fiber);
                if !fiber.is_alive() {
                    return Ok(());
                }
                let value = match fire {
                    Fire::Io(ready) => ruby.into_value(ready.bits()),
                    Fire::Timer => ruby.qnil().as_value(),
                    Fire::Closed => CLOSED.into_value_with(ruby),
                    Fire::Immediate | Fire::Deferred => callback
                        .keep
                        .map_or_else(|| ruby.qnil().as_value(), |keep| ruby.get_inner(keep)),
                };
                switch_to(fiber, switch, value)?;
                self.recover(fiber);
                Ok(())
            }
            Target::Raise(fiber, _) => {
                let fiber = ruby.get_inner(fiber);
                match callback.keep.map(|keep| ruby.get_inner(keep)) {
                    Some(exception) if fiber.is_alive() => {
                        raise_in(ruby, fiber, exception)?;
                        self.recover(fiber);
                        Ok(())
                    }
                    _ => Ok(()),
                }
            }
            Target::Recover(fiber) => {
                let fiber = ruby.get_inner(fiber);
                if !fiber.is_alive() || self.core.is_parked(owner_of(fiber)) {
                    return Ok(());
                }
                match fiber.transfer::<_, Value>((ruby.qnil(),)) {
                    // It is busy resuming a fiber of its own: that one
                    // switches back to it.
                    Err(e) if errors::is_fiber_error(ruby, &e) => Ok(()),
                    Err(e) => Err(e),
                    Ok(_) => {
                        self.recover(fiber);
                        Ok(())
                    }
                }
            }
            Target::Unpark(key) => {
                // The wait's own resume is its fiber's: switched to now, not
                // through `call` again (recursion would keep `call` out of
                // `invoke`).
                let Some(Target::Fiber(fiber, switch)) =
                    self.core.unpark(key).map(|resume| resume.target)
                else {
                    return Ok(());
                };
                let fiber = ruby.get_inner(fiber);
                if !fiber.is_alive() {
                    return Ok(());
                }
                let value = callback
                    .keep
                    .map_or_else(|| ruby.qnil().as_value(), |keep| ruby.get_inner(keep));
                switch_to(fiber, switch, value)?;
                self.recover(fiber);
                Ok(())
            }
            Target::Nothing => Ok(()),
        }
    }
}

impl Driver<Callback> for RubyDriver<'_> {
    type Error = Error;

    fn invoke(&mut self, callback: Callback, fire: Fire) -> Result<(), Error> {
        // Marked for stall watchdogs (Loop#on_stall) until the callback returns.
        let busy = self.core.pulse().enter();
        let result = self.call(callback, fire);
        drop(busy);
        if crate::sys::fork::generation() != self.fork_generation {
            return Err(errors::evix(
                self.ruby,
                "this process was forked inside a callback of an Evix::Loop created before fork: \
                 the child does not run the parent's loop; create a new loop in the child",
            ));
        }
        result
    }

    fn prefetch(&self, callback: &Callback, level: usize) {
        let Target::Block(block) = callback.target else {
            return;
        };
        let block = self.ruby.get_inner(block);
        match level {
            // A heap object's VALUE is its address.
            0 => crate::sys::prefetch(block.as_raw() as *const u8),
            _ => capi::prefetch_proc_data(self.ruby, block),
        }
    }

    fn blocking_is_costly(&self) -> bool {
        true
    }

    fn block(
        &mut self,
        waker: &LoopWaker,
        wait: &mut dyn FnMut() -> io::Result<()>,
    ) -> Result<io::Result<()>, Error> {
        match nogvl::without_gvl(wait, &|| waker.force_from_signal()) {
            nogvl::Blocked::Done(result) => Ok(result),
            // An interrupt was already pending: `after_block` handles it.
            nogvl::Blocked::Interrupted => Ok(Ok(())),
            nogvl::Blocked::Panicked => Err(errors::evix(self.ruby, "the backend wait panicked")),
        }
    }

    fn after_block(&mut self) -> Result<(), Error> {
        nogvl::check_interrupts(self.ruby)
    }
}

impl RubyDriver<'_> {
    /// Control came back from `fiber`: it waits again, or ended, or it
    /// switched to another fiber by hand, which then waited or ended (so
    /// control came here, not to `fiber`). In that last case `fiber` would
    /// be left suspended for good: it is switched back to on the next tick.
    fn recover(&self, fiber: Fiber) {
        if !self.core.is_parked(owner_of(fiber)) && fiber.is_alive() {
            self.core.next_tick(Callback {
                target: Target::Recover(fiber.into()),
                keep: None,
            });
        }
    }
}

/// A fiber's identity as a waiter: its address.
pub fn owner_of(fiber: Fiber) -> u64 {
    fiber.as_raw()
}

/// Switches to a parked fiber with `value`; returns when control comes back.
fn switch_to(fiber: Fiber, switch: Switch, value: Value) -> Result<(), Error> {
    match switch {
        Switch::Transfer => fiber.transfer::<_, Value>((value,)).map(drop),
        Switch::Resume => fiber.resume::<_, Value>((value,)).map(drop),
    }
}

/// Raises `exception` in a parked fiber (Fiber#raise transfers to a fiber
/// that suspended by transfer, and resumes one that yielded).
fn raise_in(ruby: &Ruby, fiber: Fiber, exception: Value) -> Result<(), Error> {
    let exception = magnus::Exception::from_value(exception)
        .ok_or_else(|| errors::type_error(ruby, "exception expected".into()))?;
    fiber.raise::<Value>(exception).map(drop)
}
