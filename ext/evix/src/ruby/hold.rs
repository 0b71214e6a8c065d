//! `Evix::Hold`: keeps a loop's `run` going, as a referenced timer would,
//! until released (`Loop#offload` while its job is out). A token, not a pair
//! of loop methods, so that a hold is released once however often it is asked.

use super::event_loop::RbLoop;
use magnus::{
    function, gc::Marker, method, prelude::*, typed_data::Obj, value::Opaque, DataTypeFunctions,
    Error, RModule, Ruby, TypedData,
};
use std::cell::Cell;

#[derive(TypedData)]
#[magnus(class = "Evix::Hold", free_immediately, size, mark, wb_protected)]
pub struct RbHold {
    owner: Opaque<Obj<RbLoop>>,
    held: Cell<bool>,
}

impl DataTypeFunctions for RbHold {
    fn mark(&self, marker: &Marker) {
        marker.mark(self.owner);
    }
}

impl RbHold {
    /// `Hold.new(loop)`: holds `loop` from now on.
    fn new(ruby: &Ruby, owner: Obj<RbLoop>) -> Result<Self, Error> {
        owner.usable(ruby)?.hold();
        Ok(RbHold {
            owner: owner.into(),
            held: Cell::new(true),
        })
    }

    /// `release`: ends the hold; false if it had ended already. Quiet on a
    /// closed loop, which holds nothing (it is called from `ensure`).
    fn release(ruby: &Ruby, rb_self: &Self) -> Result<bool, Error> {
        if !rb_self.held.get() {
            return Ok(false);
        }
        let owner = ruby.get_inner(rb_self.owner);
        let core = owner.usable_if_open(ruby)?;
        rb_self.held.set(false);
        Ok(core.is_some_and(|core| core.release_hold()))
    }
}

pub fn init(ruby: &Ruby, evix: RModule) -> Result<(), Error> {
    let class = evix.define_class("Hold", ruby.class_object())?;
    class.undef_default_alloc_func();
    class.define_singleton_method("new", function!(RbHold::new, 1))?;
    class.define_method("release", method!(RbHold::release, 0))?;
    Ok(())
}
