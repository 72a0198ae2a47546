//! Model check of the durable tier: random operation sequences on a durable engine,
//! compared after every step with a reference model.
//!
//! `tests/model.rs` checks the hot tier alone. Here every sequence runs on an engine
//! with a durable tier in a fresh directory, on a manual clock, with a TTL short
//! enough that keys outlive their hot window, a small `max_keys` in some sequences
//! (done keys leave a full hot tier and are read back), restarts (every guard
//! finished, the engine dropped and opened again on the same directory and clock),
//! retention expiry, forgets, compactions and maintenance passes.
//!
//! The model keeps each key's state: in progress until its lease deadline, or done
//! with its completion time, result, payload and the expiry of its durable record.
//! It does not model which done keys the hot tier holds (eviction is the hot tier's
//! own choice), only what every answer must be whatever it holds:
//!
//! - A done key answers `Duplicate` until its record expires, `completed_at_ms +
//!   retention` in a fixed window, from either tier and across restarts, and every
//!   `Duplicate` and `check` reports that record expiry as `expires_at_ms` (the hot
//!   tier derives it with `Params::record_until`, the record is written with the
//!   same), with the completion time and result of the completion.
//! - In a sliding window each sighting moves the window to `now + TTL`, and the
//!   record's expiry to the first `completed_at_ms + k x retention` (k >= 1) at or
//!   after the window's end, never earlier than it was. A sighting of a key that the
//!   hot tier cannot hold (every resident key is a live claim of another key) is
//!   answered from the record as it stands and moves nothing.
//! - A new key is refused only when `max_keys` other keys hold live claims: done keys
//!   leave a full hot tier, and expired entries are reclaimed first.
//!
//! Every claim answer is compared exactly (kind, lease deadline, retry time,
//! completion time, expiry, result bytes, errors), and after every step `check` of
//! every key, the lease of every guard held, the counters whose values do not depend
//! on which keys the hot tier holds (acquired, duplicates, in progress, payload
//! mismatches, capacity refusals, completions, releases, lost leases), and
//! `resident_keys <= max_keys`. Expirations, forgets and evictions are counted by the
//! hot tier for the entries it holds, so they are not compared, except that a
//! namespace whose `max_keys` holds every key never evicts, and that a key read back
//! from the durable tier while its hot window still ran implies an eviction. After a
//! compaction the database holds exactly the model's live done records and no
//! expired one (`idem::inspect`). Each sequence's claim markers are journaled,
//! immediate or deferred: after a restart (no claim in flight) no orphan is
//! reported, whatever the mode: a claim that lost its lease removed its own marker
//! (see `Model::remove_lost_marker`), and every other claim was completed or released.
//!
//! A failing disk: some sequences have spells in which every RocksDB write fails
//! (`Engine::debug_fail_store_writes`; the namespace fails closed), and two tests
//! run only such sequences, with more of the operations that meet them. Then a claim
//! whose marker goes to RocksDB (immediate) is refused with `Error::Store` and
//! changes nothing, as does a sighting whose sliding window needs its record
//! rewritten (not counted as a duplicate; the record it read first, to compare its
//! expiry, answered nothing: no read-back) and a forget; a completion is refused and
//! its claim given up (counted as a release; a batch's write fails for all its
//! claims); an extension whose marker is in RocksDB is refused and keeps the old
//! end; a marker in RocksDB that a release, a refused completion or a lost lease
//! cannot delete stays, and the next open reports it as an orphan, held while its
//! lease runs, and settles it once the lease has run out. Journal and deferred
//! markers in memory are untouched by the failure; a deferred marker waits for a
//! maintenance pass that can write it. A completion deletes RocksDB's marker of its
//! key whichever claim wrote it; a release does too.
//!
//! Spells of failing reads (`Engine::debug_fail_store_reads`) too: whether an
//! operation reads depends on what the hot tier holds, which the model does not
//! know, so a claim, batch, forget or check may then answer `Error::Store` instead
//! of the model's answer, and must have changed nothing (the keys are compared
//! after the step as always; a refused batch's counts are taken as the engine's). A
//! lost lease reads its RocksDB marker before deleting it: a failing read leaves it
//! for the next open to report, as a failing write does.
//!
//! A third of those sequences fail open (`FailurePolicy::FailOpen`, failing writes
//! only): a claim then is acquired without its immediate marker, an extension
//! stands with its marker keeping the old end, a completion is done in the hot
//! tier alone (no record; its claim's markers stay, and the next open reports them
//! as orphans), a sliding window the store refused to rewrite lives in the hot tier
//! alone, and neither is evicted. When such a key's hot window ends, or at a
//! restart, it answers as its record does (or is new without one); a later window
//! rewrite writes a hot-only completion's first record and settles its markers.
//!
//! The maintenance pass sweeps the markers of this run's claims whose lease has
//! ended and that no longer hold their keys (`Model::sweep_journal`, and for
//! deferred markers it wrote into RocksDB `Model::sweep_disk`; not the last run's
//! orphans, nor immediate markers); a failing disk leaves RocksDB's.
//!
//! Coarse ticks (7 ms, 250 ms, 1 s; the clock moves by any number of milliseconds,
//! and each open counts ticks from its own reading): the engine may place each
//! deadline anywhere its documentation allows, and the model allows exactly that.
//! A lease or an extension of `d` ends at or after `now + d` and less than a tick
//! later ("never early and at most one tick late"): the model takes the end the
//! engine reports in the answer that sets it and holds the engine to it exactly
//! from then on (in-progress answers, retry times, completions and releases
//! refused once it has passed, the guards' leases). A done record expires at
//! `Params::record_until` of the hot deadline rounded up to the tick (documented
//! in ARCHITECTURE.md): the model keeps the earliest and latest that can be, the
//! key is a duplicate before the one and new from the other, and in between the
//! engine's answers decide (the `check` of every key after a step), once and for
//! good. Every `Duplicate` and `check` reports an expiry at most a tick less a
//! millisecond before the record's, never after it (`Done::expires_at_ms`), which
//! narrows what the model keeps; a fixed window's completion time reads up to a
//! tick less a millisecond late and never past the answer's own time
//! (`Done::completed_at_ms`), a sliding window's exactly. Some of these sequences
//! have a retention equal to the TTL or less than a tick longer, where the record
//! lasts to the rounded hot deadline. They run on a disk that never fails (the
//! failing-disk paths are checked at 1 ms only). At 1 ms every allowance is empty
//! and every comparison exact.
//!
//! Left out: stored results over `max_result_len` (such a claim stays held with its
//! marker, an orphan at the next open unless claimed again; the hot-tier model check
//! covers the refusal), crashes (`tests/crash.rs`), failing syncs, failing reads
//! under `FailOpen`, and corrupt records (`tests/durable.rs`), co-committed state and
//! concurrency.

#![cfg(all(feature = "durable", not(idem_loom)))]

mod model_core;
mod util;

use std::collections::HashMap;
use std::time::Duration;

use idem::{
    ClaimGuard, ClaimMarkers, Clock, Engine, Error, FailurePolicy, ManualClock, Namespace,
    NamespaceConfig, Stats, SyncPolicy,
};
use model_core::{checked, observed, Answer};
use util::{TempDir, XorShift, T0};
use xxhash_rust::xxh3::xxh3_128_with_seed;

/// Sequences per window mode, and operations per sequence.
const SEQUENCES: usize = 40;
const STEPS: usize = 250;

/// Distinct keys an operation can name.
const KEYS: usize = 10;
const TTL_MS: u64 = 1000;
const LEASE_MS: u64 = 300;
const RETENTION_MS: u64 = 4000;
const NAMESPACE: &str = "model";
const PAYLOADS: [&[u8]; 3] = [b"pay-a", b"pay-b", b"pay-c"];
/// Results stored by `complete_with_result`; the empty one is a result too (not
/// `None`).
const RESULTS: [&[u8]; 4] = [b"", b"ok", b"receipt-2", b"0123456789abcdef"];

fn key_bytes(key: usize) -> Vec<u8> {
    format!("key-{key}").into_bytes()
}

/// The expiry of a done record completed at `completed_at` whose window ends at
/// `window_end`: the first `completed_at + k x retention`, k >= 1, at or after it
/// (`Params::record_until` at a 1 ms tick).
fn record_until(completed_at: u64, window_end: u64, retention: u64) -> u64 {
    let first = completed_at + retention;
    first + window_end.saturating_sub(first).div_ceil(retention) * retention
}

/// The expiry of a done record whose hot deadline, rounded up to a tick of
/// `tick_ms`, is `hot_end` (`Params::record_until`, as ARCHITECTURE.md gives it: the
/// whole retentions the window needs, its end taken a tick before the rounded
/// deadline, and never before that deadline). [`record_until`] at 1 ms.
fn record_until_on_tick(completed_at: u64, hot_end: u64, retention: u64, tick_ms: u64) -> u64 {
    record_until(completed_at, hot_end.saturating_sub(tick_ms - 1), retention).max(hot_end)
}

/// One sequence's namespace and engine.
#[derive(Debug, Clone, Copy)]
struct Config {
    sliding: bool,
    max_keys: usize,
    shards: Option<usize>,
    markers: ClaimMarkers,
    prefilter: bool,
    /// Whether the sequence makes RocksDB's writes fail now and then
    /// ([`Op::FailWrites`]).
    failures: bool,
    /// Whether the namespace fails open (`FailurePolicy::FailOpen`) rather than
    /// closed.
    fail_open: bool,
    seed: u64,
    /// The engine's tick (`EngineBuilder::tick`), in milliseconds.
    tick_ms: u64,
    /// The namespace's retention: [`RETENTION_MS`], except in some coarse-tick
    /// sequences, where it is the TTL or less than a tick longer (a record then
    /// lasts to the hot deadline rounded up to a tick, past its retention).
    retention_ms: u64,
    /// Distinct keys the operations name: [`KEYS`], except in the sequences of
    /// namespaces of odd sizes.
    keys: usize,
}

impl Config {
    /// The earliest and latest expiry of a done record completed at
    /// `completed_at` whose window ends at `window_end` before the tick rounds it
    /// up (by up to a tick less a millisecond): one figure at 1 ms.
    fn record_range(&self, completed_at: u64, window_end: u64) -> (u64, u64) {
        let (r, tick) = (self.retention_ms, self.tick_ms);
        (
            record_until_on_tick(completed_at, window_end, r, tick),
            record_until_on_tick(completed_at, window_end + tick - 1, r, tick),
        )
    }

    fn random(sliding: bool, rng: &mut XorShift) -> Self {
        Config {
            sliding,
            // 3 and 4 are full with a few keys, so done keys are evicted; 16 holds
            // every key, so none ever is.
            max_keys: [3, 4, 6, 16][rng.below(4) as usize],
            shards: [None, Some(1), Some(3)][rng.below(3) as usize],
            markers: [
                ClaimMarkers::Journal,
                ClaimMarkers::Immediate,
                ClaimMarkers::Deferred,
            ][rng.below(3) as usize],
            prefilter: rng.below(4) != 0,
            failures: rng.below(2) == 0,
            fail_open: rng.below(3) == 0,
            seed: rng.next(),
            tick_ms: 1,
            retention_ms: RETENTION_MS,
            keys: KEYS,
        }
    }

    /// The same, on an engine ticking every `tick_ms` milliseconds. The model
    /// follows a coarse tick on a disk that never fails only.
    fn on_tick(self, tick_ms: u64) -> Self {
        let coarse = tick_ms > 1;
        Config {
            tick_ms,
            failures: self.failures && !coarse,
            fail_open: self.fail_open && !coarse,
            ..self
        }
    }

    /// `SyncPolicy::Never`: a completion is in the write-ahead log before `complete`
    /// returns, which a clean reopen replays; no fsync slows the run.
    fn namespace_config(&self) -> NamespaceConfig {
        let cfg = NamespaceConfig::new()
            .ttl(Duration::from_millis(TTL_MS))
            .lease(Duration::from_millis(LEASE_MS))
            .retention(Duration::from_millis(self.retention_ms))
            .max_keys(self.max_keys)
            .extend_on_duplicate(self.sliding)
            .sync(SyncPolicy::Never)
            .claim_markers(self.markers)
            .prefilter(self.prefilter)
            .on_store_error(if self.fail_open {
                FailurePolicy::FailOpen
            } else {
                FailurePolicy::FailClosed
            });
        match self.shards {
            Some(n) => cfg.shards(n),
            None => cfg,
        }
    }
}

