//! What the core stores for Ruby: a block plus an object to keep alive with
//! it (a watcher's IO), and the driver that calls blocks for the core.

use super::{errors, nogvl};
use crate::core::{Driver, Fire, Wake};
use magnus::{block::Proc, gc::Marker, value::Opaque, Error, Ruby, Value};
use std::io;

#[derive(Clone, Copy)]
pub struct Callback {
    block: Opaque<Proc>,
    keep: Option<Opaque<Value>>,
}

impl Callback {
    pub fn new(block: Proc) -> Callback {
        Callback {
            block: block.into(),
            keep: None,
        }
    }

    pub fn keeping(block: Proc, keep: Value) -> Callback {
        Callback {
            block: block.into(),
            keep: Some(keep.into()),
        }
    }

    pub fn mark(&self, marker: &Marker) {
        marker.mark(self.block);
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
        let block = self.ruby.get_inner(callback.block);
        match fire {
            Fire::Io(ready) => block.call::<_, Value>((ready.bits(),)).map(drop),
            _ => block.call::<_, Value>(()).map(drop),
        }
    }

    fn block(
        &mut self,
        wake: &Wake,
        wait: &mut dyn FnMut() -> io::Result<()>,
    ) -> Result<io::Result<()>, Error> {
        match nogvl::without_gvl(wait, &|| wake.force())? {
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
