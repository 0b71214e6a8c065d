//! Loop contract tests on real pipes, run once per backend.

use super::*;
use crate::sys::testing::{close, drain, dup, dup2, pipe, write_byte};
use crate::sys::BackendKind;
use std::rc::Rc;

type Log = Rc<RefCell<Vec<String>>>;
type Body = dyn Fn(&TestLoop, Fire);
#[derive(Clone)]
struct Cb(Rc<Body>);
type TestLoop = Loop<Cb>;

struct Calls<'a>(&'a TestLoop);

impl Driver<Cb> for Calls<'_> {
    type Error = String;
    fn invoke(&mut self, callback: Cb, fire: Fire) -> Result<(), String> {
        (callback.0)(self.0, fire);
        Ok(())
    }
}

fn cb(f: impl Fn(&TestLoop, Fire) + 'static) -> Cb {
    Cb(Rc::new(f))
}

fn logger(log: &Log, what: &str) -> Cb {
    let (log, what) = (log.clone(), what.to_string());
    cb(move |_, _| log.borrow_mut().push(what.clone()))
}

fn each_backend(test: impl Fn(BackendKind)) {
    for &kind in BackendKind::available() {
        test(kind);
    }
}

fn once(lp: &TestLoop) {
    lp.run(RunMode::NoWait, &mut Calls(lp)).unwrap();
}

#[test]
fn phases_run_in_order() {
    each_backend(|kind| {
        let lp: TestLoop = Loop::new(kind).unwrap();
        let log: Log = Default::default();
        let (r, w) = pipe();
        write_byte(w);
        lp.defer(logger(&log, "deferred"));
        lp.add_timer(Duration::ZERO, None, logger(&log, "timer"));
        lp.add_watcher(r, Interest::READ, true, logger(&log, "io"), None)
            .unwrap();
        lp.next_tick(logger(&log, "immediate"));
        std::thread::sleep(Duration::from_millis(2));
        once(&lp);
        assert_eq!(
            *log.borrow(),
            ["immediate", "io", "timer", "deferred"],
            "{kind:?}"
        );
        close(r);
        close(w);
    });
}

#[test]
fn immediates_queued_by_immediates_wait_an_iteration() {
    let lp: TestLoop = Loop::new(BackendKind::Poll).unwrap();
    let count = Rc::new(Cell::new(0));
    fn requeue(count: Rc<Cell<u32>>) -> Cb {
        cb(move |lp, _| {
            count.set(count.get() + 1);
            lp.next_tick(requeue(count.clone()));
        })
    }
    lp.next_tick(requeue(count.clone()));
    once(&lp);
    assert_eq!(count.get(), 1);
    once(&lp);
    assert_eq!(count.get(), 2);
}

#[test]
fn stale_events_never_reach_a_removed_watcher_or_a_reused_fd() {
    each_backend(|kind| {
        let lp: TestLoop = Loop::new(kind).unwrap();
        let log: Log = Default::default();
        let (r1, w1) = pipe();
        let (r2, w2) = pipe();
        write_byte(w1);
        write_byte(w2);
        let victim = Rc::new(Cell::new(None));
        let replacement = Rc::new(Cell::new(None::<(RawFd, RawFd)>));
        // Whichever watcher runs first closes the other pipe, reopens a pipe on
        // the freed number and watches it: the old event must be dropped.
        let keys: Rc<RefCell<Vec<(WatcherKey, RawFd)>>> = Default::default();
        for (fd, name) in [(r1, "first"), (r2, "second")] {
            let (log, keys2, victim, replacement) = (
                log.clone(),
                keys.clone(),
                victim.clone(),
                replacement.clone(),
            );
            let key = lp
                .add_watcher(
                    fd,
                    Interest::READ,
                    false,
                    cb(move |lp, _| {
                        log.borrow_mut().push(name.to_string());
                        if victim.get().is_some() {
                            return;
                        }
                        let (other_key, other_fd) =
                            *keys2.borrow().iter().find(|(_, f)| *f != fd).unwrap();
                        victim.set(Some(other_fd));
                        lp.cancel_watcher(other_key);
                        // A new pipe on the freed number (close + reopen, atomically).
                        let (nr, nw) = pipe();
                        dup2(nr, other_fd);
                        close(nr);
                        replacement.set(Some((other_fd, nw)));
                        lp.add_watcher(other_fd, Interest::READ, false, logger(&log, "new"), None)
                            .unwrap();
                    }),
                    None,
                )
                .unwrap();
            keys.borrow_mut().push((key, fd));
        }
        once(&lp);
        assert_eq!(log.borrow().len(), 1, "{kind:?}: {:?}", log.borrow());
        once(&lp);
        assert_eq!(
            log.borrow().len(),
            2,
            "{kind:?}: only the first watcher again: {:?}",
            log.borrow()
        );
        let (_, nw) = replacement.get().unwrap();
        write_byte(nw);
        once(&lp);
        assert!(
            log.borrow().contains(&"new".to_string()),
            "{kind:?}: new watcher fires"
        );
        for fd in [r1, r2, w1, w2, nw] {
            close(fd); // the victim's number holds the replacement now
        }
    });
}

