//! TTL windows: fixed by default, sliding on request; expiry with and without traffic.

#![cfg(not(idem_loom))]

mod util;

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::thread::ThreadId;

use idem::{Claim, Clock, Engine, KeyState, ManualClock, Namespace, NamespaceConfig};
use util::*;

fn done(ns: &idem::Namespace, key: &[u8]) {
    let Claim::Acquired(g) = ns.claim(key).unwrap() else {
        panic!("expected Acquired")
    };
    g.complete().unwrap();
}

#[test]
fn duplicate_until_the_last_millisecond_of_the_ttl() {
    let (_e, ns, clock) = engine_with(small());
    done(&ns, b"k");
    clock.advance(ms(59_999));
    assert!(ns.claim(b"k").unwrap().is_duplicate());
    clock.advance(ms(1));
    assert!(ns.claim(b"k").unwrap().is_acquired());
}

#[test]
fn a_ttl_or_lease_with_a_fraction_of_a_millisecond_is_never_cut_short() {
    let (_e, ns, clock) = engine_with(
        small()
            .ttl(std::time::Duration::from_micros(2_900))
            .lease(std::time::Duration::from_micros(1_500)),
    );
    // The lease, 1.5 ms, holds for 2 ms (it was 1 ms: the fraction was dropped).
    let g = acquire(&ns, b"leased");
    clock.advance(ms(1));
    assert!(ns.claim(b"leased").unwrap().is_in_progress());
    clock.advance(ms(1));
    assert!(ns.claim(b"leased").unwrap().is_acquired());
    drop(g);
    // The TTL, 2.9 ms, holds for 3 ms.
    done(&ns, b"k");
    clock.advance(ms(2));
    assert!(ns.claim(b"k").unwrap().is_duplicate());
    clock.advance(ms(1));
    assert!(ns.claim(b"k").unwrap().is_acquired());
}

#[test]
fn fixed_window_is_not_extended_by_duplicates() {
    let (_e, ns, clock) = engine_with(small());
    done(&ns, b"k");
    for _ in 0..5 {
        clock.advance(secs(10));
        assert!(ns.claim(b"k").unwrap().is_duplicate());
    }
    clock.advance(secs(10));
    assert!(ns.claim(b"k").unwrap().is_acquired());
}

#[test]
fn sliding_window_restarts_on_each_duplicate() {
    let (_e, ns, clock) = engine_with(small().extend_on_duplicate(true));
    done(&ns, b"k");
    for _ in 0..10 {
        clock.advance(secs(50));
        let Claim::Duplicate(d) = ns.claim(b"k").unwrap() else {
            panic!("sliding window must keep the key alive")
        };
        assert_eq!(
            d.completed_at_ms(),
            T0,
            "completion time survives extension"
        );
    }
    clock.advance(secs(60));
    assert!(ns.claim(b"k").unwrap().is_acquired());
}

#[test]
fn expired_keys_are_reclaimed_without_traffic() {
    let (e, ns, clock) = engine_with(small());
    for i in 0..1000u64 {
        done(&ns, key(i).as_bytes());
        clock.advance(ms(10));
    }
    assert_eq!(e.stats().resident_keys, 1000);
    // 10 s have passed; the first key expires at 60 s, the second 10 ms later.
    clock.advance(ms(49_999));
    assert_eq!(e.run_maintenance(), 0);
    clock.advance(ms(1));
    assert_eq!(e.run_maintenance(), 1);
    assert_eq!(e.stats().resident_keys, 999);
    clock.advance(secs(10));
    assert_eq!(e.run_maintenance(), 999);
    let s = e.stats();
    assert_eq!(s.resident_keys, 0);
    assert_eq!(s.expirations, 1000);
}

