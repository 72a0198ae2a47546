//! Configuration: [`NamespaceConfig`] for each namespace, [`EngineBuilder`] for the engine.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use crate::clock::{Clock, CoarseClock};
use crate::engine::Engine;
use crate::error::{Error, Result};

/// `d` rounded up to whole milliseconds: every deadline is kept in milliseconds, and
/// truncating would make a key expire early. (A duration too long for that is left
/// as it is; validation refuses it.)
pub(crate) fn whole_ms(d: Duration) -> Duration {
    let ms = d.as_nanos().div_ceil(1_000_000);
    u64::try_from(ms).map_or(d, Duration::from_millis)
}

/// How one namespace behaves: how long keys live, how many it holds, what it accepts.
///
/// Every setting has a default, so `NamespaceConfig::new()` alone is a working
/// namespace: completed keys stay duplicates for 24 hours, a claim's lease lasts
/// 30 seconds, at most 1,048,576 keys are resident, keys are at most 4096 bytes and
/// stored results at most 64 KiB. The memory for `max_keys` keys (about 38 MB at the
/// default) is made when the engine is built ([`NamespaceConfig::preallocate`]): size
/// `max_keys` to the peak (`idem plan`).
///
/// ```
/// use std::time::Duration;
/// use idem::NamespaceConfig;
///
/// let payments = NamespaceConfig::new()
///     .ttl(Duration::from_secs(3600))
///     .lease(Duration::from_secs(10))
///     .max_keys(2_000_000);
/// assert_eq!(payments.get_ttl(), Duration::from_secs(3600));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceConfig {
    pub(crate) ttl: Duration,
    pub(crate) lease: Duration,
    pub(crate) max_keys: usize,
    pub(crate) max_key_len: usize,
    pub(crate) max_result_len: usize,
    pub(crate) extend_on_duplicate: bool,
    pub(crate) shards: Option<usize>,
    pub(crate) preallocate: bool,
    pub(crate) retention: Option<Duration>,
    pub(crate) sync: SyncPolicy,
    pub(crate) on_store_error: FailurePolicy,
    pub(crate) expected_keys: Option<usize>,
    /// The target false-positive rate, as `f64::to_bits` (so the type stays `Eq`).
    pub(crate) prefilter_fpr_bits: u64,
    pub(crate) prefilter: bool,
    pub(crate) claim_markers: ClaimMarkers,
    pub(crate) journal_slots: usize,
}

/// When a completion reaches the disk, with a durable tier.
///
/// Every policy writes the completion to RocksDB's write-ahead log before `complete`
/// returns, so a completion that returned `Ok` survives a crash of the process
/// (SIGKILL included) under all three. They differ on power loss or an OS crash:
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncPolicy {
    /// The log is fsynced before `complete` returns: nothing acknowledged is lost,
    /// even on power loss. Concurrent completions share one fsync (group commit).
    #[default]
    Always,
    /// The log is fsynced every given interval by a background thread: on power loss
    /// at most that much of acknowledged completions is lost (like Redis
    /// `appendfsync everysec`), while its fsyncs work: one that fails is logged,
    /// counted in `Stats::periodic_sync_failures`, and reported by every later
    /// [`Engine::sync`](crate::Engine::sync). The thread stops when the [`Engine`](crate::Engine)
    /// is dropped; a completion made after that, through a guard that outlived it,
    /// is fsynced before it returns, as under `Always`.
    Periodic(Duration),
    /// The log is left to the operating system: survives a process crash, not a power
    /// loss or OS crash.
    Never,
}

/// What a claim does when the durable tier fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FailurePolicy {
    /// The claim returns [`Error::Store`] and nothing is processed (the default).
    #[default]
    FailClosed,
    /// The claim is decided from the hot tier alone; each such decision is counted in
    /// `Stats::fail_open_decisions` and logged through `tracing`.
    FailOpen,
}

/// When a claim's marker (the record that makes a claim in flight at a crash an
/// orphan at the next open) is written, with a durable tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClaimMarkers {
    /// Before `claim` returns, into the durable tier (RocksDB): every claim in
    /// flight at a crash is an orphan at the next open, and a failing disk refuses
    /// the claim itself under `FailClosed`. Costs one unsynced RocksDB write per
    /// acquired claim, and the marker's deletion in the completion's write.
    Immediate,
    /// Before `claim` returns, into a memory-mapped file of the database directory
    /// (the default): a few stores into memory, no system call and no RocksDB
    /// write. What was stored belongs to the kernel's page cache, so it survives a
    /// crash of the process (SIGKILL included) exactly as `Immediate`'s unsynced
    /// write does: every claim in flight at a process crash is an orphan at the
    /// next open. Neither survives a crash of the machine before it reaches the
    /// disk, but nothing syncs the journal: its markers reach the disk when the
    /// kernel writes the page back (some 30 s by default), where an `Immediate`
    /// marker goes with the write-ahead log's next fsync (a completion's, under
    /// `SyncPolicy::Always`). After a power loss, fewer claims in flight come back
    /// as orphans than with `Immediate`. The file's blocks are allocated when it is created, so a store
    /// never meets a full disk on a file system that writes in place (on a
    /// copy-on-write one, btrfs or ZFS, a full disk can still end the process with
    /// SIGBUS at writeback: use `Immediate` there); a failing disk is reported at
    /// completion. Linux only: elsewhere markers are written as `Immediate` ones. A
    /// completion clears its marker after its own write; a release clears it at
    /// once; the maintenance pass frees the slots of claims given up without an
    /// end once their lease has ended. When more claims are in flight than the
    /// journal has slots ([`NamespaceConfig::journal_slots`]), the extra markers are
    /// written as `Immediate` ones (counted in `Stats::journal_overflows`).
    #[default]
    Journal,
    /// Kept in memory and written by the maintenance pass (every
    /// `EngineBuilder::maintenance_interval`), and at a clean shutdown. A claim
    /// completed or released before the next pass never writes a marker at all, so
    /// `claim` does no I/O for new keys. The price: a crash forgets the claims
    /// acquired since the last pass (they are claimable at once after the restart
    /// instead of held as orphans until their lease runs out), and a failing disk is
    /// reported at completion rather than at the claim. With no maintenance thread
    /// (`maintenance_interval(None)`) the passes are the caller's
    /// [`Engine::run_maintenance`] calls: until one runs, no marker is written, and a
    /// crash forgets every claim in flight since the last.
    Deferred,
}

