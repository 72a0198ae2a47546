//! Loom models of the claim protocol: claim / complete / release / expire racing on
//! one namespace, through the public API only.
//!
//! Built only with `--cfg idem_loom`, under which idem's sync facade (`src/sync.rs`)
//! hands the engine loom's mutexes, atomics and `Arc`, and the [`ManualClock`]'s atomic
//! too, so loom sees the hot tier's locks, every capacity counter and the manual
//! clock's reads (not the namespace's high-water mark over them). Run it as
//!
//! ```text
//! RUSTFLAGS="--cfg idem_loom" LOOM_MAX_PREEMPTIONS=2 \
//!     CARGO_TARGET_DIR=$HOME/.cache/idem/target-loom \
//!     cargo test --release --no-default-features --test loom
//! ```
//!
//! Every model builds its engine inside `loom::model` (loom objects must not outlive
//! one execution), with no maintenance thread (none is spawned under loom anyway),
//! a manual clock, and, unless a model is about capacity stealing, a single shard so
//! that every key meets on one lock.
//!
//! Clock reads and lock acquisitions are separate steps: an operation reads "now"
//! and may then be preempted before it takes the shard lock. The models advance the
//! clock concurrently on purpose, so those stale reads are explored too.
#![cfg(idem_loom)]

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use idem::loom_reclaim::Domain;
use idem::{Claim, Engine, Error, KeyState, ManualClock, Namespace, NamespaceConfig};
use loom::cell::UnsafeCell;
use loom::sync::atomic::AtomicUsize as LoomUsize;
use loom::sync::Arc;
use loom::thread;
use std::sync::atomic::Ordering::{Acquire, Release};

/// Start of the manual clock: an arbitrary wall-clock time.
const T0: u64 = 1_700_000_000_000;
const TTL_MS: u64 = 60_000;
const LEASE_MS: u64 = 5_000;
/// A fixed fingerprint seed, so the cross-shard model can pick keys per shard.
const SEED: u64 = 0x1de3_5eed;
const KEY: &[u8] = b"ord-1";

/// Runs `f` under loom, with a preemption bound of 2 unless `LOOM_MAX_PREEMPTIONS`
/// says otherwise (unbounded exploration of these models takes far too long).
fn model<F>(f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    builder.check(f);
}

/// Counts, across all executions of one model, how often each allowed outcome
/// occurred. Plain `std` atomics: loom does not see them, they only let a test check
/// afterwards that the exploration reached every outcome its model says is possible.
struct Tally<const N: usize>([AtomicUsize; N]);

impl<const N: usize> Tally<N> {
    const fn new() -> Self {
        Tally([const { AtomicUsize::new(0) }; N])
    }

    fn hit(&self, outcome: usize) {
        self.0[outcome].fetch_add(1, Relaxed);
    }

    /// Panics unless every outcome occurred at least once.
    fn assert_all_reached(&self, names: [&str; N]) {
        let counts: Vec<usize> = self.0.iter().map(|c| c.load(Relaxed)).collect();
        for (name, &n) in names.iter().zip(&counts) {
            assert!(
                n > 0,
                "outcome {name:?} was never reached: {names:?} = {counts:?}"
            );
        }
    }
}

fn config() -> NamespaceConfig {
    NamespaceConfig::new()
        .ttl(Duration::from_millis(TTL_MS))
        .lease(Duration::from_millis(LEASE_MS))
        .max_keys(4)
        .shards(1)
}

/// An engine with one namespace "ns" on a manual clock at `T0`.
fn build(cfg: NamespaceConfig) -> (Engine, Namespace, ManualClock) {
    let clock = ManualClock::new(T0);
    let engine = Engine::builder()
        .namespace("ns", cfg)
        .clock(clock.clone())
        .maintenance_interval(None)
        .seed(SEED)
        .build()
        .expect("valid configuration");
    let ns = engine.namespace("ns").expect("configured namespace");
    (engine, ns, clock)
}

/// What a claim answered, without the guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Seen {
    Acquired,
    InProgress,
    Duplicate,
}

