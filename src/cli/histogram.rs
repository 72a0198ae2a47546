//! A small log-linear latency histogram: 32 sub-buckets per power of two, so any
//! percentile is reported within about 3% of the recorded value.

const SUB_BITS: u32 = 5;
const SUB: usize = 1 << SUB_BITS;

/// Counts of nanosecond values.
#[derive(Debug, Clone)]
pub(crate) struct Histogram {
    counts: Vec<u64>,
    total: u64,
}

impl Histogram {
    pub(crate) fn new() -> Self {
        Histogram {
            counts: vec![0; 64 * SUB],
            total: 0,
        }
    }

    fn bucket(v: u64) -> usize {
        if v < SUB as u64 {
            return v as usize;
        }
        let exp = 63 - v.leading_zeros(); // >= SUB_BITS
        let shift = exp - SUB_BITS;
        let sub = ((v >> shift) as usize) & (SUB - 1);
        ((shift as usize + 1) << SUB_BITS) + sub
    }

    fn lower_bound(b: usize) -> u64 {
        if b < SUB {
            return b as u64;
        }
        let shift = (b >> SUB_BITS) - 1;
        let sub = (b & (SUB - 1)) as u64;
        (SUB as u64 + sub) << shift
    }

    pub(crate) fn record(&mut self, ns: u64) {
        self.counts[Self::bucket(ns)] += 1;
        self.total += 1;
    }

    pub(crate) fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.total += other.total;
    }

    /// The value at quantile `q` (0..=1), as the lower bound of its bucket.
    pub(crate) fn quantile(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (b, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Self::lower_bound(b);
            }
        }
        Self::lower_bound(self.counts.len() - 1)
    }

    pub(crate) fn count(&self) -> u64 {
        self.total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotonic_and_tight() {
        let mut last = 0;
        for v in [
            0u64,
            1,
            31,
            32,
            33,
            63,
            64,
            100,
            1000,
            12_345,
            1 << 40,
            u64::MAX,
        ] {
            let b = Histogram::bucket(v);
            assert!(b >= last, "bucket order at {v}");
            last = b;
            let lo = Histogram::lower_bound(b);
            assert!(lo <= v, "{lo} <= {v}");
            assert!(
                v - lo <= v / 32 + 1,
                "bucket of {v} starts at {lo}: too wide"
            );
        }
    }

    #[test]
    fn quantiles_of_a_uniform_range() {
        let mut h = Histogram::new();
        for v in 1..=1000u64 {
            h.record(v);
        }
        assert_eq!(h.count(), 1000);
        let p50 = h.quantile(0.5);
        assert!((484..=500).contains(&p50), "p50 {p50}");
        let p99 = h.quantile(0.99);
        assert!((960..=990).contains(&p99), "p99 {p99}");
        assert_eq!(h.quantile(0.0), 1);
    }
}
