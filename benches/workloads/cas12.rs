//! The `cas12` reference peer: the `cas` model's lanes (entries, timing wheel and
//! capacity per thread: `workloads/cas.rs`) under a table with idem's compact
//! buckets and no shard-wide lock. Beside `cas` (16-byte buckets at up to 0.8 load: a
//! 32 MiB table at 1 M keys) it says whether a table of idem's density (one 64-byte
//! line a bucket, 12 one-byte tags and 12 `u32` slots, at up to 7/8 load) keeps
//! idem's memory and single-thread speed while its two threads share no lock line.
//!
//! Per key:
//! - the key's seeded xxh3-128 fingerprint, as every peer's; its low 64 bits `h` give
//!   the home bucket (low bits), the tag (bits 56..63, 0 made 1: 0 marks a free
//!   slot) and the check bits (from bits 40..55), as idem's index takes them;
//! - one array of 64-byte, 64-aligned buckets sized for the namespace's `max_keys`
//!   (N) at build: the next power of two at or above N / (12 * 7/8), its pages touched
//!   at build. A bucket is two header words and 12 slots. The first word holds tags
//!   0..7; the second tags 8..11 (bytes 0..3), the overflow count (byte 4: entries
//!   placed past the bucket because it was full on their way, saturating at 255) and
//!   the bucket's lock bit (bit 40). A slot is a locator: the entry's index in its
//!   lane's slab in the low bits (as many as N needs), the lane above it (6 bits),
//!   and in the bits left (6 at N = 1 M, 2 at 10 M) check bits of `h`;
//! - a claim reads the clock (as `cas`), then looks its key up without a lock: from
//!   the home bucket on, the tag words (Acquire), for each tag that matches the slot,
//!   and if its check bits agree, the entry it locates (all 96 fingerprint bits
//!   compared); the next bucket while the overflow count is above 0. Found, it
//!   answers from the entry as `cas` does (duplicate, in progress, expired). A
//!   duplicate (W2) so writes nothing;
//! - not found, it takes its home bucket's lock bit (`lock bts`, Acquire; spinning on
//!   loads while it is held), looks the key up again under it, and if still absent
//!   takes capacity (`Full` if none), writes the entry into its own lane's slab, then
//!   places it: in the first bucket from home with a free tag, raising the overflow
//!   count (compare-and-swap on the second word) of every full bucket it passes. In
//!   the home bucket it writes under its lock; in any later bucket it takes that
//!   bucket's lock as well (so the claim holds two at most), unless it sees the bucket
//!   full, which it checks before every try, so that it never waits on a full
//!   bucket's lock. The slot is stored first, then the tag word (Release, a plain
//!   store: while a bucket has a free tag only its lock holder writes its words), then
//!   the locks are cleared (`lock and`, Release: a full bucket's count may be raised
//!   meanwhile), and last the entry is linked in its lane's wheel (as `cas`);
//! - completing is `cas`'s: the entry's meta by compare-and-swap, the entry moved in
//!   its lane's wheel.
//!
//! Why it is exactly-once: every claim of a key serialises on the key's home bucket
//! lock, and every entry of a key homed there was placed by a holder of that lock, so
//! the look-up under it sees all of them. Why two locks cannot deadlock: a claim waits
//! for a second lock only while holding its home lock, whose bucket it passed because
//! it was full; a bucket full stays full (the model removes nothing), and a claim
//! waiting for a lock gives up as soon as it sees the bucket full. A lock-free reader
//! may miss a key whose claim is placing it (it then takes the home lock and finds
//! it there).
//!
//! What two threads share: the bucket lines (each fresh claim writes its home
//! bucket's line twice, for the lock, and once more for the tag, and one more line
//! when its home is full; lines are met only by chance), the capacity pool, the
//! latest-time word and the lanes' chunk tables, as `cas`'s threads do.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::cas::{lane_id, model_peer, Claim, Entry, Guard, Lanes, LANES};
use super::{fp, Key, Peer};

