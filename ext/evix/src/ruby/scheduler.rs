//! The `Evix::Scheduler` hooks that suspend a fiber or move bytes, written
//! in Rust (the rest of the class is lib/evix/scheduler/scheduler.rb). Ruby calls
//! these hooks from C, often under a C iterator (`n.times { sleep }`,
//! `readpartial` inside `each`); a hook written in Ruby re-enters the VM
//! there, and the frames of that re-entry stay on the machine stack of every
//! fiber parked in it.
//!
//! Each hook checks its arguments once, here, parks through the loop's park
//! API (`RbLoop::park_io`, `RbLoop::park`) and turns what ended the wait
//! into what Fiber::Scheduler expects; nothing calls back into Ruby.
//!
//! `io_read` and `io_write` move bytes straight between the kernel and the
//! `IO::Buffer` Ruby hands in (no String, no copy, no `*_nonblock` call):
//! `recv`/`send` on a socket, `read`/`write` with O_NONBLOCK set for the call
//! on a pipe, file or terminal. Bytes Ruby's own read buffer holds (an
//! `ungetc`) are taken from it first. A write never goes through Ruby's
//! buffer: Ruby calls the hook to flush that buffer too.

use super::driver::owner_of;
use super::event_loop::{IoOutcome, RbLoop};
use super::helpers::{
    args,
    capi::{self, Direct},
    errors, nogvl,
};
use crate::sys::{stream, Interest};
use magnus::{
    debug::FrameBuf,
    gc::Marker,
    method,
    prelude::*,
    value::{LazyId, Opaque},
    DataTypeFunctions, Error, Fiber, Integer, IntoValue, RClass, RFile, RModule, RString, Ruby,
    TypedData, Value,
};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::io;
use std::os::unix::io::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

static TIMEOUT: LazyId = LazyId::new("timeout");
static STAT: LazyId = LazyId::new("stat");
static IS_FILE: LazyId = LazyId::new("file?");
static IS_CLOSED: LazyId = LazyId::new("closed?");

/// The scheduler's waiting state, marked by the GC with the object: its
/// loop, the fibers waiting in `block`/`kernel_sleep` (for `unblock`), the
/// unblocks that came before their block, and which sockets' last read was
/// short. The rest of the class is Ruby (lib/evix/scheduler/scheduler.rb), which
/// reaches this only through methods.
#[derive(TypedData, Default)]
#[magnus(class = "Evix::Scheduler", free_immediately, size, mark)]
pub struct RbScheduler {
    evloop: Cell<Option<Opaque<Value>>>,
    /// A fiber waiting in `block` or `kernel_sleep` (by address) => its
    /// wait. The loop marks the fiber while it is parked.
    blocked: RefCell<HashMap<u64, Blocked>>,
    /// Fibers (by address) that another thread unblocked while they were
    /// not blocked yet: their next `block` returns at once. Ruby puts a
    /// fiber on a Mutex's or Queue's waiters before it calls `block`, and a
    /// `block` that releases the GVL first (a subclass's hook that sleeps)
    /// lets another thread's `unblock` come in between.
    early: RefCell<HashMap<u64, Opaque<Value>>>,
    /// By fd number: the last read from that socket was short, so the next
    /// one waits first.
    drained: RefCell<Vec<bool>>,
}

/// A fiber's wait in `block` or `kernel_sleep`.
#[derive(Clone, Copy)]
struct Blocked {
    token: u64,
    kind: BlockedKind,
}

/// What may end a wait in `block` or `kernel_sleep` besides its timeout
/// (see `waits_by_kind`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum BlockedKind {
    /// `block` on a Mutex, Queue, ConditionVariable, Thread#join...: the
    /// `unblock` of whichever thread releases the blocker.
    Blocker,
    /// `kernel_sleep` without a duration: like `sleep` without a scheduler,
    /// a wait for ever that only `unblock` (or an exception) ends.
    Sleep,
    /// A wait with a timeout: its timer keeps the loop alive.
    Timed,
}

/// How a hook's wait on an IO ended, when it did not raise.
enum Waited {
    /// Ready for these of the interests.
    Ready(Interest),
    TimedOut,
    /// The kernel refused to watch the fd (nothing waited).
    Refused(io::Error),
}

