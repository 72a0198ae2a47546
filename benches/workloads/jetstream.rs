//! The NATS JetStream peer: its deduplication window, against a `nats-server` that
//! the child starts with JetStream on a free loopback port and stops again.
//!
//! The stream `W` (subject `w`) keeps its messages in memory and deduplicates over a
//! window of 3600 s, the workloads' TTL. A claim is a publish of one byte to `w` with
//! the key as its `Nats-Msg-Id` header, and the server's acknowledgement is the
//! answer: `{"stream":"W","seq":…}` for a new key (taken), the same with
//! `"duplicate": true` for a key seen within the window. This is how a producer
//! relies on JetStream for exactly-once publication; unlike a claim it has no lease
//! and no in-progress state, and the message itself is stored.
//!
//! The client speaks the NATS text protocol over a plain `TcpStream`: `CONNECT` with
//! headers on, one `SUB` to an inbox for the acknowledgements, `HPUB` per claim. "One
//! at a time" waits for each acknowledgement before the next publish; "pipelined"
//! writes a batch of publishes and then reads their acknowledgements.
//!
//! NATS reports no heap figure through the protocol, so memory per key is the server
//! process's RSS after minus before, divided by the stream's message count, in both
//! memory columns.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::remote::{self, Claimer, Remote};

/// The stream's configuration: memory storage, a deduplication window of the TTL
/// (in nanoseconds), nothing else limited.
const STREAM_CONFIG: &str =
    r#"{"name":"W","subjects":["w"],"storage":"memory","duplicate_window":3600000000000}"#;

