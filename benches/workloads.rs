//! W1 (fresh) and W2 (duplicate) of `../shared/WORKLOAD.md`: idem against its peers,
//! with claims per second and memory per resident key.
//!
//! ```text
//! cargo bench --bench workloads -- [--quick] [--n 1000000,10000000] [--threads 1,2]
//!                                  [--runs 3]
//!                                  [--peers idem,idem-aff,idem-grow,idem-b64,floor,dashmap,
//!                                           moka,redis,redis-p64,jetstream,jetstream-p64,
//!                                           machine]
//!                                  [--moka-max-n 1000000] [--redis-max-n 1000000]
//!                                  [--redis-sample 100000] [--jetstream-max-n 1000000]
//!                                  [--jetstream-sample 100000] [--w2-passes K]
//!                                  [--w2-shuffled | --w2-one-order]
//!                                  [--w2-shuffled-max-n 1000000]
//! ```
//!
//! Peers: `idem`, `idem-aff` (idem with the keys handed to the threads by
//! `Namespace::router`, as a consumer that routes its messages to its workers would:
//! each thread claims keys of a run of shards no other thread writes, but for a
//! shard that straddles the cut when the shard count is odd; its two threads over
//! one are what the same claims scale to when no shard's lines pass between the
//! cores, beside `idem`'s, whose threads share every shard), `idem-grow` (idem with
//! `preallocate(false)`: the namespace's index and slab made as keys arrive, where
//! the default, which `idem` measures, makes them for N keys at build, so that its
//! fill allocates next to nothing; the build time is printed beside W1's CPU table),
//! `idem-b64` (idem through `claim_batch` / `complete_batch`, 64 keys a
//! call: the counterpart of Redis's 64-deep pipeline), `idem-r64` (idem completing
//! every key with a 64-byte result: the memory a stored result costs; not in the
//! default set), `idem-claim` (not in the default set: idem's claims alone, each
//! guard kept, neither completed nor released; W2's claims answered in progress),
//! `floor`, `dashmap`, `moka`,
//! `redis` (one request at a time), `redis-p64` (pipelined 64 deep), `jetstream` and
//! `jetstream-p64` (NATS JetStream's deduplication window, one publish at a time and
//! pipelined 64 deep) and `machine` (no
//! table: one random store a key for W1 and one random load for W2, in an array of N
//! 32-byte cells; its two threads over one are the machine's own scaling in the same
//! run, against which the peers' are read), and `cas` (not in the default set: a
//! model of another hot tier, whose claim takes its key's bucket in one shared table
//! by compare-and-swap and keeps its entries and timing wheel per thread, so that its
//! threads share no lock and no line but by chance; see `workloads/cas.rs`), and `cas12`
//! (not in the default set either: `cas`'s lanes under a table of idem's 64-byte,
//! 12-slot buckets, each locked alone by the claims that write it; see
//! `workloads/cas12.rs`), and `cas12m` (not in the default set: `cas12` with a lock
//! a lane, a maintenance thread passing over the lanes every millisecond, and
//! completions that may come from any thread; see `workloads/cas12m.rs`). The Redis peers
//! run when `redis-server` is on `PATH` (the child starts its own server on a free
//! loopback port with no persistence, and stops it), the JetStream peers when
//! `nats-server` is (a server with JetStream, the stream in memory); without them they
//! are skipped with a note. See `workloads/redis.rs` and `workloads/jetstream.rs`.
//! A networked peer's child times at most `--redis-sample` / `--jetstream-sample`
//! claims, and no more than each thread makes in 2 s (`remote::TIMED_MAX`): one
//! request at a time over a slow loopback would otherwise spend most of the run's
//! time waiting on the network. In W1 the rest of its N keys are sent pipelined
//! 1,024 deep (`remote::LOAD_DEPTH`), untimed, so that memory covers them; W2 claims
//! its timed sample only.
//!
//! Every (peer, N, threads) measurement runs in a child process of its own (this
//! executable, re-run with a hidden `--child` argument), so no peer's memory or
//! allocator state is seen by another. The child runs W1 (timed; memory is measured
//! after it), then W2 over the same keys in the same structure (timed): W2's fill is
//! W1 itself. The parent interleaves the peers within each run (a peer's thread
//! counts back to back, so that its two threads over one compare children seconds
//! apart; the first run in the list's order, each later one in a shuffle seeded by its
//! number, so that no peer follows the same one in every run: a child's time moves
//! with what the child before it left in memory), collects one result line per child
//! and prints markdown tables of medians with the min-max spread. A run of several threads is
//! timed by its workers, from the first one's start to the last one's end.
//!
//! Where Linux's per-thread scheduler counters can be read (`/proc`), each W1 child
//! (but the `machine` reference's, whose fill is timed over passes) also reports
//! where its fill's time went: the busier worker's CPU time, the longest
//! a worker was ready to run but waited for a CPU, and the CPU time of the process's
//! other threads meanwhile (a structure's background threads: idem's maintenance
//! thread). The parent prints them after W1's table, one thread beside two, with two
//! threads over one by the workers' CPU: on a machine with as many cores as workers,
//! a background thread's work comes out of a worker's time, and the wall-clock ratio
//! mixes it with the scaling of the claims themselves. Beside them, the time the
//! structure took to build before the fill (not in W1's time): what a peer does
//! ahead, such as idem's `preallocate` (the default; `idem-grow` without it), shows there.
//!
//! Memory per resident key is the live heap counted by this binary's global allocator
//! (after minus before, divided by N); "before" is taken once the key array exists and
//! before the engine or table is built, so the array is excluded and every fixed cost
//! of the structure is included. The RSS delta from `/proc/self/statm` is given beside
//! it; it also holds allocator slack and pages freed by table growth but not returned.
//!
//! W2's timed phase is repeated over the same keys until it has run for
//! [`W2_MIN_SECS`] (at most [`W2_MAX_PASSES`] passes), and its rate is per pass: at
//! N = 1,000,000 one pass on two threads takes 50-100 ms, which a single descheduling
//! on a shared host moves by a large fraction. `--w2-passes K` times exactly K passes
//! instead (`--w2-passes 1`: one pass, as before).
//!
//! W2 claims the keys in the order W1 inserted them. idem appends each shard's entries
//! to a slab in insertion order, so that replay reads each shard's slab front to back
//! and finds most entries' lines already loaded by the one before; a table that
//! stores its keys in place (the floor) gets no such help. So each child (but the
//! networked peers', whose time is the network's) then runs W2 again over the same
//! structure, timed the same way, in another fixed order unrelated to W1's (a seeded
//! shuffle, every peer alike), which takes that locality away: the last table. It
//! runs at N <= 1,000,000 unless `--w2-shuffled-max-n` says otherwise (at 10 M keys it
//! would add over a minute a run). `--w2-one-order` leaves that second W2 out;
//! `--w2-shuffled` runs W2 in the shuffled order only (the targets are then read on
//! it).
//!
//! Run without `--bench` (as `cargo test --benches` does) it only does a small smoke
//! run.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::Write as _;
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use child_result::ChildResult;
use idem::{Claim, Engine, NamespaceConfig};
use xxhash_rust::xxh3::xxh3_128_with_seed;