impl DataTypeFunctions for RbScheduler {
    fn mark(&self, marker: &Marker) {
        if let Some(evloop) = self.evloop.get() {
            marker.mark(evloop);
        }
        for fiber in self.early.borrow().values() {
            marker.mark(*fiber);
        }
    }
}

impl RbScheduler {
    /// `self`, as the hooks take it: a plain Value (see `RbLoop::this`).
    fn this<'a>(ruby: &Ruby, rb_self: &'a Value) -> Result<&'a Self, Error> {
        capi::typed_ref(ruby, rb_self).ok_or_else(|| {
            errors::type_error(ruby, format!("not an Evix::Scheduler: {}", rb_self.class()))
        })
    }

    /// The loop, for the caller to keep on its stack while it uses
    /// `RbLoop::this` of it (the scheduler marks it meanwhile too).
    fn evloop(&self, ruby: &Ruby) -> Result<Value, Error> {
        self.evloop
            .get()
            .map(|evloop| ruby.get_inner(evloop))
            .ok_or_else(|| errors::evix(ruby, "Evix::Scheduler was not initialized"))
    }

    /// `attach(loop, owned)`, private, from `initialize`: the loop it runs
    /// on, once. A loop the scheduler made (`owned`) belongs to the thread
    /// that first uses it: the one the scheduler is installed on.
    fn attach(ruby: &Ruby, rb_self: &Self, evloop: Value, owned: bool) -> Result<(), Error> {
        let Some(target) = capi::typed_ref::<RbLoop>(ruby, &evloop) else {
            return Err(errors::type_error(
                ruby,
                format!(
                    "loop must be an Evix::Loop (got {})",
                    errors::describe(evloop)
                ),
            ));
        };
        if rb_self.evloop.get().is_some() {
            return Err(errors::evix(ruby, "Evix::Scheduler is initialized already"));
        }
        if owned {
            target.disown();
        }
        rb_self.evloop.set(Some(evloop.into()));
        Ok(())
    }

    /// `loop`: the Evix::Loop the scheduler runs on.
    fn loop_reader(ruby: &Ruby, rb_self: &Self) -> Result<Value, Error> {
        rb_self.evloop(ruby)
    }

    /// `interrupt_parked(fiber, exception)`, private, on the loop's thread
    /// (`fiber_interrupt` posts it): raises `exception` in `fiber` if it is
    /// parked on the loop; a fiber that has left its wait is left alone.
    fn interrupt_parked(
        ruby: &Ruby,
        rb_self: &Self,
        fiber: Fiber,
        exception: Value,
    ) -> Result<(), Error> {
        let evloop = rb_self.evloop(ruby)?;
        let evloop = RbLoop::this(ruby, &evloop)?;
        if evloop.is_parked(ruby, fiber)? {
            RbLoop::interrupt(ruby, evloop, fiber, exception)?;
        }
        Ok(())
    }

    fn token_of(&self, owner: u64) -> Option<u64> {
        self.blocked.borrow().get(&owner).map(|wait| wait.token)
    }

    /// `waits_by_kind`, private (for the nursery's deadlock check): how many
    /// fibers wait in `block` on a blocker without a timeout, and how many
    /// sleep without a duration, as `[blockers, sleepers]`.
    fn waits_by_kind(&self) -> (usize, usize) {
        let blocked = self.blocked.borrow();
        let count = |kind| blocked.values().filter(|wait| wait.kind == kind).count();
        (count(BlockedKind::Blocker), count(BlockedKind::Sleep))
    }

    /// Notes an `unblock` from another thread for a fiber not blocked yet;
    /// forgets those of fibers that have ended.
    fn note_early(&self, ruby: &Ruby, owner: u64, fiber: Fiber) {
        let mut early = self.early.borrow_mut();
        early.retain(|_, noted| {
            Fiber::from_value(ruby.get_inner(*noted)).is_some_and(Fiber::is_alive)
        });
        early.insert(owner, Opaque::from(fiber.as_value()));
    }

    /// Suspends the calling fiber on `evloop` for at most `timeout`, its
    /// wait's token noted in `blocked` meanwhile so that `unblock` may end
    /// it. Returns what ended it (nil: the timeout).
    fn suspend_blocked(
        &self,
        ruby: &Ruby,
        evloop: &RbLoop,
        timeout: Option<Duration>,
        kind: BlockedKind,
    ) -> Result<Value, Error> {
        let owner = owner_of(ruby.fiber_current());
        let kind = if timeout.is_some() {
            BlockedKind::Timed
        } else {
            kind
        };
        let resumed = evloop.park(ruby, timeout, |token| {
            self.blocked
                .borrow_mut()
                .insert(owner, Blocked { token, kind });
            Ok(())
        });
        // Whatever ended the wait (the timer, unblock, an exception raised into
        // the fiber), the fiber no longer waits.
        self.blocked.borrow_mut().remove(&owner);
        resumed
    }

    /// Suspends the calling fiber until `file` is ready for `interest`, at
    /// most `timeout`. IOError when the IO is closed before or during the
    /// wait (the loop ends the waits on an fd that is closed).
    fn wait_for(
        &self,
        ruby: &Ruby,
        file: RFile,
        interest: Interest,
        timeout: Option<Duration>,
    ) -> Result<Waited, Error> {
        let evloop = self.evloop(ruby)?;
        let evloop = RbLoop::this(ruby, &evloop)?;
        let fd = descriptor(ruby, file)?;
        if evloop.forked() {
            return wait_in_child(ruby, fd, interest, timeout);
        }
        match evloop.park_io(ruby, fd, interest, Some(file.as_value()), timeout)? {
            IoOutcome::Ready(ready) => Ok(Waited::Ready(ready)),
            IoOutcome::TimedOut => Ok(Waited::TimedOut),
            IoOutcome::Closed => Err(closed_meanwhile(ruby)),
            IoOutcome::Refused(e) => Ok(Waited::Refused(e)),
            IoOutcome::Other(value) => Err(errors::type_error(
                ruby,
                format!(
                    "a fiber waiting on an IO was resumed with {}",
                    errors::describe(value)
                ),
            )),
        }
    }

    /// Whether the last read from socket `fd` was short.
    fn drained(&self, fd: RawFd) -> bool {
        let drained = self.drained.borrow();
        usize::try_from(fd).is_ok_and(|fd| drained.get(fd).copied().unwrap_or(false))
    }

    fn set_drained(&self, fd: RawFd, short: bool) {
        let Ok(fd) = usize::try_from(fd) else {
            return;
        };
        let mut drained = self.drained.borrow_mut();
        if drained.len() <= fd {
            drained.resize(fd + 1, false);
        }
        drained[fd] = short;
    }
}

