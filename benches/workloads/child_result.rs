//! What one child of the workloads harness measured, before it is printed as its
//! `RESULT` line. Its own file so that the peers' tests can build the modules that
//! return it.

/// One child's figures: W1, and W2 when it ran.
pub(crate) struct ChildResult {
    /// W1: the fill's time and the keys it could not take.
    pub(crate) secs: f64,
    pub(crate) failures: u64,
    /// Heap bytes of the structure after W1 (for a networked peer, the server's).
    pub(crate) heap: isize,
    /// RSS bytes added by W1.
    pub(crate) rss: isize,
    /// idem's own account of its bytes (`Stats::hot_bytes`), for the idem peers.
    pub(crate) own: Option<u64>,
    /// W2, when it ran: its time, and the keys that did not answer Duplicate.
    pub(crate) dup: Option<(f64, u64)>,
    /// W2 again in a shuffled order, after it, when the parent asked for both
    /// orders: the same two figures.
    pub(crate) dup_shuffled: Option<(f64, u64)>,
    /// W2 in W1's order again by one thread, over the table of a fill by more: the
    /// same two figures.
    pub(crate) dup_one: Option<(f64, u64)>,
    /// Where W1's (first) fill spent its time, where Linux tells: the busier
    /// worker's CPU, the longest a worker waited for a CPU, and the CPU of the
    /// process's other threads meanwhile; and the time the structure took to build
    /// before the fill; in seconds.
    pub(crate) fill_cpu: Option<(f64, f64, f64, f64)>,
}
