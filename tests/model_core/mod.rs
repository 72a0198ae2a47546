//! The reference model and the operation interpreter behind the model check.
//!
//! Shared by `tests/model.rs` (as `mod model_core;`) and by the fuzz target
//! `fuzz/fuzz_targets/model.rs` (through `#[path]`). It holds no tests: cargo also
//! builds this file as an integration-test target of its own, which runs none.
//!
//! An operation sequence runs on a real [`Engine`] (manual clock, no maintenance
//! thread, one small namespace) and on a [`Model`]: a `HashMap` from key to entry plus
//! a model clock. Every answer is compared exactly, and after every step so are the
//! engine's counters, its resident-key gauge, `check` of every key and the lease of
//! every guard still held. Any difference panics with the step and the operation.
//!
//! On a tick coarser than 1 ms ([`ModelConfig::tick_ms`]) the engine may place a
//! deadline anywhere its documentation allows: a lease or TTL of `d` from `now`
//! ends at a tick boundary at or after `now + d`, up to a tick less a millisecond
//! later ("never early and at most one tick late"), and a fixed window's completion
//! time, which the hot tier derives from its deadline, may read up to a tick less a
//! millisecond late, never later than the reading's own time. The model takes each
//! new deadline as the engine reports it (in the answer that sets it, or the next
//! `check`) once it lies within that allowance ([`Model::fit`]), and from then on
//! holds the engine to it exactly: the key answers as before until that deadline
//! and is claimable from it on, every report of it agrees, and the counters and the
//! resident gauge follow. A memory-only expiry reads neither early nor late (the
//! durable tier's allowance does not apply). At the default 1 ms tick every
//! allowance is empty and the comparison is exact.
#![allow(dead_code)]

use std::collections::HashMap;
use std::time::Duration;

use idem::{
    Claim, ClaimGuard, Engine, Error, KeyError, KeyState, ManualClock, Namespace, NamespaceConfig,
    Stats,
};

/// Distinct valid keys an operation can name.
pub const KEYS: usize = 12;
/// The namespace's `max_key_len`: every valid key fits, [`TOO_LONG_KEY`] does not.
pub const MAX_KEY_LEN: usize = 8;
/// The namespace's `max_result_len`; one of the results is one byte over it.
pub const MAX_RESULT_LEN: usize = 16;
/// Bytes one operation is decoded from.
pub const OP_BYTES: usize = 3;
/// The TTL of every model namespace.
pub const TTL_MS: u64 = 1000;
/// The lease of every model namespace.
pub const LEASE_MS: u64 = 300;
/// The shortest [`Op::Leap`]: a shard whose wheel lags this far behind the clock
/// catches up on its next claim, check or forget.
pub const LEAP_MIN_MS: u64 = 1 << 29;

const TOO_LONG_KEY: &[u8] = b"key-too-long";
const PAYLOADS: [&[u8]; 3] = [b"pay-a", b"pay-b", b"pay-c"];
const NAMESPACE: &str = "model";
const T0: u64 = 1_700_000_000_000;

/// The key an operation's key byte names: mostly one of [`KEYS`] valid keys, sometimes
/// an empty or an over-long one.
pub fn key_bytes(sel: u8) -> Vec<u8> {
    match sel {
        0..=247 => format!("key-{:02}", sel as usize % KEYS).into_bytes(),
        248..=251 => Vec::new(),
        _ => TOO_LONG_KEY.to_vec(),
    }
}

/// The result an operation's result byte names, the last one over the limit.
pub fn result_bytes(sel: u8) -> Vec<u8> {
    match sel % 5 {
        0 => Vec::new(),
        1 => b"ok".to_vec(),
        2 => b"receipt-2".to_vec(),
        3 => vec![b'x'; MAX_RESULT_LEN],
        _ => vec![b'y'; MAX_RESULT_LEN + 1],
    }
}

/// One step of a sequence. Key, guard and result fields are raw selectors that the
/// interpreter resolves: a key selector through [`key_bytes`], a result selector
/// through [`result_bytes`], and a guard selector picks among the guards currently
/// held (the newest if it is below 128, any otherwise; nothing happens if none is).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `claim(key)`.
    Claim { key: u8 },
    /// `claim_with_payload(key, PAYLOADS[payload % 3])`.
    ClaimWithPayload { key: u8, payload: u8 },
    /// `claim_batch` of one to four keys chosen by `a` and `b` (see
    /// [`batch_keys`]), repeats included.
    ClaimBatch { a: u8, b: u8 },
    /// `complete()` on a held guard.
    Complete { guard: u8 },
    /// `complete_batch` of one to four held guards (the newest, or from `a` on).
    CompleteBatch { a: u8, b: u8 },
    /// `complete_with_result(result_bytes(result))` on a held guard.
    CompleteWithResult { guard: u8, result: u8 },
    /// `release()` on a held guard.
    Release { guard: u8 },
    /// Drops a held guard unfinished.
    DropGuard { guard: u8 },
    /// `extend_lease` on a held guard, to a lease chosen by `lease` (see
    /// [`extension_ms`]).
    Extend { guard: u8, lease: u8 },
    /// `forget(key)`.
    Forget { key: u8 },
    /// `check(key)`.
    Check { key: u8 },
    /// Advances the clock by an amount chosen by `kind` and `arg`: none, 1 ms, a
    /// few ms, around the lease, around the TTL, or well past the TTL.
    Advance { kind: u8, arg: u8 },
    /// Advances the clock to exactly one of the pending deadlines, or to one
    /// millisecond before it.
    AdvanceToDeadline { pick: u8, early: bool },
    /// `run_maintenance()`.
    Maintenance,
    /// A clock jump of 2^29 ms or more with no maintenance pass, then a `check` of
    /// every key, which brings each shard's timing wheel up to date. Only the first
    /// leap of a sequence happens.
    Leap { arg: u8 },
}

