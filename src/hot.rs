//! The hot tier: lock shards, each a fingerprint table over a slab of 28-byte entries,
//! with a hierarchical timing wheel threaded through the same slab.
//!
//! Layout of one shard:
//!
//! * `slab`: fixed-size chunks of [`Entry`] (fingerprint, deadline, state, wheel links).
//!   Chunks are never reallocated, so growth costs no copy and no doubling slack.
//! * `index`: 64-byte buckets of tags and `u32` slab indices, hashed by the
//!   fingerprint's low 64 bits (the fingerprint is already a keyed hash: no second
//!   hash).
//! * `wheel`: the TTL/lease timing wheel; its bucket lists are linked through the
//!   entries' `prev`/`next` fields, so scheduling allocates nothing.
//! * `payloads`, `completed` and `results`: a payload fingerprint, a sliding-window
//!   key's completion time and a stored result, in columns beside the slab (8, 8 and
//!   16 bytes an entry, in blocks made on first use: a namespace that uses none of
//!   them pays nothing).
//! * `read_back_times`: the completion time of a fixed-window entry read back from
//!   the durable tier that its deadline does not give back, or the record's expiry
//!   of a sliding one that its deadline falls short of, or of a fixed one written
//!   under another retention (few), in side tables.
//!
//! The table is the truth and the wheel a hint: a read checks the entry's deadline
//! itself, and the wheel only makes sure expired entries are reclaimed without traffic.

pub(crate) mod index;
#[cfg_attr(idem_loom, allow(dead_code))]
pub(crate) mod reclaim;
mod seq;
#[cfg(idem_loom)]
pub(crate) use seq::Seq;
pub(crate) mod wheel;

use hashbrown::{HashMap, HashSet};

use crate::sync::{AtomicUsize, Mutex, Ordering};
pub(crate) use index::capacity as index_capacity;
pub(crate) use index::prefetch;
use index::Index;
use wheel::{widen, Links, Wheel, NIL};

/// A key's 128-bit fingerprint (seeded xxh3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Fp {
    pub(crate) lo: u64,
    pub(crate) hi: u64,
}

impl Fp {
    pub(crate) fn from_u128(v: u128) -> Self {
        Fp {
            lo: v as u64,
            hi: (v >> 64) as u64,
        }
    }

    #[allow(dead_code)]
    pub(crate) fn to_u128(self) -> u128 {
        (self.hi as u128) << 64 | self.lo as u128
    }

    /// The shard among `n`, from the high half (multiply-shift: no power of two needed).
    #[inline]
    pub(crate) fn shard(self, n: usize) -> usize {
        ((self.hi as u128 * n as u128) >> 64) as usize
    }
}

/// The heap bytes of a stored result of `len` bytes, an `Arc<[u8]>`: two counts and
/// the bytes, padded to the counts' alignment (`Stats::hot_bytes` counts it so, and
/// the planner with it).
pub(crate) fn result_allocation(len: usize) -> usize {
    len.saturating_add(16).next_multiple_of(8)
}

const STATE_MASK: u32 = 0b11;
const STATE_FREE: u32 = 0;
const STATE_IN_PROGRESS: u32 = 1;
const STATE_DONE: u32 = 2;
/// The entry has a payload fingerprint (in `Shard::payloads`).
const PAYLOAD_BIT: u32 = 0b100;
/// The entry has a stored result (in `Shard::results`) or a kept completion time or
/// record expiry (in `Shard::read_back_times`): a duplicate's answer needs more than
/// the entry.
const EXTRA_BIT: u32 = 0b1000;
/// A durable completion is being written: the entry stays held whatever its lease.
const COMPLETING_BIT: u32 = 0b1_0000;
const TOKEN_SHIFT: u32 = 5;
/// The furthest ahead of now a deadline may lie, in ticks: 32-bit deadlines are
/// compared with serial arithmetic, which holds below 2^31; this leaves headroom.
pub(crate) const MAX_DEADLINE_TICKS: u64 = 1 << 30;
/// Fencing tokens are 27 bits, per shard, wrapping past 0: a claim's token is never
/// 0, which marks an entry read back from the durable tier (no claim of its own).
pub(crate) const TOKEN_MASK: u32 = (1 << 27) - 1;

/// One resident key: 28 bytes.
///
/// The entry keeps 96 of the fingerprint's 128 bits: the low 64 (which also hash the
/// index) and the low half of the high word (whose top bits chose the shard). Two
/// distinct resident keys agree on 96 bits with probability about n^2 / 2^97: below
/// 10^-15 for ten million keys. Keeping all 128 would cost 4 more bytes per key.
#[derive(Debug, Clone, Copy)]
#[repr(C)]
pub(crate) struct Entry {
    fp_lo: [u32; 2],
    fp_mid: u32,
    /// Deadline in ticks, low 32 bits (serial arithmetic against `now`).
    deadline: u32,
    /// state (2 bits) | has payload | has extra | completing (1 bit each) | fencing
    /// token (27 bits).
    meta: u32,
    prev: u32,
    next: u32,
}

const _: () = assert!(std::mem::size_of::<Entry>() == 28);

impl Entry {
    const FREE: Entry = Entry {
        fp_lo: [0; 2],
        fp_mid: 0,
        deadline: 0,
        meta: STATE_FREE,
        prev: NIL,
        next: NIL,
    };

    #[inline]
    fn state(&self) -> u32 {
        self.meta & STATE_MASK
    }

    #[inline]
    fn has_payload(&self) -> bool {
        self.meta & PAYLOAD_BIT != 0
    }

    #[inline]
    fn has_extra(&self) -> bool {
        self.meta & EXTRA_BIT != 0
    }

    #[inline]
    fn token(&self) -> u32 {
        self.meta >> TOKEN_SHIFT
    }

    /// What a lock-free reader needs of entry `i` of the chunk at `chunk` (its
    /// fingerprint, deadline and state; not its wheel links), read with relaxed atomic
    /// loads that may race with a lock holder's writes (see `ShardSlot::optimistic_duplicate`).
    ///
    /// # Safety
    /// `chunk` points to a live chunk.
    #[inline(always)]
    #[allow(unsafe_code)]
    #[cfg_attr(idem_loom, allow(dead_code))]
    unsafe fn read_racy(chunk: *const Entry, i: u32) -> Entry {
        // SAFETY: the offset is masked to the chunk's length; the chunk is live (the
        // caller's contract); every field read is an aligned `u32`.
        unsafe {
            let e = chunk.add(i as usize & (CHUNK - 1));
            let word = |p: *const u32| index::racy_u32(p);
            Entry {
                fp_lo: [
                    word(std::ptr::addr_of!((*e).fp_lo[0])),
                    word(std::ptr::addr_of!((*e).fp_lo[1])),
                ],
                fp_mid: word(std::ptr::addr_of!((*e).fp_mid)),
                deadline: word(std::ptr::addr_of!((*e).deadline)),
                meta: word(std::ptr::addr_of!((*e).meta)),
                prev: NIL,
                next: NIL,
            }
        }
    }

    /// The low 64 bits of the fingerprint (the index's hash).
    #[inline]
    fn lo(&self) -> u64 {
        (self.fp_lo[1] as u64) << 32 | self.fp_lo[0] as u64
    }

    /// Whether this entry holds fingerprint `fp` (96 of its bits).
    #[inline]
    fn is(&self, fp: Fp) -> bool {
        self.lo() == fp.lo && self.fp_mid == fp.hi as u32
    }
}

/// A relaxed atomic store of `v` at `p`: how a lock holder writes a word that
/// lock-free readers load (`index::racy_u32`).
///
/// # Safety
/// `p` is aligned and points into a live allocation that nothing else writes.
#[inline(always)]
#[allow(unsafe_code)]
unsafe fn store_racy(p: *mut u32, v: u32) {
    // SAFETY: the caller's contract.
    unsafe { std::sync::atomic::AtomicU32::from_ptr(p) }
        .store(v, std::sync::atomic::Ordering::Relaxed)
}

const CHUNK_BITS: u32 = 9;
pub(crate) const CHUNK: usize = 1 << CHUNK_BITS;

/// One chunk of slab entries, owned through a raw pointer rather than a `Box`.
///
/// Lock-free readers reach a chunk by the address the slab publishes
/// ([`Chunk::addr`]) while the lock holder writes it. A `Box` asserts that nothing
/// else reaches its memory: an address taken from it (through a shared reference,
/// so good for reads only) loses its right to the memory at the box's next write,
/// and a reader's access through it is undefined behaviour (Miri reports it under
/// both of its aliasing models). The raw pointer makes no such claim: the address
/// it publishes stays valid until the chunk is freed, which the reclamation holds
/// off while a reader may use it.
///
/// The byte holds the chunk's lane and, in [`CARVED`], whether the chunk is a part of
/// a [`Region`] (freed with the region, not on its own).
pub(crate) struct Chunk(std::ptr::NonNull<[Entry; CHUNK]>, u8);

/// Set in a [`Chunk`]'s byte when its array is a part of a [`Region`].
const CARVED: u8 = 0x80;

// SAFETY: a chunk owns its array, as the `Box` it was made from did; `Entry` is
// plain data, so the array may move to and be shared with any thread.
#[allow(unsafe_code)]
unsafe impl Send for Chunk {}
// SAFETY: as above; `&Chunk` gives only `&[Entry; CHUNK]`.
#[allow(unsafe_code)]
unsafe impl Sync for Chunk {}

impl Chunk {
    /// The lane whose entries the chunk holds (see [`LANES`]), set when a slab takes
    /// it.
    #[inline(always)]
    fn lane(&self) -> usize {
        self.1 as usize & (LANES - 1)
    }

    /// Whether the chunk is a part of a [`Region`].
    fn carved(&self) -> bool {
        self.1 & CARVED != 0
    }

    /// The array's address as lock-free readers use it (its provenance exposed:
    /// they turn it back into a pointer).
    pub(crate) fn addr(&self) -> usize {
        self.0.as_ptr().expose_provenance()
    }
}

impl std::ops::Deref for Chunk {
    type Target = [Entry; CHUNK];

    #[inline(always)]
    fn deref(&self) -> &[Entry; CHUNK] {
        #[allow(unsafe_code)]
        // SAFETY: the pointer is the live allocation of `Box::into_raw` (freed only
        // in `drop`), and `&self` borrows the chunk: no `&mut` to it meanwhile.
        unsafe {
            self.0.as_ref()
        }
    }
}

impl Chunk {
    /// Entry `j`'s address (`j` below [`CHUNK`]), for a lock holder's writes: no
    /// `&mut` is ever made over a chunk's entries, which lock-free readers may be
    /// reading (Miri counts making one as a write of all of them).
    #[inline(always)]
    fn entry_ptr(&self, j: usize) -> *mut Entry {
        debug_assert!(j < CHUNK);
        self.0.as_ptr().cast::<Entry>().wrapping_add(j)
    }
}

impl Drop for Chunk {
    fn drop(&mut self) {
        if self.carved() {
            // A part of a region: the reservoir that carved it frees the region.
            return;
        }
        #[allow(unsafe_code)]
        // SAFETY: the pointer came from `Box::into_raw` and is given back once.
        drop(unsafe { Box::from_raw(self.0.as_ptr()) });
    }
}

impl std::fmt::Debug for Chunk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Chunk({:p})", self.0)
    }
}

/// A chunk of free entries, allocated and written (so its pages are in memory).
pub(crate) fn new_chunk() -> Chunk {
    match try_new_chunk() {
        Some(c) => c,
        None => std::alloc::handle_alloc_error(std::alloc::Layout::new::<[Entry; CHUNK]>()),
    }
}

/// [`new_chunk`], or `None` if the allocator refuses its memory.
fn try_new_chunk() -> Option<Chunk> {
    // Built on the heap (a 14 KiB array would otherwise pass through the stack).
    let mut entries = Vec::new();
    entries.try_reserve_exact(CHUNK).ok()?;
    entries.resize(CHUNK, Entry::FREE);
    let array: Box<[Entry; CHUNK]> = match entries.into_boxed_slice().try_into() {
        Ok(c) => c,
        Err(_) => unreachable!("a CHUNK-long vector converts to a CHUNK array"),
    };
    match std::ptr::NonNull::new(Box::into_raw(array)) {
        Some(p) => Some(Chunk(p, 0)),
        None => unreachable!("a box is never null"),
    }
}

/// Bytes of a [`Region`]: one transparent huge page.
pub(crate) const REGION_BYTES: usize = 2 << 20;

/// Chunks carved from one [`Region`] (146; the last 4 KiB of the region are slack).
pub(crate) const REGION_CHUNKS: usize = REGION_BYTES / std::mem::size_of::<[Entry; CHUNK]>();

/// The smallest `max_keys` whose namespace makes its chunks in regions: eight
/// regions' worth of entries.
pub(crate) const REGION_MIN_KEYS: usize = 8 * REGION_CHUNKS * CHUNK;

/// A 2 MiB block, aligned to 2 MiB and marked for transparent huge pages, that a
/// [`Reservoir`] carves into [`REGION_CHUNKS`] chunks.
///
/// Made one chunk at a time, a namespace's slab costs its maker four page faults a
/// chunk (a fault, in a virtual machine, is several microseconds): about 10 ms of
/// CPU a million keys, which the maintenance thread spends during a fill, on a core
/// that two claiming threads would otherwise have. A region is one fault (a 2 MiB
/// page zeroed at once) where the kernel grants a huge page, and its chunks are
/// reached through one TLB entry. The region is freed when its reservoir is, that is
/// with the namespace; its chunks' own drops free nothing ([`CARVED`]).
struct Region(std::ptr::NonNull<u8>);

// SAFETY: a region owns its block, which holds plain data.
#[allow(unsafe_code)]
unsafe impl Send for Region {}
// SAFETY: as above; `&Region` gives no access to the block.
#[allow(unsafe_code)]
unsafe impl Sync for Region {}

impl Region {
    fn layout() -> std::alloc::Layout {
        match std::alloc::Layout::from_size_align(REGION_BYTES, REGION_BYTES) {
            Ok(l) => l,
            Err(_) => unreachable!("2 MiB is a power of two"),
        }
    }

    /// A new region and its chunks, every entry written free (the first touch, here
    /// rather than under a shard lock), or `None` if the allocator refuses the block.
    #[allow(unsafe_code)]
    fn carve() -> Option<(Region, Vec<Chunk>)> {
        // SAFETY: the layout's size is not zero.
        let block = std::ptr::NonNull::new(unsafe { std::alloc::alloc(Self::layout()) })?;
        #[cfg(target_os = "linux")]
        // SAFETY: the range is the block just allocated, aligned to a page. Advice
        // only: where the kernel has no huge page to give, the block keeps 4 KiB pages.
        unsafe {
            libc::madvise(block.as_ptr().cast(), REGION_BYTES, libc::MADV_HUGEPAGE);
        }
        let base = block.as_ptr().cast::<[Entry; CHUNK]>();
        let chunks = (0..REGION_CHUNKS)
            .map(|c| {
                // SAFETY: chunk `c` lies inside the block (`REGION_CHUNKS` of them fit),
                // aligned (the block is, and an array's size is a multiple of its
                // alignment); nothing else refers to it yet.
                unsafe {
                    let array = base.add(c);
                    array.write([Entry::FREE; CHUNK]);
                    Chunk(std::ptr::NonNull::new_unchecked(array), CARVED)
                }
            })
            .collect();
        Some((Region(block), chunks))
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        #[allow(unsafe_code)]
        // SAFETY: the block came from `alloc` with this layout and is freed once.
        unsafe {
            std::alloc::dealloc(self.0.as_ptr(), Self::layout())
        }
    }
}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Region({:p})", self.0)
    }
}

/// Chunks made ahead for a namespace's shards, in batches.
///
/// A chunk's allocation and first touch take page faults, several microseconds in a
/// virtual machine. Made one at a time (as each shard's slab nears its end), they put
/// that cost on one claim in every 512 fresh keys of a shard: about 0.2 % of fresh
/// claims, enough to lift a stream's 99.9th (and, mixed with durable reads, its
/// 99th) latency percentile. The reservoir makes them a batch at a time instead,
/// outside every shard lock: the maintenance pass tops it up once it has been drawn
/// from (then no claim waits for it); a claim that finds it empty makes its own chunk
/// and has the maintenance thread make the batch at once, or, without a maintenance
/// thread, makes the batch itself (one slow claim in `batch` chunks).
///
/// Chunks are made one by one, at most 1/64 of the namespace's entries a batch
/// (`max_keys / (64 * CHUNK)` chunks, 1 to 64 of them), so the chunks held unused
/// cost at most about 1.6 % of a full slab. A namespace of [`REGION_MIN_KEYS`] keys or
/// more carves its batches from [`Region`]s instead, [`REGION_CHUNKS`] chunks at once,
/// topped up when fewer than a quarter of them are left, for as long as another
/// region's chunks fit in what its full slab needs (`max_keys / CHUNK` chunks at
/// least); its last chunks are made one by one again, so a full namespace holds no
/// more unused than a small one. Either way the chunks held are counted in
/// `hot_bytes`, and so is the slack at each region's end.
///
/// A namespace filling fast outruns the maintenance period (at a few million fresh
/// claims a second a batch lasts milliseconds), so the take that leaves the reservoir
/// low also asks for a top-up at once ([`Reservoir::on_low`]: the engine's
/// maintenance thread, which then makes the chunks on its own core instead of the
/// claiming thread making them when it runs dry).
pub(crate) struct Reservoir {
    chunks: crate::sync::Mutex<Vec<Chunk>>,
    /// Chunks a batch made one by one makes.
    batch: usize,
    /// Whether batches are carved from regions (see [`REGION_MIN_KEYS`]).
    regional: bool,
    /// Chunks a full namespace's slab needs at least (`max_keys / CHUNK`, rounded up).
    budget: usize,
    /// Stocked at build with the whole slab ([`Reservoir::preallocated`]): topped
    /// up only once empty, so the chunks its fill leaves unused are not joined by a
    /// batch made near its end.
    preallocated: bool,
    /// Chunks made so far, carved or one by one (by claims that found the
    /// reservoir empty too): once a region would take it past `budget`, the rest
    /// are made one by one.
    made: std::sync::atomic::AtomicUsize,
    /// The regions carved so far: freed with the reservoir, after every chunk of
    /// theirs (a namespace's shards go with it).
    regions: crate::sync::Mutex<Vec<Region>>,
    /// A chunk has been taken: the namespace is growing, so maintenance keeps the
    /// reservoir topped up (a namespace that never grows never holds a batch).
    drawn: std::sync::atomic::AtomicBool,
    /// A top-up has been asked for and not begun: later takes do not ask again.
    asked: std::sync::atomic::AtomicBool,
    /// Asks for a top-up (set once, by the engine that has a maintenance thread).
    on_low: std::sync::OnceLock<Box<dyn Fn() + Send + Sync>>,
}

impl std::fmt::Debug for Reservoir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reservoir")
            .field("batch", &self.batch)
            .field("regional", &self.regional)
            .field("drawn", &self.drawn)
            .field("asked", &self.asked)
            .finish_non_exhaustive()
    }
}

impl Reservoir {
    /// The reservoir of a namespace of at most `max_keys` keys (empty until drawn).
    pub(crate) fn new(max_keys: usize) -> Self {
        Reservoir {
            chunks: crate::sync::Mutex::new(Vec::new()),
            batch: (max_keys / (64 * CHUNK)).clamp(1, 64),
            regional: max_keys >= REGION_MIN_KEYS,
            budget: max_keys.div_ceil(CHUNK),
            preallocated: false,
            made: std::sync::atomic::AtomicUsize::new(0),
            regions: crate::sync::Mutex::new(Vec::new()),
            drawn: std::sync::atomic::AtomicBool::new(false),
            asked: std::sync::atomic::AtomicBool::new(false),
            on_low: std::sync::OnceLock::new(),
        }
    }

    /// The bytes [`Reservoir::preallocated`] makes for `max_keys` keys and `lanes`
    /// lanes (`None` past what a count of bytes can hold).
    pub(crate) fn preallocated_bytes(max_keys: usize, lanes: usize) -> Option<usize> {
        max_keys
            .div_ceil(CHUNK)
            .checked_add(lanes)?
            .checked_mul(CHUNK * std::mem::size_of::<Entry>())
    }

