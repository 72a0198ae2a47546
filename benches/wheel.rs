//! Benchmarks of the timing wheel alone, on a plain Vec-backed slab.
//!
//! Deadlines are spread uniformly over one hour of 1 ms ticks, starting from an
//! epoch-like tick so that the stored 32-bit deadlines wrap the way they do in use.
//!
//! Run with `cargo bench --bench wheel`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use idem::__bench::{Links, Wheel, NIL};

/// One hour of 1 ms ticks.
const HOUR: u64 = 3_600_000;
/// Starting tick: milliseconds since the Unix epoch, late 2023.
const START: u64 = 1_700_000_000_000;
/// Entry counts to measure.
const SIZES: [usize; 3] = [10_000, 100_000, 1_000_000];

/// The caller's slab, reduced to what the wheel needs.
#[derive(Clone)]
struct Slab {
    next: Vec<u32>,
    prev: Vec<u32>,
    deadline: Vec<u32>,
}

impl Slab {
    /// A slab whose entry `i` is due at `when[i]`, none of them scheduled.
    fn new(when: &[u64]) -> Self {
        Slab {
            next: vec![NIL; when.len()],
            prev: vec![NIL; when.len()],
            deadline: when.iter().map(|&t| t as u32).collect(),
        }
    }
}

impl Links for Slab {
    #[inline]
    fn next(&self, i: u32) -> u32 {
        self.next[i as usize]
    }
    #[inline]
    fn set_next(&mut self, i: u32, v: u32) {
        self.next[i as usize] = v;
    }
    #[inline]
    fn prev(&self, i: u32) -> u32 {
        self.prev[i as usize]
    }
    #[inline]
    fn set_prev(&mut self, i: u32, v: u32) {
        self.prev[i as usize] = v;
    }
    #[inline]
    fn deadline(&self, i: u32) -> u32 {
        self.deadline[i as usize]
    }
}

/// xorshift64: deterministic, seeded, good enough to spread deadlines.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

/// `n` deadlines uniformly spread over `(START, START + HOUR]`.
fn deadlines(n: usize) -> Vec<u64> {
    let mut rng = XorShift(0x2545_F491_4F6C_DD1D);
    (0..n).map(|_| START + 1 + rng.next() % HOUR).collect()
}

/// A permutation of `0..n`, shuffled with a fixed seed.
fn shuffled(n: usize) -> Vec<u32> {
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let mut order: Vec<u32> = (0..n as u32).collect();
    for i in (1..n).rev() {
        let j = (rng.next() % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    order
}

/// A wheel at `START` with every entry of `when` scheduled, and its slab.
fn loaded(when: &[u64]) -> (Wheel, Slab) {
    let mut wheel = Wheel::new(START);
    let mut slab = Slab::new(when);
    for (i, &t) in when.iter().enumerate() {
        wheel.schedule(&mut slab, i as u32, t);
    }
    (wheel, slab)
}

fn schedule(c: &mut Criterion) {
    let mut group = c.benchmark_group("wheel/schedule");
    for n in SIZES {
        let when = deadlines(n);
        let empty = (Wheel::new(START), Slab::new(&when));
        group.throughput(Throughput::Elements(n as u64));
        group.bench_with_input(BenchmarkId::from_parameter(n), &when, |b, when| {
            b.iter_batched_ref(
                || empty.clone(),
                |(wheel, slab)| {
                    for (i, &t) in when.iter().enumerate() {
                        wheel.schedule(slab, i as u32, black_box(t));
                    }
                },
                BatchSize::LargeInput,
            );
        });
    }
    group.finish();
}

fn deschedule(c: &mut Criterion) {
    let mut group = c.benchmark_group("wheel/deschedule");
    for n in SIZES {
        let when = deadlines(n);
        let full = loaded(&when);
        let order = shuffled(n);
        group.throughput(Throughput::Elements(n as u64));
        group.bench_with_input(BenchmarkId::from_parameter(n), &order, |b, order| {
            b.iter_batched_ref(
                || full.clone(),
                |(wheel, slab)| {
                    for &i in order {
                        wheel.deschedule(slab, black_box(i));
                    }
                    assert!(wheel.is_empty());
                },
                BatchSize::LargeInput,
            );
        });
    }
    group.finish();
}

fn advance(c: &mut Criterion) {
    let mut group = c.benchmark_group("wheel/advance");
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(10));
    for n in SIZES {
        let when = deadlines(n);
        let full = loaded(&when);
        group.throughput(Throughput::Elements(n as u64));
        // The whole hour, one 1 ms tick per call: 3.6 M calls, most of them empty.
        group.bench_with_input(BenchmarkId::new("1ms_steps", n), &n, |b, &n| {
            b.iter_batched_ref(
                || full.clone(),
                |(wheel, slab)| {
                    let mut fired = 0;
                    for tick in 1..=HOUR {
                        fired += wheel.advance(slab, START + tick, |_, i| {
                            black_box(i);
                            None
                        });
                    }
                    assert_eq!(fired, n);
                },
                BatchSize::LargeInput,
            );
        });
        // The whole hour in a single call.
        group.bench_with_input(BenchmarkId::new("one_jump", n), &n, |b, &n| {
            b.iter_batched_ref(
                || full.clone(),
                |(wheel, slab)| {
                    let fired = wheel.advance(slab, START + HOUR, |_, i| {
                        black_box(i);
                        None
                    });
                    assert_eq!(fired, n);
                },
                BatchSize::LargeInput,
            );
        });
    }
    group.finish();
}

/// One lock hold of the maintenance pass, on a wheel whose entries all wait in one
/// level-2 bucket (65,536 entries due over 4,096 ticks, ten seconds on: what a
/// shard holds of 4 s of claims at about a million a second over 64 shards): the
/// time to reach that bucket with `advance`, which cascades it whole, against the
/// first call of `advance_within` with the maintenance pass's budget of 4.
fn advance_within(c: &mut Criterion) {
    const N: usize = 65_536;
    // A level-2 bucket's span, ten seconds or so on.
    let base = (START + 10_000).next_multiple_of(4_096);
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let when: Vec<u64> = (0..N).map(|_| base + rng.next() % 4_096).collect();
    // Just past the bucket's start.
    let reach = base + 1;
    let mut group = c.benchmark_group("one bucket of 65536 entries");
    group.bench_function("advance: to the bucket's start", |b| {
        b.iter_batched_ref(
            || loaded(&when),
            |(wheel, slab)| {
                black_box(wheel.advance(slab, reach, |_, i| {
                    black_box(i);
                    None
                }))
            },
            BatchSize::LargeInput,
        );
    });
    group.bench_function("advance_within, budget 4: its first call", |b| {
        b.iter_batched_ref(
            || loaded(&when),
            |(wheel, slab)| black_box(wheel.advance_within(slab, reach, 4, |_, _| None)),
            BatchSize::LargeInput,
        );
    });
    group.finish();
}

criterion_group!(benches, schedule, deschedule, advance, advance_within);
criterion_main!(benches);
