//! Shared pieces of the evix benchmark binaries: a thin epoll wrapper, the
//! listen/rlimit calls std does not offer, and a tiny `--flag value` parser.
//! This file holds every `unsafe` block of the crate.

use std::collections::HashMap;
use std::io;
use std::net::TcpListener;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::str::FromStr;

/// Runs a libc call and turns `-1` into the thread's `errno` as `io::Error`.
macro_rules! syscall {
    ($fn:ident ( $($arg:expr),* $(,)? )) => {{
        // SAFETY: each call site passes arguments that satisfy the libc
        // function's contract (see the comment above it).
        let res = unsafe { libc::$fn($($arg),*) };
        if res == -1 {
            Err(io::Error::last_os_error())
        } else {
            Ok(res)
        }
    }};
}

/// Readiness for reading (and peer hang-up, which a read then reports).
pub const READ: u32 = (libc::EPOLLIN | libc::EPOLLRDHUP) as u32;
/// Readiness for writing.
pub const WRITE: u32 = libc::EPOLLOUT as u32;
/// Error or hang-up: the connection is finished.
pub const FAILED: u32 = (libc::EPOLLERR | libc::EPOLLHUP) as u32;

/// A level-triggered epoll instance with a reusable event buffer.
pub struct Epoll {
    fd: OwnedFd,
    events: Vec<libc::epoll_event>,
}

impl Epoll {
    pub fn new(capacity: usize) -> io::Result<Epoll> {
        // SAFETY: no pointers; the flag is valid.
        let fd = syscall!(epoll_create1(libc::EPOLL_CLOEXEC))?;
        Ok(Epoll {
            // SAFETY: epoll_create1 returned a new descriptor that nothing else owns.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            events: vec![libc::epoll_event { events: 0, u64: 0 }; capacity.max(1)],
        })
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, token: u64, interest: u32) -> io::Result<()> {
        let mut event = libc::epoll_event {
            events: interest,
            u64: token,
        };
        // SAFETY: `event` is a valid epoll_event that outlives the call.
        syscall!(epoll_ctl(self.fd.as_raw_fd(), op, fd, &mut event)).map(drop)
    }

    /// Registers `fd` with `token` for `interest` (READ, WRITE or both).
    pub fn add(&self, fd: RawFd, token: u64, interest: u32) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, token, interest)
    }

    /// Changes the interest of a registered `fd`.
    pub fn modify(&self, fd: RawFd, token: u64, interest: u32) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, token, interest)
    }

    /// Removes the registration of `fd`.
    pub fn delete(&self, fd: RawFd) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_DEL, fd, 0, 0)
    }

    /// Waits up to `timeout_ms` (-1: forever) and puts `(token, bits)` of
    /// each ready registration into `ready` (cleared first; reused, so a
    /// wait allocates nothing). An interrupted wait reports none.
    pub fn wait(&mut self, timeout_ms: i32, ready: &mut Vec<(u64, u32)>) -> io::Result<()> {
        ready.clear();
        // SAFETY: the kernel writes at most `len` entries into `events`, which
        // has room for exactly that many.
        let n = match syscall!(epoll_wait(
            self.fd.as_raw_fd(),
            self.events.as_mut_ptr(),
            self.events.len() as libc::c_int,
            timeout_ms
        )) {
            Ok(n) => n as usize,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => 0,
            Err(e) => return Err(e),
        };
        // Copy the fields out: epoll_event is packed on x86_64.
        ready.extend(
            self.events[..n]
                .iter()
                .map(|event| (event.u64, event.events)),
        );
        Ok(())
    }
}