    /// The reservoir of a preallocated namespace of at most `max_keys` keys
    /// (`NamespaceConfig::preallocate`) whose shards have `lanes` lanes in all:
    /// stocked at once with the chunks of its full slab (`max_keys / CHUNK`, rounded
    /// up) and one more a lane, every entry written, so the fill's first touch of that
    /// memory happens here, at build, instead of on the cores of the claims that fill
    /// it (carved from regions as a growing namespace's batches are; a small
    /// namespace's made one by one). The chunk a lane has over the slab's share is
    /// the room its last, partly used chunk leaves: without it, a fill to `max_keys`
    /// ran out near its end and its claims made the rest one by one (90 chunks, 4.6 %
    /// of the slab, in a one-thread fill of 1 M keys over 48 shards: a single thread
    /// leaves one lane of each shard unused, with the chunk stocked for it). `None`
    /// if the allocator refuses any of it (what was made is freed).
    pub(crate) fn preallocated(max_keys: usize, lanes: usize) -> Option<Self> {
        let r = Reservoir {
            preallocated: true,
            ..Reservoir::new(max_keys)
        };
        let stock = r.budget.checked_add(lanes)?;
        let mut stocked = Vec::new();
        stocked.try_reserve_exact(stock).ok()?;
        while r.carves_within(stock) {
            stocked.extend(r.carve_region()?);
        }
        while stocked.len() < stock {
            stocked.push(try_new_chunk()?);
            r.made.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        *r.chunks.lock() = stocked;
        Some(r)
    }

    /// Sets what a take that leaves the reservoir low calls to have it topped up
    /// ([`Reservoir::top_up`], run elsewhere). Only the first call sets.
    #[cfg_attr(idem_loom, allow(dead_code))]
    pub(crate) fn on_low(&self, ask: Box<dyn Fn() + Send + Sync>) {
        let _ = self.on_low.set(ask);
    }

    /// Chunks the next batch makes.
    #[cfg(all(test, not(idem_loom)))]
    pub(crate) fn batch(&self) -> usize {
        self.sizes().0
    }

    /// Whether the next batch is carved from a region: the namespace is large
    /// enough, and another region's chunks, with every chunk made so far, still
    /// fit in what its full slab needs.
    fn carving(&self) -> bool {
        self.carves_within(self.budget)
    }

    /// Whether another region's chunks, with every chunk made so far, fit in
    /// `limit` chunks (and the namespace is large enough to carve regions).
    fn carves_within(&self, limit: usize) -> bool {
        self.regional
            && self.made.load(std::sync::atomic::Ordering::Relaxed) + REGION_CHUNKS <= limit
    }

    /// Chunks the next batch makes, and the count below which a take asks for a
    /// top-up: a region's chunks and a quarter of them while regions are carved,
    /// else a batch made one by one and half of it.
    fn sizes(&self) -> (usize, usize) {
        match self.carving() {
            true => (REGION_CHUNKS, REGION_CHUNKS.div_ceil(4)),
            false => (self.batch, self.batch.div_ceil(2)),
        }
    }

    /// The count of chunks held below which a take asks for a top-up and a
    /// top-up makes a batch: none held, for a preallocated reservoir.
    fn low(&self) -> usize {
        match self.preallocated {
            true => 1,
            false => self.sizes().1,
        }
    }

    /// Regions carved so far.
    #[cfg(all(test, not(idem_loom)))]
    pub(crate) fn regions(&self) -> usize {
        self.regions.lock().len()
    }

    /// Chunks made so far, carved or one by one.
    #[cfg(all(test, not(idem_loom)))]
    pub(crate) fn made(&self) -> usize {
        self.made.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Chunks held.
    pub(crate) fn len(&self) -> usize {
        self.chunks.lock().len()
    }

    /// A chunk of free entries: one made ahead, or (the reservoir empty) one made
    /// here, with the rest of a new batch made by the maintenance thread, asked at
    /// once, or, without one, made here too. A take that leaves the reservoir low
    /// asks for a top-up ([`Reservoir::on_low`]). Call it outside every shard lock.
    pub(crate) fn take(&self) -> Chunk {
        self.drawn.store(true, std::sync::atomic::Ordering::Relaxed);
        let (taken, mut left) = {
            let mut chunks = self.chunks.lock();
            (chunks.pop(), chunks.len())
        };
        if taken.is_none() && self.on_low.get().is_some() {
            // Making the whole batch here put its page faults in one claim: half a
            // millisecond at a batch of 64 chunks (900 KiB).
            self.ask_for_top_up();
            return self.make_one();
        }
        let chunk = taken.unwrap_or_else(|| {
            let mut made = self.make_batch(0);
            let chunk = made.pop().unwrap_or_else(|| self.make_one());
            left = made.len();
            self.stock(made);
            chunk
        });
        if left < self.low() {
            self.ask_for_top_up();
        }
        chunk
    }

    /// One new chunk, counted towards the region budget.
    fn make_one(&self) -> Chunk {
        self.made.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        new_chunk()
    }

    /// A batch of new chunks for a reservoir that holds `have`: a region's, or (made
    /// one by one) up to a batch held.
    fn make_batch(&self, have: usize) -> Vec<Chunk> {
        if let Some(chunks) = self.carving().then(|| self.carve_region()).flatten() {
            return chunks;
        }
        let chunks: Vec<Chunk> = (have..self.batch).map(|_| new_chunk()).collect();
        self.made
            .fetch_add(chunks.len(), std::sync::atomic::Ordering::Relaxed);
        chunks
    }

    /// A new region's chunks, the region kept and its chunks counted as made, or
    /// `None` if the allocator refuses the block.
    fn carve_region(&self) -> Option<Vec<Chunk>> {
        let (region, chunks) = Region::carve()?;
        self.regions.lock().push(region);
        self.made
            .fetch_add(chunks.len(), std::sync::atomic::Ordering::Relaxed);
        Some(chunks)
    }

    /// Asks for a top-up unless one is asked for and not begun yet. The engine's
    /// maintenance thread answers a request by topping up every namespace's
    /// reservoir and making the spare index arrays that shards ask for, so a claim
    /// whose shard's index wants one asks through here too.
    pub(crate) fn ask_for_top_up(&self) {
        if let Some(ask) = self.on_low.get() {
            if !self.asked.swap(true, std::sync::atomic::Ordering::AcqRel) {
                ask();
            }
        }
    }

    /// Puts `made` in, up to a batch held in all: claims that found the reservoir
    /// empty at once each made a batch (as may maintenance meanwhile), and the
    /// chunks past one batch are let go rather than held unused. A region's chunks
    /// are all kept (one let go would be freed only with its region, and held
    /// uncounted meanwhile).
    fn stock(&self, mut made: Vec<Chunk>) {
        let mut chunks = self.chunks.lock();
        let mut held = chunks.len();
        made.retain(|c| {
            let keep = c.carved() || held < self.batch;
            held += usize::from(keep);
            keep
        });
        chunks.append(&mut made);
    }

    /// Gives back a chunk taken and not used (a shard that had a spare by then).
    pub(crate) fn give_back(&self, chunk: Chunk) {
        self.stock(vec![chunk]);
    }

    /// Makes a batch once the reservoir is low, if it has ever been drawn from (the
    /// maintenance pass, and the maintenance thread when a take asks).
    pub(crate) fn top_up(&self) {
        // Begun: a take from here on that finds it low asks again. A swap, not a
        // store: a claim that found a request pending (its swap read `true`) marked
        // its shard's index spare as wanted before; reading its write here makes
        // that mark visible to the maintenance thread's look right after (a plain
        // store would not order them on weakly ordered processors, and the spare
        // would wait for the next periodic pass).
        self.asked.swap(false, std::sync::atomic::Ordering::AcqRel);
        if !self.drawn.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        let have = self.len();
        if have >= self.low() {
            return;
        }
        let made = self.make_batch(have);
        self.stock(made);
    }

    /// Heap bytes held: the chunks not handed out yet, and the slack at the end of
    /// each region (the regions' handed-out chunks are counted by the slabs that
    /// hold them).
    pub(crate) fn bytes(&self) -> usize {
        let slack = self.regions.lock().len()
            * (REGION_BYTES - REGION_CHUNKS * std::mem::size_of::<[Entry; CHUNK]>());
        let chunks = self.chunks.lock();
        chunks.capacity() * std::mem::size_of::<Chunk>()
            + chunks.len() * CHUNK * std::mem::size_of::<Entry>()
            + slack
    }
}

/// Entries in fixed-size chunks, with a free list threaded through `next`.
///
/// In order (`repr(C)`): what every claim reads or writes first, then what only a
/// growing slab touches (see [`Shard`]).
#[derive(Debug, Default)]
#[repr(C)]
pub(crate) struct Slab {
    /// Fixed-length arrays, so an index within a chunk (masked) needs no bounds check.
    chunks: Vec<Chunk>,
    /// Each lane's allocation state: its free list, its next fresh slot, its tail.
    lanes: [LaneSlots; LANES],
    /// Slots in all chunks (`chunks.len() * CHUNK`): every entry index is below it.
    len: u32,
    /// A chunk was added since the address table was last published.
    dirty: bool,
    /// The chunks' addresses, in order: the table lock-free readers use (they never
    /// touch `chunks`, which grows as a `Vec` does). It grows by hand, see
    /// [`Slab::push_chunk`].
    addrs: Vec<usize>,
    /// Address tables outgrown while the shard's lock was held, kept until the lock
    /// holder has published the new one ([`ShardWrite`]): a lock-free reader may still
    /// be reading an old table.
    retired: Vec<Vec<usize>>,
}

/// Lanes of a shard: each thread takes one ([`lane`]), and its fresh entries go into
/// chunks of its lane and into its lane's wheel. Two threads filling one shard at once
/// then write slab lines of their own (a new entry, and the previous new entry whose
/// wheel link it takes), and each thread's entries lie in the order it claimed them,
/// as one thread's do: a replay in that order reads the lines one thread's fill would.
#[cfg(not(idem_loom))]
pub(crate) const LANES: usize = 2;
/// One under loom: its models run on small stacks, which a second wheel in every
/// shard overflows, and they do not model which lane a thread takes.
#[cfg(idem_loom)]
pub(crate) const LANES: usize = 1;
// (A power of two, so that a lane masked by `LANES - 1` needs no bounds check.)
const _: () = assert!(LANES.is_power_of_two());

/// One lane's share of a [`Slab`].
#[derive(Debug)]
#[repr(C)]
struct LaneSlots {
    /// Head of the lane's free list, or [`NIL`].
    free: u32,
    /// The lane's next fresh slot; a multiple of [`CHUNK`] (0 included) when its
    /// chunk is used up and the next allocation needs a new one.
    next: u32,
    /// Where the lane's next allocation will most likely write (an address, or 0),
    /// for claims to ask for ahead of the lock (see [`ShardSlot::prefetch_write`],
    /// which reads it without the lock: an atomic, stored by lock holders).
    tail: std::sync::atomic::AtomicUsize,
}

impl LaneSlots {
    /// Notes where the lane's next allocation will most likely write (see `tail`).
    #[inline(always)]
    fn set_tail(&self, at: usize) {
        self.tail.store(at, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Default for LaneSlots {
    fn default() -> Self {
        LaneSlots {
            free: NIL,
            next: 0,
            tail: Default::default(),
        }
    }
}

std::thread_local! {
    static LANE: std::cell::Cell<u8> = const { std::cell::Cell::new(u8::MAX) };
}

/// The calling thread's lane (see [`LANES`]): threads take the lanes in turn, at
/// their first claim; lane 0 while the thread is being torn down.
#[inline]
pub(crate) fn lane() -> usize {
    LANE.try_with(|l| match l.get() {
        u8::MAX => {
            // (Not the loom facade's: which lane a thread takes is layout only.)
            static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let lane = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % LANES;
            l.set(lane as u8);
            lane
        }
        lane => lane as usize & (LANES - 1),
    })
    .unwrap_or(0)
}

/// Puts the calling thread in lane `lane` (tests that need two threads in two lanes
/// whatever other tests' threads took).
#[cfg(test)]
pub(crate) fn set_lane(lane: usize) {
    LANE.with(|l| l.set((lane % LANES) as u8));
}

impl Slab {
    /// The lane entry `i` belongs to.
    #[inline(always)]
    fn lane_of(&self, i: u32) -> usize {
        self.chunks[(i >> CHUNK_BITS) as usize].lane()
    }

    #[inline]
    fn get(&self, i: u32) -> &Entry {
        &self.chunks[(i >> CHUNK_BITS) as usize][i as usize & (CHUNK - 1)]
    }

    /// Entry `i`'s address, for the writes below.
    #[inline(always)]
    fn entry_ptr(&mut self, i: u32) -> *mut Entry {
        self.chunks[(i >> CHUNK_BITS) as usize].entry_ptr(i as usize & (CHUNK - 1))
    }

    /// Writes `entry` into slot `i`: each word a lock-free reader reads (see
    /// [`Entry::read_racy`]) with a relaxed atomic store (a plain store on x86), so
    /// that its race with a reader's load is one the language defines; the wheel's
    /// links, which no reader reads, plainly.
    /// Returns the entry's address.
    #[inline(always)]
    fn put(&mut self, i: u32, entry: Entry) -> *mut Entry {
        let p = self.entry_ptr(i);
        #[allow(unsafe_code)]
        // SAFETY: `p` is entry `i` of a live chunk of this slab (its pointer's own
        // allocation), aligned; `&mut self` makes this the only writer.
        unsafe {
            store_racy(std::ptr::addr_of_mut!((*p).fp_lo[0]), entry.fp_lo[0]);
            store_racy(std::ptr::addr_of_mut!((*p).fp_lo[1]), entry.fp_lo[1]);
            store_racy(std::ptr::addr_of_mut!((*p).fp_mid), entry.fp_mid);
            store_racy(std::ptr::addr_of_mut!((*p).deadline), entry.deadline);
            store_racy(std::ptr::addr_of_mut!((*p).meta), entry.meta);
            std::ptr::addr_of_mut!((*p).prev).write(entry.prev);
            std::ptr::addr_of_mut!((*p).next).write(entry.next);
        }
        p
    }

    /// Sets entry `i`'s `meta` word (as [`Slab::put`] does).
    #[inline(always)]
    fn set_meta(&mut self, i: u32, meta: u32) {
        let p = self.entry_ptr(i);
        #[allow(unsafe_code)]
        // SAFETY: as in `put`.
        unsafe {
            store_racy(std::ptr::addr_of_mut!((*p).meta), meta)
        }
    }

    /// Sets entry `i`'s `meta` word to `f` of it.
    #[inline(always)]
    fn update_meta(&mut self, i: u32, f: impl FnOnce(u32) -> u32) {
        let p = self.entry_ptr(i);
        #[allow(unsafe_code)]
        // SAFETY: as in `put`; the plain read races nothing (only this writer
        // stores to the entry).
        unsafe {
            let meta = std::ptr::addr_of_mut!((*p).meta);
            store_racy(meta, f(meta.read()));
        }
    }

    /// Sets entry `i`'s deadline (as [`Slab::put`] does).
    #[inline(always)]
    fn set_deadline(&mut self, i: u32, deadline: u32) {
        let p = self.entry_ptr(i);
        #[allow(unsafe_code)]
        // SAFETY: as in `put`.
        unsafe {
            store_racy(std::ptr::addr_of_mut!((*p).deadline), deadline)
        }
    }

    /// Takes a slot of `lane` for `entry`: the head of its free list, else its next
    /// fresh slot (in a new chunk, if its chunk is used up: [`Slab::new_lane_chunk`],
    /// which takes the lane's `spare` if it has one). Inlined but for the new chunk,
    /// so that a claim passes its entry in registers.
    #[inline(always)]
    fn alloc(&mut self, entry: Entry, lane: usize, spare: &mut Option<Chunk>) -> u32 {
        let i = self.lanes[lane].free;
        if i != NIL {
            let free = self.get(i).next;
            self.lanes[lane].free = free;
            let _ = self.put(i, entry);
            let tail = match free {
                NIL => 0,
                f => self.get(f) as *const Entry as usize,
            };
            self.lanes[lane].set_tail(tail);
            return i;
        }
        if (self.lanes[lane].next as usize).is_multiple_of(CHUNK) {
            self.new_lane_chunk(lane, spare);
        }
        let i = self.lanes[lane].next;
        self.lanes[lane].next += 1;
        let e = self.put(i, entry);
        // The next slot, if it is in this chunk; past its end the address is only
        // a wasted prefetch.
        self.lanes[lane].set_tail(e as usize + std::mem::size_of::<Entry>());
        self.prefetch_ahead(i);
        i
    }

    /// Gives `lane` a new chunk (its spare, if there is one), its first slot the
    /// lane's next fresh slot.
    #[cold]
    #[inline(never)]
    fn new_lane_chunk(&mut self, lane: usize, spare: &mut Option<Chunk>) {
        let chunk = spare.take().unwrap_or_else(new_chunk);
        self.lanes[lane].next = self.len;
        self.push_chunk(chunk, lane);
    }

    /// Asks for the cache line that the slots after `i` reach into, three entries
    /// (84 bytes, so at least the next line) ahead. A shard's fresh entries are
    /// written in slab order, into lines that were last written when their chunk was
    /// made, long before: without this, the store into each new line misses, and the
    /// lock's release (a locked instruction, which waits for earlier stores) waits
    /// with it.
    #[inline]
    fn prefetch_ahead(&self, i: u32) {
        let ahead = (i as usize & (CHUNK - 1)) + 3;
        if ahead < CHUNK {
            let chunk = &self.chunks[(i >> CHUNK_BITS) as usize];
            index::prefetch_line(&chunk[ahead] as *const Entry as usize);
        }
    }

    /// Appends `chunk` to the slab, and its address to the address table. A full
    /// address table moves to a copy twice its size by hand, not by `Vec::push`,
    /// which would free the old one at once: the old table, untouched, is retired
    /// instead, and freed once no lock-free reader can hold it.
    fn push_chunk(&mut self, mut chunk: Chunk, lane: usize) {
        // Its entries are the lane's: allocated by it, given back to its free list,
        // linked in its wheel.
        chunk.1 = (chunk.1 & CARVED) | lane as u8;
        if self.addrs.len() == self.addrs.capacity() {
            let mut bigger = Vec::with_capacity((self.addrs.capacity() * 2).max(4));
            bigger.extend_from_slice(&self.addrs);
            let old = std::mem::replace(&mut self.addrs, bigger);
            if old.capacity() > 0 {
                self.retired.push(old);
            }
        }
        self.addrs.push(chunk.addr());
        self.chunks.push(chunk);
        self.len += CHUNK as u32;
        self.dirty = true;
    }

    /// The address table as lock-free readers see it: where it starts, and how many
    /// chunk addresses it holds.
    fn table(&self) -> (usize, usize) {
        (self.addrs.as_ptr() as usize, self.addrs.len())
    }

    fn release(&mut self, i: u32) {
        let lane = self.lane_of(i);
        let next = self.lanes[lane].free;
        let _ = self.put(
            i,
            Entry {
                next,
                ..Entry::FREE
            },
        );
        self.lanes[lane].free = i;
        let tail = self.get(i) as *const Entry as usize;
        self.lanes[lane].set_tail(tail);
    }

    /// Every entry in use from slot `from` on but `except`, with its index hash, in
    /// slab order (a sequential read), for an index growth. Read as the growth places
    /// them, not collected first: a list of a growing shard's entries is a fresh
    /// allocation of 16 bytes an entry (700 KB at 43,000 entries), whose page faults
    /// took longer than placing the entries.
    fn live_from(&self, from: u32, except: u32) -> impl Iterator<Item = (u64, u32)> + '_ {
        let len = self.len as usize;
        let from = from as usize;
        self.chunks
            .iter()
            .enumerate()
            .skip(from >> CHUNK_BITS)
            .flat_map(move |(c, chunk)| {
                let base = c * CHUNK;
                let n = len.saturating_sub(base).min(CHUNK);
                let first = from.saturating_sub(base).min(n);
                chunk[first..n]
                    .iter()
                    .enumerate()
                    .map(move |(j, e)| ((base + first + j) as u32, e))
            })
            .filter(move |&(i, e)| e.state() != STATE_FREE && i != except)
            .map(|(i, e)| (e.lo(), i))
    }

    /// Whether `lane`, the lane of a slot just handed out, is growing into the last
    /// slots of its chunk: its fresh slots have filled three quarters of that
    /// chunk. A shard of a few hundred keys never asks. The shard asks for a spare
    /// then if the lane has none ([`Shard::spares`]).
    /// The claimant that is told so (in [`ShardClaim::Acquired`]) allocates a chunk
    /// after releasing the lock and hands it over with [`Shard::give_spare`]: a new
    /// chunk's allocation and first touch (page faults, several microseconds) then
    /// happen outside the lock, where they delay no other thread's claim of this
    /// shard.
    #[inline]
    fn wants_spare(&self, lane: usize) -> bool {
        // Asked once per chunk, at the slot that fills three quarters of it (the
        // lane's next fresh slot follows it).
        let next = self.lanes[lane].next as usize;
        (next + CHUNK / 4).is_multiple_of(CHUNK)
    }

    fn bytes(&self) -> usize {
        self.chunks.capacity() * std::mem::size_of::<Chunk>()
            + self.addrs.capacity() * std::mem::size_of::<usize>()
            + self.chunks.len() * CHUNK * std::mem::size_of::<Entry>()
    }
}

impl Links for Slab {
    #[inline]
    fn next(&self, i: u32) -> u32 {
        self.get(i).next
    }
    #[inline]
    fn set_next(&mut self, i: u32, v: u32) {
        let p = self.entry_ptr(i);
        #[allow(unsafe_code)]
        // SAFETY: as in `Slab::put`; no reader reads the links.
        unsafe {
            std::ptr::addr_of_mut!((*p).next).write(v)
        }
    }
    #[inline]
    fn prev(&self, i: u32) -> u32 {
        self.get(i).prev
    }
    #[inline]
    fn set_prev(&mut self, i: u32, v: u32) {
        let p = self.entry_ptr(i);
        #[allow(unsafe_code)]
        // SAFETY: as in `Slab::put`; no reader reads the links.
        unsafe {
            std::ptr::addr_of_mut!((*p).prev).write(v)
        }
    }
    #[inline]
    fn deadline(&self, i: u32) -> u32 {
        self.get(i).deadline
    }
}

/// A value beside every slab entry of a shard, in blocks of [`CHUNK`] made on the
/// first write into their range: payload fingerprints, a sliding window's completion
/// times (every done entry of such a namespace has one), stored results. A slot costs
/// its `T` (8 bytes for a `u64`, 16 for a result's `Option<Arc<[u8]>>`) where a
/// side-table row took 16 to 32 at up to 7/8 load (27 and 52 bytes a key measured at
/// 1 M keys for a payload and a completion time), and the slots of a block cost as
/// much where few entries of its range have a value. A slot keeps what its last entry
/// stored unless taken: a value is read only where the entry's flags say it has one
/// (`PAYLOAD_BIT`, `EXTRA_BIT` for a result) or, for a sliding window's completion
/// time, once the entry is done (its completion, or its read-back from the durable
/// tier, stores it first).
#[derive(Debug)]
pub(crate) struct Column<T> {
    blocks: Vec<Option<Box<[T; CHUNK]>>>,
}

impl<T> Default for Column<T> {
    fn default() -> Self {
        Column { blocks: Vec::new() }
    }
}

impl<T: Default> Column<T> {
    /// Slot `idx`, or `None` if its block was never made.
    fn slot(&self, idx: u32) -> Option<&T> {
        let block = self.blocks.get(idx as usize >> CHUNK_BITS)?.as_ref()?;
        Some(&block[idx as usize & (CHUNK - 1)])
    }

    /// Slot `idx`, making its block if needed.
    fn slot_mut(&mut self, idx: u32) -> &mut T {
        let b = idx as usize >> CHUNK_BITS;
        if self.blocks.len() <= b {
            self.blocks.resize_with(b + 1, || None);
        }
        let block =
            self.blocks[b].get_or_insert_with(|| Box::new(std::array::from_fn(|_| T::default())));
        &mut block[idx as usize & (CHUNK - 1)]
    }

    /// Slot `idx`, if its block was made.
    fn made_slot_mut(&mut self, idx: u32) -> Option<&mut T> {
        let block = self.blocks.get_mut(idx as usize >> CHUNK_BITS)?.as_mut()?;
        Some(&mut block[idx as usize & (CHUNK - 1)])
    }

    /// Heap bytes: the blocks and the table of them (not what a `T` points to).
    fn bytes(&self) -> usize {
        let made = self.blocks.iter().filter(|b| b.is_some()).count();
        made * std::mem::size_of::<[T; CHUNK]>()
            + self.blocks.capacity() * std::mem::size_of::<Option<Box<[T; CHUNK]>>>()
    }
}

impl Column<u64> {
    /// Slot `idx` as stored (for a slot its entry says is set), or `None` if its
    /// block was never made.
    fn value(&self, idx: u32) -> Option<u64> {
        self.slot(idx).copied()
    }

    /// Stores `v` in slot `idx`.
    fn set(&mut self, idx: u32, v: u64) {
        *self.slot_mut(idx) = v;
    }
}

/// A shard's stored results: a column of them, and the bytes of their allocations.
#[derive(Debug, Default)]
pub(crate) struct Results {
    column: Column<Option<std::sync::Arc<[u8]>>>,
    /// What the results held here allocate, as [`result_allocation`] counts it.
    bytes: usize,
}

impl Results {
    /// Entry `idx`'s result, if it has one.
    fn get(&self, idx: u32) -> Option<std::sync::Arc<[u8]>> {
        self.column.slot(idx)?.clone()
    }

    /// Stores `r` as entry `idx`'s result (dropping one it had).
    fn set(&mut self, idx: u32, r: std::sync::Arc<[u8]>) {
        self.bytes += result_allocation(r.len());
        if let Some(old) = self.column.slot_mut(idx).replace(r) {
            self.bytes -= result_allocation(old.len());
        }
    }

    /// Drops entry `idx`'s result, if it has one.
    fn take(&mut self, idx: u32) {
        if let Some(old) = self.column.made_slot_mut(idx).and_then(Option::take) {
            self.bytes -= result_allocation(old.len());
        }
    }

    /// Heap bytes: the column's and the results'.
    fn bytes(&self) -> usize {
        self.column.bytes() + self.bytes
    }
}

/// Counters of one shard, updated under its lock and summed by `stats()`. The three
/// every claim and completion write come first (see [`Shard`]).
#[derive(Debug, Clone, Copy, Default)]
#[repr(C)]
pub(crate) struct Counters {
    pub(crate) acquired: u64,
    pub(crate) duplicates: u64,
    pub(crate) completions: u64,
    pub(crate) in_progress: u64,
    pub(crate) payload_mismatches: u64,
    pub(crate) expirations: u64,
    pub(crate) capacity_refusals: u64,
    pub(crate) releases: u64,
    pub(crate) lease_lost: u64,
    pub(crate) forgotten: u64,
    pub(crate) evictions: u64,
}

/// "Now", in the forms a shard needs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Now {
    pub(crate) ms: u64,
    pub(crate) tick: u64,
}

/// Per-namespace constants a shard operation needs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Params {
    pub(crate) epoch_ms: u64,
    pub(crate) tick_ms: u64,
    pub(crate) ttl_ms: u64,
    pub(crate) lease_ms: u64,
    pub(crate) sliding: bool,
    /// With a durable tier: how long a completed key stays a duplicate there.
    pub(crate) retention_ms: Option<u64>,
}

impl Params {
    /// The first tick at which something that lasts `span_ms` from `now` has expired
    /// (rounded up: never early, at most one tick late).
    #[inline]
    pub(crate) fn deadline(&self, now: Now, span_ms: u64) -> u64 {
        let rel = now.ms.saturating_sub(self.epoch_ms).saturating_add(span_ms);
        if self.tick_ms == 1 {
            // The default tick: no division on the claim path.
            rel
        } else {
            rel.div_ceil(self.tick_ms)
        }
    }

    /// With a durable tier: when a done key's durable record must expire so that it
    /// covers a hot deadline of `hot_ms`. Retention after completion, extended by
    /// whole retentions for a sliding window whose sightings pushed the hot deadline
    /// past it: a sighting that moves the hot deadline into a later period rewrites
    /// the record (see [`Extension`]), so a key seen steadily costs about one durable
    /// write per retention. `None` without a durable tier.
    #[inline]
    pub(crate) fn durable_until(&self, completed_at_ms: u64, hot_ms: u64) -> Option<u64> {
        let r = self.retention_ms?.max(1);
        let first = completed_at_ms.saturating_add(r);
        let periods = hot_ms.saturating_sub(first).div_ceil(r);
        Some(first.saturating_add(periods.saturating_mul(r)))
    }

    /// With a durable tier: when a done key's record expires for a hot deadline of
    /// `hot_ms` (rounded up to a tick) with completion at `completed_at_ms`: the
    /// retention periods the window needs, its end taken as the earliest it can be
    /// (a tick before the rounded deadline), and never before the hot deadline
    /// itself. The record written and the expiry reported are both this, so they
    /// agree, and the record lasts at most one tick past its retention periods.
    /// `None` without a durable tier.
    #[inline]
    pub(crate) fn record_until(&self, completed_at_ms: u64, hot_ms: u64) -> Option<u64> {
        let window_end = hot_ms.saturating_sub(self.tick_ms - 1);
        Some(self.durable_until(completed_at_ms, window_end)?.max(hot_ms))
    }

    /// The first tick at or after wall-clock `ms`.
    #[inline]
    #[cfg_attr(not(feature = "durable"), allow(dead_code))]
    pub(crate) fn tick_at(&self, ms: u64) -> u64 {
        ms.saturating_sub(self.epoch_ms).div_ceil(self.tick_ms)
    }

    #[inline]
    pub(crate) fn tick_to_ms(&self, tick: u64) -> u64 {
        self.epoch_ms
            .saturating_add(tick.saturating_mul(self.tick_ms))
    }

    #[inline]
    pub(crate) fn now(&self, ms: u64) -> Now {
        Now {
            ms,
            tick: match self.tick_ms {
                1 => ms.saturating_sub(self.epoch_ms),
                t => ms.saturating_sub(self.epoch_ms) / t,
            },
        }
    }
}

/// Heap bytes of a SwissTable with room for `capacity` items of `slot` bytes: it keeps
/// at most 7/8 of its power-of-two buckets full, and has a control byte per bucket.
fn table_bytes(capacity: usize, slot: usize) -> usize {
    let buckets = match capacity {
        0 => 0,
        c if c < 8 => c + 1,
        c => (c * 8 / 7).next_power_of_two(),
    };
    buckets * (slot + 1)
}

#[inline]
fn expired(deadline: u32, now_tick: u64) -> bool {
    (now_tick as u32).wrapping_sub(deadline) as i32 >= 0
}

/// A held claim, as its guard remembers it. The deadline is kept whole (not 32-bit),
/// so a guard's lease check is exact however long it was held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Lease {
    pub(crate) idx: u32,
    pub(crate) token: u32,
    pub(crate) deadline: u64,
}

/// A completed key as the durable tier holds it.
#[derive(Debug, Clone)]
pub(crate) struct DurableDone {
    pub(crate) completed_at_ms: u64,
    pub(crate) expires_at_ms: u64,
    pub(crate) payload: Option<u64>,
    pub(crate) result: Option<std::sync::Arc<[u8]>>,
}

/// The durable tier's answer about a key the hot tier does not hold.
#[derive(Debug, Clone)]
#[cfg_attr(not(feature = "durable"), allow(dead_code))]
pub(crate) enum DurableLookup {
    Absent,
    Done(DurableDone),
    /// The store failed and the namespace fails closed (the error is kept by the
    /// caller).
    Failed,
}

/// The hot deadline of a key the durable tier says is done until `expires_at_ms`:
/// the TTL, but never past retention.
fn hot_deadline(p: &Params, now: Now, expires_at_ms: u64) -> u64 {
    p.deadline(
        now,
        p.ttl_ms.min(expires_at_ms.saturating_sub(now.ms).max(1)),
    )
}

/// The last tick that ends no later than wall-clock `ms`: an entry whose deadline
/// it is reads as expired from `ms` on (deadlines rounded up to a coarse tick would
/// hold it up to a tick longer).
fn last_tick_by(p: &Params, ms: u64) -> u64 {
    ms.saturating_sub(p.epoch_ms) / p.tick_ms
}

/// The hot deadline of a key found done in the durable tier: a sighting of a sliding
/// window restarts its TTL (the record is then extended if it would end first, see
/// [`Extension`]); a fixed window keeps what is left of it, and so does a sliding
/// one when it may not `restart` (its key is being forgotten: no rewrite may begin).
///
/// A fixed window still within its TTL is held until the TTL's end, as if it had
/// been completed in this run: its completion time then follows from its deadline,
/// as a completion's does, and needs no side-table row (see [`found_needs_extra`]).
/// One past its TTL (but within retention) is held a TTL from now.
fn found_deadline(p: &Params, now: Now, d: &DurableDone, restart: bool) -> u64 {
    if p.sliding && restart {
        return p.deadline(now, p.ttl_ms);
    }
    let window_end = d.completed_at_ms.saturating_add(p.ttl_ms);
    // (A completion later than now, a clock set back since, is held a TTL from now
    // at most, as before: never further ahead than a TTL.)
    let deadline = if !p.sliding
        && d.completed_at_ms <= now.ms
        && window_end > now.ms
        && window_end <= d.expires_at_ms
    {
        p.tick_at(window_end)
    } else {
        hot_deadline(p, now, d.expires_at_ms)
    };
    // Never past the record: on a coarse tick, the rounded-up deadline could answer
    // `Duplicate` after the record expired, where a restart (or the compaction
    // filter) finds the key absent. In the record's last part of a tick the entry
    // reads as expired at once, and each claim then reads the record.
    deadline.min(last_tick_by(p, d.expires_at_ms))
}

/// Whether an entry made at `now` for a key found done in the durable tier, with hot
/// deadline `deadline`, needs its completion time kept, in a namespace with fixed
/// windows: where the completion time that [`done_times`] would derive from the
/// deadline is not the record's (a window past its TTL; a tick coarser than a
/// millisecond that the completion time does not fall on). (A sliding window keeps
/// every completion time in its column.)
fn found_needs_extra(p: &Params, now: Now, d: &DurableDone, deadline: u64) -> bool {
    derived_completion(p, now, p.tick_to_ms(deadline)) != d.completed_at_ms
}

/// What done entries read back from the durable tier keep beside them where their
/// deadline does not give it back (`EXTRA_BIT` set; few, and only with a durable
/// tier): `Shard::read_back_times`.
#[derive(Debug, Default)]
struct ReadBacks {
    /// In a namespace of fixed windows, the completion times that the deadline does
    /// not give back (see `found_needs_extra`). In a namespace of sliding windows, the
    /// record's expiry where the hot tier's reckoning from the deadline falls short of
    /// it: a record extended on another run's ticks may have been rounded past a
    /// retention boundary that this run's ticks do not pass.
    times: HashMap<u32, u64>,
    /// In a namespace of fixed windows, the record's expiry where this run's
    /// retention, counted from the completion, does not give it back within the tick
    /// an answer may read early: a record written under another retention (the
    /// configuration changed between runs). A longer one would have the hot tier
    /// answer an expiry the record does not reach, and the key would be claimable
    /// before it; a shorter one an expiry whole retentions early.
    expiries: HashMap<u32, u64>,
}

impl ReadBacks {
    fn remove(&mut self, idx: u32) {
        self.times.remove(&idx);
        if !self.expiries.is_empty() {
            self.expiries.remove(&idx);
        }
    }

