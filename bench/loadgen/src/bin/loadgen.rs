//! The load generator: a single-threaded epoll TCP client.
//!
//!     loadgen echo --port P [--host H] [--connections N] [--size S]
//!                  [--warmup SECONDS] [--duration SECONDS | --count ROUND_TRIPS]
//!                  [--rate ROUND_TRIPS_PER_S] [--server-pid PID] [--sync]
//!     loadgen idle --port P [--connections N] [--size S] [--hold SECONDS]
//!                  [--server-pid PID] [--sync] [--http]
//!
//! `echo` keeps one S-byte message in flight on each of N connections, checks
//! every echoed byte against what was sent, and after the warm-up measures for
//! `--duration` seconds (or exactly `--count` round trips). It prints one JSON
//! line: round trips/s, latency percentiles in µs, errors, and, with
//! `--server-pid`, the server's CPU time (utime + stime from /proc/PID/stat)
//! over the measured window.
//!
//! With `--rate R` the load is open-loop instead: send number k (k = 0, 1, ...)
//! is due at k / R seconds into the phase, on connection k mod N, whether or
//! not earlier replies came back; a connection still waiting for its last echo
//! queues the send. Latency runs from the due time, not from the actual send,
//! so a server that falls behind shows its queueing in p99 (no coordinated
//! omission). A phase that falls a second of sends behind stops early and
//! reports `"saturated":true`.
//!
//! `idle` opens N connections (in batches, each checked with one echo) and holds
//! them for `--hold` seconds, printing one JSON line once they are all open.
//! With `--http` each connection is checked with one HTTP/1.1 keep-alive
//! `GET /` instead, answered 2xx with a complete body, and then held idle
//! between requests as a browser's kept-alive connection is.
//!
//! `--sync` hands the timing to the caller: `echo` prints "warm" after the
//! warm-up, then runs one measured phase (printing its JSON line) for each
//! "go" line on stdin ("go R": at R round trips/s, "go 0": closed-loop), and
//! closes on any other line or EOF; `idle` holds its
//! connections until stdin has a line or EOF instead of sleeping.

