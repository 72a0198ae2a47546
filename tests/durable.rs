//! The durable tier (embedded RocksDB): restarts, retention, the stored seed, the
//! format checks, corrupt records, failing writes, unconfigured namespaces, co-commits,
//! a full hot tier, orphans, batches, payload fingerprints and the sync policies.
//!
//! Every test works in its own temporary directory on a manual clock. A restart drops
//! the engine and every namespace handle and guard (they keep the database open), then
//! builds a new engine on the same directory.

#![cfg(all(feature = "durable", not(idem_loom)))]

mod util;

use idem::{
    Claim, ClaimGuard, ClaimMarkers, Done, Engine, EngineBuilder, Error, FailurePolicy, InFlight,
    KeyError, KeyState, ManualClock, Namespace, NamespaceConfig, StateChanges, SyncPolicy,
};
use std::path::{Path, PathBuf};
use util::*;
use xxhash_rust::xxh3::xxh3_128_with_seed;

/// [`small`] with claim markers written to RocksDB before `claim` returns: the
/// tests of that mode's own behaviour (a failing disk refuses the claim; a marker
/// whose deletion failed stays behind) use it.
fn immediate() -> NamespaceConfig {
    small().claim_markers(ClaimMarkers::Immediate)
}

/// Every claim-marker mode, for the tests that hold in each.
const MARKER_MODES: [ClaimMarkers; 3] = [
    ClaimMarkers::Journal,
    ClaimMarkers::Immediate,
    ClaimMarkers::Deferred,
];

/// [`small`] with a long lease, every completion fsynced, markers in `mode`, and
/// `policy` for a store that refuses.
fn always(mode: ClaimMarkers, policy: FailurePolicy) -> NamespaceConfig {
    small()
        .lease(secs(600))
        .sync(SyncPolicy::Always)
        .claim_markers(mode)
        .on_store_error(policy)
}

/// The format version this build writes.
const FORMAT: u32 = 1;

/// A builder for a durable engine in `dir` on `clock`, with no maintenance thread.
fn builder(dir: &TempDir, clock: &ManualClock) -> EngineBuilder {
    Engine::builder()
        .clock(clock.clone())
        .maintenance_interval(None)
        .durable(dir.path())
}

/// A durable engine with one namespace "ns".
fn open(dir: &TempDir, clock: &ManualClock, cfg: NamespaceConfig) -> (Engine, Namespace) {
    let engine = builder(dir, clock)
        .namespace("ns", cfg)
        .build()
        .expect("opening the durable engine");
    let ns = engine.namespace("ns").expect("configured namespace");
    (engine, ns)
}

/// A durable engine with one namespace "ns" and the state family "ledger".
fn open_ledger(dir: &TempDir, clock: &ManualClock, cfg: NamespaceConfig) -> (Engine, Namespace) {
    let engine = builder(dir, clock)
        .namespace("ns", cfg)
        .state_family("ledger")
        .build()
        .expect("opening the durable engine");
    let ns = engine.namespace("ns").expect("configured namespace");
    (engine, ns)
}

fn show(key: &[u8]) -> String {
    String::from_utf8_lossy(key).into_owned()
}

/// Claims "too-large" and gives the claim up without an end: its completion, with a
/// result longer than the namespace's `max_result_len` (4 bytes), is refused.
fn give_up_too_large(ns: &Namespace) {
    let too_large = acquire(ns, b"too-large");
    assert!(matches!(
        too_large.complete_with_result(b"12345"),
        Err(Error::ResultTooLarge { .. })
    ));
}

fn acquired(claim: Claim) -> ClaimGuard {
    match claim {
        Claim::Acquired(g) => g,
        other => panic!("expected Acquired, got {other:?}"),
    }
}

/// Closes the engine (and its handle), then checks that no claim marker is on disk.
fn assert_no_markers_after_close(dir: &TempDir, open: (Engine, Namespace)) {
    drop(open);
    assert!(entries(&raw_db(dir), "claims:ns").is_empty());
}

fn duplicate(ns: &Namespace, key: &[u8]) -> Done {
    match ns.claim(key) {
        Ok(Claim::Duplicate(d)) => d,
        other => panic!("{}: expected Duplicate, got {other:?}", show(key)),
    }
}

fn in_progress(ns: &Namespace, key: &[u8]) -> InFlight {
    match ns.claim(key) {
        Ok(Claim::InProgress(busy)) => busy,
        other => panic!("{}: expected InProgress, got {other:?}", show(key)),
    }
}

/// Yields until `cond` holds; fails the test (instead of hanging it) if it has not
/// after 30 s.
fn spin_until(mut cond: impl FnMut() -> bool, what: &str) {
    let start = std::time::Instant::now();
    while !cond() {
        assert!(start.elapsed().as_secs() < 30, "never saw {what}");
        std::thread::yield_now();
    }
}

fn is_store_error(e: &Error) -> bool {
    matches!(e, Error::Store(s) if s.operation() == "write")
}

/// Opens the database in `dir` directly with RocksDB, with all its column families.
fn raw_db(dir: &TempDir) -> rocksdb::DB {
    let opts = rocksdb::Options::default();
    let cfs = rocksdb::DB::list_cf(&opts, dir.path()).expect("listing the column families");
    rocksdb::DB::open_cf(&opts, dir.path(), cfs).expect("opening the database directly")
}

fn column_families(dir: &TempDir) -> Vec<String> {
    let mut cfs = rocksdb::DB::list_cf(&rocksdb::Options::default(), dir.path())
        .expect("listing the column families");
    cfs.sort();
    cfs
}

/// The fingerprint seed stored in the database's default column family.
fn stored_seed(db: &rocksdb::DB) -> u64 {
    let bytes = db
        .get(b"idem/seed")
        .unwrap()
        .expect("the database stores its seed");
    u64::from_le_bytes(bytes.try_into().expect("the seed is 8 bytes"))
}

/// A key's fingerprint, computed as the engine does.
fn fingerprint(key: &[u8], seed: u64) -> u128 {
    xxh3_128_with_seed(key, seed)
}

/// Every (key, value) pair of a column family.
fn entries(db: &rocksdb::DB, cf: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    let h = db.cf_handle(cf).expect("column family exists");
    db.iterator_cf(h, rocksdb::IteratorMode::Start)
        .map(|item| {
            let (k, v) = item.expect("reading the column family");
            (k.to_vec(), v.to_vec())
        })
        .collect()
}

// 1. The outage path.

#[test]
fn a_completed_key_is_a_duplicate_after_a_restart_past_the_hot_ttl() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let cfg = small().retention(secs(3600)); // TTL 60 s, retention 1 h
    {
        let (_engine, ns) = open(&dir, &clock, cfg.clone());
        clock.advance(ms(1234));
        acquire(&ns, b"ord-1")
            .complete_with_result(b"receipt-1")
            .unwrap();
    }
    clock.advance(secs(600)); // well past the TTL, within retention
    let (engine, ns) = open(&dir, &clock, cfg);
    assert_eq!(engine.stats().durable_reads, 0);
    assert_eq!(engine.stats().resident_keys, 0);
    let done = duplicate(&ns, b"ord-1");
    assert_eq!(done.completed_at_ms(), T0 + 1234);
    assert_eq!(done.expires_at_ms(), T0 + 1234 + 3_600_000);
    assert_eq!(done.result(), Some(&b"receipt-1"[..]));
    let s = engine.stats();
    assert_eq!(s.durable_reads, 1);
    assert_eq!(s.duplicates, 1);
    assert_eq!(s.acquired, 0);
    // The answer is cached in the hot tier: the next one needs no durable read and
    // says the same.
    assert_eq!(duplicate(&ns, b"ord-1"), done);
    assert_eq!(engine.stats().durable_reads, 1);
    assert_eq!(engine.stats().resident_keys, 1);
}

/// [`open`] on an engine whose ticks are `tick_ms` ms long.
fn open_ticked(
    dir: &TempDir,
    clock: &ManualClock,
    tick_ms: u64,
    cfg: NamespaceConfig,
) -> (Engine, Namespace) {
    let engine = builder(dir, clock)
        .tick(ms(tick_ms))
        .namespace("ns", cfg)
        .build()
        .unwrap();
    let ns = engine.namespace("ns").unwrap();
    (engine, ns)
}

/// Numbered keys `k-0`, `k-1`, ...
fn numbered(n: usize) -> Vec<Vec<u8>> {
    (0..n).map(|i| format!("k-{i}").into_bytes()).collect()
}

/// The namespace of [`read_back_within_the_ttl`]: TTL 60 s, retention 1 h, one shard
/// (the keys fill whole chunks of entries rather than one each of many), its memory
/// made as keys arrive (what the keys take is what the test compares).
fn read_back_cfg() -> NamespaceConfig {
    small()
        .retention(secs(3600))
        .shards(1)
        .max_keys(4_096)
        .preallocate(false)
}

/// On engines with ticks of `tick_ms` ms: completes `keys` at `T0 + 1234`, restarts,
/// and claims them again 10.005 s later (within the 60 s TTL), checking every answer's
/// times, then again from the hot tier. Returns the engine and namespace, and the
/// hot-tier bytes the keys took when completed and when read back.
fn read_back_within_the_ttl(
    dir: &TempDir,
    tick_ms: u64,
    keys: &[Vec<u8>],
) -> (Engine, Namespace, u64, u64) {
    let clock = ManualClock::new(T0);
    let cfg = read_back_cfg();
    let open = || open_ticked(dir, &clock, tick_ms, cfg.clone());
    let completed = {
        let (engine, ns) = open();
        let before = engine.stats().hot_bytes;
        clock.advance(ms(1234));
        for k in keys {
            acquire(&ns, k).complete().unwrap();
        }
        engine.stats().hot_bytes - before
    };
    // Not a whole number of 10 ms ticks after the completion.
    clock.advance(ms(10_005));
    let (engine, ns) = open();
    let before = engine.stats().hot_bytes;
    for k in keys {
        let done = duplicate(&ns, k);
        assert_eq!(done.completed_at_ms(), T0 + 1234);
        assert_eq!(done.expires_at_ms(), T0 + 1234 + 3_600_000);
    }
    let read_back = engine.stats().hot_bytes - before;
    assert_eq!(engine.stats().durable_reads, keys.len() as u64);
    // Answered from the hot tier now, alike.
    for k in keys {
        let done = duplicate(&ns, k);
        assert_eq!(done.completed_at_ms(), T0 + 1234, "{}", show(k));
        assert_eq!(done.expires_at_ms(), T0 + 1234 + 3_600_000, "{}", show(k));
        match ns.check(k).unwrap() {
            Some(KeyState::Done {
                completed_at_ms, ..
            }) => assert_eq!(completed_at_ms, T0 + 1234),
            other => panic!("{}: {other:?}", show(k)),
        }
    }
    assert_eq!(engine.stats().durable_reads, keys.len() as u64);
    (engine, ns, completed, read_back)
}

#[test]
fn a_key_read_back_within_its_ttl_is_held_as_its_completion_left_it() {
    let dir = TempDir::new();
    let keys = numbered(2_000);
    let (engine, ns, completed, read_back) = read_back_within_the_ttl(&dir, 1, &keys);
    // No side-table row a key: the completion time follows from the deadline (the
    // rows took more than the entries themselves).
    assert!(
        read_back <= completed + completed / 10,
        "read back {read_back} bytes, completed {completed}"
    );
    // Held until the TTL's end, as a completion of this run would be; then the
    // durable tier answers again, with the same times.
    let clock = ManualClock::new(T0 + 1234 + 59_999);
    drop((engine, ns));
    let (engine, ns) = open_ticked(&dir, &clock, 1, read_back_cfg());
    assert_eq!(duplicate(&ns, &keys[0]).completed_at_ms(), T0 + 1234);
    clock.set(T0 + 1234 + 60_000);
    let reads = engine.stats().durable_reads;
    assert_eq!(duplicate(&ns, &keys[0]).completed_at_ms(), T0 + 1234);
    assert_eq!(engine.stats().durable_reads, reads + 1);
}

#[test]
fn a_key_read_back_keeps_its_completion_time_where_ticks_cannot_tell_it() {
    // Ticks of 10 ms, counted from the second open (10.005 s after the completion):
    // the TTL's end does not fall on one, so the key keeps its time in a side-table
    // row, and every answer is still exact.
    let dir = TempDir::new();
    let keys = numbered(200);
    let (_engine, _ns, completed, read_back) = read_back_within_the_ttl(&dir, 10, &keys);
    assert!(
        read_back > completed,
        "read back {read_back} bytes, completed {completed}"
    );
}

#[test]
fn a_key_read_back_on_a_clock_set_back_is_held_a_ttl_at_most() {
    // Completed at T0 + 120 s; after the restart the clock reads T0. The key is
    // answered with its own times, and the hot tier holds it a TTL from the read,
    // not until a TTL after its completion (three minutes ahead).
    let dir = TempDir::new();
    let clock = ManualClock::new(T0 + 120_000);
    let cfg = small().retention(secs(3600));
    {
        let (_engine, ns) = open(&dir, &clock, cfg.clone());
        acquire(&ns, b"k").complete().unwrap();
    }
    clock.set(T0);
    let (engine, ns) = open(&dir, &clock, cfg);
    assert_eq!(duplicate(&ns, b"k").completed_at_ms(), T0 + 120_000);
    assert_eq!(duplicate(&ns, b"k").completed_at_ms(), T0 + 120_000);
    let reads = engine.stats().durable_reads;
    clock.set(T0 + 60_000);
    assert_eq!(duplicate(&ns, b"k").completed_at_ms(), T0 + 120_000);
    assert_eq!(engine.stats().durable_reads, reads + 1);
}

#[test]
fn a_clock_stepped_back_during_the_open_answers_no_expiry_past_the_record() {
    // The engine's epoch is the clock's first reading (T0 + 10 s), the namespace
    // starts at a later one (T0). The key completed at T0 has its record expire at
    // T0 + 420 s (7 x the 60 s TTL), but the hot tier, deriving the completion from
    // its deadline, answered T0 + 430 s, and the key was acquired before that.
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let engine = Engine::builder()
        .clock(BackAfterFirstRead::new(T0 + 10_000, clock.clone()))
        .maintenance_interval(None)
        .durable(dir.path())
        .namespace("ns", small())
        .build()
        .unwrap();
    let ns = engine.namespace("ns").unwrap();
    acquire(&ns, b"k").complete().unwrap();
    let mut answered = 0;
    for at in [0, 30_000, 60_000, 65_000, 75_000] {
        clock.set(T0 + at);
        answered = answered.max(duplicate(&ns, b"k").expires_at_ms());
    }
    clock.set(answered - 1);
    assert!(
        ns.claim(b"k").unwrap().is_duplicate(),
        "a duplicate until the expiry answered, T0 + {} ms",
        answered - T0
    );
}

/// In a run on ticks of 10 ms (an engine of `cfg` on `dir`, opened at `T0` on
/// `clock`), completes key "k" at T0 + 1,234 and returns its hot deadline as a
/// duplicate answers it: T0 + 1,234 + the TTL of 60 s, rounded up to 10 ms. The
/// engine is closed on return.
fn k_completed_on_10_ms_ticks(dir: &TempDir, clock: &ManualClock, cfg: &NamespaceConfig) -> u64 {
    let expiry = T0 + 61_240;
    let (_engine, ns) = open_ticked(dir, clock, 10, cfg.clone());
    clock.advance(ms(1234));
    acquire(&ns, b"k").complete().unwrap();
    assert_eq!(duplicate(&ns, b"k").expires_at_ms(), expiry);
    expiry
}

#[test]
fn a_key_whose_retention_is_its_ttl_is_answered_with_its_records_expiry_on_coarse_ticks() {
    // Retention equal to the TTL, ticks of 10 ms that the TTL's end does not fall on:
    // the hot tier's answers say the record's expiry (to within a tick), not a
    // retention later, and the record lasts to the rounded hot deadline it backs.
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let cfg = small().retention(secs(60));
    let open = || open_ticked(&dir, &clock, 10, cfg.clone());
    let expiry = k_completed_on_10_ms_ticks(&dir, &clock, &cfg);
    clock.advance(ms(10_005));
    let (_engine, ns) = open();
    assert_eq!(duplicate(&ns, b"k").expires_at_ms(), expiry, "the record's");
    let from_hot = duplicate(&ns, b"k");
    assert_eq!(from_hot.completed_at_ms(), T0 + 1234);
    assert!(
        (expiry - 10..=expiry).contains(&from_hot.expires_at_ms()),
        "{} against the record's {expiry}",
        from_hot.expires_at_ms()
    );
}

#[test]
fn a_fixed_windows_expiry_answered_from_the_hot_tier_never_outlasts_its_record() {
    // Ticks of 1 s, TTL 60 s, retention 120 s, completed 250 ms into a tick: the hot
    // deadline is T0 + 61,000, and once the clock has passed T0 + 1,000 the hot tier
    // derives the completion from it as T0 + 1,000. The record ends at T0 + 120,250.
    // Before, the hot tier answered T0 + 121,000 (a retention from the derived
    // completion), and from T0 + 120,250 the key was claimable all the same.
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let (_engine, ns) = open_ticked(&dir, &clock, 1000, small().retention(secs(120)));
    clock.advance(ms(250));
    acquire(&ns, b"k").complete().unwrap();
    clock.set(T0 + 30_000);
    let expiry = duplicate(&ns, b"k").expires_at_ms();
    let Some(KeyState::Done { expires_at_ms, .. }) = ns.check(b"k").unwrap() else {
        panic!("done")
    };
    assert_eq!(expires_at_ms, expiry, "check answers as the claim does");
    assert!(
        (T0 + 120_250 - 999..=T0 + 120_250).contains(&expiry),
        "within a tick of the record's expiry, never past it: {expiry}"
    );
    clock.set(expiry - 1);
    duplicate(&ns, b"k");
    clock.set(T0 + 120_250);
    acquire(&ns, b"k").release().unwrap();
}

#[test]
fn a_key_read_back_on_coarse_ticks_is_no_duplicate_past_its_record() {
    // Ticks of 10 ms counted from the second run's open, which the first run's window
    // end (T0 + 61,234) does not fall on: rounded up to a tick it is T0 + 61,243,
    // past the record's expiry (T0 + 61,240). Past the record, the key answers as it
    // does after a restart (and as it does once the compaction filter dropped it):
    // new, not a duplicate from the hot tier.
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let cfg = small().retention(secs(60));
    let open = || open_ticked(&dir, &clock, 10, cfg.clone());
    let expiry = k_completed_on_10_ms_ticks(&dir, &clock, &cfg);
    clock.advance(ms(10_009));
    let (_engine, ns) = open();
    assert_eq!(duplicate(&ns, b"k").expires_at_ms(), expiry, "read back");
    clock.set(expiry - 1);
    let last = duplicate(&ns, b"k");
    assert!(last.expires_at_ms() <= expiry, "{last:?}");
    clock.set(expiry);
    acquire(&ns, b"k").release().unwrap();
}

#[test]
fn a_sliding_window_seen_within_what_its_record_covers_reads_nothing_on_coarse_ticks() {
    // Ticks of 1 s, TTL and retention 10 s, completed at T0 + 1: the hot deadline is
    // T0 + 11,000, the record lasts as long. Sightings within that tick move nothing
    // and need no look at the record (before, each read it: a failing read failed
    // them).
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let cfg = small()
        .ttl(secs(10))
        .retention(secs(10))
        .extend_on_duplicate(true);
    let (engine, ns) = open_ticked(&dir, &clock, 1000, cfg);
    clock.advance(ms(1));
    acquire(&ns, b"k").complete().unwrap();
    let reads = engine.stats().durable_reads;
    engine.debug_fail_store_reads(true);
    for t in [100, 300, 500] {
        clock.set(T0 + t);
        assert_eq!(duplicate(&ns, b"k").expires_at_ms(), T0 + 11_000);
    }
    engine.debug_fail_store_reads(false);
    assert_eq!(
        engine.stats().durable_reads,
        reads,
        "no sighting read the store"
    );
}

#[test]
fn a_sliding_windows_checked_expiry_is_what_its_record_holds_on_coarse_ticks() {
    // Retention equal to the TTL, ticks of 10 ms that the TTL's end does not fall on:
    // the hot deadline (rounded up to T0 + 61,240) passes the retention (T0 +
    // 61,234). `check` reports the record's expiry, and the record lasts to the hot
    // deadline: neither a retention later (a sighting past the window would then be a
    // duplicate and restart it) nor before the answer it backs.
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let cfg = small().retention(secs(60)).extend_on_duplicate(true);
    let open = || open_ticked(&dir, &clock, 10, cfg.clone());
    let reported = {
        let (_engine, ns) = open();
        clock.advance(ms(1234));
        acquire(&ns, b"k").complete().unwrap();
        acquire(&ns, b"j").complete().unwrap();
        let Some(KeyState::Done { expires_at_ms, .. }) = ns.check(b"k").unwrap() else {
            panic!("done")
        };
        assert_eq!(expires_at_ms, T0 + 61_240, "the rounded hot deadline");
        // Without a restart: claimable once the window is over.
        clock.set(expires_at_ms);
        acquire(&ns, b"j").release().unwrap();
        expires_at_ms
    };
    // Known from the record alone (a restart; `check`, which is no sighting): done
    // until the reported expiry, claimable at it.
    clock.set(reported - 1);
    {
        let (_engine, ns) = open();
        assert!(
            matches!(
                ns.check(b"k").unwrap(),
                Some(KeyState::Done { expires_at_ms, .. }) if expires_at_ms == reported
            ),
            "the record holds the key as long as it was reported"
        );
    }
    clock.set(reported);
    let (_engine, ns) = open();
    acquire(&ns, b"k").release().unwrap();
}

// 2. Retention.

#[test]
fn past_retention_a_key_is_claimable_again_without_a_restart() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let (engine, ns) = open(&dir, &clock, small().retention(secs(120)));
    acquire(&ns, b"k").complete().unwrap();
    clock.advance(secs(60)); // the hot TTL is over: the durable tier answers
    let done = duplicate(&ns, b"k");
    assert_eq!(done.completed_at_ms(), T0);
    assert_eq!(done.expires_at_ms(), T0 + 120_000);
    let reads = engine.stats().durable_reads;
    clock.set(T0 + 119_999);
    assert_eq!(duplicate(&ns, b"k").expires_at_ms(), T0 + 120_000);
    clock.set(T0 + 120_000); // retention over in both tiers
    acquire(&ns, b"k").complete().unwrap();
    assert!(engine.stats().durable_reads > reads);
    assert_eq!(duplicate(&ns, b"k").completed_at_ms(), T0 + 120_000);
}

#[test]
fn past_retention_a_key_is_claimable_again_after_a_restart() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let cfg = small().retention(secs(120));
    {
        let (_engine, ns) = open(&dir, &clock, cfg.clone());
        acquire(&ns, b"k").complete().unwrap();
    }
    clock.set(T0 + 119_999);
    {
        let (_engine, ns) = open(&dir, &clock, cfg.clone());
        let done = duplicate(&ns, b"k");
        assert_eq!(done.completed_at_ms(), T0);
        assert_eq!(done.expires_at_ms(), T0 + 120_000);
    }
    clock.set(T0 + 120_000);
    let (_engine, ns) = open(&dir, &clock, cfg);
    acquire(&ns, b"k").complete().unwrap();
    assert_eq!(duplicate(&ns, b"k").completed_at_ms(), T0 + 120_000);
}

/// A fixed window read back from a record written under another retention (the
/// configuration changed between runs) answers the record's expiry from the hot tier
/// too, not one counted with this run's retention: later than the record (a
/// retention lengthened), the key would be claimable before the answered expiry;
/// earlier (a retention shortened), the answer would be whole minutes early. Within
/// the TTL (the entry's completion follows from its deadline) and past it (the
/// completion is kept beside the entry), and through `check` as well.
#[test]
fn a_fixed_window_read_back_answers_its_records_expiry_after_the_retention_changed() {
    for (first, then) in [(120, 600), (600, 120)] {
        for read_at in [10_000, 90_000] {
            let dir = TempDir::new();
            let clock = ManualClock::new(T0);
            {
                let (_engine, ns) = open(&dir, &clock, small().retention(secs(first)));
                acquire(&ns, b"k").complete().unwrap();
            }
            let expiry = T0 + first * 1000;
            clock.set(T0 + read_at);
            let (_engine, ns) = open(&dir, &clock, small().retention(secs(then)));
            let what = format!("retention {first} s then {then} s, read at {read_at} ms");
            assert_eq!(duplicate(&ns, b"k").expires_at_ms(), expiry, "{what}: read");
            let from_hot = duplicate(&ns, b"k");
            assert_eq!(from_hot.completed_at_ms(), T0, "{what}");
            assert_eq!(
                from_hot.expires_at_ms(),
                expiry,
                "{what}: from the hot tier"
            );
            let Some(KeyState::Done { expires_at_ms, .. }) = ns.check(b"k").unwrap() else {
                panic!("{what}: done")
            };
            assert_eq!(expires_at_ms, expiry, "{what}: checked");
            // A third duplicate in a row on this thread is read without the lock first.
            assert_eq!(
                duplicate(&ns, b"k").expires_at_ms(),
                expiry,
                "{what}: third"
            );
            match &ns.claim_batch(&[b"k"]).unwrap()[..] {
                [Claim::Duplicate(d)] => assert_eq!(d.expires_at_ms(), expiry, "{what}: batch"),
                other => panic!("{what}: {other:?}"),
            }
            clock.set(expiry - 1);
            duplicate(&ns, b"k");
            clock.set(expiry);
            acquire(&ns, b"k").release().unwrap();
        }
    }
}
/// A key read back under another retention and past its TTL keeps both its
/// completion time and its record's expiry beside its entry; whichever way the entry
/// goes (forgotten, expired, evicted, or taken again in place once the record ran
/// out), the key that takes its slot next, completed with a result (which marks its
/// entry as keeping more), answers its own times, not the rows of the key before.
#[test]
fn a_slot_freed_by_a_key_read_back_under_another_retention_keeps_none_of_its_times() {
    for how in ["forget", "expire", "evict", "reuse"] {
        let dir = TempDir::new();
        let clock = ManualClock::new(T0);
        let cfg = |retention| small().retention(secs(retention)).max_keys(1).shards(1);
        {
            let (_engine, ns) = open(&dir, &clock, cfg(600));
            acquire(&ns, b"a").complete().unwrap();
        }
        clock.set(T0 + 90_000);
        let (engine, ns) = open(&dir, &clock, cfg(120));
        let read = duplicate(&ns, b"a");
        assert_eq!(
            (read.completed_at_ms(), read.expires_at_ms()),
            (T0, T0 + 600_000)
        );
        let (key, at): (&[u8], u64) = match how {
            "forget" => {
                assert!(ns.forget(b"a").unwrap());
                (b"b", T0 + 90_000)
            }
            "expire" => {
                clock.set(T0 + 150_000);
                engine.run_maintenance();
                (b"b", T0 + 150_000)
            }
            // The only slot is taken from the done key.
            "evict" => (b"b", T0 + 90_000),
            _ => {
                clock.set(T0 + 600_000);
                (b"a", T0 + 600_000)
            }
        };
        acquire(&ns, key).complete_with_result(b"r").unwrap();
        let Some(KeyState::Done {
            completed_at_ms,
            expires_at_ms,
            ..
        }) = ns.check(key).unwrap()
        else {
            panic!("{how}: done");
        };
        assert_eq!(
            (completed_at_ms, expires_at_ms),
            (at, at + 120_000),
            "{how}"
        );
        let d = duplicate(&ns, key);
        assert_eq!(
            (d.completed_at_ms(), d.expires_at_ms()),
            (at, at + 120_000),
            "{how}"
        );
        if how == "evict" {
            assert_eq!(engine.stats().evictions, 1);
        }
    }
}

/// The sliding window of these tests: TTL 60 s, retention 120 s.
fn sliding() -> NamespaceConfig {
    small().retention(secs(120)).extend_on_duplicate(true)
}

/// Claims `key` on another thread with durable writes held, and returns once that
/// claim's write is waiting (release it with `debug_hold_completions(false)`).
fn held_sighting(
    engine: &Engine,
    ns: &Namespace,
    key: &'static [u8],
) -> std::thread::JoinHandle<idem::Result<Claim>> {
    engine.debug_hold_completions(true);
    let claimer = {
        let ns = ns.clone();
        std::thread::spawn(move || ns.claim(key))
    };
    spin_until(
        || engine.debug_held_completions() > 0,
        "a held durable write",
    );
    claimer
}

/// A durable engine in a new directory on a clock at `T0`, with key `k` completed at
/// `T0`. The directory comes first so that it is dropped last.
fn completed_k(cfg: NamespaceConfig) -> (TempDir, ManualClock, Engine, Namespace) {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let (engine, ns) = open(&dir, &clock, cfg);
    acquire(&ns, b"k").complete().unwrap();
    (dir, clock, engine, ns)
}

/// A sliding window (TTL 60 s, retention 120 s) whose key is seen every 50 s for
/// `sightings` sightings from `T0`, on `ns`.
fn keep_sighting(ns: &Namespace, clock: &ManualClock, sightings: u64) {
    for i in 1..=sightings {
        clock.set(T0 + i * 50_000);
        let done = duplicate(ns, b"k");
        assert_eq!(done.completed_at_ms(), T0);
        assert!(
            done.expires_at_ms() >= T0 + i * 50_000 + 60_000,
            "sighting {i}: the window reaches a TTL past it"
        );
    }
}