#[test]
fn watchers_share_one_fd_and_oneshot_is_removed_first() {
    each_backend(|kind| {
        let lp: TestLoop = Loop::new(kind).unwrap();
        let log: Log = Default::default();
        let (r, w) = pipe();
        write_byte(w);
        lp.add_watcher(r, Interest::READ, false, logger(&log, "a"), None)
            .unwrap();
        let oneshot_key = Rc::new(Cell::new(None));
        let (log2, k2) = (log.clone(), oneshot_key.clone());
        let key = lp
            .add_watcher(
                r,
                Interest::READ,
                true,
                cb(move |lp, _| {
                    let active = lp.watcher_active(k2.get().unwrap());
                    log2.borrow_mut().push(format!("b active={active}"));
                }),
                None,
            )
            .unwrap();
        oneshot_key.set(Some(key));
        let wkey = lp
            .add_watcher(w, Interest::WRITE, false, logger(&log, "w"), None)
            .unwrap();
        once(&lp);
        once(&lp);
        let log = log.borrow();
        assert_eq!(
            log.iter().filter(|l| *l == "a").count(),
            2,
            "{kind:?} {log:?}"
        );
        assert_eq!(log.iter().filter(|l| l.starts_with('b')).count(), 1);
        assert!(log.contains(&"b active=false".to_string()));
        assert!(log.contains(&"w".to_string()));
        assert!(lp.cancel_watcher(wkey));
        assert!(!lp.cancel_watcher(wkey), "cancel is idempotent");
        close(r);
        close(w);
    });
}

#[test]
fn deferred_runs_last_and_defers_from_defer_wait() {
    let lp: TestLoop = Loop::new(BackendKind::Poll).unwrap();
    let log: Log = Default::default();
    let log2 = log.clone();
    lp.defer(cb(move |lp, _| {
        log2.borrow_mut().push("d1".into());
        lp.defer(logger(&log2, "d2"));
    }));
    once(&lp);
    assert_eq!(*log.borrow(), ["d1"]);
    once(&lp);
    assert_eq!(*log.borrow(), ["d1", "d2"]);
}

#[test]
fn unref_lets_run_return_and_stop_ends_run() {
    let lp: TestLoop = Loop::new(BackendKind::Poll).unwrap();
    let key = lp.add_timer(Duration::from_secs(60), None, cb(|_, _| {}));
    assert!(lp.alive());
    lp.timer_set_ref(key, false);
    assert!(!lp.alive());
    let started = Instant::now();
    lp.run(RunMode::Default, &mut Calls(&lp)).unwrap();
    assert!(started.elapsed() < Duration::from_secs(1));

    let ticks = Rc::new(Cell::new(0));
    let t = ticks.clone();
    lp.add_timer(
        Duration::ZERO,
        Some(Duration::from_millis(1)),
        cb(move |lp, _| {
            t.set(t.get() + 1);
            if t.get() == 3 {
                lp.stop();
            }
        }),
    );
    lp.run(RunMode::Default, &mut Calls(&lp)).unwrap();
    assert_eq!(ticks.get(), 3);
}

