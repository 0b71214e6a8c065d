//! `Evix::Loop`: the Rust loop core as a Ruby object.

use super::args;
use super::callback::{required_block, Callback, RubyDriver};
use super::errors;
use super::nogvl;
use super::timer::RbTimer;
use super::watcher::RbWatcher;
use crate::core::{Loop, Pin, RunError, RunMode};
use crate::sys::{fork, BackendKind};
use magnus::rb_sys::AsRawValue;
use magnus::{
    function, gc::Marker, method, prelude::*, scan_args, typed_data::Obj, value::LazyId,
    DataTypeFunctions, Error, RFile, RHash, RModule, Ruby, Symbol, TryConvert, TypedData, Value,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

static NEXT_THREAD: AtomicU64 = AtomicU64::new(1);

// Interned once: calling a method by `&str` interns its name on every call.
static TO_IO: LazyId = LazyId::new("to_io");
static CLOSED: LazyId = LazyId::new("closed?");
static FILENO: LazyId = LazyId::new("fileno");
static REPEAT: LazyId = LazyId::new("repeat");
static BACKEND: LazyId = LazyId::new("backend");

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
    owner: u64,
    fork_generation: u64,
}

impl DataTypeFunctions for RbLoop {
    fn mark(&self, marker: &Marker) {
        let visited = self
            .core
            .for_each_callback(|callback| callback.mark(marker));
        debug_assert!(visited, "loop state borrowed during GC mark");
    }
}

impl RbLoop {
    fn new(ruby: &Ruby, args: &[Value]) -> Result<Self, Error> {
        let args = scan_args::scan_args::<(), (), (), (), RHash, ()>(args)?;
        let kw =
            scan_args::get_kwargs::<_, (), (Option<Value>,), ()>(args.keywords, &[], &[*BACKEND])?;
        let kind = backend_kind(ruby, kw.optional.0)?;
        let core = Loop::new(kind).map_err(|e| errors::os(ruby, e, "Evix::Loop.new"))?;
        Ok(RbLoop {
            core,
            owner: current_thread(),
            fork_generation: fork::generation(),
        })
    }

