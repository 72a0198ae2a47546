//! The `cas` reference peer: a model of a hot tier whose threads share one table but
//! no lock. A claim takes its key's bucket with one compare-and-swap, and everything
//! else it writes is its thread's own: entries in the thread's slab, linked in the
//! thread's timing wheel. Beside `idem` (threads share every shard's lock line and the
//! shard's other lines) and `idem-aff` (each thread owns whole shards), its two threads
//! over one say what a lock-free table of this shape would scale to on this machine.
//!
//! Per key, as a hot tier would do it:
//! - the key's seeded xxh3-128 fingerprint, as every peer's;
//! - one table of 16-byte buckets sized for the namespace's `max_keys` (N) at build,
//!   the next power of two at or above N / 0.8, its pages touched at build; linear
//!   probing from the fingerprint's low bits. A bucket is a tag (the fingerprint's
//!   low 64 bits, never 0; 0 is empty) and a locator (0 until published, then the
//!   owner thread's lane and the entry's index in that lane's slab);
//! - a fresh claim reads the clock once (`CoarseClock` through `idem::Clock`, kept
//!   monotonic by a shared latest-time word as a namespace keeps it), takes an empty
//!   bucket by CAS of its tag from 0 (AcqRel), takes an entry from its own lane's slab
//!   (chunks of 512 28-byte entries, made by the owner, reachable from other threads
//!   through the lane's chunk table), writes it (fingerprint bits 0..95, the lease
//!   deadline, state in progress with a token of the lane's), publishes the locator
//!   (Release) and links the entry into its lane's wheel (256 slots of u32 heads,
//!   doubly linked through the entries) at its deadline's slot. Capacity comes from a
//!   pool of N shared by the lanes, taken 64 at a time;
//! - a claim that finds its tag waits for the locator, reads the entry, and answers
//!   duplicate (done, not expired) or in progress;
//! - completing reads the clock, turns the entry's meta from (in progress, token) to
//!   (done, token) by CAS, sets its deadline to the TTL's and moves it in its lane's
//!   wheel from the lease deadline's slot to the TTL deadline's;
//! - a duplicate probes to its tag, loads the locator and reads the entry's meta and
//!   deadline.
//!
//! What two threads share: the table's bucket lines (each claim writes one, at
//! random, so the two threads meet on a line only by chance), the capacity pool (one
//! RMW a 64 claims; the lanes' reserves only once the pool is empty), the latest-time word (written about once a millisecond a thread)
//! and the read-only lines of a lane's chunk table. A lane's counters, wheel heads and
//! entries are written by its owner only. Only the owner may complete its entries
//! (the harness completes each key on the thread that claimed it); a completion from
//! another thread would need a hand-off the model does not price.
//!
//! Threads take a lane on their first fresh claim (one of [`LANES`], freed when the
//! thread exits); threads that only read never take one.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use idem::{Clock, CoarseClock};

use super::{fp, Key, Peer, TTL};

/// Lanes, at most this many threads claiming at once.
pub(crate) const LANES: usize = 64;
/// Entries in a slab chunk.
const CHUNK: usize = 512;
/// Slots of a lane's wheel.
const SLOTS: usize = 256;
/// Capacity a lane takes from the pool at once.
const BLOCK: usize = 64;
/// No entry (a wheel slot's empty head, a list's end).
const NIL: u32 = u32::MAX;
/// The table's largest load at N keys.
const MAX_LOAD: f64 = 0.8;
/// idem's default lease.
const LEASE: Duration = Duration::from_secs(30);

/// Entry states, in the meta word's low 2 bits; the token above them.
const IN_PROGRESS: u32 = 1;
const DONE: u32 = 2;
/// A lease that ran out before its claim completed, as a maintenance pass marks it
/// (`cas12m` only; the other models have no pass).
const LAPSED: u32 = 3;
const STATE_MASK: u32 = 3;
/// The token's bits, above the state and three flags (as in idem's entry).
const TOKEN_SHIFT: u32 = 5;
const TOKEN_MASK: u32 = (1 << 27) - 1;