/// `Fiber::Scheduler#unblock(blocker, fiber)`, from any thread: ends
/// `fiber`'s wait in `block` or `kernel_sleep` (none: nothing happens), its
/// fiber running on the loop's next turn (see `RbLoop::resume_soon`).
///
/// From another thread, an `unblock` for a fiber that is not blocked yet is
/// kept for the fiber's next `block`, which then returns at once (Ruby
/// checks the blocker again: a wake too many is harmless, one too few
/// leaves the fiber waiting for ever).
fn unblock(ruby: &Ruby, rb_self: Value, _blocker: Value, fiber: Value) -> Result<(), Error> {
    let this = RbScheduler::this(ruby, &rb_self)?;
    let Some(fiber) = Fiber::from_value(fiber) else {
        return Ok(());
    };
    let evloop = this.evloop(ruby)?;
    let evloop = RbLoop::this(ruby, &evloop)?;
    let owner = owner_of(fiber);
    match this.token_of(owner) {
        Some(token) => evloop.resume_soon(ruby, token, ruby.qtrue().as_value()),
        None if !evloop.on_own_thread() => {
            this.note_early(ruby, owner, fiber);
            Ok(())
        }
        None => Ok(()),
    }
}

/// `::BasicSocket`, looked up once by `init` (which requires "socket").
static BASIC_SOCKET: OnceLock<Opaque<RClass>> = OnceLock::new();

/// Whether IOs have their own timeout for reads and writes (`IO#timeout`,
/// Ruby >= 3.2), which the read and write hooks wait with.
static IO_TIMEOUT: AtomicBool = AtomicBool::new(false);

// Ruby's IO::READABLE, IO::PRIORITY and IO::WRITABLE (ruby/io.h).
const READABLE: i64 = 1;
const PRIORITY: i64 = 2;
const WRITABLE: i64 = 4;