#[test]
fn a_ttl_shorter_than_the_lease_is_reclaimed_at_the_ttl() {
    // Completion moves the key's deadline earlier than its lease: expiry follows it.
    let (e, ns, clock) = engine_with(small().ttl(secs(2)).lease(secs(30)));
    for i in 0..100u64 {
        done(&ns, key(i).as_bytes());
    }
    clock.advance(ms(1_999));
    assert_eq!(e.run_maintenance(), 0);
    assert_eq!(e.stats().resident_keys, 100);
    clock.advance(ms(1));
    assert_eq!(e.run_maintenance(), 100);
    assert_eq!(e.stats().resident_keys, 0);
}

#[test]
fn check_reports_nothing_for_an_expired_key_before_maintenance() {
    let (e, ns, clock) = engine_with(small());
    done(&ns, b"k");
    clock.advance(secs(60));
    assert_eq!(ns.check(b"k").unwrap(), None);
    assert_eq!(
        e.stats().resident_keys,
        1,
        "check reads, it does not reclaim"
    );
}

/// A manual clock that also watches the engine's background thread: it counts the
/// reads made on any thread but the test's, and the first such read leaves a
/// thread-local marker whose destructor, run when that thread exits, sets `ended`.
#[derive(Clone)]
struct WatchedClock {
    time: ManualClock,
    test_thread: ThreadId,
    background_reads: Arc<AtomicU64>,
    ended: Arc<AtomicBool>,
    /// While set, a read on the background thread panics (after it is counted) ...
    panics: Arc<AtomicBool>,
    /// ... and counts here that it did.
    panicked: Arc<AtomicU64>,
}

impl WatchedClock {
    fn new() -> Self {
        WatchedClock {
            time: ManualClock::new(T0),
            test_thread: std::thread::current().id(),
            background_reads: Arc::new(AtomicU64::new(0)),
            ended: Arc::new(AtomicBool::new(false)),
            panics: Arc::new(AtomicBool::new(false)),
            panicked: Arc::new(AtomicU64::new(0)),
        }
    }
}

/// Sets its flag when dropped: at the exit of the thread that holds it.
struct ExitMarker(Arc<AtomicBool>);

impl Drop for ExitMarker {
    fn drop(&mut self) {
        self.0.store(true, SeqCst);
    }
}

thread_local! {
    static EXIT_MARKER: RefCell<Option<ExitMarker>> = const { RefCell::new(None) };
}

impl Clock for WatchedClock {
    fn now_ms(&self) -> u64 {
        if std::thread::current().id() != self.test_thread {
            self.background_reads.fetch_add(1, SeqCst);
            EXIT_MARKER.with(|m| {
                m.borrow_mut()
                    .get_or_insert_with(|| ExitMarker(self.ended.clone()));
            });
            if self.panics.load(SeqCst) {
                self.panicked.fetch_add(1, SeqCst);
                panic!("the clock fails");
            }
        }
        self.time.now_ms()
    }
}

/// An engine on a watched clock whose maintenance thread runs every millisecond of
/// real time, holding one done key "k".
fn with_maintenance_thread() -> (WatchedClock, Engine, Namespace) {
    let clock = WatchedClock::new();
    let engine = Engine::builder()
        .namespace("ns", small())
        .clock(clock.clone())
        .maintenance_interval(Some(ms(1)))
        .build()
        .unwrap();
    let ns = engine.namespace("ns").unwrap();
    done(&ns, b"k");
    (clock, engine, ns)
}

#[test]
fn background_maintenance_thread_reclaims_and_stops_on_drop() {
    let (clock, engine, ns) = with_maintenance_thread();
    clock.time.advance(secs(61));
    // The thread runs every millisecond of real time. Each run reads the clock once
    // per namespace, so the first read counted from here is a run that sees the
    // expired key, and the one after it starts once that run has finished: the key
    // must be gone by then (reads are counted before the gauge is looked at, so a run
    // that ends in between is not mistaken for a failure). The bound of real time
    // only stops a thread that never runs from hanging the test.
    let seen = clock.background_reads.load(SeqCst);
    let limit = std::time::Instant::now() + secs(60);
    loop {
        let reads = clock.background_reads.load(SeqCst) - seen;
        if engine.stats().resident_keys == 0 {
            break;
        }
        assert!(
            reads < 2,
            "a maintenance run saw the expired key and left it: {:?}",
            engine.stats()
        );
        std::thread::yield_now();
        assert!(
            std::time::Instant::now() < limit,
            "maintenance thread never ran"
        );
    }
    assert_eq!(engine.stats().expirations, 1);
    assert!(
        !clock.ended.load(SeqCst),
        "the maintenance thread is still running"
    );
    drop(engine);
    // Dropping the engine returned only after its maintenance thread had exited.
    assert!(
        clock.ended.load(SeqCst),
        "the maintenance thread outlived the engine"
    );
    // The handle keeps working without the engine.
    assert!(ns.claim(b"k").unwrap().is_acquired());
}