/// A bucket of the table: 16 bytes, four to a cache line.
#[repr(C, align(16))]
#[derive(Default)]
struct Bucket {
    /// The fingerprint's low 64 bits (never 0), or 0 when empty.
    tag: AtomicU64,
    /// 0 until the claim that took the bucket publishes its entry; then
    /// `(lane + 1) << 32 | index`.
    loc: AtomicU64,
}

/// A slab entry, 28 bytes, as idem's: fingerprint bits 0..95 (the low ones find the
/// bucket again at expiry), deadline (ticks), meta (state, token), wheel links.
#[derive(Default)]
pub(crate) struct Entry {
    fp: [AtomicU32; 3],
    deadline: AtomicU32,
    meta: AtomicU32,
    prev: AtomicU32,
    next: AtomicU32,
}

const _: () = assert!(std::mem::size_of::<Entry>() == 28);

impl Entry {
    /// The entry holds fingerprint `f`'s bits 0..95.
    #[inline]
    pub(crate) fn holds(&self, f: u128) -> bool {
        self.fp[0].load(Ordering::Relaxed) == f as u32
            && self.fp[1].load(Ordering::Relaxed) == (f >> 32) as u32
            && self.fp[2].load(Ordering::Relaxed) == (f >> 64) as u32
    }
}

type Chunk = Box<[Entry; CHUNK]>;

/// What other threads read of a lane: its chunk table, made by the owner on its
/// first claim (room for every chunk it could ever need: the pool's N entries), each
/// chunk made by the owner when it first needs it.
#[repr(align(128))]
#[derive(Default)]
struct LaneShared {
    chunks: OnceLock<Box<[OnceLock<Chunk>]>>,
}

/// What only the lane's owner reads and writes (atomics with relaxed loads and
/// stores: plain moves, no read-modify-write), but for the lock and the cursor, and,
/// in `cas12m` (`workloads/cas12m.rs`), its maintenance pass, which takes the lock.
/// The lock first, on the line of the owner's counters (`repr(C)`).
#[repr(C, align(128))]
struct LaneOwn {
    /// `cas12m`'s lane lock: its owner holds it over a fresh claim's lane writes,
    /// its maintenance pass over its advance of the wheel. The other models leave it.
    lock: parking_lot::Mutex<()>,
    /// The tick the lane's wheel was last advanced to (`cas12m`'s pass; under `lock`).
    cursor: AtomicU32,
    /// Entries taken from this lane's slab.
    used: AtomicU32,
    /// Capacity taken from the pool and not used yet. The one field another lane
    /// writes (taking it whole when the pool is empty), so the owner takes a unit
    /// by compare-and-swap.
    budget: AtomicU32,
    /// The next claim's token.
    token: AtomicU32,
    /// Entries resident.
    resident: AtomicU64,
    /// Wheel heads, one entry index a slot (or [`NIL`]).
    heads: [AtomicU32; SLOTS],
    /// `cas12m`: a slot's earliest deadline, no later than any of its entries' (a
    /// lower bound: a lazy completion moves an entry's deadline later in place), so
    /// that a pass walks a slot only when something in it may be due. Not kept by the
    /// other models.
    due: [AtomicU32; SLOTS],
}

impl Default for LaneOwn {
    fn default() -> Self {
        LaneOwn {
            lock: parking_lot::Mutex::new(()),
            cursor: AtomicU32::new(0),
            used: AtomicU32::new(0),
            budget: AtomicU32::new(0),
            token: AtomicU32::new(0),
            resident: AtomicU64::new(0),
            heads: std::array::from_fn(|_| AtomicU32::new(NIL)),
            due: std::array::from_fn(|_| AtomicU32::new(0)),
        }
    }
}

#[derive(Default)]
struct Lane {
    shared: LaneShared,
    own: LaneOwn,
}

/// Lanes held by live threads, process-wide (lane `i` of every table is its holder's).
static TAKEN: [AtomicBool; LANES] = [const { AtomicBool::new(false) }; LANES];

