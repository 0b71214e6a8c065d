//! `Evix::Watcher`: the handle `Evix::Loop#add_io` returns.

use super::event_loop::RbLoop;
use super::handle::{define_handle_methods, Handle, HandleClass};
use crate::core::WatcherKey;
use magnus::{
    gc::Marker, method, prelude::*, typed_data::Obj, DataTypeFunctions, Error, RModule, Ruby,
    TypedData,
};

#[derive(TypedData)]
#[magnus(class = "Evix::Watcher", free_immediately, size, mark, wb_protected)]
pub struct RbWatcher {
    handle: Handle<WatcherKey, RbLoop>,
    events: i64,
}

impl DataTypeFunctions for RbWatcher {
    fn mark(&self, marker: &Marker) {
        self.handle.mark(marker);
    }
}

impl HandleClass for RbWatcher {
    type Key = WatcherKey;
    type Loop = RbLoop;

    fn handle(&self) -> &Handle<WatcherKey, RbLoop> {
        &self.handle
    }
}

impl RbWatcher {
    pub fn new(owner: Obj<RbLoop>, key: WatcherKey, events: i64) -> Self {
        RbWatcher {
            handle: Handle::new(owner, key),
            events,
        }
    }

    /// `events`: the event bits it was added with.
    fn events(&self) -> i64 {
        self.events
    }
}

pub fn init(ruby: &Ruby, evix: RModule) -> Result<(), Error> {
    let class = evix.define_class("Watcher", ruby.class_object())?;
    class.undef_default_alloc_func();
    define_handle_methods!(class, RbWatcher);
    class.define_method("events", method!(RbWatcher::events, 0))?;
    Ok(())
}
