//! Counters and gauges reported by [`Engine::stats`](crate::Engine::stats).

use crate::hot::Counters;

/// A snapshot of the engine's counters (since it was built) and gauges (now).
///
/// Counters are kept per shard under the shard's lock (duplicates answered without
/// it, on stripes of their threads) and summed when asked, so keeping them costs the
/// hot path next to nothing. The sum takes one shard at a time: while other threads
/// claim, a snapshot mixes earlier and later moments of different shards, so its
/// figures need not agree with one another (`resident_keys` can read a little above
/// `max_keys`: a shard read before a key left it, another after a new key took
/// that room). With the namespace idle they are
/// exact.
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
    /// Claims given up: releases (explicit or by dropping a guard), and completions
    /// whose durable write failed (or panicked) or whose fsync failed, the error
    /// returned: under `FailClosed`, and for a co-commit with state changes
    /// ([`ClaimGuard::complete_with`](crate::ClaimGuard::complete_with)) under
    /// `FailOpen` too, since state is never applied from the hot tier alone (the hot
    /// tier's claim is released; a redelivery retries after a failed write, and
    /// answers `Duplicate` from the durable tier after a failed fsync, whose write was
    /// applied). A completion decided from the hot tier under `FailOpen` is counted
    /// in `completions`, not here.
    pub releases: u64,
    /// Completions and releases refused with `LeaseLost`, including the release of a
    /// guard dropped after its lease had run out.
    pub lease_lost: u64,
    /// Unexpired keys deleted by `forget`.
    pub forgotten: u64,
    /// Heap bytes held by the hot tier's tables, entries, timing wheels and stored
    /// results (a shard's index array made ahead of its next doubling included).
    pub hot_bytes: u64,
    /// Heap bytes of hot-tier tables that a shard has outgrown and not yet freed:
    /// they are kept until no lock-free read (of a batch, or of a single duplicate
    /// claim) can still be reading them, and freed by the next maintenance pass after
    /// that (or sooner, by a retirement that brings the tables waiting, in the whole
    /// process, to 1 MiB). Not part of `hot_bytes`,
    /// which moves only with what the hot tier holds.
    pub retired_bytes: u64,
    /// Done keys dropped from a full hot tier to make room (durable namespaces only:
    /// the durable tier still answers for them).
    pub evictions: u64,
    /// Point look-ups of the durable tier (claims the hot tier could not answer,
    /// `check` of keys it does not hold, a `forget` of a key the prefilter does not
    /// rule out, the read before a sliding window's record is rewritten, and the
    /// read of its claim marker by a claim that lost its lease, where the marker may
    /// be in RocksDB).
    pub durable_reads: u64,
    /// Writes to the durable tier (claim markers and their renewals, completions,
    /// releases, forgets, a sliding window's rewritten records, and the delete of a
    /// marker left in RocksDB by a claim that lost its lease; a batch's own write
    /// counts once, and each guard of a batch completion that lost its lease adds
    /// that delete of its own).
    pub durable_writes: u64,
    /// Durable-tier operations that failed.
    pub store_errors: u64,
    /// Decisions made from the hot tier alone because the store failed and the
    /// namespace fails open: claims, completions (those the store refused, and those
    /// it applied whose fsync failed), checks, lease extensions whose marker it
    /// refused, and the reads a `forget` or a sliding window's rewrite makes first.
    /// (A `forget` whose delete fails is an error under either policy.)
    pub fail_open_decisions: u64,
    /// Fsyncs of the write-ahead log issued by the group commit: grouped completions
    /// (`SyncPolicy::Always`, unless
    /// [`EngineBuilder::commit_delay`](crate::EngineBuilder::commit_delay) turned group
    /// commit off) and the forgets that share their fsyncs, and, once the engine is
    /// closed, the writes of `SyncPolicy::Periodic` namespaces made through handles
    /// or guards that outlived it (each syncs as `Always` then); with `completions`,
    /// about how many completions shared each. Engine-wide: only
    /// [`Engine::stats`](crate::Engine::stats) reports it.
    pub wal_group_syncs: u64,
    /// Fsyncs of the write-ahead log by RocksDB's own count (with a sync policy's
    /// writes, grouped commits and periodic syncs alike), when the engine was built
    /// with [`EngineBuilder::store_statistics`](crate::EngineBuilder::store_statistics);
    /// 0 otherwise. Engine-wide: only [`Engine::stats`](crate::Engine::stats)
    /// reports it.
    pub wal_syncs: u64,
    /// Fsyncs of the write-ahead log by the `SyncPolicy::Periodic` thread that
    /// failed. No caller waits for those: each is logged and counted here, and from
    /// then on every [`Engine::sync`](crate::Engine::sync) or
    /// [`Namespace::sync`](crate::Namespace::sync) returns an error (the completions
    /// acknowledged before it may not be on the disk). Engine-wide: only
    /// [`Engine::stats`](crate::Engine::stats) reports it.
    pub periodic_sync_failures: u64,
    /// Look-ups the prefilter answered alone: it knew the key was new, so the durable
    /// tier was not read. Mostly claims; a `check` of a key the hot tier does not
    /// hold, and every `forget`, ask it too.
    pub prefilter_negatives: u64,
    /// Durable reads the prefilter let through (the key may have had a record).
    pub prefilter_passes: u64,
    /// Reads let through that found no live record: the prefilter's false
    /// positives (see [`Stats::prefilter_false_positive_rate`]).
    pub prefilter_false_positives: u64,
    /// Bytes of the prefilter's live Bloom filters.
    pub prefilter_bytes: u64,
    /// Live prefilter generations.
    pub prefilter_generations: u64,
    /// Live prefilter filters (a generation that received more keys than planned
    /// holds more than one).
    pub prefilter_filters: u64,
    /// Keys held by the live filters: insertions, so a key added again (completed
    /// again after its window ran out, or its window extended) counts once more; a
    /// Bloom filter cannot tell a key it already holds.
    pub prefilter_keys: u64,
    /// Times a generation grew a further filter because more keys arrived than
    /// `expected_keys` planned for.
    pub prefilter_grown: u64,
    /// Generations dropped because every record in them was past retention.
    pub prefilter_generations_dropped: u64,
    /// Opens that took the prefilter saved at the last clean shutdown.
    pub prefilter_loads: u64,
    /// Opens that rebuilt the prefilter from the durable tier (no saved filter, or
    /// one that was stale, damaged or of other settings).
    pub prefilter_rebuilds: u64,
    /// Claim markers held in the memory-mapped journal now
    /// ([`ClaimMarkers::Journal`](crate::ClaimMarkers::Journal)): the claims in flight,
    /// and claims given up without an end this run (a completion refused for its
    /// input, a guard leaked with `mem::forget`) whose lease has not ended or which
    /// no sweep has looked at since it did: the maintenance pass (or a marker that
    /// finds the journal full) frees those, as it does the marker of a completion
    /// decided from the hot tier alone (fail open, the store refusing its write)
    /// once its key has left the hot tier.
    pub journal_markers: u64,
    /// Claim markers that found the journal full and went to RocksDB instead (more
    /// claims in flight than `NamespaceConfig::journal_slots`), a lease extension's
    /// renewed marker included; counted whether or not the store took the write.
    pub journal_overflows: u64,
    /// Claim markers known to be in RocksDB that the next completion, release or
    /// forget of their key deletes (with [`ClaimMarkers::Journal`] and
    /// [`ClaimMarkers::Deferred`](crate::ClaimMarkers::Deferred), whose claims
    /// otherwise write no RocksDB marker: orphans of the last run, damaged markers,
    /// flushed deferred markers, journal overflows). While any is left, completions
    /// take one more lock to ask about their key. Each is remembered in memory (about
    /// 35 to 75 bytes). Those this run wrote (flushed deferred markers, journal
    /// overflows) of claims given up without an end are deleted by the maintenance
    /// pass once their lease has ended, as the journal's slots of such claims are
    /// freed, so markers overflow only while more claims than it has slots hold
    /// their keys; the last run's stay until the next open, unless their key is
    /// claimed again.
    ///
    /// [`ClaimMarkers::Journal`]: crate::ClaimMarkers::Journal
    pub markers_on_disk: u64,
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
        self.retired_bytes += o.retired_bytes;
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
        self.wal_group_syncs += o.wal_group_syncs;
        self.wal_syncs += o.wal_syncs;
        self.periodic_sync_failures += o.periodic_sync_failures;
        self.prefilter_negatives += o.prefilter_negatives;
        self.prefilter_passes += o.prefilter_passes;
        self.prefilter_false_positives += o.prefilter_false_positives;
        self.prefilter_bytes += o.prefilter_bytes;
        self.prefilter_generations += o.prefilter_generations;
        self.prefilter_filters += o.prefilter_filters;
        self.prefilter_keys += o.prefilter_keys;
        self.prefilter_grown += o.prefilter_grown;
        self.prefilter_generations_dropped += o.prefilter_generations_dropped;
        self.prefilter_loads += o.prefilter_loads;
        self.prefilter_rebuilds += o.prefilter_rebuilds;
        self.journal_markers += o.journal_markers;
        self.journal_overflows += o.journal_overflows;
        self.markers_on_disk += o.markers_on_disk;
    }

    #[cfg_attr(not(feature = "durable"), allow(dead_code))]
    pub(crate) fn add_prefilter(&mut self, p: &crate::prefilter::PrefilterStats) {
        self.prefilter_negatives += p.negatives;
        self.prefilter_passes += p.passes;
        self.prefilter_false_positives += p.false_positives;
        self.prefilter_bytes += p.bytes;
        self.prefilter_generations += p.generations;
        self.prefilter_filters += p.segments;
        self.prefilter_keys += p.items;
        self.prefilter_grown += p.grown;
        self.prefilter_generations_dropped += p.dropped;
    }

    /// The prefilter's observed false-positive rate: of the look-ups of keys that
    /// had no live durable record, the share it let through to the durable tier
    /// anyway. 0 when it has answered nothing yet.
    pub fn prefilter_false_positive_rate(&self) -> f64 {
        let absent = self.prefilter_negatives + self.prefilter_false_positives;
        if absent == 0 {
            0.0
        } else {
            self.prefilter_false_positives as f64 / absent as f64
        }
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
