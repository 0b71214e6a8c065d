//! Wakes a loop blocked in its backend from any thread: an eventfd on Linux,
//! a non-blocking pipe elsewhere.

use std::io;
use std::os::unix::io::RawFd;

#[derive(Debug)]
pub struct Waker {
    read_fd: RawFd,
    write_fd: RawFd,
}

impl Waker {
    #[cfg(target_os = "linux")]
    pub fn new() -> io::Result<Waker> {
        let fd = syscall!(eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK))?;
        Ok(Waker {
            read_fd: fd,
            write_fd: fd,
        })
    }

    #[cfg(not(target_os = "linux"))]
    pub fn new() -> io::Result<Waker> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: `fds` has room for the two descriptors pipe() writes.
        syscall!(pipe(fds.as_mut_ptr()))?;
        let waker = Waker {
            read_fd: fds[0],
            write_fd: fds[1],
        };
        for fd in fds {
            syscall!(fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC))?;
            syscall!(fcntl(fd, libc::F_SETFL, libc::O_NONBLOCK))?;
        }
        Ok(waker)
    }

    /// The descriptor to register for READ with the backend.
    pub fn fd(&self) -> RawFd {
        self.read_fd
    }

    /// Makes the read side readable. A full pipe/counter means a wake is
    /// already pending, so EAGAIN is fine.
    pub fn wake(&self) {
        wake_fd(self.write_fd);
    }

    /// The descriptor `wake` writes, for [`wake_fd`].
    pub fn write_fd(&self) -> RawFd {
        self.write_fd
    }

    /// Consumes every pending wake.
    pub fn drain(&self) {
        let mut buf = [0u8; 64];
        // SAFETY: reads into a live local buffer of the given length.
        while let Ok(n) = syscall!(read(
            self.read_fd,
            buf.as_mut_ptr() as *mut libc::c_void,
            buf.len()
        )) {
            if n <= 0 || self.read_fd == self.write_fd {
                break;
            }
        }
    }
}

/// Writes a wake to `fd`: one write(2) and nothing else, so it is safe in a
/// signal handler (Ruby may call the GVL unblock function from one).
pub fn wake_fd(fd: RawFd) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a live u64 (eventfd needs exactly 8; a pipe
    // takes any length); a bad fd only makes write fail.
    let _ = syscall!(write(fd, &one as *const u64 as *const libc::c_void, 8));
}

impl Drop for Waker {
    fn drop(&mut self) {
        // SAFETY: we own both descriptors and close each exactly once.
        let _ = syscall!(close(self.read_fd));
        if self.write_fd != self.read_fd {
            // SAFETY: as above, the distinct write end of the pipe.
            let _ = syscall!(close(self.write_fd));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wake_then_drain() {
        let waker = Waker::new().unwrap();
        waker.wake();
        waker.wake();
        waker.drain();
        let mut buf = [0u8; 8];
        // SAFETY: read into a live local buffer.
        let r = syscall!(read(waker.fd(), buf.as_mut_ptr() as *mut libc::c_void, 8));
        assert_eq!(r.unwrap_err().kind(), io::ErrorKind::WouldBlock);
    }
}
