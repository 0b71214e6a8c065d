//! The Ruby binding: one file per class, each with its own `init`; the
//! driver and the Timer/Watcher handle they build on (`driver.rs`,
//! `handle.rs`); and leaf helpers in `helpers/`.

mod arguments;
mod driver;
mod event_loop;
mod handle;
mod helpers;
mod hold;
mod http_chunked;
mod http_parser;
mod io;
mod scheduler;
mod stall_probe;
mod timer;
mod watcher;

use crate::sys::BackendKind;
use helpers::{args, errors};
use magnus::{function, prelude::*, Error, RArray, Ruby, TypedData};

pub fn init(ruby: &Ruby) -> Result<(), Error> {
    let evix = ruby.define_module("Evix")?;
    errors::init(ruby, evix)?;
    evix.const_set("READ", args::READ)?;
    evix.const_set("WRITE", args::WRITE)?;
    evix.const_set("ONESHOT", args::ONESHOT)?;
    evix.define_module_function("backends", function!(backends, 0))?;
    arguments::init(ruby, evix)?;
    event_loop::init(ruby, evix)?;
    timer::init(ruby, evix)?;
    watcher::init(ruby, evix)?;
    scheduler::init(ruby, evix)?;
    stall_probe::init(ruby, evix)?;
    hold::init(ruby, evix)?;
    io::init(ruby, evix)?;
    let http = evix.define_module("HTTP")?;
    http_parser::init(ruby, http)?;
    http_chunked::init(ruby, http)?;
    // magnus's TypedData derive looks each class up lazily, in a OnceLock
    // whose initialiser calls Object.const_get and so may give up the GVL:
    // two threads wrapping their first object at once deadlock (one holds
    // the OnceLock and waits for the GVL, the other the reverse). Resolve
    // them now, while one thread runs.
    event_loop::RbLoop::class(ruby);
    timer::RbTimer::class(ruby);
    watcher::RbWatcher::class(ruby);
    scheduler::RbScheduler::class(ruby);
    stall_probe::RbStallProbe::class(ruby);
    hold::RbHold::class(ruby);
    http_parser::RbParser::class(ruby);
    http_chunked::RbChunkedDecoder::class(ruby);
    Ok(())
}

fn backends(ruby: &Ruby) -> RArray {
    ruby.ary_from_iter(
        BackendKind::available()
            .iter()
            .map(|kind| ruby.to_symbol(kind.name())),
    )
}