/// Binds a non-blocking listener on `host:port` with a backlog large enough
/// for thousands of connections arriving at once.
pub fn listen(host: &str, port: u16) -> io::Result<TcpListener> {
    let listener = TcpListener::bind((host, port))?;
    // SAFETY: a valid listening socket; listen again only raises its backlog.
    syscall!(listen(listener.as_raw_fd(), 4096))?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Raises the soft limit on open files to the hard limit.
pub fn raise_nofile_limit() -> io::Result<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid rlimit the kernel fills in.
    syscall!(getrlimit(libc::RLIMIT_NOFILE, &mut limit))?;
    limit.rlim_cur = limit.rlim_max;
    // SAFETY: `limit` is a valid rlimit that the kernel only reads.
    syscall!(setrlimit(libc::RLIMIT_NOFILE, &limit))?;
    Ok(limit.rlim_cur)
}

/// Clock ticks per second, the unit of utime/stime in /proc/PID/stat.
pub fn clock_ticks() -> f64 {
    // SAFETY: sysconf takes no pointers.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as f64
    } else {
        100.0
    }
}

/// CPU time (user + system, every thread) that process `pid` has used, in seconds.
pub fn process_cpu_seconds(pid: u32) -> io::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name may contain spaces and parentheses: fields start after the last ')'.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .ok_or_else(|| io::Error::other("malformed /proc/PID/stat"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Field 3 (state) is fields[0]: utime is field 14, stime field 15.
    let ticks = |i: usize| -> io::Result<f64> {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .ok_or_else(|| io::Error::other("malformed /proc/PID/stat"))
    };
    Ok((ticks(11)? + ticks(12)?) / clock_ticks())
}

/// `--name value` options after a positional subcommand.
pub struct Args {
    values: HashMap<String, String>,
    flags: Vec<String>,
}

impl Args {
    /// Parses `args`; every `--name` is followed by a value unless it is one of `switches`.
    pub fn parse(args: impl Iterator<Item = String>, switches: &[&str]) -> Result<Args, String> {
        let mut values = HashMap::new();
        let mut flags = Vec::new();
        let mut args = args.peekable();
        while let Some(arg) = args.next() {
            let name = arg
                .strip_prefix("--")
                .ok_or_else(|| format!("unexpected argument {arg:?}"))?;
            if switches.contains(&name) {
                flags.push(name.to_string());
            } else {
                let value = args
                    .next()
                    .ok_or_else(|| format!("--{name} needs a value"))?;
                values.insert(name.to_string(), value);
            }
        }
        Ok(Args { values, flags })
    }

    /// The value of `--name` parsed as `T`, or `default`.
    pub fn get<T: FromStr>(&self, name: &str, default: T) -> Result<T, String> {
        match self.values.get(name) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|_| format!("--{name}: bad value {v:?}")),
        }
    }

    /// Whether the switch `--name` was given.
    pub fn flag(&self, name: &str) -> bool {
        self.flags.iter().any(|f| f == name)
    }

    /// Fails on an option nobody asked for (a typo must not be ignored).
    pub fn check_known(&self, known: &[&str]) -> Result<(), String> {
        match self.values.keys().find(|k| !known.contains(&k.as_str())) {
            Some(unknown) => Err(format!("unknown option --{unknown}")),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Result<Args, String> {
        Args::parse(list.iter().map(|s| s.to_string()), &["sync"])
    }

    #[test]
    fn parses_values_and_switches() {
        let parsed = args(&["--port", "7000", "--sync", "--size", "64"]).unwrap();
        assert_eq!(parsed.get("port", 0u16), Ok(7000));
        assert_eq!(parsed.get("size", 1usize), Ok(64));
        assert_eq!(parsed.get("missing", 3u32), Ok(3));
        assert!(parsed.flag("sync"));
        assert!(parsed.check_known(&["port", "size"]).is_ok());
        assert!(parsed.check_known(&["port"]).is_err());
    }

    #[test]
    fn rejects_bad_input() {
        assert!(args(&["7000"]).is_err());
        assert!(args(&["--port"]).is_err());
        assert!(args(&["--port", "x"]).unwrap().get("port", 0u16).is_err());
    }

    #[test]
    fn reads_own_cpu_time() {
        assert!(process_cpu_seconds(std::process::id()).unwrap() >= 0.0);
    }
}