#[test]
fn post_from_another_thread_wakes_a_blocked_loop() {
    each_backend(|kind| {
        let lp: Loop<u32> = Loop::new(kind).unwrap();
        let shared = lp.shared().clone();
        lp.add_timer(Duration::from_secs(30), None, 0);
        struct Stopper<'a>(&'a Loop<u32>, Vec<u32>);
        impl Driver<u32> for Stopper<'_> {
            type Error = ();
            fn invoke(&mut self, c: u32, _: Fire) -> Result<(), ()> {
                self.1.push(c);
                if c == 99 {
                    self.0.stop();
                }
                Ok(())
            }
        }
        let poster = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            for i in 1..=99 {
                shared.post(i).unwrap();
            }
        });
        let started = Instant::now();
        let mut driver = Stopper(&lp, Vec::new());
        lp.run(RunMode::Default, &mut driver).unwrap();
        poster.join().unwrap();
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(driver.1, (1..=99).collect::<Vec<_>>(), "{kind:?}");
        lp.close();
        assert!(lp.shared().post(1).is_err());
    });
}

/// The Ruby driver returns from `block` without calling the wait when an
/// interrupt is already pending: the last wait's events must not be
/// dispatched again then (a watcher would see readiness that is gone).
#[test]
fn a_block_that_skips_the_wait_dispatches_no_stale_events() {
    each_backend(|kind| {
        let lp: Loop<u32> = Loop::new(kind).unwrap();
        struct Interrupted {
            fired: Vec<u32>,
            skip_wait: bool,
        }
        impl Driver<u32> for Interrupted {
            type Error = ();
            fn invoke(&mut self, c: u32, _: Fire) -> Result<(), ()> {
                self.fired.push(c);
                Ok(())
            }
            fn block(
                &mut self,
                _: &LoopWaker,
                wait: &mut dyn FnMut() -> io::Result<()>,
            ) -> Result<io::Result<()>, ()> {
                Ok(if self.skip_wait { Ok(()) } else { wait() })
            }
        }
        let (r, w) = pipe();
        lp.add_watcher(r, Interest::READ, false, 7, None).unwrap();
        let mut driver = Interrupted {
            fired: Vec::new(),
            skip_wait: false,
        };
        write_byte(w);
        lp.run_once(Some(Duration::from_secs(5)), &mut driver)
            .unwrap();
        assert_eq!(driver.fired, [7], "{kind:?}");
        drain(r);
        driver.skip_wait = true;
        lp.run_once(Some(Duration::from_secs(5)), &mut driver)
            .unwrap();
        assert_eq!(driver.fired, [7], "{kind:?}: nothing is readable now");
        close(r);
        close(w);
    });
}

#[test]
fn callback_errors_propagate_and_lose_nothing() {
    let lp: Loop<u32> = Loop::new(BackendKind::Poll).unwrap();
    struct Failing(Vec<u32>);
    impl Driver<u32> for Failing {
        type Error = u32;
        fn invoke(&mut self, c: u32, _: Fire) -> Result<(), u32> {
            if c == 1 && !self.0.contains(&1) {
                self.0.push(1);
                return Err(1);
            }
            self.0.push(c);
            Ok(())
        }
    }
    lp.next_tick(1);
    lp.next_tick(2);
    let mut driver = Failing(Vec::new());
    assert!(matches!(
        lp.run(RunMode::NoWait, &mut driver),
        Err(RunError::Callback(1))
    ));
    assert!(!lp.is_running());
    lp.run(RunMode::NoWait, &mut driver).unwrap();
    assert_eq!(driver.0, [1, 2]);
}

#[test]
fn reentering_run_is_refused() {
    let lp: TestLoop = Loop::new(BackendKind::Poll).unwrap();
    let seen = Rc::new(Cell::new(false));
    let s = seen.clone();
    lp.next_tick(cb(move |lp, _| {
        s.set(matches!(
            lp.run(RunMode::NoWait, &mut Calls(lp)),
            Err(RunError::Reentered)
        ));
    }));
    once(&lp);
    assert!(seen.get());
}

#[test]
fn bad_fds_fail_at_the_call() {
    each_backend(|kind| {
        let lp: TestLoop = Loop::new(kind).unwrap();
        let err = lp
            .add_watcher(9999, Interest::READ, false, cb(|_, _| {}), None)
            .unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EBADF), "{kind:?}");
        assert_eq!(lp.stats().watchers, 0);
    });
}