/// One step of a sequence. Guard selectors pick among the guards held: the newest
/// if below 128, any otherwise; nothing happens if none is held.
#[derive(Debug, Clone, Copy)]
enum Op {
    Claim {
        key: usize,
    },
    ClaimWithPayload {
        key: usize,
        payload: usize,
    },
    /// `claim_batch` of the first `n` keys (repeats possible).
    ClaimBatch {
        keys: [usize; 4],
        n: usize,
    },
    Complete {
        guard: u8,
    },
    CompleteWithResult {
        guard: u8,
        result: usize,
    },
    /// `complete_batch` of up to `n` held guards, from the newest back; with
    /// `result`, `complete_batch_with_results`, the guards' results taken in turn
    /// from [`RESULTS`] from that one on.
    CompleteBatch {
        n: usize,
        result: Option<usize>,
    },
    Release {
        guard: u8,
    },
    DropGuard {
        guard: u8,
    },
    /// `extend_lease` of a held guard, to `ms` from now.
    Extend {
        guard: u8,
        ms: u64,
    },
    Forget {
        key: usize,
    },
    Check {
        key: usize,
    },
    Advance {
        by: u64,
    },
    /// To one of the model's pending deadlines, or one millisecond before it.
    AdvanceToDeadline {
        pick: usize,
        early: bool,
    },
    Maintenance,
    Compact,
    /// Each guard held is completed (where its bit of `finish` is set) or dropped,
    /// then the engine is dropped and opened again.
    Restart {
        finish: u64,
    },
    /// From now on every write to RocksDB fails (`on`), or none does, in a sequence
    /// with `failures` (elsewhere nothing). The namespace fails closed.
    FailWrites {
        on: bool,
    },
    /// The same for every point read of a done record.
    FailReads {
        on: bool,
    },
}

impl Op {
    /// A random operation; `failing_disk` asks for more of those that meet a
    /// failing disk while claims are in flight: lease extensions, spells of failing
    /// writes, and mostly short clock advances (leases run on through the spell,
    /// and a claim whose marker could not be deleted is still held at a restart);
    /// and a quarter of single completions are made as batches of one, so that
    /// more batch completions meet a failing disk.
    fn random(rng: &mut XorShift, failing_disk: bool, keys: usize) -> Op {
        if !failing_disk {
            return Op::any(rng, keys);
        }
        match rng.below(21) {
            0..=3 => Op::Extend {
                guard: rng.byte(),
                ms: LEASE_MS - 1 + rng.below(3),
            },
            4 => match rng.below(3) {
                0 => Op::FailReads { on: true },
                _ => Op::FailWrites { on: true },
            },
            5 => Op::Restart { finish: rng.next() },
            6 => Op::Advance {
                by: 1 + rng.below(50),
            },
            _ => match Op::any(rng, keys) {
                Op::Advance { by } if by > 100 && rng.below(4) != 0 => Op::Advance {
                    by: 1 + rng.below(50),
                },
                // A batch of one completes the newest guard.
                Op::Complete { .. } if rng.below(4) == 0 => {
                    Op::CompleteBatch { n: 1, result: None }
                }
                Op::CompleteWithResult { result, .. } if rng.below(4) == 0 => Op::CompleteBatch {
                    n: 1,
                    result: Some(result),
                },
                op => op,
            },
        }
    }

    /// Any operation, in the mix of the ordinary sequences.
    fn any(rng: &mut XorShift, keys: usize) -> Op {
        let key = |rng: &mut XorShift| rng.below(keys as u64) as usize;
        // Restarts and compactions (with the look at the database after them) take
        // most of the run's time, some 100 ms and 50 ms each: 2.5 % and 1.5 %.
        match rng.below(214) {
            200..=204 => return Op::FailWrites { on: true },
            205..=209 => return Op::FailWrites { on: false },
            210 => return Op::FailReads { on: true },
            211..=213 => return Op::FailReads { on: false },
            _ => {}
        }
        match rng.below(200) {
            0..=37 => Op::Claim { key: key(rng) },
            38..=55 => Op::ClaimWithPayload {
                key: key(rng),
                payload: rng.below(3) as usize,
            },
            56..=67 => Op::ClaimBatch {
                keys: [key(rng), key(rng), key(rng), key(rng)],
                n: 1 + rng.below(4) as usize,
            },
            68..=87 => Op::Complete { guard: rng.byte() },
            88..=103 => Op::CompleteWithResult {
                guard: rng.byte(),
                result: rng.below(RESULTS.len() as u64) as usize,
            },
            104..=109 => {
                // One draw, as when batches had no results: its residue mod 3 is the
                // count it always was, and the rest picks the results (or none).
                let r = rng.below(3 * 2 * RESULTS.len() as u64) as usize;
                Op::CompleteBatch {
                    n: 1 + r % 3,
                    result: (r / 3).checked_sub(RESULTS.len()),
                }
            }
            110..=117 => Op::Release { guard: rng.byte() },
            118..=121 => Op::DropGuard { guard: rng.byte() },
            122..=131 => Op::Forget { key: key(rng) },
            132..=133 => Op::Check { key: key(rng) },
            134..=135 => Op::Extend {
                guard: rng.byte(),
                ms: match rng.below(3) {
                    0 => 1 + rng.below(20),
                    1 => LEASE_MS - 1 + rng.below(3),
                    _ => TTL_MS + rng.below(2 * TTL_MS),
                },
            },
            136..=167 => {
                let by = match rng.below(20) {
                    0..=4 => 1,
                    5..=10 => 2 + rng.below(63),
                    11..=13 => LEASE_MS - 1 + rng.below(3),
                    14..=16 => TTL_MS - 1 + rng.below(3),
                    17 => 65 + rng.below(400),
                    18 => RETENTION_MS - 1 + rng.below(3),
                    _ => RETENTION_MS + 2 + rng.below(2000),
                };
                Op::Advance { by }
            }
            168..=187 => Op::AdvanceToDeadline {
                pick: rng.below(64) as usize,
                early: rng.below(2) == 0,
            },
            188..=191 => Op::Maintenance,
            192..=194 => Op::Compact,
            _ => Op::Restart { finish: rng.next() },
        }
    }
}

/// A key's state in the model. A key absent from the model was never claimed, or
/// was released or forgotten; an expired state is as good as absent, except that
/// it shows what the key was.
#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    InProgress {
        deadline: u64,
        id: u64,
        payload: Option<usize>,
    },
    Done {
        completed_at: u64,
        /// When the durable record expires: the key is a duplicate until then. On a
        /// coarse tick the earliest it may expire (see `until_hi`).
        until: u64,
        /// On a coarse tick, the latest the record may expire: the key answers
        /// `Duplicate` before `until` and is new from `until_hi` on; in between the
        /// engine's answers decide (`Model::resolve`), each `Duplicate` narrowing the
        /// two to its reported expiry and up to a tick less a millisecond past it
        /// (`Model::fit_expiry`). Equal to `until` at 1 ms.
        until_hi: u64,
        result: Option<Vec<u8>>,
        payload: Option<usize>,
        /// Until when the hot tier holds the key if nothing evicted it (`None`
        /// after a restart); only to classify read-backs for the tally, and to end
        /// a key the hot tier holds alone.
        hot_until: Option<u64>,
        /// What the durable record holds: its expiry, or `None` for no record (a
        /// completion the store refused under `FailOpen`). Short of `until` while
        /// the hot tier holds a window the store refused to write (`FailOpen`):
        /// such a key is never evicted, and once its hot window ends it answers
        /// as its record does (see `Model::settle`).
        disk_until: Option<u64>,
    },
}

impl State {
    fn end(&self) -> u64 {
        match self {
            State::InProgress { deadline, .. } => *deadline,
            State::Done { until, .. } => *until,
        }
    }

    fn payload(&self) -> Option<usize> {
        match self {
            State::InProgress { payload, .. } | State::Done { payload, .. } => *payload,
        }
    }
}

/// The counters of [`Stats`] whose values follow from the answers alone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Counts {
    acquired: u64,
    duplicates: u64,
    in_progress: u64,
    payload_mismatches: u64,
    capacity_refusals: u64,
    completions: u64,
    releases: u64,
    lease_lost: u64,
}

impl Counts {
    fn of(s: &Stats) -> Self {
        Counts {
            acquired: s.acquired,
            duplicates: s.duplicates,
            in_progress: s.in_progress,
            payload_mismatches: s.payload_mismatches,
            capacity_refusals: s.capacity_refusals,
            completions: s.completions,
            releases: s.releases,
            lease_lost: s.lease_lost,
        }
    }
}

/// The reference: key states, the clock, and the counters since the last open.
#[derive(Clone)]
struct Model {
    now: u64,
    cfg: Config,
    keys: HashMap<usize, State>,
    /// The claim marker RocksDB holds for each key: an immediate one, a deferred
    /// one a maintenance pass wrote, or an orphan of the last run. A failing disk
    /// can neither rewrite nor delete it, and it can be an earlier claim's than
    /// the key's latest.
    markers: HashMap<usize, Marker>,
    /// The marker of each key's latest claim where it is kept outside RocksDB: in
    /// the journal, or in memory until a maintenance pass writes it (deferred).
    /// A failing disk does not touch these.
    pending: HashMap<usize, Marker>,
    next_id: u64,
    counts: Counts,
    /// Markers outside the journal (in RocksDB, or waiting in memory) that a claim
    /// which lost its lease removed.
    lost_markers_removed: u64,
    /// Whether every write to RocksDB fails (`Engine::debug_fail_store_writes`).
    failing: bool,
    /// Whether every point read of a done record fails
    /// (`Engine::debug_fail_store_reads`). Whether an operation reads depends on
    /// what the hot tier holds, which the model does not know: any operation may
    /// then answer `Error::Store` instead, and must then have changed nothing.
    failing_reads: bool,
    /// While a batch is claimed: its markers are written together after its last
    /// claim (see `Harness::claim_batch`).
    in_batch: bool,
    /// Events under `FailOpen` for the tally: completions done in the hot tier
    /// alone, windows moved there alone, and first records of such completions.
    hot_only: [u64; 3],
    /// On a coarse tick, for the tally: deadlines the engine placed later than the
    /// span asked for (see [`Model::fit`]), and keys whose record's expiry the
    /// engine's answers decided (see [`Model::resolve`]).
    late: std::cell::Cell<u64>,
    resolved: u64,
}

/// A claim marker in the model.
#[derive(Debug, Clone, Copy)]
struct Marker {
    /// The claim's id.
    id: u64,
    /// When it was claimed, or its lease last extended.
    at: u64,
    deadline: u64,
    payload: Option<usize>,
    /// Whether the maintenance pass wrote it into RocksDB (a deferred marker), for
    /// its sweep to judge (`Model::sweep_disk`): not an immediate marker, nor an
    /// orphan of the last run.
    flushed: bool,
}

/// Whether the claim of marker `m` still holds its key, whose state is `state`, at
/// `now` (what the sweeps keep a marker for): in progress within its deadline, or
/// completed in the hot tier alone (fail open) and still held there.
fn still_held(state: Option<&State>, m: &Marker, now: u64) -> bool {
    match state {
        Some(State::InProgress { id, deadline, .. }) => *id == m.id && *deadline > now,
        Some(State::Done {
            hot_until: Some(t),
            disk_until: None,
            ..
        }) => *t > now,
        _ => false,
    }
}

/// Stands for any `Error::Store` in the model's answers: the harness reads every
/// store error the engine returns as this one (a durable engine never returns it).
fn store_refusal() -> Error {
    Error::NotDurable
}

/// An answer with any store error read as [`store_refusal`].
fn normalized(a: Answer) -> Answer {
    match a {
        Answer::Failed(Error::Store(_)) => Answer::Failed(store_refusal()),
        other => other,
    }
}

/// A result with any store error read as [`store_refusal`].
fn normalized_result<T>(r: Result<T, Error>) -> Result<T, Error> {
    r.map_err(|e| match e {
        Error::Store(_) => store_refusal(),
        other => other,
    })
}

impl Model {
    fn live(&self, key: usize) -> Option<&State> {
        if let Some(State::Done {
            until, until_hi, ..
        }) = self.keys.get(&key)
        {
            // Every `check` after a step resolves what the clock's move left open.
            assert!(
                self.now < *until || self.now >= *until_hi,
                "key-{key} unresolved at {}: [{until}, {until_hi})",
                self.now
            );
        }
        self.keys.get(&key).filter(|s| self.now < s.end())
    }