/// A thread's lane; given back when the thread exits.
struct LaneId(usize);

impl LaneId {
    fn take() -> LaneId {
        for (i, t) in TAKEN.iter().enumerate() {
            // Acquire: the lane's owner-only state as its last holder left it.
            if t.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return LaneId(i);
            }
        }
        panic!("cas: more than {LANES} threads claiming at once");
    }
}

impl Drop for LaneId {
    fn drop(&mut self) {
        TAKEN[self.0].store(false, Ordering::Release);
    }
}

thread_local! {
    static LANE: LaneId = LaneId::take();
    /// The latest time this thread saw, so that it writes the shared word at most
    /// once a step of the clock (as a namespace does).
    static SEEN_MS: Cell<u64> = const { Cell::new(0) };
}

/// The calling thread's lane, taken on first use.
#[inline]
pub(crate) fn lane_id() -> usize {
    LANE.with(|l| l.0)
}

/// The shared latest-time word, on a line of its own.
#[repr(align(128))]
struct Latest(AtomicU64);

/// A capacity pool on a line of its own.
#[repr(align(128))]
struct Pool(AtomicUsize);

/// A claim's answer.
pub(crate) enum Claim {
    /// Taken: complete it with [`Cas::complete`] on the same thread.
    Acquired(Guard),
    Duplicate,
    InProgress,
    /// Done or leased, but past its deadline (the model does not take it over).
    Expired,
    /// No capacity left.
    Full,
}

/// A claim in progress: its lane, entry and token.
#[derive(Debug)]
pub(crate) struct Guard {
    lane: u32,
    index: u32,
    token: u32,
}

impl Guard {
    /// The claim's lane and entry index.
    #[allow(dead_code)] // read by tests/harness_cas.rs
    pub(crate) fn spot(&self) -> (usize, u32) {
        (self.lane as usize, self.index)
    }
}

/// The model: see the module's documentation.
pub(crate) struct Cas {
    buckets: Box<[Bucket]>,
    mask: usize,
    lanes: Lanes,
}

/// What a model's table leaves to its threads: the lanes (each thread's slab,
/// wheel and reserve of capacity), the capacity pool and the clock. Shared by `cas`
/// and `cas12` (`workloads/cas12.rs`), whose tables differ and whose lanes do not.
pub(crate) struct Lanes {
    lanes: Box<[Lane]>,
    pool: Pool,
    latest: Latest,
    clock: Box<dyn Clock>,
    start_ms: u64,
    lease_ticks: u32,
    ttl_ticks: u32,
    /// The most entries a lane can hold (the pool's size).
    n: usize,
}

/// `now` is before `deadline` in serial arithmetic on 32-bit ticks.
#[inline]
fn before(now: u32, deadline: u32) -> bool {
    (deadline.wrapping_sub(now) as i32) > 0
}

/// How much a lane takes from a pool holding `p`: a block, but one unit at a time
/// once the pool is low enough that blocks in reserves could leave a claim refused
/// while another lane holds units it will not use.
#[inline]
fn grab(p: usize) -> usize {
    if p > BLOCK * LANES {
        BLOCK
    } else {
        1
    }
}

#[inline]
fn slot(deadline: u32) -> usize {
    deadline as usize % SLOTS
}

/// What a maintenance pass did (`cas12m`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Pass {
    /// Slots whose lists it walked (a slot whose earliest deadline has not come is
    /// only looked at).
    pub(crate) walked: u64,
    /// Entries found done with a later deadline than their slot's, linked again at
    /// that deadline's slot.
    pub(crate) relinked: u64,
    /// Entries due: unlinked (leases marked lapsed). The model removes nothing from
    /// its table, so their keys stay, answering as their deadlines say.
    pub(crate) expired: u64,
}

impl Lanes {
    /// Lanes for at most `n` entries in all.
    pub(crate) fn new(n: usize) -> Lanes {
        Lanes::with(n, LEASE, TTL)
    }

