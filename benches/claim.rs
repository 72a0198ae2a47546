//! Micro benchmarks of the claim path on a namespace holding about a million keys.
//!
//! Keys follow `../shared/WORKLOAD.md`: key i is `ord-` and 16 hex digits of
//! `i * 0x9E37_79B9_7F4A_7C15`, 20 ASCII bytes. The engine runs as in production
//! (system clock, maintenance thread) with a fixed fingerprint seed; TTL and lease are
//! one hour so nothing expires during a run. Random picks come from a seeded RNG.
//!
//! * `claim_fresh`: claim + complete of keys never seen before, on top of 1 M resident
//!   keys. The keys of each timed batch are forgotten (untimed) after it, so the
//!   namespace stays near 1 M keys whatever the iteration count.
//! * `claim_duplicate`: claims of completed keys, uniform over the 1 M resident.
//! * `claim_in_progress`: claims of keys whose claim is held (guards alive).
//! * `check`: read-only look-ups, of resident keys and of absent ones.
//! * `fingerprint`: the seeded xxh3-128 of one 20-byte key, alone, and
//!   `Router::worker` of one (the routing a consumer adds before its claim).
//! * `claim_options`: `claim_fresh` and `claim_duplicate`'s single claims with a
//!   payload (`claim_with_payload`, every key with one: its fingerprint is kept and
//!   compared) and in a sliding window (`extend_on_duplicate`: each key's completion
//!   time is kept, and a duplicate moves its deadline), each on a namespace of 1 M
//!   such keys.
//!
//! `claim_fresh` and `claim_duplicate` also run `DashMap<u128, u32>` insert-if-absent
//! on the same keys, for a side-by-side figure; `claim_duplicate/idem_batch_64` claims
//! the same probes 64 at a time through `claim_batch` (time per key).
//!
//! After the criterion groups, `latency` times single calls (1,000,000 of each, one
//! `Instant` pair around each call) and prints their percentiles as a markdown table:
//! a fresh claim + complete, a duplicate claim, and an empty timer pair (the
//! measurement's own cost, included in every other row). Before it (while the
//! process's heap is new, as a consumer's is while its namespaces grow), a table of
//! claim + complete of 4,000,000 keys (`IDEM_BENCH_GROWN` sets another count) into an
//! empty namespace, as it grows (its p99.99, its largest call, how many calls took
//! over 100 us and their median, and how many over 250 us: the pauses of the shards'
//! index doublings), beside the same into a preallocated one.
//!
//! Run with `cargo bench --bench claim` (`-- latency` for the two latency tables alone).

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{criterion_group, BenchmarkGroup, Criterion, Throughput};
use idem::{Claim, ClaimGuard, Engine, Namespace, NamespaceConfig};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use xxhash_rust::xxh3::xxh3_128_with_seed;

type Key = [u8; 20];

/// Keys resident before measuring.
const RESIDENT: u64 = 1_000_000;
/// Random probes per group (a power of two, cycled through).
const PROBES: usize = 1 << 20;
/// Fingerprint seed of the engine and of the dashmap peer.
const SEED: u64 = 0x1DE4_BE4C_0000_0001;
const HOUR: Duration = Duration::from_secs(3600);
/// Lock shards of every namespace here: the default for `max_keys` = 1 M, fixed so that
/// the larger namespace of `claim_fresh` has the same layout.
const SHARDS: usize = 48;

