//! The engine, its namespaces, and the claim protocol's public face.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use crossbeam::utils::CachePadded;
use xxhash_rust::xxh3::{xxh3_128_with_seed, xxh3_64_with_seed};

use crate::clock::Clock;
use crate::config::{EngineBuilder, NamespaceConfig};
use crate::error::{Error, KeyError, Result};
use crate::hot::{Capacity, Fp, Lease, Now, Params, Refused, ShardClaim, ShardSlot, ShardState};
use crate::stats::Stats;
use crate::sync::{Arc, AtomicUsize};

/// Mixed into the seed for payload fingerprints, so a payload never fingerprints like
/// a key.
const PAYLOAD_SEED_MIX: u64 = 0x7061_796c_6f61_6421;

/// The deduplication engine: a set of named namespaces sharing one clock.
///
/// Build it with [`Engine::builder`], take a cheap [`Namespace`] handle per namespace,
/// and claim keys through it. Dropping the engine stops its maintenance thread;
/// namespace handles and guards that outlive it keep working.
pub struct Engine {
    shared: Arc<Shared>,
    #[cfg(not(idem_loom))]
    maintenance: Option<maintenance::Thread>,
}

pub(crate) struct Shared {
    namespaces: HashMap<String, Arc<NsInner>>,
    clock: std::sync::Arc<dyn Clock>,
}

impl Shared {
    fn run_maintenance(&self) -> usize {
        let now_ms = self.clock.now_ms();
        self.namespaces
            .values()
            .map(|ns| ns.expire_all(ns.params.now(now_ms)))
            .sum()
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
        let seed = b.seed.unwrap_or_else(random_seed);
        let epoch_ms = b.clock.now_ms();
        let tick_ms = b.tick.as_millis() as u64;
        let mut namespaces = HashMap::new();
        for (name, cfg) in b.namespaces {
            let ns = NsInner::new(name.clone(), cfg, seed, epoch_ms, tick_ms, b.clock.clone());
            namespaces.insert(name, Arc::new(ns));
        }
        let shared = Arc::new(Shared {
            namespaces,
            clock: b.clock,
        });
        #[cfg(not(idem_loom))]
        let maintenance = b
            .maintenance_interval
            .map(|every| maintenance::Thread::start(shared.clone(), every));
        #[cfg(idem_loom)]
        let _ = b.maintenance_interval;
        Ok(Engine {
            shared,
            #[cfg(not(idem_loom))]
            maintenance,
        })
    }

    /// A handle on the namespace called `name`.
    pub fn namespace(&self, name: &str) -> Result<Namespace> {
        self.shared
            .namespaces
            .get(name)
            .map(|inner| Namespace {
                inner: inner.clone(),
            })
            .ok_or_else(|| Error::UnknownNamespace(name.to_owned()))
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
        total
    }

    /// Reclaims every key whose TTL or lease has run out, now, and returns how many.
    /// The maintenance thread calls this periodically; tests on a manual clock call it
    /// directly.
    pub fn run_maintenance(&self) -> usize {
        self.shared.run_maintenance()
    }
}

#[cfg(all(test, not(idem_loom)))]
mod tests {
    use super::default_shards;

    #[test]
    fn default_shards_put_full_shards_just_under_a_table_threshold() {
        for max_keys in [1_000, 65_536, 1_000_000, 2_000_000, 10_000_000, 100_000_000] {
            let shards = default_shards(max_keys);
            assert!((32..=1024).contains(&shards), "{max_keys}: {shards}");
            let per_shard = max_keys.div_ceil(shards);
            let buckets = (per_shard * 8 / 7).next_power_of_two();
            // At most 7/8 full (no further growth), and at least 7/16 (not oversized).
            assert!(per_shard <= buckets * 7 / 8, "{max_keys}");
            assert!(
                per_shard * 16 > buckets * 7 * 97 / 100 || max_keys < 32 * 16,
                "{max_keys}"
            );
        }
        assert_eq!(default_shards(1), 32);
    }
}