/// Default TTL of a completed key.
pub const DEFAULT_TTL: Duration = Duration::from_secs(24 * 3600);
/// Default lease of a claim.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);
/// Default bound on resident keys per namespace.
pub const DEFAULT_MAX_KEYS: usize = 1 << 20;
/// Default longest key, in bytes.
pub const DEFAULT_MAX_KEY_LEN: usize = 4096;
/// Default target false-positive rate of the prefilter.
pub const DEFAULT_PREFILTER_FPR: f64 = 0.01;
/// The smallest prefilter false-positive rate a namespace accepts. Each of the
/// prefilter's filters is built for a fifth of the rate, with about `-log2(rate / 5)`
/// hash functions: 62 at this rate (up to 89 for the smallest filters, whose size is
/// rounded up to whole words first). A saved prefilter is loaded at the next open
/// only if its filters use at most 96 (a bound on the work a damaged or crafted file
/// can make every query do), so a smaller rate would make every open rebuild it.
pub const MIN_PREFILTER_FPR: f64 = 1e-18;
/// The largest prefilter false-positive rate a namespace accepts.
pub const MAX_PREFILTER_FPR: f64 = 0.5;
/// Default number of claim-marker journal slots per namespace.
pub const DEFAULT_JOURNAL_SLOTS: usize = 1 << 15;
/// The most claim-marker journal slots a namespace accepts.
pub const MAX_JOURNAL_SLOTS: usize = 1 << 24;
/// The longest namespace name, in bytes: the saved prefilter's file is named by the
/// name in hexadecimal, and a file name holds at most 255 bytes.
pub const MAX_NAMESPACE_LEN: usize = 100;
/// Default largest stored result, in bytes.
pub const DEFAULT_MAX_RESULT_LEN: usize = 64 * 1024;
/// The largest `max_keys` a namespace accepts (slab indices are 31-bit).
pub const MAX_KEYS_LIMIT: usize = (1 << 31) - 1;
/// The longest retention a namespace accepts: 2^50 ms, about 35,700 years. Every
/// TTL the tick allows has its default retention (7 x TTL) below it, and a record's
/// expiry (its completion time plus retention) stays far from `u64::MAX` ms.
pub const MAX_RETENTION: Duration = Duration::from_millis(1 << 50);
/// The shortest `maintenance_interval` and `SyncPolicy::Periodic` interval accepted:
/// a shorter one would keep a thread busy without pause.
pub const MIN_BACKGROUND_INTERVAL: Duration = Duration::from_millis(1);

impl Default for NamespaceConfig {
    fn default() -> Self {
        Self::new()
    }
}

impl NamespaceConfig {
    /// A namespace with the defaults described on the type.
    pub fn new() -> Self {
        Self {
            ttl: DEFAULT_TTL,
            lease: DEFAULT_LEASE,
            max_keys: DEFAULT_MAX_KEYS,
            max_key_len: DEFAULT_MAX_KEY_LEN,
            max_result_len: DEFAULT_MAX_RESULT_LEN,
            extend_on_duplicate: false,
            shards: None,
            preallocate: true,
            retention: None,
            sync: SyncPolicy::Always,
            on_store_error: FailurePolicy::FailClosed,
            expected_keys: None,
            prefilter_fpr_bits: DEFAULT_PREFILTER_FPR.to_bits(),
            prefilter: true,
            claim_markers: ClaimMarkers::Journal,
            journal_slots: DEFAULT_JOURNAL_SLOTS,
        }
    }

    /// With a durable tier: when and where claim markers are written (default
    /// [`ClaimMarkers::Journal`]).
    pub fn claim_markers(mut self, markers: ClaimMarkers) -> Self {
        self.claim_markers = markers;
        self
    }

    /// With a durable tier and [`ClaimMarkers::Journal`]: how many claims may be in
    /// flight with their marker in the journal (default 32,768, between 1 and
    /// 16,777,216). Each slot takes 64 bytes of the journal file, allocated when the
    /// engine opens; further claims in flight write their markers to RocksDB. A
    /// claim given up without an end (a completion refused for its input, a guard
    /// leaked with `mem::forget`) keeps its slot until its lease has ended: then the
    /// maintenance pass, or a marker that finds the journal full, frees it (the
    /// claim is taken as lost: a completion after that is refused with
    /// `LeaseLost`). A completion decided from the hot tier alone (fail open, the
    /// store refusing its write) keeps its slot while the hot tier holds the key.
    pub fn journal_slots(mut self, slots: usize) -> Self {
        self.journal_slots = slots;
        self
    }