    /// Keys other than `key` held by a live claim: the entries the hot tier can
    /// neither evict nor reclaim.
    fn claims_except(&self, key: usize) -> usize {
        self.keys
            .iter()
            .filter(|(&k, s)| k != key && (self.now < s.end()) && self.unevictable(s))
            .count()
    }

    /// Whether the hot tier can neither evict nor reclaim an entry in state `s`
    /// (live): a claim, or a done key whose window the store does not hold.
    fn unevictable(&self, s: &State) -> bool {
        match s {
            State::InProgress { .. } => true,
            State::Done {
                until, disk_until, ..
            } => *disk_until != Some(*until),
        }
    }

    /// A done key the hot tier holds beyond its record (see `State::Done`) whose
    /// hot window has ended answers as its record does from now on, or is new.
    fn settle(&mut self) {
        let now = self.now;
        self.keys.retain(|_, s| match s {
            State::Done {
                until,
                until_hi,
                disk_until,
                hot_until,
                ..
            } if *disk_until != Some(*until) && hot_until.is_some_and(|t| now >= t) => {
                match *disk_until {
                    Some(d) => {
                        *until = d;
                        *until_hi = d;
                        true
                    }
                    None => false,
                }
            }
            _ => true,
        });
    }

    /// A deadline the engine reports (`seen`) where the model's nominal one is
    /// `nominal`: taken if it is not early and less than a tick late, as the
    /// engine's tick allows. Otherwise the nominal one, and the comparison that
    /// follows reports the difference. At 1 ms always the nominal one.
    fn fit(&self, nominal: u64, seen: Option<u64>) -> u64 {
        model_core::fit_deadline(self.cfg.tick_ms, &self.late, nominal, seen)
    }

    /// A done key's completion time as an answer reports it (`seen`): a fixed
    /// window's, which the hot tier derives from its deadline, may read up to a tick
    /// less a millisecond late, never past now; otherwise exact.
    fn fit_completion(&self, completed_at: u64, seen: u64) -> u64 {
        model_core::fit_completion(
            self.cfg.sliding,
            self.cfg.tick_ms,
            self.now,
            completed_at,
            seen,
        )
    }

    /// The expiry a `Duplicate` of `key` reports (`seen`), against the record's
    /// expiry as the model knows it, between `until` and `until_hi`: the report may
    /// be up to a tick less a millisecond early, never late. If it fits, the two are
    /// narrowed to what it says and it is the model's answer; otherwise `until` is.
    fn fit_expiry(&mut self, key: usize, seen: u64) -> u64 {
        let tol = self.cfg.tick_ms - 1;
        let Some(State::Done {
            until,
            until_hi,
            disk_until,
            ..
        }) = self.keys.get_mut(&key)
        else {
            return seen;
        };
        if seen > *until_hi || seen + tol < *until {
            return *until;
        }
        if *disk_until == Some(*until) {
            *disk_until = Some((*until).max(seen));
        }
        *until = (*until).max(seen);
        *until_hi = (*until_hi).min(seen + tol);
        seen
    }

    /// A done key whose record may or may not have expired at `now` (on a coarse
    /// tick, `until <= now < until_hi`) takes the engine's word for it: `duplicate`
    /// or not.
    fn resolve(&mut self, key: usize, duplicate: bool) {
        let now = self.now;
        if let Some(State::Done {
            until,
            until_hi,
            disk_until,
            ..
        }) = self.keys.get_mut(&key)
        {
            if *until <= now && now < *until_hi {
                self.resolved += 1;
                if duplicate {
                    if *disk_until == Some(*until) {
                        *disk_until = Some(now + 1);
                    }
                    *until = now + 1;
                } else {
                    *until_hi = now;
                }
            }
        }
    }

    /// The model's `answer` with what a coarse tick leaves to the engine taken from
    /// its answer `seen` where it fits (see [`Model::fit_expiry`] and
    /// [`Model::fit_completion`]); at 1 ms `answer` itself.
    fn fitted(&mut self, key: usize, answer: Answer, seen: Option<&Answer>) -> Answer {
        match (answer, seen) {
            (
                Answer::Duplicate {
                    completed_at_ms,
                    expires_at_ms: _,
                    result,
                },
                Some(Answer::Duplicate {
                    completed_at_ms: c,
                    expires_at_ms: x,
                    ..
                }),
            ) => Answer::Duplicate {
                completed_at_ms: self.fit_completion(completed_at_ms, *c),
                expires_at_ms: self.fit_expiry(key, *x),
                result,
            },
            (answer, _) => answer,
        }
    }

    /// The model's answer to a claim of `key` at `now`; on `Acquired` also the
    /// claim's id and lease deadline. `seen` is the engine's answer, if there is
    /// one, from which the model takes what a coarse tick leaves to the engine.
    fn claim(
        &mut self,
        key: usize,
        payload: Option<usize>,
        seen: Option<&Answer>,
    ) -> (Answer, Option<(u64, u64)>) {
        let (answer, acquired) = self.claim_nominal(key, payload, seen);
        (self.fitted(key, answer, seen), acquired)
    }

    fn claim_nominal(
        &mut self,
        key: usize,
        payload: Option<usize>,
        seen: Option<&Answer>,
    ) -> (Answer, Option<(u64, u64)>) {
        let now = self.now;
        let room = self.claims_except(key) < self.cfg.max_keys;
        let sliding = self.cfg.sliding;
        if let Some(state) = self.live(key) {
            if let (Some(new), Some(stored)) = (payload, state.payload()) {
                if new != stored {
                    self.counts.payload_mismatches += 1;
                    return (Answer::Failed(Error::PayloadMismatch), None);
                }
            }
            let state = self.keys.get_mut(&key).expect("live");
            return match state {
                State::InProgress { deadline, .. } => {
                    self.counts.in_progress += 1;
                    let answer = Answer::InProgress {
                        lease_expires_at_ms: *deadline,
                        retry_after: Duration::from_millis(*deadline - now),
                    };
                    (answer, None)
                }
                State::Done {
                    completed_at,
                    until,
                    until_hi,
                    result,
                    disk_until,
                    ..
                } => {
                    let mut settles = false;
                    if sliding && room {
                        let (extended, extended_hi) =
                            self.cfg.record_range(*completed_at, now + TTL_MS);
                        if extended > *until && self.failing && !self.cfg.fail_open {
                            // The record must be rewritten first, and cannot be.
                            return (Answer::Failed(store_refusal()), None);
                        }
                        // A window the hot tier holds alone (the store refused its
                        // record, fail open) is rewritten by the next sighting the
                        // store takes, whether or not this one moves it.
                        let unstored = *disk_until != Some(*until);
                        if (extended > *until || unstored) && !self.failing {
                            // Rewritten; the first record of a completion decided
                            // in the hot tier alone settles its claim's markers.
                            settles = disk_until.is_none();
                            *disk_until = Some(extended.max(*until));
                        } else if extended > *until {
                            self.hot_only[1] += 1;
                        }
                        *until = (*until).max(extended);
                        *until_hi = (*until_hi).max(extended_hi);
                    }
                    self.counts.duplicates += 1;
                    let answer = Answer::Duplicate {
                        completed_at_ms: *completed_at,
                        expires_at_ms: *until,
                        result: result.clone(),
                    };
                    if settles {
                        self.markers.remove(&key);
                        self.pending.remove(&key);
                        self.hot_only[2] += 1;
                    }
                    (answer, None)
                }
            };
        }
        if !room {
            self.counts.capacity_refusals += 1;
            let refusal = Error::CapacityExceeded {
                namespace: NAMESPACE.to_owned(),
                max_keys: self.cfg.max_keys,
            };
            return (Answer::Failed(refusal), None);
        }
        let in_store = matches!(self.cfg.markers, ClaimMarkers::Immediate);
        if in_store && self.failing && !self.in_batch && !self.cfg.fail_open {
            // Its marker is written before `claim` returns, and cannot be.
            return (Answer::Failed(store_refusal()), None);
        }
        self.next_id += 1;
        let seen_lease = match seen {
            Some(Answer::Acquired {
                lease_expires_at_ms,
            }) => Some(*lease_expires_at_ms),
            _ => None,
        };
        let (id, deadline) = (self.next_id, self.fit(now + LEASE_MS, seen_lease));
        self.keys.insert(
            key,
            State::InProgress {
                deadline,
                id,
                payload,
            },
        );
        // Written over any marker a claim of the key left before.
        let marker = Marker {
            id,
            at: now,
            deadline,
            payload,
            flushed: false,
        };
        if in_store && self.failing {
            // Fail open: acquired without a marker (any earlier claim's stays).
        } else if in_store {
            self.markers.insert(key, marker);
        } else {
            self.pending.insert(key, marker);
        }
        self.counts.acquired += 1;
        let answer = Answer::Acquired {
            lease_expires_at_ms: deadline,
        };
        (answer, Some((id, deadline)))
    }

    /// A completion or release of claim `id` on `key` that lost its lease. Its
    /// marker is removed ([`Model::remove_lost_marker`]).
    fn lease_lost(&mut self, key: usize, id: u64) -> Error {
        self.counts.lease_lost += 1;
        self.remove_lost_marker(key, id);
        Error::LeaseLost
    }

    /// Claim `id` on `key` lost its lease (a completion, release or extension of it
    /// was refused): its marker is removed, wherever it is kept, if no later claim
    /// of the key wrote over it (`DurableNs::lease_lost`).
    fn remove_lost_marker(&mut self, key: usize, id: u64) {
        let mut removed = false;
        if self.pending.get(&key).is_some_and(|m| m.id == id) {
            self.pending.remove(&key);
            removed = matches!(self.cfg.markers, ClaimMarkers::Deferred);
        }
        // A marker in RocksDB is read first (a later claim may have written over it),
        // and then deleted: a failing read or write leaves it.
        if self.markers.get(&key).is_some_and(|m| m.id == id)
            && !self.failing
            && !self.failing_reads
        {
            self.markers.remove(&key);
            removed = true;
        }
        self.lost_markers_removed += u64::from(removed);
    }

    /// The maintenance pass's sweep of the journal (`NsInner::sweep_markers`): a
    /// marker whose lease has ended goes unless its claim still holds the key (in
    /// progress within its deadline, or completed in the hot tier alone, fail
    /// open, and still held there).
    fn sweep_journal(&mut self) {
        let now = self.now;
        let keys = &self.keys;
        self.pending
            .retain(|key, m| m.deadline > now || still_held(keys.get(key), m, now));
    }

    /// The maintenance pass's sweep of this run's markers in RocksDB
    /// (`NsInner::sweep_markers_on_disk`): a flushed deferred marker whose lease has
    /// ended goes as a journal marker does ([`Model::sweep_journal`]), unless the
    /// store fails: the sweep reads each marker back before its delete, so failing
    /// reads leave them as failing writes do.
    fn sweep_disk(&mut self) {
        if self.failing || self.failing_reads {
            return;
        }
        let now = self.now;
        let keys = &self.keys;
        self.markers
            .retain(|key, m| !m.flushed || m.deadline > now || still_held(keys.get(key), m, now));
    }

    /// A claim of `key` that held its lease ends without a completion (a release,
    /// or a completion the store refused): its own marker goes from the journal or
    /// memory, and RocksDB's marker of the key too, unless the disk fails (then it
    /// stays, and the next open reports it).
    fn clear_markers(&mut self, key: usize) {
        self.pending.remove(&key);
        if !self.failing {
            self.markers.remove(&key);
        }
    }

    /// A completion the store refused: the claim is given up (a redelivery
    /// retries) and counted as released, its markers removed where the failing
    /// disk allows.
    fn refused_completion(&mut self, key: usize) -> Error {
        self.counts.releases += 1;
        self.keys.remove(&key);
        self.clear_markers(key);
        store_refusal()
    }

    /// Whether claim `id` on `key` still holds its lease.
    fn holds(&self, key: usize, id: u64) -> bool {
        matches!(self.live(key), Some(State::InProgress { id: held, .. }) if *held == id)
    }

