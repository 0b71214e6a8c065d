//! Raw pipe helpers for the core's tests, kept here so `unsafe` stays in sys/.

use std::os::unix::io::RawFd;

/// A new pipe as (read end, write end).
pub fn pipe() -> (RawFd, RawFd) {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe() writes.
    syscall!(pipe(fds.as_mut_ptr())).expect("pipe");
    (fds[0], fds[1])
}

pub fn write_byte(fd: RawFd) {
    // SAFETY: writes one byte from a live buffer.
    let n = syscall!(write(fd, b"x".as_ptr() as *const libc::c_void, 1)).expect("write");
    assert_eq!(n, 1);
}

/// Reads whatever is there (the fd should be non-blocking, or hold data).
pub fn drain(fd: RawFd) {
    let mut buf = [0u8; 64];
    // SAFETY: reads into a live local buffer of the given length.
    while let Ok(n) = syscall!(read(fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len())) {
        if n < buf.len() as isize {
            break;
        }
    }
}

pub fn set_nonblocking(fd: RawFd) {
    // SAFETY: F_SETFL with an int argument.
    syscall!(fcntl(fd, libc::F_SETFL, libc::O_NONBLOCK)).expect("fcntl");
}

pub fn close(fd: RawFd) {
    // SAFETY: the tests close descriptors they own, once.
    let _ = syscall!(close(fd));
}

/// A second descriptor for `fd`'s open file (what a forked child holds).
pub fn dup(fd: RawFd) -> RawFd {
    // SAFETY: dup takes only descriptors.
    syscall!(dup(fd)).expect("dup")
}

/// Puts `fd`'s file on the number `onto` (closing what was there), as a
/// reused fd number would: deterministic even with tests running in parallel.
pub fn dup2(fd: RawFd, onto: RawFd) {
    // SAFETY: dup2 takes only descriptors.
    syscall!(dup2(fd, onto)).expect("dup2");
}
