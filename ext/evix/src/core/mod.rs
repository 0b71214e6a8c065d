//! The loop: queues, timers and watchers, and `run_once` as a flat list of
//! phases (docs/architecture.md, "One iteration of the loop"). No Ruby here: callbacks are an opaque `C` that a
//! [`Driver`] knows how to call, so `cargo test` runs all of this without Ruby.
//!
//! No `RefCell` borrow is held while a callback runs or while the backend
//! blocks, so callbacks may call back into the loop and a garbage collector
//! may walk the callbacks from another thread at any time.

pub mod closing;
pub mod lines;
pub mod pulse;
mod registry;
mod shared;
mod slab;
mod timers;
mod waiters;

pub use pulse::Pulse;
pub use registry::{FdOwner, WatcherKey};
pub use shared::{Closed, LoopWaker, Shared};
pub use timers::TimerKey;
pub use waiters::WaitKey;

use crate::sys::{Backend, BackendKind, Event, Interest, WAKER_TOKEN};
use registry::Registry;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::io;
use std::os::unix::io::RawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};
use timers::{deadline_after, TimerPhase, Timers};
use waiters::Waiters;

/// Why a callback is called.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fire {
    Immediate,
    Io(Interest),
    Timer,
    Deferred,
    /// A waiter's fd was released or closed while it waited.
    Closed,
}

/// What a watcher or timer holds: a callback, or the wait it ends.
#[derive(Clone, Debug)]
enum Slot<C> {
    Call(C),
    Wake(WaitKey),
}

impl<C> Slot<C> {
    fn call(&self) -> Option<&C> {
        match self {
            Slot::Call(callback) => Some(callback),
            Slot::Wake(_) => None,
        }
    }
}

/// What a parked waiter waits for (`Loop::wait_of`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitOf {
    /// The fd and interest of its one-shot watcher.
    pub io: Option<(RawFd, Interest)>,
    /// When its timeout ends the wait.
    pub deadline: Option<Instant>,
}

/// What `park` did.
#[derive(Debug)]
pub enum Parked<C> {
    /// Parked under this key until a trigger, `wake` or a release ends it.
    Waiting(WaitKey),
    /// Not parked: an end of wait (a cancellation) was pending for the owner.
    Pending(C),
}

/// How `run` iterates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunMode {
    /// Until `stop` or until nothing referenced is left.
    Default,
    /// One iteration, blocking if needed.
    Once,
    /// One iteration that never blocks.
    NoWait,
}

#[derive(Debug)]
pub enum RunError<E> {
    /// A callback (or the driver's blocking wait) failed.
    Callback(E),
    /// The backend failed.
    Io(io::Error),
    /// `run` was called from inside a callback of the same loop.
    Reentered,
    Closed,
}

/// Calls callbacks and blocks in the backend on behalf of the loop.
pub trait Driver<C> {
    type Error;

    fn invoke(&mut self, callback: C, fire: Fire) -> Result<(), Self::Error>;

    /// A hint that `callback` is about to be invoked: start loading what
    /// invoking it will read at `level` of indirection (0: the callback's
    /// own object; 1: what that points to, which level 0 has loaded by
    /// now). It runs while the loop's state is borrowed, so it must not
    /// call into the loop or into anything that may run a garbage collector.
    /// The default does nothing.
    fn prefetch(&self, callback: &C, level: usize) {
        let _ = (callback, level);
    }

    /// Whether blocking costs much more than a non-blocking poll (the Ruby
    /// driver releases the GVL to block), so the loop should look first.
    fn blocking_is_costly(&self) -> bool {
        false
    }

    /// Runs `wait`, which may block; `waker` interrupts it from another thread.
    /// It may also return without calling `wait` (the Ruby driver does when an
    /// interrupt is pending). It must not run callbacks or anything else that
    /// may call into the loop: the backend is borrowed meanwhile. The default
    /// simply calls it.
    fn block(
        &mut self,
        waker: &LoopWaker,
        wait: &mut dyn FnMut() -> io::Result<()>,
    ) -> Result<io::Result<()>, Self::Error> {
        let _ = waker;
        Ok(wait())
    }