use evix_bench::{process_cpu_seconds, raise_nofile_limit, Args, Epoll, FAILED, READ, WRITE};
use std::collections::VecDeque;
use std::io::{self, BufRead, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// A phase that makes no progress for this long is a failure, not a hang.
const STALL: Duration = Duration::from_secs(10);
/// Connections opened (and checked) together before opening more.
const CONNECT_BATCH: usize = 100;

/// The byte at `offset` of message `seq` on connection `id`: every message
/// differs, so a reply from the wrong connection or an old message is caught.
fn pattern(id: usize, seq: u64, offset: usize) -> u8 {
    (id as u64)
        .wrapping_mul(131)
        .wrapping_add(seq.wrapping_mul(31))
        .wrapping_add(offset as u64) as u8
}

struct Conn {
    stream: TcpStream,
    id: usize,
    seq: u64,
    message: Vec<u8>,
    written: usize,
    received: usize,
    sent_at: Instant,
    /// Open-loop mode: the due times of sends queued behind the one in flight.
    queued: VecDeque<Instant>,
    /// Waiting for WRITE readiness (the kernel did not take the whole message).
    blocked: bool,
    /// A message is out and its echo not complete.
    in_flight: bool,
    open: bool,
}

impl Conn {
    fn new(stream: TcpStream, id: usize, size: usize) -> Conn {
        Conn {
            stream,
            id,
            seq: 0,
            message: vec![0; size],
            written: 0,
            received: 0,
            sent_at: Instant::now(),
            queued: VecDeque::new(),
            blocked: false,
            in_flight: false,
            open: true,
        }
    }

    fn fd(&self) -> i32 {
        self.stream.as_raw_fd()
    }

    /// Starts the next round trip.
    fn begin(&mut self, epoll: &Epoll) -> io::Result<()> {
        self.seq += 1;
        let (id, seq) = (self.id, self.seq);
        for (offset, byte) in self.message.iter_mut().enumerate() {
            *byte = pattern(id, seq, offset);
        }
        self.written = 0;
        self.received = 0;
        self.sent_at = Instant::now();
        self.write(epoll)
    }

    /// Writes what is left of the message, switching the registration to
    /// WRITE while the kernel's buffer is full.
    fn write(&mut self, epoll: &Epoll) -> io::Result<()> {
        while self.written < self.message.len() {
            match self.stream.write(&self.message[self.written..]) {
                Ok(n) => self.written += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    if !self.blocked {
                        self.blocked = true;
                        epoll.modify(self.fd(), self.id as u64, READ | WRITE)?;
                    }
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
        }
        if self.blocked {
            self.blocked = false;
            epoll.modify(self.fd(), self.id as u64, READ)?;
        }
        Ok(())
    }

    /// Reads what arrived and checks it; Ok(true) once the whole echo is in.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<bool> {
        let n = match self.stream.read(buf) {
            Ok(0) => return Err(io::Error::new(ErrorKind::UnexpectedEof, "server closed")),
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(false),
            Err(e) => return Err(e),
        };
        if self.received + n > self.written {
            return Err(io::Error::other("more bytes came back than were sent"));
        }
        let (id, seq, start) = (self.id, self.seq, self.received);
        if let Some(bad) = (0..n).find(|&i| buf[i] != pattern(id, seq, start + i)) {
            return Err(io::Error::other(format!(
                "wrong byte at offset {} of message {seq}",
                start + bad
            )));
        }
        self.received += n;
        Ok(self.received == self.message.len())
    }
}

#[derive(Clone, Copy)]
enum Stop {
    After(Duration),
    Count(u64),
}

/// How a phase issues round trips.
#[derive(Clone, Copy)]
enum Load {
    /// One message in flight per connection, the next sent when its echo is in.
    Closed(Stop),
    /// This many round trips per second in all, for this long, on a schedule.
    Paced(f64, Duration),
}

struct Echo {
    epoll: Epoll,
    conns: Vec<Conn>,
    buf: Vec<u8>,
    /// Open connections with a message out.
    in_flight: usize,
    /// Open-loop mode: sends due but not yet started, over all connections.
    queued: usize,
    errors: u64,
    first_error: Option<String>,
}

/// What one phase measured.
struct Window {
    round_trips: u64,
    elapsed: Duration,
    latencies_ns: Vec<u64>,
    /// Open-loop mode fell a second of sends behind and stopped early.
    saturated: bool,
}

impl Echo {
    fn begin(&mut self, index: usize) {
        let conn = &mut self.conns[index];
        conn.in_flight = true;
        self.in_flight += 1;
        if let Err(e) = conn.begin(&self.epoll) {
            self.fail(index, &e);
        }
    }

    /// Counts an error and closes the connection.
    fn fail(&mut self, index: usize, error: &io::Error) {
        let conn = &mut self.conns[index];
        if !conn.open {
            return;
        }
        conn.open = false;
        if conn.in_flight {
            conn.in_flight = false;
            self.in_flight -= 1;
        }
        self.queued -= conn.queued.len();
        conn.queued.clear();
        let _ = self.epoll.delete(conn.fd());
        let _ = conn.stream.shutdown(std::net::Shutdown::Both);
        self.errors += 1;
        self.first_error
            .get_or_insert_with(|| format!("connection {}: {error}", conn.id));
    }

    /// Handles connection `index`'s readiness `bits`: finishes a blocked
    /// write, reads what came back; the time its echo completed, if it did
    /// (the connection is idle again). Errors close the connection.
    fn service(&mut self, index: usize, bits: u32) -> Option<Instant> {
        if !self.conns[index].open {
            return None;
        }
        if bits & WRITE != 0 && self.conns[index].blocked {
            if let Err(e) = self.conns[index].write(&self.epoll) {
                self.fail(index, &e);
                return None;
            }
        }
        if bits & (READ | FAILED) == 0 {
            return None;
        }
        match self.conns[index].read(&mut self.buf) {
            Ok(false) => None,
            Ok(true) => {
                self.conns[index].in_flight = false;
                self.in_flight -= 1;
                Some(Instant::now())
            }
            Err(e) => {
                self.fail(index, &e);
                None
            }
        }
    }

    /// Runs round trips until `stop` (keeping every latency with `record`).
    /// Every open connection starts the phase idle; with `drain` the phase
    /// also ends with all of them idle, else what is in flight at the
    /// deadline is left behind.
    fn phase(&mut self, stop: Stop, record: bool, drain: bool) -> io::Result<Window> {
        let start = Instant::now();
        let (deadline, limit) = match stop {
            Stop::After(d) => (Some(start + d), u64::MAX),
            Stop::Count(n) => (None, n),
        };
        let mut issued = 0u64;
        let mut round_trips = 0u64;
        let mut latencies_ns = Vec::new();
        let mut ready = Vec::with_capacity(1024);
        let mut last_progress = start;
        for i in 0..self.conns.len() {
            if issued < limit && self.conns[i].open && !self.conns[i].in_flight {
                issued += 1;
                self.begin(i);
            }
        }
        loop {
            let now = Instant::now();
            let past = deadline.is_some_and(|d| now >= d);
            if (past && !drain) || self.in_flight == 0 {
                break;
            }
            if now - last_progress > STALL {
                return Err(io::Error::other(format!(
                    "no round trip completed for {} s",
                    STALL.as_secs()
                )));
            }
            let timeout = match deadline {
                Some(d) if !past => (d - now).as_millis() as i32 + 1,
                _ => 1000,
            };
            self.epoll.wait(timeout, &mut ready)?;
            for &(token, bits) in &ready {
                let i = token as usize;
                let Some(done) = self.service(i, bits) else {
                    continue;
                };
                last_progress = done;
                if deadline.is_some_and(|d| done >= d) {
                    continue; // after the window: drained, not counted
                }
                round_trips += 1;
                if record {
                    latencies_ns.push((done - self.conns[i].sent_at).as_nanos() as u64);
                }
                if issued < limit {
                    issued += 1;
                    self.begin(i);
                }
            }
        }
        let elapsed = match deadline {
            Some(d) => d.min(Instant::now()) - start,
            None => start.elapsed(),
        };
        Ok(Window {
            round_trips,
            elapsed,
            latencies_ns,
            saturated: false,
        })
    }

    /// Starts connection `index`'s next queued send, stamped with its due time.
    fn begin_queued(&mut self, index: usize) {
        if let Some(due) = self.conns[index].queued.pop_front() {
            self.queued -= 1;
            self.begin(index);
            self.conns[index].sent_at = due;
        }
    }

    /// Open-loop: `rate` round trips/s across the connections for `duration`
    /// (see the file's header), then waits for what is in flight without
    /// counting it, so the next phase starts with every connection idle.
    fn paced_phase(&mut self, rate: f64, duration: Duration, record: bool) -> io::Result<Window> {
        let start = Instant::now();
        let deadline = start + duration;
        let interval = Duration::from_secs_f64(1.0 / rate);
        // Sends due but not yet answered: a second's worth means the server is
        // that far behind, and waiting on would only measure the queue.
        let limit = (rate as usize).max(self.conns.len());
        let mut next = 0u64;
        let mut saturated = false;
        let mut end = deadline;
        let mut round_trips = 0u64;
        let mut latencies_ns = Vec::new();
        let mut ready = Vec::with_capacity(1024);
        let mut last_progress = start;
        loop {
            let now = Instant::now();
            let mut due = start + interval.mul_f64(next as f64);
            while due <= now && due < deadline && !saturated {
                let i = (next % self.conns.len() as u64) as usize;
                next += 1;
                due = start + interval.mul_f64(next as f64);
                if !self.conns[i].open {
                    continue;
                }
                self.conns[i]
                    .queued
                    .push_back(start + interval.mul_f64((next - 1) as f64));
                self.queued += 1;
                if self.queued + self.in_flight > limit {
                    saturated = true;
                    end = now;
                }
                if !self.conns[i].in_flight {
                    self.begin_queued(i);
                }
            }
            let finished = now >= deadline || saturated;
            if finished && self.in_flight == 0 {
                break;
            }
            if now - last_progress > STALL {
                return Err(io::Error::other(format!(
                    "no round trip completed for {} s",
                    STALL.as_secs()
                )));
            }
            // Whole milliseconds only: spin through the last one so sends
            // leave on time (this core is the load generator's alone).
            let timeout = if finished {
                1000
            } else {
                (due.min(deadline) - now).as_millis() as i32
            };
            self.epoll.wait(timeout, &mut ready)?;
            for &(token, bits) in &ready {
                let i = token as usize;
                let Some(done) = self.service(i, bits) else {
                    continue;
                };
                last_progress = done;
                if done < deadline && !saturated {
                    round_trips += 1;
                    if record {
                        latencies_ns.push((done - self.conns[i].sent_at).as_nanos() as u64);
                    }
                    self.begin_queued(i);
                } else {
                    self.queued -= self.conns[i].queued.len();
                    self.conns[i].queued.clear();
                }
            }
        }
        Ok(Window {
            round_trips,
            elapsed: end - start,
            latencies_ns,
            saturated,
        })
    }

    fn run(&mut self, load: Load, record: bool) -> io::Result<Window> {
        match load {
            Load::Closed(stop) => self.phase(stop, record, matches!(stop, Stop::Count(_))),
            Load::Paced(rate, duration) => self.paced_phase(rate, duration, record),
        }
    }
}

/// Opens `n` connections in batches; each one echoes one `size`-byte message
/// before the next batch starts, so the server has accepted and served them all.
fn connect_all(addr: SocketAddr, n: usize, size: usize) -> io::Result<Vec<Conn>> {
    let mut conns = Vec::with_capacity(n);
    let mut buf = vec![0; size.max(4096)];
    while conns.len() < n {
        let first = conns.len();
        for id in first..n.min(first + CONNECT_BATCH) {
            let stream = TcpStream::connect_timeout(&addr, STALL)
                .map_err(|e| io::Error::new(e.kind(), format!("connection {id}: connect: {e}")))?;
            stream.set_nodelay(true)?;
            stream.set_read_timeout(Some(STALL))?;
            let mut conn = Conn::new(stream, id, size);
            conn.seq = 1;
            for (offset, byte) in conn.message.iter_mut().enumerate() {
                *byte = pattern(id, 1, offset);
            }
            conn.stream.write_all(&conn.message)?;
            conn.written = size;
            conns.push(conn);
        }
        for conn in &mut conns[first..] {
            while conn.received < size {
                let n = conn.stream.read(&mut buf)?;
                if n == 0 {
                    return Err(io::Error::new(
                        ErrorKind::UnexpectedEof,
                        format!("connection {}: closed during the first echo", conn.id),
                    ));
                }
                let (id, start) = (conn.id, conn.received);
                if (0..n).any(|i| buf[i] != pattern(id, 1, start + i)) || start + n > size {
                    return Err(io::Error::other(format!(
                        "connection {id}: wrong first echo"
                    )));
                }
                conn.received += n;
            }
        }
    }
    for conn in &conns {
        conn.stream.set_nonblocking(true)?;
    }
    Ok(conns)
}

const HTTP_REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
/// A response head or body bigger than this is not the hello the check expects.
const HTTP_RESPONSE_LIMIT: usize = 64 * 1024;

/// Opens `n` connections in batches; each one gets one complete 2xx HTTP
/// response before the next batch starts.
fn connect_all_http(addr: SocketAddr, n: usize) -> io::Result<Vec<TcpStream>> {
    let mut streams = Vec::with_capacity(n);
    while streams.len() < n {
        let first = streams.len();
        for id in first..n.min(first + CONNECT_BATCH) {
            let mut stream = TcpStream::connect_timeout(&addr, STALL)
                .map_err(|e| io::Error::new(e.kind(), format!("connection {id}: connect: {e}")))?;
            stream.set_nodelay(true)?;
            stream.set_read_timeout(Some(STALL))?;
            stream.write_all(HTTP_REQUEST)?;
            streams.push(stream);
        }
        for (offset, stream) in streams[first..].iter_mut().enumerate() {
            read_http_response(stream).map_err(|e| {
                io::Error::new(e.kind(), format!("connection {}: {e}", first + offset))
            })?;
        }
    }
    Ok(streams)
}

/// Reads one response: a 2xx status, then a body framed by Content-Length
/// or chunked encoding (read to its last chunk).
fn read_http_response(stream: &mut TcpStream) -> io::Result<()> {
    let mut response = Vec::new();
    let mut buf = [0u8; 4096];
    let mut head_end = None;
    loop {
        if let Some(end) = head_end {
            if http_body_complete(&response[..end], &response[end..])? {
                return Ok(());
            }
        }
        if response.len() > HTTP_RESPONSE_LIMIT {
            return Err(io::Error::other("response larger than 64 KiB"));
        }
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Err(io::Error::new(
                ErrorKind::UnexpectedEof,
                "closed before a whole response",
            ));
        }
        response.extend_from_slice(&buf[..n]);
        if head_end.is_none() {
            head_end = response
                .windows(4)
                .position(|w| w == b"\r\n\r\n")
                .map(|i| i + 4);
            if let Some(end) = head_end {
                let status = &response[..end.min(12)];
                if !(status.starts_with(b"HTTP/1.1 2") || status.starts_with(b"HTTP/1.0 2")) {
                    let line = String::from_utf8_lossy(&response[..end]);
                    return Err(io::Error::other(format!(
                        "not a 2xx: {}",
                        line.lines().next().unwrap_or("")
                    )));
                }
            }
        }
    }
}

