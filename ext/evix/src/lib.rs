//! evix: an event loop core for Ruby. `core` and `sys` hold the loop and the
//! OS backends with no Ruby in them; `ruby` binds them as `Evix::Loop`.

pub mod core;
pub mod http;
pub mod sys;

#[cfg(feature = "ruby")]
mod ruby;

#[cfg(feature = "ruby")]
#[magnus::init]
fn init(ruby: &magnus::Ruby) -> Result<(), magnus::Error> {
    ruby::init(ruby)
}