/// `Fiber::Scheduler#kernel_sleep(duration = nil)`: suspends the calling
/// fiber for `duration` seconds (without one, until `unblock`); nil.
fn kernel_sleep(ruby: &Ruby, rb_self: Value, args: &[Value]) -> Result<(), Error> {
    args::arity(ruby, args, 0, 1)?;
    let duration = args::optional_seconds(ruby, args::optional(args, 0), "duration")?;
    let this = RbScheduler::this(ruby, &rb_self)?;
    let evloop = this.evloop(ruby)?;
    let evloop = RbLoop::this(ruby, &evloop)?;
    if evloop.forked() {
        return nogvl::sleep_thread(ruby, duration);
    }
    this.suspend_blocked(ruby, evloop, duration, BlockedKind::Sleep)
        .map(drop)
}

/// `Fiber::Scheduler#block(blocker, timeout = nil)` (Mutex, Queue,
/// ConditionVariable, Thread#join…): suspends the calling fiber until
/// `unblock`; false if `timeout` seconds passed first.
fn block(ruby: &Ruby, rb_self: Value, args: &[Value]) -> Result<bool, Error> {
    args::arity(ruby, args, 1, 2)?;
    let timeout = args::optional_seconds(ruby, args::optional(args, 1), "timeout")?;
    let this = RbScheduler::this(ruby, &rb_self)?;
    let evloop = this.evloop(ruby)?;
    let evloop = RbLoop::this(ruby, &evloop)?;
    if evloop.forked() {
        // In a forked child only this thread can unblock: a short sleep,
        // after which Ruby checks its Mutex, Queue... again.
        let nap = timeout.map_or(CHILD_SLICE, |t| t.min(CHILD_SLICE));
        nogvl::sleep_thread(ruby, Some(nap))?;
        return Ok(timeout.is_none_or(|t| t > nap));
    }
    // The current fiber first: it may allocate a root Fiber, and a GC then
    // marks `early`, which must not be borrowed.
    let owner = owner_of(ruby.fiber_current());
    if this.early.borrow_mut().remove(&owner).is_some() {
        return Ok(true); // another thread unblocked it already
    }
    this.suspend_blocked(ruby, evloop, timeout, BlockedKind::Blocker)
        .map(Value::to_bool)
}

/// How long a forked child's hooks block at a time before they look at
/// interrupts (and, in `block`, at the blocker) again.
const CHILD_SLICE: Duration = Duration::from_millis(20);

/// A wait on an fd in a child forked inside Evix.run, whose scheduler's loop
/// is the parent's: polls the fd, blocking the thread, as Ruby does without
/// a scheduler.
fn wait_in_child(
    ruby: &Ruby,
    fd: RawFd,
    interest: Interest,
    timeout: Option<Duration>,
) -> Result<Waited, Error> {
    let deadline = timeout.map(|t| std::time::Instant::now() + t);
    let write = interest.is_writable();
    loop {
        let slice = deadline.map_or(CHILD_SLICE, |d| {
            d.saturating_duration_since(std::time::Instant::now())
                .min(CHILD_SLICE)
        });
        let ms = slice.as_millis() as libc::c_int;
        match nogvl::without_gvl(&mut || stream::wait_one(fd, write, ms), &|| {}) {
            nogvl::Blocked::Done(Ok(true)) => return Ok(Waited::Ready(interest)),
            nogvl::Blocked::Done(Err(e)) => return Ok(Waited::Refused(e)),
            nogvl::Blocked::Panicked => return Err(errors::evix(ruby, "poll panicked")),
            nogvl::Blocked::Done(Ok(false)) | nogvl::Blocked::Interrupted => {}
        }
        nogvl::check_interrupts(ruby)?;
        if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
            return Ok(Waited::TimedOut);
        }
    }
}

