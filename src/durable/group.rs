//! Group commit for `SyncPolicy::Always`
//! ([`EngineBuilder::commit_delay`](crate::EngineBuilder::commit_delay)).
//!
//! Each completion writes its batch without a sync, then takes a ticket and waits until
//! a sync of the write-ahead log that started after its write has finished. One
//! waiter at a time leads: it syncs for every ticket taken so far. A leader that is
//! alone (no other write is waiting for a sync) first waits a moment for one more
//! write to join, so that two completions share one fsync where, without the wait,
//! the second one's write would arrive just after the first one's fsync began and
//! need an fsync of its own. The moment is a fixed delay, or (the default) half the
//! time the last sync took: waiting longer than that for a companion would cost the
//! leader more than the fsync it saves the companion.
//!
//! It waits only while completions are concurrent: when the last sync covered more
//! than one write, or another write arrived while it ran. A single worker's syncs never
//! see company, so it never waits and pays nothing for the delay.
//!
//! Waiters spin (yielding the processor) before they park: a parked thread takes tens
//! of microseconds to be woken in a virtual machine, a large part of an fsync, and
//! both waits here (a follower for the leader's sync, a leader for its companion's
//! write) usually end within one fsync's time. The spin is bounded (twice the last
//! sync's time, at most [`SPIN_CAP`]), yields the processor after its first rounds,
//! and is skipped while more callers wait than there are processors; past it, the
//! waiter parks on the condition variable.
//!
//! The logic is independent of RocksDB (the sync is a closure), so it is tested on its
//! own, deterministically.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::error::Error;

/// How long a lone leader waits for company while completions are concurrent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Delay {
    /// At most this long.
    Fixed(Duration),
    /// At most half as long as the last sync took, and at most [`ADAPTIVE_CAP`].
    Adaptive,
}

/// The longest wait for company that [`Delay::Adaptive`] makes.
pub(crate) const ADAPTIVE_CAP: Duration = Duration::from_millis(5);

/// The longest a waiter spins before it parks.
pub(crate) const SPIN_CAP: Duration = Duration::from_millis(1);

/// The shortest spin budget (before any sync has been timed, or after a fast one).
const SPIN_FLOOR: Duration = Duration::from_micros(50);

/// Where a [`GroupCommit`] reads the time when it measures how long a sync took
/// (the waits themselves run on [`Instant::now`]). Tests pass a fake that a fake sync
/// moves on, to check the measurement without waiting on real time.
pub(crate) trait SyncTimer: Send + Sync {
    fn now(&self) -> Instant;
}

/// The real monotonic clock, [`Instant::now`]: the production timer (zero-sized and
/// called directly, so it costs what calling `Instant::now` does).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RealTime;

impl SyncTimer for RealTime {
    #[inline]
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// Shares fsyncs of the write-ahead log between concurrent completions.
#[derive(Debug)]
pub(crate) struct GroupCommit<T: SyncTimer = RealTime> {
    delay: Delay,
    /// The longest a waiter spins before it parks; tests set zero (park at once) or
    /// `Duration::MAX` (never park).
    spin_cap: Duration,
    /// The processors this process may run on.
    cpus: usize,
    state: Mutex<State>,
    changed: Condvar,
    /// `State::written` and `State::synced`, published (under the lock, whenever they
    /// change) for waiters that spin without it.
    written: AtomicU64,
    synced: AtomicU64,
    /// How long the last sync took, in nanoseconds.
    last_sync_ns: AtomicU64,
    syncs: AtomicU64,
    waits: AtomicU64,
    /// Times the syncs.
    timer: T,
    /// Tests: called with a ticket whose sync has finished, without the lock, before
    /// its outcome is read (to hold a waiter there while later syncs run).
    #[cfg(test)]
    before_outcome: Option<Hook>,
}

/// A test's hook (see `GroupCommit::before_outcome`).
#[cfg(test)]
struct Hook(Box<dyn Fn(u64) + Send + Sync>);

#[cfg(test)]
impl std::fmt::Debug for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hook")
    }
}