/// True for a claim refused with `CapacityExceeded` by a namespace of `max` keys.
fn is_capacity_exceeded(r: &idem::Result<Claim>, max: usize) -> bool {
    matches!(r, Err(Error::CapacityExceeded { max_keys, .. }) if *max_keys == max)
}

/// Model 1. Two concurrent claims of one key: exactly one is `Acquired`. The other is
/// `InProgress` if it ran while the winner held the key, or `Duplicate` if the winner
/// had completed already. Afterwards the key is a duplicate, completed once.
#[test]
fn two_claims_of_one_key_acquire_exactly_once() {
    static TALLY: Tally<2> = Tally::new();
    model(|| {
        let (engine, ns, _clock) = build(config());
        let claimer = |ns: Namespace| {
            move || match ns.claim(KEY).unwrap() {
                Claim::Acquired(guard) => {
                    guard.complete().unwrap();
                    Seen::Acquired
                }
                Claim::InProgress(busy) => {
                    assert_eq!(busy.lease_expires_at_ms(), T0 + LEASE_MS);
                    Seen::InProgress
                }
                Claim::Duplicate(done) => {
                    assert_eq!(done.completed_at_ms(), T0);
                    Seen::Duplicate
                }
            }
        };
        let other = thread::spawn(claimer(ns.clone()));
        let mine = claimer(ns.clone())();
        let theirs = other.join().unwrap();

        let mut seen = [mine, theirs];
        seen.sort();
        match seen {
            [Seen::Acquired, Seen::InProgress] => TALLY.hit(0),
            [Seen::Acquired, Seen::Duplicate] => TALLY.hit(1),
            other => panic!("forbidden outcome: {other:?}"),
        }
        assert!(ns.claim(KEY).unwrap().is_duplicate());
        let stats = engine.stats();
        assert_eq!(stats.acquired, 1);
        assert_eq!(stats.completions, 1);
        assert_eq!(stats.resident_keys, 1);
        assert_eq!(stats.lease_lost, 0);
    });
    TALLY.assert_all_reached(["acquired + in progress", "acquired + duplicate"]);
}

/// Model 2. A completion racing the expiry of its own lease and a re-claim.
///
/// The holder's guard was acquired at `T0` (lease until `T0 + LEASE_MS`). Thread A
/// completes it; thread B claims the key again; meanwhile the main thread moves the
/// clock to exactly the end of the lease. Each of A and B reads the clock once, before
/// taking the shard lock, so each sees the lease either live or run out. The allowed
/// outcomes, and the interleavings that produce them:
///
/// | A           | B                     | how                                                  |
/// |-------------|-----------------------|------------------------------------------------------|
/// | `Ok`        | `Duplicate`           | A read the clock before the advance and locked first |
/// | `Ok`        | `InProgress`          | A and B both read before the advance, B locked first |
/// | `LeaseLost` | `Acquired`, then `Ok` | B read after the advance, and either locked first (A's token is stale) or A also read after the advance (A's lease is over) |
/// | `LeaseLost` | `InProgress`          | A read after the advance, B before it: nobody completes |
///
/// Never both A `Ok` and B `Acquired` (two holders), never B `Duplicate` without a
/// successful completion, and B's own completion never fails (nothing can take the
/// key from it). Afterwards: one successful completion at most, the completion counter
/// matches, and the key answers `Duplicate` (with the completer's time) if and only if
/// somebody completed; otherwise the expired lease makes it claimable.
#[test]
fn complete_races_lease_expiry_and_reclaim() {
    static TALLY: Tally<4> = Tally::new();
    model(|| {
        let (engine, ns, clock) = build(config());
        let Claim::Acquired(guard) = ns.claim(KEY).unwrap() else {
            panic!("first claim must acquire")
        };
        let a = thread::spawn(move || guard.complete());
        let b = {
            let ns = ns.clone();
            thread::spawn(move || match ns.claim(KEY).unwrap() {
                Claim::Acquired(g) => (Seen::Acquired, Some(g.complete())),
                Claim::InProgress(busy) => {
                    assert_eq!(busy.lease_expires_at_ms(), T0 + LEASE_MS);
                    (Seen::InProgress, None)
                }
                Claim::Duplicate(done) => {
                    assert_eq!(done.completed_at_ms(), T0, "only A can have completed");
                    (Seen::Duplicate, None)
                }
            })
        };
        clock.advance(Duration::from_millis(LEASE_MS));
        let a_result = a.join().unwrap();
        let (b_seen, b_result) = b.join().unwrap();

        let a_ok = match a_result {
            Ok(()) => true,
            Err(Error::LeaseLost) => false,
            Err(e) => panic!("A: unexpected {e:?}"),
        };
        match (a_ok, b_seen) {
            (true, Seen::Duplicate) => TALLY.hit(0),
            (true, Seen::InProgress) => TALLY.hit(1),
            (false, Seen::Acquired) => {
                assert_eq!(b_result, Some(Ok(())), "B holds the only live lease");
                TALLY.hit(2);
            }
            (false, Seen::InProgress) => TALLY.hit(3),
            other => panic!("forbidden outcome (A ok, B saw): {other:?}"),
        }
        assert_eq!(b_result.is_some(), b_seen == Seen::Acquired);
        let b_ok = b_result == Some(Ok(()));
        let completions = u64::from(a_ok) + u64::from(b_ok);
        assert!(completions <= 1, "two holders both completed");

        let stats = engine.stats();
        assert_eq!(stats.completions, completions);
        assert_eq!(stats.lease_lost, u64::from(!a_ok));
        assert_eq!(stats.acquired, 1 + u64::from(b_seen == Seen::Acquired));
        assert_eq!(stats.resident_keys, 1);

        // Now is T0 + LEASE_MS: the original lease has run out.
        match ns.claim(KEY).unwrap() {
            Claim::Duplicate(done) => {
                assert_eq!(completions, 1);
                let expected = if a_ok { T0 } else { T0 + LEASE_MS };
                assert_eq!(done.completed_at_ms(), expected);
            }
            Claim::Acquired(g) => {
                assert_eq!(completions, 0, "a completed key was claimable again");
                g.release().unwrap();
            }
            Claim::InProgress(busy) => panic!("nobody holds a live lease: {busy:?}"),
        }
    });
    TALLY.assert_all_reached([
        "A ok, B duplicate",
        "A ok, B in progress",
        "A lease lost, B acquired",
        "A lease lost, B in progress",
    ]);
}

