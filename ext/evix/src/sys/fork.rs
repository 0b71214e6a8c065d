//! Fork detection without a syscall per check: a child-side atfork handler
//! bumps a process-wide generation that every loop compares with its own.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;

static GENERATION: AtomicU64 = AtomicU64::new(0);
static INSTALL: Once = Once::new();

extern "C" fn in_child() {
    GENERATION.fetch_add(1, Ordering::SeqCst);
}

/// The current fork generation; installs the atfork handler on first use.
pub fn generation() -> u64 {
    INSTALL.call_once(|| {
        // SAFETY: registers a plain extern "C" function that only touches an atomic.
        unsafe {
            libc::pthread_atfork(None, None, Some(in_child));
        }
    });
    GENERATION.load(Ordering::SeqCst)
}

#[cfg(test)]
mod tests {
    #[test]
    fn child_sees_a_new_generation() {
        let before = super::generation();
        // SAFETY: the child only reads an atomic and calls _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let code = if super::generation() == before + 1 {
                0
            } else {
                1
            };
            // SAFETY: leave the child without running the parent's destructors.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for our own child with a live status pointer.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        assert_eq!(super::generation(), before);
    }
}
