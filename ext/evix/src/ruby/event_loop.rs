//! `Evix::Loop`: the Rust loop core as a Ruby object.

use super::driver::{owner_of, Callback, RubyDriver, Switch};
use super::handle::Owner;
use super::helpers::{args, capi, errors};
use super::timer::RbTimer;
use super::watcher::RbWatcher;
use crate::core::{Driver, FdOwner, Fire, Loop, Parked, RunError, RunMode, WaitKey};
use crate::sys::Interest;
use crate::sys::{fork, BackendKind};
use magnus::rb_sys::AsRawValue;
use magnus::{
    block::Proc, function, gc::Marker, method, prelude::*, scan_args, typed_data::Obj,
    value::LazyId, value::Opaque, DataTypeFunctions, Error, Fiber, IntoValue, RFile, RHash,
    RModule, Ruby, Symbol, TryConvert, TypedData, Value,
};
use std::cell::Cell;
use std::io;
use std::os::unix::io::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

static NEXT_THREAD: AtomicU64 = AtomicU64::new(1);

// Interned once: calling a method by `&str` interns its name on every call.
static TO_IO: LazyId = LazyId::new("to_io");
static CLOSED: LazyId = LazyId::new("closed?");
static FILENO: LazyId = LazyId::new("fileno");
static REPEAT: LazyId = LazyId::new("repeat");
static BACKEND: LazyId = LazyId::new("backend");
static CLOSED_OUTCOME: LazyId = LazyId::new("closed");

/// `IO#reopen` calls so far, process-wide: part of every pin's identity,
/// because a reopen puts another file under the same IO object and fd.
static REOPENS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static THREAD: u64 = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
}

fn current_thread() -> u64 {
    THREAD.with(|id| *id)
}

/// Not write-barrier protected, on purpose: the loop stores Ruby objects
/// (blocks, fibers, IOs) on every `wait_io`, `next_tick`, `add_timer`...,
/// and a barrier per store costs more than what it saves. The GC treats a
/// WB-unprotected object as possibly pointing at anything young, so it runs
/// `mark` on every minor GC too, and `mark` reaches everything the loop holds.
#[derive(TypedData)]
#[magnus(class = "Evix::Loop", free_immediately, size, mark)]
pub struct RbLoop {
    core: Loop<Callback>,
    /// The thread the loop belongs to; 0 until one uses it (see `disown`).
    owner: Cell<u64>,
    fork_generation: u64,
    /// The fiber a parked fiber switches to: the one running `run`/`run_once`
    /// (or starting a fiber with `start` while the loop is not running).
    home: Cell<Option<Opaque<Fiber>>>,
    /// A fiber being started by another fiber of the loop (`start`), and
    /// that starter: the new fiber's first wait switches back to the starter
    /// rather than to `home`, so `Fiber.schedule` returns as soon as the new
    /// fiber waits, without a turn of the loop.
    starter: Cell<Option<(Opaque<Fiber>, Opaque<Fiber>)>>,
    /// Descriptors the loop owns besides its backend: its waker's, and the
    /// signal pipe's read end. `add_io`, `wait_io` and `release_io` refuse them.
    waker_fd: RawFd,
    reserved: Cell<RawFd>,
}

impl DataTypeFunctions for RbLoop {
    fn mark(&self, marker: &Marker) {
        let visited = self
            .core
            .for_each_callback(|callback| callback.mark(marker));
        debug_assert!(visited, "loop state borrowed during GC mark");
        if let Some(home) = self.home.get() {
            marker.mark(home);
        }
        if let Some((fiber, starter)) = self.starter.get() {
            marker.mark(fiber);
            marker.mark(starter);
        }
    }
}

/// Sets a loop's home fiber for a scope, restoring the previous one after.
struct Home<'a> {
    home: &'a Cell<Option<Opaque<Fiber>>>,
    previous: Option<Opaque<Fiber>>,
}

impl<'a> Home<'a> {
    fn enter(home: &'a Cell<Option<Opaque<Fiber>>>, fiber: Fiber) -> Home<'a> {
        let previous = home.replace(Some(fiber.into()));
        Home { home, previous }
    }
}

impl Drop for Home<'_> {
    fn drop(&mut self) {
        self.home.set(self.previous);
    }
}

/// The exception a pending end of wait (a cancellation) carries.
fn pending_error(ruby: &Ruby, end: Callback) -> Error {
    end.exception(ruby)
        .and_then(magnus::Exception::from_value)
        .map_or_else(
            || errors::evix(ruby, "a pending end of wait that is not an exception"),
            Error::from,
        )
}

/// How a fiber's wait on an fd ended (`RbLoop::park_io`); each caller
/// turns it into what its own contract says (`Loop#wait_io`: bits, nil,
/// Evix::ClosedError, Errno; the scheduler's hooks: events, false, IOError,
/// -errno).
pub(super) enum IoOutcome {
    /// The fd is ready for these of the interests.
    Ready(Interest),
    TimedOut,
    /// The fd was released or closed meanwhile.
    Closed,
    /// The kernel refused the fd's registration: nothing was parked.
    Refused(io::Error),
    /// Code switched to the fiber by hand (`Fiber#transfer`) with this value.
    Other(Value),
}

