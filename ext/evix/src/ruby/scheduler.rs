//! The `Evix::Scheduler` hooks that suspend a fiber, written in Rust (the
//! rest of the class is in lib/evix/scheduler.rb and buffer_hooks.rb). Ruby
//! calls these hooks from C, often under a C iterator (`n.times { sleep }`,
//! `readpartial` inside `each`); a hook written in Ruby re-enters the VM
//! there, and the frames of that re-entry stay on the machine stack of every
//! fiber parked in the hook: in the fibers benchmark one more resident page
//! per sleeping fiber.
//!
//! `io_read` and `io_write` move bytes straight between the kernel and the
//! `IO::Buffer` Ruby hands in (no String, no copy, no `*_nonblock` call):
//! `recv`/`send` on a socket, `read`/`write` with O_NONBLOCK set for the call
//! on a pipe, file or terminal. Only a read of an IO whose bytes Ruby's own
//! read buffer holds (an `ungetc`) goes to the Ruby method `io_read_other`.
//! A write never does: Ruby calls the hook to flush its own write buffer
//! too, and a Ruby method on the IO would flush that same buffer again.

use super::driver::owner_of;
use super::event_loop::RbLoop;
use super::helpers::{
    args,
    capi::{self, Direct},
    errors, nogvl,
};
use crate::sys::stream;
use magnus::{
    gc::Marker,
    method,
    prelude::*,
    value::{LazyId, Opaque},
    DataTypeFunctions, Error, Fiber, Integer, IntoValue, RClass, RFile, RModule, Ruby, TypedData,
    Value,
};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

static POST_WAKE: LazyId = LazyId::new("post_wake");
static IO_READ_OTHER: LazyId = LazyId::new("io_read_other");
static IO_READ_OTHER_ONCE: LazyId = LazyId::new("io_read_other_once");
static NONBLOCK_CALL: LazyId = LazyId::new("nonblock_call?");
static TIMEOUT: LazyId = LazyId::new("timeout");
static STAT: LazyId = LazyId::new("stat");
static IS_FILE: LazyId = LazyId::new("file?");

/// The scheduler's waiting state, marked by the GC with the object: its
/// loop, the fibers waiting in `block`/`kernel_sleep` (for `unblock`), the
/// unblocks that came before their block, and which sockets' last read was
/// short. The rest of the class is Ruby (lib/evix/scheduler.rb), which
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

    fn evloop(&self, ruby: &Ruby) -> Result<Value, Error> {
        self.evloop
            .get()
            .map(|evloop| ruby.get_inner(evloop))
            .ok_or_else(|| errors::evix(ruby, "Evix::Scheduler was not initialized"))
    }

    /// `attach(loop)`, private, from `initialize`: the loop it runs on, once.
    fn attach(ruby: &Ruby, rb_self: &Self, evloop: Value) -> Result<(), Error> {
        if capi::typed_ref::<RbLoop>(ruby, &evloop).is_none() {
            return Err(errors::type_error(
                ruby,
                format!(
                    "loop must be an Evix::Loop (got {})",
                    errors::describe(evloop)
                ),
            ));
        }
        if rb_self.evloop.get().is_some() {
            return Err(errors::evix(ruby, "Evix::Scheduler is initialized already"));
        }
        rb_self.evloop.set(Some(evloop.into()));
        Ok(())
    }

    /// `loop`: the Evix::Loop the scheduler runs on.
    fn loop_reader(ruby: &Ruby, rb_self: &Self) -> Result<Value, Error> {
        rb_self.evloop(ruby)
    }

    /// `wake(fiber, value)`, private, on the loop's thread (`unblock` posts
    /// it): ends `fiber`'s wait in `block`/`kernel_sleep` with `value`.
    fn wake(ruby: &Ruby, rb_self: &Self, fiber: Fiber, value: Value) -> Result<bool, Error> {
        let token = rb_self.token_of(owner_of(fiber));
        match token {
            Some(token) => RbLoop::resume_with(ruby, rb_self.evloop(ruby)?, token, value),
            None => Ok(false),
        }
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
}