    fn bytes(&self) -> usize {
        table_bytes(self.times.capacity(), std::mem::size_of::<(u32, u64)>())
            + table_bytes(self.expiries.capacity(), std::mem::size_of::<(u32, u64)>())
    }
}

/// Whether a sliding window read back from the durable tier, restarted to hot
/// deadline `when`, outlasts its record.
fn needs_rewrite(p: &Params, d: &DurableDone, when: u64) -> bool {
    p.record_until(d.completed_at_ms, p.tick_to_ms(when))
        .is_some_and(|u| u > d.expires_at_ms)
}

/// What a duplicate answers: when the key was completed, when it stops being a
/// duplicate (both wall-clock ms) and its stored result.
pub(crate) type DoneView = (u64, u64, Option<std::sync::Arc<[u8]>>);

/// A forget in progress in a shard ([`Shard::begin_forget`]), while it deletes its
/// key's durable records.
#[derive(Debug)]
struct ForgetNote {
    /// Names the note for its forget's later calls (two forgets of one key at once
    /// have a note each).
    id: u32,
    fp: Fp,
    /// The entry and token of a claim whose completion (or extension) a forget of
    /// the key refused meanwhile: a forget whose delete fails gives it up.
    refused: Option<(u32, u32)>,
    /// Claims of the key acquired since the note began (wrapping; see
    /// [`Shard::hold_new_claim`]): a forget that finds the count moved since before
    /// its delete deletes again, since such a claim's marker may have been written
    /// after the delete.
    claims: u32,
    /// New claims of the key answer `InProgress` ([`Shard::close_forget`]).
    closed: bool,
}

/// What a claim found, as the shard reports it.
#[derive(Debug)]
pub(crate) enum ShardClaim {
    Acquired {
        lease: Lease,
        /// The slab may need a chunk soon: see [`Slab::wants_spare`].
        wants_spare: bool,
        /// The index has just reached the mark where it asks for a spare array for
        /// its next doubling: see [`index::Index::spare_wanted`].
        wants_index_spare: bool,
        /// A small index has just reached that mark, or a large one its late mark
        /// with no spare made yet: the claimant makes the spare of this many
        /// buckets after letting the lock go, and gives it to the shard (see
        /// [`index::Index::small_spare_wanted`], [`index::Index::at_late_mark`]).
        makes_index_spare: Option<usize>,
    },
    InProgress {
        lease_expires_at_ms: u64,
    },
    Duplicate {
        completed_at_ms: u64,
        expires_at_ms: u64,
        result: Option<std::sync::Arc<[u8]>>,
        /// A sliding window's sighting that the durable record must follow.
        extend: Option<Extension>,
        /// As [`ShardClaim::Acquired`]'s: the done record read back from the durable
        /// tier and kept brought a small index to its mark (or a large one to its
        /// late mark).
        makes_index_spare: Option<usize>,
    },
    PayloadMismatch,
    /// The key is new and the namespace has no room.
    Full,
    /// The key is a sliding window's duplicate read from the durable tier whose
    /// restarted window outlasts its record, and the hot tier has no room for the
    /// entry that a rewrite needs (see [`Extension`]).
    FullForWindow(DurableDone),
    /// The durable tier failed (fail closed).
    StoreFailed,
}

/// A sliding window's sighting moved a done key's hot deadline past what its durable
/// record covers ([`Params::durable_until`]): the record must be rewritten with the
/// later expiry, or a restart (or the entry leaving a full hot tier) would end the
/// window early. The entry is marked completing until [`Shard::finish_extension`], so
/// that `forget` waits for the rewrite and expiry passes it by.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Extension {
    pub(crate) idx: u32,
    pub(crate) token: u32,
    pub(crate) completed_at_ms: u64,
    /// The record's new expiry.
    pub(crate) expires_ms: u64,
    pub(crate) payload: Option<u64>,
    /// The hot deadline to go back to if the rewrite fails (ticks), or `None` to drop
    /// the entry then.
    fallback: Option<u64>,
    /// The entry's completion (or a rewrite after it) was decided from the hot tier
    /// alone (the store refusing, fail open): this record may be the first the store
    /// takes of it, and settles that claim's markers as its completion would have.
    /// Any other rewrite settles none (a marker of the key left then is another
    /// claim's).
    pub(crate) settles: bool,
}

impl Extension {
    /// Whether the sighting read the record from the durable tier (and compared its
    /// expiry) just before: the rewrite then needs no second read.
    pub(crate) fn read_back(&self) -> bool {
        self.fallback.is_none()
    }
}

/// A key's state as `check` reports it.
#[derive(Debug)]
pub(crate) enum ShardState {
    InProgress {
        lease_expires_at_ms: u64,
    },
    Done {
        completed_at_ms: u64,
        expires_at_ms: u64,
        result: Option<std::sync::Arc<[u8]>>,
    },
}

/// Why a complete/release was refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    LeaseLost,
}

/// One lock shard (the namespace holds it in a [`SlotCell`]).
///
/// Besides the lock, a slot publishes what a duplicate claim needs to read the shard
/// without taking it (see [`ShardSlot::optimistic_duplicate`]): the write sequence,
/// where the index's buckets and the slab's chunk-address table are, and the
/// wheel's tick.
/// The lock is taken through [`ShardSlot::lock`], whose guard keeps the sequence and
/// the publication up to date.
///
/// The fields are laid out in order (`repr(C)`). The first line holds what only a
/// growing shard or a moving wheel writes (where its index and its slab are, the
/// wheel's tick), so that a claim of any thread finds it in its own cache and can ask
/// for the key's bucket at once. The next lines hold everything a lock holder writes
/// on every acquisition (the lock word, the sequence), then the shard,
/// whose own hot fields come first (see [`Shard`]): two threads taking turns at a
/// shard pass those few lines between their cores, and [`ShardSlot::prefetch_write`]
/// asks for them early.
#[derive(Debug)]
#[repr(C)]
pub(crate) struct ShardSlot {
    /// Read by every claim, written only when the shard grows or its wheel moves.
    published: Published,
    /// Odd while a lock holder may be changing the shard.
    seq: seq::Seq,
    /// Threads that found the lock taken and wait for it (see [`ShardSlot::lock`]).
    /// Written only then; it shares its line with the lock word, so a waiter's count
    /// takes that line from the holder once, mid-hold, as its spinning on the lock
    /// word does anyway.
    waiting: AtomicUsize,
    shard: Mutex<Shard>,
}

/// A [`ShardSlot`] as the namespace's array holds it: cache-line aligned, and padded
/// to an odd number of lines. Slots a power of two of lines apart would put the same
/// line of every slot (the lock word, say) into the same few sets of each cache,
/// where the shards' hot lines evict one another (a namespace has 32 to 1024
/// shards); an odd stride spreads them over every set.
#[derive(Debug)]
#[repr(C, align(64))]
pub(crate) struct SlotCell {
    slot: ShardSlot,
    _stagger: [u8; STAGGER],
}

/// The padding that makes a [`SlotCell`] an odd number of cache lines long.
const STAGGER: usize = if std::mem::size_of::<ShardSlot>()
    .div_ceil(64)
    .is_multiple_of(2)
{
    64
} else {
    0
};

const _: () = assert!(std::mem::size_of::<SlotCell>() / 64 % 2 == 1);

impl SlotCell {
    /// `slot`, in a cell of its own.
    pub(crate) fn new(slot: ShardSlot) -> Self {
        SlotCell {
            slot,
            _stagger: [0; STAGGER],
        }
    }
}

impl std::ops::Deref for SlotCell {
    type Target = ShardSlot;
    #[inline]
    fn deref(&self) -> &ShardSlot {
        &self.slot
    }
}

