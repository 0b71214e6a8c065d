//! I/O watchers and the per-fd kernel registrations they share.
//!
//! Several watchers may watch one fd; the kernel sees one registration with
//! the union of their interests. Registrations are kept lazily: removing a
//! watcher costs no syscall, and interest the kernel still reports but no
//! watcher wants is dropped only when such an event actually arrives. Kernel
//! tokens carry the fd and a generation, so an event for a registration that
//! was replaced (fd closed and its number reused) is dropped.
//!
//! An fd whose last watcher left may have been closed and its number reused,
//! so watching it again re-syncs the kernel (one `MOD`). A watcher may pin
//! its fd's registration to an owner identity ([`FdOwner`]: the Ruby IO
//! object): while the next watcher comes with the same owner, the fd cannot
//! have been reused (a new fd comes with a new owner) and the registration is
//! trusted without a syscall.

use super::slab::{Key, Slab};
use crate::sys::{Backend, Event, Interest, WAKER_TOKEN};
use std::io;
use std::os::unix::io::RawFd;

/// Names a watcher. A distinct type from a timer's key, so one cannot be
/// passed as the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WatcherKey(Key);

#[derive(Debug)]
struct Watcher<C> {
    fd: RawFd,
    /// The fd's registration generation when the watcher was added.
    generation: u32,
    interest: Interest,
    oneshot: bool,
    referenced: bool,
    /// Where its key is in the fd's `watchers` list: leaving costs no scan.
    place: usize,
    callback: C,
}

#[derive(Debug)]
struct FdEntry<C> {
    generation: u32,
    /// What the kernel was last told (a superset of what watchers want).
    kernel: Interest,
    watchers: Vec<WatcherKey>,
    /// The owner identity that vouches for this registration, and what to
    /// keep alive with it.
    owner: Option<FdOwner<C>>,
}

/// An owner identity for an fd registration (see the module docs). The
/// identity is opaque to the core: the Ruby layer uses the IO object and the
/// count of `IO#reopen` calls so far, since a reopen puts a new file under the
/// same object and fd number.
#[derive(Debug)]
pub struct FdOwner<C> {
    pub id: (u64, u64),
    pub keep: C,
}

impl<C> FdEntry<C> {
    fn token(&self, fd: RawFd) -> u64 {
        (u64::from(self.generation) << 32) | fd as u32 as u64
    }
}

/// What one ingested batch of events asks of the loop besides callbacks.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Ingested {
    pub woken: bool,
    /// An event came under a token no live registration has: a registration
    /// the kernel keeps for a file that is still open elsewhere (a dup, a
    /// forked child) after its fd here was closed. Nothing can reach it by fd
    /// number any more, so the backend must be rebuilt or it fires forever.
    pub stale: bool,
}

#[derive(Debug)]
pub struct Registry<C> {
    watchers: Slab<Watcher<C>>,
    fds: Vec<Option<FdEntry<C>>>,
    next_generation: u32,
    referenced: usize,
    ready: Vec<(WatcherKey, Interest)>,
    cursor: usize,
    orphans: Vec<C>,
}

impl<C> Default for Registry<C> {
    fn default() -> Self {
        Registry {
            watchers: Slab::default(),
            fds: Vec::new(),
            next_generation: 0,
            referenced: 0,
            ready: Vec::new(),
            cursor: 0,
            orphans: Vec::new(),
        }
    }
}

impl<C: Clone> Registry<C> {
    pub fn add(
        &mut self,
        backend: &mut Backend,
        fd: RawFd,
        interest: Interest,
        oneshot: bool,
        callback: C,
        owner: Option<FdOwner<C>>,
    ) -> io::Result<WatcherKey> {
        if fd < 0 {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        }
        let slot = fd as usize;
        if self.fds.len() <= slot {
            // The table grows to the fd number: only for a real descriptor.
            crate::sys::check_open(fd)?;
            self.fds.resize_with(slot + 1, || None);
        }
        let generation = self.next_generation;
        match &mut self.fds[slot] {
            None => {
                let entry = FdEntry {
                    generation,
                    kernel: interest,
                    watchers: Vec::new(),
                    owner,
                };
                backend.register(fd, entry.token(fd), interest)?;
                self.next_generation = generation.wrapping_add(1);
                self.fds[slot] = Some(entry);
            }
            Some(entry) if same_owner(&entry.owner, &owner) => {
                let wanted = entry.kernel | interest;
                if wanted != entry.kernel {
                    if let Err(e) = backend.reregister(fd, entry.token(fd), wanted) {
                        return Err(self.gone(backend, fd, e));
                    }
                    self.entry_mut(fd).kernel = wanted;
                }
            }
            Some(entry) if entry.watchers.is_empty() => {
                // Nobody watched this fd since its last watcher left: it may have been
                // closed and its number reused, so re-sync under a fresh generation.
                let old = entry.generation;
                entry.generation = generation;
                if let Err(e) = backend.reregister(fd, entry.token(fd), interest) {
                    entry.generation = old;
                    self.forget(backend, fd);
                    return Err(e);
                }
                self.next_generation = generation.wrapping_add(1);
                entry.kernel = interest;
                entry.owner = owner;
            }
            Some(entry) => {
                // Another owner while watchers wait: the same open file under a
                // second IO object, or a new file under a number whose old file
                // was closed behind the loop's back. epoll tells them apart
                // (ENOENT); poll cannot, so the registration moves to a new
                // generation: a close of the old file, reported later by its
                // generation (`release_generation`), ends only the waits made
                // before.
                let wanted = entry.kernel | interest;
                let old = entry.generation;
                entry.generation = generation;
                if let Err(e) = backend.reregister(fd, entry.token(fd), wanted) {
                    self.entry_mut(fd).generation = old;
                    let e = self.gone(backend, fd, e);
                    if e.raw_os_error() != Some(libc::ENOENT) {
                        return Err(e);
                    }
                    return self.add(backend, fd, interest, oneshot, callback, owner);
                }
                self.next_generation = generation.wrapping_add(1);
                let entry = self.entry_mut(fd);
                entry.kernel = wanted;
                entry.owner = owner;
            }
        }
        let entry = self.entry_mut(fd);
        let (generation, place) = (entry.generation, entry.watchers.len());
        let key = WatcherKey(self.watchers.insert(Watcher {
            fd,
            generation,
            interest,
            oneshot,
            referenced: true,
            place,
            callback,
        }));
        self.referenced += 1;
        self.entry_mut(fd).watchers.push(key);
        Ok(key)
    }

