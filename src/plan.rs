//! Sizing: what a namespace will cost, computed before it is deployed (`idem plan`).
//!
//! The figures are per-key constants measured by the benchmark harness (the commands
//! are given beside each constant) multiplied by key counts: resident keys are peak
//! rate x TTL, retained keys peak rate x retention. `Stats::bytes_per_key()` on a live
//! engine is the figure to hold against [`Plan::hot_bytes_per_key`] in production.

use std::fmt;
use std::time::Duration;

use crate::config::{whole_ms, MAX_KEYS_LIMIT, MAX_RETENTION};
use crate::durable::codec::MAX_RESULT;

/// Hot-tier heap bytes per resident key, all-in (entry, index share, wheel, shard
/// overhead), for a namespace whose `max_keys` is its resident key count, keys
/// completed without a result, its memory made at build (the default
/// `NamespaceConfig::preallocate`).
///
/// Measured: `cargo bench --no-default-features --bench workloads -- --n
/// 1000000,10000000 --threads 1 --runs 1 --peers idem,idem-r64`, W1, "heap B/key" of
/// idem (36.04 at 1 M, 34.65 at 10 M, 2026-12-08; the allocator's count, which
/// `Stats::hot_bytes` matches to 0.1 B; memory figures repeat exactly between runs).
/// Made as keys arrive (`idem-grow`), 35.6 and 34.6.
const HOT_BYTES_PER_KEY: f64 = 35.3;

/// Hot-tier heap bytes per key that a stored result adds besides its own bytes: the
/// key's slot in its shard's column of results (16 bytes) and the result's
/// allocation header.
///
/// Measured by the same command: idem-r64's "heap B/key" minus idem's, minus 64
/// (132.24 - 36.04 - 64 at 1 M; 130.70 - 34.65 - 64 at 10 M; 2026-12-08).
const RESULT_OVERHEAD_PER_KEY: f64 = 32.1;

/// Hot-tier heap bytes a sliding window (`NamespaceConfig::extend_on_duplicate`) adds
/// to a done key: its completion time, 8 bytes in its shard's column of them.
///
/// Measured: `Stats::bytes_per_key` of full memory-only namespaces with and without
/// sliding windows, release build (43.20 - 35.10 at 1 M keys, 42.57 - 34.53 at 4 M:
/// `cargo test --release --no-default-features --test sizing -- --ignored
/// --nocapture`); `tests/sizing.rs` holds it against a live engine.
const SLIDING_BYTES_PER_KEY: f64 = 8.1;

/// Hot-tier heap bytes a payload fingerprint (`Namespace::claim_with_payload`) adds to
/// a key: 8 bytes in its shard's column of them.
///
/// Measured as [`SLIDING_BYTES_PER_KEY`], keys claimed with a payload (43.20 - 35.10
/// at 1 M keys, 42.58 - 34.53 at 4 M).
const PAYLOAD_BYTES_PER_KEY: f64 = 8.1;

/// The hot-tier heap bytes of a stored result of `len` bytes, besides the
/// [`RESULT_OVERHEAD_PER_KEY`] measured with 64-byte results: its allocation holds
/// two counts (16 bytes) and the bytes, padded to 8 (as `Stats::hot_bytes` counts
/// it), where the measured figure took 64 + 16 of it.
fn result_heap_bytes(len: usize) -> f64 {
    crate::hot::result_allocation(len) as f64 - 16.0
}

/// Disk bytes per completed key in the durable tier: the done records' SST files
/// after flush and compaction, records without a result.
///
/// Measured: `idem bench durable --disk --keys 1000000` (51.0 B per key: 1,000,000
/// records in 51.0 MB, their Bloom filter blocks included; the write-ahead log and the
/// claim markers' files come on top until they are recycled).
const DURABLE_BYTES_PER_KEY: f64 = 51.0;

/// Disk bytes per key that a stored result adds to the done record besides its own
/// bytes (records are not compressed).
///
/// Measured: `idem bench durable --disk --keys 1000000 --result-bytes 64` (119.5 B per
/// key), minus the 51.0 above, minus 64.
const DURABLE_RESULT_OVERHEAD_PER_KEY: f64 = 4.5;

/// Redis memory per key for `SET key 1 NX EX ttl` with 20-byte keys (`used_memory`
/// delta over `DBSIZE`).
///
/// Measured: `cargo bench --no-default-features --bench workloads -- --n
/// 1000000,10000000 --threads 1 --runs 3 --peers idem,idem-r64,floor,redis-p64
/// --redis-max-n 10000000`, W1, "heap B/key" of Redis pipelined 64:
/// 129.6 at 10 M keys, the figure used (112.8 at 1 M: Redis's two hash tables are
/// power-of-two arrays, so the figure moves with where N falls between powers of
/// two). Redis 7.0.15 with jemalloc 5.3.
const REDIS_BYTES_PER_KEY: f64 = 129.6;

/// The TTL and lease limit at the default 1 ms tick (2^30 ticks).
const MAX_SPAN_DEFAULT_TICK: Duration = Duration::from_millis(1 << 30);

/// The longest TTL a namespace takes at all: 2^30 ticks of the coarsest tick the
/// engine accepts (60 s).
const MAX_TTL: Duration = Duration::from_secs(60 << 30);

use crate::config::{MAX_PREFILTER_FPR, MIN_PREFILTER_FPR};

/// The most keys a plan counts (2^53): above it a key count is no longer an exact
/// whole number in floating point, and no deployment comes near it.
const MAX_PLANNED_KEYS: u64 = 1 << 53;

