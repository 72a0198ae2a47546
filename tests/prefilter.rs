//! The prefilter: Bloom filters in front of the durable tier that answer "definitely
//! new" without a durable read, rebuilt from the durable tier at every open, never
//! declaring a stored key new.

#![cfg(all(feature = "durable", not(idem_loom)))]

mod util;

use idem::{
    Claim, ClaimGuard, Clock, Engine, Error, ManualClock, Namespace, NamespaceConfig, SyncPolicy,
};
use rand::{Rng, SeedableRng};
use util::*;

/// A durable namespace "ns" in `dir` on `clock` (no maintenance thread).
fn open(dir: &TempDir, clock: &ManualClock, cfg: NamespaceConfig) -> (Engine, Namespace) {
    open_on(dir, clock.clone(), cfg)
}

/// As [`open`], on any clock.
fn open_on(
    dir: &TempDir,
    clock: impl Clock + 'static,
    cfg: NamespaceConfig,
) -> (Engine, Namespace) {
    let engine = Engine::builder()
        .clock(clock)
        .maintenance_interval(None)
        .durable(dir.path())
        .namespace("ns", cfg)
        .build()
        .expect("opening the durable engine");
    let ns = engine.namespace("ns").expect("configured namespace");
    (engine, ns)
}

/// TTL 60 s, retention 240 s, lease 5 s, no fsync (the tests do not cut power).
fn cfg() -> NamespaceConfig {
    small()
        .retention(secs(240))
        .sync(SyncPolicy::Never)
        .expected_keys(10_000)
}

/// The prefilter files saved at clean shutdowns in `dir`.
fn saved_filters(dir: &TempDir) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("idem-prefilter-"))
        })
        .collect();
    v.sort();
    v
}

fn remove_saved_filters(dir: &TempDir) {
    for f in saved_filters(dir) {
        std::fs::remove_file(f).unwrap();
    }
}

/// Fills a database with 1,000 completed keys and shuts it down cleanly; returns
/// the saved filter's path.
fn filled(dir: &TempDir, clock: &ManualClock) -> std::path::PathBuf {
    {
        let (_engine, ns) = open(dir, clock, cfg());
        for i in 0..1_000 {
            complete(&ns, key(i).as_bytes());
        }
    }
    let files = saved_filters(dir);
    assert_eq!(files.len(), 1, "{files:?}");
    files[0].clone()
}

/// Reopens and checks that every one of the 1,000 keys is a duplicate; returns
/// (loads, rebuilds).
fn reopen_and_check(dir: &TempDir, clock: &ManualClock, cfg: NamespaceConfig) -> (u64, u64) {
    let (engine, ns) = open(dir, clock, cfg);
    // The file is good for one open only.
    assert!(saved_filters(dir).is_empty());
    for i in 0..1_000 {
        assert!(
            ns.claim(key(i).as_bytes()).unwrap().is_duplicate(),
            "key {i}"
        );
    }
    let s = engine.stats();
    (s.prefilter_loads, s.prefilter_rebuilds)
}

#[test]
fn a_clean_shutdown_saves_the_filter_and_the_next_open_loads_it() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    filled(&dir, &clock);
    assert_eq!(reopen_and_check(&dir, &clock, cfg()), (1, 0));
}

#[test]
fn the_longest_namespace_name_saves_and_loads_its_filter() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let name = "n".repeat(idem::MAX_NAMESPACE_LEN);
    let open = || {
        let engine = Engine::builder()
            .clock(clock.clone())
            .maintenance_interval(None)
            .durable(dir.path())
            .namespace(&name, cfg())
            .build()
            .expect("opening the durable engine");
        let ns = engine.namespace(&name).unwrap();
        (engine, ns)
    };
    {
        let (_engine, ns) = open();
        complete(&ns, b"k");
    }
    assert_eq!(saved_filters(&dir).len(), 1);
    let (engine, ns) = open();
    let s = engine.stats();
    assert_eq!((s.prefilter_loads, s.prefilter_rebuilds), (1, 0), "{s:?}");
    assert!(ns.claim(b"k").unwrap().is_duplicate());
}

#[test]
fn a_missing_saved_filter_is_rebuilt() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let file = filled(&dir, &clock);
    std::fs::remove_file(file).unwrap();
    assert_eq!(reopen_and_check(&dir, &clock, cfg()), (0, 1));
}

#[test]
fn a_truncated_or_damaged_saved_filter_is_never_trusted() {
    for damage in 0..3 {
        let dir = TempDir::new();
        let clock = ManualClock::new(T0);
        let file = filled(&dir, &clock);
        let mut bytes = std::fs::read(&file).unwrap();
        match damage {
            0 => bytes.truncate(bytes.len() / 2),
            1 => bytes.truncate(3),
            // A flipped bit in the middle of the bits: the checksum catches it.
            _ => {
                let mid = bytes.len() / 2;
                bytes[mid] ^= 0x10;
            }
        }
        std::fs::write(&file, bytes).unwrap();
        assert_eq!(
            reopen_and_check(&dir, &clock, cfg()),
            (0, 1),
            "damage {damage}"
        );
    }
}