impl IoOutcome {
    /// What the driver resumed the fiber with: the ready bits, nil (the
    /// timer) or `:closed` (see `RubyDriver`).
    fn of(ruby: &Ruby, ended: Value) -> IoOutcome {
        if ended.is_nil() {
            return IoOutcome::TimedOut;
        }
        if let Some(bits) =
            magnus::Fixnum::from_value(ended).and_then(|n| u8::try_from(n.to_i64()).ok())
        {
            if bits <= Interest::BOTH.bits() {
                return IoOutcome::Ready(Interest::from_bits(bits));
            }
        }
        if ended.as_raw() == CLOSED_OUTCOME.into_value_with(ruby).as_raw() {
            return IoOutcome::Closed;
        }
        IoOutcome::Other(ended)
    }
}

impl RbLoop {
    fn new(ruby: &Ruby, args: &[Value]) -> Result<Self, Error> {
        let args = scan_args::scan_args::<(), (), (), (), RHash, ()>(args)?;
        let kw =
            scan_args::get_kwargs::<_, (), (Option<Value>,), ()>(args.keywords, &[], &[*BACKEND])?;
        let kind = backend_kind(ruby, kw.optional.0)?;
        let core = Loop::new(kind).map_err(|e| errors::os(ruby, e, "Evix::Loop.new"))?;
        let waker_fd = core.shared().waker.fd().unwrap_or(-1);
        Ok(RbLoop {
            core,
            owner: Cell::new(current_thread()),
            fork_generation: fork::generation(),
            home: Cell::new(None),
            starter: Cell::new(None),
            reserved: Cell::new(-1),
            waker_fd,
        })
    }

    /// Refuses the loop's own descriptors (its waker, the signal pipe).
    fn check_not_reserved(&self, ruby: &Ruby, fd: RawFd) -> Result<(), Error> {
        if fd == self.waker_fd || fd == self.reserved.get() {
            return Err(errors::argument(
                ruby,
                format!("fd {fd} belongs to the loop itself (its waker or signal pipe)"),
            ));
        }
        Ok(())
    }

    fn driver<'a>(&'a self, ruby: &'a Ruby) -> RubyDriver<'a> {
        RubyDriver {
            ruby,
            core: &self.core,
            fork_generation: self.fork_generation,
        }
    }

    /// The loop belongs to the next thread that uses it: the scheduler's own
    /// loop, made where the scheduler is created, runs where it is installed.
    pub(super) fn disown(&self) {
        self.owner.set(0);
    }

    /// `waiters`: how many fibers are parked on the loop.
    fn waiters(ruby: &Ruby, rb_self: Value) -> Result<usize, Error> {
        Ok(Self::this(ruby, &rb_self)?.usable(ruby)?.stats().waiters)
    }

    /// `wait_of(fiber)`: what `fiber` is parked on, as `[fd, event bits,
    /// seconds left]` (each nil when the wait has none), or nil if it is not
    /// parked on this loop.
    fn wait_of(ruby: &Ruby, rb_self: &Self, fiber: Fiber) -> Result<Option<Value>, Error> {
        let core = rb_self.usable(ruby)?;
        let Some(wait) = errors::guard(ruby, || Ok(core.wait_of(owner_of(fiber))))? else {
            return Ok(None);
        };
        let left = wait.deadline.map(|deadline| {
            deadline
                .saturating_duration_since(std::time::Instant::now())
                .as_secs_f64()
        });
        let (fd, bits) = match wait.io {
            Some((fd, interest)) => (Some(fd), Some(interest.bits())),
            None => (None, None),
        };
        Ok(Some(
            ruby.ary_new_from_values(&[
                fd.into_value_with(ruby),
                bits.into_value_with(ruby),
                left.into_value_with(ruby),
            ])
            .as_value(),
        ))
    }

    /// `reserve_fd(io)`: marks the signal pipe's read end as the loop's own.
    fn reserve_fd(ruby: &Ruby, rb_self: &Self, target: Value) -> Result<(), Error> {
        let (fd, _) = descriptor(ruby, target)?;
        rb_self.reserved.set(fd);
        Ok(())
    }