/// `Fiber::Scheduler#unblock(blocker, fiber)`, from any thread: ends
/// `fiber`'s wait in `block` or `kernel_sleep` (none: nothing happens). On
/// the loop's thread (a Queue or Mutex between its fibers) the fiber is
/// queued for the loop's next turn at once; from another thread the wake
/// is posted (`post_wake`, in Ruby).
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
    let Some(token) = this.token_of(owner_of(fiber)) else {
        if !RbLoop::on_own_thread(ruby, evloop)? {
            this.note_early(ruby, owner_of(fiber), fiber);
        }
        return Ok(());
    };
    if RbLoop::resume_soon(ruby, evloop, token, ruby.qtrue().as_value())?.is_none() {
        let _: Value = rb_self.funcall(*POST_WAKE, (fiber,))?;
    }
    Ok(())
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
    if inherited(ruby, rb_self)? {
        let duration = args::optional_seconds(ruby, args::optional(args, 0), "duration")?;
        return nogvl::sleep_thread(ruby, duration);
    }
    suspend_blocked(ruby, rb_self, args, BlockedKind::Sleep).map(drop)
}

/// `Fiber::Scheduler#block(blocker, timeout = nil)` (Mutex, Queue,
/// ConditionVariable, Thread#join…): suspends the calling fiber until
/// `unblock`; false if `timeout` seconds passed first.
fn block(ruby: &Ruby, rb_self: Value, args: &[Value]) -> Result<bool, Error> {
    args::arity(ruby, args, 1, 2)?;
    if inherited(ruby, rb_self)? {
        // In a forked child only this thread can unblock: a short sleep,
        // after which Ruby checks its Mutex, Queue... again.
        let timeout = args::optional_seconds(ruby, args::optional(args, 1), "timeout")?;
        let nap = timeout.map_or(CHILD_SLICE, |t| t.min(CHILD_SLICE));
        nogvl::sleep_thread(ruby, Some(nap))?;
        return Ok(timeout.is_none_or(|t| t > nap));
    }
    let this = RbScheduler::this(ruby, &rb_self)?;
    if this
        .early
        .borrow_mut()
        .remove(&owner_of(ruby.fiber_current()))
        .is_some()
    {
        return Ok(true); // another thread unblocked it already
    }
    suspend_blocked(ruby, rb_self, &args[1..], BlockedKind::Blocker).map(Value::to_bool)
}

/// How long a forked child's hooks block at a time before they look at
/// interrupts (and, in `block`, at the blocker) again.
const CHILD_SLICE: Duration = Duration::from_millis(20);

/// Whether the scheduler's loop belongs to the parent of this process: a
/// child forked inside Evix.run keeps the scheduler (Ruby has no hook to
/// unset it) but must not touch its loop, so the hooks block the thread, as
/// Ruby does without a scheduler.
fn inherited(ruby: &Ruby, rb_self: Value) -> Result<bool, Error> {
    RbLoop::inherited(ruby, RbScheduler::this(ruby, &rb_self)?.evloop(ruby)?)
}

/// `wait_for` in a forked child: polls the fd, blocking the thread.
fn wait_in_child(
    ruby: &Ruby,
    io: Value,
    interest: i64,
    timeout: Value,
) -> Result<Result<Option<Value>, i64>, Error> {
    let file = RFile::from_value(io)
        .ok_or_else(|| errors::type_error(ruby, format!("not an IO: {}", errors::describe(io))))?;
    let fd = capi::io_descriptor(ruby, file).map_err(|_| closed_meanwhile(ruby))?;
    let timeout = (!timeout.is_nil()).then_some(timeout); // nil: no limit
    let deadline =
        args::optional_seconds(ruby, timeout, "timeout")?.map(|t| std::time::Instant::now() + t);
    let write = interest & args::WRITE != 0;
    loop {
        let slice = deadline.map_or(CHILD_SLICE, |d| {
            d.saturating_duration_since(std::time::Instant::now())
                .min(CHILD_SLICE)
        });
        let ms = slice.as_millis() as libc::c_int;
        match nogvl::without_gvl(&mut || stream::wait_one(fd, write, ms), &|| {}) {
            nogvl::Blocked::Done(Ok(true)) => return Ok(Ok(Some(interest.into_value_with(ruby)))),
            nogvl::Blocked::Done(Err(e)) => {
                return Ok(Err(i64::from(e.raw_os_error().unwrap_or(libc::EIO))))
            }
            nogvl::Blocked::Panicked => return Err(errors::evix(ruby, "poll panicked")),
            nogvl::Blocked::Done(Ok(false)) | nogvl::Blocked::Interrupted => {}
        }
        nogvl::check_interrupts(ruby)?;
        if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
            return Ok(Ok(None));
        }
    }
}