    fn complete(&mut self, key: usize, id: u64, result: Option<Vec<u8>>) -> Result<(), Error> {
        if !self.holds(key, id) {
            return Err(self.lease_lost(key, id));
        }
        // Under fail open, done in the hot tier alone: no record, and the claim's
        // markers stay until one says the key is done.
        let hot_only = self.failing && self.cfg.fail_open;
        if self.failing && !hot_only {
            return Err(self.refused_completion(key));
        }
        if !hot_only {
            // Deleted in the completion's write (RocksDB's, whichever claim's it is),
            // and cleared after it.
            self.markers.remove(&key);
            self.pending.remove(&key);
        }
        let (now, payload) = (self.now, self.keys[&key].payload());
        // Either window: the first window ends within the first retention.
        let (until, until_hi) = self.cfg.record_range(now, now + TTL_MS);
        self.keys.insert(
            key,
            State::Done {
                completed_at: now,
                until,
                until_hi,
                result,
                payload,
                hot_until: Some(now + TTL_MS),
                disk_until: (!hot_only).then_some(until),
            },
        );
        self.counts.completions += 1;
        if hot_only {
            self.hot_only[0] += 1;
        }
        Ok(())
    }

    /// `extend_lease`: claim `id` on `key` now ends `ms` from now, and so does its
    /// marker (written at this time). A lost lease counts nothing, and removes the
    /// claim's marker as a refused completion does.
    fn extend(&mut self, key: usize, id: u64, ms: u64, seen: Option<u64>) -> Result<u64, Error> {
        if !self.holds(key, id) {
            self.remove_lost_marker(key, id);
            return Err(Error::LeaseLost);
        }
        let (now, until) = (self.now, self.fit(self.now + ms, seen));
        let own = |m: &&mut Marker| m.id == id;
        let marker = match self.pending.get_mut(&key).filter(own) {
            Some(m) => Some(m),
            None => {
                let stored = self.markers.get_mut(&key).filter(own);
                if self.failing && stored.is_some() {
                    if !self.cfg.fail_open {
                        // The marker must be rewritten with the new end, and cannot be.
                        return Err(store_refusal());
                    }
                    // Fail open: extended, the marker keeping the old end.
                    None
                } else {
                    stored
                }
            }
        };
        let wrote = marker.is_some();
        if let Some(m) = marker {
            m.at = now;
            m.deadline = until;
        }
        // A claim acquired without its marker (its write failed, fail open) has one
        // written by an extension the disk takes (`DurableNs::renew_marker` puts it
        // in RocksDB, over any earlier claim's): the next open reports it unless
        // the claim ends with its markers removed.
        let in_store = matches!(self.cfg.markers, ClaimMarkers::Immediate);
        if !wrote && in_store && !self.failing {
            let payload = match self.keys.get(&key) {
                Some(State::InProgress { payload, .. }) => *payload,
                _ => None,
            };
            let marker = Marker {
                id,
                at: now,
                deadline: until,
                payload,
                flushed: false,
            };
            self.markers.insert(key, marker);
        }
        if let Some(State::InProgress { deadline, .. }) = self.keys.get_mut(&key) {
            *deadline = until;
        }
        Ok(until)
    }

    fn release(&mut self, key: usize, id: u64) -> Result<(), Error> {
        if !self.holds(key, id) {
            return Err(self.lease_lost(key, id));
        }
        self.clear_markers(key);
        self.keys.remove(&key);
        self.counts.releases += 1;
        Ok(())
    }

    /// What `check` of `key` must answer, `seen` what it did answer: a record that
    /// may or may not have expired takes its word (see [`Model::resolve`]), and
    /// what a coarse tick leaves to the engine is taken from it where it fits.
    fn check(&mut self, key: usize, seen: Option<&Answer>) -> Option<Answer> {
        self.resolve(key, matches!(seen, Some(Answer::Duplicate { .. })));
        let answer = self.check_nominal(key)?;
        Some(self.fitted(key, answer, seen))
    }

    fn check_nominal(&self, key: usize) -> Option<Answer> {
        self.live(key).map(|s| match s {
            State::InProgress { deadline, .. } => Answer::InProgress {
                lease_expires_at_ms: *deadline,
                retry_after: Duration::ZERO,
            },
            State::Done {
                completed_at,
                until,
                result,
                ..
            } => Answer::Duplicate {
                completed_at_ms: *completed_at,
                expires_at_ms: *until,
                result: result.clone(),
            },
        })
    }

    /// Deadlines still ahead: leases, record expiries and hot windows' ends.
    fn pending_deadlines(&self) -> Vec<u64> {
        let mut d: Vec<u64> = self
            .keys
            .values()
            .flat_map(|s| match s {
                State::InProgress { deadline, .. } => [Some(*deadline), None, None],
                State::Done {
                    until,
                    until_hi,
                    hot_until,
                    ..
                } => [Some(*until), Some(*until_hi), *hot_until],
            })
            .flatten()
            .filter(|&d| d > self.now)
            .collect();
        d.sort_unstable();
        d.dedup();
        d
    }

    /// Done records within retention: what the database holds as done.
    fn live_done(&self) -> u64 {
        self.keys
            .values()
            .filter(|s| matches!(s, State::Done { disk_until: Some(d), .. } if self.now < *d))
            .count() as u64
    }
}

/// What a run exercised: evidence that the sequences reach every path.
#[derive(Debug, Clone, Copy, Default)]
struct Tally {
    steps: u64,
    acquired: u64,
    duplicates: u64,
    in_progress: u64,
    payload_mismatches: u64,
    capacity_refusals: u64,
    /// Duplicates (claims or checks) read from the durable tier once the key's hot
    /// window had ended.
    read_back_after_ttl: u64,
    /// Read from the durable tier after a restart, the key completed before it.
    read_back_after_restart: u64,
    /// Read from the durable tier while the key's hot window still ran: evicted.
    read_back_evicted: u64,
    /// Results (not `None`) read back from the durable tier.
    results_read_back: u64,
    /// A done key's record expired and a claim acquired the key again.
    acquired_after_retention: u64,
    /// ... exactly at the record's expiry.
    acquired_at_retention_end: u64,
    /// Duplicates in the last millisecond of retention.
    duplicates_at_last_ms: u64,
    /// Sliding-window sightings that moved the record's expiry.
    records_extended: u64,
    completions: u64,
    releases: u64,
    drops: u64,
    lease_lost_unclaimed: u64,
    lease_lost_taken: u64,
    forgotten: u64,
    /// Forgets of done keys the hot tier no longer held (past the hot window or
    /// completed before a restart): the durable record alone answered for them.
    forgotten_durable: u64,
    batches: u64,
    batches_refused: u64,
    completion_batches: u64,
    /// Of them, `complete_batch_with_results`.
    completion_batches_with_results: u64,
    /// `extend_lease` calls that extended, and those refused (the lease lost).
    extensions: u64,
    extensions_refused: u64,
    maintenance: u64,
    compactions: u64,
    /// Compactions while an expired record was on disk to drop.
    compactions_with_expired: u64,
    restarts: u64,
    /// Markers outside the journal removed by a claim that lost its lease.
    lost_markers_removed: u64,
    evictions: u64,
    /// Spells of failing writes begun.
    failing_spells: u64,
    /// Spells of failing reads begun.
    failing_read_spells: u64,
    /// Claims, batches and forgets refused because a read failed.
    refused_by_read: u64,
    /// Under `FailOpen`: completions the store refused, done in the hot tier alone;
    /// sliding windows moved in the hot tier alone; and first records of such
    /// completions written by a later window's rewrite (settling their markers).
    completions_hot_only: u64,
    windows_hot_only: u64,
    hot_only_records_written: u64,
    /// Claims (single) refused because a write they needed failed.
    claims_refused_by_store: u64,
    /// Completions refused because their write failed (their claims given up).
    completions_refused: u64,
    completion_batches_refused: u64,
    extensions_refused_by_store: u64,
    forgets_refused: u64,
    /// Orphans of a failed marker delete reported at an open, and of those the ones
    /// still held.
    orphans: u64,
    orphans_held: u64,
    /// On a coarse tick: deadlines the engine placed later than the span asked
    /// for, and records whose expiry the engine's answers decided.
    late_deadlines: u64,
    resolved: u64,
}

impl std::ops::AddAssign for Tally {
    fn add_assign(&mut self, o: Tally) {
        self.steps += o.steps;
        self.acquired += o.acquired;
        self.duplicates += o.duplicates;
        self.in_progress += o.in_progress;
        self.payload_mismatches += o.payload_mismatches;
        self.capacity_refusals += o.capacity_refusals;
        self.read_back_after_ttl += o.read_back_after_ttl;
        self.read_back_after_restart += o.read_back_after_restart;
        self.read_back_evicted += o.read_back_evicted;
        self.results_read_back += o.results_read_back;
        self.acquired_after_retention += o.acquired_after_retention;
        self.acquired_at_retention_end += o.acquired_at_retention_end;
        self.duplicates_at_last_ms += o.duplicates_at_last_ms;
        self.records_extended += o.records_extended;
        self.completions += o.completions;
        self.releases += o.releases;
        self.drops += o.drops;
        self.lease_lost_unclaimed += o.lease_lost_unclaimed;
        self.lease_lost_taken += o.lease_lost_taken;
        self.forgotten += o.forgotten;
        self.forgotten_durable += o.forgotten_durable;
        self.batches += o.batches;
        self.batches_refused += o.batches_refused;
        self.completion_batches += o.completion_batches;
        self.completion_batches_with_results += o.completion_batches_with_results;
        self.extensions += o.extensions;
        self.extensions_refused += o.extensions_refused;
        self.maintenance += o.maintenance;
        self.compactions += o.compactions;
        self.compactions_with_expired += o.compactions_with_expired;
        self.restarts += o.restarts;
        self.lost_markers_removed += o.lost_markers_removed;
        self.evictions += o.evictions;
        self.failing_spells += o.failing_spells;
        self.failing_read_spells += o.failing_read_spells;
        self.refused_by_read += o.refused_by_read;
        self.completions_hot_only += o.completions_hot_only;
        self.windows_hot_only += o.windows_hot_only;
        self.hot_only_records_written += o.hot_only_records_written;
        self.claims_refused_by_store += o.claims_refused_by_store;
        self.completions_refused += o.completions_refused;
        self.completion_batches_refused += o.completion_batches_refused;
        self.extensions_refused_by_store += o.extensions_refused_by_store;
        self.forgets_refused += o.forgets_refused;
        self.orphans += o.orphans;
        self.orphans_held += o.orphans_held;
        self.late_deadlines += o.late_deadlines;
        self.resolved += o.resolved;
    }
}

/// A guard held, with the model's view of its claim.
struct Held {
    guard: ClaimGuard,
    key: usize,
    id: u64,
    lease_expires_at_ms: u64,
}

/// How a held guard is finished.
enum Finish {
    Complete(Option<Vec<u8>>),
    Release,
    Drop,
}

/// The engine and the model side by side. The engine and its handle are `None`
/// only during a restart.
struct Harness {
    label: String,
    cfg: Config,
    /// The engine's namespace configuration (the model's, except in the test that
    /// checks that a difference is noticed).
    ns_cfg: NamespaceConfig,
    /// The engine's tick (the model's, except in the test that checks that a
    /// difference is noticed).
    engine_tick_ms: u64,
    clock: ManualClock,
    engine: Option<Engine>,
    ns: Option<Namespace>,
    held: Vec<Held>,
    model: Model,
    step: usize,
    op: Option<Op>,
    tally: Tally,
    /// Dropped last: the engine must be gone before the directory is removed.
    dir: TempDir,
}

impl Harness {
    fn new(cfg: Config, label: String) -> Self {
        Self::with_namespace(cfg, cfg.namespace_config(), label)
    }

    /// The model of `cfg` against an engine whose namespace is configured by
    /// `ns_cfg` instead: a way to check that the comparison notices a difference.
    fn with_namespace(cfg: Config, ns_cfg: NamespaceConfig, label: String) -> Self {
        Self::with_engine(cfg, ns_cfg, cfg.tick_ms, label)
    }