/// Decodes [`OP_BYTES`] bytes per operation; a trailing partial operation is ignored.
/// Every byte string decodes, so any fuzz input is a valid sequence.
pub fn decode(bytes: &[u8]) -> Vec<Op> {
    bytes
        .chunks_exact(OP_BYTES)
        .map(|c| {
            let (a, b) = (c[1], c[2]);
            match c[0] % 20 {
                0..=2 => Op::Claim { key: a },
                3 => Op::ClaimBatch { a, b },
                4 | 5 => Op::ClaimWithPayload { key: a, payload: b },
                6 | 7 => Op::Complete { guard: a },
                8 => Op::CompleteBatch { a, b },
                9 | 10 => Op::CompleteWithResult {
                    guard: a,
                    result: b,
                },
                11 => Op::Release { guard: a },
                12 => Op::DropGuard { guard: a },
                13 => Op::Forget { key: a },
                14 => Op::Check { key: a },
                15 | 16 => Op::Advance { kind: a, arg: b },
                17 | 18 => Op::AdvanceToDeadline {
                    pick: a,
                    early: b & 1 == 1,
                },
                _ if a % 8 == 0 => Op::Leap { arg: b },
                _ if a % 8 == 1 => Op::Extend {
                    guard: b,
                    lease: (a >> 3) ^ b.rotate_left(2),
                },
                _ => Op::Maintenance,
            }
        })
        .collect()
}

/// The namespace under test. TTL and lease are always [`TTL_MS`] and [`LEASE_MS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelConfig {
    /// `extend_on_duplicate`.
    pub sliding: bool,
    /// `max_keys`.
    pub max_keys: usize,
    /// `shards`, or the engine's default.
    pub shards: Option<usize>,
    /// The engine's fingerprint seed (it decides which keys share a shard).
    pub seed: u64,
    /// The sequence starts [`WRAP_LEAD_MS`] after the engine's start (times the
    /// tick), just before its ticks pass 2^32, where deadlines stored as 32 bits
    /// wrap.
    pub near_wrap: bool,
    /// The engine's tick (`EngineBuilder::tick`), in milliseconds: 1 unless
    /// [`ModelConfig::with_tick`] says otherwise.
    pub tick_ms: u64,
}

/// How far after the engine's start a [`ModelConfig::near_wrap`] sequence begins:
/// 1.5 s before 2^32 ticks, so that its leases and TTLs end past the wrap.
pub const WRAP_LEAD_MS: u64 = (1 << 32) - 1500;

impl ModelConfig {
    /// A configuration from one selector byte (window, bound, shards) and a seed.
    pub fn from_byte(b: u8, seed: u64) -> Self {
        ModelConfig {
            sliding: b & 1 == 1,
            max_keys: [3, 8, 11, 20][(b >> 1) as usize & 3],
            shards: [None, Some(1), Some(2), Some(5)][(b >> 3) as usize & 3],
            seed,
            near_wrap: b & 0x20 != 0,
            tick_ms: 1,
        }
    }

    /// The same namespace on an engine ticking every `tick_ms` milliseconds.
    pub fn with_tick(self, tick_ms: u64) -> Self {
        ModelConfig { tick_ms, ..self }
    }

    /// How far after the engine's start a [`ModelConfig::near_wrap`] sequence begins.
    pub fn wrap_lead_ms(&self) -> u64 {
        ((1 << 32) * self.tick_ms) - ((1 << 32) - WRAP_LEAD_MS)
    }

    /// The engine's namespace configuration for this model.
    pub fn namespace_config(&self) -> NamespaceConfig {
        let cfg = NamespaceConfig::new()
            .ttl(Duration::from_millis(TTL_MS))
            .lease(Duration::from_millis(LEASE_MS))
            .max_keys(self.max_keys)
            .max_key_len(MAX_KEY_LEN)
            .max_result_len(MAX_RESULT_LEN)
            .extend_on_duplicate(self.sliding);
        match self.shards {
            Some(n) => cfg.shards(n),
            None => cfg,
        }
    }
}

/// Feeds fuzz input to the model check: the first byte picks the configuration, the
/// second the seed, the rest are operations. Panics on any divergence.
pub fn run_bytes(data: &[u8]) {
    if let [cfg, seed, ops @ ..] = data {
        let mut h = Harness::new(ModelConfig::from_byte(*cfg, u64::from(*seed)), "fuzz");
        for op in decode(ops) {
            h.apply(op);
        }
    }
}

/// Runs `ops` on a fresh engine and model and returns what the run exercised.
pub fn run(cfg: ModelConfig, ops: &[Op], label: &str) -> Tally {
    let mut h = Harness::new(cfg, label);
    for &op in ops {
        h.apply(op);
    }
    h.tally.late_deadlines = h.model.late.get();
    h.tally
}

/// A key's state in the model.
#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    InProgress {
        deadline: u64,
        id: u64,
    },
    Done {
        expires_at: u64,
        completed_at: u64,
        result: Option<Vec<u8>>,
    },
}

/// A resident key in the model: the engine holds an entry for it, possibly expired
/// and not yet reclaimed.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    state: State,
    /// Index into `PAYLOADS` of the payload the acquiring claim carried.
    payload: Option<usize>,
    /// Whether the deadline is still the model's nominal one, the engine's not yet
    /// seen (a completion's, or a window a refused batch moved): the next `check`
    /// shows it, and [`Model::fit`] takes it (a no-op at 1 ms ticks).
    unsettled: bool,
}

impl Entry {
    fn deadline(&self) -> u64 {
        match self.state {
            State::InProgress { deadline, .. } => deadline,
            State::Done { expires_at, .. } => expires_at,
        }
    }
}

/// The counters and the resident gauge of [`Stats`], in a comparable form.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Counts {
    resident_keys: u64,
    acquired: u64,
    duplicates: u64,
    in_progress: u64,
    payload_mismatches: u64,
    expirations: u64,
    capacity_refusals: u64,
    completions: u64,
    releases: u64,
    lease_lost: u64,
    forgotten: u64,
}

impl Counts {
    fn of(s: &Stats) -> Self {
        Counts {
            resident_keys: s.resident_keys,
            acquired: s.acquired,
            duplicates: s.duplicates,
            in_progress: s.in_progress,
            payload_mismatches: s.payload_mismatches,
            expirations: s.expirations,
            capacity_refusals: s.capacity_refusals,
            completions: s.completions,
            releases: s.releases,
            lease_lost: s.lease_lost,
            forgotten: s.forgotten,
        }
    }
}