/// Suspends the calling fiber on the scheduler's loop for the optional
/// timeout in `timeout`, its wait's token noted in `@blocked` meanwhile so
/// that `unblock` may end it. Returns what ended it (nil: the timeout).
fn suspend_blocked(
    ruby: &Ruby,
    rb_self: Value,
    timeout: &[Value],
    kind: BlockedKind,
) -> Result<Value, Error> {
    let this = RbScheduler::this(ruby, &rb_self)?;
    let owner = owner_of(ruby.fiber_current());
    let timeout = timeout.first().copied().filter(|t| !t.is_nil());
    let kind = if timeout.is_some() {
        BlockedKind::Timed
    } else {
        kind
    };
    let resumed = RbLoop::suspend_with(ruby, this.evloop(ruby)?, timeout, |token| {
        this.blocked
            .borrow_mut()
            .insert(owner, Blocked { token, kind });
        Ok(())
    });
    // Whatever ended the wait (the timer, unblock, an exception raised into
    // the fiber), the fiber no longer waits.
    this.blocked.borrow_mut().remove(&owner);
    resumed
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
    let ready_now = (events & (READABLE | WRITABLE)).into_value_with(ruby);
    if io.is_kind_of(ruby.class_file())
        && io
            .funcall::<_, _, Value>(*STAT, ())?
            .funcall(*IS_FILE, ())?
    {
        return Ok(ready_now);
    }
    let mut interest = 0;
    if events & (READABLE | PRIORITY) != 0 {
        interest |= args::READ;
    }
    if events & WRITABLE != 0 {
        interest |= args::WRITE;
    }
    let timeout = args
        .get(2)
        .copied()
        .unwrap_or_else(|| ruby.qnil().as_value());
    match wait_for(ruby, rb_self, io, interest, timeout)? {
        Ok(Some(ready)) => {
            let ready: i64 = Integer::try_convert(ready)?.to_i64()?;
            let mut result = 0;
            if ready & args::READ != 0 {
                result |= events & (READABLE | PRIORITY);
            }
            if ready & args::WRITE != 0 {
                result |= events & WRITABLE;
            }
            Ok(result.into_value_with(ruby))
        }
        Ok(None) => Ok(ruby.qfalse().as_value()),
        // epoll_ctl refused the descriptor: nothing was registered.
        Err(errno) if errno == i64::from(libc::EPERM) => Ok(ready_now),
        Err(errno) => Err(errors::os(
            ruby,
            io::Error::from_raw_os_error(errno as i32),
            "io_wait",
        )),
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
    let fd = match capi::direct(ruby, file, false) {
        Direct::Fd(fd) => fd,
        Direct::Closed => return Err(closed_stream(ruby)),
        Direct::Ruby => return rb_self.funcall(*IO_READ_OTHER, args),
    };
    let this = RbScheduler::this(ruby, &rb_self)?;
    let waited_first = socket
        && this
            .drained
            .borrow()
            .get(fd as usize)
            .copied()
            .unwrap_or(false);
    let mut wait = waited_first;
    let mut total = 0;
    loop {
        if wait {
            match wait_for(ruby, rb_self, io, args::READ, io_timeout(ruby, io)?)? {
                Ok(Some(_)) => {}
                Ok(None) => return Ok(negative_errno(ruby, libc::ETIMEDOUT)),
                Err(errno) => return Ok((-errno).into_value_with(ruby)),
            }
            if open_fd(ruby, file, false)? != Some(fd) {
                // Ruby's buffer got bytes while we waited (an ungetc): they
                // come first, so Ruby's own method reads from here on.
                return if total == 0 {
                    rb_self.funcall(*IO_READ_OTHER, args)
                } else {
                    Ok(total.into_value_with(ruby))
                };
            }
        }
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
                if !socket && length == 0 && rb_self.funcall::<_, _, bool>(*NONBLOCK_CALL, ())? {
                    return Ok(negative_errno(ruby, libc::EAGAIN));
                }
                wait = true;
            }
            Err(e) => return Ok(negative_errno(ruby, e.raw_os_error().unwrap_or(libc::EIO))),
        }
    }
    if socket && wait != waited_first {
        let mut drained = this.drained.borrow_mut();
        if drained.len() <= fd as usize {
            drained.resize(fd as usize + 1, false);
        }
        drained[fd as usize] = wait;
    }
    Ok(total.into_value_with(ruby))
}

