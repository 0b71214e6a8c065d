//! Waits in progress: who is parked on the loop, and what may end each wait.
//!
//! A waiter (a Ruby fiber, to the binding) parks with up to two triggers of
//! its own, a one-shot watcher and a timer, and may also be ended by an
//! explicit wake, a cancellation, or its fd being released. Whichever comes
//! first takes the entry out ([`Waiters::unpark`]) and cancels the others, so
//! a wait ends exactly once and a late trigger finds nothing to resume.

use super::registry::WatcherKey;
use super::slab::{Key, Slab};
use super::timers::TimerKey;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::time::Instant;

/// Names a wait. A distinct type from timer and watcher keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WaitKey(Key);

impl WaitKey {
    /// The key as one number (the Integer token Ruby code holds).
    pub fn to_bits(self) -> u64 {
        (u64::from(self.0.generation) << 32) | u64::from(self.0.index)
    }

    /// The key [`to_bits`](Self::to_bits) made `bits` of. Any number is a
    /// key: one that names no wait is simply not found.
    pub fn from_bits(bits: u64) -> WaitKey {
        WaitKey(Key {
            index: bits as u32,
            generation: (bits >> 32) as u32,
        })
    }
}

#[derive(Debug)]
pub struct Waiter<C> {
    /// Who waits (the binding: the fiber's address); one wait per owner.
    pub owner: u64,
    /// What resumes the owner.
    pub resume: C,
    pub watcher: Option<WatcherKey>,
    pub timer: Option<TimerKey>,
    /// When `timer` ends the wait (for `Loop#tasks`).
    pub deadline: Option<Instant>,
}

/// Owners are addresses, already well spread: one multiply mixes them enough.
#[derive(Default)]
pub struct OwnerHasher(u64);

impl Hasher for OwnerHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0 << 8 | u64::from(byte)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = value.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29);
    }
}

type ByOwner<V> = HashMap<u64, V, BuildHasherDefault<OwnerHasher>>;

#[derive(Debug)]
pub struct Waiters<C> {
    slab: Slab<Waiter<C>>,
    /// Owner => its wait, built only when asked for (`parked`: a
    /// cancellation), then kept up to date until more waits have parked
    /// since the last question than it holds: a wait costs no hash update on
    /// the hot path, and a burst of cancellations (whose tasks may park
    /// again as they unwind) costs one scan, not one each.
    by_owner: Option<ByOwner<WaitKey>>,
    /// Parks since `parked` last asked.
    parks_unasked: usize,
    /// The owner that parked last: whether a fiber that just switched away
    /// parked is answered without the index.
    last: u64,
    /// Ends of a wait that came while the owner was not parked (a
    /// cancellation of a running task): delivered at its next park.
    pending: ByOwner<C>,
}

impl<C> Default for Waiters<C> {
    fn default() -> Self {
        Waiters {
            slab: Slab::default(),
            by_owner: None,
            parks_unasked: 0,
            last: 0,
            pending: ByOwner::default(),
        }
    }
}

impl<C> Waiters<C> {
    /// Parks `owner`; its triggers are attached with [`Waiters::attach`].
    pub fn park(&mut self, owner: u64, resume: C) -> WaitKey {
        self.last = owner;
        let key = WaitKey(self.slab.insert(Waiter {
            owner,
            resume,
            watcher: None,
            timer: None,
            deadline: None,
        }));
        if let Some(index) = self.by_owner.as_mut() {
            self.parks_unasked += 1;
            if self.parks_unasked > index.len() {
                self.by_owner = None;
            } else {
                index.insert(owner, key);
            }
        }
        key
    }

    pub fn attach(
        &mut self,
        WaitKey(key): WaitKey,
        watcher: Option<WatcherKey>,
        timer: Option<TimerKey>,
        deadline: Option<Instant>,
    ) {
        if let Some(waiter) = self.slab.get_mut(key) {
            waiter.watcher = watcher;
            waiter.timer = timer;
            waiter.deadline = deadline;
        }
    }

    pub fn get(&self, WaitKey(key): WaitKey) -> Option<&Waiter<C>> {
        self.slab.get(key)
    }

    /// Ends the wait under `key`: the waiter, whose triggers the caller
    /// cancels; `None` if it already ended.
    pub fn unpark(&mut self, WaitKey(key): WaitKey) -> Option<Waiter<C>> {
        let waiter = self.slab.remove(key)?;
        if let Some(index) = self.by_owner.as_mut() {
            index.remove(&waiter.owner);
        }
        if self.last == waiter.owner {
            self.last = 0;
        }
        Some(waiter)
    }

    /// The wait `owner` is parked in, if any.
    pub fn parked(&mut self, owner: u64) -> Option<WaitKey> {
        self.parks_unasked = 0;
        let slab = &self.slab;
        let index = self.by_owner.get_or_insert_with(|| {
            (0..slab.capacity())
                .filter_map(|i| slab.occupant(i).map(|w| (w.owner, WaitKey(slab.key_of(i)))))
                .collect()
        });
        index.get(&owner).copied()
    }

    /// Whether `owner` is parked, cheaply when it is the one that parked last.
    pub fn is_parked(&mut self, owner: u64) -> bool {
        owner == self.last || self.parked(owner).is_some()
    }

    pub fn set_pending(&mut self, owner: u64, end: C) {
        self.pending.insert(owner, end);
    }

    /// The end of a wait that came for `owner` while it ran, if any.
    pub fn take_pending(&mut self, owner: u64) -> Option<C> {
        if self.pending.is_empty() {
            return None;
        }
        self.pending.remove(&owner)
    }

    pub fn len(&self) -> usize {
        self.slab.len()
    }

    pub fn callbacks(&self) -> impl Iterator<Item = &C> {
        self.slab
            .values()
            .map(|w| &w.resume)
            .chain(self.pending.values())
    }

    /// Every waiter, for `close`; the caller drops their triggers with the
    /// watchers and timers.
    pub fn clear(&mut self) -> Vec<C> {
        let mut all = Vec::with_capacity(self.slab.len());
        for index in 0..self.slab.capacity() {
            let key = self.slab.key_of_any(index);
            if let Some(waiter) = self.slab.remove(key) {
                all.push(waiter.resume);
            }
        }
        self.slab.clear();
        self.by_owner = None;
        self.parks_unasked = 0;
        self.last = 0;
        self.pending.clear();
        all
    }
}