/// Whether `body` holds the whole body the head announces.
fn http_body_complete(head: &[u8], body: &[u8]) -> io::Result<bool> {
    let head = String::from_utf8_lossy(head).to_ascii_lowercase();
    let header = |name: &str| {
        head.lines().find_map(|line| {
            line.strip_prefix(name)
                .map(|value| value.trim().to_string())
        })
    };
    if let Some(length) = header("content-length:") {
        let length: usize = length
            .parse()
            .map_err(|_| io::Error::other(format!("bad content-length {length:?}")))?;
        return Ok(body.len() >= length);
    }
    if header("transfer-encoding:").is_some_and(|v| v.ends_with("chunked")) {
        return Ok(body.ends_with(b"0\r\n\r\n"));
    }
    if header("connection:").is_some_and(|v| v == "close") {
        return Err(io::Error::other(
            "the server closes the connection after the response (no keep-alive)",
        ));
    }
    Err(io::Error::other(
        "a keep-alive response needs content-length or chunked",
    ))
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1] as f64 / 1000.0
}

/// The next line on stdin without its line end ("" at EOF).
fn read_line() -> io::Result<String> {
    let mut line = String::new();
    io::stdin().lock().read_line(&mut line)?;
    Ok(line.trim_end().to_string())
}

fn emit(line: &str) -> io::Result<()> {
    let mut out = io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()
}