/// The answer to a claim, or a key's state, in a form both sides produce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Acquired {
        lease_expires_at_ms: u64,
    },
    Duplicate {
        completed_at_ms: u64,
        expires_at_ms: u64,
        result: Option<Vec<u8>>,
    },
    InProgress {
        lease_expires_at_ms: u64,
        retry_after: Duration,
    },
    Failed(Error),
}

/// [`Model::fit_completion`] of a model of `cfg` at `now`.
pub fn fit_completion(sliding: bool, tick_ms: u64, now: u64, completed_at: u64, seen: u64) -> u64 {
    let late = seen.wrapping_sub(completed_at);
    if !sliding && late < tick_ms && seen <= now {
        seen
    } else {
        completed_at
    }
}

/// A deadline the engine reports (`seen`) where the model's nominal one is
/// `nominal`: taken if it is not early and less than a tick (`tick_ms`) late, as
/// the engine's tick allows, counting in `late` the ones taken late. Otherwise the
/// nominal one, and the comparison that follows reports the difference. At 1 ms
/// always the nominal one.
pub fn fit_deadline(
    tick_ms: u64,
    late: &std::cell::Cell<u64>,
    nominal: u64,
    seen: Option<u64>,
) -> u64 {
    match seen {
        Some(s) if s >= nominal && s - nominal < tick_ms => {
            late.set(late.get() + u64::from(s > nominal));
            s
        }
        _ => nominal,
    }
}

/// The reference: resident entries by key index, a clock, and counters.
#[derive(Debug)]
pub struct Model {
    now: u64,
    cfg: ModelConfig,
    entries: HashMap<usize, Entry>,
    next_id: u64,
    counts: Counts,
    /// Deadlines taken from the engine later than the model's nominal ones (a
    /// coarse tick's rounding up), for the tally.
    late: std::cell::Cell<u64>,
}

impl Model {
    fn new(cfg: ModelConfig) -> Self {
        Model {
            now: T0,
            cfg,
            entries: HashMap::new(),
            next_id: 0,
            counts: Counts::default(),
            late: std::cell::Cell::new(0),
        }
    }

    fn full(&self) -> Error {
        Error::CapacityExceeded {
            namespace: NAMESPACE.to_owned(),
            max_keys: self.cfg.max_keys,
        }
    }

    /// A deadline the engine reports (`seen`) where the model's nominal one is
    /// `nominal` (a span from now): taken if it is not early and less than a tick
    /// late, as the engine's tick allows. Otherwise the nominal one, and the
    /// comparison that follows reports the difference. At 1 ms ticks always the
    /// nominal one.
    fn fit(&self, nominal: u64, seen: Option<u64>) -> u64 {
        fit_deadline(self.cfg.tick_ms, &self.late, nominal, seen)
    }

    /// A completion time at `completed_at` as a fixed window's hot entry may give it
    /// back on a coarse tick (`seen`): up to a tick less a millisecond late, never
    /// past now. Sliding windows keep the exact time.
    fn fit_completion(&self, completed_at: u64, seen: u64) -> u64 {
        fit_completion(
            self.cfg.sliding,
            self.cfg.tick_ms,
            self.now,
            completed_at,
            seen,
        )
    }

    /// The entry for `key` if it has not expired (expiry is at `now >= deadline`).
    fn live(&self, key: usize) -> Option<&Entry> {
        self.entries.get(&key).filter(|e| self.now < e.deadline())
    }

    /// Removes every expired entry, as maintenance (or a full namespace) does.
    fn reclaim_expired(&mut self) -> usize {
        let now = self.now;
        let before = self.entries.len();
        self.entries.retain(|_, e| now < e.deadline());
        let n = before - self.entries.len();
        self.counts.expirations += n as u64;
        n
    }

    /// Claims `key`; on `Acquired`, also returns the claim's id and lease deadline.
    /// `seen` is the engine's answer, if there is one, from which the model takes
    /// what a coarse tick leaves to the engine (see [`Model::fit`]).
    fn claim(
        &mut self,
        key: usize,
        payload: Option<usize>,
        seen: Option<&Answer>,
    ) -> (Answer, Option<(u64, u64)>) {
        let now = self.now;
        let (seen_deadline, seen_completion) = match seen {
            Some(Answer::Acquired {
                lease_expires_at_ms,
            }) => (Some(*lease_expires_at_ms), None),
            Some(Answer::Duplicate {
                completed_at_ms,
                expires_at_ms,
                ..
            }) => (Some(*expires_at_ms), Some(*completed_at_ms)),
            _ => (None, None),
        };
        let window_end = self.fit(now + TTL_MS, seen_deadline);
        let lease_end = self.fit(now + LEASE_MS, seen_deadline);
        let cfg = self.cfg;
        let completion = |c: u64| {
            seen_completion.map_or(c, |s| fit_completion(cfg.sliding, cfg.tick_ms, now, c, s))
        };
        if let Some(e) = self.entries.get_mut(&key) {
            if now < e.deadline() {
                if let (Some(new), Some(stored)) = (payload, e.payload) {
                    if new != stored {
                        self.counts.payload_mismatches += 1;
                        return (Answer::Failed(Error::PayloadMismatch), None);
                    }
                }
                return match &mut e.state {
                    State::InProgress { deadline, .. } => {
                        self.counts.in_progress += 1;
                        let answer = Answer::InProgress {
                            lease_expires_at_ms: *deadline,
                            retry_after: Duration::from_millis(*deadline - now),
                        };
                        (answer, None)
                    }
                    State::Done {
                        expires_at,
                        completed_at,
                        result,
                    } => {
                        if self.cfg.sliding {
                            *expires_at = window_end;
                            // Moved unseen (a refused batch) or as the answer says.
                            e.unsettled = seen.is_none();
                        }
                        self.counts.duplicates += 1;
                        let answer = Answer::Duplicate {
                            completed_at_ms: completion(*completed_at),
                            expires_at_ms: *expires_at,
                            result: result.clone(),
                        };
                        (answer, None)
                    }
                };
            }
            // Expired but still resident: the key is new again and keeps its slot.
            self.counts.expirations += 1;
        } else if self.entries.len() >= self.cfg.max_keys {
            self.reclaim_expired();
            if self.entries.len() >= self.cfg.max_keys {
                self.counts.capacity_refusals += 1;
                return (Answer::Failed(self.full()), None);
            }
        }
        self.next_id += 1;
        let id = self.next_id;
        let deadline = lease_end;
        self.entries.insert(
            key,
            Entry {
                state: State::InProgress { deadline, id },
                payload,
                unsettled: seen.is_none(),
            },
        );
        self.counts.acquired += 1;
        let answer = Answer::Acquired {
            lease_expires_at_ms: deadline,
        };
        (answer, Some((id, deadline)))
    }