#[path = "workloads/cas.rs"]
mod cas;
#[path = "workloads/cas12.rs"]
mod cas12;
#[path = "workloads/cas12m.rs"]
mod cas12m;
#[path = "workloads/child_result.rs"]
mod child_result;
#[path = "workloads/jetstream.rs"]
mod jetstream;
#[path = "workloads/peers.rs"]
mod peers;
#[path = "workloads/redis.rs"]
mod redis;
#[path = "workloads/remote.rs"]
mod remote;
#[path = "workloads/report.rs"]
mod report;

use peers::PEERS;
use report::{table, targets, Grid, Sample, Workload};

// ---------------------------------------------------------------------------------
// Counting allocator
// ---------------------------------------------------------------------------------

/// Counters are striped over cache lines, one stripe per thread (modulo), so that
/// allocation-heavy peers running on two threads do not contend on one counter.
const STRIPES: usize = 16;

#[repr(align(128))]
struct Stripe(AtomicIsize);

#[allow(clippy::declare_interior_mutable_const)]
const ZERO_STRIPE: Stripe = Stripe(AtomicIsize::new(0));
static LIVE: [Stripe; STRIPES] = [ZERO_STRIPE; STRIPES];
static NEXT_STRIPE: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    // A plain `Cell` with a const initialiser: reading it never allocates and
    // registers no destructor, so the allocator may use it.
    static MY_STRIPE: Cell<usize> = const { Cell::new(usize::MAX) };
}

#[inline]
fn stripe() -> &'static AtomicIsize {
    let i = MY_STRIPE
        .try_with(|s| {
            let mut i = s.get();
            if i == usize::MAX {
                i = NEXT_STRIPE.fetch_add(1, Ordering::Relaxed) % STRIPES;
                s.set(i);
            }
            i
        })
        .unwrap_or(0);
    &LIVE[i].0
}

/// Wraps the system allocator and counts live heap bytes.
struct Counting;

// SAFETY: every method forwards to `System` with the caller's arguments unchanged and
// only adds bookkeeping on plain atomics, so `System`'s guarantees carry over.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded from our caller, who upholds `GlobalAlloc::alloc`'s contract.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            stripe().fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            stripe().fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by this allocator (hence by `System`) with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        stripe().fetch_sub(layout.size() as isize, Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` was allocated by `System` with `layout`; the caller upholds the
        // rest of `realloc`'s contract.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            stripe().fetch_add(
                new_size as isize - layout.size() as isize,
                Ordering::Relaxed,
            );
        }
        p
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Live heap bytes, summed over the stripes.
fn live_heap() -> isize {
    LIVE.iter().map(|s| s.0.load(Ordering::Relaxed)).sum()
}

/// Resident set size in bytes, from `/proc/self/statm` (4 KiB pages on this x86-64).
fn rss_bytes() -> isize {
    rss_of("/proc/self/statm")
}

/// Resident set size in bytes from a `statm` file.
fn rss_of(statm: &str) -> isize {
    const PAGE: isize = 4096;
    std::fs::read_to_string(statm)
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<isize>().ok())
        .map_or(0, |pages| pages * PAGE)
}

// ---------------------------------------------------------------------------------
// Keys and peers
// ---------------------------------------------------------------------------------

type Key = [u8; 20];

/// TTL of every key, all peers.
const TTL: Duration = Duration::from_secs(3600);
/// Seed of the peers' fingerprints (idem draws its own).
const FP_SEED: u64 = 0x5EED_1DE4_0000_0001;

