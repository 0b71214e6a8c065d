//! Timers: a binary min-heap keyed by (deadline, sequence) whose nodes know
//! their slot, and slots that know their heap position, so cancel and `again`
//! are O(log n) without tombstones.

use super::slab::{Key, Slab};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug)]
struct Node {
    deadline: Instant,
    seq: u64,
    index: u32,
}

impl Node {
    fn before(&self, other: &Node) -> bool {
        (self.deadline, self.seq) < (other.deadline, other.seq)
    }
}

#[derive(Debug)]
struct Entry<C> {
    callback: C,
    interval: Option<Duration>,
    referenced: bool,
    pos: usize,
}

#[derive(Debug)]
pub struct Timers<C> {
    slab: Slab<Entry<C>>,
    heap: Vec<Node>,
    next_seq: u64,
    referenced: usize,
}

impl<C> Default for Timers<C> {
    fn default() -> Self {
        Timers {
            slab: Slab::default(),
            heap: Vec::new(),
            next_seq: 0,
            referenced: 0,
        }
    }
}

/// `now + delay`, saturating far in the future instead of overflowing.
pub fn deadline_after(now: Instant, delay: Duration) -> Instant {
    now.checked_add(delay)
        .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3600))
}

impl<C: Clone> Timers<C> {
    pub fn add(&mut self, deadline: Instant, interval: Option<Duration>, callback: C) -> Key {
        let key = self.slab.insert(Entry {
            callback,
            interval,
            referenced: true,
            pos: self.heap.len(),
        });
        self.referenced += 1;
        let seq = self.bump_seq();
        self.heap.push(Node {
            deadline,
            seq,
            index: key.index,
        });
        self.sift_up(self.heap.len() - 1);
        key
    }

    /// Moves an active timer's deadline; `false` if the key is stale.
    pub fn again(&mut self, key: Key, deadline: Instant) -> bool {
        let Some(pos) = self.slab.get(key).map(|e| e.pos) else {
            return false;
        };
        let seq = self.bump_seq();
        self.heap[pos].deadline = deadline;
        self.heap[pos].seq = seq;
        self.restore(pos);
        true
    }

    pub fn cancel(&mut self, key: Key) -> Option<C> {
        let entry = self.slab.remove(key)?;
        if entry.referenced {
            self.referenced -= 1;
        }
        self.remove_at(entry.pos);
        Some(entry.callback)
    }

    pub fn is_active(&self, key: Key) -> bool {
        self.slab.get(key).is_some()
    }

    pub fn set_ref(&mut self, key: Key, referenced: bool) {
        if let Some(entry) = self.slab.get_mut(key) {
            if entry.referenced != referenced {
                entry.referenced = referenced;
                if referenced {
                    self.referenced += 1;
                } else {
                    self.referenced -= 1;
                }
            }
        }
    }

    pub fn earliest(&self) -> Option<Instant> {
        self.heap.first().map(|node| node.deadline)
    }

    /// The next sequence number: timers armed from now on have seq >= it.
    pub fn sequence_mark(&self) -> u64 {
        self.next_seq
    }

    /// Takes the earliest timer if its deadline is <= `now` and it was armed
    /// before `mark`. A repeating timer is re-armed at `now + interval` first.
    pub fn pop_due(&mut self, now: Instant, mark: u64) -> Option<C> {
        let top = *self.heap.first()?;
        if top.deadline > now || top.seq >= mark {
            // Equal-or-later keys sort after `top`, so nothing else is due either;
            // a re-armed timer with an old deadline would have a new seq >= mark.
            return None;
        }
        let entry = self.slab.at_mut(top.index);
        let callback = entry.callback.clone();
        let interval = entry.interval;
        let key = self.slab.key_of(top.index);
        match interval {
            Some(interval) => {
                let seq = self.bump_seq();
                self.heap[0].deadline = deadline_after(now, interval);
                self.heap[0].seq = seq;
                self.sift_down(0);
            }
            None => {
                self.cancel(key);
            }
        }
        Some(callback)
    }

    pub fn len(&self) -> usize {
        self.slab.len()
    }

    pub fn referenced(&self) -> usize {
        self.referenced
    }

    pub fn callbacks(&self) -> impl Iterator<Item = &C> {
        self.slab.values().map(|e| &e.callback)
    }

    pub fn clear(&mut self) {
        self.slab.clear();
        self.heap.clear();
        self.referenced = 0;
    }

