//! # idem
//!
//! Exactly-once claims for at-least-once message consumers.
//!
//! Before applying a message, a consumer *claims* its key. idem answers atomically
//! whether this is the first sighting ([`Claim::Acquired`], with a guard to complete
//! once the side effect is done), a duplicate ([`Claim::Duplicate`], with the stored
//! result), or a key another worker holds ([`Claim::InProgress`]).
//!
//! ```
//! use std::time::Duration;
//! use idem::{Claim, Engine, NamespaceConfig};
//!
//! let engine = Engine::builder()
//!     .namespace("payments", NamespaceConfig::new().ttl(Duration::from_secs(3600)))
//!     .build()?;
//! let payments = engine.namespace("payments")?;
//!
//! if let Claim::Acquired(guard) = payments.claim(b"pay-1001")? {
//!     // charge the card, then record it:
//!     guard.complete_with_result(b"charge-ok")?;
//! }
//! let again = payments.claim(b"pay-1001")?; // a redelivery
//! match again {
//!     Claim::Duplicate(done) => assert_eq!(done.result(), Some(&b"charge-ok"[..])),
//!     _ => unreachable!(),
//! }
//! # Ok::<(), idem::Error>(())
//! ```
//!
//! ## Architecture
//!
//! Keys are reduced to 128-bit seeded xxh3 fingerprints; only fingerprints are stored,
//! so memory per key does not depend on key length. The hot tier is a set of lock
//! shards per namespace, each an index of 64-byte buckets (12 tags and 12 slab
//! indices per cache line) over a slab of 28-byte entries, with a hierarchical timing
//! wheel threaded through the same entries for TTLs and leases. The table is the truth (every read checks the deadline itself); the
//! wheel reclaims expired keys without traffic. See ARCHITECTURE.md for the map.

#![warn(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    rust_2018_idioms
)]
#![deny(unsafe_op_in_unsafe_fn)]
// Exceptions, each allowed by name and listed in ARCHITECTURE.md ("Unsafe code"): the
// system clock read (src/clock.rs), the index's prefetches and tag match
// (src/hot/index.rs), the lock-free duplicate read (src/hot.rs, src/hot/index.rs),
// the membarrier call (src/hot/reclaim.rs), the journal's file mapping
// (src/durable/journal.rs) and the claim guard's pointer to its namespace
// (src/engine.rs).
#![deny(unsafe_code)]

mod bytes;
mod clock;
mod config;
mod dlq;
mod durable;
mod engine;
mod error;
mod hot;
mod memory;
mod plan;
mod prefilter;
mod route;
mod sched;
mod stats;
mod sync;

/// For tests: `full`, or under Miri (which runs them a hundred times slower or
/// more) `small`, still enough for what the test exercises.
#[cfg(test)]
pub(crate) const fn under_miri(full: usize, small: usize) -> usize {
    if cfg!(miri) {
        small
    } else {
        full
    }
}

/// For tests: how long a test waits in real time for a thread of the engine's (the
/// maintenance thread) to do what it was asked, before it fails rather than hang: a
/// minute, or under Miri an hour.
#[cfg(test)]
pub(crate) const fn thread_wait_limit() -> std::time::Duration {
    std::time::Duration::from_secs(if cfg!(miri) { 3600 } else { 60 })
}

/// The shard write sequence, exposed for the loom model of its protocol
/// (`tests/loom.rs`); only in builds with `--cfg idem_loom`.
#[cfg(idem_loom)]
#[doc(hidden)]
pub mod loom_seq {
    /// A shard's write sequence (see `src/hot/seq.rs`).
    #[derive(Debug, Default)]
    pub struct Seq(crate::hot::Seq);

    impl Seq {
        /// Begins a write (the caller holds the lock it guards).
        pub fn write_begin(&self) -> u64 {
            self.0.write_begin()
        }
        /// Ends the write begun at `s`.
        pub fn write_end(&self, s: u64) {
            self.0.write_end(s)
        }
        /// The value to validate against, unless a write is under way.
        pub fn read_begin(&self) -> Option<u64> {
            self.0.read_begin()
        }
        /// Whether nothing was written since `read_begin` returned `s`.
        pub fn read_valid(&self, s: u64) -> bool {
            self.0.read_valid(s)
        }
    }
}