#[test]
fn a_sliding_window_outlives_retention_across_a_restart() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let cfg = sliding();
    {
        let (engine, ns) = open(&dir, &clock, cfg.clone());
        acquire(&ns, b"k").complete().unwrap();
        let writes = engine.stats().durable_writes;
        // 500 s of sightings: four times the retention.
        keep_sighting(&ns, &clock, 10);
        // The record follows the window, a retention at a time, not at every sighting.
        let rewrites = engine.stats().durable_writes - writes;
        assert!((3..=5).contains(&rewrites), "{rewrites} rewrites");
    }
    // After the restart the record alone holds the window: last sighting + 60 s is
    // still a duplicate (with retention counted from completion it ended at 120 s).
    clock.set(T0 + 500_000 + 59_999);
    {
        let (_engine, ns) = open(&dir, &clock, cfg.clone());
        let done = duplicate(&ns, b"k");
        assert_eq!(done.completed_at_ms(), T0);
    }
    // That sighting, read back from disk, restarted the window and rewrote the record
    // (which ended at 600 s): a second restart still finds it a TTL later.
    clock.set(T0 + 500_000 + 59_999 + 59_999);
    let (_engine, ns) = open(&dir, &clock, cfg);
    duplicate(&ns, b"k");
}

#[test]
fn a_sliding_window_past_its_hot_entry_is_found_through_the_prefilter() {
    let (_dir, clock, engine, ns) = completed_k(sliding());
    keep_sighting(&ns, &clock, 10);
    // The hot entry ends at 560 s; maintenance reclaims it and drops the prefilter
    // generations past retention, the first record's (120 s) among them.
    clock.set(T0 + 560_000);
    engine.run_maintenance();
    assert_eq!(engine.stats().resident_keys, 0);
    let done = duplicate(&ns, b"k");
    assert_eq!(done.completed_at_ms(), T0);
    assert!(engine.stats().prefilter_passes >= 1);
}

#[test]
fn a_sliding_window_kept_only_on_disk_is_extended_when_read_back() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let cfg = sliding();
    {
        let (_engine, ns) = open(&dir, &clock, cfg.clone());
        acquire(&ns, b"k").complete().unwrap();
    }
    // Past the hot TTL, within retention: the restarted engine reads the record, and
    // the sighting at 100 s needs it to last until 160 s.
    clock.set(T0 + 100_000);
    {
        let (_engine, ns) = open(&dir, &clock, cfg.clone());
        let done = duplicate(&ns, b"k");
        assert!(
            done.expires_at_ms() >= T0 + 160_000,
            "{}",
            done.expires_at_ms()
        );
    }
    clock.set(T0 + 159_999);
    let (_engine, ns) = open(&dir, &clock, cfg);
    assert_eq!(duplicate(&ns, b"k").completed_at_ms(), T0);
}

/// A sliding window's record counts its end in this run's retentions: written under a
/// retention of 120 s, read back by a run whose retention is 600 s, its first
/// sighting (whose window ends well within the record) rewrites it to last 600 s from
/// the completion, and the answer says so; a shortened retention leaves it as it is.
#[test]
fn a_sliding_window_read_back_under_a_changed_retention_lasts_the_longer_one() {
    for (then, expiry) in [(600, T0 + 600_000), (60, T0 + 120_000)] {
        let dir = TempDir::new();
        let clock = ManualClock::new(T0);
        {
            let (_engine, ns) = open(&dir, &clock, sliding());
            acquire(&ns, b"k").complete().unwrap();
        }
        clock.set(T0 + 10_000);
        let (engine, ns) = open(&dir, &clock, sliding().retention(secs(then)));
        let writes = engine.stats().durable_writes;
        assert_eq!(duplicate(&ns, b"k").expires_at_ms(), expiry, "{then} s");
        assert_eq!(
            duplicate(&ns, b"k").expires_at_ms(),
            expiry,
            "{then} s, hot"
        );
        assert_eq!(
            engine.stats().durable_writes - writes,
            u64::from(then == 600),
            "{then} s"
        );
        drop((engine, ns));
        clock.set(expiry - 1);
        let (_engine, ns) = open(&dir, &clock, small().retention(secs(then)));
        duplicate(&ns, b"k");
        clock.set(expiry);
        acquire(&ns, b"k").release().unwrap();
    }
}

#[test]
fn a_failed_window_extension_fails_the_claim_and_is_retried() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let cfg = sliding();
    {
        let (engine, ns) = open(&dir, &clock, cfg.clone());
        acquire(&ns, b"k").complete().unwrap();
        acquire(&ns, b"j").complete().unwrap();
        clock.set(T0 + 50_000); // covered by the first records (until 120 s)
        duplicate(&ns, b"k");
        duplicate(&ns, b"j");
        clock.set(T0 + 100_000); // a window to 160 s needs the records rewritten
        engine.debug_fail_store_writes(true);
        for key in [&b"k"[..], b"j"] {
            let e = ns.claim(key).unwrap_err();
            assert!(is_store_error(&e), "{e:?}");
        }
        engine.debug_fail_store_writes(false);
        clock.set(T0 + 105_000);
        // Tried again, and written.
        duplicate(&ns, b"k");
        // The failed sighting left j's window where the record holds it (the 50 s
        // sighting's, to 110 s in memory, 120 s on disk): over at 130 s.
        clock.set(T0 + 130_000);
        acquire(&ns, b"j").release().unwrap();
    }
    clock.set(T0 + 105_000 + 59_999);
    let (_engine, ns) = open(&dir, &clock, cfg);
    assert_eq!(duplicate(&ns, b"k").completed_at_ms(), T0);
}

#[test]
fn a_sighting_during_a_window_rewrite_does_not_outrun_the_record() {
    let (_dir, clock, engine, ns) = completed_k(sliding());
    clock.set(T0 + 50_000); // a window to 110 s, covered by the record (120 s)
    duplicate(&ns, b"k");
    clock.set(T0 + 100_000); // this sighting rewrites the record (to 240 s) ...
    let first = held_sighting(&engine, &ns, b"k");
    // ... a second one meanwhile moves the window on, to 161 s, counting on it ...
    clock.set(T0 + 101_000);
    duplicate(&ns, b"k");
    // ... and the rewrite fails.
    engine.debug_fail_store_writes(true);
    engine.debug_hold_completions(false);
    assert!(is_store_error(&first.join().unwrap().unwrap_err()));
    engine.debug_fail_store_writes(false);
    // The window is the 50 s sighting's again (to 110 s in memory, 120 s on disk):
    // both later sightings are undone, and nothing promises more than the disk holds.
    clock.set(T0 + 125_000);
    acquire(&ns, b"k").release().unwrap();
}

#[test]
fn a_key_whose_record_is_being_rewritten_is_not_evicted() {
    let (_dir, clock, engine, ns) = completed_k(sliding().max_keys(2).shards(1));
    clock.set(T0 + 100_000);
    let sighting = held_sighting(&engine, &ns, b"k");
    // A full hot tier drops done keys to make room, but not this one: a `forget`
    // must still find it and wait for the rewrite.
    let held = acquire(&ns, b"x");
    assert!(matches!(
        ns.claim(b"y"),
        Err(Error::CapacityExceeded { .. })
    ));
    assert_eq!(engine.stats().evictions, 0);
    engine.debug_hold_completions(false);
    assert!(sighting.join().unwrap().unwrap().is_duplicate());
    // Once written it may go: the next new key evicts it, and it is still a duplicate
    // from disk.
    acquire(&ns, b"y").complete().unwrap();
    assert_eq!(engine.stats().evictions, 1);
    drop(held);
    assert_eq!(duplicate(&ns, b"k").completed_at_ms(), T0);
}

#[test]
fn a_sliding_window_read_back_into_a_full_hot_tier_is_still_rewritten() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let cfg = sliding().max_keys(1).shards(1);
    {
        let (_engine, ns) = open(&dir, &clock, cfg.clone());
        acquire(&ns, b"k").complete().unwrap();
        // Past k's hot TTL, another key takes the only slot.
        clock.set(T0 + 70_000);
        acquire(&ns, b"d").complete().unwrap();
        // k is read from disk into the full hot tier: d (done) makes way, and k's
        // record is rewritten to cover the window to 160 s.
        clock.set(T0 + 100_000);
        duplicate(&ns, b"k");
    }
    clock.set(T0 + 159_999);
    let (_engine, ns) = open(&dir, &clock, cfg);
    assert_eq!(duplicate(&ns, b"k").completed_at_ms(), T0);
}

#[test]
fn a_sliding_window_with_a_coarse_tick_is_rewritten_in_time() {
    // TTL and retention 1 s on 10 ms ticks, completed 3 ms into a tick: the hot
    // deadline, rounded up to a tick (1.010 s), lies past the record's expiry
    // (1.003 s), which must not count as covering a period more.
    let dir = TempDir::new();
    let clock = ManualClock::new(T0 + 5);
    let cfg = small()
        .ttl(secs(1))
        .retention(secs(1))
        .extend_on_duplicate(true);
    let open_coarse = |clock: &ManualClock| {
        let engine = builder(&dir, clock)
            .tick(ms(10))
            .namespace("ns", cfg.clone())
            .build()
            .unwrap();
        let ns = engine.namespace("ns").unwrap();
        (engine, ns)
    };
    {
        let (_engine, ns) = open_coarse(&clock);
        clock.set(T0 + 8);
        acquire(&ns, b"k").complete().unwrap();
        clock.set(T0 + 8 + 900); // the window now runs to 1.9 s: past the record
        duplicate(&ns, b"k");
    }
    clock.set(T0 + 8 + 1_500);
    let (_engine, ns) = open_coarse(&clock);
    assert_eq!(duplicate(&ns, b"k").completed_at_ms(), T0 + 8);
}

#[test]
fn a_rewrite_never_shortens_a_record_after_the_clock_is_set_back() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let cfg = sliding();
    {
        let (_engine, ns) = open(&dir, &clock, cfg.clone());
        acquire(&ns, b"k").complete().unwrap();
        // Sightings to 500 s carry the record to 600 s.
        keep_sighting(&ns, &clock, 10);
    }
    // The clock is set back across the restart, to 130 s. Read back, the window runs
    // to 190 s, which the record covers; the hot tier reckons from the completion
    // time that the record holds to 240 s only.
    clock.set(T0 + 130_000);
    let (engine, ns) = open(&dir, &clock, cfg);
    duplicate(&ns, b"k");
    clock.set(T0 + 180_000);
    duplicate(&ns, b"k");
    // This sighting's window (to 290 s) passes 240 s: a rewrite to 360 s would cut the
    // record's 600 s short. The record is read, found longer, and left alone.
    let writes = engine.stats().durable_writes;
    clock.set(T0 + 230_000);
    duplicate(&ns, b"k");
    assert_eq!(engine.stats().durable_writes, writes);
    // Long after the hot entry ended (290 s), past 360 s: still the record's duplicate.
    clock.set(T0 + 400_000);
    engine.run_maintenance();
    assert_eq!(engine.stats().resident_keys, 0);
    assert_eq!(duplicate(&ns, b"k").completed_at_ms(), T0);
}

#[test]
fn a_rewrite_replaces_a_corrupt_record_from_the_hot_tier() {
    let (dir, clock, engine, ns) = completed_k(sliding());
    keep_sighting(&ns, &clock, 1); // at 50 s: the window runs to 110 s
    ns.debug_corrupt_record(b"k").unwrap();
    // The sighting at 100 s needs the record to last to 160 s: the read before the
    // rewrite finds garbage, and the rewrite replaces it with what the hot tier holds.
    clock.set(T0 + 100_000);
    assert_eq!(duplicate(&ns, b"k").completed_at_ms(), T0);
    drop((engine, ns));
    // Past the first retention (120 s), after a restart: the rewritten record answers.
    clock.set(T0 + 150_000);
    let (_engine, ns) = open(&dir, &clock, sliding());
    assert_eq!(duplicate(&ns, b"k").completed_at_ms(), T0);
}

#[test]
fn a_failed_read_before_a_rewrite_follows_the_failure_policy() {
    let is_read_error = |e: &Error| matches!(e, Error::Store(s) if s.operation() == "read");
    // Failing closed: the claim returns the error, and the next sighting rewrites.
    let (_dir, clock, engine, ns) = completed_k(sliding());
    keep_sighting(&ns, &clock, 1); // at 50 s: the window runs to 110 s
    engine.debug_fail_store_reads(true);
    let writes = engine.stats().durable_writes;
    // The sighting at 100 s needs the record to last to 160 s.
    clock.set(T0 + 100_000);
    let err = ns.claim(b"k").unwrap_err();
    assert!(is_read_error(&err), "{err:?}");
    engine.debug_fail_store_reads(false);
    assert_eq!(engine.stats().durable_writes, writes);
    duplicate(&ns, b"k");
    assert_eq!(engine.stats().durable_writes, writes + 1);
    // Failing open: the duplicate is answered from the hot tier, and nothing is
    // written blind over a record that might last longer.
    let (_dir, clock, engine, ns) = completed_k(sliding().on_store_error(FailurePolicy::FailOpen));
    keep_sighting(&ns, &clock, 1);
    engine.debug_fail_store_reads(true);
    let writes = engine.stats().durable_writes;
    clock.set(T0 + 100_000);
    assert_eq!(duplicate(&ns, b"k").completed_at_ms(), T0);
    let s = engine.stats();
    assert_eq!(s.durable_writes, writes);
    assert_eq!(s.fail_open_decisions, 1);
}

#[test]
fn a_failed_rewrite_of_a_key_read_back_from_disk_leaves_it_on_disk_only() {
    let (_dir, clock, engine, ns) = completed_k(sliding());
    clock.set(T0 + 100_000); // past the hot TTL: read back, and the window needs 160 s
    engine.run_maintenance();
    assert_eq!(engine.stats().resident_keys, 0);
    engine.debug_fail_store_writes(true);
    assert!(is_store_error(&ns.claim(b"k").unwrap_err()));
    engine.debug_fail_store_writes(false);
    // The entry the read placed is gone again: nothing holds the window past the
    // record's 120 s.
    assert_eq!(engine.stats().resident_keys, 0);
    clock.set(T0 + 130_000);
    acquire(&ns, b"k").release().unwrap();
}

#[test]
fn a_sliding_window_read_back_into_a_hot_tier_full_of_claims_is_answered_from_its_record() {
    let cfg = sliding().max_keys(1).shards(1).lease(secs(60));
    let (_dir, clock, engine, ns) = completed_k(cfg);
    clock.set(T0 + 70_000);
    let held = acquire(&ns, b"x"); // the only slot, held past 100 s: nothing to evict
    clock.set(T0 + 100_000);
    let done = duplicate(&ns, b"k");
    // As the record stands (its window not restarted: no entry to rewrite it from).
    assert_eq!(done.completed_at_ms(), T0);
    assert_eq!(done.expires_at_ms(), T0 + 120_000);
    assert_eq!(engine.stats().resident_keys, 1);
    drop(held);
}

#[test]
fn a_forget_racing_a_window_extension_takes_effect_after_it() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let cfg = sliding();
    let (engine, ns) = open(&dir, &clock, cfg.clone());
    acquire(&ns, b"k").complete().unwrap();
    clock.set(T0 + 100_000); // this sighting rewrites the record
    let sighting = held_sighting(&engine, &ns, b"k");
    let forgetter = {
        let ns = ns.clone();
        std::thread::spawn(move || ns.forget(b"k"))
    };
    while ns.debug_forget_waits() == 0 && !forgetter.is_finished() {
        std::thread::yield_now();
    }
    engine.debug_hold_completions(false);
    assert!(sighting.join().unwrap().unwrap().is_duplicate());
    assert!(forgetter.join().unwrap().unwrap());
    assert!(
        ns.debug_forget_waits() >= 1,
        "the forget waited for the rewrite"
    );
    // Forgotten after the rewrite: gone from both tiers, after a restart too.
    assert!(ns.check(b"k").unwrap().is_none());
    drop((ns, engine));
    let (_engine, ns) = open(&dir, &clock, cfg);
    acquire(&ns, b"k").release().unwrap();
}

#[test]
fn done_records_on_disk_carry_a_bloom_filter() {
    // A point read of a present key then probes only the files that may hold it: the
    // read of every key past its hot TTL, and of every key after a restart.
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    {
        let (engine, ns) = open(&dir, &clock, small());
        for i in 0..1_000u64 {
            acquire(&ns, key(i).as_bytes()).complete().unwrap();
        }
        engine.compact_store().unwrap();
    }
    let db = raw_db(&dir);
    let props = db
        .property_value_cf(
            db.cf_handle("done:ns").unwrap(),
            "rocksdb.aggregated-table-properties",
        )
        .unwrap()
        .expect("the done family has table files");
    let filter = props
        .split(';')
        .find_map(|p| p.trim().strip_prefix("filter block size="))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .expect("a filter block size property");
    // About 10 bits a key (prefixes only: a whole-key filter beside them would double
    // it).
    assert!((1_000..2_000).contains(&filter), "{props}");
}

// 3. The seed.

#[test]
fn the_seed_is_stored_and_a_different_fixed_seed_is_refused() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    {
        let engine = builder(&dir, &clock)
            .seed(42)
            .namespace("ns", small())
            .build()
            .unwrap();
        acquire(&engine.namespace("ns").unwrap(), b"k")
            .complete()
            .unwrap();
    }
    assert_eq!(stored_seed(&raw_db(&dir)), 42);
    let err = builder(&dir, &clock)
        .seed(43)
        .namespace("ns", small())
        .build()
        .unwrap_err();
    assert!(
        matches!(&err, Error::InvalidConfig { namespace, .. } if namespace.is_empty()),
        "{err:?}"
    );
    // The refusal closed the database and changed nothing: without a seed, and with
    // the stored one, the engine opens and the key is a duplicate.
    {
        let (_engine, ns) = open(&dir, &clock, small());
        duplicate(&ns, b"k");
    }
    let engine = builder(&dir, &clock)
        .seed(42)
        .namespace("ns", small())
        .build()
        .unwrap();
    duplicate(&engine.namespace("ns").unwrap(), b"k");
    drop(engine);
    assert_eq!(stored_seed(&raw_db(&dir)), 42);
}

#[test]
fn a_random_seed_is_kept_across_restarts() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    {
        let (_engine, ns) = open(&dir, &clock, small());
        acquire(&ns, b"k").complete().unwrap();
    }
    let seed = stored_seed(&raw_db(&dir));
    // Drawn at random: another fresh database draws another seed.
    let other = TempDir::new();
    drop(open(&other, &clock, small()));
    assert_ne!(
        stored_seed(&raw_db(&other)),
        seed,
        "the seed is drawn, not fixed"
    );
    // A restart without a seed keeps the stored one: the key is still a duplicate.
    {
        let (_engine, ns) = open(&dir, &clock, small());
        duplicate(&ns, b"k");
    }
    assert_eq!(stored_seed(&raw_db(&dir)), seed);
    // A fixed seed equal to the stored one is accepted; any other is refused.
    let err = builder(&dir, &clock)
        .seed(seed ^ 1)
        .namespace("ns", small())
        .build()
        .unwrap_err();
    assert!(matches!(err, Error::InvalidConfig { .. }), "{err:?}");
    let engine = builder(&dir, &clock)
        .seed(seed)
        .namespace("ns", small())
        .build()
        .unwrap();
    duplicate(&engine.namespace("ns").unwrap(), b"k");
}

// 4. One engine per directory.

#[test]
fn a_second_engine_on_an_open_directory_is_refused() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let (engine, ns) = open(&dir, &clock, small());
    let already_open = Error::AlreadyOpen {
        path: dir.path().to_path_buf(),
    };
    let second = || {
        builder(&dir, &clock)
            .namespace("ns", small())
            .build()
            .unwrap_err()
    };
    assert_eq!(second(), already_open);
    // A namespace handle that outlives its engine keeps the database open, and works.
    drop(engine);
    assert_eq!(second(), already_open);
    acquire(&ns, b"k").complete().unwrap();
    drop(ns);
    let (_engine, ns) = open(&dir, &clock, small());
    duplicate(&ns, b"k");
}

/// The child half of the next test: opens the directory it is given and holds it
/// until its standard input closes.
fn hold_directory_for_parent(dir: &std::ffi::OsStr) {
    let engine = Engine::builder()
        .maintenance_interval(None)
        .durable(dir)
        .namespace("ns", small())
        .build()
        .expect("the child opens the directory");
    println!("holding");
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut std::io::stdin(), &mut rest);
    drop(engine);
}

#[test]
fn a_directory_another_process_holds_is_refused_as_already_open() {
    const HOLD: &str = "IDEM_TEST_HOLD_DIRECTORY";
    if let Some(dir) = std::env::var_os(HOLD) {
        return hold_directory_for_parent(&dir);
    }
    use std::io::BufRead;
    use std::process::{Command, Stdio};
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    drop(open(&dir, &clock, small()));
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "a_directory_another_process_holds_is_refused_as_already_open",
            "--exact",
            "--nocapture",
            // On one test thread, libtest starts the line of the test's name first.
            "--test-threads",
            "2",
        ])
        .env(HOLD, dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the test binary runs again");
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok);
    assert!(
        lines.any(|l| l.ends_with("holding")),
        "the child opened the directory"
    );
    let refused = builder(&dir, &clock)
        .namespace("ns", small())
        .build()
        .unwrap_err();
    assert_eq!(
        refused,
        Error::AlreadyOpen {
            path: dir.path().to_path_buf()
        }
    );
    drop(child.stdin.take());
    let rest: Vec<String> = lines.collect();
    assert!(child.wait().unwrap().success(), "{rest:?}");
    drop(open(&dir, &clock, small()));
}

/// A child process forked while the engine was open, and still alive (as one is
/// between a spawn's fork and its exec): it holds copies of this process's
/// descriptors, the directory's among them.
struct ForkedChild(libc::pid_t);

impl ForkedChild {
    #[allow(unsafe_code)]
    fn fork() -> ForkedChild {
        // SAFETY: the child only waits for signals until it is killed: `pause` is
        // async-signal-safe, so the threads it did not inherit hold nothing it needs.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            loop {
                // SAFETY: as above.
                unsafe { libc::pause() };
            }
        }
        ForkedChild(pid)
    }
}

impl Drop for ForkedChild {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        // SAFETY: signals and reaps this process's own child.
        unsafe {
            libc::kill(self.0, libc::SIGKILL);
            libc::waitpid(self.0, std::ptr::null_mut(), 0);
        }
    }
}

#[test]
fn a_closed_directory_reopens_while_a_child_forked_during_its_open_lives_on() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let (engine, ns) = open(&dir, &clock, small());
    acquire(&ns, b"k").complete().unwrap();
    let child = ForkedChild::fork();
    drop((engine, ns));
    // The child's copy of the directory's descriptor does not keep this process's
    // lock on it.
    let reopened = builder(&dir, &clock).namespace("ns", small()).build();
    drop(child);
    let engine = reopened.expect("reopening the closed directory");
    duplicate(&engine.namespace("ns").unwrap(), b"k");
}

#[test]
fn a_lock_file_that_cannot_be_opened_is_a_store_error_not_another_user() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let (engine, ns) = open(&dir, &clock, small());
    acquire(&ns, b"k").complete().unwrap();
    drop((engine, ns));
    // Something in the LOCK file's place: not another process holding the database.
    let lock = dir.path().join("LOCK");
    std::fs::remove_file(&lock).unwrap();
    std::fs::create_dir(&lock).unwrap();
    let refused = builder(&dir, &clock)
        .namespace("ns", small())
        .build()
        .unwrap_err();
    assert!(matches!(refused, Error::Store(_)), "{refused:?}");
    std::fs::remove_dir(&lock).unwrap();
    let (_engine, ns) = open(&dir, &clock, small());
    duplicate(&ns, b"k");
}

#[test]
fn a_path_that_is_not_utf8_is_refused_before_anything_is_made() {
    use std::os::unix::ffi::OsStrExt;
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let bad = dir.path().join(std::ffi::OsStr::from_bytes(b"db\xff"));
    let invalid =
        |e: Error| matches!(e, Error::InvalidConfig { ref namespace, .. } if namespace.is_empty());
    let refused = Engine::builder()
        .clock(clock.clone())
        .durable(&bad)
        .namespace("ns", small())
        .build()
        .unwrap_err();
    assert!(invalid(refused.clone()), "{refused:?}");
    assert!(invalid(idem::namespaces(&bad).unwrap_err()));
    assert!(invalid(idem::stored_config(&bad, "ns").unwrap_err()));
    // Neither the path as given nor RocksDB's lossy spelling of it was made.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn a_directory_open_under_another_spelling_of_its_path_is_refused() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let link = dir.path().with_extension("link");
    std::os::unix::fs::symlink(dir.path(), &link).unwrap();
    let by = |path: &Path| {
        Engine::builder()
            .clock(clock.clone())
            .maintenance_interval(None)
            .durable(path)
            .namespace("ns", small())
    };
    // A first open that makes the directory and its parent registers it too.
    {
        let other = TempDir::new();
        let nested = other.path().join("a").join("b");
        let _engine = by(&nested).build().expect("opening a new nested directory");
        let refused = by(&nested.join(".")).build().unwrap_err();
        assert_eq!(
            refused,
            Error::AlreadyOpen {
                path: nested.join(".")
            }
        );
    }
    let aliases = [
        dir.path().join("."),
        PathBuf::from(format!("{}/", dir.path().display())),
        dir.path().join("..").join(dir.path().file_name().unwrap()),
        link.clone(),
    ];
    {
        let (_engine, ns) = open(&dir, &clock, small());
        acquire(&ns, b"before").complete().unwrap();
        for alias in &aliases {
            let refused = by(alias).build().unwrap_err();
            assert_eq!(
                refused,
                Error::AlreadyOpen {
                    path: alias.clone()
                },
                "{alias:?}"
            );
        }
        // The refusals took nothing from the open engine.
        acquire(&ns, b"after").complete().unwrap();
    }
    // Closed, it opens under any of them, with everything written.
    for alias in &aliases {
        let engine = by(alias).build().expect("opening through an alias");
        let ns = engine.namespace("ns").unwrap();
        duplicate(&ns, b"before");
        duplicate(&ns, b"after");
    }
    std::fs::remove_file(link).unwrap();
}

#[test]
fn an_open_refused_after_the_database_opened_leaves_the_stored_settings_as_they_were() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let week = secs(7 * 86_400);
    drop(open(&dir, &clock, small().retention(week)));
    // The new claim-marker journal cannot be made: a directory is in its way.
    let journal = dir.path().join(format!(
        "idem-journal-{:016x}.bin.new",
        xxhash_rust::xxh3::xxh3_64(b"ns")
    ));
    std::fs::create_dir(&journal).unwrap();
    let refused = builder(&dir, &clock)
        .namespace("ns", small().retention(secs(3_600)))
        .build()
        .unwrap_err();
    assert!(matches!(refused, Error::Store(_)), "{refused:?}");
    // Before, the refused open had stored its hour: the dead-letter tools would
    // then have written records that expire a week early.
    let stored = idem::stored_config(dir.path(), "ns").unwrap().unwrap();
    assert_eq!(stored.get_retention(), week);
    // An open that succeeds stores its settings.
    std::fs::remove_dir(&journal).unwrap();
    drop(open(&dir, &clock, small().retention(secs(3_600))));
    let stored = idem::stored_config(dir.path(), "ns").unwrap().unwrap();
    assert_eq!(stored.get_retention(), secs(3_600));
}

/// An open that adds a namespace and is refused after RocksDB opened (here its new
/// journal cannot be made) leaves no column family of that namespace: later opens
/// do not find it as a namespace the database holds unconfigured. (Before, the
/// refused open's `done:`, `claims:` and `dlq:` families stayed, and every later
/// open listed and warned about the namespace.) Nor does it write the stamp the
/// database lacked: only an open that succeeds does. (Before, the store's open
/// wrote it, whatever refused the engine's open later.)
#[test]
fn an_open_refused_after_the_database_opened_adds_no_namespace() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    drop(open(&dir, &clock, small()));
    let before = column_families(&dir);
    // Without a stamp (a database of a build before stamps): a refused open writes
    // none either.
    std::fs::remove_file(dir.path().join(STAMP)).unwrap();
    let blocked = dir.path().join(format!(
        "idem-journal-{:016x}.bin.new",
        xxhash_rust::xxh3::xxh3_64(b"fresh")
    ));
    std::fs::create_dir(&blocked).unwrap();
    let refused = builder(&dir, &clock)
        .namespace("ns", small())
        .namespace("fresh", small())
        .build()
        .unwrap_err();
    assert!(matches!(refused, Error::Store(_)), "{refused:?}");
    std::fs::remove_dir(&blocked).unwrap();
    assert_eq!(column_families(&dir), before);
    assert_eq!(read_stamp(&dir), None, "the refused open wrote no stamp");
    assert_eq!(idem::namespaces(dir.path()).unwrap(), ["ns"]);
    let (engine, ns) = open(&dir, &clock, small());
    assert!(
        engine.unconfigured_namespaces().is_empty(),
        "{:?}",
        engine.unconfigured_namespaces()
    );
    acquire(&ns, b"k").complete().unwrap();
    drop((ns, engine));
    assert!(
        read_stamp(&dir).is_some(),
        "the open that succeeded stamped it"
    );
    // Opened as it was meant to, the namespace is made as any new one.
    let engine = builder(&dir, &clock)
        .namespace("ns", small())
        .namespace("fresh", small())
        .build()
        .unwrap();
    duplicate(&engine.namespace("ns").unwrap(), b"k");
    acquire(&engine.namespace("fresh").unwrap(), b"k");
}

/// The files of the database in `dir` that hold its data, with their length and a
/// hash of their bytes: every file but RocksDB's own bookkeeping, which any
/// read-write open rewrites (its `CURRENT`, manifests, options files, write-ahead
/// logs, `LOCK` and `LOG`s).
fn data_files(dir: &TempDir) -> Vec<(String, usize, u128)> {
    let mut files: Vec<(String, usize, u128)> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let bookkeeping = ["CURRENT", "LOCK", "LOG"].contains(&name.as_str())
                || ["MANIFEST-", "OPTIONS-", "LOG.old."]
                    .iter()
                    .any(|p| name.starts_with(p))
                || name.ends_with(".log");
            if bookkeeping {
                return None;
            }
            let bytes = std::fs::read(e.path()).unwrap();
            Some((name, bytes.len(), xxhash_rust::xxh3::xxh3_128(&bytes)))
        })
        .collect();
    files.sort();
    files
}