/// A maintenance run that panics (here its clock does) is reported and the thread
/// goes on: the next runs still reclaim expired keys.
#[test]
fn a_maintenance_run_that_panics_does_not_end_the_thread() {
    let (clock, engine, _ns) = with_maintenance_thread();
    clock.panics.store(true, SeqCst);
    // A bound of real time only stops a thread that never runs from hanging the test.
    let limit = std::time::Instant::now() + secs(60);
    while clock.panicked.load(SeqCst) == 0 {
        std::thread::yield_now();
        assert!(
            std::time::Instant::now() < limit,
            "maintenance thread never ran"
        );
    }
    clock.panics.store(false, SeqCst);
    clock.time.advance(secs(61));
    while engine.stats().resident_keys != 0 {
        assert!(
            !clock.ended.load(SeqCst),
            "the maintenance thread ended at the panic"
        );
        std::thread::yield_now();
        assert!(
            std::time::Instant::now() < limit,
            "maintenance never ran again"
        );
    }
    assert!(!clock.ended.load(SeqCst));
    drop(engine);
    assert!(clock.ended.load(SeqCst));
}

/// A clock that, read on the maintenance thread, drops the engine it was handed
/// there (as a clock or subscriber owning the engine would when the application lets
/// go of it), and reports whether that drop returned without a panic.
struct DropsTheEngine {
    time: ManualClock,
    engine: Arc<std::sync::Mutex<Option<Engine>>>,
    dropped: std::sync::Mutex<std::sync::mpsc::Sender<bool>>,
}

impl Clock for DropsTheEngine {
    fn now_ms(&self) -> u64 {
        if std::thread::current().name() == Some("idem-maintenance") {
            let engine = self.engine.lock().unwrap().take();
            if let Some(engine) = engine {
                let clean = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    drop(engine);
                }))
                .is_ok();
                let _ = self.dropped.lock().unwrap().send(clean);
            }
        }
        self.time.now_ms()
    }
}

#[test]
fn an_engine_dropped_on_its_own_maintenance_thread_stops_it_without_a_panic() {
    let slot = Arc::new(std::sync::Mutex::new(None));
    let (tx, rx) = std::sync::mpsc::channel();
    let engine = Engine::builder()
        .namespace("ns", small())
        .clock(DropsTheEngine {
            time: ManualClock::new(T0),
            engine: slot.clone(),
            dropped: std::sync::Mutex::new(tx),
        })
        .maintenance_interval(Some(ms(1)))
        .build()
        .unwrap();
    let ns = engine.namespace("ns").unwrap();
    done(&ns, b"k");
    *slot.lock().unwrap() = Some(engine);
    // Waits for the maintenance thread's next run (every millisecond of real time);
    // the bound only keeps a thread that never runs from hanging the test.
    let clean = rx
        .recv_timeout(std::time::Duration::from_secs(120))
        .expect("the maintenance thread never ran");
    assert!(
        clean,
        "dropping the engine on its maintenance thread panicked"
    );
    // The handle goes on without the engine.
    assert!(matches!(ns.claim(b"k").unwrap(), Claim::Duplicate(_)));
}

