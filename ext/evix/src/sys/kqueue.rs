//! kqueue for macOS and the BSDs: one EVFILT_READ and one EVFILT_WRITE filter
//! per fd, added or deleted as the fd's interest changes.

use super::{owned, Event, Interest};
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::io::RawFd;
use std::time::Duration;

/// Whether this OS has kqueue.
pub const AVAILABLE: bool = true;

#[derive(Debug)]
pub struct Kqueue {
    kq: OwnedFd,
    registered: HashMap<RawFd, Interest>,
    buffer: Vec<libc::kevent>,
}

fn change(fd: RawFd, filter: i16, flags: u16, token: u64) -> libc::kevent {
    // SAFETY: kevent is a plain C struct for which all-zero bytes are valid.
    let mut ev: libc::kevent = unsafe { std::mem::zeroed() };
    ev.ident = fd as _;
    ev.filter = filter as _;
    ev.flags = flags as _;
    ev.udata = token as _;
    ev
}

impl Kqueue {
    pub fn new() -> io::Result<Kqueue> {
        // SAFETY: kqueue() takes no argument.
        let kq = owned(syscall!(kqueue())?);
        // SAFETY: F_SETFD with an int argument, on the descriptor just created.
        syscall!(fcntl(kq.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC))?;
        Ok(Kqueue {
            kq,
            registered: HashMap::new(),
            buffer: Vec::with_capacity(1024),
        })
    }

    fn apply(&self, changes: &[libc::kevent]) -> io::Result<()> {
        if changes.is_empty() {
            return Ok(());
        }
        // SAFETY: `changes` is a live slice of initialised kevents; no output buffer.
        syscall!(kevent(
            self.kq.as_raw_fd(),
            changes.as_ptr(),
            changes.len() as _,
            std::ptr::null_mut(),
            0,
            std::ptr::null()
        ))
        .map(drop)
    }

    fn set(&mut self, fd: RawFd, token: u64, old: Interest, new: Interest) -> io::Result<()> {
        let mut changes = Vec::with_capacity(2);
        for (bit, filter) in [
            (Interest::READ, libc::EVFILT_READ),
            (Interest::WRITE, libc::EVFILT_WRITE),
        ] {
            if new.contains(bit) {
                changes.push(change(
                    fd,
                    filter as i16,
                    (libc::EV_ADD | libc::EV_ENABLE) as u16,
                    token,
                ));
            } else if old.contains(bit) {
                changes.push(change(fd, filter as i16, libc::EV_DELETE as u16, token));
            }
        }
        self.apply(&changes)?;
        self.registered.insert(fd, new);
        Ok(())
    }

    pub fn register(&mut self, fd: RawFd, token: u64, interest: Interest) -> io::Result<()> {
        // SAFETY: F_GETFD takes no pointer; any int is a valid argument.
        syscall!(fcntl(fd, libc::F_GETFD))?;
        let old = self.registered.get(&fd).copied().unwrap_or_default();
        self.set(fd, token, old, interest)
    }

    pub fn reregister(&mut self, fd: RawFd, token: u64, interest: Interest) -> io::Result<()> {
        self.register(fd, token, interest)
    }

    pub fn deregister(&mut self, fd: RawFd) -> io::Result<()> {
        let old = self
            .registered
            .remove(&fd)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))?;
        self.set(fd, 0, old, Interest::NONE)?;
        self.registered.remove(&fd);
        Ok(())
    }

    pub fn wait(&mut self, events: &mut Vec<Event>, timeout: Option<Duration>) -> io::Result<()> {
        let ts = timeout.map(|d| libc::timespec {
            tv_sec: d.as_secs().min(i32::MAX as u64) as _,
            tv_nsec: d.subsec_nanos() as _,
        });
        let ts_ptr = ts
            .as_ref()
            .map_or(std::ptr::null(), |t| t as *const libc::timespec);
        let capacity = self.buffer.capacity();
        // SAFETY: the kernel writes at most `capacity` kevents into spare capacity.
        let n = syscall!(kevent(
            self.kq.as_raw_fd(),
            std::ptr::null(),
            0,
            self.buffer.as_mut_ptr(),
            capacity as _,
            ts_ptr
        ))? as usize;
        // SAFETY: kevent initialised the first `n` (<= capacity) entries.
        unsafe { self.buffer.set_len(n) };
        for raw in &self.buffer {
            let ready = if raw.filter == libc::EVFILT_WRITE {
                Interest::WRITE
            } else {
                Interest::READ
            };
            events.push(Event {
                token: raw.udata as u64,
                ready,
                failed: raw.flags & libc::EV_ERROR != 0,
                closed: raw.flags & libc::EV_ERROR != 0 && raw.data == libc::EBADF as _,
            });
        }
        Ok(())
    }
}
