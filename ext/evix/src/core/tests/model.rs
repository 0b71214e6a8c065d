//! Randomized operation sequences against the loop, checked against a
//! simple model: phase order, FIFO queues, no callback after cancel/remove
//! (also when a timer callback cancels a timer due in the same phase),
//! one-shot watchers fire once, timers never early, a timer armed by a timer
//! callback waits for the next iteration, and a readable pipe with
//! an active watcher is always reported (the lazy kernel registrations must
//! never lose interest). `EVIX_PROPTEST_CASES` sets the number of cases
//! (CI: the default; `rake soak`: many more). The seed is fixed, so a
//! failure replays.

use super::*;
use crate::sys::testing::{drain, set_nonblocking};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use std::collections::{HashMap, HashSet};

const PIPES: usize = 3;

#[derive(Clone, Debug)]
enum Op {
    AddTimer {
        delay_ms: u64,
        repeat_ms: Option<u64>,
    },
    CancelTimer(usize),
    /// A one-shot timer whose callback cancels another timer and arms a
    /// zero-delay one.
    AddMeddler {
        delay_ms: u64,
        victim: usize,
    },
    Again {
        timer: usize,
        delay_ms: u64,
    },
    AddWatcher {
        pipe: usize,
        oneshot: bool,
    },
    CancelWatcher(usize),
    Write(usize),
    Drain(usize),
    Reopen(usize),
    NextTick,
    Defer,
    Run,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..4u64, proptest::option::of(1..3u64)).prop_map(|(delay_ms, repeat_ms)| Op::AddTimer {
            delay_ms,
            repeat_ms
        }),
        any::<usize>().prop_map(Op::CancelTimer),
        (0..4u64, any::<usize>())
            .prop_map(|(delay_ms, victim)| Op::AddMeddler { delay_ms, victim }),
        (any::<usize>(), 0..4u64).prop_map(|(timer, delay_ms)| Op::Again { timer, delay_ms }),
        (0..PIPES, any::<bool>()).prop_map(|(pipe, oneshot)| Op::AddWatcher { pipe, oneshot }),
        any::<usize>().prop_map(Op::CancelWatcher),
        (0..PIPES).prop_map(Op::Write),
        (0..PIPES).prop_map(Op::Drain),
        (0..PIPES).prop_map(Op::Reopen),
        Just(Op::NextTick),
        Just(Op::Defer),
        Just(Op::Run),
        Just(Op::Run),
    ]
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum What {
    Tick(usize),
    Defer(usize),
    Io(usize),
    Timer(usize),
}

impl What {
    fn phase(self) -> u8 {
        match self {
            What::Tick(_) => 0,
            What::Io(_) => 1,
            What::Timer(_) => 2,
            What::Defer(_) => 3,
        }
    }
}

/// What happened, as seen from the callbacks.
#[derive(Default)]
struct Seen {
    fired: Vec<(u64, What)>,
    cancelled: HashSet<What>,
    deadlines: HashMap<usize, Instant>,
    oneshot_fired: HashSet<usize>,
    /// Timers armed by timer callbacks: the iteration they were armed in.
    armed_in: HashMap<usize, u64>,
    /// Ids for timers armed by callbacks (apart from the ops' ids).
    spawned: usize,
}

type Shared = Rc<RefCell<Seen>>;
/// The active timers (id, key) the ops and the meddlers pick from.
type TimerList = Rc<RefCell<Vec<(usize, TimerKey)>>>;

fn record(seen: &Shared, what: What, oneshot: bool) -> Cb {
    let seen = seen.clone();
    cb(move |lp, _| {
        let mut seen = seen.borrow_mut();
        assert!(
            !seen.cancelled.contains(&what),
            "{what:?} fired after cancel"
        );
        let iteration = lp.stats().iterations;
        if let What::Timer(id) = what {
            assert!(
                Instant::now() >= seen.deadlines[&id],
                "timer {id} fired early"
            );
            if let Some(&armed) = seen.armed_in.get(&id) {
                assert!(
                    iteration > armed,
                    "timer {id} armed by a timer callback fired in the same iteration"
                );
            }
        }
        if oneshot {
            assert!(
                seen.oneshot_fired.insert(match what {
                    What::Io(id) => id,
                    _ => unreachable!(),
                }),
                "one-shot {what:?} fired twice"
            );
        }
        seen.fired.push((iteration, what));
    })
}

