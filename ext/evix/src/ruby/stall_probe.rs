//! `Evix::StallProbe`: a loop's pulse as a stall watchdog thread sees it
//! (lib/evix/loop/stall.rb). It holds the pulse, not the loop, so the watchdog
//! does not keep the loop alive; and it waits without the GVL, so a loop
//! that is not stalled never waits for the watchdog.

use super::event_loop::RbLoop;
use super::helpers::{args, errors, nogvl};
use crate::core::Pulse;
use crate::sys::fork;
use magnus::{
    function, method, prelude::*, typed_data::Obj, DataTypeFunctions, Error, RModule, Ruby,
    TypedData, Value,
};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

#[derive(TypedData)]
#[magnus(class = "Evix::StallProbe", free_immediately, size)]
pub struct RbStallProbe {
    pulse: Arc<Pulse>,
    threshold: Duration,
    fork_generation: u64,
    bell: Mutex<Bell>,
    rung: Condvar,
}

impl DataTypeFunctions for RbStallProbe {}

/// Why a watch should stop napping.
#[derive(Default)]
struct Bell {
    /// `stop` was called: the watchdog ends.
    stopped: bool,
    /// Ruby wants the watchdog thread (Thread#kill, process exit...).
    interrupted: bool,
}

impl RbStallProbe {
    /// `StallProbe.new(loop, seconds)`: a probe of `loop`'s pulse that finds
    /// stalls of `seconds` or longer.
    fn new(ruby: &Ruby, owner: Obj<RbLoop>, seconds: Value) -> Result<Self, Error> {
        let core = owner.usable(ruby)?;
        let threshold = args::seconds(ruby, seconds, "threshold")?;
        if threshold.is_zero() {
            return Err(errors::argument(
                ruby,
                "threshold must be a positive number of seconds (got 0)".into(),
            ));
        }
        Ok(RbStallProbe {
            pulse: core.pulse().clone(),
            threshold,
            fork_generation: fork::generation(),
            bell: Mutex::default(),
            rung: Condvar::new(),
        })
    }

    fn bell(&self) -> MutexGuard<'_, Bell> {
        self.bell
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Sleeps up to `duration`; false if rung meanwhile.
    fn nap(&self, duration: Duration) -> bool {
        let bell = self.bell();
        let (bell, _) = self
            .rung
            .wait_timeout_while(bell, duration, |bell| !bell.stopped && !bell.interrupted)
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        !bell.stopped && !bell.interrupted
    }

    fn over(&self) -> bool {
        self.bell().stopped || self.pulse.ended() || fork::generation() != self.fork_generation
    }

    /// `wait(last)`, from the watchdog thread: blocks (without the GVL) until
    /// the loop has held one callback or fiber for the threshold, other than
    /// the stall `last` (a `state`) already reported, and returns
    /// `[state, seconds it has lasted]`; nil once stopped, or the loop is
    /// closed or gone, or in a forked child.
    fn wait(ruby: &Ruby, rb_self: &Self, last: Option<u64>) -> Result<Option<(u64, f64)>, Error> {
        loop {
            if rb_self.over() {
                return Ok(None);
            }
            let mut watch = || {
                rb_self
                    .pulse
                    .watch(rb_self.threshold, last, |nap| rb_self.nap(nap))
            };
            let ring = || {
                rb_self.bell().interrupted = true;
                rb_self.rung.notify_all();
            };
            let stall = match nogvl::without_gvl_locking(&mut watch, &ring) {
                nogvl::Blocked::Done(stall) => stall,
                nogvl::Blocked::Interrupted => None,
                nogvl::Blocked::Panicked => {
                    return Err(errors::evix(ruby, "the stall watchdog panicked"))
                }
            };
            if let Some(stall) = stall {
                // Measured now that the GVL is back: the moment the
                // watchdog can look at the loop thread.
                return Ok(Some((stall.state, stall.since.elapsed().as_secs_f64())));
            }
            // Rung by Ruby: what it wanted (Thread#kill, exit) happens here.
            rb_self.bell().interrupted = false;
            nogvl::check_interrupts(ruby)?;
        }
    }

    /// `state`: the pulse now; equal to a stall's state while it lasts.
    fn state(&self) -> u64 {
        self.pulse.state()
    }

    /// `stop`, from any thread: ends the watch, now and for good.
    fn stop(&self) {
        self.bell().stopped = true;
        self.rung.notify_all();
    }
}

pub fn init(ruby: &Ruby, evix: RModule) -> Result<(), Error> {
    let class = evix.define_class("StallProbe", ruby.class_object())?;
    class.undef_default_alloc_func();
    class.define_singleton_method("new", function!(RbStallProbe::new, 2))?;
    class.define_method("wait", method!(RbStallProbe::wait, 1))?;
    class.define_method("state", method!(RbStallProbe::state, 0))?;
    class.define_method("stop", method!(RbStallProbe::stop, 0))?;
    Ok(())
}