/// What a shard's lock holder publishes for readers without the lock, on a cache line
/// of its own.
#[derive(Debug)]
#[repr(C, align(64))]
pub(crate) struct Published {
    /// The shard index's [`index::Index::hint`], republished by the lock holder
    /// whenever the index makes a new bucket array (it grew, or rebuilt for a wider
    /// slab index), read without the lock to [`prefetch`] a key's bucket.
    pub(crate) hint: AtomicUsize,
    /// The slab's chunk address table: where it starts, and how many addresses it
    /// holds (published in that order; read in the other).
    chunk_table: std::sync::atomic::AtomicUsize,
    chunk_count: std::sync::atomic::AtomicUsize,
    /// Bytes of outgrown tables retired and not yet freed (`Stats::retired_bytes`).
    retired_bytes: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    /// The wheel's current tick, as of the last lock holder. Stored only when it
    /// moved (the wheel advances in maintenance passes, not on every claim), so this
    /// line stays shared between the cores that read it.
    tick: std::sync::atomic::AtomicU64,
}

/// How many cache lines after the published one a claim and its completion write
/// in the slot (the lock word, the shard's hot fields, the wheel's time and
/// occupancy): see [`ShardSlot::prefetch_write`].
const HOT_LINES: usize = 6;

impl ShardSlot {
    /// A shard whose index has room for `room` entries before it first grows, or
    /// `None` if that index cannot be allocated.
    pub(crate) fn new(now_tick: u64, room: usize) -> Option<Self> {
        let shard = Shard::new(now_tick, room)?;
        let hint = if room > 0 { shard.index.hint() } else { 0 };
        Some(ShardSlot {
            shard: Mutex::new(shard),
            seq: seq::Seq::default(),
            waiting: AtomicUsize::new(0),
            published: Published {
                hint: AtomicUsize::new(hint),
                chunk_table: std::sync::atomic::AtomicUsize::new(0),
                chunk_count: std::sync::atomic::AtomicUsize::new(0),
                retired_bytes: Default::default(),
                tick: std::sync::atomic::AtomicU64::new(now_tick),
            },
        })
    }

    /// The shard index's [`index::Index::hint`] as last published (see [`prefetch`]).
    #[inline]
    pub(crate) fn hint(&self) -> usize {
        self.published
            .hint
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Asks for the lines a claim writes in this slot (the lock word and the shard's
    /// hot fields) in the state a write needs, ahead of taking the lock. When another
    /// core took the shard last, those lines are in its cache: asked for together,
    /// their transfers overlap each other and the key's bucket miss, instead of
    /// following one another inside the lock.
    /// `lane` is the calling thread's ([`lane`]).
    #[inline]
    pub(crate) fn prefetch_write(&self, lane: usize) {
        let base = (self as *const Self as usize) + std::mem::size_of::<Published>();
        for line in 0..HOT_LINES {
            index::prefetch_line_for_write(base + line * 64);
        }
        // The slab line the claim's new entry (and its wheel neighbour, its lane's
        // previous new entry) will be written in, when the claim is a fresh one.
        let tail = self.lane_tail(lane);
        if tail != 0 {
            index::prefetch_line_for_write(tail);
            index::prefetch_line_for_write(tail + std::mem::size_of::<Entry>() - 1);
        }
    }

    /// Where lane `lane`'s next entry will most likely go (`LaneSlots::tail`), read
    /// without the lock.
    #[inline(always)]
    #[cfg(not(idem_loom))]
    fn lane_tail(&self, lane: usize) -> usize {
        let at = self.shard.data_ptr() as usize
            + std::mem::offset_of!(Shard, slab)
            + std::mem::offset_of!(Slab, lanes)
            + lane * std::mem::size_of::<LaneSlots>()
            + std::mem::offset_of!(LaneSlots, tail);
        #[allow(unsafe_code)]
        // SAFETY: `at` is the `tail` field of lane `lane` (below `LANES`: `lane()`)
        // of the shard inside this slot's mutex, which lives as long as `self`; the
        // field is an atomic, which a lock holder writes only by atomic stores, so
        // reading it without the lock is a race the memory model defines.
        unsafe { &*(at as *const std::sync::atomic::AtomicUsize) }.load(Ordering::Relaxed)
    }

    /// Under loom the slot's mutex hands out no address: no tail is prefetched.
    #[cfg(idem_loom)]
    fn lane_tail(&self, _lane: usize) -> usize {
        0
    }

    /// Asks, like [`ShardSlot::prefetch_write`], for the wheel bucket head that an
    /// entry due at tick `when` will be linked under: the one line of the wheel a
    /// schedule writes, found from the tick the last lock holder published, in the
    /// wheel of `lane` (the calling thread's).
    #[cfg(not(idem_loom))]
    #[inline]
    pub(crate) fn prefetch_schedule(&self, when: u64, lane: usize) {
        let current = self
            .published
            .tick
            .load(std::sync::atomic::Ordering::Relaxed);
        let wheel = self.shard.data_ptr() as usize
            + std::mem::offset_of!(Shard, wheels)
            + lane * std::mem::size_of::<Wheel>();
        index::prefetch_line_for_write(wheel + wheel::head_offset(current, when));
    }

    /// Bytes of outgrown tables retired and not yet freed.
    pub(crate) fn retired_bytes(&self) -> usize {
        self.published
            .retired_bytes
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Takes the shard's lock. Until the guard drops, lock-free readers of the shard
    /// find the write sequence odd and fall back to the lock.
    #[inline]
    pub(crate) fn lock(&self) -> ShardWrite<'_> {
        // `try_lock` reads the lock word before it writes it: asked for in the state a
        // write needs first, a line another core holds comes over once, not twice.
        // (Claims have asked already: `prefetch_write`; then it costs nothing.)
        index::prefetch_line_for_write(std::ptr::from_ref(&self.shard) as usize);
        let shard = match self.shard.try_lock() {
            Some(shard) => shard,
            None => self.wait_for_lock(),
        };
        #[cfg(not(idem_loom))]
        let seq = self.seq.write_begin();
        ShardWrite {
            slot: self,
            shard,
            #[cfg(not(idem_loom))]
            seq,
        }
    }

    /// The lock, for a thread that found it taken: counted in `waiting` while it
    /// waits, so that a holder making a long run of short holds (the maintenance
    /// pass's expiry batches) sees it and lets it in (see [`ShardSlot::wanted`]).
    #[cold]
    #[inline(never)]
    fn wait_for_lock(&self) -> crate::sync::MutexGuard<'_, Shard> {
        self.waiting.fetch_add(1, Ordering::Relaxed);
        let shard = self.shard.lock();
        self.waiting.fetch_sub(1, Ordering::Relaxed);
        shard
    }

    /// Whether some thread waits for this shard's lock (or has just taken it after
    /// waiting): a holder that would take the lock again at once should let it go
    /// and come back later instead.
    #[inline]
    pub(crate) fn wanted(&self) -> bool {
        self.waiting.load(Ordering::Relaxed) != 0
    }

    /// Counts (or stops counting) a waiter that is not there, for tests.
    #[cfg(test)]
    pub(crate) fn pretend_waiting(&self, waits: bool) {
        if waits {
            self.waiting.fetch_add(1, Ordering::Relaxed);
        } else {
            self.waiting.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// The answer to a claim of `fp` (with no payload) if the hot tier holds it done
    /// and live, read without the shard's lock; `None` when it does not, or when the
    /// read cannot tell (a writer was inside, the entry has a stored result or a kept
    /// time or is being completed, the window slides): the claim
    /// then takes the lock. `claim_batch` asks it first for every key.
    ///
    /// Nothing is written: two threads answering duplicates of one shard share its
    /// lines instead of passing the lock's line between their cores.
    ///
    /// The reads are relaxed atomic loads of words a lock holder may be writing at the
    /// same time, with relaxed atomic stores of the same words (see
    /// `Entry::read_racy` and `index::Writer`), so the race is one the memory model
    /// defines; a value read while a writer was inside (an entry's words from two
    /// different writes) is never used, because the sequence check refuses it.
    /// Memory safety does not depend on what the racy reads return, only on where
    /// they read: the bucket array (from the published hint) and the chunk-address
    /// table are retired, not freed, when replaced, and freed only once every reader
    /// pinned before the replacement has unpinned (`pin`); chunks live as long as the
    /// shard; a chunk number is checked against the published count and an offset
    /// within a chunk is masked.
    #[cfg(not(idem_loom))]
    #[inline(always)]
    #[allow(unsafe_code)]
    pub(crate) fn optimistic_duplicate(
        &self,
        fp: Fp,
        p: &Params,
        now: Now,
        _pin: &reclaim::Pin,
    ) -> Option<DoneView> {
        use std::sync::atomic::Ordering as O;
        if p.sliding {
            return None;
        }
        let s = self.seq.read_begin()?;
        if now
            .tick
            .saturating_sub(self.published.tick.load(O::Relaxed))
            >= CATCH_UP_TICKS
        {
            return None;
        }
        let (hint, table, count) = self.published();
        let mut entry = Entry::FREE;
        let holds = |i: u32| {
            let c = (i >> CHUNK_BITS) as usize;
            if c >= count {
                return false;
            }
            // SAFETY: `c` is below the published count, so the table (alive while
            // pinned) holds a pointer to a live chunk there.
            let chunk = unsafe { *table.add(c) } as *const Entry;
            // The line after the entry's: in a replay (keys again in the order they
            // were first claimed, which is each shard's slab order), the shard's next
            // duplicate reads it. Only an address: a prefetch never faults.
            index::prefetch_line(chunk.wrapping_add(i as usize & (CHUNK - 1)) as usize + 64);
            // SAFETY: the chunk is live (above); the offset is masked to its length.
            entry = unsafe { Entry::read_racy(chunk, i) };
            entry.is(fp)
        };
        // SAFETY: see the method's documentation: the array is alive while pinned.
        let found = unsafe { index::HomeBucket::find_from(hint, fp.lo, holds) };
        found?;
        let plain = entry.meta & (STATE_MASK | COMPLETING_BIT | EXTRA_BIT) == STATE_DONE;
        if !plain || expired(entry.deadline, now.tick) {
            return None;
        }
        let (completed_at_ms, expires_at_ms) = done_times(p, now, entry.deadline, None);
        #[cfg(test)]
        if let Some(f) = BEFORE_READ_VALID.with(|h| h.borrow_mut().take()) {
            f();
        }
        self.seq
            .read_valid(s)
            .then_some((completed_at_ms, expires_at_ms, None))
    }

    /// What a lock-free reader starts from, as the last lock holder published it: the
    /// index's hint, the slab's chunk-address table and how many addresses it holds.
    #[cfg(not(idem_loom))]
    #[inline(always)]
    fn published(&self) -> (usize, *const usize, usize) {
        use std::sync::atomic::Ordering as O;
        let p = &self.published;
        let hint = p.hint.load(O::Acquire);
        let count = p.chunk_count.load(O::Acquire);
        let table = p.chunk_table.load(O::Acquire) as *const usize;
        (hint, table, count)
    }

    /// Starts loading the slab entry a claim of `fp` will most likely read (the first
    /// whose tag matches in its home bucket), if any, without the shard's lock: the
    /// second of a look-up's two cache misses, taken ahead of time by a batch. What it
    /// reads is only used as an address to prefetch, harmless whatever it is.
    #[cfg(not(idem_loom))]
    #[inline]
    #[allow(unsafe_code)]
    pub(crate) fn prefetch_entry(&self, fp: Fp, _pin: &reclaim::Pin) {
        let (hint, table, count) = self.published();
        // SAFETY: as in `optimistic_duplicate`.
        let Some(i) =
            (unsafe { index::HomeBucket::read(hint, fp.lo) }).and_then(|b| b.candidate(fp.lo))
        else {
            return;
        };
        let c = (i >> CHUNK_BITS) as usize;
        if c < count {
            // SAFETY: as in `optimistic_duplicate`; only the address is used.
            let chunk = unsafe { *table.add(c) } as *const Entry;
            let at = chunk.wrapping_add(i as usize & (CHUNK - 1)) as usize;
            // An entry is 28 bytes: it may end on the next line.
            index::prefetch_line(at);
            index::prefetch_line(at + std::mem::size_of::<Entry>() - 1);
        }
    }
}

#[cfg(all(test, not(idem_loom)))]
std::thread_local! {
    /// Run (once, on the thread that set it) by a lock-free duplicate read that found
    /// its key done and live, between its read of the entry and its check of the
    /// write sequence: what a lock holder changes there, the check must catch.
    static BEFORE_READ_VALID: std::cell::RefCell<Option<Box<dyn FnOnce()>>> =
        const { std::cell::RefCell::new(None) };
}

/// Sets what the next lock-free duplicate read on this thread runs between its read
/// of the entry and its check of the write sequence (see
/// [`ShardSlot::optimistic_duplicate`]).
#[cfg(all(test, not(idem_loom)))]
pub(crate) fn before_read_valid(f: impl FnOnce() + 'static) {
    BEFORE_READ_VALID.with(|h| *h.borrow_mut() = Some(Box::new(f)));
}

/// A held shard lock (from [`ShardSlot::lock`]). While it lives the slot's write
/// sequence is odd; when it drops, whatever moved is published (a grown index, a new
/// chunk), what it replaced is retired, and the sequence is even again.
pub(crate) struct ShardWrite<'a> {
    slot: &'a ShardSlot,
    shard: crate::sync::MutexGuard<'a, Shard>,
    #[cfg(not(idem_loom))]
    seq: u64,
}

impl std::ops::Deref for ShardWrite<'_> {
    type Target = Shard;
    #[inline]
    fn deref(&self) -> &Shard {
        &self.shard
    }
}

impl std::ops::DerefMut for ShardWrite<'_> {
    #[inline]
    fn deref_mut(&mut self) -> &mut Shard {
        &mut self.shard
    }
}

impl Drop for ShardWrite<'_> {
    #[inline]
    fn drop(&mut self) {
        if self.shard.slab.dirty || self.shard.index.dirty {
            self.publish();
        }
        let current = self.shard.behind();
        let tick = &self.slot.published.tick;
        if tick.load(std::sync::atomic::Ordering::Relaxed) != current {
            tick.store(current, std::sync::atomic::Ordering::Relaxed);
        }
        #[cfg(not(idem_loom))]
        self.slot.seq.write_end(self.seq);
    }
}

impl ShardWrite<'_> {
    /// Publishes the index's hint and the chunk-address table, then retires what they
    /// replaced.
    #[cold]
    fn publish(&mut self) {
        use std::sync::atomic::Ordering as O;
        let shard = &mut *self.shard;
        let p = &self.slot.published;
        p.hint.store(shard.index.hint(), Ordering::Release);
        let (table, count) = shard.slab.table();
        p.chunk_table.store(table, O::Release);
        p.chunk_count.store(count, O::Release);
        shard.slab.dirty = false;
        shard.index.dirty = false;
        let pending = &self.slot.published.retired_bytes;
        if let Some(old) = shard.index.take_retired() {
            let bytes = old.bytes();
            retire(old, bytes, pending);
        }
        if !shard.slab.retired.is_empty() {
            let old = std::mem::take(&mut shard.slab.retired);
            let bytes = old
                .iter()
                .map(|t| t.capacity() * std::mem::size_of::<usize>())
                .sum();
            retire(old, bytes, pending);
        }
    }
}

/// Frees `garbage` (an outgrown bucket array or address table, `bytes` long) once no
/// lock-free reader pinned now can still be reading it, counting it in `pending`
/// until then. Under loom nothing reads without the lock: it is freed at once.
fn retire<T: Send + 'static>(
    garbage: T,
    bytes: usize,
    pending: &std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    #[cfg(not(idem_loom))]
    reclaim::retire(garbage, bytes, pending);
    #[cfg(idem_loom)]
    {
        let _ = (bytes, pending);
        drop(garbage);
    }
}

/// Frees the retired tables whose readers have all unpinned: maintenance runs it, so
/// that tables retired while a reader was pinned do not stay allocated until the next
/// growth.
pub(crate) fn collect_retired() {
    #[cfg(not(idem_loom))]
    reclaim::collect();
}

/// Pins the current thread for lock-free shard reads: what a reader finds published
/// stays allocated until its pin drops (see [`reclaim`]). `None` while the thread is
/// being torn down: the caller takes the lock instead.
#[cfg(not(idem_loom))]
#[inline]
pub(crate) fn pin() -> Option<reclaim::Pin> {
    reclaim::pin()
}

/// How far behind `now` a shard's wheel may be before a claim must bring it up to
/// date under the lock (see [`Shard::catch_up`]): past it, a stored 32-bit deadline
/// could read as in the future.
const CATCH_UP_TICKS: u64 = 1 << 29;

/// The namespace's pool of capacity, which every shard draws on through its own
/// reserve ([`Shard::take_unit`]). Exact: the units in the pool, in the shards'
/// reserves and in their live entries always add up to `max_keys`.
#[derive(Debug)]
pub(crate) struct Capacity<'a> {
    pub(crate) pool: &'a AtomicUsize,
    /// How many units a shard takes from the pool at once (at most 64). A reserve
    /// grown past twice this (by entries removed) goes back to the pool down to it,
    /// so units freed in one shard stay within reach of the others without the
    /// refusal path's collection.
    pub(crate) chunk: usize,
}

/// One lock shard's contents.
///
/// In order (`repr(C)`), so that what a claim and its completion touch in the shard
/// itself (the index's and the slab's heads, the live count, the token, the common
/// counters, the wheel's time and occupancy) packs into few cache lines after the
/// slot's lock word: with claims spread over every shard, those lines move between
/// cores whenever two threads take turns at a shard, one transfer per line.
#[derive(Debug)]
#[repr(C)]
pub(crate) struct Shard {
    index: Index,
    slab: Slab,
    live: usize,
    /// Units of capacity this shard may fill without touching the namespace's pool
    /// (see [`Capacity`]). Guarded by the shard's lock like everything else here, so
    /// a claim takes one with a plain decrement; other shards reach it only through
    /// this lock, by [`Shard::surrender_reserve`]. At most twice [`Capacity::chunk`]
    /// (128): a `u32`, beside `next_token` in one word.
    reserve: u32,
    next_token: u32,
    /// Claim guards of this shard not yet ended: counted by the claim that acquires
    /// (under this lock) and uncounted in the guard's last lock round, so that a
    /// guard keeps its namespace alive without a reference count of its own (see
    /// `Keeper` in the engine). A `usize`, as a reference count is: guards
    /// forgotten with `mem::forget` stay counted.
    guards: usize,
    pub(crate) counters: Counters,
    /// A wheel a lane: each entry is linked in its lane's ([`Slab::lane_of`]).
    wheels: [Wheel; LANES],
    /// Where the eviction scan resumes.
    hand: u32,
    /// Payload fingerprints, of the entries with `PAYLOAD_BIT` set.
    payloads: Column<u64>,
    /// Stored results, of entries with `EXTRA_BIT` set.
    results: Results,
    /// What entries read back from the durable tier keep of their record where
    /// their deadline does not give it back (see [`ReadBacks`]).
    read_back_times: ReadBacks,
    /// A sliding window's done entries' completion times (empty in a namespace with
    /// fixed windows, whose completion times follow from their deadlines).
    completed: Column<u64>,
    /// Done entries whose completion (or window's extension) the durable store
    /// refused under fail-open ([`Stored::HotOnly`]): eviction passes them by.
    /// Empty unless the store has failed.
    unstored: HashSet<u32>,
    /// For each done entry whose sliding window's record is being rewritten (marked
    /// completing by [`Shard::begin_extension`]), the expiry the record held before
    /// the rewrite, in milliseconds: what a sighting during the write is judged
    /// against and answered at most, since a failed write puts the window back there.
    /// Empty unless a rewrite is in flight.
    rewriting: HashMap<u32, u64>,
    /// A note for each `forget` of this shard's keys that is deleting their durable
    /// records (empty almost always): its id, its key's fingerprint, the entry and
    /// token of a claim whose completion was refused meanwhile, its count of claims
    /// of the key acquired since it began, and whether it is closed (holding the key
    /// against new claims: `Shard::close_forget`). While a key has a note,
    /// no durable write of its done record may begin: a completion is refused as lost
    /// and a window is not extended, so that no record lands after the forget's
    /// delete (see `Namespace::forget`).
    forgetting: Vec<ForgetNote>,
    /// Once no handle of the namespace is left and this shard still counts guards:
    /// the reference that keeps the namespace alive for them, taken by the guard
    /// that ends the last count.
    anchor: Option<Anchor>,
    /// A bucket array made for the index's next doubling (see
    /// [`index::Index::spare_wanted`]).
    index_spare: Option<index::Spare>,
    /// Each lane's next slab chunk, allocated ahead outside the lock (see
    /// [`Slab::wants_spare`]). A spare a lane: with one for the shard, a lane that
    /// came to three quarters of its chunk while the other lane's spare waited
    /// asked for none, and made its next chunk under the lock (two threads filling
    /// a 1 M-key namespace made about a quarter of their chunks so). Kept here, not
    /// in the slab, so that the fields a claim writes keep their lines.
    spares: [Option<Chunk>; LANES],
    /// The entries this shard is meant to hold: see [`Shard::set_index_share`].
    index_share: usize,
    /// The index's entries at the last maintenance pass (see [`Shard::spare_pass`]).
    len_at_pass: usize,
    /// A claim asked for a spare since the last pass.
    spare_asked: bool,
    /// The last [`ForgetNote::id`] given out (wrapping). (Here, in the padding after
    /// `spare_asked`.)
    forget_ids: u32,
    /// Maintenance passes in a row that found the index no fuller than the one
    /// before (see [`Shard::spare_pass`]).
    quiet_passes: usize,
}

