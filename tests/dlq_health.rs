//! Dead-letter health: the windows of the arrival rate, on a manual clock.

#![cfg(not(idem_loom))]

mod util;

use std::time::Duration;

use idem::{Dlq, Engine, Error, ManualClock};
use util::*;

const OUTAGE: &str = "downstream-unavailable:payments-api";

fn memory() -> (Engine, Dlq, ManualClock) {
    let (engine, _ns, clock) = engine_with(small());
    let dlq = engine.dlq("ns").unwrap();
    (engine, dlq, clock)
}

/// Whether `a` is `b` but for rounding.
fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= b.abs() * 1e-9
}

/// A window shorter than the clock's millisecond holds no instant: it is refused
/// with a typed error, whichever window it is. (Before, a zero recent window counted
/// an arrival at `now` and reported its rate as 0 per hour.)
#[test]
fn a_window_shorter_than_a_millisecond_is_refused() {
    let (_engine, dlq, _clock) = memory();
    dlq.quarantine(b"k", b"p", OUTAGE).unwrap();
    let before = dlq.health();
    for (recent, baseline) in [
        (Duration::ZERO, secs(3600)),
        (secs(3600), Duration::ZERO),
        (Duration::ZERO, Duration::ZERO),
        (Duration::from_micros(999), secs(3600)),
        (secs(3600), Duration::from_nanos(1)),
    ] {
        let r = dlq.health_over(recent, baseline);
        assert!(
            matches!(&r, Err(Error::InvalidConfig { namespace, .. }) if namespace == "ns"),
            "{recent:?} {baseline:?}: {r:?}"
        );
    }
    assert_eq!(dlq.health(), before);
    assert_eq!(before.arrivals_recent, 1);
}

/// Each window holds exactly its length in milliseconds: with 1 ms windows, the
/// arrival at now is the recent one, the arrival 1 ms before it the baseline's, and
/// the rates say one per millisecond each. (Before, the recent window held both
/// ends, now and 1 ms before: two arrivals over 1 ms, and the baseline the third.)
#[test]
fn a_window_holds_exactly_its_length_in_milliseconds() {
    let (_engine, dlq, clock) = memory();
    for k in [b"a", b"b", b"c"] {
        dlq.quarantine(k, b"p", OUTAGE).unwrap();
        clock.advance(ms(1));
    }
    // Now is 1 ms past the last arrival.
    let h = dlq.health_over(ms(2), ms(1)).unwrap();
    assert_eq!((h.arrivals_recent, h.arrivals_baseline), (1, 1));
    assert!(close(h.arrival_rate_recent(), 1_800_000.0), "{h:?}");
    assert!(close(h.arrival_rate_baseline(), 3_600_000.0), "{h:?}");
    assert!(close(h.arrival_ratio().unwrap(), 0.5), "{h:?}");
    let h = dlq.health_over(ms(1), ms(1)).unwrap();
    assert_eq!((h.arrivals_recent, h.arrivals_baseline), (0, 1));
    let h = dlq.health_over(ms(3), ms(1)).unwrap();
    assert_eq!((h.arrivals_recent, h.arrivals_baseline), (2, 1));
    // A fraction of a millisecond is dropped, and the window reported is the one
    // counted.
    let h = dlq
        .health_over(Duration::from_micros(2_500), Duration::from_micros(1_999))
        .unwrap();
    assert_eq!((h.recent_window, h.baseline_window), (ms(2), ms(1)));
    assert_eq!((h.arrivals_recent, h.arrivals_baseline), (1, 1));
}

/// A message stamped after now (the clock went back since) is no arrival of either
/// window, and windows longer than the clock's reading count from its start.
#[test]
fn windows_past_either_end_of_the_clock_count_what_they_hold() {
    let clock = ManualClock::new(10);
    let (engine, _ns) = engine_on(small(), clock.clone());
    let dlq = engine.dlq("ns").unwrap();
    dlq.quarantine(b"zero", b"p", OUTAGE).unwrap();
    clock.advance(ms(5));
    dlq.quarantine(b"five", b"p", OUTAGE).unwrap();
    let h = dlq.health_over(Duration::MAX, Duration::MAX).unwrap();
    assert_eq!((h.arrivals_recent, h.arrivals_baseline), (2, 0));
    let h = dlq.health_over(ms(1), Duration::MAX).unwrap();
    assert_eq!((h.arrivals_recent, h.arrivals_baseline), (1, 1));
    clock.set(12);
    let h = dlq.health_over(ms(100), ms(100)).unwrap();
    assert_eq!((h.arrivals_recent, h.arrivals_baseline), (1, 0));
}
