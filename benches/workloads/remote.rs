//! What the peers behind a loopback socket (Redis, NATS JetStream) share: finding
//! their server program and starting it on a free port, the claim loop over one
//! connection (one request a key, `depth` in flight), the timed phase that drives one
//! connection a thread through a part of the keys, and the measurement of a child.

use std::ffi::OsStr;
use std::net::{Ipv4Addr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use super::{ChildResult, Key};

/// A server the child started, to which each worker thread opens its own connection.
pub(crate) trait Remote: Sync {
    /// A client connection.
    type Conn: Claimer + Send;
    /// Opens a new connection.
    fn connect(&self) -> std::io::Result<Self::Conn>;
    /// The server's memory for what it stores, in bytes, asked through `admin`.
    fn memory(&self, admin: &mut Self::Conn) -> std::io::Result<isize>;
    /// How many keys the server holds, asked through `admin`.
    fn resident(&self, admin: &mut Self::Conn) -> std::io::Result<isize>;
    /// The server process's resident set size in bytes.
    fn rss(&self) -> isize;
}

/// A connection that claims keys: one request a key, answered in order.
pub(crate) trait Claimer {
    /// Appends the request that claims `key` to the output buffer.
    fn push_claim(&mut self, key: &[u8]);
    /// Sends what the output buffer holds.
    fn flush(&mut self) -> std::io::Result<()>;
    /// Reads the next claim's answer: whether the key was taken (it was new).
    fn read_taken(&mut self) -> std::io::Result<bool>;

    /// Claims `keys` with `depth` requests in flight (1: one at a time). Returns how
    /// many answers were not `want_taken`.
    fn claim(&mut self, keys: &[Key], depth: usize, want_taken: bool) -> std::io::Result<u64> {
        let mut wrong = 0u64;
        for batch in keys.chunks(depth.max(1)) {
            for k in batch {
                self.push_claim(k);
            }
            self.flush()?;
            for _ in batch {
                if self.read_taken()? != want_taken {
                    wrong += 1;
                }
            }
        }
        Ok(wrong)
    }
}

/// Depth of the untimed loads (the part of the keys outside the timed sample).
/// Deep, because at 64 in flight loading a million keys took most of a networked
/// child's time (Redis: a child of W1 and W2 at 1 M keys ran 13.4 s at 64, 6.9 s at
/// 1,024). The servers queue their answers while the client writes, so the depth
/// cannot stall the connection.
pub(crate) const LOAD_DEPTH: usize = 1024;

/// A loopback port that was free a moment ago.
fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

/// Whether the server program `bin` runs from `PATH` (`bin --version` succeeds).
pub(crate) fn available(bin: &str) -> bool {
    Command::new(bin)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Spawns the server program `bin` with `args`, its output discarded.
pub(crate) fn spawn<I, A>(bin: &str, args: I) -> Result<Child, String>
where
    I: IntoIterator<Item = A>,
    A: AsRef<OsStr>,
{
    Command::new(bin)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {bin}: {e}"))
}

/// How long a new server may take to serve.
const READY_WITHIN: Duration = Duration::from_secs(10);

/// Polls `ready` every 20 ms until it succeeds. Fails if the server `child` (the
/// program `bin`) exits first, or with `ready`'s last error once [`READY_WITHIN`]
/// has passed.
pub(crate) fn wait_ready(
    child: &mut Child,
    bin: &str,
    mut ready: impl FnMut() -> Result<(), String>,
) -> Result<(), String> {
    let deadline = Instant::now() + READY_WITHIN;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("{bin} exited at start ({status})"));
        }
        match ready() {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() > deadline => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Starts a server with `start_on` (which spawns `bin` on the port it is given and
/// waits until it serves) on a free loopback port. A few attempts: another process
/// may take the port between the probe and the server's bind.
pub(crate) fn start_on_free_port<S>(
    bin: &str,
    mut start_on: impl FnMut(u16) -> Result<S, String>,
) -> Result<S, String> {
    let mut last = String::new();
    for _ in 0..5 {
        let port = free_port().map_err(|e| format!("no free loopback port: {e}"))?;
        match start_on(port) {
            Ok(server) => return Ok(server),
            Err(e) => last = e,
        }
    }
    Err(format!("{bin} did not come up: {last}"))
}

/// How long a thread's timed sample may run: a thread stops timing at the first
/// piece of [`TIMED_PIECE`] keys that ends past it, and sends the rest of its part
/// untimed. One request at a time over a slow loopback (seen: 120 us a round trip)
/// would otherwise take 12 s a phase for a 100,000-claim sample.
pub(crate) const TIMED_MAX: Duration = Duration::from_secs(2);

/// Keys a thread claims between two looks at the clock in its timed sample (a
/// multiple of the pipelined depth).
pub(crate) const TIMED_PIECE: usize = 1024;

/// Claims the keys of `sample` in pieces of [`TIMED_PIECE`] until they are all done
/// or `budget` has passed since `t0` (at least one piece). Returns how many keys
/// were claimed, and how many answers were not `want_taken`.
pub(crate) fn claim_timed<C: Claimer>(
    conn: &mut C,
    sample: &[Key],
    depth: usize,
    want_taken: bool,
    t0: Instant,
    budget: Duration,
) -> (usize, u64) {
    let (mut claimed, mut wrong) = (0, 0);
    for piece in sample.chunks(TIMED_PIECE) {
        wrong += conn.claim(piece, depth, want_taken).expect("claims");
        claimed += piece.len();
        if t0.elapsed() >= budget {
            break;
        }
    }
    (claimed, wrong)
}

/// Runs `claim` for each thread's part of `keys`: the first `timed` keys of the whole
/// (split alike), or as many of them as each thread claims within [`TIMED_MAX`], are
/// timed from the first thread's start to the last one's end of its timed keys; with `rest`, the other keys follow
/// untimed at [`LOAD_DEPTH`]. Returns (timed seconds, timed keys, wrong answers).
fn phase<R: Remote>(
    server: &R,
    keys: &[Key],
    threads: usize,
    timed: usize,
    depth: usize,
    want_taken: bool,
    rest: bool,
) -> (f64, usize, u64) {
    let parts = super::report::parts(keys.len(), threads);
    let timed_part = timed.div_ceil(threads.max(1));
    let start = Barrier::new(parts.len() + 1);
    let done = Barrier::new(parts.len() + 1);
    std::thread::scope(|s| {
        let workers: Vec<_> = parts
            .into_iter()
            .map(|range| {
                let chunk = &keys[range];
                let (start, done) = (&start, &done);
                let mut conn = server.connect().expect("connect to the server");
                s.spawn(move || {
                    let sample = &chunk[..timed_part.min(chunk.len())];
                    start.wait();
                    let began = Instant::now();
                    let (claimed, mut wrong) =
                        claim_timed(&mut conn, sample, depth, want_taken, began, TIMED_MAX);
                    let ended = Instant::now();
                    done.wait();
                    if rest {
                        wrong += conn
                            .claim(&chunk[claimed..], LOAD_DEPTH, want_taken)
                            .expect("untimed claims");
                    }
                    (claimed, wrong, began, ended)
                })
            })
            .collect();
        start.wait();
        done.wait();
        // Timed by the workers, first start to last end (see `run_split`).
        let (mut n, mut wrong, mut began, mut ended) = (0, 0, None::<Instant>, None::<Instant>);
        for w in workers {
            let (a, b, s, e) = w.join().expect("worker");
            n += a;
            wrong += b;
            began = Some(began.map_or(s, |t| t.min(s)));
            ended = Some(ended.map_or(e, |t| t.max(e)));
        }
        let secs = match (began, ended) {
            (Some(b), Some(e)) => (e - b).as_secs_f64(),
            _ => 0.0,
        };
        (secs, n, wrong)
    })
}

/// One measurement of a networked peer, on a server `start` starts: W1 (fresh keys,
/// each must be taken), then, if `w2`, W2 over the same keys (each claim must find
/// the key). At most `sample` claims are timed (the first ones of each thread's
/// part), and no more than a thread makes in [`TIMED_MAX`]; W1 sends the rest
/// pipelined, untimed, so that memory is measured over all of `keys`. W2 claims its
/// timed sample only: nothing is measured after it, and the rest of the keys would
/// take longer than the sample (with JetStream, some 40 % of a child's time).
pub(crate) fn measure<R: Remote>(
    start: fn() -> Result<R, String>,
    keys: &[Key],
    w2: bool,
    threads: usize,
    depth: usize,
    sample: usize,
) -> ChildResult {
    let server = start().unwrap_or_else(|e| panic!("{e}"));
    let mut admin = server.connect().expect("connect to the server");
    let mem0 = server.memory(&mut admin).expect("the server's memory");
    let rss0 = server.rss();
    let timed = sample.min(keys.len());
    let (secs, n, failures) = phase(&server, keys, threads, timed, depth, true, true);
    let mem = server.memory(&mut admin).expect("the server's memory");
    let rss = server.rss() - rss0;
    let resident = server.resident(&mut admin).expect("the keys held").max(1);
    // The parent divides by N: times are scaled to N keys from the timed sample.
    let scaled = |secs: f64, n: usize| secs * keys.len() as f64 / n.max(1) as f64;
    let dup = w2.then(|| {
        let (dup_secs, dup_n, dup) = phase(&server, keys, threads, timed, depth, false, false);
        // A key the fill could not take cannot answer duplicate either: count both.
        (scaled(dup_secs, dup_n), failures.max(dup))
    });
    drop(admin);
    drop(server);
    // Memory totals scaled to N keys from the per-key figures over the keys held.
    let scale = |bytes: isize| bytes * keys.len() as isize / resident;
    ChildResult {
        secs: scaled(secs, n),
        failures,
        heap: scale(mem - mem0),
        rss: scale(rss),
        own: None,
        dup,
        dup_shuffled: None,
        dup_one: None,
        fill_cpu: None,
    }
}