#[test]
fn long_clock_jump_without_maintenance_expires_everything() {
    // At the default 1 ms tick, 40 days are more than 2^31 ticks: the jump spans more
    // than the wheel's serial range, where serial arithmetic would read deadlines
    // that passed long ago as still to come.
    let clock = ManualClock::new(T0);
    let engine = Engine::builder()
        .namespace("ns", NamespaceConfig::new().ttl(secs(60)))
        .clock(clock.clone())
        .maintenance_interval(None)
        .build()
        .unwrap();
    let ns = engine.namespace("ns").unwrap();
    let keys: Vec<String> = (0..20).map(key).collect();
    for k in &keys {
        done(&ns, k.as_bytes());
    }
    let held = acquire(&ns, b"held");
    // Before the jump every key is live.
    for k in &keys {
        assert!(
            matches!(ns.check(k.as_bytes()).unwrap(), Some(KeyState::Done { .. })),
            "{k}"
        );
    }
    assert!(matches!(
        ns.check(b"held").unwrap(),
        Some(KeyState::InProgress { .. })
    ));
    clock.advance(secs(40 * 24 * 3600));
    // Half the done keys are looked up, half claimed again; the claim in flight
    // lost its lease.
    for (i, k) in keys.iter().enumerate() {
        if i % 2 == 0 {
            assert_eq!(ns.check(k.as_bytes()).unwrap(), None, "{k}");
        } else {
            assert!(ns.claim(k.as_bytes()).unwrap().is_acquired(), "{k}");
        }
    }
    assert_eq!(ns.check(b"held").unwrap(), None);
    assert!(ns.claim(b"held").unwrap().is_acquired());
    assert_eq!(held.complete(), Err(idem::Error::LeaseLost));
}

#[test]
fn clock_stepping_backwards_never_expires_early() {
    let (_e, ns, clock) = engine_with(small());
    clock.advance(secs(100));
    done(&ns, b"k");
    clock.set(T0);
    assert!(ns.claim(b"k").unwrap().is_duplicate());
    clock.set(T0 + 100_000 + 59_999);
    assert!(ns.claim(b"k").unwrap().is_duplicate());
}

#[test]
fn a_clock_stepped_back_further_than_a_deadline_reaches_reads_as_stopped() {
    // More than 2^31 ticks of 1 ms: a 32-bit deadline compared with serial arithmetic
    // read live keys as expired after such a step.
    let step = 3u64 << 30;
    let (e, ns, clock) = engine_with(small());
    clock.set(T0 + 2 * step);
    done(&ns, b"done");
    let held = acquire(&ns, b"held");
    clock.set(T0 + step);
    // Before: Acquired twice over.
    assert!(ns.claim(b"done").unwrap().is_duplicate());
    assert!(ns.claim(b"held").unwrap().is_in_progress());
    // A key completed while the clock reads behind gets its deadlines from the latest
    // time seen, and maintenance reclaims it once the clock has passed them (before,
    // the wheel had parked it wrongly and kept it some 2^32 ticks more).
    done(&ns, b"during");
    assert_eq!(e.stats().resident_keys, 3);
    clock.set(T0 + 2 * step + 60_000);
    assert_eq!(e.run_maintenance(), 3, "{:?}", e.stats());
    assert_eq!(e.stats().resident_keys, 0);
    assert_eq!(held.complete(), Err(idem::Error::LeaseLost));
}

#[test]
fn a_clock_stepped_back_during_the_build_keeps_completion_times_whole() {
    // The engine takes its epoch from the clock's first reading, the namespace its
    // starting time from a later one, 10 s earlier: ticks then count from a time the
    // namespace reads as still to come. A key completed at the namespace's T0 answered
    // `completed_at_ms` T0 with `expires_at_ms` T0 + 70 s (a 70 s window for a 60 s
    // TTL), and later the same key answered `completed_at_ms` T0 + 10 s.
    let clock = ManualClock::new(T0);
    let (_e, ns) = engine_on(small(), BackAfterFirstRead::new(T0 + 10_000, clock.clone()));
    done(&ns, b"k");
    let mut answers = Vec::new();
    for at in [0, 30_000, 60_000, 65_000] {
        clock.set(T0 + at);
        if let Some(KeyState::Done {
            completed_at_ms,
            expires_at_ms,
            ..
        }) = ns.check(b"k").unwrap()
        {
            answers.push((at, completed_at_ms, expires_at_ms));
        }
    }
    assert!(!answers.is_empty());
    for &(at, completed, expires) in &answers {
        assert_eq!(
            expires - completed,
            60_000,
            "a fixed 60 s window, at +{at} ms: {answers:?}"
        );
        assert_eq!(
            completed, answers[0].1,
            "one completion time, at +{at} ms: {answers:?}"
        );
    }
}

