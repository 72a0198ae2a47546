//! The `cas12m` reference peer: `cas12` (`workloads/cas12.rs`) with two costs a real
//! hot tier has that `cas12` leaves out, to see whether its two threads still scale
//! once they are paid:
//!
//! - **a lane lock**: each lane's `parking_lot` mutex, on the lane's first line with
//!   its counters (`workloads/cas.rs`). A fresh claim, once its look-up without a
//!   lock missed, takes its own lane's lock before its home bucket's (lane, then
//!   bucket: the order a pass that removed expired keys from the table would take
//!   them in) and lets it go after its entry is written, placed and linked in the
//!   lane's wheel. Uncontended but for the maintenance pass. A duplicate takes no
//!   lock, as in `cas12`;
//! - **a maintenance thread**, started with the peer and joined when it drops: every
//!   millisecond (a timed wait on a condition variable, which the drop wakes) it
//!   visits every lane that has made a claim, takes its lock, reads the clock and
//!   advances the lane's wheel to now ([`Lanes::advance`]): each slot passed is
//!   looked at (its head and its earliest deadline), and walked only when something
//!   in it may be due. With a lease of 30 s and a TTL of 3600 s nothing is due in
//!   W1/W2, so a pass reads a slot head or two a lane; its lock and cursor writes
//!   take the lane's first line away from its owner about once a millisecond;
//! - **completion from any thread**: a complete stores the entry's TTL deadline and
//!   turns its meta from (in progress, token) to (done, token) by compare-and-swap,
//!   and nothing else ([`Lanes::complete_lazy`]): the entry stays linked at its
//!   lease's slot, and the pass that reaches that slot finds it done with a later
//!   deadline and links it again at the TTL's slot (as idem's wheel does for a
//!   later deadline). So a complete takes **no lane lock**, and the lane lock covers
//!   fresh claims only. (`cas12`'s complete, on the claimer's thread only, moves the
//!   entry in the wheel at once: two unlinks' and a link's writes that this one
//!   leaves to the pass.)
//!
//! Everything else is `cas12`'s: the table, the look-ups, the bucket locks, the
//! lanes' slabs and capacity. Still left out: the index's growth, removing keys from
//! the table (a pass unlinks a due entry from its wheel, marking a lease lapsed, but
//! leaves its key in the table and its entry unused), and the durable tier.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::cas::{model_peer, Claim, Guard, Lanes, Pass, LANES};
use super::cas12::Cas12;
use super::{Key, Peer};

/// Time between two maintenance passes.
const PERIOD: Duration = Duration::from_millis(1);

/// What the claimers and the maintenance thread share.
struct Shared {
    table: Cas12,
    /// Passes made, and what they did (the maintenance thread's, or
    /// [`Cas12m::advance_to`]'s).
    passes: AtomicU64,
    relinked: AtomicU64,
    expired: AtomicU64,
    /// Set (under its mutex) to stop the maintenance thread; `wake` wakes it.
    stop: parking_lot::Mutex<bool>,
    wake: parking_lot::Condvar,
}

impl Shared {
    /// One pass over every lane that has made a claim, each advanced to `now`, or to
    /// the clock's time read under its lock.
    fn pass(&self, now: Option<u32>) -> Pass {
        let lanes = self.table.lanes();
        let mut all = Pass::default();
        for lane in (0..LANES).filter(|&l| lanes.used(l)) {
            let held = lanes.lock_lane(lane);
            let p = lanes.advance(lane, &held, now.unwrap_or_else(|| lanes.now()));
            drop(held);
            all.walked += p.walked;
            all.relinked += p.relinked;
            all.expired += p.expired;
        }
        self.passes.fetch_add(1, Ordering::Relaxed);
        if all.relinked > 0 {
            self.relinked.fetch_add(all.relinked, Ordering::Relaxed);
        }
        if all.expired > 0 {
            self.expired.fetch_add(all.expired, Ordering::Relaxed);
        }
        all
    }

