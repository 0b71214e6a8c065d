//! The kqueue backend on an OS without kqueue: a type with no values, so
//! `Backend::Kqueue` exists everywhere and is never built here.

use super::{unavailable, BackendKind, Event, Interest};
use std::io;
use std::os::unix::io::RawFd;
use std::time::Duration;

/// Whether this OS has kqueue.
pub const AVAILABLE: bool = false;

#[derive(Debug)]
pub enum Kqueue {}

impl Kqueue {
    pub fn new() -> io::Result<Kqueue> {
        Err(unavailable(BackendKind::Kqueue))
    }

    pub fn register(&mut self, _fd: RawFd, _token: u64, _interest: Interest) -> io::Result<()> {
        match *self {}
    }

    pub fn reregister(&mut self, _fd: RawFd, _token: u64, _interest: Interest) -> io::Result<()> {
        match *self {}
    }

    pub fn deregister(&mut self, _fd: RawFd) -> io::Result<()> {
        match *self {}
    }

    pub fn wait(&mut self, _events: &mut Vec<Event>, _timeout: Option<Duration>) -> io::Result<()> {
        match *self {}
    }
}