/// `Fiber::Scheduler#io_write(io, buffer, length, offset = 0)`: writes at
/// least `length` bytes (0: what the kernel takes at once) from `buffer` at
/// `offset`; the bytes written, or -errno.
fn io_write(ruby: &Ruby, rb_self: Value, args: &[Value]) -> Result<Value, Error> {
    args::arity(ruby, args, 3, 4)?;
    let (io, buffer) = (args[0], args[1]);
    let (file, length, mut offset) = io_call(ruby, args)?;
    let socket = is_socket(ruby, io);
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
                match wait_for(ruby, rb_self, io, args::WRITE, io_timeout(ruby, io)?)? {
                    Ok(Some(_)) => {}
                    Ok(None) => return Ok(negative_errno(ruby, libc::ETIMEDOUT)),
                    Err(errno) => return Ok((-errno).into_value_with(ruby)),
                }
            }
            Err(e) => return Ok(negative_errno(ruby, e.raw_os_error().unwrap_or(libc::EIO))),
        }
    }
    Ok(total.into_value_with(ruby))
}

/// `Fiber::Scheduler#io_read(io, buffer, offset, length)` as Ruby 4.1
/// calls it (RUBY_FIBER_SCHEDULER_VERSION 4; see lib/evix/scheduler.rb,
/// `Interface`): one non-blocking read of at most `length` bytes into
/// `buffer` at `offset`. The bytes read (0 at end of stream, and for a
/// `length` of 0 without a read), -EAGAIN when nothing is there (Ruby then
/// waits with `io_wait` and asks again), or -errno.
fn io_read_once(
    ruby: &Ruby,
    rb_self: Value,
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
        Direct::Ruby => return rb_self.funcall(*IO_READ_OTHER_ONCE, (io, buffer, offset, length)),
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
        Err(e) => negative_errno(ruby, e.raw_os_error().unwrap_or(libc::EIO)),
    }
}

fn range_error(ruby: &Ruby) -> Error {
    errors::argument(ruby, "offset + length exceeds the buffer's size".into())
}

/// `wait_for(io, interest, timeout = io.timeout)`, private, for the Ruby
/// hooks: the ready Evix::READ/WRITE bits, nil on timeout.
fn wait_for_method(ruby: &Ruby, rb_self: Value, args: &[Value]) -> Result<Value, Error> {
    args::arity(ruby, args, 2, 3)?;
    let interest = Integer::try_convert(args[1])?.to_i64()?;
    let timeout = match args.get(2) {
        Some(timeout) => *timeout,
        None => io_timeout(ruby, args[0])?,
    };
    match wait_for(ruby, rb_self, args[0], interest, timeout)? {
        Ok(ready) => Ok(ready.unwrap_or_else(|| ruby.qnil().as_value())),
        Err(errno) => Err(errors::os(
            ruby,
            io::Error::from_raw_os_error(errno as i32),
            "wait_for",
        )),
    }
}

