//! A loop's pulse: what a watchdog on another thread reads to tell a loop
//! stuck in one callback from one that is idle or moving on.
//!
//! The loop thread marks each callback (or fiber it switches to) it starts
//! and ends: a beat count goes up, and a busy bit is set while one runs. The
//! loop thread is the only writer, so that costs two plain loads and stores
//! per callback, no lock and no atomic read-modify-write; the watchdog only
//! loads. A watchdog that sees the loop busy on the same beat for longer
//! than its threshold has found a stall, which it reports once: the beat
//! moves on when that callback ends.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// The busy bit of the state; the beat count is in the bits above it.
const BUSY: u64 = 1;
const BEAT: u64 = 2;

/// A watchdog looks at least this often while its threshold is far off...
const LONGEST_NAP: Duration = Duration::from_millis(100);
/// ...and at most this often.
const SHORTEST_NAP: Duration = Duration::from_millis(1);

#[derive(Debug, Default)]
pub struct Pulse {
    state: AtomicU64,
    ended: AtomicBool,
}

/// A stall a watchdog found: the state it saw, and since when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stall {
    pub state: u64,
    pub since: Instant,
}

/// A callback running on the loop thread, from [`Pulse::enter`] until dropped.
#[must_use]
pub struct Busy<'a> {
    pulse: &'a Pulse,
    /// The busy bit before it began: a callback may run inside another.
    outer: u64,
}

impl Drop for Busy<'_> {
    #[inline]
    fn drop(&mut self) {
        let state = self.pulse.state.load(Relaxed);
        self.pulse
            .state
            .store(((state & !BUSY).wrapping_add(BEAT)) | self.outer, Relaxed);
    }
}

impl Pulse {
    /// A callback starts; it ends when the guard is dropped. Loop thread only.
    #[inline]
    pub fn enter(&self) -> Busy<'_> {
        let state = self.state.load(Relaxed);
        self.state.store((state | BUSY).wrapping_add(BEAT), Relaxed);
        Busy {
            pulse: self,
            outer: state & BUSY,
        }
    }

    /// The current state: equal twice only if no callback started or ended between.
    pub fn state(&self) -> u64 {
        self.state.load(Relaxed)
    }

    /// The loop is closed or gone: watchdogs stop.
    pub fn end(&self) {
        self.ended.store(true, Relaxed);
    }

    pub fn ended(&self) -> bool {
        self.ended.load(Relaxed)
    }

    /// Watches until the loop has been busy on one beat (other than the
    /// stall already reported, `last`) for `threshold`, and returns that
    /// stall; `None` once the loop ended or `nap` (which sleeps up to the
    /// duration it is given) returns false. The stall is seen within a
    /// nap of its start: an eighth of the threshold, 1 to 100 ms.
    pub fn watch(
        &self,
        threshold: Duration,
        last: Option<u64>,
        mut nap: impl FnMut(Duration) -> bool,
    ) -> Option<Stall> {
        let longest = (threshold / 8).clamp(SHORTEST_NAP, LONGEST_NAP);
        let mut seen: Option<Stall> = None;
        while !self.ended() {
            let state = self.state();
            let now = Instant::now();
            let mut wait = longest;
            if state & BUSY != 0 && Some(state) != last {
                match seen {
                    Some(stall) if stall.state == state => {
                        let held = now.saturating_duration_since(stall.since);
                        if held >= threshold {
                            return Some(stall);
                        }
                        wait = wait.min(threshold - held);
                    }
                    _ => seen = Some(Stall { state, since: now }),
                }
            } else {
                seen = None;
            }
            if !nap(wait.max(SHORTEST_NAP)) {
                return None;
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::thread;

    fn sleep_for(duration: Duration) -> bool {
        thread::sleep(duration);
        true
    }

    #[test]
    fn nested_callbacks_restore_the_outer_busy_bit() {
        let pulse = Pulse::default();
        let idle = pulse.state();
        assert_eq!(idle & BUSY, 0);
        let outer = pulse.enter();
        let busy = pulse.state();
        assert_eq!(busy & BUSY, BUSY);
        drop(pulse.enter());
        assert_eq!(
            pulse.state() & BUSY,
            BUSY,
            "still inside the outer callback"
        );
        assert_ne!(pulse.state(), busy, "the inner callback moved the beat");
        drop(outer);
        assert_eq!(pulse.state() & BUSY, 0);
    }

    #[test]
    fn finds_one_stall_once_and_never_an_idle_loop() {
        let pulse = Arc::new(Pulse::default());
        let threshold = Duration::from_millis(40);
        // Idle: the watchdog gives up after a few naps, having found nothing.
        let mut naps = 0;
        let idle = pulse.watch(threshold, None, |d| {
            naps += 1;
            sleep_for(d) && naps < 10
        });
        assert_eq!(idle, None);

        let stuck = Arc::clone(&pulse);
        let worker = thread::spawn(move || {
            let _busy = stuck.enter();
            thread::sleep(Duration::from_millis(200));
        });
        let started = Instant::now();
        let stall = pulse.watch(threshold, None, sleep_for).expect("a stall");
        assert!(started.elapsed() >= threshold);
        // The same stall is not found again while it lasts.
        let mut waited = 0;
        let again = pulse.watch(threshold, Some(stall.state), |d| {
            waited += 1;
            sleep_for(d) && waited < 12
        });
        assert_eq!(again, None);
        worker.join().unwrap();
        assert_eq!(pulse.state() & BUSY, 0);
    }

    #[test]
    fn an_ended_pulse_stops_the_watch() {
        let pulse = Pulse::default();
        let _busy = pulse.enter();
        pulse.end();
        assert_eq!(pulse.watch(Duration::from_millis(5), None, sleep_for), None);
    }
}