/// Model 2b. A completion racing a `forget` of its key. Either the completion comes
/// first and the forget removes the done key, or the forget comes first and the
/// completion is refused as lost; the forget removes a live entry either way. Never
/// a key left done after both return, and never a completion counted that the forget
/// did not follow.
#[test]
fn complete_races_forget() {
    static TALLY: Tally<2> = Tally::new();
    model(|| {
        let (engine, ns, _clock) = build(config());
        let Claim::Acquired(guard) = ns.claim(KEY).unwrap() else {
            panic!("first claim must acquire")
        };
        let a = thread::spawn(move || guard.complete());
        let forgot = ns.forget(KEY).unwrap();
        let completed = match a.join().unwrap() {
            Ok(()) => true,
            Err(Error::LeaseLost) => false,
            Err(e) => panic!("A: unexpected {e:?}"),
        };
        assert!(forgot, "a live entry was removed, held or done");
        TALLY.hit(usize::from(completed));
        assert_eq!(ns.check(KEY).unwrap(), None);
        let stats = engine.stats();
        assert_eq!(stats.completions, u64::from(completed));
        assert_eq!(stats.lease_lost, u64::from(!completed));
        assert_eq!(stats.forgotten, 1);
        assert_eq!(stats.resident_keys, 0);
        let Claim::Acquired(g) = ns.claim(KEY).unwrap() else {
            panic!("forgotten: claimable again")
        };
        g.release().unwrap();
    });
    TALLY.assert_all_reached(["forget first: completion lost", "completion first"]);
}