    /// The core, after the checks every method but post/wakeup/closed? makes.
    pub fn usable(&self, ruby: &Ruby) -> Result<&Loop<Callback>, Error> {
        self.not_forked(ruby)?;
        if self.owner != current_thread() {
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

    fn not_forked(&self, ruby: &Ruby) -> Result<(), Error> {
        if self.fork_generation != fork::generation() {
            return Err(errors::evix(
                ruby,
                "this Evix::Loop was created before fork; create a new loop in the child process",
            ));
        }
        Ok(())
    }

    /// The core if the loop is open and on its thread, `None` if it is closed
    /// (handles' cancel/active? are quiet on a closed loop).
    pub fn open(&self, ruby: &Ruby) -> Result<Option<&Loop<Callback>>, Error> {
        if self.core.is_closed() {
            return Ok(None);
        }
        self.usable(ruby).map(Some)
    }

    /// `self` of the hottest methods, which take it as a plain `Value`:
    /// magnus's conversion to `Obj<Self>` or `&Self` costs an `rb_protect`
    /// around `rb_check_typeddata` per call.
    fn this<'a>(ruby: &Ruby, rb_self: &'a Value) -> Result<&'a Self, Error> {
        nogvl::typed_ref(ruby, rb_self).ok_or_else(|| {
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

    /// Suspends the calling fiber until `io` is ready for `events` and
    /// returns the ready bits, or nil once `timeout` passed. Whatever else
    /// resumes the fiber meanwhile is returned as is. The fd's registration
    /// is pinned to `io` (see `core::Pin`), so waiting again costs no syscall.
    pub(super) fn wait_io(ruby: &Ruby, rb_self: Value, args: &[Value]) -> Result<Value, Error> {
        let core = Self::this(ruby, &rb_self)?.usable(ruby)?;
        args::arity(ruby, args, 2, 3)?;
        let (fd, keep) = descriptor(ruby, args[0])?;
        let (interest, _) = args::events(ruby, args[1])?;
        let timeout = args::optional_seconds(ruby, args::optional(args, 2), "timeout")?;
        let fiber = ruby.fiber_current();
        let resume = Callback::resume(fiber, keep);
        // The pin keeps the same IO alive as `resume`; the loop's mark
        // reaches both. (The core drops it unless the fd's registration is
        // new or changes owner.)
        let pin = keep.map(|io| Pin {
            owner: (io.as_raw(), REOPENS.load(Ordering::Relaxed)),
            keep: Callback::keep_alive(io),
        });
        let watcher = errors::guard(ruby, || {
            core.add_watcher(fd, interest, true, resume, pin)
                .map_err(|e| errors::os(ruby, e, &format!("wait_io(fd {fd})")))
        })?;
        let timer = timeout.map(|t| core.add_timer(t, None, resume));
        let result = ruby.fiber_yield::<_, Value>(());
        // Whatever resumed us, neither may fire later.
        core.cancel_watcher(watcher);
        if let Some(timer) = timer {
            core.cancel_timer(timer);
        }
        result
    }

    /// Suspends the calling fiber until something resumes it, or until
    /// `timeout` seconds passed (then it returns nil); returns what it was
    /// resumed with. One timer and no Ruby object per call.
    pub(super) fn suspend(ruby: &Ruby, rb_self: Value, args: &[Value]) -> Result<Value, Error> {
        let core = Self::this(ruby, &rb_self)?.usable(ruby)?;
        args::arity(ruby, args, 0, 1)?;
        let timeout = args::optional_seconds(ruby, args::optional(args, 0), "timeout")?;
        let resume = Callback::resume(ruby.fiber_current(), None);
        let timer = timeout.map(|t| core.add_timer(t, None, resume));
        let result = ruby.fiber_yield::<_, Value>(());
        if let Some(timer) = timer {
            core.cancel_timer(timer);
        }
        result
    }

    /// Called before any `IO#reopen` (lib/evix/reopening.rb): registrations
    /// pinned so far are checked with the kernel on their next wait.
    fn io_reopened() {
        REOPENS.fetch_add(1, Ordering::Relaxed);
    }

    /// Forgets `io`'s registration and removes its watchers before it is closed.
    fn release_io(ruby: &Ruby, rb_self: &Self, target: Value) -> Result<(), Error> {
        let core = rb_self.usable(ruby)?;
        if let (fd, Some(_)) = descriptor(ruby, target)? {
            core.release_fd(fd);
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
        self.core.shared().wake.wake();
    }

    fn run(ruby: &Ruby, rb_self: &Self, args: &[Value]) -> Result<(), Error> {
        let core = rb_self.usable(ruby)?;
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
            core.run(mode, &mut RubyDriver { ruby })
                .map(drop)
                .map_err(|e| run_error(ruby, e))
        })
    }

    fn run_once(ruby: &Ruby, rb_self: &Self, args: &[Value]) -> Result<bool, Error> {
        let core = rb_self.usable(ruby)?;
        args::arity(ruby, args, 0, 1)?;
        let timeout: Option<Duration> =
            args::optional_seconds(ruby, args::optional(args, 0), "timeout")?;
        errors::guard(ruby, || {
            core.run_once(timeout, &mut RubyDriver { ruby })
                .map_err(|e| run_error(ruby, e))
        })
    }

    fn alive(ruby: &Ruby, rb_self: &Self) -> Result<bool, Error> {
        Ok(rb_self.usable(ruby)?.alive())
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
        hash.aset(ruby.to_symbol("iterations"), stats.iterations)?;
        hash.aset(ruby.to_symbol("rebuilds"), stats.rebuilds)?;
        Ok(hash)
    }
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
    match nogvl::io_descriptor(ruby, file) {
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
    class.define_method("post", method!(RbLoop::post, 0))?;
    class.define_method("wakeup", method!(RbLoop::wakeup, 0))?;
    class.define_method("run", method!(RbLoop::run, -1))?;
    class.define_method("run_once", method!(RbLoop::run_once, -1))?;
    class.define_method("alive?", method!(RbLoop::alive, 0))?;
    class.define_method("stop", method!(RbLoop::stop, 0))?;
    class.define_method("close", method!(RbLoop::close, 0))?;
    class.define_method("closed?", method!(RbLoop::is_closed, 0))?;
    class.define_private_method("ensure_usable!", method!(RbLoop::ensure_usable, 0))?;
    class.define_method("backend", method!(RbLoop::backend, 0))?;
    class.define_method("stats", method!(RbLoop::stats, 0))?;
    Ok(())
}
