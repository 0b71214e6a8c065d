//! What `Evix::Timer` and `Evix::Watcher` share: a handle on one timer or
//! watcher of a loop, which cancels it, says whether it is still active, and
//! sets whether it keeps the loop running. Each class holds a [`Handle`], is
//! a [`HandleClass`], gets these methods from [`define_handle_methods!`],
//! and adds its own (`again`, `events`).

use super::driver::Callback;
use crate::core::{Loop, TimerKey, WatcherKey};
use magnus::{gc::Marker, typed_data::Obj, value::Opaque, Error, Ruby, TypedData};
use std::cell::Cell;

/// The loop a handle belongs to (`RbLoop`), as a trait so that this file
/// does not depend on the class file: the dependency runs one way.
pub trait Owner: TypedData {
    /// The core, after the checks every loop method makes (thread, fork, closed).
    fn usable(&self, ruby: &Ruby) -> Result<&Loop<Callback>, Error>;

    /// As `usable`, but `None` on a closed loop.
    fn usable_if_open(&self, ruby: &Ruby) -> Result<Option<&Loop<Callback>>, Error>;
}

/// What a handle names in the core: a timer or a watcher.
pub trait Entry: Copy {
    fn cancel(self, core: &Loop<Callback>);
    fn is_active(self, core: &Loop<Callback>) -> bool;
    fn set_ref(self, core: &Loop<Callback>, referenced: bool);
}

impl Entry for TimerKey {
    fn cancel(self, core: &Loop<Callback>) {
        core.cancel_timer(self);
    }

    fn is_active(self, core: &Loop<Callback>) -> bool {
        core.timer_active(self)
    }

    fn set_ref(self, core: &Loop<Callback>, referenced: bool) {
        core.timer_set_ref(self, referenced);
    }
}

impl Entry for WatcherKey {
    fn cancel(self, core: &Loop<Callback>) {
        core.cancel_watcher(self);
    }

    fn is_active(self, core: &Loop<Callback>) -> bool {
        core.watcher_active(self)
    }

    fn set_ref(self, core: &Loop<Callback>, referenced: bool) {
        core.watcher_set_ref(self, referenced);
    }
}

pub struct Handle<K, L: Owner> {
    owner: Opaque<Obj<L>>,
    key: Cell<K>,
    /// What `ref`/`unref` asked last (kept for a timer `again` re-adds).
    referenced: Cell<bool>,
}

impl<K: Entry, L: Owner> Handle<K, L> {
    pub fn new(owner: Obj<L>, key: K) -> Self {
        Handle {
            owner: owner.into(),
            key: Cell::new(key),
            referenced: Cell::new(true),
        }
    }

    /// For the class's GC mark: the handle keeps its loop alive.
    pub fn mark(&self, marker: &Marker) {
        marker.mark(self.owner);
    }

    pub fn owner(&self, ruby: &Ruby) -> Obj<L> {
        ruby.get_inner(self.owner)
    }

    pub fn key(&self) -> K {
        self.key.get()
    }

    /// Names `key` from now on (a timer re-added by `again`), referenced or
    /// not as the handle was.
    pub fn replace_key(&self, core: &Loop<Callback>, key: K) {
        self.key.set(key);
        key.set_ref(core, self.referenced.get());
    }

    /// `cancel`: quiet on a closed loop.
    fn cancel(&self, ruby: &Ruby) -> Result<(), Error> {
        let owner = self.owner(ruby);
        if let Some(core) = owner.usable_if_open(ruby)? {
            self.key().cancel(core);
        }
        Ok(())
    }

    /// `active?`: false on a closed loop.
    fn is_active(&self, ruby: &Ruby) -> Result<bool, Error> {
        let owner = self.owner(ruby);
        Ok(owner
            .usable_if_open(ruby)?
            .is_some_and(|core| self.key().is_active(core)))
    }

    /// `ref` (true) and `unref` (false).
    fn set_ref(&self, ruby: &Ruby, referenced: bool) -> Result<(), Error> {
        let owner = self.owner(ruby);
        let core = owner.usable(ruby)?;
        self.referenced.set(referenced);
        self.key().set_ref(core, referenced);
        Ok(())
    }
}

/// A Ruby class whose objects hold a [`Handle`]: its methods, as
/// [`define_handle_methods!`] defines them.
pub trait HandleClass: TypedData + Sized {
    type Key: Entry;
    type Loop: Owner;

    fn handle(&self) -> &Handle<Self::Key, Self::Loop>;

    fn cancel(ruby: &Ruby, rb_self: &Self) -> Result<(), Error> {
        rb_self.handle().cancel(ruby)
    }

    fn is_active(ruby: &Ruby, rb_self: &Self) -> Result<bool, Error> {
        rb_self.handle().is_active(ruby)
    }

    fn reference(ruby: &Ruby, rb_self: Obj<Self>) -> Result<Obj<Self>, Error> {
        rb_self.handle().set_ref(ruby, true)?;
        Ok(rb_self)
    }

    fn unreference(ruby: &Ruby, rb_self: Obj<Self>) -> Result<Obj<Self>, Error> {
        rb_self.handle().set_ref(ruby, false)?;
        Ok(rb_self)
    }

    fn is_referenced(&self) -> bool {
        self.handle().referenced.get()
    }
}

/// Defines `cancel`, `active?`, `ref`, `unref` and `ref?` on `$class` for
/// `$type`, a [`HandleClass`]. (A macro: magnus's `method!` cannot wrap a
/// generic function.)
macro_rules! define_handle_methods {
    ($class:expr, $type:ty) => {{
        use magnus::method;
        use $crate::ruby::handle::HandleClass;
        $class.define_method("cancel", method!(<$type as HandleClass>::cancel, 0))?;
        $class.define_method("active?", method!(<$type as HandleClass>::is_active, 0))?;
        $class.define_method("ref", method!(<$type as HandleClass>::reference, 0))?;
        $class.define_method("unref", method!(<$type as HandleClass>::unreference, 0))?;
        $class.define_method("ref?", method!(<$type as HandleClass>::is_referenced, 0))?;
    }};
}

pub(crate) use define_handle_methods;