#[derive(Debug, Default)]
struct State {
    /// Tickets handed out: writes that have returned and wait to be synced.
    written: u64,
    /// Every ticket up to this one was covered by a sync that has finished: durable,
    /// unless it falls in one of the `failed` ranges.
    synced: u64,
    /// Callers between taking their ticket and returning.
    waiting: usize,
    /// A waiter is syncing (or waiting for company before it does).
    leading: bool,
    /// The failed syncs whose writes have not all read their outcome yet. A later
    /// sync that succeeds does not make a failed one's writes durable, so a ticket is
    /// checked against these first. Each goes once its last write has read it, so
    /// the list holds at most one per waiting caller, however long the disk fails.
    failed: Vec<Failed>,
    /// The last sync had company: it covered more than one write, or another write
    /// arrived while it ran.
    concurrent: bool,
}

/// A failed sync: the tickets it was to cover, `(after, through]`, its error, and
/// how many of those tickets have yet to read it.
#[derive(Debug)]
struct Failed {
    after: u64,
    through: u64,
    unread: u64,
    error: Error,
}

/// Spins until `done()` holds or `budget` has passed, yielding the processor after
/// the first few rounds; true if `done()` held.
fn spin_until(budget: Duration, done: impl Fn() -> bool) -> bool {
    if budget.is_zero() {
        return done();
    }
    let start = Instant::now();
    let mut round = 0u32;
    loop {
        if done() {
            return true;
        }
        round = round.wrapping_add(1);
        if round < 64 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
        if round.is_multiple_of(8) && start.elapsed() >= budget {
            return done();
        }
    }
}

impl GroupCommit {
    pub(crate) fn new(delay: Delay) -> Self {
        Self::with_spin(delay, SPIN_CAP)
    }

    /// As [`GroupCommit::new`], with waiters spinning at most `spin_cap` before they
    /// park.
    pub(crate) fn with_spin(delay: Delay, spin_cap: Duration) -> Self {
        GroupCommit::with_timer(delay, spin_cap, RealTime)
    }
}

impl<T: SyncTimer> GroupCommit<T> {
    /// As [`GroupCommit::with_spin`], with syncs timed by `timer`.
    fn with_timer(delay: Delay, spin_cap: Duration, timer: T) -> Self {
        GroupCommit {
            delay,
            spin_cap,
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            written: AtomicU64::new(0),
            synced: AtomicU64::new(0),
            last_sync_ns: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
            waits: AtomicU64::new(0),
            timer,
            #[cfg(test)]
            before_outcome: None,
        }
    }

    /// Times a leader waited for company.
    #[cfg(test)]
    fn waits(&self) -> u64 {
        self.waits.load(Ordering::Relaxed)
    }