/// The steps of the hot tier's reclamation protocol (`src/hot/reclaim.rs`) on loom's
/// atomics, exposed for the loom model of it (`tests/loom.rs`); only in builds with
/// `--cfg idem_loom`.
#[cfg(idem_loom)]
#[doc(hidden)]
pub mod loom_reclaim {
    use crate::hot::reclaim::steps;
    use loom::sync::atomic::AtomicU64;

    /// A reclamation domain: the epoch and one slot a reader, in the fenced mode.
    #[derive(Debug)]
    pub struct Domain {
        epoch: AtomicU64,
        slots: Vec<AtomicU64>,
    }

    impl Domain {
        /// A domain for `readers` readers, none pinned, at the first epoch.
        pub fn new(readers: usize) -> Self {
            Domain {
                epoch: AtomicU64::new(1),
                slots: (0..readers).map(|_| AtomicU64::new(0)).collect(),
            }
        }
        /// Pins reader `r`: what it loads from now on that was published before a
        /// later [`Domain::retire`] stays until it unpins.
        pub fn pin(&self, r: usize) {
            steps::enter(&self.epoch, &self.slots[r], true)
        }
        /// Unpins reader `r`.
        pub fn unpin(&self, r: usize) {
            steps::leave(&self.slots[r])
        }
        /// Tags garbage whose replacement the caller has just published.
        pub fn retire(&self) -> u64 {
            steps::advance(&self.epoch)
        }
        /// A collection's scan, as the process-wide one makes it: its bound, the
        /// barrier, the readers' slots.
        pub fn scan(&self) -> u64 {
            let bound = steps::bound(&self.epoch);
            steps::fence();
            steps::oldest(bound, &self.slots)
        }
        /// Whether garbage tagged `tag` can be freed by a scan that found `oldest`.
        pub fn freeable(tag: u64, oldest: u64) -> bool {
            steps::freeable(tag, oldest)
        }
    }
}

pub use clock::{Clock, CoarseClock, ManualClock, SystemClock, LATEST_MS};
pub use config::{
    ClaimMarkers, EngineBuilder, FailurePolicy, NamespaceConfig, SyncPolicy, DEFAULT_JOURNAL_SLOTS,
    DEFAULT_LEASE, DEFAULT_MAX_KEYS, DEFAULT_MAX_KEY_LEN, DEFAULT_MAX_RESULT_LEN,
    DEFAULT_PREFILTER_FPR, DEFAULT_TTL, MAX_JOURNAL_SLOTS, MAX_KEYS_LIMIT, MAX_NAMESPACE_LEN,
    MAX_PREFILTER_FPR, MAX_RETENTION, MIN_BACKGROUND_INTERVAL, MIN_PREFILTER_FPR,
};
pub use dlq::{
    DeadLetter, DeadLetterHeader, Dlq, DlqHealth, DlqPolicy, HandlerFailure, Interrupted,
    MessageId, MessageState, PolicyReport, ReplayMode, ReplayOutcome, ReplayReport, SchemaCheck,
    SchemaVerdict, Selection, Transition, ACTOR_AUTO_ARCHIVE, ACTOR_AUTO_REPLAY, DEFAULT_ACTOR,
    DEFAULT_BASELINE_WINDOW, DEFAULT_RECENT_WINDOW, MAX_ACTOR_LEN, MAX_DEAD_LETTER_PAYLOAD,
    MAX_REASON_LEN,
};
#[cfg(feature = "durable")]
pub use durable::inspect::{
    inspect, namespaces, stored_config, InspectedKey, Inspection, NamespaceSummary,
};
pub use engine::{
    Claim, ClaimGuard, Done, Engine, InFlight, KeyState, Namespace, Orphan, StateChanges,
    MAX_STATE_LEN,
};
pub use error::{Error, KeyError, Result, StoreError};
pub use memory::MemoryLimit;
pub use plan::{Plan, Sizing, SizingError, SizingWarning, SMALL_NAMESPACE_KEYS};
pub use route::Router;
pub use stats::Stats;

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// Internals exposed to the fuzz targets only (built with `--cfg fuzzing`).
#[cfg(fuzzing)]
#[doc(hidden)]
pub mod __fuzz {
    /// Decodes a durable record; on success returns its re-encoding. Panics if the
    /// check the prefilter's rebuild makes (`Record::check`, no copy of the result)
    /// disagrees with the whole decode, on any bytes.
    pub fn record_roundtrip(bytes: &[u8]) -> Option<Vec<u8>> {
        use crate::durable::codec::Record;
        let decoded = Record::decode(bytes);
        assert_eq!(
            Record::check(bytes),
            decoded
                .as_ref()
                .map(|r| (r.state, r.expires_ms))
                .map_err(|e| *e),
            "the check reads what the decode reads"
        );
        Some(decoded.ok()?.encode())
    }

