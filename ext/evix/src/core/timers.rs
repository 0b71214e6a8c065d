//! Timers: a 4-ary min-heap of (deadline, sequence) nodes with lazy cancel.
//!
//! Every arming (add, `again`, a repeating timer's re-arm) pushes a node with
//! a fresh sequence number and records that number in the timer's slot; a
//! node is live only while its slot holds that number. Cancel and `again`
//! therefore never touch the heap: the node left behind is dropped when it
//! reaches the top, or when such dead nodes outnumber the live timers and
//! the heap is rebuilt without them. The heap never updates the slots while
//! it sifts, so a pop touches only the heap.
//!
//! Due timers are fired in two steps: [`Timers::take_due`] moves a batch of
//! them out of the heap (their slots stay, so they are still active, still
//! visited by `callbacks` and still cancellable), then [`Timers::fire`] hands
//! out each one's callback just before it runs, unless a callback that ran
//! earlier in the batch cancelled or re-armed it.

use super::slab::{Key, Slab};
use std::cell::RefCell;
use std::time::{Duration, Instant};

/// Names a timer. A distinct type from a watcher's key, so one cannot be
/// passed as the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TimerKey(Key);

/// Children per heap node: half the depth of a binary heap, and a node's
/// children are contiguous.
const ARITY: usize = 4;

/// Dead nodes tolerated beyond one per live timer before a rebuild.
const SLACK: usize = 64;

#[derive(Clone, Copy, Debug)]
struct Node {
    /// Nanoseconds since `Timers::base`.
    deadline: u64,
    seq: u64,
    index: u32,
}

impl Node {
    /// (deadline, seq) as one number: a single wide compare.
    #[inline]
    fn key(&self) -> u128 {
        (u128::from(self.deadline) << 64) | u128::from(self.seq)
    }
}

/// The earlier of two (position, node) pairs; the first on a tie.
#[inline]
fn earlier(a: (usize, Node), b: (usize, Node)) -> (usize, Node) {
    if b.1.key() < a.1.key() {
        b
    } else {
        a
    }
}

#[derive(Debug)]
struct Entry<C> {
    callback: C,
    interval: Option<Duration>,
    referenced: bool,
    /// The sequence number of the timer's live node.
    seq: u64,
}

/// A due timer taken out of the heap, waiting for [`Timers::fire`].
#[derive(Clone, Copy, Debug)]
pub struct Due(Node);

#[derive(Debug)]
pub struct Timers<C> {
    /// Deadlines are kept as nanoseconds since this instant (taken when the
    /// timers were created; every deadline and `now` the loop passes is later).
    base: Instant,
    slab: Slab<Entry<C>>,
    heap: Vec<Node>,
    /// Due nodes armed during the current phase, set aside by `take_due`.
    skipped: Vec<Node>,
    /// The timer phase's batch buffer, kept between phases.
    batch: Vec<Due>,
    next_seq: u64,
    referenced: usize,
}