fn key(i: u64) -> Key {
    let s = format!("ord-{:016x}", i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut k = [0u8; 20];
    k.copy_from_slice(s.as_bytes());
    k
}

/// An engine with one namespace, "b", room for `max_keys`.
fn namespace(max_keys: usize) -> (Engine, Namespace) {
    namespace_with(max_keys, false)
}

/// [`namespace`], with its index sized for `max_keys` at build if `preallocate`.
fn namespace_with(max_keys: usize, preallocate: bool) -> (Engine, Namespace) {
    namespace_of(
        NamespaceConfig::new()
            .max_keys(max_keys)
            .preallocate(preallocate),
    )
}

/// An engine with one namespace, "b", of `config` with this file's TTL, lease and
/// shard count.
fn namespace_of(config: NamespaceConfig) -> (Engine, Namespace) {
    let engine = Engine::builder()
        .namespace("b", config.ttl(HOUR).lease(HOUR).shards(SHARDS))
        .seed(SEED)
        .build()
        .expect("engine");
    let ns = engine.namespace("b").expect("namespace");
    (engine, ns)
}

/// Claims and completes keys `0..RESIDENT`.
fn fill_done(ns: &Namespace) {
    fill_done_by(ns, Namespace::claim)
}

/// The payload of key `k` in `claim_options` (any bytes: its fingerprint is kept).
fn payload_of(k: &[u8]) -> &[u8] {
    &k[4..]
}

/// Claims a key with its payload ([`payload_of`]).
fn claim_paid(ns: &Namespace, k: &[u8]) -> idem::Result<Claim> {
    ns.claim_with_payload(k, payload_of(k))
}

/// Claims (by `claim`) and completes keys `0..RESIDENT`.
fn fill_done_by(ns: &Namespace, claim: fn(&Namespace, &[u8]) -> idem::Result<Claim>) {
    for i in 0..RESIDENT {
        match claim(ns, &key(i)).expect("claim") {
            Claim::Acquired(g) => g.complete().expect("complete"),
            other => panic!("key {i} not new: {other:?}"),
        }
    }
}

/// `PROBES` keys drawn uniformly from `0..RESIDENT` (or, with `offset`, from
/// `offset..offset + RESIDENT`), in draw order.
fn probes(seed: u64, offset: u64) -> Vec<Key> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..PROBES)
        .map(|_| key(offset + rng.gen_range(0..RESIDENT)))
        .collect()
}

fn dash_filled() -> dashmap::DashMap<u128, u32> {
    let map = dashmap::DashMap::new();
    for i in 0..RESIDENT {
        map.insert(xxh3_128_with_seed(&key(i), SEED), 1);
    }
    map
}

#[inline]
fn dash_insert_if_absent(map: &dashmap::DashMap<u128, u32>, k: &Key) -> bool {
    match map.entry(xxh3_128_with_seed(k, SEED)) {
        dashmap::Entry::Vacant(v) => {
            v.insert(1);
            true
        }
        dashmap::Entry::Occupied(_) => false,
    }
}

fn configure<'a>(c: &'a mut Criterion, name: &str) -> BenchmarkGroup<'a, WallTime> {
    let mut g = c.benchmark_group(name);
    g.sample_size(30);
    g.warm_up_time(Duration::from_secs(1));
    g.measurement_time(Duration::from_secs(3));
    g.throughput(Throughput::Elements(1));
    g
}

/// Times `claim` and completion of keys never seen before on `ns` (which holds keys
/// `0..RESIDENT` and has room for the largest timed batch more), forgetting each
/// timed batch's keys after it.
fn bench_fresh(
    g: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    ns: &Namespace,
    claim: fn(&Namespace, &[u8]) -> idem::Result<Claim>,
) {
    let mut next = RESIDENT;
    g.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let batch: Vec<Key> = (next..next + iters).map(key).collect();
            next += iters;
            let t0 = Instant::now();
            for k in &batch {
                match claim(ns, black_box(k)) {
                    Ok(Claim::Acquired(guard)) => guard.complete().expect("complete"),
                    _ => panic!("a fresh key was not acquired"),
                }
            }
            let spent = t0.elapsed();
            for k in &batch {
                ns.forget(k).expect("forget");
            }
            spent
        });
    });
}