/// 2^64 (exactly, as `u64::MAX` rounds up to it): byte totals must stay below it to be
/// a `u64`.
const BYTES_LIMIT: f64 = u64::MAX as f64;

/// What a workload looks like: the input of [`Sizing::plan`].
///
/// ```
/// use std::time::Duration;
/// use idem::Sizing;
///
/// let plan = Sizing::new(500.0, Duration::from_secs(24 * 3600)).plan()?;
/// assert_eq!(plan.resident_keys, 43_200_000);
/// assert_eq!(plan.retained_keys, 7 * 43_200_000);
/// # Ok::<(), idem::SizingError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Sizing {
    rate_per_sec: f64,
    ttl: Duration,
    retention: Option<Duration>,
    false_positive_rate: f64,
    result_bytes: usize,
}

/// Why a [`Sizing`] cannot be planned.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum SizingError {
    /// The peak rate is not a positive, finite number of keys per second.
    Rate(f64),
    /// The TTL is zero (it is kept in whole milliseconds, rounded up).
    TtlTooShort,
    /// The TTL is longer than a namespace holds at the coarsest tick (2^30 ticks of
    /// 60 s, about 2,000 years).
    TtlTooLong(Duration),
    /// The retention is shorter than the TTL.
    RetentionShorterThanTtl,
    /// The prefilter's false-positive rate is not above 0 and at most 0.5
    /// ([`MAX_PREFILTER_FPR`](crate::MAX_PREFILTER_FPR)).
    FalsePositiveRate(f64),
    /// The stored result is larger than a namespace accepts (1 MiB).
    ResultTooLarge(usize),
    /// The retention (7 x TTL unless set) is longer than a namespace accepts
    /// (`MAX_RETENTION`, 2^50 ms).
    RetentionTooLong(Duration),
    /// The prefilter's false-positive rate is above 0 but below the smallest a
    /// namespace accepts, [`MIN_PREFILTER_FPR`](crate::MIN_PREFILTER_FPR) (1e-18).
    FalsePositiveRateTooSmall(f64),
    /// A key count of the plan is above 2^53, or a byte total does not fit in a `u64`:
    /// the workload is too large to plan.
    TooLarge {
        /// The figure that does not fit, in words ("resident keys (rate x TTL)").
        figure: &'static str,
    },
}

impl fmt::Display for SizingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SizingError::Rate(r) => {
                write!(
                    f,
                    "the rate must be a positive number of keys per second, not {r}"
                )
            }
            SizingError::TtlTooShort => f.write_str("the TTL must be longer than 0"),
            SizingError::TtlTooLong(t) => write!(
                f,
                "the TTL must be at most 2^30 ticks of the coarsest tick, 60 s ({} s), not {} s",
                MAX_TTL.as_secs(),
                t.as_secs()
            ),
            SizingError::RetentionShorterThanTtl => {
                f.write_str("the retention must be at least the TTL")
            }
            SizingError::FalsePositiveRate(p) => write!(
                f,
                "the false-positive rate must be above 0 and at most {MAX_PREFILTER_FPR}, not {p}"
            ),
            SizingError::ResultTooLarge(n) => {
                write!(f, "a stored result is at most {MAX_RESULT} bytes, not {n}")
            }
            SizingError::RetentionTooLong(r) => write!(
                f,
                "the retention (7 x TTL unless set) must be at most 2^50 ms (about 35,700 years), not {} s",
                r.as_secs()
            ),
            SizingError::FalsePositiveRateTooSmall(p) => write!(
                f,
                "the false-positive rate {p:e} is too small: a namespace takes {MIN_PREFILTER_FPR:e} at least"
            ),
            SizingError::TooLarge { figure } => write!(
                f,
                "the workload is too large to plan: the {figure} would exceed 2^53 keys or 2^64 bytes"
            ),
        }
    }
}

impl std::error::Error for SizingError {}

impl Sizing {
    /// A workload of `rate_per_sec` new keys per second at peak, each kept a duplicate
    /// for `ttl`; retention 7 x TTL, a 1 % prefilter false-positive rate and no stored
    /// results unless set otherwise.
    pub fn new(rate_per_sec: f64, ttl: Duration) -> Self {
        Sizing {
            rate_per_sec,
            ttl,
            retention: None,
            false_positive_rate: 0.01,
            result_bytes: 0,
        }
    }

