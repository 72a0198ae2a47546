//! Crash durability: a consumer process is killed with SIGKILL in the middle of its
//! stream; every completion it acknowledged must be a duplicate after reopening, under
//! every sync policy, with its co-committed ledger entry.

#![cfg(all(feature = "durable", not(idem_loom)))]

mod util;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use idem::{Claim, Clock, Engine, NamespaceConfig};
use util::{assert_killed, TempDir, Watchdog, CHILD_LIMIT};

fn key(id: u64) -> Vec<u8> {
    format!("ord-{id:016x}").into_bytes()
}

/// Runs the consumer on `dir` with options `more` and SIGKILLs it after `kill_after`
/// acknowledgements. Returns the acknowledged ids.
fn run_and_kill_with(dir: &Path, sync: &str, more: &[&str], kill_after: usize) -> Vec<u64> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(["__consumer", "--dir"])
        .arg(dir)
        .args(["--messages", "50000", "--workers", "4", "--sync", sync])
        .args(more)
        .stdout(Stdio::piped())
        .spawn()
        .expect("the consumer starts");
    let out = child.stdout.take().unwrap();
    let watchdog = Watchdog::arm(child.id(), CHILD_LIMIT);
    let mut acked = Vec::new();
    for line in BufReader::new(out).lines() {
        let line = line.unwrap();
        if let Some(id) = line.strip_prefix("ack ") {
            // `ack <id> <worker> <seq>`
            acked.push(id.split_whitespace().next().unwrap().parse().unwrap());
            if acked.len() >= kill_after {
                break;
            }
        }
    }
    drop(watchdog);
    child.kill().expect("SIGKILL delivered");
    let status = child.wait().unwrap();
    assert!(!status.success(), "the consumer was killed, not finished");
    assert_killed(status);
    assert!(acked.len() >= kill_after, "the consumer ended early");
    acked
}

fn reopen(dir: &Path) -> Engine {
    Engine::builder()
        .namespace(
            "orders",
            NamespaceConfig::new()
                .ttl(Duration::from_secs(3600))
                .max_keys(4_000_000),
        )
        .state_family("ledger")
        .durable(dir)
        .maintenance_interval(None)
        .build()
        .expect("the database reopens after SIGKILL")
}

fn acknowledged_completions_survive(sync: &str) {
    acknowledged_completions_survive_with(sync, &[]);
}

fn acknowledged_completions_survive_with(sync: &str, more: &[&str]) {
    let dir = TempDir::new();
    let acked = run_and_kill_with(dir.path(), sync, more, 3000);
    let engine = reopen(dir.path());
    let orders = engine.namespace("orders").unwrap();
    assert!(
        engine.orphans().len() <= 4,
        "at most one claim per worker was in flight: {:?}",
        engine.orphans().len()
    );
    for id in &acked {
        let k = key(*id);
        assert!(
            matches!(orders.claim(&k).unwrap(), Claim::Duplicate(_)),
            "acknowledged message {id} was lost ({sync})"
        );
        assert_eq!(
            engine.read_state("ledger", &k).unwrap().as_deref(),
            Some(&[1u8][..]),
            "the ledger entry of {id} was committed with its completion ({sync})"
        );
    }
    // The prefilter was rebuilt from what survived: it let every acknowledged key
    // through (none was declared new above) and answers keys never sent alone.
    let s = engine.stats();
    // No clean shutdown, so no saved filter: it was rebuilt.
    assert_eq!((s.prefilter_loads, s.prefilter_rebuilds), (0, 1), "{s:?}");
    assert!(s.prefilter_keys >= acked.len() as u64, "{s:?}");
    assert!(s.prefilter_passes >= acked.len() as u64, "{s:?}");
    let before = s.prefilter_negatives;
    for id in 1_000_000..1_001_000u64 {
        assert!(orders.claim(&key(id)).unwrap().is_acquired());
    }
    let s = engine.stats();
    assert!(s.prefilter_negatives - before >= 950, "{s:?}");
}

#[test]
fn sigkill_loses_no_acknowledged_completion_sync_always() {
    acknowledged_completions_survive("always");
}

#[test]
fn sigkill_loses_no_acknowledged_completion_sync_always_fixed_commit_delay() {
    acknowledged_completions_survive_with("always", &["--commit-delay-us", "200"]);
}

#[test]
fn sigkill_loses_no_acknowledged_completion_sync_always_group_commit_off() {
    acknowledged_completions_survive_with("always", &["--commit-delay-us", "0"]);
}

#[test]
fn sigkill_loses_no_acknowledged_completion_sync_periodic() {
    acknowledged_completions_survive("periodic:1000");
}

#[test]
fn sigkill_loses_no_acknowledged_completion_sync_never() {
    acknowledged_completions_survive("never");
}