/// An open refused inside the store's own open, after RocksDB opened the database
/// read-write, adds no column family to it: here the stamp vouches for the fixed
/// seed asked for, so the database is opened, and its own metadata, which holds
/// another seed, refuses it. The families of the new namespace and state family
/// are made only once nothing there can refuse the open. Before, RocksDB's open
/// made them, and that refusal left them in the database: every later open listed
/// the namespace as one it holds unconfigured.
#[test]
fn an_open_refused_by_the_metadata_after_the_database_opened_adds_no_column_family() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    {
        let (_engine, ns) = open_seeded(&dir, &clock, small());
        acquire(&ns, b"k").complete().unwrap();
    }
    // Opened once more, so that the metadata and settings the first open wrote are
    // flushed from the log (the shutdown's flush leaves out the default family), and
    // the refused open's recovery has nothing to write into a table file.
    drop(open_seeded(&dir, &clock, small()));
    // The journals (empty after a clean close) say the seed too: without them, a
    // stamp of seed 4 is all there is to believe before the read-write open.
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let path = e.unwrap().path();
        if path.to_string_lossy().contains("idem-journal-") {
            std::fs::remove_file(path).unwrap();
        }
    }
    write_stamp(&dir, FORMAT, 4);
    let families = column_families(&dir);
    let data = data_files(&dir);
    let refused = builder(&dir, &clock)
        .seed(4)
        .namespace("ns", small())
        .namespace("fresh", small())
        .state_family("ledger")
        .build()
        .unwrap_err();
    assert!(
        matches!(refused, Error::InvalidConfig { .. }),
        "{refused:?}"
    );
    assert_eq!(column_families(&dir), families);
    assert_eq!(data_files(&dir), data, "the data files, byte for byte");
    assert_eq!(idem::namespaces(dir.path()).unwrap(), ["ns"]);
    // Opened with its own seed, it is as it was.
    let (engine, ns) = open_seeded(&dir, &clock, small());
    assert!(engine.unconfigured_namespaces().is_empty());
    duplicate(&ns, b"k");
}

#[test]
fn a_leaked_claim_guard_keeps_the_database_open() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let (engine, ns) = open(&dir, &clock, small());
    std::mem::forget(acquire(&ns, b"leaked"));
    drop(ns);
    drop(engine);
    // Its lease running out changes nothing: nothing ends its count.
    clock.advance(std::time::Duration::from_secs(3_600));
    assert_still_open(&dir, &clock);
}

/// Checks that an open of the database in `dir` is refused as already open.
fn assert_still_open(dir: &TempDir, clock: &ManualClock) {
    assert_eq!(
        builder(dir, clock)
            .namespace("ns", small())
            .build()
            .unwrap_err(),
        Error::AlreadyOpen {
            path: dir.path().to_path_buf(),
        }
    );
}

#[test]
fn a_claim_guard_that_outlives_every_handle_keeps_the_database_open_until_it_ends() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let (engine, ns) = open(&dir, &clock, small());
    let guards = [b"done", b"gone", b"drop", b"lost"].map(|k| acquire(&ns, k));
    drop(ns);
    drop(engine);
    let still_open = || assert_still_open(&dir, &clock);
    let [done, gone, dropped, lost] = guards;
    done.complete().unwrap();
    still_open();
    gone.release().unwrap();
    still_open();
    drop(dropped);
    still_open();
    // Past its lease: refused, and the database closes with it, the last guard.
    clock.advance(std::time::Duration::from_secs(6));
    assert_eq!(lost.complete(), Err(Error::LeaseLost));
    let (_engine, ns) = open(&dir, &clock, small());
    duplicate(&ns, b"done");
    for k in [&b"gone"[..], b"drop", b"lost"] {
        acquire(&ns, k).complete().unwrap();
    }
}

// 5. Incompatible formats.

#[test]
fn another_format_version_is_refused() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    {
        let (_engine, ns) = open(&dir, &clock, small());
        acquire(&ns, b"k").complete().unwrap();
    }
    let seed = {
        let db = raw_db(&dir);
        assert_eq!(
            db.get(b"idem/format").unwrap(),
            Some(FORMAT.to_le_bytes().to_vec())
        );
        db.put(b"idem/format", 2u32.to_le_bytes()).unwrap();
        let seed = db.get(b"idem/seed").unwrap().unwrap();
        u64::from_le_bytes(seed.try_into().unwrap())
    };
    assert_eq!(
        read_stamp(&dir),
        Some((FORMAT, seed)),
        "the open stamped it"
    );
    // As a build of format 2 would leave it: refused from the stamp alone, before
    // anything is opened.
    write_stamp(&dir, 2, seed);
    let refused = |dir: &TempDir| {
        let files = listing(dir);
        assert_refused_finding(dir, &clock, Some(2));
        // Nothing was written: no manifest, options file or flushed table (a
        // read-write open writes all three).
        assert_eq!(listing(dir), files);
        // Nor is a namespace the database does not have yet added to it first.
        let families = column_families(dir);
        let err = builder(dir, &clock)
            .namespace("ns", small())
            .namespace("new", small())
            .build()
            .unwrap_err();
        assert!(
            matches!(err, Error::IncompatibleFormat { found: Some(2), .. }),
            "{err:?}"
        );
        assert_eq!(column_families(dir), families);
        assert_eq!(listing(dir), files);
    };
    refused(&dir);
    // Without a stamp (a build before stamps): refused from a read-only look at the
    // database's own metadata, still with nothing written.
    std::fs::remove_file(dir.path().join(STAMP)).unwrap();
    refused(&dir);
    // Nor is a stamp of this version believed beside another database's files (its
    // IDENTITY differs): the same read-only look refuses it.
    write_stamp_of(&dir, FORMAT, seed, identity(&dir) ^ 1);
    refused(&dir);
    std::fs::remove_file(dir.path().join(STAMP)).unwrap();
    // The refusals changed nothing: version 2 is still there; restoring version 1
    // brings the data back, and the open stamps the database again.
    {
        let db = raw_db(&dir);
        assert_eq!(
            db.get(b"idem/format").unwrap(),
            Some(2u32.to_le_bytes().to_vec())
        );
        db.put(b"idem/format", FORMAT.to_le_bytes()).unwrap();
    }
    {
        let (_engine, ns) = open(&dir, &clock, small());
        duplicate(&ns, b"k");
    }
    assert_eq!(read_stamp(&dir), Some((FORMAT, seed)));
    // (A stamp that disagrees with the database's own metadata is not believed:
    // `a_stamp_that_disagrees_with_the_database_is_checked_against_it_not_believed`.)
}

/// The database's stamp file (`idem-format.bin`: magic, format version, seed, the
/// xxh3-64 of RocksDB's `IDENTITY` file, and the xxh3-64 of the first 32 bytes).
const STAMP: &str = "idem-format.bin";

/// The xxh3-64 of the `IDENTITY` file of the database in `dir`.
fn identity(dir: &TempDir) -> u64 {
    xxhash_rust::xxh3::xxh3_64(&std::fs::read(dir.path().join("IDENTITY")).unwrap())
}

/// Writes a stamp of `format`, `seed` and `identity` for the database in `dir`.
fn write_stamp_of(dir: &TempDir, format: u32, seed: u64, identity: u64) {
    let mut b = [0u8; 40];
    b[..8].copy_from_slice(b"IDEMSTMP");
    b[8..12].copy_from_slice(&format.to_le_bytes());
    b[16..24].copy_from_slice(&seed.to_le_bytes());
    b[24..32].copy_from_slice(&identity.to_le_bytes());
    let check = xxhash_rust::xxh3::xxh3_64(&b[..32]);
    b[32..].copy_from_slice(&check.to_le_bytes());
    std::fs::write(dir.path().join(STAMP), b).unwrap();
}

#[cfg(target_os = "linux")]
#[test]
fn a_stamp_that_disagrees_with_the_database_is_checked_against_it_not_believed() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    {
        let (_engine, ns) = open_seeded(&dir, &clock, small());
        acquire(&ns, b"k").complete().unwrap();
    }
    assert_eq!(read_stamp(&dir), Some((FORMAT, 3)));
    // Stamps of this database's identity that do not say what its metadata says
    // (another seed, another version), as a stale stamp beside restored files
    // would: the database's own metadata is read, and it opens.
    for (format, seed) in [(FORMAT, 4), (2, 3)] {
        write_stamp(&dir, format, seed);
        let (engine, ns) = open_seeded(&dir, &clock, small());
        duplicate(&ns, b"k");
        drop(engine);
        assert_eq!(read_stamp(&dir), Some((FORMAT, 3)), "stamped again");
    }
}

/// Writes a stamp of `format` and `seed` for the database in `dir` (its identity).
fn write_stamp(dir: &TempDir, format: u32, seed: u64) {
    write_stamp_of(dir, format, seed, identity(dir));
}

/// The format version and seed of the stamp in `dir`, if it is there, whole and of
/// this database.
fn read_stamp(dir: &TempDir) -> Option<(u32, u64)> {
    let b = std::fs::read(dir.path().join(STAMP)).ok()?;
    let word = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    (b.len() == 40
        && &b[..8] == b"IDEMSTMP"
        && word(32) == xxhash_rust::xxh3::xxh3_64(&b[..32])
        && word(24) == identity(dir))
    .then(|| (u32::from_le_bytes(b[8..12].try_into().unwrap()), word(16)))
}

/// Opening an engine on `dir` is refused: the database is not idem's.
fn assert_refused_as_foreign(dir: &TempDir, clock: &ManualClock) {
    assert_refused_finding(dir, clock, None);
}

/// Opening an engine with namespace "ns" on `dir` is refused as a database of
/// format version `found` (`None`: not idem's).
fn assert_refused_finding(dir: &TempDir, clock: &ManualClock, found: Option<u32>) {
    let err = builder(dir, clock)
        .namespace("ns", small())
        .build()
        .unwrap_err();
    assert_eq!(
        err,
        Error::IncompatibleFormat {
            path: dir.path().to_path_buf(),
            found,
            supported: FORMAT,
        }
    );
}

/// A RocksDB database in `dir` that is not idem's: one column family `family`
/// holding alice's row.
fn foreign_database(dir: &TempDir, family: &str) -> rocksdb::DB {
    let mut opts = rocksdb::Options::default();
    opts.create_if_missing(true);
    opts.create_missing_column_families(true);
    let db = rocksdb::DB::open_cf(&opts, dir.path(), [family]).unwrap();
    db.put_cf(db.cf_handle(family).unwrap(), b"alice", b"1")
        .unwrap();
    db
}

#[test]
fn a_database_that_is_not_idems_is_refused_and_left_alone() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    foreign_database(&dir, "users")
        .put(b"version", b"7")
        .unwrap();
    assert_refused_as_foreign(&dir, &clock);
    assert_eq!(column_families(&dir), ["default", "users"]);
    let db = raw_db(&dir);
    assert_eq!(db.get(b"idem/format").unwrap(), None);
    assert_eq!(db.get(b"idem/seed").unwrap(), None);
    assert_eq!(
        entries(&db, "users"),
        vec![(b"alice".to_vec(), b"1".to_vec())]
    );
}

#[test]
fn a_foreign_database_with_only_the_default_family_is_refused_and_left_alone() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    {
        let mut opts = rocksdb::Options::default();
        opts.create_if_missing(true);
        let db = rocksdb::DB::open(&opts, dir.path()).unwrap();
        db.put(b"version", b"7").unwrap();
    }
    assert_refused_as_foreign(&dir, &clock);
    assert_eq!(column_families(&dir), ["default"]);
    let db = raw_db(&dir);
    assert_eq!(db.get(b"idem/format").unwrap(), None);
    assert_eq!(db.get(b"version").unwrap(), Some(b"7".to_vec()));
}

#[test]
fn an_empty_database_without_metadata_is_adopted() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    {
        let mut opts = rocksdb::Options::default();
        opts.create_if_missing(true);
        rocksdb::DB::open(&opts, dir.path()).unwrap();
    }
    let (_engine, ns) = open(&dir, &clock, small());
    acquire(&ns, b"k").complete().unwrap();
    duplicate(&ns, b"k");
    assert_eq!(raw_db_get_format(&dir), Some(FORMAT.to_le_bytes().to_vec()));
}

/// A RocksDB database in `dir` with namespace "ns"'s column families and none of
/// idem's metadata.
fn our_families_alone(dir: &TempDir) -> rocksdb::DB {
    let mut opts = rocksdb::Options::default();
    opts.create_if_missing(true);
    opts.create_missing_column_families(true);
    rocksdb::DB::open_cf(&opts, dir.path(), ["done:ns", "claims:ns", "dlq:ns"]).unwrap()
}

#[test]
fn our_empty_families_without_metadata_are_adopted() {
    // An open that crashed after creating the namespace's column families and before
    // writing the format and seed leaves exactly this.
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    drop(our_families_alone(&dir));
    let (_engine, ns) = open(&dir, &clock, small());
    acquire(&ns, b"k").complete().unwrap();
    duplicate(&ns, b"k");
    assert_eq!(raw_db_get_format(&dir), Some(FORMAT.to_le_bytes().to_vec()));
}

#[test]
fn our_families_with_records_but_no_metadata_are_refused() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    {
        let db = our_families_alone(&dir);
        db.put_cf(db.cf_handle("done:ns").unwrap(), b"x", b"y")
            .unwrap();
    }
    let err = builder(&dir, &clock)
        .namespace("ns", small())
        .build()
        .unwrap_err();
    assert!(matches!(err, Error::IncompatibleFormat { .. }), "{err:?}");
    // Nor does an open with another namespace add that namespace's families first.
    let families = column_families(&dir);
    let err = builder(&dir, &clock)
        .namespace("other", small())
        .build()
        .unwrap_err();
    assert!(matches!(err, Error::IncompatibleFormat { .. }), "{err:?}");
    assert_eq!(column_families(&dir), families);
}

#[test]
fn a_foreign_database_whose_family_names_hold_a_colon_is_refused_and_left_alone() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    drop(foreign_database(&dir, "app:users"));
    let files = listing(&dir);
    assert_refused_as_foreign(&dir, &clock);
    assert_eq!(listing(&dir), files);
    assert_eq!(column_families(&dir), ["app:users", "default"]);
}

/// The names and sizes of the files in `dir`.
fn listing(dir: &TempDir) -> Vec<(String, u64)> {
    let mut files: Vec<(String, u64)> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let len = e.metadata().unwrap().len();
            (e.file_name().to_string_lossy().into_owned(), len)
        })
        .collect();
    files.sort();
    files
}

#[test]
fn a_database_that_lost_its_current_file_is_refused_and_left_as_it_was() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    {
        let (engine, ns) = open(&dir, &clock, small());
        acquire(&ns, b"k").complete().unwrap();
        // Some records in a table file, the rest in the write-ahead log.
        engine.compact_store().unwrap();
        acquire(&ns, b"j").complete().unwrap();
    }
    let current = dir.path().join("CURRENT");
    let saved = std::fs::read(&current).unwrap();
    std::fs::remove_file(&current).unwrap();
    let before = listing(&dir);
    // Before, RocksDB made a new database over the files and deleted them.
    let err = builder(&dir, &clock)
        .namespace("ns", small())
        .build()
        .unwrap_err();
    assert!(
        matches!(&err, Error::Store(e) if e.to_string().contains("no readable database")),
        "{err:?}"
    );
    assert_eq!(listing(&dir), before);
    std::fs::write(&current, saved).unwrap();
    let (_engine, ns) = open(&dir, &clock, small());
    duplicate(&ns, b"k");
    duplicate(&ns, b"j");
}

/// Something other than a regular file where the open reads one of idem's files.
#[derive(Debug, Clone, Copy)]
enum NotAFile {
    Fifo,
    Directory,
    /// A link to `/dev/zero`, a device whose reads never end.
    DevZero,
}

/// Puts `kind` in place of the file at `path`.
#[cfg(unix)]
fn replace_with(path: &Path, kind: NotAFile) {
    std::fs::remove_file(path).unwrap();
    match kind {
        NotAFile::Fifo => {
            let made = std::process::Command::new("mkfifo")
                .arg(path)
                .status()
                .unwrap();
            assert!(made.success(), "mkfifo {}", path.display());
        }
        NotAFile::Directory => std::fs::create_dir(path).unwrap(),
        NotAFile::DevZero => std::os::unix::fs::symlink("/dev/zero", path).unwrap(),
    }
}

/// Builds an engine with namespace "ns" on a thread: the open's outcome, or a failed
/// test (not a hung one) if it has not returned within a minute.
fn open_within_a_minute(dir: &TempDir, clock: &ManualClock) -> Result<Engine, Error> {
    let (tx, rx) = std::sync::mpsc::channel();
    let (path, clock) = (dir.path().to_path_buf(), clock.clone());
    std::thread::spawn(move || {
        let opened = Engine::builder()
            .clock(clock)
            .maintenance_interval(None)
            .durable(path)
            .namespace("ns", small())
            .build();
        let _ = tx.send(opened);
    });
    rx.recv_timeout(std::time::Duration::from_secs(60))
        .expect("the open returned within a minute")
}

#[cfg(unix)]
#[test]
fn a_fifo_directory_or_device_in_place_of_idems_files_is_never_read() {
    use std::os::unix::fs::FileTypeExt;
    for kind in [NotAFile::Fifo, NotAFile::Directory, NotAFile::DevZero] {
        for file in ["journal", "stamp", "prefilter"] {
            let dir = TempDir::new();
            let clock = ManualClock::new(T0);
            {
                let (_engine, ns) = open(&dir, &clock, small());
                acquire(&ns, b"k").complete().unwrap();
                // A clean shutdown saves the prefilter.
            }
            let path = match file {
                "journal" => journal_of(&dir, "ns"),
                "stamp" => dir.path().join(STAMP),
                _ => dir.path().join(format!(
                    "idem-prefilter-{}.bin",
                    "ns".as_bytes()
                        .iter()
                        .map(|b| format!("{b:02x}"))
                        .collect::<String>()
                )),
            };
            replace_with(&path, kind);
            let what = format!("{kind:?} in place of the {file}");
            let opened = open_within_a_minute(&dir, &clock);
            if file == "journal" {
                // Refused as a journal of another build is, and left as it is.
                match opened {
                    Err(Error::IncompatibleFormat {
                        path: p,
                        found: None,
                        ..
                    }) => {
                        assert_eq!(p, path, "{what}")
                    }
                    other => panic!("{what}: {:?}", other.map(|_| ())),
                }
                let left = std::fs::symlink_metadata(&path).unwrap().file_type();
                match kind {
                    NotAFile::Fifo => assert!(left.is_fifo(), "{what}"),
                    NotAFile::Directory => assert!(left.is_dir(), "{what}"),
                    NotAFile::DevZero => assert!(left.is_symlink(), "{what}"),
                }
                // Moved aside, the database opens.
                if left.is_dir() {
                    std::fs::remove_dir(&path).unwrap();
                } else {
                    std::fs::remove_file(&path).unwrap();
                }
            } else {
                // A stamp counts as none (the database is checked the slow way); a
                // saved prefilter as stale (it is rebuilt).
                let engine = opened.unwrap_or_else(|e| panic!("{what}: {e:?}"));
                if file == "prefilter" {
                    let s = engine.stats();
                    assert_eq!((s.prefilter_loads, s.prefilter_rebuilds), (0, 1), "{what}");
                }
                duplicate(&engine.namespace("ns").unwrap(), b"k");
                drop(engine);
                if matches!(kind, NotAFile::Directory) {
                    std::fs::remove_dir(&path).unwrap();
                }
            }
            let (_engine, ns) = open(&dir, &clock, small());
            duplicate(&ns, b"k");
        }
    }
}

/// Closes `engine` on a thread: its outcome, or a failed test (not a hung one) if it
/// has not returned within a minute.
fn close_within_a_minute(engine: Engine) -> Result<(), Error> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(engine.close());
    });
    rx.recv_timeout(std::time::Duration::from_secs(60))
        .expect("the close returned within a minute")
}

#[cfg(target_os = "linux")]
#[test]
fn a_fifo_or_link_at_a_temporary_name_is_never_written_through() {
    // The names the stamp (written at an open that finds none), the saved prefilter
    // (at shutdown) and the journal (at every open) are made under before their
    // rename into place.
    let temporaries = |dir: &TempDir| {
        let mut journal = journal_of(dir, "ns").into_os_string();
        journal.push(".new");
        [
            dir.path().join("idem-format.tmp"),
            dir.path()
                .join(format!("idem-prefilter-{:02x}{:02x}.tmp", b'n', b's')),
            PathBuf::from(journal),
        ]
    };
    for link in [false, true] {
        for at in 0..3 {
            let dir = TempDir::new();
            let clock = ManualClock::new(T0);
            {
                let (_engine, ns) = open(&dir, &clock, small());
                acquire(&ns, b"k").complete().unwrap();
            }
            std::fs::remove_file(dir.path().join(STAMP)).unwrap();
            let tmp = temporaries(&dir)[at].clone();
            let outside = TempDir::new();
            let target = outside.path().join("someone-elses");
            std::fs::write(&target, b"not idem's").unwrap();
            if link {
                std::os::unix::fs::symlink(&target, &tmp).unwrap();
            } else {
                let made = std::process::Command::new("mkfifo")
                    .arg(&tmp)
                    .status()
                    .unwrap();
                assert!(made.success());
            }
            let what = format!(
                "{} at {}",
                if link { "a link" } else { "a FIFO" },
                tmp.display()
            );
            // Before, the open waited for ever on a FIFO at the stamp's or wrote
            // through a link there, and the shutdown on a saved prefilter's.
            let engine =
                open_within_a_minute(&dir, &clock).unwrap_or_else(|e| panic!("{what}: {e:?}"));
            duplicate(&engine.namespace("ns").unwrap(), b"k");
            close_within_a_minute(engine).unwrap_or_else(|e| panic!("{what}: {e:?}"));
            assert_eq!(std::fs::read(&target).unwrap(), b"not idem's", "{what}");
            assert!(dir.path().join(STAMP).exists(), "{what}");
            let (engine, ns) = open(&dir, &clock, small());
            duplicate(&ns, b"k");
            assert_eq!(engine.stats().prefilter_loads, 1, "{what}");
        }
    }
}

#[cfg(unix)]
#[test]
fn a_fifo_directory_or_device_in_place_of_rocksdbs_files_is_refused_before_rocksdb_reads_it() {
    for kind in [NotAFile::Fifo, NotAFile::Directory, NotAFile::DevZero] {
        for file in ["CURRENT", "IDENTITY"] {
            let dir = TempDir::new();
            let clock = ManualClock::new(T0);
            {
                let (_engine, ns) = open(&dir, &clock, small());
                acquire(&ns, b"k").complete().unwrap();
            }
            let path = dir.path().join(file);
            let saved = std::fs::read(&path).unwrap();
            replace_with(&path, kind);
            let what = format!("{kind:?} in place of {file}");
            let before = listing(&dir);
            let refused = |r: Result<(), Error>| match r {
                Err(Error::Store(e)) if e.to_string().contains("not a regular file") => {}
                other => panic!("{what}: {other:?}"),
            };
            refused(open_within_a_minute(&dir, &clock).map(|_| ()));
            refused(idem::inspect(dir.path(), T0).map(|_| ()));
            refused(idem::namespaces(dir.path()).map(|_| ()));
            assert_eq!(listing(&dir), before, "{what}");
            if matches!(kind, NotAFile::Directory) {
                std::fs::remove_dir(&path).unwrap();
            } else {
                std::fs::remove_file(&path).unwrap();
            }
            std::fs::write(&path, saved).unwrap();
            let (_engine, ns) = open(&dir, &clock, small());
            duplicate(&ns, b"k");
        }
    }
}

fn raw_db_get_format(dir: &TempDir) -> Option<Vec<u8>> {
    let db = rocksdb::DB::open_cf_for_read_only(
        &rocksdb::Options::default(),
        dir.path(),
        column_families(dir),
        false,
    )
    .unwrap();
    db.get(b"idem/format").unwrap()
}

// 6. A corrupt record.

#[test]
fn a_corrupt_record_is_reported_and_other_keys_still_work() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    {
        let (_engine, ns) = open(&dir, &clock, small());
        acquire(&ns, b"good").complete_with_result(b"ok").unwrap();
        acquire(&ns, b"bad").complete().unwrap();
    }
    let fp;
    {
        let db = raw_db(&dir);
        fp = fingerprint(b"bad", stored_seed(&db));
        let done = db.cf_handle("done:ns").unwrap();
        // The record is where the engine's layout says it is.
        assert!(db.get_cf(done, fp.to_be_bytes()).unwrap().is_some());
        db.put_cf(done, fp.to_be_bytes(), b"garbage").unwrap();
    }
    let corrupt = |e: &Error| {
        matches!(e, Error::CorruptRecord { namespace, fingerprint, reason }
            if namespace == "ns" && *fingerprint == fp && !reason.is_empty())
    };
    {
        let (engine, ns) = open(&dir, &clock, small());
        let err = ns.claim(b"bad").unwrap_err();
        assert!(corrupt(&err), "{err:?}");
        // Reported again, not cached or papered over; the key is not claimed.
        let err = ns.claim(b"bad").unwrap_err();
        assert!(corrupt(&err), "{err:?}");
        // A read-only check reports it too.
        let err = ns.check(b"bad").unwrap_err();
        assert!(corrupt(&err), "{err:?}");
        let s = engine.stats();
        assert_eq!(s.resident_keys, 0);
        assert_eq!(s.acquired, 0);
        assert_eq!(s.store_errors, 3);
        // Other keys are served.
        assert_eq!(duplicate(&ns, b"good").result(), Some(&b"ok"[..]));
        acquire(&ns, b"new").complete().unwrap();
        duplicate(&ns, b"new");
    }
    // Failing open does not paper over corruption either.
    {
        let (engine, ns) = open(
            &dir,
            &clock,
            small().on_store_error(FailurePolicy::FailOpen),
        );
        let err = ns.claim(b"bad").unwrap_err();
        assert!(corrupt(&err), "{err:?}");
        assert_eq!(engine.stats().fail_open_decisions, 0);
    }
    // Nothing else changed: the garbage is still there, no claim marker was left,
    // and the other records are intact.
    let db = raw_db(&dir);
    let done = db.cf_handle("done:ns").unwrap();
    assert_eq!(
        db.get_cf(done, fp.to_be_bytes()).unwrap(),
        Some(b"garbage".to_vec())
    );
    assert_eq!(entries(&db, "done:ns").len(), 3);
    assert!(entries(&db, "claims:ns").is_empty());
    drop(db);
    // Forgetting the key is how an operator clears the record: after it, the key is
    // claimable again.
    let (_engine, ns) = open(&dir, &clock, small());
    assert!(ns.forget(b"bad").unwrap(), "the corrupt record was removed");
    acquire(&ns, b"bad").complete().unwrap();
    duplicate(&ns, b"bad");
}

#[test]
fn an_expired_record_that_does_not_decode_is_reported_after_a_restart_prefilter_or_not() {
    for (prefilter, reopened_live) in [(true, false), (false, false), (true, true)] {
        let dir = TempDir::new();
        let clock = ManualClock::new(T0);
        let cfg = || small().prefilter(prefilter);
        {
            let (_engine, ns) = open(&dir, &clock, cfg());
            acquire(&ns, b"bad").complete().unwrap();
        }
        let fp;
        {
            let db = raw_db(&dir);
            fp = fingerprint(b"bad", stored_seed(&db));
            let done = db.cf_handle("done:ns").unwrap();
            let mut record = db.get_cf(done, fp.to_be_bytes()).unwrap().expect("stored");
            // A flag no version writes: the header (state, expiry) still reads.
            record[2] |= 0x80;
            db.put_cf(done, fp.to_be_bytes(), &record).unwrap();
        }
        // Far past the record's retention (7 TTLs by default): before the restart,
        // or (`reopened_live`) after it, the filter's generations dropped meanwhile.
        if !reopened_live {
            clock.advance(secs(3_600));
        }
        let (engine, ns) = open(&dir, &clock, cfg());
        if reopened_live {
            clock.advance(secs(3_600));
            engine.run_maintenance();
        }
        let err = ns.claim(b"bad").unwrap_err();
        assert!(
            matches!(&err, Error::CorruptRecord { fingerprint, .. } if *fingerprint == fp),
            "prefilter {prefilter}, reopened live {reopened_live}: {err:?}"
        );
        assert_eq!(engine.stats().acquired, 0, "prefilter {prefilter}");
    }
}

// 7. A failing disk.

#[test]
fn failing_writes_fail_closed_by_default() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    {
        let (engine, ns) = open(&dir, &clock, immediate());
        acquire(&ns, b"done-before").complete().unwrap();
        let held = acquire(&ns, b"held");
        let before = engine.stats();
        assert_eq!(before.resident_keys, 2);

        engine.debug_fail_store_writes(true);
        // A new claim is refused and leaves the key unclaimed, and the counters as
        // they were: nobody saw it acquired, nobody released it.
        let err = ns.claim(b"new").unwrap_err();
        assert!(is_store_error(&err), "{err:?}");
        assert_eq!(ns.check(b"new").unwrap(), None);
        assert_eq!(engine.stats().resident_keys, before.resident_keys);
        let s = engine.stats();
        assert_eq!((s.acquired, s.releases), (before.acquired, before.releases));
        // Reads still work.
        duplicate(&ns, b"done-before");
        // A completion is refused and releases the claim.
        let err = held.complete().unwrap_err();
        assert!(is_store_error(&err), "{err:?}");
        assert_eq!(ns.check(b"held").unwrap(), None);
        assert_eq!(engine.stats().resident_keys, before.resident_keys - 1);
        let err = ns.claim(b"held").unwrap_err();
        assert!(is_store_error(&err), "{err:?}");
        let s = engine.stats();
        assert_eq!(s.fail_open_decisions, 0);
        // One per refused operation: two claims, a completion, and the delete of
        // the marker of the claim the completion released (refused too). A refused
        // claim wrote no marker, so it has none to delete.
        assert_eq!(s.store_errors, 4, "{s:?}");
        assert_eq!(s.durable_writes, before.durable_writes + 4, "{s:?}");
        assert_eq!(s.completions, before.completions);

        engine.debug_fail_store_writes(false);
        acquire(&ns, b"new").complete().unwrap();
        acquire(&ns, b"held").complete_with_result(b"r").unwrap();
        duplicate(&ns, b"new");
        assert_eq!(duplicate(&ns, b"held").result(), Some(&b"r"[..]));
    }
    let (engine, ns) = open(&dir, &clock, immediate());
    assert!(engine.orphans().is_empty(), "{:?}", engine.orphans());
    duplicate(&ns, b"done-before");
    duplicate(&ns, b"new");
    assert_eq!(duplicate(&ns, b"held").result(), Some(&b"r"[..]));
}