    /// The kernel refused `fd`'s registration with `error`. If that says the
    /// file it was made for is gone (closed, its number maybe reused), the
    /// fd's watchers are orphaned (see [`Registry::take_orphans`]) and the
    /// entry forgotten. Returns the error.
    fn gone(&mut self, backend: &mut Backend, fd: RawFd, error: io::Error) -> io::Error {
        if matches!(error.raw_os_error(), Some(libc::EBADF | libc::ENOENT)) {
            let orphans = self.release(backend, fd);
            self.orphans.extend(orphans);
        }
        error
    }

    /// Callbacks of watchers removed because their fd turned out closed
    /// (the loop wakes them with a closed outcome).
    pub fn take_orphans(&mut self) -> Vec<C> {
        std::mem::take(&mut self.orphans)
    }

    pub fn has_orphans(&self) -> bool {
        !self.orphans.is_empty()
    }

    /// The generation of `fd`'s registration, if it has one.
    pub fn generation(&self, fd: RawFd) -> Option<u32> {
        Some(
            self.fds
                .get(usize::try_from(fd).ok()?)?
                .as_ref()?
                .generation,
        )
    }

    /// Removes a watcher; `None` if it was already gone. Costs no syscall.
    pub fn remove(&mut self, key: WatcherKey) -> Option<C> {
        let watcher = self.watchers.remove(key.0)?;
        if watcher.referenced {
            self.referenced -= 1;
        }
        let place = watcher.place;
        let list = &mut self.fds[watcher.fd as usize]
            .as_mut()
            .expect("watched fd has an entry")
            .watchers;
        // `release` may have taken the list already.
        if list.get(place) == Some(&key) {
            list.swap_remove(place);
            if let Some(moved) = list.get(place) {
                if let Some(w) = self.watchers.get_mut(moved.0) {
                    w.place = place;
                }
            }
        }
        Some(watcher.callback)
    }

    /// Forgets `fd` before its owner closes it: its watchers are removed
    /// (none fires later, even for an event already polled) and so is the
    /// kernel registration, so the fd number is clean for its next owner.
    pub fn release(&mut self, backend: &mut Backend, fd: RawFd) -> Vec<C> {
        let Some(Some(entry)) = usize::try_from(fd).ok().and_then(|i| self.fds.get_mut(i)) else {
            return Vec::new();
        };
        let keys = std::mem::take(&mut entry.watchers);
        let removed = keys
            .into_iter()
            .filter_map(|key| self.remove(key))
            .collect();
        self.forget(backend, fd);
        removed
    }

    /// The file registered for `fd` under `generation` was closed: if that
    /// is the current registration, as `release`; if the fd has moved on to
    /// a newer owner since, only the watchers added before that.
    pub fn release_generation(
        &mut self,
        backend: &mut Backend,
        fd: RawFd,
        generation: u32,
    ) -> Vec<C> {
        let Some(Some(entry)) = usize::try_from(fd).ok().and_then(|i| self.fds.get_mut(i)) else {
            return Vec::new();
        };
        if entry.generation == generation {
            return self.release(backend, fd);
        }
        let current = entry.generation;
        let older: Vec<WatcherKey> = entry
            .watchers
            .iter()
            .copied()
            .filter(|&key| {
                self.watchers
                    .get(key.0)
                    .is_some_and(|w| w.generation != current)
            })
            .collect();
        older
            .into_iter()
            .filter_map(|key| self.remove(key))
            .collect()
    }

    pub fn is_active(&self, key: WatcherKey) -> bool {
        self.watchers.get(key.0).is_some()
    }

