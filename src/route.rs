//! Routing keys to worker threads so that workers share (almost) no shard.
//!
//! A namespace's shards are ranges of the high 64 bits of the keys' fingerprints
//! (`Fp::shard`: multiply-shift by the shard count). A [`Router`] cuts the same bits
//! into `workers` equal ranges, so each worker's keys fall in a run of whole shards
//! of its own, but for the shards that straddle a cut.

use xxhash_rust::xxh3::xxh3_128_with_seed;

use crate::error::{Error, KeyError, Result};

/// Says which of a fixed number of worker threads should claim a key, so that the
/// workers of one namespace write disjoint sets of its lock shards.
///
/// Made by [`Namespace::router`](crate::Namespace::router). A consumer that hands its
/// messages to worker threads by [`Router::worker`] keeps one namespace (so a
/// duplicate is caught whichever worker it reaches) while no shard's lock and lines
/// pass between the workers' cores on the claim path; a worker that claims keys of
/// shards another worker also writes pays for each such line it takes over (see
/// README.md, "Status"). It also keeps every message of one key on one worker, in
/// the order the consumer hands them out, so two workers never race for a key.
///
/// The split is by the keys' fingerprints, not by their shards' numbers: the workers
/// get equal shares of the keys (up to the hash's spread) whatever the shard count.
/// At most `workers - 1` shards straddle a cut between two workers' ranges and take
/// claims from both; none do when the shard count is a multiple of `workers`. The
/// default count follows `max_keys` and is often not one (39 shards for 100,000
/// keys, 62 for 10,000; 48 for 1,000,000;
/// [`Namespace::shard_count`](crate::Namespace::shard_count) tells it): for no shard
/// shared between workers, set it with
/// [`NamespaceConfig::shards`](crate::NamespaceConfig::shards) to a multiple of the
/// worker count. With more workers than shards, workers share shards by
/// necessity.
///
/// A router is the engine's fingerprint seed, the namespace's `max_key_len` and the
/// worker count: `Copy`, holding nothing of the namespace alive. Its routes hold for
/// every namespace of the engine it came from (they share the seed; whether a shard
/// straddles a cut depends on each namespace's own shard count), but its key check
/// is its own namespace's: a router of a namespace with a shorter `max_key_len`
/// refuses a key another namespace accepts. Its routes do not hold for
/// another engine's: a memory-only engine draws a new seed at each build, unless
/// [`EngineBuilder::seed`](crate::EngineBuilder::seed) fixes it, while a durable one
/// keeps its database's. A wrong route costs speed, never correctness: any worker
/// may claim any key.
///
/// ```
/// use idem::{Claim, Engine, NamespaceConfig};
///
/// let engine = Engine::builder()
///     .namespace("orders", NamespaceConfig::new().shards(8))
///     .build()?;
/// let orders = engine.namespace("orders")?;
/// let router = orders.router(2)?;
///
/// // The dispatcher hands each message to the worker the router names...
/// let mut queues: Vec<Vec<&[u8]>> = vec![Vec::new(); router.workers()];
/// for key in [&b"ord-1"[..], b"ord-2", b"ord-3", b"ord-1"] {
///     queues[router.worker(key)?].push(key);
/// }
/// // ...so a key's redelivery reaches the worker that claimed it first.
/// let first = router.worker(b"ord-1")?;
/// assert_eq!(queues[first].iter().filter(|k| **k == b"ord-1").count(), 2);
///
/// // Each worker claims as usual.
/// for queue in &queues {
///     for key in queue {
///         if let Claim::Acquired(guard) = orders.claim(key)? {
///             guard.complete()?;
///         }
///     }
/// }
/// # Ok::<(), idem::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Router {
    seed: u64,
    max_key_len: usize,
    workers: usize,
}

impl Router {
    /// A router over `workers` workers for the namespace `name`, whose fingerprints
    /// take `seed` and whose keys are at most `max_key_len` bytes.
    pub(crate) fn new(name: &str, seed: u64, max_key_len: usize, workers: usize) -> Result<Self> {
        if workers == 0 {
            return Err(Error::InvalidConfig {
                namespace: name.to_owned(),
                reason: "a router needs at least one worker",
            });
        }
        Ok(Router {
            seed,
            max_key_len,
            workers,
        })
    }