/// Key i of the workloads: `ord-` and 16 hex digits of `i * 0x9E37_79B9_7F4A_7C15`.
fn keys(n: usize) -> Vec<Key> {
    let mut out = Vec::with_capacity(n);
    for i in 0..n as u64 {
        let s = format!("ord-{:016x}", i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let mut k = [0u8; 20];
        k.copy_from_slice(s.as_bytes());
        out.push(k);
    }
    out
}

#[inline]
fn fp(key: &Key) -> u128 {
    xxh3_128_with_seed(key, FP_SEED)
}

/// The engine seed of the `idem-aff` peer.
const AFF_SEED: u64 = 0xAFF1_4E17_0000_0001;

/// A namespace made as the `idem-aff` peer's is (same seed, same `max_keys`, so the
/// same shards), without a maintenance thread, whose router places the keys. It
/// stays alive, idle, through the measurement: freed before it, its pages would be
/// the measured engine's to reuse, already resident, and its RSS would read low.
fn affine_probe(n: usize) -> Idem {
    let builder = Engine::builder().seed(AFF_SEED).maintenance_interval(None);
    Idem::built(builder, n, 0, Some(false))
}

/// `keys` in the order that gives each of `threads` threads the keys `probe`'s
/// router sends it ([`report::affine_order`]): keys of its own shards.
fn affine_keys(probe: &Idem, keys: &[Key], threads: usize) -> Vec<Key> {
    let router = probe
        .ns
        .router(threads.max(1))
        .expect("at least one thread");
    report::affine_order(keys, threads, |k| {
        router.worker(k).expect("a workload key is valid")
    })
}

/// One claim of each kind, as each peer spells it.
trait Peer: Sync {
    /// W1: a new key. True if it was taken (and, for idem, completed).
    fn fresh(&self, key: &Key) -> bool;
    /// W2: a key claimed before. True if the answer was "duplicate".
    fn duplicate(&self, key: &Key) -> bool;
    /// W1 over a batch of keys (at most [`BATCH`]): how many were not taken. Peers
    /// without a batch form take the keys one by one.
    fn fresh_many(&self, keys: &[Key]) -> u64 {
        keys.iter().filter(|k| !self.fresh(k)).count() as u64
    }
    /// W2 over a batch of keys: how many did not answer "duplicate".
    fn duplicate_many(&self, keys: &[Key]) -> u64 {
        keys.iter().filter(|k| !self.duplicate(k)).count() as u64
    }
    /// Work the peer defers to after the inserts (moka's pending housekeeping).
    fn settle(&self) {}
    /// The structure's own idea of its heap size, where it has one.
    fn own_bytes(&self) -> Option<u64> {
        None
    }
    /// Whether W1's fill may be run again over the same keys, each pass as the first
    /// (a reference whose "claim" is a plain store): its fill is then timed over
    /// passes until [`W2_MIN_SECS`], as W2 is, since one pass is too short to time.
    fn refills(&self) -> bool {
        false
    }
}

struct Idem {
    _engine: Engine,
    ns: idem::Namespace,
    /// Stored with every completion when not empty (`idem-r64`).
    result: Vec<u8>,
}

impl Idem {
    fn new(n: usize, result_bytes: usize) -> Self {
        Idem::built(Engine::builder(), n, result_bytes, None)
    }

    /// The `idem-grow` peer's: a namespace that takes its memory as keys arrive
    /// (`preallocate(false)`), where the default makes it at build.
    fn growing(n: usize) -> Self {
        Idem::built(Engine::builder(), n, 0, Some(false))
    }

    /// The `idem-aff` peer's: seeded with [`AFF_SEED`], so that its shards are the
    /// ones [`affine_keys`] grouped the keys by.
    fn affine(n: usize) -> Self {
        Idem::built(Engine::builder().seed(AFF_SEED), n, 0, None)
    }

    fn built(
        builder: idem::EngineBuilder,
        n: usize,
        result_bytes: usize,
        preallocate: Option<bool>,
    ) -> Self {
        let mut cfg = NamespaceConfig::new().ttl(TTL).max_keys(n);
        if let Some(p) = preallocate {
            cfg = cfg.preallocate(p);
        }
        let engine = builder.namespace("w", cfg).build().expect("engine");
        let ns = engine.namespace("w").expect("namespace");
        Idem {
            _engine: engine,
            ns,
            result: vec![0x5A; result_bytes],
        }
    }
}

impl Peer for Idem {
    #[inline]
    fn fresh(&self, key: &Key) -> bool {
        match self.ns.claim(key) {
            Ok(Claim::Acquired(g)) if self.result.is_empty() => g.complete().is_ok(),
            Ok(Claim::Acquired(g)) => g.complete_with_result(&self.result).is_ok(),
            _ => false,
        }
    }

    #[inline]
    fn duplicate(&self, key: &Key) -> bool {
        matches!(self.ns.claim(key), Ok(Claim::Duplicate(_)))
    }

    fn own_bytes(&self) -> Option<u64> {
        Some(self.ns.stats().hot_bytes)
    }
}

/// idem's claims alone (`idem-claim`, a reference): W1 claims each key and keeps its
/// guard (forgotten, so neither completed nor released: no second lock round), W2
/// claims the keys again, each answered in progress. Beside `idem`'s, it shows what a
/// fresh key's completion costs, and how claims alone scale over two threads.
struct IdemClaims(Idem);

impl Peer for IdemClaims {
    #[inline]
    fn fresh(&self, key: &Key) -> bool {
        match self.0.ns.claim(key) {
            Ok(Claim::Acquired(g)) => {
                std::mem::forget(g);
                true
            }
            _ => false,
        }
    }

    #[inline]
    fn duplicate(&self, key: &Key) -> bool {
        matches!(self.0.ns.claim(key), Ok(Claim::InProgress(_)))
    }

    fn own_bytes(&self) -> Option<u64> {
        Some(self.0.ns.stats().hot_bytes)
    }
}

/// The batch size of the batched peers (`idem-b64`), as deep as Redis's pipeline.
const BATCH: usize = 64;

/// idem through its batch calls: `claim_batch` of 64 keys, then `complete_batch` of
/// the guards (W1); `claim_batch` of 64 keys (W2).
struct IdemBatch(Idem);

impl Peer for IdemBatch {
    fn fresh(&self, key: &Key) -> bool {
        self.0.fresh(key)
    }

    fn duplicate(&self, key: &Key) -> bool {
        self.0.duplicate(key)
    }

    #[inline]
    fn fresh_many(&self, keys: &[Key]) -> u64 {
        let mut refs: [&[u8]; BATCH] = [&[]; BATCH];
        for (r, k) in refs.iter_mut().zip(keys) {
            *r = k;
        }
        let Ok(claims) = self.0.ns.claim_batch(&refs[..keys.len()]) else {
            return keys.len() as u64;
        };
        let mut failed = 0;
        let guards: Vec<_> = claims
            .into_iter()
            .filter_map(|c| match c {
                Claim::Acquired(g) => Some(g),
                _ => {
                    failed += 1;
                    None
                }
            })
            .collect();
        match self.0.ns.complete_batch(guards) {
            Ok(done) => failed + done.iter().filter(|r| r.is_err()).count() as u64,
            Err(_) => keys.len() as u64,
        }
    }

    #[inline]
    fn duplicate_many(&self, keys: &[Key]) -> u64 {
        let mut refs: [&[u8]; BATCH] = [&[]; BATCH];
        for (r, k) in refs.iter_mut().zip(keys) {
            *r = k;
        }
        match self.0.ns.claim_batch(&refs[..keys.len()]) {
            Ok(claims) => claims
                .iter()
                .filter(|c| !matches!(c, Claim::Duplicate(_)))
                .count() as u64,
            Err(_) => keys.len() as u64,
        }
    }

    fn own_bytes(&self) -> Option<u64> {
        self.0.own_bytes()
    }
}

/// The floor: one mutex over a SwissTable of 128-bit fingerprints.
struct Floor(parking_lot::Mutex<hashbrown::HashMap<[u8; 16], u32>>);

impl Floor {
    #[inline]
    fn insert_if_absent(&self, key: &Key) -> bool {
        let f = fp(key).to_le_bytes();
        match self.0.lock().entry(f) {
            hashbrown::hash_map::Entry::Vacant(v) => {
                v.insert(1);
                true
            }
            hashbrown::hash_map::Entry::Occupied(_) => false,
        }
    }
}

impl Peer for Floor {
    #[inline]
    fn fresh(&self, key: &Key) -> bool {
        self.insert_if_absent(key)
    }

    #[inline]
    fn duplicate(&self, key: &Key) -> bool {
        let f = fp(key).to_le_bytes();
        self.0.lock().contains_key(&f)
    }
}

/// dashmap, insert-if-absent through its entry API (the shard's write lock).
struct Dash(dashmap::DashMap<u128, u32>);

impl Dash {
    #[inline]
    fn insert_if_absent(&self, key: &Key) -> bool {
        match self.0.entry(fp(key)) {
            dashmap::Entry::Vacant(v) => {
                v.insert(1);
                true
            }
            dashmap::Entry::Occupied(_) => false,
        }
    }
}

impl Peer for Dash {
    #[inline]
    fn fresh(&self, key: &Key) -> bool {
        self.insert_if_absent(key)
    }

    #[inline]
    fn duplicate(&self, key: &Key) -> bool {
        !self.insert_if_absent(key)
    }
}

/// The machine's own reference: no table, one random 32-byte cell per key in an
/// array of N cells, written by W1 and read by W2. Each operation is a fingerprint and
/// one cache miss, with no lock and no line that two threads share (beyond chance
/// neighbours), so its two threads over one say how far this machine, at this
/// moment, lets two threads' misses overlap: the ceiling for a peer's own scaling.
struct Machine(Vec<[std::sync::atomic::AtomicU64; 4]>);

impl Machine {
    fn new(n: usize) -> Self {
        Machine((0..n.max(1)).map(|_| Default::default()).collect())
    }

    #[inline]
    fn cell(&self, key: &Key) -> &std::sync::atomic::AtomicU64 {
        let h = fp(key) as u64;
        &self.0[((h as u128 * self.0.len() as u128) >> 64) as usize][0]
    }
}

impl Peer for Machine {
    #[inline]
    fn fresh(&self, key: &Key) -> bool {
        // A plain store (no read-modify-write): taken, whatever was there.
        self.cell(key).store(1, Ordering::Relaxed);
        true
    }

    #[inline]
    fn duplicate(&self, key: &Key) -> bool {
        self.cell(key).load(Ordering::Relaxed) != 0
    }

    /// A store is a store, whatever the cell held: each pass is the first.
    fn refills(&self) -> bool {
        true
    }
}

/// moka with a TTL, claim by `entry(key).or_insert_with` and `is_fresh`.
struct Moka(moka::sync::Cache<String, ()>);

impl Moka {
    #[inline]
    fn claim(&self, key: &Key) -> bool {
        // The keys are ASCII by construction.
        let k = std::str::from_utf8(key).expect("ASCII key").to_owned();
        self.0.entry(k).or_insert_with(|| ()).is_fresh()
    }
}

impl Peer for Moka {
    #[inline]
    fn fresh(&self, key: &Key) -> bool {
        self.claim(key)
    }

    #[inline]
    fn duplicate(&self, key: &Key) -> bool {
        !self.claim(key)
    }

    fn settle(&self) {
        self.0.run_pending_tasks();
    }
}

/// `--peers`: an unknown name stops the run here, before any child, with a usage
/// error (a child would panic on it mid-run).
fn parse_peers(v: &str) -> Vec<String> {
    peers::parse(v).unwrap_or_else(|why| {
        eprintln!("{why}");
        std::process::exit(2);
    })
}

fn is_redis(peer: &str) -> bool {
    matches!(peer, "redis" | "redis-p64")
}

fn is_jetstream(peer: &str) -> bool {
    matches!(peer, "jetstream" | "jetstream-p64")
}

// ---------------------------------------------------------------------------------
// The child: one measurement
// ---------------------------------------------------------------------------------

/// Runs `op` over `keys` split in `threads` contiguous parts, one thread each, and
/// returns the wall time from the first worker's start to the last worker's end (each
/// worker reads its own, after the common barrier) and the number of keys for which
/// `op` returned false; with `counters`, also where the fill's time went (see
/// [`report::FillCpu`]: `/proc` read before and after, so only the run that is
/// reported reads it).
fn run_split<P: Peer>(
    peer: &P,
    keys: &[Key],
    threads: usize,
    op: fn(&P, &[Key]) -> u64,
    counters: bool,
) -> (Duration, u64, Option<report::FillCpu>) {
    let parts = report::parts(keys.len(), threads);
    let start = Barrier::new(parts.len() + 1);
    std::thread::scope(|s| {
        let workers: Vec<_> = parts
            .into_iter()
            .map(|range| {
                let chunk = &keys[range];
                let start = &start;
                s.spawn(move || {
                    start.wait();
                    let sched0 = counters.then(sched_times).flatten();
                    let began = Instant::now();
                    let mut failed = 0u64;
                    for batch in chunk.chunks(BATCH) {
                        failed += op(peer, batch);
                    }
                    let ended = Instant::now();
                    // This worker's CPU time and wait for a CPU over its part, and
                    // its thread id (left out of the other threads' count).
                    let sched = sched0.zip(sched_times()).zip(thread_id()).map(
                        |(((run0, wait0), (run1, wait1)), tid)| {
                            (run1.saturating_sub(run0), wait1.saturating_sub(wait0), tid)
                        },
                    );
                    (began, ended, failed, sched)
                })
            })
            .collect();
        let others0 = counters.then(threads_cpu).flatten();
        start.wait();
        // Timed by the workers themselves, from the first one's start to the last
        // one's end: this thread, with every core busy, may run again well after
        // the barrier let the workers go (a start read here came late by up to
        // milliseconds, and flattered runs of as many threads as cores).
        let ran: Vec<_> = workers
            .into_iter()
            .map(|w| w.join().expect("worker"))
            .collect();
        let others1 = counters.then(threads_cpu).flatten();
        let began = ran.iter().map(|r| r.0).min().expect("at least one worker");
        let ended = ran.iter().map(|r| r.1).max().expect("at least one worker");
        let cpu = ran
            .iter()
            .map(|r| r.3)
            .collect::<Option<Vec<_>>>()
            .zip(others0.zip(others1))
            .zip(thread_id())
            .map(|((w, (before, after)), me)| {
                let secs = |ns: u64| ns as f64 / 1e9;
                let mut skip: Vec<u64> = w.iter().map(|x| x.2).collect();
                skip.push(me);
                report::FillCpu {
                    busiest: secs(w.iter().map(|x| x.0).max().unwrap_or(0)),
                    waited: secs(w.iter().map(|x| x.1).max().unwrap_or(0)),
                    others: secs(report::others_cpu_ns(&before, &after, &skip)),
                    built: 0.0,
                }
            });
        (ended - began, ran.iter().map(|r| r.2).sum(), cpu)
    })
}

/// The calling thread's CPU time and its time ready to run but waiting for a CPU,
/// in nanoseconds so far, from Linux's scheduler statistics (`None` where there are
/// none).
fn sched_times() -> Option<(u64, u64)> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let mut fields = s.split_whitespace().map(|f| f.parse::<u64>().ok());
    Some((fields.next()??, fields.next()??))
}