    /// Called after a blocking wait, with nothing borrowed: where the Ruby
    /// driver runs what interrupted the wait (trap handlers, Thread#raise),
    /// which may call into the loop. The default does nothing.
    fn after_block(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    pub immediates: usize,
    pub deferred: usize,
    pub timers: usize,
    pub watchers: usize,
    pub waiters: usize,
    pub iterations: u64,
    /// Times the backend was rebuilt to drop a stale kernel registration.
    pub rebuilds: u64,
}

#[derive(Debug)]
struct State<C> {
    immediates: VecDeque<C>,
    deferred: VecDeque<C>,
    timers: Timers<Slot<C>>,
    registry: Registry<Slot<C>>,
    waiters: Waiters<C>,
    /// Waiters whose fd was released or closed: resumed with
    /// [`Fire::Closed`] at the start of the next immediates phase.
    closed: VecDeque<C>,
    iterations: u64,
    rebuilds: u64,
}

impl<C: Clone> State<C> {
    /// Ends the wait under `key` and cancels its other trigger; the waiter's
    /// resume callback, or `None` if the wait already ended.
    fn unpark(&mut self, key: WaitKey) -> Option<C> {
        let waiter = self.waiters.unpark(key)?;
        if let Some(watcher) = waiter.watcher {
            self.registry.remove(watcher);
        }
        if let Some(timer) = waiter.timer {
            self.timers.cancel(timer);
        }
        Some(waiter.resume)
    }

    /// A slot that fired: its callback, or the resume callback of the wait it
    /// ends (`None` if that wait already ended).
    fn fired(&mut self, slot: Slot<C>) -> Option<C> {
        match slot {
            Slot::Call(callback) => Some(callback),
            Slot::Wake(key) => self.unpark(key),
        }
    }

    /// Wakes with [`Fire::Closed`] the waiters among `slots` (the watchers of
    /// a released or closed fd); plain callbacks are dropped.
    fn close_waits(&mut self, slots: Vec<Slot<C>>) {
        for slot in slots {
            if let Slot::Wake(key) = slot {
                if let Some(resume) = self.unpark(key) {
                    self.closed.push_back(resume);
                }
            }
        }
    }

    fn take_orphans(&mut self) {
        if self.registry.has_orphans() {
            let orphans = self.registry.take_orphans();
            self.close_waits(orphans);
        }
    }
}

#[derive(Debug)]
struct Poller {
    backend: Option<Backend>,
    events: Vec<Event>,
    /// Whether the next blocking wait is preceded by a non-blocking look
    /// (see `wait_in_backend`).
    look_first: bool,
}

#[derive(Debug)]
pub struct Loop<C> {
    state: RefCell<State<C>>,
    poller: RefCell<Poller>,
    shared: Arc<Shared<C>>,
    /// Read by stall watchdogs on other threads (see `pulse`).
    pulse: Arc<Pulse>,
    kind: BackendKind,
    running: Cell<bool>,
    stop: Cell<bool>,
    /// Outside work the loop waits for (see `hold`).
    holds: Cell<usize>,
}

impl<C> Drop for Loop<C> {
    fn drop(&mut self) {
        // A loop collected without `close`: its watchdogs stop too.
        self.pulse.end();
    }
}

/// Clears the running flag however `run` ends.
struct Running<'a>(&'a Cell<bool>);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.set(false);
    }
}

impl<C: Clone> Loop<C> {
    pub fn new(kind: BackendKind) -> io::Result<Loop<C>> {
        let mut backend = Backend::new(kind)?;
        let shared = Arc::new(Shared::new()?);
        let waker_fd = shared.waker.fd().expect("a new waker is open");
        backend.register(waker_fd, WAKER_TOKEN, Interest::READ)?;
        Ok(Loop {
            state: RefCell::new(State {
                immediates: VecDeque::new(),
                deferred: VecDeque::new(),
                timers: Timers::default(),
                registry: Registry::default(),
                waiters: Waiters::default(),
                closed: VecDeque::new(),
                iterations: 0,
                rebuilds: 0,
            }),
            poller: RefCell::new(Poller {
                backend: Some(backend),
                events: Vec::with_capacity(1024),
                look_first: true,
            }),
            shared,
            pulse: Arc::default(),
            kind,
            running: Cell::new(false),
            stop: Cell::new(false),
            holds: Cell::new(0),
        })
    }