    /// As [`Harness::with_namespace`], the engine ticking every `tick_ms`
    /// milliseconds whatever the model's tick.
    fn with_engine(cfg: Config, ns_cfg: NamespaceConfig, tick_ms: u64, label: String) -> Self {
        let clock = ManualClock::new(T0);
        let mut h = Harness {
            label,
            cfg,
            engine_tick_ms: tick_ms,
            ns_cfg,
            clock,
            engine: None,
            ns: None,
            held: Vec::new(),
            model: Model {
                now: T0,
                cfg,
                keys: HashMap::new(),
                markers: HashMap::new(),
                pending: HashMap::new(),
                next_id: 0,
                counts: Counts::default(),
                lost_markers_removed: 0,
                failing: false,
                failing_reads: false,
                hot_only: [0; 3],
                in_batch: false,
                late: std::cell::Cell::new(0),
                resolved: 0,
            },
            step: 0,
            op: None,
            tally: Tally::default(),
            dir: TempDir::new(),
        };
        h.open();
        h
    }

    /// Opens the engine on the directory (new or left by the last run).
    fn open(&mut self) {
        let engine = Engine::builder()
            .namespace(NAMESPACE, self.ns_cfg.clone())
            .clock(self.clock.clone())
            .tick(Duration::from_millis(self.engine_tick_ms))
            .maintenance_interval(None)
            .seed(self.cfg.seed)
            .durable(self.dir.path())
            .build()
            .unwrap_or_else(|e| panic!("opening the durable engine: {e:?}: {}", self.at()));
        // No claim is in flight at a restart (every guard was finished), and claims
        // that lost their lease removed their markers (see `Model::lease_lost`): the
        // orphans reported must be exactly the model's markers left, those whose
        // delete the store refused (see `Model::clear_markers`), each held while its
        // lease runs. An orphan is reported at each open until its lease has run out
        // at one; then the open settles it.
        let seed = self.cfg.seed;
        let now = self.model.now;
        let mut expected: Vec<(u128, u64, u64, bool, bool)> = Vec::new();
        let mut held = 0;
        // Markers outside RocksDB are left only by completions decided in the hot
        // tier alone (`FailOpen`): the journal's move into RocksDB at the open, and
        // deferred ones are written at the shutdown, over RocksDB's of the key.
        let pending = std::mem::take(&mut self.model.pending);
        self.model.markers.extend(pending);
        for (key, m) in std::mem::take(&mut self.model.markers) {
            let fp = xxh3_128_with_seed(&key_bytes(key), seed);
            let holds = now < m.deadline;
            expected.push((fp, m.at, m.deadline, holds, false));
            self.tally.orphans += 1;
            if holds {
                held += 1;
                self.tally.orphans_held += 1;
                self.model.next_id += 1;
                let id = self.model.next_id;
                self.model.keys.insert(
                    key,
                    State::InProgress {
                        deadline: m.deadline,
                        id,
                        payload: m.payload,
                    },
                );
                self.model.markers.insert(
                    key,
                    Marker {
                        id,
                        flushed: false,
                        ..m
                    },
                );
            }
        }
        expected.sort_unstable();
        let mut orphans: Vec<(u128, u64, u64, bool, bool)> = engine
            .orphans()
            .iter()
            .map(|o| {
                let corrupt = o.corrupt.is_some();
                (
                    o.fingerprint,
                    o.claimed_at_ms,
                    o.lease_expires_at_ms,
                    o.held,
                    corrupt,
                )
            })
            .collect();
        orphans.sort_unstable();
        assert_eq!(
            orphans,
            expected,
            "orphans (fingerprint, claimed at, lease end, held, corrupt): {}",
            self.at()
        );
        // Only the orphans held are in the hot tier, and the journal is empty.
        let stats = engine.stats();
        assert_eq!(
            (stats.resident_keys, stats.journal_markers),
            (held, 0),
            "(resident keys, journal markers) at open: {}",
            self.at()
        );
        assert!(engine.unconfigured_namespaces().is_empty(), "{}", self.at());
        self.ns = Some(engine.namespace(NAMESPACE).expect("configured namespace"));
        self.engine = Some(engine);
        self.model.counts = Counts::default();
    }

    fn engine(&self) -> &Engine {
        self.engine.as_ref().expect("open")
    }

    fn ns(&self) -> &Namespace {
        self.ns.as_ref().expect("open")
    }

    /// Where a divergence happened, for the panic message.
    fn at(&self) -> String {
        format!(
            "{}: step {} {:?} at t0+{} ms",
            self.label,
            self.step,
            self.op,
            self.model.now - T0
        )
    }

    fn durable_reads(&self) -> u64 {
        self.ns().stats().durable_reads
    }

    fn apply(&mut self, op: Op) {
        self.model.settle();
        self.step += 1;
        self.op = Some(op);
        self.tally.steps += 1;
        match op {
            Op::Claim { key } => self.claim(key, None),
            Op::ClaimWithPayload { key, payload } => self.claim(key, Some(payload)),
            Op::ClaimBatch { keys, n } => self.claim_batch(&keys[..n]),
            Op::Complete { guard } => self.finish(guard, Finish::Complete(None)),
            Op::CompleteWithResult { guard, result } => {
                self.finish(guard, Finish::Complete(Some(RESULTS[result].to_vec())))
            }
            Op::CompleteBatch { n, result } => self.complete_batch(n, result),
            Op::Release { guard } => self.finish(guard, Finish::Release),
            Op::DropGuard { guard } => self.finish(guard, Finish::Drop),
            Op::Extend { guard, ms } => self.extend(guard, ms),
            Op::Forget { key } => self.forget(key),
            Op::Check { key } => self.check(key),
            Op::Advance { by } => self.advance(by),
            Op::AdvanceToDeadline { pick, early } => {
                let pending = self.model.pending_deadlines();
                if !pending.is_empty() {
                    let target = pending[pick % pending.len()] - u64::from(early);
                    self.advance(target - self.model.now);
                }
            }
            Op::Maintenance => {
                // What it reclaims depends on what the hot tier holds: not compared.
                let _ = self.engine().run_maintenance();
                if matches!(self.cfg.markers, ClaimMarkers::Journal) {
                    self.model.sweep_journal();
                }
                // Deferred markers are written, unless writes fail (then they wait).
                if !self.model.failing && matches!(self.cfg.markers, ClaimMarkers::Deferred) {
                    let written = std::mem::take(&mut self.model.pending);
                    let flushed = written.into_iter().map(|(key, m)| {
                        let m = Marker { flushed: true, ..m };
                        (key, m)
                    });
                    self.model.markers.extend(flushed);
                }
                self.model.sweep_disk();
                self.tally.maintenance += 1;
            }
            Op::Compact => self.compact(),
            Op::Restart { finish } => self.restart(finish),
            Op::FailWrites { on } => self.fail_writes(on),
            Op::FailReads { on } => self.fail_reads(on),
        }
        self.model.settle();
        self.check_everything();
    }

    /// Makes every RocksDB write fail, or none, in the engine and the model.
    fn fail_writes(&mut self, on: bool) {
        if !self.cfg.failures || on == self.model.failing {
            return;
        }
        self.engine().debug_fail_store_writes(on);
        self.model.failing = on;
        self.tally.failing_spells += u64::from(on);
    }

    /// Makes every point read of a done record fail, or none, in the engine and the
    /// model.
    fn fail_reads(&mut self, on: bool) {
        // (Not under `FailOpen`: a failed read there acquires a key the durable
        // tier knows as done, which the model does not follow.)
        if !self.cfg.failures || self.cfg.fail_open || on == self.model.failing_reads {
            return;
        }
        self.engine().debug_fail_store_reads(on);
        self.model.failing_reads = on;
        self.tally.failing_read_spells += u64::from(on);
    }

    /// Whether `answer`, where the model expected `expected`, is a refusal by a
    /// failing read (see [`Model::failing_reads`]): the model is then put back to
    /// `before`, and the refusal tallied.
    fn refused_by_read(&mut self, answer: &Answer, expected: &Answer, before: Model) -> bool {
        let refused = Answer::Failed(store_refusal());
        if !self.model.failing_reads || *answer != refused || *expected == refused {
            return false;
        }
        self.model = before;
        self.tally.refused_by_read += 1;
        true
    }

    fn advance(&mut self, by: u64) {
        self.model.now += by;
        self.clock.advance(Duration::from_millis(by));
    }

    /// Counts a durable read that answered for a done key (live in the model, which
    /// has not yet moved its hot window), by why the hot tier did not: after a
    /// restart, past the hot window, or evicted.
    fn note_read_back(&mut self, key: usize, reads: u64) {
        if reads == 0 {
            return;
        }
        let (hot_until, has_result) = match self.model.live(key) {
            Some(State::Done {
                hot_until, result, ..
            }) => (*hot_until, result.is_some()),
            _ => return,
        };
        if has_result {
            self.tally.results_read_back += 1;
        }
        match hot_until {
            None => self.tally.read_back_after_restart += 1,
            Some(t) if self.model.now >= t => self.tally.read_back_after_ttl += 1,
            Some(_) => {
                // The hot tier dropped a key whose window still ran: only an
                // eviction from a full hot tier does that.
                let stats = self.ns().stats();
                assert!(
                    stats.evictions > 0,
                    "key-{key} read back within its hot window without an eviction \
                     ({stats:?}): {}",
                    self.at()
                );
                self.tally.read_back_evicted += 1;
            }
        }
    }

    /// After a claim answered a done key: where the hot tier now holds it until, as
    /// the claim placed or moved it (`found_deadline` for a read-back).
    fn note_sighting(&mut self, key: usize, reads: u64, room: bool) {
        let now = self.model.now;
        let sliding = self.cfg.sliding;
        if let Some(State::Done {
            completed_at,
            until,
            hot_until,
            ..
        }) = self.model.keys.get_mut(&key)
        {
            if !room {
                // Answered without a place in the hot tier.
                return;
            }
            *hot_until = if sliding {
                Some(now + TTL_MS)
            } else if reads == 0 {
                *hot_until
            } else if *completed_at + TTL_MS > now {
                Some(*completed_at + TTL_MS)
            } else {
                // Held no later than the last tick that ends by the record's
                // expiry: up to a tick less a millisecond before it.
                Some((now + TTL_MS).min(*until - (self.cfg.tick_ms - 1)))
            };
        }
    }

    fn claim(&mut self, key: usize, payload: Option<usize>) {
        let bytes = key_bytes(key);
        let reads = self.durable_reads();
        let got = match payload {
            None => self.ns().claim(&bytes),
            Some(p) => self.ns().claim_with_payload(&bytes, PAYLOADS[p]),
        };
        let reads = self.durable_reads() - reads;
        let (answer, guard) = observed(got);
        let answer = normalized(answer);
        let model_before = self.model.clone();
        let before = self.model.keys.get(&key).cloned();
        let room = self.model.claims_except(key) < self.cfg.max_keys;
        let (expected, acquired) = self.model.claim(key, payload, Some(&answer));
        // A sliding window's sighting whose window outlasts the record reads the
        // record first (the rewrite never shortens it), a durable read whether or
        // not the hot tier held the key, and whether the rewrite is then made or
        // refused (a failing disk, `FailClosed`: the one refusal of a done key by the
        // store, which answers nothing and leaves the hot window as it was): such a
        // read is not classified. So does every sighting of a window the hot tier
        // holds alone (fail open), which tries the rewrite again.
        let extended = matches!(
            (&before, self.model.keys.get(&key)),
            (
                Some(State::Done { until: a, disk_until: da, .. }),
                Some(State::Done { until: b, disk_until: db, .. }),
            ) if b > a || db != da || *da != Some(*a)
        );
        let rewrite_refused = expected == Answer::Failed(store_refusal());
        if self.refused_by_read(&answer, &expected, model_before) {
            return;
        }
        assert_eq!(answer, expected, "claim of key-{key}: {}", self.at());
        if !extended && !rewrite_refused {
            self.note_read_back(key, reads);
        }
        self.tally_claim(key, &expected, before.as_ref(), reads, room);
        if let (Some(guard), Some((id, deadline))) = (guard, acquired) {
            self.hold(guard, key, id, deadline);
        }
    }