#[test]
fn timer_again_and_cancel() {
    let lp: TestLoop = Loop::new(BackendKind::Poll).unwrap();
    let log: Log = Default::default();
    let key = lp.add_timer(Duration::from_secs(60), None, logger(&log, "t"));
    assert!(lp.timer_again(key, Duration::ZERO));
    lp.run(RunMode::Default, &mut Calls(&lp)).unwrap();
    assert_eq!(*log.borrow(), ["t"]);
    assert!(!lp.timer_active(key));
    assert!(!lp.timer_again(key, Duration::ZERO));
    let key = lp.add_timer(Duration::ZERO, None, logger(&log, "never"));
    assert!(lp.cancel_timer(key));
    assert!(!lp.cancel_timer(key));
    lp.run(RunMode::Default, &mut Calls(&lp)).unwrap();
    assert_eq!(*log.borrow(), ["t"]);
}

#[test]
fn due_timers_cancelled_or_moved_by_earlier_callbacks_do_not_fire() {
    let lp: TestLoop = Loop::new(BackendKind::Poll).unwrap();
    let log: Log = Default::default();
    let keys: Rc<RefCell<Vec<TimerKey>>> = Default::default();
    // More than one batch of due timers; even ones below 300 cancel a timer
    // 300 places later (often in a later batch), timer 10 moves timer 900
    // away, timer
    // 20 arms a zero-delay timer, which waits for the next iteration.
    for i in 0..1000usize {
        let (log, all) = (log.clone(), keys.clone());
        let key = lp.add_timer(
            Duration::ZERO,
            None,
            cb(move |lp, _| {
                log.borrow_mut().push(i.to_string());
                let keys = all.borrow();
                if i % 2 == 0 && i < 300 {
                    assert!(lp.cancel_timer(keys[i + 300]), "still active");
                }
                if i == 10 {
                    assert!(lp.timer_again(keys[900], Duration::from_secs(60)));
                }
                if i == 20 {
                    lp.add_timer(Duration::ZERO, None, logger(&log, "new"));
                }
            }),
        );
        keys.borrow_mut().push(key);
    }
    once(&lp);
    let expected: Vec<String> = (0..1000)
        .filter(|&i| !((300..600).contains(&i) && i % 2 == 0) && i != 900)
        .map(|i| i.to_string())
        .collect();
    assert_eq!(*log.borrow(), expected);
    assert!(lp.timer_active(keys.borrow()[900]));
    assert_eq!(lp.stats().timers, 2);
    once(&lp);
    assert_eq!(log.borrow().last().map(String::as_str), Some("new"));
}

#[test]
fn a_failing_timer_callback_leaves_the_rest_of_its_batch_due() {
    let lp: Loop<u32> = Loop::new(BackendKind::Poll).unwrap();
    struct FailOnce(Vec<u32>);
    impl Driver<u32> for FailOnce {
        type Error = u32;
        fn invoke(&mut self, c: u32, _: Fire) -> Result<(), u32> {
            self.0.push(c);
            if c == 3 && self.0.len() == 4 {
                return Err(c);
            }
            Ok(())
        }
    }
    for i in 0..600 {
        lp.add_timer(Duration::ZERO, None, i);
    }
    let mut driver = FailOnce(Vec::new());
    assert!(matches!(
        lp.run(RunMode::NoWait, &mut driver),
        Err(RunError::Callback(3))
    ));
    assert_eq!(driver.0, [0, 1, 2, 3]);
    assert_eq!(lp.stats().timers, 596, "the rest stays active");
    assert!(lp.alive());
    lp.run(RunMode::NoWait, &mut driver).unwrap();
    assert_eq!(
        driver.0,
        (0..600).collect::<Vec<_>>(),
        "in order, once each"
    );
    assert!(!lp.alive());
}

#[test]
fn pinned_fds_are_trusted_only_for_their_owner() {
    each_backend(|kind| {
        let lp: TestLoop = Loop::new(kind).unwrap();
        let log: Log = Default::default();
        let pin = |owner| {
            Some(FdOwner {
                id: (owner, 0),
                keep: cb(|_, _| {}),
            })
        };
        let (r, w) = pipe();
        for round in 0..2 {
            lp.add_watcher(r, Interest::READ, true, logger(&log, "old"), pin(1))
                .unwrap();
            write_byte(w);
            once(&lp);
            assert_eq!(
                log.borrow().len(),
                round + 1,
                "{kind:?}: the same owner waits again"
            );
            drain(r);
        }
        close(r);
        close(w);
        // The numbers come back for a new pipe: a new owner must re-sync.
        let (r2, w2) = pipe();
        assert_eq!(r2, r);
        lp.add_watcher(r2, Interest::READ, true, logger(&log, "new"), pin(2))
            .unwrap();
        write_byte(w2);
        once(&lp);
        assert_eq!(
            log.borrow().last().map(String::as_str),
            Some("new"),
            "{kind:?}"
        );
        close(r2);
        close(w2);
    });
}