    /// Decodes a stored dead letter; on success returns its re-encoding. Panics if
    /// the decode without the payload (a store's open) disagrees with the full one.
    pub fn letter_roundtrip(bytes: &[u8]) -> Option<Vec<u8>> {
        use crate::dlq::codec::Letter;
        let full = Letter::decode(bytes);
        // The decoder without the payload (a store's open) refuses and accepts alike.
        let header = Letter::decode_without_payload(bytes);
        let same = match (&full, &header) {
            (Ok(l), Ok((h, len))) => {
                *len == l.payload.len()
                    && *h
                        == Letter {
                            payload: Vec::new(),
                            ..l.clone()
                        }
            }
            (Err(a), Err(b)) => a == b,
            _ => false,
        };
        assert!(
            same,
            "decoding without the payload disagrees: {full:?} / {header:?}"
        );
        full.ok().map(|l| l.encode())
    }

    /// Parses any bytes as a claim-marker journal (see `durable::journal::fuzz_parse`);
    /// panics if a marker read back does not encode to the words it came from.
    pub fn journal_parse(bytes: &[u8]) {
        crate::durable::journal::fuzz_parse(bytes);
    }

    /// Runs a prefilter against a model of the durable tier (see
    /// `prefilter::model_check`); panics on a key declared new while stored.
    pub fn prefilter_model(data: &[u8]) {
        crate::prefilter::model_check(data);
    }

    /// Loads `data` as the generations of a saved prefilter file (see
    /// `prefilter::fuzz_load`); panics if one that loads does not save back
    /// unchanged.
    pub fn prefilter_load(data: &[u8]) {
        crate::prefilter::fuzz_load(data);
    }
}

/// Internals exposed for the crate's benches only. Not part of the API: no stability
/// promise of any kind.
#[doc(hidden)]
pub mod __bench {
    pub use crate::hot::wheel::{Links, Wheel, NIL};

    /// The point reads `ns` has made of its durable tier so far (0 without one).
    pub fn durable_reads(ns: &crate::Namespace) -> u64 {
        ns.durable_reads()
    }

    /// The lock shard of `ns` that `key` belongs to (a number below its shard
    /// count), or the error a claim of `key` would return.
    pub fn shard_of(ns: &crate::Namespace, key: &[u8]) -> crate::Result<usize> {
        ns.shard_of(key)
    }

    /// A shard's fingerprint index (`src/hot/index.rs`) alone, sized at build for
    /// the entries it will hold, so that an insert never grows it.
    #[derive(Debug)]
    pub struct Index(crate::hot::index::Index);

    impl Index {
        /// An index with room for `entries` before it would grow; `None` if that
        /// cannot be allocated.
        pub fn with_room(entries: usize) -> Option<Self> {
            crate::hot::index::Index::try_with_room(entries).map(Index)
        }

