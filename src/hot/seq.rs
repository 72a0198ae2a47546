//! A shard's write sequence: the version that lets a duplicate claim read the shard
//! without taking its lock.
//!
//! Every holder of a shard's lock makes the sequence odd when it takes the lock and
//! even again when it lets go ([`Seq::write_begin`], [`Seq::write_end`]). A reader
//! notes an even value first ([`Seq::read_begin`]), reads what it needs, and keeps
//! its answer only if the sequence still holds that value afterwards
//! ([`Seq::read_valid`]): then no lock holder changed anything while it read. A
//! reader that loses the race takes the lock instead.
//!
//! The orderings are those of the classic sequence lock: the writer's odd store is
//! followed by a release fence, so a reader that sees any write made after it also
//! sees the odd value when it checks again (the reader ends with an acquire fence);
//! the writer's even store is a release, so a reader that starts from it sees every
//! write before it. The reader's reads of the data themselves are relaxed atomic
//! loads and may race with the writer's: whatever they return is used only once the
//! check says nothing moved, and memory safety never depends on their values (see
//! `ShardSlot::optimistic_duplicate`). A loom model of the protocol is in
//! `tests/loom.rs`.

use crate::sync::{fence, AtomicU64, Ordering};

/// A write sequence (even: no writer inside).
#[derive(Debug, Default)]
pub(crate) struct Seq(AtomicU64);

impl Seq {
    /// Marks a write as begun; only the lock holder calls it. Returns the value
    /// [`Seq::write_end`] is given.
    #[inline]
    pub(crate) fn write_begin(&self) -> u64 {
        // Only lock holders store: a load and a store need no read-modify-write.
        let s = self.0.load(Ordering::Relaxed);
        self.0.store(s.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        s
    }

    /// Marks the write begun at `s` as finished.
    #[inline]
    pub(crate) fn write_end(&self, s: u64) {
        self.0.store(s.wrapping_add(2), Ordering::Release);
    }

    /// The sequence to validate against, or `None` if a write is under way.
    #[inline]
    pub(crate) fn read_begin(&self) -> Option<u64> {
        let s = self.0.load(Ordering::Acquire);
        (s & 1 == 0).then_some(s)
    }

    /// Whether nothing was written since [`Seq::read_begin`] returned `s`.
    #[inline]
    pub(crate) fn read_valid(&self, s: u64) -> bool {
        fence(Ordering::Acquire);
        self.0.load(Ordering::Relaxed) == s
    }
}