/// Timer `id`'s callback: records itself, cancels the `victim`th active
/// timer, and arms a zero-delay timer.
fn meddler(seen: &Shared, timers: &TimerList, id: usize, victim: usize) -> Cb {
    let recorder = record(seen, What::Timer(id), false);
    let (seen, timers) = (seen.clone(), timers.clone());
    cb(move |lp, fire| {
        (recorder.0)(lp, fire);
        let target = {
            let timers = timers.borrow();
            (!timers.is_empty()).then(|| timers[victim % timers.len()])
        };
        if let Some((other, key)) = target.filter(|&(other, _)| other != id) {
            lp.cancel_timer(key);
            seen.borrow_mut().cancelled.insert(What::Timer(other));
            timers.borrow_mut().retain(|&(t, _)| t != other);
        }
        let spawned = {
            let mut seen = seen.borrow_mut();
            seen.spawned += 1;
            let spawned = seen.spawned;
            let iteration = lp.stats().iterations;
            seen.armed_in.insert(spawned, iteration);
            seen.deadlines.insert(spawned, Instant::now());
            spawned
        };
        let key = lp.add_timer(
            Duration::ZERO,
            None,
            record(&seen, What::Timer(spawned), false),
        );
        timers.borrow_mut().push((spawned, key));
    })
}

struct Pipe {
    r: RawFd,
    w: RawFd,
    unread: bool,
}

fn new_pipe() -> Pipe {
    let (r, w) = pipe();
    set_nonblocking(r);
    Pipe {
        r,
        w,
        unread: false,
    }
}