/// Model 3. Maintenance racing a claim of a done key whose TTL has run out.
///
/// With `max_keys(1)` the expired entry still holds the only unit of capacity, so
/// whichever goes first matters: if maintenance reclaims the entry first, the claim
/// must get the capacity back; if the claim goes first, it reuses the expired entry in
/// place and maintenance must leave the new lease alone. Either way the claim is
/// `Acquired`, its completion is `Ok` (maintenance may also run between the two), the
/// entry is counted as expired exactly once, and one key is resident at the end.
#[test]
fn maintenance_races_claim_of_an_expired_key() {
    static TALLY: Tally<2> = Tally::new();
    model(|| {
        let (engine, ns, clock) = build(config().max_keys(1));
        let Claim::Acquired(g) = ns.claim(KEY).unwrap() else {
            panic!("first claim must acquire")
        };
        g.complete().unwrap();
        clock.advance(Duration::from_millis(TTL_MS));

        let engine = Arc::new(engine);
        let maintenance = {
            let engine = engine.clone();
            thread::spawn(move || engine.run_maintenance())
        };
        let Claim::Acquired(g) = ns.claim(KEY).unwrap() else {
            panic!("a key whose TTL ran out must be claimable")
        };
        g.complete().unwrap();
        let reclaimed = maintenance.join().unwrap();
        assert!(reclaimed <= 1, "reclaimed {reclaimed}");
        TALLY.hit(reclaimed);

        let stats = engine.stats();
        assert_eq!(stats.resident_keys, 1);
        assert_eq!(stats.expirations, 1);
        assert_eq!(stats.completions, 2);
        assert_eq!(stats.capacity_refusals, 0);
        match ns.check(KEY).unwrap() {
            Some(KeyState::Done {
                completed_at_ms, ..
            }) => assert_eq!(completed_at_ms, T0 + TTL_MS),
            other => panic!("expected Done, got {other:?}"),
        }
        // The namespace is full again: a second key is refused.
        assert!(is_capacity_exceeded(&ns.claim(b"ord-2"), 1));
    });
    TALLY.assert_all_reached(["claim reused the entry", "maintenance reclaimed it first"]);
}

/// Model 4a. `max_keys(1)`: two threads claim different keys; exactly one is
/// `Acquired` and the other is refused with `CapacityExceeded`. The claims are kept
/// (the guards returned, not dropped) until both have answered, so no release can
/// hand the unit over in between. Dropping the winner's guard frees the unit.
#[test]
fn capacity_of_one_admits_exactly_one_of_two_keys() {
    static TALLY: Tally<2> = Tally::new();
    model(|| {
        let (engine, ns, _clock) = build(config().max_keys(1));
        let other = {
            let ns = ns.clone();
            thread::spawn(move || ns.claim(b"ord-b"))
        };
        let mine = ns.claim(b"ord-a");
        let theirs = other.join().unwrap();

        let acquired = [&mine, &theirs]
            .iter()
            .filter(|r| matches!(r, Ok(c) if c.is_acquired()))
            .count();
        let refused = [&mine, &theirs]
            .iter()
            .filter(|r| is_capacity_exceeded(r, 1))
            .count();
        assert_eq!((acquired, refused), (1, 1), "{mine:?} / {theirs:?}");
        TALLY.hit(usize::from(theirs.is_ok()));
        let stats = engine.stats();
        assert_eq!(stats.resident_keys, 1);
        assert_eq!(stats.capacity_refusals, 1);

        drop((mine, theirs));
        assert_eq!(engine.stats().resident_keys, 0);
        assert!(ns.claim(b"ord-c").unwrap().is_acquired());
    });
    TALLY.assert_all_reached(["main thread won", "spawned thread won"]);
}

/// Model 4b. `max_keys(1)`: a release in one thread racing a claim of another key in
/// another. The release always succeeds; the claim is `Acquired` if it found the unit
/// released (on its first attempt or on its retry after reclaiming expired keys), and
/// `CapacityExceeded` otherwise. No unit is lost or counted twice: afterwards a third
/// key fits exactly when the claim's guard is gone.
#[test]
fn release_races_claim_at_capacity() {
    static TALLY: Tally<2> = Tally::new();
    model(|| {
        let (engine, ns, _clock) = build(config().max_keys(1));
        let Claim::Acquired(held) = ns.claim(b"ord-a").unwrap() else {
            panic!("first claim must acquire")
        };
        let releaser = thread::spawn(move || held.release());
        let claim = ns.claim(b"ord-b");
        releaser.join().unwrap().unwrap();

        let stats = engine.stats();
        match &claim {
            Ok(c) if c.is_acquired() => {
                TALLY.hit(0);
                assert_eq!(stats.resident_keys, 1);
                assert!(is_capacity_exceeded(&ns.claim(b"ord-c"), 1));
            }
            r if is_capacity_exceeded(r, 1) => {
                TALLY.hit(1);
                assert_eq!(stats.resident_keys, 0);
            }
            other => panic!("unexpected {other:?}"),
        }
        drop(claim);
        assert!(ns.claim(b"ord-c").unwrap().is_acquired());
    });
    TALLY.assert_all_reached(["claim acquired", "claim refused"]);
}