    /// Syncs issued so far.
    pub(crate) fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }

    fn last_sync(&self) -> Duration {
        Duration::from_nanos(self.last_sync_ns.load(Ordering::Relaxed))
    }

    /// The longest a lone leader waits for company now.
    fn company_wait(&self) -> Duration {
        match self.delay {
            Delay::Fixed(d) => d,
            Delay::Adaptive => (self.last_sync() / 2).min(ADAPTIVE_CAP),
        }
    }

    /// The longest a waiter spins before it parks now, with `waiting` callers in
    /// the group: twice the last sync's time, at least [`SPIN_FLOOR`], at most the
    /// cap (`Duration::MAX`: spin until done). Nothing while there are more callers
    /// than processors: spinners would then take processor time from the writers
    /// they wait for (and those groups are large, so parking is cheap per write).
    fn spin_budget(&self, waiting: usize) -> Duration {
        if self.spin_cap == Duration::MAX {
            return Duration::MAX;
        }
        if waiting > self.cpus {
            return Duration::ZERO;
        }
        (self.last_sync() * 2).max(SPIN_FLOOR).min(self.spin_cap)
    }

    /// Called after a write has returned: waits until a `sync` that started after it
    /// has finished, leading one if nobody is. The error of a failed sync is returned
    /// to every write it was to cover. If the sync panics, the writes it was to cover
    /// fail, the next waiter leads, and the panic goes on in the leader's thread.
    pub(crate) fn commit(&self, sync: impl Fn() -> Result<(), Error>) -> Result<(), Error> {
        let mut st = self.state.lock();
        st.written += 1;
        self.written.store(st.written, Ordering::Release);
        st.waiting += 1;
        let ticket = st.written;
        // A leader waiting for company wakes up.
        self.changed.notify_all();
        loop {
            if st.synced >= ticket {
                #[cfg(test)]
                if let Some(hold) = &self.before_outcome {
                    MutexGuard::unlocked(&mut st, || (hold.0)(ticket));
                }
                let outcome = match st.read_failure(ticket) {
                    Some(e) => Err(e),
                    None => Ok(()),
                };
                st.leave();
                return outcome;
            }
            if st.leading {
                // Every sync that ends moves `synced` on (it covers at least its
                // leader's ticket), under the lock: if it has not moved when the spin
                // gives up, parking here (which releases the lock) misses no wake-up.
                let seen = st.synced;
                let budget = self.spin_budget(st.waiting);
                MutexGuard::unlocked(&mut st, || {
                    spin_until(budget, || self.synced.load(Ordering::Acquire) != seen)
                });
                if st.synced == seen {
                    self.changed.wait(&mut st);
                }
                continue;
            }
            st.leading = true;
            let wait = self.company_wait();
            if !wait.is_zero() && st.concurrent && st.written == st.synced + 1 {
                // Alone, while completions are concurrent: give another one a moment
                // to join this sync.
                self.waits.fetch_add(1, Ordering::Relaxed);
                let until = Instant::now() + wait;
                let alone = st.written;
                let budget = self.spin_budget(st.waiting).min(wait);
                MutexGuard::unlocked(&mut st, || {
                    spin_until(budget, || self.written.load(Ordering::Acquire) != alone)
                });
                while st.written == alone {
                    if self.changed.wait_until(&mut st, until).timed_out() {
                        break;
                    }
                }
            }
            let (after, through) = (st.synced, st.written);
            drop(st);
            let began = self.timer.now();
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(&sync));
            let took = self.timer.now().saturating_duration_since(began);
            self.last_sync_ns
                .store(took.as_nanos() as u64, Ordering::Relaxed);
            self.syncs.fetch_add(1, Ordering::Relaxed);
            st = self.state.lock();
            st.leading = false;
            st.concurrent = through - after > 1 || st.written > through;
            st.synced = through;
            self.synced.store(through, Ordering::Release);
            // Every ticket of the range is still waiting: none leaves before
            // `synced` reaches it, and it reached `after` only.
            let mut fail = |error| {
                st.failed.push(Failed {
                    after,
                    through,
                    unread: through - after,
                    error,
                })
            };
            let panicked = match r {
                Ok(Ok(())) => None,
                Ok(Err(e)) => {
                    fail(e);
                    None
                }
                Err(panic) => {
                    let e = crate::error::StoreError::new("sync", "the sync panicked".to_owned());
                    fail(Error::Store(e));
                    Some(panic)
                }
            };
            self.changed.notify_all();
            if let Some(panic) = panicked {
                // The leader's own ticket, in the range, reads nothing: it panics.
                st.read_failure(ticket);
                st.leave();
                drop(st);
                std::panic::resume_unwind(panic);
            }
        }
    }
}

impl State {
    /// The error of the failed sync that covered `ticket`, if one did, read once:
    /// the failure is forgotten when the last of its tickets has read it.
    fn read_failure(&mut self, ticket: u64) -> Option<Error> {
        let i = self
            .failed
            .iter()
            .position(|f| f.after < ticket && ticket <= f.through)?;
        let f = &mut self.failed[i];
        f.unread -= 1;
        Some(if f.unread == 0 {
            self.failed.swap_remove(i).error
        } else {
            f.error.clone()
        })
    }

