//! Randomized operation sequences against the loop, checked against a
//! simple model: phase order, FIFO queues, no callback after cancel/remove,
//! one-shot watchers fire once, timers never early, and a readable pipe with
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
}

type Shared = Rc<RefCell<Seen>>;

fn record(seen: &Shared, what: What, oneshot: bool) -> Cb {
    let seen = seen.clone();
    cb(move |lp, _| {
        let mut seen = seen.borrow_mut();
        assert!(
            !seen.cancelled.contains(&what),
            "{what:?} fired after cancel"
        );
        if let What::Timer(id) = what {
            assert!(
                Instant::now() >= seen.deadlines[&id],
                "timer {id} fired early"
            );
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
        let iteration = lp.stats().iterations;
        seen.fired.push((iteration, what));
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
    let seen: Shared = Default::default();
    let mut pipes: Vec<Pipe> = (0..PIPES).map(|_| new_pipe()).collect();
    let mut timers: Vec<(usize, Key)> = Vec::new();
    // (id, key, pipe, oneshot), pruned to the active ones after each run
    let mut watchers: Vec<(usize, Key, usize, bool)> = Vec::new();
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
                timers.push((next_id, key));
            }
            Op::CancelTimer(i) if !timers.is_empty() => {
                let (id, key) = timers.remove(i % timers.len());
                lp.cancel_timer(key);
                seen.borrow_mut().cancelled.insert(What::Timer(id));
            }
            Op::Again { timer, delay_ms } if !timers.is_empty() => {
                let (id, key) = timers[timer % timers.len()];
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
                // The watchers go first (as DESIGN.md asks), then the pipe; the
                // new pipe most likely reuses both numbers.
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
