//! A hierarchical timing wheel over integer ticks.
//!
//! The wheel is a pure data structure: it reads no clock, and time is a `u64` tick
//! count chosen by the caller. It does not own its entries either. Entries are `u32`
//! indices into a slab that the caller owns, and the wheel threads doubly-linked
//! intrusive lists through that slab via the [`Links`] trait. Scheduling,
//! descheduling and re-scheduling therefore never allocate.
//!
//! # Layout
//!
//! There are [`LEVELS`] levels of 64 slots each. A slot at level `L` spans `64^L`
//! ticks, so level 0 holds exact ticks and the whole wheel spans `2^36` ticks.
//! An entry due at `when` goes to the level of the highest 6-bit group in which
//! `current` and `when` differ, and to the slot given by that group of `when`.
//! Entries further away than the top level can express are put in the top level
//! anyway, in the slot of `when`, and are re-placed each time that slot comes round.
//!
//! Every bucket has a *start tick*: the first tick after `current` that is a
//! multiple of the slot width of its level and falls in its slot. The start of a
//! bucket is never after the deadline of any entry in it, so processing buckets in
//! start order and re-placing (cascading) entries of coarse buckets into finer ones
//! fires every entry at its exact tick. A per-level `u64` occupancy bitmap, rotated
//! by the current slot, finds the next busy bucket of a level without scanning.
//!
//! # The caller's contract
//!
//! * An entry that is not in the wheel must have `prev == NIL` (initialise fresh slab
//!   entries so). The wheel leaves both links at [`NIL`] whenever it lets go of an
//!   entry (deschedule, or just before handing it to the `expire` callback).
//! * While an entry is in the wheel, its links belong to the wheel, and
//!   [`Links::deadline`] must return the low 32 bits of the tick the entry was
//!   scheduled for (the `when` given to [`Wheel::schedule`] or returned from the
//!   `expire` callback), or a later tick: the caller may move a scheduled entry's
//!   deadline later in place, without descheduling it. The entry then stays in its
//!   bucket, whose start is still no later than its deadline, and when that bucket
//!   comes round the wheel reads the new deadline and re-places the entry (a
//!   cascade), so it fires at the later tick. Moving a deadline *earlier* needs
//!   [`Wheel::deschedule`] and [`Wheel::schedule`]. A `when` at or before `current`
//!   is clamped (see [`Wheel::schedule`]); the stored deadline may then stay at the
//!   earlier tick.
//! * Deadlines are stored on 32 bits and widened back with serial arithmetic (see
//!   [`widen`]), so a stored deadline must stay within `2^31` ticks of the wheel's
//!   time, in both directions, for as long as the entry is scheduled: schedule at
//!   most `2^31 - 1` ticks ahead (about 24.8 days at one tick per millisecond), and
//!   when a `when` in the past gets clamped, let the stored deadline be less than
//!   `2^31` ticks behind the tick the entry will fire at.
//! * Ticks stay below `2^63`, far from `u64` overflow.
//!
//! The wheel is a hint, the caller's table is the truth: when an entry fires, the
//! caller re-checks its real deadline and may hand the entry back with a later one.

use std::mem;

/// Sentinel for "no entry".
#[allow(unreachable_pub)] // re-exported to the benches through `crate::__bench`
pub const NIL: u32 = u32::MAX;

/// Tag bit in the `prev` link of an entry that heads a bucket. The other bits hold
/// the bucket id, `level * 64 + slot`. Slab indices are below `2^31`, so a tagged
/// value never collides with an index, and [`NIL`] (all bits set) never collides
/// with a tagged bucket id (the largest is `LEVELS * 64`, which stands for
/// [`Wheel::resume`]).
pub(crate) const HEAD_TAG: u32 = 1 << 31;

/// Bits of the tick consumed by one level.
const BITS: u32 = 6;
/// Slots per level.
const SLOTS: usize = 1 << BITS;
/// Mask extracting a slot number from a shifted tick.
const SLOT_MASK: u64 = SLOTS as u64 - 1;
/// Number of levels; together they span `2^(6 * LEVELS)` = `2^36` ticks.
const LEVELS: usize = 6;

/// Link storage that the wheel threads its bucket lists through.
///
/// Implemented by the caller's slab. Indices are below `2^31`. The wheel owns the
/// `next` and `prev` links of an entry while it is scheduled; the caller must not
/// touch them then.
#[allow(unreachable_pub)] // re-exported to the benches through `crate::__bench`
pub trait Links {
    /// The entry after `i` in its bucket, or [`NIL`].
    fn next(&self, i: u32) -> u32;
    /// Sets the entry after `i` in its bucket.
    fn set_next(&mut self, i: u32, v: u32);
    /// The entry before `i` in its bucket; for the head of a bucket, `HEAD_TAG |
    /// bucket_id`; for an entry that is not scheduled, [`NIL`].
    fn prev(&self, i: u32) -> u32;
    /// Sets the `prev` link of `i`.
    fn set_prev(&mut self, i: u32, v: u32);
    /// The entry's deadline, truncated to its low 32 bits (the caller stores u32 ticks).
    fn deadline(&self, i: u32) -> u32;
}

/// Widens a 32-bit deadline back to a full tick, taking the tick nearest to
/// `reference` whose low 32 bits are `d32`.
///
/// Exact whenever the true deadline lies in `[reference - 2^31, reference + 2^31)`.
#[inline]
pub(crate) fn widen(reference: u64, d32: u32) -> u64 {
    let delta = d32.wrapping_sub(reference as u32) as i32;
    reference.wrapping_add_signed(i64::from(delta))
}

/// The `(level, slot)` of the bucket for an entry due at `when`, seen from
/// `current`. Requires `when > current`.
#[inline]
fn bucket_for(current: u64, when: u64) -> (usize, usize) {
    debug_assert!(when > current);
    let level = (((current ^ when) | SLOT_MASK).ilog2() / BITS) as usize;
    let level = level.min(LEVELS - 1);
    let slot = ((when >> (BITS as usize * level)) & SLOT_MASK) as usize;
    (level, slot)
}

/// Where the head of the bucket that an entry due at `when` joins, seen from
/// `current`, lies in a [`Wheel`], in bytes from its start: for a prefetch ahead of
/// the schedule, from a `current` read without the lock (a stale one only asks for
/// the wrong line).
#[cfg(not(idem_loom))]
#[inline]
pub(crate) fn head_offset(current: u64, when: u64) -> usize {
    let heads = std::mem::offset_of!(Wheel, heads);
    if when <= current {
        return heads;
    }
    let (level, slot) = bucket_for(current, when);
    heads + (level * SLOTS + slot) * std::mem::size_of::<u32>()
}

/// A hierarchical timing wheel: 6 levels of 64 slots, on `u64` ticks.
///
/// The module documentation describes the layout and the caller's contract.
#[allow(unreachable_pub)] // re-exported to the benches through `crate::__bench`
#[derive(Debug, Clone)]
#[repr(C)]
pub struct Wheel {
    /// Every deadline at or before this tick has been fired.
    current: u64,
    /// Bit `s` of `occupied[l]` is set iff `heads[l][s] != NIL`. Beside `current`:
    /// every schedule reads the one and writes the other, so they share a line.
    occupied: [u64; LEVELS],
    /// Head entry of each bucket, or [`NIL`].
    heads: [[u32; SLOTS]; LEVELS],
    /// The entries left of the bucket starting at `current` when an
    /// [`advance_within`](Self::advance_within) ran out of budget inside it, or
    /// [`NIL`]: the next advance goes on with them before any other bucket. Linked
    /// like a bucket, its head tagged [`RESUME`].
    resume: u32,
}

/// The bucket number in a head tag that stands for [`Wheel::resume`] (one past the
/// last bucket's).
const RESUME: usize = LEVELS * SLOTS;