    /// The configured journal size, in slots.
    pub fn get_journal_slots(&self) -> usize {
        self.journal_slots
    }

    /// With a durable tier: the worst-case number of keys within retention (peak
    /// rate x retention), which sizes the prefilter. Default: `max_keys` x
    /// ⌈retention / TTL⌉ (the ratio rounded up to whole TTLs), what a namespace full
    /// at every moment would complete within retention, rounded up: with retention
    /// not a whole number of TTLs, set it to peak rate x retention (`idem plan` prints
    /// it) to spare the difference. More keys than this make the prefilter grow.
    /// The prefilter takes about 16 bits a key in all at the default rate (about 13
    /// for each key its filters are planned for, and one generation more than
    /// retention spans is live; with a retention under a few minutes more, as the
    /// upkeep keeps generations a minute past their end: `idem plan` counts them);
    /// [`EngineBuilder::build`] checks that one filter can
    /// be allocated, and returns
    /// [`Error::OutOfMemory`] (or [`Error::InvalidConfig`] for a size beyond any
    /// address space) otherwise, before the durable tier is opened.
    pub fn expected_keys(mut self, keys: usize) -> Self {
        self.expected_keys = Some(keys);
        self
    }

    /// With a durable tier: the prefilter's target false-positive rate, the share of
    /// new keys that still cost a durable read (default 0.01; between
    /// [`MIN_PREFILTER_FPR`], 1e-18, and [`MAX_PREFILTER_FPR`], 0.5).
    pub fn prefilter_fpr(mut self, fpr: f64) -> Self {
        self.prefilter_fpr_bits = fpr.to_bits();
        self
    }

    /// With a durable tier: whether the namespace keeps a prefilter (default true).
    /// Without one, every claim the hot tier cannot answer reads the durable tier.
    /// Memory-only namespaces never have one: their hot tier knows every key.
    pub fn prefilter(mut self, enabled: bool) -> Self {
        self.prefilter = enabled;
        self
    }

    /// The prefilter's sizing: the configured `expected_keys` or its default.
    pub fn get_expected_keys(&self) -> usize {
        self.expected_keys.unwrap_or_else(|| {
            let ttl = self.ttl.as_millis().max(1);
            let periods = self.get_retention().as_millis().div_ceil(ttl);
            (self.max_keys as u128)
                .saturating_mul(periods)
                .min(usize::MAX as u128) as usize
        })
    }

    /// The finest [`EngineBuilder::tick`] this namespace's TTL and lease allow
    /// (each must be at most 2^30 ticks), at least 1 ms: what a tool that opens the
    /// database with the stored settings alone (`idem dlq`) ticks at.
    pub fn finest_tick(&self) -> Duration {
        let span = self.ttl.max(self.lease).as_millis();
        let ms = span
            .div_ceil(u128::from(crate::hot::MAX_DEADLINE_TICKS))
            .max(1);
        Duration::from_millis(ms.min(u128::from(u64::MAX)) as u64)
    }

    /// The prefilter's target false-positive rate.
    pub fn get_prefilter_fpr(&self) -> f64 {
        f64::from_bits(self.prefilter_fpr_bits)
    }

    /// Whether a durable namespace keeps a prefilter.
    pub fn get_prefilter(&self) -> bool {
        self.prefilter
    }