#[test]
fn orphans_found_at_open_are_held_until_their_lease_runs_out() {
    let dir = TempDir::new();
    // Every claim of the run is made at or after this time (the consumer reads the
    // same coarse clock, or the exact one, which is never behind it). The manual clock
    // starts here, so how long the kill and the reopen take changes nothing: every
    // lease is still running at the reopen.
    let started_ms = idem::CoarseClock.now_ms();
    // Five claims held from the start make the orphans certain; the workers' claims
    // in flight at the kill add up to four more.
    run_and_kill_with(
        dir.path(),
        "never",
        &["--hold", "5", "--lease-ms", "600000"],
        500,
    );
    let clock = idem::ManualClock::new(started_ms);
    let engine = Engine::builder()
        .namespace("orders", NamespaceConfig::new().max_keys(4_000_000))
        .state_family("ledger")
        .durable(dir.path())
        .clock(clock.clone())
        .maintenance_interval(None)
        .build()
        .unwrap();
    let orders = engine.namespace("orders").unwrap();
    let orphans = engine.orphans();
    assert!((5..=9).contains(&orphans.len()), "{orphans:?}");
    for o in orphans {
        assert_eq!(o.namespace, "orders");
        assert!(o.corrupt.is_none(), "{o:?}");
        assert!(o.held, "{o:?}");
        assert!(o.claimed_at_ms >= started_ms, "{o:?}");
        assert_eq!(
            o.lease_expires_at_ms,
            o.claimed_at_ms + 600_000,
            "the consumer's 10 min lease"
        );
    }
    // The claims in flight at the kill read as in progress, and they are exactly the
    // orphans: the same leases.
    let candidates: Vec<Vec<u8>> = (0..5)
        .map(|i| format!("held-{i}").into_bytes())
        .chain((0..50_000u64).map(key))
        .collect();
    let mut in_flight: Vec<(u64, &[u8])> = candidates
        .iter()
        .filter_map(|k| match orders.check(k).unwrap() {
            Some(idem::KeyState::InProgress {
                lease_expires_at_ms,
                ..
            }) => Some((lease_expires_at_ms, &k[..])),
            _ => None,
        })
        .collect();
    in_flight.sort();
    let mut expiries: Vec<u64> = orphans.iter().map(|o| o.lease_expires_at_ms).collect();
    expiries.sort_unstable();
    assert_eq!(
        in_flight.iter().map(|(at, _)| *at).collect::<Vec<_>>(),
        expiries
    );
    for i in 0..5 {
        let k = format!("held-{i}").into_bytes();
        assert!(in_flight.iter().any(|(_, f)| *f == &k[..]), "held-{i}");
    }
    // Each is held until the last millisecond of its lease, and claimable from the
    // next one. Claims that share an expiry are checked together, and expiries in
    // order: the engine never lets its clock go back.
    let mut rest = &in_flight[..];
    while let Some(&(at, _)) = rest.first() {
        let n = rest.iter().take_while(|(e, _)| *e == at).count();
        let (due, later) = rest.split_at(n);
        clock.set(at - 1);
        for (_, k) in due {
            assert!(
                matches!(orders.claim(k).unwrap(), Claim::InProgress(_)),
                "{} still held a millisecond before its lease runs out",
                String::from_utf8_lossy(k)
            );
        }
        clock.set(at);
        for (_, k) in due {
            match orders.claim(k).unwrap() {
                Claim::Acquired(g) => g.release().unwrap(),
                other => panic!(
                    "{} claimable once its lease ran out: {other:?}",
                    String::from_utf8_lossy(k)
                ),
            }
        }
        rest = later;
    }
}

/// Runs the consumer holding five claims (`held-0` to `held-4`) from its start, kills
/// it, and checks that the five are orphans held in progress after reopening.
fn held_claims_are_orphans_after_sigkill(more: &[&str]) {
    let dir = TempDir::new();
    let mut args = vec!["--hold", "5", "--lease-ms", "600000"];
    args.extend_from_slice(more);
    run_and_kill_with(dir.path(), "never", &args, 200);
    let engine = reopen(dir.path());
    let orders = engine.namespace("orders").unwrap();
    for i in 0..5 {
        let k = format!("held-{i}");
        assert!(
            matches!(
                orders.check(k.as_bytes()).unwrap(),
                Some(idem::KeyState::InProgress { .. })
            ),
            "{k} was in flight at the kill ({more:?})"
        );
    }
    let orphans = engine.orphans();
    // The five, and at most one claim per worker besides.
    assert!((5..=9).contains(&orphans.len()), "{}", orphans.len());
    assert!(orphans.iter().all(|o| o.corrupt.is_none() && o.held));
    // Extended, the five are held until their new end: their markers say so.
    let extended = more.contains(&"--extend-held-ms");
    let spans: Vec<u64> = orphans
        .iter()
        .map(|o| o.lease_expires_at_ms - o.claimed_at_ms)
        .collect();
    let long = spans.iter().filter(|&&s| s == EXTENDED_MS).count();
    assert_eq!(long, if extended { 5 } else { 0 }, "{spans:?} ({more:?})");
    assert!(
        spans.iter().all(|&s| s == EXTENDED_MS || s == 600_000),
        "{spans:?}"
    );
}

/// The lease the held claims are extended to (`--extend-held-ms`).
const EXTENDED_MS: u64 = 3_600_000;

#[test]
fn claims_held_at_a_sigkill_are_orphans_with_the_journal() {
    held_claims_are_orphans_after_sigkill(&[]);
}

#[test]
fn claims_held_at_a_sigkill_are_orphans_with_a_full_journal() {
    held_claims_are_orphans_after_sigkill(&["--journal-slots", "3"]);
}

#[test]
fn claims_held_at_a_sigkill_are_orphans_with_immediate_markers() {
    held_claims_are_orphans_after_sigkill(&["--markers", "immediate"]);
}

/// Held claims whose leases were extended (`extend_lease`) before the SIGKILL are
/// orphans held until the extended end: with the journal's slots renewed into free
/// ones; with a full journal (three slots, all taken: those three renewed into
/// RocksDB, their slots cleared, and the two that had overflowed rewritten there);
/// and with immediate markers.
#[test]
fn extended_claims_held_at_a_sigkill_are_orphans_until_their_new_end() {
    held_claims_are_orphans_after_sigkill(&["--extend-held-ms", "3600000"]);
    held_claims_are_orphans_after_sigkill(&["--extend-held-ms", "3600000", "--journal-slots", "3"]);
    held_claims_are_orphans_after_sigkill(&[
        "--extend-held-ms",
        "3600000",
        "--markers",
        "immediate",
    ]);
}