    /// How long the durable tier keeps a completed key (default 7 x TTL, as
    /// `NamespaceConfig::retention`; at most `MAX_RETENTION`).
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = Some(retention);
        self
    }

    /// The prefilter's target false-positive rate (default 0.01; above 0 and at most
    /// 0.5, as `NamespaceConfig::prefilter_fpr`).
    pub fn false_positive_rate(mut self, p: f64) -> Self {
        self.false_positive_rate = p;
        self
    }

    /// The size of the result stored with every completion (default 0: none stored).
    pub fn result_bytes(mut self, bytes: usize) -> Self {
        self.result_bytes = bytes;
        self
    }

    /// The TTL in effect: the given one rounded up to whole milliseconds, as
    /// `NamespaceConfig::ttl` keeps it.
    pub fn get_ttl(&self) -> Duration {
        whole_ms(self.ttl)
    }

    /// The retention in effect: the configured one, or 7 x TTL, rounded up to whole
    /// milliseconds as `NamespaceConfig::retention` keeps it.
    pub fn get_retention(&self) -> Duration {
        self.retention
            .map(whole_ms)
            .unwrap_or(self.get_ttl().saturating_mul(7))
    }

    /// Computes the plan, or says which input is out of range: the ranges a namespace
    /// accepts, and figures that fit (key counts up to 2^53, byte totals in a `u64`).
    pub fn plan(&self) -> Result<Plan, SizingError> {
        let rate = self.rate_per_sec;
        if !(rate.is_finite() && rate > 0.0) {
            return Err(SizingError::Rate(rate));
        }
        // As the namespace keeps them: whole milliseconds, rounded up (a 999 us TTL
        // is 1 ms; one of 2^30 ms and a half needs a 2 ms tick).
        let ttl = self.get_ttl();
        if ttl < Duration::from_millis(1) {
            return Err(SizingError::TtlTooShort);
        }
        if ttl > MAX_TTL {
            return Err(SizingError::TtlTooLong(self.ttl));
        }
        let retention = self.get_retention();
        if retention < ttl {
            return Err(SizingError::RetentionShorterThanTtl);
        }
        if retention > MAX_RETENTION {
            return Err(SizingError::RetentionTooLong(retention));
        }
        let p = self.false_positive_rate;
        if !(p > 0.0 && p <= MAX_PREFILTER_FPR) {
            return Err(SizingError::FalsePositiveRate(p));
        }
        if p < MIN_PREFILTER_FPR {
            return Err(SizingError::FalsePositiveRateTooSmall(p));
        }
        let prefilter_bits_per_key =
            crate::prefilter::planned_bits_per_key(p, retention.as_millis() as u64);
        if self.result_bytes > MAX_RESULT {
            return Err(SizingError::ResultTooLarge(self.result_bytes));
        }
        let keys = |d: Duration, figure| {
            // Rounded up, but a product a rounding error above a whole number (a
            // rate per minute or hour divided down to one per second: 31/m over an
            // hour is 1,860.0000000000002) is that number.
            let exact = rate * d.as_secs_f64();
            let k = if (exact - exact.round()).abs() <= (exact * 1e-12).min(1e-3) {
                exact.round()
            } else {
                exact.ceil()
            };
            if k <= MAX_PLANNED_KEYS as f64 {
                Ok(k as u64)
            } else {
                Err(SizingError::TooLarge { figure })
            }
        };
        let resident_keys = keys(ttl, "resident keys (rate x TTL)")?;
        let retained_keys = keys(retention, "retained keys (rate x retention)")?;
        let result = self.result_bytes as f64;
        let hot_bytes_per_key = if self.result_bytes == 0 {
            HOT_BYTES_PER_KEY
        } else {
            HOT_BYTES_PER_KEY + RESULT_OVERHEAD_PER_KEY + result_heap_bytes(self.result_bytes)
        };
        let durable_bytes_per_key = if self.result_bytes == 0 {
            DURABLE_BYTES_PER_KEY
        } else {
            DURABLE_BYTES_PER_KEY + DURABLE_RESULT_OVERHEAD_PER_KEY + result
        };
        let redis_bytes_per_key = REDIS_BYTES_PER_KEY + result;
        let total = |keys: u64, per_key: f64, figure| {
            let b = (keys as f64 * per_key).ceil();
            if b < BYTES_LIMIT {
                Ok(b as u64)
            } else {
                Err(SizingError::TooLarge { figure })
            }
        };
        let hot_bytes = total(resident_keys, hot_bytes_per_key, "hot-tier bytes")?;
        let prefilter_bytes = total(
            retained_keys,
            prefilter_bits_per_key / 8.0,
            "prefilter bytes",
        )?;
        let durable_bytes = total(retained_keys, durable_bytes_per_key, "durable-tier bytes")?;
        let redis_bytes = total(resident_keys, redis_bytes_per_key, "Redis bytes")?;
        Ok(Plan {
            rate_per_sec: rate,
            ttl,
            retention,
            false_positive_rate: p,
            result_bytes: self.result_bytes,
            resident_keys,
            retained_keys,
            hot_bytes_per_key,
            hot_bytes,
            sliding_bytes_per_key: SLIDING_BYTES_PER_KEY,
            payload_bytes_per_key: PAYLOAD_BYTES_PER_KEY,
            prefilter_bits_per_key,
            prefilter_bytes,
            durable_bytes_per_key,
            durable_bytes,
            journal_bytes: journal_file_bytes(crate::config::DEFAULT_JOURNAL_SLOTS),
            redis_bytes_per_key,
            redis_bytes,
        })
    }
}