/// A shard's index gets a spare array made when, filling at the pace it did since the
/// last maintenance pass, it would double within this many passes (a second at the
/// default 100 ms).
const SPARE_LEAD_PASSES: usize = 10;

/// A spare is freed once, at the pace of the last pass, the doubling is more than
/// this many passes away (ten seconds at the default 100 ms; never for a shard
/// holding steady).
const SPARE_KEEP_PASSES: usize = 100;

/// How a completion's durable write (or a sliding window's rewrite) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stored {
    /// The store holds the record: synced, or (fail open) applied with its fsync
    /// failed; every reader sees it.
    Yes,
    /// The store refused it and the namespace fails open: the answer was decided from
    /// the hot tier alone, which must then keep the entry for its TTL (it is never
    /// evicted: nothing on disk would answer for it).
    HotOnly,
    /// The store refused it: the claim is released.
    No,
}

/// A reference that keeps a namespace alive (the engine's `Arc` of it, erased here).
pub(crate) type Anchor = Box<dyn std::any::Any + Send + Sync>;

/// A stored deadline back in wall-clock milliseconds.
#[inline(always)]
fn deadline_ms(p: &Params, now: Now, deadline: u32) -> u64 {
    p.tick_to_ms(widen(now.tick, deadline))
}

/// A done entry's completion time and expiry (wall-clock milliseconds) from its
/// stored `deadline` and, if one is kept for it, its completion time.
#[inline(always)]
fn done_times(p: &Params, now: Now, deadline: u32, kept: Option<u64>) -> (u64, u64) {
    let expires_at_ms = deadline_ms(p, now, deadline);
    let completed_at_ms = kept.unwrap_or_else(|| derived_completion(p, now, expires_at_ms));
    // With a durable tier the key stays a duplicate until its record expires: what
    // `Params::record_until` gives for the deadline, which takes the window's end as
    // up to a tick before the rounded deadline (else, with retention equal to the TTL,
    // the answer would be a whole retention late). Records are written for exactly
    // that, from the completion's own time. A completion time derived from the
    // deadline may be up to a tick later than that (on coarse ticks), and the record's
    // expiry counted from it up to a tick past the record's: the expiry is counted
    // from the earliest completion the deadline allows instead, so that the answer
    // never says the key stays a duplicate after its record has expired (it may say
    // a tick less than the record holds).
    let from_ms = match kept {
        Some(c) => c,
        None => completed_at_ms.min(expires_at_ms.saturating_sub(p.ttl_ms + (p.tick_ms - 1))),
    };
    let expires_at_ms = p
        .record_until(from_ms, expires_at_ms)
        .unwrap_or(expires_at_ms);
    (completed_at_ms, expires_at_ms)
}

/// A fixed-window done entry's completion time as its deadline (`deadline_ms`, its
/// TTL's end) gives it back: the deadline keeps whole ticks, so the completion was
/// up to a tick before the TTL's start, and not after now. But `now` is the
/// look-up's reading, which may have been taken before the completion (the claim
/// waited for the shard's lock meanwhile): never more than a tick before the TTL's
/// start, exact on 1 ms ticks.
#[inline(always)]
fn derived_completion(p: &Params, now: Now, deadline_ms: u64) -> u64 {
    let start = deadline_ms.saturating_sub(p.ttl_ms);
    // The same as `start.min(now.ms.max(start - tick + 1))`; a branch, taken one way
    // by nearly every duplicate, cost less than the two comparisons on the lock-free
    // path (BENCHMARKS.md, 2026-12-07, 07:35-07:37 UTC).
    if now.ms >= start {
        start
    } else {
        now.ms.max(start.saturating_sub(p.tick_ms - 1))
    }
}

/// Removes entry `idx` (already unlinked from the wheel) from index, side table and slab.
#[allow(clippy::too_many_arguments)]
fn remove_unlinked(
    index: &mut Index,
    index_spare: &mut Option<index::Spare>,
    slab: &mut Slab,
    results: &mut Results,
    read_back_times: &mut ReadBacks,
    unstored: &mut HashSet<u32>,
    live: &mut usize,
    idx: u32,
) {
    if !unstored.is_empty() {
        unstored.remove(&idx);
    }
    let e = *slab.get(idx);
    index.remove_using(e.lo(), idx, index_spare);
    if e.has_extra() {
        results.take(idx);
        read_back_times.remove(idx);
    }
    slab.release(idx);
    *live -= 1;
}

impl Shard {
    /// An empty shard whose index has room for `room` entries, or `None` if that
    /// index cannot be allocated.
    pub(crate) fn new(now_tick: u64, room: usize) -> Option<Self> {
        Some(Shard {
            index: Index::try_with_room(room)?,
            slab: Slab::default(),
            wheels: std::array::from_fn(|_| Wheel::new(now_tick)),
            payloads: Column::default(),
            results: Results::default(),
            read_back_times: ReadBacks::default(),
            completed: Column::default(),
            unstored: HashSet::new(),
            rewriting: HashMap::new(),
            forgetting: Vec::new(),
            forget_ids: 0,
            next_token: 0,
            guards: 0,
            live: 0,
            reserve: 0,
            hand: 0,
            counters: Counters::default(),
            anchor: None,
            index_spare: None,
            spares: Default::default(),
            index_share: usize::MAX,
            len_at_pass: 0,
            spare_asked: false,
            quiet_passes: 0,
        })
    }

    /// The index's prefetch hint, as it should be published.
    #[cfg(all(test, not(idem_loom)))]
    pub(crate) fn index_hint(&self) -> usize {
        self.index.hint()
    }

    /// Resident entries (including expired ones not yet reclaimed).
    pub(crate) fn len(&self) -> usize {
        self.live
    }

    /// For tests: the address of the index's bucket array and of its spare, if any.
    #[cfg(all(test, not(idem_loom)))]
    pub(crate) fn index_addrs(&self) -> (usize, Option<usize>) {
        (
            self.index.hint() & !63,
            self.index_spare.as_ref().map(index::Spare::addr),
        )
    }

    /// Whether `lane`, the lane of a slot just handed out, should get its next chunk
    /// ahead ([`Slab::wants_spare`]) and has no spare.
    #[inline]
    fn wants_spare(&self, lane: usize) -> bool {
        self.slab.wants_spare(lane) && self.spares[lane].is_none()
    }

    /// For tests: the slab's chunks, in order, and the calling thread's lane's
    /// spare, as addresses.
    #[cfg(all(test, not(idem_loom)))]
    pub(crate) fn chunk_addrs(&self) -> (Vec<usize>, Option<usize>) {
        let addr = |c: &Chunk| c.addr();
        (
            self.slab.chunks.iter().map(addr).collect(),
            self.spares[lane()].as_ref().map(addr),
        )
    }

    /// Gives every lane that has no spare chunk one from `take` (a preallocated
    /// namespace's shards, at build: their lanes' first chunks then come ready-made
    /// instead of allocated under the lock by the first claim of each lane).
    pub(crate) fn stock_lanes(&mut self, mut take: impl FnMut() -> Chunk) {
        for spare in self.spares.iter_mut().filter(|s| s.is_none()) {
            *spare = Some(take());
        }
    }

    /// Keeps `chunk` as the next chunk of the calling thread's lane (the lane whose
    /// claim asked for it: [`Slab::wants_spare`]), unless it has one already
    /// (another claimant was first): then `chunk` comes back, for the reservoir.
    #[must_use]
    pub(crate) fn give_spare(&mut self, chunk: Chunk) -> Option<Chunk> {
        match &mut self.spares[lane()] {
            spare @ None => {
                *spare = Some(chunk);
                None
            }
            Some(_) => Some(chunk),
        }
    }

    /// The length (buckets) of the spare array the index could take (see
    /// [`index::Index::spare_wanted`]), if it has none and, filling at the pace it
    /// has since the last maintenance pass (`growth` entries), would double within
    /// [`SPARE_LEAD_PASSES`] passes.
    fn index_spare_due(&self, growth: usize) -> Option<usize> {
        let soon = self.index.room() <= growth.saturating_mul(SPARE_LEAD_PASSES);
        match self.index_spare {
            None if soon => self.index.spare_wanted(self.index_share),
            _ => None,
        }
    }

    /// The periodic maintenance pass's look at the index's spare: the length of one
    /// to make (see [`Shard::index_spare_due`], with the growth since the last pass),
    /// and the spare held, if it is no longer needed: the index emptied below three
    /// quarters of its room ([`index::Index::spare_needed`]), or no longer filling at
    /// a pace that would double it within [`SPARE_KEEP_PASSES`] passes (a shard that
    /// holds steady near its mark keeps no spare). A spare the index is moving into
    /// is kept through a pause in the filling (the copying would be lost, and a
    /// stream that comes in bursts would never finish a move), up to
    /// [`SPARE_LEAD_PASSES`] passes in a row without growth. The caller makes or
    /// frees them after letting the lock go. Starts the next pass's count of growth.
    pub(crate) fn spare_pass(&mut self) -> (Option<usize>, Option<index::Spare>) {
        let len = self.index.len();
        let growth = len.saturating_sub(self.len_at_pass);
        self.len_at_pass = len;
        self.spare_asked = false;
        self.quiet_passes = if growth == 0 {
            self.quiet_passes.saturating_add(1)
        } else {
            0
        };
        let far = if self.index.moving() {
            self.quiet_passes >= SPARE_LEAD_PASSES
        } else {
            self.index.room() > growth.saturating_mul(SPARE_KEEP_PASSES)
        };
        let index = &self.index;
        let unneeded = self.index_spare.take_if(|s| far || !index.spare_needed(s));
        if unneeded.is_some() {
            self.index.stop_moving();
        }
        (self.index_spare_due(growth), unneeded)
    }

    /// The length of the spare to make when a claim asked for one between passes
    /// (see [`Shard::index_spare_due`], with the growth since the last pass).
    pub(crate) fn spare_request(&self) -> Option<usize> {
        self.index_spare_due(self.index.len().saturating_sub(self.len_at_pass))
    }

    /// Whether the claim whose insert just reached the index's mark
    /// ([`index::Index::at_spare_mark`]) asks the maintenance thread for a spare: if
    /// the shard may outgrow its array, holds no spare and has not asked since the
    /// last pass (a shard hovering at its mark asks once a pass at most). Reads the
    /// shard's colder fields, so only at the mark.
    #[cold]
    fn asks_for_index_spare(&mut self) -> bool {
        if self.index_spare.is_some()
            || self.spare_asked
            || !self.index.outgrown_by(self.index_share)
        {
            return false;
        }
        self.spare_asked = true;
        true
    }

    /// Keeps `spare` for the index's next doubling if it is still of use, of that
    /// length; otherwise hands it back, for the caller to free after letting the
    /// lock go.
    pub(crate) fn give_index_spare(&mut self, spare: index::Spare) -> Option<index::Spare> {
        let wanted = self
            .index
            .spare_wanted(self.index_share)
            .or_else(|| self.index.small_spare_wanted(self.index_share));
        let fits = wanted == Some(spare.buckets());
        if self.index_spare.is_some() || !fits {
            return Some(spare);
        }
        self.index_spare = Some(spare);
        self.index.begin_move(&mut self.index_spare);
        None
    }

    /// Sets the entries this shard is meant to hold (its part of `max_keys`): its
    /// index asks for a spare array only to grow past it (see
    /// [`index::Index::spare_wanted`]).
    pub(crate) fn set_index_share(&mut self, share: usize) {
        self.index_share = share;
    }