#[test]
fn coarse_tick_rounds_expiry_up_never_down() {
    let clock = ManualClock::new(T0);
    let engine = Engine::builder()
        .namespace("ns", NamespaceConfig::new().ttl(ms(1500)))
        .clock(clock.clone())
        .tick(secs(1))
        .maintenance_interval(None)
        .build()
        .unwrap();
    let ns = engine.namespace("ns").unwrap();
    done(&ns, b"k");
    clock.advance(ms(1999));
    assert!(ns.claim(b"k").unwrap().is_duplicate(), "never early");
    clock.advance(ms(1));
    assert!(
        ns.claim(b"k").unwrap().is_acquired(),
        "at most one tick late"
    );
}

#[test]
fn a_sliding_sighting_never_shortens_a_promised_window() {
    let (_e, ns, clock) = engine_with(small().extend_on_duplicate(true));
    clock.advance(secs(100));
    done(&ns, b"k");
    // A sighting with an earlier clock reading (a claimant that read the clock before
    // another sighting took the lock, or a clock stepped back) must not pull the
    // expiry in.
    clock.set(T0);
    let Claim::Duplicate(d) = ns.claim(b"k").unwrap() else {
        panic!()
    };
    assert_eq!(d.expires_at_ms(), T0 + 160_000);
    clock.set(T0 + 159_999);
    assert!(ns.claim(b"k").unwrap().is_duplicate());
}

#[test]
fn completion_time_is_never_reported_in_the_future_with_a_coarse_tick() {
    let clock = ManualClock::new(T0);
    let engine = Engine::builder()
        .namespace("ns", NamespaceConfig::new().ttl(ms(1500)))
        .clock(clock.clone())
        .tick(secs(1))
        .maintenance_interval(None)
        .build()
        .unwrap();
    let ns = engine.namespace("ns").unwrap();
    clock.advance(ms(250));
    done(&ns, b"k");
    let Claim::Duplicate(d) = ns.claim(b"k").unwrap() else {
        panic!()
    };
    assert!(d.completed_at_ms() <= T0 + 250, "{}", d.completed_at_ms());
    assert!(d.completed_at_ms() + 1000 > T0 + 250, "within one tick");
    // Asked later, it is worked out from the deadline's whole ticks: at most one
    // tick late (as documented), never after the claim's own time.
    clock.advance(ms(350));
    let Claim::Duplicate(d) = ns.claim(b"k").unwrap() else {
        panic!()
    };
    let at = d.completed_at_ms();
    assert!((T0 + 250..T0 + 1250).contains(&at), "{at}");
    assert!(at <= T0 + 600, "{at}");
}

/// A duplicate read without the lock after the clock jumped 40 days (past 2^31
/// ticks of 1 ms) with no claim or pass on the shard in between: the entry's 32-bit
/// deadline would read as still ahead, so the read leaves the claim to the lock,
/// which brings the shard to the clock and finds the key expired long ago.
#[test]
fn a_lock_free_read_after_a_jump_past_the_deadlines_range_leaves_the_claim_to_the_lock() {
    let (_e, ns, clock) = engine_with(small().shards(1));
    acquire(&ns, b"k").complete().unwrap();
    // Duplicates: the later ones are read without the lock.
    for _ in 0..3 {
        assert!(ns.claim(b"k").unwrap().is_duplicate());
    }
    clock.advance(std::time::Duration::from_secs(40 * 24 * 3600));
    assert!(ns.claim(b"k").unwrap().is_acquired(), "expired 40 days ago");
}