fn json_str(s: &str) -> String {
    let escaped: String = s
        .chars()
        .flat_map(|c| match c {
            '"' => vec!['\\', '"'],
            '\\' => vec!['\\', '\\'],
            c if c.is_control() => vec![' '],
            c => vec![c],
        })
        .collect();
    format!("\"{escaped}\"")
}

fn cpu(pid: Option<u32>) -> Option<f64> {
    pid.and_then(|pid| process_cpu_seconds(pid).ok())
}

fn echo(args: &Args, addr: SocketAddr) -> io::Result<bool> {
    let connections: usize = args.get("connections", 1).map_err(io::Error::other)?;
    let size: usize = args.get("size", 64).map_err(io::Error::other)?;
    let warmup: f64 = args.get("warmup", 1.0).map_err(io::Error::other)?;
    let duration: f64 = args.get("duration", 3.0).map_err(io::Error::other)?;
    let count: u64 = args.get("count", 0).map_err(io::Error::other)?;
    let server_pid: Option<u32> = args.get("server-pid", 0).map_err(io::Error::other)?.into();
    let server_pid = server_pid.filter(|&p| p > 0);
    let rate: f64 = args.get("rate", 0.0).map_err(io::Error::other)?;
    let sync = args.flag("sync");
    if connections == 0 || size == 0 {
        return Err(io::Error::other(
            "--connections and --size must be positive",
        ));
    }
    let load = |rate: f64| -> io::Result<Load> {
        if rate == 0.0 {
            let stop = if count > 0 {
                Stop::Count(count)
            } else {
                Stop::After(Duration::from_secs_f64(duration))
            };
            Ok(Load::Closed(stop))
        } else if rate.is_finite() && rate > 0.0 && count == 0 {
            Ok(Load::Paced(rate, Duration::from_secs_f64(duration)))
        } else {
            Err(io::Error::other(
                "--rate must be a positive number of round trips/s, without --count",
            ))
        }
    };
    let measured = load(rate)?;

    let conns = connect_all(addr, connections, size)?;
    let epoll = Epoll::new(connections.min(4096))?;
    for conn in &conns {
        epoll.add(conn.fd(), conn.id as u64, READ)?;
    }
    let mut bench = Echo {
        epoll,
        conns,
        buf: vec![0; size.max(64 * 1024)],
        in_flight: 0,
        queued: 0,
        errors: 0,
        first_error: None,
    };
    let warm = Duration::from_secs_f64(warmup);
    let warm = match measured {
        Load::Paced(rate, _) => Load::Paced(rate, warm),
        Load::Closed(_) => Load::Closed(Stop::After(warm)),
    };
    bench.run(warm, false)?;
    if sync {
        emit("warm")?;
        loop {
            let line = read_line()?;
            let load = match line.strip_prefix("go") {
                Some("") => measured,
                Some(rate) if rate.starts_with(' ') => load(
                    rate.trim()
                        .parse()
                        .map_err(|_| io::Error::other("go: bad rate"))?,
                )?,
                _ => break,
            };
            measure(&mut bench, load, server_pid)?;
        }
    } else {
        measure(&mut bench, measured, server_pid)?;
    }
    Ok(bench.errors == 0)
}