/// What a workload costs: the output of [`Sizing::plan`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Plan {
    /// The peak rate, keys per second.
    pub rate_per_sec: f64,
    /// How long a completed key answers `Duplicate` from the hot tier.
    pub ttl: Duration,
    /// How long the durable tier keeps a completed key.
    pub retention: Duration,
    /// The prefilter's target false-positive rate.
    pub false_positive_rate: f64,
    /// Bytes of the result stored with each completion (0: none).
    pub result_bytes: usize,
    /// Completed keys resident in the hot tier at peak: rate x TTL. Use it as
    /// `max_keys` (past `MAX_KEYS_LIMIT`, split over [`Plan::namespaces_needed`]
    /// namespaces); a memory-only namespace also holds its claims in flight, so give
    /// it rate x the longest handling time more (a durable one makes room by evicting
    /// completed keys its store answers for).
    pub resident_keys: u64,
    /// Keys the durable tier holds at peak: rate x retention.
    pub retained_keys: u64,
    /// Hot-tier heap bytes per resident key (compare with `Stats::bytes_per_key()`):
    /// a fixed window's, keys claimed without a payload (see
    /// [`Plan::sliding_bytes_per_key`] and [`Plan::payload_bytes_per_key`]).
    pub hot_bytes_per_key: f64,
    /// Hot-tier heap bytes at peak.
    pub hot_bytes: u64,
    /// Hot-tier heap bytes a sliding window (`extend_on_duplicate`) adds to each
    /// resident key, beyond [`Plan::hot_bytes_per_key`] (a fixed window's) and not in
    /// [`Plan::hot_bytes`].
    pub sliding_bytes_per_key: f64,
    /// Hot-tier heap bytes a payload fingerprint (keys claimed with
    /// `claim_with_payload`) adds to each resident key, beyond
    /// [`Plan::hot_bytes_per_key`] (keys claimed without one) and not in
    /// [`Plan::hot_bytes`].
    pub payload_bytes_per_key: f64,
    /// Bloom-filter bits per retained key for the false-positive rate, from the
    /// prefilter's own sizing (five generational filters of a quarter of the keys each,
    /// each at p / 5, and those its upkeep keeps a minute past their end: on average
    /// 60 s / (retention / 4) more, a dozen at a retention of 20 s), held against live
    /// filters by tests.
    pub prefilter_bits_per_key: f64,
    /// Prefilter memory for the retained keys: the average over a span, from
    /// [`Plan::prefilter_bits_per_key`]. For the minute after each span (a quarter of
    /// the retention) ends, the generation that ended is still kept beside the one
    /// begun, so the prefilter then holds up to one filter more, a quarter of the
    /// retained keys' (a fifth more than this figure at a retention of hours).
    pub prefilter_bytes: u64,
    /// Durable-tier disk bytes per retained key (the done records' SST files after
    /// compaction; a result is stored uncompressed).
    pub durable_bytes_per_key: f64,
    /// Durable-tier disk bytes at peak, without the write-ahead log and the memtables
    /// not yet flushed.
    pub durable_bytes: u64,
    /// One namespace's claim-marker journal file (`ClaimMarkers::Journal`, the
    /// default, with the default `journal_slots`): a fixed size, whatever the rate
    /// (see [`Plan::journal_bytes_total`] for every namespace's).
    pub journal_bytes: u64,
    /// Redis memory per key for the same keys (`SET key value NX EX ttl`); with a
    /// result, its bytes are added: a lower bound.
    pub redis_bytes_per_key: f64,
    /// Redis memory for the resident keys.
    pub redis_bytes: u64,
}

/// The size of a claim-marker journal file of `slots` slots: a 64-byte header and 64
/// bytes a slot, allocated when the engine opens.
pub(crate) fn journal_file_bytes(slots: usize) -> u64 {
    64 + 64 * slots as u64
}

/// Something about a [`Plan`] that needs attention before deploying it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SizingWarning {
    /// The hot tier needs more memory than is available (the machine's, or a lower
    /// limit such as a container's).
    HotTierExceedsMemory {
        /// Hot-tier bytes at peak.
        needed: u64,
        /// The memory available, bytes.
        available: u64,
    },
    /// The hot tier fits in the memory available, but not with the prefilter, which
    /// lives in the same process.
    HotTierAndPrefilterExceedMemory {
        /// Hot-tier bytes at peak.
        hot: u64,
        /// Prefilter bytes at peak.
        prefilter: u64,
        /// The memory available, bytes.
        available: u64,
    },
    /// More resident keys than one namespace can hold (`MAX_KEYS_LIMIT`).
    TooManyKeysForOneNamespace {
        /// Resident keys at peak.
        keys: u64,
    },
    /// The TTL is longer than the default 1 ms tick allows (2^30 ticks); the engine
    /// needs a coarser `EngineBuilder::tick`, and `max_keys` rate x tick more than
    /// [`Plan::resident_keys`]: a done key keeps its room until the tick its deadline
    /// falls on, up to a tick past its TTL.
    TtlNeedsCoarserTick {
        /// The smallest whole-millisecond tick that allows the TTL.
        min_tick_ms: u64,
    },
    /// Fewer resident keys than [`SMALL_NAMESPACE_KEYS`]: a namespace's fixed costs
    /// (each shard's first slab chunk and index) then add to the per-key figure,
    /// and the hot tier's total is a floor, not an upper bound.
    SmallNamespace {
        /// Resident keys at peak.
        keys: u64,
    },
}

/// Below this many resident keys the plan warns that the hot tier's per-key figure,
/// a large full namespace's, is under what a key costs
/// ([`SizingWarning::SmallNamespace`]): full namespaces of 1,000, 10,000, 100,000 and
/// 1,000,000 keys measured 1,088, 241, 47.4 and 36.0 bytes a key against the
/// figure's 35.3, their memory made at build (599, 122, 41.8 and 35.4 made as keys
/// arrive; BENCHMARKS.md, 2026-12-08).
pub const SMALL_NAMESPACE_KEYS: u64 = 1_000_000;