#[test]
fn failing_writes_fail_open_on_request() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let cfg = immediate().on_store_error(FailurePolicy::FailOpen);
    {
        let (engine, ns) = open(&dir, &clock, cfg.clone());
        engine.debug_fail_store_writes(true);
        let g = acquire(&ns, b"k");
        g.complete_with_result(b"r").unwrap();
        assert_eq!(duplicate(&ns, b"k").result(), Some(&b"r"[..]));
        let s = engine.stats();
        assert_eq!(s.fail_open_decisions, 2); // the claim and the completion
        assert_eq!(s.store_errors, 2);
        assert_eq!(s.acquired, 1);
        assert_eq!(s.completions, 1);
        engine.debug_fail_store_writes(false);
        acquire(&ns, b"k2").complete().unwrap();
        assert_eq!(engine.stats().fail_open_decisions, 2);
    }
    // What was decided from the hot tier alone never reached the disk.
    let (_engine, ns) = open(&dir, &clock, cfg);
    acquire(&ns, b"k").complete().unwrap();
    duplicate(&ns, b"k2");
}

// 8. A namespace removed from the configuration.

#[test]
fn an_unconfigured_namespace_keeps_its_data_until_configured_again() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    {
        let engine = builder(&dir, &clock)
            .namespace("orders", small())
            .namespace("refunds", small())
            .build()
            .unwrap();
        assert_eq!(engine.unconfigured_namespaces(), &[] as &[String]);
        acquire(&engine.namespace("orders").unwrap(), b"o-1")
            .complete()
            .unwrap();
        acquire(&engine.namespace("refunds").unwrap(), b"r-1")
            .complete_with_result(b"refunded")
            .unwrap();
    }
    {
        let engine = builder(&dir, &clock)
            .namespace("orders", small())
            .build()
            .unwrap();
        assert_eq!(engine.unconfigured_namespaces(), ["refunds".to_owned()]);
        assert_eq!(
            engine.namespace("refunds").unwrap_err(),
            Error::UnknownNamespace("refunds".into())
        );
        assert_eq!(engine.namespace_names(), ["orders".to_owned()]);
        duplicate(&engine.namespace("orders").unwrap(), b"o-1");
    }
    assert_eq!(
        column_families(&dir),
        [
            "claims:orders",
            "claims:refunds",
            "default",
            "dlq:orders",
            "dlq:refunds",
            "done:orders",
            "done:refunds"
        ]
    );
    let engine = builder(&dir, &clock)
        .namespace("orders", small())
        .namespace("refunds", small())
        .build()
        .unwrap();
    assert_eq!(engine.unconfigured_namespaces(), &[] as &[String]);
    let done = duplicate(&engine.namespace("refunds").unwrap(), b"r-1");
    assert_eq!(done.result(), Some(&b"refunded"[..]));
    assert_eq!(done.completed_at_ms(), T0);
    duplicate(&engine.namespace("orders").unwrap(), b"o-1");
}

// 9. Co-commits.

#[test]
fn a_co_commit_stores_state_with_the_completion() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    {
        let (engine, ns) = open_ledger(&dir, &clock, small());
        let mut changes = StateChanges::new();
        assert!(changes.is_empty());
        changes
            .put("ledger", b"acct-1", b"10")
            .put("ledger", b"acct-2", b"5");
        acquire(&ns, b"pay-1")
            .complete_with(Some(b"r"), changes)
            .unwrap();
        assert_eq!(
            engine.read_state("ledger", b"acct-1").unwrap(),
            Some(b"10".to_vec())
        );
        assert_eq!(
            engine.read_state("ledger", b"acct-2").unwrap(),
            Some(b"5".to_vec())
        );
        assert_eq!(engine.read_state("ledger", b"acct-3").unwrap(), None);
        assert_eq!(duplicate(&ns, b"pay-1").result(), Some(&b"r"[..]));
        // Deletes too, and no result.
        let mut changes = StateChanges::new();
        changes
            .delete("ledger", b"acct-2")
            .put("ledger", b"acct-1", b"15");
        acquire(&ns, b"pay-2").complete_with(None, changes).unwrap();
        assert_eq!(duplicate(&ns, b"pay-2").result(), None);
    }
    let (engine, ns) = open_ledger(&dir, &clock, small());
    assert_eq!(
        engine.read_state("ledger", b"acct-1").unwrap(),
        Some(b"15".to_vec())
    );
    assert_eq!(engine.read_state("ledger", b"acct-2").unwrap(), None);
    assert_eq!(duplicate(&ns, b"pay-1").result(), Some(&b"r"[..]));
    assert_eq!(duplicate(&ns, b"pay-2").result(), None);
}

#[test]
fn a_forget_the_store_refuses_is_an_error_whatever_the_policy() {
    for policy in [FailurePolicy::FailClosed, FailurePolicy::FailOpen] {
        let dir = TempDir::new();
        let clock = ManualClock::new(T0);
        let (engine, ns) = open(&dir, &clock, small().on_store_error(policy));
        acquire(&ns, b"k").complete().unwrap();
        engine.debug_fail_store_writes(true);
        let err = ns.forget(b"k").unwrap_err();
        assert!(is_store_error(&err), "{policy:?}: {err:?}");
        assert_eq!(engine.stats().fail_open_decisions, 0, "{policy:?}");
        engine.debug_fail_store_writes(false);
        // Nothing was forgotten: the key is done in both tiers.
        assert!(ns.check(b"k").unwrap().is_some(), "{policy:?}");
        duplicate(&ns, b"k");
        drop((ns, engine));
        let (_engine, ns) = open(&dir, &clock, small().on_store_error(policy));
        duplicate(&ns, b"k");
    }
}

/// A forget reads the key's record first, for its answer. A key done on disk only
/// (past its hot TTL) whose read fails: failing closed, the read's error, and the key
/// is still done; failing open, the delete goes ahead and the answer is the hot
/// tier's (false), counted as a decision from the hot tier alone.
#[test]
fn a_forget_whose_read_fails_follows_the_failure_policy() {
    let is_read_error = |e: &Error| matches!(e, Error::Store(s) if s.operation() == "read");
    for policy in [FailurePolicy::FailClosed, FailurePolicy::FailOpen] {
        let dir = TempDir::new();
        let clock = ManualClock::new(T0);
        let cfg = small().retention(secs(600)).on_store_error(policy);
        let (engine, ns) = open(&dir, &clock, cfg.clone());
        acquire(&ns, b"k").complete().unwrap();
        clock.set(T0 + 100_000); // past the hot TTL, within the retention
        engine.run_maintenance();
        assert_eq!(engine.stats().resident_keys, 0, "{policy:?}");
        engine.debug_fail_store_reads(true);
        let answer = ns.forget(b"k");
        engine.debug_fail_store_reads(false);
        match policy {
            FailurePolicy::FailClosed => {
                let err = answer.unwrap_err();
                assert!(is_read_error(&err), "{err:?}");
                assert_eq!(engine.stats().fail_open_decisions, 0);
                // Nothing was forgotten, here or after a restart.
                duplicate(&ns, b"k");
                drop((ns, engine));
                let (_engine, ns) = open(&dir, &clock, cfg);
                duplicate(&ns, b"k");
            }
            _ => {
                assert!(!answer.unwrap());
                assert_eq!(engine.stats().fail_open_decisions, 1);
                acquire(&ns, b"k").release().unwrap();
            }
        }
    }
}

#[test]
fn a_co_commit_that_cannot_be_written_stores_nothing_whatever_the_policy() {
    for policy in [FailurePolicy::FailClosed, FailurePolicy::FailOpen] {
        let dir = TempDir::new();
        let clock = ManualClock::new(T0);
        let cfg = small().on_store_error(policy);
        {
            let (engine, ns) = open_ledger(&dir, &clock, cfg.clone());
            let mut changes = StateChanges::new();
            changes.put("ledger", b"acct-1", b"10");
            acquire(&ns, b"pay-1").complete_with(None, changes).unwrap();

            let g = acquire(&ns, b"pay-2");
            engine.debug_fail_store_writes(true);
            let mut changes = StateChanges::new();
            changes
                .put("ledger", b"acct-1", b"20")
                .put("ledger", b"acct-9", b"1");
            let err = g.complete_with(Some(b"r"), changes).unwrap_err();
            assert!(is_store_error(&err), "{policy:?}: {err:?}");
            assert_eq!(
                engine.read_state("ledger", b"acct-1").unwrap(),
                Some(b"10".to_vec()),
                "{policy:?}"
            );
            assert_eq!(engine.read_state("ledger", b"acct-9").unwrap(), None);
            // The claim was released, not completed.
            assert_eq!(ns.check(b"pay-2").unwrap(), None, "{policy:?}");
            assert_eq!(engine.stats().completions, 1, "{policy:?}");
            assert_eq!(engine.stats().fail_open_decisions, 0, "{policy:?}");
            engine.debug_fail_store_writes(false);
            // Claimable again once the failure is cleared (the guard, dropped, releases
            // it and deletes the claim marker the failed write could not).
            acquire(&ns, b"pay-2");
        }
        let (engine, ns) = open_ledger(&dir, &clock, cfg);
        assert!(engine.orphans().is_empty(), "{:?}", engine.orphans());
        assert_eq!(
            engine.read_state("ledger", b"acct-1").unwrap(),
            Some(b"10".to_vec()),
            "{policy:?}"
        );
        assert_eq!(engine.read_state("ledger", b"acct-9").unwrap(), None);
        duplicate(&ns, b"pay-1");
        acquire(&ns, b"pay-2");
    }
}

/// `Stats::releases` counts a completion given up because its write or fsync failed
/// and the error was returned: under `FailClosed`, and for a co-commit (state changes
/// are never applied from the hot tier alone) under `FailOpen` too. A plain
/// completion under `FailOpen` is decided from the hot tier instead: a completion,
/// not a release.
#[test]
fn a_co_commit_refused_under_fail_open_is_counted_as_a_release() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let cfg = small()
        .sync(SyncPolicy::Always)
        .on_store_error(FailurePolicy::FailOpen);
    let (engine, ns) = open_ledger(&dir, &clock, cfg);
    let ledger = || {
        let mut changes = StateChanges::new();
        changes.put("ledger", b"acct-1", b"10");
        changes
    };
    let counts = |e: &Engine| {
        let s = e.stats();
        (s.releases, s.completions, s.fail_open_decisions)
    };
    let written = acquire(&ns, b"written");
    let synced = acquire(&ns, b"synced");
    let plain = acquire(&ns, b"plain");

    engine.debug_fail_store_writes(true);
    assert!(is_store_error(
        &written.complete_with(None, ledger()).unwrap_err()
    ));
    engine.debug_fail_store_writes(false);
    assert_eq!(counts(&engine), (1, 0, 0), "a refused write");

    engine.debug_fail_syncs(true);
    let err = synced.complete_with(None, ledger()).unwrap_err();
    assert!(
        matches!(&err, Error::Store(s) if s.operation() == "sync"),
        "{err:?}"
    );
    assert_eq!(counts(&engine), (2, 0, 0), "a failed fsync");
    plain.complete().unwrap();
    engine.debug_fail_syncs(false);
    assert_eq!(counts(&engine), (2, 1, 1), "a plain completion fails open");

    acquire(&ns, b"written");
    duplicate(&ns, b"synced");
}

/// Under `FailOpen`, a claim whose read of the key's record fails is decided from
/// the hot tier alone, and can acquire a key done on disk (past its hot TTL). Its
/// co-commit is not applied over that record: the record is read again, failing
/// closed, and the co-commit refused with a store error, nothing applied and the
/// claim released; the redelivery answers `Duplicate`. Before, the state changes
/// were applied a second time (the message's side effect twice). A co-commit of a
/// new key still goes through.
#[test]
fn a_co_commit_is_not_applied_over_a_record_a_failed_open_read_hid() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let cfg = small()
        .retention(secs(600))
        .on_store_error(FailurePolicy::FailOpen);
    let ledger = |entry: &[u8]| {
        let mut changes = StateChanges::new();
        changes.put("ledger", entry, b"pay-1");
        changes
    };
    {
        let (engine, ns) = open_ledger(&dir, &clock, cfg.clone());
        acquire(&ns, b"pay-1")
            .complete_with(None, ledger(b"app-1"))
            .unwrap();
        for (reads_back, at) in [(false, 100_000), (true, 200_000)] {
            clock.set(T0 + at); // past the hot TTL, within the retention
            engine.run_maintenance();
            assert_eq!(engine.stats().resident_keys, 0);
            engine.debug_fail_store_reads(true);
            let g = acquire(&ns, b"pay-1");
            engine.debug_fail_store_reads(!reads_back);
            let err = g.complete_with(None, ledger(b"app-2")).unwrap_err();
            engine.debug_fail_store_reads(false);
            assert!(matches!(err, Error::Store(_)), "{reads_back}: {err:?}");
            assert_eq!(engine.read_state("ledger", b"app-2").unwrap(), None);
            assert_eq!(
                engine.read_state("ledger", b"app-1").unwrap(),
                Some(b"pay-1".to_vec())
            );
            assert_eq!(duplicate(&ns, b"pay-1").completed_at_ms(), T0);
        }
        // A new key's co-commit under the same policy is applied.
        acquire(&ns, b"pay-2")
            .complete_with(None, ledger(b"app-3"))
            .unwrap();
    }
    let (engine, ns) = open_ledger(&dir, &clock, cfg);
    assert!(engine.orphans().is_empty(), "{:?}", engine.orphans());
    assert_eq!(engine.read_state("ledger", b"app-2").unwrap(), None);
    assert_eq!(duplicate(&ns, b"pay-1").completed_at_ms(), T0);
    duplicate(&ns, b"pay-2");
    assert_eq!(
        engine.read_state("ledger", b"app-3").unwrap(),
        Some(b"pay-1".to_vec())
    );
}

#[test]
fn a_co_commit_to_an_unknown_family_is_refused_and_the_claim_stays_held() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let (engine, ns) = open_ledger(&dir, &clock, small());
    let g = acquire(&ns, b"pay-1");
    let mut changes = StateChanges::new();
    changes
        .put("ledger", b"acct-1", b"10")
        .put("nope", b"x", b"1");
    assert_eq!(
        g.complete_with(None, changes).unwrap_err(),
        Error::UnknownStateFamily("nope".into())
    );
    assert_eq!(
        engine.read_state("nope", b"x").unwrap_err(),
        Error::UnknownStateFamily("nope".into())
    );
    assert_eq!(engine.read_state("ledger", b"acct-1").unwrap(), None);
    assert_eq!(in_progress(&ns, b"pay-1").lease_expires_at_ms(), T0 + 5_000);
    assert_eq!(engine.stats().completions, 0);
    clock.set(T0 + 5_000);
    acquire(&ns, b"pay-1");
}

#[test]
fn a_co_commit_over_the_state_limit_is_refused_and_the_claim_stays_held() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let (engine, ns) = open_ledger(&dir, &clock, small());
    let g = acquire(&ns, b"pay-1");
    // Zeroed on allocation and never touched (the change does not copy it): no
    // memory is used for its 4 GiB.
    let big = vec![0u8; idem::MAX_STATE_LEN + 1];
    let mut changes = StateChanges::new();
    changes
        .put("ledger", b"acct-1", b"10")
        .put("ledger", b"acct-2", &big);
    drop(big);
    // Before, RocksDB's write batch left the change out and the completion was Ok:
    // the key done, the state not written.
    assert_eq!(
        g.complete_with(None, changes).unwrap_err(),
        Error::StateTooLarge {
            len: b"acct-2".len() + idem::MAX_STATE_LEN + 1,
            max: idem::MAX_STATE_LEN
        }
    );
    assert_eq!(engine.read_state("ledger", b"acct-1").unwrap(), None);
    assert_eq!(in_progress(&ns, b"pay-1").lease_expires_at_ms(), T0 + 5_000);
    assert_eq!(engine.stats().completions, 0);
}

/// The limit is on a change's key and value together: RocksDB sizes its memtable
/// entry (both, and their framing) in 32 bits. Before, each was held to 4 GiB - 1
/// alone, and a change of a 1-byte key and a value of 4 GiB - 1 overflowed that size:
/// RocksDB wrote 4 GiB into a few bytes (the process died), and the record left in
/// its write-ahead log killed every later open the same way.
#[test]
fn a_co_commit_whose_key_and_value_together_pass_the_state_limit_is_refused() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let (engine, ns) = open_ledger(&dir, &clock, small());
    let g = acquire(&ns, b"pay-1");
    // Zeroed on allocation and never touched: no memory is used for either.
    let half = idem::MAX_STATE_LEN / 2 + 1;
    let (key, value) = (vec![0u8; half], vec![0u8; half]);
    let mut changes = StateChanges::new();
    changes.put("ledger", &key, &value);
    drop((key, value));
    assert_eq!(
        g.complete_with(None, changes).unwrap_err(),
        Error::StateTooLarge {
            len: 2 * half,
            max: idem::MAX_STATE_LEN
        }
    );
    assert_eq!(in_progress(&ns, b"pay-1").lease_expires_at_ms(), T0 + 5_000);
    assert_eq!(engine.stats().completions, 0);
    // No key that long is stored: a read of one is `None`, without RocksDB.
    let long = vec![0u8; idem::MAX_STATE_LEN + 1];
    assert_eq!(engine.read_state("ledger", &long).unwrap(), None);
    assert_eq!(
        engine.read_state("undeclared", &long).unwrap_err(),
        Error::UnknownStateFamily("undeclared".to_owned())
    );
}

#[test]
fn a_family_only_an_earlier_run_declared_is_unknown_and_kept() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    {
        let (engine, ns) = open_ledger(&dir, &clock, small());
        let mut changes = StateChanges::new();
        changes.put("ledger", b"acct-1", b"10");
        acquire(&ns, b"pay-1").complete_with(None, changes).unwrap();
        drop(engine);
    }
    {
        // Reopened without declaring "ledger": its column family is opened (RocksDB
        // opens every one), but this engine neither writes nor reads it.
        let (engine, ns) = open(&dir, &clock, small());
        let mut changes = StateChanges::new();
        changes.put("ledger", b"acct-1", b"20");
        assert_eq!(
            acquire(&ns, b"pay-2")
                .complete_with(None, changes)
                .unwrap_err(),
            Error::UnknownStateFamily("ledger".into())
        );
        assert_eq!(
            engine.read_state("ledger", b"acct-1").unwrap_err(),
            Error::UnknownStateFamily("ledger".into())
        );
    }
    // Declared again, it holds what it held.
    let (engine, _ns) = open_ledger(&dir, &clock, small());
    assert_eq!(
        engine.read_state("ledger", b"acct-1").unwrap(),
        Some(b"10".to_vec())
    );
}

#[test]
fn a_co_commit_needs_a_durable_tier() {
    let (engine, ns, _clock) = engine_with(small());
    let g = acquire(&ns, b"pay-1");
    let mut changes = StateChanges::new();
    changes.put("ledger", b"acct-1", b"10");
    assert_eq!(
        g.complete_with(Some(b"r"), changes).unwrap_err(),
        Error::NotDurable
    );
    assert_eq!(
        engine.read_state("ledger", b"acct-1").unwrap_err(),
        Error::NotDurable
    );
    in_progress(&ns, b"pay-1");
}

// 10. A full hot tier in front of a durable tier.

#[test]
fn a_completion_the_store_refused_under_fail_open_is_never_evicted() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let cfg = small().max_keys(10).on_store_error(FailurePolicy::FailOpen);
    let (engine, ns) = open(&dir, &clock, cfg);
    // Decided from the hot tier alone: nothing on disk answers for it.
    let g = acquire(&ns, b"k");
    engine.debug_fail_store_writes(true);
    g.complete().unwrap();
    engine.debug_fail_store_writes(false);
    assert_eq!(engine.stats().fail_open_decisions, 1);
    // Stored completions fill the hot tier several times over, so that every done
    // entry the scan may take is taken.
    for i in 0..40 {
        acquire(&ns, key(i).as_bytes()).complete().unwrap();
    }
    assert!(engine.stats().evictions >= 30, "{:?}", engine.stats());
    // Before, the scan took k too, and the key was acquired again within its TTL.
    duplicate(&ns, b"k");
    // It leaves at the end of its TTL, as in a memory-only namespace.
    clock.advance(secs(60));
    engine.run_maintenance();
    acquire(&ns, b"k");
}

#[test]
fn a_full_hot_tier_evicts_done_keys_but_never_held_ones() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let (engine, ns) = open(&dir, &clock, small().max_keys(10));
    for i in 0..30 {
        acquire(&ns, key(i).as_bytes()).complete().unwrap();
    }
    let s = engine.stats();
    assert!(s.evictions > 0, "{s:?}");
    assert!(s.resident_keys <= 10, "{s:?}");
    assert_eq!(s.capacity_refusals, 0);
    for i in 0..30 {
        duplicate(&ns, key(i).as_bytes());
    }
    assert_eq!(engine.stats().duplicates, 30);

    // Held claims are never evicted: ten of them fill the namespace.
    let held: Vec<ClaimGuard> = (100..110)
        .map(|i| acquire(&ns, key(i).as_bytes()))
        .collect();
    assert_eq!(engine.stats().resident_keys, 10);
    assert_eq!(
        ns.claim(key(110).as_bytes()).unwrap_err(),
        Error::CapacityExceeded {
            namespace: "ns".into(),
            max_keys: 10
        }
    );
    assert_eq!(engine.stats().capacity_refusals, 1);
    for i in 100..110 {
        in_progress(&ns, key(i).as_bytes());
    }
    // Completed keys are still answered from the durable tier, just not cached.
    for i in 0..30 {
        duplicate(&ns, key(i).as_bytes());
    }
    assert_eq!(engine.stats().resident_keys, 10);
    // A completion makes a done key, which can leave to make room.
    let mut held = held.into_iter();
    held.next().unwrap().complete().unwrap();
    acquire(&ns, key(110).as_bytes()).complete().unwrap();
    duplicate(&ns, key(100).as_bytes());
    for i in 101..110 {
        in_progress(&ns, key(i).as_bytes());
    }
}

#[test]
fn a_full_hot_tier_whose_expired_keys_make_room_drops_no_unexpired_key() {
    // 200 keys of room: 100 completed at T0, 100 at T0 + 30 s. At T0 + 60 s the first
    // hundred have expired (no maintenance pass has reclaimed them), and the next new
    // key finds the hot tier full. Reclaiming them makes room for it and 99 more, so
    // the keys completed at T0 + 30 s stay in the hot tier for their TTL.
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let (engine, ns) = open(&dir, &clock, small().max_keys(200).shards(4));
    for i in 0..100 {
        acquire(&ns, key(i).as_bytes()).complete().unwrap();
    }
    clock.advance(secs(30));
    for i in 100..200 {
        acquire(&ns, key(i).as_bytes()).complete().unwrap();
    }
    clock.advance(secs(30));
    acquire(&ns, b"new").complete().unwrap();
    let s = engine.stats();
    assert_eq!(
        (s.expirations, s.evictions, s.resident_keys),
        (100, 0, 101),
        "{s:?}"
    );
    // Before, the claim dropped 64 of them as well, whose duplicates then read RocksDB.
    let reads = engine.stats().durable_reads;
    for i in 100..200 {
        duplicate(&ns, key(i).as_bytes());
    }
    assert_eq!(engine.stats().durable_reads, reads);
    // A hot tier full of unexpired done keys still drops a group of them for a new key
    // (an eighth of `max_keys`).
    for i in 200..299 {
        acquire(&ns, key(i).as_bytes()).complete().unwrap();
    }
    assert_eq!(engine.stats().evictions, 0);
    acquire(&ns, key(299).as_bytes()).complete().unwrap();
    let s = engine.stats();
    assert_eq!((s.evictions, s.resident_keys), (25, 176), "{s:?}");
}

#[test]
fn a_claim_that_finds_room_in_another_shard_reads_the_durable_tier_once() {
    // Sixteen shards share sixteen units of capacity, so a claim often finds its own
    // shard's reserve and the pool empty and collects the other shards' reserves
    // before it tries again. It must still ask the durable tier about its key once.
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let cfg = small().prefilter(false).max_keys(16).shards(16);
    let (engine, ns) = open(&dir, &clock, cfg);
    let mut next = 0;
    for round in 0..20 {
        let reads = engine.stats().durable_reads;
        let held: Vec<ClaimGuard> = (next..next + 16)
            .map(|i| acquire(&ns, key(i).as_bytes()))
            .collect();
        next += 16;
        assert_eq!(
            engine.stats().durable_reads - reads,
            16,
            "round {round}: {:?}",
            engine.stats()
        );
        drop(held); // released: their units go back to their shards' reserves
    }
    assert_eq!(engine.stats().capacity_refusals, 0);
}

/// `check` and `check_with_payload` write nothing: in every marker mode, with and
/// without the prefilter, fixed and sliding windows, over keys in every state (an
/// orphan whose lease ran out, done and read back from the durable tier only, done in
/// the hot tier, forgotten, in progress, a lease extended, never seen), the
/// database's files are byte for byte as they were, a second round answers the
/// same, and no counter moves but the reads'.
#[test]
fn checks_write_nothing_to_the_database_and_move_no_counter_but_reads() {
    fn files(dir: &Path) -> Vec<(String, u128)> {
        let mut v: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap())
            .filter(|e| e.file_type().unwrap().is_file())
            .map(|e| {
                let bytes = std::fs::read(e.path()).unwrap();
                let name = e.file_name().to_string_lossy().into_owned();
                (name, xxhash_rust::xxh3::xxh3_128(&bytes))
            })
            .collect();
        v.sort();
        v
    }
    for markers in MARKER_MODES {
        for (sliding, prefilter) in [(false, false), (false, true), (true, false), (true, true)] {
            let cfg = small()
                .retention(secs(600))
                .max_keys(4)
                .claim_markers(markers)
                .prefilter(prefilter)
                .extend_on_duplicate(sliding);
            let what = format!("{markers:?}, sliding {sliding}, prefilter {prefilter}");
            let dir = TempDir::new();
            let clock = ManualClock::new(T0);
            {
                let (engine, ns) = open(&dir, &clock, cfg.clone());
                let g = acquired(ns.claim_with_payload(b"orphan", b"p").unwrap());
                engine.debug_fail_store_writes(true);
                drop(g); // its marker stays in RocksDB (Immediate)
            }
            let (engine, ns) = open(&dir, &clock, cfg);
            let claim = |k: &str| acquired(ns.claim_with_payload(k.as_bytes(), b"p").unwrap());
            claim("old").complete_with_result(b"r-old").unwrap();
            clock.advance(secs(61)); // past the TTL: "old" is on disk only
            for i in 0..6 {
                // More than `max_keys`: some leave the hot tier.
                claim(&format!("d{i}")).complete_with_result(b"r").unwrap();
            }
            claim("gone").complete().unwrap();
            assert!(ns.forget(b"gone").unwrap());
            let _held = claim("held");
            let mut extended = claim("extended");
            extended.extend_lease(secs(1)).unwrap();
            clock.advance(secs(2));
            engine.run_maintenance();
            engine.sync().unwrap();
            let keys = [
                "orphan", "old", "d0", "d1", "d2", "d3", "d4", "d5", "gone", "held", "extended",
                "never",
            ];
            let (before, stats) = (files(dir.path()), ns.stats());
            let answers = || {
                keys.map(|k| {
                    let k = k.as_bytes();
                    let p = (
                        ns.check_with_payload(k, b"p"),
                        ns.check_with_payload(k, b"q"),
                    );
                    (ns.check(k), p)
                })
            };
            let first = answers();
            assert_eq!(answers(), first, "{what}");
            assert!(
                matches!(first[1].0, Ok(Some(KeyState::Done { .. }))),
                "{what}: {first:?}"
            );
            assert_eq!(files(dir.path()), before, "{what}");
            let after = ns.stats();
            assert!(after.durable_reads > stats.durable_reads, "{what}");
            let reads_aside = |mut s: idem::Stats| {
                s.durable_reads = 0;
                s.prefilter_negatives = 0;
                s.prefilter_passes = 0;
                s.prefilter_false_positives = 0;
                s
            };
            assert_eq!(reads_aside(after), reads_aside(stats), "{what}");
        }
    }
}

// 11. Orphans.