    /// How long a completed key answers `Duplicate`, counted from its completion
    /// (rounded up to whole milliseconds, so never shorter than asked).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = whole_ms(ttl);
        self
    }

    /// How long a claim may stay in progress before the key can be claimed again
    /// (orphan recovery after a crashed worker; rounded up to whole milliseconds).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = whole_ms(lease);
        self
    }

    /// An exact bound on resident keys (in progress or done and unexpired): the namespace
    /// accepts this many and refuses the next with [`Error::CapacityExceeded`].
    /// Size it as peak rate x TTL; with an [`EngineBuilder::tick`] coarser than 1 ms,
    /// peak rate x (TTL + tick): a done key keeps its room until the tick its
    /// deadline falls on, up to a tick less a millisecond past its TTL.
    ///
    /// [`Stats::resident_keys`](crate::Stats::resident_keys) also counts expired keys
    /// that no maintenance pass has reclaimed yet, so it can read `max_keys` while
    /// fewer keys are live; a claim that finds no room reclaims expired keys before
    /// it refuses, so those never cause a refusal.
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys;
        self
    }

    /// The longest key accepted, in bytes (default 4096): from 1 to `u32::MAX` (a dead
    /// letter stores its key's length in 32 bits); a longer limit is refused with
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig).
    pub fn max_key_len(mut self, max_key_len: usize) -> Self {
        self.max_key_len = max_key_len;
        self
    }

    /// The largest result `complete_with_result` stores, in bytes (default 64 KiB, at
    /// most 1 MiB).
    pub fn max_result_len(mut self, max_result_len: usize) -> Self {
        self.max_result_len = max_result_len;
        self
    }

    /// Window semantics. `false` (the default) is a fixed window: a completed key is a
    /// duplicate for `ttl` after its completion, however often it is seen again.
    /// `true` is a sliding window: every duplicate sighting restarts the TTL. Sliding
    /// windows store the completion time beside the entry, which costs memory per key.
    /// With a durable tier the window is kept there too: when sightings carry it past
    /// the done record's expiry (completion + retention at first, or the first
    /// window's end rounded up to a tick if that is later), the record is
    /// rewritten to last another retention, so the window survives a restart. That
    /// sighting's claim then writes (with the namespace's sync policy), about once
    /// per retention for a key seen steadily, and returns the store's error if the
    /// write fails under [`FailurePolicy::FailClosed`]. The record's end is counted in
    /// this run's retentions from the completion: a record written under a shorter
    /// retention (the configuration changed between runs) is rewritten at its key's
    /// first sighting, to last the longer one, whether or not the window reached its
    /// end.
    pub fn extend_on_duplicate(mut self, extend: bool) -> Self {
        self.extend_on_duplicate = extend;
        self
    }

    /// Number of lock shards (default: derived from `max_keys`, 32 to 1,024). More
    /// shards mean less contention between threads and a little more fixed memory.
    /// From 1 to 4,096: [`EngineBuilder::build`](crate::EngineBuilder::build)
    /// refuses another count as [`Error::InvalidConfig`](crate::Error::InvalidConfig).
    /// [`Namespace::shard_count`](crate::Namespace::shard_count) tells the count a
    /// namespace has.
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = Some(shards);
        self
    }

    /// Makes the namespace's memory for `max_keys` keys when the engine is built
    /// (default `true`): each shard's index sized for its share of `max_keys`, so it
    /// never doubles as keys arrive, and the slab of entries (28 bytes a key),
    /// `max_keys` entries written free and a chunk of 512 more for each of a shard's
    /// lanes (the room a lane's last, partly used chunk leaves): each shard's lanes
    /// get their first chunk, the rest wait in the namespace's reservoir. So a fill
    /// makes no memory and takes next to no page fault: a fill to `max_keys` by one
    /// thread makes no chunk, by several threads at most one a lane (a lane may hold
    /// the next chunk it took ahead as its last one neared its end). The build takes
    /// longer: it writes the whole namespace's memory (5-72 ms at 1,000,000 keys and
    /// 43-635 ms at 10,000,000 on the benchmark machine, the most where the host
    /// priced fresh memory high; see ARCHITECTURE.md, "Preallocation").
    /// The price in memory: the index's full size, 6 to 12 bytes per key of
    /// `max_keys` (its bucket count is a power of two), and the slab's, 28 bytes per
    /// key, are held from the start, whether or not the keys come (about 38 MB at the
    /// default `max_keys`); a shard that draws more than its share through the common
    /// pool still grows. Memory per resident key at full capacity is the same either
    /// way (within 2 %). In time, on the benchmark machine: a fill of 1,000,000 keys
    /// by two threads took 0.92x the time it took growing, by one thread 1.06x-1.10x
    /// (a full-size index spreads the first inserts over all its lines); of
    /// 10,000,000 keys by one thread 0.89x.
    ///
    /// With `false` the namespace takes its memory as keys arrive and holds only what
    /// its keys need (more a key than at full: a small or part-full namespace's
    /// fixed parts weigh): each shard's index starts with one 4 KiB page of room, 672
    /// keys, or its share of `max_keys` if that is smaller, and doubles from there,
    /// and slab chunks are made as the shards' lanes fill them (ahead, on the
    /// maintenance thread, where it can). An index doubles into an array made ahead,
    /// a few entries with each insert (about 15 an insert over the last sixteenth of
    /// its room: a few tenths of a microsecond on the benchmark machine): from 1,024
    /// buckets on the maintenance thread makes it (or, if it has not by the last
    /// 32nd of room, the claim that reaches that point), a smaller one the claim
    /// that reaches that sixteenth (each after letting the shard's lock go: up to 64
    /// KiB allocated and written in that claim, more for a large one). One whose
    /// array was still not made (a shard drawing past its share of `max_keys`
    /// through the common pool, or an allocation refused) places every entry of the
    /// shard again while its lock is held, a pause for the claims of that shard of
    /// about 6.5 ns an entry (35 us at 5,376 entries). The first touch of the new
    /// memory then happens during the fill: on the maintenance thread's core, or in
    /// a claim that finds no chunk ready; with as many claiming threads as cores it
    /// comes out of the claims' time (two threads over one 1.08x-1.46x at 1,000,000
    /// keys in the benchmark runs, where a preallocated namespace ran 1.24x-1.80x;
    /// BENCHMARKS.md). Choose it for many namespaces sized for peaks they rarely
    /// reach, or where memory held unused costs more than that work.
    ///
    /// If the allocator refuses the memory made at build, [`EngineBuilder::build`]
    /// returns [`Error::OutOfMemory`] instead of aborting the process, before the
    /// durable tier is opened (so the database is left as it was). Under Linux's
    /// default overcommit the allocator refuses only a request larger than the
    /// machine could ever hold; a smaller one that the machine cannot back is
    /// granted, and writing it can end the process (the kernel's out-of-memory
    /// killer), as any allocation can: at build, where the default makes it, rather
    /// than later at a peak. Size `max_keys` to the machine (`idem plan` prints the
    /// memory it takes).
    pub fn preallocate(mut self, preallocate: bool) -> Self {
        self.preallocate = preallocate;
        self
    }

    /// With a durable tier: how long a completed key stays a duplicate there, counted
    /// from completion (at least the TTL; default 7 x TTL; a sliding window's sightings
    /// extend it by whole retentions, see [`NamespaceConfig::extend_on_duplicate`]).
    /// The hot tier keeps a key for the TTL; after that a claim finds it in the durable
    /// tier until retention ends, after a restart too. Past retention a compaction
    /// filter removes it. At most [`MAX_RETENTION`]. Rounded up to whole
    /// milliseconds.
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = Some(whole_ms(retention));
        self
    }

    /// With a durable tier: when completions reach the disk (default
    /// [`SyncPolicy::Always`]).
    pub fn sync(mut self, sync: SyncPolicy) -> Self {
        self.sync = sync;
        self
    }

    /// With a durable tier: what a claim does when the store fails (default
    /// [`FailurePolicy::FailClosed`]).
    pub fn on_store_error(mut self, policy: FailurePolicy) -> Self {
        self.on_store_error = policy;
        self
    }

    /// The retention in effect: the configured one, or 7 x TTL (saturating at
    /// `Duration::MAX`, which [`EngineBuilder::build`] refuses as too long).
    pub fn get_retention(&self) -> Duration {
        self.retention.unwrap_or(self.ttl.saturating_mul(7))
    }

    /// The longest key accepted, in bytes.
    pub fn get_max_key_len(&self) -> usize {
        self.max_key_len
    }

    /// The configured TTL.
    pub fn get_ttl(&self) -> Duration {
        self.ttl
    }

    /// The configured lease.
    pub fn get_lease(&self) -> Duration {
        self.lease
    }

    /// The configured bound on resident keys.
    pub fn get_max_keys(&self) -> usize {
        self.max_keys
    }

    /// The largest result stored with a completion, in bytes.
    pub fn get_max_result_len(&self) -> usize {
        self.max_result_len
    }

    /// Whether a duplicate restarts its key's window (a sliding window).
    pub fn get_extend_on_duplicate(&self) -> bool {
        self.extend_on_duplicate
    }

    /// The shard count set with [`NamespaceConfig::shards`], if one was: `None`
    /// means the count follows `max_keys` (a built namespace tells its count:
    /// [`Namespace::shard_count`](crate::Namespace::shard_count)).
    pub fn get_shards(&self) -> Option<usize> {
        self.shards
    }

    /// Whether the index is sized for `max_keys` at build.
    pub fn get_preallocate(&self) -> bool {
        self.preallocate
    }

    /// When a completion reaches the disk, with a durable tier.
    pub fn get_sync(&self) -> SyncPolicy {
        self.sync
    }

    /// What a claim or completion does when the durable tier fails.
    pub fn get_on_store_error(&self) -> FailurePolicy {
        self.on_store_error
    }

    /// Where claims in flight are recorded, with a durable tier.
    pub fn get_claim_markers(&self) -> ClaimMarkers {
        self.claim_markers
    }

    pub(crate) fn validate(&self, name: &str, tick_ms: u64) -> Result<()> {
        let bad = |reason: &'static str| {
            Err(Error::InvalidConfig {
                namespace: name.to_owned(),
                reason,
            })
        };
        // Deadlines are kept as 32-bit tick counts compared with serial arithmetic,
        // so every deadline must lie less than 2^30 ticks ahead (leaving headroom).
        let max_span_ms = crate::hot::MAX_DEADLINE_TICKS.saturating_mul(tick_ms);
        if name.is_empty() {
            return bad("the namespace name is empty");
        }
        if name.len() > MAX_NAMESPACE_LEN {
            return bad("the namespace name is longer than 100 bytes");
        }
        if self.journal_slots == 0 || self.journal_slots > MAX_JOURNAL_SLOTS {
            return bad("journal_slots must be between 1 and 16,777,216");
        }
        if self.ttl.as_millis() == 0 {
            return bad("ttl must be at least 1 ms");
        }
        if self.lease.as_millis() == 0 {
            return bad("lease must be at least 1 ms");
        }
        if self.ttl.as_millis() > max_span_ms as u128 {
            return bad("ttl is longer than 2^30 ticks; choose a coarser EngineBuilder::tick");
        }
        if self.lease.as_millis() > max_span_ms as u128 {
            return bad("lease is longer than 2^30 ticks; choose a coarser EngineBuilder::tick");
        }
        if self.max_keys == 0 || self.max_keys > MAX_KEYS_LIMIT {
            return bad("max_keys must be between 1 and 2^31 - 1");
        }
        if self.max_result_len > crate::durable::codec::MAX_RESULT {
            // The durable record could not be read back.
            return bad("max_result_len is at most 1 MiB");
        }
        if self.max_key_len == 0 {
            return bad("max_key_len must be at least 1");
        }
        if u32::try_from(self.max_key_len).is_err() {
            // A dead letter stores its key's length in 32 bits.
            return bad("max_key_len is at most 2^32 - 1 bytes");
        }
        if self.get_retention() < self.ttl {
            return bad("retention must be at least the ttl");
        }
        if self.get_retention() > MAX_RETENTION {
            return bad("retention is at most 2^50 ms (about 35,700 years)");
        }
        if let SyncPolicy::Periodic(d) = self.sync {
            if d < MIN_BACKGROUND_INTERVAL {
                return bad("a periodic sync interval must be at least 1 ms");
            }
        }
        if name.contains(':') {
            return bad("namespace names may not contain ':'");
        }
        if name.contains('\0') {
            // RocksDB takes column family names as C strings.
            return bad("namespace names may not contain a NUL byte");
        }
        let fpr = self.get_prefilter_fpr();
        if !(MIN_PREFILTER_FPR..=MAX_PREFILTER_FPR).contains(&fpr) {
            return bad("prefilter_fpr must be at least 1e-18 and at most 0.5");
        }
        if self.expected_keys == Some(0) {
            return bad("expected_keys must be at least 1");
        }
        if let Some(s) = self.shards {
            if s == 0 || s > 4096 {
                return bad("shards must be between 1 and 4096");
            }
        }
        Ok(())
    }
}