    /// Lanes for at most `n` entries, with a lease and TTL of whole milliseconds.
    pub(crate) fn with(n: usize, lease: Duration, ttl: Duration) -> Lanes {
        let clock: Box<dyn Clock> = Box::new(CoarseClock);
        let start_ms = clock.now_ms();
        Lanes {
            lanes: (0..LANES).map(|_| Lane::default()).collect(),
            pool: Pool(AtomicUsize::new(n)),
            latest: Latest(AtomicU64::new(start_ms)),
            clock,
            start_ms,
            lease_ticks: lease.as_millis() as u32,
            ttl_ticks: ttl.as_millis() as u32,
            n,
        }
    }

    /// The clock's tick (1 ms), never earlier than one read before.
    #[inline]
    pub(crate) fn now(&self) -> u32 {
        let ms = self.clock.now_ms();
        let seen = SEEN_MS.with(Cell::get);
        let ms = if ms > seen {
            let latest = self.latest.0.load(Ordering::Relaxed);
            let ms = if ms > latest {
                self.latest.0.fetch_max(ms, Ordering::Relaxed);
                ms
            } else {
                latest
            };
            SEEN_MS.with(|s| s.set(ms));
            ms
        } else {
            seen
        };
        ms.saturating_sub(self.start_ms) as u32
    }

    /// Entry `index` of lane `lane`: its chunk must exist (a published locator, or
    /// the owner's own entries).
    #[inline]
    pub(crate) fn entry(&self, lane: usize, index: u32) -> &Entry {
        let chunks = self.lanes[lane]
            .shared
            .chunks
            .get()
            .expect("a lane with entries has its chunk table");
        let chunk = chunks[index as usize / CHUNK]
            .get()
            .expect("an entry's chunk exists");
        &chunk[index as usize % CHUNK]
    }

    /// An entry of the caller's lane for a new claim, or `None` when no capacity is
    /// left. Owner only.
    #[inline]
    pub(crate) fn take_entry(&self, lane: usize) -> Option<u32> {
        let own = &self.lanes[lane].own;
        if !self.take_unit(own) {
            return None;
        }
        let index = own.used.load(Ordering::Relaxed);
        own.used.store(index + 1, Ordering::Relaxed);
        if (index as usize).is_multiple_of(CHUNK) {
            let shared = &self.lanes[lane].shared;
            let chunks = shared.chunks.get_or_init(|| {
                (0..self.n.div_ceil(CHUNK))
                    .map(|_| OnceLock::new())
                    .collect()
            });
            chunks[index as usize / CHUNK].get_or_init(|| {
                (0..CHUNK)
                    .map(|_| Entry::default())
                    .collect::<Vec<_>>()
                    .into_boxed_slice()
                    .try_into()
                    .unwrap_or_else(|_| unreachable!("CHUNK entries"))
            });
        }
        Some(index)
    }

    /// Links entry `index` of the caller's lane at the head of wheel slot `s`.
    #[inline]
    fn link(&self, lane: usize, index: u32, e: &Entry, s: usize) {
        let head = &self.lanes[lane].own.heads[s];
        let first = head.load(Ordering::Relaxed);
        e.prev.store(NIL, Ordering::Relaxed);
        e.next.store(first, Ordering::Relaxed);
        if first != NIL {
            self.entry(lane, first).prev.store(index, Ordering::Relaxed);
        }
        head.store(index, Ordering::Relaxed);
    }

    /// Unlinks entry `e` of the caller's lane from wheel slot `s`.
    #[inline]
    fn unlink(&self, lane: usize, e: &Entry, s: usize) {
        let prev = e.prev.load(Ordering::Relaxed);
        let next = e.next.load(Ordering::Relaxed);
        if prev == NIL {
            self.lanes[lane].own.heads[s].store(next, Ordering::Relaxed);
        } else {
            self.entry(lane, prev).next.store(next, Ordering::Relaxed);
        }
        if next != NIL {
            self.entry(lane, next).prev.store(prev, Ordering::Relaxed);
        }
    }

