//! Linux epoll, level-triggered, one persistent registration per fd.

use super::{owned, timeout_ms, Event, Interest};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::io::RawFd;
use std::time::Duration;

#[derive(Debug)]
pub struct Epoll {
    epfd: OwnedFd,
    buffer: Vec<libc::epoll_event>,
}

fn flags(interest: Interest) -> u32 {
    let mut flags = 0;
    if interest.is_readable() {
        flags |= libc::EPOLLIN | libc::EPOLLRDHUP;
    }
    if interest.is_writable() {
        flags |= libc::EPOLLOUT;
    }
    flags as u32
}

impl Epoll {
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: epoll_create1 takes only flags.
        let epfd = syscall!(epoll_create1(libc::EPOLL_CLOEXEC))?;
        Ok(Epoll {
            epfd: owned(epfd),
            buffer: Vec::with_capacity(1024),
        })
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, token: u64, interest: Interest) -> io::Result<()> {
        let mut event = libc::epoll_event {
            events: flags(interest),
            u64: token,
        };
        // SAFETY: `event` is a valid epoll_event that outlives the call; the kernel
        // only reads it (DEL ignores it).
        syscall!(epoll_ctl(self.epfd.as_raw_fd(), op, fd, &mut event)).map(drop)
    }

    pub fn register(&mut self, fd: RawFd, token: u64, interest: Interest) -> io::Result<()> {
        match self.ctl(libc::EPOLL_CTL_ADD, fd, token, interest) {
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                self.ctl(libc::EPOLL_CTL_MOD, fd, token, interest)
            }
            other => other,
        }
    }

    pub fn reregister(&mut self, fd: RawFd, token: u64, interest: Interest) -> io::Result<()> {
        match self.ctl(libc::EPOLL_CTL_MOD, fd, token, interest) {
            // The fd was closed and its number reused since we registered it:
            // the kernel dropped the old registration on close.
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                self.ctl(libc::EPOLL_CTL_ADD, fd, token, interest)
            }
            other => other,
        }
    }

    pub fn deregister(&mut self, fd: RawFd) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_DEL, fd, 0, Interest::NONE)
    }

    pub fn wait(&mut self, events: &mut Vec<Event>, timeout: Option<Duration>) -> io::Result<()> {
        let capacity = self.buffer.capacity();
        // SAFETY: the kernel writes at most `capacity` entries into the buffer's
        // spare capacity; `set_len` below only exposes the entries it wrote.
        let n = syscall!(epoll_wait(
            self.epfd.as_raw_fd(),
            self.buffer.as_mut_ptr(),
            capacity as libc::c_int,
            timeout_ms(timeout)
        ))? as usize;
        // SAFETY: epoll_wait initialised the first `n` (<= capacity) entries.
        unsafe { self.buffer.set_len(n) };
        for raw in &self.buffer {
            let bits = raw.events as libc::c_int;
            let mut ready = Interest::NONE;
            if bits & (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLPRI) != 0 {
                ready = ready | Interest::READ;
            }
            if bits & libc::EPOLLOUT != 0 {
                ready = ready | Interest::WRITE;
            }
            events.push(Event {
                token: raw.u64,
                ready,
                failed: bits & (libc::EPOLLERR | libc::EPOLLHUP) != 0,
                closed: false,
            });
        }
        if n == capacity && capacity < 65536 {
            self.buffer.reserve(capacity);
        }
        Ok(())
    }
}