/// The calling thread's id, as `/proc` names it (`None` without `/proc`).
fn thread_id() -> Option<u64> {
    let link = std::fs::read_link("/proc/thread-self").ok()?;
    link.file_name()?.to_str()?.parse().ok()
}

/// Every thread of this process with its CPU time so far, in nanoseconds (`None`
/// without `/proc`).
fn threads_cpu() -> Option<Vec<(u64, u64)>> {
    let tasks = std::fs::read_dir("/proc/self/task").ok()?;
    let mut v = Vec::new();
    for task in tasks.flatten() {
        let Some(tid) = task.file_name().to_str().and_then(|t| t.parse().ok()) else {
            continue;
        };
        // A thread that ended since the listing has no file left: not counted.
        if let Ok(s) = std::fs::read_to_string(task.path().join("schedstat")) {
            if let Some(Ok(ns)) = s.split_whitespace().next().map(str::parse) {
                v.push((tid, ns));
            }
        }
    }
    Some(v)
}

/// Set in a child's environment by `--w2-shuffled`.
const W2_SHUFFLED_ENV: &str = "IDEM_BENCH_W2_SHUFFLED";
/// Set in a child's environment unless `--w2-shuffled` or `--w2-one-order` is given:
/// after W2 in W1's order, W2 runs again in a shuffled one.
const W2_BOTH_ENV: &str = "IDEM_BENCH_W2_BOTH";

/// `keys` in another fixed order, unrelated to W1's (a Fisher-Yates shuffle driven by
/// xorshift64 from a fixed seed).
fn shuffle(keys: &[Key]) -> Vec<Key> {
    let mut v = keys.to_vec();
    let mut x = 0x2545_F491_4F6C_DD1D_u64;
    for i in (1..v.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.swap(i, (x % (i as u64 + 1)) as usize);
    }
    v
}

/// W2's timed phase runs at least this long in each child, unless `--w2-passes` says
/// how many passes.
const W2_MIN_SECS: f64 = 0.5;
/// The most W2 passes a child runs to reach [`W2_MIN_SECS`].
const W2_MAX_PASSES: usize = 20;
/// The most passes of a refilling reference's W1 fill ([`Peer::refills`]).
const REFILL_MAX_PASSES: u32 = 200;

/// Times W1 (the fill), then W2 over the same keys: `repeat` passes, or with `repeat`
/// 0 as many as reach [`W2_MIN_SECS`] (at most [`W2_MAX_PASSES`]), in W1's order,
/// then shuffled ([`W2_BOTH_ENV`]), or shuffled only ([`W2_SHUFFLED_ENV`]).
fn measure<P: Peer>(
    build: impl FnOnce() -> P,
    keys: &[Key],
    w2: bool,
    threads: usize,
    repeat: usize,
) -> ChildResult {
    measure_in(build, keys, shuffle, w2, threads, repeat)
}