/// Builds an [`Engine`]: its namespaces, its clock and its maintenance.
///
/// ```
/// use std::time::Duration;
/// use idem::{Engine, NamespaceConfig};
///
/// let engine = Engine::builder()
///     .namespace("orders", NamespaceConfig::new().ttl(Duration::from_secs(600)))
///     .build()?;
/// let orders = engine.namespace("orders")?;
/// # let _ = orders;
/// # Ok::<(), idem::Error>(())
/// ```
pub struct EngineBuilder {
    pub(crate) namespaces: Vec<(String, NamespaceConfig)>,
    /// A std `Arc`: the clock is shared, immutable configuration, not part of the
    /// protocol that loom explores (a `ManualClock`'s own atomic still is).
    pub(crate) clock: std::sync::Arc<dyn Clock>,
    pub(crate) tick: Duration,
    pub(crate) maintenance_interval: Option<Duration>,
    pub(crate) seed: Option<u64>,
    pub(crate) durable: Option<std::path::PathBuf>,
    pub(crate) state_families: Vec<String>,
    /// `None`: the adaptive wait (the default); `Some(ZERO)`: RocksDB's own sync.
    pub(crate) commit_delay: Option<Duration>,
    /// RocksDB's own counters ([`EngineBuilder::store_statistics`]).
    pub(crate) store_statistics: bool,
    /// [`EngineBuilder::batch_background_threads`].
    pub(crate) batch_background: bool,
}

