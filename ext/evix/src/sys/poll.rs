//! poll(2): the portable fallback. Registrations live in a dense pollfd
//! array that is handed to the kernel as is on every wait.

use super::{timeout_ms, Event, Interest};
use std::collections::HashMap;
use std::io;
use std::os::unix::io::RawFd;
use std::time::Duration;

#[derive(Debug, Default)]
pub struct Poll {
    fds: Vec<libc::pollfd>,
    tokens: Vec<u64>,
    index: HashMap<RawFd, usize>,
}

fn flags(interest: Interest) -> libc::c_short {
    let mut flags = 0;
    if interest.is_readable() {
        flags |= libc::POLLIN;
    }
    if interest.is_writable() {
        flags |= libc::POLLOUT;
    }
    flags
}

impl Poll {
    pub fn new() -> Poll {
        Poll::default()
    }

    pub fn register(&mut self, fd: RawFd, token: u64, interest: Interest) -> io::Result<()> {
        if fd < 0 {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        }
        // poll(2) would report POLLNVAL later; report a bad fd at the call instead.
        // SAFETY: F_GETFD takes no pointer; any int is a valid argument.
        syscall!(fcntl(fd, libc::F_GETFD))?;
        if self.index.contains_key(&fd) {
            return self.reregister(fd, token, interest);
        }
        self.index.insert(fd, self.fds.len());
        self.fds.push(libc::pollfd {
            fd,
            events: flags(interest),
            revents: 0,
        });
        self.tokens.push(token);
        Ok(())
    }

    pub fn reregister(&mut self, fd: RawFd, token: u64, interest: Interest) -> io::Result<()> {
        match self.index.get(&fd) {
            Some(&i) => {
                self.fds[i].events = flags(interest);
                self.tokens[i] = token;
                Ok(())
            }
            None => self.register(fd, token, interest),
        }
    }

    pub fn deregister(&mut self, fd: RawFd) -> io::Result<()> {
        let i = self
            .index
            .remove(&fd)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))?;
        self.fds.swap_remove(i);
        self.tokens.swap_remove(i);
        if let Some(moved) = self.fds.get(i) {
            self.index.insert(moved.fd, i);
        }
        Ok(())
    }

    pub fn wait(&mut self, events: &mut Vec<Event>, timeout: Option<Duration>) -> io::Result<()> {
        // SAFETY: `fds` is a valid, initialised array of `len` pollfd entries that
        // the kernel may write `revents` into.
        let n = syscall!(poll(
            self.fds.as_mut_ptr(),
            self.fds.len() as libc::nfds_t,
            timeout_ms(timeout)
        ))?;
        if n == 0 {
            return Ok(());
        }
        for (pfd, &token) in self.fds.iter_mut().zip(&self.tokens) {
            let bits = pfd.revents;
            if bits == 0 {
                continue;
            }
            pfd.revents = 0;
            let mut ready = Interest::NONE;
            if bits & libc::POLLIN != 0 {
                ready = ready | Interest::READ;
            }
            if bits & libc::POLLOUT != 0 {
                ready = ready | Interest::WRITE;
            }
            events.push(Event {
                token,
                ready,
                failed: bits & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0,
                closed: bits & libc::POLLNVAL != 0,
            });
        }
        Ok(())
    }
}