/// Times `claim` of keys drawn from `probe`, every one a duplicate on `ns`.
fn bench_duplicate(
    g: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    ns: &Namespace,
    probe: &[Key],
    claim: fn(&Namespace, &[u8]) -> idem::Result<Claim>,
) {
    assert!(probe
        .iter()
        .all(|k| claim(ns, k).expect("claim").is_duplicate()));
    let mut j = 0;
    g.bench_function(name, |b| {
        b.iter(|| {
            let k = &probe[j & (PROBES - 1)];
            j += 1;
            claim(ns, black_box(k))
        });
    });
}

fn claim_fresh(c: &mut Criterion) {
    let mut g = configure(c, "claim_fresh");
    {
        // Room for the resident keys plus the largest timed batch.
        let (_engine, ns) = namespace(8_000_000);
        fill_done(&ns);
        bench_fresh(&mut g, "idem_claim_complete", &ns, Namespace::claim);
    }
    {
        let map = dash_filled();
        let mut next = RESIDENT;
        g.bench_function("dashmap_insert_if_absent", |b| {
            b.iter_custom(|iters| {
                let batch: Vec<Key> = (next..next + iters).map(key).collect();
                next += iters;
                let t0 = Instant::now();
                for k in &batch {
                    assert!(dash_insert_if_absent(&map, black_box(k)));
                }
                let spent = t0.elapsed();
                for k in &batch {
                    map.remove(&xxh3_128_with_seed(k, SEED));
                }
                spent
            });
        });
    }
    g.finish();
}

fn claim_duplicate(c: &mut Criterion) {
    let mut g = configure(c, "claim_duplicate");
    let probe = probes(1, 0);
    {
        let (_engine, ns) = namespace(RESIDENT as usize);
        fill_done(&ns);
        bench_duplicate(&mut g, "idem", &ns, &probe, Namespace::claim);
    }
    {
        let (_engine, ns) = namespace(RESIDENT as usize);
        fill_done(&ns);
        let refs: Vec<&[u8]> = probe.iter().map(|k| &k[..]).collect();
        let mut j = 0;
        g.throughput(Throughput::Elements(64));
        g.bench_function("idem_batch_64", |b| {
            b.iter(|| {
                let at = (j * 64) & (PROBES - 1);
                j += 1;
                ns.claim_batch(black_box(&refs[at..at + 64]))
            });
        });
        g.throughput(Throughput::Elements(1));
    }
    {
        let map = dash_filled();
        let mut j = 0;
        g.bench_function("dashmap_insert_if_absent", |b| {
            b.iter(|| {
                let k = &probe[j & (PROBES - 1)];
                j += 1;
                dash_insert_if_absent(&map, black_box(k))
            });
        });
    }
    g.finish();
}

fn claim_options(c: &mut Criterion) {
    let mut g = configure(c, "claim_options");
    let probe = probes(1, 0);
    for (what, sliding, claim) in [
        ("payload", false, claim_paid as fn(&Namespace, &[u8]) -> _),
        ("sliding", true, Namespace::claim),
    ] {
        let config = NamespaceConfig::new().extend_on_duplicate(sliding);
        {
            let (_engine, ns) = namespace_of(config.clone().max_keys(8_000_000));
            fill_done_by(&ns, claim);
            bench_fresh(&mut g, &format!("{what}_fresh"), &ns, claim);
        }
        let (_engine, ns) = namespace_of(config.max_keys(RESIDENT as usize));
        fill_done_by(&ns, claim);
        bench_duplicate(&mut g, &format!("{what}_duplicate"), &ns, &probe, claim);
    }
    g.finish();
}

fn claim_in_progress(c: &mut Criterion) {
    let mut g = configure(c, "claim_in_progress");
    let (_engine, ns) = namespace(RESIDENT as usize);
    // Held claims: the guards stay alive until the group is done.
    let guards: Vec<ClaimGuard> = (0..RESIDENT)
        .map(|i| match ns.claim(&key(i)).expect("claim") {
            Claim::Acquired(guard) => guard,
            other => panic!("key {i} not new: {other:?}"),
        })
        .collect();
    let probe = probes(2, 0);
    assert!(probe
        .iter()
        .all(|k| ns.claim(k).expect("claim").is_in_progress()));
    let mut j = 0;
    g.bench_function("idem", |b| {
        b.iter(|| {
            let k = &probe[j & (PROBES - 1)];
            j += 1;
            ns.claim(black_box(k))
        });
    });
    g.finish();
    drop(guards);
}