#[cfg(not(idem_loom))]
impl Drop for Engine {
    fn drop(&mut self) {
        if let Some(t) = self.maintenance.take() {
            t.stop();
        }
    }
}

#[cfg(not(idem_loom))]
mod maintenance {
    use std::sync::{Arc as StdArc, Condvar, Mutex as StdMutex};
    use std::thread::JoinHandle;
    use std::time::Duration;

    use super::Shared;
    use crate::sync::Arc;

    /// The background maintenance thread and the flag that stops it.
    pub(super) struct Thread {
        stop: StdArc<(StdMutex<bool>, Condvar)>,
        handle: JoinHandle<()>,
    }

    impl Thread {
        pub(super) fn start(shared: Arc<Shared>, every: Duration) -> Thread {
            let stop = StdArc::new((StdMutex::new(false), Condvar::new()));
            let flag = stop.clone();
            let handle = std::thread::Builder::new()
                .name("idem-maintenance".into())
                .spawn(move || {
                    let (lock, cvar) = &*flag;
                    let mut stopped = lock.lock().unwrap_or_else(|p| p.into_inner());
                    while !*stopped {
                        let (guard, timeout) = cvar
                            .wait_timeout(stopped, every)
                            .unwrap_or_else(|p| p.into_inner());
                        stopped = guard;
                        if *stopped {
                            break;
                        }
                        if timeout.timed_out() {
                            drop(stopped);
                            shared.run_maintenance();
                            stopped = lock.lock().unwrap_or_else(|p| p.into_inner());
                        }
                    }
                })
                .expect("spawning the maintenance thread");
            Thread { stop, handle }
        }

        pub(super) fn stop(self) {
            let (lock, cvar) = &*self.stop;
            *lock.lock().unwrap_or_else(|p| p.into_inner()) = true;
            cvar.notify_all();
            let _ = self.handle.join();
        }
    }
}

/// The shard count for a namespace of `max_keys` keys.
///
/// A shard's index is a SwissTable whose bucket count is a power of two filled to at
/// most 7/8. The count is chosen so that, when the namespace is full, every shard sits
/// just under such a threshold (with 3% headroom for uneven spread): at the sizing
/// point each key then costs about 8/7 index slots instead of up to 16/7.
pub(crate) fn default_shards(max_keys: usize) -> usize {
    const MIN: usize = 32;
    const MAX: usize = 1024;
    for bits in (4..=24).rev() {
        let per_shard = (1usize << bits) * 7 / 8 * 97 / 100;
        let shards = max_keys.div_ceil(per_shard);
        if shards >= MIN {
            return shards.min(MAX);
        }
    }
    MIN
}

/// One namespace's state, shared by its handles and guards.
pub(crate) struct NsInner {
    name: String,
    cfg: NamespaceConfig,
    params: Params,
    seed: u64,
    clock: std::sync::Arc<dyn Clock>,
    slots: Box<[CachePadded<ShardSlot>]>,
    pool: AtomicUsize,
}

impl NsInner {
    fn new(
        name: String,
        cfg: NamespaceConfig,
        seed: u64,
        epoch_ms: u64,
        tick_ms: u64,
        clock: std::sync::Arc<dyn Clock>,
    ) -> Self {
        let shards = cfg.shards.unwrap_or_else(|| default_shards(cfg.max_keys));
        let params = Params {
            epoch_ms,
            tick_ms,
            ttl_ms: cfg.ttl.as_millis() as u64,
            lease_ms: cfg.lease.as_millis() as u64,
            sliding: cfg.extend_on_duplicate,
        };
        let now_tick = params.now(clock.now_ms()).tick;
        let slots = (0..shards)
            .map(|_| CachePadded::new(ShardSlot::new(now_tick)))
            .collect();
        let pool = AtomicUsize::new(cfg.max_keys);
        NsInner {
            name,
            cfg,
            params,
            seed,
            clock,
            slots,
            pool,
        }
    }