    /// Whether the claim `id` on `key` still holds an unexpired lease.
    fn holds(&self, key: usize, id: u64) -> bool {
        matches!(
            self.live(key),
            Some(Entry { state: State::InProgress { id: held, .. }, .. }) if *held == id
        )
    }

    fn complete(&mut self, key: usize, id: u64, result: Option<Vec<u8>>) -> Result<(), Error> {
        if !self.holds(key, id) {
            self.counts.lease_lost += 1;
            return Err(Error::LeaseLost);
        }
        let now = self.now;
        let e = self.entries.get_mut(&key).expect("a held key is resident");
        e.state = State::Done {
            expires_at: now + TTL_MS,
            completed_at: now,
            result,
        };
        // The engine's deadline shows at the next `check` (see `Model::settle`).
        e.unsettled = true;
        self.counts.completions += 1;
        Ok(())
    }

    /// `extend_lease`: the claim's lease now ends `lease_ms` from now (where the
    /// guard says, `seen`, within a coarse tick's allowance); nothing is counted
    /// either way.
    fn extend(
        &mut self,
        key: usize,
        id: u64,
        lease_ms: u64,
        seen: Option<u64>,
    ) -> Result<u64, Error> {
        if !self.holds(key, id) {
            return Err(Error::LeaseLost);
        }
        let until = self.fit(self.now + lease_ms, seen);
        let e = self.entries.get_mut(&key).expect("a held key is resident");
        e.state = State::InProgress {
            deadline: until,
            id,
        };
        Ok(until)
    }

    fn release(&mut self, key: usize, id: u64) -> Result<(), Error> {
        if !self.holds(key, id) {
            self.counts.lease_lost += 1;
            return Err(Error::LeaseLost);
        }
        self.entries.remove(&key);
        self.counts.releases += 1;
        Ok(())
    }

    fn forget(&mut self, key: usize) -> bool {
        let live = self.live(key).is_some();
        if self.entries.remove(&key).is_some() {
            if live {
                self.counts.forgotten += 1;
            } else {
                self.counts.expirations += 1;
            }
        }
        live
    }

    /// Takes the deadline the engine reports for `key` (`seen`, a `check`), where
    /// the model has not seen it yet, within a coarse tick's allowance.
    fn settle(&mut self, key: usize, seen: Option<&Answer>) {
        let seen = match seen {
            Some(
                Answer::InProgress {
                    lease_expires_at_ms: d,
                    ..
                }
                | Answer::Duplicate {
                    expires_at_ms: d, ..
                },
            ) => Some(*d),
            _ => None,
        };
        let Some(e) = self.entries.get(&key).filter(|e| e.unsettled) else {
            return;
        };
        let fitted = self.fit(e.deadline(), seen);
        let e = self.entries.get_mut(&key).expect("present");
        e.unsettled = false;
        match &mut e.state {
            State::InProgress { deadline, .. } => *deadline = fitted,
            State::Done { expires_at, .. } => *expires_at = fitted,
        }
    }

    /// What `check` of `key` must answer; `seen` is the engine's answer, from which
    /// a fixed window's completion time is taken within a coarse tick's allowance.
    fn check(&self, key: usize, seen: Option<&Answer>) -> Option<Answer> {
        let completion = |c: u64| match seen {
            Some(Answer::Duplicate {
                completed_at_ms, ..
            }) => self.fit_completion(c, *completed_at_ms),
            _ => c,
        };
        self.live(key).map(|e| match &e.state {
            State::InProgress { deadline, .. } => Answer::InProgress {
                lease_expires_at_ms: *deadline,
                retry_after: Duration::ZERO,
            },
            State::Done {
                expires_at,
                completed_at,
                result,
            } => Answer::Duplicate {
                completed_at_ms: completion(*completed_at),
                expires_at_ms: *expires_at,
                result: result.clone(),
            },
        })
    }

    /// Deadlines still ahead of the clock, sorted, without repeats.
    fn pending_deadlines(&self) -> Vec<u64> {
        let mut d: Vec<u64> = self
            .entries
            .values()
            .map(Entry::deadline)
            .filter(|&d| d > self.now)
            .collect();
        d.sort_unstable();
        d.dedup();
        d
    }
}

