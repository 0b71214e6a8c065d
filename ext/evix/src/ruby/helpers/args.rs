//! Argument conversions shared by the Ruby classes: durations in seconds and
//! event bits, each rejecting bad input with an error that names the argument.

use super::errors;
use crate::sys::Interest;
use magnus::{prelude::*, value::LazyId, Error, Float, Integer, Ruby, Value};
use std::time::Duration;

static TO_F: LazyId = LazyId::new("to_f");
static REAL: LazyId = LazyId::new("real?");

pub const READ: i64 = 1;
pub const WRITE: i64 = 2;
pub const ONESHOT: i64 = 4;

/// Checks the number of positional arguments of a method defined with arity
/// -1 against `min..=max` and raises Ruby's own `ArgumentError` ("wrong
/// number of arguments (given 4, expected 2..3)") otherwise. The hot methods
/// use this instead of magnus's `scan_args`, which formats its
/// `rb_scan_args` spec string into a heap `CString` on every call.
pub fn arity(ruby: &Ruby, args: &[Value], min: usize, max: usize) -> Result<(), Error> {
    if args.len() < min || args.len() > max {
        return ruby.check_arity(args.len(), min..=max);
    }
    Ok(())
}

/// The optional positional argument at `index`, `None` when it was not
/// given or is nil.
pub fn optional(args: &[Value], index: usize) -> Option<Value> {
    args.get(index).copied().filter(|v| !v.is_nil())
}

/// An optional duration argument (absent or nil: `None`), as [`seconds`].
pub fn optional_seconds(
    ruby: &Ruby,
    value: Option<Value>,
    name: &str,
) -> Result<Option<Duration>, Error> {
    value.map(|v| seconds(ruby, v, name)).transpose()
}

/// Seconds (Integer, Float, Rational or any real Numeric) as a Duration:
/// the one rule for every evix duration, Ruby's checks included (they call
/// it through `Evix::Arguments.seconds`). The error names the argument and
/// shows the value; the limit is what a Duration holds (under 2**64 s).
pub fn seconds(ruby: &Ruby, value: Value, name: &str) -> Result<Duration, Error> {
    let secs = if let Some(i) = Integer::from_value(value) {
        match i.to_i64() {
            // Exact, and cheaper than the float conversion below.
            Ok(i) if i >= 0 => return Ok(Duration::from_secs(i as u64)),
            Ok(i) => i as f64,
            Err(_) => value.funcall::<_, _, f64>(*TO_F, ())?,
        }
    } else if let Some(f) = Float::from_value(value) {
        f.to_f64()
    } else if value.is_kind_of(ruby.class_numeric()) {
        // A Complex has no place on a clock, even with no imaginary part.
        if !value.funcall::<_, _, bool>(*REAL, ())? {
            return Err(not_finite(ruby, value, name));
        }
        value.funcall::<_, _, f64>(*TO_F, ())?
    } else {
        return Err(errors::type_error(
            ruby,
            format!(
                "{name} must be a Numeric number of seconds (got {})",
                errors::describe(value)
            ),
        ));
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(not_finite(ruby, value, name));
    }
    Duration::try_from_secs_f64(secs).map_err(|_| {
        errors::argument(
            ruby,
            format!("{name} is too large (got {})", errors::describe(value)),
        )
    })
}

fn not_finite(ruby: &Ruby, value: Value, name: &str) -> Error {
    errors::argument(
        ruby,
        format!(
            "{name} must be a finite, non-negative number of seconds (got {})",
            errors::describe(value)
        ),
    )
}

/// `Evix::READ | Evix::WRITE | Evix::ONESHOT` bits as (interest, oneshot).
pub fn events(ruby: &Ruby, value: Value) -> Result<(Interest, bool), Error> {
    let Some(bits) = Integer::from_value(value) else {
        return Err(errors::type_error(
            ruby,
            format!(
                "events must be an Integer of Evix::READ/WRITE/ONESHOT bits (got {})",
                errors::describe(value)
            ),
        ));
    };
    let bits = bits.to_i64().unwrap_or(-1);
    if bits < 0 || bits & !(READ | WRITE | ONESHOT) != 0 || bits & (READ | WRITE) == 0 {
        return Err(errors::argument(
            ruby,
            format!("events must combine Evix::READ, Evix::WRITE and Evix::ONESHOT and include READ or WRITE (got {bits})"),
        ));
    }
    Ok((Interest::from_bits(bits as u8), bits & ONESHOT != 0))
}
