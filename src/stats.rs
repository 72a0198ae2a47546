//! Counters and gauges reported by [`Engine::stats`](crate::Engine::stats).

use crate::hot::Counters;

/// A snapshot of the engine's counters (since it was built) and gauges (now).
///
/// Counters are kept per shard under the shard's lock and summed when asked, so
/// reading them costs the hot path nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Keys resident in the hot tier: in progress, or done and not yet reclaimed.
    /// Expired keys leave it when the maintenance pass (or a new claim) reclaims them.
    pub resident_keys: u64,
    /// Claims answered `Acquired`.
    pub acquired: u64,
    /// Claims answered `Duplicate`.
    pub duplicates: u64,
    /// Claims answered `InProgress`.
    pub in_progress: u64,
    /// Claims refused with `PayloadMismatch`.
    pub payload_mismatches: u64,
    /// Entries reclaimed because their TTL or lease ran out.
    pub expirations: u64,
    /// Claims refused with `CapacityExceeded`.
    pub capacity_refusals: u64,
    /// Successful completions.
    pub completions: u64,
    /// Successful releases (explicit or by dropping a guard).
    pub releases: u64,
    /// `complete`/`release` calls refused with `LeaseLost`.
    pub lease_lost: u64,
    /// Unexpired keys deleted by `forget`.
    pub forgotten: u64,
    /// Heap bytes held by the hot tier's tables, entries, timing wheels and stored
    /// results.
    pub hot_bytes: u64,
    /// Done keys dropped from a full hot tier to make room (durable namespaces only:
    /// the durable tier still answers for them).
    pub evictions: u64,
    /// Point look-ups of the durable tier (claims the hot tier could not answer).
    pub durable_reads: u64,
    /// Writes to the durable tier (claim markers, completions, releases, forgets;
    /// a batch counts once).
    pub durable_writes: u64,
    /// Durable-tier operations that failed.
    pub store_errors: u64,
    /// Claims and completions decided from the hot tier alone because the store
    /// failed and the namespace fails open.
    pub fail_open_decisions: u64,
}

impl Stats {
    pub(crate) fn add_counters(&mut self, c: &Counters) {
        self.acquired += c.acquired;
        self.duplicates += c.duplicates;
        self.in_progress += c.in_progress;
        self.payload_mismatches += c.payload_mismatches;
        self.expirations += c.expirations;
        self.capacity_refusals += c.capacity_refusals;
        self.completions += c.completions;
        self.releases += c.releases;
        self.lease_lost += c.lease_lost;
        self.forgotten += c.forgotten;
        self.evictions += c.evictions;
    }

    pub(crate) fn merge(&mut self, o: &Stats) {
        self.resident_keys += o.resident_keys;
        self.hot_bytes += o.hot_bytes;
        self.acquired += o.acquired;
        self.duplicates += o.duplicates;
        self.in_progress += o.in_progress;
        self.payload_mismatches += o.payload_mismatches;
        self.expirations += o.expirations;
        self.capacity_refusals += o.capacity_refusals;
        self.completions += o.completions;
        self.releases += o.releases;
        self.lease_lost += o.lease_lost;
        self.forgotten += o.forgotten;
        self.evictions += o.evictions;
        self.durable_reads += o.durable_reads;
        self.durable_writes += o.durable_writes;
        self.store_errors += o.store_errors;
        self.fail_open_decisions += o.fail_open_decisions;
    }

    /// Hot-tier heap bytes per resident key (0 when empty): the figure to hold against
    /// the sizing plan in production.
    pub fn bytes_per_key(&self) -> f64 {
        if self.resident_keys == 0 {
            0.0
        } else {
            self.hot_bytes as f64 / self.resident_keys as f64
        }
    }
}