    pub fn kind(&self) -> BackendKind {
        self.kind
    }

    /// The thread-safe part, for `post`/`wakeup` from other threads.
    pub fn shared(&self) -> &Arc<Shared<C>> {
        &self.shared
    }

    pub fn is_closed(&self) -> bool {
        self.shared.is_closed()
    }

    /// What the driver marks each callback on, for stall watchdogs.
    pub fn pulse(&self) -> &Arc<Pulse> {
        &self.pulse
    }

    pub fn is_running(&self) -> bool {
        self.running.get()
    }

    pub fn next_tick(&self, callback: C) {
        self.state.borrow_mut().immediates.push_back(callback);
    }

    pub fn defer(&self, callback: C) {
        self.state.borrow_mut().deferred.push_back(callback);
    }

    pub fn add_timer(&self, delay: Duration, interval: Option<Duration>, callback: C) -> TimerKey {
        let deadline = deadline_after(Instant::now(), delay);
        self.state
            .borrow_mut()
            .timers
            .add(deadline, interval, Slot::Call(callback))
    }

    /// Moves an active timer to now + `delay`; `false` if it is not active.
    pub fn timer_again(&self, key: TimerKey, delay: Duration) -> bool {
        let deadline = deadline_after(Instant::now(), delay);
        self.state.borrow_mut().timers.again(key, deadline)
    }

    /// Cancels a timer; `false` if it was not active.
    pub fn cancel_timer(&self, key: TimerKey) -> bool {
        // Drop the callback only after the borrow ends (dropping may run code).
        let removed = self.state.borrow_mut().timers.cancel(key);
        removed.is_some()
    }

    pub fn timer_active(&self, key: TimerKey) -> bool {
        self.state.borrow().timers.is_active(key)
    }

    pub fn timer_set_ref(&self, key: TimerKey, referenced: bool) {
        self.state.borrow_mut().timers.set_ref(key, referenced);
    }

    pub fn add_watcher(
        &self,
        fd: RawFd,
        interest: Interest,
        oneshot: bool,
        callback: C,
        owner: Option<FdOwner<C>>,
    ) -> io::Result<WatcherKey> {
        self.watch(fd, interest, oneshot, Slot::Call(callback), owner)
    }

    fn watch(
        &self,
        fd: RawFd,
        interest: Interest,
        oneshot: bool,
        slot: Slot<C>,
        owner: Option<FdOwner<C>>,
    ) -> io::Result<WatcherKey> {
        let mut poller = self.poller.borrow_mut();
        let backend = poller.backend.as_mut().ok_or_else(closed_error)?;
        let mut state = self.state.borrow_mut();
        let before = state.registry.generation(fd);
        let owner = owner.map(|owner| FdOwner {
            id: owner.id,
            keep: Slot::Call(owner.keep),
        });
        let added = state
            .registry
            .add(backend, fd, interest, oneshot, slot, owner);
        state.take_orphans();
        let after = state.registry.generation(fd);
        drop(state);
        if let (Ok(_), Some(generation)) = (&added, after) {
            if before != after {
                closing::note(fd, &self.shared.release_sink(), generation);
            }
        }
        added
    }