/// `Fiber::Scheduler#io_wait(io, events, timeout = nil)`: the ready events
/// (IO::READABLE, PRIORITY, WRITABLE bits of `events`), false on timeout.
/// A regular file (which epoll cannot watch, also behind a plain IO such as
/// a redirected `$stderr`) is ready at once, as Ruby reports it without a
/// scheduler.
fn io_wait(ruby: &Ruby, rb_self: Value, args: &[Value]) -> Result<Value, Error> {
    args::arity(ruby, args, 2, 3)?;
    let io = args[0];
    let events: i64 = Integer::try_convert(args[1])?.to_i64()?;
    let timeout = args::optional_seconds(ruby, args::optional(args, 2), "timeout")?;
    let file = RFile::from_value(io).ok_or_else(|| {
        errors::type_error(
            ruby,
            format!("io must be an IO (got {})", errors::describe(io)),
        )
    })?;
    let mut interest = Interest::NONE;
    if events & (READABLE | PRIORITY) != 0 {
        interest = interest | Interest::READ;
    }
    if events & WRITABLE != 0 {
        interest = interest | Interest::WRITE;
    }
    if interest.is_empty() {
        return Err(errors::argument(
            ruby,
            format!(
                "events must include IO::READABLE, IO::PRIORITY or IO::WRITABLE (got {events})"
            ),
        ));
    }
    let ready_now = (events & (READABLE | WRITABLE)).into_value_with(ruby);
    if io.is_kind_of(ruby.class_file())
        && io
            .funcall::<_, _, Value>(*STAT, ())?
            .funcall(*IS_FILE, ())?
    {
        return Ok(ready_now);
    }
    let this = RbScheduler::this(ruby, &rb_self)?;
    match this.wait_for(ruby, file, interest, timeout)? {
        Waited::Ready(ready) => {
            let mut result = 0;
            if ready.is_readable() {
                result |= events & (READABLE | PRIORITY);
            }
            if ready.is_writable() {
                result |= events & WRITABLE;
            }
            Ok(result.into_value_with(ruby))
        }
        Waited::TimedOut => Ok(ruby.qfalse().as_value()),
        // epoll_ctl refused the descriptor: nothing was registered.
        Waited::Refused(e) if e.raw_os_error() == Some(libc::EPERM) => Ok(ready_now),
        Waited::Refused(e) => Err(errors::os(ruby, e, "io_wait")),
    }
}

/// `Fiber::Scheduler#io_read(io, buffer, length, offset = 0)`: reads at
/// least `length` bytes (0: whatever is there) into `buffer` at `offset`;
/// the bytes read (fewer at end of stream), or -errno. After a short read
/// from a socket the next call waits before it reads (the read would most
/// likely fail with EAGAIN; the registration is level-triggered, so data
/// already there ends the wait at once). Other IOs read first: Ruby's
/// `IO#read_nonblock` on them comes here too (with length 0), and must get
/// -EAGAIN rather than a wait when nothing is there.
fn io_read(ruby: &Ruby, rb_self: Value, args: &[Value]) -> Result<Value, Error> {
    args::arity(ruby, args, 3, 4)?;
    let (io, buffer) = (args[0], args[1]);
    let (file, length, mut offset) = io_call(ruby, args)?;
    let socket = is_socket(ruby, io);
    let this = RbScheduler::this(ruby, &rb_self)?;
    let mut direct = capi::direct(ruby, file, false);
    let waited_first = socket && matches!(direct, Direct::Fd(fd) if this.drained(fd));
    let mut wait = waited_first;
    let mut read_fd = None;
    let mut total = 0;
    loop {
        if wait {
            match this.wait_for(ruby, file, Interest::READ, io_timeout(ruby, io)?)? {
                Waited::Ready(_) => {}
                Waited::TimedOut => return Ok(negative_errno(ruby, libc::ETIMEDOUT)),
                Waited::Refused(e) => return Ok(negative_errno(ruby, errno(&e))),
            }
            // Ruby's buffer may have got bytes meanwhile (an ungetc).
            direct = capi::direct(ruby, file, false);
        }
        let fd = match direct {
            Direct::Fd(fd) => fd,
            Direct::Closed => return Err(closed_stream(ruby)),
            Direct::Ruby => {
                // Bytes Ruby's buffer holds come first; the rest from the fd.
                let taken = capi::take_read_buffer(ruby, file, buffer, offset, usize::MAX)?
                    .ok_or_else(|| not_readable(ruby))?;
                total += taken;
                if taken == 0 || total >= length {
                    break;
                }
                offset += taken;
                wait = false;
                direct = capi::direct(ruby, file, false);
                continue;
            }
        };
        read_fd = Some(fd);
        let (room, read) = capi::with_buffer_mut(ruby, buffer, |bytes| {
            bytes.get_mut(offset..).map(|room| {
                let read = if socket {
                    stream::recv(fd, room)
                } else {
                    stream::read_nonblocking(fd, room)
                };
                (room.len(), read)
            })
        })?
        .ok_or_else(|| offset_error(ruby))?;
        match read {
            _ if room == 0 => break,
            Ok(0) => break, // end of stream
            Ok(n) => {
                total += n;
                wait = n < room;
                if total >= length {
                    break;
                }
                offset += n;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if !socket && length == 0 && called_from_read_nonblock(ruby) {
                    return Ok(negative_errno(ruby, libc::EAGAIN));
                }
                wait = true;
            }
            Err(e) => return Ok(negative_errno(ruby, errno(&e))),
        }
    }
    if let Some(fd) = read_fd.filter(|_| socket && wait != waited_first) {
        this.set_drained(fd, wait);
    }
    Ok(total.into_value_with(ruby))
}

