//! `Evix::Arguments` (lib/evix/arguments.rb): the argument rules of the
//! native entry points, for the Ruby ones to check theirs the same way.

use super::helpers::args;
use magnus::{function, prelude::*, Error, RModule, Ruby, Value};

/// `Evix::Arguments.seconds(value, name)`: +value+ as given, if
/// `args::seconds` takes it.
fn seconds(ruby: &Ruby, value: Value, name: String) -> Result<Value, Error> {
    args::seconds(ruby, value, &name)?;
    Ok(value)
}

pub fn init(_ruby: &Ruby, evix: RModule) -> Result<(), Error> {
    let arguments = evix.define_module("Arguments")?;
    arguments.define_singleton_method("seconds", function!(seconds, 2))?;
    Ok(())
}