/// What a run exercised: evidence that the random sequences reach every path.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    pub acquired: u64,
    /// Acquired on a key whose previous lease or TTL ended exactly now.
    pub acquired_at_deadline: u64,
    pub duplicates: u64,
    /// Duplicates seen one millisecond before the key expires.
    pub duplicates_at_last_ms: u64,
    pub in_progress: u64,
    pub payload_mismatches: u64,
    pub capacity_refusals: u64,
    /// Claims of a new key that succeeded only because expired keys were reclaimed.
    pub acquired_after_reclaim: u64,
    pub invalid_keys: u64,
    pub completions: u64,
    pub releases: u64,
    pub drops: u64,
    /// `LeaseLost` although nobody re-claimed the key (the lease just ran out).
    pub lease_lost_unclaimed: u64,
    /// `LeaseLost` because the key was re-claimed, released or forgotten.
    pub lease_lost_taken: u64,
    pub results_too_large: u64,
    pub forgotten: u64,
    pub maintenance_reclaims: u64,
    pub leaps: u64,
    /// Sequences begun just before the wrap of 32-bit ticks.
    pub near_wrap: u64,
    /// `claim_batch` calls with valid keys, and those refused (capacity).
    pub batches: u64,
    pub batches_refused: u64,
    /// `complete_batch` calls.
    pub completion_batches: u64,
    /// Of them, `complete_batch_with_results` calls.
    pub completion_batches_with_results: u64,
    /// Results too large within such batches (also counted in `results_too_large`).
    pub batch_results_too_large: u64,
    /// `extend_lease` calls that extended, and those refused (the lease lost).
    pub extensions: u64,
    pub extensions_refused: u64,
    /// Deadlines (leases, windows) the engine placed later than the span asked for,
    /// rounded up to its coarse tick, and taken by the model.
    pub late_deadlines: u64,
    pub steps: u64,
}

impl std::ops::AddAssign for Tally {
    fn add_assign(&mut self, o: Tally) {
        self.acquired += o.acquired;
        self.acquired_at_deadline += o.acquired_at_deadline;
        self.duplicates += o.duplicates;
        self.duplicates_at_last_ms += o.duplicates_at_last_ms;
        self.in_progress += o.in_progress;
        self.payload_mismatches += o.payload_mismatches;
        self.capacity_refusals += o.capacity_refusals;
        self.acquired_after_reclaim += o.acquired_after_reclaim;
        self.invalid_keys += o.invalid_keys;
        self.completions += o.completions;
        self.releases += o.releases;
        self.drops += o.drops;
        self.lease_lost_unclaimed += o.lease_lost_unclaimed;
        self.lease_lost_taken += o.lease_lost_taken;
        self.results_too_large += o.results_too_large;
        self.forgotten += o.forgotten;
        self.maintenance_reclaims += o.maintenance_reclaims;
        self.leaps += o.leaps;
        self.near_wrap += o.near_wrap;
        self.batches += o.batches;
        self.batches_refused += o.batches_refused;
        self.completion_batches += o.completion_batches;
        self.completion_batches_with_results += o.completion_batches_with_results;
        self.batch_results_too_large += o.batch_results_too_large;
        self.extensions += o.extensions;
        self.extensions_refused += o.extensions_refused;
        self.late_deadlines += o.late_deadlines;
        self.steps += o.steps;
    }
}

/// The lease an [`Op::Extend`] asks for: 1 ms, a few ms, about the namespace's
/// lease, or up to about the TTL.
pub fn extension_ms(lease: u8) -> u64 {
    match lease % 4 {
        0 => 1,
        1 => 1 + u64::from(lease % 32),
        2 => LEASE_MS - 2 + u64::from(lease % 5),
        _ => TTL_MS / 2 + 4 * u64::from(lease),
    }
}

/// The key selectors of a [`Op::ClaimBatch`]: one to four (`b`'s low bits), the
/// same key more than once now and then.
pub fn batch_keys(a: u8, b: u8) -> Vec<u8> {
    let all = [a, a.wrapping_add(b >> 2), b, a ^ 0x55];
    all[..1 + (b & 3) as usize].to_vec()
}

/// What the engine answered to a claim, as the model writes its answers, and the
/// guard if it acquired.
pub fn observed(got: Result<Claim, Error>) -> (Answer, Option<ClaimGuard>) {
    match got {
        Ok(Claim::Acquired(g)) => (
            Answer::Acquired {
                lease_expires_at_ms: g.lease_expires_at_ms(),
            },
            Some(g),
        ),
        Ok(Claim::Duplicate(d)) => (
            Answer::Duplicate {
                completed_at_ms: d.completed_at_ms(),
                expires_at_ms: d.expires_at_ms(),
                result: d.result().map(<[u8]>::to_vec),
            },
            None,
        ),
        Ok(Claim::InProgress(f)) => (
            Answer::InProgress {
                lease_expires_at_ms: f.lease_expires_at_ms(),
                retry_after: f.retry_after(),
            },
            None,
        ),
        Err(e) => (Answer::Failed(e), None),
    }
}

/// What `check` answered, as the model writes a key's state (an in-progress key as
/// an `InProgress` answer with no wait, a done key as its `Duplicate`); `at` names
/// the step for a state the model does not know.
pub fn checked(got: Result<Option<KeyState>, Error>, at: &str) -> Option<Answer> {
    match got {
        Ok(state) => state.map(|s| match s {
            KeyState::InProgress {
                lease_expires_at_ms,
                ..
            } => Answer::InProgress {
                lease_expires_at_ms,
                retry_after: Duration::ZERO,
            },
            KeyState::Done {
                completed_at_ms,
                expires_at_ms,
                result,
                ..
            } => Answer::Duplicate {
                completed_at_ms,
                expires_at_ms,
                result: result.map(|r| r.to_vec()),
            },
            other => panic!("unknown key state {other:?}: {at}"),
        }),
        Err(e) => Some(Answer::Failed(e)),
    }
}

/// A guard the interpreter still holds, with the model's view of its claim.
struct Held {
    guard: ClaimGuard,
    key: usize,
    id: u64,
    lease_expires_at_ms: u64,
}

/// The engine and the model side by side.
pub struct Harness {
    label: String,
    clock: ManualClock,
    engine: Engine,
    ns: Namespace,
    model: Model,
    held: Vec<Held>,
    step: usize,
    op: Option<Op>,
    leapt: bool,
    /// What the run has exercised so far.
    pub tally: Tally,
}

impl Harness {
    /// A fresh engine configured from `cfg`, and a fresh model of it.
    pub fn new(cfg: ModelConfig, label: &str) -> Self {
        Self::with_namespace(cfg, cfg.namespace_config(), label)
    }

    /// The model of `cfg` against an engine whose namespace is configured by `ns_cfg`
    /// instead: a way to check that the comparison notices a difference.
    pub fn with_namespace(cfg: ModelConfig, ns_cfg: NamespaceConfig, label: &str) -> Self {
        Self::with_engine(cfg, ns_cfg, cfg.tick_ms, label)
    }