#[allow(unreachable_pub)] // re-exported to the benches through `crate::__bench`
impl Wheel {
    /// An empty wheel whose time is `now`.
    pub fn new(now: u64) -> Self {
        Wheel {
            current: now,
            heads: [[NIL; SLOTS]; LEVELS],
            occupied: [0; LEVELS],
            resume: NIL,
        }
    }

    /// The wheel's time: every deadline at or before it has been fired.
    #[inline]
    pub fn current(&self) -> u64 {
        self.current
    }

    /// True when no entry is scheduled.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.resume == NIL && self.occupied.iter().all(|&bits| bits == 0)
    }

    /// Whether entry `i` is in the wheel, read from its links alone. Only meaningful
    /// if the caller keeps `prev == NIL` on entries that are not scheduled.
    #[inline]
    pub fn is_scheduled<L: Links>(links: &L, i: u32) -> bool {
        links.prev(i) != NIL
    }

    /// Schedules entry `i` (which must not be in the wheel) at tick `when`.
    ///
    /// A `when` at or before [`current`](Self::current) is clamped to `current + 1`:
    /// the entry fires on the next advance that moves time forward. O(1), no
    /// allocation.
    #[inline]
    pub fn schedule<L: Links>(&mut self, links: &mut L, i: u32, when: u64) {
        debug_assert!(i < HEAD_TAG, "slab index out of range");
        debug_assert!(!Self::is_scheduled(links, i), "entry already scheduled");
        let when = when.max(self.current + 1);
        self.link(links, i, when);
    }

    /// Removes entry `i` from whatever bucket holds it and sets both its links to
    /// [`NIL`]. Does nothing if `i` is not scheduled (`prev == NIL`). O(1).
    #[inline]
    pub fn deschedule<L: Links>(&mut self, links: &mut L, i: u32) {
        let prev = links.prev(i);
        if prev == NIL {
            return;
        }
        let next = links.next(i);
        if prev & HEAD_TAG != 0 {
            let bucket = (prev & !HEAD_TAG) as usize;
            if bucket == RESUME {
                debug_assert_eq!(self.resume, i, "corrupt head tag");
                self.resume = next;
            } else {
                let (level, slot) = (bucket / SLOTS, bucket % SLOTS);
                debug_assert_eq!(self.heads[level][slot], i, "corrupt head tag");
                self.heads[level][slot] = next;
                if next == NIL {
                    self.occupied[level] &= !(1u64 << slot);
                }
            }
        } else {
            links.set_next(prev, next);
        }
        if next != NIL {
            // Either the previous entry or, if `i` was the head, the head tag.
            links.set_prev(next, prev);
        }
        links.set_next(i, NIL);
        links.set_prev(i, NIL);
    }

    /// Fires every entry due at or before `now`, in deadline order, and moves the
    /// wheel's time to `now`. Time never moves backwards: if `now <= current`
    /// nothing happens. Returns the number of entries fired.
    ///
    /// Buckets are processed in order of their start tick. Each is detached whole
    /// before its entries are looked at, so linking into the wheel meanwhile is
    /// safe. An entry that is not yet due is re-placed relative to the bucket's
    /// start tick: an entry of a coarse bucket, or one of any level whose deadline
    /// the caller moved later in place (so an entry may be re-placed more than once
    /// per level); an entry that is due (its widened deadline is at
    /// or before the bucket's start tick, which for a level-0 bucket is the exact
    /// tick) is unlinked, its links set to [`NIL`], and handed to
    /// `expire(links, i)`. Entries of one bucket fire in no particular order; all
    /// entries of an earlier bucket fire before those of a later one. Nothing due
    /// after `now` fires, except entries clamped by [`schedule`](Self::schedule),
    /// which are due at the tick after the wheel's time when they were scheduled.
    ///
    /// `expire` returns `None` when the caller is done with the entry (it may free
    /// it), or `Some(when)` to schedule the entry again because its true deadline
    /// moved. The caller must then have stored `when` as the entry's deadline. A
    /// `when` after `now` is scheduled as is; a `when` at or before `now` is
    /// deferred to `now + 1`, i.e. to the next advance. So each call fires an entry
    /// at most once, and a callback that keeps answering with a past tick cannot
    /// make `advance` loop. Inside `expire`, only the fired entry is the caller's:
    /// links and deadlines of entries still in the wheel must be left alone.
    ///
    /// Cost: one step per non-empty bucket reached (never one per tick, however
    /// big the jump) plus at most one cascade per level for each entry (entries
    /// beyond the wheel's `2^36`-tick span also come round the top level). No
    /// allocation.
    pub fn advance<L: Links>(
        &mut self,
        links: &mut L,
        now: u64,
        expire: impl FnMut(&mut L, u32) -> Option<u64>,
    ) -> usize {
        self.advance_within(links, now, usize::MAX, expire).0
    }

    /// [`advance`](Self::advance), stopping early once `budget` entries have been
    /// fired or re-placed, with the wheel's time at the start of the bucket it
    /// stopped in (every later bucket untouched). A bucket may be stopped inside:
    /// the entries left of it wait in [`Wheel::resume`], and the next advance
    /// (to the wheel's time or later) goes on with them first, at that start,
    /// before any other bucket; they can be descheduled meanwhile like any entry.
    /// (Those due at that start then fire in the next call: after the tick the
    /// wheel shows, never before their own.) At least one entry is handled per
    /// call, so calls made until done end. Returns the entries fired, and whether
    /// every entry due at or before `now` has fired and the wheel's time is `now`
    /// (false: stopped early, call again). A call with `now` before the wheel's
    /// time does nothing.
    ///
    /// An entry handed back with a tick at or before `now` is scheduled at the tick
    /// after the wheel's time when the call returns: after `now` if it got there,
    /// else where it stopped, so the next call reaches it again.
    ///
    /// So a caller holds whatever guards the wheel for about `budget` entries a
    /// call, however many a bucket holds (a high level's bucket is cascaded whole
    /// by [`advance`](Self::advance): all the entries of its span).
    pub fn advance_within<L: Links>(
        &mut self,
        links: &mut L,
        now: u64,
        budget: usize,
        mut expire: impl FnMut(&mut L, u32) -> Option<u64>,
    ) -> (usize, bool) {
        // (At the wheel's own time, the rest of a bucket stopped inside is still due.)
        if now < self.current || (now == self.current && self.resume == NIL) {
            return (0, true);
        }
        // A budget of 0 still handles an entry, so that calls repeated until done end.
        let budget = budget.max(1);
        let mut fired = 0;
        let mut work = 0usize;
        let mut stopped = false;
        // Entries handed back with a tick at or before `now`, singly linked through
        // `next`; they are scheduled at `now + 1` once the wheel's time is `now`.
        let mut deferred = NIL;
        // The rest of the bucket an earlier call stopped inside comes first, at the
        // start it had (the wheel's time).
        let mut resumed = std::mem::replace(&mut self.resume, NIL);
        loop {
            let (mut entry, start) = if resumed != NIL {
                (std::mem::replace(&mut resumed, NIL), self.current)
            } else {
                let Some((level, slot, start)) = self.next_bucket() else {
                    break;
                };
                if start > now {
                    break;
                }
                if work >= budget {
                    stopped = true;
                    break;
                }
                (self.take_bucket(level, slot), start)
            };
            // No other bucket starts at `start` (placements made relative to the
            // wheel's time stay inside the current rotation of their level), so
            // moving time to it keeps every other bucket's start unchanged.
            self.current = start;
            while entry != NIL {
                if work >= budget {
                    // Spent inside the bucket: the rest waits for the next call.
                    links.set_prev(entry, HEAD_TAG | RESUME as u32);
                    self.resume = entry;
                    stopped = true;
                    break;
                }
                work += 1;
                let next = links.next(entry);
                let due = widen(start, links.deadline(entry));
                if due > start {
                    // Cascade: re-place relative to `start`. Lands in a bucket
                    // starting in `(start, due]`.
                    self.link(links, entry, due);
                } else {
                    links.set_next(entry, NIL);
                    links.set_prev(entry, NIL);
                    fired += 1;
                    match expire(links, entry) {
                        None => {}
                        Some(when) if when > now => self.link(links, entry, when),
                        Some(_) => {
                            links.set_next(entry, deferred);
                            deferred = entry;
                        }
                    }
                }
                entry = next;
            }
            if stopped {
                break;
            }
        }
        if !stopped {
            self.current = now;
        }
        let retry = self.current + 1;
        while deferred != NIL {
            let next = links.next(deferred);
            self.link(links, deferred, retry);
            deferred = next;
        }
        (fired, !stopped)
    }

    /// The start tick of the earliest non-empty bucket, or `None` if the wheel is
    /// empty. It is a lower bound for the earliest deadline in the wheel, exact
    /// when that entry sits at level 0, and always after [`current`](Self::current):
    /// advancing to any tick before it fires nothing. While the rest of a bucket
    /// that an [`advance_within`](Self::advance_within) stopped inside waits, it
    /// is `current` itself: that rest is due by then, and an advance to `current`
    /// handles it.
    #[inline]
    pub fn next_expiration(&self) -> Option<u64> {
        if self.resume != NIL {
            // The rest of a bucket already reached: an advance to now handles it.
            return Some(self.current);
        }
        self.next_bucket().map(|(_, _, start)| start)
    }

    /// The earliest non-empty bucket as `(level, slot, start tick)`.
    ///
    /// It is always in the lowest non-empty level. Below the top level, an entry
    /// goes to the level where `when` first differs from the wheel's time, so its
    /// slot lies ahead of the current one, inside the level's current rotation,
    /// and its bucket starts before that rotation ends; every bucket of a higher
    /// level starts at a later multiple of the rotation's length. Time never passes
    /// a bucket's start without processing it, so this stays true as time moves.
    #[inline]
    fn next_bucket(&self) -> Option<(usize, usize, u64)> {
        let level = self.occupied.iter().position(|&bits| bits != 0)?;
        let shift = BITS as usize * level;
        let position = self.current >> shift;
        let here = (position & SLOT_MASK) as u32;
        // Bit 0 of the rotated map is the slot right after the current one.
        let rotated = self.occupied[level].rotate_right(here + 1);
        let ahead = u64::from(rotated.trailing_zeros()) + 1;
        debug_assert!(
            level == LEVELS - 1 || u64::from(here) + ahead < SLOTS as u64,
            "bucket outside its level's current rotation"
        );
        let slot = ((position + ahead) & SLOT_MASK) as usize;
        Some((level, slot, (position + ahead) << shift))
    }

    /// Detaches the whole list of a bucket and returns its head.
    #[inline]
    fn take_bucket(&mut self, level: usize, slot: usize) -> u32 {
        self.occupied[level] &= !(1u64 << slot);
        mem::replace(&mut self.heads[level][slot], NIL)
    }

    /// Pushes entry `i` at the head of the bucket for `when > current`.
    #[inline]
    fn link<L: Links>(&mut self, links: &mut L, i: u32, when: u64) {
        let (level, slot) = bucket_for(self.current, when);
        let head = self.heads[level][slot];
        let tag = HEAD_TAG | (level * SLOTS + slot) as u32;
        links.set_next(i, head);
        links.set_prev(i, tag);
        if head == NIL {
            self.occupied[level] |= 1u64 << slot;
        } else {
            links.set_prev(head, i);
        }
        self.heads[level][slot] = i;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};

    const TOP: usize = LEVELS - 1;

    /// Vec-backed slab. Deadlines are kept as full ticks so tests can say what they
    /// mean; the wheel only ever sees the low 32 bits.
    struct Slab {
        next: Vec<u32>,
        prev: Vec<u32>,
        deadline: Vec<u64>,
    }

    impl Slab {
        fn new(n: usize) -> Self {
            Slab {
                next: vec![NIL; n],
                prev: vec![NIL; n],
                deadline: vec![0; n],
            }
        }
    }

    impl Links for Slab {
        fn next(&self, i: u32) -> u32 {
            self.next[i as usize]
        }
        fn set_next(&mut self, i: u32, v: u32) {
            self.next[i as usize] = v;
        }
        fn prev(&self, i: u32) -> u32 {
            self.prev[i as usize]
        }
        fn set_prev(&mut self, i: u32, v: u32) {
            self.prev[i as usize] = v;
        }
        fn deadline(&self, i: u32) -> u32 {
            self.deadline[i as usize] as u32
        }
    }

    /// Minimal xorshift64 generator, deterministic per seed.
    struct XorShift(u64);

    impl XorShift {
        fn new(seed: u64) -> Self {
            XorShift(seed.max(1))
        }
        fn next(&mut self) -> u64 {
            let mut x = self.0;
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            self.0 = x;
            x
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// Stores the deadline, then schedules.
    fn sched(w: &mut Wheel, s: &mut Slab, i: u32, when: u64) {
        s.deadline[i as usize] = when;
        w.schedule(s, i, when);
    }

    /// Advances, expiring for good, and returns the fired entries in firing order.
    fn fire(w: &mut Wheel, s: &mut Slab, now: u64) -> Vec<u32> {
        let mut out = Vec::new();
        let n = w.advance(s, now, |_, i| {
            out.push(i);
            None
        });
        assert_eq!(n, out.len());
        out
    }

    /// Entries of one bucket, head first.
    fn bucket(w: &Wheel, s: &Slab, level: usize, slot: usize) -> Vec<u32> {
        let mut out = Vec::new();
        let mut e = w.heads[level][slot];
        while e != NIL {
            out.push(e);
            e = s.next(e);
        }
        out
    }

    /// Where entry `i` sits, read from the wheel's own arrays.
    fn locate(w: &Wheel, s: &Slab, i: u32) -> Option<(usize, usize)> {
        (0..LEVELS)
            .flat_map(|l| (0..SLOTS).map(move |sl| (l, sl)))
            .find(|&(l, sl)| bucket(w, s, l, sl).contains(&i))
    }

    /// Start tick of a bucket, by the definition: the first tick after `current`
    /// that is a multiple of the level's slot width and falls in `slot`.
    fn bucket_start(current: u64, level: usize, slot: usize) -> u64 {
        let width = 1u64 << (BITS as usize * level);
        let span = width << BITS;
        let base = current & !(span - 1);
        let start = base + slot as u64 * width;
        if start > current {
            start
        } else {
            start + span
        }
    }

    /// Checks every structural invariant. `due` gives the tick each scheduled entry
    /// must fire at.
    fn check_invariants(w: &Wheel, s: &Slab, due: &BTreeMap<u32, u64>) {
        let mut seen = BTreeSet::new();
        for level in 0..LEVELS {
            for slot in 0..SLOTS {
                let head = w.heads[level][slot];
                let bit = w.occupied[level] >> slot & 1 == 1;
                assert_eq!(bit, head != NIL, "occupied bit of ({level}, {slot})");
                if head == NIL {
                    continue;
                }
                assert_eq!(s.prev(head), HEAD_TAG | (level * SLOTS + slot) as u32);
                let start = bucket_start(w.current, level, slot);
                assert!(start > w.current);
                if level < TOP {
                    // Inside the level's current rotation: ahead of its slot.
                    let here = (w.current >> (BITS as usize * level)) & SLOT_MASK;
                    assert!(slot as u64 > here, "({level}, {slot}) is behind");
                }
                let width = 1u64 << (BITS as usize * level);
                let mut e = head;
                while e != NIL {
                    assert!(seen.insert(e), "entry {e} linked twice");
                    let next = s.next(e);
                    if next != NIL {
                        assert_eq!(s.prev(next), e);
                    }
                    let when = *due.get(&e).expect("unexpected entry in wheel");
                    assert!(start <= when, "entry {e} due {when}, bucket starts {start}");
                    if level < TOP {
                        assert!(when < start + width, "entry {e} too late for its bucket");
                    }
                    e = next;
                }
            }
        }
        assert_eq!(
            seen.len(),
            due.len(),
            "scheduled entries missing from the wheel"
        );
        assert_eq!(w.is_empty(), due.is_empty());
        if let Some(&first) = due.values().min() {
            let next = w.next_expiration().expect("non-empty wheel");
            assert!(w.current < next && next <= first);
        } else {
            assert_eq!(w.next_expiration(), None);
        }
    }

    #[test]
    fn widen_is_exact_within_half_range() {
        assert_eq!(widen(0, 0), 0);
        assert_eq!(widen(1000, 1234), 1234);
        assert_eq!(widen(1000, 900), 900);
        // Across the 2^32 boundary, both ways.
        let wrap = 1u64 << 32;
        assert_eq!(widen(wrap - 1, 0), wrap);
        assert_eq!(widen(wrap - 1, 5), wrap + 5);
        assert_eq!(widen(wrap, u32::MAX), wrap - 1);
        assert_eq!(widen(wrap + 3, u32::MAX - 2), wrap - 3);
        assert_eq!(widen(3 * wrap + 7, 7), 3 * wrap + 7);
        assert_eq!(widen(5 * wrap - 10, 10), 5 * wrap + 10);
        // Edges of the window [reference - 2^31, reference + 2^31).
        let half = 1u64 << 31;
        for reference in [half, wrap - 1, wrap, wrap + 1, 7 * wrap + 12_345, 1 << 50] {
            assert_eq!(widen(reference, reference as u32), reference);
            let hi = reference + half - 1;
            assert_eq!(widen(reference, hi as u32), hi);
            let lo = reference - half;
            assert_eq!(widen(reference, lo as u32), lo);
            // One past the top edge aliases to the bottom edge.
            assert_eq!(widen(reference, (reference + half) as u32), lo);
        }
    }

    #[test]
    fn placement_at_bucket_edges() {
        let cases: [(u64, u64, usize, usize); 17] = [
            (0, 1, 0, 1),
            (0, 63, 0, 63),
            (0, 64, 1, 1),
            (0, 65, 1, 1),
            (0, 127, 1, 1),
            (0, 128, 1, 2),
            (0, 4095, 1, 63),
            (0, 4096, 2, 1),
            (0, (1 << 18) - 1, 2, 63),
            (0, 1 << 18, 3, 1),
            (0, 1 << 24, 4, 1),
            (0, 1 << 30, 5, 1),
            (0, (1 << 36) - 1, 5, 63),
            // Beyond the span: top level, slot of `when`, wrapping round.
            (0, 1 << 36, 5, 0),
            (0, (1 << 36) + (1 << 30), 5, 1),
            (0, (1 << 40) + 3 * (1 << 30) + 5, 5, 3),
            // Relative to an unaligned current: 1000 = 15 * 64 + 40.
            (1000, 1001, 0, 41),
        ];
        for (current, when, level, slot) in cases {
            assert_eq!(
                bucket_for(current, when),
                (level, slot),
                "{current} -> {when}"
            );
            let mut w = Wheel::new(current);
            let mut s = Slab::new(1);
            sched(&mut w, &mut s, 0, when);
            assert_eq!(w.heads[level][slot], 0);
            assert_eq!(w.occupied[level], 1 << slot);
            assert_eq!(s.prev(0), HEAD_TAG | (level * SLOTS + slot) as u32);
            assert_eq!(s.next(0), NIL);
            for other in (0..LEVELS).filter(|&l| l != level) {
                assert_eq!(w.occupied[other], 0);
            }
        }
        // More edges from an unaligned current, and a current past 2^32.
        assert_eq!(bucket_for(1000, 1023), (0, 63));
        assert_eq!(bucket_for(1000, 1024), (1, 16));
        assert_eq!(bucket_for(1000, 1000 + 63), (1, 16));
        assert_eq!(bucket_for(1000, 4095), (1, 63));
        assert_eq!(bucket_for(1000, 4096), (2, 1));
        assert_eq!(bucket_for(63, 64), (1, 1));
        assert_eq!(bucket_for(4095, 4096), (2, 1));
        let c = (1u64 << 32) + 10;
        assert_eq!(bucket_for(c, c + 1), (0, 11));
        assert_eq!(bucket_for(c, c + 54), (1, 1));
        assert_eq!(bucket_for(c, (1 << 32) + (1 << 36)), (5, 4));
        assert_eq!(bucket_for(c, (1 << 32) + (1 << 36) - 1), (5, 3));
    }

    #[test]
    fn fires_exactly_at_its_tick() {
        let deltas = [
            1u64,
            2,
            63,
            64,
            65,
            4095,
            4096,
            4097,
            (1 << 18) - 1,
            1 << 18,
            (1 << 24) + 17,
            (1 << 30) + 3,
            (1 << 31) - 1,
        ];
        let starts = [0u64, 1, 1000, (1 << 32) - 10, (1 << 32) + 77, 1 << 44];
        for current in starts {
            for delta in deltas {
                let when = current + delta;
                let mut w = Wheel::new(current);
                let mut s = Slab::new(1);
                sched(&mut w, &mut s, 0, when);
                assert!(
                    fire(&mut w, &mut s, when - 1).is_empty(),
                    "{current}+{delta}"
                );
                assert_eq!(w.current(), when - 1);
                assert_eq!(w.next_expiration(), Some(when), "{current}+{delta}");
                assert_eq!(fire(&mut w, &mut s, when), vec![0], "{current}+{delta}");
                assert!(w.is_empty());
                assert_eq!((s.next(0), s.prev(0)), (NIL, NIL));
            }
        }
    }

    #[test]
    fn a_deadline_moved_later_in_place_fires_at_the_later_tick() {
        let deltas = [1u64, 63, 64, 4096, (1 << 18) + 5, (1 << 24) + 17, 1 << 30];
        for current in [0u64, 1000, (1 << 32) - 10, 1 << 44] {
            for first in deltas {
                for extra in deltas {
                    let (when, later) = (current + first, current + first + extra);
                    let mut w = Wheel::new(current);
                    let mut s = Slab::new(1);
                    sched(&mut w, &mut s, 0, when);
                    // Moved later without telling the wheel.
                    s.deadline[0] = later;
                    let at = format!("{current}+{first}+{extra}");
                    assert!(fire(&mut w, &mut s, when).is_empty(), "{at}");
                    assert!(fire(&mut w, &mut s, later - 1).is_empty(), "{at}");
                    assert_eq!(fire(&mut w, &mut s, later), vec![0], "{at}");
                    assert!(w.is_empty(), "{at}");
                }
            }
        }
    }

    #[test]
    fn fires_exactly_at_its_tick_when_stepping() {
        // One tick at a time over several level-1 and level-2 boundaries.
        let mut w = Wheel::new(0);
        let mut s = Slab::new(6);
        let ticks = [1u64, 63, 64, 4095, 4096, 4100];
        for (i, &t) in ticks.iter().enumerate() {
            sched(&mut w, &mut s, i as u32, t);
        }
        for now in 1..=4200u64 {
            let got = fire(&mut w, &mut s, now);
            let want: Vec<u32> = (0..6u32).filter(|&i| ticks[i as usize] == now).collect();
            assert_eq!(got, want, "tick {now}");
        }
        assert!(w.is_empty());
    }

    #[test]
    fn cascades_from_every_level() {
        // Level 2: 3 * 4096 + 5 * 64 + 7.
        let mut w = Wheel::new(0);
        let mut s = Slab::new(1);
        let when = 3 * 4096 + 5 * 64 + 7;
        sched(&mut w, &mut s, 0, when);
        assert_eq!(locate(&w, &s, 0), Some((2, 3)));
        assert_eq!(w.next_expiration(), Some(3 * 4096));
        assert!(fire(&mut w, &mut s, 3 * 4096).is_empty());
        assert_eq!(locate(&w, &s, 0), Some((1, 5)));
        assert_eq!(w.next_expiration(), Some(3 * 4096 + 5 * 64));
        assert!(fire(&mut w, &mut s, 3 * 4096 + 5 * 64).is_empty());
        assert_eq!(locate(&w, &s, 0), Some((0, 7)));
        assert_eq!(w.next_expiration(), Some(when));
        assert!(fire(&mut w, &mut s, when - 1).is_empty());
        assert_eq!(fire(&mut w, &mut s, when), vec![0]);

        // Level 1 to level 0 when the offset inside the slot is zero: fires right
        // at the bucket start, with no stop at level 0.
        let mut w = Wheel::new(0);
        sched(&mut w, &mut s, 0, 128);
        assert_eq!(locate(&w, &s, 0), Some((1, 2)));
        assert!(fire(&mut w, &mut s, 127).is_empty());
        assert_eq!(fire(&mut w, &mut s, 128), vec![0]);

        // Levels 3, 4, 5 down to 0, checking the bucket after each cascade.
        let (g3, g4, g5) = (1u64 << 18, 1u64 << 24, 1u64 << 30);
        let when = 2 * g5 + 9 * g4 + 4 * g3 + 11 * 4096 + 13 * 64 + 17;
        let mut w = Wheel::new(0);
        sched(&mut w, &mut s, 0, when);
        let path = [
            (5, 2, 2 * g5),
            (4, 9, 2 * g5 + 9 * g4),
            (3, 4, 2 * g5 + 9 * g4 + 4 * g3),
            (2, 11, 2 * g5 + 9 * g4 + 4 * g3 + 11 * 4096),
            (1, 13, 2 * g5 + 9 * g4 + 4 * g3 + 11 * 4096 + 13 * 64),
            (0, 17, when),
        ];
        for &(level, slot, start) in &path {
            assert_eq!(locate(&w, &s, 0), Some((level, slot)));
            assert_eq!(w.next_expiration(), Some(start));
            assert!(fire(&mut w, &mut s, start - 1).is_empty());
            if level > 0 {
                assert!(fire(&mut w, &mut s, start).is_empty());
            }
        }
        assert_eq!(fire(&mut w, &mut s, when), vec![0]);

        // Beyond the wheel's span: the top-level slot comes round after 2^36 ticks.
        let when = (1u64 << 36) + 100;
        let mut w = Wheel::new(0);
        sched(&mut w, &mut s, 0, when);
        assert_eq!(locate(&w, &s, 0), Some((TOP, 0)));
        assert_eq!(w.next_expiration(), Some(1 << 36));
        assert!(fire(&mut w, &mut s, (1 << 36) - 1).is_empty());
        assert!(fire(&mut w, &mut s, 1 << 36).is_empty());
        assert_eq!(locate(&w, &s, 0), Some((1, 1)));
        assert!(fire(&mut w, &mut s, when - 1).is_empty());
        assert_eq!(fire(&mut w, &mut s, when), vec![0]);

        // Top level again from an unaligned current, in one jump.
        let current = (1u64 << 40) + 12_345;
        let when = current + (1 << 31) - 1;
        let mut w = Wheel::new(current);
        sched(&mut w, &mut s, 0, when);
        assert_eq!(locate(&w, &s, 0).map(|(l, _)| l), Some(TOP));
        assert!(fire(&mut w, &mut s, when - 1).is_empty());
        assert_eq!(fire(&mut w, &mut s, when), vec![0]);
    }

    #[test]
    fn deschedule_head_middle_tail_and_only() {
        let mut w = Wheel::new(0);
        let mut s = Slab::new(4);
        for i in 0..4 {
            sched(&mut w, &mut s, i, 10);
        }
        // Pushed at the head: the list reads 3, 2, 1, 0.
        assert_eq!(bucket(&w, &s, 0, 10), vec![3, 2, 1, 0]);

        // Middle.
        w.deschedule(&mut s, 2);
        assert_eq!(bucket(&w, &s, 0, 10), vec![3, 1, 0]);
        assert_eq!(s.prev(1), 3);
        assert_eq!((s.next(2), s.prev(2)), (NIL, NIL));
        assert!(!Wheel::is_scheduled(&s, 2));

        // Head: the next entry inherits the head tag.
        w.deschedule(&mut s, 3);
        assert_eq!(bucket(&w, &s, 0, 10), vec![1, 0]);
        assert_eq!(s.prev(1), HEAD_TAG | 10);
        assert!(!Wheel::is_scheduled(&s, 3));

        // Tail.
        w.deschedule(&mut s, 0);
        assert_eq!(bucket(&w, &s, 0, 10), vec![1]);
        assert_eq!(s.next(1), NIL);
        assert_eq!(w.occupied[0], 1 << 10);

        // Descheduling an entry that is not in the wheel is a no-op.
        w.deschedule(&mut s, 0);
        assert_eq!(bucket(&w, &s, 0, 10), vec![1]);

        // The only entry: the occupied bit goes.
        assert!(Wheel::is_scheduled(&s, 1));
        w.deschedule(&mut s, 1);
        assert_eq!(w.heads[0][10], NIL);
        assert_eq!(w.occupied, [0; LEVELS]);
        assert!(w.is_empty());
        assert_eq!(w.next_expiration(), None);
        assert!(fire(&mut w, &mut s, 100).is_empty());

        // Only entry of a higher-level bucket, then re-use of the entry.
        sched(&mut w, &mut s, 0, 100 + 5000);
        let (level, slot) = locate(&w, &s, 0).unwrap();
        assert_eq!((level, slot), (2, 1));
        w.deschedule(&mut s, 0);
        assert_eq!(w.occupied[2], 0);
        sched(&mut w, &mut s, 0, 101);
        assert_eq!(fire(&mut w, &mut s, 101), vec![0]);
    }

    #[test]
    fn next_expiration_values() {
        let mut w = Wheel::new(0);
        let mut s = Slab::new(4);
        assert_eq!(w.next_expiration(), None);
        sched(&mut w, &mut s, 0, 70);
        assert_eq!(w.next_expiration(), Some(64));
        sched(&mut w, &mut s, 1, 5);
        assert_eq!(w.next_expiration(), Some(5));
        w.deschedule(&mut s, 1);
        assert_eq!(w.next_expiration(), Some(64));
        w.deschedule(&mut s, 0);
        assert_eq!(w.next_expiration(), None);

        sched(&mut w, &mut s, 2, (1 << 36) + 7);
        assert_eq!(w.next_expiration(), Some(1 << 36));
        sched(&mut w, &mut s, 3, (1 << 30) * 5 + 1);
        assert_eq!(w.next_expiration(), Some((1 << 30) * 5));

        // Unaligned current: 1000 -> 5000 lands at level 2, slot 1.
        let mut w = Wheel::new(1000);
        let mut s = Slab::new(3);
        sched(&mut w, &mut s, 0, 5000);
        assert_eq!(w.next_expiration(), Some(4096));
        sched(&mut w, &mut s, 1, 1050);
        assert_eq!(w.next_expiration(), Some(1024));
        sched(&mut w, &mut s, 2, 1010);
        assert_eq!(w.next_expiration(), Some(1010));
        // Advancing short of the next expiration changes nothing.
        assert!(fire(&mut w, &mut s, 1009).is_empty());
        assert_eq!(w.next_expiration(), Some(1010));
        assert_eq!(fire(&mut w, &mut s, 1010), vec![2]);
        assert_eq!(w.next_expiration(), Some(1024));
        assert!(fire(&mut w, &mut s, 1024).is_empty());
        assert_eq!(w.next_expiration(), Some(1050));
    }

    #[test]
    fn when_at_or_before_current_is_clamped() {
        let mut w = Wheel::new(100);
        let mut s = Slab::new(3);
        sched(&mut w, &mut s, 0, 50);
        sched(&mut w, &mut s, 1, 100);
        sched(&mut w, &mut s, 2, 101);
        assert_eq!(bucket(&w, &s, 0, 101 & 63), vec![2, 1, 0]);
        assert_eq!(w.next_expiration(), Some(101));
        // Time does not move backwards, and not moving fires nothing.
        assert!(fire(&mut w, &mut s, 100).is_empty());
        assert!(fire(&mut w, &mut s, 7).is_empty());
        assert_eq!(w.current(), 100);
        let mut got = fire(&mut w, &mut s, 101);
        got.sort_unstable();
        assert_eq!(got, vec![0, 1, 2]);

        // Clamping across a level boundary: current + 1 = 128 is a level-1 bucket.
        let mut w = Wheel::new(127);
        sched(&mut w, &mut s, 0, 3);
        assert_eq!(locate(&w, &s, 0), Some((1, 2)));
        assert_eq!(w.next_expiration(), Some(128));
        assert_eq!(fire(&mut w, &mut s, 128), vec![0]);

        // And across the u32 wrap, with the stored deadline just before it.
        let c = (1u64 << 32) + 4095;
        let mut w = Wheel::new(c);
        sched(&mut w, &mut s, 0, c - 10);
        assert_eq!(locate(&w, &s, 0), Some((2, 1)));
        assert_eq!(fire(&mut w, &mut s, c + 1), vec![0]);
    }

    #[test]
    fn callback_can_reschedule() {
        let mut w = Wheel::new(0);
        let mut s = Slab::new(2);
        sched(&mut w, &mut s, 0, 10);
        sched(&mut w, &mut s, 1, 12);

        // Entry 0 moves to 50 (after now), entry 1 asks for 15 (at or before now).
        let mut calls = Vec::new();
        let n = w.advance(&mut s, 20, |s, i| {
            calls.push(i);
            let when = if i == 0 { 50 } else { 15 };
            s.deadline[i as usize] = when;
            Some(when)
        });
        assert_eq!(n, 2);
        assert_eq!(calls, vec![0, 1]);
        assert_eq!(w.current(), 20);
        assert!(Wheel::is_scheduled(&s, 0) && Wheel::is_scheduled(&s, 1));
        // Entry 1 was deferred to now + 1.
        assert_eq!(w.next_expiration(), Some(21));
        assert_eq!(fire(&mut w, &mut s, 21), vec![1]);
        assert!(fire(&mut w, &mut s, 49).is_empty());
        assert_eq!(fire(&mut w, &mut s, 50), vec![0]);
        assert!(w.is_empty());

        // A later tick that is still before `now` is deferred too: no second firing
        // within the same advance.
        sched(&mut w, &mut s, 0, 60);
        let mut calls = 0;
        let n = w.advance(&mut s, 10_000, |s, i| {
            calls += 1;
            s.deadline[i as usize] = 5_000;
            Some(5_000)
        });
        assert_eq!((n, calls), (1, 1));
        assert_eq!(w.next_expiration(), Some(10_001));
        assert_eq!(fire(&mut w, &mut s, 10_001), vec![0]);

        // A callback that never lets go fires once per advance, even over a huge
        // jump: no loop.
        let mut w = Wheel::new(0);
        sched(&mut w, &mut s, 0, 1);
        for round in 1..=5u64 {
            let now = round << 33;
            let mut calls = 0;
            let n = w.advance(&mut s, now, |_, _| {
                calls += 1;
                Some(0)
            });
            assert_eq!((n, calls), (1, 1), "round {round}");
            assert_eq!(w.next_expiration(), Some(now + 1));
            // Keep the stored deadline within 2^31 of the wheel's time.
            s.deadline[0] = now;
        }
    }

    #[test]
    fn huge_jump_fires_everything_due_in_order() {
        let base = (1u64 << 32) - 1_000_000;
        let mut rng = XorShift::new(7);
        let n = 3000u32;
        let mut w = Wheel::new(base);
        let mut s = Slab::new(n as usize);
        for i in 0..n {
            let when = base + 1 + rng.below((1 << 31) - 1);
            sched(&mut w, &mut s, i, when);
        }
        // A partial jump first: exactly the entries due by then, in order.
        let mid = base + (1 << 30);
        let got = fire(&mut w, &mut s, mid);
        let want: BTreeSet<u32> = (0..n).filter(|&i| s.deadline[i as usize] <= mid).collect();
        assert_eq!(got.iter().copied().collect::<BTreeSet<_>>(), want);
        assert_eq!(got.len(), want.len());
        assert!(got
            .windows(2)
            .all(|p| s.deadline[p[0] as usize] <= s.deadline[p[1] as usize]));
        // Then everything else.
        let rest = fire(&mut w, &mut s, base + (1 << 31));
        assert_eq!(got.len() + rest.len(), n as usize);
        assert!(rest.iter().all(|&i| s.deadline[i as usize] > mid));
        assert!(rest
            .windows(2)
            .all(|p| s.deadline[p[0] as usize] <= s.deadline[p[1] as usize]));
        assert!(w.is_empty());
        assert_eq!(w.current(), base + (1 << 31));
    }

    #[test]
    fn deadlines_across_the_u32_wrap() {
        let wrap = 1u64 << 32;
        for base in [wrap - 100, 3 * wrap - 5000, (1 << 45) - 64] {
            let ticks = [
                base + 1,
                base + 99,
                base + 100,
                base + 101,
                base + 4096,
                base + 70_000,
                base + (1 << 31) - 1,
            ];
            let mut w = Wheel::new(base);
            let mut s = Slab::new(ticks.len());
            for (i, &t) in ticks.iter().enumerate() {
                sched(&mut w, &mut s, i as u32, t);
            }
            for (i, &t) in ticks.iter().enumerate() {
                assert!(fire(&mut w, &mut s, t - 1).is_empty(), "before {t}");
                assert_eq!(fire(&mut w, &mut s, t), vec![i as u32], "at {t}");
            }
            assert!(w.is_empty());
        }
    }

    /// Random operations against a model: the wheel must fire exactly the entries
    /// due at or before each advance's `now`, in deadline order.
    /// `budget`: advance with [`Wheel::advance_within`] and that budget, calling
    /// again until the wheel reaches the target (entries are then handed back only
    /// with ticks after the target, which a stopped call leaves where they go).
    fn random_against_model(seed: u64, start: u64, budget: Option<usize>) {
        const N: u32 = 512;
        let mut rng = XorShift::new(seed);
        let mut w = Wheel::new(start);
        let mut s = Slab::new(N as usize);
        // Entry -> tick it must fire at.
        let mut due: BTreeMap<u32, u64> = BTreeMap::new();
        let mut fired_total = 0usize;
        // Advances that took more than one call of `advance_within`.
        let mut resumed = 0usize;

        for step in 0..20_000u32 {
            let now = w.current();
            match rng.below(10) {
                0..=4 => {
                    let i = rng.below(u64::from(N)) as u32;
                    if due.contains_key(&i) {
                        w.deschedule(&mut s, i);
                        due.remove(&i);
                    }
                    let when = match rng.below(8) {
                        0 => now - rng.below(1000), // clamped
                        1 => now + 1 + rng.below(64),
                        2 | 3 => now + 1 + rng.below(5000),
                        4 | 5 => now + 1 + rng.below(1 << 20),
                        6 => now + 1 + rng.below(1 << 28),
                        _ => now + 1 + rng.below((1 << 31) - 1),
                    };
                    sched(&mut w, &mut s, i, when);
                    due.insert(i, when.max(now + 1));
                }
                5 => {
                    let i = rng.below(u64::from(N)) as u32;
                    assert_eq!(Wheel::is_scheduled(&s, i), due.contains_key(&i));
                    w.deschedule(&mut s, i);
                    due.remove(&i);
                    assert!(!Wheel::is_scheduled(&s, i));
                }
                _ => {
                    let target = match rng.below(10) {
                        0..=5 => now + rng.below(200),
                        6..=8 => now + rng.below(100_000),
                        _ => now + rng.below(1 << 30),
                    };
                    let reschedule_odds = rng.below(4);
                    let mut fired: Vec<(u32, u64)> = Vec::new();
                    let mut handed_back: BTreeMap<u32, u64> = BTreeMap::new();
                    let mut expire = |s: &mut Slab, i: u32| {
                        let d = s.deadline[i as usize];
                        fired.push((i, d));
                        if d % 4 < reschedule_odds {
                            // Hand it back: sometimes later than `target`,
                            // sometimes at or before it (deferred to target + 1).
                            let when = if d.is_multiple_of(3) || budget.is_some() {
                                target + 1 + (d % 500_000)
                            } else {
                                target - d % 7
                            };
                            s.deadline[i as usize] = when;
                            handed_back.insert(i, when);
                            Some(when)
                        } else {
                            None
                        }
                    };
                    let n = match budget {
                        None => w.advance(&mut s, target, &mut expire),
                        Some(b) => {
                            let mut n = 0;
                            let mut calls = 0;
                            loop {
                                let (f, done) = w.advance_within(&mut s, target, b, &mut expire);
                                n += f;
                                calls += 1;
                                if done {
                                    break;
                                }
                                assert!(w.current() <= target, "stopped past the target");
                                assert!(
                                    calls <= 8 * N as usize * (LEVELS + 2),
                                    "advance_within made no progress"
                                );
                            }
                            if calls > 1 {
                                resumed += 1;
                            }
                            n
                        }
                    };
                    assert_eq!(n, fired.len());
                    let expected: BTreeSet<u32> = due
                        .iter()
                        .filter(|&(_, &t)| t <= target)
                        .map(|(&i, _)| i)
                        .collect();
                    let got: BTreeSet<u32> = fired.iter().map(|&(i, _)| i).collect();
                    assert_eq!(got.len(), fired.len(), "an entry fired twice (step {step})");
                    assert_eq!(got, expected, "step {step}, {now} -> {target}");
                    // Firing order follows the modelled due ticks.
                    assert!(fired.windows(2).all(|p| due[&p[0].0] <= due[&p[1].0]));
                    for &(i, _) in &fired {
                        due.remove(&i);
                    }
                    let settled = target.max(now);
                    for (i, when) in handed_back {
                        due.insert(i, when.max(settled + 1));
                    }
                    assert_eq!(w.current(), settled);
                    fired_total += n;
                }
            }
            if step % 97 == 0 {
                check_invariants(&w, &s, &due);
            }
        }
        check_invariants(&w, &s, &due);
        assert!(fired_total > 1000, "the run fired too little to mean much");
        if budget.is_some() {
            assert!(resumed > 100, "few advances stopped early ({resumed})");
        }

        // Drain: everything left fires at its modelled tick, in order.
        let last = due.values().copied().max().unwrap_or(w.current());
        let mut order = Vec::new();
        w.advance(&mut s, last, |_, i| {
            order.push(i);
            None
        });
        let want: BTreeSet<u32> = due.keys().copied().collect();
        assert_eq!(order.iter().copied().collect::<BTreeSet<_>>(), want);
        assert_eq!(order.len(), want.len());
        assert!(order.windows(2).all(|p| due[&p[0]] <= due[&p[1]]));
        assert!(w.is_empty());
    }

    #[test]
    fn randomized_against_model_from_zero() {
        random_against_model(0x9E37_79B9_7F4A_7C15, 1000, None);
    }

    #[test]
    fn randomized_against_model_across_u32_wrap() {
        random_against_model(12_345, (1 << 32) - 300_000, None);
    }

    #[test]
    fn randomized_against_model_far_ticks() {
        random_against_model(0xDEAD_BEEF, (1 << 44) + 4093, None);
    }

    #[test]
    fn randomized_against_model_within_budgets() {
        for (seed, start, budget) in [
            (7, 1000, 1),
            (0x5EED, 1000, 4),
            (99, (1 << 32) - 300_000, 16),
            (0xFACE, (1 << 44) + 4093, 3),
        ] {
            random_against_model(seed, start, Some(budget));
        }
    }

    /// Advances within `budget` to random targets, changing the wheel between the
    /// calls of one advance (schedules at and before the lagging time, deschedules,
    /// deadlines moved later in place) and handing entries back at ticks before and
    /// after the target: every entry fires once, never before its tick, in order,
    /// and nothing due is left behind a call.
    fn interleaved_within_budget(seed: u64, start: u64, budget: usize) {
        const N: u32 = 400;
        let mut rng = XorShift::new(seed);
        let mut w = Wheel::new(start);
        let mut s = Slab::new(N as usize);
        let mut due: BTreeMap<u32, u64> = BTreeMap::new();
        let (mut fired_total, mut handed_past, mut between) = (0usize, 0usize, 0usize);
        // Schedules entry `i` (not scheduled) at a tick drawn around the wheel's time.
        let place =
            |w: &mut Wheel, s: &mut Slab, due: &mut BTreeMap<u32, u64>, i: u32, when: u64| {
                let now = w.current();
                sched(w, s, i, when);
                due.insert(i, when.max(now + 1));
            };
        for _ in 0..1_500 {
            for _ in 0..rng.below(6) {
                let i = rng.below(u64::from(N)) as u32;
                let now = w.current();
                match due.get(&i).copied() {
                    Some(d) => match rng.below(3) {
                        0 => {
                            w.deschedule(&mut s, i);
                            due.remove(&i);
                        }
                        1 => {
                            // Moved later in place, as a completion moves a lease.
                            let later = d + rng.below(5_000);
                            s.deadline[i as usize] = later;
                            due.insert(i, later);
                        }
                        _ => {}
                    },
                    None => {
                        let when = match rng.below(4) {
                            0 => now.saturating_sub(rng.below(50)),
                            1 => now + 1 + rng.below(70),
                            2 => now + 1 + rng.below(300_000),
                            _ => now + 1 + rng.below(1 << 30),
                        };
                        place(&mut w, &mut s, &mut due, i, when);
                    }
                }
            }
            let target = w.current()
                + match rng.below(4) {
                    0 => 1 + rng.below(10),
                    1 => 1 + rng.below(5_000),
                    2 => 1 + rng.below(400_000),
                    _ => 1 + rng.below(1 << 28),
                };
            let mut calls = 0;
            loop {
                let before = w.current();
                let salt = rng.next();
                let odds = rng.below(3);
                let mut fired: Vec<(u32, u64)> = Vec::new();
                let mut back: Vec<(u32, u64)> = Vec::new();
                let (n, done) = w.advance_within(&mut s, target, budget, |s, i| {
                    let d = due[&i];
                    fired.push((i, d));
                    if (d ^ salt) % 4 >= odds {
                        return None;
                    }
                    let when = if (d ^ salt).is_multiple_of(2) {
                        target.saturating_sub((d ^ salt) % 100)
                    } else {
                        target + 1 + d % 100_000
                    };
                    s.deadline[i as usize] = when;
                    back.push((i, when));
                    Some(when)
                });
                assert_eq!(n, fired.len());
                let now = w.current();
                calls += 1;
                assert!(now >= before && calls < 1_000_000, "calls made no progress");
                if done {
                    assert_eq!(now, target);
                } else {
                    assert!(now <= target);
                }
                for (k, &(i, d)) in fired.iter().enumerate() {
                    // Never before its tick (the rest of a bucket stopped inside
                    // fires in a later call, after the wheel's time passed it).
                    assert!(d <= now, "{i} due at {d} fired by a call ending at {now}");
                    assert!(k == 0 || fired[k - 1].1 <= d, "fired out of order");
                    due.remove(&i);
                }
                fired_total += fired.len();
                for (i, when) in back {
                    handed_past += usize::from(when <= target);
                    due.insert(i, when.max(now + 1));
                }
                if done {
                    assert!(
                        due.values().all(|&d| d > now),
                        "a due entry was left behind"
                    );
                    break;
                }
                for _ in 0..rng.below(3) {
                    between += 1;
                    let i = rng.below(u64::from(N)) as u32;
                    if due.remove(&i).is_some() {
                        w.deschedule(&mut s, i);
                    } else {
                        let now = w.current();
                        let when = match rng.below(3) {
                            0 => now.saturating_sub(3),
                            1 => now + 1 + rng.below(200),
                            _ => target + rng.below(1 << 20),
                        };
                        place(&mut w, &mut s, &mut due, i, when);
                    }
                }
            }
        }
        // (`check_invariants` does not apply: deadlines moved later in place sit in
        // buckets earlier than their ticks until those come round.)
        let last = due.values().copied().max().unwrap_or(w.current());
        let mut left = BTreeSet::new();
        while !w
            .advance_within(&mut s, last, budget, |_, i| {
                assert!(left.insert(i), "{i} fired twice");
                None
            })
            .1
        {}
        assert_eq!(left, due.keys().copied().collect::<BTreeSet<_>>());
        assert!(w.is_empty());
        assert!(fired_total > 2_000, "fired {fired_total}");
        assert!(handed_past > 100, "handed back at past ticks {handed_past}");
        assert!(between > 100, "changes between calls {between}");
    }

    #[test]
    fn advances_within_budgets_with_changes_between_their_calls() {
        for (seed, start, budget) in [
            (1, 1000, 1),
            (2, (1 << 32) - 100_000, 2),
            (3, (1 << 44) + 7, 4),
            (4, 5, 7),
            (5, 1000, 0),
        ] {
            interleaved_within_budget(seed, start, budget);
        }
    }

    /// [`Wheel::advance_within`], every fired entry pushed onto `fired` and freed.
    fn fire_within(
        w: &mut Wheel,
        s: &mut Slab,
        now: u64,
        budget: usize,
        fired: &mut Vec<u32>,
    ) -> (usize, bool) {
        w.advance_within(s, now, budget, |_, i| {
            fired.push(i);
            None
        })
    }

    #[test]
    fn an_advance_within_a_budget_stops_where_it_is_spent() {
        let mut w = Wheel::new(0);
        let mut s = Slab::new(16);
        // Ticks 1..=6 one entry each, tick 7 three entries, tick 9 one, all at level 0.
        for i in 0..6u32 {
            sched(&mut w, &mut s, i, u64::from(i) + 1);
        }
        for i in 6..9u32 {
            sched(&mut w, &mut s, i, 7);
        }
        sched(&mut w, &mut s, 9, 9);
        let mut fired = Vec::new();
        let (n, done) = fire_within(&mut w, &mut s, 20, 2, &mut fired);
        assert_eq!((n, done), (2, false));
        assert_eq!(fired, [0, 1]);
        assert_eq!(w.current(), 2, "stopped at the last bucket's start");
        // Stopped inside tick 7's bucket: two of its three entries wait.
        let (n, done) = fire_within(&mut w, &mut s, 20, 5, &mut fired);
        assert_eq!((n, done), (5, false));
        assert_eq!(w.current(), 7);
        assert_eq!(w.next_expiration(), Some(7), "the rest is due now");
        assert!(!w.is_empty());
        let (n, done) = fire_within(&mut w, &mut s, 20, 5, &mut fired);
        assert_eq!((n, done), (3, true));
        assert_eq!(w.current(), 20);
        fired.sort_unstable();
        assert_eq!(fired, (0..10).collect::<Vec<_>>());
        assert!(w.is_empty());
        // A call that has nothing to do is done at once.
        assert_eq!(w.advance_within(&mut s, 20, 1, |_, _| None), (0, true));
    }

    /// A bucket stopped inside keeps its rest for the next call, which handles it
    /// before any later bucket; entries of the rest can be descheduled meanwhile
    /// (its head and one inside it), including the rest of the bucket that starts
    /// at the target.
    #[test]
    fn the_rest_of_a_bucket_stopped_inside_comes_first_and_can_be_descheduled() {
        let mut w = Wheel::new(0);
        let mut s = Slab::new(64);
        // Twenty entries due at tick 5, in one level-0 bucket; one at tick 6.
        for i in 0..20u32 {
            sched(&mut w, &mut s, i, 5);
        }
        sched(&mut w, &mut s, 20, 6);
        let mut fired = Vec::new();
        assert_eq!(fire_within(&mut w, &mut s, 10, 4, &mut fired), (4, false));
        assert_eq!(w.current(), 5);
        // The rest (16 entries) waits; take out its head and its third entry.
        let head = w.resume;
        assert!(head != NIL && !fired.contains(&head));
        let other = s.next(s.next(head));
        w.deschedule(&mut s, head);
        w.deschedule(&mut s, other);
        assert!(!Wheel::is_scheduled(&s, head) && !Wheel::is_scheduled(&s, other));
        // A schedule meanwhile, at the tick after the stop: after the rest.
        sched(&mut w, &mut s, 21, 6);
        let mut calls = 1;
        loop {
            let before = fired.len();
            let (n, done) = fire_within(&mut w, &mut s, 10, 4, &mut fired);
            assert_eq!(n, fired.len() - before);
            assert!(n <= 4, "{n} entries in one call of budget 4");
            calls += 1;
            if done {
                break;
            }
        }
        assert!(calls >= 5, "{calls} calls");
        // The rest of tick 5 fired before the entries of tick 6.
        let six = fired.iter().position(|&i| i == 20 || i == 21).unwrap();
        assert!(
            fired[six..].iter().all(|&i| i == 20 || i == 21),
            "{fired:?}"
        );
        let mut all = fired.clone();
        all.sort_unstable();
        let want: Vec<u32> = (0..22).filter(|&i| i != head && i != other).collect();
        assert_eq!(all, want);
        assert!(w.is_empty());
        // The bucket that starts at the target is stopped inside too; calls at the
        // wheel's own time then go on with its rest until it is done.
        for i in 0..20u32 {
            sched(&mut w, &mut s, i, 15);
        }
        fired.clear();
        assert_eq!(fire_within(&mut w, &mut s, 15, 4, &mut fired), (4, false));
        assert_eq!(w.current(), 15);
        let mut calls = 1;
        while !fire_within(&mut w, &mut s, 15, 4, &mut fired).1 {
            calls += 1;
        }
        assert_eq!((fired.len(), calls), (20, 4));
        assert!(w.is_empty());
        // Before the wheel's time: nothing.
        assert_eq!(fire_within(&mut w, &mut s, 14, 4, &mut fired), (0, true));
    }

    #[test]
    fn an_entry_handed_back_at_a_past_tick_by_a_stopped_advance_fires_in_the_next_call() {
        let mut w = Wheel::new(0);
        let mut s = Slab::new(4);
        sched(&mut w, &mut s, 0, 1);
        sched(&mut w, &mut s, 1, 5);
        let mut handed = false;
        let (n, done) = w.advance_within(&mut s, 10, 1, |s, i| {
            assert_eq!(i, 0);
            handed = true;
            s.deadline[0] = 0;
            Some(0)
        });
        assert!(handed);
        assert_eq!((n, done), (1, false));
        assert_eq!(w.current(), 1);
        assert_eq!(w.next_expiration(), Some(2), "scheduled after the stop");
        let mut fired = Vec::new();
        let (n, done) = fire_within(&mut w, &mut s, 10, 10, &mut fired);
        assert_eq!((n, done), (2, true));
        assert_eq!(fired, [0, 1]);
        assert!(w.is_empty());
    }
}
