//! Model check: random operation sequences on a real engine, compared after every step
//! with a reference model (a `HashMap` of key states and a model clock).
//!
//! The model and the interpreter live in `model_core/mod.rs`, which the fuzz target
//! `fuzz/fuzz_targets/model.rs` runs on fuzzer input as well. Here a fixed-seed
//! xorshift generates the sequences, so every run checks the same ones: on the
//! default 1 ms tick, where every answer is compared exactly, and on ticks of 7 ms,
//! 250 ms and 1 s, where the model takes each deadline the engine reports within
//! what the tick allows and holds it to it from then on (see `model_core`).

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
    run_on_tick(sliding, seed, 1)
}

/// As [`run_many`], on an engine ticking every `tick_ms` milliseconds.
fn run_on_tick(sliding: bool, seed: u64, tick_ms: u64) -> Tally {
    let mut rng = XorShift::new(seed);
    let mut total = Tally::default();
    for seq in 0..SEQUENCES {
        let cfg_byte = (rng.next() as u8 & !1) | u8::from(sliding);
        let cfg = ModelConfig::from_byte(cfg_byte, rng.next()).with_tick(tick_ms);
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

/// On a coarse tick the sequences must also meet deadlines the engine rounded up,
/// or the allowance for them would go untested.
fn assert_meets_rounded_deadlines(t: &Tally) {
    let n = t.late_deadlines;
    assert!(n >= 100, "only {n} deadlines rounded up in {t:?}");
}

#[test]
fn fixed_window_engine_matches_the_model() {
    let t = run_many(false, 0x5EED_0001);
    assert_covers_every_path(&t);
    assert_eq!(t.late_deadlines, 0, "no allowance at 1 ms ticks");
}

#[test]
fn sliding_window_engine_matches_the_model() {
    let t = run_many(true, 0x5EED_0002);
    assert_covers_every_path(&t);
    assert_eq!(t.late_deadlines, 0, "no allowance at 1 ms ticks");
}

/// Ticks coarser than 1 ms: one that divides neither the TTL nor the lease, one
/// that divides both, and one as long as the TTL. The clock moves by any number of
/// milliseconds, mostly not whole ticks.
const COARSE_TICKS_MS: [u64; 3] = [7, 250, 1000];

#[test]
fn fixed_window_engine_on_coarse_ticks_matches_the_model() {
    for (i, tick) in COARSE_TICKS_MS.into_iter().enumerate() {
        let t = run_on_tick(false, 0x5EED_0101 + i as u64, tick);
        assert_covers_every_path(&t);
        assert_meets_rounded_deadlines(&t);
    }
}

#[test]
fn sliding_window_engine_on_coarse_ticks_matches_the_model() {
    for (i, tick) in COARSE_TICKS_MS.into_iter().enumerate() {
        let t = run_on_tick(true, 0x5EED_0201 + i as u64, tick);
        assert_covers_every_path(&t);
        assert_meets_rounded_deadlines(&t);
    }
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

/// The allowance of a coarse tick is the tick's and no more: an engine whose TTL or
/// lease is one tick longer than the model's, or whose window is fixed where the
/// model's slides, is noticed on a 7 ms tick; and the model of a 1 ms tick notices
/// an engine that ticks every 7 ms.
#[test]
fn the_comparison_on_a_coarse_tick_notices_an_engine_that_differs_from_the_model() {
    const TICK: u64 = 7;
    for sliding in [false, true] {
        let cfg = ModelConfig::from_byte(u8::from(sliding), 7).with_tick(TICK);
        let t = run(cfg, &probe(), "probe on a coarse tick");
        assert_eq!((t.acquired, t.duplicates, t.completions), (2, 1, 1));
        let differing = [
            (
                "ttl one tick longer",
                cfg.namespace_config()
                    .ttl(Duration::from_millis(TTL_MS + TICK)),
                TICK,
            ),
            (
                "lease one tick longer",
                cfg.namespace_config()
                    .lease(Duration::from_millis(model_core::LEASE_MS + TICK)),
                TICK,
            ),
            (
                "the other window",
                cfg.namespace_config().extend_on_duplicate(!sliding),
                TICK,
            ),
            (
                "a 7 ms tick against a 1 ms model",
                cfg.namespace_config(),
                1,
            ),
        ];
        for (what, ns_cfg, model_tick) in differing {
            let model_cfg = cfg.with_tick(model_tick);
            let outcome = catch_unwind(AssertUnwindSafe(|| {
                let mut h = Harness::with_engine(model_cfg, ns_cfg, TICK, what);
                for op in probe() {
                    h.apply(op);
                }
            }));
            assert!(outcome.is_err(), "an engine with {what} went unnoticed");
        }
    }
}