#[test]
fn a_saved_filter_of_other_settings_is_rebuilt() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    filled(&dir, &clock);
    assert_eq!(
        reopen_and_check(&dir, &clock, cfg().expected_keys(20_000)),
        (0, 1)
    );
}

#[test]
fn a_filter_saved_before_a_later_write_is_stale_and_rebuilt() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    {
        let (engine, ns) = open(&dir, &clock, cfg());
        for i in 0..999 {
            complete(&ns, key(i).as_bytes());
        }
        let late = ns.claim(key(999).as_bytes()).unwrap();
        drop(engine); // saves the filter, without key 999
        assert_eq!(saved_filters(&dir).len(), 1);
        // The handle outlives the engine and completes one more key: the saved
        // filter does not know it, and must not be trusted.
        match late {
            Claim::Acquired(g) => g.complete().unwrap(),
            other => panic!("expected Acquired, got {other:?}"),
        }
    }
    assert_eq!(reopen_and_check(&dir, &clock, cfg()), (0, 1));
}

fn complete(ns: &Namespace, k: &[u8]) {
    match ns.claim(k).unwrap() {
        Claim::Acquired(g) => g.complete().unwrap(),
        other => panic!("expected Acquired for {:?}, got {other:?}", key_str(k)),
    }
}

fn key_str(k: &[u8]) -> String {
    String::from_utf8_lossy(k).into_owned()
}

#[test]
fn new_keys_cost_no_durable_read() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    // A fixed fingerprint seed: with a random one, a filter false positive among
    // the 1,000 look-ups (about one run in a thousand) would read the durable tier.
    let engine = Engine::builder()
        .clock(clock.clone())
        .maintenance_interval(None)
        .seed(0x1de3)
        .durable(dir.path())
        .namespace("ns", cfg())
        .build()
        .expect("opening the durable engine");
    let ns = engine.namespace("ns").expect("configured namespace");
    for i in 0..1_000 {
        complete(&ns, key(i).as_bytes());
    }
    let s = engine.stats();
    assert_eq!(s.durable_reads, 0, "{s:?}");
    assert_eq!(s.prefilter_negatives, 1_000);
    assert_eq!(s.prefilter_keys, 1_000);
    assert!(s.prefilter_bytes > 0);
}

#[test]
fn without_the_prefilter_every_hot_miss_reads_the_durable_tier() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let (engine, ns) = open(&dir, &clock, cfg().prefilter(false));
    for i in 0..100 {
        complete(&ns, key(i).as_bytes());
    }
    let s = engine.stats();
    assert_eq!(s.durable_reads, 100);
    assert_eq!((s.prefilter_negatives, s.prefilter_bytes), (0, 0));
}

#[test]
fn memory_only_namespaces_have_no_prefilter() {
    let (engine, ns, _clock) = engine_with(small().expected_keys(1_000_000));
    for i in 0..100 {
        complete(&ns, key(i).as_bytes());
    }
    let s = engine.stats();
    assert_eq!(s.prefilter_bytes, 0);
    assert_eq!(s.prefilter_negatives + s.prefilter_passes, 0);
}

#[test]
fn after_a_restart_the_rebuilt_filter_lets_every_stored_key_through() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    {
        let (_engine, ns) = open(&dir, &clock, cfg());
        for i in 0..2_000 {
            complete(&ns, key(i).as_bytes());
        }
    }
    remove_saved_filters(&dir); // as after a crash
                                // Past the hot TTL, within retention.
    clock.advance(secs(120));
    let (engine, ns) = open(&dir, &clock, cfg());
    let s = engine.stats();
    assert_eq!(
        s.prefilter_keys, 2_000,
        "rebuilt from the durable tier: {s:?}"
    );
    for i in 0..2_000 {
        assert!(
            ns.claim(key(i).as_bytes()).unwrap().is_duplicate(),
            "key {i}"
        );
    }
    // New keys: answered by the prefilter alone, but for its false positives.
    for i in 10_000..20_000 {
        assert!(ns.claim(key(i).as_bytes()).unwrap().is_acquired());
    }
    let s = engine.stats();
    assert_eq!(s.prefilter_passes, 2_000 + s.prefilter_false_positives);
    assert_eq!(
        s.prefilter_negatives + s.prefilter_false_positives,
        10_000,
        "{s:?}"
    );
    assert_eq!(s.durable_reads, s.prefilter_passes);
    // Target 1%; the observed rate stays within 2x.
    assert!(s.prefilter_false_positive_rate() <= 0.02, "{s:?}");
}