impl fmt::Display for SizingWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SizingWarning::HotTierExceedsMemory { needed, available } => write!(
                f,
                "the hot tier needs {}, more than the {} of memory available",
                human_bytes(*needed),
                human_bytes(*available)
            ),
            SizingWarning::HotTierAndPrefilterExceedMemory {
                hot,
                prefilter,
                available,
            } => write!(
                f,
                "the hot tier ({}) and the prefilter ({}) together need more than the {} of memory available",
                human_bytes(*hot),
                human_bytes(*prefilter),
                human_bytes(*available)
            ),
            SizingWarning::TooManyKeysForOneNamespace { keys } => write!(
                f,
                "{keys} resident keys is more than one namespace holds ({MAX_KEYS_LIMIT}): split the stream over several namespaces"
            ),
            SizingWarning::TtlNeedsCoarserTick { min_tick_ms } => write!(
                f,
                "the TTL is longer than 2^30 ticks of the default 1 ms: build the engine with `.tick(Duration::from_millis({min_tick_ms}))` or coarser, and give max_keys rate x tick more (a done key keeps its room until the tick its deadline falls on, up to a tick past its TTL)"
            ),
            SizingWarning::SmallNamespace { keys } => write!(
                f,
                "{keys} resident keys is below {SMALL_NAMESPACE_KEYS}: a namespace's fixed costs (each shard's first slab chunks and index) add to the hot tier's per-key figure, so its total is a floor (full namespaces of 1,000, 10,000 and 100,000 keys took about 1,090, 240 and 47 bytes a key, their memory made at build; 600, 120 and 42 with preallocate(false)): read `Stats::bytes_per_key` of a live engine"
            ),
        }
    }
}

impl Plan {
    /// How plans print a size: binary units, three significant figures
    /// ("1.41 GiB").
    pub fn format_bytes(bytes: u64) -> String {
        human_bytes(bytes)
    }

    /// How many namespaces the resident keys need, split evenly: 1 up to
    /// `MAX_KEYS_LIMIT` resident keys, more past it.
    pub fn namespaces_needed(&self) -> u64 {
        self.resident_keys.div_ceil(MAX_KEYS_LIMIT as u64).max(1)
    }

    /// The claim-marker journal files of the [`Plan::namespaces_needed`] namespaces,
    /// one each of [`Plan::journal_bytes`].
    pub fn journal_bytes_total(&self) -> u64 {
        self.journal_bytes.saturating_mul(self.namespaces_needed())
    }

    /// The `max_keys` of each of the [`Plan::namespaces_needed`] namespaces: the
    /// resident keys split evenly, at least 1 and at most `MAX_KEYS_LIMIT`, so a
    /// namespace accepts it.
    pub fn max_keys_per_namespace(&self) -> u64 {
        self.resident_keys.div_ceil(self.namespaces_needed()).max(1)
    }

    /// The keys within retention each of the [`Plan::namespaces_needed`] namespaces
    /// holds (the retained keys split evenly): the `expected_keys` that sizes its
    /// prefilter as this plan does. The engine's default, `max_keys` x
    /// ⌈retention / TTL⌉, is more where retention is not a whole number of TTLs.
    pub fn expected_keys_per_namespace(&self) -> u64 {
        self.retained_keys.div_ceil(self.namespaces_needed()).max(1)
    }

    /// The warnings for this plan where `machine_memory` bytes of memory are available
    /// (the machine's, or a lower limit such as a container's; `None`: unknown, not
    /// checked).
    pub fn warnings(&self, machine_memory: Option<u64>) -> Vec<SizingWarning> {
        let mut w = Vec::new();
        if let Some(available) = machine_memory {
            if self.hot_bytes > available {
                w.push(SizingWarning::HotTierExceedsMemory {
                    needed: self.hot_bytes,
                    available,
                });
            } else if self.hot_bytes.saturating_add(self.prefilter_bytes) > available {
                w.push(SizingWarning::HotTierAndPrefilterExceedMemory {
                    hot: self.hot_bytes,
                    prefilter: self.prefilter_bytes,
                    available,
                });
            }
        }
        if self.resident_keys > MAX_KEYS_LIMIT as u64 {
            w.push(SizingWarning::TooManyKeysForOneNamespace {
                keys: self.resident_keys,
            });
        }
        if self.ttl > MAX_SPAN_DEFAULT_TICK {
            let min_tick_ms = self
                .ttl
                .as_millis()
                .div_ceil(MAX_SPAN_DEFAULT_TICK.as_millis()) as u64;
            w.push(SizingWarning::TtlNeedsCoarserTick { min_tick_ms });
        }
        if self.resident_keys < SMALL_NAMESPACE_KEYS {
            w.push(SizingWarning::SmallNamespace {
                keys: self.resident_keys,
            });
        }
        w
    }
}