/// Whether this `io_read` came from `IO#read_nonblock`, which must not
/// wait: -EAGAIN makes it return :wait_readable or raise
/// IO::EAGAINWaitReadable. Ruby calls io_read with length 0 for it and for
/// every other read alike, and the others must wait here (IO#sysread raises
/// on -EAGAIN), so only the caller tells them apart: a frame above this
/// hook's. Asked only when there is nothing to read, just before a wait:
/// it reads the top frames' labels, allocating nothing.
fn called_from_read_nonblock(ruby: &Ruby) -> bool {
    let mut frames = FrameBuf::<4>::new();
    ruby.profile_frames(&mut frames);
    // Frame 0 is this hook's own. The base label, as Ruby 3.4 labels the
    // method "IO#read_nonblock".
    let found = frames.iter().skip(1).any(|(frame, _)| {
        has_bytes(ruby, frame.base_label(), b"read_nonblock")
            && has_bytes(ruby, frame.path(), b"<internal:io>")
    });
    found
}

fn has_bytes(ruby: &Ruby, string: Option<RString>, expected: &[u8]) -> bool {
    string.is_some_and(|string| capi::with_bytes(ruby, string, |bytes| bytes == expected))
}

/// `Fiber::Scheduler#io_write(io, buffer, length, offset = 0)`: writes at
/// least `length` bytes (0: what the kernel takes at once) from `buffer` at
/// `offset`; the bytes written, or -errno.
fn io_write(ruby: &Ruby, rb_self: Value, args: &[Value]) -> Result<Value, Error> {
    args::arity(ruby, args, 3, 4)?;
    let (io, buffer) = (args[0], args[1]);
    let (file, length, mut offset) = io_call(ruby, args)?;
    let socket = is_socket(ruby, io);
    let this = RbScheduler::this(ruby, &rb_self)?;
    let mut total = 0;
    loop {
        let fd = match capi::hook_write_fd(ruby, file) {
            Direct::Fd(fd) => fd,
            Direct::Closed => return Err(closed_stream(ruby)),
            Direct::Ruby => return Ok(negative_errno(ruby, libc::EBADF)),
        };
        let sent = capi::with_buffer(ruby, buffer, |bytes| {
            bytes.get(offset..).map(|rest| {
                if socket {
                    stream::send(fd, rest)
                } else {
                    stream::write_nonblocking(fd, rest)
                }
            })
        })?
        .ok_or_else(|| offset_error(ruby))?;
        match sent {
            Ok(n) => {
                total += n;
                if total >= length || n == 0 {
                    break;
                }
                offset += n;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                match this.wait_for(ruby, file, Interest::WRITE, io_timeout(ruby, io)?)? {
                    Waited::Ready(_) => {}
                    Waited::TimedOut => return Ok(negative_errno(ruby, libc::ETIMEDOUT)),
                    Waited::Refused(e) => return Ok(negative_errno(ruby, errno(&e))),
                }
            }
            Err(e) => return Ok(negative_errno(ruby, errno(&e))),
        }
    }
    Ok(total.into_value_with(ruby))
}

