//! Micro benchmarks of the parts below the claim path, each alone: a shard's
//! fingerprint index, the prefilter, and the durable record codec. (The timing wheel
//! has `benches/wheel.rs`; the claim path through a namespace, `benches/claim.rs`.)
//!
//! * `index`: a shard's bucket array of 12-slot buckets, built for the entries it
//!   will hold (so no insert grows it), at 100,000 and 1,000,000 entries. `insert`
//!   fills it; `find_hit` and `find_miss` look up stored and absent hashes in a
//!   seeded random order. A hit's comparison reads the caller's fingerprint array,
//!   as a shard reads its slab entry.
//! * `prefilter`: a namespace's Bloom filters (fastbloom, at the default 1 %) holding
//!   1,000,000 keys within retention: `insert`, `may_contain` of stored keys and of
//!   absent ones, and the whole filter's `save` and `load` (what close and open do).
//! * `codec`: a done record's `encode_into` and `decode`, without a result and with a
//!   64-byte one, and `check` (the whole record checked, its result not copied, as
//!   the prefilter's rebuild reads it).
//!
//! Run with `cargo bench --bench micro`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use idem::__bench::{Index, Prefilter, Record};

/// Entry counts for the index.
const SIZES: [usize; 2] = [100_000, 1_000_000];
/// Keys held by the prefilter.
const PREFILTER_KEYS: usize = 1_000_000;
/// One day, the retention the prefilter is built for.
const DAY_MS: u64 = 86_400_000;
/// A wall-clock time in late 2023.
const NOW_MS: u64 = 1_700_000_000_000;
/// Look-ups per timed batch (a power of two, to wrap with a mask).
const PROBES: usize = 1 << 16;

/// splitmix64: a seeded stream of well-spread 64-bit values.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn fp(&mut self) -> u128 {
        (self.next() as u128) << 64 | self.next() as u128
    }
}

/// `n` distinct-enough hashes (64-bit values from one seeded stream).
fn hashes(seed: u64, n: usize) -> Vec<u64> {
    let mut rng = SplitMix(seed);
    (0..n).map(|_| rng.next()).collect()
}

/// `PROBES` positions into `0..n`, seeded.
fn picks(seed: u64, n: usize) -> Vec<usize> {
    let mut rng = SplitMix(seed);
    (0..PROBES)
        .map(|_| (rng.next() % n as u64) as usize)
        .collect()
}

fn index(c: &mut Criterion) {
    let mut g = c.benchmark_group("index");
    for n in SIZES {
        let stored = hashes(1, n);
        let absent = hashes(2, PROBES);
        let mut full = Index::with_room(n).expect("an index of this size allocates");
        for (i, &h) in stored.iter().enumerate() {
            assert!(full.insert(h, i as u32), "the index was sized for {n}");
        }
        eprintln!(
            "index of {n} entries: {:.2} bytes of buckets per entry",
            full.bytes() as f64 / n as f64
        );

        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::new("insert", n), &stored, |b, stored| {
            b.iter_batched_ref(
                || Index::with_room(n).expect("allocates"),
                |ix| {
                    for (i, &h) in stored.iter().enumerate() {
                        ix.insert(black_box(h), i as u32);
                    }
                },
                BatchSize::LargeInput,
            );
        });

        g.throughput(Throughput::Elements(1));
        // The probes' hashes are gathered first, so that the timed loop reads them in
        // order: what it waits for is the index (and the entry a match is checked in).
        let hit: Vec<u64> = picks(3, n).into_iter().map(|i| stored[i]).collect();
        assert!(hit
            .iter()
            .all(|&h| full.find(h, |s| stored[s as usize] == h).is_some()));
        for (name, probes) in [("find_hit", &hit), ("find_miss", &absent)] {
            let mut j = 0;
            g.bench_function(BenchmarkId::new(name, n), |b| {
                b.iter(|| {
                    let h = probes[j & (PROBES - 1)];
                    j += 1;
                    full.find(black_box(h), |s| stored[s as usize] == h)
                });
            });
        }
    }
    g.finish();
}