/// Runs one measured phase and prints its JSON line.
fn measure(bench: &mut Echo, load: Load, server_pid: Option<u32>) -> io::Result<()> {
    let cpu_before = cpu(server_pid);
    let mut window = bench.run(load, true)?;
    let cpu_after = cpu(server_pid);
    window.latencies_ns.sort_unstable();
    let seconds = window.elapsed.as_secs_f64();
    let server_cpu = match (cpu_before, cpu_after) {
        (Some(a), Some(b)) => format!("{:.4}", b - a),
        _ => "null".to_string(),
    };
    let first_error = bench.first_error.as_deref().map_or("null".into(), json_str);
    emit(&format!(
        "{{\"mode\":\"echo\",\"connections\":{},\"size\":{},\"seconds\":{seconds:.4},\
         \"round_trips\":{},\"rps\":{:.1},\"p50_us\":{:.1},\"p99_us\":{:.1},\"max_us\":{:.1},\
         \"errors\":{},\"first_error\":{first_error},\"server_cpu_s\":{server_cpu},\
         \"rate\":{:.1},\"saturated\":{}}}",
        bench.conns.len(),
        bench.conns.first().map_or(0, |c| c.message.len()),
        window.round_trips,
        window.round_trips as f64 / seconds,
        percentile(&window.latencies_ns, 50.0),
        percentile(&window.latencies_ns, 99.0),
        percentile(&window.latencies_ns, 100.0),
        bench.errors,
        match load {
            Load::Paced(rate, _) => rate,
            Load::Closed(_) => 0.0,
        },
        window.saturated,
    ))
}