    /// A caller is done with its ticket.
    fn leave(&mut self) {
        self.waiting -= 1;
        debug_assert!(
            self.waiting > 0 || self.failed.is_empty(),
            "a failed sync outlived its writes: {:?}",
            self.failed
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    fn store_error() -> Error {
        Error::Store(crate::error::StoreError::new(
            "sync",
            "disk gone".to_owned(),
        ))
    }

    /// Every scenario runs twice: with waiters that park at once, and with waiters
    /// that spin until their condition holds and never park.
    const SPINS: [Duration; 2] = [Duration::ZERO, Duration::MAX];

    fn group(delay: Duration, spin: Duration) -> GroupCommit {
        GroupCommit::with_spin(Delay::Fixed(delay), spin)
    }

    #[test]
    fn the_adaptive_wait_is_half_the_last_sync_and_the_spin_twice_it_within_bounds() {
        let g = GroupCommit::new(Delay::Adaptive);
        // No sync timed yet: a lone leader does not wait; a waiter spins the floor.
        assert_eq!(g.company_wait(), Duration::ZERO);
        assert_eq!(g.spin_budget(1), SPIN_FLOOR);
        let set = |d: Duration| g.last_sync_ns.store(d.as_nanos() as u64, Ordering::Relaxed);
        set(Duration::from_micros(300));
        assert_eq!(g.company_wait(), Duration::from_micros(150));
        assert_eq!(g.spin_budget(1), Duration::from_micros(600));
        // More callers than processors: nobody spins.
        assert_eq!(g.spin_budget(g.cpus + 1), Duration::ZERO);
        set(Duration::from_micros(10));
        assert_eq!(g.spin_budget(1), SPIN_FLOOR);
        set(Duration::from_secs(1));
        assert_eq!(g.company_wait(), ADAPTIVE_CAP);
        assert_eq!(g.spin_budget(1), SPIN_CAP);
        // A fixed delay is what it says, whatever the syncs take.
        let f = GroupCommit::new(Delay::Fixed(Duration::from_micros(70)));
        f.last_sync_ns.store(1_000_000_000, Ordering::Relaxed);
        assert_eq!(f.company_wait(), Duration::from_micros(70));
        // A cap of zero parks at once.
        let z = GroupCommit::with_spin(Delay::Adaptive, Duration::ZERO);
        assert_eq!(z.spin_budget(1), Duration::ZERO);
    }

    /// A sync timer that reads a fixed instant plus whatever the test has advanced it by.
    #[derive(Debug)]
    struct FakeTime {
        base: Instant,
        offset_ns: AtomicU64,
    }

    impl FakeTime {
        fn new() -> Self {
            FakeTime {
                base: Instant::now(),
                offset_ns: AtomicU64::new(0),
            }
        }

        fn advance(&self, by: Duration) {
            self.offset_ns
                .fetch_add(by.as_nanos() as u64, Ordering::SeqCst);
        }
    }

    impl SyncTimer for FakeTime {
        fn now(&self) -> Instant {
            self.base + Duration::from_nanos(self.offset_ns.load(Ordering::SeqCst))
        }
    }

    #[test]
    fn the_adaptive_wait_is_set_by_how_long_the_last_sync_took_on_the_sync_timer() {
        let g = GroupCommit::with_timer(Delay::Adaptive, SPIN_CAP, FakeTime::new());
        // Time spent outside a sync is not counted.
        g.timer.advance(Duration::from_secs(7));
        // A sync that takes 300 µs of the timer's time.
        g.commit(|| {
            g.timer.advance(Duration::from_micros(300));
            Ok(())
        })
        .unwrap();
        assert_eq!(g.last_sync(), Duration::from_micros(300));
        assert_eq!(g.company_wait(), Duration::from_micros(150));
        // The next sync's time replaces it, shorter as well as longer.
        g.timer.advance(Duration::from_secs(1));
        g.commit(|| {
            g.timer.advance(Duration::from_micros(40));
            Ok(())
        })
        .unwrap();
        assert_eq!(g.last_sync(), Duration::from_micros(40));
        assert_eq!(g.company_wait(), Duration::from_micros(20));
        // A failed sync is timed too.
        g.commit(|| {
            g.timer.advance(Duration::from_micros(900));
            Err(store_error())
        })
        .unwrap_err();
        assert_eq!(g.last_sync(), Duration::from_micros(900));
        assert_eq!(g.company_wait(), Duration::from_micros(450));
        assert_eq!(g.syncs(), 3);
    }

    /// Spins (yielding) until `f` holds; fails the test if it has not within a
    /// minute (a regression that never lets it hold must not hang the suite).
    fn until(f: impl Fn() -> bool) {
        let limit = Instant::now() + Duration::from_secs(60);
        while !f() {
            assert!(Instant::now() < limit, "the awaited state never came");
            std::thread::yield_now();
        }
    }

    #[test]
    fn commits_one_after_another_sync_each_and_never_wait() {
        for spin in SPINS {
            let g = group(Duration::from_millis(10), spin);
            for _ in 0..3 {
                g.commit(|| Ok(())).unwrap();
            }
            assert_eq!(g.syncs(), 3);
            assert_eq!(g.waits(), 0, "a single worker pays nothing for the delay");
        }
    }

    /// Commits once on another thread with a sync that blocks until released, and a
    /// second commit (on another thread) while that sync runs. Returns the release
    /// flag and both threads.
    #[allow(clippy::type_complexity)]
    fn overlap(
        g: &Arc<GroupCommit>,
    ) -> (
        Arc<AtomicBool>,
        std::thread::JoinHandle<Result<(), Error>>,
        std::thread::JoinHandle<Result<(), Error>>,
    ) {
        let release = Arc::new(AtomicBool::new(false));
        let syncing = Arc::new(AtomicBool::new(false));
        let first = {
            let (g, release, syncing) = (g.clone(), release.clone(), syncing.clone());
            std::thread::spawn(move || {
                g.commit(|| {
                    syncing.store(true, Ordering::SeqCst);
                    until(|| release.load(Ordering::SeqCst));
                    Ok(())
                })
            })
        };
        until(|| syncing.load(Ordering::SeqCst));
        // The first sync is under way: this write is not covered by it.
        let second = {
            let g = g.clone();
            std::thread::spawn(move || g.commit(|| Ok(())))
        };
        until(|| g.state.lock().written == 2);
        (release, first, second)
    }

    #[test]
    fn once_commits_overlap_a_lone_leader_waits_for_company_and_one_sync_covers_both() {
        for spin in SPINS {
            // A delay far longer than the test: only a third write ends the wait. (Were
            // it not to, the second write would sync alone after a minute, and the
            // count of syncs below would be three.)
            let g = Arc::new(group(Duration::from_secs(60), spin));
            let (release, first, second) = overlap(&g);
            release.store(true, Ordering::SeqCst);
            first.join().unwrap().unwrap();
            // The second write now leads, alone, after a sync that saw it arrive: it waits.
            until(|| g.waits() == 1);
            g.commit(|| Ok(())).unwrap();
            second.join().unwrap().unwrap();
            assert_eq!(g.syncs(), 2, "the second and third writes shared one fsync");
        }
    }

    #[test]
    fn a_write_after_a_sync_began_waits_for_the_next_one() {
        for spin in SPINS {
            let g = Arc::new(group(Duration::ZERO, spin));
            let (release, first, second) = overlap(&g);
            assert_eq!(g.syncs(), 0);
            release.store(true, Ordering::SeqCst);
            first.join().unwrap().unwrap();
            second.join().unwrap().unwrap();
            assert_eq!(g.syncs(), 2, "the second write needed a sync of its own");
        }
    }

    #[test]
    fn a_failed_sync_fails_the_writes_it_covered_and_not_later_ones() {
        for spin in SPINS {
            let g = group(Duration::ZERO, spin);
            assert_eq!(g.commit(|| Err(store_error())), Err(store_error()));
            g.commit(|| Ok(())).unwrap();
            assert_eq!(g.syncs(), 2);
        }
    }

    /// A commit on its own thread whose sync, if it leads, signals `syncing`, waits
    /// for `release`, then returns what `outcome` gives.
    fn commit_blocking(
        g: &Arc<GroupCommit>,
        syncing: &Arc<AtomicBool>,
        release: &Arc<AtomicBool>,
        outcome: fn() -> Result<(), Error>,
    ) -> std::thread::JoinHandle<Result<(), Error>> {
        let (g, syncing, release) = (g.clone(), syncing.clone(), release.clone());
        std::thread::spawn(move || {
            g.commit(|| {
                syncing.store(true, Ordering::SeqCst);
                until(|| release.load(Ordering::SeqCst));
                outcome()
            })
        })
    }

    /// Two commits that take their tickets while a first sync runs, so that they share
    /// the next one, whose sync (whoever leads) blocks until released and then returns
    /// what `outcome` gives. Returns once that sync has begun, with its release flag.
    #[allow(clippy::type_complexity)]
    fn two_share_a_sync(
        g: &Arc<GroupCommit>,
        outcome: fn() -> Result<(), Error>,
    ) -> (
        Arc<AtomicBool>,
        std::thread::JoinHandle<Result<(), Error>>,
        std::thread::JoinHandle<Result<(), Error>>,
    ) {
        let flag = || Arc::new(AtomicBool::new(false));
        let (syncing_first, release_first) = (flag(), flag());
        let first = commit_blocking(g, &syncing_first, &release_first, || Ok(()));
        until(|| syncing_first.load(Ordering::SeqCst));
        let (syncing, release) = (flag(), flag());
        let second = commit_blocking(g, &syncing, &release, outcome);
        let third = commit_blocking(g, &syncing, &release, outcome);
        until(|| g.state.lock().written == 3);
        release_first.store(true, Ordering::SeqCst);
        first.join().unwrap().unwrap();
        until(|| syncing.load(Ordering::SeqCst));
        (release, second, third)
    }

    #[test]
    fn every_write_of_a_failed_sync_fails_even_after_a_later_sync_succeeded() {
        for spin in SPINS {
            let mut g = group(Duration::ZERO, spin);
            // The writes of the failing sync (tickets 2 and 3) read their outcome only
            // once the fourth write's sync has succeeded.
            let fourth_done = Arc::new(AtomicBool::new(false));
            let done = fourth_done.clone();
            g.before_outcome = Some(Hook(Box::new(move |ticket| {
                if (2..=3).contains(&ticket) {
                    until(|| done.load(Ordering::SeqCst));
                }
            })));
            let g = Arc::new(g);
            // Whichever of the two writes leads their shared sync, that sync fails.
            let (release, second, third) = two_share_a_sync(&g, || Err(store_error()));
            // A fourth write arrives during the failing sync; its own sync succeeds
            // before either write of the failed one looks at its outcome.
            let fourth = {
                let g = g.clone();
                std::thread::spawn(move || g.commit(|| Ok(())))
            };
            until(|| g.state.lock().written == 4);
            release.store(true, Ordering::SeqCst);
            fourth.join().unwrap().unwrap();
            fourth_done.store(true, Ordering::SeqCst);
            assert_eq!(second.join().unwrap(), Err(store_error()));
            assert_eq!(third.join().unwrap(), Err(store_error()));
            assert_eq!(g.syncs(), 3);
            assert!(
                g.state.lock().failed.is_empty(),
                "forgotten once its writes have read it"
            );
        }
    }

    /// A failed sync covers the tickets after the last good one, not that one: the
    /// write of a sync that succeeded reads success after the next sync (its range
    /// starting at that write's ticket) has failed, and the next sync's write reads
    /// its failure.
    #[test]
    fn a_write_of_a_good_sync_reads_success_after_the_next_sync_failed() {
        for spin in SPINS {
            let mut g = group(Duration::ZERO, spin);
            let flag = || Arc::new(AtomicBool::new(false));
            let (go_first, go_second) = (flag(), flag());
            let (first_go, second_go) = (go_first.clone(), go_second.clone());
            // Each write reads its outcome only when the test lets it: the first once
            // the second's sync has failed, the second once the first has read.
            g.before_outcome = Some(Hook(Box::new(move |ticket| match ticket {
                1 => until(|| first_go.load(Ordering::SeqCst)),
                2 => until(|| second_go.load(Ordering::SeqCst)),
                _ => {}
            })));
            let g = Arc::new(g);
            let first = {
                let g = g.clone();
                std::thread::spawn(move || g.commit(|| Ok(())))
            };
            until(|| g.state.lock().synced == 1);
            let second = {
                let g = g.clone();
                std::thread::spawn(move || g.commit(|| Err(store_error())))
            };
            until(|| g.state.lock().synced == 2);
            {
                let st = g.state.lock();
                let failed: Vec<_> = st.failed.iter().map(|f| (f.after, f.through)).collect();
                assert_eq!(failed, vec![(1, 2)], "the second sync failed for ticket 2");
            }
            go_first.store(true, Ordering::SeqCst);
            assert_eq!(first.join().unwrap(), Ok(()), "the first write was synced");
            go_second.store(true, Ordering::SeqCst);
            assert_eq!(second.join().unwrap(), Err(store_error()));
            assert_eq!(g.syncs(), 2);
            assert!(g.state.lock().failed.is_empty());
        }
    }

    /// While one caller waits to read its outcome, a disk whose every sync fails
    /// does not grow the list of failures: each goes once its writes have read it
    /// (before, the list was cleared only when nobody waited, and each commit
    /// scanned it).
    #[test]
    fn failed_syncs_are_forgotten_once_read_while_another_caller_waits() {
        for spin in SPINS {
            let mut g = group(Duration::ZERO, spin);
            let release = Arc::new(AtomicBool::new(false));
            let released = release.clone();
            g.before_outcome = Some(Hook(Box::new(move |ticket| {
                if ticket == 1 {
                    until(|| released.load(Ordering::SeqCst));
                }
            })));
            let g = Arc::new(g);
            let waiting = {
                let g = g.clone();
                std::thread::spawn(move || g.commit(|| Ok(())))
            };
            until(|| g.state.lock().synced == 1);
            for _ in 0..100 {
                assert_eq!(g.commit(|| Err(store_error())), Err(store_error()));
                let st = g.state.lock();
                assert_eq!(st.waiting, 1, "the first caller still waits");
                assert!(st.failed.is_empty(), "{:?}", st.failed);
            }
            release.store(true, Ordering::SeqCst);
            waiting.join().unwrap().unwrap();
            assert_eq!(g.syncs(), 101);
        }
    }

    #[test]
    fn a_panicking_sync_fails_its_writes_and_the_next_commit_leads() {
        for spin in SPINS {
            let g = Arc::new(group(Duration::ZERO, spin));
            let (release, second, third) =
                two_share_a_sync(&g, || panic!("the sync panicked (on purpose)"));
            release.store(true, Ordering::SeqCst);
            let outcomes = [second.join(), third.join()];
            // The leader's thread panicked; the write that shared its sync failed.
            assert_eq!(outcomes.iter().filter(|o| o.is_err()).count(), 1);
            assert!(outcomes
                .iter()
                .any(|o| matches!(o, Ok(Err(Error::Store(_))))));
            // Nobody is left leading: the next commit syncs.
            g.commit(|| Ok(())).unwrap();
            assert_eq!(g.syncs(), 3);
        }
    }
}
