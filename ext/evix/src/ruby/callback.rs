//! What the core stores for Ruby: a block (or a fiber to resume) plus an
//! object to keep alive with it (a watcher's IO), and the driver that calls
//! them for the core.

use super::{errors, nogvl};
use crate::core::{Driver, Fire, Wake};
use magnus::{
    block::Proc, gc::Marker, rb_sys::AsRawValue, value::Opaque, Error, Fiber, Ruby, Value,
};
use std::io;

#[derive(Clone, Copy)]
enum Target {
    Block(Opaque<Proc>),
    /// Resumed directly with the ready bits (or nil from a timer): a waiting
    /// fiber costs no Proc and no extra call.
    Fiber(Opaque<Fiber>),
    /// Only kept alive (a pinned IO).
    Nothing,
}

#[derive(Clone, Copy)]
pub struct Callback {
    target: Target,
    keep: Option<Opaque<Value>>,
}

impl Callback {
    pub fn new(block: Proc) -> Callback {
        Callback {
            target: Target::Block(block.into()),
            keep: None,
        }
    }

    pub fn keeping(block: Proc, keep: Value) -> Callback {
        Callback {
            target: Target::Block(block.into()),
            keep: Some(keep.into()),
        }
    }

    pub fn resume(fiber: Fiber, keep: Option<Value>) -> Callback {
        Callback {
            target: Target::Fiber(fiber.into()),
            keep: keep.map(Into::into),
        }
    }

    pub fn keep_alive(keep: Value) -> Callback {
        Callback {
            target: Target::Nothing,
            keep: Some(keep.into()),
        }
    }

    /// The loop's mark function calls this for everything it holds: the loop
    /// is not write-barrier protected, so that is what keeps these objects
    /// alive across minor GCs as well as full ones.
    pub fn mark(&self, marker: &Marker) {
        match self.target {
            Target::Block(block) => marker.mark(block),
            Target::Fiber(fiber) => marker.mark(fiber),
            Target::Nothing => {}
        }
        if let Some(keep) = self.keep {
            marker.mark(keep);
        }
    }
}

/// Calls blocks on the loop thread and releases the GVL while the backend blocks.
pub struct RubyDriver<'a> {
    pub ruby: &'a Ruby,
}

impl Driver<Callback> for RubyDriver<'_> {
    type Error = Error;

    fn invoke(&mut self, callback: Callback, fire: Fire) -> Result<(), Error> {
        match callback.target {
            Target::Block(block) => {
                // Straight into the VM's block call: `Proc::call` would
                // allocate an Array per dispatch, and `funcall(:call)` looks
                // the method up each time.
                let block = self.ruby.get_inner(block);
                let arg = match fire {
                    Fire::Io(ready) => Some(self.ruby.into_value(ready.bits())),
                    _ => None,
                };
                nogvl::call_proc(self.ruby, block, arg)
            }
            Target::Fiber(fiber) => {
                let fiber = self.ruby.get_inner(fiber);
                if !fiber.is_alive() {
                    return Ok(());
                }
                match fire {
                    Fire::Io(ready) => fiber.resume::<_, Value>((ready.bits(),)).map(drop),
                    _ => fiber.resume::<_, Value>((self.ruby.qnil(),)).map(drop),
                }
            }
            Target::Nothing => Ok(()),
        }
    }

    fn prefetch(&self, callback: &Callback, level: usize) {
        let Target::Block(block) = callback.target else {
            return;
        };
        let block = self.ruby.get_inner(block);
        match level {
            // A heap object's VALUE is its address.
            0 => crate::sys::prefetch(block.as_raw() as *const u8),
            _ => nogvl::prefetch_proc_data(self.ruby, block),
        }
    }

    fn blocking_is_costly(&self) -> bool {
        true
    }

    fn block(
        &mut self,
        wake: &Wake,
        wait: &mut dyn FnMut() -> io::Result<()>,
    ) -> Result<io::Result<()>, Error> {
        match nogvl::without_gvl(wait, &|| wake.force_from_signal())? {
            Some(result) => Ok(result),
            None => Err(errors::evix(self.ruby, "the backend wait panicked")),
        }
    }
}

/// The block given to the current method, or ArgumentError naming `method`.
pub fn required_block(ruby: &Ruby, method: &str) -> Result<Proc, Error> {
    if !ruby.block_given() {
        return Err(errors::argument(ruby, format!("{method} requires a block")));
    }
    ruby.block_proc()
}