fn idle(args: &Args, addr: SocketAddr) -> io::Result<bool> {
    let connections: usize = args.get("connections", 10_000).map_err(io::Error::other)?;
    let size: usize = args.get("size", 64).map_err(io::Error::other)?;
    let hold: f64 = args.get("hold", 1.0).map_err(io::Error::other)?;
    let started = Instant::now();
    let (open, echo, http) = if args.flag("http") {
        let streams = connect_all_http(addr, connections)?;
        (streams.len(), Vec::new(), streams)
    } else {
        let conns = connect_all(addr, connections, size)?;
        (conns.len(), conns, Vec::new())
    };
    emit(&format!(
        "{{\"mode\":\"idle\",\"connections\":{},\"open_s\":{:.3},\"errors\":0}}",
        open,
        started.elapsed().as_secs_f64()
    ))?;
    if args.flag("sync") {
        read_line()?;
    } else {
        std::thread::sleep(Duration::from_secs_f64(hold));
    }
    drop((echo, http));
    Ok(true)
}

fn run(argv: Vec<String>) -> Result<bool, String> {
    let mut argv = argv.into_iter();
    let mode = argv.next().unwrap_or_default();
    let args = Args::parse(argv, &["sync", "http"])?;
    let known: &[&str] = match mode.as_str() {
        "echo" => &[
            "host",
            "port",
            "connections",
            "size",
            "warmup",
            "duration",
            "count",
            "rate",
            "server-pid",
        ],
        "idle" => &["host", "port", "connections", "size", "hold", "server-pid"],
        _ => return Err("usage: loadgen echo|idle --port PORT [options]".into()),
    };
    args.check_known(known)?;
    let host: String = args.get("host", "127.0.0.1".to_string())?;
    let port: u16 = args.get("port", 0)?;
    if port == 0 {
        return Err("--port is required".into());
    }
    let addr = (host.as_str(), port)
        .to_socket_addrs()
        .map_err(|e| e.to_string())?
        .next()
        .ok_or("no address")?;
    raise_nofile_limit().map_err(|e| e.to_string())?;
    let outcome = if mode == "echo" {
        echo(&args, addr)
    } else {
        idle(&args, addr)
    };
    outcome.map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    match run(std::env::args().skip(1).collect()) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(message) => {
            eprintln!("loadgen: {message}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{http_body_complete, pattern, percentile};

    #[test]
    fn percentiles_use_nearest_rank() {
        let sorted: Vec<u64> = (1..=100).map(|i| i * 1000).collect();
        assert_eq!(percentile(&sorted, 50.0), 50.0);
        assert_eq!(percentile(&sorted, 99.0), 99.0);
        assert_eq!(percentile(&sorted, 100.0), 100.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
    }

    #[test]
    fn messages_differ_by_connection_and_sequence() {
        assert_ne!(pattern(0, 1, 0), pattern(1, 1, 0));
        assert_ne!(pattern(0, 1, 0), pattern(0, 2, 0));
    }

    #[test]
    fn http_bodies_complete_by_length_or_last_chunk() {
        let sized = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n";
        assert!(!http_body_complete(sized, b"hell").unwrap());
        assert!(http_body_complete(sized, b"hello").unwrap());
        let chunked = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n";
        assert!(!http_body_complete(chunked, b"5\r\nhello\r\n").unwrap());
        assert!(http_body_complete(chunked, b"5\r\nhello\r\n0\r\n\r\n").unwrap());
        assert!(http_body_complete(b"HTTP/1.1 200 OK\r\n\r\n", b"").is_err());
        let closing = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n";
        let error = http_body_complete(closing, b"hello").unwrap_err();
        assert!(error.to_string().contains("no keep-alive"));
        assert!(http_body_complete(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", b"").is_err());
    }
}
