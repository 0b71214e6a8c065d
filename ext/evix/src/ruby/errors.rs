//! Error classes (defined in lib/evix.rb, looked up here) and the
//! conversions from Rust errors to the exceptions DESIGN.md §5 names.

use magnus::{prelude::*, value::Opaque, Error, ExceptionClass, RModule, Ruby};
use std::io;
use std::sync::OnceLock;

/// evix's own error classes (defined in lib/evix.rb before the extension is
/// loaded), looked up once by `init`: a lookup at first use would take a
/// lock that a second thread holding the GVL could wait on forever.
struct Classes {
    error: Opaque<ExceptionClass>,
    closed: Opaque<ExceptionClass>,
}

static CLASSES: OnceLock<Classes> = OnceLock::new();

pub fn init(ruby: &Ruby, evix: RModule) -> Result<(), Error> {
    let class = |name: &str| -> Result<Opaque<ExceptionClass>, Error> {
        let class: ExceptionClass = evix.const_get(name)?;
        ruby.gc_register_mark_object(class);
        Ok(class.into())
    };
    let classes = Classes {
        error: class("Error")?,
        closed: class("ClosedError")?,
    };
    let _ = CLASSES.set(classes);
    Ok(())
}

fn classes() -> &'static Classes {
    CLASSES.get().expect("errors::init ran in Init_evix")
}

fn evix_class(ruby: &Ruby, name: &str) -> ExceptionClass {
    let classes = classes();
    ruby.get_inner(match name {
        "ClosedError" => classes.closed,
        _ => classes.error,
    })
}

/// `Evix::Error`: misuse of a loop (wrong thread, after fork, re-entry).
pub fn evix(ruby: &Ruby, msg: impl Into<std::borrow::Cow<'static, str>>) -> Error {
    Error::new(evix_class(ruby, "Error"), msg)
}

/// `Evix::ClosedError`.
pub fn closed(ruby: &Ruby, what: &str) -> Error {
    Error::new(evix_class(ruby, "ClosedError"), format!("{what} is closed"))
}

/// `Evix::ClosedError` for a wait whose IO was released or closed meanwhile.
pub fn closed_while_waiting(ruby: &Ruby) -> Error {
    Error::new(
        evix_class(ruby, "ClosedError"),
        "IO was closed while waiting",
    )
}

/// Whether `error` is an `Evix::ClosedError`.
pub fn is_closed(ruby: &Ruby, error: &Error) -> bool {
    error.is_kind_of(evix_class(ruby, "ClosedError"))
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