/// [`measure`], with W2's shuffled order made from `keys` by `shuffled`.
fn measure_in<P: Peer>(
    build: impl FnOnce() -> P,
    keys: &[Key],
    shuffled: impl Fn(&[Key]) -> Vec<Key>,
    w2: bool,
    threads: usize,
    repeat: usize,
) -> ChildResult {
    let heap0 = live_heap();
    let rss0 = rss_bytes();
    let t_build = Instant::now();
    let peer = build();
    let built = t_build.elapsed().as_secs_f64();
    // A fill timed over passes (below) reports no counters: one pass is not what its
    // time describes.
    let (mut fill, mut fill_failed, fill_cpu) =
        run_split(&peer, keys, threads, P::fresh_many, !peer.refills());
    if peer.refills() {
        // One pass of a plain store a key (about 5 ms at 1 M keys) is too short to
        // time on a shared host: passes until W2's minimum, the time a pass; its
        // failures the most of any pass.
        let (mut total, mut passes) = (fill, 1u32);
        while total.as_secs_f64() < W2_MIN_SECS && passes < REFILL_MAX_PASSES {
            let (took, failed, _) = run_split(&peer, keys, threads, P::fresh_many, false);
            total += took;
            fill_failed = fill_failed.max(failed);
            passes += 1;
        }
        fill = total / passes;
    }
    let t_settle = Instant::now();
    peer.settle();
    let fill = fill + t_settle.elapsed();
    let heap = live_heap() - heap0;
    let rss = rss_bytes() - rss0;
    let own = peer.own_bytes();
    // W2's timed phase over `order`: its time per pass, and the keys that did not
    // answer Duplicate (a key the fill could not take cannot either: both count).
    let time_w2 = |order: &[Key], threads: usize| {
        let mut passes = 0;
        let mut total = Duration::ZERO;
        let mut dup_failed = 0;
        loop {
            let (dup, failed, _) = run_split(&peer, order, threads, P::duplicate_many, false);
            total += dup;
            passes += 1;
            dup_failed = dup_failed.max(failed);
            let done = match repeat {
                0 => total.as_secs_f64() >= W2_MIN_SECS || passes == W2_MAX_PASSES,
                r => passes == r,
            };
            if done {
                break;
            }
        }
        (
            total.as_secs_f64() / passes as f64,
            dup_failed.max(fill_failed),
        )
    };
    // W2 claims the keys in W1's order, unless the parent asked for another
    // (`--w2-shuffled`); and then, unless told not to, in a shuffled order too: see
    // the module's documentation.
    // With more than one thread, W2 in W1's order is run once more by one thread,
    // over the same table, right after: the fill's threads lay its entries out (two
    // threads filling a shard at once interleave their entries in its slab), and a
    // replay in W1's order reads them in that layout, so two threads over one can
    // also be read on one table.
    let (dup, dup_one, dup_shuffled) = if !w2 {
        (None, None, None)
    } else if std::env::var_os(W2_SHUFFLED_ENV).is_some() {
        (Some(time_w2(&shuffled(keys), threads)), None, None)
    } else {
        let first = time_w2(keys, threads);
        let one = (threads > 1).then(|| time_w2(keys, 1));
        let both = std::env::var_os(W2_BOTH_ENV).is_some();
        (
            Some(first),
            one,
            both.then(|| time_w2(&shuffled(keys), threads)),
        )
    };
    ChildResult {
        secs: fill.as_secs_f64(),
        failures: fill_failed,
        heap,
        rss,
        own,
        dup,
        dup_shuffled,
        dup_one,
        fill_cpu: fill_cpu.map(|c| (c.busiest, c.waited, c.others, built)),
    }
}

/// Claims a networked peer's child times by default (`--redis-sample`,
/// `--jetstream-sample`).
const REMOTE_SAMPLE: usize = 100_000;

/// A networked peer child's timed sample: its fifth argument, or the default.
fn remote_sample(arg: usize) -> usize {
    match arg {
        0 => REMOTE_SAMPLE,
        n => n,
    }
}

fn child(args: &[String]) -> ExitCode {
    // A fifth argument fixes how many times W2's timed phase runs (`--w2-passes`,
    // and for profiling the duplicate path alone); without it, it runs for
    // `W2_MIN_SECS`. The time reported is that of one pass.
    // The networked peers take the size of their timed sample instead.
    let (peer, workload, n, threads, repeat) = match args {
        [p, w, n, t] => (p, w, n, t, 0),
        [p, w, n, t, r] => (p, w, n, t, r.parse().expect("repeat")),
        _ => {
            eprintln!("--child needs: peer workload n threads [repeat | networked sample]");
            return ExitCode::from(2);
        }
    };
    let n: usize = n.parse().expect("n");
    let threads: usize = threads.parse().expect("threads");
    // `w12` is what the parent runs: W1, then W2 over the same keys. `w1` and `w2`
    // report one of the two (for profiling one path alone).
    let w2 = match workload.as_str() {
        "w1" => false,
        "w2" | "w12" => true,
        other => panic!("unknown workload {other}"),
    };
    let keys = keys(n);
    let r = match peer.as_str() {
        "idem" => measure(|| Idem::new(n, 0), &keys, w2, threads, repeat),
        "idem-r64" => measure(|| Idem::new(n, 64), &keys, w2, threads, repeat),
        "idem-grow" => measure(|| Idem::growing(n), &keys, w2, threads, repeat),
        "idem-claim" => measure(|| IdemClaims(Idem::new(n, 0)), &keys, w2, threads, repeat),
        "idem-b64" => measure(|| IdemBatch(Idem::new(n, 0)), &keys, w2, threads, repeat),
        "idem-aff" => {
            let probe = affine_probe(n);
            let order = affine_keys(&probe, &keys, threads);
            // W2's shuffled order: every peer's shuffle of the keys, then grouped the
            // same way, so that its threads too keep to their own shards.
            let shuffled = |_: &[Key]| affine_keys(&probe, &shuffle(&keys), threads);
            measure_in(|| Idem::affine(n), &order, shuffled, w2, threads, repeat)
        }
        "redis" | "redis-p64" | "jetstream" | "jetstream-p64" => {
            let depth = if peer.ends_with("-p64") { 64 } else { 1 };
            let sample = remote_sample(repeat);
            if is_redis(peer) {
                remote::measure(redis::Server::start, &keys, w2, threads, depth, sample)
            } else {
                remote::measure(jetstream::Server::start, &keys, w2, threads, depth, sample)
            }
        }
        "floor" => measure(
            || Floor(parking_lot::Mutex::new(hashbrown::HashMap::new())),
            &keys,
            w2,
            threads,
            repeat,
        ),
        "dashmap" => measure(|| Dash(dashmap::DashMap::new()), &keys, w2, threads, repeat),
        "machine" => measure(|| Machine::new(n), &keys, w2, threads, repeat),
        "cas" => measure(|| cas::Cas::new(n), &keys, w2, threads, repeat),
        "cas12" => measure(|| cas12::Cas12::new(n), &keys, w2, threads, repeat),
        "cas12m" => measure(|| cas12m::Cas12m::new(n), &keys, w2, threads, repeat),
        "moka" => measure(
            || Moka(moka::sync::Cache::builder().time_to_live(TTL).build()),
            &keys,
            w2,
            threads,
            repeat,
        ),
        other => panic!("unknown peer {other}"),
    };
    let own = r.own.map_or(-1, |b| b as i64);
    let mut shuffled = r.dup_shuffled.map_or(String::new(), |(secs, failures)| {
        format!(" w2s_secs={secs} w2s_failures={failures}")
    });
    if let Some((secs, failures)) = r.dup_one {
        shuffled.push_str(&format!(" w21_secs={secs} w21_failures={failures}"));
    }
    if let Some((busiest, waited, others, built)) = r.fill_cpu {
        shuffled.push_str(&format!(
            " w1_cpu={busiest} w1_wait={waited} w1_others={others} w1_built={built}"
        ));
    }
    match (workload.as_str(), r.dup) {
        ("w12", Some((dup_secs, dup_failures))) => println!(
            "RESULT secs={} failures={} heap={} rss={} own={own} w2_secs={dup_secs} w2_failures={dup_failures}{shuffled}",
            r.secs, r.failures, r.heap, r.rss
        ),
        (_, Some((dup_secs, dup_failures))) => println!(
            "RESULT secs={dup_secs} failures={dup_failures} heap={} rss={} own={own}",
            r.heap, r.rss
        ),
        (_, None) => println!(
            "RESULT secs={} failures={} heap={} rss={} own={own}",
            r.secs, r.failures, r.heap, r.rss
        ),
    }
    let _ = std::io::stdout().flush();
    // Skip tearing down tens of millions of entries: the process is done.
    std::process::exit(0)
}