#[test]
fn records_past_retention_are_left_out_of_the_rebuilt_filter() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    {
        let (_engine, ns) = open(&dir, &clock, cfg());
        for i in 0..100 {
            complete(&ns, key(i).as_bytes());
        }
        clock.advance(secs(200));
        for i in 100..150 {
            complete(&ns, key(i).as_bytes());
        }
    }
    clock.advance(secs(41)); // the first 100 are past their 240 s retention
    remove_saved_filters(&dir); // as after a crash: rebuilt from the records
    let (engine, ns) = open(&dir, &clock, cfg());
    assert_eq!(engine.stats().prefilter_rebuilds, 1);
    assert_eq!(engine.stats().prefilter_keys, 50);
    for i in 0..100 {
        assert!(
            ns.claim(key(i).as_bytes()).unwrap().is_acquired(),
            "key {i}"
        );
    }
    for i in 100..150 {
        assert!(
            ns.claim(key(i).as_bytes()).unwrap().is_duplicate(),
            "key {i}"
        );
    }
}

#[test]
fn a_retention_shortened_across_a_restart_keeps_the_prefilter_near_its_plan() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let with = |retention: u64| {
        small()
            .retention(secs(retention))
            .sync(SyncPolicy::Never)
            .expected_keys(10_000)
    };
    // A day's retention: 96 keys completed 15 minutes apart.
    {
        let (_engine, ns) = open(&dir, &clock, with(86_400));
        for i in 0..96 {
            if i > 0 {
                clock.advance(secs(900));
            }
            complete(&ns, key(i).as_bytes());
        }
    }
    // Reopened with a retention of one minute (a 15 s generation): the old records
    // still expire over the next day, and their keys are still duplicates.
    clock.advance(secs(1));
    let (engine, ns) = open(&dir, &clock, with(60));
    let s = engine.stats();
    assert_eq!(s.prefilter_rebuilds, 1, "{s:?}");
    // Filed one generation each, they took 96 filters (5,760 if spread over every
    // 15 s of the day); in generations doubling with their distance, at most a
    // dozen and a half.
    assert!(s.prefilter_generations <= 18, "{s:?}");
    for i in 0..96 {
        // Key i was completed 95 - i quarter hours ago, with a day's retention.
        let claim = ns.claim(key(i).as_bytes()).unwrap();
        assert!(claim.is_duplicate(), "key {i}: {claim:?}");
    }
    // A generation lasts at most twice as long as its records are away: two days
    // on, every old record has expired, and so has every generation.
    clock.advance(secs(2 * 86_400));
    engine.run_maintenance();
    assert_eq!(engine.stats().prefilter_generations, 0);
}

#[test]
fn a_handle_that_outlives_its_engine_drops_generations_past_retention() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let (engine, ns) = open(&dir, &clock, cfg());
    drop(engine);
    // One completion a minute (a generation's span) for 40 minutes, retention 4.
    for i in 0..40 {
        complete(&ns, key(i).as_bytes());
        clock.advance(secs(60));
    }
    // Before, no maintenance ran and every generation stayed: 40.
    let s = ns.stats();
    assert!(s.prefilter_generations <= 6, "{s:?}");
    for i in 37..40 {
        assert!(
            ns.claim(key(i).as_bytes()).unwrap().is_duplicate(),
            "key {i}"
        );
    }
}

/// A sliding window's rewrite keeps its record's first completion time, which after
/// a clock set back across a restart is later than now: the generations a handle
/// without its engine drops are those before the clock's reading, not that time.
#[test]
fn a_handle_without_its_engine_drops_no_live_generation_after_a_clock_set_back() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let with = |retention: u64| cfg().retention(secs(retention)).extend_on_duplicate(true);
    {
        let (_engine, ns) = open(&dir, &clock, with(240));
        clock.advance(secs(1_000));
        complete(&ns, b"early"); // expires at T0 + 1,240 s
        clock.advance(secs(1_500));
        complete(&ns, b"late"); // completed at T0 + 2,500 s
    }
    // Set back to before "early" expires; retention now an hour (a 900 s span).
    clock.set(T0 + 1_100_000);
    let (engine, ns) = open(&dir, &clock, with(3_600));
    drop(engine);
    // A sighting extends "late" past its record: rewritten, with its completion
    // time of T0 + 2,500 s.
    assert!(ns.claim(b"late").unwrap().is_duplicate());
    // Before, the rewrite dropped the generations before T0 + 2,500 s, "early"'s too.
    assert!(ns.claim(b"early").unwrap().is_duplicate());
}