    /// The fd and interest a watcher watches.
    pub fn watched(&self, key: WatcherKey) -> Option<(RawFd, Interest)> {
        self.watchers.get(key.0).map(|w| (w.fd, w.interest))
    }

    pub fn set_ref(&mut self, key: WatcherKey, referenced: bool) {
        if let Some(w) = self.watchers.get_mut(key.0) {
            if w.referenced != referenced {
                w.referenced = referenced;
                if referenced {
                    self.referenced += 1;
                } else {
                    self.referenced -= 1;
                }
            }
        }
    }

    pub fn len(&self) -> usize {
        self.watchers.len()
    }

    pub fn referenced(&self) -> usize {
        self.referenced
    }

    pub fn callbacks(&self) -> impl Iterator<Item = &C> {
        let owners = self
            .fds
            .iter()
            .filter_map(|e| e.as_ref()?.owner.as_ref().map(|o| &o.keep));
        self.watchers
            .values()
            .map(|w| &w.callback)
            .chain(owners)
            .chain(&self.orphans)
    }

    /// Turns kernel events into a ready list of (watcher, interest) and trims
    /// kernel interest nobody wants any more.
    pub fn ingest(&mut self, backend: &mut Backend, events: &[Event]) -> Ingested {
        self.ready.clear();
        self.cursor = 0;
        let mut ingested = Ingested::default();
        for event in events {
            if event.token == WAKER_TOKEN {
                ingested.woken = true;
                continue;
            }
            let fd = (event.token & 0xFFFF_FFFF) as u32 as RawFd;
            let generation = (event.token >> 32) as u32;
            let entry = match self.fds.get_mut(fd as usize) {
                Some(Some(entry)) if entry.generation == generation => entry,
                _ => {
                    ingested.stale = true;
                    continue;
                }
            };
            if event.closed {
                drop(self.gone(backend, fd, io::Error::from_raw_os_error(libc::EBADF)));
                continue;
            }
            let mut wanted = Interest::NONE;
            for &key in &entry.watchers {
                let watcher = self
                    .watchers
                    .get(key.0)
                    .expect("fd entry lists live watchers");
                wanted = wanted | watcher.interest;
                let hit = if event.failed {
                    watcher.interest
                } else {
                    watcher.interest & event.ready
                };
                if !hit.is_empty() {
                    self.ready.push((key, hit));
                }
            }
            if wanted.is_empty() {
                self.forget(backend, fd);
            } else if entry.kernel != wanted && !(event.ready & Interest::BOTH).is_empty() {
                let unwanted = event.ready.bits() & !wanted.bits();
                if unwanted != 0 {
                    match backend.reregister(fd, entry.token(fd), wanted) {
                        Ok(()) => entry.kernel = wanted,
                        Err(e) => drop(self.gone(backend, fd, e)),
                    }
                }
            }
        }
        ingested
    }

    /// The next watcher to call in this I/O phase. Watchers removed since the
    /// events were ingested are skipped; a one-shot watcher is removed first.
    pub fn next_ready(&mut self) -> Option<(C, Interest)> {
        while let Some(&(key, hit)) = self.ready.get(self.cursor) {
            self.cursor += 1;
            let Some(watcher) = self.watchers.get(key.0) else {
                continue;
            };
            let hit = hit & watcher.interest;
            if hit.is_empty() {
                continue;
            }
            if !watcher.oneshot {
                return Some((watcher.callback.clone(), hit));
            }
            if let Some(callback) = self.remove(key) {
                return Some((callback, hit));
            }
        }
        None
    }

    /// Registers every live fd with a fresh `backend` (see
    /// [`Ingested::stale`]). An fd that turns out closed is forgotten.
    pub fn register_all(&mut self, backend: &mut Backend) {
        for fd in 0..self.fds.len() {
            let Some(entry) = self.fds[fd].as_mut() else {
                continue;
            };
            let fd = fd as RawFd;
            if backend.register(fd, entry.token(fd), entry.kernel).is_err() {
                if entry.watchers.is_empty() {
                    self.fds[fd as usize] = None;
                } else {
                    // Its watchers wait on a closed fd, as they would have before;
                    // the next add re-syncs the kernel.
                    entry.kernel = Interest::NONE;
                }
            }
        }
    }

    pub fn clear(&mut self) {
        self.orphans.clear();
        self.watchers.clear();
        self.fds.clear();
        self.ready.clear();
        self.cursor = 0;
        self.referenced = 0;
    }

    fn entry_mut(&mut self, fd: RawFd) -> &mut FdEntry<C> {
        self.fds[fd as usize]
            .as_mut()
            .expect("watched fd has an entry")
    }

    fn forget(&mut self, backend: &mut Backend, fd: RawFd) {
        let _ = backend.deregister(fd);
        self.fds[fd as usize] = None;
    }
}

fn same_owner<C>(a: &Option<FdOwner<C>>, b: &Option<FdOwner<C>>) -> bool {
    matches!((a, b), (Some(a), Some(b)) if a.id == b.id)
}