    /// Parks `owner` (one wait at a time each) until `resume` is called by
    /// whichever comes first: `io` ready (a one-shot watcher for the fd and
    /// interest), `timeout`, [`Loop::unpark`], or the fd's release. Unless an
    /// end of wait is pending for the owner: then nothing is parked.
    pub fn park(
        &self,
        owner: u64,
        resume: C,
        io: Option<(RawFd, Interest, Option<FdOwner<C>>)>,
        timeout: Option<Duration>,
    ) -> io::Result<Parked<C>> {
        let key = {
            let mut state = self.state.borrow_mut();
            if let Some(pending) = state.waiters.take_pending(owner) {
                return Ok(Parked::Pending(pending));
            }
            state.waiters.park(owner, resume)
        };
        let watcher = match io {
            None => None,
            Some((fd, interest, fd_owner)) => {
                match self.watch(fd, interest, true, Slot::Wake(key), fd_owner) {
                    Ok(watcher) => Some(watcher),
                    Err(e) => {
                        self.state.borrow_mut().waiters.unpark(key);
                        return Err(e);
                    }
                }
            }
        };
        let mut state = self.state.borrow_mut();
        let deadline = timeout.map(|delay| deadline_after(Instant::now(), delay));
        let timer = deadline.map(|deadline| state.timers.add(deadline, None, Slot::Wake(key)));
        state.waiters.attach(key, watcher, timer, deadline);
        Ok(Parked::Waiting(key))
    }

    /// Ends the wait under `key` (its watcher and timer are cancelled): its
    /// resume callback, for the caller to call; `None` if it already ended.
    pub fn unpark(&self, key: WaitKey) -> Option<C> {
        self.state.borrow_mut().unpark(key)
    }

    /// The wait `owner` is parked in, if any.
    pub fn parked(&self, owner: u64) -> Option<WaitKey> {
        self.state.borrow_mut().waiters.parked(owner)
    }

    /// What `owner` is parked on, if it is parked.
    pub fn wait_of(&self, owner: u64) -> Option<WaitOf> {
        let mut state = self.state.borrow_mut();
        let key = state.waiters.parked(owner)?;
        let waiter = state.waiters.get(key)?;
        let (watcher, deadline) = (waiter.watcher, waiter.deadline);
        Some(WaitOf {
            io: watcher.and_then(|watcher| state.registry.watched(watcher)),
            deadline,
        })
    }

    /// Whether `owner` is parked (cheap for the one that parked last).
    pub fn is_parked(&self, owner: u64) -> bool {
        self.state.borrow_mut().waiters.is_parked(owner)
    }

    /// Keeps `end` for `owner`'s next `park`, which returns it instead of
    /// parking (a cancellation of an owner that is running).
    pub fn set_pending(&self, owner: u64, end: C) {
        self.state.borrow_mut().waiters.set_pending(owner, end);
    }

    /// Forgets `fd` and removes its watchers before its owner closes it;
    /// the fibers waiting on it are resumed with [`Fire::Closed`].
    pub fn release_fd(&self, fd: RawFd) {
        let mut poller = self.poller.borrow_mut();
        if let Some(backend) = poller.backend.as_mut() {
            let mut state = self.state.borrow_mut();
            let removed = state.registry.release(backend, fd);
            state.close_waits(removed);
        }
    }

    /// The file `fd` was registered for under `generation` was closed
    /// (reported by another thread, or by `IO#close` of any IO object): see
    /// `Registry::release_generation`.
    fn release_closed(&self, fd: RawFd, generation: u32) {
        let mut poller = self.poller.borrow_mut();
        let Some(backend) = poller.backend.as_mut() else {
            return;
        };
        let mut state = self.state.borrow_mut();
        let removed = state.registry.release_generation(backend, fd, generation);
        state.close_waits(removed);
    }

    /// Removes a watcher; `false` if it was not active. Never an error, even
    /// when the fd was closed already.
    pub fn cancel_watcher(&self, key: WatcherKey) -> bool {
        let removed = self.state.borrow_mut().registry.remove(key);
        removed.is_some()
    }

    pub fn watcher_active(&self, key: WatcherKey) -> bool {
        self.state.borrow().registry.is_active(key)
    }

    pub fn watcher_set_ref(&self, key: WatcherKey, referenced: bool) {
        self.state.borrow_mut().registry.set_ref(key, referenced);
    }

    /// Asks `run` to return after the current iteration.
    pub fn stop(&self) {
        self.stop.set(true);
    }