/// A clock whose every reading panics once `fail` is set.
#[derive(Clone)]
struct Failing {
    manual: ManualClock,
    fail: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Clock for Failing {
    fn now_ms(&self) -> u64 {
        if self.fail.load(std::sync::atomic::Ordering::SeqCst) {
            panic!("the clock failed");
        }
        self.manual.now_ms()
    }
}

/// A durable engine in `dir` on `clock` with namespaces "a" and "b" of [`cfg`].
fn open_two(dir: &TempDir, clock: impl idem::Clock) -> Engine {
    Engine::builder()
        .clock(clock)
        .maintenance_interval(None)
        .durable(dir.path())
        .namespace("a", cfg())
        .namespace("b", cfg())
        .build()
        .unwrap()
}

/// A clock that panics while the engine drops does not stop the drop: every
/// namespace's filter is saved, stamped with its last reading. Before, the panic
/// left the drop at the first namespace (and, during an unwinding, aborted).
#[test]
fn a_clock_that_panics_while_the_engine_drops_leaves_every_filter_saved() {
    let dir = TempDir::new();
    let clock = Failing {
        manual: ManualClock::new(T0),
        fail: Default::default(),
    };
    let open_two = || open_two(&dir, clock.clone());
    let engine = open_two();
    for name in ["a", "b"] {
        complete(&engine.namespace(name).unwrap(), b"k");
    }
    clock.fail.store(true, std::sync::atomic::Ordering::SeqCst);
    let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(engine)));
    assert!(dropped.is_ok(), "the drop panicked");
    assert_eq!(saved_filters(&dir).len(), 2, "{:?}", saved_filters(&dir));
    // Both load at the next open, and answer for their keys.
    clock.fail.store(false, std::sync::atomic::Ordering::SeqCst);
    let engine = open_two();
    assert!(saved_filters(&dir).is_empty());
    let s = engine.stats();
    assert_eq!(s.prefilter_loads, 2, "{s:?}");
    for name in ["a", "b"] {
        let ns = engine.namespace(name).unwrap();
        assert!(ns.claim(b"k").unwrap().is_duplicate(), "{name}");
    }
}

