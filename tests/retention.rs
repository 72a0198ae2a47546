//! Past retention a key leaves the durable tier: the compaction filter drops its record,
//! so disk use follows rate x retention.

#![cfg(all(feature = "durable", not(idem_loom)))]

use std::time::Duration;

use idem::{Claim, Engine, ManualClock, NamespaceConfig};

const T0: u64 = 1_700_000_000_000;

/// The durable engine of these tests in `dir`: namespace "ns", TTL 60 s, retention
/// 600 s, on `clock`, no maintenance thread.
fn open(dir: &std::path::Path, clock: impl idem::Clock) -> Engine {
    Engine::builder()
        .namespace(
            "ns",
            NamespaceConfig::new()
                .ttl(Duration::from_secs(60))
                .retention(Duration::from_secs(600)),
        )
        .durable(dir)
        .clock(clock)
        .maintenance_interval(None)
        .build()
        .unwrap()
}

/// A fresh directory for one test's database: `idem-retention-<name>-<pid>` under
/// the system's temporary directory, emptied.
fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("idem-retention-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Claims `key` (it must be free) and completes it.
fn complete(ns: &idem::Namespace, key: &[u8]) {
    let Claim::Acquired(g) = ns.claim(key).unwrap() else {
        panic!("{key:?} is not free")
    };
    g.complete().unwrap();
}

#[test]
fn compaction_drops_records_past_retention_and_keeps_the_others() {
    let dir = scratch("drop");
    let clock = ManualClock::new(T0);
    {
        let engine = open(&dir, clock.clone());
        let ns = engine.namespace("ns").unwrap();
        for i in 0..100u32 {
            complete(&ns, format!("old-{i}").as_bytes());
        }
        clock.advance(Duration::from_secs(300));
        for i in 0..50u32 {
            complete(&ns, format!("new-{i}").as_bytes());
        }
        // The old keys' retention ends at T0 + 600 s, the new ones' at T0 + 900 s.
        clock.advance(Duration::from_secs(301));
        let before = idem::inspect(&dir, clock_now(&clock)).unwrap();
        assert_eq!(before.namespaces[0].expired, 100, "not compacted yet");
        engine.compact_store().unwrap();
        drop(ns);
    }
    let after = idem::inspect(&dir, clock_now(&clock)).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        after.namespaces[0].expired, 0,
        "expired records were dropped"
    );
    assert_eq!(
        after.namespaces[0].done, 50,
        "records within retention were kept"
    );
}

/// The filter judges retention at no later time than the namespace has read (its
/// time never goes back; `FilterClock`'s unit test), and `compact_store` reads the
/// time for an idle namespace first: the key it drops is past retention for the
/// namespace too, which stays there after the clock steps back.
#[test]
fn compaction_never_judges_retention_ahead_of_the_namespace() {
    let dir = scratch("step");
    let clock = ManualClock::new(T0);
    let engine = open(&dir, clock.clone());
    let ns = engine.namespace("ns").unwrap();
    complete(&ns, b"k");
    // Past retention (600 s) on the clock, which the namespace never reads: RocksDB
    // compacts on its own threads, when it likes.
    clock.advance(Duration::from_secs(605));
    engine.compact_store().unwrap();
    let step_back = T0 + 500_000;
    clock.set(step_back);
    let answer = ns.claim(b"k").unwrap();
    // `compact_store` read the time for the namespace: at T0 + 605 s the key is past
    // retention there, and the namespace's time stays there after the step back.
    assert!(answer.is_acquired(), "{answer:?}");
    drop((answer, ns, engine));
    let _ = std::fs::remove_dir_all(&dir);
}

fn clock_now(c: &ManualClock) -> u64 {
    use idem::Clock;
    c.now_ms()
}

/// A clock that panics while `fail` is set.
#[derive(Clone)]
struct Failing {
    inner: ManualClock,
    fail: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl idem::Clock for Failing {
    fn now_ms(&self) -> u64 {
        if self.fail.load(std::sync::atomic::Ordering::SeqCst) {
            panic!("the clock failed");
        }
        self.inner.now_ms()
    }
}

#[test]
fn a_clock_that_panics_during_a_compaction_keeps_the_records_and_the_process() {
    let dir = scratch("panic");
    let clock = Failing {
        inner: ManualClock::new(T0),
        fail: Default::default(),
    };
    {
        let engine = open(&dir, clock.clone());
        let ns = engine.namespace("ns").unwrap();
        for i in 0..10u32 {
            complete(&ns, format!("k-{i}").as_bytes());
        }
        clock.inner.advance(Duration::from_secs(601));
        // The retention filter reads the clock on RocksDB's compaction thread: a
        // panic there would abort the process (this test binary).
        clock.fail.store(true, std::sync::atomic::Ordering::SeqCst);
        engine.compact_store().unwrap();
        clock.fail.store(false, std::sync::atomic::Ordering::SeqCst);
        drop(ns);
    }
    let after = idem::inspect(&dir, clock_now(&clock.inner)).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        after.namespaces[0].expired, 10,
        "records the filter could not date were kept"
    );
}

#[test]
fn at_the_end_of_time_compaction_keeps_what_the_engine_holds_done() {
    // The engine reads a clock past `LATEST_MS` as `LATEST_MS` (time stands still
    // there): the retention filter must too, or it drops records the engine still
    // answers for.
    let dir = scratch("end");
    let clock = ManualClock::new(u64::MAX - 1000);
    {
        let engine = open(&dir, clock.clone());
        let ns = engine.namespace("ns").unwrap();
        complete(&ns, b"k");
        engine.compact_store().unwrap();
    }
    let engine = open(&dir, clock.clone());
    let claim = engine.namespace("ns").unwrap().claim(b"k").unwrap();
    drop(engine);
    // `inspect` reads a time past `LATEST_MS` as the engine does: the key is done.
    let inspection = idem::inspect(&dir, u64::MAX).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(matches!(claim, Claim::Duplicate(_)), "{claim:?}");
    let ns = &inspection.namespaces[0];
    assert_eq!((ns.done, ns.expired), (1, 0), "{ns:?}");
}

/// A record that does not decode cannot be dated: compaction keeps it, and the key's
/// claim reports it, as before the compaction, instead of acquiring a key that was
/// done.
#[test]
fn compaction_keeps_a_record_that_does_not_decode() {
    let dir = scratch("corrupt");
    let clock = ManualClock::new(T0);
    {
        let engine = open(&dir, clock.clone());
        let ns = engine.namespace("ns").unwrap();
        complete(&ns, b"k");
        ns.debug_corrupt_record(b"k").unwrap();
    }
    // Within retention (600 s), after a restart: only the durable tier knows the key.
    clock.advance(Duration::from_secs(120));
    let engine = open(&dir, clock.clone());
    engine.compact_store().unwrap();
    let answer = engine.namespace("ns").unwrap().claim(b"k");
    let reported = matches!(
        &answer,
        Err(idem::Error::CorruptRecord { namespace, .. }) if namespace == "ns"
    );
    let shown = format!("{answer:?}");
    drop((answer, engine));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(reported, "{shown}");
}
