//! Shared helpers for the integration tests.
#![allow(dead_code)]

use std::time::Duration;

use idem::{Engine, ManualClock, Namespace, NamespaceConfig};

/// Start of the manual clock in every test: an arbitrary wall-clock time.
pub const T0: u64 = 1_700_000_000_000;

/// An engine with one namespace "ns" on a manual clock, with no maintenance thread
/// (tests run maintenance themselves, so counters are deterministic).
pub fn engine_with(cfg: NamespaceConfig) -> (Engine, Namespace, ManualClock) {
    let clock = ManualClock::new(T0);
    let engine = Engine::builder()
        .namespace("ns", cfg)
        .clock(clock.clone())
        .maintenance_interval(None)
        .build()
        .expect("valid configuration");
    let ns = engine.namespace("ns").expect("configured namespace");
    (engine, ns, clock)
}

/// Short-lived defaults used across tests: TTL 60 s, lease 5 s.
pub fn small() -> NamespaceConfig {
    NamespaceConfig::new()
        .ttl(Duration::from_secs(60))
        .lease(Duration::from_secs(5))
}

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

pub fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// The benchmark key format of WORKLOAD.md.
pub fn key(i: u64) -> String {
    format!("ord-{i:016x}")
}
