//! `Evix::Timer`: the handle `Evix::Loop#add_timer` returns.

use super::driver::Callback;
use super::event_loop::RbLoop;
use super::handle::{define_handle_methods, Handle, HandleClass};
use super::helpers::args;
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
    handle: Handle<TimerKey, RbLoop>,
    block: Opaque<Proc>,
    delay: Cell<Duration>,
    interval: Option<Duration>,
}

impl DataTypeFunctions for RbTimer {
    fn mark(&self, marker: &Marker) {
        self.handle.mark(marker);
        marker.mark(self.block);
    }
}

impl HandleClass for RbTimer {
    type Key = TimerKey;
    type Loop = RbLoop;

    fn handle(&self) -> &Handle<TimerKey, RbLoop> {
        &self.handle
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
            handle: Handle::new(owner, key),
            block: block.into(),
            delay: Cell::new(delay),
            interval,
        }
    }

    /// `again(delay = nil)`: re-arms the timer `delay` (or its last delay)
    /// from now, adding it again if it fired or was cancelled.
    fn again(ruby: &Ruby, rb_self: Obj<Self>, args: &[Value]) -> Result<Obj<Self>, Error> {
        let owner = rb_self.handle.owner(ruby);
        let core = owner.usable(ruby)?;
        args::arity(ruby, args, 0, 1)?;
        if let Some(value) = args::optional(args, 0) {
            rb_self.delay.set(args::seconds(ruby, value, "delay")?);
        }
        let delay = rb_self.delay.get();
        if !core.timer_again(rb_self.handle.key(), delay) {
            let block = ruby.get_inner(rb_self.block);
            let key = core.add_timer(delay, rb_self.interval, Callback::new(block));
            rb_self.handle.replace_key(core, key);
        }
        Ok(rb_self)
    }
}

pub fn init(ruby: &Ruby, evix: RModule) -> Result<(), Error> {
    let class = evix.define_class("Timer", ruby.class_object())?;
    class.undef_default_alloc_func();
    define_handle_methods!(class, RbTimer);
    class.define_method("again", method!(RbTimer::again, -1))?;
    Ok(())
}
