//! The descriptor that wakes a loop blocked in its backend from any thread:
//! an eventfd on Linux, a non-blocking pipe elsewhere.

use super::owned;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::io::RawFd;

#[derive(Debug)]
pub struct WakeFd {
    read: OwnedFd,
    /// The pipe's write end; `None` for an eventfd, which is read and
    /// written through one descriptor.
    write: Option<OwnedFd>,
}

impl WakeFd {
    #[cfg(target_os = "linux")]
    pub fn new() -> io::Result<WakeFd> {
        // SAFETY: eventfd takes only an initial count and flags.
        let fd = syscall!(eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK))?;
        Ok(WakeFd {
            read: owned(fd),
            write: None,
        })
    }

    #[cfg(not(target_os = "linux"))]
    pub fn new() -> io::Result<WakeFd> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: `fds` has room for the two descriptors pipe() writes.
        syscall!(pipe(fds.as_mut_ptr()))?;
        let wake_fd = WakeFd {
            read: owned(fds[0]),
            write: Some(owned(fds[1])),
        };
        for fd in fds {
            // SAFETY: F_SETFD and F_SETFL take an int, on descriptors just created.
            syscall!(fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC))?;
            // SAFETY: as above.
            syscall!(fcntl(fd, libc::F_SETFL, libc::O_NONBLOCK))?;
        }
        Ok(wake_fd)
    }

    /// The descriptor to register for READ with the backend.
    pub fn fd(&self) -> RawFd {
        self.read.as_raw_fd()
    }

    /// Makes the read side readable. A full pipe/counter means a wake is
    /// already pending, so EAGAIN is fine.
    pub fn wake(&self) {
        WakeFd::wake_raw(self.write_fd());
    }

    /// The descriptor `wake` writes, for [`WakeFd::wake_raw`].
    pub fn write_fd(&self) -> RawFd {
        self.write.as_ref().unwrap_or(&self.read).as_raw_fd()
    }

    /// Writes a wake to `fd`: one write(2) and nothing else, so it is safe in
    /// a signal handler (Ruby may call the GVL unblock function from one).
    pub fn wake_raw(fd: RawFd) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 (eventfd needs exactly 8; a pipe
        // takes any length); a bad fd only makes write fail.
        let _ = syscall!(write(fd, &one as *const u64 as *const libc::c_void, 8));
    }

    /// Consumes every pending wake.
    pub fn drain(&self) {
        let mut buf = [0u8; 64];
        // SAFETY: reads into a live local buffer of the given length.
        while let Ok(n) = syscall!(read(
            self.fd(),
            buf.as_mut_ptr() as *mut libc::c_void,
            buf.len()
        )) {
            if n <= 0 || self.write.is_none() {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wake_then_drain() {
        let wake_fd = WakeFd::new().unwrap();
        wake_fd.wake();
        wake_fd.wake();
        wake_fd.drain();
        let mut buf = [0u8; 8];
        // SAFETY: read into a live local buffer.
        let r = syscall!(read(wake_fd.fd(), buf.as_mut_ptr() as *mut libc::c_void, 8));
        assert_eq!(r.unwrap_err().kind(), io::ErrorKind::WouldBlock);
    }
}
