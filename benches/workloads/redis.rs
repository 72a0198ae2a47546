//! The Redis peer: `SET key 1 NX EX 3600` against a `redis-server` that the child
//! starts on a free loopback port (no persistence) and stops again.
//!
//! The client speaks RESP2 over a plain `TcpStream`: a claim is one `SET ... NX EX`
//! command, answered `+OK` (taken: a fresh key) or a nil bulk string (the key exists: a
//! duplicate). Each worker thread has its own connection. "One at a time" sends a
//! command and waits for its reply before the next; "pipelined" writes a batch of
//! commands and then reads their replies.
//!
//! Memory per key is the server's `used_memory` (from `INFO memory`) after minus
//! before, divided by `DBSIZE`; the RSS column is the server process's RSS delta.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use super::{ChildResult, Key};

/// Whether `redis-server` can be started from `PATH`.
pub(crate) fn available() -> bool {
    Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A `redis-server` child on a loopback port, stopped (and reaped) on drop.
pub(crate) struct Server {
    child: Child,
    port: u16,
}

impl Server {
    /// Starts a server with no persistence on a free loopback port and waits until it
    /// answers `PING`.
    pub(crate) fn start() -> Result<Server, String> {
        // A few attempts: another process may take the port between our probe and the
        // server's bind.
        let mut last = String::new();
        for _ in 0..5 {
            let port = free_port().map_err(|e| format!("no free loopback port: {e}"))?;
            let child = Command::new("redis-server")
                .args([
                    "--port",
                    &port.to_string(),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--daemonize",
                    "no",
                    "--loglevel",
                    "warning",
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("cannot start redis-server: {e}"))?;
            let mut server = Server { child, port };
            match server.wait_ready(Duration::from_secs(10)) {
                Ok(()) => return Ok(server),
                Err(e) => last = e,
            }
            drop(server);
        }
        Err(format!("redis-server did not come up: {last}"))
    }

    fn wait_ready(&mut self, within: Duration) -> Result<(), String> {
        let deadline = Instant::now() + within;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("redis-server exited at start ({status})"));
            }
            if let Ok(mut c) = self.connect() {
                if let Ok(Reply::Simple(s)) = c.call(&[b"PING"]) {
                    if s == "PONG" {
                        return Ok(());
                    }
                }
            }
            if Instant::now() > deadline {
                return Err("no answer to PING".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A new client connection.
    pub(crate) fn connect(&self) -> std::io::Result<Conn> {
        Conn::new(TcpStream::connect((Ipv4Addr::LOCALHOST, self.port))?)
    }

    /// The server process's resident set size in bytes.
    pub(crate) fn rss(&self) -> isize {
        super::rss_of(&format!("/proc/{}/statm", self.child.id()))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(mut c) = self.connect() {
            // The server closes the connection instead of replying.
            let _ = c.send(&[b"SHUTDOWN", b"NOSAVE"]);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

/// One RESP2 reply, as far as this client needs to tell them apart.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Reply {
    Simple(String),
    Error(String),
    Integer(i64),
    Bulk(Vec<u8>),
    Nil,
    Array(usize),
}

/// A client connection: RESP2 requests out, replies in.
pub(crate) struct Conn {
    out: TcpStream,
    inp: BufReader<TcpStream>,
    buf: Vec<u8>,
    line: Vec<u8>,
}

impl Conn {
    fn new(stream: TcpStream) -> std::io::Result<Conn> {
        stream.set_nodelay(true)?;
        Ok(Conn {
            inp: BufReader::with_capacity(64 * 1024, stream.try_clone()?),
            out: stream,
            buf: Vec::with_capacity(64 * 1024),
            line: Vec::with_capacity(64),
        })
    }

    /// Appends one command (an array of bulk strings) to the output buffer.
    fn push(&mut self, args: &[&[u8]]) {
        let b = &mut self.buf;
        let _ = write!(b, "*{}\r\n", args.len());
        for a in args {
            let _ = write!(b, "${}\r\n", a.len());
            b.extend_from_slice(a);
            b.extend_from_slice(b"\r\n");
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.write_all(&self.buf)?;
        self.buf.clear();
        Ok(())
    }

    fn send(&mut self, args: &[&[u8]]) -> std::io::Result<()> {
        self.push(args);
        self.flush()
    }

    /// Sends one command and reads its reply.
    pub(crate) fn call(&mut self, args: &[&[u8]]) -> std::io::Result<Reply> {
        self.send(args)?;
        self.read()
    }

    /// Reads one reply (an array reports only its length; this client never needs
    /// the elements).
    pub(crate) fn read(&mut self) -> std::io::Result<Reply> {
        self.line.clear();
        self.inp.read_until(b'\n', &mut self.line)?;
        let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, "bad RESP reply");
        if self.line.len() < 3 || !self.line.ends_with(b"\r\n") {
            return Err(bad());
        }
        let body = std::str::from_utf8(&self.line[1..self.line.len() - 2]).map_err(|_| bad())?;
        Ok(match self.line[0] {
            b'+' => Reply::Simple(body.to_owned()),
            b'-' => Reply::Error(body.to_owned()),
            b':' => Reply::Integer(body.parse().map_err(|_| bad())?),
            b'*' => Reply::Array(body.parse().unwrap_or(0)),
            b'$' => {
                let len: i64 = body.parse().map_err(|_| bad())?;
                if len < 0 {
                    Reply::Nil
                } else {
                    let mut v = vec![0u8; len as usize + 2];
                    self.inp.read_exact(&mut v)?;
                    v.truncate(len as usize);
                    Reply::Bulk(v)
                }
            }
            _ => return Err(bad()),
        })
    }

    /// `used_memory` from `INFO memory`, in bytes.
    pub(crate) fn used_memory(&mut self) -> std::io::Result<isize> {
        let Reply::Bulk(info) = self.call(&[b"INFO", b"memory"])? else {
            return Err(std::io::Error::other("INFO did not answer a bulk string"));
        };
        String::from_utf8_lossy(&info)
            .lines()
            .find_map(|l| l.strip_prefix("used_memory:")?.trim().parse().ok())
            .ok_or_else(|| std::io::Error::other("no used_memory in INFO memory"))
    }

    /// `DBSIZE`.
    pub(crate) fn dbsize(&mut self) -> std::io::Result<i64> {
        match self.call(&[b"DBSIZE"])? {
            Reply::Integer(n) => Ok(n),
            other => Err(std::io::Error::other(format!("DBSIZE answered {other:?}"))),
        }
    }

    /// Claims `keys` with `SET key 1 NX EX 3600`, `depth` commands in flight (1: one
    /// at a time). Returns how many answers were not `want_taken` (taken = `+OK`,
    /// not taken = nil).
    pub(crate) fn claim(
        &mut self,
        keys: &[Key],
        depth: usize,
        want_taken: bool,
    ) -> std::io::Result<u64> {
        let mut wrong = 0u64;
        for batch in keys.chunks(depth.max(1)) {
            for k in batch {
                self.push(&[b"SET", k, b"1", b"NX", b"EX", b"3600"]);
            }
            self.flush()?;
            for _ in batch {
                let taken = match self.read()? {
                    Reply::Simple(s) if s == "OK" => true,
                    Reply::Nil => false,
                    Reply::Error(e) => return Err(std::io::Error::other(e)),
                    other => return Err(std::io::Error::other(format!("SET answered {other:?}"))),
                };
                if taken != want_taken {
                    wrong += 1;
                }
            }
        }
        Ok(wrong)
    }
}

/// Depth of the untimed loads (the part of the keys outside the timed sample, and
/// W2's fill).
const LOAD_DEPTH: usize = 64;

/// Runs `claim` for each thread's part of `keys`, the first `timed` keys of the whole
/// (split alike) timed from a common start to the last join, the rest untimed at
/// depth 64. Returns (timed seconds, timed keys, wrong answers).
fn phase(
    server: &Server,
    keys: &[Key],
    threads: usize,
    timed: usize,
    depth: usize,
    want_taken: bool,
) -> (f64, usize, u64) {
    let part = keys.len().div_ceil(threads);
    let timed_part = timed.div_ceil(threads).min(part);
    let start = Barrier::new(threads + 1);
    let done = Barrier::new(threads + 1);
    std::thread::scope(|s| {
        let workers: Vec<_> = keys
            .chunks(part)
            .map(|chunk| {
                let (start, done) = (&start, &done);
                let mut conn = server.connect().expect("connect to redis-server");
                s.spawn(move || {
                    let (sample, rest) = chunk.split_at(timed_part.min(chunk.len()));
                    start.wait();
                    let mut wrong = conn.claim(sample, depth, want_taken).expect("claims");
                    done.wait();
                    wrong += conn
                        .claim(rest, LOAD_DEPTH, want_taken)
                        .expect("untimed claims");
                    (sample.len(), wrong)
                })
            })
            .collect();
        start.wait();
        let t0 = Instant::now();
        done.wait();
        let secs = t0.elapsed().as_secs_f64();
        let (mut n, mut wrong) = (0, 0);
        for w in workers {
            let (a, b) = w.join().expect("worker");
            n += a;
            wrong += b;
        }
        (secs, n, wrong)
    })
}

/// One measurement of the Redis peer: W1 (fresh keys, each must be taken), then, if
/// `w2`, W2 over the same keys (each claim must find the key).
/// At most `sample` claims are timed (the first ones of each thread's part); the rest
/// are sent pipelined, untimed, so that memory is measured over all of `keys`.
pub(crate) fn measure(
    keys: &[Key],
    w2: bool,
    threads: usize,
    depth: usize,
    sample: usize,
) -> ChildResult {
    let server = Server::start().unwrap_or_else(|e| panic!("{e}"));
    let mut admin = server.connect().expect("connect to redis-server");
    let mem0 = admin.used_memory().expect("INFO memory");
    let rss0 = server.rss();
    let timed = sample.min(keys.len());
    let (secs, n, failures) = phase(&server, keys, threads, timed, depth, true);
    let mem = admin.used_memory().expect("INFO memory");
    let rss = server.rss() - rss0;
    let resident = admin.dbsize().expect("DBSIZE").max(1) as isize;
    // The parent divides by N: times are scaled to N keys from the timed sample.
    let scaled = |secs: f64, n: usize| secs * keys.len() as f64 / n.max(1) as f64;
    let dup = w2.then(|| {
        let (dup_secs, dup_n, dup) = phase(&server, keys, threads, timed, depth, false);
        // A key the fill could not take cannot answer duplicate either: count both.
        (scaled(dup_secs, dup_n), failures.max(dup))
    });
    drop(admin);
    drop(server);
    // Memory totals scaled to N keys from the per-key figures over DBSIZE.
    let scale = |bytes: isize| bytes * keys.len() as isize / resident;
    ChildResult {
        secs: scaled(secs, n),
        failures,
        heap: scale(mem - mem0),
        rss: scale(rss),
        own: None,
        dup,
        dup_shuffled: None,
    }
}