/// A clock that reads as its [`ManualClock`], except for one reading, the `n`th after
/// [`Jumpy::jump_at`], which reads a later time (a step ahead and straight back).
#[derive(Clone)]
struct Jumpy {
    manual: ManualClock,
    countdown: std::sync::Arc<std::sync::atomic::AtomicU64>,
    to: u64,
    reads: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Jumpy {
    fn new(manual: ManualClock, to: u64) -> Jumpy {
        Jumpy {
            manual,
            countdown: Default::default(),
            to,
            reads: Default::default(),
        }
    }

    fn jump_at(&self, n: u64) {
        self.countdown.store(n, std::sync::atomic::Ordering::SeqCst);
    }

    fn reads(&self) -> u64 {
        self.reads.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Clock for Jumpy {
    fn now_ms(&self) -> u64 {
        use std::sync::atomic::Ordering::SeqCst;
        self.reads.fetch_add(1, SeqCst);
        let left = self.countdown.load(SeqCst);
        if left > 0 {
            self.countdown.store(left - 1, SeqCst);
            if left == 1 {
                return self.to;
            }
        }
        self.manual.now_ms()
    }
}

/// A handle without its engine drops generations at the namespace's own time. Before,
/// its completions dropped them at a reading of the clock of their own, taken after
/// the one the completion was decided at: a step of the clock ahead in between, and
/// back, dropped the generation of a record the namespace still held live, whose key
/// was then acquired again. Each round makes a different reading of a completion
/// the step's.
#[test]
fn a_handle_without_its_engine_drops_generations_at_the_namespaces_time() {
    let mut reads_in_a_completion = 0;
    for n in 1..=12 {
        let dir = TempDir::new();
        let manual = ManualClock::new(T0);
        let clock = Jumpy::new(manual.clone(), T0 + 1_000_000);
        let (engine, ns) = open_on(&dir, clock.clone(), cfg());
        complete(&ns, b"a"); // hot until T0 + 60 s, its record until T0 + 240 s
        drop(engine);
        manual.advance(secs(200));
        complete(&ns, b"h"); // hot until T0 + 260 s
        let before = clock.reads();
        clock.jump_at(n);
        // (A step at a reading after the claim's outlasts its lease.)
        match ns.claim(b"b").unwrap() {
            Claim::Acquired(g) => match g.complete() {
                Ok(()) | Err(Error::LeaseLost) => {}
                Err(e) => panic!("{e:?}"),
            },
            other => panic!("{other:?}"),
        }
        reads_in_a_completion = clock.reads() - before;
        clock.jump_at(0);
        // "h" tells the namespace's time: still a duplicate unless the completion of
        // "b" was decided at the later reading. "a" must answer alike.
        let h = ns.claim(b"h").unwrap().is_duplicate();
        let a = ns.claim(b"a").unwrap().is_duplicate();
        assert_eq!(a, h, "the step at reading {n} of {reads_in_a_completion}");
    }
    assert!(
        (1..12).contains(&reads_in_a_completion),
        "{reads_in_a_completion} readings"
    );
}

#[test]
fn generations_past_retention_are_dropped_by_maintenance() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let (engine, ns) = open(&dir, &clock, cfg());
    // One batch of keys every 60 s (a quarter of retention: one generation each).
    for batch in 0..4u64 {
        for i in 0..100 {
            complete(&ns, key(batch * 1_000 + i).as_bytes());
        }
        clock.advance(secs(60));
    }
    engine.run_maintenance();
    let s = engine.stats();
    assert_eq!(s.prefilter_generations_dropped, 0, "{s:?}");
    assert!(s.prefilter_generations >= 4, "{s:?}");
    let bytes = s.prefilter_bytes;
    // Records expire 240 s after completion: at T0 + 300 s the first two batches
    // are past retention, but the upkeep drops a generation a minute after its end
    // (claims that read their time before it still find its records).
    clock.advance(secs(60));
    engine.run_maintenance();
    assert_eq!(engine.stats().prefilter_generations_dropped, 0);
    // At T0 + 360 s, past that minute too, the generation of the first is dropped.
    clock.advance(secs(60));
    engine.run_maintenance();
    let s = engine.stats();
    assert!(s.prefilter_generations_dropped >= 1, "{s:?}");
    assert!(s.prefilter_bytes < bytes, "{s:?}");
    // Every key still within retention is still a duplicate; the others are new.
    for batch in 0..4u64 {
        for i in 0..100 {
            let k = key(batch * 1_000 + i);
            let claim = ns.claim(k.as_bytes()).unwrap();
            assert_eq!(claim.is_duplicate(), batch >= 3, "{k}");
        }
    }
}

#[test]
fn more_keys_than_expected_grow_the_filter_instead_of_its_error_rate() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let (engine, ns) = open(&dir, &clock, cfg().expected_keys(400));
    for i in 0..2_000 {
        complete(&ns, key(i).as_bytes());
    }
    let s = engine.stats();
    // 100 keys per filter were planned (400 over four generations); all 2,000 went
    // into one generation: four filters for 100 keys, then 200, 400, 800 and 1,600
    // (twenty of 100 before).
    assert_eq!(s.prefilter_grown, 7, "{s:?}");
    assert_eq!(s.prefilter_filters, 8, "{s:?}");
    assert_eq!(s.prefilter_keys, 2_000);
    for i in 0..2_000 {
        assert!(ns.claim(key(i).as_bytes()).unwrap().is_duplicate());
    }
    let before = engine.stats();
    for i in 100_000..110_000 {
        assert!(ns.claim(key(i).as_bytes()).unwrap().is_acquired());
    }
    let s = engine.stats();
    let fp = s.prefilter_false_positives - before.prefilter_false_positives;
    let neg = s.prefilter_negatives - before.prefilter_negatives;
    let rate = fp as f64 / (fp + neg) as f64;
    // Eight filters at 0.2% each: grown, the rate is about 8 x 0.2% = 1.6% at most,
    // not the near-100% of one overfull filter.
    assert!(rate < 0.03, "observed {rate}: {s:?}");
}

#[test]
fn a_prefilter_that_cannot_be_allocated_is_refused_before_the_directory_is_opened() {
    let dir = TempDir::new();
    let db = dir.path().join("db");
    let build = |cfg: NamespaceConfig| {
        Engine::builder()
            .maintenance_interval(None)
            .durable(&db)
            .namespace("ns", cfg)
            .build()
    };
    // About 450 TB a filter, more than an address space maps: before the check, the
    // build succeeded and the first completion ended the process.
    let err = build(cfg().expected_keys(1 << 50)).unwrap_err();
    assert!(
        matches!(&err, Error::OutOfMemory { namespace, .. } if namespace == "ns"),
        "{err:?}"
    );
    // Beyond any address space: a size that would overflow.
    let err = build(cfg().expected_keys(usize::MAX)).unwrap_err();
    assert!(matches!(err, Error::InvalidConfig { .. }), "{err:?}");
    assert!(!db.exists(), "the refused builds opened {}", db.display());
    // Without a prefilter there is nothing to allocate, and memory-only namespaces
    // have none.
    build(cfg().expected_keys(usize::MAX).prefilter(false)).unwrap();
    Engine::builder()
        .namespace("ns", cfg().expected_keys(usize::MAX))
        .build()
        .unwrap();
}

#[test]
fn prefilter_settings_are_checked() {
    let below_min = f64::from_bits(idem::MIN_PREFILTER_FPR.to_bits() - 1);
    for fpr in [0.0, -0.1, 0.6, f64::NAN, below_min, 1e-30, 5e-324] {
        let err = Engine::builder()
            .namespace("ns", NamespaceConfig::new().prefilter_fpr(fpr))
            .build()
            .unwrap_err();
        assert!(matches!(err, Error::InvalidConfig { .. }), "{fpr}: {err:?}");
        assert!(err.to_string().contains("prefilter_fpr"), "{err}");
    }
    for fpr in [idem::MIN_PREFILTER_FPR, idem::MAX_PREFILTER_FPR] {
        Engine::builder()
            .namespace("ns", NamespaceConfig::new().prefilter_fpr(fpr))
            .build()
            .unwrap();
    }
    let err = Engine::builder()
        .namespace("ns", NamespaceConfig::new().expected_keys(0))
        .build()
        .unwrap_err();
    assert!(matches!(err, Error::InvalidConfig { .. }), "{err:?}");
    let c = NamespaceConfig::new()
        .ttl(secs(3600))
        .retention(secs(4 * 3600))
        .max_keys(1_000);
    assert_eq!(c.get_expected_keys(), 4_000);
    assert_eq!(c.get_prefilter_fpr(), 0.01);
    assert_eq!(c.expected_keys(7).get_expected_keys(), 7);
}

/// Random claims, completions, releases, abandoned claims, clock advances,
/// maintenance and restarts, against a model of what the durable tier holds: a key
/// completed within retention is never declared new (never `Acquired`).
#[test]
fn no_stored_key_is_ever_declared_new() {
    for seed in 0..4u64 {
        run_model(seed);
    }
}

fn run_model(seed: u64) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let cfg = || {
        small()
            .ttl(secs(10))
            .retention(secs(40))
            .sync(SyncPolicy::Never)
            .expected_keys(50)
    };
    let (mut engine, mut ns) = open(&dir, &clock, cfg());
    // key -> completion time (ms)
    let mut done: std::collections::HashMap<u64, u64> = Default::default();
    let mut held: Vec<(u64, ClaimGuard)> = Vec::new();
    // Claims the prefilter alone answered, over every engine of the run (each restart
    // starts the stats anew, and the last engine may see only a few claims).
    let mut negatives = 0;
    for step in 0..3_000 {
        let now = clock.now_ms();
        match rng.gen_range(0..100) {
            0..=59 => {
                let k = rng.gen_range(0..400u64);
                let live = done.get(&k).is_some_and(|&at| at + 40_000 > now);
                if let Claim::Acquired(g) = ns.claim(key(k).as_bytes()).unwrap() {
                    assert!(
                        !live,
                        "seed {seed} step {step}: stored key {k} declared new"
                    );
                    match rng.gen_range(0..10) {
                        0 => drop(g),
                        1 => held.push((k, g)),
                        _ => {
                            g.complete().unwrap();
                            done.insert(k, now);
                        }
                    }
                }
            }
            60..=84 => clock.advance(ms(rng.gen_range(1..3_000))),
            85..=89 => {
                engine.run_maintenance();
            }
            90..=94 => {
                // Claims in flight at a restart leave their markers: orphans.
                engine.debug_fail_store_writes(true);
                held.clear();
                engine.debug_fail_store_writes(false);
                negatives += engine.stats().prefilter_negatives;
                drop((engine, ns));
                (engine, ns) = open(&dir, &clock, cfg());
            }
            _ => {
                if let Some((k, g)) = held.pop() {
                    if g.complete().is_ok() {
                        done.insert(k, now);
                    }
                }
            }
        }
    }
    negatives += engine.stats().prefilter_negatives;
    assert!(
        negatives > 0,
        "seed {seed}: the prefilter never answered alone"
    );
}