/// The version line of `nats-server`, if it runs.
pub(crate) fn version() -> Option<String> {
    let out = Command::new("nats-server").arg("--version").output().ok()?;
    Some(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// A client connection to the server on loopback `port`.
fn connect(port: u16) -> std::io::Result<Conn> {
    Conn::new(TcpStream::connect((Ipv4Addr::LOCALHOST, port))?)
}

/// A `nats-server` child with JetStream on a loopback port, its store directory
/// removed and the process reaped on drop.
pub(crate) struct Server {
    child: Child,
    port: u16,
    store: PathBuf,
}

impl Server {
    /// Starts a server on a free loopback port and waits until it has created the
    /// stream.
    pub(crate) fn start() -> Result<Server, String> {
        remote::start_on_free_port("nats-server", |port| {
            let store =
                std::env::temp_dir().join(format!("idem-bench-js-{}-{port}", std::process::id()));
            let port_arg = port.to_string();
            let args: [&OsStr; 7] = [
                "-a".as_ref(),
                "127.0.0.1".as_ref(),
                "-p".as_ref(),
                port_arg.as_ref(),
                "-js".as_ref(),
                "-sd".as_ref(),
                store.as_os_str(),
            ];
            let child = remote::spawn("nats-server", args)?;
            let mut server = Server { child, port, store };
            // Ready once the stream exists (creating it again is a no-op).
            remote::wait_ready(&mut server.child, "nats-server", || {
                let reply = connect(port)
                    .and_then(|mut c| {
                        c.request("$JS.API.STREAM.CREATE.W", STREAM_CONFIG.as_bytes())
                    })
                    .map_err(|e| e.to_string())?;
                if contains(&reply, b"\"error\"") {
                    return Err(String::from_utf8_lossy(&reply).into_owned());
                }
                Ok(())
            })?;
            Ok(server)
        })
    }

    /// A new client connection.
    pub(crate) fn connect(&self) -> std::io::Result<Conn> {
        connect(self.port)
    }
}

impl Remote for Server {
    type Conn = Conn;

    fn connect(&self) -> std::io::Result<Conn> {
        Server::connect(self)
    }

    fn memory(&self, _admin: &mut Conn) -> std::io::Result<isize> {
        Ok(self.rss())
    }

    fn resident(&self, admin: &mut Conn) -> std::io::Result<isize> {
        admin.messages()
    }

    fn rss(&self) -> isize {
        super::rss_of(&format!("/proc/{}/statm", self.child.id()))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // The stream is in memory: nothing is lost by not shutting down cleanly.
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.store);
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn bad(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned())
}

/// A client connection: publishes out, the acknowledgements (to one inbox) in.
pub(crate) struct Conn {
    out: TcpStream,
    inp: BufReader<TcpStream>,
    buf: Vec<u8>,
    line: Vec<u8>,
    body: Vec<u8>,
    /// This connection's own reply subject prefix: the server delivers a reply to
    /// every connection subscribed to its subject, so no two may share one.
    inbox: String,
}

/// Numbers the connections of this process, for their inboxes.
static CONNECTIONS: AtomicUsize = AtomicUsize::new(0);

impl Conn {
    /// Reads the server's `INFO`, sends `CONNECT` and the inbox's `SUB`, and waits for
    /// the `PONG` that says both were taken.
    pub(crate) fn new(stream: TcpStream) -> std::io::Result<Conn> {
        stream.set_nodelay(true)?;
        let mut c = Conn {
            inp: BufReader::with_capacity(64 * 1024, stream.try_clone()?),
            out: stream,
            buf: Vec::with_capacity(64 * 1024),
            line: Vec::with_capacity(128),
            body: Vec::with_capacity(128),
            inbox: format!(
                "_INBOX.idem{}n{}",
                std::process::id(),
                CONNECTIONS.fetch_add(1, Ordering::Relaxed)
            ),
        };
        c.read_line()?;
        if !c.line.starts_with(b"INFO ") {
            return Err(bad("no INFO from nats-server"));
        }
        c.buf.extend_from_slice(
            b"CONNECT {\"verbose\":false,\"pedantic\":false,\"headers\":true,\"no_responders\":true}\r\n",
        );
        let _ = write!(c.buf, "SUB {}.* 1\r\nPING\r\n", c.inbox);
        c.flush()?;
        loop {
            c.read_line()?;
            match c.line.as_slice() {
                b"PONG\r\n" => return Ok(c),
                l if l.starts_with(b"-ERR") => {
                    return Err(std::io::Error::other(
                        String::from_utf8_lossy(l).into_owned(),
                    ))
                }
                _ => {}
            }
        }
    }

    fn read_line(&mut self) -> std::io::Result<()> {
        self.line.clear();
        if self.inp.read_until(b'\n', &mut self.line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.write_all(&self.buf)?;
        self.buf.clear();
        Ok(())
    }

    /// Reads the next message to the inbox into `body`, answering the server's
    /// `PING`s on the way.
    fn read_msg(&mut self) -> std::io::Result<()> {
        loop {
            self.read_line()?;
            let line = std::str::from_utf8(&self.line).map_err(|_| bad("not UTF-8"))?;
            if line == "PING\r\n" {
                self.out.write_all(b"PONG\r\n")?;
                continue;
            }
            if line.starts_with("+OK") {
                continue;
            }
            if line.starts_with("-ERR") {
                return Err(std::io::Error::other(line.trim_end().to_owned()));
            }
            if !line.starts_with("MSG ") {
                // HMSG: a status, such as 503 when no stream takes the subject.
                return Err(std::io::Error::other(format!(
                    "nats-server sent {}",
                    line.trim_end()
                )));
            }
            let size: usize = line
                .split_whitespace()
                .last()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| bad("a MSG line without a size"))?;
            self.body.resize(size + 2, 0);
            self.inp.read_exact(&mut self.body)?;
            self.body.truncate(size);
            return Ok(());
        }
    }

    /// Publishes `payload` to `subject` and returns the reply.
    fn request(&mut self, subject: &str, payload: &[u8]) -> std::io::Result<Vec<u8>> {
        let _ = write!(
            self.buf,
            "PUB {subject} {}.r {}\r\n",
            self.inbox,
            payload.len()
        );
        self.buf.extend_from_slice(payload);
        self.buf.extend_from_slice(b"\r\n");
        self.flush()?;
        self.read_msg()?;
        Ok(self.body.clone())
    }

    /// The stream's message count (`state.messages` of its info).
    pub(crate) fn messages(&mut self) -> std::io::Result<isize> {
        let info = self.request("$JS.API.STREAM.INFO.W", b"")?;
        let text = String::from_utf8_lossy(&info);
        text.split_once("\"state\":")
            .and_then(|(_, state)| state.split_once("\"messages\":"))
            .and_then(|(_, rest)| {
                let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                digits.parse().ok()
            })
            .ok_or_else(|| std::io::Error::other(format!("no message count in {text}")))
    }
}

impl Claimer for Conn {
    /// A publish of one byte to `w` with the key as its `Nats-Msg-Id`.
    fn push_claim(&mut self, key: &[u8]) {
        const HEAD: &[u8] = b"NATS/1.0\r\nNats-Msg-Id: ";
        let hdr = HEAD.len() + key.len() + 4;
        let b = &mut self.buf;
        let _ = write!(b, "HPUB w {}.a {hdr} {}\r\n", self.inbox, hdr + 1);
        b.extend_from_slice(HEAD);
        b.extend_from_slice(key);
        b.extend_from_slice(b"\r\n\r\n1\r\n");
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Conn::flush(self)
    }

    /// The acknowledgement: taken unless it says `"duplicate": true`.
    fn read_taken(&mut self) -> std::io::Result<bool> {
        self.read_msg()?;
        if contains(&self.body, b"\"error\"") || !contains(&self.body, b"\"seq\"") {
            return Err(std::io::Error::other(format!(
                "publish answered {}",
                String::from_utf8_lossy(&self.body)
            )));
        }
        Ok(!contains(&self.body, b"\"duplicate\""))
    }
}