        /// Stores slab index `idx` under hash `h`, which is not stored yet. False,
        /// storing nothing, if the index is full (it holds the entries it was built
        /// for: growing needs the shard's slab to place them again), or if `idx` is
        /// too large to sit beside the slots' check bits (which would need the same
        /// rebuild; every index below 2^16 fits, and so does every index below
        /// twice the room asked for).
        pub fn insert(&mut self, h: u64, idx: u32) -> bool {
            if self.0.full() || !self.0.fits(idx) {
                return false;
            }
            self.0.insert(h, idx, Vec::new);
            true
        }

        /// The slab index stored under `h` that `eq` accepts (the shard's `eq` reads
        /// the slab entry and compares its fingerprint).
        pub fn find(&self, h: u64, eq: impl FnMut(u32) -> bool) -> Option<u32> {
            self.0.find(h, eq)
        }

        /// Heap bytes of the bucket array.
        pub fn bytes(&self) -> usize {
            self.0.bytes()
        }
    }

    /// A namespace's prefilter (`src/prefilter.rs`), keyed by fingerprints as the
    /// engine keys it.
    #[derive(Debug)]
    pub struct Prefilter(crate::prefilter::Prefilter);

    impl Prefilter {
        /// A prefilter for `expected_keys` keys within `retention_ms`, at target
        /// false-positive rate `fpr`.
        pub fn new(expected_keys: usize, retention_ms: u64, fpr: f64) -> Self {
            Prefilter(crate::prefilter::Prefilter::new(
                expected_keys,
                retention_ms,
                fpr,
            ))
        }

        /// Records the key of fingerprint `fp`, whose record expires at `expires_ms`.
        pub fn insert(&self, fp: u128, expires_ms: u64) {
            self.0.insert(crate::prefilter::bloom_hash(fp), expires_ms);
        }

        /// False if the key of fingerprint `fp` is definitely not stored.
        pub fn may_contain(&self, fp: u128) -> bool {
            self.0.may_contain(crate::prefilter::bloom_hash(fp))
        }

        /// The filter as the engine saves it at close.
        pub fn save(&self) -> Vec<u8> {
            self.0.encode(0, 0)
        }

        /// Takes the generations of `bytes` (from [`Prefilter::save`] of a filter of
        /// the same settings); returns the keys they hold, or `None` if refused.
        pub fn load(&self, bytes: &[u8]) -> Option<u64> {
            self.0.load(bytes, 0, 0).ok()
        }

        /// Bytes of the live filters' bit vectors.
        pub fn bytes(&self) -> u64 {
            self.0.stats().bytes
        }
    }

    /// A durable record (`src/durable/codec.rs`), as the store writes and reads it.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Record(crate::durable::codec::Record);

    impl Record {
        /// The record of a done key.
        pub fn done(
            token: u32,
            completed_at_ms: u64,
            expires_ms: u64,
            payload: Option<u64>,
            result: Option<&[u8]>,
        ) -> Self {
            Record(crate::durable::codec::Record {
                state: crate::durable::codec::RecordState::Done,
                token,
                at_ms: completed_at_ms,
                expires_ms,
                payload,
                result: result.map(<[u8]>::to_vec),
            })
        }

        /// Appends the encoding to `out`.
        pub fn encode_into(&self, out: &mut Vec<u8>) {
            self.0.encode_into(out);
        }

        /// Decodes one record; `None` if the bytes are not a valid record.
        pub fn decode(bytes: &[u8]) -> Option<Self> {
            crate::durable::codec::Record::decode(bytes)
                .ok()
                .map(Record)
        }

        /// When the record expires (wall-clock ms).
        pub fn expires_ms(&self) -> u64 {
            self.0.expires_ms
        }
    }

    /// A record's expiry if it decodes whole, as the prefilter's rebuild reads it
    /// (no copy of its result).
    pub fn check_record(bytes: &[u8]) -> Option<u64> {
        crate::durable::codec::Record::check(bytes)
            .ok()
            .map(|(_, e)| e)
    }
}