/// A clock whose first reading (the engine's epoch) is `t0 - 30 s`, and whose
/// later ones start at `t0` and step back one second at every reading.
struct SteppingBack {
    read: std::sync::atomic::AtomicBool,
    next: std::sync::atomic::AtomicU64,
}

impl Clock for SteppingBack {
    fn now_ms(&self) -> u64 {
        use std::sync::atomic::Ordering::SeqCst;
        let next = self.next.fetch_sub(1_000, SeqCst);
        if self.read.swap(true, SeqCst) {
            next
        } else {
            self.next.fetch_add(1_000, SeqCst);
            next - 30_000
        }
    }
}

/// The filter rebuilt at an open leaves out the records already past retention at
/// the time it reads; if the namespace then read an earlier time (a clock stepped
/// back during the open), such a record would be live for it and its key declared
/// new. The namespace's time starts at the rebuild's, so a key is acquired only if
/// its record has expired at the time the namespace serves.
#[test]
fn a_clock_stepped_back_during_the_open_never_makes_a_live_records_key_new() {
    let dir = TempDir::new();
    let t0 = 1_000_000_000u64;
    // Records expiring half a second apart from the clock's readings at the open.
    let expiries: Vec<u64> = (0..12).map(|j| t0 - 500 - j * 1_000).collect();
    let clock = ManualClock::new(t0 - 300_000);
    {
        // No filter saved: the open below rebuilds it.
        let (_engine, ns) = open(&dir, &clock, cfg().prefilter(false));
        for (j, e) in expiries.iter().enumerate().rev() {
            clock.set(e - 240_000);
            acquire(&ns, key(j as u64).as_bytes()).complete().unwrap();
        }
    }
    let (_engine, ns) = open_on(
        &dir,
        SteppingBack {
            read: false.into(),
            next: t0.into(),
        },
        cfg(),
    );
    let (mut acquired, mut duplicates) = (0, 0);
    for (j, e) in expiries.iter().enumerate() {
        match ns.claim(key(j as u64).as_bytes()).unwrap() {
            Claim::Acquired(g) => {
                let now = g.lease_expires_at_ms() - 5_000;
                assert!(
                    *e <= now,
                    "key {j}: its record expires at {e}, live at the namespace's time {now}"
                );
                acquired += 1;
            }
            Claim::Duplicate(_) => duplicates += 1,
            other => panic!("key {j}: {other:?}"),
        }
    }
    assert_eq!(acquired + duplicates, expiries.len());
}

