//! The JetStream peer's client (`benches/workloads/jetstream.rs`) against a stand-in
//! server that speaks the NATS protocol and deduplicates by `Nats-Msg-Id`, so that
//! the harness's JetStream figures count the answers the server gave.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};

// What the two peer modules need from the harness around them (`super::` there).
type Key = [u8; 20];

#[allow(dead_code)]
#[path = "../benches/workloads/child_result.rs"]
mod child_result;
#[allow(dead_code)]
#[path = "../benches/workloads/report.rs"]
mod report;
use child_result::ChildResult;

fn rss_of(_statm: &str) -> isize {
    0
}

#[allow(dead_code)]
#[path = "../benches/workloads/jetstream.rs"]
mod jetstream;
#[allow(dead_code)]
#[path = "../benches/workloads/remote.rs"]
mod remote;

use jetstream::Conn;
use remote::Claimer;

/// How the stand-in answers a publish.
#[derive(Clone, Copy)]
enum Mode {
    /// As JetStream does: `"duplicate": true` for an id seen before.
    Dedup,
    /// Every publish refused with a JetStream API error.
    Refuse,
}

/// Serves one connection: `INFO` first, `PONG` for `PING`, an acknowledgement for each
/// `HPUB`, the stream's info for `PUB $JS.API.STREAM.INFO.W`. Every seventh reply is
/// preceded by a `PING` of its own, which the client must answer.
fn serve(stream: TcpStream, mode: Mode) {
    stream.set_nodelay(true).unwrap();
    let mut out = stream.try_clone().unwrap();
    let mut inp = BufReader::new(stream);
    out.write_all(b"INFO {\"server_id\":\"stand-in\",\"headers\":true}\r\n")
        .unwrap();
    let (mut seen, mut seq, mut replies, mut pongs) = (HashSet::new(), 0u64, 0u64, 0u64);
    let mut line = String::new();
    loop {
        line.clear();
        if inp.read_line(&mut line).unwrap_or(0) == 0 {
            // The client hung up: it answered every PING it was sent.
            assert_eq!(pongs, replies / 7, "a PING went unanswered");
            return;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        let reply = match words.as_slice() {
            ["PING"] => {
                out.write_all(b"PONG\r\n").unwrap();
                continue;
            }
            ["PONG"] => {
                pongs += 1;
                continue;
            }
            ["HPUB", "w", reply, hdr, total] => {
                let (hdr, total): (usize, usize) = (hdr.parse().unwrap(), total.parse().unwrap());
                let mut body = vec![0u8; total + 2];
                inp.read_exact(&mut body).unwrap();
                let headers = String::from_utf8(body[..hdr].to_vec()).unwrap();
                assert!(headers.starts_with("NATS/1.0\r\n") && headers.ends_with("\r\n\r\n"));
                assert_eq!(&body[hdr..], b"1\r\n", "the payload is one byte");
                let id = headers
                    .lines()
                    .find_map(|l| l.strip_prefix("Nats-Msg-Id: "))
                    .expect("a Nats-Msg-Id header")
                    .to_owned();
                let ack = match mode {
                    Mode::Refuse => {
                        r#"{"error":{"code":503,"description":"no stream"}}"#.to_owned()
                    }
                    Mode::Dedup if seen.insert(id) => {
                        seq += 1;
                        format!(r#"{{"stream":"W", "seq":{seq}}}"#)
                    }
                    Mode::Dedup => format!(r#"{{"stream":"W", "seq":{seq},"duplicate": true}}"#),
                };
                (reply.to_string(), ack)
            }
            ["PUB", "$JS.API.STREAM.INFO.W", reply, "0"] => {
                let mut end = [0u8; 2];
                inp.read_exact(&mut end).unwrap();
                let info = format!(
                    r#"{{"config":{{"name":"W","max_msgs":-1}},"state":{{"messages":{},"bytes":0}}}}"#,
                    seen.len()
                );
                (reply.to_string(), info)
            }
            _ => continue, // CONNECT, SUB
        };
        replies += 1;
        if replies % 7 == 0 {
            out.write_all(b"PING\r\n").unwrap();
        }
        // The server pads the sid field; the client must take the size as the last word.
        write!(
            out,
            "MSG {} 1  {}\r\n{}\r\n",
            reply.0,
            reply.1.len(),
            reply.1
        )
        .unwrap();
    }
}

/// A client connected to a stand-in answering in `mode`, and the stand-in's thread.
fn connect(mode: Mode) -> (Conn, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || serve(listener.accept().unwrap().0, mode));
    let conn = Conn::new(TcpStream::connect(addr).unwrap()).expect("the handshake");
    (conn, server)
}

fn keys(range: std::ops::Range<u64>) -> Vec<Key> {
    range
        .map(|i| {
            let mut k = [0u8; 20];
            k.copy_from_slice(format!("ord-{i:016x}").as_bytes());
            k
        })
        .collect()
}

#[test]
fn fresh_keys_are_taken_and_their_replays_are_duplicates_at_any_depth() {
    let (mut c, server) = connect(Mode::Dedup);
    let first = keys(0..300);
    assert_eq!(
        c.claim(&first, 1, true).unwrap(),
        0,
        "all fresh, one at a time"
    );
    assert_eq!(
        c.claim(&keys(300..600), 64, true).unwrap(),
        0,
        "all fresh, pipelined"
    );
    assert_eq!(
        c.claim(&first, 64, false).unwrap(),
        0,
        "all duplicates, pipelined"
    );
    // Asked the other way round, every answer is counted wrong.
    assert_eq!(c.claim(&first[..100], 1, true).unwrap(), 100);
    // A batch with both: the new half is taken, the old half is not.
    let mixed: Vec<Key> = keys(550..650);
    assert_eq!(c.claim(&mixed, 64, true).unwrap(), 50);
    assert_eq!(c.messages().unwrap(), 650, "the stream's message count");
    drop(c);
    server.join().unwrap();
}

#[test]
fn a_refused_publish_is_an_error_not_an_answer() {
    let (mut c, server) = connect(Mode::Refuse);
    let err = c.claim(&keys(0..3), 1, true).unwrap_err();
    assert!(err.to_string().contains("no stream"), "{err}");
    drop(c);
    server.join().unwrap();
}

/// A claimer that takes every key it has not seen and counts what it was asked.
#[derive(Default)]
struct Counting {
    pending: Vec<Key>,
    answers: std::collections::VecDeque<bool>,
    seen: HashSet<Key>,
    asked: usize,
}

impl Claimer for Counting {
    fn push_claim(&mut self, key: &[u8]) {
        self.pending.push(key.try_into().expect("20-byte keys"));
    }
    fn flush(&mut self) -> std::io::Result<()> {
        for k in self.pending.drain(..) {
            self.asked += 1;
            self.answers.push_back(self.seen.insert(k));
        }
        Ok(())
    }
    fn read_taken(&mut self) -> std::io::Result<bool> {
        Ok(self.answers.pop_front().expect("an answer per request"))
    }
}

#[test]
fn a_timed_sample_stops_at_its_time_budget_and_counts_what_it_claimed() {
    use std::time::{Duration, Instant};
    let sample = keys(0..5_000);
    // A budget already spent: one piece is claimed, and its count returned.
    let mut c = Counting::default();
    let (claimed, wrong) =
        remote::claim_timed(&mut c, &sample, 1, true, Instant::now(), Duration::ZERO);
    assert_eq!((claimed, wrong), (remote::TIMED_PIECE, 0));
    assert_eq!(c.asked, remote::TIMED_PIECE);
    // A budget never reached: the whole sample, its wrong answers counted.
    let mut c = Counting::default();
    c.seen.extend(sample[..10].iter().copied());
    let (claimed, wrong) = remote::claim_timed(
        &mut c,
        &sample,
        64,
        true,
        Instant::now(),
        Duration::from_secs(3600),
    );
    assert_eq!((claimed, wrong), (5_000, 10));
    assert_eq!(c.asked, 5_000);
}

/// A server in this process: one set of keys shared by its connections, and a count
/// of the claims they made.
struct InProcess {
    seen: std::sync::Arc<std::sync::Mutex<HashSet<Key>>>,
    asked: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

/// A connection to [`InProcess`].
struct InProcessConn {
    seen: std::sync::Arc<std::sync::Mutex<HashSet<Key>>>,
    asked: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    pending: Vec<Key>,
    answers: std::collections::VecDeque<bool>,
}

impl Claimer for InProcessConn {
    fn push_claim(&mut self, key: &[u8]) {
        self.pending.push(key.try_into().expect("20-byte keys"));
    }
    fn flush(&mut self) -> std::io::Result<()> {
        let mut seen = self.seen.lock().unwrap();
        for k in self.pending.drain(..) {
            self.asked
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.answers.push_back(seen.insert(k));
        }
        Ok(())
    }
    fn read_taken(&mut self) -> std::io::Result<bool> {
        Ok(self.answers.pop_front().expect("an answer per request"))
    }
}

/// The claims made on the last [`InProcess`] server started, read when it is dropped
/// (`remote::measure` drops its server before it returns).
static LAST_SERVER_CLAIMS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl Drop for InProcess {
    fn drop(&mut self) {
        LAST_SERVER_CLAIMS.store(
            self.asked.load(std::sync::atomic::Ordering::Relaxed),
            std::sync::atomic::Ordering::Relaxed,
        );
    }
}

impl remote::Remote for InProcess {
    type Conn = InProcessConn;
    fn connect(&self) -> std::io::Result<InProcessConn> {
        Ok(InProcessConn {
            seen: self.seen.clone(),
            asked: self.asked.clone(),
            pending: Vec::new(),
            answers: Default::default(),
        })
    }
    fn memory(&self, _admin: &mut InProcessConn) -> std::io::Result<isize> {
        Ok(100 * self.seen.lock().unwrap().len() as isize)
    }
    fn resident(&self, _admin: &mut InProcessConn) -> std::io::Result<isize> {
        Ok(self.seen.lock().unwrap().len() as isize)
    }
    fn rss(&self) -> isize {
        0
    }
}

fn start_in_process() -> Result<InProcess, String> {
    Ok(InProcess {
        seen: Default::default(),
        asked: Default::default(),
    })
}

#[test]
fn a_networked_child_loads_every_key_in_w1_and_claims_only_its_sample_in_w2() {
    let all = keys(0..20_000);
    let sample = 2_000;
    let r = remote::measure(start_in_process, &all, true, 2, 64, sample);
    // W1 took every key (memory covers them all: 100 bytes a key held), W2 asked
    // for the sample only, each a duplicate.
    assert_eq!(r.failures, 0);
    assert_eq!(r.heap, 100 * all.len() as isize);
    let (_, w2_wrong) = r.dup.expect("W2 ran");
    assert_eq!(w2_wrong, 0);
    assert_eq!(
        LAST_SERVER_CLAIMS.load(std::sync::atomic::Ordering::Relaxed),
        all.len() + sample
    );
}