/// The shard a key lands on among `shards`, computed the way the engine does: seeded
/// 128-bit xxh3, multiply-shift on the high half. Only used to pick test keys; if the
/// engine's mapping changes, the cross-shard model still checks the same property,
/// it just may run on one shard.
fn shard_of(key: &[u8], shards: usize) -> usize {
    let v = xxhash_rust::xxh3::xxh3_128_with_seed(key, SEED);
    (((v >> 64) as u64 as u128 * shards as u128) >> 64) as usize
}

/// The first `n` keys of the form `ord-{i}` that land on `shard` among two.
fn keys_on(shard: usize, n: usize) -> Vec<Vec<u8>> {
    (0u32..)
        .map(|i| format!("ord-{i}").into_bytes())
        .filter(|k| shard_of(k, 2) == shard)
        .take(n)
        .collect()
}

/// Model 4c. Capacity across two shards: a unit held in one shard's reserve, wanted
/// by a claim on each shard at once. `max_keys(2)`: shard 0 fills both units, then
/// releases one, which stays in its reserve (taken back there with a plain decrement
/// under its lock). Then shard 0's next claim races a claim on shard 1, which finds
/// the pool empty and collects the other shards' reserves under their locks before it
/// would refuse. Exactly one of the two gets the unit; the namespace never holds more
/// than two keys, and no unit is lost.
#[test]
fn a_unit_in_one_shards_reserve_goes_to_exactly_one_of_two_shards() {
    static TALLY: Tally<2> = Tally::new();
    let zero = keys_on(0, 3);
    let one = keys_on(1, 1);
    model(move || {
        let (engine, ns, _clock) = build(config().max_keys(2).shards(2));
        let first = ns.claim(&zero[0]).unwrap();
        let Claim::Acquired(second) = ns.claim(&zero[1]).unwrap() else {
            panic!("the second unit must be free")
        };
        assert!(first.is_acquired());
        second.release().unwrap();
        let other = {
            let ns = ns.clone();
            let key = one[0].clone();
            thread::spawn(move || ns.claim(&key))
        };
        let mine = ns.claim(&zero[2]);
        let theirs = other.join().unwrap();

        let acquired = [&mine, &theirs]
            .iter()
            .filter(|r| matches!(r, Ok(c) if c.is_acquired()))
            .count();
        let refused = [&mine, &theirs]
            .iter()
            .filter(|r| is_capacity_exceeded(r, 2))
            .count();
        assert_eq!((acquired, refused), (1, 1), "{mine:?} / {theirs:?}");
        TALLY.hit(usize::from(theirs.is_ok()));
        assert_eq!(engine.stats().resident_keys, 2);

        drop((first, mine, theirs));
        assert_eq!(engine.stats().resident_keys, 0);
        // Both units are back: two more keys fit, one on each shard.
        let a = ns.claim(&zero[1]).unwrap();
        let b = ns.claim(&one[0]).unwrap();
        assert!(a.is_acquired() && b.is_acquired(), "{a:?} / {b:?}");
    });
    TALLY.assert_all_reached(["shard 0 took its reserve", "shard 1 collected it"]);
}