    fn bump_seq(&mut self) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        seq
    }

    fn remove_at(&mut self, pos: usize) {
        let last = self.heap.len() - 1;
        self.heap.swap(pos, last);
        self.heap.pop();
        if pos < self.heap.len() {
            let index = self.heap[pos].index;
            self.slab.at_mut(index).pos = pos;
            self.restore(pos);
        }
    }

    fn restore(&mut self, pos: usize) {
        if pos > 0 && self.heap[pos].before(&self.heap[(pos - 1) / 2]) {
            self.sift_up(pos);
        } else {
            self.sift_down(pos);
        }
    }

    fn sift_up(&mut self, mut pos: usize) {
        let node = self.heap[pos];
        while pos > 0 {
            let parent = (pos - 1) / 2;
            if !node.before(&self.heap[parent]) {
                break;
            }
            self.heap[pos] = self.heap[parent];
            self.slab.at_mut(self.heap[pos].index).pos = pos;
            pos = parent;
        }
        self.heap[pos] = node;
        self.slab.at_mut(node.index).pos = pos;
    }

    /// Bottom-up ("Floyd") sift-down: the hole at `start` goes down to a leaf
    /// along the earlier children (one comparison per level), then `node`
    /// comes back up to its place. The node sifted down is nearly always a
    /// late one (the heap's last leaf after a removal, or a re-armed repeating
    /// timer), which belongs near the bottom: about half the comparisons of
    /// the textbook loop, which compares each child pair and then the node.
    fn sift_down(&mut self, start: usize) {
        let node = self.heap[start];
        let len = self.heap.len();
        let mut pos = start;
        loop {
            let left = 2 * pos + 1;
            if left >= len {
                break;
            }
            let right = left + 1;
            let child = if right < len && self.heap[right].before(&self.heap[left]) {
                right
            } else {
                left
            };
            self.heap[pos] = self.heap[child];
            self.slab.at_mut(self.heap[pos].index).pos = pos;
            pos = child;
        }
        while pos > start {
            let parent = (pos - 1) / 2;
            if !node.before(&self.heap[parent]) {
                break;
            }
            self.heap[pos] = self.heap[parent];
            self.slab.at_mut(self.heap[pos].index).pos = pos;
            pos = parent;
        }
        self.heap[pos] = node;
        self.slab.at_mut(node.index).pos = pos;
    }

    #[cfg(test)]
    fn check_invariants(&self) {
        for (pos, node) in self.heap.iter().enumerate() {
            if pos > 0 {
                assert!(!node.before(&self.heap[(pos - 1) / 2]), "heap order");
            }
        }
        assert_eq!(self.heap.len(), self.slab.len());
        assert_eq!(
            self.referenced,
            self.slab.values().filter(|e| e.referenced).count()
        );
        for e in self.slab.values() {
            assert!(e.pos < self.heap.len());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn at(base: Instant, ms: u64) -> Instant {
        base + Duration::from_millis(ms)
    }

    #[test]
    fn equal_deadlines_fire_in_insertion_order() {
        let base = Instant::now();
        let mut timers = Timers::default();
        for i in 0..10 {
            timers.add(at(base, 5), None, i);
        }
        timers.add(at(base, 1), None, 100);
        let mark = timers.sequence_mark();
        let fired: Vec<_> = std::iter::from_fn(|| timers.pop_due(at(base, 10), mark)).collect();
        assert_eq!(fired, vec![100, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    }

    #[test]
    fn repeating_timers_skip_missed_periods() {
        let base = Instant::now();
        let mut timers = Timers::default();
        let key = timers.add(at(base, 10), Some(Duration::from_millis(10)), "tick");
        // 100 ms late: fires once, re-armed at now + interval.
        let mark = timers.sequence_mark();
        assert!(timers.pop_due(at(base, 110), mark).is_some());
        assert!(timers
            .pop_due(at(base, 110), timers.sequence_mark())
            .is_none());
        assert_eq!(timers.earliest(), Some(at(base, 120)));
        assert!(timers.is_active(key));
    }

    #[test]
    fn timers_armed_during_the_phase_wait() {
        let base = Instant::now();
        let mut timers = Timers::default();
        let mark = timers.sequence_mark();
        timers.add(at(base, 0), None, 1);
        assert!(timers.pop_due(at(base, 5), mark).is_none());
        assert!(timers
            .pop_due(at(base, 5), timers.sequence_mark())
            .is_some());
    }

    #[test]
    fn randomized_operations_match_a_reference_model() {
        // Deterministic xorshift so failures replay.
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut rand = move |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        let base = Instant::now();
        let mut timers = Timers::default();
        // Reference: id -> (deadline ms, seq); fire order = sort by (deadline, seq).
        let mut model: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
        let mut keys: BTreeMap<u32, Key> = BTreeMap::new();
        let mut seq = 0u64;
        let mut now = 0u64;
        for id in 0..20_000u32 {
            match rand(10) {
                0..=4 => {
                    let d = now + rand(50);
                    keys.insert(id, timers.add(at(base, d), None, id));
                    model.insert(id, (d, seq));
                    seq += 1;
                }
                5 | 6 => {
                    if let Some((&victim, _)) =
                        model.iter().nth(rand(model.len() as u64 + 1) as usize)
                    {
                        assert_eq!(timers.cancel(keys[&victim]), Some(victim));
                        model.remove(&victim);
                        assert_eq!(timers.cancel(keys[&victim]), None, "cancel is idempotent");
                    }
                }
                7 => {
                    if let Some((&victim, _)) =
                        model.iter().nth(rand(model.len() as u64 + 1) as usize)
                    {
                        let d = now + rand(50);
                        assert!(timers.again(keys[&victim], at(base, d)));
                        model.insert(victim, (d, seq));
                        seq += 1;
                    }
                }
                _ => {
                    now += rand(20);
                    let mark = timers.sequence_mark();
                    let mut expected: Vec<(u64, u64, u32)> = model
                        .iter()
                        .filter(|(_, &(d, _))| d <= now)
                        .map(|(&id, &(d, s))| (d, s, id))
                        .collect();
                    expected.sort();
                    let fired: Vec<u32> =
                        std::iter::from_fn(|| timers.pop_due(at(base, now), mark)).collect();
                    let expected: Vec<u32> = expected.into_iter().map(|(_, _, id)| id).collect();
                    assert_eq!(fired, expected);
                    for id in fired {
                        model.remove(&id);
                        assert!(!timers.is_active(keys[&id]));
                    }
                }
            }
            timers.check_invariants();
            assert_eq!(timers.len(), model.len());
        }
    }
}
