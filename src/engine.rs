//! The engine, its namespaces, and the claim protocol's public face.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use xxhash_rust::xxh3::{xxh3_128_with_seed, xxh3_64_with_seed};

use crate::clock::Clock;
use crate::config::{EngineBuilder, NamespaceConfig};
use crate::durable::codec::{Record, RecordState};
use crate::durable::{DurableNs, StateOp};
use crate::error::{Error, KeyError, Result};
use crate::hot::{
    Anchor, Capacity, DurableLookup, Extension, Fp, Lease, Now, Params, Refused, Reservoir, Shard,
    ShardClaim, ShardSlot, ShardState, ShardWrite, SlotCell, Stored,
};
use crate::stats::Stats;
use crate::sync::{Arc, AtomicU64, AtomicUsize, Ordering};

/// Mixed into the seed for payload fingerprints, so a payload never fingerprints like
/// a key.
const PAYLOAD_SEED_MIX: u64 = 0x7061_796c_6f61_6421;

/// The fingerprint a claim with `payload` stores, under a database's (or a memory-only
/// engine's) key seed `seed`.
pub(crate) fn payload_fingerprint(seed: u64, payload: &[u8]) -> u64 {
    xxh3_64_with_seed(payload, seed ^ PAYLOAD_SEED_MIX)
}

/// The deduplication engine: a set of named namespaces sharing one clock.
///
/// Build it with [`Engine::builder`], take a cheap [`Namespace`] handle per namespace,
/// and claim keys through it. Dropping the engine stops its maintenance thread;
/// namespace handles and guards that outlive it keep working, and with a durable tier
/// they keep the database open: it closes (and a new engine can open the directory)
/// once the last of them is gone. A guard leaked with `mem::forget` (or kept in a
/// cycle) is never gone, and keeps the database open until the process exits.
pub struct Engine {
    shared: Arc<Shared>,
    #[cfg(not(idem_loom))]
    maintenance: Option<maintenance::Thread>,
    /// The maintenance thread's registration as a collector of outgrown tables
    /// (see `reclaim::register_collector`).
    #[cfg(not(idem_loom))]
    collector: Option<crate::hot::reclaim::CollectorRegistration>,
    #[cfg(not(idem_loom))]
    wal_sync: Option<maintenance::Thread>,
    /// Whether the engine was shut down ([`Engine::close`]); its drop then has
    /// nothing left to do.
    #[cfg(not(idem_loom))]
    shut: bool,
}

pub(crate) struct Shared {
    namespaces: HashMap<String, Arc<NsInner>>,
    /// Each namespace's keeper, shared by all its handles (see [`Keeper`]).
    keepers: HashMap<String, std::sync::Arc<Keeper>>,
    clock: std::sync::Arc<dyn Clock>,
    orphans: Vec<Orphan>,
    unconfigured: Vec<String>,
    #[cfg(feature = "durable")]
    store: Option<std::sync::Arc<crate::durable::Store>>,
    /// The namespaces' dead-letter stores, opened on first use.
    dlqs: crate::dlq::Registry,
}

/// A claim found in flight when a durable engine opened: it was never completed or
/// released (its worker crashed). It holds its key until its lease runs out, then the
/// key can be claimed again; operators use the list to reconcile.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Orphan {
    /// The namespace it belongs to.
    pub namespace: String,
    /// The key's 128-bit fingerprint (keys themselves are never stored); 0 for the
    /// report of a journal file damaged in its length or slot count, whose lost
    /// slots' keys cannot be known (`corrupt` says what was read).
    pub fingerprint: u128,
    /// When it was claimed, or its lease last extended
    /// ([`ClaimGuard::extend_lease`]) (wall-clock ms); 0 if its marker is corrupt.
    pub claimed_at_ms: u64,
    /// When its lease runs out or ran out (wall-clock ms); 0 if its marker is corrupt.
    pub lease_expires_at_ms: u64,
    /// Set when the claim marker could not be decoded. Such a marker is kept, and
    /// reported at every open, until the key's next claim is completed or released,
    /// which deletes it. (A damaged slot of a journal file is reported once; the
    /// file is kept aside as `<journal>.damaged-<ms>`.)
    pub corrupt: Option<String>,
    /// Whether the hot tier holds the key until the lease runs out. False when the
    /// lease had already run out, the marker is corrupt, or the namespace's
    /// `max_keys` could not hold every orphan (its configuration shrank): such a key
    /// is claimable at once, as after a lease expiry.
    pub held: bool,
}

/// Changes to the consumer's own state, written in the same atomic write as a
/// completion (a co-commit): either both are stored or neither is, so a local side
/// effect becomes exactly-once with no crash window.
///
/// ```no_run
/// use idem::{Claim, Engine, NamespaceConfig, StateChanges};
///
/// let engine = Engine::builder()
///     .namespace("orders", NamespaceConfig::new())
///     .durable("/var/lib/consumer/idem")
///     .state_family("balances")
///     .build()?;
/// let orders = engine.namespace("orders")?;
/// if let Claim::Acquired(guard) = orders.claim(b"ord-7")? {
///     let seen = engine.read_state("balances", b"acct-1")?.map_or(0, |v| v.len());
///     let mut changes = StateChanges::new();
///     changes.put("balances", b"acct-1", &vec![0u8; seen + 1]);
///     guard.complete_with(None, changes)?;
/// }
/// # Ok::<(), idem::Error>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct StateChanges {
    ops: Vec<(String, StateOp)>,
    /// The largest change over [`MAX_STATE_LEN`] given (its key and value
    /// together), which was not taken.
    too_large: Option<usize>,
}

/// The most bytes a [`StateChanges`] change may hold, its key and value together:
/// 4 GiB less 64 bytes. RocksDB sizes each entry of its memtable, key, value and
/// their framing together, in 32 bits: past that its write would overflow a buffer
/// (and the write-ahead log would hold a record that no open could replay).
pub const MAX_STATE_LEN: usize = u32::MAX as usize - 63;

impl StateChanges {
    /// No changes yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `key` to `value` in state family `family`. A key and value longer
    /// together than [`MAX_STATE_LEN`] are not taken (nor copied): the completion
    /// given these changes is refused with [`Error::StateTooLarge`], and changes
    /// nothing.
    pub fn put(&mut self, family: &str, key: &[u8], value: &[u8]) -> &mut Self {
        if self.fits(key.len().saturating_add(value.len())) {
            self.ops.push((
                family.to_owned(),
                StateOp::Put(key.to_vec(), value.to_vec()),
            ));
        }
        self
    }

    /// Deletes `key` from state family `family` (a key longer than
    /// [`MAX_STATE_LEN`] is refused as in [`StateChanges::put`]).
    pub fn delete(&mut self, family: &str, key: &[u8]) -> &mut Self {
        if self.fits(key.len()) {
            self.ops
                .push((family.to_owned(), StateOp::Delete(key.to_vec())));
        }
        self
    }

    /// Whether a change of `len` bytes is taken; notes it if not.
    fn fits(&mut self, len: usize) -> bool {
        if len <= MAX_STATE_LEN {
            return true;
        }
        self.too_large = self.too_large.max(Some(len));
        false
    }

    /// Whether there are no changes.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

impl Shared {
    fn run_maintenance(&self) -> usize {
        let expired = self
            .namespaces
            .values()
            .map(|ns| {
                let now = ns.now();
                if let Some(d) = &ns.durable {
                    d.maintain(now.ms);
                }
                ns.chunks.top_up();
                ns.make_index_spares(true);
                let expired = ns.expire_all(now);
                if let Some(d) = &ns.durable {
                    ns.sweep_markers(d, now);
                    ns.sweep_markers_on_disk(d, now);
                }
                expired
            })
            .sum();
        crate::hot::collect_retired();
        expired
    }
}

impl fmt::Debug for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names: Vec<&str> = self.shared.namespaces.keys().map(|s| s.as_str()).collect();
        names.sort_unstable();
        f.debug_struct("Engine")
            .field("namespaces", &names)
            .finish_non_exhaustive()
    }
}

/// At open, the claims the last run left in flight, in every namespace of a durable
/// engine (each has its durable tier): reported as orphans, live ones held in the hot
/// tier, the journals taken over; and, once every prefilter is set up, compaction
/// started.
///
/// Every step that can fail for want of space, or on a read, runs for every
/// namespace before anything on disk changes, so an open that fails leaves each
/// orphan, expired or damaged, for the next open to report. Then the old journals'
/// live markers go into the `claims:` families (synced once) before any journal is
/// replaced; then the namespaces' settings are stored (the last step that can refuse
/// the open). What cannot be undone and would lose a report, if the open were
/// still refused, is left to [`settle_takeover`], which the build runs once
/// nothing else can refuse it (its background threads are running): the markers of
/// expired orphans deleted, the damaged journals kept aside marked reported, and the
/// saved prefilters, loaded in the first step, removed.
#[cfg(feature = "durable")]
fn take_over_markers(
    store: &crate::durable::Store,
    namespaces: &HashMap<String, Arc<NsInner>>,
) -> Result<(Vec<Orphan>, Vec<Settle>)> {
    let mut names: Vec<&String> = namespaces.keys().collect();
    names.sort();
    let durable: Vec<(&str, &NsInner, &DurableNs)> = names
        .iter()
        .filter_map(|n| {
            let ns = &*namespaces[*n];
            ns.durable.as_ref().map(|d| (n.as_str(), ns, d))
        })
        .collect();
    // Every journal is read (and a foreign one refused) before anything changes.
    let journals = durable
        .iter()
        .map(|(_, _, d)| d.read_journal())
        .collect::<Result<Vec<_>>>()?;
    let mut orphans = Vec::new();
    let mut taken = Vec::with_capacity(durable.len());
    for (&(name, ns, d), journal) in durable.iter().zip(journals) {
        // The namespace's own time, which starts its high-water mark: it never reads
        // earlier than the time the filter was built at, so no record the filter left
        // out as past retention is live for it (a clock stepped back during the open
        // reads as stopped).
        d.open_prefilter(ns.now_ms())?;
        let takeover = d.prepare_journal(journal)?;
        let (found, expired) = ns.load_orphans(store, &takeover)?;
        orphans.extend(found);
        taken.push((name, d, takeover, expired));
    }
    // The prefilters are set up: RocksDB may compact now.
    store.start_compactions()?;
    let mut moved = false;
    for (_, d, takeover, _) in &taken {
        moved |= d.move_markers(takeover)?;
    }
    if moved {
        store.sync_wal()?;
    }
    let mut finished = Vec::with_capacity(taken.len());
    for (name, d, takeover, expired) in taken {
        finished.push((name, d, expired, d.finish_journal(takeover)?));
    }
    // (The markers moved above are the same orphans the next open finds, in the
    // `claims:` families instead of the journals.) The namespaces' settings are
    // written last of all, once the threads have started ([`Store::write_settings`]).
    let settle = finished
        .into_iter()
        .map(|(name, _, expired, files)| Settle {
            name: name.to_owned(),
            expired,
            files,
        })
        .collect();
    Ok((orphans, settle))
}

/// Undoes the start of an engine's threads when its open is refused after them:
/// the threads hold the namespaces (and the store, whose directory lock a retried
/// build needs).
#[cfg(not(idem_loom))]
fn stop_started(
    collector: Option<crate::hot::reclaim::CollectorRegistration>,
    threads: [Option<maintenance::Thread>; 2],
) {
    drop(collector);
    for thread in threads.into_iter().flatten() {
        thread.stop();
    }
    // As at the engine's drop: a collection asked of this engine's thread, now
    // stopped, is made here.
    crate::hot::reclaim::collect_if_asked();
}

/// What an open leaves to [`settle_takeover`] of one namespace: the markers of its
/// expired orphans, and its damaged journals kept aside.
#[cfg(feature = "durable")]
struct Settle {
    name: String,
    expired: Vec<u128>,
    files: Vec<std::path::PathBuf>,
}

/// The last of the takeover ([`take_over_markers`]), once every journal is in place
/// and nothing can refuse the open any more: the markers of expired orphans deleted
/// (reported by this open), the damaged journals marked reported, the saved
/// prefilters removed.
#[cfg(feature = "durable")]
fn settle_takeover(
    store: &crate::durable::Store,
    namespaces: &HashMap<String, Arc<NsInner>>,
    settle: Vec<Settle>,
) {
    let durable = |name: &str| namespaces.get(name).and_then(|ns| ns.durable.as_ref());
    for Settle { name, expired, .. } in &settle {
        let Some(d) = durable(name) else { continue };
        if expired.is_empty() {
            continue;
        }
        // This open reports them, so a delete that fails only has the next open
        // report them again; still on disk, a completion of one of these keys in
        // this run deletes its marker.
        if let Err(e) = store.delete_claims(&crate::durable::Families::of(name), expired) {
            for fp in expired {
                d.note_marker_on_disk(*fp);
            }
            tracing::warn!(
                namespace = %name,
                markers = expired.len(),
                error = %e,
                "could not delete the markers of expired orphans; the next open reports them again"
            );
        }
    }
    for Settle { name, files, .. } in &settle {
        if let Some(d) = durable(name) {
            d.mark_reported(files);
            d.spend_saved_prefilter();
        }
    }
}

fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    // RandomState draws its keys from the operating system's entropy source.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(std::process::id() as u64);
    h.finish()
}

impl Engine {
    /// Starts configuring an engine.
    pub fn builder() -> EngineBuilder {
        EngineBuilder::new()
    }

    pub(crate) fn from_builder(b: EngineBuilder) -> Result<Engine> {
        // A preallocated index or slab the allocator cannot give is refused before
        // the durable tier is opened (which would make the namespace's column
        // families): every namespace's indexes reserved together, as they are then
        // allocated, and its slab made here.
        let mut slabs = HashMap::new();
        if b.namespaces.iter().any(|(_, c)| c.preallocate) {
            let limit = crate::MemoryLimit::of_this_process()
                .map(|m| usize::try_from(m.available()).unwrap_or(usize::MAX));
            preallocations_fit(&b.namespaces, limit)?;
        }
        {
            let mut held = crate::hot::index::Reserved::default();
            for (name, cfg) in &b.namespaces {
                if cfg.preallocate {
                    if !reserve_preallocation(cfg, &mut held) {
                        return Err(preallocation_refused(name));
                    }
                    let lanes = shards_and_room(cfg).0 * crate::hot::LANES;
                    let slab = Reservoir::preallocated(cfg.max_keys, lanes)
                        .ok_or_else(|| preallocation_refused(name))?;
                    slabs.insert(name.clone(), slab);
                }
            }
        }
        #[allow(unused_mut)]
        let mut seed = b.seed.unwrap_or_else(random_seed);
        let epoch_ms = crate::clock::read_capped(&*b.clock);
        let tick_ms = b.tick.as_millis() as u64;
        #[allow(unused_mut)]
        let mut unconfigured = Vec::new();
        #[cfg(feature = "durable")]
        let store = match &b.durable {
            Some(path) => {
                let nss: Vec<(String, crate::durable::NsSettings)> = b
                    .namespaces
                    .iter()
                    .map(|(n, c)| {
                        let settings = crate::durable::NsSettings {
                            ttl_ms: c.get_ttl().as_millis() as u64,
                            lease_ms: c.get_lease().as_millis() as u64,
                            retention_ms: c.get_retention().as_millis() as u64,
                            max_key_len: c.get_max_key_len() as u64,
                        };
                        (n.clone(), settings)
                    })
                    .collect();
                let (store, report) = crate::durable::Store::open(
                    path,
                    &nss,
                    &b.state_families,
                    b.clock.clone(),
                    seed,
                    b.seed.is_some(),
                    b.commit_delay,
                    b.store_statistics,
                )?;
                if b.batch_background {
                    // Its background threads exist once a database is open.
                    crate::sched::batch_threads_named("rocksdb:");
                }
                seed = store.seed();
                for name in &report.unconfigured {
                    tracing::warn!(
                        namespace = %name,
                        "the database holds a namespace that is not configured; its data is kept"
                    );
                }
                unconfigured = report.unconfigured;
                Some(std::sync::Arc::new(store))
            }
            None => None,
        };
        let mut namespaces = HashMap::new();
        for (name, cfg) in b.namespaces {
            #[cfg(feature = "durable")]
            let durable = store.as_ref().map(|s| {
                let prefilter = cfg.get_prefilter().then(|| {
                    crate::prefilter::Prefilter::new(
                        cfg.get_expected_keys(),
                        cfg.get_retention().as_millis() as u64,
                        cfg.get_prefilter_fpr(),
                    )
                    .owned_by(s.seed(), &name)
                });
                DurableNs::new(
                    s.clone(),
                    &name,
                    cfg.sync,
                    cfg.on_store_error,
                    prefilter,
                    cfg.claim_markers,
                    cfg.journal_slots as u32,
                )
            });
            #[cfg(not(feature = "durable"))]
            let durable: Option<DurableNs> = None;
            let chunks = slabs
                .remove(&name)
                .unwrap_or_else(|| Reservoir::new(cfg.max_keys));
            let ns = NsInner::new(
                name.clone(),
                cfg,
                chunks,
                seed,
                epoch_ms,
                tick_ms,
                b.clock.clone(),
                durable,
            )?;
            namespaces.insert(name, Arc::new(ns));
        }
        #[allow(unused_mut)]
        let mut orphans = Vec::new();
        #[cfg(feature = "durable")]
        let mut settle = Vec::new();
        #[cfg(feature = "durable")]
        if let Some(store) = &store {
            (orphans, settle) = take_over_markers(store, &namespaces)?;
        }
        // Each namespace's handles share a keeper, which hands the namespace to the
        // shards with guards left when the last handle goes.
        let keepers = namespaces
            .iter()
            .map(|(name, ns)| (name.clone(), Keeper::new(ns)))
            .collect();
        let shared = Arc::new(Shared {
            namespaces,
            keepers,
            clock: b.clock,
            orphans,
            unconfigured,
            #[cfg(feature = "durable")]
            store,
            dlqs: crate::dlq::Registry::new(),
        });
        #[cfg(not(idem_loom))]
        let maintenance = b.maintenance_interval.map(|every| -> Result<_> {
            let (periodic, on_request) = (shared.clone(), shared.clone());
            const NAME: &str = "idem-maintenance";
            let (thread, requester) = maintenance::Thread::start_with_requests(
                NAME,
                every,
                b.batch_background,
                move || {
                    periodic.run_maintenance();
                },
                // A reservoir ran low, or a shard's index neared its doubling, between
                // passes: top it up, or make the index's next array, now, on this thread.
                // Or a retirement asked for the outgrown tables to be collected.
                move || {
                    crate::hot::reclaim::collect_if_asked();
                    for ns in on_request.namespaces.values() {
                        ns.chunks.top_up();
                        if ns.index_spare_asked.swap(false, Ordering::AcqRel) {
                            ns.make_index_spares(false);
                        }
                    }
                },
            )
            .map_err(|e| thread_refused(NAME, &e))?;
            for ns in shared.namespaces.values() {
                let requester = requester.clone();
                ns.chunks.on_low(Box::new(move || requester.request()));
            }
            let collector = crate::hot::reclaim::register_collector(move || requester.request());
            Ok((thread, collector))
        });
        #[cfg(not(idem_loom))]
        let (maintenance, collector) = match maintenance.transpose()? {
            Some((thread, collector)) => (Some(thread), Some(collector)),
            None => (None, None),
        };
        #[cfg(idem_loom)]
        let _ = b.maintenance_interval;
        // Refused, the maintenance thread already started is stopped: it holds the
        // namespaces (and the store, whose directory lock a retried build needs).
        #[cfg(not(idem_loom))]
        let wal_sync = match shared.wal_sync_thread(b.batch_background) {
            Ok(thread) => thread,
            Err(e) => {
                stop_started(collector, [maintenance, None]);
                return Err(e);
            }
        };
        // The namespaces' settings (what the dead-letter tools read), last: an open
        // refused before this, its threads' start included, leaves them as they
        // were. Refused here, the threads started are stopped as above.
        #[cfg(feature = "durable")]
        if let Some(Err(e)) = shared.store.as_ref().map(|s| s.write_settings()) {
            #[cfg(not(idem_loom))]
            stop_started(collector, [maintenance, wal_sync]);
            return Err(e);
        }
        // Nothing can refuse the open now.
        #[cfg(feature = "durable")]
        if let Some(store) = &shared.store {
            store.keep_what_the_open_made();
            settle_takeover(store, &shared.namespaces, settle);
        }
        Ok(Engine {
            shared,
            #[cfg(not(idem_loom))]
            maintenance,
            #[cfg(not(idem_loom))]
            collector,
            #[cfg(not(idem_loom))]
            wal_sync,
            #[cfg(not(idem_loom))]
            shut: false,
        })
    }

    /// The claims found in flight when the engine opened its durable tier: claims of
    /// a previous run that were never completed or released. Empty for a memory-only
    /// engine.
    pub fn orphans(&self) -> &[Orphan] {
        &self.shared.orphans
    }

    /// Namespaces whose data the database holds but the configuration does not name.
    /// Their data is kept (and not served) until they are configured again.
    pub fn unconfigured_namespaces(&self) -> &[String] {
        &self.shared.unconfigured
    }

    /// Reads the consumer's own state written by co-commits
    /// ([`ClaimGuard::complete_with`]). A key longer than [`MAX_STATE_LEN`] is never
    /// stored: `None`, without asking RocksDB (which sizes a key in 32 bits).
    pub fn read_state(&self, family: &str, key: &[u8]) -> Result<Option<Vec<u8>>> {
        #[cfg(feature = "durable")]
        if let Some(store) = &self.shared.store {
            return store.read_state(family, key);
        }
        let _ = (family, key);
        Err(Error::NotDurable)
    }

    /// Compacts the durable tier now, so that records past their retention are
    /// dropped (RocksDB otherwise compacts when it sees fit). A no-op without a
    /// durable tier. [`Error::Store`] if the memtables cannot be flushed first, or if
    /// one of RocksDB's background jobs failed during the compaction (its
    /// operation `compact`: RocksDB's C interface, which the `rocksdb` crate wraps,
    /// drops the compaction's own status, but counts a failed job before the
    /// compaction returns). A failed compaction leaves the expired records in place,
    /// and one that the disk refused can stop RocksDB's writes until the next open,
    /// as a refused write to its log does (README, "The durable tier").
    pub fn compact_store(&self) -> Result<()> {
        #[cfg(feature = "durable")]
        if let Some(store) = &self.shared.store {
            // Retention is judged at each namespace's time, which a namespace with no
            // traffic reads here first (a clock that panics leaves it where it was:
            // the filter then keeps what it cannot date).
            for ns in self.shared.namespaces.values() {
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ns.now_ms()));
            }
            return store.compact();
        }
        Ok(())
    }

    /// Testing hook: while `fail` is true every write to the durable tier fails as a
    /// failing disk would (reads still work). Not part of the stable API.
    #[doc(hidden)]
    pub fn debug_fail_store_writes(&self, fail: bool) {
        self.with_store(|_store| {
            #[cfg(feature = "durable")]
            _store.set_fail_writes(fail);
        });
        let _ = fail;
    }

    /// Testing hook: while `keep` is true, claim markers in the journal
    /// ([`ClaimMarkers::Journal`](crate::ClaimMarkers::Journal)) stay on disk when
    /// their claims complete or are released, as a crash right after the
    /// completion's write would leave them. Not part of the stable API.
    #[doc(hidden)]
    pub fn debug_keep_journal_markers(&self, keep: bool) {
        self.with_store(|_store| {
            #[cfg(feature = "durable")]
            _store.set_keep_journal(keep);
        });
        let _ = keep;
    }

    /// Testing hook: while `fail` is true every point read of a done record in the
    /// durable tier fails as a failing disk would. Not part of the stable API.
    #[doc(hidden)]
    pub fn debug_fail_store_reads(&self, fail: bool) {
        self.with_store(|_store| {
            #[cfg(feature = "durable")]
            _store.set_fail_reads(fail);
        });
        let _ = fail;
    }

    /// Testing hook: while `hold` is true, every write of completions to the durable
    /// tier waits before it starts (the entries stay marked as completing), so a test
    /// can act in that window. [`Engine::debug_held_completions`] counts the waiting
    /// writes. Not part of the stable API.
    #[doc(hidden)]
    pub fn debug_hold_completions(&self, hold: bool) {
        self.with_store(|_store| {
            #[cfg(feature = "durable")]
            _store.set_hold_completions(hold);
        });
        let _ = hold;
    }

    /// Testing hook: while `fail` is true every sync of the write-ahead log requested
    /// by the engine (grouped commits, `SyncPolicy::Periodic`, synced dead-letter
    /// writes, and completions synced by RocksDB itself when group commit is off)
    /// fails as a failing disk would: a grouped commit's write is applied and its
    /// fsync fails, while a write RocksDB syncs itself is refused, as RocksDB refuses
    /// one whose fsync failed. Not part of the stable API.
    #[doc(hidden)]
    pub fn debug_fail_syncs(&self, fail: bool) {
        self.with_store(|_store| {
            #[cfg(feature = "durable")]
            _store.set_fail_syncs(fail);
        });
        let _ = fail;
    }

    /// Testing hook: while `panic` is true every write of completions to the durable
    /// tier panics before it starts, as a bug in it would. Not part of the stable API.
    #[doc(hidden)]
    pub fn debug_panic_completions(&self, panic: bool) {
        self.with_store(|_store| {
            #[cfg(feature = "durable")]
            _store.set_panic_completions(panic);
        });
        let _ = panic;
    }

    /// Runs `f` on the durable store, if the engine has one (the testing hooks).
    #[cfg(feature = "durable")]
    fn with_store(&self, f: impl FnOnce(&crate::durable::Store)) {
        if let Some(store) = &self.shared.store {
            f(store);
        }
    }

    /// Without the durable tier there is no store: the testing hooks do nothing.
    #[cfg(not(feature = "durable"))]
    fn with_store(&self, _f: impl FnOnce(&())) {}

    /// Testing hook: how many completion writes are waiting on
    /// [`Engine::debug_hold_completions`]. Not part of the stable API.
    #[doc(hidden)]
    pub fn debug_held_completions(&self) -> usize {
        #[cfg(feature = "durable")]
        if let Some(store) = &self.shared.store {
            return store.held_completions();
        }
        0
    }

    /// A handle on the namespace called `name`.
    pub fn namespace(&self, name: &str) -> Result<Namespace> {
        self.shared
            .namespaces
            .get(name)
            .map(|inner| Namespace {
                inner: inner.clone(),
                _keeper: self.shared.keepers[name].clone(),
            })
            .ok_or_else(|| Error::UnknownNamespace(name.to_owned()))
    }

    /// The dead-letter store of namespace `namespace` (see [`Dlq`](crate::Dlq)).
    /// With a durable tier it is persisted in the same database and survives
    /// restarts; on a memory-only engine it lives in memory
    /// ([`Dlq::is_durable`](crate::Dlq::is_durable) says which). Every call returns a
    /// handle on the same store. [`Error::UnknownNamespace`] for a namespace that is
    /// not configured; a store failure while loading it is returned.
    pub fn dlq(&self, namespace: &str) -> Result<crate::dlq::Dlq> {
        let ns = self.namespace(namespace)?;
        #[cfg(feature = "durable")]
        let store = self.shared.store.clone();
        #[cfg(not(feature = "durable"))]
        let store = None;
        self.shared.dlqs.open(ns, self.shared.clock.clone(), store)
    }

    /// The names of the configured namespaces, sorted.
    pub fn namespace_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.shared.namespaces.keys().cloned().collect();
        names.sort_unstable();
        names
    }

    /// Counters and gauges summed over all namespaces.
    pub fn stats(&self) -> Stats {
        let mut total = Stats::default();
        for ns in self.shared.namespaces.values() {
            total.merge(&ns.stats());
        }
        #[cfg(feature = "durable")]
        if let Some(store) = &self.shared.store {
            total.wal_group_syncs = store.group_syncs();
            total.wal_syncs = store.wal_syncs();
            total.periodic_sync_failures = store.periodic_sync_failures();
        }
        total
    }

    /// Reclaims every key whose TTL or lease has run out, now, and returns how many.
    /// The maintenance thread calls this periodically; tests on a manual clock call it
    /// directly.
    pub fn run_maintenance(&self) -> usize {
        self.shared.run_maintenance()
    }

    /// Fsyncs the durable tier's write-ahead log now: every completion (with its
    /// [`StateChanges`]), `forget` and dead letter that the store took before this
    /// call survives a power loss once it returns `Ok`, whatever the namespaces'
    /// [`SyncPolicy`](crate::SyncPolicy). (A completion that a namespace under
    /// `FailOpen` decided from the hot tier alone, the store having refused it, is
    /// not in the log, and no sync puts it there: it is counted in
    /// `Stats::fail_open_decisions`, which a consumer that must not lose it checks
    /// before committing its offsets, or it runs `FailClosed`. The count also holds
    /// completions the store took whose own fsync failed under `Always`: those are
    /// in the log, but after a failed fsync the system may have dropped the pages
    /// it held, and a later fsync that works does not bring them back.) For consumers
    /// that run under `SyncPolicy::Never` (or `Periodic`) and commit their broker
    /// offsets in batches: sync, then commit, and a power loss cannot lose a
    /// completion whose message the broker will not redeliver. All namespaces share
    /// one log, so this is the same as [`Namespace::sync`] of any of them.
    ///
    /// Without a durable tier there is nothing to sync: `Ok` at once. A failed fsync
    /// is [`Error::Store`], under either [`FailurePolicy`](crate::FailurePolicy): the
    /// completions it would have covered are in the log but may not be on the disk.
    /// So is every later one, even when its own fsync works, once any fsync of the
    /// log has failed in this engine's life (the `Periodic` thread's, counted in
    /// `Stats::periodic_sync_failures`, a group commit's, a sync asked for, or with
    /// group commit off a synced completion's write that RocksDB refused): the
    /// completions the failed fsync covered may be lost all the same, since a later
    /// fsync does not bring back pages the system dropped. Reopening the engine
    /// (whose open replays what the log holds on disk) starts afresh.
    ///
    /// ```
    /// use idem::{Claim, Engine, NamespaceConfig};
    ///
    /// let engine = Engine::builder().namespace("orders", NamespaceConfig::new()).build()?;
    /// let orders = engine.namespace("orders")?;
    /// if let Claim::Acquired(guard) = orders.claim(b"ord-42")? {
    ///     guard.complete()?;
    /// }
    /// engine.sync()?; // then commit the broker's offsets
    /// # Ok::<(), idem::Error>(())
    /// ```
    pub fn sync(&self) -> Result<()> {
        #[cfg(feature = "durable")]
        if let Some(store) = &self.shared.store {
            return store.sync_on_request();
        }
        Ok(())
    }

    /// Testing hook: runs one fsync of the `SyncPolicy::Periodic` thread's now, as it
    /// would (a failure is only logged and counted). Not part of the stable API.
    #[doc(hidden)]
    pub fn debug_periodic_sync(&self) {
        #[cfg(feature = "durable")]
        if let Some(store) = &self.shared.store {
            store.periodic_sync();
        }
    }

    /// Shuts the engine down, as dropping it does, and says whether all of it
    /// reached the disk. In order: the maintenance thread (and the periodic sync's)
    /// stops; the claim markers that [`ClaimMarkers::Deferred`](crate::ClaimMarkers)
    /// kept in memory are written (a claim still held is then an orphan at the next
    /// open); the write-ahead log is fsynced; the memtables are flushed, so that the
    /// next open replays no log; each namespace's prefilter is saved, so that the
    /// next open loads it instead of rebuilding it from the records.
    ///
    /// Every step runs whatever the earlier ones gave; the first failure is returned
    /// ([`Error::Store`], its operation naming the step), and each is logged, a
    /// namespace's also counted in its `store_errors`. A drop does the same and can
    /// only log. A failed step loses nothing already taken: what a memtable's flush
    /// could not write is in the log (on disk if the log's fsync worked), and a
    /// prefilter not saved is rebuilt at the next open. (Markers not written stay in memory: should the process then
    /// crash before their claims end, the next open does not report those claims as
    /// orphans.) Without a durable tier: `Ok` once the thread has stopped.
    ///
    /// [`Namespace`] handles and claim guards that outlive the engine keep working
    /// and keep the database open until the last of them is dropped, as after a drop.
    ///
    /// ```
    /// use idem::{Engine, NamespaceConfig};
    ///
    /// let engine = Engine::builder().namespace("orders", NamespaceConfig::new()).build()?;
    /// engine.close()?;
    /// # Ok::<(), idem::Error>(())
    /// ```
    pub fn close(mut self) -> Result<()> {
        #[cfg(not(idem_loom))]
        {
            self.shut_down()
        }
        #[cfg(idem_loom)]
        {
            let _ = &mut self;
            Ok(())
        }
    }
}

#[cfg(all(test, not(idem_loom)))]
mod tests {
    use super::default_shards;

    /// A test's hook into the engine: runs once, on the thread that set it, where
    /// the engine calls it.
    type Hook = std::cell::RefCell<Option<Box<dyn FnOnce()>>>;

    /// A hook that runs every time the engine calls it, with a number, until taken
    /// away.
    type RepeatedHook = std::cell::RefCell<Option<Box<dyn FnMut(usize)>>>;

    std::thread_local! {
        /// Between a single claim's shard lock and its marker's write.
        static BEFORE_MARKER: Hook = const { std::cell::RefCell::new(None) };
        /// Where a durable release settles its claim's marker.
        static BEFORE_SETTLE: Hook = const { std::cell::RefCell::new(None) };
        /// Just before a claim's last attempt (the one with every shard's lock:
        /// `NsInner::claim_exclusive`).
        static BEFORE_EXCLUSIVE: Hook = const { std::cell::RefCell::new(None) };
        /// In a single claim, once it has read the clock, before it takes its
        /// shard's lock.
        static AFTER_CLAIM_CLOCK: Hook = const { std::cell::RefCell::new(None) };
        /// In a completion, once it has read the clock, before its first lock round.
        static AFTER_COMPLETION_CLOCK: Hook = const { std::cell::RefCell::new(None) };
        /// In a durable forget, between the delete of the key's records and the
        /// removal of its hot entry.
        static AFTER_FORGET_DELETE: Hook = const { std::cell::RefCell::new(None) };
        /// In a durable forget, its key noted in its shard, before the delete.
        static BEFORE_FORGET_DELETE: Hook = const { std::cell::RefCell::new(None) };
        /// After each expiry batch of `NsInner::expire_all_within`, its lock let go,
        /// with the shard's number; runs for every batch until taken away.
        static AFTER_EXPIRY_BATCH: RepeatedHook = const { std::cell::RefCell::new(None) };
        /// In `make_way`, each time it finds the shard's lock still wanted, with the
        /// shard's number.
        static MAKING_WAY: RepeatedHook = const { std::cell::RefCell::new(None) };
    }

    pub(super) fn making_way(shard: usize) {
        run_repeated(&MAKING_WAY, shard);
    }

    std::thread_local! {
        /// How long `make_way` waits on this thread, if not `MAKE_WAY_FOR`: a test
        /// that counts its rounds must not depend on how many fit in 200 us.
        static MAKE_WAY_BOUND: std::cell::Cell<Option<std::time::Duration>> =
            const { std::cell::Cell::new(None) };
    }

    /// The system's refusal of a background thread to start, the engine's answer to
    /// it: a typed error from `build`, and nothing left running.
    #[test]
    fn a_background_thread_the_system_refuses_fails_the_build_with_a_typed_error() {
        super::spawn_hook::refuse(Some("idem-maintenance"));
        let built = crate::Engine::builder()
            .namespace("n", crate::NamespaceConfig::new())
            .build();
        super::spawn_hook::refuse(None);
        match built {
            Err(crate::Error::ThreadRefused { thread, reason }) => {
                assert_eq!(thread, "idem-maintenance");
                assert!(reason.contains("refused by the test"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        assert!(crate::Engine::builder()
            .namespace("n", crate::NamespaceConfig::new())
            .build()
            .is_ok());
    }

    /// A refused periodic WAL sync thread fails the build after the maintenance
    /// thread has started: that one is stopped, so that nothing holds the store and
    /// a second build opens the same directory. Before, the refusal panicked in
    /// `build`, and the maintenance thread ran on, holding the directory's lock.
    #[cfg(feature = "durable")]
    #[test]
    fn a_refused_wal_sync_thread_leaves_the_directory_free_for_the_next_build() {
        let dir = Scratch::new("spawn-refused");
        let build = || {
            crate::Engine::builder()
                .durable(&dir.0)
                .namespace(
                    "n",
                    crate::NamespaceConfig::new().sync(crate::SyncPolicy::Periodic(
                        std::time::Duration::from_millis(100),
                    )),
                )
                .build()
        };
        super::spawn_hook::refuse(Some("idem-wal-sync"));
        let built = build();
        super::spawn_hook::refuse(None);
        assert!(
            matches!(
                built,
                Err(crate::Error::ThreadRefused {
                    thread: "idem-wal-sync",
                    ..
                })
            ),
            "{built:?}"
        );
        let engine = build().expect("the directory is free again");
        let ns = engine.namespace("n").unwrap();
        assert!(matches!(ns.claim(b"k").unwrap(), crate::Claim::Acquired(_)));
    }

    /// An open refused because a thread could not start leaves the namespace's
    /// stored settings (what `idem dlq` reads) as the last open that succeeded wrote
    /// them. Before, they were written before the threads started, so the dead-letter
    /// tools read a TTL no engine had run with.
    #[cfg(feature = "durable")]
    #[test]
    fn an_open_refused_for_a_thread_leaves_the_stored_settings_as_they_were() {
        use std::time::Duration;
        let dir = Scratch::new("spawn-refused-settings");
        let build = |ttl: u64| {
            crate::Engine::builder()
                .durable(&dir.0)
                .namespace(
                    "n",
                    crate::NamespaceConfig::new()
                        .ttl(Duration::from_secs(ttl))
                        .sync(crate::SyncPolicy::Periodic(Duration::from_millis(100))),
                )
                .build()
        };
        let stored_ttl = || {
            crate::stored_config(&dir.0, "n")
                .unwrap()
                .expect("settings stored")
                .get_ttl()
        };
        drop(build(60).unwrap());
        assert_eq!(stored_ttl(), Duration::from_secs(60));
        super::spawn_hook::refuse(Some("idem-wal-sync"));
        let built = build(120);
        super::spawn_hook::refuse(None);
        assert!(
            matches!(built, Err(crate::Error::ThreadRefused { .. })),
            "{built:?}"
        );
        assert_eq!(stored_ttl(), Duration::from_secs(60));
        drop(build(120).unwrap());
        assert_eq!(stored_ttl(), Duration::from_secs(120));
    }

    /// The files directly in `dir` and their bytes, a directory's name ending in `/`
    /// (`None` if `dir` is not there).
    #[cfg(feature = "durable")]
    fn files_in(dir: &std::path::Path) -> Option<std::collections::BTreeMap<String, Vec<u8>>> {
        let listed = std::fs::read_dir(dir).ok()?;
        Some(
            listed
                .map(|e| {
                    let e = e.unwrap();
                    let name = e.file_name().to_string_lossy().into_owned();
                    if e.file_type().unwrap().is_dir() {
                        return (format!("{name}/"), Vec::new());
                    }
                    (name, std::fs::read(e.path()).unwrap())
                })
                .collect(),
        )
    }

    /// Checks that an open which `arm` makes fail (on this thread; `disarm` undoes
    /// it) with an error `refused` accepts, after it created a new database, leaves
    /// no trace of it: a directory the open made is gone (its missing parent too),
    /// an empty one stays empty, and one holding files of the user's (a `LOG`
    /// among them, which RocksDB renames as it opens) holds those files alone, byte
    /// for byte. A build with a fixed seed then opens the
    /// directory as a new database: the refused open's random seed was not kept.
    #[cfg(feature = "durable")]
    fn assert_refused_creation_leaves_nothing(
        tag: &str,
        arm: impl Fn(),
        disarm: impl Fn(),
        refused: impl Fn(&crate::Error) -> bool,
    ) {
        use crate::{ManualClock, NamespaceConfig, SyncPolicy};
        use std::time::Duration;
        let clock = ManualClock::new(1_700_000_000_000);
        let build = |path: &std::path::Path, seed: Option<u64>| {
            let mut b = crate::Engine::builder()
                .clock(clock.clone())
                .durable(path)
                .namespace(
                    "n",
                    NamespaceConfig::new().sync(SyncPolicy::Periodic(Duration::from_millis(100))),
                );
            if let Some(seed) = seed {
                b = b.seed(seed);
            }
            b.build()
        };
        // A file of the user's, and a LOG, which RocksDB moves aside as it opens.
        let user_files = std::collections::BTreeMap::from([
            ("notes.txt".to_owned(), b"the user's own".to_vec()),
            ("LOG".to_owned(), b"a log of something else".to_vec()),
        ]);
        for before in [
            None,
            Some(std::collections::BTreeMap::new()),
            Some(user_files),
        ] {
            let scratch = Scratch::new(&format!(
                "{tag}-{}",
                before.as_ref().map_or(0, |b| 1 + b.len())
            ));
            // A directory missing, with its parent: both are made by the open.
            let path = match &before {
                None => scratch.0.join("db"),
                Some(files) => {
                    std::fs::create_dir_all(&scratch.0).unwrap();
                    for (name, bytes) in files {
                        std::fs::write(scratch.0.join(name), bytes).unwrap();
                    }
                    scratch.0.clone()
                }
            };
            arm();
            let built = build(&path, None);
            disarm();
            match built {
                Err(e) if refused(&e) => {}
                other => panic!("{tag}: {other:?}"),
            }
            assert_eq!(
                files_in(&scratch.0),
                before,
                "{tag}: the directory as it was"
            );
            // A fixed seed opens it: no database, no seed of the refused open's.
            let engine = build(&path, Some(7)).expect("a new database");
            let ns = engine.namespace("n").unwrap();
            assert!(matches!(ns.claim(b"k").unwrap(), crate::Claim::Acquired(_)));
        }
    }

    /// An open that created its database and then was refused for a background
    /// thread the system would not start removes the database it made. Before, the
    /// database stayed, with the refused open's random seed: a later build with a
    /// fixed seed was refused (`InvalidConfig`), and the directory held a database
    /// no engine had used.
    #[cfg(feature = "durable")]
    #[test]
    fn an_open_refused_for_a_thread_removes_the_database_it_created() {
        for thread in ["idem-maintenance", "idem-wal-sync"] {
            assert_refused_creation_leaves_nothing(
                &format!("created-{thread}"),
                || super::spawn_hook::refuse(Some(thread)),
                || super::spawn_hook::refuse(None),
                |e| matches!(e, crate::Error::ThreadRefused { thread: t, .. } if *t == thread),
            );
        }
    }

    /// An open that created its database and then could not store the namespaces'
    /// settings (its last step that can refuse it) removes the database it made.
    #[cfg(feature = "durable")]
    #[test]
    fn an_open_refused_at_its_settings_write_removes_the_database_it_created() {
        assert_refused_creation_leaves_nothing(
            "created-settings",
            crate::durable::fail_next_settings_write,
            || {},
            |e| matches!(e, crate::Error::Store(_)),
        );
    }

    /// An open that created its database and then could not write the new
    /// database's metadata (inside the store's own open) removes what it made.
    #[cfg(feature = "durable")]
    #[test]
    fn an_open_refused_at_its_metadata_write_removes_the_database_it_created() {
        assert_refused_creation_leaves_nothing(
            "created-metadata",
            crate::durable::fail_next_metadata_write,
            || {},
            |e| matches!(e, crate::Error::Store(_)),
        );
    }

    /// An open that created its database and then could not make a namespace's
    /// claim-marker journal (a disk out of space) removes what it made.
    #[cfg(all(feature = "durable", target_os = "linux"))]
    #[test]
    fn an_open_refused_for_its_journal_removes_the_database_it_created() {
        assert_refused_creation_leaves_nothing(
            "created-journal",
            crate::durable::fail_next_prepare,
            || {},
            |e| matches!(e, crate::Error::Store(_)),
        );
    }

    /// An open whose RocksDB open itself failed in a directory it created (or found
    /// empty) removes what RocksDB made there (its LOCK and LOG, a new database's
    /// first files) and the directories the open made. Before, only a refusal after
    /// RocksDB's open succeeded was undone: the directory was left holding them.
    #[cfg(feature = "durable")]
    #[test]
    fn an_open_whose_rocksdb_open_fails_removes_what_it_made() {
        assert_refused_creation_leaves_nothing(
            "created-rocksdb-open",
            crate::durable::fail_next_rocksdb_open,
            || {},
            |e| matches!(e, crate::Error::Store(s) if s.to_string().contains("idem-test:missing")),
        );
    }

    /// Between a refused open's close of the database it created and its removal,
    /// another process that opens the directory either is refused or keeps what it
    /// wrote: the removal never takes a database another process used.
    #[cfg(all(feature = "durable", unix))]
    #[test]
    fn a_refused_open_never_removes_a_database_another_process_opened_meanwhile() {
        use crate::{Claim, NamespaceConfig};
        const CHILD: &str = "IDEM_UNIT_UNDO_RACE_CHILD";
        let open = |path: &std::path::Path| {
            crate::Engine::builder()
                .maintenance_interval(None)
                .durable(path)
                .namespace("n", NamespaceConfig::new())
                .build()
        };
        if let Some(dir) = std::env::var_os(CHILD) {
            match open(std::path::Path::new(&dir)) {
                Ok(engine) => {
                    let ns = engine.namespace("n").unwrap();
                    match ns.claim(b"k").unwrap() {
                        Claim::Acquired(g) => g.complete().unwrap(),
                        other => panic!("{other:?}"),
                    }
                    drop(ns);
                    engine.close().unwrap();
                    println!("child: completed");
                }
                Err(e) => println!("child: refused: {e}"),
            }
            return;
        }
        let scratch = Scratch::new("undo-race");
        let path = scratch.0.join("db");
        let out = std::sync::Arc::new(parking_lot::Mutex::new(String::new()));
        let seen = out.clone();
        let child_path = path.clone();
        crate::durable::set_before_undo(move || {
            let run = std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "engine::tests::a_refused_open_never_removes_a_database_another_process_opened_meanwhile",
                    "--exact",
                    "--nocapture",
                    "--test-threads",
                    "2",
                ])
                .env(CHILD, &child_path)
                .output()
                .unwrap();
            *seen.lock() = String::from_utf8_lossy(&run.stdout).into_owned();
        });
        super::spawn_hook::refuse(Some("idem-wal-sync"));
        let built = crate::Engine::builder()
            .maintenance_interval(None)
            .durable(&path)
            .namespace(
                "n",
                NamespaceConfig::new().sync(crate::SyncPolicy::Periodic(
                    std::time::Duration::from_millis(100),
                )),
            )
            .build();
        super::spawn_hook::refuse(None);
        assert!(
            matches!(built, Err(crate::Error::ThreadRefused { .. })),
            "{built:?}"
        );
        let child = out.lock().clone();
        assert!(child.contains("child: "), "the child ran: {child}");
        if child.contains("child: completed") {
            let engine = open(&path).expect("the child's database opens");
            let ns = engine.namespace("n").unwrap();
            assert!(
                ns.claim(b"k").unwrap().is_duplicate(),
                "the child's completion was kept"
            );
        }
    }

    /// A refused open that created its database removes the directories it made, and
    /// only those: a path through a missing directory and `..` names an existing
    /// (empty) directory of the user's on its way, which stays. Before, every
    /// directory on the path after the first missing one was taken as made by the
    /// open, and the existing one was removed with the database's.
    #[cfg(feature = "durable")]
    #[test]
    fn a_refused_open_through_dot_dot_removes_only_the_directories_it_made() {
        use crate::NamespaceConfig;
        let scratch = Scratch::new("refused-dot-dot");
        let kept = scratch.0.join("kept");
        std::fs::create_dir_all(&kept).unwrap();
        let path = scratch.0.join("made").join("..").join("kept").join("db");
        super::spawn_hook::refuse(Some("idem-maintenance"));
        let built = crate::Engine::builder()
            .durable(&path)
            .namespace("n", NamespaceConfig::new())
            .build();
        super::spawn_hook::refuse(None);
        assert!(
            matches!(built, Err(crate::Error::ThreadRefused { .. })),
            "{built:?}"
        );
        assert!(kept.is_dir(), "the user's directory stays");
        assert_eq!(
            files_in(&scratch.0),
            Some(std::collections::BTreeMap::from([(
                "kept/".to_owned(),
                Vec::new()
            )])),
            "the directory the open made ('made') is gone, the database too"
        );
        assert_eq!(files_in(&kept), Some(Default::default()));
    }

    /// A durable engine in `dir` on `clock` with namespace "n" of `cfg`, no
    /// maintenance thread.
    #[cfg(feature = "durable")]
    fn durable_on(
        dir: &Scratch,
        clock: &crate::ManualClock,
        cfg: crate::NamespaceConfig,
    ) -> crate::Result<crate::Engine> {
        crate::Engine::builder()
            .clock(clock.clone())
            .maintenance_interval(None)
            .durable(&dir.0)
            .namespace("n", cfg)
            .build()
    }

    /// An open refused for a thread loses no report: the claim a crash left in
    /// flight, its lease since run out, is reported by the open that succeeds after
    /// it. Before, the refused open had already deleted the expired orphan's marker
    /// (it reported it, to a caller that got only the error).
    #[cfg(all(feature = "durable", target_os = "linux"))]
    #[test]
    fn an_open_refused_for_a_thread_leaves_the_expired_orphans_for_the_next() {
        use crate::{Claim, ManualClock, NamespaceConfig, SyncPolicy};
        use std::time::Duration;
        let dir = Scratch::new("spawn-refused-orphans");
        let clock = ManualClock::new(1_700_000_000_000);
        let build = || {
            durable_on(
                &dir,
                &clock,
                NamespaceConfig::new()
                    .lease(Duration::from_secs(5))
                    .sync(SyncPolicy::Periodic(Duration::from_millis(100))),
            )
        };
        {
            let engine = build().unwrap();
            let Claim::Acquired(g) = engine.namespace("n").unwrap().claim(b"k").unwrap() else {
                panic!("a new key");
            };
            // Its marker stays in the journal, as after a crash.
            engine.debug_keep_journal_markers(true);
            drop(g);
        }
        clock.advance(Duration::from_secs(60));
        super::spawn_hook::refuse(Some("idem-wal-sync"));
        let refused = build();
        super::spawn_hook::refuse(None);
        assert!(
            matches!(refused, Err(crate::Error::ThreadRefused { .. })),
            "{refused:?}"
        );
        let engine = build().unwrap();
        let orphans = engine.orphans();
        assert_eq!(orphans.len(), 1, "{orphans:?}");
        assert!(!orphans[0].held, "{orphans:?}");
        drop(engine);
        // Reported, its marker is gone.
        assert!(build().unwrap().orphans().is_empty());
    }

    /// A prefilter rebuilt at open scans on the opening thread the parts whose
    /// threads the system will not start: the open succeeds, and the filter holds
    /// every key. Before, the refusal panicked in `build`.
    #[cfg(feature = "durable")]
    #[test]
    fn a_prefilter_scan_thread_the_system_refuses_is_scanned_by_the_opener() {
        use crate::{ManualClock, NamespaceConfig};
        let dir = Scratch::new("spawn-refused-scan");
        let clock = ManualClock::new(1_700_000_000_000);
        let build = || durable_on(&dir, &clock, NamespaceConfig::new().max_keys(100));
        let keys: Vec<String> = (0..1_000).map(|i| format!("key-{i}")).collect();
        {
            let engine = build().unwrap();
            let ns = engine.namespace("n").unwrap();
            for k in &keys {
                let crate::Claim::Acquired(g) = ns.claim(k.as_bytes()).unwrap() else {
                    panic!("{k}");
                };
                g.complete().unwrap();
            }
        }
        // No saved filter: the next open rebuilds it from the records.
        for e in std::fs::read_dir(&dir.0).unwrap() {
            let path = e.unwrap().path();
            if path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("idem-prefilter-"))
            {
                std::fs::remove_file(path).unwrap();
            }
        }
        super::spawn_hook::refuse(Some("idem-prefilter-scan"));
        let engine = build();
        super::spawn_hook::refuse(None);
        let engine = engine.unwrap();
        let s = engine.stats();
        assert_eq!(s.prefilter_rebuilds, 1, "{s:?}");
        assert_eq!(s.prefilter_keys, keys.len() as u64, "{s:?}");
        let ns = engine.namespace("n").unwrap();
        for k in &keys {
            assert!(ns.claim(k.as_bytes()).unwrap().is_duplicate(), "{k}");
        }
    }

    pub(super) fn make_way_for() -> std::time::Duration {
        MAKE_WAY_BOUND
            .with(|b| b.get())
            .unwrap_or(super::MAKE_WAY_FOR)
    }

    pub(super) fn after_expiry_batch(shard: usize) {
        run_repeated(&AFTER_EXPIRY_BATCH, shard);
    }

    fn run_repeated(hook: &'static std::thread::LocalKey<RepeatedHook>, n: usize) {
        let taken = hook.with(|h| h.borrow_mut().take());
        if let Some(mut f) = taken {
            f(n);
            hook.with(|h| {
                h.borrow_mut().get_or_insert(f);
            });
        }
    }

    // (Every test that sets a hook needs the durable tier.)
    #[cfg_attr(not(feature = "durable"), allow(dead_code))]
    fn set_hook(hook: &'static std::thread::LocalKey<Hook>, f: impl FnOnce() + 'static) {
        hook.with(|h| *h.borrow_mut() = Some(Box::new(f)));
    }

    fn run_hook(hook: &'static std::thread::LocalKey<Hook>) {
        if let Some(f) = hook.with(|h| h.borrow_mut().take()) {
            f();
        }
    }

    pub(super) fn before_marker_write() {
        run_hook(&BEFORE_MARKER);
    }

    pub(super) fn before_marker_settled() {
        run_hook(&BEFORE_SETTLE);
    }

    pub(super) fn before_exclusive_claim() {
        run_hook(&BEFORE_EXCLUSIVE);
    }

    pub(super) fn after_claim_clock() {
        run_hook(&AFTER_CLAIM_CLOCK);
    }

    pub(super) fn after_completion_clock() {
        run_hook(&AFTER_COMPLETION_CLOCK);
    }

    /// A claim that read the clock before another thread acquired and completed
    /// its key (it waited for the shard's lock meanwhile) answers `Duplicate` with
    /// the completion's own time, and the window counted from it, in memory and
    /// with a durable tier. Before, a fixed window's completion time was taken as
    /// the claim's earlier reading, and with a durable tier the expiry too: the
    /// answer put the completion before it happened and the key's end early.
    #[cfg(feature = "durable")]
    #[test]
    fn a_duplicate_claim_that_waited_reports_the_completion_time() {
        use crate::{Claim, ManualClock, NamespaceConfig};
        for durable in [false, true] {
            let dir = Scratch::new("stale-claim-clock");
            let clock = ManualClock::new(1_700_000_000_000);
            let cfg = NamespaceConfig::new()
                .ttl(std::time::Duration::from_millis(100))
                .retention(std::time::Duration::from_millis(1_000));
            let engine = if durable {
                durable_on(&dir, &clock, cfg).unwrap()
            } else {
                crate::Engine::builder()
                    .clock(clock.clone())
                    .maintenance_interval(None)
                    .namespace("n", cfg)
                    .build()
                    .unwrap()
            };
            let ns = engine.namespace("n").unwrap();
            let (other, later) = (ns.clone(), clock.clone());
            set_hook(&AFTER_CLAIM_CLOCK, move || {
                later.advance(std::time::Duration::from_millis(7));
                let Claim::Acquired(g) = other.claim(b"k").unwrap() else {
                    panic!("the key is new");
                };
                g.complete_with_result(b"r").unwrap();
            });
            let Claim::Duplicate(d) = ns.claim(b"k").unwrap() else {
                panic!("completed meanwhile");
            };
            let done_at = 1_700_000_000_007;
            assert_eq!(d.completed_at_ms(), done_at, "durable {durable}: {d:?}");
            let window = if durable { 1_000 } else { 100 };
            assert_eq!(
                d.expires_at_ms(),
                done_at + window,
                "durable {durable}: {d:?}"
            );
        }
    }

    pub(super) fn after_forget_delete() {
        run_hook(&AFTER_FORGET_DELETE);
    }

    pub(super) fn before_forget_delete() {
        run_hook(&BEFORE_FORGET_DELETE);
    }

    /// A scratch directory under the system's temporary one, removed when dropped.
    #[cfg(feature = "durable")]
    struct Scratch(std::path::PathBuf);

    #[cfg(feature = "durable")]
    impl Scratch {
        fn new(name: &str) -> Self {
            let dir = std::env::temp_dir().join(format!("idem-unit-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            Scratch(dir)
        }
    }

    #[cfg(feature = "durable")]
    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A compaction RocksDB runs on its own (here: the store's, without
    /// `Engine::compact_store` reading the time for the namespace first) while the
    /// clock is ahead of an idle namespace judges retention at the namespace's time:
    /// after the clock steps back, the key is still a duplicate.
    #[cfg(feature = "durable")]
    #[test]
    fn a_compaction_on_its_own_keeps_what_the_idle_namespace_still_holds() {
        use crate::{Claim, ManualClock, NamespaceConfig};
        use std::time::Duration;
        let dir = Scratch::new("filter-clock");
        let t0 = 1_700_000_000_000;
        let clock = ManualClock::new(t0);
        let engine = super::Engine::builder()
            .clock(clock.clone())
            .maintenance_interval(None)
            .durable(&dir.0)
            .namespace(
                "ns",
                NamespaceConfig::new()
                    .ttl(Duration::from_secs(60))
                    .retention(Duration::from_secs(600)),
            )
            .build()
            .unwrap();
        let ns = engine.namespace("ns").unwrap();
        let Claim::Acquired(g) = ns.claim(b"k").unwrap() else {
            panic!("a new key");
        };
        g.complete().unwrap();
        clock.advance(Duration::from_secs(605)); // past retention, on the clock only
        engine.shared.store.as_ref().unwrap().compact().unwrap();
        clock.set(t0 + 500_000);
        let answer = ns.claim(b"k").unwrap();
        assert!(answer.is_duplicate(), "{answer:?}");
    }

    /// Every way claim markers may be kept, for tests that hold in each.
    #[cfg(feature = "durable")]
    const MARKER_MODES: [crate::ClaimMarkers; 3] = [
        crate::ClaimMarkers::Journal,
        crate::ClaimMarkers::Immediate,
        crate::ClaimMarkers::Deferred,
    ];

    /// A durable namespace "n" in `dir` on a manual clock, lease 1 s.
    #[cfg(feature = "durable")]
    fn durable_namespace(
        dir: &Scratch,
        markers: crate::ClaimMarkers,
    ) -> (super::Engine, super::Namespace, crate::ManualClock) {
        durable_namespace_with(
            dir,
            crate::NamespaceConfig::new()
                .lease(std::time::Duration::from_secs(1))
                .claim_markers(markers)
                .sync(crate::SyncPolicy::Never),
        )
    }

    /// A durable namespace "n" of `cfg` in `dir` on a manual clock.
    #[cfg(feature = "durable")]
    fn durable_namespace_with(
        dir: &Scratch,
        cfg: crate::NamespaceConfig,
    ) -> (super::Engine, super::Namespace, crate::ManualClock) {
        let clock = crate::ManualClock::new(1_000_000);
        let engine = durable_engine(dir, cfg, &clock);
        let ns = engine.namespace("n").unwrap();
        (engine, ns, clock)
    }

    /// A durable engine with namespace "n" of `cfg` in `dir`, on `clock`, without
    /// a maintenance thread.
    /// RocksDB's flush and compaction threads run under `SCHED_BATCH` once an
    /// engine with a durable tier is built (they are the process's: another test's
    /// engine may have done it first, so this checks the state, not the step).
    #[cfg(all(feature = "durable", target_os = "linux"))]
    #[test]
    fn rocksdb_background_threads_run_under_batch_scheduling() {
        let dir = Scratch::new("batch-threads");
        let clock = crate::ManualClock::new(1_000);
        let engine = durable_engine(&dir, crate::NamespaceConfig::new(), &clock);
        let threads = crate::sched::threads_named("rocksdb:");
        assert!(!threads.is_empty(), "RocksDB's pools have threads");
        for tid in threads {
            assert!(crate::sched::is_batch(tid), "thread {tid}");
        }
        drop(engine);
    }

    #[cfg(feature = "durable")]
    fn durable_engine(
        dir: &Scratch,
        cfg: crate::NamespaceConfig,
        clock: &crate::ManualClock,
    ) -> super::Engine {
        super::Engine::builder()
            .durable(&dir.0)
            .clock(clock.clone())
            .maintenance_interval(None)
            .namespace("n", cfg)
            .build()
            .unwrap()
    }

    /// Under `Always`, a completion or a forget is acknowledged only if no fsync of
    /// the log failed after its write: one that did (here the `Periodic` thread's,
    /// between the write and the group commit's own fsync) may have dropped the
    /// write's pages, and the group's fsync that then works does not bring them
    /// back. `FailClosed` returns the error, `FailOpen` counts a fail-open decision;
    /// the forget returns it under either. A write after the failure is acknowledged.
    #[cfg(feature = "durable")]
    #[test]
    fn a_write_that_a_failed_fsync_covered_is_not_acknowledged_by_a_later_fsync() {
        use crate::FailurePolicy::{FailClosed, FailOpen};
        for policy in [FailClosed, FailOpen] {
            let dir = Scratch::new("failed-fsync-after-write");
            let (engine, ns, _clock) = durable_namespace_with(
                &dir,
                crate::NamespaceConfig::new()
                    .sync(crate::SyncPolicy::Always)
                    .on_store_error(policy),
            );
            let store = engine.shared.store.clone().expect("a durable engine");
            let fail_after_write = || {
                let s = store.clone();
                crate::durable::set_after_write(move || {
                    s.set_fail_syncs(true);
                    s.periodic_sync();
                    s.set_fail_syncs(false);
                });
            };
            fail_after_write();
            let completed = first_claim(&ns).complete();
            assert_eq!(engine.stats().periodic_sync_failures, 1, "the fsync failed");
            match policy {
                FailClosed => assert!(
                    matches!(&completed, Err(crate::Error::Store(_))),
                    "{completed:?}"
                ),
                FailOpen => {
                    assert!(completed.is_ok(), "{completed:?}");
                    assert_eq!(engine.stats().fail_open_decisions, 1, "counted");
                }
            }
            // Applied all the same: the key reads as done.
            assert!(matches!(
                ns.check(b"k").unwrap(),
                Some(crate::KeyState::Done { .. })
            ));
            // Nothing failed after this one's write.
            match ns.claim(b"j").unwrap() {
                crate::Claim::Acquired(g) => g.complete().unwrap(),
                other => panic!("{other:?}"),
            }
            fail_after_write();
            let forgot = ns.forget(b"j");
            assert!(matches!(&forgot, Err(crate::Error::Store(_))), "{forgot:?}");
            assert_eq!(ns.check(b"j").unwrap(), None, "forgotten all the same");
            assert_eq!(engine.stats().periodic_sync_failures, 2);
        }
    }

    /// With group commit off (`commit_delay(ZERO)`), a co-commit whose own synced
    /// write worked, but over which another fsync of the log failed (here the
    /// `Periodic` thread's, right after the write), returns that error with the
    /// record and its state changes applied together and readable, as a grouped
    /// one whose fsync failed does: not left out as one whose own fsync RocksDB
    /// failed. The redelivery answers `Duplicate`.
    #[cfg(feature = "durable")]
    #[test]
    fn an_ungrouped_co_commit_a_failed_fsync_covered_is_applied_and_not_acknowledged() {
        let dir = Scratch::new("ungrouped-co-commit-failed-fsync");
        let clock = crate::ManualClock::new(1_000_000);
        let engine = super::Engine::builder()
            .durable(&dir.0)
            .clock(clock.clone())
            .maintenance_interval(None)
            .commit_delay(std::time::Duration::ZERO)
            .namespace(
                "n",
                crate::NamespaceConfig::new().sync(crate::SyncPolicy::Always),
            )
            .state_family("ledger")
            .build()
            .unwrap();
        let ns = engine.namespace("n").unwrap();
        let store = engine.shared.store.clone().expect("a durable engine");
        crate::durable::set_after_write(move || {
            store.set_fail_syncs(true);
            store.periodic_sync();
            store.set_fail_syncs(false);
        });
        let mut changes = super::StateChanges::new();
        changes.put("ledger", b"acct-1", b"10");
        let completed = first_claim(&ns).complete_with(None, changes);
        assert!(
            matches!(&completed, Err(crate::Error::Store(e)) if e.operation() == "sync"),
            "{completed:?}"
        );
        assert_eq!(
            engine.read_state("ledger", b"acct-1").unwrap(),
            Some(b"10".to_vec())
        );
        assert!(ns.claim(b"k").unwrap().is_duplicate());
    }

    /// A dead letter's synced write, like a completion's, is not acknowledged when
    /// another fsync of the log failed while it was made: that fsync may have covered
    /// it and the system dropped its pages. `quarantine` returns the store's error
    /// with the letter stored (as for its own fsync failing); before, it returned the
    /// id as if the letter were on the disk.
    #[cfg(feature = "durable")]
    #[test]
    fn a_dead_letter_that_a_failed_fsync_covered_is_not_acknowledged() {
        let dir = Scratch::new("failed-fsync-after-letter");
        let (engine, ns, _clock) = durable_namespace_with(
            &dir,
            crate::NamespaceConfig::new().sync(crate::SyncPolicy::Always),
        );
        let store = engine.shared.store.clone().expect("a durable engine");
        let dlq = engine.dlq("n").unwrap();
        let first = dlq.quarantine(b"a", b"p", "test:first").unwrap();
        let s = store.clone();
        crate::durable::set_after_dlq_put(move || {
            s.set_fail_syncs(true);
            s.periodic_sync();
            s.set_fail_syncs(false);
        });
        let r = dlq.quarantine(b"b", b"p", "test:second");
        assert!(
            matches!(&r, Err(crate::Error::Store(e)) if e.operation() == "sync"),
            "{r:?}"
        );
        assert_eq!(engine.stats().periodic_sync_failures, 1, "the fsync failed");
        // Stored all the same, under the id the call took.
        let listed: Vec<_> = dlq
            .list(&crate::dlq::Selection::default())
            .unwrap()
            .iter()
            .map(|m| m.key().to_vec())
            .collect();
        assert_eq!(listed, [b"a".to_vec(), b"b".to_vec()]);
        // Nothing failed after this one's write.
        let third = dlq.quarantine(b"c", b"p", "test:third").unwrap();
        assert_eq!(third.get(), first.get() + 2);
        drop(ns);
    }

    /// Under `Periodic`, a completion whose write landed as the engine was dropped
    /// syncs itself after it; if the engine's last fsync of the log failed after the
    /// write (and may have dropped its pages), that later fsync, finding nothing to
    /// write, does not make the completion known to be on the disk: it returns the
    /// store's error. Before, it returned `Ok`.
    #[cfg(feature = "durable")]
    #[test]
    fn a_completion_made_as_the_engine_closed_is_not_acknowledged_over_a_failed_fsync() {
        let dir = Scratch::new("failed-fsync-at-close");
        let (engine, ns, _clock) = durable_namespace_with(
            &dir,
            crate::NamespaceConfig::new().sync(crate::SyncPolicy::Periodic(
                std::time::Duration::from_secs(1),
            )),
        );
        let store = engine.shared.store.clone().expect("a durable engine");
        let g = first_claim(&ns);
        let engine = std::cell::RefCell::new(Some(engine));
        crate::durable::set_after_write(move || {
            // The engine's drop: its last fsync of the log fails.
            store.set_fail_syncs(true);
            drop(engine.borrow_mut().take().expect("the engine"));
            store.set_fail_syncs(false);
        });
        let completed = g.complete();
        assert!(
            matches!(&completed, Err(crate::Error::Store(e)) if e.operation() == "sync"),
            "{completed:?}"
        );
        // Applied all the same: the key reads as done.
        assert!(matches!(
            ns.check(b"k").unwrap(),
            Some(crate::KeyState::Done { .. })
        ));
    }

    /// A look-up with a payload of a key the hot tier does not hold reads the
    /// durable tier, and that read is counted in `Stats` as `check`'s is (the
    /// prefilter's answer, or the durable read it let through), so the look-up does
    /// not leave `Stats` as it found it; it counts no claim, duplicate or mismatch.
    #[cfg(feature = "durable")]
    #[test]
    fn a_check_with_a_payload_counts_its_durable_read_and_no_claim() {
        let dir = Scratch::new("check-with-payload-stats");
        let clock = crate::ManualClock::new(1_700_000_000_000);
        let engine = durable_engine(&dir, crate::NamespaceConfig::new(), &clock);
        let ns = engine.namespace("n").unwrap();
        match ns.claim_with_payload(b"k", b"one").unwrap() {
            crate::Claim::Acquired(g) => g.complete().unwrap(),
            other => panic!("{other:?}"),
        }
        drop(ns);
        drop(engine);
        // Reopened: only the durable tier knows "k".
        let engine = durable_engine(&dir, crate::NamespaceConfig::new(), &clock);
        let ns = engine.namespace("n").unwrap();
        let before = ns.stats();
        assert!(matches!(
            ns.check_with_payload(b"k", b"two"),
            Err(crate::Error::PayloadMismatch)
        ));
        let after = ns.stats();
        assert_eq!(after.durable_reads, before.durable_reads + 1);
        assert_ne!(after, before, "the durable read is counted");
        assert_eq!(
            (after.acquired, after.duplicates, after.payload_mismatches),
            (
                before.acquired,
                before.duplicates,
                before.payload_mismatches
            ),
            "no claim, duplicate or mismatch is counted"
        );
    }

    /// The first claim of "k", acquired.
    #[cfg(feature = "durable")]
    fn first_claim(ns: &super::Namespace) -> super::ClaimGuard {
        match ns.claim(b"k").unwrap() {
            crate::Claim::Acquired(g) => g,
            other => panic!("the first claim acquires: {other:?}"),
        }
    }

    /// A completion that begins and ends after a forget deleted the key's records,
    /// before the forget removed its hot entry, is refused as lost: had it written
    /// its record, the key would answer Duplicate after the forget returned, though
    /// the forget removed its claim.
    #[cfg(feature = "durable")]
    #[test]
    fn a_completion_begun_while_its_key_is_forgotten_is_lost_and_writes_nothing() {
        use crate::Error;
        for markers in MARKER_MODES {
            let dir = Scratch::new(&format!("forget-complete-{markers:?}"));
            let (_engine, ns, _clock) = durable_namespace(&dir, markers);
            let g = first_claim(&ns);
            let completed = std::rc::Rc::new(std::cell::RefCell::new(None));
            {
                let completed = completed.clone();
                set_hook(&AFTER_FORGET_DELETE, move || {
                    *completed.borrow_mut() = Some(g.complete());
                });
            }
            assert!(ns.forget(b"k").unwrap(), "the held claim was removed");
            assert_eq!(
                completed.borrow_mut().take(),
                Some(Err(Error::LeaseLost)),
                "{markers:?}"
            );
            assert_forgotten(&ns, &format!("{markers:?}"));
        }
    }

    /// A completion begun before a forget, whose record is written while the forget
    /// runs, is waited for before the forget's delete: the key is forgotten. (Before,
    /// a completion that landed after the delete and finished before the forget's
    /// hot-tier round left its record on disk, and the key answered Duplicate again.)
    /// A watcher lets the held completion go once the forget waits; without that
    /// wait the forget's own hook lets it go after the delete.
    #[cfg(feature = "durable")]
    #[test]
    fn a_completion_begun_before_a_forget_is_forgotten_with_the_key() {
        for markers in MARKER_MODES {
            let dir = Scratch::new(&format!("forget-after-complete-{markers:?}"));
            let (engine, ns, _clock) = durable_namespace(&dir, markers);
            let engine = std::sync::Arc::new(engine);
            let g = first_claim(&ns);
            engine.debug_hold_completions(true);
            let completer = std::thread::spawn(move || g.complete());
            while engine.debug_held_completions() == 0 {
                std::thread::yield_now();
            }
            let watcher = {
                let (engine, ns) = (engine.clone(), ns.clone());
                std::thread::spawn(move || {
                    while ns.debug_forget_waits() == 0 && engine.debug_held_completions() > 0 {
                        std::thread::yield_now();
                    }
                    engine.debug_hold_completions(false);
                })
            };
            let completer = std::rc::Rc::new(std::cell::RefCell::new(Some(completer)));
            {
                let (engine, completer) = (engine.clone(), completer.clone());
                set_hook(&AFTER_FORGET_DELETE, move || {
                    engine.debug_hold_completions(false);
                    let c = completer.borrow_mut().take().unwrap();
                    assert_eq!(c.join().unwrap(), Ok(()));
                });
            }
            assert!(ns.forget(b"k").unwrap(), "{markers:?}");
            watcher.join().unwrap();
            assert_forgotten(&ns, &format!("{markers:?}"));
        }
    }

    /// A release during a forget goes ahead (it writes no done record): its marker is
    /// settled as any release's, and the forget, which found the key released, says
    /// it removed nothing.
    #[cfg(feature = "durable")]
    #[test]
    fn a_release_during_a_forget_goes_ahead() {
        for markers in MARKER_MODES {
            let dir = Scratch::new(&format!("forget-release-{markers:?}"));
            let (engine, ns, _clock) = durable_namespace(&dir, markers);
            let g = first_claim(&ns);
            let released = std::rc::Rc::new(std::cell::RefCell::new(None));
            {
                let released = released.clone();
                set_hook(&BEFORE_FORGET_DELETE, move || {
                    *released.borrow_mut() = Some(g.release());
                });
            }
            assert!(!ns.forget(b"k").unwrap(), "{markers:?}: released first");
            assert_eq!(released.borrow_mut().take(), Some(Ok(())), "{markers:?}");
            assert_eq!(engine.stats().lease_lost, 0, "{markers:?}");
            assert_forgotten(&ns, &format!("{markers:?}"));
        }
    }

    /// A completion refused because its key is being forgotten gives its claim up at
    /// once: if the forget's delete then fails, the key is not left held until the
    /// lease ends, though nothing was forgotten.
    #[cfg(feature = "durable")]
    #[test]
    fn a_completion_refused_during_a_forget_that_fails_leaves_the_key_claimable() {
        use crate::{Claim, ClaimMarkers, Error};
        let dir = Scratch::new("forget-fails");
        let (engine, ns, _clock) = durable_namespace(&dir, ClaimMarkers::Journal);
        let g = first_claim(&ns);
        let completed = std::rc::Rc::new(std::cell::RefCell::new(None));
        {
            let completed = completed.clone();
            let store = engine.shared.store.clone().expect("a durable engine");
            set_hook(&BEFORE_FORGET_DELETE, move || {
                *completed.borrow_mut() = Some(g.complete());
                store.set_fail_writes(true);
            });
        }
        assert!(ns.forget(b"k").is_err(), "the delete fails");
        engine.debug_fail_store_writes(false);
        assert_eq!(completed.borrow_mut().take(), Some(Err(Error::LeaseLost)));
        assert!(
            matches!(ns.claim(b"k").unwrap(), Claim::Acquired(_)),
            "claimable at once, not held until the lease ends"
        );
    }

    /// The ways a claim's marker may be kept, for the races of a claim with a
    /// forget: named, each a namespace config, and whether the marker is flushed to
    /// RocksDB once written (a deferred one).
    #[cfg(feature = "durable")]
    fn marker_places() -> Vec<(&'static str, crate::NamespaceConfig, bool)> {
        use crate::ClaimMarkers::{Deferred, Immediate, Journal};
        let cfg = |markers| {
            crate::NamespaceConfig::new()
                .lease(std::time::Duration::from_secs(1))
                .claim_markers(markers)
                .sync(crate::SyncPolicy::Never)
        };
        vec![
            ("journal", cfg(Journal), false),
            // One slot, which "other" takes: "k"'s marker overflows into RocksDB.
            ("journal-overflow", cfg(Journal).journal_slots(1), false),
            ("immediate", cfg(Immediate), false),
            ("deferred", cfg(Deferred), false),
            ("deferred-flushed", cfg(Deferred), true),
        ]
    }

    /// A claim of "other" held through a test, so that a one-slot journal is full.
    #[cfg(feature = "durable")]
    fn hold_other(ns: &super::Namespace) -> super::ClaimGuard {
        match ns.claim(b"other").unwrap() {
            crate::Claim::Acquired(g) => g,
            other => panic!("a new key: {other:?}"),
        }
    }

    /// Claims "k", which must be acquired, and flushes the deferred markers if
    /// `flush`.
    #[cfg(feature = "durable")]
    fn claim_k(ns: &super::Namespace, flush: bool) -> super::ClaimGuard {
        let crate::Claim::Acquired(g) = ns.claim(b"k").unwrap() else {
            panic!("\"k\" is not held: acquired");
        };
        if flush {
            ns.inner.durable.as_ref().unwrap().flush_markers().unwrap();
        }
        g
    }

    /// The thread of a claim of "k" a forget's `BEFORE_FORGET_DELETE` hook starts:
    /// taken by a later hook, which joins it for the claim's guard.
    #[cfg(feature = "durable")]
    type HeldClaimer =
        std::rc::Rc<std::cell::RefCell<Option<std::thread::JoinHandle<super::ClaimGuard>>>>;

    /// Sets the next forget's `BEFORE_FORGET_DELETE` hook to claim "k" on a thread of
    /// its own (see [`claim_k`]), acquired before the hook returns and stopped before
    /// its marker's write until the returned sender sends (or is dropped).
    #[cfg(feature = "durable")]
    fn claim_k_held_at_its_marker_before_the_delete(
        ns: &super::Namespace,
        flush: bool,
    ) -> (HeldClaimer, std::sync::mpsc::Sender<()>) {
        use std::sync::mpsc;
        let (let_go, go) = mpsc::channel::<()>();
        let (holding, held) = mpsc::channel::<()>();
        let claimer: HeldClaimer = Default::default();
        let (ns, cell) = (ns.clone(), claimer.clone());
        set_hook(&BEFORE_FORGET_DELETE, move || {
            let t = std::thread::spawn(move || {
                set_hook(&BEFORE_MARKER, move || {
                    holding.send(()).unwrap();
                    let _ = go.recv();
                });
                claim_k(&ns, flush)
            });
            held.recv().unwrap();
            *cell.borrow_mut() = Some(t);
        });
        (claimer, let_go)
    }

    /// Forgets "k", which must remove the claim a hook of the forget acquired (left in
    /// `acquired`), and checks it went with its marker
    /// ([`assert_forgotten_with_its_marker`]).
    #[cfg(feature = "durable")]
    fn forget_k_with_its_claim(
        ns: &super::Namespace,
        acquired: &std::cell::RefCell<Option<super::ClaimGuard>>,
        what: &str,
    ) {
        assert!(ns.forget(b"k").unwrap(), "{what}: the claim was removed");
        let g = acquired
            .borrow_mut()
            .take()
            .expect("claimed during the forget");
        assert_forgotten_with_its_marker(ns, g, what);
    }

    /// After a forget that removed claim `g` of "k", acquired while the forget ran:
    /// no marker of it is left anywhere (a crash would have reported the forgotten
    /// claim as an orphan, and held the key to the end of its lease), its guard's
    /// completion is refused as lost, and the key is claimable.
    #[cfg(feature = "durable")]
    fn assert_forgotten_with_its_marker(ns: &super::Namespace, g: super::ClaimGuard, what: &str) {
        let fp = g.fp.to_u128();
        let d = ns.inner.durable.as_ref().unwrap();
        assert_eq!(d.marker_anywhere(fp), None, "{what}: the marker is gone");
        assert_eq!(g.complete(), Err(crate::Error::LeaseLost), "{what}");
        assert_forgotten(ns, what);
    }

    /// A claim acquired after a forget deleted the key's records, before the forget
    /// removed the hot entry, is forgotten with the key, marker and all, in every
    /// place a marker may be kept. Before, its marker, written after the delete, was
    /// left (on disk, or in memory for the next flush) while its entry was removed:
    /// a crash before its guard ended made the next open report the forgotten claim
    /// as an orphan and hold the key to the end of its lease.
    #[cfg(feature = "durable")]
    #[test]
    fn a_claim_acquired_after_a_forgets_delete_is_forgotten_with_its_marker() {
        for (what, cfg, flush) in marker_places() {
            let dir = Scratch::new(&format!("forget-claim-after-{what}"));
            let (_engine, ns, _clock) = durable_namespace_with(&dir, cfg);
            let _other = hold_other(&ns);
            let acquired = std::rc::Rc::new(std::cell::RefCell::new(None));
            {
                let (ns, acquired) = (ns.clone(), acquired.clone());
                set_hook(&AFTER_FORGET_DELETE, move || {
                    *acquired.borrow_mut() = Some(claim_k(&ns, flush));
                });
            }
            forget_k_with_its_claim(&ns, &acquired, what);
        }
    }

    /// A claim acquired after a forget's first look at the key, whose marker is
    /// written after the forget's delete and whose hold ends before the forget's
    /// hot-tier round (the claim's thread stopped between its lock and its write),
    /// is forgotten with its marker. Before, the forget found the entry no longer
    /// held, removed it, and left the marker.
    #[cfg(feature = "durable")]
    #[test]
    fn a_claim_whose_marker_lands_after_a_forgets_delete_is_forgotten_with_it() {
        for (what, cfg, flush) in marker_places() {
            let dir = Scratch::new(&format!("forget-marker-after-{what}"));
            let (_engine, ns, _clock) = durable_namespace_with(&dir, cfg);
            let _other = hold_other(&ns);
            // Acquired now, its marker not written until the delete is done.
            let (claimer, to_claimer) = claim_k_held_at_its_marker_before_the_delete(&ns, flush);
            let acquired = std::rc::Rc::new(std::cell::RefCell::new(None));
            {
                let (claimer, acquired) = (claimer.clone(), acquired.clone());
                set_hook(&AFTER_FORGET_DELETE, move || {
                    to_claimer.send(()).unwrap();
                    let t = claimer.borrow_mut().take().unwrap();
                    *acquired.borrow_mut() = Some(t.join().unwrap());
                });
            }
            forget_k_with_its_claim(&ns, &acquired, what);
        }
    }

    /// Sets the next forget's `AFTER_FORGET_DELETE` hook, for that delete and every
    /// one after it, to claim "k" and, if acquired, release it at once (a consumer
    /// that gives the key up and takes it again in a loop), noting each answer in
    /// `answers`. A forget that deleted again for ever panics at the tenth.
    #[cfg(feature = "durable")]
    fn claim_and_release_k_after_every_delete(
        ns: super::Namespace,
        answers: std::rc::Rc<std::cell::RefCell<Vec<&'static str>>>,
    ) {
        set_hook(&AFTER_FORGET_DELETE, move || {
            let answer = match ns.claim(b"k").unwrap() {
                crate::Claim::Acquired(g) => {
                    g.release().unwrap();
                    "acquired"
                }
                crate::Claim::InProgress(f) => {
                    // The clock stands at 1_000_000 ms and the lease is 1 s: the
                    // end the claim's lease would have had.
                    assert_eq!(f.lease_expires_at_ms(), 1_001_000, "now + the lease");
                    "in progress"
                }
                other => panic!("claimed during a forget: {other:?}"),
            };
            answers.borrow_mut().push(answer);
            assert!(
                answers.borrow().len() < 10,
                "the forget keeps deleting again: {:?}",
                answers.borrow()
            );
            claim_and_release_k_after_every_delete(ns, answers);
        });
    }

    /// A key claimed and released over and over while a forget runs cannot hold the
    /// forget off: after two rounds that found claims of the key acquired since its
    /// last delete (each deleted again), the forget holds the key, its claims answer
    /// `InProgress`, and it ends at its next round. Before, each such claim made it
    /// delete again, for as long as the claims kept coming. Every marker place; no
    /// marker is left, and the key is claimable after.
    #[cfg(feature = "durable")]
    #[test]
    fn a_key_claimed_and_released_in_a_loop_cannot_hold_a_forget_off() {
        for (what, cfg, _) in marker_places() {
            let dir = Scratch::new(&format!("forget-claim-loop-{what}"));
            let (_engine, ns, _clock) = durable_namespace_with(&dir, cfg);
            let _other = hold_other(&ns);
            let answers = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
            claim_and_release_k_after_every_delete(ns.clone(), answers.clone());
            assert!(!ns.forget(b"k").unwrap(), "{what}: nothing to forget");
            set_hook(&AFTER_FORGET_DELETE, || {});
            assert_eq!(
                *answers.borrow(),
                ["acquired", "acquired", "in progress"],
                "{what}"
            );
            assert_eq!(
                ns.stats().in_progress,
                1,
                "{what}: the held claim is counted"
            );
            let fp = ns.inner.key_fp(b"k").unwrap().to_u128();
            let d = ns.inner.durable.as_ref().unwrap();
            assert_eq!(d.marker_anywhere(fp), None, "{what}: no marker left");
            assert_forgotten(&ns, what);
        }
    }

    /// Runs `test` with a memory-only namespace's inner parts (lease 1 s, a manual
    /// clock at 1,000,000 ms, no maintenance thread) and the fingerprint of "k":
    /// the shard-level forget tests' setting.
    fn at_the_shard_of_k(test: impl FnOnce(&super::NsInner, crate::hot::Fp)) {
        let engine = super::Engine::builder()
            .clock(crate::ManualClock::new(1_000_000))
            .maintenance_interval(None)
            .namespace(
                "n",
                crate::NamespaceConfig::new().lease(std::time::Duration::from_secs(1)),
            )
            .build()
            .unwrap();
        let ns = engine.namespace("n").unwrap();
        test(&ns.inner, ns.inner.key_fp(b"k").unwrap());
    }

    /// A shard's fencing tokens wrap past 0: token 0 marks an entry read back from
    /// the durable tier, so the claim after the last 27-bit token takes 1.
    #[test]
    fn the_fencing_tokens_wrap_past_0() {
        use crate::hot::{DurableLookup, ShardClaim, TOKEN_MASK};
        at_the_shard_of_k(|inner, fp| {
            let si = fp.shard(inner.slots.len());
            let cap = inner.capacity();
            let p = &inner.params;
            let mut absent = |_| DurableLookup::Absent;
            let mut shard = inner.slots[si].lock();
            shard.set_last_token(TOKEN_MASK - 1);
            // Each claim at a time past the last one's lease (1 s): the key is free.
            let tokens: Vec<u32> = (0..3)
                .map(|i| {
                    let now = p.now(1_000_000 + i * 2_000);
                    let found = shard.look_up(fp, now, &cap);
                    let ShardClaim::Acquired { lease, .. } =
                        shard.claim_found(found, fp, None, p, now, &cap, Some(&mut absent), false)
                    else {
                        panic!("the key is free")
                    };
                    lease.token
                })
                .collect();
            assert_eq!(tokens, [TOKEN_MASK, 1, 2]);
        });
    }

    /// A forget that fails gives up the claim whose completion it refused, and only
    /// that claim: once that claim's lease has run out and another claim has taken
    /// the key (the same slab entry, a new token), the failed forget leaves the new
    /// holder's claim alone. At the shard, without a durable tier.
    #[test]
    fn a_failed_forget_gives_up_only_the_claim_whose_completion_it_refused() {
        use crate::hot::{DurableLookup, ShardClaim};
        at_the_shard_of_k(|inner, fp| {
            let si = fp.shard(inner.slots.len());
            let cap = inner.capacity();
            let p = &inner.params;
            let mut absent = |_| DurableLookup::Absent;
            let mut acquire = |shard: &mut crate::hot::Shard, now| {
                let found = shard.look_up(fp, now, &cap);
                let ShardClaim::Acquired { lease, .. } =
                    shard.claim_found(found, fp, None, p, now, &cap, Some(&mut absent), false)
                else {
                    panic!("the key is free")
                };
                shard.hold_new_claim(fp, lease.idx);
                shard.marker_written(fp, &lease);
                lease
            };
            let now = inner.now();
            let mut shard = inner.slots[si].lock();
            let forget = shard.begin_forget(fp);
            let first = acquire(&mut shard, now);
            assert!(
                shard.begin_complete(fp, &first, now, &cap, true).is_err(),
                "a completion during the forget is refused"
            );
            // The first claim's lease runs out; a second claim takes the key.
            let later = p.now(1_002_000);
            let second = acquire(&mut shard, later);
            assert_eq!(second.idx, first.idx, "the same entry, reused");
            // The forget fails: the second claim stays held.
            shard.abandon_forget(forget, &cap);
            assert!(
                shard.check(fp, p, later, &cap).is_some(),
                "the second claim was given up with the first"
            );
        });
    }

    /// A forget's closed note holds its key on both of a claim's acquiring branches
    /// (the key absent; its entry's lease run out), answering `InProgress` with the
    /// lease the claim would have had and counting it; a second forget of the key
    /// keeps a note and a count of its own; abandoning a closed note (a forget that
    /// failed) lifts its hold, as ending one does. At the shard, without a durable
    /// tier: the notes are the hot tier's.
    #[test]
    fn a_closed_forget_note_holds_its_key_until_its_forget_ends_or_is_abandoned() {
        use crate::hot::{DurableLookup, ShardClaim};
        at_the_shard_of_k(|inner, fp| {
            let si = fp.shard(inner.slots.len());
            let cap = inner.capacity();
            let p = &inner.params;
            let mut absent = |_| DurableLookup::Absent;
            let now = inner.now();
            let mut shard = inner.slots[si].lock();
            let first = shard.begin_forget(fp);
            let second = shard.begin_forget(fp);
            shard.close_forget(first);

            // The key absent: held, and the capacity unit the claim took is given back.
            let found = shard.look_up(fp, now, &cap);
            assert!(found.is_none());
            let in_progress = shard.counters.in_progress;
            // The units free: the namespace's pool and this shard's reserve.
            let free = |shard: &crate::hot::Shard| {
                cap.pool.load(std::sync::atomic::Ordering::SeqCst) + shard.reserve()
            };
            let units = free(&shard);
            match shard.claim_found(found, fp, None, p, now, &cap, Some(&mut absent), false) {
                ShardClaim::InProgress {
                    lease_expires_at_ms,
                } => {
                    assert_eq!(lease_expires_at_ms, 1_001_000, "now + the lease")
                }
                other => panic!("a claim under a closed note: {other:?}"),
            }
            assert_eq!(shard.counters.in_progress, in_progress + 1);
            assert_eq!(free(&shard), units, "the held claim's unit was given back");
            assert_eq!(shard.forget_claims(second), 0, "nothing acquired");

            // The first forget failed: its hold goes.
            shard.abandon_forget(first, &cap);
            assert_eq!(free(&shard), units);
            let found = shard.look_up(fp, now, &cap);
            let ShardClaim::Acquired { lease, .. } =
                shard.claim_found(found, fp, None, p, now, &cap, Some(&mut absent), false)
            else {
                panic!("the second forget's note is open: the claim is acquired")
            };
            shard.hold_new_claim(fp, lease.idx);
            shard.marker_written(fp, &lease);
            assert_eq!(shard.forget_claims(second), 1, "counted in the open note");

            // The claim's lease runs out and the second note closes: held again.
            shard.close_forget(second);
            drop(shard);
            let later = p.now(1_005_000);
            let mut shard = inner.slots[si].lock();
            let found = shard.look_up(fp, later, &cap);
            let expirations = shard.counters.expirations;
            match shard.claim_found(found, fp, None, p, later, &cap, Some(&mut absent), false) {
                ShardClaim::InProgress {
                    lease_expires_at_ms,
                } => {
                    assert_eq!(lease_expires_at_ms, 1_006_000, "now + the lease")
                }
                other => panic!("an expired entry acquired under a closed note: {other:?}"),
            }
            assert_eq!(shard.counters.expirations, expirations, "the entry stays");
            assert_eq!(
                shard.forget(fp, later, &cap),
                Some(false),
                "expired, not done"
            );

            // The second forget ends: the key is claimable.
            shard.end_forget(second);
            let found = shard.look_up(fp, later, &cap);
            assert!(matches!(
                shard.claim_found(found, fp, None, p, later, &cap, Some(&mut absent), false),
                ShardClaim::Acquired { .. }
            ));
        });
    }

    /// A claim acquired while a forget runs whose marker is still being written when
    /// the forget next looks at the key: the forget waits for that write before it
    /// deletes again. Deleting at once, it could miss the marker: here the write
    /// lands after the second delete and the claim's hold ends before the forget's
    /// next round, which would remove the entry and leave the marker. A watcher
    /// lets the held write go once the forget waits; without that wait the forget's
    /// hook lets it go after the second delete.
    #[cfg(feature = "durable")]
    #[test]
    fn a_forget_waits_for_the_marker_of_a_claim_acquired_while_it_ran() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        for (what, cfg, flush) in marker_places() {
            let dir = Scratch::new(&format!("forget-marker-across-{what}"));
            let (_engine, ns, _clock) = durable_namespace_with(&dir, cfg);
            let _other = hold_other(&ns);
            let (claimer, let_go) = claim_k_held_at_its_marker_before_the_delete(&ns, flush);
            let released = Arc::new(AtomicBool::new(false));
            let watcher = {
                let (ns, let_go, released) = (ns.clone(), let_go.clone(), released.clone());
                std::thread::spawn(move || {
                    while ns.debug_forget_waits() == 0 && !released.load(Ordering::SeqCst) {
                        std::thread::yield_now();
                    }
                    let _ = let_go.send(());
                })
            };
            let acquired = std::rc::Rc::new(std::cell::RefCell::new(None));
            {
                let (claimer, acquired) = (claimer.clone(), acquired.clone());
                // After the first delete, nothing; after the second, the write goes
                // (if the watcher has not let it go already) and ends.
                set_hook(&AFTER_FORGET_DELETE, move || {
                    set_hook(&AFTER_FORGET_DELETE, move || {
                        released.store(true, Ordering::SeqCst);
                        let _ = let_go.send(());
                        let t = claimer.borrow_mut().take().unwrap();
                        *acquired.borrow_mut() = Some(t.join().unwrap());
                    });
                });
            }
            forget_k_with_its_claim(&ns, &acquired, what);
            watcher.join().unwrap();
            assert_eq!(ns.debug_forget_waits(), 1, "{what}: the forget waited");
        }
    }

    /// A forget whose first delete was applied but not synced, and which deletes
    /// again for a claim acquired while it ran, returns the failed fsync's error even
    /// when the second delete's fsync works: a later fsync that works does not bring
    /// back what the failed one may have lost. The key is forgotten in both tiers all
    /// the same. Before, the second delete's answer replaced the first's, and the
    /// forget returned `Ok` under `SyncPolicy::Always`.
    #[cfg(feature = "durable")]
    #[test]
    fn a_forget_that_deletes_again_returns_the_first_deletes_failed_fsync() {
        let dir = Scratch::new("forget-again-unsynced");
        let (engine, ns, _clock) = durable_namespace_with(
            &dir,
            crate::NamespaceConfig::new()
                .lease(std::time::Duration::from_secs(1))
                .claim_markers(crate::ClaimMarkers::Immediate)
                .sync(crate::SyncPolicy::Always),
        );
        let store = engine.shared.store.clone().expect("a durable engine");
        let acquired = std::rc::Rc::new(std::cell::RefCell::new(None));
        {
            let (ns, acquired, store) = (ns.clone(), acquired.clone(), store.clone());
            set_hook(&AFTER_FORGET_DELETE, move || {
                // The first delete's fsync failed; the second's works.
                store.set_fail_syncs(false);
                *acquired.borrow_mut() = Some(claim_k(&ns, false));
            });
        }
        store.set_fail_syncs(true);
        let err = ns.forget(b"k").unwrap_err();
        store.set_fail_syncs(false);
        assert!(
            matches!(&err, crate::Error::Store(s) if s.operation() == "sync"),
            "{err:?}"
        );
        let g = acquired
            .borrow_mut()
            .take()
            .expect("claimed during the forget");
        assert_forgotten_with_its_marker(&ns, g, "unsynced");
    }

    /// A forget whose first delete was applied, and whose second (for a claim of the
    /// key acquired while it ran) the store refused, returns the refusal with the key
    /// forgotten in both tiers all the same, as after a failed fsync: its record is
    /// gone, and the claim goes with the key (its guard's completion is lost; the
    /// marker the refused delete left goes with that guard). Before, the forget
    /// returned the error at once with the key half forgotten: its done record gone,
    /// the claim acquired meanwhile still held (its completion would have made the
    /// key done again), and nothing counted as forgotten.
    #[cfg(feature = "durable")]
    #[test]
    fn a_forget_refused_at_a_later_delete_forgets_the_key_all_the_same() {
        use crate::KeyState;
        use std::time::Duration;
        let dir = Scratch::new("forget-again-refused");
        let (engine, ns, clock) = durable_namespace_with(
            &dir,
            crate::NamespaceConfig::new()
                .lease(Duration::from_secs(1))
                .ttl(Duration::from_secs(10))
                .retention(Duration::from_secs(100))
                .claim_markers(crate::ClaimMarkers::Immediate)
                .sync(crate::SyncPolicy::Never),
        );
        first_claim(&ns).complete().unwrap();
        // Past its TTL, within retention: done in the durable tier only, so a claim
        // after the forget's delete acquires it.
        clock.advance(Duration::from_secs(11));
        assert!(matches!(
            ns.check(b"k").unwrap(),
            Some(KeyState::Done { .. })
        ));
        let store = engine.shared.store.clone().expect("a durable engine");
        let acquired = std::rc::Rc::new(std::cell::RefCell::new(None));
        {
            let (ns, acquired, store) = (ns.clone(), acquired.clone(), store.clone());
            set_hook(&AFTER_FORGET_DELETE, move || {
                *acquired.borrow_mut() = Some(claim_k(&ns, false));
                // The store refuses writes from here: the second delete.
                store.set_fail_writes(true);
            });
        }
        let before = ns.stats();
        let err = ns.forget(b"k").unwrap_err();
        store.set_fail_writes(false);
        assert!(
            matches!(&err, crate::Error::Store(s) if s.operation() == "write"),
            "{err:?}"
        );
        let g = acquired
            .borrow_mut()
            .take()
            .expect("claimed during the forget");
        let after = ns.stats();
        assert_eq!(
            (after.forgotten, after.resident_keys),
            (before.forgotten + 1, 0),
            "{after:?}"
        );
        assert!(ns.check(b"k").unwrap().is_none(), "forgotten in both tiers");
        let (fp, d) = (g.fp.to_u128(), ns.inner.durable.as_ref().unwrap());
        assert_eq!(d.marker_token_on_disk(fp), Some(g.lease.token));
        assert_eq!(g.complete(), Err(crate::Error::LeaseLost));
        assert_eq!(d.marker_token_on_disk(fp), None, "gone with its guard");
        assert_forgotten(&ns, "refused");
    }

    /// Runs test `name` of this binary as a child process, with `env` (its variable
    /// and the directory it names) set, waits until the child prints a line "ready",
    /// and kills it with SIGKILL: the test fails if it never gets ready (a watchdog
    /// kills a child that is not ready within two minutes) or ends otherwise.
    #[cfg(all(feature = "durable", unix))]
    fn kill_when_ready(name: &str, env: (&str, &std::path::Path)) {
        use std::io::BufRead;
        use std::os::unix::process::ExitStatusExt;
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([name, "--exact", "--nocapture", "--test-threads=1"])
            .env(env.0, env.1)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("the child starts");
        let (disarm, armed) = std::sync::mpsc::channel::<()>();
        let pid = child.id();
        let watchdog = std::thread::spawn(move || {
            let limit = std::time::Duration::from_secs(120);
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = armed.recv_timeout(limit) {
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
        });
        let out = std::io::BufReader::new(child.stdout.take().unwrap());
        let ready = out.lines().map_while(Result::ok).any(|l| l == "ready");
        drop(disarm);
        watchdog.join().unwrap();
        child.kill().expect("SIGKILL delivered");
        let status = child.wait().unwrap();
        assert!(ready, "the child got ready: {status:?}");
        assert_eq!(status.signal(), Some(9), "ended by SIGKILL: {status:?}");
    }

    /// The child's side of
    /// [`a_crash_after_a_forget_reports_no_orphan_for_a_claim_acquired_while_it_ran`]
    /// names the directory it works in with this variable.
    #[cfg(all(feature = "durable", unix))]
    const FORGET_CRASH_DIR: &str = "IDEM_TEST_FORGET_CRASH_DIR";

    /// A process killed with SIGKILL after a forget returned, the guard of a claim
    /// acquired while the forget ran still held: the next open reports only the
    /// claim that was in flight ("other"), not the forgotten one, in every place a
    /// marker is kept (a deferred one flushed after the forget, as the maintenance
    /// pass would). Before, the forgotten claim's marker, written after the forget's
    /// delete, was reported as an orphan and held "k" to the end of its lease. The
    /// test binary runs itself as the child, which sets the race up with the
    /// forget's hooks and waits to be killed.
    #[cfg(all(feature = "durable", unix))]
    #[test]
    fn a_crash_after_a_forget_reports_no_orphan_for_a_claim_acquired_while_it_ran() {
        use std::io::Write;
        if let Ok(base) = std::env::var(FORGET_CRASH_DIR) {
            let mut kept = Vec::new();
            for (what, cfg, flush) in marker_places() {
                let dir = Scratch(std::path::Path::new(&base).join(what));
                let (engine, ns, _clock) = durable_namespace_with(&dir, cfg);
                // In flight at the crash (and, first, in a one-slot journal's slot).
                let other = hold_other(&ns);
                let acquired = std::rc::Rc::new(std::cell::RefCell::new(None));
                {
                    let (ns, acquired) = (ns.clone(), acquired.clone());
                    set_hook(&AFTER_FORGET_DELETE, move || {
                        *acquired.borrow_mut() = Some(claim_k(&ns, flush));
                    });
                }
                assert!(ns.forget(b"k").unwrap(), "{what}");
                let g = acquired
                    .borrow_mut()
                    .take()
                    .expect("claimed during the forget");
                // The maintenance pass after the forget.
                ns.inner.durable.as_ref().unwrap().flush_markers().unwrap();
                kept.push((engine, ns, other, g, dir));
            }
            // (On a line of its own: the harness has begun one with the test's name.)
            println!("\nready");
            std::io::stdout().flush().unwrap();
            loop {
                std::thread::park();
            }
        }
        let base = Scratch::new("forget-crash");
        std::fs::create_dir_all(&base.0).unwrap();
        kill_when_ready(
            "engine::tests::a_crash_after_a_forget_reports_no_orphan_for_a_claim_acquired_while_it_ran",
            (FORGET_CRASH_DIR, &base.0),
        );
        for (what, cfg, _) in marker_places() {
            let dir = Scratch(base.0.join(what));
            let engine = durable_engine(&dir, cfg, &crate::ManualClock::new(1_000_000));
            let ns = engine.namespace("n").unwrap();
            let other = ns.inner.key_fp(b"other").unwrap().to_u128();
            let orphans: Vec<u128> = engine.orphans().iter().map(|o| o.fingerprint).collect();
            assert_eq!(
                orphans,
                [other],
                "{what}: the claim in flight, not the forgotten one"
            );
            assert_forgotten(&ns, what);
        }
    }

    /// The child's side of
    /// [`a_damaged_journal_is_reported_once_after_a_crash_while_it_was_marked_reported`]
    /// names the directory it works in with this variable.
    #[cfg(all(feature = "durable", target_os = "linux"))]
    const REPORTED_CRASH_DIR: &str = "IDEM_TEST_REPORTED_CRASH_DIR";

    /// The child's side of
    /// [`a_damaged_journal_is_reported_once_after_a_crash_while_it_was_kept_aside`]
    /// names the directory it works in with this variable.
    #[cfg(all(feature = "durable", target_os = "linux"))]
    const ASIDE_CRASH_DIR: &str = "IDEM_TEST_ASIDE_CRASH_DIR";

    /// A process killed with SIGKILL while its open marked a damaged journal kept
    /// aside as reported (the file linked under its reported name, its unreported
    /// name not yet removed) leaves the file under both names. The next open reports
    /// its damaged slot again and finishes the move; the open after it reports
    /// nothing. Before, the move found its new name taken and gave up, so every later
    /// open reported the damaged slot again, for good.
    #[cfg(all(feature = "durable", target_os = "linux"))]
    #[test]
    fn a_damaged_journal_is_reported_once_after_a_crash_while_it_was_marked_reported() {
        a_damaged_journal_is_reported_once_after_a_crash_at(
            "engine::tests::a_damaged_journal_is_reported_once_after_a_crash_while_it_was_marked_reported",
            REPORTED_CRASH_DIR,
            crate::durable::set_after_reported_link,
        );
    }

    /// A process killed with SIGKILL while its open kept a damaged journal aside (the
    /// journal in place linked under its kept-aside name, the old name not yet
    /// removed) leaves the file under both names. The next open reports its damaged
    /// slot once and finishes the move; the open after it reports nothing. Before,
    /// that open read the file under both names and reported each damaged slot
    /// twice, then kept it aside under a third name, so two kept files held it.
    #[cfg(all(feature = "durable", target_os = "linux"))]
    #[test]
    fn a_damaged_journal_is_reported_once_after_a_crash_while_it_was_kept_aside() {
        a_damaged_journal_is_reported_once_after_a_crash_at(
            "engine::tests::a_damaged_journal_is_reported_once_after_a_crash_while_it_was_kept_aside",
            ASIDE_CRASH_DIR,
            crate::durable::set_after_aside_link,
        );
    }

    /// The two tests above: the test binary runs itself (test `name`) as the child,
    /// which makes a journal with a damaged slot, sets the hook of the step it is to
    /// be killed at (with `set_hook`) and opens; it is killed there. Then one open
    /// reports the slot once, and later ones never, and one kept file is left.
    #[cfg(all(feature = "durable", target_os = "linux"))]
    fn a_damaged_journal_is_reported_once_after_a_crash_at(
        name: &str,
        var: &str,
        set_hook: fn(fn()),
    ) {
        let cfg = || crate::NamespaceConfig::new().claim_markers(crate::ClaimMarkers::Journal);
        let corrupt = |engine: &super::Engine| -> Vec<u128> {
            engine
                .orphans()
                .iter()
                .filter(|o| o.corrupt.is_some())
                .map(|o| o.fingerprint)
                .collect()
        };
        if let Ok(base) = std::env::var(var) {
            let dir = Scratch(std::path::PathBuf::from(base));
            {
                // "k" in flight at a crash: its journal slot stays.
                let (engine, ns, _clock) = durable_namespace_with(&dir, cfg());
                let g = claim_k(&ns, false);
                engine.debug_keep_journal_markers(true);
                drop(g);
            }
            // Damaged at rest: a word of the first slot flipped.
            let file = crate::durable::journal::path(&dir.0, "n");
            let mut bytes = std::fs::read(&file).unwrap();
            bytes[64 + 16] ^= 0x10;
            std::fs::write(&file, &bytes).unwrap();
            set_hook(|| {
                use std::io::Write;
                // (On a line of its own: the harness has begun one with the test's name.)
                println!("\nready");
                std::io::stdout().flush().unwrap();
                loop {
                    std::thread::park();
                }
            });
            let engine = durable_engine(&dir, cfg(), &crate::ManualClock::new(1_000_000));
            panic!("the open went past the hook: {:?}", engine.orphans());
        }
        let dir = Scratch::new(&var.to_lowercase());
        std::fs::create_dir_all(&dir.0).unwrap();
        kill_when_ready(name, (var, &dir.0));
        let kept = |suffix: &str| -> usize {
            std::fs::read_dir(&dir.0)
                .unwrap()
                .filter(|e| {
                    let n = e
                        .as_ref()
                        .unwrap()
                        .file_name()
                        .to_string_lossy()
                        .into_owned();
                    n.contains(".damaged-") && n.ends_with(suffix)
                })
                .count()
        };
        assert_eq!(
            kept(".unreported"),
            1,
            "killed before it was marked reported"
        );
        let clock = crate::ManualClock::new(1_000_000);
        let k = {
            let engine = durable_engine(&dir, cfg(), &clock);
            let k = engine
                .namespace("n")
                .unwrap()
                .inner
                .key_fp(b"k")
                .unwrap()
                .to_u128();
            assert_eq!(
                corrupt(&engine),
                [k],
                "reported again, once: the open did not finish"
            );
            k
        };
        for _ in 0..2 {
            let engine = durable_engine(&dir, cfg(), &clock);
            assert!(
                corrupt(&engine).is_empty(),
                "the damaged slot of {k:x} was reported by an open that finished: {:?}",
                engine.orphans()
            );
        }
        assert_eq!(kept(".unreported"), 0, "marked reported");
        assert_eq!(kept(""), 1, "kept, under one name");
    }

    /// A sliding window (TTL and retention 60 s) in `dir` whose "k" was completed at
    /// the clock's start, 30 s ago: a sighting now (the hot entry live) moves the
    /// window past the record's retention, a rewrite.
    #[cfg(feature = "durable")]
    fn sliding_k_sighted_later(dir: &Scratch) -> (super::Engine, super::Namespace) {
        use std::time::Duration;
        let (engine, ns, clock) = durable_namespace_with(
            dir,
            crate::NamespaceConfig::new()
                .ttl(Duration::from_secs(60))
                .retention(Duration::from_secs(60))
                .extend_on_duplicate(true)
                .sync(crate::SyncPolicy::Never),
        );
        first_claim(&ns).complete().unwrap();
        clock.advance(Duration::from_secs(30));
        (engine, ns)
    }

    /// An extended lease rewrites its claim's marker with the new end, wherever the
    /// marker is: a journal slot, a journal that overflowed into RocksDB, a deferred
    /// marker still in memory or already flushed, an immediate one.
    #[cfg(feature = "durable")]
    #[test]
    fn an_extended_lease_rewrites_its_marker_where_it_is() {
        use crate::ClaimMarkers;
        use std::time::Duration;
        let cases: [(&str, ClaimMarkers, bool, &str); 5] = [
            ("journal", ClaimMarkers::Journal, false, "journal"),
            ("overflow", ClaimMarkers::Journal, true, "rocksdb"),
            ("deferred", ClaimMarkers::Deferred, false, "memory"),
            ("flushed", ClaimMarkers::Deferred, true, "rocksdb"),
            ("immediate", ClaimMarkers::Immediate, false, "rocksdb"),
        ];
        for (name, markers, moved, place) in cases {
            let dir = Scratch::new(&format!("extend-{name}"));
            let (engine, ns, clock) = durable_namespace_with(
                &dir,
                crate::NamespaceConfig::new()
                    .lease(Duration::from_secs(1))
                    .claim_markers(markers)
                    .journal_slots(2)
                    .sync(crate::SyncPolicy::Never),
            );
            // The journal's two slots taken first: the claim's marker overflows. (With
            // one taken, the renewal has the other: a journal with no slot free
            // renews into RocksDB, a test of tests/durable.rs.)
            let first = (moved && markers == ClaimMarkers::Journal).then(|| {
                let acquire = |k: &[u8]| match ns.claim(k).unwrap() {
                    crate::Claim::Acquired(g) => g,
                    other => panic!("a new key: {other:?}"),
                };
                (acquire(b"first"), acquire(b"second"))
            });
            let crate::Claim::Acquired(mut g) = ns.claim_with_payload(b"k", b"p").unwrap() else {
                panic!("{name}: a new key")
            };
            if moved && markers == ClaimMarkers::Deferred {
                engine.run_maintenance();
            }
            let d = ns.inner.durable.as_ref().unwrap();
            let fp = g.fp.to_u128();
            let (at, before) = d.marker_anywhere(fp).expect("a marker");
            assert_eq!(at, place, "{name}");
            // The journal's slot free again: the overflowed marker stays where it is.
            if let Some((first, _second)) = first {
                first.release().unwrap();
            }
            clock.advance(Duration::from_millis(500));
            g.extend_lease(Duration::from_secs(30)).unwrap();
            let (at, after) = d.marker_anywhere(fp).expect("a marker");
            assert_eq!(at, place, "{name}: rewritten where it was");
            assert_eq!(after.expires_ms, 1_000_000 + 500 + 30_000, "{name}");
            assert_eq!(g.lease_expires_at_ms(), after.expires_ms, "{name}");
            assert_eq!(
                (after.token, after.payload, after.state),
                (before.token, before.payload, before.state),
                "{name}"
            );
            g.complete().unwrap();
            assert!(ns.claim(b"k").unwrap().is_duplicate(), "{name}");
        }
    }

    /// A marker the store refuses to rewrite: under `FailClosed` the extension is
    /// undone (the old end stands) and the error returned; under `FailOpen` the lease
    /// is extended in memory, counted as a fail-open decision.
    #[cfg(feature = "durable")]
    #[test]
    fn an_extension_whose_marker_the_store_refuses_follows_the_failure_policy() {
        use crate::{ClaimMarkers, FailurePolicy};
        use std::time::Duration;
        for policy in [FailurePolicy::FailClosed, FailurePolicy::FailOpen] {
            let dir = Scratch::new("extend-refused");
            let (engine, ns, clock) = durable_namespace_with(
                &dir,
                crate::NamespaceConfig::new()
                    .lease(Duration::from_secs(1))
                    .claim_markers(ClaimMarkers::Immediate)
                    .on_store_error(policy)
                    .sync(crate::SyncPolicy::Never),
            );
            let mut g = first_claim(&ns);
            let fp = g.fp.to_u128();
            engine.debug_fail_store_writes(true);
            let r = g.extend_lease(Duration::from_secs(30));
            engine.debug_fail_store_writes(false);
            let d = ns.inner.durable.as_ref().unwrap();
            let on_disk = d.marker_anywhere(fp).unwrap().1.expires_ms;
            assert_eq!(
                on_disk,
                1_000_000 + 1_000,
                "{policy:?}: the old end on disk"
            );
            clock.advance(Duration::from_secs(1));
            if policy == FailurePolicy::FailClosed {
                assert!(matches!(r, Err(crate::Error::Store(_))), "{r:?}");
                assert_eq!(g.lease_expires_at_ms(), 1_000_000 + 1_000);
                assert!(ns.claim(b"k").unwrap().is_acquired(), "the old end stood");
                assert_eq!(g.complete(), Err(crate::Error::LeaseLost));
            } else {
                r.unwrap();
                assert_eq!(engine.stats().fail_open_decisions, 1);
                assert!(ns.claim(b"k").unwrap().is_in_progress(), "extended");
                g.complete().unwrap();
            }
        }
    }

    /// A durable namespace "n" in `dir` with immediate markers (the RocksDB path of
    /// a marker's rewrite) and a 5 s lease, on a manual clock.
    #[cfg(feature = "durable")]
    fn immediate_markers_5s_lease(
        dir: &Scratch,
    ) -> (super::Engine, super::Namespace, crate::ManualClock) {
        durable_namespace_with(
            dir,
            crate::NamespaceConfig::new()
                .lease(std::time::Duration::from_secs(5))
                .claim_markers(crate::ClaimMarkers::Immediate)
                .sync(crate::SyncPolicy::Never),
        )
    }

    /// An extension whose marker the store refuses under `FailClosed` puts the old
    /// end back even when a maintenance pass, during the write, moved the held
    /// entry's deadline (the new end, a short one, had passed): the key is still
    /// held until the old end. (Before, the restore matched the entry's deadline,
    /// found it moved, and left the lease ending a tick after the new end.)
    #[cfg(feature = "durable")]
    #[test]
    fn a_refused_extension_restores_the_old_end_though_maintenance_moved_the_entry() {
        use std::rc::Rc;
        use std::time::Duration;
        let dir = Scratch::new("extend-restore");
        let (engine, ns, clock) = immediate_markers_5s_lease(&dir);
        let engine = Rc::new(engine);
        let mut g = first_claim(&ns);
        {
            let (engine, clock) = (engine.clone(), clock.clone());
            crate::durable::set_before_renew_put(move || {
                clock.advance(Duration::from_millis(20));
                engine.run_maintenance();
                engine.debug_fail_store_writes(true);
            });
        }
        let r = g.extend_lease(Duration::from_millis(10));
        engine.debug_fail_store_writes(false);
        assert!(matches!(r, Err(crate::Error::Store(_))), "{r:?}");
        assert_eq!(g.lease_expires_at_ms(), 1_000_000 + 5_000);
        clock.advance(Duration::from_millis(100));
        engine.run_maintenance();
        assert!(
            ns.claim(b"k").unwrap().is_in_progress(),
            "held until the old end"
        );
        g.complete().unwrap();
    }

    /// An extension refused under `FailClosed` after the old end has passed (here
    /// during the marker's write) leaves the claim expired, and its room free at
    /// once: a full namespace takes a new key at that same time. (Before, the old
    /// end went back into the wheel, which takes no deadline behind it, so the entry
    /// stayed until the next tick and the claim was refused.)
    #[cfg(feature = "durable")]
    #[test]
    fn a_refused_extension_whose_old_end_has_passed_frees_its_room_at_once() {
        use std::rc::Rc;
        use std::time::Duration;
        let dir = Scratch::new("extend-expired");
        let (engine, ns, clock) = durable_namespace_with(
            &dir,
            crate::NamespaceConfig::new()
                .lease(Duration::from_secs(5))
                .max_keys(1)
                .shards(1)
                .claim_markers(crate::ClaimMarkers::Immediate)
                .sync(crate::SyncPolicy::Never),
        );
        let engine = Rc::new(engine);
        let mut g = first_claim(&ns);
        {
            let (engine, clock) = (engine.clone(), clock.clone());
            crate::durable::set_before_renew_put(move || {
                clock.advance(Duration::from_secs(6));
                engine.run_maintenance();
                engine.debug_fail_store_writes(true);
            });
        }
        let expirations = engine.stats().expirations;
        let r = g.extend_lease(Duration::from_secs(60));
        engine.debug_fail_store_writes(false);
        assert!(matches!(r, Err(crate::Error::Store(_))), "{r:?}");
        assert!(ns.claim(b"j").unwrap().is_acquired(), "the room is free");
        assert_eq!(engine.stats().expirations, expirations + 1, "expired");
        assert_eq!(g.complete(), Err(crate::Error::LeaseLost));
    }

    /// A sighting made while another sighting's rewrite of the record is in flight
    /// answers no later expiry than the record held before that rewrite, and does
    /// not move the window: if the write fails (`FailClosed`), the window goes back
    /// there and the key is still a duplicate until the expiry it was told; if it
    /// succeeds, the rewrite's window holds. (Before, the sighting counted as covered
    /// by the rewrite's target and answered its expiry, a minute past the record's,
    /// which the failed write then undid.)
    #[cfg(feature = "durable")]
    #[test]
    fn a_sighting_during_a_window_rewrite_answers_what_the_record_held() {
        use std::cell::RefCell;
        use std::rc::Rc;
        use std::time::Duration;
        for fails in [true, false] {
            let dir = Scratch::new("sighting-during-rewrite");
            let (engine, ns, clock) = durable_namespace_with(
                &dir,
                crate::NamespaceConfig::new()
                    .ttl(Duration::from_secs(60))
                    .retention(Duration::from_secs(60))
                    .extend_on_duplicate(true)
                    .sync(crate::SyncPolicy::Never),
            );
            let engine = Rc::new(engine);
            first_claim(&ns).complete().unwrap();
            clock.advance(Duration::from_secs(30));
            let during = Rc::new(RefCell::new(None));
            {
                let (engine, clock, ns, during) =
                    (engine.clone(), clock.clone(), ns.clone(), during.clone());
                crate::durable::set_before_rewrite(move || {
                    clock.advance(Duration::from_secs(1));
                    *during.borrow_mut() = Some(ns.claim(b"k").unwrap());
                    engine.debug_fail_store_writes(fails);
                });
            }
            let first = ns.claim(b"k");
            engine.debug_fail_store_writes(false);
            assert_eq!(first.is_err(), fails, "{first:?}");
            let Some(crate::Claim::Duplicate(done)) = during.borrow_mut().take() else {
                panic!("the sighting during the rewrite is a duplicate")
            };
            assert_eq!(
                done.expires_at_ms(),
                1_000_000 + 60_000,
                "fails: {fails}: the record's window before the rewrite"
            );
            let Some(crate::KeyState::Done { expires_at_ms, .. }) = ns.check(b"k").unwrap() else {
                panic!("fails: {fails}: still done")
            };
            let window = if fails { 60_000 } else { 120_000 };
            assert_eq!(expires_at_ms, 1_000_000 + window, "fails: {fails}");
            clock.advance(Duration::from_secs(28)); // a second before that expiry
            let c = ns.claim(b"k").unwrap();
            assert!(c.is_duplicate(), "fails: {fails}: {c:?}");
        }
    }

    /// A sliding window's rewrite that the store refuses (`FailClosed`) after the
    /// window's old end has passed leaves the key expired and its room given back at
    /// once, counted as an expiration. (Before, the old end went back into the
    /// wheel, which takes no deadline behind it: the expired entry stayed resident
    /// until the next tick.)
    #[cfg(feature = "durable")]
    #[test]
    fn a_refused_window_rewrite_whose_old_end_has_passed_frees_its_room_at_once() {
        use std::rc::Rc;
        use std::time::Duration;
        let dir = Scratch::new("rewrite-expired");
        let (engine, ns, clock) = durable_namespace_with(
            &dir,
            crate::NamespaceConfig::new()
                .ttl(Duration::from_secs(10))
                .retention(Duration::from_secs(10))
                .extend_on_duplicate(true)
                .max_keys(4)
                .shards(1)
                .sync(crate::SyncPolicy::Never),
        );
        let engine = Rc::new(engine);
        first_claim(&ns).complete().unwrap();
        // A sighting 9 s on moves the window's end past the record's: a rewrite,
        // during which the old end (10 s after the completion) passes and the store
        // starts refusing writes.
        clock.advance(Duration::from_secs(9));
        {
            let (engine, clock) = (engine.clone(), clock.clone());
            crate::durable::set_before_rewrite(move || {
                clock.advance(Duration::from_secs(2));
                engine.run_maintenance();
                engine.debug_fail_store_writes(true);
            });
        }
        let before = engine.stats();
        let r = ns.claim(b"k");
        engine.debug_fail_store_writes(false);
        assert!(matches!(r, Err(crate::Error::Store(_))), "{r:?}");
        let after = engine.stats();
        assert_eq!(
            after.resident_keys, 0,
            "the expired entry's room is given back"
        );
        assert_eq!(after.expirations, before.expirations + 1);
        assert!(
            ns.check(b"k").unwrap().is_none(),
            "expired, record and window"
        );
    }

    /// An extension that comes while its key is being forgotten (between the
    /// forget's delete of the records and its removal of the hot entry) is refused:
    /// the forget has taken the claim, and its marker, just deleted, is not written
    /// again (a crash would have reported the forgotten key as an orphan).
    #[cfg(feature = "durable")]
    #[test]
    fn an_extension_during_a_forget_of_its_key_is_refused() {
        use crate::ClaimMarkers;
        use std::time::Duration;
        for markers in [
            ClaimMarkers::Journal,
            ClaimMarkers::Deferred,
            ClaimMarkers::Immediate,
        ] {
            let dir = Scratch::new("extend-forget");
            let (_engine, ns, _clock) = durable_namespace(&dir, markers);
            let g = std::rc::Rc::new(std::cell::RefCell::new(first_claim(&ns)));
            let fp = g.borrow().fp.to_u128();
            let extended = std::rc::Rc::new(std::cell::RefCell::new(None));
            {
                let (g, extended) = (g.clone(), extended.clone());
                set_hook(&AFTER_FORGET_DELETE, move || {
                    let r = g.borrow_mut().extend_lease(Duration::from_secs(60));
                    *extended.borrow_mut() = Some(r);
                });
            }
            assert!(ns.forget(b"k").unwrap(), "{markers:?}");
            assert_eq!(
                extended.borrow_mut().take(),
                Some(Err(crate::Error::LeaseLost)),
                "{markers:?}"
            );
            let d = ns.inner.durable.as_ref().unwrap();
            assert!(d.marker_anywhere(fp).is_none(), "{markers:?}");
        }
    }

    /// An extension refused because its key is being forgotten leaves the claim to
    /// the forget, as a refused completion does: when the forget's delete then
    /// fails, the claim is given up and the guard's completion says `LeaseLost`, as
    /// the extension did.
    #[cfg(feature = "durable")]
    #[test]
    fn an_extension_refused_by_a_forget_that_then_fails_leaves_the_claim_lost() {
        use std::cell::RefCell;
        use std::rc::Rc;
        use std::time::Duration;
        let dir = Scratch::new("extend-forget-fails");
        let (engine, ns, _clock) = durable_namespace(&dir, crate::ClaimMarkers::Immediate);
        let g = Rc::new(RefCell::new(Some(first_claim(&ns))));
        let extended = Rc::new(RefCell::new(None));
        {
            let (g, extended) = (g.clone(), extended.clone());
            let store = engine.shared.store.clone().expect("a durable engine");
            set_hook(&BEFORE_FORGET_DELETE, move || {
                let mut g = g.borrow_mut();
                let r = g.as_mut().unwrap().extend_lease(Duration::from_secs(60));
                *extended.borrow_mut() = Some(r);
                store.set_fail_writes(true);
            });
        }
        assert!(ns.forget(b"k").is_err(), "the delete fails");
        engine.debug_fail_store_writes(false);
        assert_eq!(
            extended.borrow_mut().take(),
            Some(Err(crate::Error::LeaseLost))
        );
        let g = g.borrow_mut().take().unwrap();
        assert_eq!(g.complete(), Err(crate::Error::LeaseLost));
    }

    /// A marker's rewrite that panics leaves the claim as it was: the old end, no
    /// hold (the guard releases it), and the panic goes on to the caller.
    #[cfg(feature = "durable")]
    #[test]
    fn an_extension_whose_marker_write_panics_leaves_the_claim_as_it_was() {
        use std::time::Duration;
        let dir = Scratch::new("extend-panics");
        let (engine, ns, clock) = immediate_markers_5s_lease(&dir);
        let mut g = first_claim(&ns);
        crate::durable::set_before_renew_put(|| panic!("the store panics (on purpose)"));
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            g.extend_lease(Duration::from_secs(60))
        }));
        assert!(r.is_err(), "the panic reaches the caller");
        assert_eq!(g.lease_expires_at_ms(), 1_000_000 + 5_000);
        clock.advance(Duration::from_secs(4));
        engine.run_maintenance();
        assert!(ns.claim(b"k").unwrap().is_in_progress());
        g.release().unwrap();
        assert!(ns.claim(b"k").unwrap().is_acquired());
    }

    /// A sliding window (TTL and retention 60 s) with `markers`, failing open, no
    /// fsync: the namespace of the window rewrite's marker tests.
    #[cfg(feature = "durable")]
    fn sliding_fail_open(markers: crate::ClaimMarkers) -> crate::NamespaceConfig {
        crate::NamespaceConfig::new()
            .ttl(std::time::Duration::from_secs(60))
            .retention(std::time::Duration::from_secs(60))
            .extend_on_duplicate(true)
            .claim_markers(markers)
            .on_store_error(crate::FailurePolicy::FailOpen)
            .sync(crate::SyncPolicy::Never)
    }

    /// A completion decided from the hot tier alone (fail open, the store refusing)
    /// keeps its claim's marker, nothing in the store saying the key is done; a
    /// sliding window's rewrite of its record, once the store takes writes again,
    /// settles it, as a completion that stores does.
    #[cfg(feature = "durable")]
    #[test]
    fn a_window_rewrite_of_a_hot_only_completion_settles_its_marker() {
        use crate::ClaimMarkers;
        use std::time::Duration;
        for markers in [
            ClaimMarkers::Journal,
            ClaimMarkers::Deferred,
            ClaimMarkers::Immediate,
        ] {
            let dir = Scratch::new("hot-only-rewrite");
            let (engine, ns, clock) = durable_namespace_with(&dir, sliding_fail_open(markers));
            let g = first_claim(&ns);
            let fp = g.fp.to_u128();
            engine.debug_fail_store_writes(true);
            g.complete().expect("fail open");
            engine.debug_fail_store_writes(false);
            let d = ns.inner.durable.as_ref().unwrap();
            assert!(d.marker_anywhere(fp).is_some(), "{markers:?}: kept");
            clock.advance(Duration::from_secs(30));
            let writes = engine.stats().durable_writes;
            assert!(ns.claim(b"k").unwrap().is_duplicate(), "{markers:?}");
            assert!(
                engine.stats().durable_writes > writes,
                "{markers:?}: the rewrite"
            );
            assert_eq!(d.marker_anywhere(fp), None, "{markers:?}: settled");
            assert!(d.done_on_disk(fp).is_some(), "{markers:?}");
        }
    }

    /// A sliding window whose rewrite the store refused (fail open, the window kept
    /// in the hot tier alone) is rewritten by the next sighting once the store takes
    /// writes again, so that the record lasts until the expiry that sighting
    /// answers: after a restart the key is still a duplicate. (Before, the hot
    /// deadline counted as what the record held: the sighting wrote nothing, and
    /// the restarted engine acquired the key before that expiry.)
    #[cfg(feature = "durable")]
    #[test]
    fn a_sighting_after_a_refused_window_rewrite_writes_the_record() {
        use std::time::Duration;
        let dir = Scratch::new("hot-only-window");
        let cfg = || sliding_fail_open(crate::ClaimMarkers::Journal);
        let clock = crate::ManualClock::new(1_000_000);
        let answered = {
            let engine = durable_engine(&dir, cfg(), &clock);
            let ns = engine.namespace("n").unwrap();
            first_claim(&ns).complete().unwrap();
            clock.advance(Duration::from_secs(30));
            engine.debug_fail_store_writes(true);
            assert!(ns.claim(b"k").unwrap().is_duplicate(), "fail open");
            engine.debug_fail_store_writes(false);
            clock.advance(Duration::from_secs(10));
            let writes = engine.stats().durable_writes;
            let crate::Claim::Duplicate(done) = ns.claim(b"k").unwrap() else {
                panic!("a duplicate")
            };
            assert!(engine.stats().durable_writes > writes, "the rewrite");
            // Written now: the next sighting within it writes nothing.
            let writes = engine.stats().durable_writes;
            assert!(ns.claim(b"k").unwrap().is_duplicate());
            assert_eq!(engine.stats().durable_writes, writes, "covered");
            engine.close().unwrap();
            done.expires_at_ms()
        };
        // The window's end, 100 s on, rounded up to a whole retention.
        assert_eq!(answered, 1_000_000 + 120_000);
        clock.advance(Duration::from_secs(79)); // a second before that expiry
        let engine = durable_engine(&dir, cfg(), &clock);
        let ns = engine.namespace("n").unwrap();
        let c = ns.claim(b"k").unwrap();
        assert!(c.is_duplicate(), "answered until {answered}: {c:?}");
    }

    /// A sliding window read back from the durable tier rewrites its record without
    /// settling the marker of a claim in flight: here claim X, acquired over the
    /// live record of an earlier run when the read failed under `FailOpen` (with the
    /// record's fencing token: tokens start again every run), whose lease then runs
    /// out while its guard is held. Its marker stays (journal, RocksDB), or is still
    /// written by the next flush (deferred), so a crash reports X, through the
    /// read-back's rewrite and the later ones of the key, resident then. (A
    /// read-back entry once carried the record's token into the rewrite, whose
    /// batch then cleared X's journal slot or dropped its deferred marker; and a
    /// rewrite's batch deleted any marker of the key in RocksDB.)
    #[cfg(all(feature = "durable", target_os = "linux"))]
    #[test]
    fn a_read_back_windows_rewrite_keeps_the_marker_of_a_claim_in_flight() {
        use crate::ClaimMarkers;
        use std::time::Duration;
        for markers in [
            ClaimMarkers::Journal,
            ClaimMarkers::Deferred,
            ClaimMarkers::Immediate,
        ] {
            let dir = Scratch::new("read-back-token");
            let cfg = || {
                sliding_fail_open(markers)
                    .lease(Duration::from_secs(5))
                    .shards(1)
            };
            let clock = crate::ManualClock::new(1_000_000);
            {
                let engine = durable_engine(&dir, cfg(), &clock);
                first_claim(&engine.namespace("n").unwrap())
                    .complete()
                    .unwrap();
            }
            clock.advance(Duration::from_secs(1));
            let engine = durable_engine(&dir, cfg(), &clock);
            let ns = engine.namespace("n").unwrap();
            engine.debug_fail_store_reads(true);
            let x = first_claim(&ns);
            engine.debug_fail_store_reads(false);
            let d = ns.inner.durable.as_ref().unwrap();
            let fp = x.fp.to_u128();
            let record = d.done_on_disk(fp).expect("the earlier run's record");
            assert_eq!(record.token, x.lease.token, "{markers:?}: the same token");
            clock.advance(Duration::from_secs(10)); // X's lease runs out, its guard held
            let writes = engine.stats().durable_writes;
            assert!(ns.claim(b"k").unwrap().is_duplicate(), "{markers:?}");
            assert_eq!(
                engine.stats().durable_writes,
                writes + 1,
                "{markers:?}: the window's rewrite"
            );
            // Sightings of the key, resident now, rewrite its record again: those
            // settle no marker either.
            let writes = engine.stats().durable_writes;
            for _ in 0..6 {
                clock.advance(Duration::from_secs(25));
                assert!(ns.claim(b"k").unwrap().is_duplicate(), "{markers:?}");
            }
            assert!(
                engine.stats().durable_writes >= writes + 2,
                "{markers:?}: rewrites of the resident key"
            );
            match markers {
                ClaimMarkers::Journal => assert!(
                    d.journal_holds(fp, x.lease.token),
                    "X's journal slot cleared"
                ),
                ClaimMarkers::Immediate => assert_eq!(
                    d.marker_token_on_disk(fp),
                    Some(x.lease.token),
                    "X's marker deleted"
                ),
                _ => {
                    d.flush_markers().unwrap();
                    assert_eq!(
                        d.marker_token_on_disk(fp),
                        Some(x.lease.token),
                        "X's deferred marker dropped"
                    );
                }
            }
            drop(x);
        }
    }

    /// A sliding window's sighting during a forget does not move the hot window past
    /// the record either: if the forget then fails, the hot tier promises no more
    /// than the record holds.
    #[cfg(feature = "durable")]
    #[test]
    fn a_sighting_during_a_forget_that_fails_keeps_the_window_of_the_record() {
        let dir = Scratch::new("forget-fails-extend");
        let (engine, ns) = sliding_k_sighted_later(&dir);
        {
            let ns = ns.clone();
            let store = engine.shared.store.clone().expect("a durable engine");
            set_hook(&BEFORE_FORGET_DELETE, move || {
                assert!(ns.claim(b"k").unwrap().is_duplicate());
                store.set_fail_writes(true);
            });
        }
        assert!(ns.forget(b"k").is_err(), "the delete fails");
        engine.debug_fail_store_writes(false);
        let Some(crate::KeyState::Done { expires_at_ms, .. }) = ns.check(b"k").unwrap() else {
            panic!("still done")
        };
        assert_eq!(expires_at_ms, 1_000_000 + 60_000, "the record's window");
    }

    /// Likewise a sliding window's sighting during a forget answers Duplicate (the
    /// forget has not returned) but does not rewrite the record being deleted.
    #[cfg(feature = "durable")]
    #[test]
    fn a_sighting_while_its_key_is_forgotten_does_not_rewrite_its_record() {
        use crate::Claim;
        let dir = Scratch::new("forget-extend");
        let (engine, ns) = sliding_k_sighted_later(&dir);
        let sighted = std::rc::Rc::new(std::cell::RefCell::new(None));
        {
            let (ns, sighted) = (ns.clone(), sighted.clone());
            set_hook(&AFTER_FORGET_DELETE, move || {
                *sighted.borrow_mut() = Some(ns.claim(b"k").unwrap());
            });
        }
        let writes = engine.stats().durable_writes;
        assert!(ns.forget(b"k").unwrap());
        assert!(matches!(
            sighted.borrow_mut().take(),
            Some(Claim::Duplicate(_))
        ));
        assert_eq!(
            engine.stats().durable_writes,
            writes + 1,
            "the forget's delete, and no rewrite"
        );
        assert_forgotten(&ns, "not extended");
    }

    /// "k" is gone from both tiers: `check` knows nothing of it, and a claim acquires.
    #[cfg(feature = "durable")]
    fn assert_forgotten(ns: &super::Namespace, what: &str) {
        assert!(ns.check(b"k").unwrap().is_none(), "{what}");
        assert!(
            matches!(ns.claim(b"k").unwrap(), crate::Claim::Acquired(_)),
            "{what}: forgotten, not done"
        );
    }

    /// A panic while a claim's marker is written gives the claim up: the key is not
    /// left held (answering InProgress, and a forget waiting) for good.
    #[cfg(feature = "durable")]
    #[test]
    fn a_panic_while_a_marker_is_written_gives_the_claim_up() {
        use crate::Claim;
        let dir = Scratch::new("marker-panic");
        let (_engine, ns, clock) = durable_namespace(&dir, crate::ClaimMarkers::Journal);
        set_hook(&BEFORE_MARKER, move || {
            // The lease runs out first, so the guard's release is refused.
            clock.advance(std::time::Duration::from_secs(2));
            panic!("a failing write")
        });
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ns.claim(b"k")));
        assert!(caught.is_err(), "the panic goes on");
        assert!(ns.check(b"k").unwrap().is_none());
        assert!(!ns.forget(b"k").unwrap());
        assert!(matches!(ns.claim(b"k").unwrap(), Claim::Acquired(_)));
    }

    /// A panic while a durable release settles its marker still frees the entry.
    #[cfg(feature = "durable")]
    #[test]
    fn a_panic_while_a_release_settles_its_marker_frees_the_key() {
        use crate::Claim;
        let dir = Scratch::new("settle-panic");
        let (_engine, ns, _clock) = durable_namespace(&dir, crate::ClaimMarkers::Immediate);
        let g = first_claim(&ns);
        set_hook(&BEFORE_SETTLE, || panic!("a failing delete"));
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| g.release()));
        assert!(caught.is_err(), "the panic goes on");
        assert!(ns.check(b"k").unwrap().is_none());
        assert!(matches!(ns.claim(b"k").unwrap(), Claim::Acquired(_)));
    }

    /// A panic in a batch completion's clean-up of a lost lease (`DurableNs::lease_lost`,
    /// a store read and a delete) comes after the batch's other guards have finished:
    /// one whose lease was live is completed, not left marked completing. Before, the
    /// clean-up ran in the loop that marks the guards completing, and its panic left
    /// the guards before it so for good: their keys answered `InProgress` past their
    /// leases, and a forget of them would have waited for ever.
    #[cfg(feature = "durable")]
    #[test]
    fn a_panic_in_a_batch_completions_lost_lease_clean_up_leaves_no_key_held() {
        use crate::{Claim, KeyState};
        use std::time::Duration;
        let dir = Scratch::new("batch-lost-panic");
        let (_engine, ns, clock) = durable_namespace(&dir, crate::ClaimMarkers::Immediate);
        let Claim::Acquired(lost) = ns.claim(b"lost").unwrap() else {
            panic!("a new key");
        };
        clock.advance(Duration::from_millis(600));
        let Claim::Acquired(live) = ns.claim(b"live").unwrap() else {
            panic!("a new key");
        };
        // The first lease (1 s) is over, the second is not.
        clock.advance(Duration::from_millis(600));
        crate::durable::set_before_lost_marker_read(|| panic!("a failing read"));
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            ns.complete_batch(vec![live, lost])
        }));
        assert!(caught.is_err(), "the panic goes on");
        assert!(matches!(
            ns.check(b"live").unwrap(),
            Some(KeyState::Done { .. })
        ));
        let again = ns.claim(b"live").unwrap();
        assert!(again.is_duplicate(), "completed, not held: {again:?}");
        assert!(ns.claim(b"lost").unwrap().is_acquired());
    }

    /// A guard dropped (by a panic) while its marker was being written, its lease
    /// run out meanwhile, never ended its hold: the hold goes with the lease, and the
    /// key is not held for good.
    #[cfg(feature = "durable")]
    #[test]
    fn a_hold_its_guard_never_ended_goes_with_the_lease() {
        use crate::Claim;
        let dir = Scratch::new("stuck-hold");
        let (_engine, ns, clock) = durable_namespace(&dir, crate::ClaimMarkers::Journal);
        let g = first_claim(&ns);
        // As if the guard were dropped before its marker's write ended.
        ns.inner.slots[g.shard as usize]
            .lock()
            .hold_for_marker(g.lease.idx);
        clock.advance(std::time::Duration::from_secs(2));
        drop(g);
        assert!(ns.check(b"k").unwrap().is_none(), "not held for good");
        assert!(matches!(ns.claim(b"k").unwrap(), Claim::Acquired(_)));
    }

    /// A guard dropped while its thread unwinds from another panic, whose release
    /// panics as well, frees its key and lets the first panic go on: a second panic
    /// during unwinding would abort the process.
    #[cfg(feature = "durable")]
    #[test]
    fn a_guard_dropped_during_a_panic_whose_release_panics_does_not_abort() {
        let dir = Scratch::new("unwind-drop");
        let (_engine, ns, _clock) = durable_namespace(&dir, crate::ClaimMarkers::Immediate);
        let g = first_claim(&ns);
        set_hook(&BEFORE_SETTLE, || panic!("a failing delete"));
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            let _held = g;
            panic!("the handler fails");
        }));
        let message = caught.unwrap_err();
        assert_eq!(message.downcast_ref::<&str>(), Some(&"the handler fails"));
        assert!(ns.check(b"k").unwrap().is_none());
    }

    /// A claim that defers its marker while the engine drops (another thread's, at
    /// shutdown): the engine's last flush has drained the markers by the time the
    /// claim keeps its own, so it must write it at once, not leave it in memory
    /// where no flush comes (and no orphan would be found after a crash).
    #[cfg(feature = "durable")]
    #[test]
    fn a_claim_deferring_its_marker_while_the_engine_drops_writes_it_at_once() {
        use crate::Claim;
        let dir = Scratch::new("deferred-during-drop");
        let (engine, ns, _clock) = durable_namespace(&dir, crate::ClaimMarkers::Deferred);
        let d = ns.inner.durable.as_ref().unwrap();
        let writes = d.writes.load(std::sync::atomic::Ordering::Relaxed);
        crate::durable::set_before_defer(move || drop(engine));
        let Claim::Acquired(g) = ns.claim(b"k").unwrap() else {
            panic!("acquired");
        };
        assert_eq!(
            d.deferred_pending(),
            0,
            "left in memory past the last flush"
        );
        assert_eq!(
            d.writes.load(std::sync::atomic::Ordering::Relaxed),
            writes + 1,
            "written at once"
        );
        drop(g);
    }

    /// A completion decided from the hot tier alone (fail open, its write failed)
    /// keeps its claim's deferred marker, so that a crash leaves the key an orphan.
    /// If the engine dropped while that write failed, its last flush has run: the
    /// marker is written at once, not kept in memory where no flush comes.
    #[cfg(feature = "durable")]
    #[test]
    fn a_marker_put_back_after_the_engines_last_flush_is_written_at_once() {
        let dir = Scratch::new("restore-after-drop");
        let (engine, ns, _clock) = durable_namespace_with(
            &dir,
            crate::NamespaceConfig::new()
                .lease(std::time::Duration::from_secs(1))
                .claim_markers(crate::ClaimMarkers::Deferred)
                .on_store_error(crate::FailurePolicy::FailOpen)
                .sync(crate::SyncPolicy::Never),
        );
        let d = ns.inner.durable.as_ref().unwrap();
        let g = first_claim(&ns);
        assert_eq!(d.deferred_pending(), 1);
        engine.debug_fail_store_writes(true);
        let store = engine.shared.store.clone().expect("a durable engine");
        crate::durable::set_before_restore(move || {
            store.set_fail_writes(false);
            drop(engine);
        });
        g.complete().unwrap();
        assert_eq!(
            d.deferred_pending(),
            0,
            "left in memory past the last flush"
        );
        assert_eq!(ns.inner.stats().markers_on_disk, 1, "written at once");
    }

    /// A completion the store refuses (`FailClosed`) releases its claim, and the
    /// claim's marker on disk goes with it, as a release's does: after a clean
    /// restart the key is no orphan. (Here the store takes writes again by the time
    /// of the delete, as after a passing failure.) Every mode that can leave a marker
    /// in RocksDB: immediate markers, and deferred ones already written.
    #[cfg(feature = "durable")]
    #[test]
    fn a_refused_completion_deletes_its_released_claims_marker() {
        for markers in [
            crate::ClaimMarkers::Immediate,
            crate::ClaimMarkers::Deferred,
        ] {
            let dir = Scratch::new("refused-completion-marker");
            let cfg = || {
                crate::NamespaceConfig::new()
                    .claim_markers(markers)
                    .sync(crate::SyncPolicy::Never)
            };
            {
                let (engine, ns, _clock) = durable_namespace_with(&dir, cfg());
                let g = first_claim(&ns);
                // Deferred markers are written by maintenance.
                engine.run_maintenance();
                engine.debug_fail_store_writes(true);
                let store = engine.shared.store.clone().expect("a durable engine");
                crate::durable::set_before_released_delete(move || store.set_fail_writes(false));
                assert!(g.complete().is_err(), "{markers:?}: refused");
                assert!(ns.check(b"k").unwrap().is_none(), "{markers:?}: released");
            }
            let (engine, ns, _clock) = durable_namespace_with(&dir, cfg());
            assert!(
                engine.orphans().is_empty(),
                "{markers:?}: {:?}",
                engine.orphans()
            );
            first_claim(&ns).complete().unwrap();
        }
    }

    /// Under `Periodic` a dead letter is written without a sync while the engine
    /// lives; one whose write met the engine's drop (after its last flush, with no
    /// periodic sync to follow) is synced before it returns. Here that sync fails,
    /// and the quarantine says so; the letter keeps its id.
    #[cfg(feature = "durable")]
    #[test]
    fn a_dead_letter_written_while_the_engine_drops_is_synced_under_periodic() {
        let dir = Scratch::new("dlq-drop-sync");
        let (engine, _ns, _clock) = durable_namespace_with(
            &dir,
            crate::NamespaceConfig::new().sync(crate::SyncPolicy::Periodic(
                std::time::Duration::from_secs(1),
            )),
        );
        let dlq = engine.dlq("n").unwrap();
        let first = dlq.quarantine(b"a", b"p", "outage:db").unwrap();
        let store = engine.shared.store.clone().expect("a durable engine");
        let failing = store.clone();
        crate::durable::set_after_dlq_put(move || {
            failing.set_fail_syncs(true);
            drop(engine);
        });
        let err = dlq.quarantine(b"b", b"p", "outage:db").unwrap_err();
        assert!(
            matches!(err, crate::Error::Store(ref e) if e.operation() == "sync"),
            "{err:?}"
        );
        // The letter written is kept, under its id: the next one takes a new id.
        store.set_fail_syncs(false);
        let third = dlq.quarantine(b"c", b"p", "outage:db").unwrap();
        assert_eq!(third.get(), first.get() + 2);
        let listed: Vec<_> = dlq
            .list(&crate::dlq::Selection::all())
            .unwrap()
            .iter()
            .map(|m| m.key().to_vec())
            .collect();
        assert_eq!(listed, vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]);
    }

    /// An open refused after it began to change the database (moving the last run's
    /// journaled markers failed, as a failing disk would) leaves the settings the
    /// dead-letter tools read as they were; the next open finds the orphan and
    /// stores its own settings.
    #[cfg(all(feature = "durable", target_os = "linux"))]
    #[test]
    fn an_open_refused_while_moving_markers_leaves_the_stored_settings() {
        let dir = Scratch::new("refused-move-settings");
        let day = std::time::Duration::from_secs(86_400);
        let cfg = |retention| {
            crate::NamespaceConfig::new()
                .lease(std::time::Duration::from_secs(60))
                .retention(retention)
                .sync(crate::SyncPolicy::Never)
        };
        let retention = || {
            crate::stored_config(&dir.0, "n")
                .unwrap()
                .unwrap()
                .get_retention()
        };
        let (engine, ns, clock) = durable_namespace_with(&dir, cfg(7 * day));
        // "k" is left in flight in the journal, as a crash would leave it.
        let g = first_claim(&ns);
        engine.debug_keep_journal_markers(true);
        drop(g);
        drop(ns);
        drop(engine);
        crate::durable::fail_next_marker_move();
        let refused = super::Engine::builder()
            .durable(&dir.0)
            .clock(clock.clone())
            .maintenance_interval(None)
            .namespace("n", cfg(day))
            .build()
            .unwrap_err();
        assert!(
            matches!(&refused, crate::Error::Store(e) if e.operation() == "move markers"),
            "{refused:?}"
        );
        assert_eq!(retention(), 7 * day, "the refused open stored nothing");
        let engine = durable_engine(&dir, cfg(day), &clock);
        assert_eq!(engine.orphans().len(), 1, "{:?}", engine.orphans());
        assert_eq!(retention(), day);
    }

    /// A claim whose completion finds its lease lost removes its own marker wherever
    /// it was kept, so that the next open after a clean shutdown reports no orphan
    /// for it: in RocksDB (an immediate marker, a deferred one a maintenance pass
    /// wrote, a journal's overflow) as in memory (a deferred one not written yet).
    #[cfg(feature = "durable")]
    #[test]
    fn a_claim_that_lost_its_lease_leaves_no_marker_for_the_next_open() {
        use crate::ClaimMarkers::{Deferred, Immediate, Journal};
        let second = std::time::Duration::from_secs(1);
        for (markers, flushed) in [
            (Immediate, false),
            (Deferred, false),
            (Deferred, true),
            (Journal, false),
        ] {
            let dir = Scratch::new(&format!("lost-marker-{markers:?}-{flushed}"));
            // One journal slot, taken by "other": "k"'s marker overflows to RocksDB.
            let cfg = crate::NamespaceConfig::new()
                .lease(second)
                .claim_markers(markers)
                .journal_slots(1)
                .sync(crate::SyncPolicy::Never);
            let (engine, ns, clock) = durable_namespace_with(&dir, cfg.clone());
            let crate::Claim::Acquired(other) = ns.claim(b"other").unwrap() else {
                panic!("acquired");
            };
            let g = first_claim(&ns);
            let fp = g.fp.to_u128();
            let d = ns.inner.durable.as_ref().unwrap();
            if flushed {
                engine.run_maintenance();
            }
            let on_disk = d.marker_token_on_disk(fp);
            let expect_on_disk = markers != Deferred || flushed;
            assert_eq!(on_disk.is_some(), expect_on_disk, "{markers:?} {flushed}");
            other.release().unwrap();
            clock.advance(2 * second);
            assert!(matches!(g.complete(), Err(crate::Error::LeaseLost)));
            assert_eq!(d.marker_token_on_disk(fp), None, "{markers:?} {flushed}");
            drop(ns);
            drop(engine);
            let engine = durable_engine(&dir, cfg, &clock);
            assert!(
                engine.orphans().is_empty(),
                "{markers:?} {flushed}: {:?}",
                engine.orphans()
            );
        }
    }

    /// A completion whose deferred marker it took out of memory while a flush was
    /// writing the marker of an earlier claim of its key (whose lease had run out
    /// before this claim was made) waits for that flush, then sees that marker on
    /// disk and deletes it with its record. Before, it went on without the note of
    /// that marker, and once its write was done dropped the note the flush had made
    /// meanwhile: the earlier claim, ending with `LeaseLost`, did not look for its
    /// marker on disk, and the next open reported it as an orphan.
    #[cfg(feature = "durable")]
    #[test]
    fn a_completion_during_the_flush_of_a_lost_claims_marker_leaves_no_orphan() {
        use std::sync::mpsc::channel;
        let dir = Scratch::new("completion-during-flush");
        let second = std::time::Duration::from_secs(1);
        let cfg = crate::NamespaceConfig::new()
            .lease(second)
            .claim_markers(crate::ClaimMarkers::Deferred)
            .sync(crate::SyncPolicy::Never);
        let (engine, ns, clock) = durable_namespace_with(&dir, cfg.clone());
        let lost = first_claim(&ns);
        let fp = lost.fp.to_u128();
        clock.advance(2 * second);
        // The flush below has taken the lost claim's marker out of memory when the
        // key is claimed again and completed on another thread; the flush goes on
        // once that completion has written its record or waits for the flush.
        let (reached, at) = channel::<&'static str>();
        let (go, wait) = channel::<()>();
        let worker = std::sync::Arc::new(std::sync::Mutex::new(None));
        let (ns2, worker2) = (ns.clone(), worker.clone());
        crate::durable::set_before_flush_put(move || {
            let (written, waits) = (reached.clone(), reached);
            *worker2.lock().unwrap() = Some(std::thread::spawn(move || {
                let again = first_claim(&ns2);
                // (The flush may be over when the write is done: no one listens then.)
                crate::durable::set_before_flush_wait(move || {
                    let _ = waits.send("waits");
                });
                crate::durable::set_after_write(move || {
                    let _ = written.send("written");
                    wait.recv().unwrap();
                });
                again.complete().unwrap();
            }));
            at.recv().unwrap();
        });
        let d = ns.inner.durable.as_ref().unwrap();
        d.flush_markers().unwrap();
        go.send(()).unwrap();
        let worker = worker.lock().unwrap().take().unwrap();
        worker.join().unwrap();
        assert!(matches!(lost.complete(), Err(crate::Error::LeaseLost)));
        assert_eq!(d.marker_token_on_disk(fp), None, "the lost claim's marker");
        drop(ns);
        drop(engine);
        let engine = durable_engine(&dir, cfg, &clock);
        assert!(engine.orphans().is_empty(), "{:?}", engine.orphans());
    }

    /// The child's side of
    /// [`a_crash_after_sweeps_reports_exactly_the_claims_that_held_their_keys`]
    /// names the directory it works in with this variable.
    #[cfg(all(feature = "durable", target_os = "linux"))]
    const SWEEP_CRASH_DIR: &str = "IDEM_TEST_SWEEP_CRASH_DIR";

    /// The namespace of [`a_crash_after_sweeps_reports_exactly_the_claims_that_held_their_keys`]:
    /// six journal slots, a 1 s lease.
    #[cfg(all(feature = "durable", target_os = "linux"))]
    fn sweep_crash_config() -> crate::NamespaceConfig {
        crate::NamespaceConfig::new()
            .lease(std::time::Duration::from_secs(1))
            .journal_slots(6)
            .max_result_len(4)
            .sync(crate::SyncPolicy::Never)
    }

    /// Checks that the orphans `engine` reported at its open are exactly the claims
    /// of `keys` in `ns` (`what` names the case in the message).
    #[cfg(all(feature = "durable", target_os = "linux"))]
    fn assert_orphans_are(
        engine: &super::Engine,
        ns: &super::Namespace,
        keys: &[&[u8]],
        what: &str,
    ) {
        let mut orphans: Vec<u128> = engine.orphans().iter().map(|o| o.fingerprint).collect();
        orphans.sort_unstable();
        let mut held: Vec<u128> = keys
            .iter()
            .map(|k| ns.inner.key_fp(k).unwrap().to_u128())
            .collect();
        held.sort_unstable();
        assert_eq!(orphans, held, "{what}: {:?}", engine.orphans());
    }

    /// `key` claimed in `ns`, acquired (the crash tests' children set their claims
    /// up with it).
    #[cfg(all(feature = "durable", target_os = "linux"))]
    fn acquire(ns: &super::Namespace, key: &[u8]) -> super::ClaimGuard {
        match ns.claim(key).unwrap() {
            crate::Claim::Acquired(g) => g,
            other => panic!("{}: {other:?}", String::from_utf8_lossy(key)),
        }
    }

    /// A process killed with SIGKILL after sweeps of the journal reports, at the
    /// next open, exactly the claims that still held their keys: "extended" (its
    /// lease renewed), "completing" (its completion began within its lease and was
    /// still writing, past the lease's end, when the sweep ran: its marker stays,
    /// since no record of it has landed) and "fresh" (acquired by the sweep's own
    /// claim); and none of the claims given up without an end ("leaked",
    /// "leaked-late", "too-large"), whose slots the sweep freed. "raced" read its
    /// time for its completion within its lease, and reached its lock only after a
    /// claim that found the journal full swept its marker: the sweep had taken it
    /// as lost, so its completion is refused with `LeaseLost` and writes nothing,
    /// and after the crash the key is neither done nor held. (A sweep from the
    /// journal alone would have cleared "completing"'s marker and let "raced"
    /// complete with its marker gone: either, killed before the record landed, is
    /// a claim in flight that the open does not report.) The test binary runs itself
    /// as the child, which sets the claims up and waits to be killed.
    #[cfg(all(feature = "durable", target_os = "linux"))]
    #[test]
    fn a_crash_after_sweeps_reports_exactly_the_claims_that_held_their_keys() {
        use std::io::Write;
        use std::time::Duration;
        if let Ok(base) = std::env::var(SWEEP_CRASH_DIR) {
            let dir = Scratch(std::path::Path::new(&base).join("db"));
            let (engine, ns, clock) = durable_namespace_with(&dir, sweep_crash_config());
            std::mem::forget(acquire(&ns, b"leaked"));
            let too_large = acquire(&ns, b"too-large").complete_with_result(b"12345");
            assert!(matches!(
                too_large,
                Err(crate::Error::ResultTooLarge { .. })
            ));
            let mut extended = acquire(&ns, b"extended");
            let raced = acquire(&ns, b"raced");
            clock.advance(Duration::from_millis(500));
            extended.extend_lease(Duration::from_secs(10)).unwrap();
            std::mem::forget(acquire(&ns, b"leaked-late"));
            let completing = acquire(&ns, b"completing");
            assert_eq!(engine.stats().journal_markers, 6, "full");
            // Within every lease: "completing" begins its completion and waits
            // inside its write.
            clock.advance(Duration::from_millis(400));
            engine.debug_hold_completions(true);
            let writing = std::thread::spawn(move || completing.complete());
            while engine.debug_held_completions() == 0 {
                std::thread::yield_now();
            }
            // A failed check below ends the child at once (the engine's drop would
            // wait for the held completion): the parent then finds it never ready.
            struct ExitOnPanic;
            impl Drop for ExitOnPanic {
                fn drop(&mut self) {
                    if std::thread::panicking() {
                        std::process::exit(101);
                    }
                }
            }
            let _exit_on_panic = ExitOnPanic;
            // "raced" reads the clock within its lease; before its first lock
            // round, every lease but "extended"'s ends, and a claim finds the
            // journal full.
            let fresh = std::rc::Rc::new(std::cell::RefCell::new(None));
            {
                let (ns, clock, fresh) = (ns.clone(), clock.clone(), fresh.clone());
                set_hook(&AFTER_COMPLETION_CLOCK, move || {
                    clock.advance(Duration::from_millis(1_100));
                    *fresh.borrow_mut() = Some(acquire(&ns, b"fresh"));
                });
            }
            assert_eq!(raced.complete(), Err(crate::Error::LeaseLost));
            assert!(fresh.borrow().is_some(), "claimed during the completion");
            let s = engine.stats();
            assert_eq!(
                (s.journal_markers, s.journal_overflows),
                (3, 0),
                "extended, completing, fresh: {s:?}"
            );
            engine.run_maintenance();
            assert_eq!(engine.stats().journal_markers, 3, "still held");
            // (On a line of its own: the harness has begun one with the test's name.)
            println!("\nready");
            std::io::stdout().flush().unwrap();
            let _kept = (engine, ns, extended, fresh, writing);
            loop {
                std::thread::park();
            }
        }
        let base = Scratch::new("sweep-crash");
        std::fs::create_dir_all(&base.0).unwrap();
        kill_when_ready(
            "engine::tests::a_crash_after_sweeps_reports_exactly_the_claims_that_held_their_keys",
            (SWEEP_CRASH_DIR, &base.0),
        );
        let dir = Scratch(base.0.join("db"));
        let clock = crate::ManualClock::new(1_000_000);
        let engine = durable_engine(&dir, sweep_crash_config(), &clock);
        let ns = engine.namespace("n").unwrap();
        assert_orphans_are(&engine, &ns, &[b"extended", b"completing", b"fresh"], "");
        assert!(engine
            .orphans()
            .iter()
            .all(|o| o.held && o.corrupt.is_none()));
        assert!(ns.check(b"completing").unwrap().is_some(), "held");
        for k in [&b"raced"[..], b"leaked", b"leaked-late", b"too-large"] {
            assert_eq!(
                ns.check(k).unwrap(),
                None,
                "{}: neither done nor held",
                String::from_utf8_lossy(k)
            );
        }
    }

    /// The child's side of
    /// [`a_crash_after_sweeps_of_rocksdb_markers_reports_exactly_the_claims_that_held_their_keys`]
    /// names the directory it works in with this variable.
    #[cfg(all(feature = "durable", target_os = "linux"))]
    const DISK_SWEEP_CRASH_DIR: &str = "IDEM_TEST_DISK_SWEEP_CRASH_DIR";

    /// The namespaces of
    /// [`a_crash_after_sweeps_of_rocksdb_markers_reports_exactly_the_claims_that_held_their_keys`]:
    /// deferred markers, and a one-slot journal whose markers overflow into RocksDB.
    #[cfg(all(feature = "durable", target_os = "linux"))]
    fn disk_sweep_crash_configs() -> [(&'static str, crate::NamespaceConfig); 2] {
        let cfg = |markers| {
            crate::NamespaceConfig::new()
                .lease(std::time::Duration::from_secs(1))
                .claim_markers(markers)
                .max_result_len(4)
                .on_store_error(crate::FailurePolicy::FailOpen)
                .sync(crate::SyncPolicy::Never)
        };
        [
            ("deferred", cfg(crate::ClaimMarkers::Deferred)),
            (
                "overflow",
                cfg(crate::ClaimMarkers::Journal).journal_slots(1),
            ),
        ]
    }

    /// A process killed with SIGKILL after a sweep of this run's claim markers in
    /// RocksDB (`Deferred` markers flushed, a journal's overflows) reports, at the
    /// next open, exactly the claims that still held their keys: "extended" (its
    /// lease renewed, the renewed marker in RocksDB), "hot-only" (a completion the
    /// store refused, decided from the hot tier alone, which still answers for the
    /// key) and "completing" (its completion began within its lease and was still
    /// writing, past the lease's end, when the sweep ran); and none of the claims
    /// given up without an end ("leaked", "too-large"), whose markers the sweep
    /// deleted. Before, those stayed in RocksDB and were reported. The test binary
    /// runs itself as the child, which sets the claims up and waits to be killed.
    #[cfg(all(feature = "durable", target_os = "linux"))]
    #[test]
    fn a_crash_after_sweeps_of_rocksdb_markers_reports_exactly_the_claims_that_held_their_keys() {
        use std::io::Write;
        use std::time::Duration;
        if let Ok(base) = std::env::var(DISK_SWEEP_CRASH_DIR) {
            // A failed check below ends the child at once (the engine's drop would
            // wait for the held completion): the parent then finds it never ready.
            struct ExitOnPanic;
            impl Drop for ExitOnPanic {
                fn drop(&mut self) {
                    if std::thread::panicking() {
                        std::process::exit(101);
                    }
                }
            }
            let _exit_on_panic = ExitOnPanic;
            let mut kept = Vec::new();
            for (what, cfg) in disk_sweep_crash_configs() {
                let dir = Scratch(std::path::Path::new(&base).join(what));
                let (engine, ns, clock) = durable_namespace_with(&dir, cfg);
                // The first claim takes the one journal slot; its renewal, with no
                // slot free, goes to RocksDB, and so do the others' markers.
                let mut extended = acquire(&ns, b"extended");
                std::mem::forget(acquire(&ns, b"leaked"));
                let too_large = acquire(&ns, b"too-large").complete_with_result(b"12345");
                assert!(matches!(
                    too_large,
                    Err(crate::Error::ResultTooLarge { .. })
                ));
                let hot_only = acquire(&ns, b"hot-only");
                let completing = acquire(&ns, b"completing");
                engine.run_maintenance(); // flushes deferred markers
                engine.debug_fail_store_writes(true);
                hot_only.complete().expect("fail open");
                engine.debug_fail_store_writes(false);
                clock.advance(Duration::from_millis(500));
                extended.extend_lease(Duration::from_secs(10)).unwrap();
                let s = engine.stats();
                assert_eq!(
                    (s.journal_markers, s.markers_on_disk),
                    (0, 5),
                    "{what}: {s:?}"
                );
                // Within its lease, "completing" begins its completion and waits
                // inside its write; then every lease but "extended"'s ends.
                clock.advance(Duration::from_millis(400));
                engine.debug_hold_completions(true);
                let writing = std::thread::spawn(move || completing.complete());
                while engine.debug_held_completions() == 0 {
                    std::thread::yield_now();
                }
                clock.advance(Duration::from_millis(1_100));
                engine.run_maintenance();
                let s = engine.stats();
                assert_eq!(
                    (s.journal_markers, s.markers_on_disk),
                    (0, 3),
                    "{what}: extended, hot-only, completing: {s:?}"
                );
                kept.push((engine, ns, extended, writing, dir));
            }
            // (On a line of its own: the harness has begun one with the test's name.)
            println!("\nready");
            std::io::stdout().flush().unwrap();
            let _kept = kept;
            loop {
                std::thread::park();
            }
        }
        let base = Scratch::new("disk-sweep-crash");
        std::fs::create_dir_all(&base.0).unwrap();
        kill_when_ready(
            "engine::tests::a_crash_after_sweeps_of_rocksdb_markers_reports_exactly_the_claims_that_held_their_keys",
            (DISK_SWEEP_CRASH_DIR, &base.0),
        );
        for (what, cfg) in disk_sweep_crash_configs() {
            let dir = Scratch(base.0.join(what));
            let clock = crate::ManualClock::new(1_000_000);
            let engine = durable_engine(&dir, cfg, &clock);
            let ns = engine.namespace("n").unwrap();
            assert_orphans_are(
                &engine,
                &ns,
                &[b"extended", b"hot-only", b"completing"],
                what,
            );
            for k in [&b"leaked"[..], b"too-large"] {
                assert_eq!(
                    ns.check(k).unwrap(),
                    None,
                    "{what}, {}: neither done nor held",
                    String::from_utf8_lossy(k)
                );
            }
        }
    }

    /// The sweep of RocksDB markers deletes a marker only if it is still the one of
    /// the claim it found over: a marker read back with another token (here written
    /// over the claim's behind its note, as a later claim's could be between the
    /// judgment and the delete) stays, and is left to the next open.
    #[cfg(feature = "durable")]
    #[test]
    fn the_rocksdb_sweep_deletes_a_marker_only_if_it_is_still_the_claims() {
        use crate::durable::codec::{Record, RecordState};
        let dir = Scratch::new("disk-sweep-token");
        let (engine, ns, clock) = durable_namespace(&dir, crate::ClaimMarkers::Deferred);
        let d = ns.inner.durable.as_ref().unwrap();
        let g = first_claim(&ns);
        let (fp, token) = (g.fp.to_u128(), g.lease.token);
        engine.run_maintenance();
        assert_eq!(d.marker_token_on_disk(fp), Some(token), "flushed");
        let other = Record {
            state: RecordState::InProgress,
            token: token + 1,
            at_ms: 1_000_000,
            expires_ms: 1_001_000,
            payload: None,
            result: None,
        };
        d.put_marker_on_disk(fp, other);
        clock.advance(std::time::Duration::from_secs(2));
        engine.run_maintenance();
        assert_eq!(d.marker_token_on_disk(fp), Some(token + 1));
        assert_eq!(engine.stats().markers_on_disk, 1);
        assert!(matches!(g.complete(), Err(crate::Error::LeaseLost)));
        assert_eq!(d.marker_token_on_disk(fp), Some(token + 1));
    }

    /// A claim that lost its lease deletes a marker in RocksDB only if it is still
    /// its own: a later claim of the key, acquired once the lease ran out, wrote its
    /// marker over it, and keeps it.
    #[cfg(feature = "durable")]
    #[test]
    fn a_claim_that_lost_its_lease_leaves_a_later_claims_marker() {
        let dir = Scratch::new("lost-marker-later");
        let (_engine, ns, clock) = durable_namespace(&dir, crate::ClaimMarkers::Immediate);
        let g = first_claim(&ns);
        let fp = g.fp.to_u128();
        clock.advance(std::time::Duration::from_secs(2));
        let later = std::rc::Rc::new(std::cell::RefCell::new(None));
        {
            let (ns, later) = (ns.clone(), later.clone());
            crate::durable::set_before_lost_marker_read(move || {
                *later.borrow_mut() = Some(first_claim(&ns));
            });
        }
        assert!(matches!(g.complete(), Err(crate::Error::LeaseLost)));
        let later = later.borrow_mut().take().expect("the hook ran");
        let d = ns.inner.durable.as_ref().unwrap();
        assert_eq!(d.marker_token_on_disk(fp), Some(later.lease.token));
        later.complete().unwrap();
        assert_eq!(d.marker_token_on_disk(fp), None);
    }

    /// A claim made while the engine drops (its store closed, the last flush still
    /// to come) writes its deferred marker at once; the marker an earlier claim of
    /// the key left in memory, its lease run out, is dropped then, so that the last
    /// flush does not write it over the new one (and that claim's `LeaseLost` then
    /// delete it, leaving the claim in flight without a marker).
    #[cfg(feature = "durable")]
    #[test]
    fn a_stale_deferred_marker_is_not_flushed_over_a_claim_made_while_the_engine_drops() {
        let dir = Scratch::new("deferred-stale-at-drop");
        let (engine, ns, clock) = durable_namespace(&dir, crate::ClaimMarkers::Deferred);
        let d = ns.inner.durable.as_ref().unwrap();
        let first = first_claim(&ns);
        let fp = first.fp.to_u128();
        clock.advance(std::time::Duration::from_secs(2));
        // The engine's drop, step by step: the store closes, a claim comes through
        // a handle that outlives it, then the last flush.
        engine.shared.store.as_ref().unwrap().close();
        let later = first_claim(&ns);
        d.flush_markers().unwrap();
        assert!(matches!(first.complete(), Err(crate::Error::LeaseLost)));
        assert_eq!(d.marker_token_on_disk(fp), Some(later.lease.token));
        later.release().unwrap();
        assert_eq!(d.marker_token_on_disk(fp), None);
    }

    /// A deferred marker written at once (the engine was dropped) is noted on disk,
    /// so that its claim, losing its lease, finds and removes it.
    #[cfg(feature = "durable")]
    #[test]
    fn a_deferred_marker_written_after_the_engine_dropped_goes_with_its_lost_lease() {
        let dir = Scratch::new("deferred-after-drop-lost");
        let (engine, ns, clock) = durable_namespace(&dir, crate::ClaimMarkers::Deferred);
        let d = ns.inner.durable.as_ref().unwrap();
        engine.shared.store.as_ref().unwrap().close();
        let g = first_claim(&ns);
        let (fp, token) = (g.fp.to_u128(), g.lease.token);
        assert_eq!(d.marker_token_on_disk(fp), Some(token), "written at once");
        clock.advance(std::time::Duration::from_secs(2));
        assert!(matches!(g.complete(), Err(crate::Error::LeaseLost)));
        assert_eq!(d.marker_token_on_disk(fp), None);
    }

    /// Tokens start again with each run: a claim that lost its lease does not delete
    /// an orphan's marker of the last run that happens to carry its token (the
    /// lease's end tells them apart), while a later claim of the key keeps its own
    /// marker in memory and has only that orphan's on disk.
    #[cfg(feature = "durable")]
    #[test]
    fn a_claim_that_lost_its_lease_leaves_an_older_runs_marker_with_its_token() {
        use crate::durable::codec::{Record, RecordState};
        let dir = Scratch::new("lost-marker-old-run");
        let (_engine, ns, clock) = durable_namespace(&dir, crate::ClaimMarkers::Deferred);
        let d = ns.inner.durable.as_ref().unwrap();
        let first = first_claim(&ns);
        let (fp, token) = (first.fp.to_u128(), first.lease.token);
        let old_run = Record {
            state: RecordState::InProgress,
            token,
            at_ms: 1_000,
            expires_ms: 2_000,
            payload: None,
            result: None,
        };
        d.put_marker_on_disk(fp, old_run);
        clock.advance(std::time::Duration::from_secs(2));
        let later = first_claim(&ns);
        assert!(matches!(first.complete(), Err(crate::Error::LeaseLost)));
        assert_eq!(d.marker_token_on_disk(fp), Some(token));
        // The later claim's release deletes it, as it did before.
        later.release().unwrap();
        assert_eq!(d.marker_token_on_disk(fp), None);
    }

    /// Deferred markers are written by the maintenance pass, which stops with the
    /// engine: a claim made afterwards through a handle that outlived it writes its
    /// marker at once.
    #[cfg(feature = "durable")]
    #[test]
    fn a_claim_after_the_engine_is_dropped_writes_its_deferred_marker_at_once() {
        use crate::Claim;
        let dir = Scratch::new("deferred-drop");
        let (engine, ns, _clock) = durable_namespace(&dir, crate::ClaimMarkers::Deferred);
        let d = ns.inner.durable.as_ref().unwrap();
        let Claim::Acquired(before) = ns.claim(b"before").unwrap() else {
            panic!("acquired");
        };
        assert_eq!(d.deferred_pending(), 1, "deferred while the engine runs");
        drop(engine);
        assert_eq!(d.deferred_pending(), 0, "written at the engine's drop");
        let writes = d.writes.load(std::sync::atomic::Ordering::Relaxed);
        let Claim::Acquired(after) = ns.claim(b"after").unwrap() else {
            panic!("acquired");
        };
        assert_eq!(d.deferred_pending(), 0, "not left waiting for a pass");
        assert_eq!(
            d.writes.load(std::sync::atomic::Ordering::Relaxed),
            writes + 1
        );
        drop((before, after));
    }

    /// A clock that moves one millisecond on at every reading after the first, from
    /// where the test sets it.
    #[derive(Clone)]
    struct Ticking(std::sync::Arc<std::sync::atomic::AtomicU64>);

    impl crate::Clock for Ticking {
        fn now_ms(&self) -> u64 {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
        }
    }

    /// A memory-only engine whose namespace "n" of `cfg` reads a [`Ticking`] clock
    /// from 1,000,000 ms, and the clock's word.
    fn ticking(
        cfg: crate::NamespaceConfig,
    ) -> (
        super::Engine,
        super::Namespace,
        std::sync::Arc<std::sync::atomic::AtomicU64>,
    ) {
        let at = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(1_000_000));
        let engine = super::Engine::builder()
            .clock(Ticking(at.clone()))
            .maintenance_interval(None)
            .namespace("n", cfg)
            .build()
            .unwrap();
        let ns = engine.namespace("n").unwrap();
        (engine, ns, at)
    }

    /// A failed batch gives up the claims it acquired, which its caller never saw:
    /// also one whose lease ran out while the batch was still deciding (on a clock
    /// that moves a millisecond a reading, a 2 ms lease runs out during the refusal
    /// of the next key). It is not counted as acquired, nor as a lost lease, and its
    /// entry goes.
    #[test]
    fn a_failed_batch_gives_up_a_claim_whose_lease_ran_out_meanwhile() {
        use crate::NamespaceConfig;
        use std::time::Duration;
        let (engine, ns, _) = ticking(
            NamespaceConfig::new()
                .lease(Duration::from_millis(2))
                .max_keys(1)
                .shards(1),
        );
        let refused = ns.claim_batch(&[b"a", b"b"]).unwrap_err();
        assert!(
            matches!(refused, crate::Error::CapacityExceeded { .. }),
            "{refused:?}"
        );
        let s = engine.stats();
        assert_eq!(
            (s.acquired, s.lease_lost, s.releases, s.resident_keys),
            (0, 0, 0, 0),
            "{s:?}"
        );
    }

    /// A manual clock that can be set to panic: at a coming reading only
    /// ([`Faulty::fail_once_after`]), or at every reading from one on
    /// ([`Faulty::fail_for_good_after`]), until mended.
    #[derive(Clone)]
    struct Faulty {
        manual: crate::ManualClock,
        /// Readings left before the one that panics (`u64::MAX`: none does).
        left: std::sync::Arc<std::sync::atomic::AtomicU64>,
        /// Every reading from that one on panics, not that one only.
        for_good: std::sync::Arc<std::sync::atomic::AtomicBool>,
    }

    impl crate::Clock for Faulty {
        fn now_ms(&self) -> u64 {
            use std::sync::atomic::Ordering::SeqCst;
            match self.left.load(SeqCst) {
                u64::MAX => {}
                0 => {
                    if !self.for_good.load(SeqCst) {
                        self.left.store(u64::MAX, SeqCst);
                    }
                    panic!("the clock fails");
                }
                n => self.left.store(n - 1, SeqCst),
            }
            self.manual.now_ms()
        }
    }

    impl Faulty {
        fn new() -> Self {
            Faulty {
                manual: crate::ManualClock::new(1_700_000_000_000),
                left: std::sync::Arc::new(u64::MAX.into()),
                for_good: Default::default(),
            }
        }

        /// Reads `n` times as usual, and panics at the reading after.
        fn fail_once_after(&self, n: u64) {
            use std::sync::atomic::Ordering::SeqCst;
            self.for_good.store(false, SeqCst);
            self.left.store(n, SeqCst);
        }

        /// Reads `n` times as usual, and panics at every reading after.
        fn fail_for_good_after(&self, n: u64) {
            use std::sync::atomic::Ordering::SeqCst;
            self.for_good.store(true, SeqCst);
            self.left.store(n, SeqCst);
        }

        fn mend(&self) {
            self.left
                .store(u64::MAX, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// A memory-only namespace "n" on a [`Faulty`] clock, without a maintenance
    /// thread: one shard, room for two keys, and "d" done (one of them).
    fn faulty_two_keys_one_done() -> (super::Engine, super::Namespace, Faulty) {
        let clock = Faulty::new();
        let engine = super::Engine::builder()
            .clock(clock.clone())
            .maintenance_interval(None)
            .namespace("n", crate::NamespaceConfig::new().max_keys(2).shards(1))
            .build()
            .unwrap();
        let ns = engine.namespace("n").unwrap();
        done(&ns, b"d");
        (engine, ns, clock)
    }

    /// A batch whose clock panics midway (here at the second reading: "n2" finds the
    /// namespace full and reads it again) and keeps panicking gives up the claims it
    /// acquired without reading the clock: the giving up runs while the thread
    /// unwinds, where a second panic would abort the process. The panic goes on to
    /// the caller, and the keys the batch acquired are claimable at once and counted
    /// as before it.
    #[test]
    fn a_batch_whose_clock_keeps_panicking_gives_its_claims_up_and_unwinds() {
        let (_engine, ns, clock) = faulty_two_keys_one_done();
        let before = ns.stats();
        clock.fail_for_good_after(1);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            ns.claim_batch(&[b"n1", b"n2"])
        }));
        clock.mend();
        assert!(r.is_err(), "the clock's panic goes on to the caller");
        let after = ns.stats();
        assert_eq!(
            (after.acquired, after.resident_keys),
            (before.acquired, before.resident_keys),
            "{after:?}"
        );
        assert!(ns.claim(b"n1").unwrap().is_acquired(), "not held");
    }

    /// A batch that panics (its clock, once, on the refusal path) after answering a
    /// duplicate without the lock counts that duplicate, as a batch that fails with
    /// an error does: it was answered.
    #[test]
    fn a_batch_that_panics_counts_the_duplicates_it_answered_without_the_lock() {
        let (_engine, ns, clock) = faulty_two_keys_one_done();
        let before = ns.stats();
        let lock_free = ns.inner.lock_free_duplicates.sum();
        clock.fail_once_after(1);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            ns.claim_batch(&[b"d", b"n1", b"n2"])
        }));
        clock.mend();
        assert!(r.is_err(), "the clock's panic goes on to the caller");
        assert_eq!(ns.stats().duplicates, before.duplicates + 1);
        assert_eq!(
            ns.inner.lock_free_duplicates.sum(),
            lock_free + 1,
            "answered without the lock"
        );
    }

    /// A guard dropped while its thread unwinds from a panic of the clock (read by
    /// its completion, its release, or the handler's own code) releases its claim at
    /// the namespace's latest reading: its release's own reading panics too, and the
    /// key would otherwise stay held to the end of its lease.
    #[test]
    fn a_guard_dropped_by_a_panic_of_its_clock_releases_its_key() {
        type Finish = fn(super::ClaimGuard, &Faulty) -> crate::Result<()>;
        let ways: [(&str, Finish); 3] = [
            ("complete", |g, _| g.complete()),
            ("release", |g, _| g.release()),
            ("the handler", |g, clock| {
                let _held = g;
                crate::Clock::now_ms(clock);
                Ok(())
            }),
        ];
        for (way, finish) in ways {
            let (_engine, ns, clock) = faulty_two_keys_one_done();
            let g = match ns.claim(b"k").unwrap() {
                crate::Claim::Acquired(g) => g,
                other => panic!("{other:?}"),
            };
            let before = ns.stats();
            clock.fail_for_good_after(0);
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| finish(g, &clock)));
            clock.mend();
            assert!(r.is_err(), "{way}: the clock's panic goes on");
            let after = ns.stats();
            assert_eq!(
                (after.releases, after.resident_keys),
                (before.releases + 1, before.resident_keys - 1),
                "{way}: {after:?}"
            );
            assert!(ns.claim(b"k").unwrap().is_acquired(), "{way}: not held");
        }
    }
    /// The namespace's time starts at the reading its wheels start from: a clock
    /// set back below it afterwards is held there (as at any later reading), so a
    /// lease runs from that time, not from the clock's earlier one.
    #[test]
    fn a_clock_set_back_below_the_namespaces_start_is_held_at_it() {
        use crate::{Claim, NamespaceConfig};
        use std::sync::atomic::Ordering::SeqCst;
        use std::time::Duration;
        const X: u64 = 1_000_000;
        let at = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(X));
        let engine = super::Engine::builder()
            .clock(Ticking(at.clone()))
            .maintenance_interval(None)
            .namespace("n", NamespaceConfig::new().lease(Duration::from_secs(5)))
            .build()
            .unwrap();
        let ns = engine.namespace("n").unwrap();
        // The builder's first reading (X) is the epoch; the namespace started later.
        let after_build = at.load(SeqCst);
        assert!(
            after_build > X + 1,
            "the build read the clock more than once"
        );
        at.store(X - 1000, SeqCst);
        let Claim::Acquired(_g) = ns.claim(b"k").unwrap() else {
            panic!("the first claim acquires");
        };
        let Claim::InProgress(busy) = ns.claim(b"k").unwrap() else {
            panic!("held");
        };
        let expires = busy.lease_expires_at_ms();
        assert!(
            expires > X + 5000 && expires < after_build + 5000,
            "the lease ran from the namespace's start: {expires}"
        );
    }

    /// A full namespace's last attempt reclaims the keys expired at its own time:
    /// the reclaim before it ran at the claim's first reading of the clock, and a
    /// key whose lease ended between the two readings still held its room.
    #[test]
    fn the_last_attempt_reclaims_keys_expired_at_its_own_time() {
        use crate::{Claim, NamespaceConfig};
        use std::time::Duration;
        let (engine, ns, at) = ticking(
            NamespaceConfig::new()
                .max_keys(1)
                .lease(Duration::from_millis(5)),
        );
        let Claim::Acquired(held) = ns.claim(b"a").unwrap() else {
            panic!("room for one key");
        };
        let deadline = held.lease_expires_at_ms();
        // The next claim reads the clock a millisecond before the lease ends, and
        // every later reading is past it.
        at.store(deadline - 1, std::sync::atomic::Ordering::SeqCst);
        let claim = ns.claim(b"b").unwrap();
        assert!(matches!(claim, Claim::Acquired(_)), "{claim:?}");
        assert!(matches!(held.complete(), Err(crate::Error::LeaseLost)));
        assert_eq!(engine.stats().capacity_refusals, 0);
    }

    /// An engine (no maintenance thread) whose namespace of `shards` shards holds
    /// `per_shard` completed keys in each, all past their TTL. They were claimed a
    /// millisecond apart: each has its own deadline, so its own bucket once the
    /// wheel reaches it.
    fn due_keys(shards: usize, per_shard: usize) -> (super::Engine, crate::Namespace) {
        use crate::{Claim, ManualClock, NamespaceConfig};
        use std::time::Duration;
        let clock = ManualClock::new(1_000_000);
        let engine = super::Engine::builder()
            .clock(clock.clone())
            .maintenance_interval(None)
            .namespace(
                "n",
                NamespaceConfig::new()
                    .ttl(Duration::from_secs(10))
                    .shards(shards),
            )
            .build()
            .unwrap();
        let ns = engine.namespace("n").unwrap();
        let mut filled = vec![0; shards];
        for i in 0u32.. {
            if filled.iter().all(|&n| n == per_shard) {
                break;
            }
            let key = i.to_le_bytes();
            let s = ns.inner.key_fp(&key).unwrap().shard(shards);
            if filled[s] == per_shard {
                continue;
            }
            filled[s] += 1;
            let Claim::Acquired(g) = ns.claim(&key).unwrap() else {
                panic!("a fresh key");
            };
            g.complete().unwrap();
            clock.advance(Duration::from_millis(1));
        }
        clock.advance(Duration::from_secs(11));
        (engine, ns)
    }

    /// A clock that reads `now`, and moves on by `jump` after the next reading.
    #[derive(Clone)]
    struct JumpClock {
        now: std::sync::Arc<std::sync::atomic::AtomicU64>,
        jump: std::sync::Arc<std::sync::atomic::AtomicU64>,
    }

    impl crate::Clock for JumpClock {
        fn now_ms(&self) -> u64 {
            use std::sync::atomic::Ordering::SeqCst;
            let at = self.now.load(SeqCst);
            self.now.fetch_add(self.jump.swap(0, SeqCst), SeqCst);
            at
        }
    }

    /// A memory-only engine on `clock` without a maintenance thread, whose namespace
    /// "n" has one shard, room for two keys, and the given lease and TTL.
    fn one_shard_of_two_keys(
        clock: impl crate::Clock,
        lease: std::time::Duration,
        ttl: std::time::Duration,
    ) -> super::Engine {
        super::Engine::builder()
            .clock(clock)
            .maintenance_interval(None)
            .namespace(
                "n",
                crate::NamespaceConfig::new()
                    .max_keys(2)
                    .shards(1)
                    .lease(lease)
                    .ttl(ttl),
            )
            .build()
            .unwrap()
    }

    /// A batch's claim that finds the namespace full reads the clock again and
    /// reclaims at that later time, moving the wheels on: the batch's next claims
    /// go on from there. Before, they set leases from the batch's first reading, one
    /// granted already over (its key expired at once, yet kept by the wheel until its
    /// next tick, refusing a claim with room left).
    #[test]
    fn a_batch_never_grants_a_lease_from_a_time_its_wheels_have_passed() {
        use crate::{Claim, Error};
        use std::sync::atomic::Ordering::SeqCst;
        use std::time::Duration;
        let clock = JumpClock {
            now: std::sync::Arc::new(std::sync::atomic::AtomicU64::new(1_700_000_000_000)),
            jump: Default::default(),
        };
        let engine = one_shard_of_two_keys(
            clock.clone(),
            Duration::from_millis(5),
            Duration::from_secs(3600),
        );
        let ns = engine.namespace("n").unwrap();
        let held = [ns.claim(b"x").unwrap(), ns.claim(b"y").unwrap()];
        assert!(held.iter().all(Claim::is_acquired));
        // The batch reads T; its first claim finds the namespace full and reads
        // T + 10 ms, where x's and y's leases are over.
        clock.jump.store(10, SeqCst);
        let batch = ns.claim_batch(&[b"a", b"b"]).unwrap();
        let now = clock.now.load(SeqCst);
        for (key, claim) in [&b"a"[..], b"b"].into_iter().zip(&batch) {
            let Claim::Acquired(g) = claim else {
                panic!("{claim:?}");
            };
            assert!(
                g.lease_expires_at_ms() > now,
                "{}'s lease ends at {}, at or before now ({now})",
                String::from_utf8_lossy(key),
                g.lease_expires_at_ms()
            );
            assert!(ns.check(key).unwrap().is_some(), "held, not expired");
        }
        // Two unexpired keys of two: full, and nothing left that could be reclaimed.
        assert!(matches!(
            ns.claim(b"c"),
            Err(Error::CapacityExceeded { .. })
        ));
        drop(batch);
        assert!(ns.claim(b"c").unwrap().is_acquired());
    }

    /// A reading the shard's wheel has passed (another thread moved it on after the
    /// claim read the clock) is taken as the wheel's time; a later one as it is.
    #[test]
    fn a_shard_takes_a_reading_its_wheel_has_passed_as_the_wheels_time() {
        let (engine, ns) = due_keys(1, 1);
        let before = ns.inner.now();
        engine.run_maintenance(); // the wheel moves to the namespace's time
        let clock_ms = before.ms + 7;
        let later = ns.inner.params.now(clock_ms);
        let stale = ns.inner.params.now(before.ms - 5_000);
        let shard = ns.inner.slots[0].lock();
        let moved = shard.not_behind(&ns.inner.params, stale);
        assert_eq!(moved.tick, before.tick);
        assert_eq!(moved.ms, before.ms);
        let kept = shard.not_behind(&ns.inner.params, later);
        assert_eq!((kept.ms, kept.tick), (later.ms, later.tick));
    }

    /// A memory-only engine on a manual clock at 1,000,000 ms whose namespace "n"
    /// (one shard, room for two keys, TTL 10 ms, lease 5 s) holds two claims, `a`
    /// and `b`; then another thread reads the clock 50 ms later and runs a
    /// maintenance pass, moving the shard's wheel past the time read before it.
    /// Returns the engine, the namespace, the clock, the guards of `a` and `b`, and
    /// that earlier reading.
    fn wheel_moved_on_after_a_reading() -> (
        super::Engine,
        super::Namespace,
        crate::ManualClock,
        super::ClaimGuard,
        super::ClaimGuard,
        crate::hot::Now,
    ) {
        use crate::{Claim, ManualClock};
        use std::time::Duration;
        let clock = ManualClock::new(1_000_000);
        let engine = one_shard_of_two_keys(
            clock.clone(),
            Duration::from_secs(5),
            Duration::from_millis(10),
        );
        let ns = engine.namespace("n").unwrap();
        let Claim::Acquired(a) = ns.claim(b"a").unwrap() else {
            panic!("room for two keys");
        };
        let Claim::Acquired(b) = ns.claim(b"b").unwrap() else {
            panic!("room for two keys");
        };
        let read = ns.inner.now();
        clock.advance(Duration::from_millis(50));
        engine.run_maintenance();
        (engine, ns, clock, a, b, read)
    }

    /// A completion whose reading of the clock the shard's wheel has passed (another
    /// thread moved the wheel on between the reading and the shard's lock, as a claim
    /// may find it: `a_shard_takes_a_reading_its_wheel_has_passed_as_the_wheels_time`)
    /// takes effect at the wheel's time. Taken at the reading, a TTL shorter than the
    /// lag was over when `complete` returned (the key was claimable again at once),
    /// and its entry, scheduled behind the wheel, read as expired while it kept its
    /// room until the next tick: a full namespace refused a new key.
    #[test]
    fn a_completion_never_sets_a_deadline_behind_its_shards_wheel() {
        use crate::{Claim, KeyState};
        use std::time::Duration;
        let (_engine, ns, clock, mut a, _b, read) = wheel_moved_on_after_a_reading();
        a.finish_at(None, &[], read).unwrap();
        let state = ns.check(b"a").unwrap();
        let c = ns.claim(b"c");
        assert!(
            state.is_some() || matches!(c, Ok(Claim::Acquired(_))),
            "a reads as expired ({state:?}) yet holds its room: {c:?}"
        );
        assert!(
            matches!(state, Some(KeyState::Done { .. })),
            "complete returned Ok: a duplicate for its TTL, got {state:?}"
        );
        // Its TTL counts from the wheel's time; then its room is given back.
        clock.advance(Duration::from_millis(10));
        assert!(ns.claim(b"c").unwrap().is_acquired());
    }

    /// The same for a durable completion, single or batched: it takes effect at the
    /// wheel's time in both tiers, the hot entry's TTL and the record's. Before, taken
    /// at the reading, `complete` and `complete_batch` returned `Ok` with the TTL (and
    /// here the retention) already over: the key read as unknown in both tiers and
    /// the next claim acquired it. (The reading is made stale as in
    /// `a_lease_extension_never_ends_behind_its_shards_wheel`.)
    #[cfg(feature = "durable")]
    #[test]
    fn a_durable_completion_never_sets_a_deadline_behind_its_shards_wheel() {
        use crate::{Claim, KeyState};
        use std::time::Duration;
        type Complete = fn(&super::Namespace, super::ClaimGuard) -> crate::Result<()>;
        let ways: [(&str, Complete); 2] = [
            ("complete", |_, g| g.complete()),
            ("complete_batch", |ns, g| {
                ns.complete_batch(vec![g]).unwrap().pop().unwrap()
            }),
        ];
        for (way, complete) in ways {
            let dir = Scratch::new(&format!("durable-behind-the-wheel-{way}"));
            let clock = crate::ManualClock::new(1_000_000);
            let ttl = Duration::from_millis(10);
            let engine = durable_engine(
                &dir,
                crate::NamespaceConfig::new()
                    .shards(1)
                    .lease(Duration::from_secs(5))
                    .ttl(ttl)
                    .retention(ttl)
                    .sync(crate::SyncPolicy::Never),
                &clock,
            );
            let ns = engine.namespace("n").unwrap();
            let Claim::Acquired(a) = ns.claim(b"a").unwrap() else {
                panic!("{way}: a new key");
            };
            let read = ns.inner.now();
            clock.advance(Duration::from_millis(50));
            engine.run_maintenance(); // the wheel moves 50 ms past the reading
            let later = ns.inner.now();
            clock.set(read.ms);
            ns.inner
                .latest_ms
                .store(read.ms, std::sync::atomic::Ordering::SeqCst);
            complete(&ns, a).unwrap();
            clock.set(later.ms);
            let state = ns.check(b"a").unwrap();
            assert!(
                matches!(state, Some(KeyState::Done { .. })),
                "{way} returned Ok: a duplicate for its TTL, got {state:?}"
            );
            // The durable tier's record alone (the hot entry dropped, as a full
            // namespace drops it) answers the same.
            let cap = ns.inner.capacity();
            assert_eq!(ns.inner.slots[0].lock().evict_done(usize::MAX, &cap), 1);
            let Some(KeyState::Done { expires_at_ms, .. }) = ns.check(b"a").unwrap() else {
                panic!("{way}: the record is over at once");
            };
            assert_eq!(expires_at_ms, later.ms + 10, "{way}: from the wheel's time");
            let again = ns.claim(b"a").unwrap();
            assert!(again.is_duplicate(), "{way}: acquired again: {again:?}");
        }
    }

    /// The same for a lease extension: taken at a reading the wheel has passed, a
    /// lease shorter than the lag was granted already over (`extend_lease` said `Ok`,
    /// the guard's end lay behind the namespace's time), and its entry kept its room
    /// a tick past it. (The reading is made stale by putting the namespace's latest
    /// time back to it, as a thread that read the clock before another thread's
    /// later reading sees it.)
    #[test]
    fn a_lease_extension_never_ends_behind_its_shards_wheel() {
        use crate::Claim;
        use std::time::Duration;
        let (_engine, ns, clock, _a, mut b, read) = wheel_moved_on_after_a_reading();
        let later = ns.inner.now();
        clock.set(read.ms);
        ns.inner
            .latest_ms
            .store(read.ms, std::sync::atomic::Ordering::SeqCst);
        b.extend_lease(Duration::from_millis(10)).unwrap();
        clock.set(later.ms);
        assert!(
            b.lease_expires_at_ms() > later.ms,
            "extended to {} at {}: over at once",
            b.lease_expires_at_ms(),
            later.ms
        );
        let Claim::InProgress(busy) = ns.claim(b"b").unwrap() else {
            panic!("b is held by its extended lease");
        };
        assert_eq!(busy.lease_expires_at_ms(), b.lease_expires_at_ms());
    }

    /// The maintenance pass expires a shard's keys a few at a time, taking the
    /// shard's lock again for each batch, and reclaims every due key all the same.
    #[test]
    fn expiry_takes_a_shard_lock_once_a_batch_and_reclaims_every_due_key() {
        let (engine, ns) = due_keys(1, 100);
        let now = ns.inner.now();
        let (reclaimed, holds) = ns.inner.expire_all_within(now, 4);
        assert_eq!(reclaimed, 100);
        assert!(holds >= 25, "{holds} holds of the lock for 100 keys");
        assert_eq!(engine.stats().resident_keys, 0);
        assert_eq!(engine.stats().expirations, 100);
        // Nothing is left for the next pass.
        assert_eq!(ns.inner.expire_all_within(now, 4), (0, 1));
    }

    /// The expiry pass leaves a shard whose lock a claim waits for after the batch in
    /// hand, finishes the other shards, and comes back to it: the claim waits for
    /// one batch, not for the whole shard's expiry.
    #[test]
    fn expiry_moves_on_from_a_shard_whose_lock_a_claim_waits_for() {
        let (engine, ns) = due_keys(2, 40);
        let inner = std::sync::Arc::clone(&ns.inner);
        // Shard 0's lock is wanted until shard 1 has had a batch.
        inner.slots[0].pretend_waiting(true);
        let order = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let (seen, slots) = (std::rc::Rc::clone(&order), std::sync::Arc::clone(&inner));
        AFTER_EXPIRY_BATCH.with(|h| {
            *h.borrow_mut() = Some(Box::new(move |shard| {
                if shard == 1 && !seen.borrow().contains(&1) {
                    slots.slots[0].pretend_waiting(false);
                }
                seen.borrow_mut().push(shard);
            }))
        });
        let (reclaimed, holds) = inner.expire_all_within(inner.now(), 4);
        AFTER_EXPIRY_BATCH.with(|h| h.borrow_mut().take());
        assert_eq!(reclaimed, 80);
        let order = order.borrow();
        assert_eq!(order.len(), holds);
        // One batch of shard 0, all of shard 1, then the rest of shard 0.
        let first_of_1 = order.iter().position(|&s| s == 1).unwrap();
        let last_of_1 = order.iter().rposition(|&s| s == 1).unwrap();
        assert_eq!(first_of_1, 1, "{order:?}");
        assert!(
            order[first_of_1..=last_of_1].iter().all(|&s| s == 1),
            "{order:?}"
        );
        assert!(order[last_of_1 + 1..].iter().all(|&s| s == 0), "{order:?}");
        assert!(order.len() > last_of_1 + 1, "{order:?}");
        assert_eq!(engine.stats().resident_keys, 0);
    }

    /// When the shard a claim waits for is the only one left, the pass waits for the
    /// claim to take the lock before it takes it again.
    #[test]
    fn expiry_waits_for_a_waiting_claim_before_taking_the_last_shard_again() {
        let (_engine, ns) = due_keys(1, 40);
        let inner = std::sync::Arc::clone(&ns.inner);
        inner.slots[0].pretend_waiting(true);
        // (batches done, rounds of waiting) as the pass goes.
        let seen = std::rc::Rc::new(std::cell::Cell::new((0usize, 0usize)));
        let (batches, slots) = (std::rc::Rc::clone(&seen), std::sync::Arc::clone(&inner));
        AFTER_EXPIRY_BATCH.with(|h| {
            *h.borrow_mut() = Some(Box::new(move |_| {
                let (b, w) = batches.get();
                batches.set((b + 1, w));
            }))
        });
        let rounds = std::rc::Rc::clone(&seen);
        MAKING_WAY.with(|h| {
            *h.borrow_mut() = Some(Box::new(move |shard| {
                assert_eq!(shard, 0);
                let (b, w) = rounds.get();
                // Only after the first batch, and the pass waits until the waiter
                // has the lock (here: stops counting itself, at the third round).
                assert_eq!(b, 1, "waiting before its first batch, or after more");
                rounds.set((b, w + 1));
                if w + 1 == 3 {
                    slots.slots[0].pretend_waiting(false);
                }
            }))
        });
        // (The pass's wait is bounded in time; here the rounds decide when it ends,
        // however slowly a loaded machine runs them.)
        MAKE_WAY_BOUND.with(|b| b.set(Some(std::time::Duration::from_secs(60))));
        let (reclaimed, holds) = inner.expire_all_within(inner.now(), 4);
        MAKE_WAY_BOUND.with(|b| b.set(None));
        AFTER_EXPIRY_BATCH.with(|h| h.borrow_mut().take());
        MAKING_WAY.with(|h| h.borrow_mut().take());
        assert_eq!(reclaimed, 40);
        assert_eq!(seen.get(), (holds, 3));
        assert!(holds > 1);
    }

    /// A thread that finds a shard's lock taken is counted as waiting for it until
    /// it has the lock.
    #[test]
    fn a_thread_waiting_for_a_shard_lock_is_counted_until_it_has_it() {
        let engine = super::Engine::builder()
            .maintenance_interval(None)
            .namespace("n", crate::NamespaceConfig::new().shards(1))
            .build()
            .unwrap();
        let ns = engine.namespace("n").unwrap();
        let slot = &ns.inner.slots[0];
        assert!(!slot.wanted());
        let held = slot.lock();
        std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                let shard = slot.lock();
                // Counted until it has the lock, not after.
                assert!(!slot.wanted());
                shard.len()
            });
            let since = std::time::Instant::now();
            while !slot.wanted() {
                assert!(
                    since.elapsed().as_secs() < 60,
                    "the waiter was never counted"
                );
                std::thread::yield_now();
            }
            assert!(!waiter.is_finished());
            drop(held);
            assert_eq!(waiter.join().unwrap(), 0);
        });
        assert!(!slot.wanted());
    }

    /// A durable namespace "n" of `max_keys` keys (over `shards` shards, if given)
    /// on a manual clock, no maintenance thread, filled with done keys "done-0"...
    #[cfg(feature = "durable")]
    fn full_of_done_keys(
        dir: &Scratch,
        max_keys: usize,
        shards: Option<usize>,
    ) -> (super::Engine, super::Namespace) {
        use crate::{Claim, ManualClock, NamespaceConfig};
        let mut cfg = NamespaceConfig::new()
            .max_keys(max_keys)
            .sync(crate::SyncPolicy::Never);
        if let Some(n) = shards {
            cfg = cfg.shards(n);
        }
        let engine = super::Engine::builder()
            .durable(&dir.0)
            .clock(ManualClock::new(1_000_000))
            .maintenance_interval(None)
            .namespace("n", cfg)
            .build()
            .unwrap();
        let ns = engine.namespace("n").unwrap();
        for i in 0..max_keys {
            let Claim::Acquired(g) = ns.claim(format!("done-{i}").as_bytes()).unwrap() else {
                panic!("room for {max_keys} keys");
            };
            g.complete().unwrap();
        }
        (engine, ns)
    }

    /// A full durable namespace's last attempt evicts a done key itself: the
    /// eviction before it may have made room that other claims took in between.
    #[cfg(feature = "durable")]
    #[test]
    fn the_last_attempt_of_a_full_durable_namespace_evicts_a_done_key() {
        use crate::Claim;
        let dir = Scratch::new("evict");
        let (engine, ns) = full_of_done_keys(&dir, 200, None);
        let held = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        {
            let (ns, held) = (ns.clone(), held.clone());
            set_hook(&BEFORE_EXCLUSIVE, move || {
                // Other claims take the room the eviction just made (a group of 25
                // keys, an eighth of 200), and hold it (claims in flight are never
                // evicted).
                let evicted = ns.inner.stats().evictions;
                assert_eq!(evicted, 25);
                for i in 0..evicted {
                    match ns.claim(format!("other-{i}").as_bytes()) {
                        Ok(Claim::Acquired(g)) => held.borrow_mut().push(g),
                        other => panic!("{other:?}"),
                    }
                }
                assert_eq!(ns.inner.stats().evictions, evicted, "no more evicted");
            });
        }
        let claim = ns.claim(b"new").unwrap();
        assert!(matches!(claim, Claim::Acquired(_)), "{claim:?}");
        assert!(!held.borrow().is_empty(), "the other claims took the room");
        drop((claim, held, ns, engine));
    }

    /// Repeated last attempts of a full durable namespace take their keys from the
    /// shards in turn, as eviction groups do: each took its key from the first shard
    /// holding a done key, so under contention shard 0 lost its newest keys while the
    /// others kept older ones.
    #[cfg(feature = "durable")]
    #[test]
    fn the_last_attempts_of_a_full_durable_namespace_evict_from_the_shards_in_turn() {
        use crate::Claim;
        let dir = Scratch::new("evict-turn");
        let (engine, ns) = full_of_done_keys(&dir, 64, Some(4));
        let by_shard = |ns: &crate::Namespace| -> Vec<u64> {
            let slots = &ns.inner.slots;
            slots.iter().map(|s| s.lock().counters.evictions).collect()
        };
        let (mut taken, mut all_held) = (Vec::new(), true);
        for round in 0..8 {
            let before: u64 = by_shard(&ns).iter().sum();
            let mid = std::rc::Rc::new(std::cell::RefCell::new((Vec::new(), 0, Vec::new())));
            {
                let (ns, mid) = (ns.clone(), mid.clone());
                set_hook(&BEFORE_EXCLUSIVE, move || {
                    // Other claims take the room the group (8 keys, an eighth of 64)
                    // made, and complete.
                    let made = by_shard(&ns).iter().sum::<u64>() - before;
                    assert_eq!(made, 8, "round {round}");
                    for i in 0..made {
                        match ns.claim(format!("other-{round}-{i}").as_bytes()) {
                            Ok(Claim::Acquired(g)) => g.complete().unwrap(),
                            other => panic!("{other:?}"),
                        }
                    }
                    // The turn, and which shards hold a key to give (the random
                    // seed spreads the keys: a shard may have given all of its own).
                    let from = ns
                        .inner
                        .evict_from
                        .load(std::sync::atomic::Ordering::Relaxed);
                    let holding: Vec<bool> =
                        ns.inner.slots.iter().map(|s| s.lock().len() > 0).collect();
                    *mid.borrow_mut() = (by_shard(&ns), from, holding);
                });
            }
            let Claim::Acquired(g) = ns.claim(format!("new-{round}").as_bytes()).unwrap() else {
                panic!("round {round}: the last attempt makes room");
            };
            g.complete().unwrap();
            let (mid, from, holding) = mid.borrow().clone();
            assert!(!mid.is_empty(), "round {round}: the last attempt ran");
            let after = by_shard(&ns);
            let gave: Vec<usize> = (0..4).filter(|&si| after[si] > mid[si]).collect();
            assert_eq!(gave.len(), 1, "round {round}: {mid:?} then {after:?}");
            assert_eq!(after[gave[0]], mid[gave[0]] + 1, "round {round}");
            // The shard whose turn it is, or the first after it holding a key.
            let due = (0..4)
                .map(|k| (from + k) % 4)
                .find(|&si| holding[si])
                .expect("a full namespace holds keys");
            assert_eq!(gave[0], due, "round {round}: turn at {from}, {holding:?}");
            all_held &= holding.iter().all(|&h| h);
            taken.push(gave[0]);
        }
        // Eight last attempts over four shards, each holding keys throughout: two
        // keys from each.
        if all_held {
            let mut per_shard = [0; 4];
            for &si in &taken {
                per_shard[si] += 1;
            }
            assert_eq!(
                per_shard, [2; 4],
                "shards the last attempts took from: {taken:?}"
            );
        }
        drop((ns, engine));
    }

    /// A claim whose thread stops between its shard lock and its marker's write
    /// must not have its lease run out meanwhile: a later claim of the key would
    /// write its own marker, which the first claim's late write would then
    /// replace, and the later claim would not be held after a crash.
    #[cfg(feature = "durable")]
    #[test]
    fn a_claim_held_while_its_marker_is_written_keeps_a_later_claims_marker_whole() {
        use crate::Claim;
        use std::time::Duration;
        let dir = Scratch::new("marker");
        let (engine, ns, clock) = durable_namespace(&dir, crate::ClaimMarkers::Journal);
        let during = std::rc::Rc::new(std::cell::RefCell::new(None));
        {
            let (ns, clock, during) = (ns.clone(), clock.clone(), during.clone());
            set_hook(&BEFORE_MARKER, move || {
                // The first claim's lease runs out before its marker is written, and
                // another consumer claims the key.
                clock.advance(Duration::from_secs(2));
                *during.borrow_mut() = Some(ns.claim(b"k").unwrap());
            });
        }
        let Claim::Acquired(first) = ns.claim(b"k").unwrap() else {
            panic!("the first claim acquires");
        };
        let in_between = during.borrow_mut().take().unwrap();
        let held = matches!(in_between, Claim::InProgress(_));
        let second = match in_between {
            Claim::Acquired(g) => g,
            _ => {
                clock.advance(Duration::from_millis(10));
                let Claim::Acquired(g) = ns.claim(b"k").unwrap() else {
                    panic!("claimable once the first claim's lease has run out");
                };
                g
            }
        };
        assert!(matches!(first.complete(), Err(crate::Error::LeaseLost)));
        let fp = ns.inner.key_fp(b"k").unwrap();
        let d = ns.inner.durable.as_ref().unwrap();
        assert!(
            d.journal_holds(fp.to_u128(), second.lease.token),
            "the later claim's marker is in the journal"
        );
        let token = second.lease.token;
        second.complete().unwrap();
        assert!(!d.journal_holds(fp.to_u128(), token));
        assert!(held, "the first claim is held while its marker is written");
        drop((ns, engine));
    }

    #[test]
    fn shard_of_names_the_shard_a_claim_lands_in() {
        let engine = crate::Engine::builder()
            .namespace("n", crate::NamespaceConfig::new().shards(8))
            .maintenance_interval(None)
            .build()
            .unwrap();
        let ns = engine.namespace("n").unwrap();
        let mut expected = [0usize; 8];
        for i in 0..400 {
            let key = format!("key-{i}");
            expected[ns.shard_of(key.as_bytes()).unwrap()] += 1;
            let Ok(crate::Claim::Acquired(g)) = ns.claim(key.as_bytes()) else {
                panic!("a new key is acquired")
            };
            g.complete().unwrap();
        }
        let held: Vec<usize> = ns.inner.slots.iter().map(|s| s.lock().len()).collect();
        assert_eq!(held, expected);
        assert!(expected.iter().all(|&n| n > 0), "{expected:?}");
        let empty = crate::Error::InvalidKey(crate::KeyError::Empty);
        assert_eq!(ns.shard_of(b""), Err(empty));
    }

    #[test]
    fn default_shards_put_full_shards_just_under_a_table_threshold() {
        for max_keys in [1_000, 65_536, 1_000_000, 2_000_000, 10_000_000, 100_000_000] {
            let shards = default_shards(max_keys);
            assert!((32..=1024).contains(&shards), "{max_keys}: {shards}");
            let per_shard = max_keys.div_ceil(shards);
            // The smallest bucket count that holds a full shard.
            let buckets = (0..)
                .map(|b| 1usize << b)
                .find(|&b| crate::hot::index_capacity(b) >= per_shard)
                .unwrap();
            // Not oversized: half the buckets would not have done, and the full
            // shards sit just under the threshold. Small namespaces, where the
            // minimum shard count governs, are exempt.
            let small = shards == 32;
            assert!(
                crate::hot::index_capacity(buckets / 2) < per_shard || small,
                "{max_keys}"
            );
            assert!(
                per_shard * 100 > crate::hot::index_capacity(buckets) * 95 || small,
                "{max_keys}"
            );
        }
        assert_eq!(default_shards(1), 32);
    }

    fn memory_namespace() -> (super::Engine, super::Namespace) {
        let engine = super::Engine::builder()
            .namespace("n", crate::NamespaceConfig::new().max_keys(100_000))
            .build()
            .unwrap();
        let ns = engine.namespace("n").unwrap();
        (engine, ns)
    }

    /// Two threads filling one shard in turn, each in a lane of its own, place their
    /// entries in chunks of their own, each thread's in the order it claimed them,
    /// and in a wheel of their own: a chunk never holds both threads' entries, and
    /// a thread's consecutive claims take consecutive slots. (With one slab for
    /// both, the two threads' entries alternated slot by slot.) Every key then
    /// expires from its lane's wheel on time, and a freed entry is taken again by
    /// its own lane.
    #[test]
    fn threads_in_two_lanes_fill_a_shard_with_chunks_and_wheels_of_their_own() {
        use std::sync::mpsc;
        let clock = crate::ManualClock::new(1_000_000);
        let engine = super::Engine::builder()
            .clock(clock.clone())
            .maintenance_interval(None)
            .namespace(
                "n",
                crate::NamespaceConfig::new()
                    .max_keys(10_000)
                    .shards(1)
                    .ttl(std::time::Duration::from_secs(10)),
            )
            .build()
            .unwrap();
        let ns = engine.namespace("n").unwrap();
        const EACH: usize = 1_200; // past two chunks a lane
                                   // Each thread claims and completes a key when told, and sends back its slot.
        let spawn = |lane: usize| {
            let ns = ns.clone();
            let (go, turn) = mpsc::channel::<bool>();
            let (put, slots) = mpsc::channel::<u32>();
            let t = std::thread::spawn(move || {
                crate::hot::set_lane(lane);
                let mut i = 0;
                while turn.recv().unwrap() {
                    let g = match ns.claim(format!("{lane}-{i}").as_bytes()).unwrap() {
                        crate::Claim::Acquired(g) => g,
                        other => panic!("{other:?}"),
                    };
                    put.send(g.lease.idx).unwrap();
                    g.complete().unwrap();
                    i += 1;
                }
            });
            (go, slots, t)
        };
        let lanes = [spawn(0), spawn(1)];
        let mut placed = [Vec::new(), Vec::new()];
        for _ in 0..EACH {
            for (lane, (go, slots, _)) in lanes.iter().enumerate() {
                go.send(true).unwrap();
                placed[lane].push(slots.recv().unwrap());
            }
        }
        for (go, _, t) in lanes {
            go.send(false).unwrap();
            t.join().unwrap();
        }
        let chunk = |i: &u32| *i as usize / crate::hot::CHUNK;
        for (lane, slots) in placed.iter().enumerate() {
            for w in slots.windows(2) {
                if chunk(&w[0]) == chunk(&w[1]) {
                    assert_eq!(w[1], w[0] + 1, "lane {lane}: slot {} after {}", w[1], w[0]);
                }
            }
            let other: std::collections::HashSet<usize> =
                placed[1 - lane].iter().map(chunk).collect();
            let shared = slots.iter().find(|i| other.contains(&chunk(i)));
            assert_eq!(shared, None, "lane {lane}'s slot in the other lane's chunk");
        }
        assert_eq!(engine.stats().resident_keys, 2 * EACH as u64);
        // Every key expires from its lane's wheel, and the slots go back to their
        // lanes: a thread of lane 1 refilling takes lane 1's slots again.
        clock.advance(std::time::Duration::from_secs(11));
        engine.run_maintenance();
        assert_eq!(engine.stats().resident_keys, 0);
        let refill = {
            let ns = ns.clone();
            std::thread::spawn(move || {
                crate::hot::set_lane(1);
                (0..EACH)
                    .map(
                        |i| match ns.claim(format!("again-{i}").as_bytes()).unwrap() {
                            crate::Claim::Acquired(g) => g.lease.idx,
                            other => panic!("{other:?}"),
                        },
                    )
                    .collect::<Vec<u32>>()
            })
            .join()
            .unwrap()
        };
        let first: std::collections::HashSet<u32> = placed[1].iter().copied().collect();
        let strange = refill.iter().find(|i| !first.contains(i));
        assert_eq!(strange, None, "a slot lane 1 did not have");
    }

    #[test]
    fn every_shard_publishes_its_grown_index_for_prefetch() {
        let (_engine, ns) = memory_namespace();
        for i in 0..20_000u32 {
            let g = match ns.claim(format!("k{i}").as_bytes()).unwrap() {
                crate::Claim::Acquired(g) => g,
                other => panic!("{other:?}"),
            };
            g.complete().unwrap();
        }
        for slot in ns.inner.slots.iter() {
            let published = slot.hint();
            assert_ne!(published, 0);
            assert_eq!(published, slot.lock().index_hint());
        }
    }

    /// An engine (seed 7) of one namespace "n" of 40,000 keys in eight shards (a
    /// share of 5,000, past the early room), preallocated or not.
    fn forty_thousand_in_eight_shards(preallocate: bool) -> (super::Engine, super::Namespace) {
        let engine = super::Engine::builder()
            .seed(7)
            .namespace(
                "n",
                crate::NamespaceConfig::new()
                    .max_keys(40_000)
                    .shards(8)
                    .preallocate(preallocate),
            )
            .build()
            .unwrap();
        let ns = engine.namespace("n").unwrap();
        (engine, ns)
    }

    /// Claims and completes the fresh keys `k0` to `k{count - 1}`.
    fn complete_fresh(ns: &super::Namespace, count: u32) {
        for i in 0..count {
            match ns.claim(format!("k{i}").as_bytes()).unwrap() {
                crate::Claim::Acquired(g) => g.complete().unwrap(),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn a_preallocated_namespace_fills_without_growing_its_index() {
        let hints = |ns: &super::Namespace| -> Vec<usize> {
            ns.inner.slots.iter().map(|s| s.hint()).collect()
        };
        for preallocate in [false, true] {
            let (_engine, ns) = forty_thousand_in_eight_shards(preallocate);
            let before = hints(&ns);
            let bytes_before = ns.stats().hot_bytes;
            // 90 % of max_keys: every shard stays within its share (seed 7).
            complete_fresh(&ns, 36_000);
            assert_eq!(ns.stats().resident_keys, 36_000);
            let after = hints(&ns);
            if preallocate {
                assert!(before.iter().all(|&h| h != 0), "published at build");
                assert_eq!(before, after, "no shard's index grew");
                assert!(bytes_before >= 6 * 40_000, "{bytes_before}");
            } else {
                // The early room (a page a shard), published at build, then grown.
                assert!(before.iter().all(|&h| h != 0), "published at build");
                assert!(before.iter().zip(&after).all(|(b, a)| b != a));
            }
        }
    }

    /// A preallocated namespace makes its whole slab at build (every lane of every
    /// shard holding its first chunk, the rest in the reservoir, all counted in
    /// `hot_bytes`), and a fill within it makes no chunk; without preallocation
    /// nothing is made until claims arrive, and the fill makes its chunks.
    #[test]
    fn a_preallocated_namespace_makes_its_slab_at_build() {
        let (max_keys, shards): (usize, usize) = (40_000, 8);
        let budget = max_keys.div_ceil(crate::hot::CHUNK);
        for preallocate in [false, true] {
            let (_engine, ns) = forty_thousand_in_eight_shards(preallocate);
            let reservoir = &ns.inner.chunks;
            let made = reservoir.made();
            let held = reservoir.len();
            let lanes_stocked = ns
                .inner
                .slots
                .iter()
                .all(|s| s.lock().chunk_addrs().1.is_some());
            let bytes = ns.stats().hot_bytes;
            // 70 % of max_keys: every shard's lane uses at most nine chunks (seed 7).
            complete_fresh(&ns, 28_000);
            if preallocate {
                assert_eq!(made, budget + shards * crate::hot::LANES);
                assert_eq!(held, budget);
                assert!(lanes_stocked, "each lane's first chunk is ready");
                let slab = (budget * crate::hot::CHUNK * 28) as u64;
                assert!(bytes >= slab, "{bytes} < {slab}");
                assert_eq!(reservoir.made(), made, "the fill made no chunk");
            } else {
                assert_eq!((made, held, lanes_stocked), (0, 0, false));
                assert!(bytes < (budget * crate::hot::CHUNK * 28 / 2) as u64);
                assert!(reservoir.made() > 0, "the fill made its chunks");
            }
        }
    }

    /// A preallocated namespace filled to `max_keys` by one thread makes no chunk,
    /// and by two fewer than one a lane. A lane ends a fill with its last chunk
    /// partly used and may hold one more, taken ahead as that one neared its end
    /// (`Slab::wants_spare`): up to two chunks a lane over the slab's share, of
    /// which the build makes one. One thread uses one lane of each shard, so the
    /// other lane's chunk covers the second.
    /// What a preallocated namespace is counted to make at build is what its build
    /// makes: the hot tier's bytes, less the engine's few fixed parts.
    #[test]
    fn the_bytes_a_preallocation_is_counted_to_make_are_what_the_build_makes() {
        for (max_keys, shards) in [(100_000, None), (40_000, Some(8)), (3_000, Some(1))] {
            let mut cfg = crate::NamespaceConfig::new().max_keys(max_keys);
            if let Some(s) = shards {
                cfg = cfg.shards(s);
            }
            let counted = super::preallocated_bytes(&cfg).unwrap() as u64;
            let (engine, _ns, _clock) = manual(cfg);
            let made = engine.stats().hot_bytes;
            assert!(
                made >= counted && made - counted < counted / 20,
                "{max_keys} keys: made {made}, counted {counted}"
            );
        }
    }

    /// The preallocations of a build are summed against the memory the process may
    /// use, and the namespace that takes the sum past it is named; a namespace that
    /// is not preallocated, or an unknown limit, adds nothing.
    #[test]
    fn preallocations_past_the_process_memory_are_refused_naming_the_namespace() {
        let cfg = crate::NamespaceConfig::new().max_keys(100_000);
        let one = super::preallocated_bytes(&cfg).unwrap();
        let nss = vec![
            ("a".to_owned(), cfg.clone()),
            ("lazy".to_owned(), cfg.clone().preallocate(false)),
            ("b".to_owned(), cfg.clone()),
        ];
        assert!(super::preallocations_fit(&nss, Some(2 * one)).is_ok());
        assert!(super::preallocations_fit(&nss, None).is_ok());
        match super::preallocations_fit(&nss, Some(2 * one - 1)) {
            Err(crate::Error::OutOfMemory { namespace, what }) => {
                assert_eq!(namespace, "b");
                assert!(what.contains("preallocate(false)"), "{what}");
            }
            other => panic!("{other:?}"),
        }
        match super::preallocations_fit(&nss[..1], Some(one - 1)) {
            Err(crate::Error::OutOfMemory { namespace, .. }) => assert_eq!(namespace, "a"),
            other => panic!("{other:?}"),
        }
        // The largest namespace: a slab of 56 GiB and an index of 16 GiB.
        let huge = vec![(
            "h".to_owned(),
            crate::NamespaceConfig::new().max_keys(crate::MAX_KEYS_LIMIT),
        )];
        assert!(super::preallocations_fit(&huge, Some(72 << 30)).is_ok());
        assert!(super::preallocations_fit(&huge, Some(64 << 30)).is_err());
    }

    #[test]
    fn a_fill_of_a_preallocated_namespace_makes_no_chunk_on_one_thread_and_few_on_two() {
        for threads in [1_u32, 2] {
            let (_engine, ns) = forty_thousand_in_eight_shards(true);
            let made = ns.inner.chunks.made();
            std::thread::scope(|s| {
                for t in 0..threads {
                    let ns = &ns;
                    s.spawn(move || {
                        for i in (t..40_000).step_by(threads as usize) {
                            match ns.claim(format!("k{i}").as_bytes()).unwrap() {
                                crate::Claim::Acquired(g) => g.complete().unwrap(),
                                other => panic!("{other:?}"),
                            }
                        }
                    });
                }
            });
            assert_eq!(ns.stats().resident_keys, 40_000);
            let made_in_fill = ns.inner.chunks.made() - made;
            let lanes = ns.inner.slots.len() * crate::hot::LANES;
            match threads {
                1 => assert_eq!(made_in_fill, 0),
                _ => assert!(made_in_fill < lanes, "{made_in_fill} of {lanes} lanes"),
            }
        }
    }

    #[test]
    fn a_refused_index_names_what_was_asked_for() {
        let said = |preallocate| super::index_refused("n", preallocate).to_string();
        assert!(
            said(true).contains("NamespaceConfig::preallocate"),
            "{}",
            said(true)
        );
        assert!(said(false).contains("first index pages"), "{}", said(false));
        assert!(!said(false).contains("preallocate"), "{}", said(false));
    }

    /// A shard's index is made with a page of room (64 buckets, 672 entries), or its
    /// share of `max_keys` if that is smaller, and first grows past it.
    #[test]
    fn a_shards_index_starts_with_a_page_of_room_or_its_share() {
        let log2_buckets = |ns: &super::Namespace| -> Vec<usize> {
            ns.inner.slots.iter().map(|s| s.hint() & 63).collect()
        };
        // 1,000 keys in 32 shards: 32 each, 4 buckets (room for 42).
        let small = super::Engine::builder()
            .maintenance_interval(None)
            .namespace(
                "n",
                crate::NamespaceConfig::new()
                    .max_keys(1_000)
                    .preallocate(false),
            )
            .build()
            .unwrap();
        let ns = small.namespace("n").unwrap();
        assert_eq!(ns.inner.slots.len(), 32);
        assert!(
            log2_buckets(&ns).iter().all(|&b| b == 2),
            "{:?}",
            log2_buckets(&ns)
        );
        // One shard's share of 10,000 keys: the page, filled without a rebuild.
        let filler = Filler::new(10_000);
        assert_eq!(log2_buckets(&filler.ns), [6]);
        let hint = filler.ns.inner.slots[0].hint();
        // Up to the mark where the claim makes the next array (whose move then ends
        // by the page's last entry).
        filler.fill_to(super::EARLY_ROOM - super::EARLY_ROOM / 16);
        assert_eq!(
            filler.ns.inner.slots[0].hint(),
            hint,
            "rebuilt within the page"
        );
        filler.fill_to(super::EARLY_ROOM + 1);
        assert_eq!(log2_buckets(&filler.ns), [7]);
        drop(filler.engine);
    }

    #[test]
    fn an_index_too_large_to_allocate_fails_the_build_instead_of_aborting() {
        // 2^60 entries need more than isize::MAX bytes of buckets: the allocation is
        // refused, not attempted, on every machine.
        assert!(super::new_slots(4, 0, 1 << 60).is_none());
        assert!(super::new_slots(4, 0, usize::MAX).is_none());
        let slots = super::new_slots(4, 0, 1_000).expect("a small index allocates");
        assert_eq!(slots.len(), 4);
        assert!(slots.iter().all(|s| s.hint() != 0));
    }

    /// Claims and completes fresh keys `k0`, `k1`, ... of a single-shard namespace
    /// of `max_keys` that grows as keys arrive (not preallocated; no maintenance
    /// thread), up to a count given to `fill_to`.
    struct Filler {
        engine: super::Engine,
        ns: super::Namespace,
        next: std::cell::Cell<usize>,
    }

    impl Filler {
        fn new(max_keys: usize) -> Self {
            Filler::with_maintenance(max_keys, None)
        }

        /// As [`Filler::new`], with a maintenance thread running every `every`.
        fn with_maintenance(max_keys: usize, every: Option<std::time::Duration>) -> Self {
            let engine = super::Engine::builder()
                .maintenance_interval(every)
                .namespace(
                    "n",
                    crate::NamespaceConfig::new()
                        .max_keys(max_keys)
                        .shards(1)
                        .preallocate(false),
                )
                .build()
                .unwrap();
            let ns = engine.namespace("n").unwrap();
            Filler {
                engine,
                ns,
                next: Default::default(),
            }
        }

        fn fill_to(&self, n: usize) {
            while self.next.get() < n {
                let key = format!("k{}", self.next.get());
                match self.ns.claim(key.as_bytes()).unwrap() {
                    crate::Claim::Acquired(g) => g.complete().unwrap(),
                    other => panic!("{other:?}"),
                }
                self.next.set(self.next.get() + 1);
            }
        }
    }

    /// A single-shard namespace on a manual clock (TTL 60 s), no maintenance thread.
    fn one_shard(max_keys: usize) -> (super::Engine, super::Namespace, crate::ManualClock) {
        one_shard_with(crate::NamespaceConfig::new().max_keys(max_keys))
    }

    /// As [`one_shard`], from `cfg`.
    fn one_shard_with(
        cfg: crate::NamespaceConfig,
    ) -> (super::Engine, super::Namespace, crate::ManualClock) {
        manual(cfg.ttl(std::time::Duration::from_secs(60)).shards(1))
    }

    /// Namespace `n` of `cfg` on a manual clock, with no maintenance thread.
    fn manual(
        cfg: crate::NamespaceConfig,
    ) -> (super::Engine, super::Namespace, crate::ManualClock) {
        let clock = crate::ManualClock::new(1_700_000_000_000);
        let engine = super::Engine::builder()
            .clock(clock.clone())
            .maintenance_interval(None)
            .namespace("n", cfg)
            .build()
            .unwrap();
        let ns = engine.namespace("n").unwrap();
        (engine, ns, clock)
    }

    fn done(ns: &super::Namespace, key: &[u8]) {
        match ns.claim(key).unwrap() {
            crate::Claim::Acquired(g) => g.complete().unwrap(),
            other => panic!("{other:?}"),
        }
    }

    /// Keys `{prefix}0` to `{prefix}{n - 1}`, each claimed and completed.
    fn done_keys(ns: &super::Namespace, prefix: &str, n: usize) -> Vec<Vec<u8>> {
        let keys: Vec<Vec<u8>> = (0..n)
            .map(|i| format!("{prefix}{i}").into_bytes())
            .collect();
        for k in &keys {
            done(ns, k);
        }
        keys
    }

    /// The lock-free read's answer for `key`, if it gives one.
    fn lock_free(ns: &super::Namespace, key: &[u8]) -> Option<(u64, u64)> {
        let inner = &ns.inner;
        let fp = inner.key_fp(key).unwrap();
        let pin = crate::hot::pin().unwrap();
        inner.slots[0]
            .optimistic_duplicate(fp, &inner.params, inner.now(), &pin)
            .map(|(completed, expires, result)| {
                assert!(result.is_none());
                (completed, expires)
            })
    }

    /// Units of capacity in the pool, the shards' reserves and their entries.
    fn capacity_units(ns: &super::Namespace) -> (usize, usize, usize) {
        let inner = &ns.inner;
        let pool = inner.pool.load(std::sync::atomic::Ordering::Acquire);
        let (mut reserves, mut live) = (0, 0);
        for slot in inner.slots.iter() {
            let shard = slot.lock();
            reserves += shard.reserve();
            live += shard.len();
        }
        (pool, reserves, live)
    }

    #[test]
    fn capacity_units_are_never_lost_and_a_full_namespace_admits_exactly_max_keys() {
        const MAX: usize = 300;
        let (_engine, ns, clock) = manual(
            crate::NamespaceConfig::new()
                .max_keys(MAX)
                .shards(4)
                .ttl(std::time::Duration::from_secs(60))
                .lease(std::time::Duration::from_secs(10)),
        );
        assert_eq!(ns.inner.capacity().chunk, MAX / 16);
        let check = |what: &str| {
            let (pool, reserves, live) = capacity_units(&ns);
            assert_eq!(
                pool + reserves + live,
                MAX,
                "{what}: {pool} + {reserves} + {live}"
            );
        };
        // Two threads claim, complete, release and forget keys that spread over the
        // four shards, so that units move between reserves and the pool both ways.
        std::thread::scope(|s| {
            for t in 0..2 {
                let ns = ns.clone();
                s.spawn(move || {
                    for i in 0..4_000usize {
                        let key = format!("t{t}-{}", i % 700);
                        match ns.claim(key.as_bytes()) {
                            Ok(crate::Claim::Acquired(g)) => match i % 3 {
                                0 => g.complete().unwrap(),
                                1 => g.release().unwrap(),
                                _ => drop(g),
                            },
                            Ok(_) | Err(crate::Error::CapacityExceeded { .. }) => {}
                            Err(e) => panic!("{e}"),
                        }
                        if i % 5 == 0 {
                            ns.forget(format!("t{t}-{}", (i * 7) % 700).as_bytes())
                                .unwrap();
                        }
                    }
                });
            }
        });
        check("after the threads");
        // Every done key expires: the namespace then takes exactly MAX new keys, from
        // whichever shards they land on, and refuses the next.
        clock.advance(std::time::Duration::from_secs(61));
        let mut guards = Vec::new();
        for i in 0..MAX {
            match ns.claim(format!("fresh-{i}").as_bytes()) {
                Ok(crate::Claim::Acquired(g)) => guards.push(g),
                other => panic!("fresh-{i}: {other:?} with {:?}", capacity_units(&ns)),
            }
        }
        assert!(matches!(
            ns.claim(b"one-more"),
            Err(crate::Error::CapacityExceeded { .. })
        ));
        check("full");
        assert_eq!(capacity_units(&ns).2, MAX);
        drop(guards);
        check("released");
        assert_eq!(capacity_units(&ns).2, 0);
    }

    #[test]
    fn the_lock_free_read_finds_every_done_key_after_the_tables_grow() {
        let (_engine, ns, clock) = one_shard(100_000);
        // 5,000 keys: the index doubles about ten times and the chunk-address table
        // (4, 8, 16 chunks) twice, each replacement published and the old one retired.
        let keys = done_keys(&ns, "k", crate::under_miri(5_000, 2_600));
        clock.advance(std::time::Duration::from_secs(1));
        for k in &keys {
            let read = lock_free(&ns, k).unwrap_or_else(|| panic!("{k:?} not found"));
            // The same times the locked path reports.
            match ns.claim(k).unwrap() {
                crate::Claim::Duplicate(d) => {
                    assert_eq!(read, (d.completed_at_ms(), d.expires_at_ms()));
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(lock_free(&ns, b"never-seen"), None);
    }

    #[test]
    fn the_lock_free_read_leaves_every_other_case_to_the_lock() {
        let (_engine, ns, clock) = one_shard(1_000);
        done(&ns, b"done");
        assert!(lock_free(&ns, b"done").is_some());
        // A writer inside: the sequence is odd.
        {
            let _held = ns.inner.slots[0].lock();
            assert_eq!(lock_free(&ns, b"done"), None);
        }
        assert!(
            lock_free(&ns, b"done").is_some(),
            "even again after the guard"
        );
        // In progress.
        let guard = match ns.claim(b"busy").unwrap() {
            crate::Claim::Acquired(g) => g,
            other => panic!("{other:?}"),
        };
        assert_eq!(lock_free(&ns, b"busy"), None);
        drop(guard);
        // A stored result lives in a side table the read does not touch.
        match ns.claim(b"with-result").unwrap() {
            crate::Claim::Acquired(g) => g.complete_with_result(b"r").unwrap(),
            other => panic!("{other:?}"),
        }
        assert_eq!(lock_free(&ns, b"with-result"), None);
        // Expired (not yet reclaimed): the lock's path makes it claimable again.
        clock.advance(std::time::Duration::from_secs(61));
        assert_eq!(lock_free(&ns, b"done"), None);
        assert!(matches!(
            ns.claim(b"done").unwrap(),
            crate::Claim::Acquired(_)
        ));
    }

    /// A lock holder that changes the entry after the lock-free read has read it, and
    /// before the read checks the write sequence, makes the read give up: the claim
    /// is answered through the lock, from the entry as it is now.
    #[test]
    fn the_lock_free_read_gives_up_an_entry_changed_before_its_check() {
        use std::cell::{Cell, RefCell};
        use std::rc::Rc;
        let (_engine, ns, clock) = one_shard(1_000);
        done(&ns, b"k");
        let claim_in_batch = |key: &[u8]| {
            let mut claims = ns.claim_batch(&[key]).unwrap();
            assert_eq!(claims.len(), 1);
            claims.pop().unwrap()
        };
        // Nothing changes in the window: the read answers.
        let ran = Rc::new(Cell::new(0));
        let r = Rc::clone(&ran);
        crate::hot::before_read_valid(move || r.set(r.get() + 1));
        assert!(lock_free(&ns, b"k").is_some());
        assert_eq!(ran.get(), 1);
        // Forgotten in the window (by another thread, through the lock): the read
        // gives up, and the claim through the lock acquires the key.
        let other = ns.clone();
        let r = Rc::clone(&ran);
        crate::hot::before_read_valid(move || {
            std::thread::spawn(move || assert!(other.forget(b"k").unwrap()))
                .join()
                .unwrap();
            r.set(r.get() + 1);
        });
        let counted = ns.inner.lock_free_duplicates.sum();
        match claim_in_batch(b"k") {
            crate::Claim::Acquired(g) => g.complete().unwrap(),
            other => panic!("a forgotten key answered {other:?}"),
        }
        assert_eq!(ran.get(), 2);
        assert_eq!(ns.inner.lock_free_duplicates.sum(), counted);
        // Its time runs out in the window and another thread claims it again: the
        // read gives up, and the claim through the lock finds it in progress.
        let (other, later) = (ns.clone(), clock.clone());
        let held = Rc::new(RefCell::new(None));
        let (r, h) = (Rc::clone(&ran), Rc::clone(&held));
        crate::hot::before_read_valid(move || {
            later.advance(std::time::Duration::from_secs(61));
            let guard = std::thread::spawn(move || match other.claim(b"k").unwrap() {
                crate::Claim::Acquired(g) => g,
                c => panic!("an expired key answered {c:?}"),
            })
            .join()
            .unwrap();
            *h.borrow_mut() = Some(guard);
            r.set(r.get() + 1);
        });
        assert!(
            matches!(claim_in_batch(b"k"), crate::Claim::InProgress(_)),
            "a key claimed again answered as done"
        );
        assert_eq!(ran.get(), 3);
        assert!(held.borrow().is_some());
        assert_eq!(ns.inner.lock_free_duplicates.sum(), counted);
    }

    #[test]
    fn outgrown_tables_are_reported_until_maintenance_frees_them() {
        let (engine, ns, _clock) = one_shard(100_000);
        let pending = |ns: &super::Namespace| ns.stats().retired_bytes;
        // While a reader is pinned, nothing retired after its pin is freed.
        let reader = crate::hot::pin().unwrap();
        let keys = done_keys(&ns, "k", crate::under_miri(20_000, 2_600));
        let hot = ns.stats().hot_bytes;
        // Some retired table is still held (the last index growth's at least), and
        // reported apart from the tier's own bytes.
        let held = pending(&ns);
        assert!(held > 0, "nothing retired is pending");
        assert_eq!(held as usize, ns.inner.slots[0].retired_bytes());
        engine.run_maintenance();
        assert_eq!(pending(&ns), held, "kept while the reader is pinned");
        drop(reader);
        // Maintenance passes advance the epoch until every reader pinned before the
        // retirements has gone (other tests' threads may be pinned meanwhile, and
        // descheduled while pinned: the loop yields to them).
        let mut passes = 0;
        while pending(&ns) > 0 {
            assert!(passes < 1_000_000, "retired tables never freed");
            engine.run_maintenance();
            std::thread::yield_now();
            passes += 1;
        }
        // Freeing them does not move `hot_bytes` (beyond the reservoir's top-up).
        let topped_up = ns.inner.chunks.bytes() as u64;
        assert!(ns.stats().hot_bytes <= hot + topped_up);
        assert!(ns.stats().hot_bytes >= hot);
        assert!(lock_free(&ns, &keys[0]).is_some(), "the new tables serve");
    }

    #[test]
    fn batch_duplicates_answered_without_the_lock_are_counted() {
        let (_engine, ns, _clock) = one_shard(10_000);
        let keys = done_keys(&ns, "k", 1_000);
        let refs: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
        let before = ns.stats().duplicates;
        for batch in refs.chunks(64) {
            for c in ns.claim_batch(batch).unwrap() {
                assert!(matches!(c, crate::Claim::Duplicate(_)), "{c:?}");
            }
        }
        assert_eq!(ns.stats().duplicates - before, 1_000);
        assert_eq!(ns.inner.lock_free_duplicates.sum(), 1_000, "all lock-free");
        // A thread's first single claim takes the lock and counts there.
        super::recent::forget();
        assert!(matches!(
            ns.claim(&keys[0]).unwrap(),
            crate::Claim::Duplicate(_)
        ));
        assert_eq!(ns.stats().duplicates - before, 1_001);
        assert_eq!(ns.inner.lock_free_duplicates.sum(), 1_000);
    }

    #[test]
    fn single_claims_read_without_the_lock_after_duplicates_in_a_row() {
        let (_engine, ns, _clock) = one_shard(10_000);
        let keys = done_keys(&ns, "k", 10);
        super::recent::forget();
        let lock_free = || ns.inner.lock_free_duplicates.sum();
        let dup = |k: &[u8]| assert!(matches!(ns.claim(k).unwrap(), crate::Claim::Duplicate(_)));
        // The first ones take the lock.
        for k in &keys[..super::recent::LIKELY as usize] {
            dup(k);
        }
        assert_eq!(lock_free(), 0);
        // Then they read first, and are counted as duplicates all the same.
        let before = ns.stats().duplicates;
        for k in &keys[2..] {
            dup(k);
        }
        assert_eq!(lock_free(), 8);
        assert_eq!(ns.stats().duplicates - before, 8);
        // A new key read first is not found, so it is claimed through the lock, and
        // sends the thread back to the lock.
        match ns.claim(b"new").unwrap() {
            crate::Claim::Acquired(g) => g.complete().unwrap(),
            other => panic!("{other:?}"),
        }
        dup(&keys[0]);
        assert_eq!(lock_free(), 8, "after a new key, the lock first");
        // A duplicate the read cannot answer (a stored result) is answered by the
        // lock, with its result.
        match ns.claim(b"with-result").unwrap() {
            crate::Claim::Acquired(g) => g.complete_with_result(b"r").unwrap(),
            other => panic!("{other:?}"),
        }
        dup(&keys[1]);
        dup(&keys[2]);
        match ns.claim(b"with-result").unwrap() {
            crate::Claim::Duplicate(d) => assert_eq!(d.result(), Some(&b"r"[..])),
            other => panic!("{other:?}"),
        }
        assert_eq!(lock_free(), 8);
        // So is a key in progress: InProgress, through the lock.
        let _busy = match ns.claim(b"busy").unwrap() {
            crate::Claim::Acquired(g) => g,
            other => panic!("{other:?}"),
        };
        dup(&keys[3]);
        dup(&keys[4]);
        assert!(matches!(
            ns.claim(b"busy").unwrap(),
            crate::Claim::InProgress(_)
        ));
        assert_eq!(lock_free(), 8, "read first, not answered");
    }

    #[test]
    fn batches_read_without_the_lock_while_another_thread_grows_the_shard() {
        // Readers answer duplicates lock-free while the shard's index and chunk-address
        // table are replaced under them (and the old ones retired): every answer stays
        // right, and nothing is read after it is freed.
        let (_engine, ns, _clock) = one_shard(200_000);
        let old = done_keys(&ns, "old", crate::under_miri(2_000, 16));
        let growing = std::sync::atomic::AtomicBool::new(true);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    let refs: Vec<&[u8]> = old.iter().map(|k| k.as_slice()).collect();
                    let mut rounds = 0;
                    while growing.load(std::sync::atomic::Ordering::Relaxed) || rounds < 2 {
                        for batch in refs.chunks(64) {
                            for c in ns.claim_batch(batch).unwrap() {
                                assert!(matches!(c, crate::Claim::Duplicate(_)), "{c:?}");
                            }
                        }
                        rounds += 1;
                    }
                });
            }
            // 100,000 fresh keys: the index doubles six more times, the address table
            // three more.
            for i in 0..crate::under_miri(100_000, 2_600) {
                done(&ns, format!("new{i}").as_bytes());
            }
            growing.store(false, std::sync::atomic::Ordering::Relaxed);
        });
        assert!(ns.inner.lock_free_duplicates.sum() > 0);
    }

    #[test]
    fn a_sliding_window_keeps_single_duplicates_on_the_lock() {
        let (_engine, ns, clock) =
            one_shard_with(crate::NamespaceConfig::new().extend_on_duplicate(true));
        done(&ns, b"k");
        super::recent::forget();
        let mut expires = 0;
        for _ in 0..5 {
            clock.advance(std::time::Duration::from_secs(1));
            match ns.claim(b"k").unwrap() {
                crate::Claim::Duplicate(d) => {
                    // Each duplicate moves the window on.
                    assert!(d.expires_at_ms() > expires, "{d:?}");
                    expires = d.expires_at_ms();
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(ns.inner.lock_free_duplicates.sum(), 0);
    }

    #[test]
    fn single_claims_read_without_the_lock_while_another_thread_grows_the_shard() {
        // As the batch test above, with single claims read first (after duplicates in
        // a row): every answer stays right while the tables are replaced under them.
        let (_engine, ns, _clock) = one_shard(200_000);
        let old = done_keys(&ns, "old", crate::under_miri(2_000, 16));
        let growing = std::sync::atomic::AtomicBool::new(true);
        let read_first = std::thread::scope(|s| {
            let readers: Vec<_> = (0..2)
                .map(|_| {
                    s.spawn(|| {
                        let mut rounds = 0;
                        while growing.load(std::sync::atomic::Ordering::Relaxed) || rounds < 2 {
                            for k in &old {
                                let c = ns.claim(k).unwrap();
                                assert!(matches!(c, crate::Claim::Duplicate(_)), "{c:?}");
                            }
                            rounds += 1;
                        }
                    })
                })
                .collect();
            for i in 0..crate::under_miri(100_000, 2_600) {
                done(&ns, format!("new{i}").as_bytes());
            }
            growing.store(false, std::sync::atomic::Ordering::Relaxed);
            for r in readers {
                r.join().unwrap();
            }
            ns.inner.lock_free_duplicates.sum()
        });
        assert!(read_first > 0);
    }

    #[test]
    fn a_growing_shard_gets_its_next_chunk_ahead_and_uses_it() {
        let f = Filler::new(10_000);
        let chunks = |f: &Filler| f.ns.inner.slots[0].lock().chunk_addrs();
        let chunk = crate::hot::CHUNK;
        f.fill_to(chunk * 3 / 4 - 1);
        assert_eq!(chunks(&f).0.len(), 1);
        assert_eq!(chunks(&f).1, None, "no spare before three quarters");
        // The claim that fills three quarters of the chunk brings the next one.
        f.fill_to(chunk * 3 / 4);
        let spare = chunks(&f).1.expect("a spare chunk");
        f.fill_to(chunk);
        assert_eq!(chunks(&f).1, Some(spare), "kept until it is needed");
        // The next key goes into the spare: no allocation under the lock.
        f.fill_to(chunk + 1);
        let (list, none) = chunks(&f);
        assert_eq!((list.len(), list[1], none), (2, spare, None));
        f.fill_to(chunk + chunk * 3 / 4);
        assert!(chunks(&f).1.is_some(), "and again for the chunk after");
    }

    #[test]
    fn spare_chunks_come_from_a_reservoir_made_in_batches_and_topped_up_by_maintenance() {
        let chunk = crate::hot::CHUNK;
        // 4 chunks a batch: max_keys / (64 chunks).
        let f = Filler::new(4 * 64 * chunk);
        let (engine, reservoir) = (&f.engine, &f.ns.inner.chunks);
        assert_eq!(reservoir.batch(), 4);
        // Nothing is made until a shard asks, and maintenance does not start it.
        f.fill_to(chunk / 2);
        engine.run_maintenance();
        assert_eq!(
            reservoir.len(),
            0,
            "a namespace that never grew holds no batch"
        );
        // The first spare makes a whole batch and takes one of it.
        f.fill_to(chunk * 3 / 4);
        assert_eq!(reservoir.len(), 3);
        // The next spares come from the batch: nothing new is made.
        f.fill_to(chunk + chunk * 3 / 4);
        assert_eq!(reservoir.len(), 2);
        engine.run_maintenance();
        assert_eq!(reservoir.len(), 2, "half a batch left: not topped up yet");
        f.fill_to(2 * chunk + chunk * 3 / 4);
        assert_eq!(reservoir.len(), 1);
        // Maintenance makes the batch whole again, and the bytes are counted.
        let before = engine.stats().hot_bytes;
        engine.run_maintenance();
        assert_eq!(reservoir.len(), 4);
        let entry_bytes = (chunk * 28) as u64;
        assert!(engine.stats().hot_bytes >= before + 3 * entry_bytes);
    }

    /// Entries at which a one-shard index of 1,024 buckets (10,752 entries of room)
    /// asks for a spare array: its last sixteenth of room.
    const SPARE_MARK: usize = 10_752 - 10_752 / 16;

    /// Entries at which such an index's claim makes the spare itself if none has
    /// come: its last 32nd of room.
    const LATE_MARK: usize = 10_752 - 10_752 / 32;

    #[test]
    fn the_maintenance_thread_collects_outgrown_tables_when_a_retirement_asks() {
        use crate::hot::reclaim;
        use crate::{Engine, NamespaceConfig};
        use std::time::Duration;
        let _sized = reclaim::LIMBO_SIZED.lock();
        let engine = Engine::builder()
            .namespace("n", NamespaceConfig::new())
            .maintenance_interval(Some(Duration::from_secs(3600)))
            .build()
            .unwrap();
        let registration = engine.collector.as_ref().expect("registered");
        let id = registration.id();
        assert!(reclaim::collector_registered(id));
        assert!(reclaim::ask_collector(registration));
        // Bounded only so that a broken build fails rather than hangs. (Another
        // test's collection may take the request first: that also ends it.)
        let start = std::time::Instant::now();
        while reclaim::collection_asked() {
            assert!(start.elapsed() < Duration::from_secs(60), "never collected");
            std::thread::yield_now();
        }
        // A request its thread never saw (asked of it as it was stopping) is
        // collected by the engine's drop, not left for a collector never asked
        // (a handle kept, so that the namespace's own drop collects nothing).
        let handle = engine.namespace("n").unwrap();
        reclaim::mark_collection_asked();
        drop(engine);
        assert!(
            !reclaim::collector_registered(id),
            "given up with the engine"
        );
        assert!(!reclaim::collection_asked(), "collected at the drop");
        drop(handle);
        let without = Engine::builder()
            .namespace("n", NamespaceConfig::new())
            .maintenance_interval(None)
            .build()
            .unwrap();
        assert!(without.collector.is_none(), "no thread, no collector");
    }

    #[test]
    fn the_maintenance_pass_makes_a_spare_index_array_that_the_doubling_takes() {
        let f = Filler::new(100_000);
        let addrs = |f: &Filler| f.ns.inner.slots[0].lock().index_addrs();
        assert_eq!(crate::hot::index::SPARE_FROM, 1024);
        f.fill_to(SPARE_MARK - 100);
        f.engine.run_maintenance();
        assert_eq!(addrs(&f).1, None, "not before the mark");
        // 100 keys since the last pass: at that pace the 672 keys of room left at
        // the mark go within ten passes.
        f.fill_to(SPARE_MARK);
        let before = f.engine.stats().hot_bytes;
        f.engine.run_maintenance();
        let spare = addrs(&f).1.expect("a spare at the mark");
        // Counted in the hot tier's memory: 2,048 buckets of 64 bytes.
        assert_eq!(f.engine.stats().hot_bytes, before + 2048 * 64);
        f.fill_to(SPARE_MARK + 10);
        f.engine.run_maintenance();
        assert_eq!(
            addrs(&f).1,
            Some(spare),
            "kept while filling, no second one made"
        );
        // The inserts after the mark copy the entries into it, a few each, and it
        // becomes the index's array before the old one is full.
        assert_ne!(addrs(&f).0, spare, "still moving");
        f.fill_to(10_752);
        assert_eq!(addrs(&f), (spare, None));
        for i in (0..10_753).step_by(97) {
            let dup = f.ns.claim(format!("k{i}").as_bytes()).unwrap();
            assert!(matches!(dup, crate::Claim::Duplicate(_)), "k{i}: {dup:?}");
        }
    }

    /// A large index whose spare the maintenance thread has not made by its late
    /// mark (here: no thread, no pass) has it made by the claim that reaches that
    /// mark, after letting the lock go, and moves into it a few entries an insert;
    /// before, the insert that filled it placed all 10,752 entries again in a new
    /// array while holding the lock.
    #[test]
    fn a_large_index_whose_spare_is_late_is_given_one_by_the_claim_at_its_late_mark() {
        let f = Filler::new(100_000);
        let addrs = |f: &Filler| f.ns.inner.slots[0].lock().index_addrs();
        f.fill_to(SPARE_MARK);
        let (array, none) = addrs(&f);
        assert_eq!(none, None, "asked of the maintenance thread, not made");
        f.fill_to(LATE_MARK - 1);
        assert_eq!(
            addrs(&f),
            (array, None),
            "nothing made before the late mark"
        );
        let before = f.engine.stats().hot_bytes;
        f.fill_to(LATE_MARK);
        let spare = addrs(&f).1.expect("made by the claim at the late mark");
        assert_eq!(addrs(&f).0, array, "still moving");
        assert_eq!(f.engine.stats().hot_bytes, before + 2048 * 64);
        f.fill_to(10_752);
        assert_eq!(addrs(&f), (spare, None), "the spare became the array");
        for i in (0..10_752).step_by(89) {
            let dup = f.ns.claim(format!("k{i}").as_bytes()).unwrap();
            assert!(matches!(dup, crate::Claim::Duplicate(_)), "k{i}: {dup:?}");
        }
    }

    /// The late mark is for a fill that outruns the maintenance thread: a shard
    /// that reached its first mark before the last pass, which found it filling too
    /// slowly to want a spare yet, has none made by the claim at its late mark (a
    /// shard hovering there would otherwise make one at every crossing); the passes
    /// make it once the doubling nears at the shard's pace.
    #[test]
    fn a_slowly_filling_shard_is_left_to_the_passes_at_its_late_mark() {
        let f = Filler::new(100_000);
        let spare = |f: &Filler| f.ns.inner.slots[0].lock().index_addrs().1;
        f.fill_to(SPARE_MARK - 1);
        f.engine.run_maintenance();
        // The claim at the mark asks; the pass after it finds one key of growth,
        // which would take the shard hundreds of passes to double: no spare.
        f.fill_to(SPARE_MARK);
        f.engine.run_maintenance();
        assert_eq!(spare(&f), None);
        f.fill_to(LATE_MARK);
        assert_eq!(spare(&f), None, "not made by the claim at the late mark");
        // 336 keys since the last pass: at that pace the doubling is within ten.
        f.engine.run_maintenance();
        assert!(spare(&f).is_some(), "made by the pass");
    }

    #[test]
    fn a_spare_is_freed_when_its_shard_stops_filling_and_not_made_again() {
        let f = Filler::new(100_000);
        let spare = |f: &Filler| f.ns.inner.slots[0].lock().index_addrs().1;
        f.fill_to(SPARE_MARK);
        let before = f.engine.stats().hot_bytes;
        f.engine.run_maintenance();
        assert!(spare(&f).is_some());
        // No key since: the doubling is no nearer, but the index is moving into the
        // spare. It keeps it through ten quiet passes, then lets it go.
        for _ in 0..9 {
            f.engine.run_maintenance();
            assert!(spare(&f).is_some(), "kept while moving");
        }
        f.engine.run_maintenance();
        assert_eq!(spare(&f), None, "freed");
        assert_eq!(f.engine.stats().hot_bytes, before);
        f.engine.run_maintenance();
        assert_eq!(
            spare(&f),
            None,
            "not made again while the shard holds steady"
        );
        // Filling again, at a pace that reaches the doubling within ten passes.
        f.fill_to(SPARE_MARK + 70);
        f.engine.run_maintenance();
        assert!(spare(&f).is_some(), "made again");
    }

    #[test]
    fn a_move_keeps_its_spare_through_a_pause_in_the_filling() {
        let f = Filler::new(100_000);
        let addrs = |f: &Filler| f.ns.inner.slots[0].lock().index_addrs();
        f.fill_to(SPARE_MARK - 100);
        f.engine.run_maintenance();
        f.fill_to(SPARE_MARK);
        f.engine.run_maintenance();
        let spare = addrs(&f).1.expect("a spare at the mark");
        // Part of the entries copied, then a pass with no key since the last.
        f.fill_to(SPARE_MARK + 100);
        f.engine.run_maintenance();
        f.engine.run_maintenance();
        assert_eq!(addrs(&f).1, Some(spare), "kept through the pause");
        // The filling resumes and the move ends in the same spare.
        f.fill_to(10_752);
        assert_eq!(addrs(&f), (spare, None));
    }

    /// An index under `SPARE_FROM` buckets doubles as a larger one does, into a
    /// spare array, a few entries with each insert, instead of placing every entry
    /// again while its lock is held: the claim that brings it to its mark makes the
    /// spare after letting the lock go (no maintenance pass, no thread), and gives
    /// it to the shard. Before, the doubling placed all 672 entries of the first
    /// page (5,376 at 512 buckets, about 35 us) inside one claim, and every other
    /// claim of the shard waited for it.
    #[test]
    fn a_small_index_at_its_mark_is_given_a_spare_by_its_claim_and_moves_into_it() {
        let f = Filler::new(100_000);
        let addrs = |f: &Filler| f.ns.inner.slots[0].lock().index_addrs();
        let mark = super::EARLY_ROOM - super::EARLY_ROOM / 16;
        f.fill_to(mark - 1);
        let (page, none) = addrs(&f);
        assert_eq!(none, None, "not before the mark");
        f.fill_to(mark);
        let (array, spare) = addrs(&f);
        let spare = spare.expect("made by the claim that reached the mark");
        assert_eq!(array, page, "still moving");
        // The entries move a few an insert; the spare is the array before the page
        // is full.
        f.fill_to(super::EARLY_ROOM);
        assert_eq!(addrs(&f), (spare, None));
        assert_eq!(f.ns.inner.slots[0].hint() & 63, 7, "128 buckets");
        for i in 0..super::EARLY_ROOM {
            let dup = f.ns.claim(format!("k{i}").as_bytes()).unwrap();
            assert!(matches!(dup, crate::Claim::Duplicate(_)), "k{i}: {dup:?}");
        }
        // And so on at every doubling under `SPARE_FROM` buckets.
        let room_of_512 = super::EARLY_ROOM * 8;
        f.fill_to(room_of_512 - room_of_512 / 16);
        assert!(addrs(&f).1.is_some(), "a spare at the mark of 512 buckets");
        f.fill_to(room_of_512);
        assert_eq!(f.ns.inner.slots[0].hint() & 63, 10, "1,024 buckets");
    }

    /// A small index brought to its mark by a duplicate claim (a done record read
    /// back from the durable tier, kept in the hot tier) is given its spare by that
    /// claim, as by one that acquires, and moves into it. Before, only a claim that
    /// acquired made one, and none was made later (the mark was passed), so that
    /// doubling was placed whole, inside the claim that filled the array.
    #[cfg(feature = "durable")]
    #[test]
    fn a_small_index_brought_to_its_mark_by_a_durable_duplicate_is_given_a_spare() {
        let dir = Scratch::new("small-mark-durable-duplicate");
        let clock = crate::ManualClock::new(1_700_000_000_000);
        let cfg = || {
            crate::NamespaceConfig::new()
                .max_keys(100_000)
                .shards(1)
                .preallocate(false)
                .sync(crate::SyncPolicy::Never)
        };
        let complete = |ns: &super::Namespace, key: &[u8]| match ns.claim(key).unwrap() {
            crate::Claim::Acquired(g) => g.complete().unwrap(),
            other => panic!("{other:?}"),
        };
        let engine = durable_engine(&dir, cfg(), &clock);
        complete(&engine.namespace("n").unwrap(), b"d");
        drop(engine);
        let engine = durable_engine(&dir, cfg(), &clock);
        let ns = engine.namespace("n").unwrap();
        let addrs = || ns.inner.slots[0].lock().index_addrs();
        let mark = super::EARLY_ROOM - super::EARLY_ROOM / 16;
        for i in 0..mark - 1 {
            complete(&ns, format!("k{i}").as_bytes());
        }
        assert_eq!(addrs().1, None, "not before the mark");
        assert!(ns.claim(b"d").unwrap().is_duplicate());
        assert_eq!(
            ns.inner.slots[0].lock().len(),
            mark,
            "the duplicate is resident"
        );
        let (page, spare) = addrs();
        let spare = spare.expect("made by the duplicate claim that reached the mark");
        for i in mark - 1..super::EARLY_ROOM - 1 {
            complete(&ns, format!("k{i}").as_bytes());
        }
        assert_ne!(page, spare);
        assert_eq!(addrs(), (spare, None), "moved into the spare");
        assert_eq!(ns.inner.slots[0].hint() & 63, 7, "128 buckets");
        assert!(ns.claim(b"d").unwrap().is_duplicate());
        for i in 0..super::EARLY_ROOM - 1 {
            assert!(ns.claim(format!("k{i}").as_bytes()).unwrap().is_duplicate());
        }
    }

    /// A namespace whose shards' share fits the index they have makes no spare
    /// for them, small or not.
    #[test]
    fn a_small_shard_meant_to_hold_what_its_index_has_room_for_makes_no_spare() {
        let f = Filler::new(super::EARLY_ROOM);
        f.fill_to(super::EARLY_ROOM);
        assert_eq!(f.ns.inner.slots[0].lock().index_addrs().1, None);
        assert_eq!(f.ns.inner.slots[0].hint() & 63, 6, "64 buckets");
    }

    #[test]
    fn a_shard_meant_to_hold_what_its_index_has_room_for_makes_no_spare() {
        // A share of 10,700 keys fits in 1,024 buckets: the index never doubles again.
        let f = Filler::new(10_700);
        f.fill_to(10_700);
        f.engine.run_maintenance();
        assert_eq!(f.ns.inner.slots[0].lock().index_addrs().1, None);
    }

    #[test]
    fn a_spare_no_longer_needed_is_freed_by_the_maintenance_pass() {
        let (engine, ns, clock) = one_shard_with(
            crate::NamespaceConfig::new()
                .max_keys(100_000)
                .preallocate(false),
        );
        for i in 0..SPARE_MARK {
            match ns.claim(format!("k{i}").as_bytes()).unwrap() {
                crate::Claim::Acquired(g) => g.complete().unwrap(),
                other => panic!("{other:?}"),
            }
        }
        engine.run_maintenance();
        assert!(ns.inner.slots[0].lock().index_addrs().1.is_some());
        let with_spare = engine.stats().hot_bytes;
        // Every key expires: the index is far from its doubling.
        clock.advance(std::time::Duration::from_secs(61));
        engine.run_maintenance();
        assert_eq!(engine.stats().resident_keys, 0);
        engine.run_maintenance();
        assert_eq!(ns.inner.slots[0].lock().index_addrs().1, None, "freed");
        assert!(engine.stats().hot_bytes <= with_spare - 2048 * 64);
    }

    #[test]
    fn a_claim_reaching_the_mark_has_the_maintenance_thread_make_the_spare() {
        let f = Filler::with_maintenance(100_000, Some(std::time::Duration::from_secs(3600)));
        let spare = |f: &Filler| f.ns.inner.slots[0].lock().index_addrs().1;
        f.fill_to(SPARE_MARK);
        // The thread runs on its own: wait for it (a real thread, so real time; the
        // bound only keeps a broken build from hanging).
        let deadline = std::time::Instant::now() + crate::thread_wait_limit();
        while spare(&f).is_none() && std::time::Instant::now() < deadline {
            std::thread::yield_now();
        }
        assert!(spare(&f).is_some(), "made without a maintenance pass");
        assert_eq!(f.engine.stats().expirations, 0);
    }

    /// A reservoir left below half a batch between maintenance passes is topped up
    /// at once by the maintenance thread, not at its next pass (an hour away here)
    /// nor by the claim that would find it empty.
    #[test]
    fn a_reservoir_run_low_is_topped_up_by_the_maintenance_thread_before_its_pass() {
        let chunk = crate::hot::CHUNK;
        let f =
            Filler::with_maintenance(4 * 64 * chunk, Some(std::time::Duration::from_secs(3600)));
        let reservoir = &f.ns.inner.chunks;
        assert_eq!(reservoir.batch(), 4);
        // The thread runs on its own: wait for it (a real thread, so real time; the
        // bound only keeps a broken build from hanging).
        let topped_up = |why: &str| {
            let deadline = std::time::Instant::now() + crate::thread_wait_limit();
            while reservoir.len() < 4 && std::time::Instant::now() < deadline {
                std::thread::yield_now();
            }
            assert_eq!(reservoir.len(), 4, "{why}");
        };
        // The first spare finds the reservoir empty: its claim makes its own chunk,
        // and the thread the batch.
        f.fill_to(chunk * 3 / 4);
        topped_up("a batch made by the thread");
        // Three spares taken from it: one chunk is left.
        f.fill_to(3 * chunk + chunk * 3 / 4);
        topped_up("topped up without a maintenance pass");
        assert_eq!(f.engine.stats().expirations, 0);
    }

    #[test]
    fn guards_keep_their_namespace_until_the_last_of_them_ends() {
        let (engine, ns) = memory_namespace();
        let weak = super::Arc::downgrade(&ns.inner);
        // Guards claimed on several threads, over many shards.
        let per_thread: Vec<Vec<super::ClaimGuard>> = (0..4u32)
            .map(|t| {
                let ns = ns.clone();
                std::thread::spawn(move || {
                    (0..200u32)
                        .map(
                            |i| match ns.claim(format!("t{t}-k{i}").as_bytes()).unwrap() {
                                crate::Claim::Acquired(g) => g,
                                other => panic!("{other:?}"),
                            },
                        )
                        .collect::<Vec<super::ClaimGuard>>()
                })
                .join()
                .unwrap()
            })
            .collect();
        let mut guards: Vec<super::ClaimGuard> = per_thread.into_iter().flatten().collect();
        let shards: std::collections::HashSet<u32> = guards.iter().map(|g| g.shard).collect();
        assert!(shards.len() > 1, "the keys spread over shards");
        drop(ns);
        drop(engine);
        // Ended here, on another thread than the ones that claimed, every way a
        // guard can end: the namespace outlives each but the last.
        let last = guards.pop().unwrap();
        for (i, g) in guards.into_iter().enumerate() {
            match i % 4 {
                0 => g.complete().unwrap(),
                1 => g.complete_with_result(b"r").unwrap(),
                2 => g.release().unwrap(),
                _ => drop(g),
            }
            assert!(
                weak.upgrade().is_some(),
                "guard {i} ended: the others keep it"
            );
        }
        last.complete().unwrap();
        assert!(
            weak.upgrade().is_none(),
            "the last guard let the namespace go"
        );
    }

    #[test]
    fn a_namespace_with_no_guard_goes_with_its_last_handle() {
        let (engine, ns) = memory_namespace();
        let weak = super::Arc::downgrade(&ns.inner);
        for i in 0..100u32 {
            match ns.claim(format!("k{i}").as_bytes()).unwrap() {
                crate::Claim::Acquired(g) => g.complete().unwrap(),
                other => panic!("{other:?}"),
            }
        }
        let other = ns.clone();
        drop(ns);
        drop(engine);
        assert!(weak.upgrade().is_some(), "a handle is left");
        drop(other);
        assert!(
            weak.upgrade().is_none(),
            "the namespace went with its last handle"
        );
    }

    #[test]
    fn a_release_that_panics_in_drop_still_ends_the_guards_count() {
        use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
        /// A clock that panics once told to: the dropped guard's release reads it.
        #[derive(Clone, Default)]
        struct Failing(std::sync::Arc<AtomicBool>);
        impl crate::Clock for Failing {
            fn now_ms(&self) -> u64 {
                assert!(!self.0.load(SeqCst), "the clock fails");
                1_000_000
            }
        }
        let clock = Failing::default();
        let engine = super::Engine::builder()
            .clock(clock.clone())
            .maintenance_interval(None)
            .namespace("n", crate::NamespaceConfig::new())
            .build()
            .unwrap();
        let ns = engine.namespace("n").unwrap();
        let weak = super::Arc::downgrade(&ns.inner);
        let guard = match ns.claim(b"k").unwrap() {
            crate::Claim::Acquired(g) => g,
            other => panic!("{other:?}"),
        };
        drop(ns);
        drop(engine);
        clock.0.store(true, SeqCst);
        let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(guard)));
        assert!(dropped.is_err(), "the release's panic goes on");
        assert!(
            weak.upgrade().is_none(),
            "the guard's count ended all the same"
        );
    }

    #[test]
    fn a_guard_refused_without_a_lock_round_still_lets_the_namespace_go() {
        let (engine, ns, clock) = manual(
            crate::NamespaceConfig::new()
                .lease(std::time::Duration::from_secs(5))
                .max_result_len(4),
        );
        let weak = super::Arc::downgrade(&ns.inner);
        let acquire = |k: &[u8]| match ns.claim(k).unwrap() {
            crate::Claim::Acquired(g) => g,
            other => panic!("{other:?}"),
        };
        let (too_large, lost) = (acquire(b"a"), acquire(b"b"));
        drop(ns);
        drop(engine);
        // Refused before any lock round: its drop ends the count.
        assert!(matches!(
            too_large.complete_with_result(b"too long"),
            Err(crate::Error::ResultTooLarge { .. })
        ));
        assert!(weak.upgrade().is_some(), "one guard is left");
        clock.advance(std::time::Duration::from_secs(6));
        assert_eq!(lost.complete(), Err(crate::Error::LeaseLost));
        assert!(
            weak.upgrade().is_none(),
            "the last guard let the namespace go"
        );
    }
}

#[cfg(not(idem_loom))]
impl Drop for Engine {
    fn drop(&mut self) {
        // Each failure was logged where it happened; `Engine::close` returns it.
        let _ = self.shut_down();
    }
}

#[cfg(not(idem_loom))]
impl Engine {
    /// The shutdown of [`Engine::close`] and of the engine's drop, once: every step
    /// runs whatever the earlier ones gave, and the first failure is returned.
    fn shut_down(&mut self) -> Result<()> {
        if std::mem::replace(&mut self.shut, true) {
            return Ok(());
        }
        let mut first = Ok(());
        // No retirement asks the thread from here on; a collection it was asked
        // for and did not begin (another engine's thread may be the only collector
        // left, and it would not be asked again) runs here.
        drop(self.collector.take());
        if let Some(t) = self.maintenance.take() {
            t.stop();
            crate::hot::reclaim::collect_if_asked();
        }
        if let Some(t) = self.wal_sync.take() {
            t.stop();
        }
        #[cfg(feature = "durable")]
        if let Some(store) = &self.shared.store {
            store.close();
        }
        // Deferred claim markers of claims still held reach the store, so they are
        // orphans at the next open, as with immediate markers.
        for ns in self.shared.namespaces.values() {
            if let Some(d) = &ns.durable {
                first = first.and(d.flush_markers());
            }
        }
        #[cfg(feature = "durable")]
        if let Some(store) = &self.shared.store {
            // The log on disk first: should a memtable's flush fail, the next open
            // replays it.
            first = first.and(store.sync_on_request().inspect_err(|e| {
                tracing::warn!(error = %e, "could not sync the write-ahead log at shutdown");
            }));
            // Memtables to disk, so the next open replays no log.
            first = first.and(store.flush_memtables());
        }
        for ns in self.shared.namespaces.values() {
            if let Some(d) = &ns.durable {
                // Stamped with the namespace's latest time (its high-water mark),
                // the latest its generations were expired at. A clock that panics
                // here would skip the other namespaces' saves (and abort a drop
                // during unwinding): its last reading stands in.
                let now = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ns.now_ms()))
                    .unwrap_or_else(|_| ns.latest_ms.load(Ordering::Relaxed));
                first = first.and(d.save_prefilter(now));
            }
        }
        first
    }
}

impl Shared {
    /// The thread that syncs the write-ahead log for `SyncPolicy::Periodic`
    /// namespaces, at the shortest of their intervals (under `SCHED_BATCH` with
    /// `batch`).
    #[cfg(not(idem_loom))]
    /// The periodic sync of the write-ahead log's thread, if a namespace syncs
    /// periodically, or the system's refusal to start it.
    fn wal_sync_thread(&self, batch: bool) -> Result<Option<maintenance::Thread>> {
        #[cfg(not(feature = "durable"))]
        let _ = batch;
        #[cfg(feature = "durable")]
        {
            let Some(store) = self.store.clone() else {
                return Ok(None);
            };
            let Some(every) = self
                .namespaces
                .values()
                .filter_map(|ns| match ns.cfg.sync {
                    crate::config::SyncPolicy::Periodic(d) => Some(d),
                    _ => None,
                })
                .min()
            else {
                return Ok(None);
            };
            const NAME: &str = "idem-wal-sync";
            maintenance::Thread::start(NAME, every, batch, move || store.periodic_sync())
                .map(Some)
                .map_err(|e| thread_refused(NAME, &e))
        }
        #[cfg(not(feature = "durable"))]
        Ok(None)
    }
}

/// Test support: the system's refusal to start a thread, simulated.
#[cfg(test)]
pub(crate) mod spawn_hook {
    std::thread_local! {
        /// The thread whose start the system refuses on this thread.
        static REFUSED: std::cell::Cell<Option<&'static str>> =
            const { std::cell::Cell::new(None) };
    }

    /// Whether the system refuses to start thread `name` (a test's setting, on the
    /// thread that starts it).
    pub(crate) fn refused(name: &str) -> bool {
        REFUSED.with(|r| r.get() == Some(name))
    }

    /// Has the system refuse thread `name` to this thread from now on (`None`: no
    /// thread).
    pub(crate) fn refuse(name: Option<&'static str>) {
        REFUSED.with(|r| r.set(name));
    }
}

/// The error of a background thread (`name`) the system would not start.
#[cfg(not(idem_loom))]
fn thread_refused(name: &'static str, e: &std::io::Error) -> Error {
    Error::ThreadRefused {
        thread: name,
        reason: e.to_string(),
    }
}

#[cfg(not(idem_loom))]
mod maintenance {
    use std::sync::{Arc as StdArc, Condvar, Mutex as StdMutex};
    use std::thread::JoinHandle;
    use std::time::{Duration, Instant};

    /// What a background thread is asked to do, under its lock.
    #[derive(Default)]
    struct Asked {
        stop: bool,
        /// Run the thread's `on_request` task now, without waiting for its period.
        request: bool,
    }

    type Control = StdArc<(StdMutex<Asked>, Condvar)>;

    /// A background thread that runs a task periodically (and, if it has one, a
    /// second task whenever it is asked to), and the flags that stop and ask it.
    pub(super) struct Thread {
        control: Control,
        handle: JoinHandle<()>,
    }

    /// Asks a [`Thread`] to run its `on_request` task now. Cheap to clone; asking a
    /// thread that has stopped does nothing.
    #[derive(Clone)]
    pub(super) struct Requester(Control);

    impl Requester {
        pub(super) fn request(&self) {
            let (lock, cvar) = &*self.0;
            lock.lock().unwrap_or_else(|p| p.into_inner()).request = true;
            cvar.notify_one();
        }
    }

    /// Runs `task`, reporting a panic instead of ending the thread: a run that panics
    /// (a user clock that fails, say) is reported and the next one goes on, so that
    /// expiry and marker writes are not left undone in silence.
    fn run_caught(task: &mut impl FnMut()) {
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(task));
        if ran.is_err() {
            tracing::error!("a background run panicked; the next one goes on");
        }
    }

    impl Thread {
        /// Starts a thread called `name` that runs `task` every `every` until
        /// [`Thread::stop`] (the periodic WAL sync, durable tier only).
        #[cfg_attr(not(feature = "durable"), allow(dead_code))]
        pub(super) fn start(
            name: &str,
            every: Duration,
            batch: bool,
            task: impl FnMut() + Send + 'static,
        ) -> std::io::Result<Thread> {
            Ok(Thread::start_with_requests(name, every, batch, task, || {})?.0)
        }

        /// As [`Thread::start`], and `on_request` runs whenever the returned
        /// [`Requester`] asks (once for any number of requests made while it waits),
        /// without moving the periodic task's schedule. With `batch`, the thread
        /// runs under `SCHED_BATCH` (see `EngineBuilder::batch_background_threads`).
        pub(super) fn start_with_requests(
            name: &str,
            every: Duration,
            batch: bool,
            mut task: impl FnMut() + Send + 'static,
            mut on_request: impl FnMut() + Send + 'static,
        ) -> std::io::Result<(Thread, Requester)> {
            #[cfg(test)]
            if super::spawn_hook::refused(name) {
                return Err(std::io::Error::other("refused by the test"));
            }
            let control: Control = StdArc::new((StdMutex::new(Asked::default()), Condvar::new()));
            let shared = control.clone();
            let handle = std::thread::Builder::new()
                .name(name.into())
                .spawn(move || {
                    if batch {
                        crate::sched::batch_this_thread();
                    }
                    let (lock, cvar) = &*shared;
                    // `None`: a period too long to reach (the task never runs).
                    let mut next = Instant::now().checked_add(every);
                    let mut asked = lock.lock().unwrap_or_else(|p| p.into_inner());
                    loop {
                        if asked.stop {
                            break;
                        }
                        // The periodic task first when it is due: requests that
                        // keep coming cannot hold it off.
                        let now = Instant::now();
                        if next.is_some_and(|at| now >= at) {
                            drop(asked);
                            run_caught(&mut task);
                            next = Instant::now().checked_add(every);
                            asked = lock.lock().unwrap_or_else(|p| p.into_inner());
                            continue;
                        }
                        if asked.request {
                            asked.request = false;
                            drop(asked);
                            run_caught(&mut on_request);
                            asked = lock.lock().unwrap_or_else(|p| p.into_inner());
                            continue;
                        }
                        match next {
                            Some(at) => {
                                asked = cvar
                                    .wait_timeout(asked, at - now)
                                    .unwrap_or_else(|p| p.into_inner())
                                    .0;
                            }
                            None => asked = cvar.wait(asked).unwrap_or_else(|p| p.into_inner()),
                        }
                    }
                })?;
            Ok((
                Thread {
                    control: control.clone(),
                    handle,
                },
                Requester(control),
            ))
        }

        pub(super) fn stop(self) {
            let (lock, cvar) = &*self.control;
            lock.lock().unwrap_or_else(|p| p.into_inner()).stop = true;
            cvar.notify_all();
            // Stopped from its own run (the engine dropped by something the run let
            // go of, a clock or subscriber that owned it): the thread ends once the
            // run returns; joining itself would fail.
            if self.handle.thread().id() != std::thread::current().id() {
                let _ = self.handle.join();
            }
        }
    }
}

#[cfg(all(test, not(idem_loom)))]
mod maintenance_tests {
    use super::maintenance::Thread;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{mpsc, Arc};
    use std::time::Duration;

    /// A thread started with `batch` runs its tasks under `SCHED_BATCH`; one
    /// started without, as it was.
    #[cfg(target_os = "linux")]
    #[test]
    #[cfg_attr(miri, ignore = "Miri has no scheduler policies")]
    fn a_batch_thread_runs_its_tasks_under_batch_scheduling() {
        for batch in [true, false] {
            let (saw, seen) = mpsc::channel();
            let (thread, requester) = Thread::start_with_requests(
                "idem-test",
                Duration::from_secs(3600),
                batch,
                || {},
                move || saw.send(crate::sched::is_batch(0)).unwrap(),
            )
            .unwrap();
            requester.request();
            // Bounded only so that a broken build fails rather than hangs.
            let policy = seen.recv_timeout(Duration::from_secs(60)).expect("ran");
            thread.stop();
            assert_eq!(policy, batch);
        }
    }

    /// A request runs the thread's request task at once, however far off its
    /// periodic run is, and leaves that run alone; a stop ends the thread.
    #[test]
    fn a_request_runs_its_task_at_once_and_the_period_stays() {
        let periodic = Arc::new(AtomicUsize::new(0));
        let (ran, runs) = mpsc::channel();
        let counted = periodic.clone();
        let (thread, requester) = Thread::start_with_requests(
            "idem-test",
            Duration::from_secs(3600),
            false,
            move || {
                counted.fetch_add(1, Ordering::SeqCst);
            },
            move || ran.send(()).unwrap(),
        )
        .unwrap();
        for _ in 0..3 {
            requester.request();
            // Bounded only so that a broken build fails rather than hangs.
            runs.recv_timeout(Duration::from_secs(60))
                .expect("the request task ran");
        }
        thread.stop();
        assert_eq!(
            periodic.load(Ordering::SeqCst),
            0,
            "the hourly run did not come"
        );
        // Asking a stopped thread does nothing.
        requester.request();
        assert!(runs.try_recv().is_err());
    }

    /// Requests that never stop coming (each request run asks again) do not hold
    /// off the periodic task once it is due.
    #[test]
    fn requests_that_keep_coming_do_not_hold_off_the_periodic_task() {
        let requester = Arc::new(std::sync::OnceLock::new());
        let again = requester.clone();
        let (ran, runs) = mpsc::channel();
        let (thread, first) = Thread::start_with_requests(
            "idem-test",
            Duration::from_millis(1),
            false,
            move || {
                let _ = ran.send(());
            },
            move || {
                if let Some(r) = again.get() {
                    super::maintenance::Requester::request(r);
                }
            },
        )
        .unwrap();
        let _ = requester.set(first.clone());
        first.request();
        for _ in 0..3 {
            runs.recv_timeout(Duration::from_secs(60))
                .expect("the periodic task ran");
        }
        thread.stop();
    }

    /// The periodic task still runs on its own period beside requests.
    #[test]
    fn the_periodic_task_runs_without_requests() {
        let (ran, runs) = mpsc::channel();
        let (thread, _requester) = Thread::start_with_requests(
            "idem-test",
            Duration::from_millis(1),
            false,
            move || {
                let _ = ran.send(());
            },
            || {},
        )
        .unwrap();
        for _ in 0..3 {
            runs.recv_timeout(Duration::from_secs(60))
                .expect("the periodic task ran");
        }
        thread.stop();
    }
}

/// Reserves every shard's preallocated index of `cfg` into `held` (given back
/// untouched when it drops: see `Index::reserve_for_shards`); false if the
/// allocator refuses.
fn reserve_preallocation(cfg: &NamespaceConfig, held: &mut crate::hot::index::Reserved) -> bool {
    let (shards, room) = shards_and_room(cfg);
    crate::hot::index::Index::reserve_for_shards(room, shards, held)
}

/// A namespace's shard count, and the entries each shard's index is made for at
/// once: its share of `max_keys` if preallocated, else that share up to
/// [`EARLY_ROOM`] (it grows from there).
fn shards_and_room(cfg: &NamespaceConfig) -> (usize, usize) {
    let shards = cfg.shards.unwrap_or_else(|| default_shards(cfg.max_keys));
    let share = cfg.max_keys.div_ceil(shards.max(1));
    let room = if cfg.preallocate {
        share
    } else {
        share.min(EARLY_ROOM)
    };
    (shards, room)
}

/// The entries a shard's index has room for when it is made, unless its share of
/// `max_keys` is smaller: 64 buckets, one 4 KiB page. An index that started empty
/// was rebuilt nine times on its way to 256 buckets, each time inside the claim
/// that filled it, and the rebuilds from 8 buckets on took 1.5-6 us each (W3:
/// about 200 of a run's slow claims, in its first tenth; BENCHMARKS.md, 2026-12-04,
/// 20:05-21:15 UTC). The page is the index's own at any size past it. From it on,
/// each doubling moves into a spare array (`Index::small_spare_wanted`).
const EARLY_ROOM: usize = 672;

const _: () = assert!(crate::hot::index_capacity(64) == EARLY_ROOM);

/// The bytes a preallocated namespace of `cfg` makes at build: its shards' indexes
/// and its slab (`None` past what a count of bytes can hold).
fn preallocated_bytes(cfg: &NamespaceConfig) -> Option<usize> {
    let (shards, room) = shards_and_room(cfg);
    let index = crate::hot::index::Index::bytes_for(room)?.checked_mul(shards)?;
    let slab = Reservoir::preallocated_bytes(cfg.max_keys, shards * crate::hot::LANES)?;
    index.checked_add(slab)
}

/// `Ok` if what the preallocated ones of `namespaces` make at build fits in `limit`
/// bytes (the memory this process may use; `None`: unknown, so no bound); else the
/// error naming the first namespace that takes the sum past it. Under Linux's
/// overcommit such an allocation is granted and writing it ends the process, so it
/// is refused before anything is made.
fn preallocations_fit(
    namespaces: &[(String, NamespaceConfig)],
    limit: Option<usize>,
) -> Result<()> {
    let Some(limit) = limit else {
        return Ok(());
    };
    let mut total: usize = 0;
    for (name, cfg) in namespaces.iter().filter(|(_, c)| c.preallocate) {
        total = preallocated_bytes(cfg).map_or(usize::MAX, |b| total.saturating_add(b));
        if total > limit {
            return Err(Error::OutOfMemory {
                namespace: name.clone(),
                what: "the preallocated index and slab (NamespaceConfig::preallocate): more than the memory this process may use (the machine's, or its cgroup's limit); size max_keys to the machine or set preallocate(false)",
            });
        }
    }
    Ok(())
}

fn preallocation_refused(name: &str) -> Error {
    Error::OutOfMemory {
        namespace: name.to_owned(),
        what: "the preallocated index and slab (NamespaceConfig::preallocate)",
    }
}

/// The error of a build whose shards' indexes could not be made with their room:
/// the preallocated index, or (not preallocated) the first page of each.
fn index_refused(name: &str, preallocate: bool) -> Error {
    if preallocate {
        return preallocation_refused(name);
    }
    Error::OutOfMemory {
        namespace: name.to_owned(),
        what: "the shards' first index pages",
    }
}

/// `shards` empty shards whose indexes have room for `room` entries each, or `None`
/// if those indexes cannot be allocated.
fn new_slots(shards: usize, now_tick: u64, room: usize) -> Option<Box<[SlotCell]>> {
    (0..shards)
        .map(|_| ShardSlot::new(now_tick, room).map(SlotCell::new))
        .collect()
}

/// About how many entries the maintenance pass expires (or moves down the wheel)
/// under one hold of a shard's lock (see `NsInner::expire_all`). A claim arriving
/// at a shard being expired waits for the batch in hand (and the rest of the wheel
/// bucket it ends in, which is processed whole): a few entries, each a few cache
/// misses (its index bucket, its slab entry) on a thread whose caches do not hold
/// them, take about a microsecond. A claim waiting that long spins, where one that
/// waits longer parks, and a parked thread took about 100 us to wake on the
/// benchmark VM (BENCHMARKS.md, 2026-12-04, 20:05-21:15 UTC).
const EXPIRY_BATCH: usize = 4;

/// How long the expiry pass gives a thread that waits for a shard's lock to take it,
/// before taking it again itself, when it comes back to that shard with nothing else
/// left to do in between (see `make_way`): long enough for a parked waiter to wake
/// (about 100 us on the benchmark VM). (Loom models do not wait.)
#[cfg_attr(idem_loom, allow(dead_code))]
const MAKE_WAY_FOR: std::time::Duration = std::time::Duration::from_micros(200);

/// Before the expiry pass takes again the lock of shard `i` (`slot`), which it left
/// because a thread waited for it: waits, up to [`MAKE_WAY_FOR`], until no thread
/// waits any more (a waiter stops counting itself once it has the lock). Without
/// this, the pass would take the lock back at once when that shard is the last one
/// left, as it did before waiters were counted.
fn make_way(slot: &SlotCell, #[cfg_attr(not(test), allow(unused_variables))] i: usize) {
    // (Under loom every read of the count is a step of the model: no waiting there.)
    #[cfg(not(idem_loom))]
    if slot.wanted() {
        #[cfg(test)]
        let bound = tests::make_way_for();
        #[cfg(not(test))]
        let bound = MAKE_WAY_FOR;
        let since = std::time::Instant::now();
        while slot.wanted() && since.elapsed() < bound {
            #[cfg(test)]
            tests::making_way(i);
            std::hint::spin_loop();
            std::thread::yield_now();
        }
    }
    #[cfg(idem_loom)]
    let _ = slot;
}

/// How much room a claim that finds a durable namespace's hot tier full makes at
/// once, at most: the expired keys it reclaims, and done keys dropped from the hot
/// tier (their durable records answer for them) up to this many in all, so that the
/// claims after it find room without walking every shard again (see
/// `NsInner::claim_one`). A namespace of fewer than `8 * EVICTION_GROUP` keys makes
/// an eighth of its `max_keys` (see [`eviction_group`]).
const EVICTION_GROUP: usize = 64;

/// The fewest keys a shard gives to a full eviction group (of `EVICTION_GROUP`) at
/// its turn when it holds twice as many (never more than half its keys at one turn;
/// see `NsInner::evict`); a smaller group asks for as much less.
const EVICTION_SHARE: usize = 8;

/// The eviction group of a namespace of `max_keys` keys: an eighth of them, at least
/// one and at most [`EVICTION_GROUP`], so that a full small namespace keeps most of
/// its done keys in memory, where a whole group would drop every one of them.
pub(crate) fn eviction_group(max_keys: usize) -> usize {
    (max_keys / 8).clamp(1, EVICTION_GROUP)
}

/// How many times one claim may find the pool empty and collect room from other
/// shards' reserves before it takes the refusal path (see `NsInner::claim_one`).
const MAX_COLLECTIONS: u32 = 4;

/// How many units of capacity a shard of a namespace of `max_keys` keys in `shards`
/// shards takes from the pool at once: 64, or less in a namespace too small for every
/// shard to hold a few chunks, so that its room does not sit in a few shards'
/// reserves while the others' claims collect it.
pub(crate) fn reserve_chunk(max_keys: usize, shards: usize) -> usize {
    (max_keys / (4 * shards.max(1))).clamp(1, 64)
}

/// The shard count for a namespace of `max_keys` keys.
///
/// A shard's index has a power-of-two number of 12-slot buckets, filled to at most
/// 7/8 of its slots. The count is chosen so that, when the namespace is full, every
/// shard sits just under such a threshold (with 3% headroom for uneven spread): at the
/// sizing point each key then costs about 8/7 index slots instead of up to 16/7.
pub(crate) fn default_shards(max_keys: usize) -> usize {
    const MIN: usize = 32;
    const MAX: usize = 1024;
    for bits in (4..=24).rev() {
        let per_shard = crate::hot::index_capacity(1usize << bits) * 97 / 100;
        let shards = max_keys.div_ceil(per_shard);
        if shards >= MIN {
            return shards.min(MAX);
        }
    }
    MIN
}

/// What the calling thread's last single claims answered, to choose how its next one
/// starts. A consumer's stream is mostly new keys (then the claim takes the shard's
/// lock at once, the lines it will write asked for first) or, in a replay or a
/// redelivery storm, mostly duplicates (then a read without the lock answers most, and
/// writes nothing two threads would pass between their cores). After [`LIKELY`]
/// duplicates in a row a thread reads first; any other answer sends it back to the
/// lock. The state is one byte per thread; guessing wrong costs a look-up's
/// instructions, never a wrong answer.
#[cfg(not(idem_loom))]
mod recent {
    use crate::{Claim, Result};
    use std::cell::Cell;

    /// Duplicates in a row after which a thread's single claims read first.
    pub(super) const LIKELY: u8 = 2;

    std::thread_local! {
        /// The calling thread's duplicates in a row, up to [`LIKELY`].
        static RUN: Cell<u8> = const { Cell::new(0) };
    }

    /// Whether the calling thread's next single claim is likely a duplicate.
    #[inline(always)]
    pub(super) fn duplicates() -> bool {
        RUN.with(|r| r.get() >= LIKELY)
    }

    /// Notes what a single claim answered.
    #[inline(always)]
    pub(super) fn note(claim: &Result<Claim>) {
        let dup = matches!(claim, Ok(Claim::Duplicate(_)));
        RUN.with(|r| r.set(if dup { (r.get() + 1).min(LIKELY) } else { 0 }));
    }

    /// Starts the calling thread afresh (tests).
    #[cfg(test)]
    pub(super) fn forget() {
        RUN.with(|r| r.set(0));
    }
}

/// What a batch lends each of its claims for lock-free duplicate reads: its pin, and
/// its count of duplicates answered so.
type LockFree<'a> = Option<(&'a crate::hot::reclaim::Pin, &'a mut u64)>;

/// One namespace's state, shared by its handles and guards.
pub(crate) struct NsInner {
    name: String,
    cfg: NamespaceConfig,
    params: Params,
    seed: u64,
    clock: std::sync::Arc<dyn Clock>,
    slots: Box<[SlotCell]>,
    pool: AtomicUsize,
    /// How many units of capacity a shard takes from `pool` at once.
    reserve_chunk: usize,
    durable: Option<DurableNs>,
    /// Slab chunks made ahead for the shards (see [`Reservoir`]).
    chunks: Reservoir,
    /// Forgets that found the key's completion being written and waited for it.
    forget_waits: AtomicU64,
    /// Duplicates answered without a shard lock (counted apart from the shards').
    lock_free_duplicates: crate::hot::reclaim::OwnedCounter,
    /// A claim asked for a shard's spare index array since the maintenance thread
    /// last looked (see `NsInner::make_index_spares`).
    index_spare_asked: std::sync::atomic::AtomicBool,
    /// The latest time the namespace has read from its clock (ms): a clock stepped
    /// backwards reads as stopped here until it passes this again (see [`Clock`]).
    latest_ms: std::sync::atomic::AtomicU64,
    /// The shard the next eviction group begins at (see `NsInner::evict`).
    evict_from: AtomicUsize,
    /// How much room a claim that finds the hot tier full makes at once (see
    /// [`eviction_group`]).
    eviction_group: usize,
}

impl NsInner {
    /// A namespace named `name` of `cfg`, whose slab chunks come from `chunks` (made
    /// whole already if `cfg` preallocates: see `Reservoir::preallocated`).
    #[allow(clippy::too_many_arguments)]
    fn new(
        name: String,
        cfg: NamespaceConfig,
        chunks: Reservoir,
        seed: u64,
        epoch_ms: u64,
        tick_ms: u64,
        clock: std::sync::Arc<dyn Clock>,
        durable: Option<DurableNs>,
    ) -> Result<Self> {
        let (shards, room) = shards_and_room(&cfg);
        let params = Params {
            epoch_ms,
            tick_ms,
            ttl_ms: cfg.ttl.as_millis() as u64,
            lease_ms: cfg.lease.as_millis() as u64,
            sliding: cfg.extend_on_duplicate,
            retention_ms: durable
                .as_ref()
                .map(|_| cfg.get_retention().as_millis() as u64),
        };
        // The wheels start at this reading, so the namespace's time never goes below
        // it (see `NsInner::now_ms`); nor below the engine's epoch, read before it: a
        // clock stepped back in between (the durable tier's open runs there) reads as
        // stopped at the epoch, as a step back reads within a run. Ticks count from
        // the epoch, so a time before it would place deadlines as if made at the
        // epoch, and completion times derived from them would read late.
        let start_ms = crate::clock::read_capped(&*clock).max(epoch_ms);
        let now_tick = params.now(start_ms).tick;
        let slots = new_slots(shards, now_tick, room)
            .ok_or_else(|| index_refused(&name, cfg.preallocate))?;
        // A shard's index asks for a spare array for a doubling only to grow past
        // its share of `max_keys` (see `Index::spare_wanted`).
        let share = cfg.max_keys.div_ceil(shards.max(1));
        for slot in slots.iter() {
            let mut shard = slot.lock();
            shard.set_index_share(share);
            if cfg.preallocate {
                shard.stock_lanes(|| chunks.take());
            }
        }
        if let Some(d) = &durable {
            d.note_time(start_ms);
        }
        let pool = AtomicUsize::new(cfg.max_keys);
        let reserve_chunk = reserve_chunk(cfg.max_keys, shards);
        let cfg_max_keys = cfg.max_keys;
        Ok(NsInner {
            name,
            cfg,
            params,
            seed,
            clock,
            slots,
            pool,
            reserve_chunk,
            durable,
            chunks,
            forget_waits: AtomicU64::new(0),
            lock_free_duplicates: Default::default(),
            index_spare_asked: std::sync::atomic::AtomicBool::new(false),
            latest_ms: std::sync::atomic::AtomicU64::new(start_ms),
            evict_from: AtomicUsize::new(0),
            eviction_group: eviction_group(cfg_max_keys),
        })
    }

    /// The last handle is going (`this` is its reference): every shard that still
    /// counts guards keeps a reference of its own, which the guard that ends its
    /// last count lets go ([`Shard::orphan`](crate::hot::Shard)). No guard is made
    /// after this: claims need a handle.
    fn orphan(this: &Arc<NsInner>) {
        for slot in this.slots.iter() {
            slot.lock().orphan(|| Box::new(Arc::clone(this)));
        }
    }

    /// Reads the claim markers left by a previous run: reports each as an orphan,
    /// places the live ones in the hot tier until their lease runs out, and deletes
    /// the markers of the expired ones, and of claims completed after all (see
    /// [`DurableNs::completed_by`]; the journal's were settled before).
    #[cfg(feature = "durable")]
    fn load_orphans(
        &self,
        store: &crate::durable::Store,
        journal: &crate::durable::JournalTakeover,
    ) -> Result<(Vec<Orphan>, Vec<u128>)> {
        let now = self.now();
        let mut out = Vec::new();
        let mut expired = Vec::new();
        let mut unheld = 0usize;
        // The old journal's live markers are about to replace the `claims:` records
        // of their keys; its damaged slots are reported beside them.
        let (moved, damaged) = (journal.moved.as_slice(), journal.damaged.as_slice());
        let replaced: crate::durable::FpSet = moved.iter().map(|(fp, _)| *fp).collect();
        // Each with whether its marker is a `claims:` record (a journal's damaged
        // slot is not: its file is kept aside instead).
        let scanned = store
            .scan_claims(&self.name)?
            .into_iter()
            .filter(|(fp, _)| !replaced.contains(fp));
        let mut scanned_live = Vec::new();
        for (fp, rec) in scanned {
            match (&rec, &self.durable) {
                (Ok(marker), Some(d)) if d.completed_by(fp, marker)? => expired.push(fp),
                _ => scanned_live.push((fp, rec, true)),
            }
        }
        let from_journal = moved
            .iter()
            .map(|(fp, rec)| (*fp, Ok(rec.clone()), true))
            .chain(damaged.iter().map(|(fp, why)| (*fp, why.clone(), false)));
        for (fp, rec, recorded) in scanned_live.into_iter().chain(from_journal) {
            match rec {
                Ok(rec) => {
                    let mut held = false;
                    if rec.expires_ms > now.ms {
                        let f = Fp::from_u128(fp);
                        let si = f.shard(self.slots.len());
                        let cap = self.capacity();
                        // A lease written under a coarser tick (or before the wall
                        // clock went back) may end further ahead than a 32-bit
                        // deadline reaches: it is held for the longest lease the
                        // tick allows instead of wrapping round to "expired".
                        let deadline = self
                            .params
                            .tick_at(rec.expires_ms)
                            .min(now.tick + crate::hot::MAX_DEADLINE_TICKS);
                        held = self.slots[si]
                            .lock()
                            .insert_orphan(f, deadline, rec.payload, &cap);
                        if !held && self.collect_reserves() > 0 {
                            // Room was left in other shards' reserves.
                            held =
                                self.slots[si]
                                    .lock()
                                    .insert_orphan(f, deadline, rec.payload, &cap);
                        }
                        if let Some(d) = &self.durable {
                            d.note_marker_on_disk(fp);
                        }
                        if !held {
                            unheld += 1;
                        }
                    } else {
                        expired.push(fp);
                    }
                    out.push(Orphan {
                        namespace: self.name.clone(),
                        fingerprint: fp,
                        claimed_at_ms: rec.at_ms,
                        lease_expires_at_ms: rec.expires_ms,
                        corrupt: None,
                        held,
                    });
                }
                Err(reason) => {
                    // The record is kept (and reported at each open) until the key's
                    // next claim settles: its completion or release deletes it too,
                    // where a marker mode that writes no record of its own would
                    // leave it for good.
                    if let (true, Some(d)) = (recorded, &self.durable) {
                        d.note_marker_on_disk(fp);
                    }
                    out.push(Orphan {
                        namespace: self.name.clone(),
                        fingerprint: fp,
                        claimed_at_ms: 0,
                        lease_expires_at_ms: 0,
                        corrupt: Some(reason),
                        held: false,
                    })
                }
            }
        }
        if !out.is_empty() {
            tracing::warn!(
                namespace = %self.name,
                orphans = out.len(),
                "claims in flight at the last shutdown were never completed"
            );
        }
        if unheld > 0 {
            tracing::warn!(
                namespace = %self.name,
                unheld,
                max_keys = self.cfg.max_keys,
                "max_keys cannot hold every live orphan; those keys are claimable at once"
            );
        }
        Ok((out, expired))
    }

    /// Drops up to `max` done entries (durable namespaces: they stay in the durable
    /// tier) to make room in a full hot tier.
    ///
    /// The shards take turns, each giving a share of the group (at least
    /// [`EVICTION_SHARE`] keys of a full group, an eighth of a smaller one, so that a
    /// group takes few locks when there are many shards), and a group begins at the shard after the last one's: each shard's
    /// own keys go oldest first (its hand), so the shares keep the dropped keys near
    /// the oldest of the namespace, where one shard giving whole groups would drop its
    /// new keys while older ones stayed in the others. A turn takes at most half the
    /// keys its shard holds: a shard of fewer keys than a share would otherwise give
    /// its newest too, while the shards after it kept all theirs. A shard gives more
    /// than its older half only in a later round, once every other shard has given
    /// its own or has no done key left.
    fn evict(&self, max: usize) -> usize {
        use std::sync::atomic::Ordering as O;
        let n = self.slots.len();
        let least = (EVICTION_SHARE * self.eviction_group / EVICTION_GROUP).max(1);
        let share = max.div_ceil(n).max(least);
        let mut si = self.evict_from.load(O::Relaxed) % n;
        let mut dropped = 0;
        // A shard that gave less than it was asked has looked at every entry it
        // holds: it is not asked again in this group (else each round would walk
        // every shard without done keys once more).
        let mut dry = vec![false; n];
        let mut left = n;
        while dropped < max && left > 0 {
            if !dry[si] {
                let cap = self.capacity();
                let mut shard = self.slots[si].lock();
                let want = share.min(max - dropped).min(shard.len().div_ceil(2));
                let got = shard.evict_done(want, &cap);
                drop(shard);
                dropped += got;
                // (An empty shard is asked for nothing, and gives it.)
                if got < want || got == 0 {
                    dry[si] = true;
                    left -= 1;
                }
            }
            si = (si + 1) % n;
        }
        self.evict_from.store(si, O::Relaxed);
        dropped
    }

    /// One claim, without writing its claim marker: the caller writes the markers
    /// (one write for a whole batch) and gets them back from here, in `marker` (one
    /// slot, so that a single claim needs no vector).
    ///
    /// `now` is the time the claim is made at (a batch reads the clock once); `lane`
    /// is the calling thread's ([`crate::hot::lane`], read once a claim or a batch).
    fn claim_one(
        this: &Arc<Self>,
        fp: Fp,
        payload: Option<u64>,
        now: &mut Now,
        marker: &mut Option<(u128, Record)>,
        #[cfg_attr(idem_loom, allow(unused_variables))] lock_free: LockFree<'_>,
        lane: usize,
    ) -> Result<Claim> {
        let si = fp.shard(this.slots.len());
        // In a batch, the common duplicate is answered without the lock if nothing
        // moves (see `ShardSlot::optimistic_duplicate`), and counted by the batch.
        #[cfg(not(idem_loom))]
        if let (Some((pin, answered)), None) = (lock_free, payload) {
            if let Some((completed_at_ms, expires_at_ms, result)) =
                this.slots[si].optimistic_duplicate(fp, &this.params, *now, pin)
            {
                *answered += 1;
                return Ok(Claim::Duplicate(Done {
                    completed_at_ms,
                    expires_at_ms,
                    result,
                }));
            }
        }
        // The refusal path: `retried` once expired keys were reclaimed everywhere, and
        // then the last attempt is made holding every shard's lock.
        let mut retried = false;
        let mut collections = 0;
        loop {
            let cap = this.capacity();
            let mut store_error = None;
            let answer = if retried {
                #[cfg(test)]
                tests::before_exclusive_claim();
                this.claim_exclusive(si, fp, payload, now, &cap, &mut store_error)
            } else {
                let mut shard = this.slots[si].lock();
                // Never behind the shard's wheel (see `Shard::not_behind`): a lease
                // set from an earlier reading could end before it was granted.
                *now = shard.not_behind(&this.params, *now);
                let now = *now;
                let found = shard.look_up(fp, now, &cap);
                let p = &this.params;
                // A duplicate the lock-free read could not answer (a writer was
                // inside) is answered here, without the general path.
                if let Some(idx) = found {
                    if let Some((completed_at_ms, expires_at_ms, result)) =
                        shard.live_duplicate(idx, payload, p, now)
                    {
                        drop(shard);
                        return Ok(Claim::Duplicate(Done {
                            completed_at_ms,
                            expires_at_ms,
                            result,
                        }));
                    }
                }
                if found.is_none() && this.durable.is_none() {
                    shard.claim_new(fp, payload, p, now, &cap, lane)
                } else {
                    this.claim_found(
                        &mut shard,
                        found,
                        fp,
                        payload,
                        now,
                        &cap,
                        &mut store_error,
                        false,
                    )
                }
            };
            return match answer {
                ShardClaim::Acquired {
                    lease,
                    wants_spare,
                    wants_index_spare,
                    makes_index_spare,
                } => {
                    if wants_spare {
                        // Outside the lock: see `Slab::wants_spare`.
                        let chunk = this.chunks.take();
                        let unused = this.slots[si].lock().give_spare(chunk);
                        if let Some(chunk) = unused {
                            this.chunks.give_back(chunk);
                        }
                    }
                    this.make_index_spare(si, makes_index_spare);
                    if wants_index_spare {
                        // Made on the maintenance thread: see `NsInner::make_index_spares`.
                        this.index_spare_asked.store(true, Ordering::Release);
                        this.chunks.ask_for_top_up();
                    }
                    if this.durable.is_some() {
                        *marker = Some((
                            fp.to_u128(),
                            Record {
                                state: RecordState::InProgress,
                                token: lease.token,
                                at_ms: now.ms,
                                expires_ms: this.params.tick_to_ms(lease.deadline),
                                payload,
                                result: None,
                            },
                        ));
                    }
                    Ok(Claim::Acquired(ClaimGuard {
                        ns: std::ptr::NonNull::from(&**this),
                        fp,
                        shard: si as u32,
                        lease,
                        marker_ms: 0,
                        armed: true,
                        counted: true,
                    }))
                }
                ShardClaim::InProgress {
                    lease_expires_at_ms,
                } => Ok(Claim::InProgress(InFlight {
                    lease_expires_at_ms,
                    seen_at_ms: now.ms,
                })),
                ShardClaim::Duplicate {
                    completed_at_ms,
                    expires_at_ms,
                    result,
                    extend,
                    makes_index_spare,
                } => {
                    this.make_index_spare(si, makes_index_spare);
                    if let Some(x) = &extend {
                        this.extend_record(si, fp, x, result.as_deref())?;
                    }
                    Ok(Claim::Duplicate(Done {
                        completed_at_ms,
                        expires_at_ms,
                        result,
                    }))
                }
                ShardClaim::PayloadMismatch => Err(Error::PayloadMismatch),
                ShardClaim::StoreFailed => Err(store_error.unwrap_or(Error::NotDurable)),
                ShardClaim::Full | ShardClaim::FullForWindow(_)
                    if !retried && collections < MAX_COLLECTIONS && this.collect_reserves() > 0 =>
                {
                    // Other shards' reserves held room: it is in the pool now. (Bounded:
                    // other shards' refills may take the collected room into their own
                    // reserves first; the exclusive attempt below settles it.)
                    collections += 1;
                    continue;
                }
                ShardClaim::Full | ShardClaim::FullForWindow(_) if !retried => {
                    // Expired keys elsewhere may still hold capacity: reclaim them;
                    // with a durable tier, done keys may also leave the hot tier, so
                    // that with the room reclaimed an eviction group (`eviction_group`)
                    // is free for this claim and the ones after it (no unexpired key
                    // leaves when the expired ones made that room). Then one last
                    // attempt with every shard's lock held (`claim_exclusive`).
                    retried = true;
                    let reclaimed = this.expire_all(*now);
                    let group = this.eviction_group;
                    if this.durable.is_some() && reclaimed < group {
                        this.evict(group - reclaimed);
                    }
                    // (A batch goes on from this reading too.)
                    *now = this.now();
                    continue;
                }
                ShardClaim::FullForWindow(d) => {
                    // No room even after eviction (every resident key is in progress):
                    // answered as the record stands, the window not restarted.
                    this.slots[si].lock().counters.duplicates += 1;
                    Ok(Claim::Duplicate(Done {
                        completed_at_ms: d.completed_at_ms,
                        expires_at_ms: d.expires_at_ms,
                        result: d.result,
                    }))
                }
                ShardClaim::Full => {
                    this.slots[si].lock().counters.capacity_refusals += 1;
                    Err(Error::CapacityExceeded {
                        namespace: this.name.clone(),
                        max_keys: this.cfg.max_keys,
                    })
                }
            };
        }
    }

    /// Rewrites a sliding window's done record with the later expiry its sighting
    /// needs (see [`Extension`]), outside the shard lock. If the store fails (and the
    /// namespace fails closed) the claim returns the error and the hot tier goes back
    /// to the window the record covers, so the next sighting tries again.
    ///
    /// The record is read first (unless the sighting has just read it), and left as
    /// it is if it already lasts as long: the hot tier knows what the record covers
    /// only from the completion time and its own deadline, which can fall short of
    /// the record (a clock set back across a restart, or a deadline rounded to a
    /// coarse tick), and a rewrite from there would shorten the record.
    #[cold]
    fn extend_record(&self, si: usize, fp: Fp, x: &Extension, result: Option<&[u8]>) -> Result<()> {
        let Some(d) = &self.durable else {
            return Ok(());
        };
        let record = Record {
            state: RecordState::Done,
            token: x.token,
            at_ms: x.completed_at_ms,
            expires_ms: x.expires_ms,
            payload: x.payload,
            result: result.map(<[u8]>::to_vec),
        };
        // The read and the write both unwind through here, so that the entry is
        // never left marked completing.
        let stored = write_unwinding(|| {
            if !x.read_back() {
                match d.needs_extension(fp, x.expires_ms)? {
                    Some(true) => {}
                    // The record lasts as long already.
                    Some(false) => return Ok((Stored::Yes, None)),
                    // Unreadable, and the namespace fails open.
                    None => return Ok((Stored::HotOnly, None)),
                }
            }
            // Only the first record of a completion decided from the hot tier alone
            // (fail open, the store refusing) settles markers: its claim's, kept
            // until a record would say the key is done. Any other rewrite settles
            // none: a marker of the key left then is another claim's, in flight.
            d.rewrite_records(&[(fp.to_u128(), record)], x.settles)
        });
        // A write that was applied and whose fsync then failed (the namespace fails
        // closed) left the record extended: every reader sees it, and the next open
        // replays it. The hot tier keeps the window the record now holds, and the
        // claim still returns the error (not counted as a duplicate).
        let (kept, unsynced) = match &stored {
            Ok(Ok((kept, unsynced))) => (*kept, unsynced.is_some()),
            _ => (Stored::No, false),
        };
        let cap = self.capacity();
        {
            let mut shard = self.slots[si].lock();
            shard.finish_extension(fp, x, kept, &cap);
            if unsynced {
                shard.counters.duplicates -= 1;
            }
        }
        match finished(stored)? {
            (_, Some(e)) => Err(e),
            (_, None) => Ok(()),
        }
    }

    /// Writes the claim markers of `claims`. On a failure that the namespace does not
    /// fail open on, the claims are released (dropped) and the error returned.
    fn write_markers(&self, markers: &[(u128, Record)]) -> Result<()> {
        match &self.durable {
            Some(d) if !markers.is_empty() => {
                if d.defer_markers(markers) {
                    Ok(())
                } else {
                    d.write_claims(markers, &|| self.sweep_markers(d, self.now()))
                }
            }
            _ => Ok(()),
        }
    }

    /// The sweep of claims given up without an end (a guard leaked, a completion
    /// refused for its input, a fail-open completion kept in the hot tier alone
    /// that has since left it): frees the journal slots of their markers, which no
    /// completion or release would ever clear. Each journal marker whose lease has
    /// ended by `now` is judged under its key's shard lock (`Shard::sweep_claim`):
    /// if its claim still holds the key (its lease extended, a completion or marker
    /// write in flight, a fail-open completion still answering from the hot tier)
    /// the marker stays, to be looked at again; otherwise the claim is over (its
    /// entry, still in progress past its deadline and not completing, is reclaimed
    /// there, so that a completion after it is refused with `LeaseLost` and writes
    /// nothing), and its marker is cleared, by token, before the lock goes. So a
    /// marker is never cleared while its claim could still write its done record:
    /// after a crash the claims held then are still exactly those reported.
    /// Returns how many markers were cleared. Cheap when no marker's lease has
    /// ended: one atomic load.
    fn sweep_markers(&self, d: &DurableNs, now: Now) -> usize {
        let ended = d.ended_markers(now.ms);
        if ended.is_empty() {
            return 0;
        }
        let cap = self.capacity();
        let mut cleared = 0;
        for (fp, token) in ended {
            let key = Fp::from_u128(fp);
            let mut shard = self.slots[key.shard(self.slots.len())].lock();
            let now = shard.not_behind(&self.params, now);
            match shard.sweep_claim(key, token, now, &cap) {
                None => cleared += usize::from(d.sweep_marker(fp, token)),
                Some(tick) => d.look_again_at(self.params.tick_to_ms(tick).max(now.ms + 1)),
            }
        }
        cleared
    }

    /// The sweep of this run's claim markers in RocksDB (a `Deferred` namespace's
    /// flushed markers, a journal's overflows) whose claims were given up without an
    /// end, as [`NsInner::sweep_markers`] sweeps the journal's: each marker whose
    /// lease has ended by `now` is judged under its key's shard lock by the same
    /// `Shard::sweep_claim` (an entry still in progress past its deadline and not
    /// completing is reclaimed there, so nothing of the claim is written after),
    /// and those of claims that are over are deleted afterwards, with no shard lock
    /// held, in one write, each only if still that claim's
    /// ([`DurableNs::sweep_on_disk`]): a claim over stays over, so the delete may
    /// come after the lock. From the maintenance pass only: deleting a marker in
    /// RocksDB frees no journal slot. Returns how many were deleted. Cheap when no
    /// such marker's lease has ended: one atomic load.
    fn sweep_markers_on_disk(&self, d: &DurableNs, now: Now) -> usize {
        let ended = d.ended_on_disk(now.ms);
        if ended.is_empty() {
            return 0;
        }
        let cap = self.capacity();
        let mut over = Vec::new();
        for (fp, token) in ended {
            let key = Fp::from_u128(fp);
            let mut shard = self.slots[key.shard(self.slots.len())].lock();
            let now = shard.not_behind(&self.params, now);
            match shard.sweep_claim(key, token, now, &cap) {
                None => over.push((fp, token)),
                Some(tick) => d.look_again_on_disk(self.params.tick_to_ms(tick).max(now.ms + 1)),
            }
        }
        d.sweep_on_disk(&over, now.ms)
    }

    /// Starts loading the index bucket of `fp` into the cache, ahead of its claim;
    /// returns the key's shard slot.
    #[inline]
    fn prefetch(&self, fp: Fp) -> &SlotCell {
        let slot = &self.slots[fp.shard(self.slots.len())];
        crate::hot::prefetch(slot.hint(), fp.lo);
        slot
    }

    /// As [`NsInner::prefetch`], and asks for the lines of the key's shard that a
    /// claim under its lock writes ([`ShardSlot::prefetch_write`]); returns that
    /// shard's slot (`lane`: the calling thread's). Not for a batch: its duplicates
    /// are read without the lock and write nothing, and taking those lines from
    /// another core that reads them too would only move them back and forth.
    #[inline]
    fn prefetch_to_lock(&self, fp: Fp, lane: usize) -> &SlotCell {
        let slot = self.prefetch(fp);
        slot.prefetch_write(lane);
        slot
    }

    #[inline]
    fn now(&self) -> Now {
        self.params.now(self.now_ms())
    }

    /// The latest time the namespace has read, without asking the clock: for the
    /// ways out of a claim that must not read it (a drop while the thread unwinds,
    /// where a clock that panics again would abort the process).
    fn latest(&self) -> Now {
        self.params
            .now(self.latest_ms.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// The clock's time, never earlier than any the namespace read before. Deadlines
    /// are 32-bit tick counts placed in a wheel that only moves forward: a time
    /// before the wheel's would park new deadlines wrongly, and one more than 2^31
    /// ticks back would read live keys as expired. Capped at [`LATEST_MS`](crate::clock::LATEST_MS).
    #[inline]
    fn now_ms(&self) -> u64 {
        use std::sync::atomic::Ordering as O;
        let ms = self.clock.now_ms();
        let latest = self.latest_ms.load(O::Relaxed);
        if ms > latest {
            // At most once a clock step per thread: the line is read far more often.
            // (The cap only here: `latest` never passes it.)
            let ms = ms.min(crate::clock::LATEST_MS);
            self.latest_ms.fetch_max(ms, O::Relaxed);
            if let Some(d) = &self.durable {
                d.note_time(ms);
            }
            ms
        } else {
            latest
        }
    }

    #[inline]
    fn capacity(&self) -> Capacity<'_> {
        Capacity {
            pool: &self.pool,
            chunk: self.reserve_chunk,
        }
    }

    /// The last attempt of a claim that found no room: every shard's lock is taken, in
    /// order, and every reserve moved into the pool, so that nothing else can move a
    /// unit of capacity (units move only under some shard's lock) while the claim is
    /// decided. `Full` then means the namespace holds `max_keys` keys, whatever other
    /// threads were doing: a refusal is never caused by room parked in a reserve.
    ///
    /// Deadlock-free: nothing else holds two shard locks at once, and two exclusive
    /// attempts take them in the same order. Costs a lock round on every shard, as
    /// the reclaim before it does: only a claim on its way to a refusal gets here.
    #[cold]
    fn claim_exclusive(
        &self,
        si: usize,
        fp: Fp,
        payload: Option<u64>,
        now: &mut Now,
        cap: &Capacity<'_>,
        store_error: &mut Option<Error>,
    ) -> ShardClaim {
        let mut shards: Vec<_> = self.slots.iter().map(|slot| slot.lock()).collect();
        *now = shards[si].not_behind(&self.params, *now);
        let now = *now;
        for shard in shards.iter_mut() {
            // Keys expired at this attempt's time (which may be later than the
            // reclaim before it) leave first: their room counts.
            shard.expire_due(now, cap);
            shard.surrender_reserve(cap);
        }
        let answer = {
            let shard = &mut shards[si];
            let found = shard.look_up(fp, now, cap);
            self.claim_found(shard, found, fp, payload, now, cap, store_error, true)
        };
        if self.durable.is_none()
            || !matches!(answer, ShardClaim::Full | ShardClaim::FullForWindow(_))
        {
            return answer;
        }
        // With a durable tier, a done key may leave the hot tier to make room. The
        // eviction before this attempt may have made room that other claims took
        // since: evict again, now that no claim can come in between. The key is taken
        // as a group's are (`evict`): from the shard whose turn is next, its oldest
        // by its hand, the turn then passing on, so that repeated last attempts do
        // not drop one shard's newest keys while the others keep older ones. (One key
        // is within the half of any shard that holds a key: a shard without a done
        // key gives nothing, and the next is asked, so a done key anywhere is found.)
        if !self.evict_one_in_turn(&mut shards, cap) {
            return answer;
        }
        for shard in shards.iter_mut() {
            shard.surrender_reserve(cap);
        }
        let shard = &mut shards[si];
        let found = shard.look_up(fp, now, cap);
        self.claim_found(shard, found, fp, payload, now, cap, store_error, true)
    }

    /// Drops one done entry, with every shard's lock held (`shards`, in index order):
    /// from the first shard, beginning at the one whose eviction turn is next
    /// (`evict_from`), that has one, then passes the turn to the shard after it.
    /// Returns whether an entry was dropped.
    fn evict_one_in_turn(&self, shards: &mut [ShardWrite<'_>], cap: &Capacity<'_>) -> bool {
        use std::sync::atomic::Ordering as O;
        let n = shards.len();
        let from = self.evict_from.load(O::Relaxed) % n;
        for k in 0..n {
            let si = (from + k) % n;
            if shards[si].evict_done(1, cap) > 0 {
                self.evict_from.store((si + 1) % n, O::Relaxed);
                return true;
            }
        }
        false
    }

    /// [`Shard::claim_found`](crate::hot::Shard) on `shard` (locked), asking this
    /// namespace's durable tier, if it has one, about keys the hot tier lacks;
    /// `last` on the claim's last attempt (the one that holds every lock).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn claim_found(
        &self,
        shard: &mut Shard,
        found: Option<u32>,
        fp: Fp,
        payload: Option<u64>,
        now: Now,
        cap: &Capacity<'_>,
        store_error: &mut Option<Error>,
        last: bool,
    ) -> ShardClaim {
        let p = &self.params;
        match &self.durable {
            None => shard.claim_found(found, fp, payload, p, now, cap, None, last),
            Some(d) => {
                let mut look = |f: Fp| d.lookup(f, now.ms, store_error);
                let answer =
                    shard.claim_found(found, fp, payload, p, now, cap, Some(&mut look), last);
                if let ShardClaim::Acquired { lease, .. } = &answer {
                    // Held until its marker is written (`ClaimGuard::marker_written`),
                    // and counted if a forget of the key runs (`Namespace::forget`).
                    shard.hold_new_claim(fp, lease.idx);
                }
                answer
            }
        }
    }

    /// Moves every shard's capacity reserve into the pool, taking each shard's lock in
    /// turn (never two at once): a claim whose shard found the pool empty collects
    /// them before it refuses, so no unit held in another shard's reserve turns a key
    /// away. Returns how many units moved.
    fn collect_reserves(&self) -> usize {
        let cap = self.capacity();
        self.slots
            .iter()
            .map(|slot| slot.lock().surrender_reserve(&cap))
            .sum()
    }

    #[inline]
    fn key_fp(&self, key: &[u8]) -> Result<Fp> {
        KeyError::check(key, self.cfg.max_key_len)?;
        Ok(Fp::from_u128(xxh3_128_with_seed(key, self.seed)))
    }

    /// Makes the spare of `buckets` (a claim's `makes_index_spare`) for shard `si`'s
    /// index (a small one at its mark, a large one at its late mark) and gives it to
    /// the shard, with no lock held while it is made.
    /// Refused by the allocator, the doubling allocates as it would anyway. Handed
    /// back if no longer wanted, and freed once the lock is let go.
    fn make_index_spare(&self, si: usize, buckets: Option<usize>) {
        if let Some(spare) = buckets.and_then(crate::hot::index::Spare::make) {
            let back = self.slots[si].lock().give_index_spare(spare);
            drop(back);
        }
    }

    /// Makes the spare bucket array of every shard whose index is to double soon
    /// (see `Shard::spare_pass`), and, on the periodic `pass`, frees the spares no
    /// longer needed: each array is made and freed with no lock held, and handed
    /// over under a short hold of its shard's lock.
    fn make_index_spares(&self, pass: bool) {
        for slot in self.slots.iter() {
            let (wanted, unneeded) = {
                let mut shard = slot.lock();
                if pass {
                    shard.spare_pass()
                } else {
                    (shard.spare_request(), None)
                }
            };
            drop(unneeded);
            let Some(buckets) = wanted else {
                continue;
            };
            // Refused by the allocator: the doubling allocates as it would anyway.
            let Some(spare) = crate::hot::index::Spare::make(buckets) else {
                continue;
            };
            // Handed back if no longer wanted (a claim doubled the index meanwhile),
            // and then freed here, once the statement has let the lock go.
            let back = slot.lock().give_index_spare(spare);
            drop(back);
        }
    }

    /// Reclaims every expired entry of every shard, [`EXPIRY_BATCH`] or so at a
    /// time: each batch under its own hold of the shard's lock, so that a claim on
    /// that shard waits for one batch, not for all the shard's expired entries.
    fn expire_all(&self, now: Now) -> usize {
        self.expire_all_within(now, EXPIRY_BATCH).0
    }

    /// [`NsInner::expire_all`] in batches of about `batch` entries; also returns
    /// how many holds of a shard lock it took.
    ///
    /// A shard whose lock another thread waits for when a batch ends (a claim,
    /// most likely) is left to it and finished after the others, so that the claim
    /// waits for one batch rather than for the shard's whole expiry: the lock is
    /// not fair, and taken again at once it would mostly stay with this thread
    /// until the waiter had spun and parked (a parked thread took about 100 us to
    /// wake on the benchmark VM). Each visit to such a shard expires a batch, so
    /// the call ends.
    fn expire_all_within(&self, now: Now, batch: usize) -> (usize, usize) {
        let (mut reclaimed, mut holds) = (0, 0);
        let cap = self.capacity();
        // Reclaims batches of shard `i` until it is done (true) or wanted (false).
        let mut expire = |i: usize| {
            let slot = &self.slots[i];
            loop {
                let (n, done) = slot.lock().expire_some(now, &cap, batch);
                reclaimed += n;
                holds += 1;
                #[cfg(test)]
                tests::after_expiry_batch(i);
                if done {
                    return true;
                }
                if slot.wanted() {
                    return false;
                }
            }
        };
        let mut later: Vec<usize> = (0..self.slots.len()).filter(|&i| !expire(i)).collect();
        while !later.is_empty() {
            later.retain(|&i| {
                make_way(&self.slots[i], i);
                !expire(i)
            });
        }
        (reclaimed, holds)
    }

    fn stats(&self) -> Stats {
        let mut s = Stats::default();
        for slot in self.slots.iter() {
            let shard = slot.lock();
            s.resident_keys += shard.len() as u64;
            s.hot_bytes += shard.heap_bytes() as u64;
            s.retired_bytes += slot.retired_bytes() as u64;
            s.add_counters(&shard.counters);
        }
        s.duplicates += self.lock_free_duplicates.sum();
        if let Some(d) = &self.durable {
            d.add_stats(&mut s);
        }
        s.hot_bytes += (self.slots.len() * std::mem::size_of::<SlotCell>()) as u64;
        s.hot_bytes += self.chunks.bytes() as u64;
        s
    }
}

/// A cheap, cloneable handle on one namespace. It is `Send + Sync`: share it between
/// worker threads or clone it into each.
#[derive(Clone)]
pub struct Namespace {
    inner: Arc<NsInner>,
    /// Held for its drop: see [`Keeper`].
    _keeper: std::sync::Arc<Keeper>,
}

/// Held by every handle of a namespace (the engine's and each [`Namespace`]); when
/// the last one goes, each shard that still counts claim guards is given a reference
/// to the namespace ([`NsInner::orphan`]), which the guard that ends the shard's last
/// count drops: the namespace is freed once its last handle and its last guard are.
///
/// A guard does not count references to its namespace: a reference count is two
/// locked read-modify-writes a fresh claim and its completion (one when the guard
/// is made, one when it goes), about 5 % of a memory-only claim + complete
/// (BENCHMARKS.md, 2026-12-02 late morning). A guard is counted instead in its
/// shard, under the shard lock that its claim and its completion take anyway; while
/// a handle is left, the handles keep the namespace alive, and after, the shards
/// that count guards do.
struct Keeper(Arc<NsInner>);

impl Keeper {
    fn new(ns: &Arc<NsInner>) -> std::sync::Arc<Keeper> {
        std::sync::Arc::new(Keeper(Arc::clone(ns)))
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        NsInner::orphan(&self.0);
    }
}

impl fmt::Debug for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Namespace")
            .field("name", &self.inner.name)
            .field("config", &self.inner.cfg)
            .finish()
    }
}

impl Namespace {
    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The namespace's configuration.
    pub fn config(&self) -> &NamespaceConfig {
        &self.inner.cfg
    }

    /// How many lock shards the namespace has: [`NamespaceConfig::shards`] if set,
    /// else the count derived from `max_keys`. A [`Router`](crate::Router) of as many
    /// workers as divide it gives each worker whole shards
    /// ([`Namespace::router`]).
    pub fn shard_count(&self) -> usize {
        self.inner.slots.len()
    }

    /// Claims `key`: atomically, exactly one of any number of concurrent claims of
    /// one key is `Acquired`.
    ///
    /// A thread whose last two claims (through this method, in any namespace) answered
    /// `Duplicate` reads its next one first without the shard's lock, so that threads
    /// replaying duplicates write no memory they share; the answers are the same as
    /// through the lock.
    ///
    /// ```
    /// use idem::{Claim, Engine, NamespaceConfig};
    ///
    /// let engine = Engine::builder().namespace("orders", NamespaceConfig::new()).build()?;
    /// let orders = engine.namespace("orders")?;
    /// match orders.claim(b"ord-42")? {
    ///     Claim::Acquired(guard) => {
    ///         // apply the message's side effect, then:
    ///         guard.complete_with_result(b"receipt-7")?;
    ///     }
    ///     Claim::Duplicate(done) => println!("already applied: {:?}", done.result()),
    ///     Claim::InProgress(busy) => println!("held elsewhere until {}", busy.lease_expires_at_ms()),
    /// }
    /// assert!(matches!(orders.claim(b"ord-42")?, Claim::Duplicate(_)));
    /// # Ok::<(), idem::Error>(())
    /// ```
    pub fn claim(&self, key: &[u8]) -> Result<Claim> {
        self.claim_fp(key, None)
    }

    /// Fsyncs the durable tier's write-ahead log now, as [`Engine::sync`] does (all
    /// namespaces share one log, so this covers every namespace's writes), from a
    /// handle, which a worker may hold without the engine. A failed fsync is
    /// [`Error::Store`] and is counted in this namespace's `Stats::store_errors`. Works
    /// on a handle that outlived its engine, as the handle keeps the database open.
    /// Without a durable tier: `Ok` at once.
    pub fn sync(&self) -> Result<()> {
        self.inner.durable.as_ref().map_or(Ok(()), DurableNs::sync)
    }

    /// A [`Router`](crate::Router) that splits this namespace's keys among `workers`
    /// worker threads so that no two of them write the same shards (but for at most
    /// `workers - 1` that straddle a cut; none when the shard count is a multiple of
    /// `workers`). Hand each message to the worker [`Router::worker`](crate::Router::worker)
    /// names and claim it there: two threads that share a namespace's shards pay for
    /// every line of a shard the other wrote last, and on a host where a line takes
    /// long to pass between cores two such threads can claim fresh keys no faster than
    /// one (BENCHMARKS.md, "Where the targets stand"). [`Error::InvalidConfig`] for
    /// zero workers.
    pub fn router(&self, workers: usize) -> Result<crate::Router> {
        let ns = &self.inner;
        crate::Router::new(&ns.name, ns.seed, ns.cfg.max_key_len, workers)
    }

    /// The lock shard `key` belongs to, for the benches (`__bench::shard_of`).
    pub(crate) fn shard_of(&self, key: &[u8]) -> Result<usize> {
        let ns = &self.inner;
        Ok(ns.key_fp(key)?.shard(ns.slots.len()))
    }

    /// Point reads of the durable tier so far (0 without one): one relaxed load, so a
    /// benchmark can tell the claims that read RocksDB from those that did not.
    pub(crate) fn durable_reads(&self) -> u64 {
        self.inner.durable.as_ref().map_or(0, DurableNs::reads)
    }

    /// Claims `key` and records a fingerprint of `payload` with it. A later claim of the
    /// same key with a different payload (while the key is in progress or done) is
    /// refused with [`Error::PayloadMismatch`]: the key was reused for another message.
    /// Claims without a payload are not compared.
    pub fn claim_with_payload(&self, key: &[u8], payload: &[u8]) -> Result<Claim> {
        self.claim_fp(key, Some(self.payload_fp(payload)))
    }

    fn claim_fp(&self, key: &[u8], payload: Option<u64>) -> Result<Claim> {
        let ns = &self.inner;
        let fp = ns.key_fp(key)?;
        // A thread whose last claims were duplicates reads first without the lock
        // (see `recent`); claims with a payload always compare it under the lock.
        #[cfg(not(idem_loom))]
        if payload.is_none() {
            // (A sliding window rewrites a duplicate's deadline: always the lock.)
            let claim = if !ns.params.sliding && recent::duplicates() {
                self.claim_likely_duplicate(fp)
            } else {
                self.claim_locked(fp, None)
            };
            recent::note(&claim);
            return claim;
        }
        self.claim_locked(fp, payload)
    }

    /// A single claim through the shard's lock.
    #[inline(always)]
    fn claim_locked(&self, fp: Fp, payload: Option<u64>) -> Result<Claim> {
        let ns = &self.inner;
        // The bucket's cache miss (and the shard lines' transfer, if another core
        // holds them) overlaps the clock read and the lock.
        let lane = crate::hot::lane();
        let slot = ns.prefetch_to_lock(fp, lane);
        let now = ns.now();
        #[cfg(test)]
        tests::after_claim_clock();
        self.claim_locked_at(fp, payload, slot, now, lane)
    }

    /// A single claim expected to be a duplicate: answered without the lock if the
    /// shard holds the key done and live and nothing moves meanwhile
    /// ([`ShardSlot::optimistic_duplicate`](crate::hot::ShardSlot)), so that two
    /// threads answering duplicates share the shard's lines instead of passing them
    /// between their cores. Otherwise through the lock, at the same time.
    #[cfg(not(idem_loom))]
    #[inline(always)]
    fn claim_likely_duplicate(&self, fp: Fp) -> Result<Claim> {
        let ns = &self.inner;
        // Only the bucket: asking for the lock's lines to write would take them from
        // the other core that reads them too.
        let slot = ns.prefetch(fp);
        let now = ns.now();
        if let Some(pin) = crate::hot::pin() {
            if let Some((completed_at_ms, expires_at_ms, result)) =
                slot.optimistic_duplicate(fp, &ns.params, now, &pin)
            {
                ns.lock_free_duplicates.add(&pin, 1);
                return Ok(Claim::Duplicate(Done {
                    completed_at_ms,
                    expires_at_ms,
                    result,
                }));
            }
        }
        self.claim_not_read_lock_free(fp, slot, now)
    }

    /// The rest of [`Namespace::claim_likely_duplicate`] when the lock-free read could
    /// not answer: through the lock. A call of its own, so that the lock path's code
    /// takes no registers from the lock-free read, which answers nearly every time.
    #[cfg(not(idem_loom))]
    #[cold]
    #[inline(never)]
    fn claim_not_read_lock_free(&self, fp: Fp, slot: &SlotCell, now: Now) -> Result<Claim> {
        let lane = crate::hot::lane();
        slot.prefetch_write(lane);
        self.claim_locked_at(fp, None, slot, now, lane)
    }

    /// The rest of a single claim through the lock of `slot` (the key's), made at
    /// `now` by a thread of `lane`, with its claim marker written.
    #[inline(always)]
    fn claim_locked_at(
        &self,
        fp: Fp,
        payload: Option<u64>,
        #[cfg_attr(idem_loom, allow(unused_variables))] slot: &SlotCell,
        now: Now,
        lane: usize,
    ) -> Result<Claim> {
        let ns = &self.inner;
        #[cfg(not(idem_loom))]
        slot.prefetch_schedule(ns.params.deadline(now, ns.params.lease_ms), lane);
        let mut marker = None;
        let mut now = now;
        let claim = NsInner::claim_one(ns, fp, payload, &mut now, &mut marker, None, lane);
        if marker.is_none() {
            // No marker to write (a memory-only namespace, or no claim acquired).
            return claim;
        }
        let claim = claim?;
        #[cfg(test)]
        tests::before_marker_write();
        // (A panic here drops the guard, whose release ends the hold: see
        // `Shard::begin_complete`.)
        if let Err(e) = ns.write_markers(marker.as_slice()) {
            // Nothing was decided: the claim leaves the hot tier, and there is no
            // marker on disk to delete.
            if let Claim::Acquired(g) = claim {
                g.abandon();
            }
            return Err(e);
        }
        if let Claim::Acquired(g) = &claim {
            g.marker_written();
        }
        Ok(claim)
    }

    /// Claims several keys at once, with one durable write for all their claim
    /// markers. Every key is checked first: one bad key refuses the whole batch and
    /// changes nothing. If a claim fails (capacity, store, a corrupt record), the
    /// claims already acquired in the batch are released and the error returned.
    ///
    /// The answers are those of claiming the keys one by one, in order (a key twice
    /// in a batch is `Acquired`, then `InProgress`), all at one reading of the clock;
    /// except that a claim that finds the namespace full reads it again (it reclaims
    /// what has expired before it refuses), and the rest of the batch goes on from
    /// that later reading; and a key whose shard another thread has already brought
    /// to a later reading is claimed at that one, as [`Namespace::claim`] would (time
    /// never goes back within a shard), and so are the keys after it.
    /// It is faster per key than [`Namespace::claim`]: the clock is read once, and
    /// every key's index bucket is requested from memory before the first claim, so
    /// the batch's cache misses overlap.
    ///
    /// A sliding window's duplicate whose done record must be rewritten (rare: see
    /// [`NamespaceConfig::extend_on_duplicate`]) is written on its own, as in
    /// [`Namespace::claim`]; if that write fails, the batch fails as above, and the
    /// rewrites already made in it stay (they only extend windows the keys had).
    ///
    /// In [`Stats`], a failed batch's released claims (an error's, or a panic's on
    /// the way) are not counted as acquired (nor as released); its other answers
    /// (duplicates, in-progress answers, expired entries reclaimed on the way, the
    /// refusal itself) were made and stay counted.
    pub fn claim_batch(&self, keys: &[&[u8]]) -> Result<Vec<Claim>> {
        let ns = &self.inner;
        let mut fps = Vec::with_capacity(keys.len());
        for k in keys {
            let fp = ns.key_fp(k)?;
            ns.prefetch(fp);
            fps.push(fp);
        }
        // One pin for the batch: whatever the lock-free reads below find published
        // stays allocated until the batch is done. (None while the thread is being
        // torn down: then every claim takes the lock.) The duplicates answered that
        // way are counted once, as the batch ends, whichever way it ends.
        #[cfg(not(idem_loom))]
        let mut lock_free = LockFreeAnswers {
            ns,
            pin: crate::hot::pin(),
            answered: 0,
        };
        // With the buckets on their way, find each key's likely entry and request it
        // too: a duplicate's look-up then waits on neither of its two misses.
        #[cfg(not(idem_loom))]
        if let Some(pin) = &lock_free.pin {
            for &fp in &fps {
                ns.slots[fp.shard(ns.slots.len())].prefetch_entry(fp, pin);
            }
        }
        // One reading for the batch, moved on only if a claim in it read a later
        // one (the refusal path) or met a wheel already past it.
        let mut now = ns.now();
        let lane = crate::hot::lane();
        let mut markers = Vec::new();
        // Given up (not released) if a claim below panics, as on an error: the
        // caller never sees them, and none of their markers was written.
        let mut unwritten = Unwritten(Vec::with_capacity(fps.len()));
        for fp in fps {
            let mut marker = None;
            #[cfg(not(idem_loom))]
            let answers = lock_free.pin.as_ref().map(|p| (p, &mut lock_free.answered));
            #[cfg(idem_loom)]
            let answers = None;
            match NsInner::claim_one(ns, fp, None, &mut now, &mut marker, answers, lane) {
                Ok(c) => {
                    unwritten.0.push(c);
                    markers.extend(marker);
                }
                Err(e) => {
                    // No marker of this batch was written yet.
                    abandon_all(std::mem::take(&mut unwritten.0));
                    return Err(e);
                }
            }
        }
        let claims = std::mem::take(&mut unwritten.0);
        // Unpinned before the markers' write (which may wait for a disk): a pin held
        // holds back every retired table's free, the whole process's. (The locked
        // claims above ran pinned, durable reads and a sliding window's rewrites
        // included: that only delays such frees for as long as they take.)
        #[cfg(not(idem_loom))]
        drop(lock_free);
        if let Err(e) = ns.write_markers(&markers) {
            abandon_all(claims);
            return Err(e);
        }
        if !markers.is_empty() {
            for c in &claims {
                if let Claim::Acquired(g) = c {
                    g.marker_written();
                }
            }
        }
        Ok(claims)
    }

    /// Completes several claims of this namespace with one durable write (and, under
    /// `SyncPolicy::Always`, one fsync). Returns one result per guard, in order: a
    /// guard whose lease was lost gets `Err(LeaseLost)` and the others complete (a
    /// claim marker of a lost guard still in RocksDB is deleted by an unsynced write
    /// of its own, so that the next open does not report it). If the store's write
    /// fails, nothing is completed, the claims are released and the
    /// error is returned (if the write succeeded and only its grouped fsync failed,
    /// the records are applied and readable, and a later claim of their keys answers
    /// `Duplicate` from the durable tier); under [`FailurePolicy::FailOpen`](crate::FailurePolicy::FailOpen) the claims are completed
    /// instead (counted in [`Stats::fail_open_decisions`]), in the hot tier only if
    /// the write was refused, as [`ClaimGuard::complete`] does.
    ///
    /// A guard of another namespace is completed through its own namespace, on its
    /// own, once this namespace's write has succeeded (if it fails, such guards are
    /// released with the rest).
    ///
    /// The clock is read once, as the batch begins, and this namespace's guards are
    /// all checked against that reading, not against a reading each (one by one, a
    /// later guard could find its lease run out by its turn); a guard whose shard had
    /// already moved past that reading (another thread read a later time) is checked
    /// and completed at its shard's time instead, as a single completion is. A
    /// guard's lease can still be lost during the batch, as during a single
    /// completion, to whatever ends it meanwhile: the maintenance pass or another
    /// claim expiring it at a later reading. A guard of another namespace is
    /// completed at its own namespace's reading.
    ///
    /// [`Namespace::complete_batch_with_results`] stores a result with each.
    pub fn complete_batch(&self, guards: Vec<ClaimGuard>) -> Result<Vec<Result<()>>> {
        let ns = &*self.inner;
        // Without a durable tier (and every guard this namespace's), what
        // `complete_many` does comes down to each guard's completion at one clock
        // reading: done here, without its vector of guards and results.
        if ns.durable.is_none() && guards.iter().all(|g| std::ptr::eq(g.ns(), ns)) {
            let now = ns.now();
            return Ok(guards
                .into_iter()
                .map(|mut g| g.finish_at(None, &[], now))
                .collect());
        }
        self.complete_many(guards.into_iter().map(|g| (g, None)).collect())
    }

    /// As [`Namespace::complete_batch`], each claim completed with its result, as
    /// [`ClaimGuard::complete_with_result`] completes one: the results are stored in
    /// the same one durable write, and a later claim of each key answers `Duplicate`
    /// with its result. A result longer than its namespace's
    /// [`max_result_len`](crate::NamespaceConfig::max_result_len) is that guard's
    /// [`Error::ResultTooLarge`] and changes nothing for it (its claim stays held
    /// until its lease runs out, as with `complete_with_result`); the others complete.
    /// If the store refuses the batch's write where the namespace fails closed, every
    /// claim of the batch is released, those with a result too large too, and the
    /// error is returned.
    ///
    /// ```
    /// use idem::{Claim, Engine, NamespaceConfig};
    ///
    /// let engine = Engine::builder()
    ///     .namespace("orders", NamespaceConfig::new())
    ///     .build()?;
    /// let orders = engine.namespace("orders")?;
    /// let mut done = Vec::new();
    /// for c in orders.claim_batch(&[b"order-1", b"order-2"])? {
    ///     if let Claim::Acquired(guard) = c {
    ///         done.push((guard, &b"shipped"[..])); // the side effect's outcome
    ///     }
    /// }
    /// for outcome in orders.complete_batch_with_results(done)? {
    ///     outcome?;
    /// }
    /// let Claim::Duplicate(d) = orders.claim(b"order-2")? else { unreachable!() };
    /// assert_eq!(d.result(), Some(&b"shipped"[..]));
    /// # Ok::<(), idem::Error>(())
    /// ```
    pub fn complete_batch_with_results(
        &self,
        completions: Vec<(ClaimGuard, &[u8])>,
    ) -> Result<Vec<Result<()>>> {
        self.complete_many(completions.into_iter().map(|(g, r)| (g, Some(r))).collect())
    }

    /// The batch completions: each guard with the result to store, if any.
    fn complete_many(&self, items: Vec<(ClaimGuard, Option<&[u8]>)>) -> Result<Vec<Result<()>>> {
        let ns = &*self.inner;
        if items.iter().any(|(g, _)| !std::ptr::eq(g.ns(), ns)) {
            let mine: Vec<bool> = items
                .iter()
                .map(|(g, _)| std::ptr::eq(g.ns(), ns))
                .collect();
            let (ours, theirs): (Vec<_>, Vec<_>) = items
                .into_iter()
                .partition(|(g, _)| std::ptr::eq(g.ns(), ns));
            let mut ours = self.complete_many(ours)?.into_iter();
            let mut theirs = theirs.into_iter().map(|(g, result)| match result {
                Some(r) => g.complete_with_result(r),
                None => g.complete(),
            });
            return Ok(mine
                .into_iter()
                .map(|m| {
                    let next = if m { ours.next() } else { theirs.next() };
                    next.expect("one outcome for every guard")
                })
                .collect());
        }
        // A result too large is its guard's error alone, refused before anything is
        // written, as `complete_with_result` refuses it.
        let max = ns.cfg.max_result_len;
        if items.iter().any(|(_, r)| r.is_some_and(|r| r.len() > max)) {
            let mut outcomes: Vec<Option<Result<()>>> = Vec::with_capacity(items.len());
            let mut fitting = Vec::new();
            let mut too_large = Vec::new();
            for (g, result) in items {
                match result {
                    Some(r) if r.len() > max => {
                        outcomes.push(Some(Err(Error::ResultTooLarge { len: r.len(), max })));
                        too_large.push(g);
                    }
                    _ => {
                        outcomes.push(None);
                        fitting.push((g, result));
                    }
                }
            }
            // Still armed while the others are written: if that write fails, they are
            // released with the rest, as the batch's error says.
            let mut done = self.complete_many(fitting)?.into_iter();
            for mut g in too_large {
                // Held to the end of its lease, as `complete_with_result` leaves it.
                g.armed = false;
                drop(g);
            }
            return Ok(outcomes
                .into_iter()
                .map(|o| o.unwrap_or_else(|| done.next().expect("one outcome for every guard")))
                .collect());
        }
        // One clock reading for the batch.
        let now = ns.now();
        let Some(d) = &ns.durable else {
            return Ok(items
                .into_iter()
                .map(|(mut g, result)| g.finish_at(result, &[], now))
                .collect());
        };
        let mut outcomes = Vec::with_capacity(items.len());
        let mut begun = Vec::new();
        let mut records = Vec::new();
        // Guards whose lease was lost: their markers are seen to once every begun
        // guard has finished (a store read and a delete, which could panic and leave
        // the begun entries marked completing, held for good).
        let mut lost = Vec::new();
        for (mut g, result) in items {
            g.armed = false;
            let si = g.shard as usize;
            let cap = ns.capacity();
            let (r, at) = {
                let mut shard = ns.slots[si].lock();
                // Never behind the shard's wheel (see `Shard::not_behind`), as a
                // single completion: the guard completes at the time this round used.
                let at = shard.not_behind(&ns.params, now);
                (shard.begin_complete(g.fp, &g.lease, at, &cap, true), at)
            };
            match r {
                Ok(payload) => {
                    records.push((
                        g.fp.to_u128(),
                        g.done_record(&ns.params, at, payload, result),
                    ));
                    outcomes.push(Ok(()));
                    begun.push((g, result, at));
                }
                Err(Refused::LeaseLost) => {
                    outcomes.push(Err(Error::LeaseLost));
                    lost.push(g);
                }
            }
        }
        // Nothing to write (an empty batch, or every guard's lease lost): no write,
        // and no fsync under `Always`.
        let stored = if records.is_empty() {
            Ok(Ok(Stored::Yes))
        } else {
            write_unwinding(|| d.write_completions(&records, &[]))
        };
        if stored.is_err() {
            settle_unwound(d, begun.iter().map(|(g, _, _)| (g.fp, g.lease.token)));
        }
        for (g, result, at) in &mut begun {
            let si = g.shard as usize;
            let cap = ns.capacity();
            let stored_ok = stored_as(&stored);
            // (Always `None` here: this handle keeps the namespace.)
            let anchor = last_round(
                &mut ns.slots[si].lock(),
                &ns.params,
                g.fp,
                &g.lease,
                *result,
                *at,
                stored_ok,
                &cap,
            );
            g.counted = false;
            drop(anchor);
        }
        for g in lost {
            d.lease_lost(g.fp.to_u128(), g.lease.token, g.marker_end_ms());
        }
        finished(stored).map(|_| outcomes)
    }

    /// Looks `key` up without changing any key's state: `None` if it is unknown or
    /// expired. (One housekeeping step may run on the way: after the clock moved
    /// about six days at 1 ms ticks past a shard with no maintenance pass between,
    /// the look-up first drops what expired in that shard, as the pass would, which
    /// `Stats::resident_keys` and `expirations` show.) With a durable tier, a key the hot tier no longer holds is looked up there
    /// (one durable read), so a key done within retention reads as `Done`.
    /// A dead-letter dry run uses [`check_with_payload`](Self::check_with_payload) to
    /// decide before claiming.
    pub fn check(&self, key: &[u8]) -> Result<Option<KeyState>> {
        self.check_fp(key, None)
    }

    /// [`check`](Self::check), comparing `payload` with the payload fingerprint the
    /// key holds as [`claim_with_payload`](Self::claim_with_payload) would: where
    /// such a claim would be refused with [`Error::PayloadMismatch`] (the key, in
    /// progress or done, was claimed with another payload), so is this look-up. A
    /// key claimed without a payload is not compared. Changes nothing, and counts no
    /// claim, duplicate or mismatch in [`Stats`](crate::Stats); a look-up of the
    /// durable tier it makes (a key the hot tier does not hold) is counted there as
    /// [`check`](Self::check)'s is (`durable_reads`, the prefilter's counts).
    pub fn check_with_payload(&self, key: &[u8], payload: &[u8]) -> Result<Option<KeyState>> {
        self.check_fp(key, Some(self.payload_fp(payload)))
    }

    /// The fingerprint [`claim_with_payload`](Self::claim_with_payload) stores for
    /// `payload`.
    fn payload_fp(&self, payload: &[u8]) -> u64 {
        payload_fingerprint(self.inner.seed, payload)
    }

    fn check_fp(&self, key: &[u8], payload: Option<u64>) -> Result<Option<KeyState>> {
        let ns = &*self.inner;
        let fp = ns.key_fp(key)?;
        let si = fp.shard(ns.slots.len());
        let now = ns.now();
        let cap = ns.capacity();
        let mismatch =
            |stored: Option<u64>| matches!((payload, stored), (Some(a), Some(b)) if a != b);
        let mut state = match ns.slots[si].lock().check(fp, &ns.params, now, &cap) {
            Some((_, stored)) if mismatch(stored) => return Err(Error::PayloadMismatch),
            found => found.map(|(state, _)| state),
        };
        if state.is_none() {
            // Not in the hot tier: the durable tier may still know it as done (its
            // hot TTL ran out, it was evicted, or the engine restarted).
            if let Some(d) = &ns.durable {
                let mut err = None;
                match d.lookup(fp, now.ms, &mut err) {
                    DurableLookup::Done(done) if mismatch(done.payload) => {
                        return Err(Error::PayloadMismatch)
                    }
                    DurableLookup::Done(done) => {
                        state = Some(ShardState::Done {
                            completed_at_ms: done.completed_at_ms,
                            expires_at_ms: done.expires_at_ms,
                            result: done.result,
                        })
                    }
                    DurableLookup::Absent => {}
                    DurableLookup::Failed => return Err(err.unwrap_or(Error::NotDurable)),
                }
            }
        }
        Ok(state.map(|s| match s {
            ShardState::InProgress {
                lease_expires_at_ms,
            } => KeyState::InProgress {
                lease_expires_at_ms,
            },
            ShardState::Done {
                completed_at_ms,
                expires_at_ms,
                result,
            } => KeyState::Done {
                completed_at_ms,
                expires_at_ms,
                result,
            },
        }))
    }

    /// Deletes `key` in whatever state it is: the next claim acquires it. A guard that
    /// held it gets [`Error::LeaseLost`] on complete. Returns whether an unexpired
    /// entry was removed, from either tier.
    ///
    /// With a durable tier, a forget that meets a completion whose record is being
    /// written waits for that write, then deletes the record it wrote: the forget
    /// takes effect after the completion, never before it, so a completion cannot
    /// bring a forgotten key back. A claim of the key acquired while the forget runs,
    /// before it removes the hot entry, is forgotten with the key as one acquired
    /// before it is (its guard gets `LeaseLost`), its claim marker included: one
    /// written after the forget's delete is deleted by a second delete, so that a
    /// crash after the forget returns reports no orphan for it. Claims of the key
    /// acquired (and given up) over and over cannot keep the forget deleting: once
    /// two of its rounds have found such claims, it holds the key, and until it ends
    /// a claim that would acquire the key answers [`Claim::InProgress`] (until the
    /// end of the lease it would have had), while [`check`](Self::check) answers
    /// with the key's state as the forget leaves it (`None` once its entry is gone).
    /// The delete is synced
    /// as the namespace's completions are. Once a delete of the forget was applied,
    /// the key is forgotten in both tiers whatever follows: if only the fsync after
    /// it failed (after any delete of the forget: one that works after a second
    /// delete does not make up for it), or a second delete (for a claim of the key
    /// acquired meanwhile) was refused, the forget ends as it would have and returns
    /// that error (the claim goes with the key; a marker of it the refused delete
    /// left is removed as its guard ends, as a lost lease's is, and a crash before
    /// then reports it as an orphan). A forget whose first delete the store refused
    /// changes nothing, but for a claim of the key whose completion was refused
    /// meanwhile with `LeaseLost`: as its guard was told, it is given up, and a
    /// redelivery acquires the key. The forget first reads the key's record,
    /// for its answer: if that read fails (a corrupt record aside, which the delete
    /// clears), under [`FailurePolicy::FailClosed`](crate::FailurePolicy) the error is
    /// returned and nothing is forgotten; under `FailOpen` the delete goes ahead and
    /// the answer is the hot tier's alone, counted in `Stats::fail_open_decisions`.
    pub fn forget(&self, key: &[u8]) -> Result<bool> {
        let ns = &*self.inner;
        let fp = ns.key_fp(key)?;
        let si = fp.shard(ns.slots.len());
        let cap = ns.capacity();
        // From here no durable write of the key's done record begins (a completion is
        // refused as lost, a window is not extended) until the forget ends: one that
        // began and ended between the delete below and the hot entry's removal would
        // bring the key back as done. One already begun is waited for below.
        let mut forgetting = ns.durable.is_some().then(|| Forgetting::begin(ns, si, fp));
        let mut waited = false;
        // One already begun (a completion's or a window's record, a claim's marker)
        // is waited for before the delete: it could otherwise land after it, and
        // end before the hot entry's removal below, leaving its record on disk
        // (the key would come back as done).
        // (Counted before the wait, as below: `forget_waits` says a forget is
        // waiting.)
        if forgetting.is_some() && ns.slots[si].lock().is_completing(fp) {
            waited = true;
            ns.forget_waits.fetch_add(1, Ordering::Relaxed);
            wait_while_completing(&ns.slots[si], fp);
        }
        let mut durable_live = false;
        let mut looked_up = false;
        // Whether a delete of this forget was applied: the key's record is gone.
        let mut applied = false;
        // The error of the first fsync that failed after a delete was applied, or of
        // a later delete refused after one was.
        let mut unsynced = None;
        loop {
            // The durable record goes first, then the hot entry: a claim between the
            // two that re-read the record into the hot tier is removed with it.
            if let Some(d) = &ns.durable {
                if !looked_up {
                    looked_up = true;
                    // A key whose hot entry is gone may still be done here.
                    let mut err = None;
                    match d.lookup(fp, ns.now().ms, &mut err) {
                        DurableLookup::Done(_) => durable_live = true,
                        DurableLookup::Failed => match err {
                            // A corrupt record is there: deleting it is how it is
                            // cleared.
                            Some(Error::CorruptRecord { .. }) => durable_live = true,
                            // A read that failed under `FailClosed`: whether the key
                            // is done is not known, and nothing is forgotten. (Under
                            // `FailOpen` the look-up answered `Absent`, counted as a
                            // decision from the hot tier alone.)
                            Some(e) => return Err(e),
                            None => {}
                        },
                        DurableLookup::Absent => {}
                    }
                }
                #[cfg(test)]
                tests::before_forget_delete();
                // (An fsync that failed after an earlier pass's delete is kept: one
                // that works now does not bring back what that one may have lost.)
                let failed = match d.forget(fp) {
                    Ok(failed_sync) => {
                        applied = true;
                        failed_sync
                    }
                    // A delete refused after an earlier pass's was applied: the key's
                    // record is gone all the same, so the key is forgotten in the hot
                    // tier too, as after a failed fsync, and the error returned.
                    Err(e) if applied => Some(e),
                    // The first delete refused: nothing was forgotten.
                    Err(e) => return Err(e),
                };
                unsynced = unsynced.or(failed);
                #[cfg(test)]
                tests::after_forget_delete();
            }
            let now = ns.now();
            let mut shard = ns.slots[si].lock();
            if forgetting
                .as_mut()
                .is_some_and(|f| f.claimed_since(&mut shard))
            {
                // A claim of the key acquired while the forget ran: its marker, written
                // after this claim's lock round and outside it, may have landed after
                // the delete above, and the claim's entry is about to go with the key.
                // Once its marker's write is over (the entry held no more, as for a
                // completion below), delete again. (A claim acquired after this round
                // is counted again, and a round still later sees it.)
                let busy = shard.is_completing(fp);
                drop(shard);
                if busy {
                    if !waited {
                        waited = true;
                        ns.forget_waits.fetch_add(1, Ordering::Relaxed);
                    }
                    wait_while_completing(&ns.slots[si], fp);
                }
                continue;
            }
            if let Some(removed) = shard.forget(fp, now, &cap) {
                if !removed && durable_live {
                    // Done only in the durable tier: forgotten all the same.
                    shard.counters.forgotten += 1;
                }
                // Ended in the lock round that removed the entry: a claim acquired
                // after it completes as any other.
                if let Some(f) = forgetting.take() {
                    f.end(&mut shard);
                }
                // Applied in both tiers; only the fsync after a delete failed, or a
                // later delete was refused.
                if let Some(e) = unsynced {
                    return Err(e);
                }
                return Ok(removed || durable_live);
            }
            drop(shard);
            // A completion holds the entry while its record is written, without the
            // lock; the record may land after the delete above. Wait for it to finish
            // (written or not), then start again.
            if !waited {
                waited = true;
                ns.forget_waits.fetch_add(1, Ordering::Relaxed);
            }
            wait_while_completing(&ns.slots[si], fp);
        }
    }

    /// Testing hook: overwrites `key`'s done record in the durable tier with bytes
    /// that do not decode (nothing without a durable tier). Not part of the stable API.
    #[doc(hidden)]
    pub fn debug_corrupt_record(&self, key: &[u8]) -> Result<()> {
        self.corrupt_record(key, false)
    }

    /// Testing hook: writes a claim marker of `key` in the durable tier with bytes
    /// that do not decode, as damage at rest would leave it (nothing without a
    /// durable tier). Not part of the stable API.
    #[doc(hidden)]
    pub fn debug_corrupt_claim_marker(&self, key: &[u8]) -> Result<()> {
        self.corrupt_record(key, true)
    }

    /// The testing hooks above: `key`'s done record, or with `claim` its marker.
    fn corrupt_record(&self, key: &[u8], claim: bool) -> Result<()> {
        let fp = self.inner.key_fp(key)?;
        #[cfg(feature = "durable")]
        if let Some(d) = &self.inner.durable {
            return d.store.corrupt_record(&d.name, fp.to_u128(), claim);
        }
        let _ = (fp, claim);
        Ok(())
    }

    /// Testing hook: how many forgets of this namespace waited for a completion
    /// being written. Not part of the stable API.
    #[doc(hidden)]
    pub fn debug_forget_waits(&self) -> u64 {
        self.inner.forget_waits.load(Ordering::Relaxed)
    }

    /// This namespace's counters and gauges.
    pub fn stats(&self) -> Stats {
        self.inner.stats()
    }
}

/// The answer to a claim.
#[derive(Debug)]
#[must_use = "an Acquired claim is released when dropped; complete it after the side effect"]
pub enum Claim {
    /// First sighting (or the previous claim expired): do the side effect, then
    /// complete the guard.
    Acquired(ClaimGuard),
    /// Already done: skip the message. Carries the stored result, if any.
    Duplicate(Done),
    /// Another worker holds a live lease on the key: retry later (nack). Also the
    /// answer, with a durable tier, while a [`Namespace::forget`] of the key that
    /// claims kept acquiring holds it (no worker holds it then, and the key is
    /// claimable as soon as the forget returns; see there).
    InProgress(InFlight),
}

impl Claim {
    /// True for `Acquired`.
    pub fn is_acquired(&self) -> bool {
        matches!(self, Claim::Acquired(_))
    }

    /// True for `Duplicate`.
    pub fn is_duplicate(&self) -> bool {
        matches!(self, Claim::Duplicate(_))
    }

    /// True for `InProgress`.
    pub fn is_in_progress(&self) -> bool {
        matches!(self, Claim::InProgress(_))
    }
}

/// A completed key, as a duplicate claim sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Done {
    completed_at_ms: u64,
    expires_at_ms: u64,
    result: Option<std::sync::Arc<[u8]>>,
}

impl Done {
    /// The result stored by `complete_with_result`, if any.
    pub fn result(&self) -> Option<&[u8]> {
        self.result.as_deref()
    }

    /// When the key was completed (wall-clock ms). Exact with the default 1 ms tick.
    /// With a coarser [`EngineBuilder::tick`], a fixed window's completion answered
    /// from the hot tier is worked out from its deadline, which keeps whole ticks:
    /// it may read up to one tick later than the completion (never later than the
    /// claim's own time), or, for a claim that read the clock before the completion
    /// (it waited for the key meanwhile), up to one tick earlier, while one read back
    /// from the durable tier is exact.
    pub fn completed_at_ms(&self) -> u64 {
        self.completed_at_ms
    }

    /// When the key stops answering `Duplicate` (wall-clock ms), as of this answer.
    /// With a durable tier and an [`EngineBuilder::tick`] coarser than 1 ms, an answer
    /// from the hot tier may read up to one tick early (the done record may last up
    /// to a tick longer), never late.
    pub fn expires_at_ms(&self) -> u64 {
        self.expires_at_ms
    }
}

/// A key someone else holds, as a refused claim sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InFlight {
    lease_expires_at_ms: u64,
    seen_at_ms: u64,
}

impl InFlight {
    /// When the holder's lease runs out (wall-clock ms); from then on the key can be
    /// claimed again unless the holder completes it first. For a key held by a
    /// forget ([`Claim::InProgress`]), the end of the lease the claim would have had:
    /// the key is claimable again as soon as the forget returns, most often well
    /// before that (a forget that outlasts it still holds the key).
    pub fn lease_expires_at_ms(&self) -> u64 {
        self.lease_expires_at_ms
    }

    /// How long until the lease runs out, as of the claim: a natural retry delay
    /// (for a key held by a forget, most often longer than needed: see
    /// [`lease_expires_at_ms`](Self::lease_expires_at_ms)).
    pub fn retry_after(&self) -> Duration {
        Duration::from_millis(self.lease_expires_at_ms.saturating_sub(self.seen_at_ms))
    }
}

/// A key's state as [`Namespace::check`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyState {
    /// Claimed and not yet completed.
    #[non_exhaustive]
    InProgress {
        /// When the claim's lease runs out (wall-clock ms).
        lease_expires_at_ms: u64,
    },
    /// Completed and within its TTL (or, read from the durable tier, within its
    /// retention).
    #[non_exhaustive]
    Done {
        /// When it was completed (wall-clock ms).
        completed_at_ms: u64,
        /// When it stops answering `Duplicate` (wall-clock ms).
        expires_at_ms: u64,
        /// The stored result, if any.
        result: Option<std::sync::Arc<[u8]>>,
    },
}

/// The holder's side of an `Acquired` claim: a lease with a fencing token.
///
/// It holds no lock and is `Send + 'static`: move it to whatever thread finishes the
/// work. Finish with [`complete`](Self::complete),
/// [`complete_with_result`](Self::complete_with_result) or
/// [`release`](Self::release); dropping it unfinished releases the claim so a
/// redelivery can retry. If the lease runs out first, the key may be claimed again and
/// this guard's calls fail with [`Error::LeaseLost`].
///
/// An unfinished guard keeps its namespace, and with a durable tier the database,
/// open after the [`Engine`] and every [`Namespace`] handle are dropped, until it is
/// finished or dropped; a leaked one (`mem::forget`) keeps them open until the
/// process exits, and a new engine on the same directory is refused with
/// [`Error::AlreadyOpen`] meanwhile.
pub struct ClaimGuard {
    /// The namespace, kept alive while this guard is counted in its shard (see
    /// [`Keeper`]).
    ns: std::ptr::NonNull<NsInner>,
    fp: Fp,
    shard: u32,
    lease: Lease,
    /// The lease's end its durable marker carries (wall-clock ms) when that is not
    /// the lease's own (an extension whose marker the store refused under
    /// `FailOpen`); 0 otherwise. See [`ClaimGuard::marker_end_ms`].
    marker_ms: u64,
    armed: bool,
    /// Still counted in its shard: the guard's last lock round ends the count
    /// ([`Shard::guard_ended`](crate::hot::Shard)); `Drop` ends it if no round did.
    counted: bool,
}

// SAFETY: the pointer is to a `NsInner` (`Send + Sync`) that stays allocated while
// the guard is counted in its shard, whichever thread holds the guard: until the last
// handle goes, the handles hold it; from then on, each shard that counts guards holds
// a reference to it (`NsInner::orphan`), which only the lock round that ends the
// shard's last count takes out (`Shard::guard_ended`). A guard makes no use of the
// namespace after the lock round that ends its own count.
#[allow(unsafe_code)]
unsafe impl Send for ClaimGuard {}
// SAFETY: as for `Send`; `&ClaimGuard` only reads the namespace.
#[allow(unsafe_code)]
unsafe impl Sync for ClaimGuard {}

impl fmt::Debug for ClaimGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClaimGuard")
            .field("namespace", &self.ns().name)
            .field("lease_expires_at_ms", &self.lease_expires_at_ms())
            .field("token", &self.lease.token)
            .finish()
    }
}

impl ClaimGuard {
    /// The guard's namespace.
    #[inline]
    fn ns(&self) -> &NsInner {
        debug_assert!(
            self.counted,
            "a guard used its namespace after its count ended"
        );
        // SAFETY: see `unsafe impl Send for ClaimGuard`: while the guard is counted
        // the namespace is allocated, and it is counted until its last lock round.
        #[allow(unsafe_code)]
        unsafe {
            self.ns.as_ref()
        }
    }

    /// When this claim's lease runs out (wall-clock ms).
    pub fn lease_expires_at_ms(&self) -> u64 {
        self.ns().params.tick_to_ms(self.lease.deadline)
    }

    /// Renews the claim: its lease now runs out `lease` from now (the namespace's
    /// clock), later or earlier than before, as a heartbeat of a consumer whose
    /// message takes longer than it expected (SQS's `ChangeMessageVisibility`).
    /// Other claims of the key answer `InProgress` with the new end, and after a
    /// crash the key is held as an orphan until it.
    ///
    /// [`Error::LeaseLost`] if the lease has already run out (or the key was claimed
    /// again, or forgotten): nothing changes, and `complete` or `release` will say
    /// the same (with a durable tier the claim's marker is removed then, if still
    /// its own, as a refused completion removes it: the claim is over).
    /// [`Error::InvalidLease`] for a zero lease or one past the 2^30 ticks a deadline
    /// can lie ahead; nothing changes. (Durations are rounded up to whole
    /// milliseconds, as the namespace's are.) With a durable tier the claim's marker
    /// is rewritten with the new end (a write to RocksDB unless the marker is in the
    /// journal or still in memory; a journal with no slot free is first swept of
    /// markers whose lease has ended, as for a new claim's marker); if the store
    /// refuses it, under `FailClosed` the lease goes back to its old end and the
    /// error is returned, under `FailOpen` the lease is extended in memory, the
    /// marker keeps the old end (counted in `fail_open_decisions`). The rewritten
    /// marker's time is the extension's: an orphan's `claimed_at_ms` is when it was
    /// last renewed.
    ///
    /// ```
    /// use std::time::Duration;
    /// use idem::{Claim, Engine, NamespaceConfig};
    ///
    /// let engine = Engine::builder()
    ///     .namespace("jobs", NamespaceConfig::new().lease(Duration::from_secs(30)))
    ///     .build()?;
    /// let jobs = engine.namespace("jobs")?;
    /// if let Claim::Acquired(mut guard) = jobs.claim(b"job-7")? {
    ///     // ... the work takes longer than planned:
    ///     guard.extend_lease(Duration::from_secs(120))?;
    ///     guard.complete()?;
    /// }
    /// # Ok::<(), idem::Error>(())
    /// ```
    pub fn extend_lease(&mut self, lease: Duration) -> Result<()> {
        let ns = self.ns();
        let p = &ns.params;
        let lease_ms = crate::config::whole_ms(lease).as_millis();
        if lease_ms == 0 {
            return Err(Error::InvalidLease("a lease must be longer than zero"));
        }
        if lease_ms > u128::from(crate::hot::MAX_DEADLINE_TICKS.saturating_mul(p.tick_ms)) {
            return Err(Error::InvalidLease(
                "a lease must end less than 2^30 ticks ahead",
            ));
        }
        let now = ns.now();
        let si = self.shard as usize;
        let cap = ns.capacity();
        let durable = ns.durable.as_ref();
        let old = self.lease;
        let (granted, now, deadline) = {
            let mut shard = ns.slots[si].lock();
            // Never behind the shard's wheel (see `Shard::not_behind`): a lease set
            // from an earlier reading could end before it was granted.
            let now = shard.not_behind(p, now);
            let deadline = p.deadline(now, lease_ms as u64);
            let granted = shard
                .extend_lease(self.fp, &old, now, deadline, &cap, durable.is_some())
                // Whether the claim's entry is held for a write (never so for a
                // live guard's: see `Shard::extend_lease`), which keeps its marker.
                .map_err(|Refused::LeaseLost| shard.held_for_write(self.fp, &old));
            (granted, now, deadline)
        };
        let payload = match granted {
            Ok(payload) => payload,
            Err(held) => {
                // The claim is over (its lease ran out, the key was claimed again, or
                // a forget took it): its marker goes now, if still its own, as a
                // refused completion's does, rather than when the guard ends or a
                // sweep finds it.
                if let (Some(d), false) = (durable, held) {
                    d.lease_lost(self.fp.to_u128(), old.token, self.marker_end_ms());
                }
                return Err(Error::LeaseLost);
            }
        };
        let extended = Lease { deadline, ..old };
        let Some(d) = durable else {
            self.lease = extended;
            return Ok(());
        };
        let marker = Record {
            state: RecordState::InProgress,
            token: old.token,
            at_ms: now.ms,
            expires_ms: p.tick_to_ms(deadline),
            payload,
            result: None,
        };
        let old_marker_ms = self.marker_end_ms();
        // No shard lock is held here: a renewal that finds the journal full may sweep
        // it (`NsInner::sweep_markers`), which takes them; the claim's own entry,
        // held, keeps its marker.
        let renewed = write_unwinding(|| {
            d.renew_marker(self.fp.to_u128(), marker, &|| ns.sweep_markers(d, ns.now()))
        });
        let mut shard = ns.slots[si].lock();
        let (lease, marker_ms) = match renewed {
            Ok(Ok(true)) => (extended, 0),
            // Fail open: extended, its marker keeping the end it had, which a lost
            // lease's clean-up then looks for.
            Ok(Ok(false)) => (extended, old_marker_ms),
            // Refused (fail closed), or panicked: the old end back.
            Ok(Err(_)) | Err(_) => {
                shard.restore_lease(self.fp, &extended, old.deadline, &cap);
                (old, self.marker_ms)
            }
        };
        shard.marker_written(self.fp, &lease);
        drop(shard);
        self.lease = lease;
        self.marker_ms = marker_ms;
        match renewed {
            Ok(renewed) => renewed.map(|_| ()),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }

    /// The lease's end as the claim's marker carries it (wall-clock ms): the
    /// lease's own, unless an extension's rewrite of the marker was refused under
    /// `FailOpen`.
    fn marker_end_ms(&self) -> u64 {
        match self.marker_ms {
            0 => self.ns().params.tick_to_ms(self.lease.deadline),
            ms => ms,
        }
    }

    /// Marks the key done: it answers `Duplicate` for the namespace's TTL.
    pub fn complete(mut self) -> Result<()> {
        self.finish(None)
    }

    /// Marks the key done and stores `result`, which duplicates get back.
    ///
    /// A result over the namespace's `max_result_len` is refused with
    /// [`Error::ResultTooLarge`] and changes nothing: the claim stays held until its
    /// lease runs out, as one never completed (with a durable tier its marker stays,
    /// and a crash before its lease's end has the next open report it among
    /// [`Engine::orphans`]; after that end, with journal markers, the maintenance
    /// pass frees its journal slot, and otherwise the marker stays until its key is
    /// claimed again or the next open reports it).
    pub fn complete_with_result(mut self, result: &[u8]) -> Result<()> {
        let max = self.ns().cfg.max_result_len;
        if result.len() > max {
            self.armed = false;
            return Err(Error::ResultTooLarge {
                len: result.len(),
                max,
            });
        }
        self.finish(Some(result))
    }

    /// Marks the key done and, in the same atomic write, applies `changes` to the
    /// consumer's own state (a co-commit; needs the durable tier). Either the
    /// completion and every change are stored, or none of them is.
    ///
    /// Refused without any change, the claim staying held until its lease runs out:
    /// [`Error::NotDurable`] on a memory-only engine, [`Error::StateTooLarge`] for a
    /// change over [`MAX_STATE_LEN`], [`Error::UnknownStateFamily`]
    /// for a family this engine did not declare, [`Error::ResultTooLarge`]. (Such a
    /// claim is one never completed: its claim marker stays, as
    /// [`ClaimGuard::complete_with_result`] says of a result too large.) With
    /// any changes, a store failure is returned, whatever the namespace's failure
    /// policy (state changes are never applied from the hot tier alone; with none,
    /// `FailOpen` completes in the hot tier as [`ClaimGuard::complete`] does): a write that failed
    /// releases the claim (so a redelivery retries), while a failed fsync after the
    /// write (the group commit's, [`EngineBuilder::commit_delay`], or, with group
    /// commit on or off, another fsync of the log that failed after the write) leaves
    /// the completion and its changes applied together and readable (a redelivery
    /// answers `Duplicate`, [`Engine::read_state`] shows the changes), not known to
    /// survive a power loss. Under `FailOpen` a claim whose read failed was decided
    /// from the hot tier alone and may have acquired a key done on disk: the key's
    /// record is read again first (failing closed; not for a key the prefilter has
    /// never seen), and a live one, or a read that fails, refuses the co-commit as a
    /// refused write does, so the changes are never applied twice.
    pub fn complete_with(mut self, result: Option<&[u8]>, changes: StateChanges) -> Result<()> {
        let Some(d) = &self.ns().durable else {
            self.armed = false;
            return Err(Error::NotDurable);
        };
        if let Some((family, _)) = changes.ops.iter().find(|(f, _)| !d.has_state_family(f)) {
            self.armed = false;
            return Err(Error::UnknownStateFamily(family.clone()));
        }
        if let Some(len) = changes.too_large {
            self.armed = false;
            return Err(Error::StateTooLarge {
                len,
                max: MAX_STATE_LEN,
            });
        }
        if let Some(r) = result {
            let max = self.ns().cfg.max_result_len;
            if r.len() > max {
                self.armed = false;
                return Err(Error::ResultTooLarge { len: r.len(), max });
            }
        }
        self.finish_with(result, &changes.ops)
    }

    /// Marks the key done and, in the same atomic write, applies the crate's own
    /// co-committed operations (a replayed dead letter's record). Without a durable
    /// tier, completes in the hot tier and leaves `ops` to the caller.
    #[cfg_attr(not(feature = "durable"), allow(dead_code))]
    pub(crate) fn complete_co_committed(mut self, ops: &[(String, StateOp)]) -> Result<()> {
        self.finish_with(None, ops)
    }

    /// Gives the claim up without completing: the key is claimable again at once.
    pub fn release(mut self) -> Result<()> {
        // Read while the guard is still armed: if the clock panics, the drop
        // releases the claim.
        let now = self.ns().now();
        self.armed = false;
        self.release_inner(now)
    }

    /// The done record of a completion at `now`: it lasts the retention, and at least
    /// to the window's end rounded up to a tick (`Params::record_until`, what
    /// `done_times` reports), which with a retention less than a tick longer than the
    /// TTL is up to a tick past the retention.
    fn done_record(
        &self,
        p: &Params,
        now: Now,
        payload: Option<u64>,
        result: Option<&[u8]>,
    ) -> Record {
        let retention_ms = p.retention_ms.unwrap_or(0);
        // (A fixed window's entry keeps no completion time: once the clock has moved
        // on, the hot tier derives it from the deadline, up to a tick late on coarse
        // ticks, and reports the expiry from the earliest completion that deadline
        // allows: never past this record's, up to a tick before it.)
        let expires_ms = p.record_until(now.ms, p.tick_to_ms(p.deadline(now, p.ttl_ms)));
        Record {
            state: RecordState::Done,
            token: self.lease.token,
            at_ms: now.ms,
            expires_ms: expires_ms.unwrap_or(now.ms.saturating_add(retention_ms)),
            payload,
            result: result.map(<[u8]>::to_vec),
        }
    }

    fn finish(&mut self, result: Option<&[u8]>) -> Result<()> {
        self.finish_with(result, &[])
    }

    fn finish_with(&mut self, result: Option<&[u8]>, state: &[(String, StateOp)]) -> Result<()> {
        let now = self.ns().now();
        #[cfg(test)]
        tests::after_completion_clock();
        self.finish_at(result, state, now)
    }

    /// Completes at time `now` (or the shard's wheel's, if the wheel has passed it).
    fn finish_at(
        &mut self,
        result: Option<&[u8]>,
        state: &[(String, StateOp)],
        mut now: Now,
    ) -> Result<()> {
        self.armed = false;
        let ns = self.ns();
        let si = self.shard as usize;
        let cap = ns.capacity();
        let Some(d) = &ns.durable else {
            let (r, anchor) = {
                let mut shard = ns.slots[si].lock();
                // Never behind the shard's wheel (see `Shard::not_behind`): a TTL set
                // from an earlier reading could be over before the completion took hold.
                let now = shard.not_behind(&ns.params, now);
                let r = shard.complete(self.fp, &self.lease, result, &ns.params, now, &cap);
                (r, shard.guard_ended())
            };
            self.counted = false;
            drop(anchor);
            return r.map_err(|Refused::LeaseLost| Error::LeaseLost);
        };
        // Mark the entry as completing, write without holding the shard lock (so an
        // fsync never blocks other keys, and concurrent completions share one), then
        // mark it done, at the time the first lock round took (never behind the
        // shard's wheel), in both tiers.
        let payload = self.hold_for_durable(ns, d, &mut now, &cap, true)?;
        let record = self.done_record(&ns.params, now, payload, result);
        let stored = write_unwinding(|| d.write_completions(&[(self.fp.to_u128(), record)], state));
        if stored.is_err() {
            settle_unwound(d, [(self.fp, self.lease.token)]);
        }
        let stored_ok = stored_as(&stored);
        let anchor = last_round(
            &mut ns.slots[si].lock(),
            &ns.params,
            self.fp,
            &self.lease,
            result,
            now,
            stored_ok,
            &cap,
        );
        self.counted = false;
        drop(anchor);
        finished(stored).map(|_| ())
    }

    /// Marks the claim's entry completing (held whatever its lease) while its durable
    /// write (`done`) or marker settlement runs, returning its payload fingerprint; a
    /// claim that lost its lease (or a completion of a key being forgotten) removes
    /// its marker if still its own ([`DurableNs::lease_lost`]) and is refused. `now`
    /// is taken as the shard's wheel's time if the wheel has passed it
    /// (`Shard::not_behind`): the caller goes on from the time this round used.
    fn hold_for_durable(
        &self,
        ns: &NsInner,
        d: &DurableNs,
        now: &mut Now,
        cap: &Capacity<'_>,
        done: bool,
    ) -> Result<Option<u64>> {
        let begun = {
            let mut shard = ns.slots[self.shard as usize].lock();
            // Never behind the shard's wheel (see `Shard::not_behind`): a TTL set from
            // an earlier reading could be over before the completion took hold.
            *now = shard.not_behind(&ns.params, *now);
            shard.begin_complete(self.fp, &self.lease, *now, cap, done)
        };
        begun.map_err(|Refused::LeaseLost| {
            d.lease_lost(self.fp.to_u128(), self.lease.token, self.marker_end_ms());
            Error::LeaseLost
        })
    }

    /// Ends the hold its claim had while its marker was written
    /// (`Shard::hold_for_marker`): from here its lease runs as any other.
    fn marker_written(&self) {
        self.ns().slots[self.shard as usize]
            .lock()
            .marker_written(self.fp, &self.lease);
    }

    /// Gives up a claim whose marker was never written: the hot tier only. At the
    /// namespace's latest reading, without asking the clock: a batch's claims are
    /// given up as its panic unwinds too (see `Unwritten`).
    fn abandon(mut self) {
        self.armed = false;
        let ns = self.ns();
        let now = ns.latest();
        let si = self.shard as usize;
        let cap = ns.capacity();
        let anchor = {
            let mut shard = ns.slots[si].lock();
            shard.marker_written(self.fp, &self.lease);
            // Whether or not its lease ran out meanwhile (a batch can take longer):
            // the caller never saw this claim, so it was not acquired as far as the
            // counters go, and no lease was lost.
            shard.abandon(self.fp, &self.lease, now, &cap);
            shard.counters.acquired = shard.counters.acquired.saturating_sub(1);
            shard.guard_ended()
        };
        self.counted = false;
        drop(anchor);
    }

    /// Releases the claim at `now`.
    fn release_inner(&mut self, mut now: Now) -> Result<()> {
        let ns = self.ns();
        let si = self.shard as usize;
        let cap = ns.capacity();
        let Some(d) = &ns.durable else {
            let (r, anchor) = {
                let mut shard = ns.slots[si].lock();
                let r = shard.release(self.fp, &self.lease, now, &cap);
                (r, shard.guard_ended())
            };
            self.counted = false;
            drop(anchor);
            return r.map_err(|Refused::LeaseLost| Error::LeaseLost);
        };
        // The entry stays held (marked completing, as by a completion) while the
        // marker is settled, and is released only after: no new claim of the key can
        // write a marker in between for this release to remove.
        // (No done record: a release goes ahead during a forget, which waits for it.)
        self.hold_for_durable(ns, d, &mut now, &cap, false)?;
        // A panic here still frees the entry below, then goes on.
        let settled = write_unwinding(|| {
            #[cfg(test)]
            tests::before_marker_settled();
            release_marker(d, self.fp, self.lease.token);
            Ok(())
        });
        let anchor = last_round(
            &mut ns.slots[si].lock(),
            &ns.params,
            self.fp,
            &self.lease,
            None,
            now,
            Stored::No,
            &cap,
        );
        self.counted = false;
        drop(anchor);
        finished(settled)
    }
}

/// A forget in progress on a durable namespace, noted in the key's shard
/// ([`Shard::begin_forget`](crate::hot::Shard)) for as long as it lives: its drop
/// ends the note, on every way out of the forget (an error, a panic).
struct Forgetting<'a> {
    ns: &'a NsInner,
    si: usize,
    /// The note's id in the shard.
    id: u32,
    /// The note's count of claims of the key acquired while it lives
    /// (`Shard::forget_claims`) as the forget last read it, in a lock round before
    /// its delete: a claim counted after it may have written its marker after the
    /// delete.
    claims: u32,
    /// The rounds that found the count moved so far.
    moved: u32,
    /// Not ended yet (by [`Forgetting::end`]): the drop ends it.
    open: bool,
}

/// After how many rounds that found claims of its key acquired meanwhile a forget
/// holds the key against new ones (`Shard::close_forget`), so that a key claimed
/// and released over and over cannot keep it deleting again.
const FORGET_ROUNDS_OPEN: u32 = 2;

impl<'a> Forgetting<'a> {
    fn begin(ns: &'a NsInner, si: usize, fp: Fp) -> Self {
        let id = ns.slots[si].lock().begin_forget(fp);
        Forgetting {
            ns,
            si,
            id,
            claims: 0,
            moved: 0,
            open: true,
        }
    }

    /// Whether a claim of the key was acquired in `shard` (the key's, locked by the
    /// caller) since the last reading, which this one replaces. The round that finds
    /// it so for the [`FORGET_ROUNDS_OPEN`]th time closes the note: from then on the
    /// forget holds the key, and its claims answer `InProgress` until it ends.
    fn claimed_since(&mut self, shard: &mut Shard) -> bool {
        let claims = shard.forget_claims(self.id);
        if std::mem::replace(&mut self.claims, claims) == claims {
            return false;
        }
        self.moved += 1;
        if self.moved >= FORGET_ROUNDS_OPEN {
            shard.close_forget(self.id);
        }
        true
    }

    /// Ends the note in `shard` (the key's, locked by the caller), the key forgotten.
    fn end(mut self, shard: &mut crate::hot::Shard) {
        shard.end_forget(self.id);
        self.open = false;
    }
}

impl Drop for Forgetting<'_> {
    /// The forget failed (an error, a panic): the note ends, and a claim it refused
    /// meanwhile is given up.
    fn drop(&mut self) {
        if self.open {
            let cap = self.ns.capacity();
            self.ns.slots[self.si].lock().abandon_forget(self.id, &cap);
        }
    }
}

impl Drop for ClaimGuard {
    fn drop(&mut self) {
        // A release that panics still ends the count below, then goes on panicking.
        let released = self.armed.then(|| {
            self.armed = false;
            // A clock that panics does not keep the key held to the end of its lease
            // (the drop may be that panic's own unwinding, from a completion): the
            // release is made at the namespace's latest reading, then the clock's
            // panic goes on as the release's would.
            let ns = self.ns();
            let (now, clock) =
                match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ns.now())) {
                    Ok(now) => (now, None),
                    Err(panic) => (ns.latest(), Some(panic)),
                };
            let released =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.release_inner(now)));
            match clock {
                Some(panic) => Err(panic),
                None => released,
            }
        });
        if self.counted {
            // No lock round ended the count (the guard failed before its last one,
            // or was refused without one): a round of its own.
            let anchor = self.ns().slots[self.shard as usize].lock().guard_ended();
            self.counted = false;
            drop(anchor);
        }
        if let Some(Err(panic)) = released {
            // A second panic while the thread already unwinds would abort the
            // process: the clock's or the release's own panic is dropped then (the
            // entry was freed).
            if !std::thread::panicking() {
                std::panic::resume_unwind(panic);
            }
        }
    }
}

/// A durable completion's or release's last lock round, on the guard's shard (locked
/// by the caller): the entry of `lease` is marked done (`stored`: the record was
/// written) or let go, and the guard's count ends. Returns what
/// [`Shard::guard_ended`] gives back, which the caller drops after letting the lock
/// go and after its last use of the namespace. (The lock is the caller's to let go:
/// a function given the namespace by reference must not outlive it, and once the
/// lock is let go another guard may free it.)
#[allow(clippy::too_many_arguments)]
fn last_round(
    shard: &mut Shard,
    p: &Params,
    fp: Fp,
    lease: &Lease,
    result: Option<&[u8]>,
    now: Now,
    stored: Stored,
    cap: &Capacity<'_>,
) -> Option<Anchor> {
    shard.finish_complete(fp, lease, result, p, now, stored, cap);
    shard.guard_ended()
}

/// A completion's durable write, with a panic caught so that the caller can release
/// the entries it marked as completing (they would otherwise stay held for good)
/// before [`finished`] lets the panic go on.
type Unwinding<T> = std::thread::Result<Result<T>>;

fn write_unwinding<T>(write: impl FnOnce() -> Result<T>) -> Unwinding<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(write))
}

/// After a completion's write panicked: its claims are released (by `last_round`,
/// next), so their markers go now, as a release's do (the journal's slot cleared, a
/// marker in RocksDB deleted); the entries are still held, so no new claim of a key
/// can write a marker in between. Left, a marker would make a clean restart report
/// the released claim as an orphan and hold its key to the end of its lease. A panic
/// here too is swallowed: the first one goes on to the caller.
fn settle_unwound(d: &DurableNs, claims: impl IntoIterator<Item = (Fp, u32)>) {
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        for (fp, token) in claims {
            release_marker(d, fp, token);
        }
    }));
}

/// Removes the marker of claim `token` of `fp`, released: settled where it was kept
/// off disk (the journal's slot, a deferred marker in memory), else deleted from
/// RocksDB ([`DurableNs::release_marker`]).
fn release_marker(d: &DurableNs, fp: Fp, token: u32) {
    d.release_marker(fp.to_u128(), token);
}

/// Waits until `fp`'s entry in `slot` is no longer held for a write outside the lock
/// (a completion's or a window's record, a claim's marker: written or not).
fn wait_while_completing(slot: &SlotCell, fp: Fp) {
    let mut pause = std::time::Duration::from_micros(20);
    let mut round = 0u32;
    loop {
        if !slot.lock().is_completing(fp) {
            return;
        }
        // An fsync takes hundreds of microseconds: yield a few times, then back
        // off, so the wait neither burns a core nor crowds the lock.
        if round < 16 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(pause);
            pause = (pause * 2).min(std::time::Duration::from_millis(1));
        }
        round = round.saturating_add(1);
    }
}

/// What a durable write left: a panic or an error released the claim.
fn stored_as(stored: &Unwinding<Stored>) -> Stored {
    match stored {
        Ok(Ok(s)) => *s,
        _ => Stored::No,
    }
}

/// The write's result, or its panic resumed.
fn finished<T>(stored: Unwinding<T>) -> Result<T> {
    stored.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// The claims of a batch whose markers are not written yet: given up if dropped
/// (a claim of the batch panicked).
struct Unwritten(Vec<Claim>);

/// A batch's pin for its lock-free reads, and the duplicates it answered with them:
/// the count is added to the namespace's when this drops, on every way out of the
/// batch (its end, an error, a panic), then the pin goes.
#[cfg(not(idem_loom))]
struct LockFreeAnswers<'a> {
    ns: &'a NsInner,
    pin: Option<crate::hot::reclaim::Pin>,
    /// Answered so far (none without a pin).
    answered: u64,
}

#[cfg(not(idem_loom))]
impl Drop for LockFreeAnswers<'_> {
    fn drop(&mut self) {
        if let Some(pin) = &self.pin {
            self.ns.lock_free_duplicates.add(pin, self.answered);
        }
    }
}

impl Drop for Unwritten {
    fn drop(&mut self) {
        abandon_all(std::mem::take(&mut self.0));
    }
}

/// Gives up the acquired claims of a batch whose markers were never written.
fn abandon_all(claims: Vec<Claim>) {
    for c in claims {
        if let Claim::Acquired(g) = c {
            g.abandon();
        }
    }
}

// The claim guard must stay movable across threads and hold no borrow.
#[allow(dead_code)]
fn _assert_send_static() {
    fn is<T: Send + Sync + 'static>() {}
    is::<ClaimGuard>();
    is::<Namespace>();
    is::<Engine>();
}