#[test]
fn releasing_an_fd_removes_its_watchers() {
    each_backend(|kind| {
        let lp: TestLoop = Loop::new(kind).unwrap();
        let log: Log = Default::default();
        let (r, w) = pipe();
        write_byte(w);
        let key = lp
            .add_watcher(r, Interest::READ, false, logger(&log, "released"), None)
            .unwrap();
        lp.release_fd(r);
        assert!(!lp.watcher_active(key));
        once(&lp);
        assert!(log.borrow().is_empty(), "{kind:?}");
        // The fd can be watched again afterwards.
        lp.add_watcher(r, Interest::READ, true, logger(&log, "again"), None)
            .unwrap();
        once(&lp);
        assert_eq!(*log.borrow(), ["again"], "{kind:?}");
        close(r);
        close(w);
    });
}

#[test]
fn a_watched_fd_closed_while_its_file_stays_open_elsewhere_does_not_spin() {
    each_backend(|kind| {
        let lp: TestLoop = Loop::new(kind).unwrap();
        let log: Log = Default::default();
        let (r, w) = pipe();
        let elsewhere = dup(r);
        let key = lp
            .add_watcher(r, Interest::READ, false, logger(&log, "closed"), None)
            .unwrap();
        let (other_r, other_w) = pipe();
        lp.add_watcher(other_r, Interest::READ, true, logger(&log, "other"), None)
            .unwrap();
        lp.cancel_watcher(key);
        close(r); // no release: epoll keeps a registration nothing can DEL
        write_byte(w);
        for _ in 0..3 {
            once(&lp);
        }
        // A loop that still saw the ghost would return from this wait at once.
        lp.add_timer(Duration::from_millis(30), None, logger(&log, "timer"));
        lp.run(RunMode::Once, &mut Calls(&lp)).unwrap();
        assert_eq!(*log.borrow(), ["timer"], "{kind:?}");
        log.borrow_mut().clear();
        // What was live before the rebuild still fires, and the waker still wakes.
        write_byte(other_w);
        once(&lp);
        assert_eq!(*log.borrow(), ["other"], "{kind:?}");
        lp.add_timer(Duration::from_secs(30), None, logger(&log, "timer"));
        lp.shared().waker.force();
        let started = Instant::now();
        lp.run(RunMode::Once, &mut Calls(&lp)).unwrap();
        assert!(started.elapsed() < Duration::from_secs(5), "{kind:?}");
        for fd in [elsewhere, w, other_r, other_w] {
            close(fd);
        }
    });
}

mod model;

/// A callback that logs `what` and the kind of fire.
fn fire_logger(log: &Log, what: &str) -> Cb {
    let (log, what) = (log.clone(), what.to_string());
    cb(move |_, fire| {
        let kind = match fire {
            Fire::Io(_) => "io",
            Fire::Timer => "timer",
            Fire::Closed => "closed",
            Fire::Immediate => "immediate",
            Fire::Deferred => "deferred",
        };
        log.borrow_mut().push(format!("{what} {kind}"));
    })
}

fn pin(owner: u64, log: &Log) -> Option<FdOwner<Cb>> {
    Some(FdOwner {
        id: (owner, 0),
        keep: logger(log, "kept"),
    })
}

fn parked(lp: &TestLoop, key: WaitKey) -> bool {
    lp.unpark(key).is_some()
}

#[test]
fn a_wait_ends_once_by_whichever_trigger_comes_first() {
    each_backend(|kind| {
        let lp: TestLoop = Loop::new(kind).unwrap();
        let log: Log = Default::default();
        let (r, w) = pipe();
        let io = Some((r, Interest::READ, pin(1, &log)));
        let Parked::Waiting(key) = lp
            .park(
                1,
                fire_logger(&log, "a"),
                io,
                Some(Duration::from_millis(1)),
            )
            .unwrap()
        else {
            panic!("nothing was pending")
        };
        write_byte(w);
        std::thread::sleep(Duration::from_millis(3));
        once(&lp);
        once(&lp);
        // Readiness and the timer were both due: only the I/O ends the wait.
        assert_eq!(*log.borrow(), ["a io"], "{kind:?}");
        assert!(!parked(&lp, key), "{kind:?}");
        assert_eq!(lp.stats().waiters, 0);
        assert_eq!(lp.stats().timers, 0);
        assert_eq!(lp.stats().watchers, 0);
        close(r);
        close(w);
    });
}