    /// Tallies one claim's answer, `before` the key's model state before it.
    fn tally_claim(
        &mut self,
        key: usize,
        answer: &Answer,
        before: Option<&State>,
        reads: u64,
        room: bool,
    ) {
        let now = self.model.now;
        match answer {
            Answer::Acquired { .. } => {
                self.tally.acquired += 1;
                if let Some(State::Done { until, .. }) = before {
                    self.tally.acquired_after_retention += 1;
                    if *until == now {
                        self.tally.acquired_at_retention_end += 1;
                    }
                }
            }
            Answer::Duplicate { expires_at_ms, .. } => {
                self.tally.duplicates += 1;
                if let Some(State::Done { until, .. }) = before {
                    if *until == now + 1 {
                        self.tally.duplicates_at_last_ms += 1;
                    }
                    if expires_at_ms > until {
                        self.tally.records_extended += 1;
                    }
                }
                self.note_sighting(key, reads, room);
            }
            Answer::InProgress { .. } => self.tally.in_progress += 1,
            Answer::Failed(Error::PayloadMismatch) => self.tally.payload_mismatches += 1,
            Answer::Failed(Error::CapacityExceeded { .. }) => self.tally.capacity_refusals += 1,
            Answer::Failed(e) if *e == store_refusal() => self.tally.claims_refused_by_store += 1,
            Answer::Failed(e) => panic!("unexpected model answer {e:?}: {}", self.at()),
        }
    }

    /// `claim_batch`: the keys claimed one by one in the model at one clock reading;
    /// a refusal (capacity) fails the batch, its acquired claims given up and not
    /// counted as acquired, its other answers counted.
    fn claim_batch(&mut self, keys: &[usize]) {
        let bytes: Vec<Vec<u8>> = keys.iter().map(|&k| key_bytes(k)).collect();
        let refs: Vec<&[u8]> = bytes.iter().map(Vec::as_slice).collect();
        let got = normalized_result(self.ns().claim_batch(&refs));
        // The engine's answers (the model takes what a coarse tick leaves to the
        // engine from them), with their guards.
        let got: Result<Vec<(Answer, Option<ClaimGuard>)>, Error> =
            got.map(|claims| claims.into_iter().map(|c| observed(Ok(c))).collect());
        let seen: Vec<Answer> = match &got {
            Ok(answers) => answers.iter().map(|(a, _)| a.clone()).collect(),
            Err(_) => Vec::new(),
        };
        if self.model.failing_reads && matches!(&got, Err(e) if *e == store_refusal()) {
            // A read failed at one of the keys (which, the model cannot tell): the
            // batch's claims were given up, and the answers made before it stay
            // counted, which are taken as the engine counted them. The keys'
            // states are compared after the step as always.
            self.model.counts = Counts::of(&self.ns().stats());
            self.tally.refused_by_read += 1;
            return;
        }
        let mut expected = Vec::new();
        let mut acquired = Vec::new();
        let mut refused = None;
        let markers_before = (self.model.markers.clone(), self.model.pending.clone());
        self.model.in_batch = true;
        for (i, &key) in keys.iter().enumerate() {
            let before = self.model.keys.get(&key).cloned();
            let room = self.model.claims_except(key) < self.cfg.max_keys;
            let (answer, acq) = self.model.claim(key, None, seen.get(i));
            if let Answer::Failed(e) = answer {
                refused = Some(e);
                break;
            }
            if let Answer::Duplicate { .. } = answer {
                // Whether this key read the durable tier is not known in a batch:
                // a hot window still running is taken as held (if it was not, the
                // read-back placed the key at least as long), one ended as read
                // back. The model's hot window is then never later than the hot
                // tier's, which the eviction check of `note_read_back` relies on.
                // On a coarse tick the hot window may run up to a tick less a
                // millisecond past the model's end of it: still taken as held.
                let now = self.model.now;
                let late = self.cfg.tick_ms - 1;
                let held = matches!(
                    self.model.keys.get(&key),
                    Some(State::Done { hot_until: Some(t), .. }) if *t + late > now
                );
                self.note_sighting(key, u64::from(!held), room);
            }
            if let Some((id, deadline)) = acq {
                acquired.push((key, id, deadline, before));
            }
            expected.push(answer);
        }
        self.model.in_batch = false;
        self.tally.batches += 1;
        if refused.is_none()
            && !acquired.is_empty()
            && self.model.failing
            && !self.cfg.fail_open
            && matches!(self.cfg.markers, ClaimMarkers::Immediate)
        {
            // Every claim was answered, and their markers' one write fails.
            refused = Some(store_refusal());
        }
        if let Some(e) = refused {
            for (key, _, _, before) in acquired.into_iter().rev() {
                match before {
                    Some(s) => self.model.keys.insert(key, s),
                    None => self.model.keys.remove(&key),
                };
                self.model.counts.acquired -= 1;
            }
            // A refused batch writes no marker.
            (self.model.markers, self.model.pending) = markers_before;
            assert_eq!(got.err(), Some(e), "refused batch {keys:?}: {}", self.at());
            self.tally.batches_refused += 1;
            return;
        }
        let claims = got.unwrap_or_else(|e| {
            panic!(
                "batch {keys:?} refused with {e:?}, expected {expected:?}: {}",
                self.at()
            )
        });
        assert_eq!(claims.len(), keys.len(), "one answer a key: {}", self.at());
        let mut acquired = acquired.into_iter();
        for (i, ((answer, guard), want)) in claims.into_iter().zip(expected).enumerate() {
            assert_eq!(answer, want, "batch {keys:?}, answer {i}: {}", self.at());
            match guard {
                Some(guard) => {
                    let (key, id, deadline, _) = acquired.next().expect("acquired in the model");
                    self.tally.acquired += 1;
                    self.hold(guard, key, id, deadline);
                }
                None if matches!(answer, Answer::Duplicate { .. }) => self.tally.duplicates += 1,
                None => self.tally.in_progress += 1,
            }
        }
    }

    fn hold(&mut self, guard: ClaimGuard, key: usize, id: u64, deadline: u64) {
        self.held.push(Held {
            guard,
            key,
            id,
            lease_expires_at_ms: deadline,
        });
    }

    fn pick(&self, sel: u8) -> usize {
        match sel {
            0..=127 => self.held.len() - 1,
            _ => sel as usize % self.held.len(),
        }
    }

    /// `extend_lease` on a held guard (mostly the newest), which stays held.
    fn extend(&mut self, sel: u8, ms: u64) {
        if self.held.is_empty() {
            return;
        }
        let i = self.pick(sel);
        let got = self.held[i].guard.extend_lease(Duration::from_millis(ms));
        let (key, id) = (self.held[i].key, self.held[i].id);
        let seen = got
            .is_ok()
            .then(|| self.held[i].guard.lease_expires_at_ms());
        let expected = self.model.extend(key, id, ms, seen);
        assert_eq!(
            normalized_result(got),
            expected.clone().map(|_| ()),
            "extending the lease on key-{key}: {}",
            self.at()
        );
        match expected {
            Ok(until) => {
                self.held[i].lease_expires_at_ms = until;
                self.tally.extensions += 1;
            }
            Err(e) if e == store_refusal() => self.tally.extensions_refused_by_store += 1,
            Err(_) => self.tally.extensions_refused += 1,
        }
    }

    fn finish(&mut self, sel: u8, how: Finish) {
        if self.held.is_empty() {
            return;
        }
        let i = self.pick(sel);
        let held = self.held.remove(i);
        self.finish_held(held, how);
    }

    fn finish_held(&mut self, held: Held, how: Finish) {
        let Held { guard, key, id, .. } = held;
        // A lost lease is classified before the model changes.
        let unclaimed = self.unclaimed(key, id);
        let (got, expected, what) = match how {
            Finish::Complete(None) => (guard.complete(), self.model.complete(key, id, None), 0),
            Finish::Complete(Some(r)) => (
                guard.complete_with_result(&r),
                self.model.complete(key, id, Some(r)),
                0,
            ),
            Finish::Release => (guard.release(), self.model.release(key, id), 1),
            Finish::Drop => {
                drop(guard);
                // Seen in the counters and in the key's state.
                let _ = self.model.release(key, id);
                self.tally.drops += 1;
                return;
            }
        };
        assert_eq!(
            normalized_result(got),
            expected,
            "finishing a claim on key-{key}: {}",
            self.at()
        );
        match (expected, what) {
            (Ok(()), 0) => self.tally.completions += 1,
            (Ok(()), _) => self.tally.releases += 1,
            (Err(e), _) if e == store_refusal() => self.tally.completions_refused += 1,
            (Err(_), _) if unclaimed => self.tally.lease_lost_unclaimed += 1,
            (Err(_), _) => self.tally.lease_lost_taken += 1,
        }
    }

    /// Whether claim `id` is still the last one made on `key`, nobody having
    /// claimed, released or forgotten it since (its lease may have run out): a
    /// lost lease then was lost to time alone.
    fn unclaimed(&self, key: usize, id: u64) -> bool {
        matches!(
            self.model.keys.get(&key),
            Some(State::InProgress { id: held, .. }) if *held == id
        )
    }

    /// `complete_batch` of up to `n` of the newest guards, completed in the model in
    /// order at one clock reading; with `result`, `complete_batch_with_results`, the
    /// results taken in turn from `RESULTS` from that one on.
    fn complete_batch(&mut self, n: usize, result: Option<usize>) {
        if self.held.is_empty() {
            return;
        }
        let n = n.min(self.held.len());
        let taken: Vec<Held> = self.held.drain(self.held.len() - n..).collect();
        let mut guards = Vec::new();
        let mut expected = Vec::new();
        for (i, Held { guard, key, id, .. }) in taken.into_iter().enumerate() {
            let r = result.map(|first| RESULTS[(first + i) % RESULTS.len()]);
            guards.push((guard, r));
            let unclaimed = self.unclaimed(key, id);
            let want = self.model.complete(key, id, r.map(<[u8]>::to_vec));
            expected.push((key, unclaimed, want));
        }
        let got = if result.is_some() {
            let batch = guards.into_iter().map(|(g, r)| (g, r.unwrap_or_default()));
            normalized_result(self.ns().complete_batch_with_results(batch.collect()))
        } else {
            let batch = guards.into_iter().map(|(g, _)| g);
            normalized_result(self.ns().complete_batch(batch.collect()))
        };
        let refused = expected
            .iter()
            .filter(|(_, _, want)| *want == Err(store_refusal()));
        let refused = refused.count() as u64;
        if refused > 0 {
            // The batch's one write failed: every claim that held its lease was given
            // up (the others lost it, as their own results would have said).
            assert_eq!(got, Err(store_refusal()), "complete_batch: {}", self.at());
            self.tally.completions_refused += refused;
            self.tally.completion_batches_refused += 1;
            return;
        }
        let got = got.unwrap_or_else(|e| panic!("complete_batch refused: {e:?}: {}", self.at()));
        assert_eq!(
            got.len(),
            expected.len(),
            "one result a guard: {}",
            self.at()
        );
        for (i, (r, (key, unclaimed, want))) in got.into_iter().zip(expected).enumerate() {
            let r = normalized_result(r);
            assert_eq!(r, want, "batch completion {i}, key-{key}: {}", self.at());
            match r {
                Ok(()) => self.tally.completions += 1,
                Err(e) if e == store_refusal() => self.tally.completions_refused += 1,
                Err(_) if unclaimed => self.tally.lease_lost_unclaimed += 1,
                Err(_) => self.tally.lease_lost_taken += 1,
            }
        }
        self.tally.completion_batches += 1;
        self.tally.completion_batches_with_results += u64::from(result.is_some());
    }

    fn forget(&mut self, key: usize) {
        let got = self.ns().forget(&key_bytes(key));
        if self.model.failing_reads && normalized_result(got.clone()) == Err(store_refusal()) {
            // Its read failed: nothing is forgotten.
            self.tally.refused_by_read += 1;
            return;
        }
        if self.model.failing {
            // Its delete fails: nothing is forgotten.
            assert_eq!(
                normalized_result(got),
                Err(store_refusal()),
                "forget of key-{key}: {}",
                self.at()
            );
            self.tally.forgets_refused += 1;
            return;
        }
        let live = self.model.live(key).cloned();
        if let Some(State::Done { hot_until, .. }) = &live {
            if hot_until.is_none_or(|t| self.model.now >= t) {
                self.tally.forgotten_durable += 1;
            }
        }
        self.model.keys.remove(&key);
        self.model.markers.remove(&key);
        self.model.pending.remove(&key);
        assert_eq!(
            got,
            Ok(live.is_some()),
            "forget of key-{key}: {}",
            self.at()
        );
        self.tally.forgotten += u64::from(live.is_some());
    }

    fn check(&mut self, key: usize) {
        let reads = self.durable_reads();
        self.check_key(key);
        let reads = self.durable_reads() - reads;
        self.note_read_back(key, reads);
    }

