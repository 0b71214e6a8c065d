//! Error classes (defined in lib/evix.rb, looked up here) and the
//! conversions from Rust errors to the exceptions docs/architecture.md ("Errors") names.

use magnus::{prelude::*, value::Opaque, Error, ExceptionClass, Module, RModule, Ruby};
use std::io;
use std::sync::OnceLock;

/// The exception classes raised or recognised here, looked up once by
/// `init` (evix's own are defined in lib/evix.rb before the extension is
/// loaded): a lookup at first use would take a lock that a second thread
/// holding the GVL could wait on forever, and a failed one would leave an
/// error with no class to raise.
struct Classes {
    error: Opaque<ExceptionClass>,
    closed: Opaque<ExceptionClass>,
    fiber_error: Opaque<ExceptionClass>,
}

static CLASSES: OnceLock<Classes> = OnceLock::new();

pub fn init(ruby: &Ruby, evix: RModule) -> Result<(), Error> {
    let classes = Classes {
        error: lookup(ruby, evix, "Error")?,
        closed: lookup(ruby, evix, "ClosedError")?,
        fiber_error: lookup(ruby, ruby.class_object(), "FiberError")?,
    };
    let _ = CLASSES.set(classes);
    Ok(())
}

fn lookup(ruby: &Ruby, module: impl Module, name: &str) -> Result<Opaque<ExceptionClass>, Error> {
    let class: ExceptionClass = module.const_get(name)?;
    ruby.gc_register_mark_object(class);
    Ok(class.into())
}

/// The classes `init` looked up; it runs first in `Init_evix`, before any
/// method that raises is defined.
fn classes() -> &'static Classes {
    CLASSES.get().expect("errors::init ran in Init_evix")
}

/// `Evix::Error`: misuse of a loop (wrong thread, after fork, re-entry).
pub fn evix(ruby: &Ruby, msg: impl Into<std::borrow::Cow<'static, str>>) -> Error {
    Error::new(ruby.get_inner(classes().error), msg)
}

/// `Evix::ClosedError`.
pub fn closed(ruby: &Ruby, what: &str) -> Error {
    Error::new(
        ruby.get_inner(classes().closed),
        format!("{what} is closed"),
    )
}

/// `Evix::ClosedError` for a wait whose IO was released or closed meanwhile.
pub fn closed_while_waiting(ruby: &Ruby) -> Error {
    Error::new(
        ruby.get_inner(classes().closed),
        "IO was closed while waiting",
    )
}

/// Whether `error` is a `FiberError` (a switch Ruby refused).
pub fn is_fiber_error(ruby: &Ruby, error: &Error) -> bool {
    error.is_kind_of(ruby.get_inner(classes().fiber_error))
}

pub fn argument(ruby: &Ruby, msg: String) -> Error {
    Error::new(ruby.exception_arg_error(), msg)
}

pub fn type_error(ruby: &Ruby, msg: String) -> Error {
    Error::new(ruby.exception_type_error(), msg)
}

/// An OS error as the matching `Errno::*` exception, with `context` in the message.
pub fn os(ruby: &Ruby, err: io::Error, context: &str) -> Error {
    match err.raw_os_error() {
        Some(errno) => match ruby
            .exception_system_call_error()
            .new_instance((context.to_string(), errno))
        {
            Ok(exception) => exception.into(),
            Err(e) => e,
        },
        None => evix(ruby, format!("{context}: {err}")),
    }
}

/// `inspect` of a value for error messages.
pub fn describe(value: magnus::Value) -> String {
    value.inspect().chars().take(60).collect()
}

/// Runs `f`, turning a Rust panic into `Evix::Error` so it never reaches Ruby
/// as `fatal` (or worse, unwinds into C).
pub fn guard<T>(ruby: &Ruby, f: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|panic| {
        let msg = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown".into());
        Err(evix(
            ruby,
            format!("internal error in evix (Rust panic: {msg})"),
        ))
    })
}