    /// Heap bytes held by this shard's structures.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.slab.bytes()
            + self.spares.iter().flatten().count() * CHUNK * std::mem::size_of::<Entry>()
            + self.index.bytes()
            + self.index_spare.as_ref().map_or(0, index::Spare::bytes)
            + self.payloads.bytes()
            + self.results.bytes()
            + self.read_back_times.bytes()
            + self.completed.bytes()
            + table_bytes(self.unstored.capacity(), std::mem::size_of::<u32>())
            + table_bytes(self.rewriting.capacity(), std::mem::size_of::<(u32, u64)>())
            + self.forgetting.capacity() * std::mem::size_of::<ForgetNote>()
    }

    #[inline]
    fn find(&self, fp: Fp) -> Option<u32> {
        let slab = &self.slab;
        self.index.find(fp.lo, |i| slab.get(i).is(fp))
    }

    /// `now`, or the wheel's time if the wheel has passed it: another thread, or an
    /// earlier claim of the same batch, read a later time and moved it on. Set from a
    /// reading the wheel has passed, a deadline could fall behind the wheel, which
    /// would then keep the entry until its next tick while the entry reads as expired
    /// (its room not given back), and a lease could be granted already over. The
    /// wheel's time is never ahead of the namespace's (it moves only to times the
    /// namespace read).
    #[inline(always)]
    pub(crate) fn not_behind(&self, p: &Params, now: Now) -> Now {
        let current = self.time();
        if now.tick >= current {
            now
        } else {
            Now {
                tick: current,
                ms: now.ms.max(p.tick_to_ms(current)),
            }
        }
    }

    /// Keeps the wheel within serial-arithmetic range of `now` when nothing else has
    /// advanced it for a long time (no maintenance thread and a clock that jumped).
    #[inline]
    fn catch_up(&mut self, now: Now, cap: &Capacity<'_>) {
        if now.tick.saturating_sub(self.behind()) >= CATCH_UP_TICKS {
            self.expire_due(now, cap);
        }
    }

    #[inline(always)]
    fn done_view(&self, p: &Params, now: Now, idx: u32) -> DoneView {
        let e = self.slab.get(idx);
        let (kept, result) = match (p.sliding, e.has_extra()) {
            (true, extra) => (
                self.completed.value(idx),
                extra.then(|| self.results.get(idx)).flatten(),
            ),
            (false, true) => (
                self.read_back_times.times.get(&idx).copied(),
                self.results.get(idx),
            ),
            (false, false) => (None, None),
        };
        let (completed_at_ms, expires_at_ms) = done_times(p, now, e.deadline, kept);
        let expires_at_ms = match (p.sliding, e.has_extra()) {
            // A sliding window read back keeps its record's expiry, if this run's
            // reckoning falls short of it (records are never shortened, so it still
            // holds).
            (true, true) => match self.read_back_times.times.get(&idx) {
                Some(&record_ms) => expires_at_ms.max(record_ms),
                None => expires_at_ms,
            },
            // A fixed window's record written under another retention: its own
            // expiry (a fixed window's record is never rewritten).
            (false, true) => self
                .read_back_times
                .expiries
                .get(&idx)
                .copied()
                .unwrap_or(expires_at_ms),
            (_, false) => expires_at_ms,
        };
        (completed_at_ms, expires_at_ms, result)
    }

    /// [`Shard::done_view`] of an entry whose record another sighting is rewriting
    /// (marked completing when this look-up began): its expiry no later than the
    /// record holds now, since the rewrite may fail and put the window back there.
    #[cold]
    fn done_view_rewriting(&self, p: &Params, now: Now, idx: u32) -> DoneView {
        let (completed_at_ms, expires_at_ms, result) = self.done_view(p, now, idx);
        let held = self.rewriting.get(&idx).copied().unwrap_or(u64::MAX);
        (completed_at_ms, expires_at_ms.min(held), result)
    }

    /// Adds slab entry `idx` (fingerprint `fp`) to the index. A new bucket array's
    /// hint (the index grew or rebuilt) is published when the lock is let go
    /// ([`ShardWrite`]).
    fn index_insert(&mut self, fp: Fp, idx: u32) {
        let slab = &self.slab;
        // Growth re-places every other live entry, read from the slab in order, in
        // the spare array if there is one of the new length.
        self.index.insert_using(
            fp.lo,
            idx,
            |from| slab.live_from(from, idx),
            &mut self.index_spare,
        );
    }

    fn set_payload(&mut self, idx: u32, payload: u64) {
        self.slab.update_meta(idx, |m| m | PAYLOAD_BIT);
        self.payloads.set(idx, payload);
    }

    /// Stores `r` as entry `idx`'s result.
    fn set_result(&mut self, idx: u32, r: std::sync::Arc<[u8]>) {
        self.slab.update_meta(idx, |m| m | EXTRA_BIT);
        self.results.set(idx, r);
    }

    /// Moves entry `idx`'s deadline to tick `when`. A later deadline is only stored:
    /// the entry stays in its bucket, and the wheel re-places it by the new deadline
    /// when that bucket comes round (in maintenance, or in a claim that advances the
    /// wheel; see the wheel's contract). Only an earlier deadline moves the entry now
    /// ([`Shard::move_in_wheel`], not inlined: the inlined part is the common store).
    #[inline(always)]
    fn reschedule(&mut self, idx: u32, when: u64) {
        let e = self.slab.get(idx);
        let lane = self.slab.lane_of(idx);
        if e.prev != NIL && when >= widen(self.wheels[lane].current(), e.deadline) {
            self.slab.set_deadline(idx, when as u32);
            return;
        }
        self.move_in_wheel(idx, when, lane);
    }

    /// Moves entry `idx` (or links it, if it is in no bucket) to the bucket of tick
    /// `when` in the wheel of `lane`, its lane, with `when` as its deadline.
    #[inline(never)]
    fn move_in_wheel(&mut self, idx: u32, when: u64, lane: usize) {
        let wheel = &mut self.wheels[lane];
        wheel.deschedule(&mut self.slab, idx);
        self.slab.set_deadline(idx, when as u32);
        wheel.schedule(&mut self.slab, idx, when);
    }

    /// The time of the wheel entry `idx` is linked in (its lane's).
    #[inline]
    fn lane_time(&self, idx: u32) -> u64 {
        self.wheels[self.slab.lane_of(idx)].current()
    }

    /// The shard's time: the latest of its wheels' (they part only while an expiry
    /// pass that ran out of budget has moved some of them and not the others), which
    /// is the first lane's (see [`Shard::expire_some`]).
    #[inline(always)]
    fn time(&self) -> u64 {
        self.wheels[0].current()
    }

    /// The earliest of the wheels' times, the last lane's (see
    /// [`Shard::expire_some`]): what may be furthest behind the clock (see
    /// [`Shard::catch_up`]), and what the lock holder publishes for lock-free
    /// readers, which check the same distance.
    #[inline(always)]
    fn behind(&self) -> u64 {
        self.wheels[LANES - 1].current()
    }

    /// Ends the count of one guard of this shard (see `guards`), in that guard's last
    /// lock round. If it was the last and no handle of the namespace is left, the
    /// reference that kept the namespace alive for this shard's guards: the caller
    /// drops it after its last use of the namespace (it may be the last reference).
    #[inline]
    pub(crate) fn guard_ended(&mut self) -> Option<Anchor> {
        debug_assert!(self.guards > 0, "a guard ended twice");
        self.guards -= 1;
        if self.guards == 0 {
            self.anchor.take()
        } else {
            None
        }
    }

    /// The namespace's last handle is going: if this shard counts guards, it keeps
    /// `anchor()` (a reference to the namespace) until the last of them ends. No
    /// guard is made after this (claims need a handle).
    pub(crate) fn orphan(&mut self, anchor: impl FnOnce() -> Anchor) {
        if self.guards > 0 {
            self.anchor = Some(anchor());
        }
    }

    /// Takes one unit of capacity for a new entry: from this shard's reserve, or else
    /// a chunk from the namespace's pool. `false` when both are empty; units may then
    /// sit in other shards' reserves, which the caller collects (outside this lock)
    /// before it refuses the claim.
    #[inline]
    fn take_unit(&mut self, cap: &Capacity<'_>) -> bool {
        if self.reserve > 0 {
            self.reserve -= 1;
            return true;
        }
        self.refill(cap)
    }

    #[cold]
    fn refill(&mut self, cap: &Capacity<'_>) -> bool {
        let Ok(had) = cap
            .pool
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |p| {
                (p > 0).then(|| p - p.min(cap.chunk))
            })
        else {
            return false;
        };
        self.reserve += (had.min(cap.chunk) - 1) as u32;
        true
    }

    /// Gives back the unit a claim took (`took`) before it decided not to place
    /// its key.
    #[cold]
    fn untake_unit(&mut self, took: bool, cap: &Capacity<'_>) {
        if took {
            self.give_units(1, cap);
        }
    }

    /// Gives back `n` units (entries removed); a reserve grown past twice the chunk
    /// returns the excess to the pool (see [`Capacity::chunk`]).
    #[inline]
    fn give_units(&mut self, n: usize, cap: &Capacity<'_>) {
        let reserve = self.reserve as usize + n;
        if reserve > 2 * cap.chunk {
            cap.pool.fetch_add(reserve - cap.chunk, Ordering::AcqRel);
            self.reserve = cap.chunk as u32;
        } else {
            self.reserve = reserve as u32;
        }
    }

    /// Moves this shard's whole reserve into the pool, so that a claim on another
    /// shard that found the pool empty can draw on it; returns how many units moved.
    pub(crate) fn surrender_reserve(&mut self, cap: &Capacity<'_>) -> usize {
        let n = std::mem::take(&mut self.reserve) as usize;
        if n > 0 {
            cap.pool.fetch_add(n, Ordering::AcqRel);
        }
        n
    }

    /// Units of capacity in this shard's reserve (tests check that none is lost).
    #[cfg(test)]
    pub(crate) fn reserve(&self) -> usize {
        self.reserve as usize
    }

    fn new_token(&mut self) -> u32 {
        let t = (self.next_token + 1) & TOKEN_MASK;
        self.next_token = t.max(1);
        self.next_token
    }

    /// Sets the last token handed out, so that a test can reach the wrap.
    #[cfg(test)]
    pub(crate) fn set_last_token(&mut self, t: u32) {
        self.next_token = t.max(1);
    }

    /// The slab entry of `fp`, if the hot tier holds one (live or not), after
    /// bringing the wheel within range of `now`: the first step of every claim, which
    /// [`Shard::claim_found`] continues.
    #[inline(always)]
    pub(crate) fn look_up(&mut self, fp: Fp, now: Now, cap: &Capacity<'_>) -> Option<u32> {
        self.catch_up(now, cap);
        self.find(fp)
    }

    /// The answer to a claim that finds entry `idx` done and live, when nothing else
    /// has to happen for it: the duplicate is counted and its view returned. `None`
    /// sends the claim down the general path ([`Shard::claim_found`]): an expired,
    /// in-progress or completing entry, a payload to compare, or a sliding window
    /// (which may move the deadline and rewrite the record).
    ///
    /// This is the whole of a duplicate claim in the common case, kept small enough to
    /// inline into the caller: the fewer instructions it retires, the more of the next
    /// claim's cache misses the processor overlaps with this one's.
    #[inline(always)]
    pub(crate) fn live_duplicate(
        &mut self,
        idx: u32,
        payload: Option<u64>,
        p: &Params,
        now: Now,
    ) -> Option<DoneView> {
        let e = self.slab.get(idx);
        let plain = e.meta & (STATE_MASK | COMPLETING_BIT) == STATE_DONE;
        if !plain || expired(e.deadline, now.tick) || p.sliding || payload.is_some() {
            return None;
        }
        self.counters.duplicates += 1;
        Some(self.done_view(p, now, idx))
    }

    /// The atomic claim of one fingerprint, continued from its [`Shard::look_up`],
    /// which found `found` (the shard's lock held since).
    ///
    /// `durable`, when the namespace has a durable tier, is asked about keys the hot
    /// tier does not hold (absent, or expired here): a live done record there makes
    /// the claim a duplicate (and the key is cached in the hot tier again).
    ///
    /// `last` says whether this is the claim's last attempt. A new key's unit of
    /// capacity is taken before the durable tier is asked: an attempt that is not
    /// the last and finds no room answers `Full` without reading, so that the claim,
    /// which looks for room elsewhere and tries again, reads the durable tier once.
    /// The last attempt reads whether or not there is room, since a durable
    /// duplicate is answered either way.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn claim_found(
        &mut self,
        found: Option<u32>,
        fp: Fp,
        payload: Option<u64>,
        p: &Params,
        now: Now,
        cap: &Capacity<'_>,
        mut durable: Option<&mut dyn FnMut(Fp) -> DurableLookup>,
        last: bool,
    ) -> ShardClaim {
        // Worked out only where a claim may be acquired: a duplicate has no use for it.
        let lease_deadline = || p.deadline(now, p.lease_ms);
        let idx = match found {
            Some(idx) => idx,
            None => {
                let lease_deadline = lease_deadline();
                let room = self.take_unit(cap);
                if !room && !last {
                    return ShardClaim::Full;
                }
                let found = match durable.as_mut() {
                    Some(look) => look(fp),
                    None => DurableLookup::Absent,
                };
                if matches!(found, DurableLookup::Absent) && self.forget_holds(fp) {
                    self.untake_unit(room, cap);
                    return self.held_by_forget(p, now, lease_deadline);
                }
                let (meta, deadline) = match &found {
                    DurableLookup::Failed => {
                        self.untake_unit(room, cap);
                        return ShardClaim::StoreFailed;
                    }
                    DurableLookup::Absent => (
                        STATE_IN_PROGRESS | self.new_token() << TOKEN_SHIFT,
                        lease_deadline,
                    ),
                    DurableLookup::Done(d) => {
                        if let (Some(a), Some(b)) = (payload, d.payload) {
                            if a != b {
                                self.counters.payload_mismatches += 1;
                                self.untake_unit(room, cap);
                                return ShardClaim::PayloadMismatch;
                            }
                        }
                        (
                            STATE_DONE,
                            found_deadline(p, now, d, !self.being_forgotten(fp)),
                        )
                    }
                };
                if !room {
                    return match found {
                        // A sliding window that outlasts its record needs an entry to
                        // rewrite it from: room is made, or the window stays as stored.
                        DurableLookup::Done(d) if p.sliding && needs_rewrite(p, &d, deadline) => {
                            ShardClaim::FullForWindow(d)
                        }
                        // The last attempt, with no room anywhere: a durable duplicate is
                        // answered all the same, just not cached.
                        DurableLookup::Done(d) => {
                            self.counters.duplicates += 1;
                            ShardClaim::Duplicate {
                                completed_at_ms: d.completed_at_ms,
                                expires_at_ms: d.expires_at_ms,
                                result: d.result,
                                extend: None,
                                makes_index_spare: None,
                            }
                        }
                        _ => ShardClaim::Full,
                    };
                }
                let idx = self.place(fp, meta, deadline, lane());
                return self.after_insert(fp, idx, payload, found, p, now, lease_deadline);
            }
        };
        let e = *self.slab.get(idx);
        let live = !expired(e.deadline, now.tick) || e.meta & COMPLETING_BIT != 0;
        if live {
            if let Some(pl) = payload {
                if e.has_payload() {
                    if let Some(stored) = self.payloads.value(idx) {
                        if stored != pl {
                            self.counters.payload_mismatches += 1;
                            return ShardClaim::PayloadMismatch;
                        }
                    }
                }
            }
            if e.state() == STATE_IN_PROGRESS {
                self.counters.in_progress += 1;
                return ShardClaim::InProgress {
                    lease_expires_at_ms: deadline_ms(p, now, e.deadline).max(now.ms),
                };
            }
            let mut extend = None;
            if p.sliding {
                // Never earlier than already promised: a claimant that read the
                // clock before a later sighting took the lock must not shorten it.
                let old = widen(now.tick, e.deadline);
                let when = p.deadline(now, p.ttl_ms).max(old);
                // What the record holds, at least: every record of a window is
                // written to `record_until` its deadline, and the hot tier never holds
                // a deadline its record does not cover (unless it is unstored, or a
                // rewrite is in flight).
                let have = |c| p.record_until(c, p.tick_to_ms(old));
                let covered = self.completed_at(idx).and_then(|c| {
                    if !self.unstored.is_empty() && self.unstored.contains(&idx) {
                        // The store refused this window (fail open): the record may
                        // end before the hot deadline, so this sighting rewrites it
                        // (the rewrite reads the record first, and never shortens it).
                        return Some(false);
                    }
                    let have = if e.meta & COMPLETING_BIT != 0 {
                        // The deadline is the rewrite's, which may yet fail: judged
                        // against the record as it was before.
                        self.rewriting.get(&idx).copied().or_else(|| have(c))?
                    } else {
                        have(c)?
                    };
                    Some(p.record_until(c, p.tick_to_ms(when))? <= have)
                });
                if covered == Some(false)
                    && (e.meta & COMPLETING_BIT != 0 || self.being_forgotten(fp))
                {
                    // The record is being rewritten (or deleted by a forget) and this
                    // sighting would need more than it held before: the window is not
                    // moved, and the expiry answered is at most the record's before
                    // the rewrite (`done_view_rewriting`), so that a failed write
                    // undoes no answer and the hot tier never promises more than the
                    // durable tier will hold. Every sighting during a rewrite comes
                    // here (the rewrite's target is already past the record); rare,
                    // as it takes a sighting during one write, or during a forget.
                } else {
                    self.reschedule(idx, when);
                    if covered == Some(false) {
                        // (`have` is what the record holds: a completing entry is
                        // never here not covered.)
                        let held = self.completed_at(idx).and_then(have);
                        extend = self.begin_extension(p, fp, idx, when, Some(old), held);
                    }
                }
            }
            self.counters.duplicates += 1;
            // (`e` is the entry before this sighting: completing, another's rewrite is
            // in flight.)
            let (completed_at_ms, expires_at_ms, result) = if e.meta & COMPLETING_BIT != 0 {
                self.done_view_rewriting(p, now, idx)
            } else {
                self.done_view(p, now, idx)
            };
            return ShardClaim::Duplicate {
                completed_at_ms,
                expires_at_ms,
                result,
                extend,
                makes_index_spare: None,
            };
        }
        // Expired here. With a durable tier the key may still be a duplicate there.
        let lease_deadline = lease_deadline();
        let found = match durable.as_mut() {
            Some(look) => look(fp),
            None => DurableLookup::Absent,
        };
        if let DurableLookup::Failed = found {
            return ShardClaim::StoreFailed;
        }
        if let (DurableLookup::Done(d), Some(a)) = (&found, payload) {
            if d.payload.is_some_and(|b| b != a) {
                self.counters.payload_mismatches += 1;
                return ShardClaim::PayloadMismatch;
            }
        }
        if matches!(found, DurableLookup::Absent) && self.forget_holds(fp) {
            // (The expired entry stays: the forget removes it.)
            return self.held_by_forget(p, now, lease_deadline);
        }
        // Reuse the slot in place.
        self.counters.expirations += 1;
        if e.has_extra() {
            self.results.take(idx);
            self.read_back_times.remove(idx);
        }
        if !self.unstored.is_empty() {
            self.unstored.remove(&idx);
        }
        let (meta, deadline) = match &found {
            DurableLookup::Done(d) => (
                STATE_DONE,
                found_deadline(p, now, d, !self.being_forgotten(fp)),
            ),
            _ => {
                let token = self.new_token();
                (STATE_IN_PROGRESS | token << TOKEN_SHIFT, lease_deadline)
            }
        };
        self.slab.set_meta(idx, meta);
        self.reschedule(idx, deadline);
        self.after_insert(fp, idx, payload, found, p, now, lease_deadline)
    }

    /// The answer to a claim that would acquire a key whose forget holds it
    /// ([`Shard::close_forget`]): in progress, until the end of the lease the claim
    /// would have had (`lease_deadline`, ticks).
    #[cold]
    fn held_by_forget(&mut self, p: &Params, now: Now, lease_deadline: u64) -> ShardClaim {
        self.counters.in_progress += 1;
        ShardClaim::InProgress {
            lease_expires_at_ms: p.tick_to_ms(lease_deadline).max(now.ms),
        }
    }

    /// The claim of a key the hot tier does not hold, in a namespace without a durable
    /// tier: [`Shard::claim_found`]'s first case alone, small enough to inline into
    /// the caller, which then builds no durable look-up and makes no call for the
    /// commonest claim that writes. `Acquired`, or `Full`.
    #[inline(always)]
    pub(crate) fn claim_new(
        &mut self,
        fp: Fp,
        payload: Option<u64>,
        p: &Params,
        now: Now,
        cap: &Capacity<'_>,
        lane: usize,
    ) -> ShardClaim {
        if !self.take_unit(cap) {
            return ShardClaim::Full;
        }
        let deadline = p.deadline(now, p.lease_ms);
        let token = self.new_token();
        let idx = self.place(fp, STATE_IN_PROGRESS | token << TOKEN_SHIFT, deadline, lane);
        self.acquired(idx, token, payload, deadline, lane)
    }

    /// The end of every claim that acquires entry `idx` (placed or reused, with
    /// `token`, in progress until `lease_deadline`; in a chunk of `lane`): its payload
    /// kept, the claim and its guard counted, the lease handed out.
    #[inline(always)]
    fn acquired(
        &mut self,
        idx: u32,
        token: u32,
        payload: Option<u64>,
        lease_deadline: u64,
        lane: usize,
    ) -> ShardClaim {
        if let Some(pl) = payload {
            self.set_payload(idx, pl);
        }
        self.counters.acquired += 1;
        self.guards += 1;
        let (wants_index_spare, makes_index_spare) = if self.index.at_mark() {
            self.index_mark_reached()
        } else {
            (false, None)
        };
        ShardClaim::Acquired {
            lease: Lease {
                idx,
                token,
                deadline: lease_deadline,
            },
            wants_spare: self.wants_spare(lane),
            wants_index_spare,
            makes_index_spare,
        }
    }

    /// What the claim whose insert just brought the index to a mark does about
    /// its next array ([`index::Index::at_mark`]): from [`index::SPARE_FROM`]
    /// buckets on it asks the maintenance thread ([`Shard::asks_for_index_spare`]),
    /// and at the later mark, if no spare has come, makes it itself
    /// ([`Shard::late_index_spare`]); under that the claimant makes the spare
    /// ([`Shard::small_index_spare`]).
    #[cold]
    fn index_mark_reached(&mut self) -> (bool, Option<usize>) {
        if self.index.at_spare_mark() {
            (self.asks_for_index_spare(), None)
        } else {
            (false, self.index_spare_to_make())
        }
    }

    /// The spare a claimant whose insert brought the index to a mark makes itself,
    /// after letting the lock go: a large index's at its late mark
    /// ([`Shard::late_index_spare`]), a small one's at its mark
    /// ([`Shard::small_index_spare`]).
    #[cold]
    fn index_spare_to_make(&self) -> Option<usize> {
        if self.index.at_late_mark() {
            self.late_index_spare()
        } else {
            self.small_index_spare()
        }
    }

    /// The spare the claim whose insert brought a large index to its late mark
    /// ([`index::Index::at_late_mark`]) makes, if the shard holds none yet although
    /// a claim asked the maintenance thread for it since the thread's last pass (it
    /// is behind a fast fill), and may outgrow the array
    /// ([`index::Index::spare_wanted`]). A shard that crossed its first mark before
    /// the last pass is left to the passes, which make its spare in time at the pace
    /// it fills: one hovering about its late mark does not make a spare at every
    /// crossing.
    #[cold]
    fn late_index_spare(&self) -> Option<usize> {
        match self.index_spare {
            None if self.spare_asked => self.index.spare_wanted(self.index_share),
            _ => None,
        }
    }

    /// The spare the claim whose insert brought a small index to its mark makes
    /// ([`index::Index::small_spare_wanted`]), if the shard holds none.
    #[cold]
    fn small_index_spare(&self) -> Option<usize> {
        match self.index_spare {
            None => self.index.small_spare_wanted(self.index_share),
            Some(_) => None,
        }
    }

    /// A new entry for `fp` (its unit of capacity taken): in the slab, the index and
    /// the wheel, at `deadline`, in `lane` (the calling thread's: [`lane`]).
    #[inline(always)]
    fn place(&mut self, fp: Fp, meta: u32, deadline: u64, lane: usize) -> u32 {
        let idx = self.slab.alloc(
            Entry {
                fp_lo: [fp.lo as u32, (fp.lo >> 32) as u32],
                fp_mid: fp.hi as u32,
                deadline: deadline as u32,
                meta,
                prev: NIL,
                next: NIL,
            },
            lane,
            &mut self.spares[lane],
        );
        self.index_insert(fp, idx);
        self.wheels[lane].schedule(&mut self.slab, idx, deadline);
        self.live += 1;
        idx
    }

    /// The completion time kept for a sliding window's done entry.
    fn completed_at(&self, idx: u32) -> Option<u64> {
        self.completed.value(idx)
    }

    /// Marks done entry `idx` completing and describes the rewrite of its durable
    /// record that covers hot deadline `when`; `fallback` is the deadline to restore if
    /// the rewrite fails, or `None` to drop the entry then (it was just read from the
    /// durable tier); `held` is the expiry the record holds until then (see
    /// `rewriting`).
    fn begin_extension(
        &mut self,
        p: &Params,
        fp: Fp,
        idx: u32,
        when: u64,
        fallback: Option<u64>,
        held: Option<u64>,
    ) -> Option<Extension> {
        if self.being_forgotten(fp) {
            // Its record is being deleted: a rewrite could land after the delete.
            return None;
        }
        let completed_at_ms = self.completed_at(idx)?;
        let expires_ms = p.record_until(completed_at_ms, p.tick_to_ms(when))?;
        self.slab.update_meta(idx, |m| m | COMPLETING_BIT);
        if let Some(held) = held {
            self.rewriting.insert(idx, held);
        }
        let e = self.slab.get(idx);
        let (token, has_payload) = (e.token(), e.has_payload());
        Some(Extension {
            idx,
            token,
            completed_at_ms,
            expires_ms,
            payload: if has_payload {
                self.payloads.value(idx)
            } else {
                None
            },
            fallback,
            // (An entry read back from the durable tier carries token 0: no claim of
            // its own, and none of its markers to settle, whatever left it unstored.)
            settles: token != 0 && !self.unstored.is_empty() && self.unstored.contains(&idx),
        })
    }

    /// Ends an [`Extension`] of `fp`'s entry: `stored` says whether the record was
    /// rewritten. If not, the hot tier goes back to what the durable tier holds (the
    /// window before this sighting, undoing any sighting made during the write, or no
    /// entry if the sighting read the key from the durable tier), so that the next
    /// sighting tries again.
    pub(crate) fn finish_extension(
        &mut self,
        fp: Fp,
        x: &Extension,
        stored: Stored,
        cap: &Capacity<'_>,
    ) {
        if stored == Stored::No {
            // The sighting's claim returns the store's error (or its panic), not the
            // `Duplicate` it was counted as when it began the rewrite.
            self.counters.duplicates -= 1;
        }
        // (No entry marked completing is removed, so the note is this rewrite's.)
        if !self.rewriting.is_empty() {
            self.rewriting.remove(&x.idx);
        }
        let e = *self.slab.get(x.idx);
        if !(e.is(fp) && e.state() == STATE_DONE && e.meta & COMPLETING_BIT != 0) {
            // Forgotten meanwhile (nothing else removes a completing entry).
            return;
        }
        self.slab.update_meta(x.idx, |m| m & !COMPLETING_BIT);
        match stored {
            // The store holds the record now: the entry may be evicted as any other.
            // (An entry read back from the durable tier settles no marker, yet may
            // have been left unstored by an earlier rewrite: it is stored now too.)
            Stored::Yes => {
                if !self.unstored.is_empty() {
                    self.unstored.remove(&x.idx);
                }
            }
            // The extended window lives in the hot tier alone.
            Stored::HotOnly => {
                self.unstored.insert(x.idx);
            }
            // The window goes back to its old end; one the wheel has passed meanwhile
            // is over, and its room given back at once (the wheel takes no deadline
            // behind it, so it would otherwise hold the room a tick longer).
            Stored::No => match x.fallback {
                Some(deadline) if deadline > self.lane_time(x.idx) => {
                    self.reschedule(x.idx, deadline)
                }
                Some(_) => {
                    self.remove(x.idx, cap);
                    self.counters.expirations += 1;
                }
                None => self.remove(x.idx, cap),
            },
        }
    }

    /// Finishes a claim that placed entry `idx`: as a new holder, or as a duplicate
    /// found in the durable tier.
    #[allow(clippy::too_many_arguments)]
    fn after_insert(
        &mut self,
        fp: Fp,
        idx: u32,
        payload: Option<u64>,
        found: DurableLookup,
        p: &Params,
        now: Now,
        lease_deadline: u64,
    ) -> ShardClaim {
        match found {
            DurableLookup::Done(d) => {
                if let Some(pl) = d.payload {
                    self.set_payload(idx, pl);
                }
                let deadline = widen(now.tick, self.slab.get(idx).deadline);
                if let Some(r) = &d.result {
                    self.set_result(idx, r.clone());
                }
                if p.sliding {
                    self.completed.set(idx, d.completed_at_ms);
                    // The record's expiry as read, where this run's reckoning from the
                    // deadline falls short of it (see `read_back_times`).
                    let (_, reckoned) =
                        done_times(p, now, self.slab.get(idx).deadline, Some(d.completed_at_ms));
                    if reckoned < d.expires_at_ms {
                        self.slab.update_meta(idx, |m| m | EXTRA_BIT);
                        self.read_back_times.times.insert(idx, d.expires_at_ms);
                    }
                } else {
                    let kept = found_needs_extra(p, now, &d, deadline);
                    let (_, reckoned) = done_times(
                        p,
                        now,
                        self.slab.get(idx).deadline,
                        kept.then_some(d.completed_at_ms),
                    );
                    // Within the tick an answer may read early, this run's reckoning
                    // stands; otherwise the record was written under another
                    // retention, and its expiry is kept.
                    let off = reckoned > d.expires_at_ms || d.expires_at_ms - reckoned >= p.tick_ms;
                    if kept || off {
                        self.slab.update_meta(idx, |m| m | EXTRA_BIT);
                    }
                    if kept {
                        self.read_back_times.times.insert(idx, d.completed_at_ms);
                    }
                    if off {
                        self.read_back_times.expiries.insert(idx, d.expires_at_ms);
                    }
                }
                self.counters.duplicates += 1;
                // A sliding window restarts at this sighting; if that outlasts the
                // record, the record is rewritten.
                let when = found_deadline(p, now, &d, !self.being_forgotten(fp));
                let extend = if p.sliding && needs_rewrite(p, &d, when) {
                    self.begin_extension(p, fp, idx, when, None, Some(d.expires_at_ms))
                } else {
                    None
                };
                ShardClaim::Duplicate {
                    completed_at_ms: d.completed_at_ms,
                    expires_at_ms: extend.map_or(d.expires_at_ms, |x| x.expires_ms),
                    result: d.result,
                    extend,
                    makes_index_spare: if self.index.at_mark() {
                        self.index_spare_to_make()
                    } else {
                        None
                    },
                }
            }
            _ => {
                let token = self.slab.get(idx).token();
                let lane = self.slab.lane_of(idx);
                self.acquired(idx, token, payload, lease_deadline, lane)
            }
        }
    }

    /// Places a claim found in flight at open (an orphan of a crash): it holds the
    /// key until `lease_deadline`, and nobody can complete it. False if the key is
    /// already resident or the namespace is full.
    #[cfg_attr(not(feature = "durable"), allow(dead_code))]
    pub(crate) fn insert_orphan(
        &mut self,
        fp: Fp,
        lease_deadline: u64,
        payload: Option<u64>,
        cap: &Capacity<'_>,
    ) -> bool {
        if self.find(fp).is_some() || !self.take_unit(cap) {
            return false;
        }
        let token = self.new_token();
        let idx = self.place(
            fp,
            STATE_IN_PROGRESS | token << TOKEN_SHIFT,
            lease_deadline,
            lane(),
        );
        // A claim with another payload is then a mismatch, as it was before the
        // restart.
        if let Some(p) = payload {
            self.set_payload(idx, p);
        }
        true
    }

    /// First half of a durable completion (`done`) or release: checks the lease and
    /// marks the entry as completing, so it stays held (whatever its lease) while the
    /// record is written (or the marker settled) without the lock. Returns the claim's
    /// payload fingerprint. A completion of a key being forgotten is refused; a
    /// release writes no done record and goes ahead (the forget waits for it).
    pub(crate) fn begin_complete(
        &mut self,
        fp: Fp,
        lease: &Lease,
        now: Now,
        cap: &Capacity<'_>,
        done: bool,
    ) -> Result<Option<u64>, Refused> {
        self.catch_up(now, cap);
        if !self.holds(fp, lease, now) {
            // A hold its guard never ended (a panic dropped the guard while its marker
            // was being written) goes with the lease: the entry expires as any other.
            self.marker_written(fp, lease);
            self.counters.lease_lost += 1;
            return Err(Refused::LeaseLost);
        }
        if done && self.being_forgotten(fp) {
            // The forget takes the claim. Noted, so that a forget whose delete fails
            // gives the claim up instead of leaving it held until its lease ends
            // (`Shard::abandon_forget`).
            self.note_refused(fp, lease);
            self.counters.lease_lost += 1;
            return Err(Refused::LeaseLost);
        }
        self.slab.update_meta(lease.idx, |m| m | COMPLETING_BIT);
        let has = self.slab.get(lease.idx).has_payload();
        Ok(if has {
            self.payloads.value(lease.idx)
        } else {
            None
        })
    }

    /// Second half of a durable completion: `stored` says whether the record reached
    /// the store. Stored: the key is done. Not stored: the claim is released.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn finish_complete(
        &mut self,
        fp: Fp,
        lease: &Lease,
        result: Option<&[u8]>,
        p: &Params,
        completed: Now,
        stored: Stored,
        cap: &Capacity<'_>,
    ) {
        let idx = lease.idx;
        let e = *self.slab.get(idx);
        let ours = e.state() == STATE_IN_PROGRESS
            && e.is(fp)
            && e.token() == lease.token
            && e.meta & COMPLETING_BIT != 0;
        if !ours {
            // Forgotten while the record was being written.
            return;
        }
        self.slab.update_meta(idx, |m| m & !COMPLETING_BIT);
        if stored == Stored::No {
            self.remove(idx, cap);
            self.counters.releases += 1;
            return;
        }
        self.mark_done(idx, result, p, completed);
        if stored == Stored::HotOnly {
            self.unstored.insert(idx);
        }
    }

    /// Turns held entry `idx` into a done one, completed at `now`.
    fn mark_done(&mut self, idx: u32, result: Option<&[u8]>, p: &Params, now: Now) {
        self.slab
            .update_meta(idx, |m| (m & !STATE_MASK) | STATE_DONE);
        // Retention is at least the TTL, so the hot deadline is always now + TTL, and a
        // fixed window's completion time can be derived from it (no extra row).
        let when = p.deadline(now, p.ttl_ms);
        self.reschedule(idx, when);
        if let Some(r) = result {
            self.set_result(idx, std::sync::Arc::from(r));
        }
        if p.sliding {
            self.completed.set(idx, now.ms);
        }
        self.counters.completions += 1;
    }

    /// Drops up to `max` done entries to make room (durable namespaces only: done
    /// entries are in the durable tier, so dropping them loses nothing). An entry whose
    /// record is being rewritten (a sliding window's [`Extension`]) stays until the
    /// rewrite ends, so that a `forget` still finds it and waits. Returns how many were
    /// dropped.
    pub(crate) fn evict_done(&mut self, max: usize, cap: &Capacity<'_>) -> usize {
        let len = self.slab.len;
        let mut dropped = 0;
        let mut scanned = 0;
        while dropped < max && scanned < len {
            if self.hand >= len {
                self.hand = 0;
            }
            let idx = self.hand;
            self.hand += 1;
            scanned += 1;
            let e = self.slab.get(idx);
            if e.state() == STATE_DONE
                && e.meta & COMPLETING_BIT == 0
                && (self.unstored.is_empty() || !self.unstored.contains(&idx))
            {
                self.remove(idx, cap);
                dropped += 1;
            }
        }
        self.counters.evictions += dropped as u64;
        dropped
    }

    /// Checks that `lease` is still live: its deadline has not passed (compared on
    /// whole ticks) and the entry is still the one it acquired.
    fn holds(&self, fp: Fp, lease: &Lease, now: Now) -> bool {
        if now.tick >= lease.deadline {
            return false;
        }
        let e = self.slab.get(lease.idx);
        e.state() == STATE_IN_PROGRESS
            && e.is(fp)
            && e.token() == lease.token
            && e.deadline == lease.deadline as u32
    }

    /// Marks a held claim done for the TTL, storing `result` if given.
    #[inline(always)]
    pub(crate) fn complete(
        &mut self,
        fp: Fp,
        lease: &Lease,
        result: Option<&[u8]>,
        p: &Params,
        now: Now,
        cap: &Capacity<'_>,
    ) -> Result<(), Refused> {
        self.catch_up(now, cap);
        if !self.holds(fp, lease, now) {
            self.counters.lease_lost += 1;
            return Err(Refused::LeaseLost);
        }
        self.mark_done(lease.idx, result, p, now);
        Ok(())
    }

    /// Gives a held claim up: the key is claimable again at once.
    pub(crate) fn release(
        &mut self,
        fp: Fp,
        lease: &Lease,
        now: Now,
        cap: &Capacity<'_>,
    ) -> Result<(), Refused> {
        self.catch_up(now, cap);
        if !self.holds(fp, lease, now) {
            self.counters.lease_lost += 1;
            return Err(Refused::LeaseLost);
        }
        self.remove(lease.idx, cap);
        self.counters.releases += 1;
        Ok(())
    }

    /// Gives up a claim its caller never saw (a failed batch's, or one whose marker
    /// could not be written): its entry goes if it is still this claim, whether or
    /// not its lease has run out meanwhile. Nothing is counted.
    pub(crate) fn abandon(&mut self, fp: Fp, lease: &Lease, now: Now, cap: &Capacity<'_>) {
        self.catch_up(now, cap);
        let e = self.slab.get(lease.idx);
        if e.state() == STATE_IN_PROGRESS && e.is(fp) && e.token() == lease.token {
            self.remove(lease.idx, cap);
        }
    }

    fn remove(&mut self, idx: u32, cap: &Capacity<'_>) {
        self.wheels[self.slab.lane_of(idx)].deschedule(&mut self.slab, idx);
        remove_unlinked(
            &mut self.index,
            &mut self.index_spare,
            &mut self.slab,
            &mut self.results,
            &mut self.read_back_times,
            &mut self.unstored,
            &mut self.live,
            idx,
        );
        self.give_units(1, cap);
    }

    /// Read-only look-up: the key's state, and the payload fingerprint its entry
    /// holds (the one a claim with a payload is compared with).
    pub(crate) fn check(
        &mut self,
        fp: Fp,
        p: &Params,
        now: Now,
        cap: &Capacity<'_>,
    ) -> Option<(ShardState, Option<u64>)> {
        self.catch_up(now, cap);
        let idx = self.find(fp)?;
        let e = *self.slab.get(idx);
        if expired(e.deadline, now.tick) && e.meta & COMPLETING_BIT == 0 {
            return None;
        }
        let payload = match e.has_payload() {
            true => self.payloads.value(idx),
            false => None,
        };
        let state = if e.state() == STATE_IN_PROGRESS {
            ShardState::InProgress {
                // (A completion being written holds the key past its lease: held
                // until now at least, as a claim answers.)
                lease_expires_at_ms: deadline_ms(p, now, e.deadline).max(now.ms),
            }
        } else {
            let (completed_at_ms, expires_at_ms, result) = if e.meta & COMPLETING_BIT != 0 {
                self.done_view_rewriting(p, now, idx)
            } else {
                self.done_view(p, now, idx)
            };
            ShardState::Done {
                completed_at_ms,
                expires_at_ms,
                result,
            }
        };
        Some((state, payload))
    }

    /// Deletes a key in any state. `Some(true)` if an unexpired entry was removed;
    /// `None`, removing nothing, if the key's completion is being written.
    pub(crate) fn forget(&mut self, fp: Fp, now: Now, cap: &Capacity<'_>) -> Option<bool> {
        self.catch_up(now, cap);
        let Some(idx) = self.find(fp) else {
            return Some(false);
        };
        let e = self.slab.get(idx);
        if e.meta & COMPLETING_BIT != 0 {
            return None;
        }
        let live = !expired(e.deadline, now.tick);
        self.remove(idx, cap);
        if live {
            self.counters.forgotten += 1;
        } else {
            self.counters.expirations += 1;
        }
        Some(live)
    }

    /// Notes that a forget of `fp` is about to delete its durable records: until
    /// [`Shard::end_forget`], no durable write of its done record begins (a
    /// completion is refused as lost, a window is not extended). Returns the note's
    /// id, which the forget's later calls name it by.
    pub(crate) fn begin_forget(&mut self, fp: Fp) -> u32 {
        self.forget_ids = self.forget_ids.wrapping_add(1);
        self.forgetting.push(ForgetNote {
            id: self.forget_ids,
            fp,
            refused: None,
            claims: 0,
            closed: false,
        });
        self.forget_ids
    }

    /// Ends note `id` (a [`Shard::begin_forget`]'s), whose forget removed the key:
    /// returns the claim whose completion it refused, if any.
    pub(crate) fn end_forget(&mut self, id: u32) -> Option<(u32, u32)> {
        let i = self.forgetting.iter().position(|f| f.id == id)?;
        self.forgetting.swap_remove(i).refused
    }

    /// Ends note `id`, whose forget failed (its first delete refused): a claim whose
    /// completion it refused meanwhile is given up, as its guard was told, instead of
    /// staying held until its lease ends.
    pub(crate) fn abandon_forget(&mut self, id: u32, cap: &Capacity<'_>) {
        let Some(i) = self.forgetting.iter().position(|f| f.id == id) else {
            return;
        };
        let note = self.forgetting.swap_remove(i);
        if let Some((idx, token)) = note.refused {
            let e = self.slab.get(idx);
            if e.state() == STATE_IN_PROGRESS && e.is(note.fp) && e.token() == token {
                self.remove(idx, cap);
            }
        }
    }

    /// Notes claim `lease` of `fp`, whose completion (or extension) a forget of the
    /// key refused, in every note of `fp`: whichever forget fails gives it up.
    fn note_refused(&mut self, fp: Fp, lease: &Lease) {
        for f in self.forgetting.iter_mut().filter(|f| f.fp == fp) {
            f.refused = Some((lease.idx, lease.token));
        }
    }

    /// Claims of its key acquired since note `id` began, wrapping (see
    /// [`Shard::hold_new_claim`]); 0 once the note has ended.
    pub(crate) fn forget_claims(&self, id: u32) -> u32 {
        self.forgetting
            .iter()
            .find(|f| f.id == id)
            .map_or(0, |f| f.claims)
    }

    /// From now until note `id` ends, a claim of its key that would be acquired
    /// answers `InProgress` instead (see [`Shard::claim_found`]): the forget it
    /// notes holds the key, so that claims acquired and released over and over
    /// cannot make it delete again for ever.
    pub(crate) fn close_forget(&mut self, id: u32) {
        if let Some(f) = self.forgetting.iter_mut().find(|f| f.id == id) {
            f.closed = true;
        }
    }

    /// Whether a forget of `fp` holds the key against new claims
    /// ([`Shard::close_forget`]).
    #[inline]
    fn forget_holds(&self, fp: Fp) -> bool {
        !self.forgetting.is_empty() && self.forgetting.iter().any(|f| f.fp == fp && f.closed)
    }

    /// Whether a forget of `fp` is deleting its durable records.
    #[inline]
    fn being_forgotten(&self, fp: Fp) -> bool {
        !self.forgetting.is_empty() && self.forgetting.iter().any(|f| f.fp == fp)
    }

    /// Moves the end of claim `lease` of `fp` to `deadline` (ticks; earlier as well
    /// as later), if the claim still holds its lease at `now`. With `hold`, the entry
    /// is also held, as [`Shard::hold_for_marker`] holds a new claim's, while the
    /// claim's marker is rewritten with the new end. Returns the claim's payload
    /// fingerprint (the marker carries it).
    pub(crate) fn extend_lease(
        &mut self,
        fp: Fp,
        lease: &Lease,
        now: Now,
        deadline: u64,
        cap: &Capacity<'_>,
        hold: bool,
    ) -> Result<Option<u64>, Refused> {
        self.catch_up(now, cap);
        // (A hold to take finds none: the guard's own completion, the only other
        // holder of a claim past its marker's write, consumes the guard.)
        if !self.holds(fp, lease, now)
            || (hold && self.slab.get(lease.idx).meta & COMPLETING_BIT != 0)
        {
            return Err(Refused::LeaseLost);
        }
        if self.being_forgotten(fp) {
            // The forget takes the claim, as it does a completion's (its marker, just
            // deleted, must not be written again); noted, so that a forget whose
            // delete fails gives the claim up (`Shard::abandon_forget`) and the
            // guard's next call says `LeaseLost` too.
            self.note_refused(fp, lease);
            return Err(Refused::LeaseLost);
        }
        self.reschedule(lease.idx, deadline);
        if hold {
            self.hold_for_marker(lease.idx);
        }
        Ok(if self.slab.get(lease.idx).has_payload() {
            self.payloads.value(lease.idx)
        } else {
            None
        })
    }

    /// Puts back the end of claim `lease` of `fp`, held for its marker's rewrite
    /// ([`Shard::extend_lease`]), at `deadline` (ticks), the end it had before, and
    /// ends the hold. The entry's own deadline is not checked: a maintenance pass
    /// moves a held entry's passed deadline on. (If `deadline` has passed, the lease
    /// is lost, as it would have been without the extension.)
    ///
    /// An old end the wheel has passed (the write outlasted it) leaves the claim
    /// expired: the entry is reclaimed here, as the expiry pass would have, since
    /// the wheel takes no deadline behind it and would hold it a tick longer.
    pub(crate) fn restore_lease(
        &mut self,
        fp: Fp,
        lease: &Lease,
        deadline: u64,
        cap: &Capacity<'_>,
    ) {
        let e = self.slab.get(lease.idx);
        if e.state() == STATE_IN_PROGRESS && e.is(fp) && e.token() == lease.token {
            self.slab.update_meta(lease.idx, |m| m & !COMPLETING_BIT);
            if deadline <= self.lane_time(lease.idx) {
                self.remove(lease.idx, cap);
                self.counters.expirations += 1;
            } else {
                self.reschedule(lease.idx, deadline);
            }
        }
    }

    /// Holds entry `idx`, just acquired, while its claim marker is written outside
    /// the lock (as a completion's write holds it): until [`Shard::marker_written`]
    /// its lease cannot run out under it and a `forget` waits, so no later claim of
    /// the key can write a marker that this claim's late write would then replace.
    pub(crate) fn hold_for_marker(&mut self, idx: u32) {
        self.slab.update_meta(idx, |m| m | COMPLETING_BIT);
    }

    /// Holds entry `idx`, just acquired by a claim of `fp` in a durable namespace, as
    /// [`Shard::hold_for_marker`] does; a claim of a key being forgotten is counted
    /// ([`Shard::forget_claims`]). Its marker, written after this lock round, may
    /// land after the forget's delete: the forget, which removes the claim's entry
    /// with the key, then deletes again, so that the marker goes with its claim.
    #[inline]
    pub(crate) fn hold_new_claim(&mut self, fp: Fp, idx: u32) {
        self.hold_for_marker(idx);
        for f in self.forgetting.iter_mut().filter(|f| f.fp == fp) {
            f.claims = f.claims.wrapping_add(1);
        }
    }

    /// Ends [`Shard::hold_for_marker`] for claim `lease` of `fp` (written or not).
    pub(crate) fn marker_written(&mut self, fp: Fp, lease: &Lease) {
        let e = self.slab.get(lease.idx);
        if e.state() == STATE_IN_PROGRESS && e.is(fp) && e.token() == lease.token {
            self.slab.update_meta(lease.idx, |m| m & !COMPLETING_BIT);
        }
    }

    /// The sweep of claim markers whose lease has ended (see `NsInner::sweep_markers`
    /// in the engine): decides, under this lock, whether claim `token` of `fp` is
    /// over, so that its marker may go. `None`: it is, and nothing it does later can
    /// write its done record: its entry is gone, or the key's entry is another
    /// claim's (or a record read back), or its entry was still in progress past its
    /// deadline, not being completed, and is reclaimed here as the expiry pass would
    /// (a completion after this is refused with `LeaseLost`). `Some(tick)`: the
    /// claim still holds its key (its lease was extended, its completion or marker
    /// write is in flight, or it completed and its entry, kept in the hot tier
    /// alone, still answers for the key): its marker stays, to be looked at again
    /// from `tick` on.
    pub(crate) fn sweep_claim(
        &mut self,
        fp: Fp,
        token: u32,
        now: Now,
        cap: &Capacity<'_>,
    ) -> Option<u64> {
        self.catch_up(now, cap);
        let idx = self.find(fp)?;
        let e = *self.slab.get(idx);
        if e.token() != token {
            return None;
        }
        if e.meta & COMPLETING_BIT != 0 {
            return Some(now.tick + 1);
        }
        if e.state() == STATE_IN_PROGRESS && expired(e.deadline, now.tick) {
            self.remove(idx, cap);
            self.counters.expirations += 1;
            return None;
        }
        Some(widen(now.tick, e.deadline).max(now.tick + 1))
    }

    /// Whether claim `lease` of `fp` still has its entry, held for a write
    /// ([`Shard::hold_for_marker`], or a completion's): such a claim holds its key,
    /// whatever its lease, and keeps its marker.
    pub(crate) fn held_for_write(&self, fp: Fp, lease: &Lease) -> bool {
        let e = self.slab.get(lease.idx);
        e.state() == STATE_IN_PROGRESS
            && e.is(fp)
            && e.token() == lease.token
            && e.meta & COMPLETING_BIT != 0
    }

    /// Whether `fp`'s completion is being written (begun, not finished).
    pub(crate) fn is_completing(&self, fp: Fp) -> bool {
        self.find(fp)
            .is_some_and(|idx| self.slab.get(idx).meta & COMPLETING_BIT != 0)
    }

    /// Reclaims every entry whose deadline has passed. Returns how many.
    pub(crate) fn expire_due(&mut self, now: Now, cap: &Capacity<'_>) -> usize {
        self.expire_some(now, cap, usize::MAX).0
    }

    /// Reclaims entries whose deadline has passed, stopping early once the wheel
    /// has handled about `budget` of them (see [`Wheel::advance_within`]). Returns
    /// how many were reclaimed, and whether every due entry was (false: call again).
    pub(crate) fn expire_some(
        &mut self,
        now: Now,
        cap: &Capacity<'_>,
        budget: usize,
    ) -> (usize, bool) {
        let Shard {
            index,
            index_spare,
            slab,
            wheels,
            results,
            read_back_times,
            unstored,
            live,
            counters,
            ..
        } = self;
        let mut reclaimed = 0;
        let mut done = true;
        // The wheels in turn, sharing the budget; one that stops early (or finds the
        // budget spent) leaves the next ones where they are, for the next call. A
        // wheel moves only once every wheel before it has reached `now` (or was past
        // it), and never past `now`: so the wheels' times never rise from one lane
        // to the next, and the first lane's is the shard's latest, the last lane's
        // its earliest (`Shard::time`, `Shard::behind`).
        let mut left = budget;
        for wheel in wheels.iter_mut() {
            if left == 0 {
                // (A wheel with nothing due is found so by the next call.)
                done = false;
                break;
            }
            let mut handled = 0;
            // The wheel fires an entry only once its stored deadline has passed (a
            // deadline moved later in place is re-placed when its old bucket comes
            // round; an earlier one is rescheduled), so a fired entry is due.
            // (Comparing 32-bit deadlines here would be wrong after a jump of 2^31
            // ticks.)
            let (_, all) = wheel.advance_within(slab, now.tick, left, |slab, idx| {
                handled += 1;
                if slab.get(idx).meta & COMPLETING_BIT != 0 {
                    // Its completion is being written: look again next tick.
                    let when = now.tick + 1;
                    slab.set_deadline(idx, when as u32);
                    return Some(when);
                }
                remove_unlinked(
                    index,
                    index_spare,
                    slab,
                    results,
                    read_back_times,
                    unstored,
                    live,
                    idx,
                );
                reclaimed += 1;
                None
            });
            left = left.saturating_sub(handled);
            if !all {
                done = false;
                break;
            }
        }
        debug_assert!(wheels.windows(2).all(|w| w[0].current() >= w[1].current()));
        counters.expirations += reclaimed as u64;
        self.give_units(reclaimed, cap);
        (reclaimed, done)
    }
}

