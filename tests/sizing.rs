//! Sizing: `Stats::bytes_per_key` reports the live hot-tier figure, and the planner's
//! prediction holds against a live engine filled to its plan.

#![cfg(not(idem_loom))]

mod util;

use std::time::Duration;

use std::cell::Cell;

use idem::{Claim, Engine, NamespaceConfig, Sizing};
use util::engine_with;

thread_local! {
    static HELD: Cell<isize> = const { Cell::new(0) };
}

/// Counts the heap bytes the calling thread holds (allocated less freed by it), so
/// that a test sees its own engine's allocations whatever other tests do meanwhile
/// (the allocator's hook).
fn count(delta: isize) {
    // (`try_with`: nothing to count once the thread's storage is gone.)
    let _ = HELD.try_with(|h| h.set(h.get() + delta));
}

#[global_allocator]
static ALLOCATOR: util::Counting = util::Counting(count);

fn held() -> isize {
    HELD.with(Cell::get)
}

/// The tests of this file one at a time: a thread frees the outgrown tables that
/// other threads retired (a process-wide list), which would move bytes between the
/// threads' counts.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// Frees what earlier tests left retired (outgrown tables wait in a process-wide list
/// until a maintenance pass, or until 1 MiB of them collects at once): a collection
/// inside a measured fill would otherwise free them on the measuring thread.
fn drain_retired() {
    let engine = Engine::builder()
        .maintenance_interval(None)
        .namespace("drain", NamespaceConfig::new().max_keys(1))
        .build()
        .unwrap();
    for _ in 0..16 {
        engine.run_maintenance();
    }
}

fn key(i: u64) -> Vec<u8> {
    format!("ord-{:016x}", i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).into_bytes()
}

/// Claims and completes keys 0..n, with `result` stored when it is not empty.
fn fill(ns: &idem::Namespace, n: u64, result: &[u8]) {
    for i in 0..n {
        match ns.claim(&key(i)).expect("claim") {
            Claim::Acquired(g) if result.is_empty() => g.complete().expect("complete"),
            Claim::Acquired(g) => g.complete_with_result(result).expect("complete"),
            _ => panic!("key {i} was not fresh"),
        }
    }
}

#[test]
fn bytes_per_key_is_hot_bytes_over_resident_keys() {
    let _serial = one_at_a_time();
    let (engine, ns, _clock) = engine_with(NamespaceConfig::new().max_keys(10_000));
    let empty = engine.stats();
    assert_eq!(empty.resident_keys, 0);
    assert_eq!(empty.bytes_per_key(), 0.0);

    fill(&ns, 5_000, b"");
    let s = engine.stats();
    assert_eq!(s.resident_keys, 5_000);
    assert_eq!(s.bytes_per_key(), s.hot_bytes as f64 / 5_000.0);
    // An entry alone is 28 bytes, so a resident key can never cost less.
    assert!(s.bytes_per_key() > 28.0, "{}", s.bytes_per_key());
    // The namespace's own view agrees with the engine's (one namespace).
    assert_eq!(ns.stats().bytes_per_key(), s.bytes_per_key());
}

/// `Stats::hot_bytes` (with `retired_bytes`, outgrown tables not yet freed) is what
/// the allocator holds for the engine, not only the engine's own bookkeeping: every
/// allocation of this thread while the engine is built and filled, within 1 % (the
/// engine's fixed parts, its name and handles, are not hot-tier bytes).
#[test]
fn hot_bytes_are_what_the_allocator_holds() {
    let _serial = one_at_a_time();
    for result in [&b""[..], &[7u8; 100][..]] {
        drain_retired();
        let before = held();
        let (engine, ns, _clock) = engine_with(NamespaceConfig::new().max_keys(100_000));
        fill(&ns, 100_000, result);
        let s = engine.stats();
        let allocated = (held() - before) as f64;
        let counted = (s.hot_bytes + s.retired_bytes) as f64;
        assert!(
            (allocated - counted).abs() <= allocated * 0.01,
            "result {} B: the allocator holds {allocated} B, stats count {counted} B",
            result.len()
        );
    }
}

#[test]
fn stored_results_count_in_bytes_per_key() {
    let _serial = one_at_a_time();
    let (plain, ns, _c) = engine_with(NamespaceConfig::new().max_keys(10_000));
    fill(&ns, 5_000, b"");
    let (with, ns_r, _c2) = engine_with(NamespaceConfig::new().max_keys(10_000));
    fill(&ns_r, 5_000, &[7u8; 200]);
    let (a, b) = (plain.stats().bytes_per_key(), with.stats().bytes_per_key());
    // At least the 200 result bytes themselves more per key.
    assert!(b - a >= 200.0, "plain {a}, with results {b}");
}

