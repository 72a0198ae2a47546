//! Exactly once under contention, with the durable tier: threads claim, complete,
//! release, drop, extend and batch over a few thousand keys, holding some guards
//! while they move the shared clock past leases and hot windows and run maintenance
//! passes (expiry, eviction, deferred markers). Whatever the interleaving, a key's completion succeeds at most
//! once, every completed key answers `Duplicate` (from the hot tier or read back from
//! RocksDB) and keeps doing so after a restart, and a key never completed does not.

#![cfg(all(feature = "durable", not(idem_loom)))]

mod util;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;

use idem::{Claim, ClaimGuard, ClaimMarkers, Engine, ManualClock, Namespace, NamespaceConfig};
use util::*;

const KEYS: u64 = 3_000;
const WORKERS: usize = 3;
const ROUNDS: u64 = 6_000;

fn config(markers: ClaimMarkers) -> NamespaceConfig {
    NamespaceConfig::new()
        // Short enough that completed keys leave the hot tier (and a full one evicts
        // them) and are read back; retention keeps them duplicates throughout.
        .ttl(ms(200))
        .lease(ms(50))
        .retention(secs(3_600))
        .max_keys(64)
        .claim_markers(markers)
        .sync(idem::SyncPolicy::Never)
}

fn open(dir: &TempDir, clock: &ManualClock, markers: ClaimMarkers) -> (Engine, Namespace) {
    let engine = Engine::builder()
        .namespace("ns", config(markers))
        .clock(clock.clone())
        .maintenance_interval(None)
        .durable(dir.path())
        .build()
        .expect("open");
    let ns = engine.namespace("ns").expect("configured namespace");
    (engine, ns)
}

/// Finishes `g` (of key `k`) one way or another, chosen by `pick`; a completion that
/// succeeded is counted in `done[k]`.
fn finish(g: ClaimGuard, k: usize, pick: u64, done: &[AtomicU64]) {
    match pick % 6 {
        0..=2 => {
            if g.complete().is_ok() {
                done[k].fetch_add(1, Ordering::SeqCst);
            }
        }
        3 => {
            let _ = g.release();
        }
        4 => drop(g),
        _ => {
            let mut g = g;
            let _ = g.extend_lease(ms(80));
            if g.complete_with_result(b"r").is_ok() {
                done[k].fetch_add(1, Ordering::SeqCst);
            }
        }
    }
}

fn run(markers: ClaimMarkers) {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let (engine, ns) = open(&dir, &clock, markers);
    let done: Vec<AtomicU64> = (0..KEYS).map(|_| AtomicU64::new(0)).collect();
    let start = Barrier::new(WORKERS);
    std::thread::scope(|s| {
        for w in 0..WORKERS as u64 {
            let (engine, ns, clock, done, start) = (&engine, &ns, &clock, &done, &start);
            s.spawn(move || {
                let mut rng = XorShift::new(0x5EED_0000 + w);
                // Guards held across later claims while the clock moves on: some
                // leases run out before their guard is finished.
                let mut held: Vec<(ClaimGuard, usize)> = Vec::new();
                start.wait();
                for round in 0..ROUNDS {
                    // Every worker moves the shared clock, and runs maintenance
                    // passes (expiry, eviction, deferred markers) now and then.
                    if rng.below(2) == 0 {
                        clock.advance(ms(1 + rng.below(4)));
                    }
                    if round % 64 == w {
                        engine.run_maintenance();
                    }
                    let k = rng.below(KEYS) as usize;
                    let pick = rng.next();
                    if pick.is_multiple_of(10) {
                        // A batch of three keys (repeats possible).
                        let ks = [k, rng.below(KEYS) as usize, rng.below(KEYS) as usize];
                        let bytes: Vec<String> = ks.iter().map(|&k| key(k as u64)).collect();
                        let refs: Vec<&[u8]> = bytes.iter().map(|b| b.as_bytes()).collect();
                        if let Ok(claims) = ns.claim_batch(&refs) {
                            for (c, &k) in claims.into_iter().zip(&ks) {
                                if let Claim::Acquired(g) = c {
                                    held.push((g, k));
                                }
                            }
                        }
                    } else if let Ok(Claim::Acquired(g)) = ns.claim(key(k as u64).as_bytes()) {
                        held.push((g, k));
                    }
                    while held.len() > 12 || (!held.is_empty() && rng.below(4) == 0) {
                        let (g, k) = held.swap_remove(rng.below(held.len() as u64) as usize);
                        finish(g, k, rng.next(), done);
                    }
                }
                for (g, k) in held {
                    finish(g, k, rng.next(), done);
                }
            });
        }
    });
    let what = format!("{markers:?}");
    let check = |ns: &Namespace, when: &str| {
        for (k, n) in done.iter().enumerate() {
            let n = n.load(Ordering::SeqCst);
            assert!(n <= 1, "{what} {when}: key {k} completed {n} times");
            let c = ns.claim(key(k as u64).as_bytes()).expect("claim");
            assert_eq!(
                c.is_duplicate(),
                n == 1,
                "{what} {when}: key {k} completed {n} times answered {c:?}"
            );
            // (An acquired claim is dropped here: the key stays new.)
        }
    };
    let st = ns.stats();
    // The run reached what it is for: collisions, lost leases, read-backs.
    assert!(st.completions > 0 && st.in_progress > 0, "{what}: {st:?}");
    assert!(st.lease_lost > 0 && st.durable_reads > 0, "{what}: {st:?}");
    // Every lease held is over: keys never completed are free again.
    clock.advance(secs(1));
    check(&ns, "after the run");
    drop(ns);
    drop(engine);
    let (_engine, ns) = open(&dir, &clock, markers);
    check(&ns, "after a restart");
}

#[test]
fn concurrent_claims_complete_each_key_at_most_once_and_stay_done_journal() {
    run(ClaimMarkers::Journal);
}

#[test]
fn concurrent_claims_complete_each_key_at_most_once_and_stay_done_immediate() {
    run(ClaimMarkers::Immediate);
}

#[test]
fn concurrent_claims_complete_each_key_at_most_once_and_stay_done_deferred() {
    run(ClaimMarkers::Deferred);
}
