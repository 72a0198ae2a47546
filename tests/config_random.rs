//! Random configurations, the sensible and the absurd mixed: `build` returns an engine
//! or a typed error, never a panic, and an engine it returns claims, completes and
//! answers the duplicate.

#![cfg(not(idem_loom))]

mod util;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use idem::{
    Claim, ClaimMarkers, Engine, EngineBuilder, Error, FailurePolicy, ManualClock, NamespaceConfig,
    SyncPolicy,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use util::TempDir;

/// A duration from the edges and the middle of its range.
fn duration(rng: &mut StdRng) -> Duration {
    match rng.gen_range(0..32) {
        0 => Duration::ZERO,
        1 => Duration::from_nanos(rng.gen_range(1..1_000_000)),
        2 => Duration::MAX,
        3 => Duration::from_secs(1 << rng.gen_range(30..64)),
        4 => Duration::from_millis(1 << rng.gen_range(20..64)),
        5 => idem::MAX_RETENTION + Duration::from_millis(rng.gen_range(0..2)),
        _ => Duration::from_millis(rng.gen_range(1..10_000_000)),
    }
}

/// A count from the edges and the middle of its range (with `cap` on the middle).
fn count(rng: &mut StdRng, cap: usize) -> usize {
    match rng.gen_range(0..24) {
        0 => 0,
        1 => usize::MAX,
        2 => idem::MAX_KEYS_LIMIT + rng.gen_range(0..2),
        3 => 1 << rng.gen_range(40..64),
        _ => rng.gen_range(1..=cap),
    }
}

/// A false-positive rate, valid or not.
fn rate(rng: &mut StdRng) -> f64 {
    match rng.gen_range(0..24) {
        0 => 0.0,
        1 => -0.25,
        2 => f64::NAN,
        3 => f64::INFINITY,
        4 => f64::from_bits(rng.gen_range(1..1 << 20)),
        5 => 0.5 + rng.gen_range(0.0..0.5),
        _ => rng.gen_range(1e-6..0.5),
    }
}

/// A namespace configuration with a random subset of its settings. With a durable
/// tier the prefilter's size stays small or absurd (never a real allocation of
/// gigabytes); without one, preallocation only on small namespaces.
fn namespace(rng: &mut StdRng, durable: bool) -> NamespaceConfig {
    let mut c = NamespaceConfig::new();
    let mut some = || rng.gen_bool(0.5);
    let (ttl, lease, keys, key_len, retention, sync, fpr, expected) = (
        some(),
        some(),
        some(),
        some(),
        some(),
        some(),
        some(),
        some(),
    );
    let (result_len, shards, slots, pre, slide) = (some(), some(), some(), some(), some());
    if ttl {
        c = c.ttl(duration(rng));
    }
    if lease {
        c = c.lease(duration(rng));
    }
    if keys {
        c = c.max_keys(count(rng, 1 << 16));
    }
    if key_len {
        c = c.max_key_len(count(rng, 1 << 12));
    }
    if retention {
        let r = if rng.gen_bool(0.8) {
            c.get_ttl().saturating_mul(rng.gen_range(1..10))
        } else {
            duration(rng)
        };
        c = c.retention(r);
    }
    if sync {
        c = c.sync(match rng.gen_range(0..3) {
            0 => SyncPolicy::Always,
            1 => SyncPolicy::Never,
            _ => SyncPolicy::Periodic(duration(rng)),
        });
    }
    if fpr {
        c = c.prefilter_fpr(rate(rng));
    }
    if durable {
        // Sized explicitly: the default follows max_keys x retention / ttl, which a
        // random pair can make a real filter of gigabytes.
        c = if expected {
            c.expected_keys(match rng.gen_range(0..8) {
                0 => 0,
                1 => usize::MAX,
                2 => 1 << 50,
                _ => rng.gen_range(1..1 << 16),
            })
        } else {
            c.prefilter(false)
        };
        c = c.claim_markers(if rng.gen_bool(0.5) {
            ClaimMarkers::Journal
        } else {
            ClaimMarkers::Immediate
        });
        c = c.on_store_error(if rng.gen_bool(0.5) {
            FailurePolicy::FailClosed
        } else {
            FailurePolicy::FailOpen
        });
    }
    if result_len {
        c = c.max_result_len(count(rng, 1 << 20));
    }
    if shards {
        c = c.shards(count(rng, 4_096));
    }
    if slots {
        c = c.journal_slots(count(rng, 1 << 12));
    }
    // Made at build (the default) only where small: a random max_keys's memory,
    // written at every build, would take seconds and gigabytes.
    let small = c.get_max_keys() <= 1 << 16;
    c = c.preallocate(pre && small);
    if slide {
        c = c.extend_on_duplicate(true);
    }
    c
}

fn builder(rng: &mut StdRng, clock: &ManualClock, dir: Option<&TempDir>) -> EngineBuilder {
    let mut b = Engine::builder().clock(clock.clone());
    if rng.gen_bool(0.5) {
        b = b.tick(if rng.gen_bool(0.8) {
            Duration::from_millis([1, 2, 10, 1_000, 60_000][rng.gen_range(0..5)])
        } else {
            duration(rng)
        });
    }
    b = b.maintenance_interval(if rng.gen_bool(0.5) {
        None
    } else {
        Some(duration(rng))
    });
    if let Some(d) = dir {
        b = b.durable(d.path());
        if rng.gen_bool(0.3) {
            b = b.commit_delay(if rng.gen_bool(0.8) {
                Duration::from_micros(rng.gen_range(0..=100_000))
            } else {
                duration(rng)
            });
        }
        if rng.gen_bool(0.3) {
            b = b.state_family(["ledger", "", "a:b", "a\0b"][rng.gen_range(0..4)]);
        }
    }
    b
}

/// The settings a refusal may name: the engine's own (refused with no namespace) and
/// the namespace's (refused as namespace "ns").
const ENGINE_SETTINGS: [&str; 4] = [
    "tick",
    "commit_delay",
    "maintenance_interval",
    "state family",
];
const NAMESPACE_SETTINGS: [&str; 12] = [
    "journal_slots",
    "ttl",
    "lease",
    "max_keys",
    "max_result_len",
    "max_key_len",
    "retention",
    "periodic sync interval",
    "prefilter_fpr",
    "expected_keys",
    "shards",
    "preallocate",
];

/// Checks that `e` refuses the configuration: an invalid setting or memory it could
/// not allocate, for the right scope, naming the setting in the error and in its
/// message. Panics (with `what`) otherwise.
fn refused_setting(e: &Error, what: &str) {
    let (namespace, named) = match e {
        Error::InvalidConfig { namespace, reason } => (namespace, *reason),
        Error::OutOfMemory { namespace, what } => (namespace, *what),
        other => panic!("not a refused configuration: {other:?}: {what}"),
    };
    let settings: &[&str] = if namespace.is_empty() {
        &ENGINE_SETTINGS
    } else {
        assert_eq!(namespace, "ns", "{e:?}: {what}");
        &NAMESPACE_SETTINGS
    };
    assert!(
        settings.iter().any(|s| named.contains(s)),
        "the refusal names no setting of its scope: {e:?}: {what}"
    );
    let message = e.to_string();
    assert!(message.contains(named), "{message:?} for {e:?}: {what}");
}

#[test]
fn random_configurations_build_an_engine_that_works_or_are_refused_with_a_typed_error() {
    let mut rng = StdRng::seed_from_u64(0x1de4_c0f1);
    let (mut built, mut refused) = (0, 0);
    for round in 0..400 {
        // (A build without the durable tier refuses every durable engine.)
        let durable = round % 4 == 0 && cfg!(feature = "durable");
        let dir = durable.then(TempDir::new);
        let clock = ManualClock::new(1_700_000_000_000);
        let cfg = namespace(&mut rng, durable);
        let b = builder(&mut rng, &clock, dir.as_ref()).namespace("ns", cfg.clone());
        let what = format!("round {round}: {cfg:?} with {b:?}");
        let outcome = catch_unwind(AssertUnwindSafe(|| b.build()))
            .unwrap_or_else(|_| panic!("build panicked: {what}"));
        let engine = match outcome {
            Ok(engine) => engine,
            Err(e) => {
                // A typed refusal, which names the setting.
                refused_setting(&e, &what);
                refused += 1;
                continue;
            }
        };
        built += 1;
        let ns = engine.namespace("ns").expect("the configured namespace");
        let key = b"k";
        match ns.claim(key) {
            Ok(Claim::Acquired(g)) => g.complete().unwrap_or_else(|e| panic!("{e}: {what}")),
            other => panic!("{other:?}: {what}"),
        }
        match ns.claim(key) {
            Ok(Claim::Duplicate(_)) => {}
            other => panic!("{other:?}: {what}"),
        }
        drop(ns);
        drop(engine);
    }
    // Both kinds were drawn, in numbers.
    assert!(
        built >= 40 && refused >= 40,
        "built {built}, refused {refused}"
    );
}
