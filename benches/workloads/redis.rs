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
use std::net::{Ipv4Addr, TcpStream};
use std::process::Child;
use std::time::{Duration, Instant};

use super::remote::{self, Claimer, Remote};

/// A client connection to the server on loopback `port`.
fn connect(port: u16) -> std::io::Result<Conn> {
    Conn::new(TcpStream::connect((Ipv4Addr::LOCALHOST, port))?)
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
        remote::start_on_free_port("redis-server", |port| {
            let child = remote::spawn(
                "redis-server",
                [
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
                ],
            )?;
            let mut server = Server { child, port };
            remote::wait_ready(&mut server.child, "redis-server", || {
                match connect(port).and_then(|mut c| c.call(&[b"PING"])) {
                    Ok(Reply::Simple(s)) if s == "PONG" => Ok(()),
                    Ok(other) => Err(format!("PING answered {other:?}")),
                    Err(e) => Err(format!("no answer to PING: {e}")),
                }
            })?;
            Ok(server)
        })
    }

    /// A new client connection.
    pub(crate) fn connect(&self) -> std::io::Result<Conn> {
        connect(self.port)
    }

    /// The server process's resident set size in bytes.
    pub(crate) fn rss(&self) -> isize {
        super::rss_of(&format!("/proc/{}/statm", self.child.id()))
    }
}

impl Remote for Server {
    type Conn = Conn;

    fn connect(&self) -> std::io::Result<Conn> {
        Server::connect(self)
    }

    fn memory(&self, admin: &mut Conn) -> std::io::Result<isize> {
        admin.used_memory()
    }

    fn resident(&self, admin: &mut Conn) -> std::io::Result<isize> {
        admin.dbsize().map(|n| n as isize)
    }

    fn rss(&self) -> isize {
        Server::rss(self)
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
}

impl Claimer for Conn {
    /// `SET key 1 NX EX 3600`.
    fn push_claim(&mut self, key: &[u8]) {
        self.push(&[b"SET", key, b"1", b"NX", b"EX", b"3600"]);
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Conn::flush(self)
    }

    /// `+OK`: taken (a fresh key); a nil bulk string: the key exists.
    fn read_taken(&mut self) -> std::io::Result<bool> {
        match self.read()? {
            Reply::Simple(s) if s == "OK" => Ok(true),
            Reply::Nil => Ok(false),
            Reply::Error(e) => Err(std::io::Error::other(e)),
            other => Err(std::io::Error::other(format!("SET answered {other:?}"))),
        }
    }
}