// ---------------------------------------------------------------------------------
// The parent: runs the children and prints the tables
// ---------------------------------------------------------------------------------

struct Opts {
    ns: Vec<usize>,
    threads: Vec<usize>,
    runs: usize,
    peers: Vec<String>,
    moka_max_n: usize,
    redis_max_n: usize,
    redis_sample: usize,
    jetstream_max_n: usize,
    jetstream_sample: usize,
    /// W2 passes timed per child (`--w2-passes`; networked peers time their sample
    /// once);
    /// 0: as many as reach `W2_MIN_SECS`.
    w2_passes: usize,
    /// W2 claims the keys in another order than W1's (`--w2-shuffled`).
    w2_shuffled: bool,
    /// W2 runs in W1's order only, not again shuffled (`--w2-one-order`).
    w2_one_order: bool,
    /// The largest N whose children run W2 again shuffled (`--w2-shuffled-max-n`).
    w2_shuffled_max_n: usize,
    label: &'static str,
}

impl Opts {
    fn grid(&self) -> Grid<'_> {
        Grid {
            ns: &self.ns,
            threads: &self.threads,
            peers: &self.peers,
        }
    }
}

fn parse_list(s: &str) -> Vec<usize> {
    s.split(',')
        .map(|x| x.trim().replace('_', "").parse().expect("a number list"))
        .collect()
}

fn parse_opts(args: &[String]) -> Opts {
    // Run by `cargo bench`, the harness gets `--bench`; without it (`cargo test
    // --benches`) this is a test-mode smoke run.
    let bench_mode = args.iter().any(|a| a == "--bench");
    let mut o = Opts {
        ns: vec![1_000_000, 10_000_000],
        threads: vec![1, 2],
        runs: 3,
        peers: PEERS.iter().map(|s| s.to_string()).collect(),
        moka_max_n: 1_000_000,
        redis_max_n: 1_000_000,
        redis_sample: REMOTE_SAMPLE,
        jetstream_max_n: 1_000_000,
        jetstream_sample: REMOTE_SAMPLE,
        w2_passes: 0,
        w2_shuffled: false,
        w2_one_order: false,
        w2_shuffled_max_n: 1_000_000,
        label: "full",
    };
    if !bench_mode {
        o.ns = vec![10_000];
        o.runs = 1;
        o.redis_sample = 2_000;
        o.jetstream_sample = 2_000;
        o.label = "smoke (test mode)";
    }
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || {
            it.next()
                .unwrap_or_else(|| panic!("{a} needs a value"))
                .clone()
        };
        match a.as_str() {
            "--quick" => {
                o.ns = vec![100_000];
                o.runs = 1;
                o.redis_sample = 20_000;
                o.jetstream_sample = 20_000;
                o.label = "quick";
            }
            "--n" => o.ns = parse_list(&val()),
            "--threads" => o.threads = parse_list(&val()),
            "--runs" => o.runs = val().parse().expect("--runs"),
            "--peers" => o.peers = parse_peers(&val()),
            "--moka-max-n" => o.moka_max_n = val().replace('_', "").parse().expect("--moka-max-n"),
            "--redis-max-n" => {
                o.redis_max_n = val().replace('_', "").parse().expect("--redis-max-n")
            }
            "--redis-sample" => {
                o.redis_sample = val().replace('_', "").parse().expect("--redis-sample")
            }
            "--jetstream-max-n" => {
                o.jetstream_max_n = val().replace('_', "").parse().expect("--jetstream-max-n")
            }
            "--jetstream-sample" => {
                o.jetstream_sample = val().replace('_', "").parse().expect("--jetstream-sample")
            }
            "--w2-passes" => {
                o.w2_passes = val().parse().expect("--w2-passes");
                assert!(o.w2_passes > 0, "--w2-passes must be at least 1");
            }
            "--w2-shuffled" => o.w2_shuffled = true,
            "--w2-one-order" => o.w2_one_order = true,
            "--w2-shuffled-max-n" => {
                o.w2_shuffled_max_n = val().replace('_', "").parse().expect("--w2-shuffled-max-n")
            }
            "--bench" => {}
            other => panic!("unknown argument {other}"),
        }
    }
    o
}

fn read_file(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// `YYYY-MM-DD HH:MM:SS UTC` from the system clock.
fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (proleptic Gregorian).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// This machine's latency for one load that depends on the one before (a random
/// cyclic walk over the cache lines of a `bytes`-byte array): the cost of one cache
/// miss at that working-set size, in nanoseconds. W1 and W2 on one thread at large N
/// wait for about one such miss a key (the index's bucket), so this bounds from
/// below what any table can do here, at this moment.
fn dependent_load_ns(bytes: usize) -> f64 {
    const LINE: usize = 64 / std::mem::size_of::<usize>();
    let lines = (bytes / 64).max(2);
    // Sattolo's shuffle: one cycle through every line, in a random order.
    let mut order: Vec<usize> = (0..lines).collect();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for i in (1..lines).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        order.swap(i, (x % i as u64) as usize);
    }
    let mut next = vec![0usize; lines * LINE];
    for (k, &line) in order.iter().enumerate() {
        next[line * LINE] = order[(k + 1) % lines] * LINE;
    }
    let steps = 2_000_000;
    let mut at = 0;
    let t = Instant::now();
    for _ in 0..steps {
        at = next[at];
    }
    let ns = t.elapsed().as_nanos() as f64 / steps as f64;
    std::hint::black_box(at);
    ns
}