#[test]
fn unpark_cancels_the_triggers_and_hands_back_the_resume() {
    each_backend(|kind| {
        let lp: TestLoop = Loop::new(kind).unwrap();
        let log: Log = Default::default();
        let (r, w) = pipe();
        let io = Some((r, Interest::READ, None));
        let Ok(Parked::Waiting(key)) = lp.park(7, fire_logger(&log, "b"), io, Some(Duration::ZERO))
        else {
            panic!("not parked")
        };
        assert_eq!(lp.parked(7), Some(key));
        assert!(lp.unpark(key).is_some());
        assert!(lp.unpark(key).is_none(), "a wait ends once");
        assert_eq!(lp.parked(7), None);
        write_byte(w);
        once(&lp);
        assert!(log.borrow().is_empty(), "{kind:?}: {:?}", log.borrow());
        close(r);
        close(w);
    });
}

#[test]
fn a_pending_end_is_delivered_at_the_next_park_instead_of_parking() {
    let lp: TestLoop = Loop::new(BackendKind::available()[0]).unwrap();
    let log: Log = Default::default();
    lp.set_pending(3, logger(&log, "cancelled"));
    assert!(matches!(
        lp.park(3, logger(&log, "x"), None, None),
        Ok(Parked::Pending(_))
    ));
    assert!(matches!(
        lp.park(3, logger(&log, "x"), None, None),
        Ok(Parked::Waiting(_))
    ));
    assert_eq!(lp.stats().waiters, 1);
}

#[test]
fn releasing_an_fd_ends_its_waits_closed() {
    each_backend(|kind| {
        let lp: TestLoop = Loop::new(kind).unwrap();
        let log: Log = Default::default();
        let (r, w) = pipe();
        for owner in [1, 2] {
            let io = Some((r, Interest::READ, pin(9, &log)));
            lp.park(owner, fire_logger(&log, &format!("w{owner}")), io, None)
                .unwrap();
        }
        lp.release_fd(r);
        assert_eq!(lp.stats().watchers, 0);
        once(&lp);
        assert_eq!(*log.borrow(), ["w1 closed", "w2 closed"], "{kind:?}");
        assert_eq!(lp.stats().waiters, 0);
        close(r);
        close(w);
    });
}

#[test]
fn a_reused_fd_number_ends_the_old_waits_closed_and_serves_the_new_file() {
    each_backend(|kind| {
        let lp: TestLoop = Loop::new(kind).unwrap();
        let log: Log = Default::default();
        let (r, w) = pipe();
        let io = Some((r, Interest::READ, pin(1, &log)));
        lp.park(1, fire_logger(&log, "old"), io, None).unwrap();
        let generation = lp.state.borrow().registry.generation(r).unwrap();
        // Closed behind the loop's back; a new pipe gets the same number.
        close(r);
        close(w);
        let (r2, w2) = pipe();
        assert_eq!(r2, r);
        let io = Some((r2, Interest::READ, pin(2, &log)));
        lp.park(2, fire_logger(&log, "new"), io, None).unwrap();
        // The close, reported late by the generation it closed.
        lp.shared().release_sink().request_release(r, generation);
        write_byte(w2);
        once(&lp);
        once(&lp);
        assert_eq!(*log.borrow(), ["old closed", "new io"], "{kind:?}");
        close(r2);
        close(w2);
    });
}

#[test]
fn a_hold_keeps_run_going_until_it_is_released() {
    let lp: TestLoop = Loop::new(BackendKind::Poll).unwrap();
    assert!(!lp.alive());
    lp.hold();
    assert!(lp.alive());
    let released = Rc::new(Cell::new(false));
    let r = released.clone();
    let key = lp.add_timer(
        Duration::from_millis(5),
        None,
        cb(move |lp, _| r.set(lp.release_hold())),
    );
    lp.timer_set_ref(key, false); // only the hold keeps `run` going
    lp.run(RunMode::Default, &mut Calls(&lp)).unwrap();
    assert!(released.get());
    assert!(!lp.alive());
    assert!(!lp.release_hold(), "one release per hold");
}
