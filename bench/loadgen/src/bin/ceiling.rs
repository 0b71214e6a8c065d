//! The ceiling: a single-threaded, level-triggered epoll server in plain Rust,
//! no Ruby. Every Ruby server in the benchmark is compared to it.
//!
//!     ceiling PORT [echo|http]
//!
//! `echo` writes back what it reads; `http` answers every complete HTTP/1.1
//! request (headers ending in a blank line) with the same keep-alive "hello".
//! Registrations are persistent: one `epoll_ctl` per connection unless a write
//! is partial, so a round trip costs a read, a write and a share of one
//! `epoll_wait`. Prints "ready" once listening.

use evix_bench::{listen, raise_nofile_limit, Epoll, FAILED, READ, WRITE};
use std::io::{self, ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::process::ExitCode;

const RESPONSE: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\nHello, World!";
const LISTENER: u64 = u64::MAX;
const READ_SIZE: usize = 64 * 1024;

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Echo,
    Http,
}

struct Conn {
    stream: TcpStream,
    /// HTTP: bytes of a request whose blank line has not arrived yet.
    partial: Vec<u8>,
    /// Bytes the kernel did not take yet; while any are left we wait for
    /// WRITE instead of READ (backpressure).
    pending: Vec<u8>,
}

struct Server {
    mode: Mode,
    epoll: Epoll,
    listener: TcpListener,
    /// Connections by file descriptor.
    conns: Vec<Option<Conn>>,
    buf: Vec<u8>,
    out: Vec<u8>,
}

impl Server {
    fn run(&mut self) -> io::Result<()> {
        let mut ready = Vec::with_capacity(1024);
        loop {
            self.epoll.wait(-1, &mut ready)?;
            for &(token, bits) in &ready {
                if token == LISTENER {
                    self.accept()?;
                } else {
                    self.serve(token as usize, bits)?;
                }
            }
        }
    }

    fn accept(&mut self) -> io::Result<()> {
        loop {
            let stream = match self.listener.accept() {
                Ok((stream, _)) => stream,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == ErrorKind::ConnectionAborted => continue,
                Err(e) => return Err(e),
            };
            stream.set_nonblocking(true)?;
            stream.set_nodelay(true)?;
            let fd = stream.as_raw_fd() as usize;
            self.epoll.add(fd as i32, fd as u64, READ)?;
            if self.conns.len() <= fd {
                self.conns.resize_with(fd + 1, || None);
            }
            self.conns[fd] = Some(Conn {
                stream,
                partial: Vec::new(),
                pending: Vec::new(),
            });
        }
    }

    /// Handles readiness of connection `fd`; a connection that fails or ends
    /// is closed (dropping the stream also removes its registration).
    fn serve(&mut self, fd: usize, bits: u32) -> io::Result<()> {
        let Some(conn) = self.conns.get_mut(fd).and_then(Option::as_mut) else {
            return Ok(());
        };
        let open = if !conn.pending.is_empty() {
            bits & FAILED == 0 && flush(conn, &self.epoll, fd)?
        } else {
            match conn.stream.read(&mut self.buf) {
                Ok(0) => false,
                Ok(n) => {
                    let reply = match self.mode {
                        Mode::Echo => &self.buf[..n],
                        Mode::Http => {
                            self.out.clear();
                            conn.partial.extend_from_slice(&self.buf[..n]);
                            for _ in 0..take_requests(&mut conn.partial) {
                                self.out.extend_from_slice(RESPONSE);
                            }
                            &self.out[..]
                        }
                    };
                    send(conn, &self.epoll, fd, reply)?
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => true,
                Err(_) => false,
            }
        };
        if !open {
            self.conns[fd] = None;
        }
        Ok(())
    }
}

/// Writes `data`; what the kernel does not take waits for WRITE readiness.
/// Returns whether the connection is still usable.
fn send(conn: &mut Conn, epoll: &Epoll, fd: usize, data: &[u8]) -> io::Result<bool> {
    let mut written = 0;
    while written < data.len() {
        match conn.stream.write(&data[written..]) {
            Ok(n) => written += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                conn.pending.extend_from_slice(&data[written..]);
                epoll.modify(fd as i32, fd as u64, WRITE)?;
                return Ok(true);
            }
            Err(_) => return Ok(false),
        }
    }
    Ok(true)
}

/// Writes pending bytes; back to READ interest once they are all out.
fn flush(conn: &mut Conn, epoll: &Epoll, fd: usize) -> io::Result<bool> {
    while !conn.pending.is_empty() {
        match conn.stream.write(&conn.pending) {
            Ok(n) => drop(conn.pending.drain(..n)),
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(true),
            Err(_) => return Ok(false),
        }
    }
    epoll.modify(fd as i32, fd as u64, READ)?;
    Ok(true)
}

/// Removes every complete request (up to and including its blank line) from
/// `partial` and returns how many there were.
fn take_requests(partial: &mut Vec<u8>) -> usize {
    let mut count = 0;
    let mut start = 0;
    while let Some(end) = partial[start..].windows(4).position(|w| w == b"\r\n\r\n") {
        start += end + 4;
        count += 1;
    }
    partial.drain(..start);
    count
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let port = args.next().and_then(|p| p.parse::<u16>().ok());
    let mode = match args.next().as_deref() {
        None | Some("echo") => Some(Mode::Echo),
        Some("http") => Some(Mode::Http),
        Some(_) => None,
    };
    let (Some(port), Some(mode)) = (port, mode) else {
        eprintln!("usage: ceiling PORT [echo|http]");
        return ExitCode::from(2);
    };
    match serve(port, mode) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ceiling: {e}");
            ExitCode::FAILURE
        }
    }
}

fn serve(port: u16, mode: Mode) -> io::Result<()> {
    raise_nofile_limit()?;
    let listener = listen("127.0.0.1", port)?;
    let epoll = Epoll::new(1024)?;
    epoll.add(listener.as_raw_fd(), LISTENER, READ)?;
    let mut server = Server {
        mode,
        epoll,
        listener,
        conns: Vec::new(),
        buf: vec![0; READ_SIZE],
        out: Vec::new(),
    };
    println!("ready");
    io::stdout().flush()?;
    server.run()
}

#[cfg(test)]
mod tests {
    use super::take_requests;

    #[test]
    fn takes_complete_requests_only() {
        let mut partial = b"GET / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\nGET /".to_vec();
        assert_eq!(take_requests(&mut partial), 2);
        assert_eq!(partial, b"GET /");
        partial.extend_from_slice(b" HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(take_requests(&mut partial), 1);
        assert!(partial.is_empty());
    }
}
