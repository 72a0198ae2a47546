//! Time: every deadline in idem comes from a [`Clock`] in wall-clock milliseconds.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::sync::{Arc, AtomicU64, Ordering};

/// A source of wall-clock time in milliseconds since the Unix epoch.
///
/// The engine reads it on every claim and completion. Wall-clock time (not a
/// monotonic instant) is used because deadlines must keep their meaning across
/// restarts of the process. A clock that steps backwards makes leases and TTLs last
/// longer, never shorter: each namespace reads it as stopped at the latest time it
/// saw until the clock passes that time again. A reading past [`LATEST_MS`] (some
/// 146 million years after 1970) is read as `LATEST_MS`: time stands still there.
pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since 1970-01-01T00:00:00Z.
    fn now_ms(&self) -> u64;
}

/// The latest time the engine takes from its clock, 2^62 ms (some 146 million years
/// after 1970); a [`Clock`] that reads later is read as this. Ticks and deadlines,
/// counted from the engine's start, then stay far inside their range whatever a
/// clock returns (a reading near `u64::MAX` would otherwise wrap them).
pub const LATEST_MS: u64 = 1 << 62;

/// `clock`'s reading as the engine takes it: capped at [`LATEST_MS`].
#[inline]
pub(crate) fn read_capped(clock: &dyn Clock) -> u64 {
    clock.now_ms().min(LATEST_MS)
}

/// The system's real-time clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    /// One `clock_gettime(CLOCK_REALTIME)` (a vDSO call on Linux), turned into whole
    /// milliseconds (the division by a constant compiles to a multiply). The
    /// portable route through `SystemTime::duration_since` costs about 100 more
    /// instructions per read, and every claim and completion reads the clock.
    #[inline]
    fn now_ms(&self) -> u64 {
        #[cfg(unix)]
        if let Some(ms) = clock_gettime_ms(libc::CLOCK_REALTIME) {
            return ms;
        }
        portable_now_ms()
    }
}

/// Milliseconds since the epoch on the clock `id`, or `None` if the system refuses it.
#[cfg(unix)]
#[inline]
#[allow(unsafe_code)]
fn clock_gettime_ms(id: libc::clockid_t) -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration; an
    // unsupported clock id is reported through the return code, not undefined.
    let rc = unsafe { libc::clock_gettime(id, &mut ts) };
    (rc == 0 && ts.tv_sec >= 0).then(|| ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000)
}

/// The system's real-time clock at the kernel's tick resolution, the engine's default.
///
/// On Linux it reads `CLOCK_REALTIME_COARSE`: the time of the kernel's last timer
/// tick (every 1-10 ms, as the kernel is built: `HZ` of 1000 to 100), a few nanoseconds a read against some
/// tens for the exact [`SystemClock`]. It lags real time by less than one tick and
/// never runs ahead of it, so the absolute deadlines the engine reports
/// ([`InFlight::lease_expires_at_ms`](crate::InFlight::lease_expires_at_ms),
/// [`Done::expires_at_ms`](crate::Done::expires_at_ms)) are never passed early in
/// real time. A span measured with it (a lease, a TTL) lasts its configured length
/// give or take one tick, since each of its two ends is read up to a tick late.
/// Elsewhere it is [`SystemClock`].
///
/// Pass [`SystemClock`] to [`EngineBuilder::clock`](crate::EngineBuilder::clock) where
/// deadlines must be exact to the millisecond.
#[derive(Debug, Clone, Copy, Default)]
pub struct CoarseClock;

impl Clock for CoarseClock {
    #[inline]
    fn now_ms(&self) -> u64 {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        if let Some(ms) = clock_gettime_ms(libc::CLOCK_REALTIME_COARSE) {
            return ms;
        }
        SystemClock.now_ms()
    }
}

/// The system clock through `std`: before 1970 reads as 0.
fn portable_now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A clock that only moves when told to: tests of TTLs, leases and retention use it
/// instead of sleeping.
///
/// Clones share one time, so a test keeps a clone and hands another to the engine:
///
/// ```
/// use std::time::Duration;
/// use idem::{Clock, ManualClock};
///
/// let clock = ManualClock::new(1_000);
/// let engine_side = clock.clone();
/// clock.advance(Duration::from_millis(250));
/// assert_eq!(engine_side.now_ms(), 1_250);
/// ```
#[derive(Clone)]
pub struct ManualClock {
    now: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock that reads `start_ms` until it is advanced.
    pub fn new(start_ms: u64) -> Self {
        Self {
            now: Arc::new(AtomicU64::new(start_ms)),
        }
    }

    /// Moves the clock forward by `by` (whole milliseconds; sub-millisecond parts are
    /// dropped), stopping at `u64::MAX`.
    pub fn advance(&self, by: Duration) {
        let by = by.as_millis().min(u64::MAX as u128) as u64;
        let _ = self
            .now
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |now| {
                Some(now.saturating_add(by))
            });
    }

    /// Sets the clock to `ms`, forwards or backwards.
    pub fn set(&self, ms: u64) {
        self.now.store(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now_ms(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManualClock")
            .field("now_ms", &self.now_ms())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_clock_reads_the_same_time_as_std() {
        // Two std reads bracket ours: the same clock, truncated the same way.
        let before = portable_now_ms();
        let ours = SystemClock.now_ms();
        let after = portable_now_ms();
        assert!(
            before <= ours && ours <= after,
            "{before} <= {ours} <= {after}"
        );
        assert!(
            ours > 1_600_000_000_000,
            "milliseconds since 1970, not seconds: {ours}"
        );
    }

    #[test]
    fn the_coarse_clock_never_leads_the_system_clock_and_trails_it_by_under_a_second() {
        // The documented lag is under one kernel tick (at most 10 ms), but a tick can
        // arrive late on a busy or virtualised machine, so only a gross bound is
        // checked: it catches the wrong clock or wrong units, not a lag of some ticks.
        let before = SystemClock.now_ms();
        let coarse = CoarseClock.now_ms();
        let after = SystemClock.now_ms();
        assert!(coarse <= after, "never ahead: {coarse} <= {after}");
        assert!(
            coarse + 1_000 >= before,
            "less than a second behind: {coarse} vs {before}"
        );
    }
}