    /// As [`Harness::with_namespace`], the engine ticking every `tick_ms`
    /// milliseconds whatever the model's tick.
    pub fn with_engine(
        cfg: ModelConfig,
        ns_cfg: NamespaceConfig,
        tick_ms: u64,
        label: &str,
    ) -> Self {
        let clock = ManualClock::new(T0);
        let engine = Engine::builder()
            .namespace(NAMESPACE, ns_cfg)
            .clock(clock.clone())
            .tick(Duration::from_millis(tick_ms))
            .maintenance_interval(None)
            .seed(cfg.seed)
            .build()
            .expect("the model's configuration is valid");
        let ns = engine.namespace(NAMESPACE).expect("configured namespace");
        let mut h = Harness {
            label: label.to_owned(),
            clock,
            engine,
            ns,
            model: Model::new(cfg),
            held: Vec::new(),
            step: 0,
            op: None,
            leapt: false,
            tally: Tally::default(),
        };
        if cfg.near_wrap {
            // Nothing is resident yet: only the clock moves.
            h.advance(cfg.wrap_lead_ms());
            h.tally.near_wrap += 1;
        }
        h
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

    /// Applies one operation to both sides and compares everything.
    pub fn apply(&mut self, op: Op) {
        self.step += 1;
        self.op = Some(op);
        self.tally.steps += 1;
        match op {
            Op::Claim { key } => self.claim(key, None),
            Op::ClaimBatch { a, b } => self.claim_batch(&batch_keys(a, b)),
            Op::ClaimWithPayload { key, payload } => {
                self.claim(key, Some(payload as usize % PAYLOADS.len()))
            }
            Op::Complete { guard } => self.finish(guard, Finish::Complete),
            Op::CompleteBatch { a, b } => self.complete_batch(a, b),
            Op::CompleteWithResult { guard, result } => {
                self.finish(guard, Finish::WithResult(result_bytes(result)))
            }
            Op::Release { guard } => self.finish(guard, Finish::Release),
            Op::DropGuard { guard } => self.finish(guard, Finish::Drop),
            Op::Extend { guard, lease } => self.extend(guard, lease),
            Op::Forget { key } => self.forget(key),
            Op::Check { key } => self.check(key),
            Op::Advance { kind, arg } => {
                let by = match kind % 8 {
                    0 => 0,
                    1 => 1,
                    2 | 3 => 1 + u64::from(arg % 64),
                    4 => LEASE_MS - 1 + u64::from(arg % 3),
                    5 => TTL_MS - 1 + u64::from(arg % 3),
                    6 => 64 + u64::from(arg),
                    _ => TTL_MS + 20 * u64::from(arg),
                };
                self.advance(by);
            }
            Op::AdvanceToDeadline { pick, early } => {
                let pending = self.model.pending_deadlines();
                if !pending.is_empty() {
                    let target = pending[pick as usize % pending.len()] - u64::from(early);
                    self.advance(target - self.model.now);
                }
            }
            Op::Leap { arg } => {
                // One leap per sequence: a held guard's deadline stays within the
                // 2^31 ticks of the clock that 32-bit deadlines can express.
                if !self.leapt {
                    self.leapt = true;
                    self.tally.leaps += 1;
                    // As many ticks as at 1 ms: the wheel lags 2^29 of them.
                    let ticks = LEAP_MIN_MS + (u64::from(arg) << 20);
                    self.advance(ticks * self.model.cfg.tick_ms);
                    for key in 0..KEYS {
                        self.check_key(key);
                    }
                    self.model.reclaim_expired();
                }
            }
            Op::Maintenance => {
                let expected = self.model.reclaim_expired();
                let got = self.engine.run_maintenance();
                assert_eq!(got, expected, "run_maintenance(): {}", self.at());
                self.tally.maintenance_reclaims += got as u64;
            }
        }
        self.check_everything();
    }

    fn advance(&mut self, by: u64) {
        self.model.now += by;
        self.clock.advance(Duration::from_millis(by));
    }

    /// Resolves a key selector: `Ok(index)` for a valid key, or the error an invalid
    /// key must get.
    fn resolve_key(sel: u8) -> (Vec<u8>, Result<usize, Error>) {
        let bytes = key_bytes(sel);
        let expected = if bytes.is_empty() {
            Err(Error::InvalidKey(KeyError::Empty))
        } else if bytes.len() > MAX_KEY_LEN {
            Err(Error::InvalidKey(KeyError::TooLong {
                len: bytes.len(),
                max: MAX_KEY_LEN,
            }))
        } else {
            Ok(sel as usize % KEYS)
        };
        (bytes, expected)
    }

    fn claim(&mut self, key_sel: u8, payload: Option<usize>) {
        let (bytes, key) = Self::resolve_key(key_sel);
        let got = match payload {
            None => self.ns.claim(&bytes),
            Some(p) => self.ns.claim_with_payload(&bytes, PAYLOADS[p]),
        };
        let key = match key {
            Ok(k) => k,
            Err(expected) => {
                assert_eq!(got.err(), Some(expected), "invalid key: {}", self.at());
                self.tally.invalid_keys += 1;
                return;
            }
        };
        let now = self.model.now;
        let previous_deadline = self.model.entries.get(&key).map(Entry::deadline);
        let was_full = self.model.entries.len() >= self.model.cfg.max_keys;
        let (answer, guard) = observed(got);
        let (expected, acquired) = self.model.claim(key, payload, Some(&answer));
        assert_eq!(answer, expected, "claim of key-{key:02}: {}", self.at());
        match (&expected, guard, acquired) {
            (Answer::Acquired { .. }, Some(guard), Some((id, deadline))) => {
                self.tally.acquired += 1;
                if previous_deadline == Some(now) {
                    self.tally.acquired_at_deadline += 1;
                }
                if previous_deadline.is_none() && was_full {
                    self.tally.acquired_after_reclaim += 1;
                }
                self.hold(guard, key, id, deadline);
            }
            (Answer::Duplicate { .. }, ..) => {
                self.tally.duplicates += 1;
                if previous_deadline == Some(now + 1) {
                    self.tally.duplicates_at_last_ms += 1;
                }
            }
            (Answer::InProgress { .. }, ..) => self.tally.in_progress += 1,
            (Answer::Failed(Error::PayloadMismatch), ..) => self.tally.payload_mismatches += 1,
            (Answer::Failed(Error::CapacityExceeded { .. }), ..) => {
                self.tally.capacity_refusals += 1
            }
            (other, ..) => panic!("unexpected model answer {other:?}: {}", self.at()),
        }
    }

    /// `claim_batch`: the keys claimed one by one in the model, at the one clock
    /// reading; a bad key refuses the whole batch unchanged, and a refused claim
    /// (capacity) fails it, the claims it acquired released and not counted as
    /// acquired, its other answers counted.
    fn claim_batch(&mut self, sels: &[u8]) {
        let resolved: Vec<(Vec<u8>, Result<usize, Error>)> =
            sels.iter().map(|&s| Self::resolve_key(s)).collect();
        let refs: Vec<&[u8]> = resolved.iter().map(|(b, _)| b.as_slice()).collect();
        let got = self.ns.claim_batch(&refs);
        if let Some(Err(expected)) = resolved.iter().map(|(_, k)| k).find(|k| k.is_err()) {
            assert_eq!(
                got.err().as_ref(),
                Some(expected),
                "invalid key in a batch: {}",
                self.at()
            );
            self.tally.invalid_keys += 1;
            return;
        }
        let keys: Vec<usize> = resolved.iter().map(|(_, k)| *k.as_ref().unwrap()).collect();
        // The engine's answers (the model takes what a coarse tick leaves to the
        // engine from them), with their guards.
        let got: Result<Vec<(Answer, Option<ClaimGuard>)>, Error> =
            got.map(|claims| claims.into_iter().map(|c| observed(Ok(c))).collect());
        let seen: Vec<Answer> = match &got {
            Ok(answers) => answers.iter().map(|(a, _)| a.clone()).collect(),
            Err(_) => Vec::new(),
        };
        let mut expected = Vec::new();
        let mut acquired = Vec::new();
        let mut refused = None;
        for (i, &key) in keys.iter().enumerate() {
            let (answer, acq) = self.model.claim(key, None, seen.get(i));
            if let Answer::Failed(e) = answer {
                refused = Some(e);
                break;
            }
            if let Some((id, deadline)) = acq {
                acquired.push((key, id, deadline));
            }
            expected.push(answer);
        }
        self.tally.batches += 1;
        if let Some(e) = refused {
            // The batch's own claims are given up: not counted as acquired (nor as
            // released); what else it answered stays counted.
            for (key, ..) in &acquired {
                self.model.entries.remove(key);
                self.model.counts.acquired -= 1;
            }
            // A window the refused batch moved is settled by the next `check`.
            assert_eq!(got.err(), Some(e), "refused batch {keys:?}: {}", self.at());
            self.tally.batches_refused += 1;
            return;
        }
        let claims = match got {
            Ok(c) => c,
            Err(e) => panic!(
                "batch {keys:?} refused with {e:?}, expected {expected:?}: {}",
                self.at()
            ),
        };
        assert_eq!(claims.len(), keys.len(), "one answer a key: {}", self.at());
        let mut acquired = acquired.into_iter();
        for (i, ((answer, guard), want)) in claims.into_iter().zip(expected).enumerate() {
            assert_eq!(answer, want, "batch {keys:?}, answer {i}: {}", self.at());
            if let Some(guard) = guard {
                let (key, id, deadline) = acquired.next().expect("the model acquired it too");
                self.tally.acquired += 1;
                self.hold(guard, key, id, deadline);
            }
        }
    }

    /// Keeps `guard`, acquired on `key` as the model's claim `id` with its lease
    /// until `deadline`.
    fn hold(&mut self, guard: ClaimGuard, key: usize, id: u64, deadline: u64) {
        self.held.push(Held {
            guard,
            key,
            id,
            lease_expires_at_ms: deadline,
        });
    }

    /// The held guard `sel` chooses, if any: mostly the newest (the usual
    /// claim-then-finish), otherwise any of them.
    fn pick(&self, sel: u8) -> Option<usize> {
        match (self.held.len(), sel) {
            (0, _) => None,
            (n, 0..=127) => Some(n - 1),
            (n, _) => Some(sel as usize % n),
        }
    }

    fn finish(&mut self, sel: u8, how: Finish) {
        let Some(i) = self.pick(sel) else {
            return;
        };
        let Held { guard, key, id, .. } = self.held.remove(i);
        // Classify a lost lease before the model changes.
        let unclaimed = matches!(
            self.model.entries.get(&key),
            Some(Entry { state: State::InProgress { id: held, .. }, .. }) if *held == id
        );
        let is_release = matches!(how, Finish::Release);
        let (got, expected) = match how {
            Finish::Complete => (guard.complete(), self.model.complete(key, id, None)),
            Finish::WithResult(r) if r.len() > MAX_RESULT_LEN => {
                // Refused before the lease is looked at; the claim stays held until
                // its lease runs out, and nothing is counted.
                self.tally.results_too_large += 1;
                let expected = Err(Error::ResultTooLarge {
                    len: r.len(),
                    max: MAX_RESULT_LEN,
                });
                (guard.complete_with_result(&r), expected)
            }
            Finish::WithResult(r) => (
                guard.complete_with_result(&r),
                self.model.complete(key, id, Some(r)),
            ),
            Finish::Release => (guard.release(), self.model.release(key, id)),
            Finish::Drop => {
                drop(guard);
                self.tally.drops += 1;
                // The outcome shows in the counters and the key's state.
                let _ = self.model.release(key, id);
                return;
            }
        };
        assert_eq!(
            got,
            expected,
            "finishing a claim on key-{key:02}: {}",
            self.at()
        );
        match expected {
            Ok(()) if is_release => self.tally.releases += 1,
            Ok(()) => self.tally.completions += 1,
            Err(Error::LeaseLost) if unclaimed => self.tally.lease_lost_unclaimed += 1,
            Err(Error::LeaseLost) => self.tally.lease_lost_taken += 1,
            Err(_) => {}
        }
    }

    /// `extend_lease` on a held guard (mostly the newest), which stays held.
    fn extend(&mut self, sel: u8, lease: u8) {
        let Some(i) = self.pick(sel) else {
            return;
        };
        let ms = extension_ms(lease);
        let h = &mut self.held[i];
        let got = h.guard.extend_lease(Duration::from_millis(ms));
        let (key, id) = (h.key, h.id);
        let seen = got.is_ok().then(|| h.guard.lease_expires_at_ms());
        let expected = self.model.extend(key, id, ms, seen);
        assert_eq!(
            got,
            expected.clone().map(|_| ()),
            "extending the lease on key-{key:02}: {}",
            self.at()
        );
        if let Ok(until) = expected {
            self.held[i].lease_expires_at_ms = until;
            self.tally.extensions += 1;
        } else {
            self.tally.extensions_refused += 1;
        }
    }

    /// `complete_batch` (or, with bit 2 of `b`, `complete_batch_with_results`): each
    /// guard completed in the model in order, at the one clock reading; one outcome
    /// a guard.
    fn complete_batch(&mut self, a: u8, b: u8) {
        if self.held.is_empty() {
            return;
        }
        let count = (1 + (b & 3) as usize).min(self.held.len());
        // Mostly the newest guards, otherwise a run of them from any one.
        let start = match a {
            0..=127 => self.held.len() - count,
            _ => a as usize % (self.held.len() - count + 1),
        };
        let taken: Vec<Held> = self.held.drain(start..start + count).collect();
        // With bit 2 of `b`, `complete_batch_with_results`, a result a guard.
        let with_results = b & 4 != 0;
        let mut guards = Vec::new();
        let mut results = Vec::new();
        let mut expected = Vec::new();
        for (n, Held { guard, key, id, .. }) in taken.into_iter().enumerate() {
            guards.push(guard);
            if !with_results {
                expected.push((key, self.model.complete(key, id, None)));
                continue;
            }
            let r = result_bytes(a.wrapping_add(n as u8) ^ (b >> 3));
            if r.len() > MAX_RESULT_LEN {
                // That guard's own refusal: nothing changes for it, as for a single
                // `complete_with_result`.
                self.tally.results_too_large += 1;
                self.tally.batch_results_too_large += 1;
                let len = r.len();
                expected.push((
                    key,
                    Err(Error::ResultTooLarge {
                        len,
                        max: MAX_RESULT_LEN,
                    }),
                ));
            } else {
                expected.push((key, self.model.complete(key, id, Some(r.clone()))));
            }
            results.push(r);
        }
        let got = if with_results {
            let batch = guards.into_iter().zip(results.iter().map(Vec::as_slice));
            self.ns.complete_batch_with_results(batch.collect())
        } else {
            self.ns.complete_batch(guards)
        };
        let got = got.unwrap_or_else(|e| {
            panic!("a memory-only batch is never refused: {e:?}: {}", self.at())
        });
        assert_eq!(
            got.len(),
            expected.len(),
            "one result a guard: {}",
            self.at()
        );
        for (i, (r, (key, want))) in got.into_iter().zip(expected).enumerate() {
            assert_eq!(r, want, "batch completion {i}, key-{key:02}: {}", self.at());
            if r.is_ok() {
                self.tally.completions += 1;
            }
        }
        self.tally.completion_batches += 1;
        self.tally.completion_batches_with_results += u64::from(with_results);
    }

    fn forget(&mut self, key_sel: u8) {
        let (bytes, key) = Self::resolve_key(key_sel);
        let got = self.ns.forget(&bytes);
        match key {
            Ok(k) => {
                let expected = self.model.forget(k);
                assert_eq!(got, Ok(expected), "forget of key-{k:02}: {}", self.at());
                self.tally.forgotten += u64::from(expected);
            }
            Err(e) => {
                assert_eq!(got, Err(e), "forget of an invalid key: {}", self.at());
                self.tally.invalid_keys += 1;
            }
        }
    }

    fn check(&mut self, key_sel: u8) {
        let (bytes, key) = Self::resolve_key(key_sel);
        match key {
            Ok(k) => self.check_key(k),
            Err(e) => {
                let got = self.ns.check(&bytes);
                assert_eq!(got.err(), Some(e), "check of an invalid key: {}", self.at());
                self.tally.invalid_keys += 1;
            }
        }
    }

    fn check_key(&self, key: usize) {
        let bytes = key_bytes(key as u8);
        let got = checked(self.ns.check(&bytes), &self.at());
        assert_eq!(
            got,
            self.model.check(key, got.as_ref()),
            "check of key-{key:02}: {}",
            self.at()
        );
    }

    /// The state-wide comparison run after every step; first the model takes the
    /// deadlines it has not seen yet from `check` (see [`Model::settle`]).
    fn check_everything(&mut self) {
        for key in 0..KEYS {
            if self.model.entries.get(&key).is_some_and(|e| e.unsettled) {
                let bytes = key_bytes(key as u8);
                let seen = checked(self.ns.check(&bytes), &self.at());
                self.model.settle(key, seen.as_ref());
            }
        }
        let mut expected = self.model.counts;
        expected.resident_keys = self.model.entries.len() as u64;
        let stats = self.engine.stats();
        assert_eq!(Counts::of(&stats), expected, "stats(): {}", self.at());
        assert!(
            stats.resident_keys <= self.model.cfg.max_keys as u64,
            "over max_keys: {}",
            self.at()
        );
        for key in 0..KEYS {
            self.check_key(key);
        }
        for h in &self.held {
            assert_eq!(
                h.guard.lease_expires_at_ms(),
                h.lease_expires_at_ms,
                "lease of a held guard on key-{:02}: {}",
                h.key,
                self.at()
            );
        }
    }
}

/// How a held guard is finished.
enum Finish {
    Complete,
    WithResult(Vec<u8>),
    Release,
    Drop,
}