/// A memory-only namespace sized by the plan (`max_keys` = resident keys) and filled
/// with that many completed keys: `Stats::bytes_per_key` within 10 % of the plan, and
/// so is what a key costs besides its result's own bytes (which would otherwise hide
/// the per-key overhead once results are large). `rate` keys a second for 100 s are
/// the resident keys.
fn check_plan_against_live_engine(result_bytes: usize, rate: u64) {
    const TTL_SECS: u64 = 100;
    let plan = Sizing::new(rate as f64, Duration::from_secs(TTL_SECS))
        .result_bytes(result_bytes)
        .plan()
        .expect("a valid sizing");
    let keys = rate * TTL_SECS;
    assert_eq!(plan.resident_keys, keys);
    let (engine, ns, _clock) = engine_with(
        NamespaceConfig::new()
            .ttl(plan.ttl)
            .max_keys(plan.resident_keys as usize),
    );
    fill(&ns, keys, &vec![0xA5; result_bytes]);
    let live = engine.stats();
    assert_eq!(live.resident_keys, keys);
    let (live_bpk, planned) = (live.bytes_per_key(), plan.hot_bytes_per_key);
    let off = (live_bpk - planned).abs() / planned;
    eprintln!("result {result_bytes} B: live {live_bpk:.1} B/key, planned {planned:.1} B/key");
    assert!(
        off <= 0.10,
        "result {result_bytes} B: live {live_bpk:.1} B/key, planned {planned:.1} B/key ({:.1} % off)",
        off * 100.0
    );
    let result = result_bytes as f64;
    let (live_overhead, planned_overhead) = (live_bpk - result, planned - result);
    let off = (live_overhead - planned_overhead).abs() / planned_overhead;
    assert!(
        off <= 0.10,
        "result {result_bytes} B: live {live_overhead:.1} B/key besides the result, planned {planned_overhead:.1} B/key ({:.1} % off)",
        off * 100.0
    );
}

/// Without results, at the smallest namespace whose plan gives no warning
/// (`SMALL_NAMESPACE_KEYS`, 1,000,000 keys): below it the plan says its per-key figure
/// is a floor, and the fixed costs of each shard show with no result bytes to hide
/// them (200,000 keys took 40.9 bytes a key against the plan's 35.3, 16 % over, 38.0
/// made as keys arrive; `a_small_namespace_costs_more_a_key_and_its_plan_says_so`).
#[test]
fn plan_matches_a_live_engine_without_results() {
    let _serial = one_at_a_time();
    check_plan_against_live_engine(0, idem::SMALL_NAMESPACE_KEYS / 100);
}

#[test]
fn plan_matches_a_live_engine_with_64_byte_results() {
    let _serial = one_at_a_time();
    check_plan_against_live_engine(64, 2_000);
}

#[test]
fn plan_matches_a_live_engine_with_1_kib_results() {
    let _serial = one_at_a_time();
    check_plan_against_live_engine(1024, 2_000);
}

/// A result's allocation is padded to 8 bytes past its two counts: with a 1-byte
/// result that is 24 bytes, not 17 (the plan counted the result's own bytes alone,
/// 10.4 % under a live engine).
#[test]
fn plan_matches_a_live_engine_with_1_byte_results() {
    let _serial = one_at_a_time();
    check_plan_against_live_engine(1, 2_000);
}

/// Why the plan warns below `SMALL_NAMESPACE_KEYS` resident keys: a full namespace of
/// 10,000 keys costs well over the plan's per-key figure (each shard's first slab
/// chunk and index are fixed costs), one of `SMALL_NAMESPACE_KEYS` keys is within a
/// few percent of it; and the plan of a small namespace says so.
#[test]
fn a_small_namespace_costs_more_a_key_and_its_plan_says_so() {
    let _serial = one_at_a_time();
    let full = |keys: u64| {
        let (engine, ns, _clock) = engine_with(NamespaceConfig::new().max_keys(keys as usize));
        fill(&ns, keys, b"");
        engine.stats().bytes_per_key()
    };
    let figure = Sizing::new(1.0, Duration::from_secs(1))
        .plan()
        .unwrap()
        .hot_bytes_per_key;
    let small = full(10_000);
    assert!(small > 2.0 * figure, "10,000 keys: {small:.1} B/key");
    let at = full(idem::SMALL_NAMESPACE_KEYS);
    assert!(at < 1.05 * figure, "at the threshold: {at:.1} B/key");
    let plan = Sizing::new(100.0, Duration::from_secs(100)).plan().unwrap();
    assert!(plan
        .warnings(None)
        .contains(&idem::SizingWarning::SmallNamespace { keys: 10_000 }));
    let plan = Sizing::new(10_000.0, Duration::from_secs(100))
        .plan()
        .unwrap();
    assert!(plan.warnings(None).is_empty(), "1,000,000 keys");
}