    /// Parks the calling fiber on the loop until the wait ends (see
    /// `core::Loop::park`) and returns what ended it, or the error of an fd
    /// registration the kernel refused (then nothing was parked). `on_park`
    /// gets the wait's token before the fiber switches away.
    fn park_current(
        &self,
        ruby: &Ruby,
        core: &Loop<Callback>,
        io: Option<(RawFd, Interest, Option<FdOwner<Callback>>)>,
        timeout: Option<Duration>,
        on_park: impl FnOnce(u64) -> Result<(), Error>,
    ) -> Result<Result<Value, io::Error>, Error> {
        let fiber = ruby.fiber_current();
        let home = self.home.get().map(|home| ruby.get_inner(home));
        let switch = match home {
            Some(home) if home.as_raw() == fiber.as_raw() => {
                return Err(errors::evix(
                    ruby,
                    "the fiber that runs the loop cannot wait on it; wait inside a task",
                ))
            }
            Some(_) => Switch::Transfer,
            None => Switch::Resume,
        };
        let resume = Callback::resume(fiber, switch);
        let key = match errors::guard(ruby, || Ok(core.park(owner_of(fiber), resume, io, timeout)))?
        {
            Ok(Parked::Waiting(key)) => key,
            Ok(Parked::Pending(end)) => return Err(pending_error(ruby, end)),
            Err(refused) => return Ok(Err(refused)),
        };
        if let Err(e) = on_park(key.to_bits()) {
            core.unpark(key);
            return Err(e);
        }
        let back_to = match self.starter.get() {
            Some((started, starter)) if ruby.get_inner(started).as_raw() == fiber.as_raw() => {
                self.starter.set(None);
                Some(ruby.get_inner(starter))
            }
            _ => home,
        };
        let result = match back_to {
            Some(target) => target.transfer::<_, Value>(()),
            None => ruby.fiber_yield::<_, Value>(()).map_err(|e| {
                if errors::is_fiber_error(ruby, &e) {
                    errors::evix(
                        ruby,
                        "Evix::Loop waits must be made inside a task or a fiber the loop runs",
                    )
                } else {
                    e
                }
            }),
        };
        // However the wait ended (a trigger, a wake, an exception raised into
        // the fiber), nothing of it may fire later.
        core.unpark(key);
        result.map(Ok)
    }

    /// The core, after the checks every method but post/wakeup/closed? makes.
    pub fn usable(&self, ruby: &Ruby) -> Result<&Loop<Callback>, Error> {
        self.not_forked(ruby)?;
        let thread = current_thread();
        if self.owner.get() == 0 {
            self.owner.set(thread);
        }
        if self.owner.get() != thread {
            return Err(errors::evix(
                ruby,
                "Evix::Loop belongs to the thread that created it; use #post or #wakeup from other threads",
            ));
        }
        if self.core.is_closed() {
            return Err(errors::closed(ruby, "loop"));
        }
        Ok(&self.core)
    }

    /// Whether the calling thread is the one the loop belongs to.
    pub(super) fn on_own_thread(&self) -> bool {
        !self.forked() && self.owner.get() == current_thread()
    }

    /// Whether this is a loop created before a fork, in the child: its
    /// scheduler's hooks then block the thread instead (see scheduler.rs).
    pub(super) fn forked(&self) -> bool {
        self.fork_generation != fork::generation()
    }

    fn not_forked(&self, ruby: &Ruby) -> Result<(), Error> {
        if self.forked() {
            return Err(errors::evix(
                ruby,
                "this Evix::Loop was created before fork; create a new loop in the child process",
            ));
        }
        Ok(())
    }

    /// The core if the loop is open and on its thread (as `usable`), `None`
    /// if it is closed (handles' cancel/active? are quiet on a closed loop).
    pub fn usable_if_open(&self, ruby: &Ruby) -> Result<Option<&Loop<Callback>>, Error> {
        if self.core.is_closed() {
            return Ok(None);
        }
        self.usable(ruby).map(Some)
    }