#[test]
fn a_claim_marker_left_behind_is_an_orphan_at_the_next_open() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let seeded = |clock: &ManualClock| {
        let engine = builder(&dir, clock)
            .seed(7)
            .namespace("ns", immediate())
            .build()
            .unwrap();
        let ns = engine.namespace("ns").unwrap();
        (engine, ns)
    };
    {
        let (engine, ns) = seeded(&clock);
        assert!(engine.orphans().is_empty(), "{:?}", engine.orphans());
        let g = acquire(&ns, b"ord-7");
        assert_eq!(g.lease_expires_at_ms(), T0 + 5_000);
        engine.debug_fail_store_writes(true);
        drop(g); // released here, but its claim marker cannot be deleted
        assert_eq!(ns.check(b"ord-7").unwrap(), None);
        engine.debug_fail_store_writes(false);
    }
    clock.set(T0 + 1_000);
    {
        let (engine, ns) = seeded(&clock);
        let orphans = engine.orphans();
        assert_eq!(orphans.len(), 1, "{orphans:?}");
        let o = &orphans[0];
        assert_eq!(o.namespace, "ns");
        assert_eq!(o.fingerprint, fingerprint(b"ord-7", 7));
        assert_eq!(o.claimed_at_ms, T0);
        assert_eq!(o.lease_expires_at_ms, T0 + 5_000);
        assert_eq!(o.corrupt, None);
        // The key is held until the orphan's lease runs out.
        let busy = in_progress(&ns, b"ord-7");
        assert_eq!(busy.lease_expires_at_ms(), T0 + 5_000);
        assert_eq!(busy.retry_after(), ms(4_000));
        match ns.check(b"ord-7").unwrap() {
            Some(KeyState::InProgress {
                lease_expires_at_ms,
                ..
            }) => assert_eq!(lease_expires_at_ms, T0 + 5_000),
            other => panic!("expected InProgress, got {other:?}"),
        }
        clock.set(T0 + 4_999);
        in_progress(&ns, b"ord-7");
        clock.set(T0 + 5_000);
        acquire(&ns, b"ord-7").complete().unwrap();
    }
    let (engine, ns) = seeded(&clock);
    assert!(engine.orphans().is_empty(), "{:?}", engine.orphans());
    duplicate(&ns, b"ord-7");
}

/// A claim whose lease was extended and that was in flight at a crash is an orphan
/// held until the extended end, in every marker mode.
#[test]
fn an_orphan_whose_lease_was_extended_is_held_until_the_new_end() {
    for markers in [
        ClaimMarkers::Immediate,
        ClaimMarkers::Journal,
        ClaimMarkers::Deferred,
    ] {
        let dir = TempDir::new();
        let clock = ManualClock::new(T0);
        let cfg = small().claim_markers(markers);
        {
            let (engine, ns) = open(&dir, &clock, cfg.clone());
            let mut g = acquire(&ns, b"k");
            clock.advance(secs(1));
            g.extend_lease(secs(60)).unwrap();
            // A deferred marker reaches the disk with the maintenance pass.
            engine.run_maintenance();
            engine.debug_keep_journal_markers(true);
            engine.debug_fail_store_writes(true);
            drop(g); // its claim marker stays on disk, as after a crash
            engine.debug_fail_store_writes(false);
        }
        let (engine, ns) = open(&dir, &clock, cfg);
        let o = engine.orphans();
        assert_eq!(o.len(), 1, "{markers:?}: {o:?}");
        assert_eq!(
            (o[0].claimed_at_ms, o[0].lease_expires_at_ms),
            (T0 + 1_000, T0 + 61_000),
            "{markers:?}"
        );
        clock.advance(secs(59));
        in_progress(&ns, b"k");
        clock.advance(secs(1));
        acquire(&ns, b"k").complete().unwrap();
    }
}

/// An extension that finds the journal full writes the renewed marker into RocksDB,
/// then clears the claim's journal slot (nothing is rewritten in place, where a crash
/// would leave a torn slot, reported as damaged and not held). A crash between the
/// two (the slot kept on disk, as the testing hook keeps it) leaves both markers; the
/// open moves the journal's over RocksDB's, as it does any journal marker: the claim
/// is reported and held, until the old end.
#[cfg(target_os = "linux")]
#[test]
fn an_extension_that_finds_the_journal_full_is_reported_after_a_crash_between_its_writes() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let cfg = small()
        .claim_markers(ClaimMarkers::Journal)
        .journal_slots(1);
    {
        let (engine, ns) = open(&dir, &clock, cfg.clone());
        let mut g = acquire(&ns, b"k");
        clock.advance(secs(1));
        engine.debug_keep_journal_markers(true);
        g.extend_lease(secs(60)).unwrap();
        let s = engine.stats();
        assert_eq!(
            (s.journal_markers, s.markers_on_disk, s.journal_overflows),
            (0, 1, 1),
            "{s:?}"
        );
        engine.debug_fail_store_writes(true);
        drop(g); // both markers stay, as after a crash
        engine.debug_fail_store_writes(false);
    }
    let (engine, ns) = open(&dir, &clock, cfg);
    let o = engine.orphans();
    assert_eq!(o.len(), 1, "{o:?}");
    assert_eq!(
        (o[0].claimed_at_ms, o[0].lease_expires_at_ms, o[0].held),
        (T0, T0 + 5_000, true)
    );
    clock.advance(secs(3));
    in_progress(&ns, b"k");
    clock.advance(secs(1));
    acquire(&ns, b"k").complete().unwrap();
}

/// An extension whose marker the store refused under `FailOpen` leaves the marker
/// with the old end; when the lease is then lost, the clean-up looks for that end
/// and deletes the marker, so a clean restart reports no orphan. (Before, it looked
/// for the new end and left the marker, reported at every open.)
#[test]
fn a_lost_lease_removes_the_marker_a_refused_extension_left() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let cfg = small()
        .claim_markers(ClaimMarkers::Immediate)
        .on_store_error(FailurePolicy::FailOpen);
    {
        let (engine, ns) = open(&dir, &clock, cfg.clone());
        let mut g = acquire(&ns, b"k");
        engine.debug_fail_store_writes(true);
        g.extend_lease(secs(30)).expect("fail open");
        engine.debug_fail_store_writes(false);
        assert_eq!(engine.stats().fail_open_decisions, 1);
        clock.advance(secs(31));
        assert_eq!(g.release(), Err(Error::LeaseLost));
    }
    let (engine, _ns) = open(&dir, &clock, cfg);
    assert!(engine.orphans().is_empty(), "{:?}", engine.orphans());
}

/// A claim acquired while the disk refused its marker (fail open) has one written
/// by a later extension the disk takes, with the extended end, so a crash after it
/// reports the claim, held until that end.
#[test]
fn an_extension_writes_the_marker_a_fail_open_claim_could_not() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let cfg = small()
        .claim_markers(ClaimMarkers::Immediate)
        .on_store_error(FailurePolicy::FailOpen);
    {
        let (engine, ns) = open(&dir, &clock, cfg.clone());
        engine.debug_fail_store_writes(true);
        let mut g = acquire(&ns, b"k");
        engine.debug_fail_store_writes(false);
        assert_eq!(engine.stats().fail_open_decisions, 1, "acquired without it");
        g.extend_lease(secs(30)).unwrap();
        // As a crash would: the claim never ends (its marker's delete fails).
        engine.debug_fail_store_writes(true);
        drop(g);
    }
    let (engine, ns) = open(&dir, &clock, cfg);
    let orphans = engine.orphans();
    assert_eq!(orphans.len(), 1, "{orphans:?}");
    assert_eq!(orphans[0].lease_expires_at_ms, T0 + 30_000, "{orphans:?}");
    assert!(ns.claim(b"k").unwrap().is_in_progress());
}

#[test]
fn an_orphan_keeps_its_payload_fingerprint_across_the_restart() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    for markers in [ClaimMarkers::Immediate, ClaimMarkers::Journal] {
        let cfg = small().claim_markers(markers);
        {
            let (engine, ns) = open(&dir, &clock, cfg.clone());
            let g = acquired(ns.claim_with_payload(b"k", b"v1").unwrap());
            engine.debug_keep_journal_markers(true);
            engine.debug_fail_store_writes(true);
            drop(g); // its claim marker stays on disk, as after a crash
            engine.debug_fail_store_writes(false);
        }
        let (engine, ns) = open(&dir, &clock, cfg);
        assert_eq!(engine.orphans().len(), 1, "{markers:?}");
        // Before, the orphan forgot the payload: another one read as in progress.
        assert_eq!(
            ns.claim_with_payload(b"k", b"v2").unwrap_err(),
            Error::PayloadMismatch,
            "{markers:?}"
        );
        assert!(
            ns.claim_with_payload(b"k", b"v1").unwrap().is_in_progress(),
            "{markers:?}"
        );
        // The lease runs out; the next claim completes the key for the next round.
        clock.advance(secs(5));
        acquired(ns.claim_with_payload(b"k", b"v1").unwrap())
            .complete()
            .unwrap();
        ns.forget(b"k").unwrap();
    }
}

#[test]
fn an_orphan_leased_further_ahead_than_the_tick_reaches_is_held_not_expired() {
    // A 30-day lease taken under a one-minute tick, found at an open with the
    // default 1 ms tick: 2.6e9 ticks ahead, past what a 32-bit deadline compares.
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let month = std::time::Duration::from_secs(30 * 86_400);
    {
        let engine = builder(&dir, &clock)
            .tick(std::time::Duration::from_secs(60))
            .seed(7)
            .namespace(
                "ns",
                immediate()
                    .ttl(std::time::Duration::from_secs(3_600))
                    .lease(month),
            )
            .build()
            .unwrap();
        let ns = engine.namespace("ns").unwrap();
        let g = acquire(&ns, b"ord-7");
        engine.debug_fail_store_writes(true);
        drop(g); // its claim marker stays on disk
        engine.debug_fail_store_writes(false);
    }
    let engine = builder(&dir, &clock)
        .seed(7)
        .namespace("ns", immediate())
        .build()
        .unwrap();
    let ns = engine.namespace("ns").unwrap();
    let orphans = engine.orphans();
    assert_eq!(orphans.len(), 1, "{orphans:?}");
    assert_eq!(
        orphans[0].lease_expires_at_ms,
        T0 + month.as_millis() as u64
    );
    // Held, for the longest lease this tick allows (2^30 ms), not expired at once.
    let busy = in_progress(&ns, b"ord-7");
    assert_eq!(busy.lease_expires_at_ms(), T0 + (1 << 30));
    clock.set(T0 + (1 << 30) - 1);
    in_progress(&ns, b"ord-7");
}

#[test]
fn orphans_beyond_a_shrunken_max_keys_are_reported_as_not_held() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    {
        let (engine, ns) = open(&dir, &clock, immediate());
        let guards: Vec<_> = (0..4)
            .map(|i| acquire(&ns, format!("k{i}").as_bytes()))
            .collect();
        engine.debug_fail_store_writes(true);
        drop(guards); // released, but the markers stay on disk
        engine.debug_fail_store_writes(false);
    }
    let (engine, ns) = open(&dir, &clock, immediate().max_keys(2).shards(1));
    let orphans = engine.orphans();
    assert_eq!(orphans.len(), 4, "{orphans:?}");
    let held: Vec<_> = orphans.iter().filter(|o| o.held).collect();
    assert_eq!(held.len(), 2, "{orphans:?}");
    assert_eq!(engine.stats().resident_keys, 2);
    // The held ones read as in progress, the others as unknown.
    let states: Vec<_> = (0..4)
        .map(|i| ns.check(format!("k{i}").as_bytes()).unwrap())
        .collect();
    let in_progress = states
        .iter()
        .filter(|s| matches!(s, Some(KeyState::InProgress { .. })))
        .count();
    assert_eq!(in_progress, 2, "{states:?}");
    assert_eq!(states.iter().filter(|s| s.is_none()).count(), 2);
}

#[test]
fn check_finds_a_key_done_in_the_durable_tier_only() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    {
        let (engine, ns) = open(&dir, &clock, small());
        acquire(&ns, b"k").complete_with_result(b"r").unwrap();
        // Past the hot TTL (60 s), within retention (7 x TTL).
        clock.advance(secs(120));
        let reads_before = engine.stats().durable_reads;
        match ns.check(b"k").unwrap() {
            Some(KeyState::Done {
                completed_at_ms,
                result,
                ..
            }) => {
                assert_eq!(completed_at_ms, T0);
                assert_eq!(result.as_deref(), Some(&b"r"[..]));
            }
            other => panic!("expected Done, got {other:?}"),
        }
        assert_eq!(engine.stats().durable_reads, reads_before + 1);
    }
    let (_engine, ns) = open(&dir, &clock, small());
    assert!(matches!(
        ns.check(b"k").unwrap(),
        Some(KeyState::Done { .. })
    ));
    assert_eq!(ns.check(b"other").unwrap(), None);
    clock.advance(secs(7 * 60));
    assert_eq!(ns.check(b"k").unwrap(), None);
}

#[test]
fn deferred_markers_are_written_only_for_claims_still_held_at_maintenance() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let cfg = small().claim_markers(ClaimMarkers::Deferred);
    let seeded = || {
        let engine = builder(&dir, &clock)
            .seed(7)
            .namespace("ns", cfg.clone())
            .build()
            .unwrap();
        let ns = engine.namespace("ns").unwrap();
        (engine, ns)
    };
    {
        let (engine, ns) = seeded();
        let w0 = engine.stats().durable_writes;
        acquire(&ns, b"quick").complete().unwrap();
        drop(acquire(&ns, b"released"));
        // The completion is the only write: neither claim wrote a marker.
        assert_eq!(engine.stats().durable_writes, w0 + 1);
        let held = acquire(&ns, b"held");
        let done_later = acquire(&ns, b"done-later");
        assert_eq!(engine.stats().durable_writes, w0 + 1);
        engine.run_maintenance();
        // One write for both markers.
        assert_eq!(engine.stats().durable_writes, w0 + 2);
        // A completion after the flush deletes its marker.
        done_later.complete().unwrap();
        // A release that cannot delete its marker leaves an orphan.
        engine.debug_fail_store_writes(true);
        drop(held);
        engine.debug_fail_store_writes(false);
    }
    let (engine, ns) = seeded();
    let orphans: Vec<u128> = engine.orphans().iter().map(|o| o.fingerprint).collect();
    assert_eq!(orphans, vec![fingerprint(b"held", 7)]);
    duplicate(&ns, b"quick");
    duplicate(&ns, b"done-later");
    in_progress(&ns, b"held");
}

/// `Engine::close` returns the store's refusal of the deferred claim markers it
/// writes for claims still held (a drop could only log it), counted in the
/// namespace's `store_errors`; the claim itself goes on through its handle.
#[test]
fn closing_the_engine_reports_deferred_markers_it_could_not_write() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let (engine, ns) = open(&dir, &clock, small().claim_markers(ClaimMarkers::Deferred));
    let g = acquire(&ns, b"held");
    let errors = ns.stats().store_errors;
    engine.debug_fail_store_writes(true);
    let err = engine.close().unwrap_err();
    assert!(is_store_error(&err), "{err:?}");
    assert_eq!(ns.stats().store_errors, errors + 1);
    in_progress(&ns, b"held");
    drop((g, ns));

    // Without the failure, the close writes the marker and says so.
    let (engine, ns) = open(&dir, &clock, small().claim_markers(ClaimMarkers::Deferred));
    let g = acquire(&ns, b"held2");
    let writes = ns.stats().durable_writes;
    engine.close().unwrap();
    assert_eq!(ns.stats().durable_writes, writes + 1);
    g.complete().unwrap();
}

#[test]
fn a_refused_forget_keeps_a_deferred_marker_waiting_for_the_flush() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let (engine, ns) = open(&dir, &clock, small().claim_markers(ClaimMarkers::Deferred));
    let g = acquire(&ns, b"k");
    engine.debug_fail_store_writes(true);
    assert!(is_store_error(&ns.forget(b"k").unwrap_err()));
    engine.debug_fail_store_writes(false);
    in_progress(&ns, b"k");
    // The claim is still held, so its marker is still due: the flush writes it
    // (before, the refused forget had dropped it, and a crash after this flush left
    // no orphan of a claim in flight).
    let w0 = engine.stats().durable_writes;
    engine.run_maintenance();
    assert_eq!(engine.stats().durable_writes, w0 + 1);
    g.complete().unwrap();
    drop((engine, ns));
    let (engine, ns) = open(&dir, &clock, small().claim_markers(ClaimMarkers::Deferred));
    assert!(engine.orphans().is_empty(), "{:?}", engine.orphans());
    duplicate(&ns, b"k");
}

#[test]
fn a_flushed_marker_whose_lease_ran_out_goes_with_the_next_claims_completion() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let cfg = small().claim_markers(ClaimMarkers::Deferred);
    {
        let (engine, ns) = open(&dir, &clock, cfg.clone());
        let first = acquire(&ns, b"k");
        engine.run_maintenance(); // its marker is written
        clock.advance(secs(5));
        assert_eq!(first.release(), Err(Error::LeaseLost));
        // The next claim's marker is still in memory when it completes; the first
        // claim's, on disk, must go too (before, it came back as an orphan).
        acquire(&ns, b"k").complete().unwrap();
    }
    let (engine, ns) = open(&dir, &clock, cfg);
    assert!(engine.orphans().is_empty(), "{:?}", engine.orphans());
    duplicate(&ns, b"k");
    assert_no_markers_after_close(&dir, (engine, ns));
}

/// Under fail-open, a completion whose batch was applied but whose fsync failed is
/// decided from the hot tier, and its marker is kept (nothing synced says it is
/// done). Its done record is readable all the same, and, in every marker mode, the
/// next open reads the key as done, not as a claim in flight (a deferred marker was
/// put back in memory and flushed at shutdown beside the record).
#[test]
fn a_completion_applied_but_not_synced_under_fail_open_is_not_an_orphan_at_the_next_open() {
    for mode in MARKER_MODES {
        let dir = TempDir::new();
        let clock = ManualClock::new(T0);
        let cfg = || always(mode, FailurePolicy::FailOpen);
        {
            let (engine, ns) = open(&dir, &clock, cfg());
            // (A deferred marker is still in memory: the completion takes it, and
            // puts it back when the store refuses.)
            let g = acquire(&ns, b"k");
            engine.debug_fail_syncs(true);
            g.complete().expect("fail open: decided from the hot tier");
            engine.debug_fail_syncs(false);
            assert_eq!(engine.stats().fail_open_decisions, 1, "{mode:?}");
        }
        let (engine, ns) = open(&dir, &clock, cfg());
        assert!(
            engine.orphans().is_empty(),
            "{mode:?}: {:?}",
            engine.orphans()
        );
        duplicate(&ns, b"k");
        assert_no_markers_after_close(&dir, (engine, ns));
    }
}

/// A fail-open completion whose batch was applied but whose fsync failed frees its
/// journal slot at once, as a synced one does: the store holds its record. (Before,
/// it was handled as a completion the store refused and kept its slot until the
/// next open, so a failing disk filled the journal and later claims' markers went
/// to RocksDB.) One that the store refused keeps its slot.
#[cfg(target_os = "linux")]
#[test]
fn a_completion_applied_but_not_synced_under_fail_open_frees_its_journal_slot() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let cfg = small()
        .sync(SyncPolicy::Always)
        .claim_markers(ClaimMarkers::Journal)
        .journal_slots(4)
        .on_store_error(FailurePolicy::FailOpen);
    let (engine, ns) = open(&dir, &clock, cfg);
    engine.debug_fail_syncs(true);
    for i in 0..16 {
        acquire(&ns, format!("k{i}").as_bytes())
            .complete()
            .expect("fail open");
    }
    let s = engine.stats();
    assert_eq!(s.fail_open_decisions, 16, "{s:?}");
    assert_eq!(s.journal_overflows, 0, "{s:?}");
    engine.debug_fail_syncs(false);
    // Refused writes keep their slots: the fifth claim finds the journal full.
    engine.debug_fail_store_writes(true);
    for i in 0..5 {
        acquire(&ns, format!("j{i}").as_bytes())
            .complete()
            .expect("fail open");
    }
    engine.debug_fail_store_writes(false);
    assert_eq!(engine.stats().journal_overflows, 1);
    for i in 0..16 {
        duplicate(&ns, format!("k{i}").as_bytes());
    }
}

/// Tokens start again with every run: a claim in flight at a crash whose token an
/// earlier run's completion of the key also carried is still reported. Under
/// fail-open a failed read acquires the key over that live record.
#[test]
fn a_claim_in_flight_is_reported_though_an_earlier_runs_completion_had_its_token() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let cfg = || {
        immediate()
            .shards(1)
            .on_store_error(FailurePolicy::FailOpen)
    };
    {
        let (_engine, ns) = open(&dir, &clock, cfg());
        acquire(&ns, b"k").complete().unwrap();
    }
    clock.set(T0 + 1_000);
    {
        let (engine, ns) = open(&dir, &clock, cfg());
        engine.debug_fail_store_reads(true);
        let g = acquire(&ns, b"k"); // the same token as the first run's
        engine.debug_fail_store_reads(false);
        // Its marker stays, as after a crash.
        engine.debug_fail_store_writes(true);
        drop(g);
        engine.debug_fail_store_writes(false);
    }
    clock.set(T0 + 2_000);
    let (engine, _ns) = open(&dir, &clock, cfg());
    assert_eq!(engine.orphans().len(), 1, "{:?}", engine.orphans());
}

#[test]
fn a_deferred_claim_of_an_orphaned_key_deletes_the_old_marker() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let cfg = small().claim_markers(ClaimMarkers::Deferred);
    {
        // An immediate marker left behind by a claim that never finished.
        let (engine, ns) = open(&dir, &clock, immediate());
        let g = acquire(&ns, b"k");
        engine.debug_fail_store_writes(true);
        drop(g);
        engine.debug_fail_store_writes(false);
    }
    {
        let (engine, ns) = open(&dir, &clock, cfg.clone());
        assert_eq!(engine.orphans().len(), 1);
        clock.advance(secs(5)); // the orphan's lease runs out
        acquire(&ns, b"k").complete().unwrap();
        // A key never orphaned writes no marker and deletes none.
        acquire(&ns, b"fresh").complete().unwrap();
    }
    let (engine, ns) = open(&dir, &clock, cfg);
    assert!(engine.orphans().is_empty(), "{:?}", engine.orphans());
    duplicate(&ns, b"k");
    assert_no_markers_after_close(&dir, (engine, ns));
}

#[test]
fn deferred_markers_of_held_claims_are_written_at_a_clean_shutdown() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let cfg = small().claim_markers(ClaimMarkers::Deferred);
    let (engine, ns) = open(&dir, &clock, cfg);
    let held = acquire(&ns, b"held");
    let w0 = ns.stats().durable_writes;
    drop(engine);
    assert_eq!(ns.stats().durable_writes, w0 + 1, "the marker was flushed");
    drop(held);
    // Released after the flush: the release deleted the marker again.
    assert_eq!(ns.stats().durable_writes, w0 + 2);
    drop(ns);
    assert!(entries(&raw_db(&dir), "claims:ns").is_empty());
}

#[test]
fn an_orphan_whose_lease_already_ran_out_is_reported_once() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    {
        let (engine, ns) = open(&dir, &clock, immediate());
        let g = acquire(&ns, b"ord-8");
        engine.debug_fail_store_writes(true);
        drop(g);
        engine.debug_fail_store_writes(false);
    }
    clock.set(T0 + 60_000);
    {
        let (engine, _ns) = open(&dir, &clock, immediate());
        assert_eq!(engine.orphans().len(), 1);
        assert_eq!(engine.orphans()[0].lease_expires_at_ms, T0 + 5_000);
        assert_eq!(engine.stats().resident_keys, 0);
    }
    // Reported once: the first open deleted the expired marker.
    assert!(entries(&raw_db(&dir), "claims:ns").is_empty());
    {
        let (engine, ns) = open(&dir, &clock, immediate());
        assert!(engine.orphans().is_empty(), "{:?}", engine.orphans());
        acquire(&ns, b"ord-8");
    }
    {
        let (engine, _ns) = open(&dir, &clock, immediate());
        assert!(engine.orphans().is_empty(), "{:?}", engine.orphans());
    }
    // The expired marker was deleted at the first open; the re-claim's was released.
    assert!(entries(&raw_db(&dir), "claims:ns").is_empty());
}

// 12. Batches.

#[test]
fn a_batch_decided_from_the_hot_tier_alone_counts_each_of_its_decisions() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let (engine, ns) = open(
        &dir,
        &clock,
        immediate().on_store_error(FailurePolicy::FailOpen),
    );
    let decisions = || engine.stats().fail_open_decisions;
    engine.debug_fail_store_writes(true);
    // Three claims whose one marker write fails: three decisions, as three single
    // claims would make.
    let claims = ns.claim_batch(&[b"a", b"b", b"c"]).unwrap();
    assert_eq!(decisions(), 3);
    let guards: Vec<ClaimGuard> = claims
        .into_iter()
        .map(|c| match c {
            Claim::Acquired(g) => g,
            other => panic!("{other:?}"),
        })
        .collect();
    // And three completions whose one write fails.
    let done = ns.complete_batch(guards).unwrap();
    assert!(done.iter().all(Result::is_ok), "{done:?}");
    assert_eq!(decisions(), 6);
    engine.debug_fail_store_writes(false);
}

#[test]
fn a_batch_completion_with_results_writes_them_in_one_write_and_they_survive_a_restart() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    {
        let (engine, ns) = open(&dir, &clock, immediate().max_result_len(8));
        let late = acquire(&ns, b"late"); // lease until T0 + 5 s
        clock.set(T0 + 3_000);
        let mut batch: Vec<(ClaimGuard, &[u8])> = ns
            .claim_batch(&[b"a", b"b", b"c", b"d"])
            .unwrap()
            .into_iter()
            .map(acquired)
            .zip([&b"ra"[..], b"far too long", b"", b"rd"])
            .collect();
        batch.insert(1, (late, b"rl"));
        clock.set(T0 + 6_000); // "late" lost its lease
        let writes = engine.stats().durable_writes;
        let outcomes = ns.complete_batch_with_results(batch).unwrap();
        assert_eq!(
            outcomes,
            vec![
                Ok(()),
                Err(Error::LeaseLost),
                Err(Error::ResultTooLarge { len: 12, max: 8 }),
                Ok(()),
                Ok(())
            ]
        );
        // One write for the three completions, and the lost lease's own marker delete.
        assert_eq!(engine.stats().durable_writes, writes + 2);
        assert_eq!(duplicate(&ns, b"a").result(), Some(&b"ra"[..]));
        assert_eq!(duplicate(&ns, b"c").result(), Some(&b""[..]));
        assert_eq!(duplicate(&ns, b"d").result(), Some(&b"rd"[..]));
        // "b" is held, its claim neither completed nor released.
        in_progress(&ns, b"b");
    }
    let seed = stored_seed(&raw_db(&dir));
    let (engine, ns) = open(&dir, &clock, immediate().max_result_len(8));
    assert_eq!(duplicate(&ns, b"a").result(), Some(&b"ra"[..]));
    assert_eq!(duplicate(&ns, b"c").result(), Some(&b""[..]));
    assert_eq!(duplicate(&ns, b"d").result(), Some(&b"rd"[..]));
    assert_eq!(ns.check(b"late").unwrap(), None);
    // "b"'s claim was never completed: its marker makes it an orphan of that run.
    let orphans: Vec<u128> = engine.orphans().iter().map(|o| o.fingerprint).collect();
    assert_eq!(orphans, [fingerprint(b"b", seed)]);
}

#[test]
fn a_batch_with_results_whose_write_fails_releases_every_claim_too_large_ones_too() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let engine = builder(&dir, &clock)
        .namespace("ns", immediate().max_result_len(4))
        .namespace("other", immediate().max_result_len(4))
        .build()
        .unwrap();
    let ns = engine.namespace("ns").unwrap();
    let other = engine.namespace("other").unwrap();
    let batch: Vec<(ClaimGuard, &[u8])> = vec![
        (acquire(&ns, b"fits"), b"ok"),
        (acquire(&ns, b"big"), b"far too long"),
        (acquire(&other, b"obig"), b"far too long"),
        (acquire(&other, b"ofits"), b"ok"),
    ];
    engine.debug_fail_store_writes(true);
    let got = ns.complete_batch_with_results(batch);
    engine.debug_fail_store_writes(false);
    assert!(matches!(got, Err(ref e) if is_store_error(e)), "{got:?}");
    // As the error says: every claim of the batch given up, so that a redelivery
    // retries at once (before, "big" stayed held to the end of its lease).
    for (n, key) in [
        (&ns, &b"fits"[..]),
        (&ns, b"big"),
        (&other, b"obig"),
        (&other, b"ofits"),
    ] {
        acquire(n, key);
    }
}

#[test]
fn batches_claim_and_complete_with_one_durable_write_each() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    {
        let (engine, ns) = open(&dir, &clock, immediate());
        // One bad key refuses the whole batch.
        assert_eq!(
            ns.claim_batch(&[b"a", b"", b"c"]).unwrap_err(),
            Error::InvalidKey(KeyError::Empty)
        );
        assert_eq!(ns.check(b"a").unwrap(), None);
        assert_eq!(ns.check(b"c").unwrap(), None);
        let s = engine.stats();
        assert_eq!((s.acquired, s.resident_keys, s.durable_writes), (0, 0, 0));

        let late = acquire(&ns, b"late"); // lease until T0 + 5 s
        clock.set(T0 + 3_000);
        let writes = engine.stats().durable_writes;
        let claims = ns.claim_batch(&[b"a", b"b", b"c"]).unwrap();
        assert_eq!(engine.stats().durable_writes, writes + 1);
        let mut guards: Vec<ClaimGuard> = claims.into_iter().map(acquired).collect();
        guards.insert(2, late);
        clock.set(T0 + 6_000); // "late" lost its lease; the batch holds until T0 + 8 s
        let writes = engine.stats().durable_writes;
        let outcomes = ns.complete_batch(guards).unwrap();
        assert_eq!(
            outcomes,
            vec![Ok(()), Ok(()), Err(Error::LeaseLost), Ok(())]
        );
        // One write for the three completions; "late", whose lease ran out, deletes
        // its own marker with a write of its own (unsynced), so that the next open
        // does not report it.
        assert_eq!(engine.stats().durable_writes, writes + 2);
        let s = engine.stats();
        assert_eq!((s.completions, s.lease_lost), (3, 1));
        for k in [&b"a"[..], b"b", b"c"] {
            assert_eq!(duplicate(&ns, k).completed_at_ms(), T0 + 6_000);
        }
        acquire(&ns, b"late").release().unwrap();
    }
    let (engine, ns) = open(&dir, &clock, immediate());
    assert!(engine.orphans().is_empty(), "{:?}", engine.orphans());
    for k in [&b"a"[..], b"b", b"c"] {
        assert_eq!(duplicate(&ns, k).completed_at_ms(), T0 + 6_000);
    }
    acquire(&ns, b"late");
}

