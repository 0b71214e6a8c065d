//! The part of a loop other threads may touch: the `post` queue and the
//! [`LoopWaker`]. Wake-ups coalesce: the wake fd is written only while the
//! loop is blocked (or about to block) and no wake is already pending.

use super::closing::ReleaseSink;
use crate::sys::WakeFd;
use std::io;
use std::os::unix::io::RawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

/// Wakes the loop out of its backend wait, from any thread: whether the
/// loop sleeps, whether a wake is pending, and the [`WakeFd`] to write.
#[derive(Debug)]
pub struct LoopWaker {
    sleeping: AtomicBool,
    woken: AtomicBool,
    wake_fd: Mutex<Option<WakeFd>>,
    /// The wake fd's write end, -1 once closed, for `force_from_signal`.
    write_fd: AtomicI32,
}

impl LoopWaker {
    fn new() -> io::Result<LoopWaker> {
        let wake_fd = WakeFd::new()?;
        Ok(LoopWaker {
            sleeping: AtomicBool::new(false),
            woken: AtomicBool::new(false),
            write_fd: AtomicI32::new(wake_fd.write_fd()),
            wake_fd: Mutex::new(Some(wake_fd)),
        })
    }

    /// Wakes the loop if it sleeps; a no-op once the loop is closed.
    pub fn wake(&self) {
        if self.sleeping.load(SeqCst) && !self.woken.swap(true, SeqCst) {
            self.force();
        }
    }

    /// Writes the wake fd unconditionally (the GVL unblock function uses this).
    pub fn force(&self) {
        self.woken.store(true, SeqCst);
        if let Some(wake_fd) = lock(&self.wake_fd).as_ref() {
            wake_fd.wake();
        }
    }

    /// `force` without a lock: only atomics and one write(2), so Ruby may
    /// call it from a signal handler. The fd stays open while the loop
    /// blocks (a loop cannot be closed from inside its own run).
    pub fn force_from_signal(&self) {
        self.woken.store(true, SeqCst);
        let fd = self.write_fd.load(SeqCst);
        if fd >= 0 {
            WakeFd::wake_raw(fd);
        }
    }

    pub(crate) fn fd(&self) -> Option<RawFd> {
        lock(&self.wake_fd).as_ref().map(WakeFd::fd)
    }

    /// Consumes a pending wake (the wake fd reported readable, or the loop
    /// was woken while it blocked).
    pub(crate) fn drain(&self) {
        self.woken.store(false, SeqCst);
        if let Some(wake_fd) = lock(&self.wake_fd).as_ref() {
            wake_fd.drain();
        }
    }

    fn close(&self) {
        self.sleeping.store(false, SeqCst);
        self.write_fd.store(-1, SeqCst);
        lock(&self.wake_fd).take();
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Requests from other threads (or other loops) to release an fd that is
/// being closed: (fd, generation of the registration to release).
#[derive(Debug)]
pub struct Releases {
    requests: Mutex<Vec<(RawFd, u32)>>,
    pending: AtomicBool,
    waker: Arc<LoopWaker>,
}

impl ReleaseSink for Releases {
    fn request_release(&self, fd: RawFd, generation: u32) {
        lock(&self.requests).push((fd, generation));
        self.pending.store(true, SeqCst);
        self.waker.wake();
    }
}

#[derive(Debug)]
pub struct Shared<C> {
    pub waker: Arc<LoopWaker>,
    releases: Arc<Releases>,
    posts: Mutex<Vec<C>>,
    has_posts: AtomicBool,
    closed: AtomicBool,
}

/// `post` on a closed loop: the callback is handed back, not lost.
#[derive(Debug)]
pub struct Closed<C>(pub C);

impl<C> Shared<C> {
    pub fn new() -> io::Result<Shared<C>> {
        let waker = Arc::new(LoopWaker::new()?);
        Ok(Shared {
            releases: Arc::new(Releases {
                requests: Mutex::new(Vec::new()),
                pending: AtomicBool::new(false),
                waker: Arc::clone(&waker),
            }),
            waker,
            posts: Mutex::new(Vec::new()),
            has_posts: AtomicBool::new(false),
            closed: AtomicBool::new(false),
        })
    }

    pub fn post(&self, callback: C) -> Result<(), Closed<C>> {
        {
            let mut posts = lock(&self.posts);
            if self.closed.load(SeqCst) {
                return Err(Closed(callback));
            }
            posts.push(callback);
            self.has_posts.store(true, SeqCst);
        }
        self.waker.wake();
        Ok(())
    }

    pub fn has_posts(&self) -> bool {
        self.has_posts.load(SeqCst)
    }

    /// Whether posts or release requests wait to be taken.
    pub fn has_work(&self) -> bool {
        self.has_posts() || self.releases.pending.load(SeqCst)
    }

    /// What other threads use to ask this loop to release an fd.
    pub fn release_sink(&self) -> Arc<dyn ReleaseSink> {
        self.releases.clone()
    }

    /// The release requests made so far, in order.
    pub fn take_releases(&self) -> Vec<(RawFd, u32)> {
        if !self.releases.pending.load(SeqCst) {
            return Vec::new();
        }
        let mut requests = lock(&self.releases.requests);
        self.releases.pending.store(false, SeqCst);
        std::mem::take(&mut *requests)
    }

    /// Moves posted callbacks, in order, to the end of `queue`.
    pub fn take_posts(&self, queue: &mut impl Extend<C>) {
        if self.has_posts() {
            let mut posts = lock(&self.posts);
            self.has_posts.store(false, SeqCst);
            queue.extend(posts.drain(..));
        }
    }

    /// Marks the loop as about to block; `false` if work was posted meanwhile
    /// (the caller must not block then).
    pub fn prepare_block(&self) -> bool {
        self.waker.sleeping.store(true, SeqCst);
        if self.has_work() {
            self.waker.sleeping.store(false, SeqCst);
            return false;
        }
        true
    }

    pub fn after_block(&self) {
        self.waker.sleeping.store(false, SeqCst);
        if self.waker.woken.load(SeqCst) {
            self.waker.drain();
        }
    }

    pub fn posts_len(&self) -> usize {
        lock(&self.posts).len()
    }

    pub fn for_each_post(&self, mut f: impl FnMut(&C)) {
        lock(&self.posts).iter().for_each(&mut f);
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(SeqCst)
    }

    pub fn close(&self) {
        {
            let mut posts = lock(&self.posts);
            self.closed.store(true, SeqCst);
            posts.clear();
            self.has_posts.store(false, SeqCst);
        }
        self.waker.close();
    }
}