impl<C> Default for Timers<C> {
    fn default() -> Self {
        Timers {
            base: Instant::now(),
            slab: Slab::default(),
            heap: Vec::new(),
            skipped: Vec::new(),
            batch: Vec::new(),
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
    pub fn add(&mut self, deadline: Instant, interval: Option<Duration>, callback: C) -> TimerKey {
        let seq = self.bump_seq();
        let key = self.slab.insert(Entry {
            callback,
            interval,
            referenced: true,
            seq,
        });
        self.referenced += 1;
        self.arm(key.index, seq, deadline);
        TimerKey(key)
    }

    /// Moves an active timer's deadline; `false` if the key is stale.
    pub fn again(&mut self, TimerKey(key): TimerKey, deadline: Instant) -> bool {
        let seq = self.next_seq;
        let Some(entry) = self.slab.get_mut(key) else {
            return false;
        };
        entry.seq = seq;
        self.next_seq += 1;
        self.arm(key.index, seq, deadline);
        true
    }

    pub fn cancel(&mut self, TimerKey(key): TimerKey) -> Option<C> {
        let entry = self.slab.remove(key)?;
        if entry.referenced {
            self.referenced -= 1;
        }
        self.maybe_compact();
        Some(entry.callback)
    }

    pub fn is_active(&self, TimerKey(key): TimerKey) -> bool {
        self.slab.get(key).is_some()
    }

    pub fn set_ref(&mut self, TimerKey(key): TimerKey, referenced: bool) {
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

    /// The earliest deadline (dropping dead nodes from the top first).
    pub fn earliest(&mut self) -> Option<Instant> {
        while let Some(&top) = self.heap.first() {
            if self.is_live(&top) {
                return Some(self.instant(top.deadline));
            }
            self.pop();
        }
        None
    }

    /// The next sequence number: timers armed from now on have seq >= it.
    pub fn sequence_mark(&self) -> u64 {
        self.next_seq
    }

    /// Moves up to `limit` nodes whose deadline is <= `now` and that were
    /// armed before `mark` out of the heap into `out`, earliest first. Their
    /// timers stay active until [`fire`](Self::fire) (or
    /// [`untake`](Self::untake)). Only the heap is read here: a dead node
    /// may be taken too (`fire` drops it), so taking costs no slot lookup.
    ///
    /// Due nodes armed at or after `mark` (during the timer phase) wait for
    /// the next iteration, but older due nodes below them must not: they are
    /// set aside until [`end_phase`](Self::end_phase), so each is passed
    /// over once per phase however many batches follow.
    pub fn take_due(&mut self, now: Instant, mark: u64, out: &mut Vec<Due>, limit: usize) {
        let now = self.ticks(now);
        let mut taken = 0;
        while taken < limit {
            let Some(&top) = self.heap.first() else { break };
            if top.deadline > now {
                break;
            }
            self.pop();
            if top.seq >= mark {
                self.skipped.push(top);
                continue;
            }
            out.push(Due(top));
            taken += 1;
        }
    }

    /// Puts back the nodes `take_due` set aside in this phase.
    pub fn end_phase(&mut self) {
        while let Some(node) = self.skipped.pop() {
            self.push(node);
        }
        self.maybe_compact();
    }

    /// Starts loading a taken timer's slot (see `sys::prefetch`).
    pub fn prefetch(&self, due: Due) {
        self.slab.prefetch(due.0.index);
    }

    /// The callback a taken timer would fire with, if it is still live.
    pub fn peek(&self, due: Due) -> Option<&C> {
        self.slab
            .occupant(due.0.index)
            .filter(|e| e.seq == due.0.seq)
            .map(|e| &e.callback)
    }

    /// The callback of a taken timer, unless it was cancelled or re-armed
    /// since it was taken. A one-shot timer is removed; a repeating one is
    /// re-armed at `now() + interval` first (so its callback can cancel it).
    pub fn fire(&mut self, due: Due, now: impl FnOnce() -> Instant) -> Option<C> {
        let Due(node) = due;
        if !self.is_live(&node) {
            return None;
        }
        let key = TimerKey(self.slab.key_of(node.index));
        let entry = self.slab.at_mut(node.index);
        match entry.interval {
            Some(interval) => {
                let seq = self.next_seq;
                self.next_seq += 1;
                entry.seq = seq;
                let callback = entry.callback.clone();
                self.arm(node.index, seq, deadline_after(now(), interval));
                Some(callback)
            }
            None => self.cancel(key),
        }
    }

    /// Puts a taken timer back into the heap as it was (when its batch is
    /// abandoned because a callback failed).
    pub fn untake(&mut self, due: Due) {
        if self.is_live(&due.0) {
            self.push(due.0);
        }
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
        self.skipped.clear();
        self.referenced = 0;
    }

    fn ticks(&self, at: Instant) -> u64 {
        let since = at.saturating_duration_since(self.base);
        since
            .as_secs()
            .saturating_mul(1_000_000_000)
            .saturating_add(u64::from(since.subsec_nanos()))
    }

    fn instant(&self, ticks: u64) -> Instant {
        deadline_after(self.base, Duration::from_nanos(ticks))
    }

    fn bump_seq(&mut self) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        seq
    }

    /// Whether `node` is its timer's live node.
    fn is_live(&self, node: &Node) -> bool {
        self.slab
            .occupant(node.index)
            .is_some_and(|e| e.seq == node.seq)
    }

    fn arm(&mut self, index: u32, seq: u64, deadline: Instant) {
        let deadline = self.ticks(deadline);
        self.push(Node {
            deadline,
            seq,
            index,
        });
        self.maybe_compact();
    }

    /// Rebuilds the heap without its dead nodes once they outnumber the
    /// live timers (amortized O(1) per cancel or re-arm).
    fn maybe_compact(&mut self) {
        if self.heap.len() <= 2 * self.slab.len() + SLACK {
            return;
        }
        let mut heap = std::mem::take(&mut self.heap);
        heap.retain(|node| self.is_live(node));
        self.heap = heap;
        for pos in (0..self.heap.len() / ARITY + 1).rev() {
            self.sift_down(pos);
        }
    }

    fn push(&mut self, node: Node) {
        self.heap.push(node);
        let mut pos = self.heap.len() - 1;
        let key = node.key();
        while pos > 0 {
            let parent = (pos - 1) / ARITY;
            if key >= self.heap[parent].key() {
                break;
            }
            self.heap[pos] = self.heap[parent];
            pos = parent;
        }
        self.heap[pos] = node;
    }

    /// Removes the top node.
    fn pop(&mut self) {
        let Some(last) = self.heap.pop() else { return };
        if !self.heap.is_empty() {
            self.heap[0] = last;
            self.sift_down(0);
        }
    }

    /// Bottom-up ("Floyd") sift-down: the hole at `start` goes down to a leaf
    /// along the earliest children, then `node` comes back up to its place.
    /// The node sifted down is nearly always a late one (the heap's last leaf
    /// after a pop), which belongs near the bottom: fewer comparisons than
    /// comparing it with the earliest child at every level.
    fn sift_down(&mut self, start: usize) {
        let heap = &mut self.heap[..];
        let Some(&node) = heap.get(start) else { return };
        let mut pos = start;
        loop {
            let first = ARITY * pos + 1;
            let child = match heap.get(first..first + ARITY) {
                Some(&[a, b, c, d]) => {
                    // A full set of children: a branch-free tournament.
                    let (i, x) = earlier((0, a), (1, b));
                    let (j, y) = earlier((2, c), (3, d));
                    earlier((i, x), (j, y)).0
                }
                _ => {
                    if first >= heap.len() {
                        break;
                    }
                    let children = &heap[first..];
                    (1..children.len()).fold(0, |best, i| {
                        if children[i].key() < children[best].key() {
                            i
                        } else {
                            best
                        }
                    })
                }
            };
            heap[pos] = heap[first + child];
            pos = first + child;
        }
        let key = node.key();
        while pos > start {
            let parent = (pos - 1) / ARITY;
            if key >= heap[parent].key() {
                break;
            }
            heap[pos] = heap[parent];
            pos = parent;
        }
        heap[pos] = node;
    }

    #[cfg(test)]
    fn check_invariants(&self) {
        for (pos, node) in self.heap.iter().enumerate() {
            if pos > 0 {
                assert!(
                    node.key() >= self.heap[(pos - 1) / ARITY].key(),
                    "heap order"
                );
            }
        }
        assert!(self.skipped.is_empty());
        let live = self.heap.iter().filter(|n| self.is_live(n)).count();
        assert_eq!(live, self.slab.len(), "one live node per timer");
        assert!(self.heap.len() <= 2 * self.slab.len() + SLACK + 1);
        assert_eq!(
            self.referenced,
            self.slab.values().filter(|e| e.referenced).count()
        );
    }

    /// One due timer at a time, as the loop fired them before batches.
    #[cfg(test)]
    fn pop_due(&mut self, now: Instant, mark: u64) -> Option<C> {
        let mut out = Vec::new();
        loop {
            out.clear();
            self.take_due(now, mark, &mut out, 1);
            self.end_phase();
            let due = *out.first()?;
            if let Some(callback) = self.fire(due, || now) {
                return Some(callback);
            }
        }
    }
}

/// Due timers taken out of the heap per clock read.
const BATCH: usize = 256;

/// How many timers ahead of the one firing the timer phase prefetches.
const PREFETCH: usize = 4;

/// The timer phase of a loop whose state `S` holds its timers (`timers`
/// picks them out of it). Due timers are taken out of the heap in batches,
/// each against one clock read; the clock is read again after each batch,
/// so this fires what re-reading it after every callback would, in the same
/// order (see [`Timers::take_due`]). A timer cancelled or re-armed by an
/// earlier callback of its batch does not fire; one armed during the phase
/// waits for the next iteration. The state is borrowed only inside
/// [`next`](Self::next), never while a callback runs. However the phase
/// ends (a callback's error or a panic), what was taken but not fired goes
/// back into the heap, and the buffer back to the timers for the next phase.
pub struct TimerPhase<'a, S, T: Clone, F: Fn(&mut S) -> &mut Timers<T>> {
    state: &'a RefCell<S>,
    timers: F,
    /// Timers armed from here on wait for the next phase.
    mark: u64,
    due: Vec<Due>,
    /// The position in `due` of the next timer to fire.
    next: usize,
}

impl<'a, S, T: Clone, F: Fn(&mut S) -> &mut Timers<T>> TimerPhase<'a, S, T, F> {
    /// The phase, with its first batch taken; `None` if no timer is due (no
    /// clock read at all when no timer is armed).
    pub fn begin(state: &'a RefCell<S>, timers: F) -> Option<Self> {
        let mut borrowed = state.borrow_mut();
        let heap = timers(&mut borrowed);
        let earliest = heap.earliest()?;
        let now = Instant::now();
        if earliest > now {
            return None;
        }
        let mark = heap.sequence_mark();
        let mut due = std::mem::take(&mut heap.batch);
        due.clear();
        heap.take_due(now, mark, &mut due, BATCH);
        drop(borrowed);
        Some(TimerPhase {
            state,
            timers,
            mark,
            due,
            next: 0,
        })
    }