/// A namespace with sliding windows (TTL and retention 10 s) whose key "k" was
/// completed at T0, on a clock 6 s on: a sighting of "k" moves its window's end
/// (16 s) past its record's (10 s), so it rewrites the record.
fn window_due_a_rewrite(
    dir: &TempDir,
    clock: &ManualClock,
    sync: SyncPolicy,
) -> (Engine, Namespace) {
    let (engine, ns) = open(
        dir,
        clock,
        small()
            .ttl(secs(10))
            .retention(secs(10))
            .extend_on_duplicate(true)
            .sync(sync),
    );
    acquire(&ns, b"k").complete().unwrap();
    clock.set(T0 + 6_000);
    (engine, ns)
}

/// A sliding window's record rewrite made inside a batch whose write is applied and
/// whose grouped fsync then fails: the batch fails (`Error::Store`), and the window
/// is extended in both tiers, as the record on disk has it: `check` reports the end
/// the key keeps. (Before, the hot tier went back to the old window while the record
/// kept the new one: `check` told the old end, and after it the key read back done.)
#[test]
fn a_batch_whose_window_rewrite_fails_to_sync_reports_the_window_the_store_keeps() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let (engine, ns) = window_due_a_rewrite(&dir, &clock, SyncPolicy::Always);
    engine.debug_fail_syncs(true);
    let r = ns.claim_batch(&[b"new", b"k"]);
    engine.debug_fail_syncs(false);
    assert!(matches!(r, Err(Error::Store(_))), "{r:?}");
    let reported = match ns.check(b"k").unwrap() {
        Some(KeyState::Done { expires_at_ms, .. }) => expires_at_ms,
        other => panic!("{other:?}"),
    };
    // No sighting since: the key ends where `check` said it would.
    clock.set(reported + 1_000);
    let later = ns.check(b"k").unwrap();
    assert!(
        later.is_none(),
        "check said the key expires at {reported}, yet at {} it reads {later:?}",
        reported + 1_000
    );
}

/// A batch that panics (the testing hook makes a sliding window's rewrite panic, as
/// a bug in the write would) after acquiring a key gives that claim up as a failed
/// batch does: its caller never saw it, so it is counted neither as acquired nor as
/// released, and no marker of it is deleted (none was written).
#[test]
fn a_batch_that_panics_counts_the_claims_it_gave_up_as_a_failed_batch_does() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let (engine, ns) = window_due_a_rewrite(&dir, &clock, SyncPolicy::Always);
    let before = ns.stats();
    engine.debug_panic_completions(true);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        ns.claim_batch(&[b"new", b"k"])
    }));
    engine.debug_panic_completions(false);
    assert!(r.is_err(), "the rewrite's panic goes on to the caller");
    let after = ns.stats();
    assert_eq!(ns.check(b"new").unwrap(), None, "the claim was given up");
    assert_eq!(
        (after.acquired, after.releases),
        (before.acquired, before.releases),
        "{after:?}"
    );
}

// 13. Payload fingerprints.

#[test]
fn payload_fingerprints_survive_a_restart() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    {
        let (_engine, ns) = open(&dir, &clock, small());
        acquired(ns.claim_with_payload(b"pay-1", b"amount=10").unwrap())
            .complete()
            .unwrap();
    }
    let (engine, ns) = open(&dir, &clock, small());
    assert_eq!(
        ns.claim_with_payload(b"pay-1", b"amount=99").unwrap_err(),
        Error::PayloadMismatch
    );
    assert!(ns
        .claim_with_payload(b"pay-1", b"amount=10")
        .unwrap()
        .is_duplicate());
    // Cached in the hot tier with its payload fingerprint.
    assert_eq!(
        ns.claim_with_payload(b"pay-1", b"amount=99").unwrap_err(),
        Error::PayloadMismatch
    );
    // And again from the durable tier once the hot TTL is over.
    clock.advance(secs(61));
    assert_eq!(
        ns.claim_with_payload(b"pay-1", b"amount=99").unwrap_err(),
        Error::PayloadMismatch
    );
    assert!(ns
        .claim_with_payload(b"pay-1", b"amount=10")
        .unwrap()
        .is_duplicate());
    duplicate(&ns, b"pay-1");
    assert_eq!(engine.stats().payload_mismatches, 3);
}

// 14. Sync policies.

/// What each sync policy promises of the disk, by RocksDB's own count of the
/// write-ahead log's fsyncs (`Stats::wal_syncs`): a lost sync would pass every test
/// that only kills the process (the page cache keeps the writes).
#[test]
fn each_sync_policy_makes_the_fsyncs_it_promises() {
    let syncs = |e: &Engine| e.stats().wal_syncs;
    for (policy, grouped) in [
        (SyncPolicy::Always, true),
        (SyncPolicy::Always, false),
        (SyncPolicy::Never, true),
    ] {
        let dir = TempDir::new();
        let clock = ManualClock::new(T0);
        let mut b = builder(&dir, &clock)
            .store_statistics(true)
            .namespace("ns", small().sync(policy));
        if !grouped {
            b = b.commit_delay(std::time::Duration::ZERO);
        }
        let engine = b.build().unwrap();
        let ns = engine.namespace("ns").unwrap();
        let dlq = engine.dlq("ns").unwrap();
        let before = syncs(&engine);
        for i in 0..5 {
            acquire(&ns, format!("k-{i}").as_bytes())
                .complete()
                .unwrap();
        }
        let completions = syncs(&engine) - before;
        let before = syncs(&engine);
        dlq.quarantine(b"d", b"p", "test").unwrap();
        let dead_letter = syncs(&engine) - before;
        // A forget's delete is as durable as the completion it undoes.
        let before = syncs(&engine);
        assert!(ns.forget(b"k-0").unwrap());
        let forget = syncs(&engine) - before;
        let what = format!("{policy:?}, group commit {grouped}");
        if policy == SyncPolicy::Always {
            assert!(
                completions >= 5,
                "{what}: {completions} fsyncs for 5 completions"
            );
            assert!(dead_letter >= 1, "{what}: the dead letter was not synced");
            assert!(forget >= 1, "{what}: the forget was not synced");
        } else {
            assert_eq!((completions, dead_letter, forget), (0, 0, 0), "{what}");
        }
    }
    // Periodic: the log is synced with no completion asking.
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let engine = builder(&dir, &clock)
        .store_statistics(true)
        .namespace("ns", small().sync(SyncPolicy::Periodic(ms(5))))
        .build()
        .unwrap();
    let ns = engine.namespace("ns").unwrap();
    acquire(&ns, b"k").complete().unwrap();
    let after_completion = syncs(&engine);
    spin_until(
        || syncs(&engine) > after_completion,
        "a periodic sync of the log",
    );
    // Without statistics, nothing is counted.
    let dir = TempDir::new();
    let (engine, ns) = open(&dir, &clock, small());
    acquire(&ns, b"k").complete().unwrap();
    assert_eq!(syncs(&engine), 0);
}

/// `Engine::sync` and `Namespace::sync` fsync the log on request, under a policy that
/// never would (by RocksDB's count of the write-ahead log's fsyncs), a handle's from
/// any namespace, and a handle's after its engine is gone; a failed fsync is a store
/// error, counted by the namespace's handle, and the next one that works is `Ok`.
#[test]
fn a_sync_on_request_forces_the_log_to_disk_or_says_it_did_not() {
    let syncs = |e: &Engine| e.stats().wal_syncs;
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let engine = builder(&dir, &clock)
        .store_statistics(true)
        .namespace("ns", small().sync(SyncPolicy::Never))
        .namespace("other", small().sync(SyncPolicy::Never))
        .build()
        .unwrap();
    let ns = engine.namespace("ns").unwrap();
    let other = engine.namespace("other").unwrap();
    acquire(&ns, b"k").complete().unwrap();
    let before = syncs(&engine);
    engine.sync().unwrap();
    assert!(syncs(&engine) > before, "Engine::sync made no fsync");
    acquire(&ns, b"k2").complete().unwrap();
    let before = syncs(&engine);
    other.sync().unwrap();
    assert!(syncs(&engine) > before, "Namespace::sync made no fsync");

    // The handle keeps the database open, and its sync works without the engine.
    drop(engine);
    acquire(&ns, b"k3").complete().unwrap();
    ns.sync().unwrap();
    drop((ns, other));
    let (engine, ns) = open(&dir, &clock, small());
    for key in [&b"k"[..], b"k2", b"k3"] {
        duplicate(&ns, key);
    }

    // A failed fsync is a store error, counted by the handle's namespace; and every
    // later sync asked for says so too, even one whose own fsync works: what the
    // failed one covered may be lost all the same. The next open starts afresh.
    let is_sync_error = |e: &Error| matches!(e, Error::Store(s) if s.operation() == "sync");
    engine.debug_fail_syncs(true);
    let err = engine.sync().unwrap_err();
    assert!(is_sync_error(&err), "{err:?}");
    let errors = ns.stats().store_errors;
    let err = ns.sync().unwrap_err();
    assert!(is_sync_error(&err), "{err:?}");
    assert_eq!(ns.stats().store_errors, errors + 1);
    engine.debug_fail_syncs(false);
    for _ in 0..2 {
        let err = engine.sync().unwrap_err();
        assert!(
            is_sync_error(&err) && err.to_string().contains("earlier fsync"),
            "{err:?}"
        );
        assert!(ns.sync().is_err());
    }
    drop((engine, ns));
    let (engine, ns) = open(&dir, &clock, small());
    engine.sync().unwrap();
    ns.sync().unwrap();
    drop((engine, ns));

    // Without a durable tier there is nothing to sync.
    let engine = Engine::builder()
        .clock(clock.clone())
        .namespace("ns", small())
        .build()
        .unwrap();
    engine.sync().unwrap();
    engine.namespace("ns").unwrap().sync().unwrap();
}

/// A failed fsync of the `Periodic` thread, which no caller waits for, is counted
/// and returned by every later sync asked for, through any handle, and by `close`,
/// even when their own fsync works (the completions it covered may be lost all the
/// same). Before, it was only logged: a consumer that synced before committing its
/// offsets was told `Ok`.
#[test]
fn a_failed_periodic_sync_is_counted_and_reported_by_every_later_sync() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let engine = builder(&dir, &clock)
        .namespace("ns", small().sync(SyncPolicy::Periodic(secs(3_600))))
        .build()
        .unwrap();
    let ns = engine.namespace("ns").unwrap();
    acquire(&ns, b"k").complete().unwrap();
    engine.debug_periodic_sync();
    assert_eq!(engine.stats().periodic_sync_failures, 0);
    engine.sync().unwrap();
    engine.debug_fail_syncs(true);
    engine.debug_periodic_sync();
    engine.debug_periodic_sync();
    engine.debug_fail_syncs(false);
    assert_eq!(engine.stats().periodic_sync_failures, 2);
    let errors = ns.stats().store_errors;
    let err = ns.sync().unwrap_err();
    assert!(
        matches!(&err, Error::Store(s) if s.operation() == "sync" && s.detail().contains("earlier fsync")),
        "{err:?}"
    );
    assert_eq!(ns.stats().store_errors, errors + 1);
    // To every caller, not only the first.
    assert!(engine.sync().is_err());
    assert!(ns.sync().is_err());
    assert_eq!(engine.stats().periodic_sync_failures, 2);
    drop(ns);
    let err = engine.close().unwrap_err();
    assert!(
        matches!(&err, Error::Store(s) if s.operation() == "sync"),
        "{err:?}"
    );
}

/// A forget whose delete was applied but whose fsync failed has taken effect: the
/// key is forgotten in both tiers (before, the hot entry stayed done while the record
/// was gone, so the key came back claimable only after a restart), and the sync's
/// error is returned.
#[test]
fn a_forget_applied_but_not_synced_forgets_the_key_in_both_tiers() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let cfg = || small().sync(SyncPolicy::Always);
    {
        let (engine, ns) = open(&dir, &clock, cfg());
        acquire(&ns, b"k").complete().unwrap();
        engine.debug_fail_syncs(true);
        assert!(ns.forget(b"k").is_err());
        engine.debug_fail_syncs(false);
        assert_eq!(ns.check(b"k").unwrap(), None);
        // A store that refuses the write changes nothing.
        acquire(&ns, b"j").complete().unwrap();
        engine.debug_fail_store_writes(true);
        assert!(ns.forget(b"j").is_err());
        engine.debug_fail_store_writes(false);
        assert!(matches!(
            ns.check(b"j").unwrap(),
            Some(KeyState::Done { .. })
        ));
    }
    let (_engine, ns) = open(&dir, &clock, cfg());
    assert!(ns.claim(b"k").unwrap().is_acquired());
    duplicate(&ns, b"j");
}

#[test]
fn every_sync_policy_builds_and_works() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let policies = [
        ("always", SyncPolicy::Always),
        ("periodic", SyncPolicy::Periodic(ms(50))),
        ("never", SyncPolicy::Never),
    ];
    let build = || {
        policies
            .iter()
            .fold(builder(&dir, &clock), |b, (name, policy)| {
                b.namespace(name, small().sync(*policy))
            })
            .build()
            .unwrap()
    };
    {
        let engine = build();
        for (name, _) in &policies {
            let ns = engine.namespace(name).unwrap();
            acquire(&ns, b"k")
                .complete_with_result(name.as_bytes())
                .unwrap();
            assert_eq!(duplicate(&ns, b"k").result(), Some(name.as_bytes()));
        }
    }
    let engine = build();
    for (name, _) in &policies {
        let ns = engine.namespace(name).unwrap();
        assert_eq!(duplicate(&ns, b"k").result(), Some(name.as_bytes()));
    }
    drop(engine);
    let err = builder(&dir, &clock)
        .namespace("ns", small().sync(SyncPolicy::Periodic(ms(0))))
        .build()
        .unwrap_err();
    assert!(
        matches!(&err, Error::InvalidConfig { namespace, .. } if namespace == "ns"),
        "{err:?}"
    );
}

#[test]
fn forget_deletes_a_key_from_both_tiers_across_a_restart() {
    let dir = TempDir::new();
    let clock = ManualClock::new(1_000_000);
    let cfg = || NamespaceConfig::new().ttl(secs(10)).retention(secs(100));
    {
        let (_engine, ns) = open(&dir, &clock, cfg());
        acquire(&ns, b"kept").complete().unwrap();
        acquire(&ns, b"gone").complete().unwrap();
        // Past the hot TTL, "gone" is in the durable tier only: forget must reach it.
        clock.advance(secs(20));
        assert!(ns.check(b"gone").unwrap().is_some());
        let before = ns.stats().forgotten;
        assert!(
            ns.forget(b"gone").unwrap(),
            "a live durable record was removed"
        );
        // Counted as forgotten like a key the hot tier held.
        assert_eq!(ns.stats().forgotten, before + 1);
        assert!(ns.check(b"gone").unwrap().is_none());
        assert!(!ns.forget(b"gone").unwrap(), "nothing left to remove");
        acquire(&ns, b"gone").release().unwrap();
    }
    let (_engine, ns) = open(&dir, &clock, cfg());
    duplicate(&ns, b"kept");
    acquire(&ns, b"gone").release().unwrap();
}

/// A durable engine (clock at 1,000,000) whose claim of `k` is being completed on
/// another thread, its durable write held (release it with
/// `debug_hold_completions(false)`); the directory first, so that it is dropped last.
#[allow(clippy::type_complexity)]
fn completion_held(
    cfg: NamespaceConfig,
) -> (
    TempDir,
    ManualClock,
    Engine,
    Namespace,
    std::thread::JoinHandle<idem::Result<()>>,
) {
    let dir = TempDir::new();
    let clock = ManualClock::new(1_000_000);
    let (engine, ns) = open(&dir, &clock, cfg);
    let guard = acquire(&ns, b"k");
    engine.debug_hold_completions(true);
    let completer = std::thread::spawn(move || guard.complete());
    spin_until(
        || engine.debug_held_completions() > 0,
        "a held durable write",
    );
    (dir, clock, engine, ns, completer)
}

#[test]
fn a_key_whose_completion_is_written_past_its_lease_is_checked_as_held_until_now() {
    let (_dir, clock, engine, ns, completer) = completion_held(small());
    // The lease (5 s) runs out while the completion is written.
    clock.advance(secs(7));
    let now = 1_007_000;
    let Some(KeyState::InProgress {
        lease_expires_at_ms,
        ..
    }) = ns.check(b"k").unwrap()
    else {
        panic!("held by its completion")
    };
    let Claim::InProgress(busy) = ns.claim(b"k").unwrap() else {
        panic!("held by its completion")
    };
    assert_eq!(busy.lease_expires_at_ms(), now);
    assert_eq!(
        lease_expires_at_ms, now,
        "check answers as the claim does, not with a time already past"
    );
    engine.debug_hold_completions(false);
    assert_eq!(completer.join().unwrap(), Ok(()));
    assert!(ns
        .check(b"k")
        .unwrap()
        .is_some_and(|s| matches!(s, KeyState::Done { .. })));
}

#[test]
fn a_forget_racing_a_completion_takes_effect_after_it() {
    // The completion marks the entry as completing, then waits before its write.
    let (dir, clock, engine, ns, completer) = completion_held(NamespaceConfig::new());
    // The forget deletes the (not yet written) record, finds the entry completing,
    // and must wait: removing it now would let the record land after the delete.
    let forgetter = {
        let ns = ns.clone();
        std::thread::spawn(move || ns.forget(b"k"))
    };
    while ns.debug_forget_waits() == 0 && !forgetter.is_finished() {
        std::thread::yield_now();
    }
    engine.debug_hold_completions(false);
    let completed = completer.join().unwrap();
    let forgot = forgetter.join().unwrap().unwrap();

    assert_eq!(completed, Ok(()));
    assert!(forgot, "the forget removed the completed key");
    // Completed, then forgotten: gone from both tiers, now and after a restart.
    assert!(ns.check(b"k").unwrap().is_none());
    assert_eq!(
        ns.debug_forget_waits(),
        1,
        "the forget waited for the write"
    );
    acquire(&ns, b"k").release().unwrap();
    drop((ns, engine));
    let (_engine, ns) = open(&dir, &clock, NamespaceConfig::new());
    acquire(&ns, b"k").release().unwrap();
}

#[test]
fn forgetting_a_held_claim_drops_its_deferred_marker() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let cfg = small().claim_markers(ClaimMarkers::Deferred);
    {
        let (engine, ns) = open(&dir, &clock, cfg.clone());
        let held = acquire(&ns, b"k");
        assert!(ns.forget(b"k").unwrap());
        // The marker would have been written here, after the forget.
        engine.run_maintenance();
        assert_eq!(held.complete(), Err(Error::LeaseLost));
    }
    let (engine, ns) = open(&dir, &clock, cfg);
    assert!(engine.orphans().is_empty(), "{:?}", engine.orphans());
    acquire(&ns, b"k").release().unwrap();
    assert_no_markers_after_close(&dir, (engine, ns));
}

#[test]
fn a_commit_delay_over_100_ms_is_refused() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let err = builder(&dir, &clock)
        .commit_delay(std::time::Duration::from_millis(101))
        .namespace("ns", small())
        .build()
        .unwrap_err();
    assert!(matches!(err, Error::InvalidConfig { .. }), "{err:?}");
    // Nothing was created.
    assert!(std::fs::read_dir(dir.path()).map_or(true, |mut d| d.next().is_none()));
}

#[test]
fn grouped_completions_are_synced_counted_and_survive_a_restart() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let cfg = || small().sync(SyncPolicy::Always);
    let open_grouped = || {
        let engine = builder(&dir, &clock)
            .commit_delay(std::time::Duration::from_micros(200))
            .namespace("ns", cfg())
            .build()
            .unwrap();
        let ns = engine.namespace("ns").unwrap();
        (engine, ns)
    };
    {
        let (engine, ns) = open_grouped();
        std::thread::scope(|s| {
            for t in 0..2 {
                let ns = ns.clone();
                s.spawn(move || {
                    for i in 0..20 {
                        acquire(&ns, format!("{t}-{i}").as_bytes())
                            .complete()
                            .unwrap();
                    }
                });
            }
        });
        let syncs = engine.stats().wal_group_syncs;
        assert!(
            (1..=40).contains(&syncs),
            "{syncs} fsyncs for 40 completions"
        );
        // With group commit off (a zero delay) the count stays zero: RocksDB syncs
        // the writes.
        let plain_dir = TempDir::new();
        let plain = builder(&plain_dir, &clock)
            .commit_delay(std::time::Duration::ZERO)
            .namespace("ns", cfg())
            .build()
            .unwrap();
        let pns = plain.namespace("ns").unwrap();
        acquire(&pns, b"k").complete().unwrap();
        assert_eq!(plain.stats().wal_group_syncs, 0);
        // By default (the adaptive wait) completions are grouped.
        let default_dir = TempDir::new();
        let (default, dns) = open(&default_dir, &clock, cfg());
        acquire(&dns, b"k").complete().unwrap();
        assert_eq!(default.stats().wal_group_syncs, 1);
    }
    let (_engine, ns) = open_grouped();
    for t in 0..2 {
        for i in 0..20 {
            duplicate(&ns, format!("{t}-{i}").as_bytes());
        }
    }
}

#[test]
fn a_completion_whose_write_panics_releases_its_claim() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let (engine, ns) = open(&dir, &clock, small());
    let single = acquire(&ns, b"single");
    let batch = vec![acquire(&ns, b"b1"), acquire(&ns, b"b2")];
    engine.debug_panic_completions(true);
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| single.complete()));
    assert!(panicked.is_err(), "the panic reaches the caller");
    let panicked =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ns.complete_batch(batch)));
    assert!(panicked.is_err(), "the panic reaches the caller");
    engine.debug_panic_completions(false);
    // The entries are not left marked as completing: each key is claimable at once,
    // and completes.
    for k in [&b"single"[..], b"b1", b"b2"] {
        acquire(&ns, k).complete().unwrap();
        duplicate(&ns, k);
    }
}

#[test]
fn a_claim_released_by_a_panicking_completion_leaves_no_marker_for_the_next_open() {
    for markers in MARKER_MODES {
        let dir = TempDir::new();
        let clock = ManualClock::new(T0);
        {
            let (engine, ns) = open(&dir, &clock, small().claim_markers(markers));
            let single = acquire(&ns, b"single");
            let batch = vec![acquire(&ns, b"b1"), acquire(&ns, b"b2")];
            // Deferred markers are on disk once maintenance has run.
            engine.run_maintenance();
            engine.debug_panic_completions(true);
            let single =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| single.complete()));
            let batch =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ns.complete_batch(batch)));
            assert!(
                single.is_err() && batch.is_err(),
                "{markers:?}: the panics reach the caller"
            );
            engine.debug_panic_completions(false);
            for k in [&b"single"[..], b"b1", b"b2"] {
                assert!(ns.check(k).unwrap().is_none(), "{markers:?}: released");
            }
        }
        // A clean shutdown, then the next open: the released claims are not orphans,
        // and their keys are free at once.
        let (engine, ns) = open(&dir, &clock, small().claim_markers(markers));
        assert!(
            engine.orphans().is_empty(),
            "{markers:?}: {:?}",
            engine.orphans()
        );
        for k in [&b"single"[..], b"b1", b"b2"] {
            acquire(&ns, k).complete().unwrap();
        }
    }
}

#[test]
fn a_grouped_completion_waits_for_its_fsync_and_fails_with_it() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let engine = builder(&dir, &clock)
        .commit_delay(std::time::Duration::from_micros(200))
        .namespace("ns", small().sync(SyncPolicy::Always))
        .build()
        .unwrap();
    let ns = engine.namespace("ns").unwrap();
    engine.debug_fail_syncs(true);
    let err = acquire(&ns, b"k").complete().unwrap_err();
    assert!(
        matches!(err, Error::Store(ref e) if e.operation() == "sync"),
        "{err:?}"
    );
    assert_eq!(engine.stats().wal_group_syncs, 1);
    engine.debug_fail_syncs(false);
    // The record was written before the failed sync: the key reads as done (the
    // documented difference from RocksDB's own sync path).
    duplicate(&ns, b"k");
    acquire(&ns, b"k2").complete().unwrap();
    assert_eq!(engine.stats().wal_group_syncs, 2);
}

/// A durable engine with one namespace "ns" and group commit off: RocksDB syncs each
/// completion's write itself.
fn open_ungrouped(dir: &TempDir, clock: &ManualClock, cfg: NamespaceConfig) -> (Engine, Namespace) {
    let engine = builder(dir, clock)
        .commit_delay(std::time::Duration::ZERO)
        .namespace("ns", cfg)
        .build()
        .unwrap();
    let ns = engine.namespace("ns").unwrap();
    (engine, ns)
}

/// With group commit off, a completion under `Always` whose sync fails is refused
/// as RocksDB refuses a synced write whose fsync failed (the write is not applied):
/// under `FailClosed`, `complete` returns the sync's error, as with group commit, but
/// the claim is released (a redelivery acquires the key, where group commit's
/// applied write answers `Duplicate`), and the next open finds neither a record nor
/// an orphan, in every marker mode.
#[test]
fn an_ungrouped_completion_whose_sync_fails_is_refused_and_released_under_fail_closed() {
    for mode in MARKER_MODES {
        let dir = TempDir::new();
        let clock = ManualClock::new(T0);
        let cfg = || {
            small()
                .sync(SyncPolicy::Always)
                .claim_markers(mode)
                .on_store_error(FailurePolicy::FailClosed)
        };
        {
            let (engine, ns) = open_ungrouped(&dir, &clock, cfg());
            let k = acquire(&ns, b"k");
            let again = acquire(&ns, b"again");
            // Deferred markers are on disk once maintenance has run.
            engine.run_maintenance();
            let errors = ns.stats().store_errors;
            engine.debug_fail_syncs(true);
            let err = k.complete().unwrap_err();
            let err2 = again.complete().unwrap_err();
            engine.debug_fail_syncs(false);
            for err in [err, err2] {
                assert!(
                    matches!(err, Error::Store(ref e) if e.operation() == "sync"),
                    "{mode:?}: {err:?}"
                );
            }
            let s = engine.stats();
            assert_eq!(s.fail_open_decisions, 0, "{mode:?}: {s:?}");
            assert_eq!(s.wal_group_syncs, 0, "{mode:?}: {s:?}");
            assert!(ns.stats().store_errors > errors, "{mode:?}");
            // Released: nothing says the key is done.
            assert_eq!(ns.check(b"k").unwrap(), None, "{mode:?}");
            // A redelivery acquires the key, and its completion is written.
            acquire(&ns, b"again").complete().unwrap();
        }
        let (engine, ns) = open_ungrouped(&dir, &clock, cfg());
        assert!(
            engine.orphans().is_empty(),
            "{mode:?}: {:?}",
            engine.orphans()
        );
        duplicate(&ns, b"again");
        acquire(&ns, b"k").complete().unwrap();
        assert_no_markers_after_close(&dir, (engine, ns));
    }
}

/// With group commit off, a synced completion whose write RocksDB refused (its
/// fsync failed) is an fsync of the log that failed, as a group's is: every later
/// `Engine::sync` reports it, though its own fsync works, since writes of the log
/// made before it (another namespace's, unsynced) may be lost with it.
#[test]
fn an_ungrouped_sync_failure_is_reported_by_every_later_sync() {
    for policy in [FailurePolicy::FailClosed, FailurePolicy::FailOpen] {
        let dir = TempDir::new();
        let clock = ManualClock::new(T0);
        let (engine, ns) = open_ungrouped(&dir, &clock, always(ClaimMarkers::Journal, policy));
        engine.sync().expect("nothing failed yet");
        let g = acquire(&ns, b"k");
        engine.debug_fail_syncs(true);
        let completed = g.complete();
        engine.debug_fail_syncs(false);
        assert_eq!(
            completed.is_ok(),
            policy == FailurePolicy::FailOpen,
            "{policy:?}: {completed:?}"
        );
        for _ in 0..2 {
            assert!(
                matches!(engine.sync(), Err(Error::Store(_))),
                "{policy:?}: the failed fsync is reported"
            );
        }
        // A completion after it is written and synced all the same.
        acquire(&ns, b"later").complete().unwrap();
        drop((ns, engine));
        let (engine, ns) = open_ungrouped(&dir, &clock, always(ClaimMarkers::Journal, policy));
        engine.sync().expect("a new open starts afresh");
        duplicate(&ns, b"later");
    }
}

