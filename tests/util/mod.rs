//! Shared helpers for the integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use idem::{Claim, ClaimGuard, Engine, ManualClock, Namespace, NamespaceConfig};

/// Start of the manual clock in every test: an arbitrary wall-clock time.
pub const T0: u64 = 1_700_000_000_000;

/// An engine with one namespace "ns" on a manual clock, with no maintenance thread
/// (tests run maintenance themselves, so counters are deterministic).
pub fn engine_with(cfg: NamespaceConfig) -> (Engine, Namespace, ManualClock) {
    let clock = ManualClock::new(T0);
    let (engine, ns) = engine_on(cfg, clock.clone());
    (engine, ns, clock)
}

/// As [`engine_with`], on `clock`.
pub fn engine_on(cfg: NamespaceConfig, clock: impl idem::Clock) -> (Engine, Namespace) {
    let engine = Engine::builder()
        .namespace("ns", cfg)
        .clock(clock)
        .maintenance_interval(None)
        .build()
        .expect("valid configuration");
    let ns = engine.namespace("ns").expect("configured namespace");
    (engine, ns)
}

/// A durable engine on the database in `dir` with one namespace "ns" of `cfg`, on
/// `clock`, with no maintenance thread.
#[cfg(feature = "durable")]
pub fn durable_on(dir: &Path, cfg: NamespaceConfig, clock: &ManualClock) -> (Engine, Namespace) {
    let engine = Engine::builder()
        .namespace("ns", cfg)
        .clock(clock.clone())
        .maintenance_interval(None)
        .durable(dir)
        .build()
        .expect("opening the durable engine");
    let ns = engine.namespace("ns").expect("configured namespace");
    (engine, ns)
}

/// Claims `key`, which must be acquired.
pub fn acquire(ns: &Namespace, key: &[u8]) -> ClaimGuard {
    match ns.claim(key) {
        Ok(Claim::Acquired(g)) => g,
        other => panic!(
            "{}: expected Acquired, got {other:?}",
            String::from_utf8_lossy(key)
        ),
    }
}

/// Short-lived defaults used across tests: TTL 60 s, lease 5 s.
pub fn small() -> NamespaceConfig {
    NamespaceConfig::new()
        .ttl(Duration::from_secs(60))
        .lease(Duration::from_secs(5))
}

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

pub fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// The benchmark key format of WORKLOAD.md.
pub fn key(i: u64) -> String {
    format!("ord-{i:016x}")
}

/// A fresh, empty directory under the system's temporary directory, removed (with
/// everything in it) when dropped.
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    pub fn new() -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let path = std::env::temp_dir().join(format!(
            "idem-test-{}-{}-{nanos}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir(&path).expect("creating a fresh temporary directory");
        TempDir { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// xorshift64: a fixed seed gives the same random sequences on every run and
/// platform (the model checks draw their operations from it).
pub struct XorShift(u64);

impl XorShift {
    /// A generator from `seed` (0 is taken as 1: xorshift never leaves 0).
    pub fn new(seed: u64) -> Self {
        XorShift(seed.max(1))
    }

    /// The next 64 bits.
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// One byte.
    pub fn byte(&mut self) -> u8 {
        (self.next() >> 24) as u8
    }

    /// `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.byte()).collect()
    }
}

/// SIGKILLs process `pid` if it is still running `limit` after it was armed, unless
/// dropped first. A test that reads a child's output until the child prints
/// something then fails (the output ends) instead of hanging when the child never
/// does.
pub struct Watchdog(std::sync::mpsc::Sender<()>);

impl Watchdog {
    pub fn arm(pid: u32, limit: Duration) -> Self {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            // Dropped (disarmed) is `Disconnected`: only a timeout kills.
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(limit) {
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
        });
        Watchdog(tx)
    }
}

/// How long a child of a crash test may run before its watchdog kills it.
pub const CHILD_LIMIT: Duration = Duration::from_secs(300);

/// Asserts that `status` is that of a process ended by SIGKILL.
#[cfg(unix)]
pub fn assert_killed(status: std::process::ExitStatus) {
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(9), "ended by SIGKILL: {status:?}");
}

/// The system allocator, telling `hook` of every change in the bytes it holds
/// (positive for an allocation, negative for a free), on the thread that made it.
/// A test binary that measures memory installs one as its global allocator:
/// `#[global_allocator] static A: util::Counting = util::Counting(count);`.
pub struct Counting(pub fn(isize));

// SAFETY: every call is passed on to the system allocator unchanged; the hook only
// counts.
unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        let p = unsafe { std::alloc::System.alloc(layout) };
        if !p.is_null() {
            (self.0)(layout.size() as isize);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        let p = unsafe { std::alloc::System.alloc_zeroed(layout) };
        if !p.is_null() {
            (self.0)(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        unsafe { std::alloc::System.dealloc(ptr, layout) };
        (self.0)(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { std::alloc::System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            (self.0)(new_size as isize - layout.size() as isize);
        }
        p
    }
}

/// Per-thread counts for [`Counting`]: each thread's live bytes and their peak, so
/// that tests running beside one another do not disturb each other's figures. A test
/// binary installs `util::Counting(util::per_thread::count)` and measures with
/// [`per_thread::peak_growth`].
pub mod per_thread {
    use std::cell::Cell;

    thread_local! {
        static LIVE: Cell<isize> = const { Cell::new(0) };
        static PEAK: Cell<isize> = const { Cell::new(0) };
    }

    /// Counts this thread's live bytes and their peak (the allocator's hook).
    pub fn count(delta: isize) {
        // (`try_with`: a thread being torn down has no counters left; nothing to count.)
        let _ = LIVE.try_with(|live| {
            let now = live.get() + delta;
            live.set(now);
            let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
        });
    }

    /// `f()`, and how far this thread's live memory rose above where it started
    /// while `f` ran (what it returns included).
    pub fn peak_growth<T>(f: impl FnOnce() -> T) -> (T, isize) {
        let start = LIVE.with(Cell::get);
        PEAK.with(|p| p.set(start));
        let out = f();
        (out, PEAK.with(Cell::get) - start)
    }
}

/// A clock whose first reading is `first_ms` and every later one `then`'s: a wall
/// clock stepped back by `first_ms - then` between its first two readings (for an
/// engine, while it is being built).
pub struct BackAfterFirstRead {
    pub first_ms: u64,
    pub read: std::sync::atomic::AtomicBool,
    pub then: ManualClock,
}

impl BackAfterFirstRead {
    pub fn new(first_ms: u64, then: ManualClock) -> Self {
        BackAfterFirstRead {
            first_ms,
            read: std::sync::atomic::AtomicBool::new(false),
            then,
        }
    }
}

impl idem::Clock for BackAfterFirstRead {
    fn now_ms(&self) -> u64 {
        if self.read.swap(true, Ordering::SeqCst) {
            idem::Clock::now_ms(&self.then)
        } else {
            self.first_ms
        }
    }
}
