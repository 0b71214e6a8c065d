//! Which loops of the process registered which fd, so that closing an fd
//! anywhere (any thread, any IO object) ends the waits on it in every loop.
//!
//! An entry is noted when a loop makes a new registration for an fd (not per
//! wait); `closing` takes the fd's entries and asks each loop to release the
//! registration it noted, which the loop does only if that registration (its
//! generation) is still the current one: the number may be reused by then.

use std::collections::HashMap;
use std::os::unix::io::RawFd;
use std::sync::{Arc, LazyLock, Mutex, Weak};

/// A loop, as the closing side sees it.
pub trait ReleaseSink: Send + Sync {
    /// Asks the loop to release `fd`'s registration of `generation`.
    fn request_release(&self, fd: RawFd, generation: u32);
}

type Noted = Vec<(Weak<dyn ReleaseSink>, u32)>;

static NOTED: LazyLock<Mutex<HashMap<RawFd, Noted>>> = LazyLock::new(Default::default);

fn table() -> std::sync::MutexGuard<'static, HashMap<RawFd, Noted>> {
    NOTED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Notes that `sink` registered `fd` under `generation`.
pub fn note(fd: RawFd, sink: &Arc<dyn ReleaseSink>, generation: u32) {
    let mut table = table();
    let noted = table.entry(fd).or_default();
    noted.retain(|(other, _)| other.strong_count() > 0 && !other.ptr_eq(&Arc::downgrade(sink)));
    noted.push((Arc::downgrade(sink), generation));
}

/// `fd` is being closed: every loop that noted it is asked to release it.
pub fn closing(fd: RawFd) {
    let noted = table().remove(&fd);
    for (sink, generation) in noted.into_iter().flatten() {
        if let Some(sink) = sink.upgrade() {
            sink.request_release(fd, generation);
        }
    }
}
