//! Non-blocking reads and writes: on a connected socket whatever the fd's
//! own O_NONBLOCK flag says, on any other fd with the flag set for the call.

use std::io;
use std::os::unix::io::RawFd;

// A peer that went away must give EPIPE, not kill the process with SIGPIPE
// (Ruby ignores SIGPIPE, but a host application embedding Ruby may not).
#[cfg(not(any(target_os = "macos", target_os = "ios")))]
const NO_SIGPIPE: libc::c_int = libc::MSG_NOSIGNAL;
#[cfg(any(target_os = "macos", target_os = "ios"))]
const NO_SIGPIPE: libc::c_int = 0;

/// `recv(2)` without blocking: the bytes read (0 at end of stream), or the
/// OS error (`WouldBlock` when nothing is there). Retries on EINTR.
pub fn recv(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        // SAFETY: `buf` is a valid, writable region of `buf.len()` bytes for
        // the whole call; recv writes at most that many.
        let res = syscall!(recv(
            fd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT
        ));
        match res {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other.map(|n| n as usize),
        }
    }
}

/// `send(2)` without blocking and without SIGPIPE: the bytes the kernel
/// took, or the OS error (`WouldBlock` when its buffer is full). Retries on
/// EINTR.
pub fn send(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    loop {
        // SAFETY: `buf` is a valid, readable region of `buf.len()` bytes for
        // the whole call; send only reads it.
        let res = syscall!(send(
            fd,
            buf.as_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT | NO_SIGPIPE
        ));
        match res {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other.map(|n| n as usize),
        }
    }
}

/// `read(2)` of what is there now from any fd (a pipe, a file, a
/// terminal) into `buf`: the bytes read (0 at end of file), or the OS
/// error (`WouldBlock` when nothing is there). See [`with_nonblock`].
pub fn read_nonblocking(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    with_nonblock(fd, || {
        // SAFETY: `buf` is a valid, writable region of `buf.len()` bytes for
        // the whole call; read writes at most that many.
        syscall!(read(fd, buf.as_mut_ptr().cast(), buf.len()))
    })
}

/// `write(2)` of what the kernel takes now from `buf` to any fd: the bytes
/// written, or the OS error (`WouldBlock` when it took nothing). See
/// [`with_nonblock`].
pub fn write_nonblocking(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    with_nonblock(fd, || {
        // SAFETY: `buf` is a valid, readable region of `buf.len()` bytes for
        // the whole call; write only reads it.
        syscall!(write(fd, buf.as_ptr().cast(), buf.len()))
    })
}

/// Runs `call` (retried on EINTR) with O_NONBLOCK set on `fd`, then puts
/// the flag back as it was: the fd's description may be shared with other
/// processes that expect it blocking. Ruby's own pipes and sockets have it
/// set already, which costs one F_GETFL.
fn with_nonblock(fd: RawFd, mut call: impl FnMut() -> io::Result<isize>) -> io::Result<usize> {
    // SAFETY: F_GETFL takes no pointer.
    let flags = syscall!(fcntl(fd, libc::F_GETFL))?;
    let blocking = flags & libc::O_NONBLOCK == 0;
    if blocking {
        // SAFETY: F_SETFL with an int argument, the fd's own flags plus one.
        syscall!(fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK))?;
    }
    let result = loop {
        match call() {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => break other.map(|n| n as usize),
        }
    };
    if blocking {
        // SAFETY: as above, the flags read before the call.
        syscall!(fcntl(fd, libc::F_SETFL, flags))?;
    }
    result
}

/// Waits up to `ms` milliseconds for `fd` to be readable (`write`: writable)
/// with `poll(2)`: whether it is (an error or hang-up counts). EINTR is a
/// plain `false`.
pub fn wait_one(fd: RawFd, write: bool, ms: libc::c_int) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd,
        events: if write { libc::POLLOUT } else { libc::POLLIN },
        revents: 0,
    };
    // SAFETY: `pfd` is one valid pollfd for the whole call.
    match syscall!(poll(&mut pfd, 1, ms)) {
        Ok(n) => Ok(n > 0),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::io::AsRawFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn reads_what_was_sent_and_would_block_when_empty() {
        let (a, b) = UnixStream::pair().unwrap();
        assert_eq!(send(a.as_raw_fd(), b"hello").unwrap(), 5);
        let mut buf = [0u8; 16];
        assert_eq!(recv(b.as_raw_fd(), &mut buf).unwrap(), 5);
        assert_eq!(&buf[..5], b"hello");
        // b is a blocking socket: only MSG_DONTWAIT keeps this from hanging.
        let err = recv(b.as_raw_fd(), &mut buf).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
    }

    #[test]
    fn end_of_stream_reads_zero_and_a_gone_peer_gives_epipe() {
        let (a, b) = UnixStream::pair().unwrap();
        drop(a);
        let mut buf = [0u8; 4];
        assert_eq!(recv(b.as_raw_fd(), &mut buf).unwrap(), 0);
        let err = send(b.as_raw_fd(), b"x").unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EPIPE));
    }

    #[test]
    fn not_a_socket_is_an_error() {
        let (r, w) = crate::sys::testing::pipe();
        let mut buf = [0u8; 4];
        let err = recv(r, &mut buf).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOTSOCK));
        crate::sys::testing::close(r);
        crate::sys::testing::close(w);
    }
}