impl fmt::Debug for EngineBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EngineBuilder")
            .field("namespaces", &self.namespaces)
            .field("tick", &self.tick)
            .field("maintenance_interval", &self.maintenance_interval)
            .finish_non_exhaustive()
    }
}

impl Default for EngineBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl EngineBuilder {
    /// A builder with no namespaces, the system clock at tick resolution
    /// ([`CoarseClock`]), 1 ms ticks and a maintenance pass every 100 ms.
    pub fn new() -> Self {
        Self {
            namespaces: Vec::new(),
            clock: std::sync::Arc::new(CoarseClock),
            tick: Duration::from_millis(1),
            maintenance_interval: Some(Duration::from_millis(100)),
            seed: None,
            durable: None,
            state_families: Vec::new(),
            commit_delay: None,
            store_statistics: false,
            batch_background: true,
        }
    }

    /// Adds the durable tier: an embedded RocksDB database in `path` (created if
    /// missing). Completed keys then survive crashes and restarts for their
    /// namespace's retention, and claims in flight at a crash are reported at the
    /// next open. Needs the `durable` cargo feature (on by default). The path must be
    /// valid UTF-8, not empty and without a NUL byte ([`Error::InvalidConfig`] at
    /// [`build`](Self::build) otherwise): RocksDB takes it as a string, and would put
    /// its files elsewhere than idem's.
    pub fn durable(mut self, path: impl AsRef<std::path::Path>) -> Self {
        self.durable = Some(path.as_ref().to_path_buf());
        self
    }

    /// Declares a column family for the consumer's own state, written by
    /// co-commits ([`ClaimGuard::complete_with`](crate::ClaimGuard::complete_with))
    /// and read back with [`Engine::read_state`](crate::Engine::read_state). Names
    /// are non-empty, without `:` or a NUL byte, and declared once
    /// ([`Error::InvalidConfig`] at [`build`](Self::build) otherwise).
    pub fn state_family(mut self, name: &str) -> Self {
        self.state_families.push(name.to_owned());
        self
    }

    /// Adds a namespace. Names must be unique and non-empty.
    pub fn namespace(mut self, name: &str, config: NamespaceConfig) -> Self {
        self.namespaces.push((name.to_owned(), config));
        self
    }

