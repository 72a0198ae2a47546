//! Model check: random operation sequences on a real engine, compared after every step
//! with a reference model (a `HashMap` of key states and a model clock).
//!
//! The model and the interpreter live in `model_core/mod.rs`, which the fuzz target
//! `fuzz/fuzz_targets/model.rs` runs on fuzzer input as well. Here a fixed-seed
//! xorshift generates the sequences, so every run checks the same ones.

#![cfg(not(idem_loom))]

mod model_core;
mod util;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use model_core::{decode, run, Harness, ModelConfig, Op, Tally, OP_BYTES, TTL_MS};
use util::XorShift;

const SEQUENCES: usize = 200;
const STEPS: usize = 300;

/// Runs [`SEQUENCES`] random sequences of [`STEPS`] operations in one window mode,
/// with the bound, the shard count and the fingerprint seed varying per sequence.
fn run_many(sliding: bool, seed: u64) -> Tally {
    let mut rng = XorShift::new(seed);
    let mut total = Tally::default();
    for seq in 0..SEQUENCES {
        let cfg_byte = (rng.next() as u8 & !1) | u8::from(sliding);
        let cfg = ModelConfig::from_byte(cfg_byte, rng.next());
        let ops = decode(&rng.bytes(STEPS * OP_BYTES));
        assert_eq!(ops.len(), STEPS);
        let label = format!("seed {seed:#x}, sequence {seq}, {cfg:?}");
        total += run(cfg, &ops, &label);
    }
    total
}

/// The sequences must reach every path the model distinguishes, or a passing run
/// would mean little.
fn assert_covers_every_path(t: &Tally) {
    let reached = [
        ("acquired", t.acquired),
        (
            "acquired exactly at the previous deadline",
            t.acquired_at_deadline,
        ),
        ("duplicates", t.duplicates),
        (
            "duplicates in the last millisecond",
            t.duplicates_at_last_ms,
        ),
        ("in progress", t.in_progress),
        ("payload mismatches", t.payload_mismatches),
        ("capacity refusals", t.capacity_refusals),
        (
            "acquired after reclaiming expired keys",
            t.acquired_after_reclaim,
        ),
        ("invalid keys", t.invalid_keys),
        ("completions", t.completions),
        ("releases", t.releases),
        ("dropped guards", t.drops),
        (
            "lease lost with nobody else claiming",
            t.lease_lost_unclaimed,
        ),
        ("lease lost to a re-claim or forget", t.lease_lost_taken),
        ("results too large", t.results_too_large),
        ("forgotten keys", t.forgotten),
        ("keys reclaimed by maintenance", t.maintenance_reclaims),
        ("clock leaps", t.leaps),
        ("sequences across the wrap of 32-bit ticks", t.near_wrap),
        ("batches", t.batches),
        ("refused batches", t.batches_refused),
        ("batch completions", t.completion_batches),
        (
            "batch completions with results",
            t.completion_batches_with_results,
        ),
        (
            "results too large in batch completions",
            t.batch_results_too_large,
        ),
        ("lease extensions", t.extensions),
        ("refused lease extensions", t.extensions_refused),
    ];
    for (what, n) in reached {
        assert!(n >= 20, "only {n} {what} in {t:?}");
    }
    assert_eq!(t.steps, (SEQUENCES * STEPS) as u64);
}

#[test]
fn fixed_window_engine_matches_the_model() {
    let t = run_many(false, 0x5EED_0001);
    assert_covers_every_path(&t);
}

#[test]
fn sliding_window_engine_matches_the_model() {
    let t = run_many(true, 0x5EED_0002);
    assert_covers_every_path(&t);
}

/// A short sequence that separates a fixed window from a sliding one and a TTL of
/// 1000 ms from one of 1001 ms.
fn probe() -> Vec<Op> {
    let key = 3;
    vec![
        Op::Claim { key },
        Op::Complete { guard: 0 },
        Op::Advance { kind: 5, arg: 0 }, // lease - 1 = 299 ms
        Op::Claim { key },               // duplicate; a sliding window restarts here
        Op::AdvanceToDeadline {
            pick: 0,
            early: false,
        },
        Op::Claim { key },
    ]
}

#[test]
fn the_probe_passes_against_a_matching_engine() {
    for sliding in [false, true] {
        let cfg = ModelConfig::from_byte(u8::from(sliding), 7);
        let t = run(cfg, &probe(), "probe");
        assert_eq!((t.acquired, t.duplicates, t.completions), (2, 1, 1));
    }
}

#[test]
fn the_comparison_notices_an_engine_that_differs_from_the_model() {
    let cfg = ModelConfig::from_byte(0, 7);
    let differing = [
        (
            "ttl one millisecond longer",
            cfg.namespace_config()
                .ttl(Duration::from_millis(TTL_MS + 1)),
        ),
        (
            "sliding instead of fixed window",
            cfg.namespace_config().extend_on_duplicate(true),
        ),
    ];
    for (what, ns_cfg) in differing {
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let mut h = Harness::with_namespace(cfg, ns_cfg, what);
            for op in probe() {
                h.apply(op);
            }
        }));
        assert!(outcome.is_err(), "an engine with {what} went unnoticed");
    }
}