/// `Fiber::Scheduler#io_read(io, buffer, offset, length)` as Ruby 4.1
/// calls it (RUBY_FIBER_SCHEDULER_VERSION 4; see lib/evix/scheduler/scheduler.rb,
/// `Interface`): one non-blocking read of at most `length` bytes into
/// `buffer` at `offset` (bytes Ruby's own buffer holds first). The bytes
/// read (0 at end of stream, and for a `length` of 0 without a read),
/// -EAGAIN when nothing is there (Ruby then waits with `io_wait` and asks
/// again), or -errno.
fn io_read_once(
    ruby: &Ruby,
    _rb_self: Value,
    io: Value,
    buffer: Value,
    offset: Value,
    length: Value,
) -> Result<Value, Error> {
    let (file, offset, length) = single_transfer(ruby, &[io, buffer, offset, length])?;
    if length == 0 {
        return Ok(0.into_value_with(ruby));
    }
    let fd = match capi::direct(ruby, file, false) {
        Direct::Fd(fd) => fd,
        Direct::Closed => return Err(closed_stream(ruby)),
        Direct::Ruby => {
            let taken = capi::take_read_buffer(ruby, file, buffer, offset, length)?
                .ok_or_else(|| not_readable(ruby))?;
            return Ok(taken.into_value_with(ruby));
        }
    };
    let socket = is_socket(ruby, io);
    let read = capi::with_buffer_mut(ruby, buffer, |bytes| {
        bytes.get_mut(offset..offset + length).map(|room| {
            if socket {
                stream::recv(fd, room)
            } else {
                stream::read_nonblocking(fd, room)
            }
        })
    })?
    .ok_or_else(|| range_error(ruby))?;
    Ok(transferred(ruby, read))
}

/// `Fiber::Scheduler#io_write(io, buffer, offset, length)` as Ruby 4.1
/// calls it: one non-blocking write of at most `length` bytes from `buffer`
/// at `offset`. The bytes written (0 for a `length` of 0), -EAGAIN when
/// the kernel takes none now, or -errno.
fn io_write_once(
    ruby: &Ruby,
    _rb_self: Value,
    io: Value,
    buffer: Value,
    offset: Value,
    length: Value,
) -> Result<Value, Error> {
    let (file, offset, length) = single_transfer(ruby, &[io, buffer, offset, length])?;
    if length == 0 {
        return Ok(0.into_value_with(ruby));
    }
    let fd = match capi::hook_write_fd(ruby, file) {
        Direct::Fd(fd) => fd,
        Direct::Closed => return Err(closed_stream(ruby)),
        Direct::Ruby => return Ok(negative_errno(ruby, libc::EBADF)),
    };
    let socket = is_socket(ruby, io);
    let sent = capi::with_buffer(ruby, buffer, |bytes| {
        bytes.get(offset..offset + length).map(|rest| {
            if socket {
                stream::send(fd, rest)
            } else {
                stream::write_nonblocking(fd, rest)
            }
        })
    })?
    .ok_or_else(|| range_error(ruby))?;
    Ok(transferred(ruby, sent))
}

/// The IO, offset and length of a single-transfer `io_read`/`io_write`,
/// checked to lie within the buffer.
fn single_transfer(ruby: &Ruby, args: &[Value]) -> Result<(RFile, usize, usize), Error> {
    let count = |value: Value| Integer::from_value(value)?.to_usize().ok();
    let parsed = RFile::from_value(args[0])
        .zip(count(args[2]))
        .zip(count(args[3]));
    let ((file, offset), length) = parsed.ok_or_else(|| {
        Error::new(
            ruby.exception_type_error(),
            "io_read/io_write(io, buffer, offset, length) take an IO and two Integers >= 0",
        )
    })?;
    let end = offset
        .checked_add(length)
        .ok_or_else(|| range_error(ruby))?;
    if capi::with_buffer(ruby, args[1], |bytes| bytes.len())? < end {
        return Err(range_error(ruby));
    }
    Ok((file, offset, length))
}

/// One transfer's outcome as the hooks return it: bytes, -EAGAIN, -errno.
fn transferred(ruby: &Ruby, outcome: io::Result<usize>) -> Value {
    match outcome {
        Ok(n) => n.into_value_with(ruby),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => negative_errno(ruby, libc::EAGAIN),
        Err(e) => negative_errno(ruby, errno(&e)),
    }
}

fn range_error(ruby: &Ruby) -> Error {
    errors::argument(ruby, "offset + length exceeds the buffer's size".into())
}