/// Slots per bucket.
const SLOTS: usize = 12;
/// The table's largest load at N keys: 7/8 of its slots.
const LOAD_NUM: usize = 7;
const LOAD_DEN: usize = 8;
/// Bits of a locator that name the lane.
const LANE_BITS: u32 = 6;
const _: () = assert!(LANES <= 1 << LANE_BITS);
/// The most check bits a slot keeps (those of `h` 40..55).
const MAX_CHECKS: u32 = 16;
/// Where the overflow count is in a bucket's second word.
const OVER_SHIFT: u32 = 32;
/// The lock bit of a bucket's second word.
const LOCK: u64 = 1 << 40;
/// An overflow count that has saturated.
const STICKY: u8 = u8::MAX;
/// Byte patterns of the tag words.
const ONES: u64 = 0x0101_0101_0101_0101;
const LOW7: u64 = 0x7F7F_7F7F_7F7F_7F7F;
/// The tag bytes' top bits in the second word.
const HI_TAGS: u64 = 0x8080_8080;

/// A bucket: one cache line.
#[repr(C, align(64))]
#[derive(Default)]
struct Bucket {
    /// Tags 0..7, a byte each (0: free).
    lo: AtomicU64,
    /// Tags 8..11 (bytes 0..3), the overflow count (byte 4), the lock (bit 40).
    hi: AtomicU64,
    /// Locators: check bits, lane, entry index (see [`Cas12::locator`]).
    slots: [AtomicU32; SLOTS],
}

const _: () = assert!(std::mem::size_of::<Bucket>() == 64);
const _: () = assert!(std::mem::align_of::<Bucket>() == 64);

/// The tag of `h`: its top byte, never 0.
#[inline]
fn tag(h: u64) -> u8 {
    ((h >> 56) as u8).max(1)
}

/// The top bit of every byte of `x` that is 0 (exact: no borrow runs between bytes).
#[inline]
fn zero_bytes(x: u64) -> u64 {
    !(((x & LOW7) + LOW7) | x | LOW7)
}

/// One bit a byte (bit `k` for byte `k`) from the bytes' top bits (the partial
/// products never overlap).
#[inline]
fn gather(x: u64) -> u32 {
    (((x >> 7).wrapping_mul(0x0102_0408_1020_4080)) >> 56) as u32
}

/// The slots of a bucket with tag words `lo`, `hi` whose tag is `t` (bit `k` for slot
/// `k`); with `t` 0, its free slots.
#[inline]
fn matches(lo: u64, hi: u64, t: u8) -> u32 {
    let pattern = ONES * u64::from(t);
    gather(zero_bytes(lo ^ pattern)) | gather(zero_bytes(hi ^ pattern) & HI_TAGS) << 8
}

/// The overflow count in a bucket's second word.
#[inline]
fn over(hi: u64) -> u8 {
    (hi >> OVER_SHIFT) as u8
}

/// Takes bucket `b`'s lock (test and test-and-set).
#[inline]
fn lock(b: &Bucket) {
    while b.hi.fetch_or(LOCK, Ordering::Acquire) & LOCK != 0 {
        while b.hi.load(Ordering::Relaxed) & LOCK != 0 {
            std::hint::spin_loop();
        }
    }
}

/// Takes bucket `b`'s lock unless the bucket is, or becomes while the lock is held
/// by another claim, full: then false, without the lock.
#[inline]
fn lock_unless_full(b: &Bucket) -> bool {
    loop {
        let hi = b.hi.load(Ordering::Relaxed);
        if matches(b.lo.load(Ordering::Relaxed), hi, 0) == 0 {
            return false;
        }
        if hi & LOCK == 0 && b.hi.fetch_or(LOCK, Ordering::Acquire) & LOCK == 0 {
            return true;
        }
        std::hint::spin_loop();
    }
}

/// Clears bucket `b`'s lock: by a read-modify-write, as another claim may raise the
/// count of a full bucket meanwhile.
#[inline]
fn unlock(b: &Bucket) {
    b.hi.fetch_and(!LOCK, Ordering::Release);
}