    #[inline]
    fn now(&self) -> Now {
        self.params.now(self.clock.now_ms())
    }

    #[inline]
    fn capacity(&self, me: usize) -> Capacity<'_> {
        Capacity {
            pool: &self.pool,
            slots: &self.slots,
            me,
        }
    }

    #[inline]
    fn key_fp(&self, key: &[u8]) -> Result<Fp> {
        if key.is_empty() {
            return Err(KeyError::Empty.into());
        }
        if key.len() > self.cfg.max_key_len {
            return Err(KeyError::TooLong {
                len: key.len(),
                max: self.cfg.max_key_len,
            }
            .into());
        }
        Ok(Fp::from_u128(xxh3_128_with_seed(key, self.seed)))
    }

    fn expire_all(&self, now: Now) -> usize {
        (0..self.slots.len())
            .map(|i| {
                let cap = self.capacity(i);
                self.slots[i].shard.lock().expire_due(now, &cap)
            })
            .sum()
    }

    fn stats(&self) -> Stats {
        let mut s = Stats::default();
        for slot in self.slots.iter() {
            let shard = slot.shard.lock();
            s.resident_keys += shard.len() as u64;
            s.hot_bytes += shard.heap_bytes() as u64;
            s.add_counters(&shard.counters);
        }
        s.hot_bytes += (self.slots.len() * std::mem::size_of::<CachePadded<ShardSlot>>()) as u64;
        s
    }
}

/// A cheap, cloneable handle on one namespace. It is `Send + Sync`: share it between
/// worker threads or clone it into each.
#[derive(Clone)]
pub struct Namespace {
    inner: Arc<NsInner>,
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

    /// Claims `key`: atomically, exactly one of any number of concurrent claims of
    /// one key is `Acquired`.
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

    /// Claims `key` and records a fingerprint of `payload` with it. A later claim of the
    /// same key with a different payload (while the key is in progress or done) is
    /// refused with [`Error::PayloadMismatch`]: the key was reused for another message.
    /// Claims without a payload are not compared.
    pub fn claim_with_payload(&self, key: &[u8], payload: &[u8]) -> Result<Claim> {
        self.claim_fp(
            key,
            Some(xxh3_64_with_seed(
                payload,
                self.inner.seed ^ PAYLOAD_SEED_MIX,
            )),
        )
    }