    /// Keeps the loop alive, as a referenced timer would, for work done
    /// elsewhere that will `post` back (a job on another thread), until the
    /// matching [`Loop::release_hold`].
    pub fn hold(&self) {
        self.holds.set(self.holds.get() + 1);
    }

    /// Ends one [`Loop::hold`]; `false` if none was held.
    pub fn release_hold(&self) -> bool {
        let holds = self.holds.get();
        self.holds.set(holds.saturating_sub(1));
        holds > 0
    }

    /// Anything referenced left: immediates, deferred or posted callbacks,
    /// referenced timers or watchers, holds.
    pub fn alive(&self) -> bool {
        let state = self.state.borrow();
        !state.immediates.is_empty()
            || !state.closed.is_empty()
            || !state.deferred.is_empty()
            || state.timers.referenced() > 0
            || state.registry.referenced() > 0
            || self.shared.has_work()
            || self.holds.get() > 0
    }

    pub fn stats(&self) -> Stats {
        let state = self.state.borrow();
        Stats {
            immediates: state.immediates.len() + self.shared.posts_len(),
            deferred: state.deferred.len(),
            timers: state.timers.len(),
            watchers: state.registry.len(),
            waiters: state.waiters.len(),
            iterations: state.iterations,
            rebuilds: state.rebuilds,
        }
    }

    /// Visits every callback the loop holds (for a garbage collector's mark).
    /// Returns `false` if the state was busy and could not be visited.
    pub fn for_each_callback(&self, mut f: impl FnMut(&C)) -> bool {
        let Ok(state) = self.state.try_borrow() else {
            return false;
        };
        state.immediates.iter().for_each(&mut f);
        state.closed.iter().for_each(&mut f);
        state.deferred.iter().for_each(&mut f);
        state
            .timers
            .callbacks()
            .filter_map(Slot::call)
            .for_each(&mut f);
        state
            .registry
            .callbacks()
            .filter_map(Slot::call)
            .for_each(&mut f);
        state.waiters.callbacks().for_each(&mut f);
        self.shared.for_each_post(&mut f);
        true
    }

    /// Drops every callback and closes the backend and waker.
    pub fn close(&self) {
        self.pulse.end();
        self.shared.close();
        self.poller.borrow_mut().backend = None;
        let mut state = self.state.borrow_mut();
        let dropped = (
            std::mem::take(&mut state.immediates),
            std::mem::take(&mut state.deferred),
            std::mem::take(&mut state.closed),
            state.waiters.clear(),
        );
        state.timers.clear();
        state.registry.clear();
        drop(state);
        drop(dropped);
    }

    pub fn run<D: Driver<C>>(
        &self,
        mode: RunMode,
        driver: &mut D,
    ) -> Result<bool, RunError<D::Error>> {
        let _running = self.enter::<D::Error>()?;
        let result = match mode {
            RunMode::Default => loop {
                if self.stop.get() || !self.alive() {
                    break Ok(());
                }
                if let Err(e) = self.iterate(driver, None, false) {
                    break Err(e);
                }
            },
            RunMode::Once => self.iterate(driver, None, false),
            RunMode::NoWait => self.iterate(driver, Some(Duration::ZERO), true),
        };
        self.stop.set(false);
        result.map(|()| self.alive())
    }

    /// One iteration, blocking at most `timeout` (`None`: as long as needed).
    pub fn run_once<D: Driver<C>>(
        &self,
        timeout: Option<Duration>,
        driver: &mut D,
    ) -> Result<bool, RunError<D::Error>> {
        let _running = self.enter::<D::Error>()?;
        let result = self.iterate(driver, timeout, timeout == Some(Duration::ZERO));
        self.stop.set(false);
        result.map(|()| self.alive())
    }