fn check(c: &mut Criterion) {
    let mut g = configure(c, "check");
    let (_engine, ns) = namespace(RESIDENT as usize);
    fill_done(&ns);
    let hits = probes(3, 0);
    let misses = probes(4, RESIDENT);
    assert!(hits.iter().all(|k| ns.check(k).expect("check").is_some()));
    assert!(misses.iter().all(|k| ns.check(k).expect("check").is_none()));
    for (name, probe) in [("resident", &hits), ("absent", &misses)] {
        let mut j = 0;
        g.bench_function(name, |b| {
            b.iter(|| {
                let k = &probe[j & (PROBES - 1)];
                j += 1;
                ns.check(black_box(k))
            });
        });
    }
    g.finish();
}

fn fingerprint(c: &mut Criterion) {
    let mut g = configure(c, "fingerprint");
    let k = key(42);
    g.bench_function("xxh3_128_20_bytes", |b| {
        b.iter(|| xxh3_128_with_seed(black_box(&k), SEED));
    });
    // What `Router::worker` adds to a claim: the same fingerprint, the key's length
    // checked, and a multiply.
    let (_engine, ns) = namespace(1_000);
    let router = ns.router(2).expect("two workers");
    g.bench_function("router_worker_20_bytes", |b| {
        b.iter(|| router.worker(black_box(&k)).expect("a valid key"));
    });
    g.finish();
}

/// Percentiles of `samples` (nanoseconds), sorted in place.
fn percentiles(samples: &mut [u32]) -> [u32; 4] {
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() as f64 * q) as usize).min(samples.len() - 1)];
    [at(0.5), at(0.99), at(0.999), samples[samples.len() - 1]]
}

/// Times `n` single calls of `op(i)`, one `Instant` pair each.
fn time_each(n: u64, mut op: impl FnMut(u64)) -> Vec<u32> {
    (0..n)
        .map(|i| {
            let t0 = Instant::now();
            op(i);
            t0.elapsed().as_nanos().min(u32::MAX as u128) as u32
        })
        .collect()
}

/// Percentiles of `n` single claim + complete calls of keys after the resident ones.
fn fresh_latency(ns: &Namespace, n: u64) -> [u32; 4] {
    let fresh: Vec<Key> = (RESIDENT..RESIDENT + n).map(key).collect();
    percentiles(&mut time_each(n, |i| {
        match ns.claim(black_box(&fresh[i as usize])) {
            Ok(Claim::Acquired(guard)) => guard.complete().expect("complete"),
            _ => panic!("a fresh key was not acquired"),
        }
    }))
}

/// Latency percentiles of single claim calls on a namespace of 1 M resident keys.
fn latency() {
    const N: u64 = 1_000_000;
    let mut rows: Vec<(&str, [u32; 4])> = Vec::new();
    rows.push((
        "timer pair alone",
        percentiles(&mut time_each(N, |i| {
            black_box(i);
        })),
    ));
    {
        let (_engine, ns) = namespace(8_000_000);
        fill_done(&ns);
        rows.push((
            "claim + complete, fresh key (1 M resident, growing)",
            fresh_latency(&ns, N),
        ));
        let probe = probes(5, 0);
        let mut t = time_each(N, |i| {
            assert!(ns
                .claim(black_box(&probe[i as usize & (PROBES - 1)]))
                .expect("claim")
                .is_duplicate());
        });
        rows.push(("claim, duplicate (uniform over 1 M)", percentiles(&mut t)));
    }
    {
        // The same keys, on a namespace whose index was sized for 2 M at build: the
        // timed claims never wait for a shard's index to double.
        let (_engine, ns) = namespace_with(2 * RESIDENT as usize, true);
        fill_done(&ns);
        rows.push((
            "claim + complete, fresh key (1 M resident, preallocated for 2 M)",
            fresh_latency(&ns, N),
        ));
    }
    println!();
    println!("| single call, 1,000,000 samples | p50 | p99 | p99.9 | max |");
    println!("|---|---:|---:|---:|---:|");
    for (name, [p50, p99, p999, max]) in rows {
        println!("| {name} | {p50} ns | {p99} ns | {p999} ns | {max} ns |");
    }
}