/// With group commit off, a co-commit under `Always` whose sync fails is refused
/// whatever the policy (state changes never fail open), as with group commit it
/// returns the sync's error; but nothing was applied: the state keeps its values and
/// the claim is released, here and after a restart.
#[test]
fn an_ungrouped_co_commit_whose_sync_fails_stores_nothing_whatever_the_policy() {
    for policy in [FailurePolicy::FailClosed, FailurePolicy::FailOpen] {
        let dir = TempDir::new();
        let clock = ManualClock::new(T0);
        let open = || {
            let engine = builder(&dir, &clock)
                .commit_delay(std::time::Duration::ZERO)
                .namespace(
                    "ns",
                    small().sync(SyncPolicy::Always).on_store_error(policy),
                )
                .state_family("ledger")
                .build()
                .unwrap();
            let ns = engine.namespace("ns").unwrap();
            (engine, ns)
        };
        let put = |v: &[u8]| {
            let mut changes = StateChanges::new();
            changes.put("ledger", b"acct-1", v);
            changes
        };
        {
            let (engine, ns) = open();
            acquire(&ns, b"pay-1")
                .complete_with(None, put(b"10"))
                .unwrap();
            let g = acquire(&ns, b"pay-2");
            engine.debug_fail_syncs(true);
            let err = g.complete_with(Some(b"r"), put(b"20")).unwrap_err();
            engine.debug_fail_syncs(false);
            assert!(
                matches!(err, Error::Store(ref e) if e.operation() == "sync"),
                "{policy:?}: {err:?}"
            );
            assert_eq!(engine.stats().fail_open_decisions, 0, "{policy:?}");
            assert_eq!(
                engine.read_state("ledger", b"acct-1").unwrap(),
                Some(b"10".to_vec()),
                "{policy:?}"
            );
            assert_eq!(ns.check(b"pay-2").unwrap(), None, "{policy:?}");
        }
        let (engine, ns) = open();
        assert!(
            engine.orphans().is_empty(),
            "{policy:?}: {:?}",
            engine.orphans()
        );
        assert_eq!(
            engine.read_state("ledger", b"acct-1").unwrap(),
            Some(b"10".to_vec()),
            "{policy:?}"
        );
        duplicate(&ns, b"pay-1");
        acquire(&ns, b"pay-2")
            .complete_with(None, put(b"20"))
            .unwrap();
    }
}

/// With group commit off, a completion under `Always` whose sync fails under
/// `FailOpen` is decided from the hot tier, as with group commit (`Ok`, counted as a
/// fail-open decision, a redelivery answers `Duplicate`); but RocksDB applied
/// nothing, so its claim keeps its marker, and the next open reports it as an orphan
/// (in progress until its lease runs out), in every marker mode, where group
/// commit's applied record reads as done.
#[test]
fn an_ungrouped_completion_whose_sync_fails_under_fail_open_is_an_orphan_at_the_next_open() {
    for mode in MARKER_MODES {
        let dir = TempDir::new();
        let clock = ManualClock::new(T0);
        let cfg = || always(mode, FailurePolicy::FailOpen);
        {
            let (engine, ns) = open_ungrouped(&dir, &clock, cfg());
            let g = acquire(&ns, b"k");
            engine.debug_fail_syncs(true);
            g.complete().expect("fail open: decided from the hot tier");
            engine.debug_fail_syncs(false);
            let s = engine.stats();
            assert_eq!(s.fail_open_decisions, 1, "{mode:?}: {s:?}");
            assert_eq!(s.wal_group_syncs, 0, "{mode:?}: {s:?}");
            duplicate(&ns, b"k");
        }
        clock.set(T0 + 1_000);
        let (engine, ns) = open_ungrouped(&dir, &clock, cfg());
        let orphans = engine.orphans();
        assert_eq!(orphans.len(), 1, "{mode:?}: {orphans:?}");
        assert_eq!(orphans[0].lease_expires_at_ms, T0 + 600_000, "{mode:?}");
        in_progress(&ns, b"k");
        clock.set(T0 + 600_000);
        acquire(&ns, b"k").complete().unwrap();
        duplicate(&ns, b"k");
    }
}

// 13. The claim-marker journal (the default marker mode; Linux only: elsewhere the
// markers go to RocksDB as immediate ones).

#[cfg(target_os = "linux")]
/// The journal file of namespace "ns".
fn journal_file(dir: &TempDir) -> std::path::PathBuf {
    dir.path().join(journal_name())
}

#[cfg(target_os = "linux")]
/// The journal file's name: named by the xxh3-64 of the namespace name.
fn journal_name() -> String {
    format!(
        "idem-journal-{:016x}.bin",
        xxhash_rust::xxh3::xxh3_64(b"ns")
    )
}

/// A claim in flight at a crash is reported at the next open even when the key's
/// done record of an earlier run carries the same fencing token (tokens restart
/// every run) and, the clock having been set back across a restart, a completion
/// time after the claim's: the record was completed after the claim's lease had
/// ended, so it is not this claim's. (Here the claim was acquired over the live
/// record because its read failed under `FailOpen`.) Before, the marker was taken as
/// completed and dropped.
#[test]
fn an_orphan_is_reported_though_an_earlier_runs_record_with_its_token_reads_later() {
    let cfg = || small().on_store_error(FailurePolicy::FailOpen);
    for set_back in [true, false] {
        let dir = TempDir::new();
        let (first, second) = if set_back {
            (T0 + 100_000, T0)
        } else {
            (T0, T0 + 100_000)
        };
        let clock = ManualClock::new(first);
        {
            let (_engine, ns) = open_seeded(&dir, &clock, cfg());
            acquire(&ns, b"k").complete().unwrap();
        }
        clock.set(second);
        {
            let (engine, ns) = open_seeded(&dir, &clock, cfg());
            engine.debug_fail_store_reads(true);
            let g = acquire(&ns, b"k");
            engine.debug_keep_journal_markers(true);
            drop(g); // its marker stays in the journal, as a SIGKILL would leave it
            engine.debug_fail_store_reads(false);
        }
        let (engine, _ns) = open_seeded(&dir, &clock, cfg());
        let orphans = engine.orphans();
        assert_eq!(orphans.len(), 1, "set back {set_back}: {orphans:?}");
        assert_eq!(orphans[0].claimed_at_ms, second, "set back {set_back}");
    }
}

#[cfg(target_os = "linux")]
/// A durable engine with one namespace "ns" and the fixed seed 3 (so the tests know
/// the keys' fingerprints).
fn open_seeded(dir: &TempDir, clock: &ManualClock, cfg: NamespaceConfig) -> (Engine, Namespace) {
    let engine = builder(dir, clock)
        .seed(3)
        .namespace("ns", cfg)
        .build()
        .expect("opening the durable engine");
    let ns = engine.namespace("ns").expect("configured namespace");
    (engine, ns)
}

#[cfg(target_os = "linux")]
/// Fingerprints of the orphans an engine reported, sorted.
fn orphan_fps(engine: &Engine) -> Vec<u128> {
    let mut v: Vec<u128> = engine.orphans().iter().map(|o| o.fingerprint).collect();
    v.sort();
    v
}

#[cfg(target_os = "linux")]
#[test]
fn journal_markers_left_behind_are_orphans_unless_their_key_was_completed() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    {
        let (engine, ns) = open_seeded(&dir, &clock, small());
        let w0 = engine.stats().durable_writes;
        let gone = acquire(&ns, b"gone");
        let held = acquire(&ns, b"held");
        let done = acquire(&ns, b"done");
        let s = engine.stats();
        assert_eq!(
            s.durable_writes, w0,
            "journaled markers take no store write"
        );
        assert_eq!(s.journal_markers, 3, "{s:?}");
        gone.release().unwrap();
        assert_eq!(engine.stats().journal_markers, 2);
        // From here markers stay on disk when their claims end, as a crash right
        // after each would leave them.
        engine.debug_keep_journal_markers(true);
        drop(held);
        done.complete().unwrap();
        assert_eq!(engine.stats().durable_writes, w0 + 1, "the completion only");
    }
    let (engine, ns) = open_seeded(&dir, &clock, small());
    // "done" was completed before its marker could be cleared: settled, not an
    // orphan; "gone" was released: its marker was cleared.
    assert_eq!(orphan_fps(&engine), vec![fingerprint(b"held", 3)]);
    let o = &engine.orphans()[0];
    assert_eq!((o.claimed_at_ms, o.lease_expires_at_ms), (T0, T0 + 5_000));
    assert!(o.held && o.corrupt.is_none());
    in_progress(&ns, b"held");
    duplicate(&ns, b"done");
    let g = acquire(&ns, b"gone");
    assert_eq!(
        engine.stats().journal_markers,
        1,
        "this run's journal holds the new claim only"
    );
    drop(g);
    drop((engine, ns));
    // The orphan's marker moved into RocksDB at the open.
    let markers = entries(&raw_db(&dir), "claims:ns");
    assert_eq!(markers.len(), 1);
    assert_eq!(markers[0].0, fingerprint(b"held", 3).to_be_bytes());
}

#[cfg(target_os = "linux")]
#[test]
fn with_the_journal_a_failing_disk_is_found_at_completion() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    {
        let (engine, ns) = open(&dir, &clock, small());
        acquire(&ns, b"ok").complete().unwrap();
        assert_eq!(
            engine.stats().journal_markers,
            0,
            "a completion clears its marker"
        );
        engine.debug_fail_store_writes(true);
        let g = acquire(&ns, b"k");
        assert_eq!(engine.stats().store_errors, 0);
        let err = g.complete().unwrap_err();
        assert!(is_store_error(&err), "{err:?}");
        // Refused and released: no longer in flight, so no marker either.
        assert_eq!(ns.check(b"k").unwrap(), None);
        let s = engine.stats();
        assert_eq!((s.journal_markers, s.store_errors), (0, 1), "{s:?}");
        assert_eq!(s.journal_overflows, 0);
        engine.debug_fail_store_writes(false);
    }
    let (engine, ns) = open(&dir, &clock, small());
    assert!(engine.orphans().is_empty(), "{:?}", engine.orphans());
    acquire(&ns, b"k");
}

#[cfg(target_os = "linux")]
#[test]
fn a_full_journal_writes_further_markers_to_rocksdb() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let seeded = || open_seeded(&dir, &clock, small().journal_slots(2));
    let keys: [&[u8]; 3] = [b"a", b"b", b"c"];
    {
        let (engine, ns) = seeded();
        let w0 = engine.stats().durable_writes;
        let guards: Vec<_> = keys.iter().map(|k| acquire(&ns, k)).collect();
        let s = engine.stats();
        assert_eq!((s.journal_markers, s.journal_overflows), (2, 1), "{s:?}");
        assert_eq!(s.durable_writes, w0 + 1, "the overflowing marker's write");
        // All three stay on disk when released, as after a crash.
        engine.debug_keep_journal_markers(true);
        engine.debug_fail_store_writes(true);
        drop(guards);
        engine.debug_fail_store_writes(false);
    }
    let (engine, ns) = seeded();
    let mut want: Vec<u128> = keys.iter().map(|k| fingerprint(k, 3)).collect();
    want.sort();
    assert_eq!(orphan_fps(&engine), want);
    for k in keys {
        in_progress(&ns, k);
    }
}

#[cfg(target_os = "linux")]
#[test]
fn an_overflowed_marker_whose_lease_ran_out_goes_with_the_next_claims_completion() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let seeded = || open_seeded(&dir, &clock, small().journal_slots(1));
    {
        let (engine, ns) = seeded();
        let a = acquire(&ns, b"a"); // the journal's one slot
        let k = acquire(&ns, b"k"); // a marker in RocksDB
        assert_eq!(engine.stats().journal_overflows, 1);
        a.release().unwrap(); // the slot is free again
        clock.advance(secs(5));
        assert_eq!(k.release(), Err(Error::LeaseLost));
        // The next claim of k takes the journal's slot; its completion must delete
        // the first claim's marker as well.
        acquire(&ns, b"k").complete().unwrap();
        assert_eq!(engine.stats().journal_overflows, 1);
    }
    let (engine, ns) = seeded();
    assert!(engine.orphans().is_empty(), "{:?}", engine.orphans());
    duplicate(&ns, b"k");
}

#[cfg(target_os = "linux")]
/// Leaves claims of `keys` in the journal of a closed engine (seed 3), as a crash
/// with those claims in flight would.
fn leave_journal_markers(dir: &TempDir, clock: &ManualClock, keys: &[&[u8]]) {
    let (engine, ns) = open_seeded(dir, clock, small());
    let guards: Vec<_> = keys.iter().map(|k| acquire(&ns, k)).collect();
    engine.debug_keep_journal_markers(true);
    drop(guards);
}

#[cfg(target_os = "linux")]
/// Leaves claims of "first" and "second" in the journal of a closed engine, then
/// damages the first claim's slot (its claim time; 64 bytes of header before it).
/// The journal's bytes as damaged.
fn damage_the_first_slot(dir: &TempDir, clock: &ManualClock) -> Vec<u8> {
    leave_journal_markers(dir, clock, &[b"first", b"second"]);
    let mut bytes = std::fs::read(journal_file(dir)).unwrap();
    bytes[64 + 16] ^= 0x10;
    std::fs::write(journal_file(dir), &bytes).unwrap();
    bytes
}

#[cfg(target_os = "linux")]
/// The damaged journals kept aside in `dir` whose names end in `suffix`, sorted.
fn kept_aside(dir: &TempDir, suffix: &str) -> Vec<std::path::PathBuf> {
    let mut v: Vec<std::path::PathBuf> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy();
            n.starts_with(&format!("{}.damaged-", journal_name())) && n.ends_with(suffix)
        })
        .collect();
    v.sort();
    v
}

#[cfg(target_os = "linux")]
#[test]
fn a_damaged_journal_slot_is_reported_and_the_journal_kept_aside() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let bytes = damage_the_first_slot(&dir, &clock);
    let (engine, ns) = open_seeded(&dir, &clock, small());
    let orphans = engine.orphans();
    assert_eq!(orphans.len(), 2, "{orphans:?}");
    let bad: Vec<_> = orphans.iter().filter(|o| o.corrupt.is_some()).collect();
    assert_eq!(bad.len(), 1, "{orphans:?}");
    assert_eq!(bad[0].fingerprint, fingerprint(b"first", 3));
    in_progress(&ns, b"second");
    let kept = kept_aside(&dir, "");
    assert_eq!(kept.len(), 1, "the damaged journal is kept beside");
    assert_eq!(std::fs::read(&kept[0]).unwrap(), bytes, "as it was found");
}

/// A journal damaged at rest in its length (cut short, even inside its header after
/// the bytes that say whose journal it is; lengthened) or in its header's slot
/// count opens: the markers of its whole slots are taken over, what
/// may be lost is reported as a corrupt orphan, and the file is kept aside as found.
#[cfg(target_os = "linux")]
#[test]
fn a_journal_damaged_in_its_length_is_read_as_far_as_it_goes() {
    for damage in [
        "cut",
        "lengthened",
        "count 0",
        "count too large",
        "cut in the header",
    ] {
        let dir = TempDir::new();
        let clock = ManualClock::new(T0);
        leave_journal_markers(&dir, &clock, &[b"first", b"second"]);
        let mut bytes = std::fs::read(journal_file(&dir)).unwrap();
        // The slots holding a marker (their check word, the last of eight, is set).
        let held: Vec<usize> = bytes[64..]
            .chunks(64)
            .enumerate()
            .filter(|(_, s)| s[56..].iter().any(|&b| b != 0))
            .map(|(i, _)| i)
            .collect();
        assert_eq!(held.len(), 2);
        let slots = (bytes.len() - 64) / 64;
        match damage {
            "cut" => bytes.truncate(bytes.len() - 1),
            "lengthened" => bytes.extend_from_slice(&[1; 5]),
            "count 0" => bytes[12..16].copy_from_slice(&0u32.to_le_bytes()),
            "count too large" => bytes[12..16].copy_from_slice(&u32::MAX.to_le_bytes()),
            // Whose journal it is still reads (its first 32 bytes).
            _ => bytes.truncate(40),
        }
        std::fs::write(journal_file(&dir), &bytes).unwrap();
        let (engine, ns) = open_seeded(&dir, &clock, small());
        let orphans = engine.orphans();
        let bad: Vec<_> = orphans.iter().filter(|o| o.corrupt.is_some()).collect();
        assert_eq!(bad.len(), 1, "{damage}: {orphans:?}");
        assert_eq!(bad[0].fingerprint, 0);
        assert!(!bad[0].held);
        // Every marker in a whole slot is held, as any orphan's.
        let cut = damage == "cut";
        let whole = match damage {
            "cut in the header" => 0,
            _ => held.iter().filter(|&&i| !cut || i + 1 < slots).count(),
        };
        assert_eq!(
            orphans.iter().filter(|o| o.held).count(),
            whole,
            "{damage}: {orphans:?}"
        );
        for k in [&b"first"[..], b"second"] {
            if orphans
                .iter()
                .any(|o| o.held && o.fingerprint == fingerprint(k, 3))
            {
                in_progress(&ns, k);
            }
        }
        let kept = kept_aside(&dir, "");
        assert_eq!(
            kept.len(),
            1,
            "{damage}: the damaged journal is kept beside"
        );
        assert_eq!(std::fs::read(&kept[0]).unwrap(), bytes, "as it was found");
    }
}

#[cfg(target_os = "linux")]
#[test]
fn a_damaged_journal_kept_aside_by_an_open_that_did_not_finish_is_reported_by_the_next() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    damage_the_first_slot(&dir, &clock);
    {
        // The first open reports it and keeps the file aside.
        let (engine, _ns) = open_seeded(&dir, &clock, small());
        assert_eq!(engine.orphans().len(), 2);
    }
    let done = kept_aside(&dir, "");
    assert_eq!(done.len(), 1);
    assert!(
        !done[0].to_string_lossy().ends_with(".unreported"),
        "{done:?}: marked reported"
    );
    // As an open killed (or failed) after keeping it aside and before it finished
    // leaves it: the next open reports its damaged slot again.
    std::fs::rename(&done[0], format!("{}.unreported", done[0].display())).unwrap();
    {
        let (engine, ns) = open_seeded(&dir, &clock, small());
        let bad: Vec<u128> = engine
            .orphans()
            .iter()
            .filter(|o| o.corrupt.is_some())
            .map(|o| o.fingerprint)
            .collect();
        assert_eq!(bad, vec![fingerprint(b"first", 3)]);
        // "second" was moved into RocksDB by the first open: an orphan still.
        assert_eq!(engine.orphans().len(), 2, "{:?}", engine.orphans());
        in_progress(&ns, b"second");
    }
    assert_eq!(kept_aside(&dir, ".unreported").len(), 0);
    assert_eq!(kept_aside(&dir, "").len(), 1);
    let (engine, _ns) = open_seeded(&dir, &clock, small());
    assert!(
        engine.orphans().iter().all(|o| o.corrupt.is_none()),
        "reported once: {:?}",
        engine.orphans()
    );
}

#[cfg(target_os = "linux")]
#[test]
fn a_damaged_journal_kept_aside_that_no_longer_reads_is_left_unreported() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let bytes = damage_the_first_slot(&dir, &clock);
    drop(open_seeded(&dir, &clock, small()));
    let kept = kept_aside(&dir, "");
    assert_eq!(kept.len(), 1);
    // As an open that did not finish leaves it, and then damaged further at rest:
    // its magic bytes gone, it no longer reads as a journal.
    let unreported = std::path::PathBuf::from(format!("{}.unreported", kept[0].display()));
    std::fs::rename(&kept[0], &unreported).unwrap();
    let mut unreadable = bytes.clone();
    unreadable[0] ^= 1;
    let cut = &unreadable[..];
    std::fs::write(&unreported, cut).unwrap();
    for _ in 0..2 {
        let (engine, ns) = open_seeded(&dir, &clock, small());
        assert!(
            engine.orphans().iter().all(|o| o.corrupt.is_none()),
            "{:?}",
            engine.orphans()
        );
        in_progress(&ns, b"second");
        drop(engine);
        // Not marked reported: its slots never were. Left exactly as it was.
        assert_eq!(kept_aside(&dir, ".unreported"), vec![unreported.clone()]);
        assert_eq!(std::fs::read(&unreported).unwrap(), cut);
    }
}

#[cfg(target_os = "linux")]
#[test]
fn a_journal_of_another_version_refuses_the_open_and_is_left_as_it_is() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    leave_journal_markers(&dir, &clock, &[b"k"]);
    let mut bytes = std::fs::read(journal_file(&dir)).unwrap();
    bytes[8..12].copy_from_slice(&99u32.to_le_bytes());
    std::fs::write(journal_file(&dir), &bytes).unwrap();
    match builder(&dir, &clock)
        .seed(3)
        .namespace("ns", small())
        .build()
    {
        Err(Error::IncompatibleFormat { found, .. }) => assert_eq!(found, Some(99)),
        other => panic!("expected IncompatibleFormat, got {:?}", other.map(|_| ())),
    }
    assert_eq!(std::fs::read(journal_file(&dir)).unwrap(), bytes);
}

#[cfg(target_os = "linux")]
#[test]
fn a_refused_journal_leaves_the_database_as_it_was() {
    // Every way a journal is refused: another version, another database's seed,
    // another namespace's journal under this one's name.
    type Damage = fn(&mut Vec<u8>);
    let cases: [(&str, Damage); 3] = [
        ("version", |b| {
            b[8..12].copy_from_slice(&99u32.to_le_bytes())
        }),
        ("seed", |b| b[16] ^= 1),
        ("namespace", |b| b[24] ^= 1),
    ];
    for (what, damage) in cases {
        let dir = TempDir::new();
        let clock = ManualClock::new(T0);
        leave_journal_markers(&dir, &clock, &[b"k"]);
        let mut bytes = std::fs::read(journal_file(&dir)).unwrap();
        damage(&mut bytes);
        std::fs::write(journal_file(&dir), &bytes).unwrap();
        let snapshot = |dir: &TempDir| {
            let cfs = column_families(dir);
            let db = raw_db(dir);
            (cfs, entries(&db, "default"))
        };
        let before = snapshot(&dir);
        // The refused open asks for other settings, with and without another
        // namespace (a column family to add): nothing may be written.
        for another in [true, false] {
            let mut b = builder(&dir, &clock)
                .seed(3)
                .namespace("ns", small().ttl(secs(99)));
            if another {
                b = b.namespace("another", small());
            }
            let refused = b.build();
            assert!(
                matches!(refused, Err(Error::IncompatibleFormat { .. })),
                "{what}, {another}: {:?}",
                refused.map(|_| ())
            );
            assert_eq!(
                snapshot(&dir),
                before,
                "{what}, {another}: the database changed"
            );
            assert_eq!(std::fs::read(journal_file(&dir)).unwrap(), bytes, "{what}");
        }
    }
}

#[cfg(target_os = "linux")]
#[test]
fn journal_markers_are_read_whatever_the_marker_mode_of_the_next_run() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    leave_journal_markers(&dir, &clock, &[b"k"]);
    for _ in 0..2 {
        let (engine, ns) = open_seeded(&dir, &clock, immediate());
        assert_eq!(orphan_fps(&engine), vec![fingerprint(b"k", 3)]);
        in_progress(&ns, b"k");
        assert!(
            !journal_file(&dir).exists(),
            "a namespace without a journal removes the file once its markers moved"
        );
    }
}

#[cfg(target_os = "linux")]
#[test]
fn a_claim_that_lost_its_lease_never_clears_the_marker_of_the_next_claim() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let seeded = || open_seeded(&dir, &clock, small());
    {
        let (engine, ns) = seeded();
        let first = acquire(&ns, b"k");
        clock.advance(secs(6)); // past the 5 s lease
        let second = acquire(&ns, b"k");
        drop(first); // LeaseLost: its marker was replaced by the second claim's
        assert_eq!(engine.stats().journal_markers, 1);
        let other = acquire(&ns, b"other");
        clock.advance(secs(6));
        // Its own lease lost, a completion frees its slot.
        assert_eq!(other.complete().unwrap_err(), Error::LeaseLost);
        assert_eq!(engine.stats().journal_markers, 1);
        engine.debug_keep_journal_markers(true);
        drop(second);
    }
    let (engine, _ns) = seeded();
    assert_eq!(orphan_fps(&engine), vec![fingerprint(b"k", 3)]);
}

#[cfg(target_os = "linux")]
#[test]
fn a_refused_forget_keeps_the_journal_marker() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    {
        let (engine, ns) = open(&dir, &clock, small());
        let g = acquire(&ns, b"k");
        engine.debug_fail_store_writes(true);
        assert!(ns.forget(b"k").is_err());
        assert_eq!(engine.stats().journal_markers, 1, "nothing changed");
        engine.debug_fail_store_writes(false);
        engine.debug_keep_journal_markers(true);
        drop(g);
    }
    let (engine, ns) = open(&dir, &clock, small());
    assert_eq!(engine.orphans().len(), 1);
    in_progress(&ns, b"k");
}

#[cfg(target_os = "linux")]
#[test]
fn a_completion_decided_from_the_hot_tier_alone_keeps_its_journal_marker() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let cfg = small().on_store_error(FailurePolicy::FailOpen);
    {
        let (engine, ns) = open(&dir, &clock, cfg.clone());
        let g = acquire(&ns, b"k");
        engine.debug_fail_store_writes(true);
        g.complete().unwrap();
        duplicate(&ns, b"k");
        // Nothing on disk says it is done: the claim stays a marker, as with an
        // immediate marker whose delete was in the failed write.
        assert_eq!(engine.stats().journal_markers, 1);
        engine.debug_fail_store_writes(false);
    }
    let (engine, ns) = open(&dir, &clock, cfg);
    assert_eq!(engine.orphans().len(), 1);
    in_progress(&ns, b"k");
}

#[cfg(target_os = "linux")]
#[test]
fn a_marker_left_by_a_completed_claim_is_settled_even_after_the_clock_went_back() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0 + 10_000);
    {
        let (engine, ns) = open(&dir, &clock, small());
        let g = acquire(&ns, b"k"); // marker claimed at T0 + 10 s
        clock.set(T0);
        engine.debug_keep_journal_markers(true);
        g.complete().unwrap(); // done record completed at T0
    }
    let (engine, ns) = open(&dir, &clock, small());
    assert!(engine.orphans().is_empty(), "{:?}", engine.orphans());
    duplicate(&ns, b"k");
}

#[cfg(target_os = "linux")]
/// A durable engine's builder with namespaces "a" and "b" and the fixed seed 3.
fn two_namespaces(dir: &TempDir, clock: &ManualClock) -> EngineBuilder {
    builder(dir, clock)
        .seed(3)
        .namespace("a", small())
        .namespace("b", small())
}

#[cfg(target_os = "linux")]
/// Leaves claims of `in_a` and `in_b` in the journals of a closed engine built by
/// `two`, as a crash with those claims in flight would.
fn leave_markers_in_two(two: EngineBuilder, in_a: &[&[u8]], in_b: &[&[u8]]) {
    let engine = two.build().unwrap();
    let (a, b) = (
        engine.namespace("a").unwrap(),
        engine.namespace("b").unwrap(),
    );
    let guards: Vec<_> = in_a
        .iter()
        .map(|k| acquire(&a, k))
        .chain(in_b.iter().map(|k| acquire(&b, k)))
        .collect();
    engine.debug_keep_journal_markers(true);
    drop(guards);
}

#[cfg(target_os = "linux")]
/// The journal file of namespace `ns`: named by the xxh3-64 of its name.
fn journal_of(dir: &TempDir, ns: &str) -> std::path::PathBuf {
    dir.path().join(format!(
        "idem-journal-{:016x}.bin",
        xxhash_rust::xxh3::xxh3_64(ns.as_bytes())
    ))
}

#[cfg(target_os = "linux")]
#[test]
fn a_refused_journal_refuses_the_open_before_any_namespace_changed() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let two = || two_namespaces(&dir, &clock);
    leave_markers_in_two(two(), &[b"k"], &[b"k"]);
    let b_file = journal_of(&dir, "b");
    let good = std::fs::read(&b_file).unwrap();
    let mut bad = good.clone();
    bad[8..12].copy_from_slice(&99u32.to_le_bytes());
    std::fs::write(&b_file, &bad).unwrap();
    clock.advance(secs(6)); // both leases have run out: reported once, then deleted
    assert!(matches!(
        two().build(),
        Err(Error::IncompatibleFormat {
            found: Some(99),
            ..
        })
    ));
    std::fs::write(&b_file, &good).unwrap();
    let engine = two().build().unwrap();
    let mut names: Vec<&str> = engine
        .orphans()
        .iter()
        .map(|o| o.namespace.as_str())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["a", "b"],
        "namespace a's expired orphan was not consumed by the refused open"
    );
}

#[cfg(target_os = "linux")]
#[test]
fn an_open_that_fails_on_a_later_namespace_leaves_every_orphan_for_the_next() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let two = || two_namespaces(&dir, &clock);
    leave_markers_in_two(two(), &[b"x", b"y"], &[b"z"]);
    let file = |ns: &str| journal_of(&dir, ns);
    // Namespace a's journal: the first slot damaged (its claim time).
    let mut bytes = std::fs::read(file("a")).unwrap();
    bytes[64 + 16] ^= 0x10;
    std::fs::write(file("a"), &bytes).unwrap();
    clock.advance(secs(6)); // every lease has run out: reported once, then deleted
    let listing = || {
        let mut v: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("idem-journal-"))
            .collect();
        v.sort();
        v
    };
    let before = listing();
    // Namespace b's new journal cannot be made: its temporary name is taken by a
    // directory.
    let mut blocked = file("b").into_os_string();
    blocked.push(".new");
    std::fs::create_dir(&blocked).unwrap();
    let err = two().build().unwrap_err();
    assert!(
        matches!(&err, Error::Store(s) if s.operation() == "create journal"),
        "{err:?}"
    );
    std::fs::remove_dir(&blocked).unwrap();
    assert_eq!(
        listing(),
        before,
        "the failed open left every journal as it was"
    );
    assert_eq!(std::fs::read(file("a")).unwrap(), bytes);
    let engine = two().build().unwrap();
    let mut found: Vec<(&str, u128, bool)> = engine
        .orphans()
        .iter()
        .map(|o| (o.namespace.as_str(), o.fingerprint, o.corrupt.is_some()))
        .collect();
    found.sort();
    let mut want = vec![
        ("a", fingerprint(b"x", 3), true),
        ("a", fingerprint(b"y", 3), false),
        ("b", fingerprint(b"z", 3), false),
    ];
    want.sort();
    assert_eq!(found, want);
    drop(engine);
    let kept = listing()
        .into_iter()
        .filter(|n| n.contains(".damaged-"))
        .count();
    assert_eq!(kept, 1, "a's damaged journal is kept aside once");
    let engine = two().build().unwrap();
    assert!(engine.orphans().is_empty(), "{:?}", engine.orphans());
}