    /// What a claim that found its key's entry `e` answers.
    #[inline]
    pub(crate) fn answer(e: &Entry, now: u32) -> Claim {
        let meta = e.meta.load(Ordering::Acquire);
        let deadline = e.deadline.load(Ordering::Relaxed);
        match meta & STATE_MASK {
            _ if !before(now, deadline) => Claim::Expired,
            DONE => Claim::Duplicate,
            _ => Claim::InProgress,
        }
    }

    /// One unit of capacity: from the lane's reserve (a compare-and-swap on the
    /// lane's own line: another lane's claim that finds the pool empty may take the
    /// reserve away), or else a block from the pool, or else whatever other lanes
    /// hold in reserve, collected into the pool. False when all are empty.
    #[inline]
    fn take_unit(&self, own: &LaneOwn) -> bool {
        let mut budget = own.budget.load(Ordering::Relaxed);
        while budget > 0 {
            match own.budget.compare_exchange_weak(
                budget,
                budget - 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(b) => budget = b,
            }
        }
        self.refill(own)
    }

    #[cold]
    fn refill(&self, own: &LaneOwn) -> bool {
        for collect in [false, true] {
            if collect {
                for l in self.lanes.iter() {
                    let n = l.own.budget.swap(0, Ordering::AcqRel);
                    if n > 0 {
                        self.pool.0.fetch_add(n as usize, Ordering::AcqRel);
                    }
                }
            }
            if let Ok(had) = self
                .pool
                .0
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |p| {
                    (p > 0).then(|| p - grab(p))
                })
            {
                let extra = grab(had) as u32 - 1;
                if extra > 0 {
                    own.budget.fetch_add(extra, Ordering::AcqRel);
                }
                return true;
            }
        }
        false
    }

    /// Undoes [`Lanes::take_entry`] for an entry not used (the last one taken).
    #[cold]
    fn give_back(&self, lane: usize, index: u32) {
        let own = &self.lanes[lane].own;
        own.used.store(index, Ordering::Relaxed);
        own.budget.fetch_add(1, Ordering::AcqRel);
    }

    /// Writes a new claim's entry `index` of the caller's lane (fingerprint bits
    /// 0..95, lease deadline, in progress with the lane's next token), not yet
    /// published nor linked: its table publishes it, then [`Lanes::settle`].
    #[inline]
    pub(crate) fn write(&self, lane: usize, index: u32, f: u128, now: u32) -> Guard {
        let own = &self.lanes[lane].own;
        let token = own.token.load(Ordering::Relaxed) & TOKEN_MASK;
        own.token.store(token + 1, Ordering::Relaxed);
        let e = self.entry(lane, index);
        e.fp[0].store(f as u32, Ordering::Relaxed);
        e.fp[1].store((f >> 32) as u32, Ordering::Relaxed);
        e.fp[2].store((f >> 64) as u32, Ordering::Relaxed);
        e.deadline
            .store(now.wrapping_add(self.lease_ticks), Ordering::Relaxed);
        e.meta
            .store(IN_PROGRESS | token << TOKEN_SHIFT, Ordering::Relaxed);
        Guard {
            lane: lane as u32,
            index,
            token,
        }
    }

    /// Links a new claim's entry in its lane's wheel at its lease deadline and counts
    /// it resident. Owner only.
    #[inline]
    pub(crate) fn settle(&self, g: &Guard) {
        let lane = g.lane as usize;
        let own = &self.lanes[lane].own;
        let e = self.entry(lane, g.index);
        self.link(lane, g.index, e, slot(e.deadline.load(Ordering::Relaxed)));
        own.resident
            .store(own.resident.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    /// Completes a claim, on the thread that made it. False if its lease was lost
    /// (its meta no longer holds its token in progress).
    #[inline]
    pub(crate) fn complete(&self, g: Guard) -> bool {
        let lane = g.lane as usize;
        debug_assert_eq!(lane, lane_id(), "completed on the claiming thread");
        let e = self.entry(lane, g.index);
        let token = g.token << TOKEN_SHIFT;
        if e.meta
            .compare_exchange(
                IN_PROGRESS | token,
                DONE | token,
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_err()
        {
            return false;
        }
        let now = self.now();
        let old = e.deadline.load(Ordering::Relaxed);
        let deadline = now.wrapping_add(self.ttl_ticks);
        e.deadline.store(deadline, Ordering::Relaxed);
        self.unlink(lane, e, slot(old));
        self.link(lane, g.index, e, slot(deadline));
        true
    }

    /// Lane `lane`'s lock (`cas12m`).
    #[inline]
    pub(crate) fn lock_lane(&self, lane: usize) -> parking_lot::MutexGuard<'_, ()> {
        self.lanes[lane].own.lock.lock()
    }

    /// [`Lanes::settle`], keeping the slot's earliest deadline (`cas12m`). Under the
    /// lane's lock (`_held`).
    #[inline]
    pub(crate) fn settle_kept(&self, g: &Guard, _held: &parking_lot::MutexGuard<'_, ()>) {
        let own = &self.lanes[g.lane as usize].own;
        let d = self
            .entry(g.lane as usize, g.index)
            .deadline
            .load(Ordering::Relaxed);
        let s = slot(d);
        let empty = own.heads[s].load(Ordering::Relaxed) == NIL;
        self.settle(g);
        if empty || before(d, own.due[s].load(Ordering::Relaxed)) {
            own.due[s].store(d, Ordering::Relaxed);
        }
    }

    /// Completes a claim from any thread, as idem does for a later deadline: the
    /// entry's new deadline stored in place, then its meta turned from (in progress,
    /// token) to (done, token) by compare-and-swap (Release: a pass that reads it done
    /// reads the new deadline). The entry stays where it is in its lane's wheel (at
    /// its lease's slot), and no lane lock is taken: the pass that reaches that slot
    /// finds it done with a later deadline and links it again there. False if its
    /// lease was lost (a pass marked it lapsed first; the deadline written before
    /// then lands on a lapsed entry, which the model never reuses).
    #[inline]
    pub(crate) fn complete_lazy(&self, g: Guard) -> bool {
        let e = self.entry(g.lane as usize, g.index);
        let token = g.token << TOKEN_SHIFT;
        e.deadline
            .store(self.now().wrapping_add(self.ttl_ticks), Ordering::Relaxed);
        e.meta
            .compare_exchange(
                IN_PROGRESS | token,
                DONE | token,
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// The lane has made a claim (it has a chunk table).
    #[inline]
    pub(crate) fn used(&self, lane: usize) -> bool {
        self.lanes[lane].shared.chunks.get().is_some()
    }

    /// Advances lane `lane`'s wheel to tick `now` (`cas12m`'s maintenance pass),
    /// under the lane's lock (`_held`): every slot from the cursor's next tick to
    /// `now` (each slot once when more than a turn has passed), skipping a slot that
    /// is empty or whose earliest deadline is after `now`. In a slot walked, an entry
    /// done (or a lease completed meanwhile) with a deadline after `now` is linked
    /// again at that deadline's slot (the lazy move of [`Lanes::complete_lazy`]); an
    /// entry due is unlinked, a lease first marked lapsed by compare-and-swap (a
    /// completion that wins it is linked again instead). A `now` at or before the
    /// cursor does nothing.
    pub(crate) fn advance(
        &self,
        lane: usize,
        _held: &parking_lot::MutexGuard<'_, ()>,
        now: u32,
    ) -> Pass {
        let own = &self.lanes[lane].own;
        let cursor = own.cursor.load(Ordering::Relaxed);
        let mut pass = Pass::default();
        if !before(cursor, now) {
            return pass;
        }
        let ticks = now.wrapping_sub(cursor).min(SLOTS as u32);
        for k in 1..=ticks {
            let s = slot(now.wrapping_sub(ticks - k));
            if own.heads[s].load(Ordering::Relaxed) == NIL
                || before(now, own.due[s].load(Ordering::Relaxed))
            {
                continue;
            }
            pass.walked += 1;
            self.walk(lane, s, now, &mut pass);
        }
        own.cursor.store(now, Ordering::Relaxed);
        pass
    }

    /// Walks slot `s` of lane `lane`'s wheel at tick `now`: see [`Lanes::advance`].
    #[cold]
    fn walk(&self, lane: usize, s: usize, now: u32, pass: &mut Pass) {
        let own = &self.lanes[lane].own;
        let mut earliest: Option<u32> = None;
        let mut i = own.heads[s].load(Ordering::Relaxed);
        while i != NIL {
            let e = self.entry(lane, i);
            let next = e.next.load(Ordering::Relaxed);
            let mut meta = e.meta.load(Ordering::Acquire);
            if meta & STATE_MASK == IN_PROGRESS && !before(now, e.deadline.load(Ordering::Relaxed))
            {
                match e.meta.compare_exchange(
                    meta,
                    (meta & !STATE_MASK) | LAPSED,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => meta = (meta & !STATE_MASK) | LAPSED,
                    Err(m) => meta = m,
                }
            }
            let d = e.deadline.load(Ordering::Relaxed);
            if meta & STATE_MASK != LAPSED && before(now, d) {
                let to = slot(d);
                if to == s {
                    earliest = Some(earliest.map_or(d, |x| if before(d, x) { d } else { x }));
                } else {
                    self.unlink(lane, e, s);
                    let empty = own.heads[to].load(Ordering::Relaxed) == NIL;
                    self.link(lane, i, e, to);
                    if empty || before(d, own.due[to].load(Ordering::Relaxed)) {
                        own.due[to].store(d, Ordering::Relaxed);
                    }
                    pass.relinked += 1;
                }
            } else {
                self.unlink(lane, e, s);
                e.prev.store(NIL, Ordering::Relaxed);
                e.next.store(NIL, Ordering::Relaxed);
                pass.expired += 1;
            }
            i = next;
        }
        if let Some(d) = earliest {
            own.due[s].store(d, Ordering::Relaxed);
        }
    }

    /// The wheel slot entry `index` of lane `lane` is linked in, if any (tests).
    #[allow(dead_code)] // read by tests/harness_cas.rs
    pub(crate) fn linked_slot(&self, lane: usize, index: u32) -> Option<usize> {
        let own = &self.lanes[lane].own;
        (0..SLOTS).find(|&s| {
            let mut i = own.heads[s].load(Ordering::Relaxed);
            while i != NIL {
                if i == index {
                    return true;
                }
                i = self.entry(lane, i).next.load(Ordering::Relaxed);
            }
            false
        })
    }

    /// The wheel slot of deadline `d` (tests).
    #[allow(dead_code)] // read by tests/harness_cas.rs
    pub(crate) fn slot_of(d: u32) -> usize {
        slot(d)
    }

    /// Entry `index` of lane `lane`'s deadline (tests).
    #[allow(dead_code)] // read by tests/harness_cas.rs
    pub(crate) fn deadline_at(&self, lane: usize, index: u32) -> u32 {
        self.entry(lane, index).deadline.load(Ordering::Relaxed)
    }

    /// Entries resident, over all lanes (exact once the claiming threads are joined).
    pub(crate) fn resident(&self) -> u64 {
        self.lanes
            .iter()
            .map(|l| l.own.resident.load(Ordering::Relaxed))
            .sum()
    }

    /// The heap the lanes hold: the lanes themselves, their chunk tables and chunks.
    pub(crate) fn bytes(&self) -> usize {
        let lanes = std::mem::size_of_val(&*self.lanes);
        let slabs: usize = self
            .lanes
            .iter()
            .filter_map(|l| l.shared.chunks.get())
            .map(|chunks| {
                std::mem::size_of_val(&**chunks)
                    + chunks.iter().filter(|c| c.get().is_some()).count()
                        * std::mem::size_of::<[Entry; CHUNK]>()
            })
            .sum();
        lanes + slabs
    }
}

impl Cas {
    /// A table for at most `n` keys.
    pub(crate) fn new(n: usize) -> Cas {
        let n = n.max(1);
        let cap = ((n as f64 / MAX_LOAD).ceil() as usize)
            .next_power_of_two()
            .max(4);
        // Written through at build (as the machine reference's array is): the fill
        // takes no page fault on the table.
        let buckets: Box<[Bucket]> = (0..cap).map(|_| Bucket::default()).collect();
        Cas {
            buckets,
            mask: cap - 1,
            lanes: Lanes::new(n),
        }
    }

    /// The entry a locator names.
    #[inline]
    fn located(&self, loc: u64) -> &Entry {
        self.lanes.entry((loc >> 32) as usize - 1, loc as u32)
    }

    /// Waits for bucket `b`'s locator (its claim publishes it right after taking
    /// the bucket).
    #[inline]
    fn locator(b: &Bucket) -> u64 {
        loop {
            let loc = b.loc.load(Ordering::Acquire);
            if loc != 0 {
                return loc;
            }
            std::hint::spin_loop();
        }
    }

    /// What a claim that found `f`'s tag answers, once the entry is published; `None`
    /// when the entry's other fingerprint bits differ (another key with the same low
    /// 64 bits: probing goes on).
    #[inline]
    fn answer(&self, b: &Bucket, f: u128, now: u32) -> Option<Claim> {
        let e = self.located(Self::locator(b));
        if e.fp[2].load(Ordering::Relaxed) != (f >> 64) as u32 {
            return None;
        }
        Some(Lanes::answer(e, now))
    }

    /// Claims `key`.
    #[inline]
    pub(crate) fn claim(&self, key: &Key) -> Claim {
        let f = fp(key);
        let tag = (f as u64).max(1);
        let now = self.lanes.now();
        let mut i = tag as usize & self.mask;
        loop {
            let b = &self.buckets[i];
            let t = b.tag.load(Ordering::Acquire);
            if t == 0 {
                let lane = lane_id();
                // Capacity first: a bucket once taken is always published.
                let Some(index) = self.lanes.take_entry(lane) else {
                    return Claim::Full;
                };
                match b
                    .tag
                    .compare_exchange(0, tag, Ordering::AcqRel, Ordering::Acquire)
                {
                    Ok(_) => {
                        let g = self.lanes.write(lane, index, f, now);
                        b.loc
                            .store(((lane as u64 + 1) << 32) | index as u64, Ordering::Release);
                        self.lanes.settle(&g);
                        return Claim::Acquired(g);
                    }
                    Err(t) => {
                        // Another claim took it first: the entry goes back unused.
                        self.lanes.give_back(lane, index);
                        if t == tag {
                            if let Some(c) = self.answer(b, f, now) {
                                return c;
                            }
                        }
                    }
                }
            } else if t == tag {
                if let Some(c) = self.answer(b, f, now) {
                    return c;
                }
            }
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
}

/// The [`Peer`] of a model whose `claim` answers a [`Claim`] and whose `complete`
/// takes its guard: W1 a claim that must be acquired, then completed; W2 a claim that
/// must answer duplicate; `$bytes` the model's own heap size.
macro_rules! model_peer {
    ($model:ty, $bytes:expr) => {
        impl Peer for $model {
            #[inline]
            fn fresh(&self, key: &Key) -> bool {
                match self.claim(key) {
                    Claim::Acquired(g) => self.complete(g),
                    _ => false,
                }
            }

            #[inline]
            fn duplicate(&self, key: &Key) -> bool {
                matches!(self.claim(key), Claim::Duplicate)
            }

            fn own_bytes(&self) -> Option<u64> {
                let bytes: fn(&$model) -> Option<u64> = $bytes;
                bytes(self)
            }
        }
    };
}
pub(crate) use model_peer;

model_peer!(Cas, |m| Some(
    (std::mem::size_of_val(&*m.buckets) + m.lanes.bytes()) as u64
));
