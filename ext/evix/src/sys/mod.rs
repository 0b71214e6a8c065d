//! OS backends. Every backend offers the same method list (`register`,
//! `reregister`, `deregister`, `wait`); [`Backend`] picks one at run time.
//! This folder and `ruby/helpers/` (the binding's C-API helpers) are the
//! only places with `unsafe`.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::io::RawFd;
use std::time::Duration;

/// Runs a libc call and turns `-1` into the thread's `errno` as `io::Error`:
/// the single errno → error conversion point of the crate.
macro_rules! syscall {
    ($fn:ident ( $($arg:expr),* $(,)? )) => {{
        // SAFETY: callers pass arguments that satisfy the libc function's contract;
        // each call site documents why with its own SAFETY comment.
        let res = unsafe { libc::$fn($($arg),*) };
        if res == -1 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(res)
        }
    }};
}

#[cfg(target_os = "linux")]
mod epoll;
pub mod fork;
// The one place that lists the OSes with kqueue: elsewhere `kqueue` is a
// backend with no values (no_kqueue.rs), so the code that picks a backend
// needs no list of its own.
#[cfg_attr(
    not(any(
        target_os = "macos",
        target_os = "ios",
        target_os = "freebsd",
        target_os = "netbsd",
        target_os = "openbsd",
        target_os = "dragonfly"
    )),
    path = "no_kqueue.rs"
)]
mod kqueue;
mod poll;
pub mod stream;
#[cfg(test)]
pub mod testing;
mod wake_fd;

pub use wake_fd::WakeFd;

/// Hints the CPU to start loading the cache line at `addr` (for memory about
/// to be read; the loop's due timers sit in random places). A hint only:
/// nothing is read, so any address is fine.
#[inline]
pub fn prefetch<T>(addr: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 never faults and reads nothing architecturally, so any
    // address is fine; SSE, which it needs, is part of the x86_64 baseline.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(addr.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = addr;
}

/// Interest or readiness bits, shared with Ruby (`Evix::READ`, `Evix::WRITE`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Interest(u8);

impl Interest {
    pub const NONE: Interest = Interest(0);
    pub const READ: Interest = Interest(1);
    pub const WRITE: Interest = Interest(2);
    pub const BOTH: Interest = Interest(3);

    pub fn from_bits(bits: u8) -> Interest {
        Interest(bits & 3)
    }
    pub fn bits(self) -> u8 {
        self.0
    }
    pub fn is_readable(self) -> bool {
        self.0 & 1 != 0
    }
    pub fn is_writable(self) -> bool {
        self.0 & 2 != 0
    }
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
    pub fn contains(self, other: Interest) -> bool {
        self.0 & other.0 == other.0
    }
    pub fn intersects(self, other: Interest) -> bool {
        self.0 & other.0 != 0
    }
}

impl std::ops::BitOr for Interest {
    type Output = Interest;
    fn bitor(self, rhs: Interest) -> Interest {
        Interest(self.0 | rhs.0)
    }
}

impl std::ops::BitAnd for Interest {
    type Output = Interest;
    fn bitand(self, rhs: Interest) -> Interest {
        Interest(self.0 & rhs.0)
    }
}

/// One readiness report from the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    pub token: u64,
    pub ready: Interest,
    /// ERR or HUP: every interest registered for the fd is woken.
    pub failed: bool,
    /// The fd is not open any more (poll's POLLNVAL): its waits end closed.
    pub closed: bool,
}

/// Token reserved for the loop's own waker.
pub const WAKER_TOKEN: u64 = u64::MAX;

/// The backends this build can use, in order of preference.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendKind {
    Epoll,
    Kqueue,
    Poll,
}

impl BackendKind {
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Epoll => "epoll",
            BackendKind::Kqueue => "kqueue",
            BackendKind::Poll => "poll",
        }
    }

    pub fn from_name(name: &str) -> Option<BackendKind> {
        Self::available()
            .iter()
            .copied()
            .find(|kind| kind.name() == name)
    }

    /// Backends compiled in for this OS; the first is the default.
    pub fn available() -> &'static [BackendKind] {
        if cfg!(target_os = "linux") {
            &[BackendKind::Epoll, BackendKind::Poll]
        } else if kqueue::AVAILABLE {
            &[BackendKind::Kqueue, BackendKind::Poll]
        } else {
            &[BackendKind::Poll]
        }
    }
}