    fn check_key(&mut self, key: usize) {
        let got = checked(self.ns().check(&key_bytes(key)), &self.at()).map(normalized);
        if self.model.failing_reads && got == Some(Answer::Failed(store_refusal())) {
            // A read of the durable tier failed (see `Model::failing_reads`).
            return;
        }
        let expected = self.model.check(key, got.as_ref());
        assert_eq!(got, expected, "check of key-{key}: {}", self.at());
    }

    /// `compact_store`, then a read-only look at the database: exactly the model's
    /// live done records, and no expired one left.
    fn compact(&mut self) {
        self.fail_writes(false);
        self.fail_reads(false);
        let expired_before =
            self.model.keys.values().any(
                |s| matches!(s, State::Done { disk_until: Some(d), .. } if *d <= self.model.now),
            );
        let r = self.engine().compact_store();
        assert_eq!(r, Ok(()), "compact_store(): {}", self.at());
        let seen = idem::inspect(self.dir.path(), self.clock.now_ms())
            .unwrap_or_else(|e| panic!("inspect: {e:?}: {}", self.at()));
        let ns = seen
            .namespaces
            .iter()
            .find(|n| n.name == NAMESPACE)
            .unwrap_or_else(|| panic!("no namespace in {seen:?}: {}", self.at()));
        assert_eq!(
            (ns.done, ns.expired, ns.corrupt),
            (self.model.live_done(), 0, 0),
            "records (done, expired, corrupt) after a compaction: {}",
            self.at()
        );
        self.tally.compactions += 1;
        self.tally.compactions_with_expired += u64::from(expired_before);
    }

    /// Finishes every guard held (completes it, or drops it), drops the engine and
    /// every handle, and opens it again on the same directory and clock.
    fn restart(&mut self, mut finish: u64) {
        self.fail_writes(false);
        self.fail_reads(false);
        while let Some(held) = self.held.pop() {
            let how = if finish & 1 == 1 {
                Finish::Complete(None)
            } else {
                Finish::Drop
            };
            finish >>= 1;
            self.finish_held(held, how);
        }
        self.tally.evictions += self.ns().stats().evictions;
        self.ns = None;
        self.engine = None;
        // What the hot tier alone held is gone: a done key answers as its record
        // does, or is new.
        self.model.keys.retain(|_, state| match state {
            State::Done {
                hot_until,
                until,
                until_hi,
                disk_until,
                ..
            } => {
                *hot_until = None;
                match *disk_until {
                    Some(d) => {
                        if d != *until {
                            // A window the hot tier held alone: the record's own.
                            *until_hi = d;
                        }
                        *until = d;
                        true
                    }
                    None => false,
                }
            }
            State::InProgress { .. } => true,
        });
        self.open();
        self.tally.restarts += 1;
    }

    /// The comparison run after every step.
    fn check_everything(&mut self) {
        let stats = self.ns().stats();
        assert_eq!(
            Counts::of(&stats),
            self.model.counts,
            "stats(): {}",
            self.at()
        );
        assert!(
            stats.resident_keys <= self.cfg.max_keys as u64,
            "{} resident keys over max_keys: {}",
            stats.resident_keys,
            self.at()
        );
        if self.cfg.max_keys >= self.cfg.keys {
            assert_eq!(
                stats.evictions,
                0,
                "evictions with room for every key: {}",
                self.at()
            );
        }
        for key in 0..self.cfg.keys {
            self.check_key(key);
        }
        for h in &self.held {
            assert_eq!(
                h.guard.lease_expires_at_ms(),
                h.lease_expires_at_ms,
                "lease of a held guard on key-{}: {}",
                h.key,
                self.at()
            );
        }
    }

    /// Drops the guards and the engine (the directory goes with the harness).
    fn end(mut self) -> Tally {
        self.held.clear();
        self.tally.evictions += self.ns().stats().evictions;
        self.tally.lost_markers_removed += self.model.lost_markers_removed;
        let [completions, windows, records] = self.model.hot_only;
        self.tally.completions_hot_only += completions;
        self.tally.windows_hot_only += windows;
        self.tally.hot_only_records_written += records;
        self.tally.late_deadlines += self.model.late.get();
        self.tally.resolved += self.model.resolved;
        self.ns = None;
        self.engine = None;
        self.tally
    }
}

/// Runs [`SEQUENCES`] random sequences of [`STEPS`] operations in one window mode.
fn run_many(sliding: bool, seed: u64) -> Tally {
    run_sequences(sliding, seed, SEQUENCES, false)
}

/// Runs `sequences` random sequences of [`STEPS`] operations in one window mode; with
/// `failing_disk`, every sequence makes writes fail now and then, with more of the
/// operations that meet such failures (see [`Op::random`]).
fn run_sequences(sliding: bool, seed: u64, sequences: usize, failing_disk: bool) -> Tally {
    run_sequences_on_tick(sliding, seed, sequences, failing_disk, 1)
}

/// As [`run_sequences`], on an engine ticking every `tick_ms` milliseconds (see
/// [`Config::on_tick`]).
fn run_sequences_on_tick(
    sliding: bool,
    seed: u64,
    sequences: usize,
    failing_disk: bool,
    tick_ms: u64,
) -> Tally {
    let mut rng = XorShift::new(seed);
    let mut total = Tally::default();
    for seq in 0..sequences {
        let mut cfg = Config::random(sliding, &mut rng);
        cfg.failures |= failing_disk;
        let mut cfg = cfg.on_tick(tick_ms);
        if tick_ms > 1 {
            cfg.retention_ms = match rng.below(4) {
                0 => TTL_MS,
                1 => TTL_MS + rng.below(tick_ms),
                _ => RETENTION_MS,
            };
        }
        let mut h = Harness::new(cfg, format!("seed {seed:#x}, sequence {seq}, {cfg:?}"));
        for _ in 0..STEPS {
            let op = Op::random(&mut rng, failing_disk, cfg.keys);
            h.apply(op);
        }
        total += h.end();
    }
    total
}

/// The sequences must reach every path the durable tier adds, or a passing run would
/// mean little.
fn assert_covers_every_path(t: &Tally, sliding: bool) {
    let mut reached = vec![
        ("acquired", t.acquired),
        ("duplicates", t.duplicates),
        ("in progress", t.in_progress),
        ("payload mismatches", t.payload_mismatches),
        ("capacity refusals", t.capacity_refusals),
        ("read-backs after the hot window", t.read_back_after_ttl),
        ("read-backs after a restart", t.read_back_after_restart),
        ("read-backs of evicted keys", t.read_back_evicted),
        ("results read back", t.results_read_back),
        ("acquired after retention", t.acquired_after_retention),
        (
            "acquired exactly at the end of retention",
            t.acquired_at_retention_end,
        ),
        (
            "duplicates in the last millisecond of retention",
            t.duplicates_at_last_ms,
        ),
        ("completions", t.completions),
        ("releases", t.releases),
        ("dropped guards", t.drops),
        (
            "lease lost with nobody else claiming",
            t.lease_lost_unclaimed,
        ),
        ("lease lost to a re-claim or forget", t.lease_lost_taken),
        ("forgotten keys", t.forgotten),
        ("forgotten keys held only durably", t.forgotten_durable),
        ("batches", t.batches),
        ("refused batches", t.batches_refused),
        ("batch completions", t.completion_batches),
        (
            "batch completions with results",
            t.completion_batches_with_results,
        ),
        ("lease extensions", t.extensions),
        ("refused lease extensions", t.extensions_refused),
        ("maintenance passes", t.maintenance),
        ("compactions", t.compactions),
        (
            "compactions with expired records",
            t.compactions_with_expired,
        ),
        ("restarts", t.restarts),
        (
            "immediate or deferred markers removed by a lost lease",
            t.lost_markers_removed,
        ),
        ("evictions", t.evictions),
    ];
    if sliding {
        reached.push(("records extended", t.records_extended));
    }
    for (what, n) in reached {
        assert!(n >= 20, "only {n} {what} in {t:#?}");
    }
    assert_eq!(t.steps, (SEQUENCES * STEPS) as u64);
}

/// Sequences on a disk that fails now and then must reach every way a write can be
/// refused, and leave orphans behind.
fn assert_covers_failures(t: &Tally, sequences: usize) {
    let reached = [
        ("spells of failing writes", t.failing_spells),
        ("spells of failing reads", t.failing_read_spells),
        ("operations refused by a failing read", t.refused_by_read),
        ("completions in the hot tier alone", t.completions_hot_only),
        ("claims refused by the store", t.claims_refused_by_store),
        ("completions refused by the store", t.completions_refused),
        (
            "completion batches refused by the store",
            t.completion_batches_refused,
        ),
        ("forgets refused by the store", t.forgets_refused),
        ("orphans left by a failed delete", t.orphans),
        ("orphans held at an open", t.orphans_held),
        ("restarts", t.restarts),
    ];
    for (what, n) in reached {
        assert!(n >= 10, "only {n} {what} in {t:#?}");
    }
    // Rarer: a held claim whose marker is in RocksDB, extended during a spell, in a
    // namespace that fails closed.
    let n = t.extensions_refused_by_store;
    assert!(n >= 5, "only {n} extensions refused by the store in {t:#?}");
    assert_eq!(t.steps, (sequences * STEPS) as u64);
}

#[test]
fn fixed_window_durable_engine_matches_the_model() {
    let t = run_many(false, 0xD0_5EED_0001);
    println!("{t:#?}");
    assert_covers_every_path(&t, false);
    assert_eq!(t.records_extended, 0, "a fixed window never extends");
}

#[test]
fn sliding_window_durable_engine_matches_the_model() {
    let t = run_many(true, 0xD0_5EED_0002);
    println!("{t:#?}");
    assert_covers_every_path(&t, true);
}

/// Ticks coarser than 1 ms: one that divides neither the TTL, the lease nor the
/// retention, one that divides all three, and one as long as the TTL. The clock
/// moves by any number of milliseconds, mostly not whole ticks, and each restart
/// counts the ticks from its own open.
const COARSE_TICKS_MS: [u64; 3] = [7, 250, 1000];

/// Sequences per window mode and coarse tick. (The generator meets the engine's
/// known fault of `a_sliding_window_read_back_after_a_restart_reports_its_records_expiry`,
/// in `tests/coarse_ticks.rs` and ignored, in longer runs: sliding seed
/// `0xD0_5EED_1202` at 250 ms, sequence 30 of 40, reports an expiry a retention
/// short of the record after a restart. These seeds do not meet it, and nothing is
/// skipped for it.)
const COARSE_SEQUENCES: usize = 4;

/// The coarse-tick sequences of one window mode, and their tally.
fn run_coarse(sliding: bool, seed: u64) -> Tally {
    let mut total = Tally::default();
    for (i, tick) in COARSE_TICKS_MS.into_iter().enumerate() {
        let t = run_sequences_on_tick(sliding, seed + i as u64, COARSE_SEQUENCES, false, tick);
        println!("tick {tick} ms: {t:#?}");
        total += t;
    }
    total
}

/// Coarse-tick sequences must meet what the tick leaves to the engine, and the
/// durable tier's paths.
fn assert_covers_coarse_ticks(t: &Tally) {
    let reached = [
        ("acquired", t.acquired),
        ("duplicates", t.duplicates),
        ("in progress", t.in_progress),
        ("read-backs after the hot window", t.read_back_after_ttl),
        ("read-backs after a restart", t.read_back_after_restart),
        ("acquired after retention", t.acquired_after_retention),
        (
            "lease lost with nobody else claiming",
            t.lease_lost_unclaimed,
        ),
        ("lease extensions", t.extensions),
        ("forgotten keys held only durably", t.forgotten_durable),
        (
            "compactions with expired records",
            t.compactions_with_expired,
        ),
        ("restarts", t.restarts),
        ("deadlines rounded up", t.late_deadlines),
        ("expiries the engine's answers decided", t.resolved),
    ];
    for (what, n) in reached {
        assert!(n >= 5, "only {n} {what} in {t:#?}");
    }
    let sequences = COARSE_TICKS_MS.len() * COARSE_SEQUENCES;
    assert_eq!(t.steps, (sequences * STEPS) as u64);
}

#[test]
fn fixed_window_durable_engine_on_coarse_ticks_matches_the_model() {
    let t = run_coarse(false, 0xD0_5EED_0101);
    assert_covers_coarse_ticks(&t);
    assert_eq!(t.records_extended, 0, "a fixed window never extends");
}