/// Suspends the calling fiber until `io` is ready for `interest`
/// (Evix::READ/WRITE bits), at most `timeout` seconds (nil: no limit). The
/// ready bits, or None on timeout; IOError when the IO is closed before or
/// during the wait (the loop ends the waits on an fd that is closed).
fn wait_for(
    ruby: &Ruby,
    rb_self: Value,
    io: Value,
    interest: i64,
    timeout: Value,
) -> Result<Result<Option<Value>, i64>, Error> {
    let evloop = RbScheduler::this(ruby, &rb_self)?.evloop(ruby)?;
    if RbLoop::inherited(ruby, evloop)? {
        return wait_in_child(ruby, io, interest, timeout);
    }
    let refused = std::cell::Cell::new(None);
    let args = [io, interest.into_value_with(ruby), timeout];
    let waited = RbLoop::wait_io_with(ruby, evloop, &args, |e, fd| {
        refused.set(Some(i64::from(e.raw_os_error().unwrap_or(libc::EIO))));
        errors::os(ruby, e, &format!("wait_io(fd {fd})"))
    });
    match (waited, refused.get()) {
        // The kernel refused the registration: the hooks' -errno.
        (Err(_), Some(errno)) => Ok(Err(errno)),
        (Err(error), None) => Err(closed_before_wait(ruby, error)),
        (Ok(ready), _) => Ok(Ok((!ready.is_nil()).then_some(ready))),
    }
}

/// The IOError of an IO closed while a fiber waits on it.
fn closed_meanwhile(ruby: &Ruby) -> Error {
    Error::new(
        ruby.exception_io_error(),
        "stream closed in another fiber or thread",
    )
}

/// `Loop#wait_io` raises Evix::ClosedError for an IO closed before or
/// while the fiber waits; Ruby code expects the IOError of an IO closed
/// meanwhile.
fn closed_before_wait(ruby: &Ruby, error: Error) -> Error {
    if errors::is_closed(ruby, &error) {
        closed_meanwhile(ruby)
    } else {
        error
    }
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

/// The fd to read (or write) `file` through directly; None when Ruby's own
/// buffer holds bytes for it; IOError when it is closed.
fn open_fd(ruby: &Ruby, file: RFile, write: bool) -> Result<Option<i32>, Error> {
    match capi::direct(ruby, file, write) {
        Direct::Fd(fd) => Ok(Some(fd)),
        Direct::Closed => Err(closed_stream(ruby)),
        Direct::Ruby => Ok(None),
    }
}

/// The IO's own timeout (`IO#timeout`, Ruby >= 3.2), else nil.
fn io_timeout(ruby: &Ruby, io: Value) -> Result<Value, Error> {
    if IO_TIMEOUT.load(Ordering::Relaxed) {
        io.funcall(*TIMEOUT, ())
    } else {
        Ok(ruby.qnil().as_value())
    }
}

fn negative_errno(ruby: &Ruby, errno: i32) -> Value {
    (-i64::from(errno)).into_value_with(ruby)
}

/// The `IOError` Ruby raises for a closed IO.
fn closed_stream(ruby: &Ruby) -> Error {
    Error::new(ruby.exception_io_error(), "closed stream")
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
    class.define_private_method("attach", method!(RbScheduler::attach, 1))?;
    class.define_method("loop", method!(RbScheduler::loop_reader, 0))?;
    class.define_private_method("wake", method!(RbScheduler::wake, 2))?;
    class.define_method("kernel_sleep", method!(kernel_sleep, -1))?;
    class.define_method("block", method!(block, -1))?;
    class.define_method("unblock", method!(unblock, 2))?;
    class.define_method("io_wait", method!(io_wait, -1))?;
    class.define_method("io_read", method!(io_read, -1))?;
    class.define_method("io_write", method!(io_write, -1))?;
    class.define_method("io_read_once", method!(io_read_once, 4))?;
    class.define_method("io_write_once", method!(io_write_once, 4))?;
    class.define_private_method("wait_for", method!(wait_for_method, -1))?;
    class.define_private_method("waits_by_kind", method!(RbScheduler::waits_by_kind, 0))?;
    Ok(())
}