/// `Stats::bytes_per_key` of a full memory-only namespace of `n` keys, each claimed
/// (with a payload or not) and completed, with sliding windows or fixed ones.
fn filled_bytes_per_key(n: u64, sliding: bool, payload: bool) -> f64 {
    let (engine, ns, _clock) = engine_with(
        NamespaceConfig::new()
            .max_keys(n as usize)
            .extend_on_duplicate(sliding),
    );
    for i in 0..n {
        let claim = match payload {
            true => ns.claim_with_payload(&key(i), b"payload"),
            false => ns.claim(&key(i)),
        };
        match claim.expect("claim") {
            Claim::Acquired(g) => g.complete().expect("complete"),
            _ => panic!("key {i} was not fresh"),
        }
    }
    engine.stats().bytes_per_key()
}

/// What a sliding window and a payload fingerprint add to a key at `n` keys, held to
/// the plan's notes within 10 % (and printed).
fn check_window_and_payload_figures(n: u64) {
    let plan = Sizing::new(2_000.0, Duration::from_secs(100))
        .plan()
        .unwrap();
    let plain = filled_bytes_per_key(n, false, false);
    let sliding = filled_bytes_per_key(n, true, false);
    let payload = filled_bytes_per_key(n, false, true);
    let both = filled_bytes_per_key(n, true, true);
    println!(
        "{n} keys: fixed window {plain:.2} B/key, sliding window {sliding:.2}, \
         with a payload {payload:.2}, both {both:.2}"
    );
    for (what, added, planned) in [
        (
            "a sliding window",
            sliding - plain,
            plan.sliding_bytes_per_key,
        ),
        ("a payload", payload - plain, plan.payload_bytes_per_key),
        (
            "both",
            both - plain,
            plan.sliding_bytes_per_key + plan.payload_bytes_per_key,
        ),
    ] {
        assert!(
            (added - planned).abs() / planned <= 0.10,
            "{n} keys, {what}: {added:.2} B a key more live, {planned:.2} B planned"
        );
    }
}

/// What a sliding window (`extend_on_duplicate`) and a payload fingerprint
/// (`claim_with_payload`) add to a key in the hot tier, as the plan states them
/// beside its fixed-window, payload-free figure: each within 10 % of a live
/// engine's difference, at 200,000 keys. (Kept in side tables, they took 52 and 27 B
/// a key; in columns beside the entries, 8.)
#[test]
fn the_plan_states_what_a_sliding_window_and_a_payload_add_a_key() {
    let _serial = one_at_a_time();
    check_window_and_payload_figures(200_000);
}

/// The figures behind `idem plan`'s sliding-window and payload notes, at 1 M and 4 M
/// keys (`cargo test --release --no-default-features --test sizing -- --ignored
/// --nocapture`: BENCHMARKS.md, "Sizing constants"). Ignored in the suite: a debug
/// build takes minutes.
#[test]
#[ignore]
fn what_a_sliding_window_and_a_payload_add_a_key_at_a_million_keys_and_more() {
    let _serial = one_at_a_time();
    for n in [1_000_000, 4_000_000] {
        check_window_and_payload_figures(n);
    }
}

/// Hot-tier bytes a key of full namespaces of 1,000 to 1,000,000 keys, their memory
/// made at build (the default) and as keys arrive (`preallocate(false)`), and what
/// the first holds before its first key (`cargo test --release --no-default-features
/// --test sizing -- --ignored --nocapture`: BENCHMARKS.md). At a million keys the two
/// are within 3 %; smaller, a namespace made at build holds more (a chunk more a
/// shard's lane) and never less. Ignored in the suite: a debug build takes minutes.
#[test]
#[ignore]
fn bytes_a_key_at_full_made_at_build_and_as_keys_arrive() {
    let _serial = one_at_a_time();
    println!("| max_keys = keys | built, bytes | made at build: B/key | as keys arrive: B/key |");
    println!("|---:|---:|---:|---:|");
    for n in [1_000u64, 10_000, 100_000, 200_000, 1_000_000] {
        let full = |preallocate: bool| {
            let (engine, ns, _clock) = engine_with(
                NamespaceConfig::new()
                    .max_keys(n as usize)
                    .preallocate(preallocate),
            );
            let built = engine.stats().hot_bytes;
            fill(&ns, n, &[]);
            (built, engine.stats().bytes_per_key())
        };
        let (built, at_build) = full(true);
        let (_, arriving) = full(false);
        println!("| {n} | {built} | {at_build:.2} | {arriving:.2} |");
        assert!(
            at_build >= arriving,
            "{n} keys: {at_build} against {arriving}"
        );
        if n == 1_000_000 {
            assert!(at_build < arriving * 1.03, "{at_build} against {arriving}");
        }
    }
}