#[cfg(all(test, not(idem_loom)))]
mod column {
    use super::{result_allocation, Column, Results, CHUNK};
    use std::sync::Arc;

    /// A column makes a block only for a range that a value was stored in, reads
    /// nothing from ranges it never made, and keeps every value stored.
    #[test]
    fn a_column_makes_blocks_as_values_come_and_keeps_each_value() {
        let mut c = Column::<u64>::default();
        assert_eq!((c.value(0), c.bytes()), (None, 0));
        let far = 3 * CHUNK as u32 + 7;
        c.set(far, 42);
        assert_eq!(c.value(far), Some(42));
        // One block made, of the four ranges up to it.
        let block = std::mem::size_of::<[u64; CHUNK]>();
        assert!(c.bytes() >= block && c.bytes() < 2 * block, "{}", c.bytes());
        assert_eq!(c.value(0), None, "a range never written has no block");
        c.set(far + 1, u64::MAX);
        assert_eq!((c.value(far), c.value(far + 1)), (Some(42), Some(u64::MAX)));
        c.set(far, 7);
        assert_eq!(c.value(far), Some(7));
        c.set(0, 1);
        assert!(
            c.bytes() >= 2 * block && c.bytes() < 3 * block,
            "{}",
            c.bytes()
        );
    }