    /// The maintenance thread: a pass a [`PERIOD`] until stopped.
    fn maintain(&self) {
        let mut stop = self.stop.lock();
        while !*stop {
            parking_lot::MutexGuard::unlocked(&mut stop, || {
                self.pass(None);
            });
            if !*stop {
                self.wake.wait_for(&mut stop, PERIOD);
            }
        }
    }
}

/// The model: see the module's documentation.
pub(crate) struct Cas12m {
    shared: Arc<Shared>,
    maintenance: Option<JoinHandle<()>>,
}

impl Cas12m {
    /// A table for at most `n` keys, lease 30 s, TTL 3600 s, with its maintenance
    /// thread.
    pub(crate) fn new(n: usize) -> Cas12m {
        Cas12m::built(Lanes::new(n.max(1)), n, true)
    }

    /// A table for at most `n` keys with the given lease and TTL (whole
    /// milliseconds), with or without its maintenance thread (without: passes only
    /// by [`Cas12m::advance_to`]).
    #[allow(dead_code)] // used by tests/harness_cas.rs
    pub(crate) fn with(n: usize, lease: Duration, ttl: Duration, maintain: bool) -> Cas12m {
        Cas12m::built(Lanes::with(n.max(1), lease, ttl), n, maintain)
    }

    fn built(lanes: Lanes, n: usize, maintain: bool) -> Cas12m {
        let shared = Arc::new(Shared {
            table: Cas12::with(lanes, n),
            passes: AtomicU64::new(0),
            relinked: AtomicU64::new(0),
            expired: AtomicU64::new(0),
            stop: parking_lot::Mutex::new(false),
            wake: parking_lot::Condvar::new(),
        });
        let maintenance = maintain.then(|| {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("cas12m-maintenance".into())
                .spawn(move || shared.maintain())
                .expect("spawn the maintenance thread")
        });
        Cas12m {
            shared,
            maintenance,
        }
    }

    /// Claims `key`: `cas12`'s claim, a fresh one under its lane's lock.
    #[inline]
    pub(crate) fn claim(&self, key: &Key) -> Claim {
        let lanes = self.shared.table.lanes();
        self.shared.table.claim_with(
            key,
            |_, lane| lanes.lock_lane(lane),
            |lanes, g, held| lanes.settle_kept(g, held),
        )
    }

    /// Completes a claim, on any thread, without a lane lock. False if its lease was
    /// lost (a pass found it past its lease first).
    #[inline]
    pub(crate) fn complete(&self, g: Guard) -> bool {
        self.shared.table.lanes().complete_lazy(g)
    }

    /// One pass now, at tick `now` (milliseconds since the table was made) rather
    /// than the clock's: what it did.
    #[allow(dead_code)] // used by tests/harness_cas.rs
    pub(crate) fn advance_to(&self, now: u32) -> Pass {
        self.shared.pass(Some(now))
    }

    /// Passes made so far, and the entries they relinked and expired.
    #[allow(dead_code)] // read by tests/harness_cas.rs
    pub(crate) fn passes(&self) -> (u64, u64, u64) {
        let s = &self.shared;
        (
            s.passes.load(Ordering::Relaxed),
            s.relinked.load(Ordering::Relaxed),
            s.expired.load(Ordering::Relaxed),
        )
    }

    /// The lanes (tests).
    #[allow(dead_code)] // read by tests/harness_cas.rs
    pub(crate) fn lanes(&self) -> &Lanes {
        self.shared.table.lanes()
    }

    /// Entries resident, over all lanes (exact once the claiming threads are joined).
    #[allow(dead_code)] // read by tests/harness_cas.rs
    pub(crate) fn resident(&self) -> u64 {
        self.shared.table.resident()
    }
}

impl Drop for Cas12m {
    fn drop(&mut self) {
        *self.shared.stop.lock() = true;
        self.shared.wake.notify_all();
        if let Some(t) = self.maintenance.take() {
            t.join().expect("the maintenance thread");
        }
    }
}

model_peer!(Cas12m, |m| m.shared.table.own_bytes());