/// This machine's time to pass one cache line from one core to the other: two
/// threads take turns writing one word, each waiting for the other's write, for
/// 100,000 round trips or one second, whichever ends first; half a round trip, in
/// nanoseconds, the median of three. A claim waits about this long for each of its
/// shard's lines that the other thread wrote last; on a shared host it moves with
/// where the two cores run. `None` with fewer than two CPUs to run on (each turn
/// would wait for the scheduler).
fn handoff_ns() -> Option<f64> {
    const TRIPS: usize = 100_000;
    const STOP: usize = usize::MAX;
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        return None;
    }
    let mut times = Vec::new();
    for _ in 0..3 {
        let word = AtomicUsize::new(0);
        let word = &word;
        let ns = std::thread::scope(|s| {
            s.spawn(move || {
                for i in 0..TRIPS {
                    loop {
                        match word.load(Ordering::Acquire) {
                            v if v == 2 * i + 1 => break,
                            STOP => return,
                            _ => std::hint::spin_loop(),
                        }
                    }
                    word.store(2 * i + 2, Ordering::Release);
                }
            });
            let t = Instant::now();
            let mut trips = 0;
            while trips < TRIPS {
                word.store(2 * trips + 1, Ordering::Release);
                while word.load(Ordering::Acquire) != 2 * trips + 2 {
                    std::hint::spin_loop();
                }
                trips += 1;
                if trips % 1024 == 0 && t.elapsed() > Duration::from_secs(1) {
                    break;
                }
            }
            let ns = t.elapsed().as_nanos() as f64 / (2 * trips) as f64;
            word.store(STOP, Ordering::Release);
            ns
        });
        times.push(ns);
    }
    Some(report::median(&mut times))
}

/// The machine's memory and core-to-core latencies now, for the run's notes.
fn latencies() -> String {
    format!(
        "one dependent load over random lines of a 2 MiB array {:.0} ns, of 64 MiB {:.0} ns, of 512 MiB {:.0} ns (a pointer chase: the cost of one cache miss at each size, what a single claim at 10 M keys waits for at least once); one cache line from one core to the other {} (a two-thread ping-pong: what a claim waits for each line of its shard the other thread wrote last)",
        dependent_load_ns(2 << 20),
        dependent_load_ns(64 << 20),
        dependent_load_ns(512 << 20),
        handoff_ns().map_or("not measured: fewer than two CPUs".to_owned(), |ns| format!("{ns:.0} ns"))
    )
}

fn machine() -> String {
    let cpuinfo = read_file("/proc/cpuinfo");
    let model = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")?
                .split_once(':')
                .map(|(_, v)| v.trim())
        })
        .unwrap_or("unknown");
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem_kb: u64 = read_file("/proc/meminfo")
        .lines()
        .find_map(|l| {
            l.strip_prefix("MemTotal:")?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0);
    let load = read_file("/proc/loadavg");
    let load: Vec<&str> = load.split_whitespace().take(3).collect();
    format!(
        "nproc {nproc}, CPU \"{model}\", {:.1} GiB RAM, load average at start {}",
        mem_kb as f64 / (1024.0 * 1024.0),
        load.join(" ")
    )
}

