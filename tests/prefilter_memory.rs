//! What an open reads of a saved prefilter: never more than a filter of the
//! namespace's settings saves. A longer file (one grown at rest, a sparse one) is
//! not read, and the filter is rebuilt from the durable tier.
//!
//! Measured by this test binary's allocator, which counts the bytes each thread has
//! allocated and not freed, and their peak: the open sets up the prefilter on the
//! thread that builds the engine.

#![cfg(all(feature = "durable", not(idem_loom)))]

mod util;

use idem::{Engine, ManualClock};
use util::per_thread::peak_growth;
use util::*;

#[global_allocator]
static ALLOCATOR: util::Counting = util::Counting(util::per_thread::count);

fn open(dir: &TempDir, clock: &ManualClock) -> Engine {
    Engine::builder()
        // (The hot tier's memory made as keys arrive: what the open holds at its
        // peak is then the prefilter's.)
        .namespace("ns", small().expected_keys(1_000).preallocate(false))
        .clock(clock.clone())
        .maintenance_interval(None)
        .durable(dir.path())
        .build()
        .expect("opening the durable engine")
}

#[test]
fn a_saved_prefilter_longer_than_any_of_its_settings_is_not_read_but_rebuilt() {
    const LEN: u64 = 256 << 20;
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    {
        let engine = open(&dir, &clock);
        let ns = engine.namespace("ns").unwrap();
        acquire(&ns, b"k").complete().unwrap();
        // A clean shutdown saves the filter, a few kilobytes.
    }
    let saved: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("idem-prefilter-"))
        })
        .collect();
    assert_eq!(saved.len(), 1);
    // Sparse: 256 MiB long, nothing on disk. Before, the open read all of it.
    std::fs::File::options()
        .write(true)
        .open(&saved[0])
        .unwrap()
        .set_len(LEN)
        .unwrap();
    let (engine, grew) = peak_growth(|| open(&dir, &clock));
    assert!(
        grew < (LEN / 8) as isize,
        "the open held {grew} bytes at its peak"
    );
    let s = engine.stats();
    assert_eq!((s.prefilter_loads, s.prefilter_rebuilds), (0, 1), "{s:?}");
    assert!(engine
        .namespace("ns")
        .unwrap()
        .claim(b"k")
        .unwrap()
        .is_duplicate());
}