    /// Results count their allocations as they come and go: set, replaced, taken,
    /// and taken where none was (nothing changes).
    #[test]
    fn results_count_the_bytes_of_what_they_hold() {
        let mut r = Results::default();
        r.take(5);
        assert_eq!((r.get(5), r.bytes()), (None, 0));
        r.set(5, Arc::from(&b"receipt"[..]));
        let column = r.column.bytes();
        assert_eq!(r.get(5).as_deref(), Some(&b"receipt"[..]));
        assert_eq!(r.bytes(), column + result_allocation(7));
        r.set(5, Arc::from(&[0u8; 100][..]));
        assert_eq!(r.bytes(), column + result_allocation(100));
        r.set(CHUNK as u32, Arc::from(&b"x"[..]));
        let column = r.column.bytes();
        assert_eq!(
            r.bytes(),
            column + result_allocation(100) + result_allocation(1)
        );
        r.take(5);
        r.take(5);
        assert_eq!((r.get(5), r.bytes()), (None, column + result_allocation(1)));
    }
}

#[cfg(all(test, not(idem_loom)))]
mod layout {
    use super::*;

    /// What a claim and its completion write in their slot lies in the lines
    /// `ShardSlot::prefetch_write` asks for, after the published line: a field
    /// moved out of them (or a line added in front) fails here.
    #[test]
    fn the_fields_a_claim_writes_are_in_the_lines_prefetched_for_it() {
        let slot = ShardSlot::new(0, 64).unwrap();
        let base = &slot as *const ShardSlot as usize;
        let first = base + std::mem::size_of::<Published>();
        let end = first + HOT_LINES * 64;
        let within = |what: &str, at: usize, len: usize| {
            assert!(
                at >= first && at + len <= end,
                "{what}: {at:#x}+{len} not in {first:#x}..{end:#x}"
            );
        };
        within("seq", &slot.seq as *const _ as usize, 8);
        let shard = slot.lock();
        let sh: &Shard = &shard;
        // The lock word is the part of the mutex that is not the shard.
        let mutex = &slot.shard as *const _ as usize;
        let data = sh as *const Shard as usize;
        let word = if data == mutex {
            data + std::mem::size_of::<Shard>()
        } else {
            mutex
        };
        within("lock word", word, 1);
        within(
            "index",
            &sh.index as *const _ as usize,
            std::mem::size_of::<Index>(),
        );
        let slab = &sh.slab as *const Slab as usize;
        within(
            "slab heads",
            slab,
            std::mem::offset_of!(Slab, lanes) + std::mem::size_of::<[LaneSlots; LANES]>(),
        );
        within("live", &sh.live as *const _ as usize, 8);
        within("reserve", &sh.reserve as *const _ as usize, 4);
        within("next_token", &sh.next_token as *const _ as usize, 4);
        within("guards", &sh.guards as *const _ as usize, 8);
        within(
            "common counters",
            &sh.counters as *const _ as usize,
            std::mem::offset_of!(Counters, completions) + 8,
        );
        // The wheel's time and occupancy come first in it (`repr(C)`), before its
        // bucket heads.
        within(
            "first lane's wheel head",
            &sh.wheels[0] as *const _ as usize,
            wheel::head_offset(0, 0),
        );
    }

    #[test]
    fn the_published_fields_have_a_line_of_their_own() {
        assert_eq!(std::mem::size_of::<Published>(), 64);
        assert_eq!(std::mem::offset_of!(ShardSlot, published), 0);
        let cells: Vec<SlotCell> = (0..2)
            .map(|_| SlotCell::new(ShardSlot::new(0, 0).unwrap()))
            .collect();
        let stride =
            &*cells[1] as *const ShardSlot as usize - &*cells[0] as *const ShardSlot as usize;
        assert_eq!(stride % 64, 0);
        assert_eq!(stride / 64 % 2, 1, "slots {stride} bytes apart");
    }
}

#[cfg(all(test, not(idem_loom)))]
mod reservoir_tests {
    use super::{
        new_chunk, Entry, Reservoir, Shard, CHUNK, REGION_BYTES, REGION_CHUNKS, REGION_MIN_KEYS,
        STATE_FREE,
    };

    /// A preallocated reservoir holds its namespace's whole slab from the start, and
    /// a chunk a lane more, every entry free: a large namespace's carved from regions
    /// but for the last chunks (fewer than a region's), a small one's made one by
    /// one, none past that; and takes from it make nothing new.
    #[test]
    fn a_preallocated_reservoir_holds_the_whole_slab_at_once() {
        let size = std::mem::size_of::<[Entry; CHUNK]>();
        let lanes = 16;
        for (max_keys, regions) in [
            (REGION_MIN_KEYS - 1, 0),
            (REGION_MIN_KEYS, 8),
            (REGION_MIN_KEYS + REGION_CHUNKS * CHUNK / 2, 8),
            // The slab alone needs 8 chunks fewer than 9 regions; its lanes' 16 more
            // make the ninth region fit.
            (REGION_MIN_KEYS + (REGION_CHUNKS - 8) * CHUNK, 9),
        ] {
            let r = Reservoir::preallocated(max_keys, lanes).expect("the allocator gives it");
            let stock = max_keys.div_ceil(CHUNK) + lanes;
            assert_eq!((r.regions(), r.len()), (regions, stock), "{max_keys}");
            assert!(r.bytes() >= stock * size, "counted in hot_bytes");
            let made = r.made();
            assert_eq!(made, stock);
            let taken: Vec<_> = (0..stock).map(|_| r.take()).collect();
            assert!(taken.iter().all(|c| c
                .iter()
                .all(|e| e.state() == STATE_FREE && e.next == super::NIL)));
            assert_eq!((r.len(), r.made()), (0, made), "nothing made by the takes");
            // Every region's chunks were stocked; the rest were made one by one.
            let carved = taken.iter().filter(|c| c.carved()).count();
            assert_eq!(carved, regions * REGION_CHUNKS);
        }
        // Not preallocated: nothing is made until a take.
        let r = Reservoir::new(REGION_MIN_KEYS);
        assert_eq!((r.regions(), r.len(), r.made()), (0, 0, 0));
    }

    /// A slab larger than the allocator gives is refused, not aborted on.
    #[test]
    fn a_preallocated_reservoir_the_allocator_refuses_is_none() {
        assert!(Reservoir::preallocated(usize::MAX / 4, 2).is_none());
    }

    /// Claims that found the reservoir empty at the same time each made a batch:
    /// it keeps one batch, not one a claim.
    #[test]
    fn a_reservoir_holds_at_most_one_batch_whoever_made_it() {
        let r = Reservoir::new(4 * 64 * CHUNK);
        assert_eq!(r.batch(), 4);
        r.stock((0..3).map(|_| new_chunk()).collect());
        assert_eq!(r.len(), 3);
        // A second claim's batch, made while the first one's was being made.
        r.stock((0..3).map(|_| new_chunk()).collect());
        assert_eq!(r.len(), 4, "one batch held, the rest let go");
        let _ = r.take();
        assert_eq!(r.len(), 3, "taken from what is held, nothing made");
    }

    /// The take that leaves fewer than half a batch asks for a top-up, once until
    /// a top-up begins; then the next such take asks again.
    #[test]
    fn a_take_that_leaves_the_reservoir_low_asks_for_a_top_up_once() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;
        // Without a hook nothing is asked, and nothing fails.
        let bare = Reservoir::new(4 * 64 * CHUNK);
        let _ = bare.take();
        assert_eq!(bare.len(), 3);
        let r = Reservoir::new(4 * 64 * CHUNK);
        let asked = Arc::new(AtomicUsize::new(0));
        let count = asked.clone();
        r.on_low(Box::new(move || {
            count.fetch_add(1, Ordering::SeqCst);
        }));
        // The reservoir's chunks after a take, and the top-ups asked for so far.
        let take = || {
            let _ = r.take();
            (r.len(), asked.load(Ordering::SeqCst))
        };
        // Empty, with a thread to make the batch: the take makes its own chunk only,
        // and asks.
        assert_eq!(take(), (0, 1));
        assert_eq!(take(), (0, 1), "asked already: its own chunk again");
        // The thread's answer: a batch.
        r.top_up();
        assert_eq!(r.len(), 4);
        assert_eq!(take(), (3, 1));
        assert_eq!(take(), (2, 1), "half a batch left");
        assert_eq!(take(), (1, 2), "below half: asked");
        assert_eq!(take(), (0, 2), "asked already");
        // A top-up begins: the next take that leaves it low asks again.
        r.top_up();
        assert_eq!(r.len(), 4);
        assert_eq!(take(), (3, 2));
        assert_eq!(take(), (2, 2));
        assert_eq!(take(), (1, 3));
    }

    /// A preallocated reservoir asks for a top-up, and a top-up makes chunks, only
    /// once it is empty: the chunks a fill leaves it are not joined by a batch made
    /// as the fill nears `max_keys`. Once empty it grows as any other does.
    #[test]
    fn a_preallocated_reservoir_is_topped_up_only_once_empty() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;
        let r = Reservoir::preallocated(4 * 64 * CHUNK, 2).expect("the allocator gives it");
        let asked = Arc::new(AtomicUsize::new(0));
        let count = asked.clone();
        r.on_low(Box::new(move || {
            count.fetch_add(1, Ordering::SeqCst);
        }));
        let stock = r.len();
        // Down to one chunk: far below half a batch (4), and nothing asked or made.
        let mut taken: Vec<_> = (1..stock).map(|_| r.take()).collect();
        r.top_up();
        assert_eq!(
            (r.len(), r.made(), asked.load(Ordering::SeqCst)),
            (1, stock, 0)
        );
        // The last take empties it and asks; the top-up makes a batch.
        taken.push(r.take());
        assert_eq!(asked.load(Ordering::SeqCst), 1);
        r.top_up();
        assert_eq!((r.len(), r.made()), (4, stock + 4));
    }

    /// A namespace of [`REGION_MIN_KEYS`] keys or more carves each batch from a 2 MiB
    /// region: all of its chunks at once, free, distinct and inside one 2 MiB-aligned
    /// block; topped up with a new region once fewer than a quarter are left; every
    /// chunk given back kept (none let go while its region lives); the slack at each
    /// region's end counted. Once another region's chunks would pass what its full
    /// slab needs, it makes its chunks one by one, as a smaller namespace always does.
    #[test]
    fn a_large_namespaces_reservoir_carves_its_batches_from_regions() {
        let small = Reservoir::new(REGION_MIN_KEYS - 1);
        let _ = small.take();
        assert_eq!(small.regions(), 0);
        assert_eq!(small.len(), small.batch() - 1, "a batch made one by one");
        assert!(small.batch() < REGION_CHUNKS);

        let r = Reservoir::new(REGION_MIN_KEYS);
        assert_eq!(r.batch(), REGION_CHUNKS);
        let mut taken = vec![r.take()];
        assert_eq!((r.regions(), r.len()), (1, REGION_CHUNKS - 1));
        taken.extend((1..REGION_CHUNKS).map(|_| r.take()));
        let mut addrs: Vec<usize> = taken.iter().map(|c| c.addr()).collect();
        addrs.sort_unstable();
        let base = addrs[0];
        let size = std::mem::size_of::<[Entry; CHUNK]>();
        assert_eq!(base % REGION_BYTES, 0, "the block is aligned to its size");
        for (i, a) in addrs.iter().enumerate() {
            assert_eq!(*a, base + i * size, "consecutive arrays of one block");
        }
        assert!(addrs[REGION_CHUNKS - 1] + size <= base + REGION_BYTES);
        assert!(taken.iter().all(|c| c
            .iter()
            .all(|e| e.state() == STATE_FREE && e.next == super::NIL)));

        // Held: none (all taken); the region's slack is still counted.
        let slack = REGION_BYTES - REGION_CHUNKS * size;
        assert!(slack < size);
        let held = |r: &Reservoir| {
            r.bytes() - r.chunks.lock().capacity() * std::mem::size_of::<super::Chunk>()
        };
        assert_eq!(held(&r), slack);

        // Given back, kept; a top-up waits until fewer than a quarter are left.
        let quarter = REGION_CHUNKS.div_ceil(4);
        for c in taken.drain(..quarter) {
            r.give_back(c);
        }
        r.top_up();
        assert_eq!(
            (r.regions(), r.len()),
            (1, quarter),
            "a quarter held: no top-up"
        );
        taken.push(r.take());
        r.top_up();
        assert_eq!(
            (r.regions(), r.len()),
            (2, quarter - 1 + REGION_CHUNKS),
            "below a quarter: a new region"
        );
        assert_eq!(held(&r), (quarter - 1 + REGION_CHUNKS) * size + 2 * slack);

        // Drawn on, topped up as it goes: regions while another fits in the
        // budget (`REGION_MIN_KEYS / CHUNK` chunks, eight regions' worth), then
        // chunks one by one.
        let budget = REGION_MIN_KEYS / CHUNK;
        while taken.len() < budget + 100 {
            taken.push(r.take());
            r.top_up();
        }
        assert_eq!(r.regions(), budget / REGION_CHUNKS);
        assert_eq!(r.batch(), small.batch(), "past the regions: one by one");
        assert!(r.len() <= r.batch());
        let carved = taken.iter().filter(|c| c.carved()).count();
        let carved_held = r.chunks.lock().iter().filter(|c| c.carved()).count();
        assert_eq!(carved + carved_held, r.regions() * REGION_CHUNKS);
        // A region's chunks given back are kept past a batch; chunks made one by one
        // are let go past it.
        let before = r.len();
        let back: Vec<_> = taken
            .drain(..)
            .filter(|c| c.carved())
            .take(REGION_CHUNKS)
            .collect();
        for c in back {
            r.give_back(c);
        }
        assert_eq!(r.len(), before + REGION_CHUNKS);
        r.give_back(new_chunk());
        assert_eq!(r.len(), before + REGION_CHUNKS, "past a batch: let go");

        // Chunks that claims made one by one, finding the reservoir empty while a
        // top-up was on its way, count towards the budget too: 100 of them leave
        // room for seven regions, not eight.
        let r = Reservoir::new(REGION_MIN_KEYS);
        r.on_low(Box::new(|| {}));
        let mut taken: Vec<_> = (0..100).map(|_| r.take()).collect();
        assert_eq!((r.regions(), r.len()), (0, 0));
        while taken.len() < budget + 100 {
            r.top_up();
            taken.push(r.take());
        }
        assert_eq!(r.regions(), (budget - 100) / REGION_CHUNKS);
    }

    /// Two lanes filling one slab each get their next chunk ahead, from their own
    /// spare: once a lane has its first chunk, no chunk is made under the lock,
    /// whatever the lanes' positions in their chunks.
    #[test]
    fn each_lane_of_a_slab_gets_its_next_chunk_ahead() {
        let mut shard = Shard::new(0, 64).unwrap();
        let mut made_under_the_lock = 0;
        // The lanes take slots at different paces (the first lane three for the
        // second lane's two), so that their chunks' ends fall anywhere.
        for step in 0..20 * CHUNK {
            let lane = usize::from(step % 5 >= 3);
            let next = shard.slab.lanes[lane].next as usize;
            if next > 0 && next.is_multiple_of(CHUNK) && shard.spares[lane].is_none() {
                made_under_the_lock += 1;
            }
            let _ = shard.slab.alloc(Entry::FREE, lane, &mut shard.spares[lane]);
            if shard.wants_spare(lane) {
                // The claimant's part, after the lock: a chunk for its lane.
                shard.spares[lane] = Some(new_chunk());
            }
        }
        assert_eq!(made_under_the_lock, 0);
    }

    /// A chunk handed to a shard that has a spare already comes back (for the
    /// reservoir, which keeps a region's chunks until the region goes).
    #[test]
    fn a_shard_with_a_spare_gives_the_next_chunk_back() {
        let mut shard = Shard::new(0, 64).unwrap();
        assert!(
            shard.give_spare(new_chunk()).is_none(),
            "taken as the spare"
        );
        let second = new_chunk();
        let addr = second.addr();
        let back = shard.give_spare(second);
        assert_eq!(back.map(|c| c.addr()), Some(addr));
    }
}

#[cfg(all(test, not(idem_loom)))]
mod lane_wheels {
    use super::{AtomicUsize, Capacity, Fp, Now, Shard, LANES, STATE_DONE};

    /// Expiry passes that run out of budget part the lanes' wheels, the earlier lanes'
    /// ahead: the first lane's time is always the latest of them and the last lane's
    /// the earliest, which is what the shard reads as its time and publishes.
    #[test]
    fn the_first_lanes_wheel_is_the_latest_and_the_last_lanes_the_earliest() {
        let mut shard = Shard::new(0, 64).unwrap();
        let mut key = 0u64;
        // Entries in every lane, due at scattered ticks up to 3,000.
        for lane in 0..LANES {
            for i in 0..200u64 {
                key += 1;
                let fp = Fp {
                    lo: key.wrapping_mul(0x9e37_79b9_7f4a_7c15),
                    hi: key,
                };
                shard.place(fp, STATE_DONE, 1 + (i * 7_919) % 3_000, lane);
            }
        }
        let pool = AtomicUsize::new(0);
        let cap = Capacity {
            pool: &pool,
            chunk: 64,
        };
        let mut parted = false;
        for tick in [500, 1_000, 2_999, 3_000, 5_000, 5_000] {
            let now = Now { ms: tick, tick };
            loop {
                let (_, done) = shard.expire_some(now, &cap, 7);
                let times: Vec<u64> = shard.wheels.iter().map(|w| w.current()).collect();
                let latest = *times.iter().max().unwrap();
                let earliest = *times.iter().min().unwrap();
                assert_eq!(shard.time(), latest, "{times:?}");
                assert_eq!(shard.behind(), earliest, "{times:?}");
                parted |= latest != earliest;
                if done {
                    break;
                }
            }
            assert_eq!(shard.behind(), tick);
        }
        assert!(parted, "no pass left the wheels apart");
        assert_eq!(shard.live, 0);
    }

    /// One expiry call reclaims at most its budget over all the lanes' wheels
    /// together (the lock is held for about that many entries), and calls repeated
    /// until done reclaim every due entry.
    #[test]
    fn an_expiry_call_shares_its_budget_between_the_lanes() {
        let mut shard = Shard::new(0, 64).unwrap();
        let mut key = 0u64;
        // 30 entries due in the first lane, 200 in the last.
        for (lane, n) in [(0, 30u64), (LANES - 1, 200)] {
            for i in 0..n {
                key += 1;
                let fp = Fp {
                    lo: key.wrapping_mul(0x9e37_79b9_7f4a_7c15),
                    hi: key,
                };
                shard.place(fp, STATE_DONE, 1 + i % 5, lane);
            }
        }
        let pool = AtomicUsize::new(0);
        let cap = Capacity {
            pool: &pool,
            chunk: 64,
        };
        let now = Now { ms: 100, tick: 100 };
        let (first, done) = shard.expire_some(now, &cap, 50);
        assert!(!done);
        assert_eq!(first, 50, "30 of the first lane and 20 of the last");
        let mut calls = 1;
        let mut total = first;
        loop {
            let (n, done) = shard.expire_some(now, &cap, 50);
            assert!(n <= 50, "{n} reclaimed in one call");
            total += n;
            calls += 1;
            if done {
                break;
            }
        }
        assert_eq!((total, shard.live), (230, 0));
        assert!(calls <= 6, "{calls} calls");
    }
}