#[cfg(target_os = "linux")]
#[test]
fn a_corrupt_claim_marker_is_reported_until_the_keys_next_claim_settles() {
    // In the marker modes that write no `claims:` record of their own, the next
    // claim of the key must still delete the damaged one when it settles, by
    // completion or by release; otherwise every open reports it again, for good.
    for markers in [ClaimMarkers::Journal, ClaimMarkers::Deferred] {
        for complete in [true, false] {
            let dir = TempDir::new();
            let clock = ManualClock::new(T0);
            let cfg = || small().claim_markers(markers);
            {
                let (_engine, ns) = open_seeded(&dir, &clock, cfg());
                ns.debug_corrupt_claim_marker(b"k").unwrap();
                ns.debug_corrupt_claim_marker(b"other").unwrap();
            }
            let corrupt = |engine: &Engine| -> Vec<u128> {
                let mut v: Vec<u128> = engine
                    .orphans()
                    .iter()
                    .filter(|o| o.corrupt.is_some())
                    .map(|o| o.fingerprint)
                    .collect();
                v.sort();
                v
            };
            let mut both = vec![fingerprint(b"k", 3), fingerprint(b"other", 3)];
            both.sort();
            {
                let (engine, ns) = open_seeded(&dir, &clock, cfg());
                assert_eq!(corrupt(&engine), both, "{markers:?}");
                let g = acquire(&ns, b"k");
                if complete {
                    g.complete().unwrap();
                } else {
                    g.release().unwrap();
                }
            }
            let (engine, _ns) = open_seeded(&dir, &clock, cfg());
            assert_eq!(
                corrupt(&engine),
                vec![fingerprint(b"other", 3)],
                "{markers:?}, complete {complete}: k's damaged marker went with its claim; \
                 the other key's stays reported"
            );
        }
    }
}

#[test]
fn deferred_markers_whose_flush_failed_are_written_by_the_next() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let cfg = small().claim_markers(ClaimMarkers::Deferred);
    {
        let (engine, ns) = open(&dir, &clock, cfg.clone());
        let g = acquire(&ns, b"k");
        engine.debug_fail_store_writes(true);
        engine.run_maintenance(); // the flush fails
        engine.debug_fail_store_writes(false);
        let w0 = engine.stats().durable_writes;
        engine.run_maintenance();
        assert_eq!(
            engine.stats().durable_writes,
            w0 + 1,
            "the claim's marker was written by the next flush"
        );
        g.complete().unwrap();
    }
    // The completion deleted the flushed marker.
    let (engine, ns) = open(&dir, &clock, cfg);
    assert!(engine.orphans().is_empty(), "{:?}", engine.orphans());
    duplicate(&ns, b"k");
}

#[test]
fn a_forget_takes_the_note_of_the_keys_marker_on_disk_with_it() {
    // A flushed deferred marker, and a damaged marker of the last run, are noted on
    // disk until something deletes them; a forget does, and its note goes too.
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let cfg = || small().claim_markers(ClaimMarkers::Deferred);
    {
        let (_engine, ns) = open(&dir, &clock, cfg());
        ns.debug_corrupt_claim_marker(b"damaged").unwrap();
    }
    let (engine, ns) = open(&dir, &clock, cfg());
    assert_eq!(engine.stats().markers_on_disk, 1);
    let held = acquire(&ns, b"k");
    engine.run_maintenance(); // flushes k's marker
    assert_eq!(engine.stats().markers_on_disk, 2);
    // A refused forget leaves both the marker and its note.
    engine.debug_fail_store_writes(true);
    assert!(ns.forget(b"k").is_err());
    engine.debug_fail_store_writes(false);
    assert_eq!(engine.stats().markers_on_disk, 2);
    assert!(ns.forget(b"k").unwrap());
    assert_eq!(held.complete(), Err(Error::LeaseLost));
    assert!(!ns.forget(b"damaged").unwrap(), "no record, only a marker");
    assert_eq!(engine.stats().markers_on_disk, 0);
    drop((ns, engine));
    let (engine, _ns) = open(&dir, &clock, cfg());
    assert!(engine.orphans().is_empty(), "{:?}", engine.orphans());
}

/// Deferred markers, and a namespace that fails open when the store fails.
fn deferred_fail_open() -> NamespaceConfig {
    small()
        .claim_markers(ClaimMarkers::Deferred)
        .on_store_error(FailurePolicy::FailOpen)
}

#[test]
fn a_completion_decided_from_the_hot_tier_alone_keeps_its_deferred_marker() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let cfg = deferred_fail_open;
    {
        let (engine, ns) = open_seeded(&dir, &clock, cfg());
        let g = acquire(&ns, b"k");
        engine.debug_fail_store_writes(true);
        g.complete().unwrap();
        duplicate(&ns, b"k");
        engine.debug_fail_store_writes(false);
        // The shutdown flushes the marker: nothing on disk says the key is done.
    }
    let (engine, ns) = open_seeded(&dir, &clock, cfg());
    assert_eq!(orphan_fps(&engine), vec![fingerprint(b"k", 3)]);
    in_progress(&ns, b"k");
}

/// A deferred, fail-open namespace whose key `k` has a damaged claim marker on disk:
/// the engine that finds it claims `k` and gives the claim up with `give_up` while
/// every write fails (so the marker's delete, which that would make, fails too),
/// runs `then`, and completes `k`: that completion must delete the marker, which the
/// next open must find gone.
fn a_damaged_marker_goes_with_the_next_completion(
    give_up: impl FnOnce(ClaimGuard),
    then: impl FnOnce(&Engine, &ManualClock),
) {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let cfg = deferred_fail_open;
    {
        let (_engine, ns) = open_seeded(&dir, &clock, cfg());
        ns.debug_corrupt_claim_marker(b"k").unwrap();
    }
    let damaged = |engine: &Engine| {
        engine
            .orphans()
            .iter()
            .filter(|o| o.corrupt.is_some())
            .count()
    };
    {
        let (engine, ns) = open_seeded(&dir, &clock, cfg());
        assert_eq!(damaged(&engine), 1);
        let g = acquire(&ns, b"k");
        engine.debug_fail_store_writes(true);
        give_up(g);
        engine.debug_fail_store_writes(false);
        then(&engine, &clock);
        // Still known to be on disk: this completion deletes it with its write.
        acquire(&ns, b"k").complete().unwrap();
    }
    let (engine, _ns) = open_seeded(&dir, &clock, cfg());
    assert_eq!(damaged(&engine), 0, "{:?}", engine.orphans());
}

#[test]
fn a_failed_completion_leaves_an_earlier_claims_marker_noted_on_disk() {
    // The key is done from the hot tier alone (fail open) until its TTL ends.
    a_damaged_marker_goes_with_the_next_completion(
        |g| g.complete().unwrap(),
        |engine, clock| {
            clock.advance(secs(3600));
            engine.run_maintenance();
        },
    );
}

#[test]
fn a_release_whose_marker_delete_fails_leaves_the_marker_noted_on_disk() {
    a_damaged_marker_goes_with_the_next_completion(|g| g.release().unwrap(), |_, _| {});
}

#[cfg(target_os = "linux")]
#[test]
fn an_open_that_fails_before_changing_the_database_leaves_the_saved_prefilters() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let two = || two_namespaces(&dir, &clock);
    {
        let engine = two().build().unwrap();
        for name in ["a", "b"] {
            let ns = engine.namespace(name).unwrap();
            acquire(&ns, b"k").complete().unwrap();
        }
        // A clean shutdown saves each namespace's prefilter.
    }
    let mut blocked = journal_of(&dir, "b").into_os_string();
    blocked.push(".new");
    std::fs::create_dir(&blocked).unwrap();
    // a's filter is loaded, then b's journal cannot be made.
    assert!(two().build().is_err());
    std::fs::remove_dir(&blocked).unwrap();
    let engine = two().build().unwrap();
    let s = engine.stats();
    assert_eq!(
        (s.prefilter_loads, s.prefilter_rebuilds),
        (2, 0),
        "both saved filters were still there: {s:?}"
    );
    for name in ["a", "b"] {
        duplicate(&engine.namespace(name).unwrap(), b"k");
    }
    // Spent by the open that finished: a crash now (no clean shutdown) leaves none.
    let saved = std::fs::read_dir(dir.path())
        .unwrap()
        .filter(|e| {
            let n = e.as_ref().unwrap().file_name();
            n.to_string_lossy().contains("prefilter")
        })
        .count();
    assert_eq!(saved, 0);
}

#[cfg(target_os = "linux")]
#[test]
fn a_marker_is_not_settled_by_an_expired_record_that_happens_to_carry_its_token() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    {
        // Each run numbers its claims from the start again: the first claim of the
        // key's shard gets the same token in both runs.
        let (_engine, ns) = open_seeded(&dir, &clock, small().shards(1));
        acquire(&ns, b"k").complete().unwrap();
    }
    clock.advance(secs(7 * 60 + 1)); // past the 7 min retention
    {
        let (engine, ns) = open_seeded(&dir, &clock, small().shards(1));
        let g = acquire(&ns, b"k");
        engine.debug_keep_journal_markers(true);
        drop(g);
    }
    let (engine, ns) = open_seeded(&dir, &clock, small().shards(1));
    assert_eq!(orphan_fps(&engine), vec![fingerprint(b"k", 3)]);
    in_progress(&ns, b"k");
}

/// `SyncPolicy::Periodic` relies on the engine's sync thread, which stops when the
/// engine is dropped: a completion through a guard that outlived the engine syncs
/// the write-ahead log itself (here the sync fails, and the completion says so).
#[test]
fn a_completion_after_the_engine_is_dropped_syncs_under_periodic() {
    let dir = TempDir::new();
    let clock = ManualClock::new(1_000_000);
    let engine = Engine::builder()
        .clock(clock.clone())
        .maintenance_interval(None)
        .durable(dir.path())
        .namespace(
            "ns",
            small().sync(SyncPolicy::Periodic(std::time::Duration::from_secs(3_600))),
        )
        .build()
        .unwrap();
    let ns = engine.namespace("ns").unwrap();
    let before = acquire(&ns, b"before");
    let after = acquire(&ns, b"after");
    engine.debug_fail_syncs(true);
    // While the engine runs, a completion leaves the sync to its thread.
    before.complete().unwrap();
    drop(engine);
    let r = after.complete();
    assert!(matches!(r, Err(Error::Store(_))), "{r:?}");
}

/// A batch with nothing to complete (empty, or every guard's lease lost) writes
/// nothing: no fsync under `Always`, and a failing store does not fail it.
#[test]
fn a_complete_batch_with_nothing_to_complete_writes_nothing() {
    let dir = TempDir::new();
    let clock = ManualClock::new(1_000_000);
    let (engine, ns) = open(&dir, &clock, small());
    let stale = acquire(&ns, b"k");
    clock.advance(secs(10));
    let writes = engine.stats().durable_writes;
    engine.debug_fail_store_writes(true);
    assert!(ns.complete_batch(Vec::new()).unwrap().is_empty());
    let outcomes = ns.complete_batch(vec![stale]).unwrap();
    assert!(matches!(outcomes[..], [Err(Error::LeaseLost)]));
    engine.debug_fail_store_writes(false);
    assert_eq!(engine.stats().durable_writes, writes);
}

/// An expired done record stays in RocksDB until a compaction removes it. A key
/// claimed again past its retention then has two records, and inspection reports
/// the one an engine acts on: the claim in flight, not the expired record.
#[test]
fn inspecting_a_key_reports_its_claim_in_flight_over_its_expired_done_record() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let (_engine, ns) = open(&dir, &clock, small());
    acquire(&ns, b"k").complete().unwrap();
    // Past the TTL and the retention (7 x TTL): the record has expired.
    clock.advance(secs(600));
    let held = acquire(&ns, b"k");
    let now = T0 + 600_000;
    let k = idem::inspect(dir.path(), now)
        .unwrap()
        .key("ns", b"k")
        .unwrap()
        .expect("the key is known");
    assert!(ns.claim(b"k").unwrap().is_in_progress());
    assert!(
        !k.done && k.expires_at_ms > now,
        "an in-flight claim reported as {k:?}"
    );
    // Once that claim is given up, the expired record is what there is.
    held.release().unwrap();
    let k = idem::inspect(dir.path(), now)
        .unwrap()
        .key("ns", b"k")
        .unwrap()
        .expect("the expired record");
    assert!(k.done && k.expires_at_ms <= now, "{k:?}");
}

/// A damaged journal is kept aside under a name stamped with the wall clock; one
/// kept before under the same name (the clock set back across restarts, or two opens
/// in one millisecond) is never replaced. Files of those names stand for them here.
#[cfg(target_os = "linux")]
#[test]
fn a_kept_damaged_journal_is_never_replaced_by_a_later_one() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    damage_the_first_slot(&dir, &clock);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let earlier = 5_000u128;
    for ms in now..now + earlier {
        let p = dir.path().join(format!("{}.damaged-{ms}", journal_name()));
        std::fs::write(p, b"an earlier damaged journal").unwrap();
    }
    let (engine, _ns) = open_seeded(&dir, &clock, small());
    assert_eq!(engine.orphans().len(), 2);
    drop(engine);
    let kept = kept_aside(&dir, "");
    let survivors = kept
        .iter()
        .filter(|p| std::fs::read(p).unwrap() == b"an earlier damaged journal")
        .count();
    assert_eq!(
        (kept.len(), survivors),
        (earlier as usize + 1, earlier as usize),
        "an earlier kept journal was replaced"
    );
}

/// A crash in the middle of a lease extension leaves two markers of one claim in
/// the journal; an open keeps the later, and so does inspection (one claim in
/// flight, held to the later end).
#[cfg(target_os = "linux")]
#[test]
fn inspection_reads_two_markers_of_one_claim_as_an_engine_does() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    leave_journal_markers(&dir, &clock, &[b"k"]);
    let mut bytes = std::fs::read(journal_file(&dir)).unwrap();
    let word = |b: &[u8], slot: usize, i: usize| {
        let o = 64 + slot * 64 + i * 8;
        u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
    };
    assert_ne!(word(&bytes, 0, 7), 0, "k's marker in slot 0");
    // The renewed marker, whole, in slot 1: renewed at T0 + 4 s, until T0 + 60 s.
    let mut w: Vec<u64> = (0..7).map(|i| word(&bytes, 0, i)).collect();
    w[2] = T0 + 4_000;
    w[3] = T0 + 60_000;
    let body: Vec<u8> = w.iter().flat_map(|x| x.to_le_bytes()).collect();
    let check = xxhash_rust::xxh3::xxh3_64(&body).max(1);
    let o = 64 + 64;
    bytes[o..o + 56].copy_from_slice(&body);
    bytes[o + 56..o + 64].copy_from_slice(&check.to_le_bytes());
    std::fs::write(journal_file(&dir), &bytes).unwrap();
    // Between the two ends: an engine opened now holds the key until T0 + 60 s.
    let now = T0 + 10_000;
    let seen = idem::inspect(dir.path(), now).unwrap();
    let row = seen.namespaces.iter().find(|n| n.name == "ns").unwrap();
    let k = seen.key("ns", b"k").unwrap().unwrap();
    clock.set(now);
    let (engine, ns) = open_seeded(&dir, &clock, small());
    assert_eq!(engine.orphans().len(), 1);
    assert_eq!(engine.orphans()[0].lease_expires_at_ms, T0 + 60_000);
    in_progress(&ns, b"k");
    assert_eq!(
        (row.in_flight, k.expires_at_ms),
        (1, T0 + 60_000),
        "inspect: {row:?}, {k:?}"
    );
}

/// Claims given up without an end (guards leaked with `mem::forget`, a completion
/// refused for its input) keep their journal slots only until their lease has
/// ended: the maintenance pass then frees them, the journal holds the live claims
/// alone, new markers go into it again rather than into RocksDB, the given-up keys
/// are claimable, and a completion of a claim swept is refused. Before, they held their slots for the rest of the run, and every later marker
/// was a RocksDB write.
#[cfg(target_os = "linux")]
#[test]
fn claims_given_up_without_an_end_free_their_journal_slots_once_their_lease_ends() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let cfg = small().journal_slots(4).max_result_len(4);
    // (The leaked guards keep the database open: no restart here.)
    let (engine, ns) = open(&dir, &clock, cfg);
    std::mem::forget(acquire(&ns, b"leaked-1"));
    std::mem::forget(acquire(&ns, b"leaked-2"));
    give_up_too_large(&ns);
    let live = acquire(&ns, b"live");
    assert_eq!(engine.stats().journal_markers, 4);
    clock.advance(secs(4));
    let mut extended = acquire(&ns, b"extended");
    assert_eq!(engine.stats().journal_overflows, 1, "the journal is full");
    extended.extend_lease(secs(60)).unwrap();
    clock.advance(secs(2));
    // "live" and the three given up are past their lease; "extended" is not.
    assert!(live.lease_expires_at_ms() <= T0 + 6_000);
    engine.run_maintenance();
    let s = engine.stats();
    assert_eq!(s.journal_markers, 0, "{s:?}");
    for k in [&b"a"[..], b"b", b"c", b"d"] {
        std::mem::forget(acquire(&ns, k));
    }
    let s = engine.stats();
    assert_eq!((s.journal_markers, s.journal_overflows), (4, 1), "{s:?}");
    for k in [&b"leaked-1"[..], b"leaked-2", b"too-large"] {
        acquire(&ns, k).complete().unwrap();
    }
    assert_eq!(live.complete(), Err(Error::LeaseLost));
    extended.complete().unwrap();
}

/// A journal full of markers of claims given up without an end frees their slots
/// when a new marker finds it full, without a maintenance pass: the new marker goes
/// into the journal, and the key given up is claimable.
#[cfg(target_os = "linux")]
#[test]
fn a_marker_that_finds_the_journal_full_of_ended_leases_frees_their_slots() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let (engine, ns) = open(&dir, &clock, small().journal_slots(1));
    std::mem::forget(acquire(&ns, b"leaked"));
    clock.advance(secs(5));
    let g = acquire(&ns, b"next");
    let s = engine.stats();
    assert_eq!((s.journal_markers, s.journal_overflows), (1, 0), "{s:?}");
    assert_eq!(s.markers_on_disk, 0, "{s:?}");
    g.complete().unwrap();
    acquire(&ns, b"leaked").complete().unwrap();
    assert_eq!(engine.stats().journal_markers, 0);
}

/// The sweep keeps the marker of every claim that still holds its key: one whose
/// lease was extended though the store refused the renewed marker (fail open: the
/// journal keeps the old end), which completes after that old end; and a fail-open
/// completion that the hot tier alone holds, whose marker stays while the hot tier
/// answers for the key, and goes once its entry has left at the end of its TTL.
#[cfg(target_os = "linux")]
#[test]
fn the_sweep_keeps_the_markers_of_claims_that_still_hold_their_key() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let cfg = small()
        .journal_slots(1)
        .on_store_error(FailurePolicy::FailOpen);
    let (engine, ns) = open(&dir, &clock, cfg);
    // The one slot is full: the renewal goes to RocksDB, which refuses it.
    let mut g = acquire(&ns, b"extended");
    engine.debug_fail_store_writes(true);
    g.extend_lease(secs(30)).expect("fail open");
    engine.debug_fail_store_writes(false);
    assert_eq!(engine.stats().fail_open_decisions, 1);
    clock.advance(secs(10));
    engine.run_maintenance();
    assert_eq!(engine.stats().journal_markers, 1, "the claim is alive");
    in_progress(&ns, b"extended");
    g.complete().unwrap();
    assert_eq!(engine.stats().journal_markers, 0);

    let g = acquire(&ns, b"hot-only");
    engine.debug_fail_store_writes(true);
    g.complete().expect("fail open");
    engine.debug_fail_store_writes(false);
    assert_eq!(engine.stats().fail_open_decisions, 2);
    clock.advance(secs(30));
    engine.run_maintenance();
    assert_eq!(
        engine.stats().journal_markers,
        1,
        "its lease has ended, and the hot tier still answers for the key"
    );
    duplicate(&ns, b"hot-only");
    clock.advance(secs(31));
    engine.run_maintenance();
    assert_eq!(engine.stats().journal_markers, 0, "its entry has left");
    acquire(&ns, b"hot-only").complete().unwrap();
}

/// Claims given up without an end in a `Deferred` namespace (a guard leaked with
/// `mem::forget`, a completion refused with `ResultTooLarge`) keep their markers in
/// RocksDB, once flushed, only until their lease has ended: the maintenance pass
/// then deletes them (`markers_on_disk` counts the claims still holding their keys
/// alone), the given-up keys are claimable, and a completion of a claim swept is
/// refused. Before, they stayed on disk, and noted in memory, for the rest of the
/// run.
#[test]
fn given_up_claims_have_their_flushed_deferred_markers_deleted_once_their_lease_ends() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let cfg = small()
        .claim_markers(ClaimMarkers::Deferred)
        .max_result_len(4);
    // (The leaked guard keeps the database open: no restart here.)
    let (engine, ns) = open(&dir, &clock, cfg);
    std::mem::forget(acquire(&ns, b"leaked"));
    give_up_too_large(&ns);
    let live = acquire(&ns, b"live");
    engine.run_maintenance(); // flushes the three markers
    assert_eq!(engine.stats().markers_on_disk, 3);
    clock.advance(secs(4));
    let mut extended = acquire(&ns, b"extended");
    engine.run_maintenance();
    extended.extend_lease(secs(60)).unwrap();
    assert_eq!(engine.stats().markers_on_disk, 4);
    clock.advance(secs(2));
    // "live" and the two given up are past their lease; "extended" is not.
    engine.run_maintenance();
    let s = engine.stats();
    assert_eq!(s.markers_on_disk, 1, "{s:?}");
    engine.run_maintenance();
    assert_eq!(engine.stats().markers_on_disk, 1, "nothing more to sweep");
    for k in [&b"leaked"[..], b"too-large"] {
        acquire(&ns, k).complete().unwrap();
    }
    assert_eq!(live.complete(), Err(Error::LeaseLost));
    extended.complete().unwrap();
    assert_eq!(engine.stats().markers_on_disk, 0);
}

/// A claim given up without an end whose flushed marker the sweep deleted is not
/// reported at the next open; one that still held its key when the engine was
/// dropped (a completion decided from the hot tier alone, the store refusing it,
/// within its TTL) keeps its marker, and is.
#[test]
fn a_reopen_reports_no_given_up_claim_whose_rocksdb_marker_was_swept() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let cfg = small()
        .claim_markers(ClaimMarkers::Deferred)
        .max_result_len(4)
        .on_store_error(FailurePolicy::FailOpen);
    {
        let (engine, ns) = open(&dir, &clock, cfg.clone());
        give_up_too_large(&ns);
        let hot_only = acquire(&ns, b"hot-only");
        engine.run_maintenance();
        engine.debug_fail_store_writes(true);
        hot_only.complete().expect("fail open");
        engine.debug_fail_store_writes(false);
        assert_eq!(engine.stats().markers_on_disk, 2);
        clock.advance(secs(6));
        engine.run_maintenance();
        assert_eq!(engine.stats().markers_on_disk, 1, "hot-only's stays");
        duplicate(&ns, b"hot-only");
    }
    let (engine, ns) = open(&dir, &clock, cfg);
    let o = engine.orphans();
    assert_eq!(o.len(), 1, "{o:?}");
    assert_eq!(o[0].claimed_at_ms, T0, "{o:?}");
    acquire(&ns, b"too-large").complete().unwrap();
}

/// A journal's overflows into RocksDB of claims given up without an end (a leaked
/// guard, `ResultTooLarge`) are deleted by the maintenance pass once their lease
/// has ended; a claim whose renewed marker went to RocksDB (no journal slot free)
/// keeps it while its lease lasts.
#[cfg(target_os = "linux")]
#[test]
fn a_journals_overflow_markers_of_given_up_claims_are_deleted_once_their_lease_ends() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let cfg = small().journal_slots(1).max_result_len(4);
    let (engine, ns) = open(&dir, &clock, cfg);
    let mut held = acquire(&ns, b"held");
    std::mem::forget(acquire(&ns, b"leaked"));
    give_up_too_large(&ns);
    // The one slot is "held"'s: its renewal goes to RocksDB too.
    held.extend_lease(secs(60)).unwrap();
    let s = engine.stats();
    assert_eq!(
        (s.journal_markers, s.journal_overflows, s.markers_on_disk),
        (0, 3, 3),
        "{s:?}"
    );
    clock.advance(secs(6));
    engine.run_maintenance();
    let s = engine.stats();
    assert_eq!((s.journal_markers, s.markers_on_disk), (0, 1), "{s:?}");
    in_progress(&ns, b"held");
    for k in [&b"leaked"[..], b"too-large"] {
        acquire(&ns, k).complete().unwrap();
    }
    held.complete().unwrap();
    assert_eq!(engine.stats().markers_on_disk, 0);
}

/// The sweep of RocksDB markers keeps the marker of every claim that still holds
/// its key (`Deferred` markers, flushed): one whose lease was extended though the
/// store refused the renewed marker (fail open: RocksDB keeps the old end), which
/// completes after that old end; and a fail-open completion that the hot tier alone
/// holds, whose marker stays while the hot tier answers for the key, and goes once
/// its entry has left at the end of its TTL. A sweep whose delete the store refuses
/// keeps the marker, and the next pass deletes it.
#[test]
fn the_rocksdb_sweep_keeps_the_markers_of_claims_that_still_hold_their_key() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let cfg = small()
        .claim_markers(ClaimMarkers::Deferred)
        .on_store_error(FailurePolicy::FailOpen);
    let (engine, ns) = open(&dir, &clock, cfg);
    let mut g = acquire(&ns, b"extended");
    engine.run_maintenance();
    engine.debug_fail_store_writes(true);
    g.extend_lease(secs(30)).expect("fail open");
    engine.debug_fail_store_writes(false);
    assert_eq!(engine.stats().fail_open_decisions, 1);
    clock.advance(secs(10));
    engine.run_maintenance();
    assert_eq!(engine.stats().markers_on_disk, 1, "the claim is alive");
    in_progress(&ns, b"extended");
    g.complete().unwrap();
    assert_eq!(engine.stats().markers_on_disk, 0);

    let g = acquire(&ns, b"hot-only");
    engine.run_maintenance();
    engine.debug_fail_store_writes(true);
    g.complete().expect("fail open");
    engine.debug_fail_store_writes(false);
    assert_eq!(engine.stats().fail_open_decisions, 2);
    clock.advance(secs(30));
    engine.run_maintenance();
    assert_eq!(
        engine.stats().markers_on_disk,
        1,
        "its lease has ended, and the hot tier still answers for the key"
    );
    duplicate(&ns, b"hot-only");
    clock.advance(secs(31));
    let errors = engine.stats().store_errors;
    engine.debug_fail_store_writes(true);
    engine.run_maintenance();
    engine.debug_fail_store_writes(false);
    let s = engine.stats();
    assert_eq!(
        (s.markers_on_disk, s.store_errors),
        (1, errors + 1),
        "the delete was refused: {s:?}"
    );
    engine.run_maintenance();
    assert_eq!(engine.stats().markers_on_disk, 0, "its entry has left");
    acquire(&ns, b"hot-only").complete().unwrap();
}

/// A renewal whose marker finds the journal full of markers whose lease has ended
/// (a guard leaked) sweeps it first, as a new claim's marker does: the renewed
/// marker goes into the slot freed, not into RocksDB, and the key given up is
/// claimable. Before, such a renewal was a RocksDB write.
#[cfg(target_os = "linux")]
#[test]
fn a_renewal_that_finds_the_journal_full_of_ended_leases_frees_their_slots() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let (engine, ns) = open(&dir, &clock, small().journal_slots(2));
    std::mem::forget(acquire(&ns, b"leaked"));
    clock.advance(secs(3));
    let mut live = acquire(&ns, b"live");
    clock.advance(secs(3));
    // "leaked" is past its lease; "live" is not, and its renewal needs a free slot.
    live.extend_lease(secs(60)).unwrap();
    let s = engine.stats();
    assert_eq!(
        (s.journal_markers, s.journal_overflows, s.markers_on_disk),
        (1, 0, 0),
        "the renewed marker in the journal: {s:?}"
    );
    clock.advance(secs(10));
    in_progress(&ns, b"live");
    acquire(&ns, b"leaked").complete().unwrap();
    live.complete().unwrap();
    assert_eq!(engine.stats().journal_markers, 0);
}

/// A renewal refused with `LeaseLost` removes its claim's marker at once, wherever
/// it is (a journal slot, RocksDB after an overflow), as a refused completion does,
/// rather than leaving it until the guard ends or a sweep finds it; a later claim
/// of the key keeps its own.
#[cfg(target_os = "linux")]
#[test]
fn a_renewal_refused_for_a_lost_lease_removes_its_marker() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let (engine, ns) = open(&dir, &clock, small().journal_slots(2));
    let mut in_journal = acquire(&ns, b"in-journal");
    let mut again = acquire(&ns, b"again");
    let mut on_disk = acquire(&ns, b"on-disk");
    let s = engine.stats();
    assert_eq!(
        (s.journal_markers, s.journal_overflows, s.markers_on_disk),
        (2, 1, 1),
        "{s:?}"
    );
    clock.advance(secs(6));
    let later = acquire(&ns, b"again");
    assert_eq!(in_journal.extend_lease(secs(60)), Err(Error::LeaseLost));
    assert_eq!(on_disk.extend_lease(secs(60)), Err(Error::LeaseLost));
    assert_eq!(again.extend_lease(secs(60)), Err(Error::LeaseLost));
    let s = engine.stats();
    assert_eq!(
        (s.journal_markers, s.markers_on_disk),
        (1, 0),
        "only the later claim's marker is left, the guards still alive: {s:?}"
    );
    for g in [in_journal, again, on_disk] {
        assert_eq!(g.complete(), Err(Error::LeaseLost));
    }
    assert_eq!(engine.stats().journal_markers, 1, "the later claim's");
    later.complete().unwrap();
    assert_eq!(engine.stats().journal_markers, 0);
}