/// Single claim + complete calls of a namespace filled from empty to its `max_keys`
/// (4 M, or `IDEM_BENCH_GROWN`), as it grows: each shard's index doubles on the way, and
/// the claim that doubles it waits for every entry of the shard to be placed again
/// (its pause), unless the index was preallocated. Prints the tail and the pauses.
fn growth_latency() {
    // `IDEM_BENCH_GROWN` sets another count of keys.
    let grown: u64 = std::env::var("IDEM_BENCH_GROWN")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(4_000_000);
    println!();
    println!(
        "| claim + complete of {grown} fresh keys into an empty namespace (`max_keys` {grown}, its default shards) | p50 | p99 | p99.9 | p99.99 | max | calls over 100 us | their median | over 250 us |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (name, preallocate) in [("growing (the default)", false), ("preallocated", true)] {
        // Sized as a consumer sizes it: for the keys it is to hold.
        let engine = Engine::builder()
            .namespace(
                "g",
                NamespaceConfig::new()
                    .ttl(HOUR)
                    .lease(HOUR)
                    .max_keys(grown as usize)
                    .preallocate(preallocate),
            )
            .seed(SEED)
            .build()
            .expect("engine");
        let ns = engine.namespace("g").expect("namespace");
        // Each key made just before its claim, as a consumer reads it from a message,
        // rather than all of them in one array made first: that array's allocation
        // changes which memory the allocator hands the growing index.
        let mut t: Vec<u32> = Vec::with_capacity(grown as usize);
        for i in 0..grown {
            let k = key(i);
            let t0 = Instant::now();
            match ns.claim(black_box(&k)) {
                Ok(Claim::Acquired(guard)) => guard.complete().expect("complete"),
                _ => panic!("a fresh key was not acquired"),
            }
            t.push(t0.elapsed().as_nanos().min(u32::MAX as u128) as u32);
        }
        t.sort_unstable();
        let over = |ns: u32| t.len() - t.partition_point(|&x| x <= ns);
        let (over_100, over_250) = (over(100_000), over(250_000));
        let pause = match over_100 {
            0 => "-".to_owned(),
            n => format!("{} us", t[t.len() - n + n / 2] / 1000),
        };
        let at = |q: f64| t[(t.len() as f64 * q) as usize];
        println!(
            "| {name} | {} ns | {} ns | {} ns | {} ns | {} ns | {over_100} | {pause} | {over_250} |",
            at(0.5),
            at(0.99),
            at(0.999),
            at(0.9999),
            t[t.len() - 1]
        );
        drop((ns, engine));
    }
}

criterion_group!(
    benches,
    claim_fresh,
    claim_duplicate,
    claim_options,
    claim_in_progress,
    check,
    fingerprint
);

fn main() {
    let only_latency = std::env::args().any(|a| a == "latency");
    // `cargo test --benches` runs benches without `--bench`: criterion then runs each
    // function once as a test, and the latency table (seconds of work) is left out.
    let measuring = std::env::args().any(|a| a == "--bench");
    if !only_latency {
        benches();
        Criterion::default().configure_from_args().final_summary();
    }
    if measuring {
        // First, while the process's heap is new: a growing index's arrays then take
        // fresh pages, as they do in a consumer, rather than pages freed before.
        growth_latency();
        latency();
    }
}
