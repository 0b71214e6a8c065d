//! What the class files share: argument conversions, errors, the callbacks
//! the core stores and the driver that calls them, the Timer/Watcher handle,
//! the GVL helper and the raw C-API accessors (with `sys/`, the only
//! `unsafe` of the crate).

pub mod args;
pub mod callback;
pub mod capi;
pub mod errors;
pub mod handle;
pub mod nogvl;
