//! Generation-checked slots: a stale key (removed, or its slot reused) never
//! reaches the new occupant.

/// Names a slot and the occupant it was issued for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    pub index: u32,
    pub generation: u32,
}

#[derive(Debug)]
struct Slot<T> {
    generation: u32,
    value: Option<T>,
}

#[derive(Debug)]
pub struct Slab<T> {
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    len: usize,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab {
            slots: Vec::new(),
            free: Vec::new(),
            len: 0,
        }
    }
}

impl<T> Slab<T> {
    pub fn insert(&mut self, value: T) -> Key {
        self.len += 1;
        if let Some(index) = self.free.pop() {
            let slot = &mut self.slots[index as usize];
            slot.value = Some(value);
            return Key {
                index,
                generation: slot.generation,
            };
        }
        let index = u32::try_from(self.slots.len()).expect("slab is full");
        self.slots.push(Slot {
            generation: 0,
            value: Some(value),
        });
        Key {
            index,
            generation: 0,
        }
    }

    pub fn get(&self, key: Key) -> Option<&T> {
        match self.slots.get(key.index as usize) {
            Some(slot) if slot.generation == key.generation => slot.value.as_ref(),
            _ => None,
        }
    }

    pub fn get_mut(&mut self, key: Key) -> Option<&mut T> {
        match self.slots.get_mut(key.index as usize) {
            Some(slot) if slot.generation == key.generation => slot.value.as_mut(),
            _ => None,
        }
    }

    /// Occupant of slot `index` whatever its generation, if any.
    pub fn occupant(&self, index: u32) -> Option<&T> {
        self.slots.get(index as usize)?.value.as_ref()
    }

    /// Starts loading slot `index` into the cache.
    pub fn prefetch(&self, index: u32) {
        if let Some(slot) = self.slots.get(index as usize) {
            // Both ends: a slot may straddle two cache lines.
            let start: *const Slot<T> = slot;
            crate::sys::prefetch(start);
            crate::sys::prefetch(start.cast::<u8>().wrapping_add(size_of::<Slot<T>>() - 1));
        }
    }

    /// Occupant of slot `index` whatever its generation (for heap bookkeeping).
    pub fn at_mut(&mut self, index: u32) -> &mut T {
        self.slots[index as usize]
            .value
            .as_mut()
            .expect("slot is occupied")
    }

    /// The live key of occupied slot `index`.
    pub fn key_of(&self, index: u32) -> Key {
        Key {
            index,
            generation: self.slots[index as usize].generation,
        }
    }

    pub fn remove(&mut self, key: Key) -> Option<T> {
        let slot = self.slots.get_mut(key.index as usize)?;
        if slot.generation != key.generation {
            return None;
        }
        let value = slot.value.take()?;
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(key.index);
        self.len -= 1;
        Some(value)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Slots ever used: indexes below this may be occupied.
    pub fn capacity(&self) -> u32 {
        self.slots.len() as u32
    }

    /// The key of slot `index` as it stands, occupied or not (a removal
    /// with it is a no-op on an empty slot).
    pub fn key_of_any(&self, index: u32) -> Key {
        Key {
            index,
            generation: self.slots.get(index as usize).map_or(0, |s| s.generation),
        }
    }

    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().filter_map(|slot| slot.value.as_ref())
    }

    pub fn clear(&mut self) {
        for (index, slot) in self.slots.iter_mut().enumerate() {
            if slot.value.take().is_some() {
                slot.generation = slot.generation.wrapping_add(1);
                self.free.push(index as u32);
            }
        }
        self.len = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_keys_miss_reused_slots() {
        let mut slab = Slab::default();
        let a = slab.insert("a");
        assert_eq!(slab.remove(a), Some("a"));
        let b = slab.insert("b");
        assert_eq!(a.index, b.index);
        assert_eq!(slab.get(a), None);
        assert_eq!(slab.remove(a), None);
        assert_eq!(slab.get(b), Some(&"b"));
        assert_eq!(slab.len(), 1);
        slab.clear();
        assert_eq!(slab.len(), 0);
        assert_eq!(slab.get(b), None);
    }
}
