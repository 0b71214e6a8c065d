//! The Ruby binding: one file per class, each with its own `init`.

mod args;
mod callback;
mod errors;
mod event_loop;
mod nogvl;
mod scheduler;
mod stream;
mod timer;
mod watcher;

use crate::sys::BackendKind;
use magnus::{function, prelude::*, Error, RArray, Ruby};

pub fn init(ruby: &Ruby) -> Result<(), Error> {
    let evix = ruby.define_module("Evix")?;
    errors::init(ruby, evix)?;
    evix.const_set("READ", args::READ)?;
    evix.const_set("WRITE", args::WRITE)?;
    evix.const_set("ONESHOT", args::ONESHOT)?;
    evix.define_module_function("backends", function!(backends, 0))?;
    event_loop::init(ruby, evix)?;
    timer::init(ruby, evix)?;
    watcher::init(ruby, evix)?;
    scheduler::init(ruby, evix)?;
    stream::init(ruby, evix)?;
    Ok(())
}

fn backends(ruby: &Ruby) -> RArray {
    ruby.ary_from_iter(
        BackendKind::available()
            .iter()
            .map(|kind| ruby.to_symbol(kind.name())),
    )
}
