//! `Evix::Watcher`: the handle `Evix::Loop#add_io` returns.

use super::event_loop::RbLoop;
use crate::core::WatcherKey;
use magnus::{
    gc::Marker, method, prelude::*, typed_data::Obj, value::Opaque, DataTypeFunctions, Error,
    RModule, Ruby, TypedData,
};
use std::cell::Cell;

#[derive(TypedData)]
#[magnus(class = "Evix::Watcher", free_immediately, size, mark, wb_protected)]
pub struct RbWatcher {
    owner: Opaque<Obj<RbLoop>>,
    key: WatcherKey,
    events: i64,
    referenced: Cell<bool>,
}

impl DataTypeFunctions for RbWatcher {
    fn mark(&self, marker: &Marker) {
        marker.mark(self.owner);
    }
}

impl RbWatcher {
    pub fn new(owner: Obj<RbLoop>, key: WatcherKey, events: i64) -> Self {
        RbWatcher {
            owner: owner.into(),
            key,
            events,
            referenced: Cell::new(true),
        }
    }

    fn cancel(ruby: &Ruby, rb_self: &Self) -> Result<(), Error> {
        let owner = ruby.get_inner(rb_self.owner);
        if let Some(core) = owner.usable_if_open(ruby)? {
            core.cancel_watcher(rb_self.key);
        }
        Ok(())
    }

    fn is_active(ruby: &Ruby, rb_self: &Self) -> Result<bool, Error> {
        let owner = ruby.get_inner(rb_self.owner);
        Ok(owner
            .usable_if_open(ruby)?
            .is_some_and(|core| core.watcher_active(rb_self.key)))
    }

    fn set_ref(ruby: &Ruby, rb_self: Obj<Self>, referenced: bool) -> Result<Obj<Self>, Error> {
        let owner = ruby.get_inner(rb_self.owner);
        owner.usable(ruby)?.watcher_set_ref(rb_self.key, referenced);
        rb_self.referenced.set(referenced);
        Ok(rb_self)
    }

    fn reference(ruby: &Ruby, rb_self: Obj<Self>) -> Result<Obj<Self>, Error> {
        Self::set_ref(ruby, rb_self, true)
    }

    fn unreference(ruby: &Ruby, rb_self: Obj<Self>) -> Result<Obj<Self>, Error> {
        Self::set_ref(ruby, rb_self, false)
    }

    fn is_referenced(&self) -> bool {
        self.referenced.get()
    }

    fn events(&self) -> i64 {
        self.events
    }
}

pub fn init(ruby: &Ruby, evix: RModule) -> Result<(), Error> {
    let class = evix.define_class("Watcher", ruby.class_object())?;
    class.undef_default_alloc_func();
    class.define_method("cancel", method!(RbWatcher::cancel, 0))?;
    class.define_method("active?", method!(RbWatcher::is_active, 0))?;
    class.define_method("ref", method!(RbWatcher::reference, 0))?;
    class.define_method("unref", method!(RbWatcher::unreference, 0))?;
    class.define_method("ref?", method!(RbWatcher::is_referenced, 0))?;
    class.define_method("events", method!(RbWatcher::events, 0))?;
    Ok(())
}