/// `Engine::close` reports a step of the shutdown that failed, and runs the others:
/// a log it could not sync is a store error "sync", yet the prefilter is saved (the
/// next open loads it); a prefilter it could not save is a store error "save
/// prefilter", counted in the namespace's `store_errors`, and the next open rebuilds
/// it. Every key is there after both.
#[test]
fn closing_the_engine_reports_the_steps_that_failed_and_runs_the_others() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let (engine, ns) = open(&dir, &clock, cfg());
    for i in 0..1_000 {
        complete(&ns, key(i).as_bytes());
    }
    drop(ns);
    engine.debug_fail_syncs(true);
    let err = engine.close().unwrap_err();
    assert!(
        matches!(&err, Error::Store(s) if s.operation() == "sync"),
        "{err:?}"
    );
    assert_eq!(saved_filters(&dir).len(), 1);
    assert_eq!(reopen_and_check(&dir, &clock, cfg()), (1, 0));

    // Where the filter's file is written before its rename stands a directory.
    let (engine, ns) = open(&dir, &clock, cfg());
    let blocker = dir.path().join(format!(
        "idem-prefilter-{}.tmp",
        b"ns".iter().map(|b| format!("{b:02x}")).collect::<String>()
    ));
    std::fs::create_dir(&blocker).unwrap();
    let errors = ns.stats().store_errors;
    let err = engine.close().unwrap_err();
    assert!(
        matches!(&err, Error::Store(s) if s.operation() == "save prefilter"),
        "{err:?}"
    );
    assert_eq!(ns.stats().store_errors, errors + 1);
    drop(ns);
    assert_eq!(
        saved_filters(&dir),
        std::slice::from_ref(&blocker),
        "no filter saved"
    );
    std::fs::remove_dir(&blocker).unwrap();
    assert_eq!(reopen_and_check(&dir, &clock, cfg()), (0, 1));

    // A clean close says so.
    let (engine, ns) = open(&dir, &clock, cfg());
    drop(ns);
    engine.close().unwrap();
    assert_eq!(reopen_and_check(&dir, &clock, cfg()), (1, 0));
}

/// Two databases with the same history of writes stand at the same sequence
/// number: a filter saved by one, copied over the other's (a restore that mixed two
/// replicas' files, say), is not loaded there (its checksum is seeded with the
/// database's seed and the namespace's name), and the other's done keys stay done.
#[test]
fn a_filter_saved_by_another_database_is_not_loaded() {
    let clock = ManualClock::new(T0);
    let (a, b) = (TempDir::new(), TempDir::new());
    for (dir, prefix) in [(&a, "a"), (&b, "b")] {
        let (_engine, ns) = open(dir, &clock, cfg());
        for i in 0..100 {
            complete(&ns, format!("{prefix}-{i}").as_bytes());
        }
    }
    let (fa, fb) = (saved_filters(&a), saved_filters(&b));
    assert_eq!((fa.len(), fb.len()), (1, 1));
    std::fs::copy(&fa[0], &fb[0]).unwrap();
    let (engine, ns) = open(&b, &clock, cfg());
    let s = engine.stats();
    assert_eq!((s.prefilter_loads, s.prefilter_rebuilds), (0, 1));
    let new: Vec<u64> = (0..100)
        .filter(|i| {
            !ns.claim(format!("b-{i}").as_bytes())
                .unwrap()
                .is_duplicate()
        })
        .collect();
    assert!(
        new.is_empty(),
        "{} of B's 100 done keys acquired again: {new:?}",
        new.len()
    );
}