    fn claim_fp(&self, key: &[u8], payload: Option<u64>) -> Result<Claim> {
        let ns = &*self.inner;
        let fp = ns.key_fp(key)?;
        let si = fp.shard(ns.slots.len());
        let mut retried = false;
        loop {
            let now = ns.now();
            let cap = ns.capacity(si);
            let answer = ns.slots[si]
                .shard
                .lock()
                .claim(fp, payload, &ns.params, now, &cap);
            return match answer {
                ShardClaim::Acquired(lease) => Ok(Claim::Acquired(ClaimGuard {
                    ns: self.inner.clone(),
                    fp,
                    shard: si as u32,
                    lease,
                    armed: true,
                })),
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
                } => Ok(Claim::Duplicate(Done {
                    completed_at_ms,
                    expires_at_ms,
                    result,
                })),
                ShardClaim::PayloadMismatch => Err(Error::PayloadMismatch),
                ShardClaim::Full if !retried => {
                    // Expired keys elsewhere may still hold capacity: reclaim, retry once.
                    retried = true;
                    ns.expire_all(now);
                    continue;
                }
                ShardClaim::Full => {
                    ns.slots[si].shard.lock().counters.capacity_refusals += 1;
                    Err(Error::CapacityExceeded {
                        namespace: ns.name.clone(),
                        max_keys: ns.cfg.max_keys,
                    })
                }
            };
        }
    }

    /// Looks `key` up without changing anything: `None` if it is unknown or expired.
    /// Dead-letter replay uses it to decide before claiming.
    pub fn check(&self, key: &[u8]) -> Result<Option<KeyState>> {
        let ns = &*self.inner;
        let fp = ns.key_fp(key)?;
        let si = fp.shard(ns.slots.len());
        let now = ns.now();
        let cap = ns.capacity(si);
        let state = ns.slots[si].shard.lock().check(fp, &ns.params, now, &cap);
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
    /// entry was removed.
    pub fn forget(&self, key: &[u8]) -> Result<bool> {
        let ns = &*self.inner;
        let fp = ns.key_fp(key)?;
        let si = fp.shard(ns.slots.len());
        let now = ns.now();
        let cap = ns.capacity(si);
        let removed = ns.slots[si].shard.lock().forget(fp, now, &cap);
        Ok(removed)
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
    /// Another worker holds a live lease on the key: retry later (nack).
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

    /// When the key was completed (wall-clock ms).
    pub fn completed_at_ms(&self) -> u64 {
        self.completed_at_ms
    }

    /// When the key stops answering `Duplicate` (wall-clock ms), as of this answer.
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
    /// claimed again unless the holder completes it first.
    pub fn lease_expires_at_ms(&self) -> u64 {
        self.lease_expires_at_ms
    }

    /// How long until the lease runs out, as of the claim: a natural retry delay.
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
    /// Completed and within its TTL.
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
pub struct ClaimGuard {
    ns: Arc<NsInner>,
    fp: Fp,
    shard: u32,
    lease: Lease,
    armed: bool,
}

impl fmt::Debug for ClaimGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClaimGuard")
            .field("namespace", &self.ns.name)
            .field("lease_expires_at_ms", &self.lease_expires_at_ms())
            .field("token", &self.lease.token)
            .finish()
    }
}

impl ClaimGuard {
    /// When this claim's lease runs out (wall-clock ms).
    pub fn lease_expires_at_ms(&self) -> u64 {
        self.ns.params.tick_to_ms(self.lease.deadline)
    }

    /// Marks the key done: it answers `Duplicate` for the namespace's TTL.
    pub fn complete(mut self) -> Result<()> {
        self.finish(None)
    }

    /// Marks the key done and stores `result`, which duplicates get back.
    ///
    /// A result over the namespace's `max_result_len` is refused with
    /// [`Error::ResultTooLarge`] and changes nothing: the claim stays held until its
    /// lease runs out.
    pub fn complete_with_result(mut self, result: &[u8]) -> Result<()> {
        let max = self.ns.cfg.max_result_len;
        if result.len() > max {
            self.armed = false;
            return Err(Error::ResultTooLarge {
                len: result.len(),
                max,
            });
        }
        self.finish(Some(result))
    }

    /// Gives the claim up without completing: the key is claimable again at once.
    pub fn release(mut self) -> Result<()> {
        self.armed = false;
        self.release_inner()
    }

    fn finish(&mut self, result: Option<&[u8]>) -> Result<()> {
        self.armed = false;
        let ns = &*self.ns;
        let now = ns.now();
        let cap = ns.capacity(self.shard as usize);
        let r = ns.slots[self.shard as usize].shard.lock().complete(
            self.fp,
            &self.lease,
            result,
            &ns.params,
            now,
            &cap,
        );
        r.map_err(|Refused::LeaseLost| Error::LeaseLost)
    }

    fn release_inner(&self) -> Result<()> {
        let ns = &*self.ns;
        let now = ns.now();
        let cap = ns.capacity(self.shard as usize);
        let r = ns.slots[self.shard as usize]
            .shard
            .lock()
            .release(self.fp, &self.lease, now, &cap);
        r.map_err(|Refused::LeaseLost| Error::LeaseLost)
    }
}

impl Drop for ClaimGuard {
    fn drop(&mut self) {
        if self.armed {
            self.armed = false;
            let _ = self.release_inner();
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

impl NsInner {
    /// For the crate's own tests and benches: the number of lock shards.
    #[allow(dead_code)]
    pub(crate) fn shard_count(&self) -> usize {
        self.slots.len()
    }
}
