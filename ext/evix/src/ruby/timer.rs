//! `Evix::Timer`: the handle `Evix::Loop#add_timer` returns.

use super::event_loop::RbLoop;
use super::helpers::{args, callback::Callback};
use crate::core::TimerKey;
use magnus::{
    block::Proc, gc::Marker, method, prelude::*, typed_data::Obj, value::Opaque, DataTypeFunctions,
    Error, RModule, Ruby, TypedData, Value,
};
use std::cell::Cell;
use std::time::Duration;

#[derive(TypedData)]
#[magnus(class = "Evix::Timer", free_immediately, size, mark, wb_protected)]
pub struct RbTimer {
    owner: Opaque<Obj<RbLoop>>,
    key: Cell<TimerKey>,
    block: Opaque<Proc>,
    delay: Cell<Duration>,
    interval: Option<Duration>,
    referenced: Cell<bool>,
}

impl DataTypeFunctions for RbTimer {
    fn mark(&self, marker: &Marker) {
        marker.mark(self.owner);
        marker.mark(self.block);
    }
}

impl RbTimer {
    pub fn new(
        owner: Obj<RbLoop>,
        key: TimerKey,
        block: Proc,
        delay: Duration,
        interval: Option<Duration>,
    ) -> Self {
        RbTimer {
            owner: owner.into(),
            key: Cell::new(key),
            block: block.into(),
            delay: Cell::new(delay),
            interval,
            referenced: Cell::new(true),
        }
    }

    fn owner(&self, ruby: &Ruby) -> Obj<RbLoop> {
        ruby.get_inner(self.owner)
    }

    fn cancel(ruby: &Ruby, rb_self: &Self) -> Result<(), Error> {
        let owner = rb_self.owner(ruby);
        if let Some(core) = owner.usable_if_open(ruby)? {
            core.cancel_timer(rb_self.key.get());
        }
        Ok(())
    }

    fn is_active(ruby: &Ruby, rb_self: &Self) -> Result<bool, Error> {
        let owner = rb_self.owner(ruby);
        Ok(owner
            .usable_if_open(ruby)?
            .is_some_and(|core| core.timer_active(rb_self.key.get())))
    }

    fn again(ruby: &Ruby, rb_self: Obj<Self>, args: &[Value]) -> Result<Obj<Self>, Error> {
        let owner = rb_self.owner(ruby);
        let core = owner.usable(ruby)?;
        args::arity(ruby, args, 0, 1)?;
        if let Some(value) = args::optional(args, 0) {
            rb_self.delay.set(args::seconds(ruby, value, "delay")?);
        }
        let delay = rb_self.delay.get();
        if !core.timer_again(rb_self.key.get(), delay) {
            let block = ruby.get_inner(rb_self.block);
            let key = core.add_timer(delay, rb_self.interval, Callback::new(block));
            rb_self.key.set(key);
            core.timer_set_ref(key, rb_self.referenced.get());
        }
        Ok(rb_self)
    }

    fn set_ref(ruby: &Ruby, rb_self: Obj<Self>, referenced: bool) -> Result<Obj<Self>, Error> {
        let owner = rb_self.owner(ruby);
        let core = owner.usable(ruby)?;
        rb_self.referenced.set(referenced);
        core.timer_set_ref(rb_self.key.get(), referenced);
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
}

pub fn init(ruby: &Ruby, evix: RModule) -> Result<(), Error> {
    let class = evix.define_class("Timer", ruby.class_object())?;
    class.undef_default_alloc_func();
    class.define_method("cancel", method!(RbTimer::cancel, 0))?;
    class.define_method("active?", method!(RbTimer::is_active, 0))?;
    class.define_method("again", method!(RbTimer::again, -1))?;
    class.define_method("ref", method!(RbTimer::reference, 0))?;
    class.define_method("unref", method!(RbTimer::unreference, 0))?;
    class.define_method("ref?", method!(RbTimer::is_referenced, 0))?;
    Ok(())
}