fn prefilter(c: &mut Criterion) {
    let mut g = c.benchmark_group("prefilter");
    let mut rng = SplitMix(4);
    let stored: Vec<u128> = (0..PREFILTER_KEYS).map(|_| rng.fp()).collect();
    let absent: Vec<u128> = (0..PROBES).map(|_| rng.fp()).collect();
    let expiry = |i: usize| NOW_MS + DAY_MS * i as u64 / PREFILTER_KEYS as u64;
    let new = || Prefilter::new(PREFILTER_KEYS, DAY_MS, 0.01);
    let full = new();
    for (i, &fp) in stored.iter().enumerate() {
        full.insert(fp, expiry(i));
    }
    let saved = full.save();
    eprintln!(
        "prefilter of {PREFILTER_KEYS} keys: {:.2} bits per key, {} bytes saved",
        full.bytes() as f64 * 8.0 / PREFILTER_KEYS as f64,
        saved.len()
    );
    assert!(stored.iter().all(|&fp| full.may_contain(fp)));

    g.throughput(Throughput::Elements(PREFILTER_KEYS as u64));
    g.sample_size(10);
    g.bench_function("insert", |b| {
        b.iter_batched_ref(
            new,
            |f| {
                for (i, &fp) in stored.iter().enumerate() {
                    f.insert(black_box(fp), expiry(i));
                }
            },
            BatchSize::LargeInput,
        );
    });
    g.bench_function("save", |b| b.iter(|| full.save()));
    g.bench_function("load", |b| {
        b.iter_batched_ref(
            new,
            |f| assert_eq!(f.load(black_box(&saved)), Some(PREFILTER_KEYS as u64)),
            BatchSize::LargeInput,
        );
    });

    g.throughput(Throughput::Elements(1));
    g.sample_size(100);
    // Gathered first, as for the index: the timed loop reads its probes in order.
    let hit: Vec<u128> = picks(5, PREFILTER_KEYS)
        .into_iter()
        .map(|i| stored[i])
        .collect();
    let mut j = 0;
    g.bench_function("may_contain_stored", |b| {
        b.iter(|| {
            let fp = hit[j & (PROBES - 1)];
            j += 1;
            full.may_contain(black_box(fp))
        });
    });
    let mut j = 0;
    g.bench_function("may_contain_absent", |b| {
        b.iter(|| {
            let fp = absent[j & (PROBES - 1)];
            j += 1;
            full.may_contain(black_box(fp))
        });
    });
    let false_positives = absent.iter().filter(|&&fp| full.may_contain(fp)).count();
    eprintln!(
        "prefilter: {false_positives} of {PROBES} absent keys let through ({:.2} %)",
        false_positives as f64 * 100.0 / PROBES as f64
    );
    g.finish();
}

fn codec(c: &mut Criterion) {
    let mut g = c.benchmark_group("codec");
    g.throughput(Throughput::Elements(1));
    let result = [0x5Au8; 64];
    for (name, record) in [
        (
            "done",
            Record::done(7, NOW_MS, NOW_MS + DAY_MS, Some(0xFEED), None),
        ),
        (
            "done_result_64",
            Record::done(7, NOW_MS, NOW_MS + DAY_MS, Some(0xFEED), Some(&result)),
        ),
    ] {
        let mut bytes = Vec::new();
        record.encode_into(&mut bytes);
        assert_eq!(Record::decode(&bytes).as_ref(), Some(&record));
        let mut out = Vec::with_capacity(bytes.len());
        g.bench_function(BenchmarkId::new("encode_into", name), |b| {
            b.iter(|| {
                out.clear();
                black_box(&record).encode_into(&mut out);
                out.len()
            });
        });
        g.bench_function(BenchmarkId::new("decode", name), |b| {
            b.iter(|| Record::decode(black_box(&bytes)).map(|r| r.expires_ms()));
        });
        assert_eq!(idem::__bench::check_record(&bytes), Some(NOW_MS + DAY_MS));
        g.bench_function(BenchmarkId::new("check", name), |b| {
            b.iter(|| idem::__bench::check_record(black_box(&bytes)));
        });
    }
    g.finish();
}

criterion_group!(benches, index, prefilter, codec);
criterion_main!(benches);