/// The fd of an IO a hook waits on: the IOError of an IO closed meanwhile
/// for a closed one (what Ruby code rescues), else what Ruby raises.
fn descriptor(ruby: &Ruby, file: RFile) -> Result<RawFd, Error> {
    capi::io_descriptor(ruby, file).or_else(|e| {
        if file.funcall::<_, _, bool>(*IS_CLOSED, ())? {
            Err(closed_meanwhile(ruby))
        } else {
            Err(e)
        }
    })
}

/// The IOError of an IO closed while a fiber waits on it.
fn closed_meanwhile(ruby: &Ruby) -> Error {
    Error::new(
        ruby.exception_io_error(),
        "stream closed in another fiber or thread",
    )
}

/// The IO, length and offset of an `io_read`/`io_write` call: TypeError
/// for anything else.
fn io_call(ruby: &Ruby, args: &[Value]) -> Result<(RFile, usize, usize), Error> {
    counts(args).ok_or_else(|| {
        Error::new(
            ruby.exception_type_error(),
            "io_read/io_write(io, buffer, length, offset = 0) take an IO and two Integers >= 0",
        )
    })
}

fn counts(args: &[Value]) -> Option<(RFile, usize, usize)> {
    let file = RFile::from_value(args[0])?;
    let count = |value: Value| Integer::from_value(value)?.to_usize().ok();
    let offset = args.get(3).map_or(Some(0), |value| count(*value))?;
    Some((file, count(args[2])?, offset))
}

fn is_socket(ruby: &Ruby, io: Value) -> bool {
    BASIC_SOCKET
        .get()
        .is_some_and(|socket| io.is_kind_of(ruby.get_inner(*socket)))
}

/// The IO's own timeout (`IO#timeout`, Ruby >= 3.2), else none.
fn io_timeout(ruby: &Ruby, io: Value) -> Result<Option<Duration>, Error> {
    if !IO_TIMEOUT.load(Ordering::Relaxed) {
        return Ok(None);
    }
    let timeout: Value = io.funcall(*TIMEOUT, ())?;
    args::optional_seconds(ruby, (!timeout.is_nil()).then_some(timeout), "timeout")
}

fn errno(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

fn negative_errno(ruby: &Ruby, errno: i32) -> Value {
    (-i64::from(errno)).into_value_with(ruby)
}

/// The `IOError` Ruby raises for a closed IO.
fn closed_stream(ruby: &Ruby) -> Error {
    Error::new(ruby.exception_io_error(), "closed stream")
}

/// The `IOError` Ruby raises for a read from an IO opened only for writing.
fn not_readable(ruby: &Ruby) -> Error {
    Error::new(ruby.exception_io_error(), "not opened for reading")
}

fn offset_error(ruby: &Ruby) -> Error {
    errors::argument(ruby, "offset exceeds the buffer's size".into())
}

pub fn init(ruby: &Ruby, evix: RModule) -> Result<(), Error> {
    ruby.require("socket")?;
    let socket: RClass = ruby.class_object().const_get("BasicSocket")?;
    ruby.gc_register_mark_object(socket);
    let _ = BASIC_SOCKET.set(socket.into());
    let has_timeout: bool = ruby
        .class_io()
        .funcall("method_defined?", (ruby.to_symbol("timeout"),))?;
    IO_TIMEOUT.store(has_timeout, Ordering::Relaxed);

    let class = evix.define_class("Scheduler", ruby.class_object())?;
    class.define_alloc_func::<RbScheduler>();
    class.define_private_method("attach", method!(RbScheduler::attach, 2))?;
    class.define_method("loop", method!(RbScheduler::loop_reader, 0))?;
    class.define_method("kernel_sleep", method!(kernel_sleep, -1))?;
    class.define_method("block", method!(block, -1))?;
    class.define_method("unblock", method!(unblock, 2))?;
    class.define_method("io_wait", method!(io_wait, -1))?;
    class.define_method("io_read", method!(io_read, -1))?;
    class.define_method("io_write", method!(io_write, -1))?;
    class.define_method("io_read_once", method!(io_read_once, 4))?;
    class.define_method("io_write_once", method!(io_write_once, 4))?;
    class.define_private_method(
        "interrupt_parked",
        method!(RbScheduler::interrupt_parked, 2),
    )?;
    class.define_private_method("waits_by_kind", method!(RbScheduler::waits_by_kind, 0))?;
    Ok(())
}