/// Runs one child: W1, then W2 over the same keys, for `peer` at `n` keys on
/// `threads` threads. Returns the W1 sample, the W2 sample and, if the child ran W2
/// in a shuffled order too, that one.
fn run_child(o: &Opts, peer: &str, n: usize, threads: usize) -> Vec<Sample> {
    let exe = std::env::current_exe().expect("current_exe");
    let mut cmd = Command::new(exe);
    cmd.args(["--child", peer, "w12", &n.to_string(), &threads.to_string()]);
    if is_redis(peer) {
        cmd.arg(o.redis_sample.to_string());
    } else if is_jetstream(peer) {
        cmd.arg(o.jetstream_sample.to_string());
    } else if o.w2_passes > 0 {
        cmd.arg(o.w2_passes.to_string());
    }
    if o.w2_shuffled {
        cmd.env(W2_SHUFFLED_ENV, "1");
    } else if !o.w2_one_order && n <= o.w2_shuffled_max_n {
        cmd.env(W2_BOTH_ENV, "1");
    }
    let out = cmd.output().expect("spawning a child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("RESULT "))
        .unwrap_or_else(|| {
            panic!(
                "child {peer} n={n} t={threads} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let maybe = |name: &str| -> Option<&str> {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
    };
    let field =
        |name: &str| -> &str { maybe(name).unwrap_or_else(|| panic!("no {name} in {line}")) };
    let sample = |w: Workload, secs: &str, failures: &str| {
        let secs: f64 = field(secs).parse().expect("secs");
        Sample {
            peer: peer.to_owned(),
            w,
            n,
            threads,
            rate: n as f64 / secs,
            failures: field(failures).parse().expect("failures"),
            heap: field("heap").parse().expect("heap"),
            rss: field("rss").parse().expect("rss"),
            own: field("own").parse().expect("own"),
            cpu: None,
        }
    };
    let cpu = || -> Option<report::FillCpu> {
        let read = |name: &str| maybe(name)?.parse::<f64>().ok();
        Some(report::FillCpu {
            busiest: read("w1_cpu")?,
            waited: read("w1_wait")?,
            others: read("w1_others")?,
            built: read("w1_built")?,
        })
    };
    let mut samples = vec![
        Sample {
            cpu: cpu(),
            ..sample(Workload::W1, "secs", "failures")
        },
        sample(Workload::W2, "w2_secs", "w2_failures"),
    ];
    if maybe("w2s_secs").is_some() {
        samples.push(sample(Workload::W2s, "w2s_secs", "w2s_failures"));
    }
    if maybe("w21_secs").is_some() {
        samples.push(sample(Workload::W2One, "w21_secs", "w21_failures"));
    }
    samples
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(pos) = args.iter().position(|a| a == "--child") {
        return child(&args[pos + 1..]);
    }
    let mut o = parse_opts(&args);
    let redis_skipped = o.peers.iter().any(|p| is_redis(p)) && !remote::available("redis-server");
    if redis_skipped {
        o.peers.retain(|p| !is_redis(p));
    }
    let jetstream_skipped =
        o.peers.iter().any(|p| is_jetstream(p)) && !remote::available("nats-server");
    if jetstream_skipped {
        o.peers.retain(|p| !is_jetstream(p));
    }
    let shown: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| *a != "--bench")
        .collect();
    println!("## idem workloads W1/W2 ({})\n", o.label);
    if !args.iter().any(|a| a == "--bench") {
        println!("- command: test mode (run without `--bench`, as `cargo test --benches` does)");
    } else {
        // The package's features apply to its benches too: say how this was built.
        let features = if cfg!(feature = "durable") {
            ""
        } else {
            " --no-default-features"
        };
        if shown.is_empty() {
            println!("- command: `cargo bench{features} --bench workloads`");
        } else {
            println!(
                "- command: `cargo bench{features} --bench workloads -- {}`",
                shown.join(" ")
            );
        }
    }
    println!("- date: {}", utc_now());
    println!("- machine: {}", machine());
    if o.label == "full" {
        println!("- latencies at the start of the run: {}", latencies());
    }
    println!(
        "- N = {:?}, threads = {:?}, runs = {}, peers = {}; keys `ord-{{:016x}}` of i * 0x9E37_79B9_7F4A_7C15, TTL 3600 s",
        o.ns,
        o.threads,
        o.runs,
        o.peers.join(", ")
    );
    println!(
        "- each peer, N and thread count is a child process of its own per run: it runs W1 (timed; memory is measured after it), then W2 over the same keys in the same structure (timed); a peer's thread counts run back to back; the first run takes the peers in the order given, each later one in a shuffle seeded by its number; a run of several threads is timed by its workers (first start to last end)"
    );
    if o.w2_passes > 0 {
        println!(
            "- W2 is timed over {} passes of the N keys in each child (networked peers: one), and its claims/s is over one pass",
            o.w2_passes
        );
    } else {
        println!(
            "- W2 is timed over passes of the N keys in each child until {W2_MIN_SECS} s have run (at most {W2_MAX_PASSES} passes; networked peers: one), and its claims/s is over one pass"
        );
    }
    if o.peers.iter().any(|p| p == "machine") {
        println!(
            "- the `machine` reference's W1 fill (a plain store a key) is timed over passes of the N keys until {W2_MIN_SECS} s have run (at most {REFILL_MAX_PASSES}), its claims/s over one pass: one pass at 1 M keys lasts about 5 ms"
        );
    }
    if !o.w2_shuffled {
        println!(
            "- in a child of more than one thread (but the networked peers'), W2 in W1's order runs once more by one thread, timed the same way, right after: over the table that child's fill made (threads filling a shard at once interleave their entries in its slab), so that W2's two threads over one also read on one table (the scaling table's last two columns, and the target's other reading)"
        );
    }
    if o.w2_shuffled {
        println!(
            "- W2 claims the keys in another fixed order than W1 inserted them (`--w2-shuffled`: a seeded shuffle, the same for every peer but the networked ones, which claim in W1's order, and `idem-aff`, which groups it by shard as it does W1's)"
        );
    } else if !o.w2_one_order {
        println!(
            "- after W2 in W1's order, each child but the networked peers' at N <= {} runs W2 again, timed the same way, in another fixed order (a seeded shuffle, the same for every peer; `idem-aff` groups it by shard as it does W1's): the last table (`--w2-shuffled-max-n` changes the bound)",
            o.w2_shuffled_max_n
        );
    }
    println!("- idem: `NamespaceConfig::new().ttl(3600 s).max_keys(N)`, default shards, maintenance thread, the default clock (CoarseClock), random seed, its memory made at build (the default `preallocate`; not timed in W1); `idem-grow` the same with `.preallocate(false)` (its memory made as keys arrive)");
    println!("- peers key by `xxh3_128_with_seed` fingerprints (floor: `[u8; 16]`, dashmap: `u128`); moka keys are the 20-byte strings, its fill time includes `run_pending_tasks()` at the end");
    if o.peers.iter().any(|p| p == "moka") && o.ns.iter().any(|&n| n > o.moka_max_n) {
        println!(
            "- moka runs at N <= {} only: a fill runs at well under 1 M claims/s, so larger N would not fit the run's time budget (`--moka-max-n` changes it)",
            o.moka_max_n
        );
    }
    if redis_skipped {
        println!("- Redis peers skipped: `redis-server` is not on PATH (install it to compare)");
    } else if o.peers.iter().any(|p| is_redis(p)) {
        println!(
            "- Redis: a `redis-server` started by each child on a free loopback port (`--save \"\" --appendonly no`), stopped after; one connection per thread; `SET key 1 NX EX 3600`; at most the first {} claims of a run are timed (split between the threads), and no more than a thread makes in {} s, the rest of W1's keys are sent pipelined {} deep, untimed, so that memory covers all N keys, and W2 claims the timed sample only (its \"not Duplicate\" counts those claims); B/key is `used_memory` after minus before over `DBSIZE`, RSS the server's; Redis runs at N <= {} (`--redis-max-n`)",
            o.redis_sample,
            remote::TIMED_MAX.as_secs(),
            remote::LOAD_DEPTH,
            o.redis_max_n
        );
        if let Ok(v) = Command::new("redis-server").arg("--version").output() {
            println!("- {}", String::from_utf8_lossy(&v.stdout).trim());
        }
    }
    if jetstream_skipped {
        println!("- JetStream peers skipped: `nats-server` is not on PATH (install it to compare)");
    } else if o.peers.iter().any(|p| is_jetstream(p)) {
        println!(
            "- NATS JetStream: a `nats-server -js` started by each child on a free loopback port, stopped after; a stream in memory with a 3600 s `duplicate_window`; one connection per thread; a claim is a publish with the key as `Nats-Msg-Id`, taken unless the acknowledgement says `duplicate`; at most the first {} claims of a run are timed (split between the threads), and no more than a thread makes in {} s, the rest of W1's keys are sent pipelined {} deep, untimed, so that memory covers all N keys, and W2 claims the timed sample only (its \"not Duplicate\" counts those claims); B/key (both columns) is the server's RSS after minus before over the stream's message count; JetStream runs at N <= {} (`--jetstream-max-n`)",
            o.jetstream_sample,
            remote::TIMED_MAX.as_secs(),
            remote::LOAD_DEPTH,
            o.jetstream_max_n
        );
        if let Some(v) = jetstream::version() {
            println!("- {v}");
        }
    }
    println!();
    let _ = std::io::stdout().flush();

    let started = Instant::now();
    let mut all = Vec::new();
    for run in 0..o.runs {
        for &n in &o.ns {
            // A peer's thread counts run back to back, so that its two threads over
            // one compare children a few seconds apart, not a whole pass of the
            // peers apart: the host moves between regimes within a minute. Each run
            // after the first orders the peers afresh (`report::run_order`).
            for peer in report::run_order(&o.peers, run) {
                for &threads in &o.threads {
                    if peer == "moka" && n > o.moka_max_n
                        || is_redis(peer) && n > o.redis_max_n
                        || is_jetstream(peer) && n > o.jetstream_max_n
                    {
                        continue;
                    }
                    for s in run_child(&o, peer, n, threads) {
                        eprintln!(
                            "[{:>6.1} s] run {} {} n={} t={} {}: {:.3} M/s, heap {:.1} B/key, rss {:.1} B/key, failures {}",
                            started.elapsed().as_secs_f64(),
                            run + 1,
                            s.w.arg(),
                            n,
                            threads,
                            peer,
                            s.rate / 1e6,
                            s.heap as f64 / n as f64,
                            s.rss as f64 / n as f64,
                            s.failures
                        );
                        all.push(s);
                    }
                }
            }
        }
    }
    print!("{}", table(&o.grid(), &all, Workload::W1));
    println!();
    let cpu = report::fill_cpu_table(&o.grid(), &all);
    if !cpu.is_empty() {
        print!("{cpu}");
        println!();
    }
    print!("{}", table(&o.grid(), &all, Workload::W2));
    println!();
    if all.iter().any(|s| s.w == Workload::W2s) {
        print!("{}", table(&o.grid(), &all, Workload::W2s));
        println!(
            "\nIn W1's order (the table before), idem's replay reads each shard's slab front to back, and most entries' lines are loaded already; in this order they are not, as for a consumer's redeliveries. The networked peers do not run it (`--w2-one-order` leaves it out for all).\n"
        );
    }
    print!("{}", targets(&o.grid(), &all));
    println!(
        "\nTotal wall time {:.0} s. Figures are claims per second over N keys; spreads are min-max over the runs.",
        started.elapsed().as_secs_f64()
    );
    if o.label == "full" {
        println!("\nLatencies at the end of the run: {}.", latencies());
    }
    let failures: u64 = all.iter().map(|s| s.failures).sum();
    if failures > 0 {
        println!(
            "\nFAILED: {failures} claims did not answer as the workload requires (see the tables)."
        );
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