    /// The clock every deadline is read from (default [`CoarseClock`]; [`SystemClock`](crate::SystemClock)
    /// where deadlines must be exact to the millisecond).
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = std::sync::Arc::new(clock);
        self
    }

    /// The resolution of deadlines (default 1 ms). TTLs and leases may be at most 2^30
    /// ticks long (about 12 days at 1 ms); a coarser tick allows longer ones. Expiry is
    /// never early and at most one tick late; a completion time answered from the hot
    /// tier may read up to one tick late too ([`Done::completed_at_ms`](crate::Done::completed_at_ms)).
    /// A whole number of milliseconds, from 1 ms to 60 s: `build` refuses others.
    pub fn tick(mut self, tick: Duration) -> Self {
        self.tick = tick;
        self
    }

    /// How often the background thread expires keys whose TTL or lease ran out
    /// (default every 100 ms; at least 1 ms). Between those passes the same thread
    /// also prepares the hot tier's next entries when a filling namespace runs low of
    /// them, makes the array a shard's index is about to double into, and frees the
    /// tables outgrown once they reach 1 MiB, so that claiming threads do not. `None`
    /// starts no thread: expired keys are then reclaimed by [`Engine::run_maintenance`]
    /// and, lazily, when they are claimed again, a claim that needs entries prepares
    /// them itself, an index doubles all at once, and outgrown tables are freed by
    /// the claim that brings them to 1 MiB. [`ClaimMarkers::Deferred`] markers are
    /// then written only by `run_maintenance` (and at a clean shutdown).
    pub fn maintenance_interval(mut self, interval: Option<Duration>) -> Self {
        self.maintenance_interval = interval;
        self
    }

    /// Group commit for [`SyncPolicy::Always`]: completions write their records
    /// without a sync and share fsyncs of the write-ahead log, one leader syncing for
    /// every write that is waiting. While completions are concurrent, a leader whose
    /// fsync would cover its own write alone first waits up to `delay` for another
    /// completion's write, so that one fsync covers both. Every completion still
    /// returns only after an fsync that began after its own write. Completions count
    /// as concurrent when the last fsync covered more than one or another arrived
    /// while it ran, so a single worker never waits.
    ///
    /// The default (without this call) is adaptive: the wait is at most half the time
    /// the last fsync took (and at most 5 ms), since a longer wait for a companion
    /// would cost more than the fsync it saves. A fixed `delay` replaces that bound;
    /// set it near the time a worker takes between two completions. At most 100 ms.
    ///
    /// `Duration::ZERO` turns group commit off and leaves syncing to RocksDB, which
    /// syncs each group of writers that arrive together; with few threads such groups
    /// seldom form, since a second write arrives just after the first one's fsync has
    /// begun. The difference that makes when a sync fails: with group commit the
    /// record is written before the fsync, so if the fsync fails, the record is
    /// readable (a redelivery answers `Duplicate`) and may or may not survive a power
    /// loss, while `complete` returns the error (under `FailurePolicy::FailOpen`:
    /// `Ok`, counted as a fail-open decision). RocksDB's own path does not apply a
    /// write whose sync failed to its memtables (the claim is released, and a
    /// redelivery acquires the key; under `FailOpen` the completion is decided from
    /// the hot tier, and its claim marker stays: the next open may report the claim
    /// among [`Engine::orphans`](crate::Engine::orphans)), but the record is in the
    /// log file it failed to sync, and an open after a restart replays what the log
    /// holds: the completion (and its state changes) may then be there after all. A
    /// consumer that must tell keeps group commit on, where a failed fsync's write
    /// reads as applied.
    pub fn commit_delay(mut self, delay: Duration) -> Self {
        self.commit_delay = Some(delay);
        self
    }

    /// With a durable tier: has RocksDB count what it does (its tickers, no timers),
    /// so that [`Stats::wal_syncs`](crate::Stats::wal_syncs) reports the
    /// write-ahead log's fsyncs by RocksDB's own count: whatever idem asked for,
    /// the syncs that were made. Off by default: every RocksDB read and write then
    /// updates a few more counters.
    pub fn store_statistics(mut self, on: bool) -> Self {
        self.store_statistics = on;
        self
    }

    /// Whether background threads run under Linux's `SCHED_BATCH` (on by default):
    /// the engine's maintenance thread (and its write-ahead-log sync thread), and,
    /// with a durable tier, RocksDB's flush and compaction threads. A thread so
    /// scheduled keeps its share of the processor, but when it wakes it never
    /// preempts a running thread to run at once: it takes an idle core, or waits for
    /// the running thread's time slice to end. Claims then are not interrupted by
    /// them: on the benchmark VM's two cores, W3's durable claims were preempted
    /// about 2,000 times a run by RocksDB's flush thread and idem's maintenance
    /// thread, and with both batched the claims over 1 us that read nothing fell
    /// by a third or more (`BENCHMARKS.md`). RocksDB's threads belong to its
    /// process-wide default environment: any other RocksDB database of the process
    /// shares them, and they stay so scheduled. `false` leaves every thread as it
    /// is. Elsewhere than Linux it changes nothing.
    pub fn batch_background_threads(mut self, on: bool) -> Self {
        self.batch_background = on;
        self
    }

    /// Fixes the fingerprint seed instead of drawing a random one. Fingerprints with a
    /// known seed can be forced to collide by whoever picks the keys: use this for
    /// reproducible tests and benchmarks only.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Validates the configuration and starts the engine. Memory the configuration
    /// takes up front (each namespace's preallocated index and slab, the default;
    /// a durable namespace's prefilter) is made here, and refused with
    /// [`Error::OutOfMemory`] where the allocator will not give it, or where the
    /// namespaces' preallocations together pass the memory the process may use
    /// ([`MemoryLimit`](crate::MemoryLimit)), before anything is made or opened.
    pub fn build(self) -> Result<Engine> {
        let tick_ms = self.tick.as_millis();
        if tick_ms == 0 || tick_ms > 60_000 {
            return Err(Error::InvalidConfig {
                namespace: String::new(),
                reason: "tick must be between 1 ms and 60 s",
            });
        }
        if !self.tick.subsec_nanos().is_multiple_of(1_000_000) {
            // Ticks are counted in whole milliseconds: 1.999 ms would be used as 1 ms,
            // and a TTL that fits 2^30 of the ticks asked for refused.
            return Err(Error::InvalidConfig {
                namespace: String::new(),
                reason: "tick must be a whole number of milliseconds",
            });
        }
        if self.commit_delay > Some(Duration::from_millis(100)) {
            return Err(Error::InvalidConfig {
                namespace: String::new(),
                reason: "commit_delay must be at most 100 ms",
            });
        }
        if let Some(path) = &self.durable {
            let bytes = path.as_os_str().as_encoded_bytes();
            if bytes.is_empty() {
                // Refused by RocksDB's mkdir as a storage failure, not as the
                // setting it is.
                return Err(Error::InvalidConfig {
                    namespace: String::new(),
                    reason: "the durable tier's path is empty",
                });
            }
            if bytes.contains(&0) {
                // No file name holds one, and RocksDB takes the path as a C string.
                return Err(Error::InvalidConfig {
                    namespace: String::new(),
                    reason: "the durable tier's path may not contain a NUL byte",
                });
            }
            crate::durable::check_path(path)?;
        }
        #[cfg(not(feature = "durable"))]
        if self.durable.is_some() {
            return Err(Error::InvalidConfig {
                namespace: String::new(),
                reason: "this build has no durable tier (the `durable` cargo feature is off)",
            });
        }
        if matches!(self.maintenance_interval, Some(d) if d < MIN_BACKGROUND_INTERVAL) {
            return Err(Error::InvalidConfig {
                namespace: String::new(),
                reason: "maintenance_interval must be at least 1 ms (or None)",
            });
        }
        for (i, f) in self.state_families.iter().enumerate() {
            if f.is_empty() || f.contains(':') || f.contains('\0') {
                return Err(Error::InvalidConfig {
                    namespace: String::new(),
                    reason: "state family names must be non-empty and contain no ':' or NUL byte",
                });
            }
            // As a namespace named twice is: two declarations of one name are a
            // configuration put together wrongly, not one family.
            if self.state_families[..i].contains(f) {
                return Err(Error::InvalidConfig {
                    namespace: String::new(),
                    reason: "a state family is declared twice",
                });
            }
        }
        let mut seen = HashMap::new();
        for (name, cfg) in &self.namespaces {
            cfg.validate(name, tick_ms as u64)?;
            if seen.insert(name.as_str(), ()).is_some() {
                return Err(Error::DuplicateNamespace(name.clone()));
            }
            if self.durable.is_some() && cfg.get_prefilter() {
                use crate::prefilter::{check_size, SizeProblem};
                match check_size(cfg.get_expected_keys(), cfg.get_prefilter_fpr()) {
                    Ok(()) => {}
                    Err(SizeProblem::TooLarge) => {
                        return Err(Error::InvalidConfig {
                            namespace: name.clone(),
                            reason: "the prefilter for expected_keys at prefilter_fpr would not fit in memory at all (expected_keys defaults to max_keys x retention / ttl, rounded up to whole ttls)",
                        })
                    }
                    Err(SizeProblem::NotAllocatable) => {
                        return Err(Error::OutOfMemory {
                            namespace: name.clone(),
                            what: "a prefilter generation (expected_keys / 4 keys; expected_keys defaults to max_keys x retention / ttl, rounded up to whole ttls)",
                        })
                    }
                }
            }
        }
        Engine::from_builder(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every getter gives the default on a new configuration, then what its setter
    /// set.
    #[test]
    fn each_setting_reads_back_as_set() {
        let d = NamespaceConfig::new();
        assert_eq!(
            (
                d.get_max_result_len(),
                d.get_extend_on_duplicate(),
                d.get_shards(),
                d.get_preallocate(),
                d.get_sync(),
                d.get_on_store_error(),
                d.get_claim_markers(),
            ),
            (
                DEFAULT_MAX_RESULT_LEN,
                false,
                None,
                true,
                SyncPolicy::default(),
                FailurePolicy::default(),
                ClaimMarkers::default(),
            )
        );
        let c = NamespaceConfig::new()
            .max_result_len(7)
            .extend_on_duplicate(true)
            .shards(12)
            .preallocate(false)
            .sync(SyncPolicy::Periodic(Duration::from_millis(250)))
            .on_store_error(FailurePolicy::FailOpen)
            .claim_markers(ClaimMarkers::Immediate);
        assert_eq!(
            (
                c.get_max_result_len(),
                c.get_extend_on_duplicate(),
                c.get_shards(),
                c.get_preallocate(),
                c.get_sync(),
                c.get_on_store_error(),
                c.get_claim_markers(),
            ),
            (
                7,
                true,
                Some(12),
                false,
                SyncPolicy::Periodic(Duration::from_millis(250)),
                FailurePolicy::FailOpen,
                ClaimMarkers::Immediate,
            )
        );
        assert_ne!(FailurePolicy::default(), FailurePolicy::FailOpen);
        assert_ne!(ClaimMarkers::default(), ClaimMarkers::Immediate);
    }
}