    /// The worker, below [`Router::workers`], that should claim `key`. The same key
    /// always gets the same worker. A key a claim would refuse (empty, or over the
    /// namespace's `max_key_len`) is refused here with the same
    /// [`Error::InvalidKey`].
    ///
    /// Costs one fingerprint of the key, as a claim computes its own again: 2.3 ns
    /// for a 20-byte key on the project's test machine (BENCHMARKS.md, 2026-12-06,
    /// 14:08-14:11 UTC).
    #[inline]
    pub fn worker(&self, key: &[u8]) -> Result<usize> {
        KeyError::check(key, self.max_key_len).map_err(Error::InvalidKey)?;
        let hi = (xxh3_128_with_seed(key, self.seed) >> 64) as u64;
        Ok(range_of(hi, self.workers))
    }

    /// The number of workers the keys are split among.
    pub fn workers(&self) -> usize {
        self.workers
    }
}

/// Which of `n` equal ranges of the 64-bit space `hi` falls in: the multiply-shift
/// that also picks a key's shard from the same bits (`Fp::shard`).
#[inline]
fn range_of(hi: u64, n: usize) -> usize {
    ((hi as u128 * n as u128) >> 64) as usize
}

#[cfg(test)]
mod tests {
    use super::range_of;
    use crate::hot::Fp;

    /// The cut points of `workers` ranges fall on shard edges when the shard count is
    /// a multiple of `workers`; otherwise at most `workers - 1` shards straddle one.
    #[test]
    fn a_workers_range_covers_whole_shards_but_at_most_one_shard_a_cut() {
        for shards in 1..=64usize {
            for workers in 1..=8usize {
                // The lowest and highest fingerprint of each shard: a shard straddles
                // a cut if its two ends fall in different workers' ranges.
                let mut straddling = 0;
                for s in 0..shards {
                    let lo = ((s as u128) << 64).div_ceil(shards as u128) as u64;
                    let hi = ((((s + 1) as u128) << 64).div_ceil(shards as u128) - 1) as u64;
                    assert_eq!(Fp { lo: 0, hi: lo }.shard(shards), s);
                    assert_eq!(Fp { lo: 0, hi }.shard(shards), s);
                    if range_of(lo, workers) != range_of(hi, workers) {
                        straddling += 1;
                    }
                }
                if shards % workers == 0 {
                    assert_eq!(straddling, 0, "{shards} shards, {workers} workers");
                } else {
                    assert!(straddling < workers, "{shards} shards, {workers} workers");
                    if workers <= shards {
                        assert!(straddling > 0, "{shards} shards, {workers} workers");
                    }
                }
            }
        }
    }

    /// The default shard counts the router's docs and the README quote: a count
    /// that is not a multiple of the workers makes a shard straddle.
    #[test]
    fn the_default_shard_counts_the_docs_quote() {
        use crate::engine::default_shards;
        assert_eq!(default_shards(10_000), 62);
        assert_eq!(default_shards(100_000), 39);
        assert_eq!(default_shards(1_000_000), 48);
    }

    #[test]
    fn the_ranges_are_equal_and_cover_every_worker() {
        for workers in 1..=7usize {
            let mut counts = vec![0u64; workers];
            // Evenly spaced points over the 64-bit space.
            let steps = 70_000u64;
            for i in 0..steps {
                let hi = ((i as u128 * (1u128 << 64)) / steps as u128) as u64;
                counts[range_of(hi, workers)] += 1;
            }
            let each = steps / workers as u64;
            for (w, &c) in counts.iter().enumerate() {
                assert!(
                    c.abs_diff(each) <= 1,
                    "worker {w} of {workers}: {c} of {steps}"
                );
            }
        }
        assert_eq!(range_of(u64::MAX, 3), 2);
        assert_eq!(range_of(0, 3), 0);
    }
}