#[test]
fn sliding_window_durable_engine_on_coarse_ticks_matches_the_model() {
    let t = run_coarse(true, 0xD0_5EED_0201);
    assert_covers_coarse_ticks(&t);
    let n = t.records_extended;
    assert!(n >= 10, "only {n} records extended in {t:#?}");
}

/// Sequences per window mode on a disk that fails now and then (the sequences above
/// have such spells in half their sequences, with fewer of the operations that meet
/// them).
const FAILING_DISK_SEQUENCES: usize = 36;

#[test]
fn fixed_window_durable_engine_on_a_failing_disk_matches_the_model() {
    let t = run_sequences(false, 0xD0_5EED_0003, FAILING_DISK_SEQUENCES, true);
    println!("{t:#?}");
    assert_covers_failures(&t, FAILING_DISK_SEQUENCES);
}

#[test]
fn sliding_window_durable_engine_on_a_failing_disk_matches_the_model() {
    let t = run_sequences(true, 0xD0_5EED_0004, FAILING_DISK_SEQUENCES, true);
    println!("{t:#?}");
    assert_covers_failures(&t, FAILING_DISK_SEQUENCES);
}

/// A short sequence that separates retention from one a millisecond longer, a
/// durable tier from one that keeps nothing past the TTL, and a fixed window from a
/// sliding one: a key completed, read back after a restart past its hot window, a
/// duplicate in the last millisecond of its retention (which a sliding window would
/// extend by a retention), then new again.
fn probe() -> Vec<Op> {
    let key = 0;
    vec![
        Op::Claim { key },
        Op::Complete { guard: 0 },
        Op::Restart { finish: 0 },
        Op::Advance { by: TTL_MS + 1 },
        Op::Check { key },
        Op::Claim { key },
        Op::Advance {
            by: RETENTION_MS - TTL_MS - 2,
        },
        Op::Claim { key },
        Op::Advance { by: 1 },
        Op::Claim { key },
    ]
}

fn probe_config() -> Config {
    Config {
        sliding: false,
        max_keys: 16,
        shards: None,
        markers: ClaimMarkers::Journal,
        prefilter: true,
        failures: false,
        fail_open: false,
        seed: 7,
        tick_ms: 1,
        retention_ms: RETENTION_MS,
        keys: KEYS,
    }
}

/// Under `FailOpen`, with a sliding window: a completion the store refused is done
/// in the hot tier alone, and a later sighting whose window outlasts the record it
/// would have had writes its first record (settling the claim's journal marker:
/// no orphan at the restart, which then answers from that record); a window the
/// store refused to rewrite lives in the hot tier alone, and after a restart the
/// key answers as its record does, until that record ends.
#[test]
fn hot_only_completions_and_windows_under_fail_open_match_the_model() {
    let cfg = Config {
        sliding: true,
        failures: true,
        fail_open: true,
        ..probe_config()
    };
    let sightings = |ops: &mut Vec<Op>, key: usize, n: usize| {
        for _ in 0..n {
            ops.push(Op::Advance { by: 900 });
            ops.push(Op::Claim { key });
        }
    };
    let mut ops = vec![
        Op::Claim { key: 0 },
        Op::FailWrites { on: true },
        Op::Complete { guard: 0 },
        Op::FailWrites { on: false },
    ];
    // At 3.6 s the window (to 4.6 s) outlasts the first retention's 4 s.
    sightings(&mut ops, 0, 4);
    ops.extend([
        Op::Restart { finish: 0 },
        Op::Claim { key: 0 },
        Op::Claim { key: 1 },
        Op::Complete { guard: 0 },
    ]);
    sightings(&mut ops, 1, 3);
    ops.extend([
        Op::Advance { by: 900 },
        Op::FailWrites { on: true },
        Op::Claim { key: 1 },
        Op::FailWrites { on: false },
        Op::Restart { finish: 0 },
        Op::Check { key: 1 },
        Op::Advance { by: 400 },
        Op::Claim { key: 1 },
    ]);
    let mut h = Harness::new(cfg, "fail-open probe".to_owned());
    for op in ops {
        h.apply(op);
    }
    let t = h.end();
    assert_eq!(
        (
            t.completions_hot_only,
            t.hot_only_records_written,
            t.windows_hot_only
        ),
        (1, 1, 1),
        "{t:#?}"
    );
    assert_eq!((t.orphans, t.acquired), (0, 3), "{t:#?}");
}

/// Under `FailClosed`, with a sliding window: a sighting within the key's hot window
/// whose window outlasts the record is refused while writes fail, after the engine
/// read the record to compare its expiry (as any rewrite does): that read answered
/// nothing, so it is no read-back of an evicted key (none was evicted), and the hot
/// tier keeps the window it had. The next sighting, with writes back, rewrites the
/// record.
#[test]
fn a_refused_window_rewrite_reads_the_record_without_a_read_back() {
    let cfg = Config {
        sliding: true,
        failures: true,
        ..probe_config()
    };
    let mut ops = vec![Op::Claim { key: 0 }, Op::Complete { guard: 0 }];
    // At 2.7 s the window ends at 3.7 s, within the first retention (to 4 s); at
    // 3.6 s it would end at 4.6 s, past it.
    for _ in 0..4 {
        ops.push(Op::Advance { by: 900 });
        ops.push(Op::Claim { key: 0 });
    }
    let last = ops.pop().expect("a sighting");
    ops.extend([
        Op::FailWrites { on: true },
        last,
        // The hot tier still holds the window as it was: no durable read.
        Op::Check { key: 0 },
        Op::FailWrites { on: false },
        last,
    ]);
    let mut h = Harness::new(cfg, "refused window rewrite".to_owned());
    for op in ops {
        h.apply(op);
    }
    let t = h.end();
    assert_eq!(
        (t.claims_refused_by_store, t.records_extended, t.evictions),
        (1, 1, 0),
        "{t:#?}"
    );
    let read_backs = t.read_back_after_ttl + t.read_back_after_restart + t.read_back_evicted;
    assert_eq!(read_backs, 0, "{t:#?}");
}

#[test]
fn the_probe_passes_against_a_matching_engine() {
    let cfg = probe_config();
    let mut h = Harness::new(cfg, "probe".to_owned());
    for op in probe() {
        h.apply(op);
    }
    let t = h.end();
    assert_eq!((t.acquired, t.duplicates, t.completions), (2, 2, 1));
    assert_eq!(t.read_back_after_restart, 2, "{t:#?}");
    assert_eq!(t.acquired_at_retention_end, 1, "{t:#?}");
}

#[test]
fn the_comparison_notices_an_engine_that_differs_from_the_model() {
    let cfg = probe_config();
    let differing = [
        (
            "retention one millisecond longer",
            cfg.namespace_config()
                .retention(Duration::from_millis(RETENTION_MS + 1)),
        ),
        (
            "retention equal to the TTL",
            cfg.namespace_config()
                .retention(Duration::from_millis(TTL_MS)),
        ),
        (
            "sliding instead of fixed window",
            cfg.namespace_config().extend_on_duplicate(true),
        ),
    ];
    for (what, ns_cfg) in differing {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut h = Harness::with_namespace(cfg, ns_cfg, what.to_owned());
            for op in probe() {
                h.apply(op);
            }
        }));
        assert!(outcome.is_err(), "an engine with {what} went unnoticed");
    }
}

/// On a coarse tick the comparison allows what the tick allows and no more: an
/// engine whose retention is a tick longer than the model's, or whose window
/// slides where the model's is fixed, is noticed on a 7 ms tick; and the model of a
/// 1 ms tick notices an engine that ticks every 7 ms.
#[test]
fn the_comparison_on_a_coarse_tick_notices_an_engine_that_differs_from_the_model() {
    const TICK: u64 = 7;
    let cfg = probe_config().on_tick(TICK);
    let mut h = Harness::new(cfg, "probe on a coarse tick".to_owned());
    for op in probe() {
        h.apply(op);
    }
    let t = h.end();
    assert_eq!((t.acquired, t.duplicates, t.completions), (2, 2, 1));
    let differing = [
        (
            "retention one tick longer",
            cfg,
            cfg.namespace_config()
                .retention(Duration::from_millis(RETENTION_MS + TICK)),
        ),
        (
            "sliding instead of fixed window",
            cfg,
            cfg.namespace_config().extend_on_duplicate(true),
        ),
        (
            "a 7 ms tick against a 1 ms model",
            probe_config(),
            cfg.namespace_config(),
        ),
    ];
    for (what, model_cfg, ns_cfg) in differing {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut h = Harness::with_engine(model_cfg, ns_cfg, TICK, what.to_owned());
            for op in probe() {
                h.apply(op);
            }
        }));
        assert!(outcome.is_err(), "an engine with {what} went unnoticed");
    }
}

/// Namespaces of odd and small sizes, with one shard or many (up to 64, more than
/// keys in some): `max_keys` 1, 2, 3, 7, 63, 65 and 127, each namespace naming a few
/// more keys than it holds, so that a full hot tier evicts done keys, refuses new
/// ones when every resident key is a claim in flight, and reads evicted keys back
/// (and evicts them again). The larger ones are filled nearly full by a run of
/// claims (most completed, some left in flight) at first, and full again now and
/// then (a restart empties the hot tier), so that their random operations meet a
/// full namespace.
#[test]
fn namespaces_of_small_and_odd_sizes_match_the_model() {
    let seed = 0xD0_5EED_0501;
    let mut rng = XorShift::new(seed);
    let mut total = Tally::default();
    let mut sequences = 0;
    // Evictions in the namespaces over `KEYS` keys.
    let mut evicted_in_large = 0;
    for max_keys in [1, 2, 3, 7, 63, 65, 127] {
        for shards in [1, 2, 3, 7, 16, 64] {
            let sliding = rng.below(2) == 0;
            let tick = [1, 1, 1, 7, 250][rng.below(5) as usize];
            let mut cfg = Config::random(sliding, &mut rng).on_tick(tick);
            cfg.max_keys = max_keys;
            cfg.shards = Some(shards);
            cfg.keys = max_keys + 2 + rng.below(max_keys.min(12) as u64 + 1) as usize;
            let label = format!("seed {seed:#x}, sequence {sequences}, {cfg:?}");
            let mut h = Harness::new(cfg, label);
            // A run of claims of `n` keys from `first` on (wrapping), most completed.
            let fill = |h: &mut Harness, rng: &mut XorShift, first: usize, n: usize| {
                for i in 0..n {
                    h.apply(Op::Claim {
                        key: (first + i) % cfg.keys,
                    });
                    if rng.below(8) != 0 {
                        h.apply(Op::Complete { guard: 0 });
                    }
                    h.apply(Op::Advance { by: 1 });
                }
            };
            if max_keys > KEYS {
                let n = max_keys - 1 - rng.below(4) as usize;
                fill(&mut h, &mut rng, 0, n);
            }
            for _ in 0..STEPS {
                if max_keys > KEYS && rng.below(60) == 0 {
                    // Filled again now and then: a restart empties the hot tier, and
                    // keys expire.
                    let first = rng.below(cfg.keys as u64) as usize;
                    fill(&mut h, &mut rng, first, max_keys + 4);
                }
                // Mostly short advances, so that keys stay within their hot window and
                // a full hot tier must evict them.
                let op = match Op::random(&mut rng, false, cfg.keys) {
                    Op::Advance { by } if by > 100 && rng.below(4) != 0 => Op::Advance {
                        by: 1 + rng.below(20),
                    },
                    op => op,
                };
                h.apply(op);
            }
            let t = h.end();
            if max_keys > KEYS {
                evicted_in_large += t.evictions;
            }
            total += t;
            sequences += 1;
        }
    }
    println!("{total:#?}");
    let reached = [
        ("evictions", total.evictions),
        ("read-backs of evicted keys", total.read_back_evicted),
        ("capacity refusals", total.capacity_refusals),
        ("duplicates", total.duplicates),
        ("batches", total.batches),
        ("forgets", total.forgotten),
        ("restarts", total.restarts),
    ];
    for (what, n) in reached {
        assert!(n >= 10, "only {n} {what} in {total:#?}");
    }
    assert!(
        evicted_in_large >= 100,
        "only {evicted_in_large} evictions in the larger namespaces"
    );
}