/// Raises full bucket `b`'s overflow count (saturating).
#[inline]
fn raise(b: &Bucket) {
    let mut hi = b.hi.load(Ordering::Relaxed);
    while over(hi) != STICKY {
        // Relaxed: a claim of a key homed before `b` raises it under that home's
        // lock, whose release publishes it to the home's next look-up under lock.
        match b.hi.compare_exchange_weak(
            hi,
            hi + (1 << OVER_SHIFT),
            Ordering::Relaxed,
            Ordering::Relaxed,
        ) {
            Ok(_) => return,
            Err(h) => hi = h,
        }
    }
}

/// The model: see the module's documentation.
pub(crate) struct Cas12 {
    buckets: Box<[Bucket]>,
    mask: usize,
    /// A locator's low bits that hold the entry's index.
    index_bits: u32,
    /// A locator's high bits that hold check bits of `h`.
    check_mask: u32,
    lanes: Lanes,
}

impl Cas12 {
    /// A table for at most `n` keys.
    pub(crate) fn new(n: usize) -> Cas12 {
        Cas12::with(Lanes::new(n.max(1)), n)
    }

    /// A table for at most `n` keys over `lanes` (made for as many).
    pub(crate) fn with(lanes: Lanes, n: usize) -> Cas12 {
        let n = n.max(1);
        let count = (n * LOAD_DEN)
            .div_ceil(SLOTS * LOAD_NUM)
            .next_power_of_two();
        // An entry's index is below n (a lane holds at most the pool's n).
        let index_bits = usize::BITS - (n - 1).leading_zeros();
        assert!(
            index_bits + LANE_BITS <= 32,
            "cas12: {n} keys do not fit a locator"
        );
        let checks = (32 - LANE_BITS - index_bits).min(MAX_CHECKS);
        // Written through at build: the fill takes no page fault on the table.
        let buckets: Box<[Bucket]> = (0..count).map(|_| Bucket::default()).collect();
        Cas12 {
            buckets,
            mask: count - 1,
            index_bits,
            // Shifted in 64 bits, so that 0 checks is a shift by 32: no bits.
            check_mask: (u64::MAX << (32 - checks)) as u32,
            lanes,
        }
    }

    /// The check bits of `h` in a locator.
    #[inline]
    fn check(&self, h: u64) -> u32 {
        (h >> 24) as u32 & self.check_mask
    }

    /// The locator of entry `index` of lane `lane` for a key of hash `h`.
    #[inline]
    fn locator(&self, h: u64, lane: usize, index: u32) -> u32 {
        self.check(h) | (lane as u32) << self.index_bits | index
    }

    /// The entry locator `s` names.
    #[inline]
    fn located(&self, s: u32) -> &Entry {
        let index = s & ((1u64 << self.index_bits) - 1) as u32;
        let lane = (s >> self.index_bits) as usize & (LANES - 1);
        self.lanes.entry(lane, index)
    }

    /// The home bucket of hash `h`.
    #[inline]
    fn home(&self, h: u64) -> usize {
        h as usize & self.mask
    }