fn run_case(kind: BackendKind, ops: &[Op]) {
    let lp: TestLoop = Loop::new(kind).unwrap();
    let seen: Shared = Rc::new(RefCell::new(Seen {
        spawned: 1_000_000,
        ..Seen::default()
    }));
    let mut pipes: Vec<Pipe> = (0..PIPES).map(|_| new_pipe()).collect();
    let timers: TimerList = Default::default();
    // (id, key, pipe, oneshot), pruned to the active ones after each run
    let mut watchers: Vec<(usize, WatcherKey, usize, bool)> = Vec::new();
    let (mut ticks, mut defers, mut next_id) = (0, 0, 0);
    for op in ops {
        match *op {
            Op::AddTimer {
                delay_ms,
                repeat_ms,
            } => {
                next_id += 1;
                let delay = Duration::from_millis(delay_ms);
                seen.borrow_mut()
                    .deadlines
                    .insert(next_id, Instant::now() + delay);
                let key = lp.add_timer(
                    delay,
                    repeat_ms.map(Duration::from_millis),
                    record(&seen, What::Timer(next_id), false),
                );
                timers.borrow_mut().push((next_id, key));
            }
            Op::AddMeddler { delay_ms, victim } => {
                next_id += 1;
                let delay = Duration::from_millis(delay_ms);
                seen.borrow_mut()
                    .deadlines
                    .insert(next_id, Instant::now() + delay);
                let key = lp.add_timer(delay, None, meddler(&seen, &timers, next_id, victim));
                timers.borrow_mut().push((next_id, key));
            }
            Op::CancelTimer(i) if !timers.borrow().is_empty() => {
                let (id, key) = {
                    let mut timers = timers.borrow_mut();
                    let len = timers.len();
                    timers.remove(i % len)
                };
                lp.cancel_timer(key);
                seen.borrow_mut().cancelled.insert(What::Timer(id));
            }
            Op::Again { timer, delay_ms } if !timers.borrow().is_empty() => {
                let (id, key) = {
                    let timers = timers.borrow();
                    timers[timer % timers.len()]
                };
                let delay = Duration::from_millis(delay_ms);
                // Read the clock before the loop does: the model's deadline
                // must not be later than the loop's.
                let deadline = Instant::now() + delay;
                if lp.timer_again(key, delay) {
                    seen.borrow_mut().deadlines.insert(id, deadline);
                }
            }
            Op::AddWatcher { pipe, oneshot } => {
                next_id += 1;
                let key = lp
                    .add_watcher(
                        pipes[pipe].r,
                        Interest::READ,
                        oneshot,
                        record(&seen, What::Io(next_id), oneshot),
                        None,
                    )
                    .unwrap();
                watchers.push((next_id, key, pipe, oneshot));
            }
            Op::CancelWatcher(i) if !watchers.is_empty() => {
                let (id, key, _, _) = watchers.remove(i % watchers.len());
                lp.cancel_watcher(key);
                seen.borrow_mut().cancelled.insert(What::Io(id));
            }
            Op::Write(p) => {
                write_byte(pipes[p].w);
                pipes[p].unread = true;
            }
            Op::Drain(p) => {
                drain(pipes[p].r);
                pipes[p].unread = false;
            }
            Op::Reopen(p) => {
                // The watchers go first (a closed fd must not keep watchers: the
                // loop never closes one for you), then the pipe; the new pipe
                // most likely reuses both numbers.
                let mut seen = seen.borrow_mut();
                watchers.retain(|&(id, key, pipe, _)| {
                    if pipe == p {
                        lp.cancel_watcher(key);
                        seen.cancelled.insert(What::Io(id));
                    }
                    pipe != p
                });
                close(pipes[p].r);
                close(pipes[p].w);
                pipes[p] = new_pipe();
            }
            Op::NextTick => {
                ticks += 1;
                lp.next_tick(record(&seen, What::Tick(ticks), false));
            }
            Op::Defer => {
                defers += 1;
                lp.defer(record(&seen, What::Defer(defers), false));
            }
            Op::Run => {
                let before = seen.borrow().fired.len();
                let iteration = lp.stats().iterations + 1;
                once(&lp);
                let seen = seen.borrow();
                let this: Vec<What> = seen.fired[before..].iter().map(|&(_, w)| w).collect();
                check_iteration(&this);
                // Level-triggered: every active watcher on a pipe with unread
                // data was called in this iteration.
                for &(id, _, pipe, _) in &watchers {
                    if pipes[pipe].unread {
                        assert!(
                            seen.fired
                                .iter()
                                .any(|&(it, w)| it == iteration && w == What::Io(id)),
                            "{kind:?}: watcher {id} on a readable pipe was not called"
                        );
                    }
                }
                watchers.retain(|&(_, key, _, _)| lp.watcher_active(key));
            }
            _ => {}
        }
    }
    let seen = seen.borrow();
    let ticks_fired: Vec<usize> = seen
        .fired
        .iter()
        .filter_map(|&(_, w)| if let What::Tick(n) = w { Some(n) } else { None })
        .collect();
    assert!(
        ticks_fired.windows(2).all(|w| w[0] < w[1]),
        "immediates in FIFO order"
    );
    let defers_fired: Vec<usize> = seen
        .fired
        .iter()
        .filter_map(|&(_, w)| {
            if let What::Defer(n) = w {
                Some(n)
            } else {
                None
            }
        })
        .collect();
    assert!(
        defers_fired.windows(2).all(|w| w[0] < w[1]),
        "deferred in FIFO order"
    );
    drop(seen);
    lp.close();
    for p in pipes {
        close(p.r);
        close(p.w);
    }
}

/// Within one iteration callbacks come phase by phase.
fn check_iteration(fired: &[What]) {
    assert!(
        fired.windows(2).all(|w| w[0].phase() <= w[1].phase()),
        "phase order broken: {fired:?}"
    );
}

#[test]
fn random_operation_sequences_match_the_model() {
    let cases = std::env::var("EVIX_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    for &kind in BackendKind::available() {
        let config = Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        };
        let rng = TestRng::deterministic_rng(RngAlgorithm::ChaCha);
        let mut runner = TestRunner::new_with_rng(config, rng);
        runner
            .run(&proptest::collection::vec(op(), 1..80), |ops| {
                run_case(kind, &ops);
                Ok(())
            })
            .unwrap();
    }
}