/// Within one database, namespace "a"'s saved filter under "b"'s name (same seed,
/// same sequence number, same settings) is not loaded for "b".
#[test]
fn another_namespaces_filter_is_not_loaded() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let open_two = || open_two(&dir, clock.clone());
    {
        let engine = open_two();
        let (a, b) = (
            engine.namespace("a").unwrap(),
            engine.namespace("b").unwrap(),
        );
        for i in 0..100 {
            complete(&a, format!("a-{i}").as_bytes());
            complete(&b, format!("b-{i}").as_bytes());
        }
    }
    let files = saved_filters(&dir); // sorted: a's, then b's
    assert_eq!(files.len(), 2);
    std::fs::copy(&files[0], &files[1]).unwrap();
    let engine = open_two();
    let s = engine.stats();
    assert_eq!((s.prefilter_loads, s.prefilter_rebuilds), (1, 1));
    let b = engine.namespace("b").unwrap();
    let new = (0..100)
        .filter(|i| !b.claim(format!("b-{i}").as_bytes()).unwrap().is_duplicate())
        .count();
    assert_eq!(new, 0, "{new} of b's 100 done keys acquired again");
}

/// An open without the prefilter (as `idem dlq replay --exec` and `archive` open)
/// writes all the same: the filter saved before it is spent as by any open, so that
/// it is never read again after writes it does not describe.
#[test]
fn an_open_without_the_prefilter_spends_the_saved_filter() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    filled(&dir, &clock);
    assert_eq!(saved_filters(&dir).len(), 1);
    {
        let (_engine, ns) = open(&dir, &clock, cfg().prefilter(false));
        complete(&ns, b"written-without-a-prefilter");
    }
    assert!(saved_filters(&dir).is_empty(), "{:?}", saved_filters(&dir));
}

/// With a retention of a few minutes or less, the upkeep keeps generations a minute
/// past their end (`Prefilter::expire_behind`): a dozen past ones at a retention of
/// 20 s, each a filter every look-up asked. Their records have all expired at the
/// look-up's time, so they are not asked, and the rate stays near the target.
#[test]
fn a_short_retention_keeps_the_false_positive_rate_near_its_target() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    // 100 keys a second within a retention of 20 s.
    let (engine, ns) = open(
        &dir,
        &clock,
        small()
            .ttl(secs(10))
            .retention(secs(20))
            .sync(SyncPolicy::Never)
            .expected_keys(2_000),
    );
    let mut next = 0u64;
    let mut second = |clock: &ManualClock| {
        for _ in 0..100 {
            complete(&ns, key(next).as_bytes());
            next += 1;
        }
        clock.advance(secs(1));
        engine.run_maintenance();
    };
    // Past two retentions and the upkeep's minute: the steady state.
    for _ in 0..100 {
        second(&clock);
    }
    let before = engine.stats();
    for _ in 0..200 {
        second(&clock);
    }
    let s = engine.stats();
    // Every claim was of a new key.
    let fp = s.prefilter_false_positives - before.prefilter_false_positives;
    let neg = s.prefilter_negatives - before.prefilter_negatives;
    assert_eq!(fp + neg, 20_000, "{s:?}");
    let rate = fp as f64 / (fp + neg) as f64;
    assert!(
        rate < 0.015,
        "observed {rate} against a target of 0.01: {s:?}"
    );
}

/// `idem plan`'s prefilter figure holds the live filters of a steady stream, with a
/// retention of a few minutes or less too, where the upkeep keeps generations a
/// minute past their end: a dozen more at a retention of 20 s, about 3.4 times the
/// memory of the five the plan counted.
#[test]
fn the_planned_prefilter_memory_holds_the_live_filters_of_a_short_retention() {
    for retention in [20u64, 40, 120] {
        let dir = TempDir::new();
        let clock = ManualClock::new(T0);
        let rate = 100u64;
        let plan = idem::Sizing::new(rate as f64, secs(10))
            .retention(secs(retention))
            .plan()
            .unwrap();
        let (engine, ns) = open(
            &dir,
            &clock,
            small()
                .ttl(secs(10))
                .retention(secs(retention))
                .sync(SyncPolicy::Never)
                .expected_keys(plan.retained_keys as usize),
        );
        let (mut next, mut peak, mut sum, mut seconds) = (0u64, 0u64, 0u64, 0u64);
        for s in 0..3 * retention + 120 {
            for _ in 0..rate {
                complete(&ns, key(next).as_bytes());
                next += 1;
            }
            clock.advance(secs(1));
            engine.run_maintenance();
            // Past a retention and the upkeep's minute: the steady state.
            if s >= retention + 60 {
                let bytes = engine.stats().prefilter_bytes;
                peak = peak.max(bytes);
                sum += bytes;
                seconds += 1;
            }
        }
        let mean = sum as f64 / seconds as f64;
        let planned = plan.prefilter_bytes as f64;
        assert!(
            (mean / planned - 1.0).abs() < 0.15,
            "retention {retention} s: {mean} bytes live on average (peak {peak}), {planned} planned"
        );
    }
}