/// Model 4d. The last handle goes while claim guards of two shards end on two other
/// threads, one by completing, one by releasing. Whatever the interleaving, both
/// guards finish against a live namespace, and the namespace is freed after them:
/// loom fails an execution that ends with one of its `Arc`s still alive, so a
/// namespace left behind (its shards still holding it) fails the model.
#[test]
fn the_last_handle_and_the_last_guards_of_two_shards_end_together() {
    let zero = keys_on(0, 1);
    let one = keys_on(1, 1);
    model(move || {
        let (engine, ns, _clock) = build(config().shards(2));
        let take = |key: &[u8]| match ns.claim(key).unwrap() {
            Claim::Acquired(guard) => guard,
            other => panic!("expected Acquired, got {other:?}"),
        };
        let (a, b) = (take(&zero[0]), take(&one[0]));
        let completing = thread::spawn(move || a.complete());
        let releasing = thread::spawn(move || b.release());
        drop(ns);
        drop(engine);
        assert_eq!(completing.join().unwrap(), Ok(()));
        assert_eq!(releasing.join().unwrap(), Ok(()));
    });
}

/// Model 5. Sliding windows: a duplicate sighting restarts the TTL, so after two
/// sightings the key must stay a duplicate at least until the later of the two
/// `expires_at_ms` the sightings were told.
///
/// Thread X sights the key while the main thread moves the clock forward by one
/// second and sights it too. If X reads the clock before the advance but takes the
/// shard lock after the main thread's sighting, X's restart (from the older time) must
/// not pull the deadline back before the one the main thread was promised.
#[test]
fn sliding_window_restart_never_moves_the_deadline_back() {
    const STEP_MS: u64 = 1_000;
    static TALLY: Tally<2> = Tally::new();
    model(|| {
        let (_engine, ns, clock) = build(config().extend_on_duplicate(true));
        let Claim::Acquired(g) = ns.claim(KEY).unwrap() else {
            panic!("first claim must acquire")
        };
        g.complete().unwrap();

        let x = {
            let ns = ns.clone();
            thread::spawn(move || match ns.claim(KEY).unwrap() {
                Claim::Duplicate(done) => done.expires_at_ms(),
                other => panic!("X: expected Duplicate, got {other:?}"),
            })
        };
        clock.advance(Duration::from_millis(STEP_MS));
        let mine = match ns.claim(KEY).unwrap() {
            Claim::Duplicate(done) => done.expires_at_ms(),
            other => panic!("expected Duplicate, got {other:?}"),
        };
        let theirs = x.join().unwrap();
        let promised = mine.max(theirs);
        assert_eq!(promised, T0 + STEP_MS + TTL_MS);
        // Which expiry X was told: the original one or the restarted one.
        TALLY.hit(usize::from(theirs == promised));

        // Just before the promised expiry the key must still be a duplicate.
        clock.set(promised - 1);
        match ns.check(KEY).unwrap() {
            Some(KeyState::Done { expires_at_ms, .. }) => assert!(
                expires_at_ms >= promised,
                "a sighting was promised {promised}, the key now expires at {expires_at_ms}"
            ),
            other => panic!(
                "the main thread was told {mine}, thread X {theirs}; at {} the key is {other:?}",
                promised - 1
            ),
        }
    });
    TALLY.assert_all_reached(["X told the earlier expiry", "X told the later one"]);
}

/// The shard write sequence that lets batched duplicate claims read a shard without
/// its lock: a writer (holding the lock) changes two words that must agree, a reader
/// reads them between `read_begin` and `read_valid`. Whenever the sequence validates,
/// the reader saw the two words of one write, never a mix; and the exploration
/// reaches both a validated read and a refused one.
#[test]
fn the_write_sequence_validates_only_untorn_reads() {
    use idem::loom_seq::Seq;
    use loom::sync::atomic::AtomicU64;

    static OUTCOMES: Tally<2> = Tally::new();
    model(|| {
        let shared = Arc::new((Seq::default(), AtomicU64::new(0), AtomicU64::new(0)));
        let writer = {
            let shared = Arc::clone(&shared);
            thread::spawn(move || {
                let (seq, a, b) = &*shared;
                for v in 1..=2 {
                    let s = seq.write_begin();
                    a.store(v, Relaxed);
                    b.store(v, Relaxed);
                    seq.write_end(s);
                }
            })
        };
        let (seq, a, b) = &*shared;
        if let Some(s) = seq.read_begin() {
            let (x, y) = (a.load(Relaxed), b.load(Relaxed));
            if seq.read_valid(s) {
                assert_eq!(x, y, "a validated read saw two writes");
                OUTCOMES.hit(0);
            } else {
                OUTCOMES.hit(1);
            }
        } else {
            OUTCOMES.hit(1);
        }
        writer.join().unwrap();
    });
    OUTCOMES.assert_all_reached(["validated", "refused"]);
}