    /// Fires the next due timer that is still live, with the state borrowed:
    /// what `fired` makes of its slot (`None`: fire the next one). Before
    /// that it starts loading what firing the timers ahead will read
    /// (`prefetch` gets their slots, with a level as `Driver::prefetch`
    /// does). `None` once no due timer is left.
    pub fn next<R>(
        &mut self,
        prefetch: impl Fn(&T, usize),
        mut fired: impl FnMut(&mut S, T) -> Option<R>,
    ) -> Option<R> {
        loop {
            if self.next == self.due.len() {
                self.due.clear();
                self.next = 0;
                let now = Instant::now();
                let mut state = self.state.borrow_mut();
                (self.timers)(&mut state).take_due(now, self.mark, &mut self.due, BATCH);
            }
            let &due = self.due.get(self.next)?;
            let result = {
                let mut state = self.state.borrow_mut();
                let timers = (self.timers)(&mut state);
                prefetch_ahead(timers, &prefetch, &self.due[self.next..]);
                let slot = timers.fire(due, Instant::now);
                slot.and_then(|slot| fired(&mut state, slot))
            };
            self.next += 1;
            if result.is_some() {
                return result;
            }
        }
    }
}

impl<S, T: Clone, F: Fn(&mut S) -> &mut Timers<T>> Drop for TimerPhase<'_, S, T, F> {
    fn drop(&mut self) {
        let Ok(mut state) = self.state.try_borrow_mut() else {
            return;
        };
        let timers = (self.timers)(&mut state);
        for &due in &self.due[self.next..] {
            timers.untake(due);
        }
        timers.end_phase();
        self.due.clear();
        timers.batch = std::mem::take(&mut self.due);
    }
}