    /// `self` of the hottest methods, which take it as a plain `Value`:
    /// magnus's conversion to `Obj<Self>` or `&Self` costs an `rb_protect`
    /// around `rb_check_typeddata` per call.
    pub(super) fn this<'a>(ruby: &Ruby, rb_self: &'a Value) -> Result<&'a Self, Error> {
        capi::typed_ref(ruby, rb_self).ok_or_else(|| {
            errors::type_error(
                ruby,
                format!(
                    "no implicit conversion of {} into Evix::Loop",
                    rb_self.class()
                ),
            )
        })
    }

    fn next_tick(ruby: &Ruby, rb_self: Value) -> Result<(), Error> {
        let core = Self::this(ruby, &rb_self)?.usable(ruby)?;
        let block = required_block(ruby, "next_tick")?;
        core.next_tick(Callback::new(block));
        Ok(())
    }

    fn defer(ruby: &Ruby, rb_self: Value) -> Result<(), Error> {
        let core = Self::this(ruby, &rb_self)?.usable(ruby)?;
        let block = required_block(ruby, "defer")?;
        core.defer(Callback::new(block));
        Ok(())
    }

    fn add_timer(ruby: &Ruby, rb_self: Obj<Self>, args: &[Value]) -> Result<Obj<RbTimer>, Error> {
        let core = rb_self.usable(ruby)?;
        // `add_timer(delay)`, the common call, skips `scan_args` (it formats
        // its spec string on every call); anything else, keywords included,
        // goes through it so `repeat:` is told apart from a positional Hash.
        let (delay, repeat) = match *args {
            [delay] => (delay, None),
            _ => {
                let args = scan_args::scan_args::<(Value,), (), (), (), RHash, ()>(args)?;
                let kw = scan_args::get_kwargs::<_, (), (Option<Value>,), ()>(
                    args.keywords,
                    &[],
                    &[*REPEAT],
                )?;
                (args.required.0, kw.optional.0)
            }
        };
        let delay = args::seconds(ruby, delay, "delay")?;
        let interval = match repeat.filter(|v| !v.is_nil()) {
            None => None,
            Some(value) => {
                let interval = args::seconds(ruby, value, "repeat")?;
                if interval.is_zero() {
                    return Err(errors::argument(
                        ruby,
                        "repeat must be a positive number of seconds (got 0)".into(),
                    ));
                }
                Some(interval)
            }
        };
        let block = required_block(ruby, "add_timer")?;
        let callback = Callback::new(block);
        let key = errors::guard(ruby, || Ok(core.add_timer(delay, interval, callback)))?;
        Ok(ruby.obj_wrap(RbTimer::new(rb_self, key, block, delay, interval)))
    }

    fn add_io(
        ruby: &Ruby,
        rb_self: Obj<Self>,
        target: Value,
        events: Value,
    ) -> Result<Obj<RbWatcher>, Error> {
        let core = rb_self.usable(ruby)?;
        let (fd, keep) = descriptor(ruby, target)?;
        rb_self.check_not_reserved(ruby, fd)?;
        let (interest, oneshot) = args::events(ruby, events)?;
        let block = required_block(ruby, "add_io")?;
        let callback = match keep {
            Some(io) => Callback::keeping(block, io),
            None => Callback::new(block),
        };
        let key = errors::guard(ruby, || {
            core.add_watcher(fd, interest, oneshot, callback, None)
                .map_err(|e| errors::os(ruby, e, &format!("add_io(fd {fd})")))
        })?;
        let bits = i64::from(interest.bits()) | if oneshot { args::ONESHOT } else { 0 };
        Ok(ruby.obj_wrap(RbWatcher::new(rb_self, key, bits)))
    }

    /// `wait_io(io_or_fd, events, timeout = nil)`: suspends the calling fiber
    /// until `io` is ready for `events` and returns the ready bits, or nil
    /// once `timeout` passed; raises `Evix::ClosedError` if the IO is
    /// released or closed meanwhile.
    fn wait_io(ruby: &Ruby, rb_self: Value, args: &[Value]) -> Result<Value, Error> {
        let this = Self::this(ruby, &rb_self)?;
        args::arity(ruby, args, 2, 3)?;
        let (fd, keep) = descriptor(ruby, args[0])?;
        let (interest, _) = args::events(ruby, args[1])?;
        let timeout = args::optional_seconds(ruby, args::optional(args, 2), "timeout")?;
        match this.park_io(ruby, fd, interest, keep, timeout)? {
            IoOutcome::Ready(ready) => Ok(ready.bits().into_value_with(ruby)),
            IoOutcome::TimedOut => Ok(ruby.qnil().as_value()),
            IoOutcome::Closed => Err(errors::closed_while_waiting(ruby)),
            IoOutcome::Refused(e) => Err(errors::os(ruby, e, &format!("wait_io(fd {fd})"))),
            IoOutcome::Other(value) => Ok(value),
        }
    }

    /// The park API for a wait on an fd (`Loop#wait_io` and the scheduler's
    /// hooks): parks the calling fiber until `fd` is ready for `interest`,
    /// at most `timeout`, and says what ended the wait. `pin`, the IO
    /// behind `fd`, owns the fd's registration (see `core::FdOwner`), so
    /// waiting again costs no syscall; the loop's mark keeps it alive.
    pub(super) fn park_io(
        &self,
        ruby: &Ruby,
        fd: RawFd,
        interest: Interest,
        pin: Option<Value>,
        timeout: Option<Duration>,
    ) -> Result<IoOutcome, Error> {
        let core = self.usable(ruby)?;
        self.check_not_reserved(ruby, fd)?;
        let fd_owner = pin.map(|io| FdOwner {
            id: (io.as_raw(), REOPENS.load(Ordering::Relaxed)),
            keep: Callback::keep_alive(io),
        });
        let io = Some((fd, interest, fd_owner));
        let ended = self.park_current(ruby, core, io, timeout, |_| Ok(()))?;
        Ok(ended.map_or_else(IoOutcome::Refused, |value| IoOutcome::of(ruby, value)))
    }

    /// `suspend(timeout = nil) { |token| }`: suspends the calling fiber until
    /// `resume(token, value)` (then it returns value) or until `timeout`
    /// seconds passed (then nil). The block gets the wait's token first.
    fn suspend(ruby: &Ruby, rb_self: Value, args: &[Value]) -> Result<Value, Error> {
        let this = Self::this(ruby, &rb_self)?;
        args::arity(ruby, args, 0, 1)?;
        let timeout = args::optional_seconds(ruby, args::optional(args, 0), "timeout")?;
        let block = ruby.block_given().then(|| ruby.block_proc()).transpose()?;
        this.park(ruby, timeout, |token| match block {
            Some(block) => block.call::<_, Value>((token,)).map(drop),
            None => Ok(()),
        })
    }

    /// The park API for a wait without an fd (`Loop#suspend` and the
    /// scheduler's `block`/`kernel_sleep`): parks the calling fiber until its
    /// wait is resumed (`resume_token`, `resume_soon`) or `timeout` passed,
    /// and returns the value it was resumed with (nil: the timeout).
    /// `on_park` gets the wait's token before the fiber switches away.
    pub(super) fn park(
        &self,
        ruby: &Ruby,
        timeout: Option<Duration>,
        on_park: impl FnOnce(u64) -> Result<(), Error>,
    ) -> Result<Value, Error> {
        let core = self.usable(ruby)?;
        self.park_current(ruby, core, None, timeout, on_park)?
            .map_err(|e| errors::os(ruby, e, "suspend"))
    }

    /// `resume(token, value = nil)`: ends the wait of `token` (from
    /// `suspend`'s block) with `value`; false if that wait already ended.
    /// From the fiber running the loop the waiter runs now; from another
    /// fiber it runs on the next tick.
    fn resume(ruby: &Ruby, rb_self: Value, args: &[Value]) -> Result<bool, Error> {
        args::arity(ruby, args, 1, 2)?;
        let token = u64::try_convert(args[0])?;
        let value = args::optional(args, 1).unwrap_or_else(|| ruby.qnil().as_value());
        Self::this(ruby, &rb_self)?.resume_token(ruby, token, value)
    }

    /// Ends the wait of `token` with `value`, from the loop's thread (see
    /// `resume`); false if that wait already ended.
    fn resume_token(&self, ruby: &Ruby, token: u64, value: Value) -> Result<bool, Error> {
        let core = self.usable(ruby)?;
        match errors::guard(ruby, || Ok(core.unpark(WaitKey::from_bits(token))))? {
            Some(resume) => {
                self.deliver(ruby, core, resume.with_value(value))?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Ends the wait of `token` with `value` from any thread, its fiber
    /// running on the loop's next turn: on the loop's own thread the wait
    /// ends now; another thread posts the end (`Callback::unpark`), and the
    /// loop's thread ends the wait when it takes the post, unless it ended
    /// otherwise meanwhile. Nothing happens on a closed loop or in a forked
    /// child (the loop and its waits are the parent's).
    pub(super) fn resume_soon(&self, ruby: &Ruby, token: u64, value: Value) -> Result<(), Error> {
        if self.forked() || self.core.is_closed() {
            return Ok(());
        }
        let key = WaitKey::from_bits(token);
        if self.owner.get() != current_thread() {
            // Refused only once the loop is closed, which ended every wait.
            let _ = self.core.shared().post(Callback::unpark(key, value));
            return Ok(());
        }
        let core = &self.core;
        errors::guard(ruby, || {
            if let Some(resume) = core.unpark(key) {
                core.next_tick(resume.with_value(value));
            }
            Ok(())
        })
    }

    /// Whether `fiber` is parked in a wait on this loop.
    pub(super) fn is_parked(&self, ruby: &Ruby, fiber: Fiber) -> Result<bool, Error> {
        let core = self.usable(ruby)?;
        errors::guard(ruby, || Ok(core.is_parked(owner_of(fiber))))
    }

    /// `interrupt(fiber, exception)`: raises `exception` in `fiber` at its
    /// current wait on this loop, or at its next one if it is not waiting.
    pub(super) fn interrupt(
        ruby: &Ruby,
        rb_self: &Self,
        fiber: Fiber,
        exception: Value,
    ) -> Result<(), Error> {
        let core = rb_self.usable(ruby)?;
        if magnus::Exception::from_value(exception).is_none() {
            return Err(errors::type_error(
                ruby,
                format!(
                    "exception must be an Exception (got {})",
                    errors::describe(exception)
                ),
            ));
        }
        if fiber.as_raw() == ruby.fiber_current().as_raw() {
            return Err(Error::from(
                magnus::Exception::from_value(exception).expect("checked"),
            ));
        }
        let owner = owner_of(fiber);
        let resume = errors::guard(ruby, || {
            Ok(core.parked(owner).and_then(|key| core.unpark(key)))
        })?;
        match resume {
            Some(resume) => rb_self.deliver(ruby, core, resume.raising(exception)),
            None => {
                let end = Callback::resume(fiber, Switch::Transfer).raising(exception);
                errors::guard(ruby, || {
                    core.set_pending(owner, end);
                    Ok(())
                })
            }
        }
    }

    /// `start(fiber)`: runs a new fiber now, by transfer, so that it waits
    /// on this loop like any task. The caller goes on when the fiber first
    /// waits or ends; a caller that is itself a fiber of the loop is parked
    /// meanwhile and resumed on the next tick.
    fn start(ruby: &Ruby, rb_self: &Self, fiber: Fiber) -> Result<(), Error> {
        let core = rb_self.usable(ruby)?;
        // A switch to a parked fiber would end its wait early, as if woken.
        if errors::guard(ruby, || Ok(core.is_parked(owner_of(fiber))))? {
            return Err(errors::evix(
                ruby,
                "Loop#start runs a new fiber; this one is parked in a wait of the loop",
            ));
        }
        // Until the fiber waits: a task's first run may start outside `run`.
        let _busy = core.pulse().enter();
        let current = ruby.fiber_current();
        match rb_self.home.get().map(|home| ruby.get_inner(home)) {
            Some(home) if home.as_raw() != current.as_raw() => {
                // The starter waits for the new fiber's first wait (see
                // `starter`); should the fiber end first, control goes to
                // the loop, and a timer due at once resumes the starter.
                let resume = Callback::resume(current, Switch::Transfer);
                let parked = errors::guard(ruby, || {
                    Ok(core.park(owner_of(current), resume, None, Some(Duration::ZERO)))
                })?
                .map_err(|e| errors::os(ruby, e, "start"))?;
                let key = match parked {
                    Parked::Waiting(key) => key,
                    Parked::Pending(end) => {
                        // The starter was cancelled: the new fiber starts from
                        // the loop, and the cancellation is raised here.
                        core.next_tick(Callback::resume(fiber, Switch::Transfer));
                        return Err(pending_error(ruby, end));
                    }
                };
                let previous = rb_self
                    .starter
                    .replace(Some((fiber.into(), current.into())));
                let result = fiber.transfer::<_, Value>(()).map(drop);
                rb_self.starter.set(previous);
                core.unpark(key);
                result
            }
            Some(_) => fiber.transfer::<_, Value>(()).map(drop),
            None => {
                let _home = Home::enter(&rb_self.home, current);
                fiber.transfer::<_, Value>(()).map(drop)
            }
        }
    }

    /// Resumes a waiter whose wait was ended by a wake or a cancellation:
    /// now from the fiber running the loop (or from outside a run, which
    /// then is where the waiter comes back to when it waits again), else on
    /// the next tick.
    fn deliver(&self, ruby: &Ruby, core: &Loop<Callback>, resume: Callback) -> Result<(), Error> {
        let current = ruby.fiber_current();
        match self.home.get().map(|home| ruby.get_inner(home)) {
            Some(home) if home.as_raw() == current.as_raw() => {
                self.driver(ruby).invoke(resume, Fire::Immediate)
            }
            Some(_) => {
                core.next_tick(resume);
                Ok(())
            }
            None => {
                let _home = Home::enter(&self.home, current);
                self.driver(ruby).invoke(resume, Fire::Immediate)
            }
        }
    }

    /// Called before any `IO#reopen` (lib/evix/io/io_patches.rb): registrations
    /// pinned so far are checked with the kernel on their next wait.
    fn io_reopened() {
        REOPENS.fetch_add(1, Ordering::Relaxed);
    }

    /// Forgets `io`'s registration and removes its watchers before it is closed.
    /// The fibers waiting on it raise `Evix::ClosedError` (on the next tick).
    fn release_io(ruby: &Ruby, rb_self: &Self, target: Value) -> Result<(), Error> {
        let core = rb_self.usable(ruby)?;
        let (fd, _) = descriptor(ruby, target)?;
        rb_self.check_not_reserved(ruby, fd)?;
        errors::guard(ruby, || {
            core.release_fd(fd);
            Ok(())
        })
    }

    /// `Evix::Loop.io_closing(io)`: `io` is about to be closed (IO#close,
    /// from any thread): every loop that registered its fd ends the waits on
    /// it; this thread's loop `io` belongs to... each on its next iteration.
    fn io_closing(ruby: &Ruby, target: Value) -> Result<(), Error> {
        if let Some(file) = RFile::from_value(target) {
            if let Ok(fd) = capi::io_descriptor(ruby, file) {
                crate::core::closing::closing(fd);
            }
        }
        Ok(())
    }

    fn post(ruby: &Ruby, rb_self: &Self) -> Result<(), Error> {
        rb_self.not_forked(ruby)?;
        let block = required_block(ruby, "post")?;
        rb_self
            .core
            .shared()
            .post(Callback::new(block))
            .map_err(|_| errors::closed(ruby, "loop"))
    }

    fn wakeup(&self) {
        self.core.shared().waker.wake();
    }

    fn run(ruby: &Ruby, rb_self: &Self, args: &[Value]) -> Result<(), Error> {
        let core = rb_self.usable(ruby)?;
        let _home = Home::enter(&rb_self.home, ruby.fiber_current());
        args::arity(ruby, args, 0, 1)?;
        let mode = args::optional(args, 0)
            .map(Symbol::try_convert)
            .transpose()?;
        let mode = match mode.map(|s| s.name()).transpose()?.as_deref() {
            None | Some("default") => RunMode::Default,
            Some("once") => RunMode::Once,
            Some("nowait") => RunMode::NoWait,
            Some(other) => {
                return Err(errors::argument(
                    ruby,
                    format!("mode must be :default, :once or :nowait (got :{other})"),
                ))
            }
        };
        errors::guard(ruby, || {
            core.run(mode, &mut rb_self.driver(ruby))
                .map(drop)
                .map_err(|e| run_error(ruby, e))
        })
    }

    fn run_once(ruby: &Ruby, rb_self: Value, args: &[Value]) -> Result<bool, Error> {
        let rb_self = Self::this(ruby, &rb_self)?;
        let core = rb_self.usable(ruby)?;
        let _home = Home::enter(&rb_self.home, ruby.fiber_current());
        args::arity(ruby, args, 0, 1)?;
        let timeout: Option<Duration> =
            args::optional_seconds(ruby, args::optional(args, 0), "timeout")?;
        errors::guard(ruby, || {
            core.run_once(timeout, &mut rb_self.driver(ruby))
                .map_err(|e| run_error(ruby, e))
        })
    }

    fn alive(ruby: &Ruby, rb_self: Value) -> Result<bool, Error> {
        Ok(Self::this(ruby, &rb_self)?.usable(ruby)?.alive())
    }

    fn stop(ruby: &Ruby, rb_self: &Self) -> Result<(), Error> {
        rb_self.usable(ruby)?.stop();
        Ok(())
    }

    fn close(ruby: &Ruby, rb_self: &Self) -> Result<(), Error> {
        if rb_self.core.is_closed() {
            return Ok(());
        }
        let core = rb_self.usable(ruby)?;
        if core.is_running() {
            return Err(errors::evix(
                ruby,
                "cannot close a loop from inside its own run; call stop, then close",
            ));
        }
        errors::guard(ruby, || {
            core.close();
            Ok(())
        })
    }

    /// For methods written in Ruby: the same checks the native ones make.
    fn ensure_usable(ruby: &Ruby, rb_self: &Self) -> Result<(), Error> {
        rb_self.usable(ruby).map(drop)
    }

    fn is_closed(&self) -> bool {
        self.core.is_closed()
    }

    fn backend(ruby: &Ruby, rb_self: &Self) -> Result<Symbol, Error> {
        Ok(ruby.to_symbol(rb_self.usable(ruby)?.kind().name()))
    }

    fn stats(ruby: &Ruby, rb_self: &Self) -> Result<RHash, Error> {
        let stats = rb_self.usable(ruby)?.stats();
        let hash = ruby.hash_new();
        hash.aset(ruby.to_symbol("immediates"), stats.immediates)?;
        hash.aset(ruby.to_symbol("deferred"), stats.deferred)?;
        hash.aset(ruby.to_symbol("timers"), stats.timers)?;
        hash.aset(ruby.to_symbol("watchers"), stats.watchers)?;
        hash.aset(ruby.to_symbol("waiters"), stats.waiters)?;
        hash.aset(ruby.to_symbol("iterations"), stats.iterations)?;
        hash.aset(ruby.to_symbol("rebuilds"), stats.rebuilds)?;
        Ok(hash)
    }
}

impl Owner for RbLoop {
    fn usable(&self, ruby: &Ruby) -> Result<&Loop<Callback>, Error> {
        RbLoop::usable(self, ruby)
    }

    fn usable_if_open(&self, ruby: &Ruby) -> Result<Option<&Loop<Callback>>, Error> {
        RbLoop::usable_if_open(self, ruby)
    }
}

/// The block given to the current method, or ArgumentError naming `method`.
fn required_block(ruby: &Ruby, method: &str) -> Result<Proc, Error> {
    if !ruby.block_given() {
        return Err(errors::argument(ruby, format!("{method} requires a block")));
    }
    ruby.block_proc()
}

fn backend_kind(ruby: &Ruby, requested: Option<Value>) -> Result<BackendKind, Error> {
    let name = match requested.filter(|v| !v.is_nil()) {
        Some(value) => {
            if let Some(sym) = Symbol::from_value(value) {
                sym.name()?.into_owned()
            } else if let Some(s) = magnus::RString::from_value(value) {
                s.to_string()?
            } else {
                return Err(errors::type_error(
                    ruby,
                    format!(
                        "backend must be a Symbol or String (got {})",
                        errors::describe(value)
                    ),
                ));
            }
        }
        None => match std::env::var("EVIX_BACKEND") {
            Ok(name) if !name.is_empty() => name,
            _ => return Ok(BackendKind::available()[0]),
        },
    };
    BackendKind::from_name(&name).ok_or_else(|| {
        let known: Vec<_> = BackendKind::available()
            .iter()
            .map(|k| format!(":{}", k.name()))
            .collect();
        errors::argument(
            ruby,
            format!("unknown backend :{name} (available: {})", known.join(", ")),
        )
    })
}

/// An IO (anything with #to_io) or an Integer fd, and the object to keep alive.
fn descriptor(ruby: &Ruby, target: Value) -> Result<(i32, Option<Value>), Error> {
    // The common case: an IO itself (any T_FILE: File, sockets, pipes), whose
    // #to_io is itself.
    if let Some(file) = RFile::from_value(target) {
        return io_descriptor(ruby, file);
    }
    if let Some(fd) = magnus::Integer::from_value(target) {
        let fd = fd.to_i64().unwrap_or(i64::MAX);
        if fd < 0 || fd > i64::from(i32::MAX) {
            return Err(errors::argument(
                ruby,
                format!("fd must be a non-negative file descriptor (got {fd})"),
            ));
        }
        return Ok((fd as i32, None));
    }
    if !target.respond_to(*TO_IO, false)? {
        return Err(errors::type_error(
            ruby,
            format!(
                "io_or_fd must be an IO or an Integer file descriptor (got {})",
                errors::describe(target)
            ),
        ));
    }
    let io: Value = target.funcall(*TO_IO, ())?;
    if let Some(file) = RFile::from_value(io) {
        return io_descriptor(ruby, file);
    }
    if io.funcall::<_, _, bool>(*CLOSED, ())? {
        return Err(errors::closed(ruby, "IO"));
    }
    let fd: i32 = io.funcall(*FILENO, ())?;
    Ok((fd, Some(io)))
}

/// A real IO's fd: one C call, which raises for a closed IO as `IO#fileno`
/// does (only then is `closed?` asked, to raise `Evix::ClosedError` as for
/// any IO).
fn io_descriptor(ruby: &Ruby, file: RFile) -> Result<(i32, Option<Value>), Error> {
    let io = file.as_value();
    match capi::io_descriptor(ruby, file) {
        Ok(fd) => Ok((fd, Some(io))),
        Err(e) => {
            if io.funcall::<_, _, bool>(*CLOSED, ())? {
                Err(errors::closed(ruby, "IO"))
            } else {
                Err(e)
            }
        }
    }
}

fn run_error(ruby: &Ruby, error: RunError<Error>) -> Error {
    match error {
        RunError::Callback(e) => e,
        RunError::Io(e) => errors::os(ruby, e, "Evix::Loop#run"),
        RunError::Reentered => errors::evix(
            ruby,
            "run/run_once called from inside a callback of the same loop",
        ),
        RunError::Closed => errors::closed(ruby, "loop"),
    }
}

pub fn init(ruby: &Ruby, evix: RModule) -> Result<(), Error> {
    let class = evix.define_class("Loop", ruby.class_object())?;
    class.define_singleton_method("new", function!(RbLoop::new, -1))?;
    class.define_singleton_method("io_reopened", function!(RbLoop::io_reopened, 0))?;
    class.define_method("next_tick", method!(RbLoop::next_tick, 0))?;
    class.define_method("defer", method!(RbLoop::defer, 0))?;
    class.define_method("add_timer", method!(RbLoop::add_timer, -1))?;
    class.define_method("add_io", method!(RbLoop::add_io, 2))?;
    class.define_method("wait_io", method!(RbLoop::wait_io, -1))?;
    class.define_method("release_io", method!(RbLoop::release_io, 1))?;
    class.define_method("suspend", method!(RbLoop::suspend, -1))?;
    class.define_method("resume", method!(RbLoop::resume, -1))?;
    class.define_method("interrupt", method!(RbLoop::interrupt, 2))?;
    class.define_method("start", method!(RbLoop::start, 1))?;
    class.define_singleton_method("io_closing", function!(RbLoop::io_closing, 1))?;
    // Public, @api private: lib/evix/loop/loop.rb needs them; Ruby calls no private native method.
    class.define_method("reserve_fd", method!(RbLoop::reserve_fd, 1))?;
    class.define_method("wait_of", method!(RbLoop::wait_of, 1))?;
    class.define_method("ensure_usable!", method!(RbLoop::ensure_usable, 0))?;
    class.define_method("waiters", method!(RbLoop::waiters, 0))?;
    class.define_method("post", method!(RbLoop::post, 0))?;
    class.define_method("wakeup", method!(RbLoop::wakeup, 0))?;
    class.define_method("run", method!(RbLoop::run, -1))?;
    class.define_method("run_once", method!(RbLoop::run_once, -1))?;
    class.define_method("alive?", method!(RbLoop::alive, 0))?;
    class.define_method("stop", method!(RbLoop::stop, 0))?;
    class.define_method("close", method!(RbLoop::close, 0))?;
    class.define_method("closed?", method!(RbLoop::is_closed, 0))?;
    class.define_method("backend", method!(RbLoop::backend, 0))?;
    class.define_method("stats", method!(RbLoop::stats, 0))?;
    Ok(())
}