    fn enter<E>(&self) -> Result<Running<'_>, RunError<E>> {
        if self.is_closed() {
            return Err(RunError::Closed);
        }
        if self.running.replace(true) {
            return Err(RunError::Reentered);
        }
        Ok(Running(&self.running))
    }

    fn iterate<D: Driver<C>>(
        &self,
        driver: &mut D,
        limit: Option<Duration>,
        nowait: bool,
    ) -> Result<(), RunError<D::Error>> {
        self.run_immediates(driver)?;
        let timeout = self.compute_timeout(limit, nowait);
        self.poll(driver, timeout)?;
        self.run_io(driver)?;
        self.run_timers(driver)?;
        self.run_deferred(driver)
    }

    /// Phase 1: what was queued (or posted) before the phase began; first
    /// the waiters whose fd was released or closed.
    fn run_immediates<D: Driver<C>>(&self, driver: &mut D) -> Result<(), RunError<D::Error>> {
        for (fd, generation) in self.shared.take_releases() {
            self.release_closed(fd, generation);
        }
        let closed = self.state.borrow().closed.len();
        self.drain(driver, closed, |state| &mut state.closed, Fire::Closed)?;
        let count = {
            let mut state = self.state.borrow_mut();
            state.iterations += 1;
            self.shared.take_posts(&mut state.immediates);
            state.immediates.len()
        };
        self.drain(
            driver,
            count,
            |state| &mut state.immediates,
            Fire::Immediate,
        )
    }

    /// Calls, with `fire`, the first `count` callbacks of the queue `queue`
    /// picks; what they queue meanwhile waits for the next iteration. No
    /// borrow is held while a callback runs.
    fn drain<D: Driver<C>>(
        &self,
        driver: &mut D,
        count: usize,
        queue: fn(&mut State<C>) -> &mut VecDeque<C>,
        fire: Fire,
    ) -> Result<(), RunError<D::Error>> {
        for _ in 0..count {
            let next = queue(&mut self.state.borrow_mut()).pop_front();
            let Some(callback) = next else { break };
            driver.invoke(callback, fire).map_err(RunError::Callback)?;
        }
        Ok(())
    }

    /// Phase 2: 0 when work is pending or `stop` was asked, else time to the
    /// earliest timer, capped by `limit`. With nothing referenced and no
    /// `limit` there is nothing to wait for; an explicit `limit` still waits
    /// (for a `post` or `wakeup`, say).
    fn compute_timeout(&self, limit: Option<Duration>, nowait: bool) -> Option<Duration> {
        if nowait || self.stop.get() || (limit.is_none() && !self.alive()) {
            return Some(Duration::ZERO);
        }
        let mut state = self.state.borrow_mut();
        if !state.immediates.is_empty()
            || !state.closed.is_empty()
            || !state.deferred.is_empty()
            || self.shared.has_work()
        {
            return Some(Duration::ZERO);
        }
        let until_timer = state
            .timers
            .earliest()
            .map(|deadline| deadline.saturating_duration_since(Instant::now()));
        match (limit, until_timer) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Phase 3: wait in the backend. The driver blocks only if `timeout` != 0
    /// and a non-blocking look found nothing ready: under load something
    /// usually is, and blocking (releasing Ruby's GVL) costs far more than
    /// that look. Once a look finds nothing, the loop is keeping up and the
    /// looks are skipped until a blocking wait returns several events at
    /// once: at a low rate each look would be one more `epoll_wait` per event.
    fn poll<D: Driver<C>>(
        &self,
        driver: &mut D,
        timeout: Option<Duration>,
    ) -> Result<(), RunError<D::Error>> {
        let blocked = self.wait_in_backend(driver, timeout)?;
        if blocked {
            // What interrupted the wait (a trap handler...) may call into the
            // loop: it runs here, with nothing borrowed.
            driver.after_block().map_err(RunError::Callback)?;
        }
        Ok(())
    }

    /// The backend wait of `poll`; `true` if the driver blocked.
    fn wait_in_backend<D: Driver<C>>(
        &self,
        driver: &mut D,
        timeout: Option<Duration>,
    ) -> Result<bool, RunError<D::Error>> {
        let mut poller = self.poller.borrow_mut();
        let Poller {
            backend,
            events,
            look_first,
        } = &mut *poller;
        let backend = backend.as_mut().ok_or(RunError::<D::Error>::Closed)?;
        if *look_first && timeout != Some(Duration::ZERO) && driver.blocking_is_costly() {
            backend
                .wait(events, Some(Duration::ZERO))
                .map_err(RunError::Io)?;
            if !events.is_empty() {
                return Ok(false);
            }
            *look_first = false;
        }
        if timeout == Some(Duration::ZERO) || !self.shared.prepare_block() {
            backend
                .wait(events, Some(Duration::ZERO))
                .map_err(RunError::Io)?;
            return Ok(false);
        }
        // The driver may return without calling the wait (the Ruby one does
        // when an interrupt is pending): the last wait's events are spent.
        events.clear();
        let outcome = driver.block(&self.shared.waker, &mut || backend.wait(events, timeout));
        self.shared.after_block();
        *look_first = events.len() > 1;
        outcome.map_err(RunError::Callback)?.map_err(RunError::Io)?;
        Ok(true)
    }

    /// Phase 4: dispatch the events of this poll.
    fn run_io<D: Driver<C>>(&self, driver: &mut D) -> Result<(), RunError<D::Error>> {
        {
            let mut poller = self.poller.borrow_mut();
            let Poller {
                backend, events, ..
            } = &mut *poller;
            let backend = backend.as_mut().ok_or(RunError::<D::Error>::Closed)?;
            let ingested = {
                let mut state = self.state.borrow_mut();
                let ingested = state.registry.ingest(backend, events);
                state.take_orphans();
                ingested
            };
            if ingested.woken {
                self.shared.waker.drain();
            }
            if ingested.stale {
                self.rebuild_backend(backend).map_err(RunError::Io)?;
            }
        }
        loop {
            let next = {
                let mut state = self.state.borrow_mut();
                loop {
                    let Some((slot, ready)) = state.registry.next_ready() else {
                        break None;
                    };
                    if let Some(callback) = state.fired(slot) {
                        break Some((callback, ready));
                    }
                }
            };
            let Some((callback, ready)) = next else { break };
            driver
                .invoke(callback, Fire::Io(ready))
                .map_err(RunError::Callback)?;
        }
        Ok(())
    }

    /// Replaces the backend with a fresh one holding only live registrations:
    /// the one way to drop a stale kernel registration (see `Ingested::stale`).
    fn rebuild_backend(&self, backend: &mut Backend) -> io::Result<()> {
        let mut fresh = Backend::new(backend.kind())?;
        let waker_fd = self.shared.waker.fd().expect("an open loop has a waker");
        fresh.register(waker_fd, WAKER_TOKEN, Interest::READ)?;
        self.state.borrow_mut().registry.register_all(&mut fresh);
        *backend = fresh;
        self.state.borrow_mut().rebuilds += 1;
        Ok(())
    }

    /// Phase 5: due timers, fired in batches (see [`TimerPhase`]).
    fn run_timers<D: Driver<C>>(&self, driver: &mut D) -> Result<(), RunError<D::Error>> {
        let Some(mut phase) = TimerPhase::begin(&self.state, |state| &mut state.timers) else {
            return Ok(());
        };
        while let Some(callback) = phase.next(
            |slot, level| {
                if let Some(callback) = slot.call() {
                    driver.prefetch(callback, level);
                }
            },
            |state, slot| state.fired(slot),
        ) {
            driver
                .invoke(callback, Fire::Timer)
                .map_err(RunError::Callback)?;
        }
        Ok(())
    }

    /// Phase 6: deferred callbacks queued before the phase began.
    fn run_deferred<D: Driver<C>>(&self, driver: &mut D) -> Result<(), RunError<D::Error>> {
        let count = self.state.borrow().deferred.len();
        self.drain(driver, count, |state| &mut state.deferred, Fire::Deferred)
    }
}

fn closed_error() -> io::Error {
    io::Error::new(io::ErrorKind::NotConnected, "loop is closed")
}

#[cfg(test)]
mod tests;