/// A kernel readiness selector, chosen at run time.
#[derive(Debug)]
pub enum Backend {
    #[cfg(target_os = "linux")]
    Epoll(epoll::Epoll),
    Kqueue(kqueue::Kqueue),
    Poll(poll::Poll),
}

macro_rules! dispatch {
    ($self:ident, $b:ident => $e:expr) => {
        match $self {
            #[cfg(target_os = "linux")]
            Backend::Epoll($b) => $e,
            Backend::Kqueue($b) => $e,
            Backend::Poll($b) => $e,
        }
    };
}

impl Backend {
    pub fn new(kind: BackendKind) -> io::Result<Backend> {
        match kind {
            #[cfg(target_os = "linux")]
            BackendKind::Epoll => Ok(Backend::Epoll(epoll::Epoll::new()?)),
            BackendKind::Kqueue => Ok(Backend::Kqueue(kqueue::Kqueue::new()?)),
            BackendKind::Poll => Ok(Backend::Poll(poll::Poll::new())),
            #[allow(unreachable_patterns)]
            other => Err(unavailable(other)),
        }
    }

    pub fn kind(&self) -> BackendKind {
        match self {
            #[cfg(target_os = "linux")]
            Backend::Epoll(_) => BackendKind::Epoll,
            Backend::Kqueue(_) => BackendKind::Kqueue,
            Backend::Poll(_) => BackendKind::Poll,
        }
    }

    /// Adds `fd` with `interest`; events carry `token`.
    pub fn register(&mut self, fd: RawFd, token: u64, interest: Interest) -> io::Result<()> {
        dispatch!(self, b => b.register(fd, token, interest))
    }

    /// Changes the interest or token of a registered `fd`.
    pub fn reregister(&mut self, fd: RawFd, token: u64, interest: Interest) -> io::Result<()> {
        dispatch!(self, b => b.reregister(fd, token, interest))
    }

    /// Removes `fd`. An fd that is already closed or unknown is not an error.
    pub fn deregister(&mut self, fd: RawFd) -> io::Result<()> {
        let result = dispatch!(self, b => b.deregister(fd));
        match result {
            Err(e) if matches!(e.raw_os_error(), Some(libc::EBADF) | Some(libc::ENOENT)) => Ok(()),
            other => other,
        }
    }

    /// Waits for events (`None` = no limit). EINTR returns `Ok` with no events.
    pub fn wait(&mut self, events: &mut Vec<Event>, timeout: Option<Duration>) -> io::Result<()> {
        events.clear();
        let result = dispatch!(self, b => b.wait(events, timeout));
        match result {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(()),
            other => other,
        }
    }
}

/// The error for a backend this OS does not have.
fn unavailable(kind: BackendKind) -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        format!("backend {} is not available on this OS", kind.name()),
    )
}

/// Takes ownership of a descriptor a syscall just created.
fn owned(fd: RawFd) -> OwnedFd {
    // SAFETY: `fd` was just returned by a successful syscall that created it,
    // so it is open and nothing else owns it.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// `Ok` if `fd` is an open descriptor of this process: asked of the kernel
/// before any table is sized by an fd number a caller passed.
pub fn check_open(fd: RawFd) -> io::Result<()> {
    // SAFETY: F_GETFD only reads the descriptor table; any int is a valid argument.
    syscall!(fcntl(fd, libc::F_GETFD)).map(drop)
}

/// Timeout in whole milliseconds for poll-like calls: sub-millisecond
/// remainders round up (never down to a busy 0), `None` is infinite (-1).
pub(crate) fn timeout_ms(timeout: Option<Duration>) -> libc::c_int {
    match timeout {
        None => -1,
        Some(Duration::ZERO) => 0,
        Some(d) => {
            let ms = d.as_nanos().div_ceil(1_000_000);
            ms.min(libc::c_int::MAX as u128) as libc::c_int
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeout_rounds_up() {
        assert_eq!(timeout_ms(None), -1);
        assert_eq!(timeout_ms(Some(Duration::ZERO)), 0);
        assert_eq!(timeout_ms(Some(Duration::from_nanos(1))), 1);
        assert_eq!(timeout_ms(Some(Duration::from_micros(1500))), 2);
        assert_eq!(
            timeout_ms(Some(Duration::from_secs(u64::MAX))),
            libc::c_int::MAX
        );
    }

    #[test]
    fn names_round_trip() {
        for kind in BackendKind::available() {
            assert_eq!(BackendKind::from_name(kind.name()), Some(*kind));
        }
        assert_eq!(BackendKind::from_name("select"), None);
    }
}