/// Bytes in binary units with three significant figures: "1.41 GiB".
pub(crate) fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut x = b as f64;
    let mut u = 0;
    while x >= 1024.0 && u + 1 < UNITS.len() {
        x /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else if x >= 100.0 {
        format!("{x:.0} {}", UNITS[u])
    } else if x >= 10.0 {
        format!("{x:.1} {}", UNITS[u])
    } else {
        format!("{x:.2} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(24 * 3600);

    #[test]
    fn keys_are_rate_times_ttl_and_rate_times_retention() {
        let p = Sizing::new(500.0, DAY).plan().unwrap();
        assert_eq!(p.resident_keys, 500 * 86_400);
        assert_eq!(p.retention, 7 * DAY);
        assert_eq!(p.retained_keys, 7 * 500 * 86_400);
        let p = Sizing::new(0.5, Duration::from_secs(3))
            .retention(Duration::from_secs(5))
            .plan()
            .unwrap();
        // Fractions of a key round up: 1.5 resident keys need room for 2.
        assert_eq!((p.resident_keys, p.retained_keys), (2, 3));
        // A rate per minute, divided down to one per second, is not a key over:
        // 31/m for an hour is 1,860 keys (the product in floating point is a
        // rounding error above it).
        let p = Sizing::new(31.0 / 60.0, Duration::from_secs(3600))
            .retention(Duration::from_secs(7 * 3600))
            .plan()
            .unwrap();
        assert_eq!((p.resident_keys, p.retained_keys), (1860, 13_020));
    }

    #[test]
    fn totals_are_keys_times_the_per_key_constants() {
        let p = Sizing::new(1000.0, Duration::from_secs(1000))
            .plan()
            .unwrap();
        assert_eq!(p.hot_bytes_per_key, HOT_BYTES_PER_KEY);
        assert_eq!(p.hot_bytes, (1e6 * HOT_BYTES_PER_KEY).ceil() as u64);
        assert_eq!(p.durable_bytes, (7e6 * DURABLE_BYTES_PER_KEY).ceil() as u64);
        assert_eq!(p.journal_bytes, 64 + 64 * 32_768, "2 MiB and its header");
        assert_eq!(p.redis_bytes, (1e6 * REDIS_BYTES_PER_KEY).ceil() as u64);
        let r = Sizing::new(1000.0, Duration::from_secs(1000))
            .result_bytes(64)
            .plan()
            .unwrap();
        assert_eq!(
            r.hot_bytes_per_key,
            HOT_BYTES_PER_KEY + RESULT_OVERHEAD_PER_KEY + 64.0
        );
        assert_eq!(
            r.durable_bytes_per_key,
            DURABLE_BYTES_PER_KEY + DURABLE_RESULT_OVERHEAD_PER_KEY + 64.0
        );
        assert_eq!(r.redis_bytes_per_key, REDIS_BYTES_PER_KEY + 64.0);
        // A 1-byte result's allocation: 16 bytes of counts and 8 for the byte.
        let r = Sizing::new(1000.0, Duration::from_secs(1000))
            .result_bytes(1)
            .plan()
            .unwrap();
        assert_eq!(
            r.hot_bytes_per_key,
            HOT_BYTES_PER_KEY + RESULT_OVERHEAD_PER_KEY + 8.0
        );
    }

    #[test]
    fn prefilter_follows_the_generational_filter_sizing() {
        // Five filters of a quarter of the keys each, each at 0.2 %:
        // -ln(0.002) / ln(2)^2 = 12.935 bits, times 5/4 = 16.17 bits per retained key,
        // with a retention of days.
        let week = Sizing::new(100.0, DAY).plan().unwrap();
        assert!((week.prefilter_bits_per_key - 16.170).abs() < 0.001);
        // And the generations the upkeep keeps a minute past their end: for 60 s of
        // each span of 175 s (retention 700 s), one more filter.
        let p = Sizing::new(100.0, Duration::from_secs(100)).plan().unwrap();
        let expected = 12.935 * (5.0 + 60.0 / 175.0) / 4.0;
        assert!(
            (p.prefilter_bits_per_key - expected).abs() < 0.01,
            "{} against {expected}",
            p.prefilter_bits_per_key
        );
        assert_eq!(
            p.prefilter_bytes,
            (70_000.0 * p.prefilter_bits_per_key / 8.0_f64).ceil() as u64
        );
        let q = Sizing::new(100.0, Duration::from_secs(100))
            .false_positive_rate(0.001)
            .plan()
            .unwrap();
        assert!(q.prefilter_bits_per_key > p.prefilter_bits_per_key);
    }

    #[test]
    fn bad_inputs_are_typed_errors() {
        let s = |r: f64| Sizing::new(r, DAY).plan();
        assert_eq!(s(0.0), Err(SizingError::Rate(0.0)));
        assert_eq!(s(-3.0), Err(SizingError::Rate(-3.0)));
        assert!(matches!(s(f64::NAN), Err(SizingError::Rate(_))));
        assert_eq!(s(f64::INFINITY), Err(SizingError::Rate(f64::INFINITY)));
        assert_eq!(
            Sizing::new(1.0, Duration::ZERO).plan(),
            Err(SizingError::TtlTooShort)
        );
        assert_eq!(
            Sizing::new(1.0, DAY).retention(DAY / 2).plan(),
            Err(SizingError::RetentionShorterThanTtl)
        );
        for p in [0.0, 1.0, -0.1, 2.0, 0.75, f64::NAN] {
            assert!(matches!(
                Sizing::new(1.0, DAY).false_positive_rate(p).plan(),
                Err(SizingError::FalsePositiveRate(_))
            ));
        }
        assert_eq!(
            Sizing::new(1.0, DAY).result_bytes(MAX_RESULT + 1).plan(),
            Err(SizingError::ResultTooLarge(MAX_RESULT + 1))
        );
        assert!(Sizing::new(1.0, DAY)
            .result_bytes(MAX_RESULT)
            .plan()
            .is_ok());
        // The longest TTL any tick holds plans (with a coarser tick advised); one
        // millisecond more would be refused by every namespace.
        assert!(Sizing::new(1.0, MAX_TTL).retention(MAX_TTL).plan().is_ok());
        let over = MAX_TTL + Duration::from_millis(1);
        assert_eq!(
            Sizing::new(1.0, over).retention(over).plan(),
            Err(SizingError::TtlTooLong(over))
        );
        // Every error says what is wrong in words.
        assert!(SizingError::TtlTooShort.to_string().contains("TTL"));
        assert!(SizingError::TtlTooLong(over).to_string().contains("TTL"));
    }

    #[test]
    fn warnings_for_memory_key_count_and_tick() {
        let p = Sizing::new(500.0, DAY).plan().unwrap();
        assert_eq!(p.warnings(None), vec![]);
        let in_memory = p.hot_bytes + p.prefilter_bytes;
        assert_eq!(p.warnings(Some(in_memory)), vec![]);
        // The prefilter lives in the process too.
        assert_eq!(
            p.warnings(Some(in_memory - 1)),
            vec![SizingWarning::HotTierAndPrefilterExceedMemory {
                hot: p.hot_bytes,
                prefilter: p.prefilter_bytes,
                available: in_memory - 1
            }]
        );
        assert!(SizingWarning::HotTierAndPrefilterExceedMemory {
            hot: 1 << 30,
            prefilter: 1 << 30,
            available: 1 << 30
        }
        .to_string()
        .contains("prefilter (1.00 GiB)"));
        assert_eq!(
            p.warnings(Some(p.hot_bytes - 1)),
            vec![SizingWarning::HotTierExceedsMemory {
                needed: p.hot_bytes,
                available: p.hot_bytes - 1
            }]
        );
        // 2^31 keys: one more than a namespace holds.
        let big = Sizing::new((1u64 << 31) as f64, Duration::from_secs(1))
            .plan()
            .unwrap();
        assert!(big
            .warnings(None)
            .contains(&SizingWarning::TooManyKeysForOneNamespace { keys: 1 << 31 }));
        // 2^30 ms is the longest TTL at 1 ms ticks; one ms more needs a 2 ms tick.
        let at_limit = Sizing::new(1.0, Duration::from_millis(1 << 30))
            .plan()
            .unwrap();
        assert_eq!(at_limit.warnings(None), vec![]);
        let over = Sizing::new(1.0, Duration::from_millis((1 << 30) + 1))
            .plan()
            .unwrap();
        assert_eq!(
            over.warnings(None),
            vec![SizingWarning::TtlNeedsCoarserTick { min_tick_ms: 2 }]
        );
    }

    /// A TTL or retention of a fraction of a millisecond is planned as the namespace
    /// keeps it, rounded up to whole milliseconds. Before, the plan truncated: it
    /// advised a tick the engine refuses for a TTL just past 2^30 ms, and refused a
    /// 999 us TTL the namespace accepts as 1 ms.
    #[test]
    fn a_fraction_of_a_millisecond_is_planned_as_the_namespace_keeps_it() {
        let ttl = Duration::from_millis(1 << 30) + Duration::from_micros(500);
        let plan = Sizing::new(1.0, ttl).plan().unwrap();
        let cfg = crate::NamespaceConfig::new().ttl(ttl);
        assert_eq!(plan.ttl, cfg.get_ttl());
        let warnings = plan.warnings(None);
        let Some(SizingWarning::TtlNeedsCoarserTick { min_tick_ms }) = warnings.first() else {
            panic!("{warnings:?}");
        };
        assert_eq!(Duration::from_millis(*min_tick_ms), cfg.finest_tick());
        assert!(cfg.validate("n", *min_tick_ms).is_ok());
        assert!(cfg.validate("n", *min_tick_ms - 1).is_err());
        // 999 us: the namespace's 1 ms.
        let short = Duration::from_micros(999);
        let plan = Sizing::new(1_000.0, short).plan().unwrap();
        assert_eq!(plan.ttl, crate::NamespaceConfig::new().ttl(short).get_ttl());
        assert_eq!(plan.resident_keys, 1);
        // A retention's fraction too (7 x the rounded TTL by default).
        let plan = Sizing::new(1.0, short)
            .retention(Duration::from_micros(6_500))
            .plan()
            .unwrap();
        assert_eq!(plan.retention, Duration::from_millis(7));
        assert_eq!(
            Sizing::new(1.0, short).plan().unwrap().retention,
            Duration::from_millis(7)
        );
    }

    #[test]
    fn huge_workloads_are_typed_errors_not_saturated_figures() {
        let too_large = |figure| Err(SizingError::TooLarge { figure });
        assert_eq!(
            Sizing::new(1e30, DAY).plan(),
            too_large("resident keys (rate x TTL)")
        );
        assert_eq!(
            Sizing::new(f64::MAX, Duration::from_millis(1)).plan(),
            too_large("resident keys (rate x TTL)")
        );
        // 2^53 keys plan; the next representable rate (2^53 + 2) does not.
        let at = |rate: f64| {
            Sizing::new(rate, Duration::from_secs(1))
                .retention(Duration::from_secs(1))
                .plan()
        };
        let limit = at((1u64 << 53) as f64).unwrap();
        assert_eq!(
            (limit.resident_keys, limit.retained_keys),
            (1 << 53, 1 << 53)
        );
        assert_eq!(
            at((1u64 << 53) as f64 + 2.0),
            too_large("resident keys (rate x TTL)")
        );
        // Resident keys fit but retained keys (7 x as many) do not.
        assert_eq!(
            Sizing::new((1u64 << 53) as f64, Duration::from_secs(1)).plan(),
            too_large("retained keys (rate x retention)")
        );
        // Key counts that fit, byte totals that do not: 2^53 keys of 1 MiB results.
        assert_eq!(
            Sizing::new((1u64 << 53) as f64, Duration::from_secs(1))
                .retention(Duration::from_secs(1))
                .result_bytes(MAX_RESULT)
                .plan(),
            too_large("hot-tier bytes")
        );
        // The largest figures that fit are exact, far from u64::MAX.
        assert!(limit.hot_bytes < u64::MAX / 2 && limit.redis_bytes < u64::MAX / 2);
        assert!(SizingError::TooLarge {
            figure: "hot-tier bytes"
        }
        .to_string()
        .contains("too large to plan: the hot-tier bytes"));
    }

    #[test]
    fn fpr_and_retention_limits_are_the_engines() {
        let engine_accepts = |cfg: crate::NamespaceConfig| cfg.validate("ns", 1).is_ok();
        let above_half = f64::from_bits(0.5f64.to_bits() + 1);
        let below_min = f64::from_bits(MIN_PREFILTER_FPR.to_bits() - 1);
        for p in [
            0.5,
            above_half,
            0.51,
            0.99,
            MIN_PREFILTER_FPR,
            below_min,
            1e-300,
            0.0,
            -0.1,
        ] {
            let cfg = crate::NamespaceConfig::new().prefilter_fpr(p);
            assert_eq!(
                Sizing::new(1.0, DAY).false_positive_rate(p).plan().is_ok(),
                engine_accepts(cfg),
                "fpr {p}"
            );
        }
        assert_eq!(
            Sizing::new(1.0, DAY).false_positive_rate(above_half).plan(),
            Err(SizingError::FalsePositiveRate(above_half))
        );
        let ms = Duration::from_millis(1);
        for r in [MAX_RETENTION - ms, MAX_RETENTION, MAX_RETENTION + ms] {
            let cfg = crate::NamespaceConfig::new().ttl(DAY).retention(r);
            assert_eq!(
                Sizing::new(1.0, DAY).retention(r).plan().is_ok(),
                engine_accepts(cfg),
                "retention {r:?}"
            );
        }
        assert_eq!(
            Sizing::new(1.0, DAY).retention(MAX_RETENTION + ms).plan(),
            Err(SizingError::RetentionTooLong(MAX_RETENTION + ms))
        );
        // The default retention, 7 x TTL, is held to the same limit; the longest TTL
        // a namespace takes at all (2^30 ticks of 60 s) keeps it below.
        assert!(MAX_TTL * 7 < MAX_RETENTION);
        assert!(Sizing::new(1.0, MAX_TTL).plan().is_ok());
        let ttl = MAX_RETENTION / 7 + ms;
        assert_eq!(
            Sizing::new(1.0, ttl).plan(),
            Err(SizingError::TtlTooLong(ttl))
        );
    }

    #[test]
    fn a_false_positive_rate_below_the_smallest_a_namespace_takes_is_refused() {
        let below = f64::from_bits(MIN_PREFILTER_FPR.to_bits() - 1);
        // 4.9e-324: above 0, yet p / 5 rounds to 0.
        for tiny in [below, 1e-30, f64::from_bits(1)] {
            assert!(tiny > 0.0);
            assert_eq!(
                Sizing::new(1.0, DAY).false_positive_rate(tiny).plan(),
                Err(SizingError::FalsePositiveRateTooSmall(tiny))
            );
        }
        // The smallest rate a namespace takes plans, with finite figures.
        let p = Sizing::new(1.0, DAY)
            .false_positive_rate(MIN_PREFILTER_FPR)
            .plan()
            .unwrap();
        assert!(p.prefilter_bits_per_key.is_finite());
        assert!(SizingError::FalsePositiveRateTooSmall(below)
            .to_string()
            .contains("too small"));
    }

    #[test]
    fn max_keys_is_split_over_namespaces_past_the_limit() {
        let p = Sizing::new(500.0, DAY).plan().unwrap();
        assert_eq!(
            (p.namespaces_needed(), p.max_keys_per_namespace()),
            (1, 43_200_000)
        );
        let limit = MAX_KEYS_LIMIT as u64;
        let at = Sizing::new(limit as f64, Duration::from_secs(1))
            .plan()
            .unwrap();
        assert_eq!(
            (at.namespaces_needed(), at.max_keys_per_namespace()),
            (1, limit)
        );
        let over = Sizing::new((limit + 1) as f64, Duration::from_secs(1))
            .plan()
            .unwrap();
        assert_eq!(
            (over.namespaces_needed(), over.max_keys_per_namespace()),
            (2, 1 << 30)
        );
        let huge = Sizing::new((1u64 << 52) as f64, Duration::from_secs(1))
            .retention(Duration::from_secs(1))
            .plan()
            .unwrap();
        assert!(huge.max_keys_per_namespace() <= limit);
        assert!(huge.max_keys_per_namespace() * huge.namespaces_needed() >= huge.resident_keys);
        // A rate so small that rate x TTL rounds to 0 keys still sizes a namespace the
        // engine accepts (max_keys of at least 1).
        let none = Sizing::new(f64::from_bits(1), Duration::from_millis(1))
            .plan()
            .unwrap();
        assert_eq!(none.resident_keys, 0);
        assert_eq!(
            (none.namespaces_needed(), none.max_keys_per_namespace()),
            (1, 1)
        );
    }

    #[test]
    fn human_bytes_uses_binary_units() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1024), "1.00 KiB");
        assert_eq!(human_bytes(15 << 20), "15.0 MiB");
        assert_eq!(human_bytes(300 << 30), "300 GiB");
    }
}
