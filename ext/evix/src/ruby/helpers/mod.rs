//! Leaves the class files share, importing nothing else from `ruby/`:
//! argument conversions, errors, the GVL helper and the raw C-API accessors
//! (with `sys/`, the only `unsafe` of the crate).

pub mod args;
pub mod capi;
pub mod errors;
pub mod nogvl;