/// What a freed table holds, so that a read of one is seen.
const FREED: u64 = 0;

/// A lock-free reader of the reclamation models: pins (reader 0), reads the table
/// `published` names, checks it is not freed, unpins.
fn read_published(domain: &Domain, published: &LoomUsize, tables: &[UnsafeCell<u64>; 2]) {
    domain.pin(0);
    let t = published.load(Acquire);
    // SAFETY: loom checks the read against the free.
    let v = tables[t].with(|p| unsafe { *p });
    assert_ne!(v, FREED, "read a freed table");
    domain.unpin(0);
}

/// Frees the old table (0) if garbage tagged `tag` may be freed by a scan that
/// found `oldest`: outcome 0, freed; 1, kept.
fn free_if_unread(tables: &[UnsafeCell<u64>; 2], tag: Option<u64>, oldest: u64) -> usize {
    if tag.is_some_and(|tag| Domain::freeable(tag, oldest)) {
        // SAFETY: loom checks the free against the reads.
        tables[0].with_mut(|p| unsafe { *p = FREED });
        0
    } else {
        1
    }
}

/// The reclamation protocol behind the lock-free duplicate reads
/// (`src/hot/reclaim.rs`, through `idem::loom_reclaim`, in the fenced mode): a reader
/// pins, loads the published table and reads it, twice; meanwhile the table is
/// replaced, the old one retired and collected, and freed if the scan allows. Loom's
/// cell reports a read not ordered before the free; the reader also checks it never
/// sees the freed value. The exploration reaches both a free and a table kept for
/// its reader.
#[test]
fn a_retired_table_is_freed_only_after_its_reader_unpins() {
    static OUTCOMES: Tally<2> = Tally::new();
    model(|| {
        let shared = Arc::new((
            Domain::new(1),
            LoomUsize::new(0),
            [UnsafeCell::new(10u64), UnsafeCell::new(20u64)],
        ));
        let reader = {
            let shared = Arc::clone(&shared);
            thread::spawn(move || {
                let (domain, published, tables) = &*shared;
                for _ in 0..2 {
                    read_published(domain, published, tables);
                }
            })
        };
        let (domain, published, tables) = &*shared;
        published.store(1, Release);
        let tag = domain.retire();
        OUTCOMES.hit(free_if_unread(tables, Some(tag), domain.scan()));
        reader.join().unwrap();
    });
    OUTCOMES.assert_all_reached(["freed", "kept for its reader"]);
}

/// A collection that runs beside the retirement (maintenance's, while another
/// shard's lock holder retires a table): only garbage tagged before the collection's
/// bound may be freed by it, since a reader its scan found idle may have pinned and
/// read the old table after. Three threads: a reader, a retirer that hands its
/// garbage's tag to the limbo, and the collector.
#[test]
fn a_collection_frees_only_what_was_retired_before_its_bound() {
    use loom::sync::Mutex;

    static OUTCOMES: Tally<2> = Tally::new();
    model(|| {
        let shared = Arc::new((
            Domain::new(1),
            LoomUsize::new(0),
            [UnsafeCell::new(10u64), UnsafeCell::new(20u64)],
            Mutex::new(None::<u64>),
        ));
        let reader = {
            let shared = Arc::clone(&shared);
            thread::spawn(move || {
                let (domain, published, tables, _) = &*shared;
                read_published(domain, published, tables);
            })
        };
        let retirer = {
            let shared = Arc::clone(&shared);
            thread::spawn(move || {
                let (domain, published, _, limbo) = &*shared;
                published.store(1, Release);
                let tag = domain.retire();
                *limbo.lock().unwrap() = Some(tag);
            })
        };
        let (domain, _, tables, limbo) = &*shared;
        let oldest = domain.scan();
        let tag = *limbo.lock().unwrap();
        OUTCOMES.hit(free_if_unread(tables, tag, oldest));
        reader.join().unwrap();
        retirer.join().unwrap();
    });
    OUTCOMES.assert_all_reached(["freed", "kept"]);
}