/// Due timers sit in random places in memory, and so do the objects their
/// callbacks touch: while `due[0]` fires, start loading what firing the next
/// ones reads, as a pipeline in which each step finds the memory of the
/// previous one arrived: the slot `3 * PREFETCH` timers ahead, the
/// callback's object `2 * PREFETCH` ahead, what that points to `PREFETCH`
/// ahead.
fn prefetch_ahead<T: Clone>(timers: &Timers<T>, prefetch: &impl Fn(&T, usize), due: &[Due]) {
    if let Some(&ahead) = due.get(3 * PREFETCH) {
        timers.prefetch(ahead);
    }
    for (level, distance) in [(0, 2 * PREFETCH), (1, PREFETCH)] {
        if let Some(slot) = due.get(distance).and_then(|&ahead| timers.peek(ahead)) {
            prefetch(slot, level);
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
        let mut timers = Timers::default();
        let base = Instant::now();
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
        let mut timers = Timers::default();
        let base = Instant::now();
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
        let mut timers = Timers::default();
        let base = Instant::now();
        let mark = timers.sequence_mark();
        timers.add(at(base, 0), None, 1);
        assert!(timers.pop_due(at(base, 5), mark).is_none());
        assert!(timers
            .pop_due(at(base, 5), timers.sequence_mark())
            .is_some());
    }

    #[test]
    fn a_timer_armed_during_the_phase_does_not_hold_back_older_due_ones() {
        let mut timers = Timers::default();
        let base = Instant::now();
        timers.add(at(base, 3), None, "old");
        let mark = timers.sequence_mark();
        // Armed by a callback of this phase, earlier than "old".
        timers.add(at(base, 1), None, "new");
        assert_eq!(timers.pop_due(at(base, 5), mark), Some("old"));
        assert_eq!(timers.pop_due(at(base, 5), mark), None);
        timers.check_invariants();
        assert_eq!(
            timers.pop_due(at(base, 5), timers.sequence_mark()),
            Some("new")
        );
    }

    #[test]
    fn taken_timers_can_be_cancelled_re_armed_or_put_back() {
        let mut timers = Timers::default();
        let base = Instant::now();
        let keys: Vec<TimerKey> = (0..4).map(|i| timers.add(at(base, i), None, i)).collect();
        let mut due = Vec::new();
        timers.take_due(at(base, 10), timers.sequence_mark(), &mut due, 10);
        assert_eq!(due.len(), 4);
        assert!(keys.iter().all(|&k| timers.is_active(k)), "taken is active");
        assert_eq!(timers.cancel(keys[1]), Some(1));
        assert!(timers.again(keys[2], at(base, 20)));
        assert_eq!(timers.fire(due[0], || at(base, 10)), Some(0));
        assert_eq!(timers.fire(due[1], || at(base, 10)), None, "cancelled");
        assert_eq!(timers.fire(due[2], || at(base, 10)), None, "re-armed");
        timers.untake(due[3]);
        timers.check_invariants();
        let mark = timers.sequence_mark();
        assert_eq!(timers.pop_due(at(base, 10), mark), Some(3));
        assert_eq!(timers.pop_due(at(base, 20), mark), Some(2));
        assert_eq!(timers.len(), 0);
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
        let mut timers = Timers::default();
        let base = Instant::now();
        // Reference: id -> (deadline ms, seq); fire order = sort by (deadline, seq).
        let mut model: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
        let mut keys: BTreeMap<u32, TimerKey> = BTreeMap::new();
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
                    // In batches of a random size, as the loop takes them.
                    let limit = 1 + rand(8) as usize;
                    let mut fired = Vec::new();
                    let mut due = Vec::new();
                    loop {
                        due.clear();
                        timers.take_due(at(base, now), mark, &mut due, limit);
                        if due.is_empty() {
                            break;
                        }
                        for &d in &due {
                            fired.extend(timers.fire(d, || at(base, now)));
                        }
                    }
                    timers.end_phase();
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