    /// `f`'s entry, as published: from the home bucket on while buckets overflow.
    /// Without a lock it may miss an entry being placed; under the key's home lock it
    /// finds every entry of the key.
    #[inline]
    fn find(&self, f: u128) -> Option<&Entry> {
        let h = f as u64;
        let (t, check) = (tag(h), self.check(h));
        let mut i = self.home(h);
        loop {
            let b = &self.buckets[i];
            // Acquire: a tag is stored after its slot and entry (Release).
            let lo = b.lo.load(Ordering::Acquire);
            let hi = b.hi.load(Ordering::Acquire);
            let mut m = matches(lo, hi, t);
            while m != 0 {
                let s = b.slots[m.trailing_zeros() as usize].load(Ordering::Relaxed);
                m &= m - 1;
                if s & self.check_mask == check {
                    let e = self.located(s);
                    if e.holds(f) {
                        return Some(e);
                    }
                }
            }
            // A bucket that overflowed is full, and full for good: some bucket has
            // no overflow, so the walk ends.
            if over(hi) == 0 {
                return None;
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Claims `key`.
    #[inline]
    pub(crate) fn claim(&self, key: &Key) -> Claim {
        self.claim_with(key, |_, _| (), |lanes, g, ()| lanes.settle(g))
    }

    /// Claims `key`; a key the look-up without a lock missed calls `enter` with the
    /// lanes and the caller's lane before it takes the home bucket's lock, and what
    /// `enter` returns is held until the claim returns, after `settle` linked a new
    /// entry (`cas12m` takes its lane lock there; `cas12` nothing).
    #[inline(always)]
    pub(crate) fn claim_with<H>(
        &self,
        key: &Key,
        enter: impl FnOnce(&Lanes, usize) -> H,
        settle: impl FnOnce(&Lanes, &Guard, &H),
    ) -> Claim {
        let f = fp(key);
        let now = self.lanes.now();
        if let Some(e) = self.find(f) {
            return Lanes::answer(e, now);
        }
        let lane = lane_id();
        let held = enter(&self.lanes, lane);
        let h = f as u64;
        let home = &self.buckets[self.home(h)];
        lock(home);
        let c = match self.find(f) {
            Some(e) => Lanes::answer(e, now),
            None => self.insert(lane, f, now),
        };
        unlock(home);
        if let Claim::Acquired(g) = &c {
            settle(&self.lanes, g, &held);
        }
        c
    }

    /// The lanes under the table.
    #[inline]
    pub(crate) fn lanes(&self) -> &Lanes {
        &self.lanes
    }

    /// A new claim of `f`, under its home bucket's lock: its entry written in lane
    /// `lane` (the caller's), then placed.
    #[inline]
    fn insert(&self, lane: usize, f: u128, now: u32) -> Claim {
        let Some(index) = self.lanes.take_entry(lane) else {
            return Claim::Full;
        };
        let g = self.lanes.write(lane, index, f, now);
        let h = f as u64;
        self.place(h, self.locator(h, lane, index));
        Claim::Acquired(g)
    }

    /// Places locator `s` of hash `h` in the first bucket from its home with a free
    /// slot, raising the count of every full bucket passed. Under the home's lock.
    #[inline]
    fn place(&self, h: u64, s: u32) {
        let t = u64::from(tag(h));
        let home = self.home(h);
        let mut i = home;
        loop {
            let b = &self.buckets[i];
            let away = i != home;
            if !away || lock_unless_full(b) {
                // Under `b`'s lock: only its holder writes its tags and slots, and no
                // count is raised while it has a free slot.
                let lo = b.lo.load(Ordering::Relaxed);
                let hi = b.hi.load(Ordering::Relaxed);
                let free = matches(lo, hi, 0);
                if free != 0 {
                    let k = free.trailing_zeros();
                    b.slots[k as usize].store(s, Ordering::Relaxed);
                    if k < 8 {
                        b.lo.store(lo | t << (8 * k), Ordering::Release);
                    } else {
                        b.hi.store(hi | t << (8 * (k - 8)), Ordering::Release);
                    }
                    if away {
                        unlock(b);
                    }
                    return;
                }
                if away {
                    unlock(b);
                }
            }
            // Full, for good: the model removes nothing.
            raise(b);
            i = (i + 1) & self.mask;
        }
    }

    /// Completes a claim, on the thread that made it. False if its lease was lost.
    #[inline]
    pub(crate) fn complete(&self, g: Guard) -> bool {
        self.lanes.complete(g)
    }

    /// Entries resident, over all lanes (exact once the claiming threads are joined).
    #[allow(dead_code)] // read by tests/harness_cas.rs
    pub(crate) fn resident(&self) -> u64 {
        self.lanes.resident()
    }

    /// The home bucket of `key`, and the table's bucket count.
    #[allow(dead_code)] // read by tests/harness_cas.rs
    pub(crate) fn home_of(&self, key: &Key) -> (usize, usize) {
        (self.home(fp(key) as u64), self.buckets.len())
    }

    /// Bucket `i`'s overflow count.
    #[allow(dead_code)] // read by tests/harness_cas.rs
    pub(crate) fn over(&self, i: usize) -> u8 {
        over(self.buckets[i].hi.load(Ordering::Relaxed))
    }
}

model_peer!(Cas12, |m| Some(
    (std::mem::size_of_val(&*m.buckets) + m.lanes.bytes()) as u64
));
