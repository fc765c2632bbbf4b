//! Handing file descriptors to the other processes of the node. Some shareable memory
//! (CUDA allocations exported as POSIX descriptors) can only be mapped by a process that
//! holds the exporter's very descriptor: reopening `/proc/<pid>/fd/<n>` gives a different
//! file, and `pidfd_getfd` needs ptrace rights that hardened hosts withhold. So each
//! process that offers descriptors serves them over a Unix socket in the abstract
//! namespace (nothing on disk to clean up), sending them as `SCM_RIGHTS` to processes of
//! the same user that ask by key.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use crate::{Error, Result};

/// Where a process serves its descriptors: its id and a random word (the abstract
/// namespace is shared by containers of one network namespace, whose ids may repeat).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Endpoint {
    /// Process id of the server.
    pub pid: u32,
    /// Distinguishes servers of equal process ids.
    pub nonce: u32,
}

impl Endpoint {
    fn name(&self) -> String {
        format!("cudecomp-fd-{}-{:08x}", self.pid, self.nonce)
    }
}

/// A client gives up on a server that does not answer within this time.
const TIMEOUT: Duration = Duration::from_secs(30);

/// Descriptors offered by this process, by key.
static OFFERED: Mutex<Option<HashMap<u64, OwnedFd>>> = Mutex::new(None);

/// This process's server, started by the first offer.
static SERVER: OnceLock<std::result::Result<Endpoint, String>> = OnceLock::new();

fn offered() -> std::sync::MutexGuard<'static, Option<HashMap<u64, OwnedFd>>> {
    OFFERED.lock().unwrap_or_else(|e| e.into_inner())
}

/// Offers `fd` under `key` (unique within this process) to same-user processes of the
/// node; returns where to ask for it.
pub(crate) fn offer(key: u64, fd: OwnedFd) -> Result<Endpoint> {
    let at = server()?;
    offered().get_or_insert_with(HashMap::new).insert(key, fd);
    Ok(at)
}

/// Withdraws (and closes) what was offered under `key`; processes that already took the
/// descriptor keep theirs.
pub(crate) fn withdraw(key: u64) {
    if let Some(m) = offered().as_mut() {
        m.remove(&key);
    }
}

/// The descriptor the process at `at` offers under `key`.
pub(crate) fn fetch(at: Endpoint, key: u64) -> Result<OwnedFd> {
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        Error::Internal(format!(
            "descriptor {key} of process {}: {what}: {e}",
            at.pid
        ))
    };
    let addr = SocketAddr::from_abstract_name(at.name()).map_err(|e| fail("address", &e))?;
    let mut s = UnixStream::connect_addr(&addr).map_err(|e| fail("connect", &e))?;
    s.set_read_timeout(Some(TIMEOUT))
        .map_err(|e| fail("timeout", &e))?;
    s.write_all(&key.to_le_bytes())
        .map_err(|e| fail("request", &e))?;
    let (found, fd) = receive(&s).map_err(|e| fail("reply", &e))?;
    match (found, fd) {
        (1, Some(fd)) => Ok(fd),
        _ => Err(fail("reply", &"not offered (freed meanwhile?)")),
    }
}

fn server() -> Result<Endpoint> {
    let at = SERVER
        .get_or_init(start)
        .clone()
        .map_err(|e| Error::NotSupported(format!("cannot serve descriptors to peers: {e}")))?;
    // A forked child inherits the parent's server record but not its thread: its offers
    // would be asked of the parent.
    if at.pid != std::process::id() {
        return Err(Error::NotSupported(
            "cannot serve descriptors to peers from a forked child of the process that started serving".into(),
        ));
    }
    Ok(at)
}

fn start() -> std::result::Result<Endpoint, String> {
    let pid = std::process::id();
    let nonce = {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        (t as u32) ^ ((t >> 32) as u32) ^ pid.rotate_left(16)
    };
    let at = Endpoint { pid, nonce };
    let addr = SocketAddr::from_abstract_name(at.name()).map_err(|e| e.to_string())?;
    let listener = UnixListener::bind_addr(&addr).map_err(|e| e.to_string())?;
    std::thread::Builder::new()
        .name("cudecomp-fd".into())
        .spawn(move || {
            for conn in listener.incoming() {
                match conn {
                    // One short exchange per connection; a misbehaving client only
                    // delays the next one by the timeout.
                    Ok(c) => {
                        let _ = serve(c);
                    }
                    // Out of descriptors, say: retry later rather than spin.
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        })
        .map_err(|e| e.to_string())?;
    Ok(at)
}

/// Answers one request: a status byte, with the descriptor attached when found and the
/// client runs as this process's user.
fn serve(mut s: UnixStream) -> std::io::Result<()> {
    s.set_read_timeout(Some(TIMEOUT))?;
    let mut key = [0u8; 8];
    s.read_exact(&mut key)?;
    let key = u64::from_le_bytes(key);
    let same_user = peer_uid(&s)? == current_uid();
    let guard = offered();
    let fd = guard
        .as_ref()
        .and_then(|m| m.get(&key))
        .filter(|_| same_user)
        .map(AsRawFd::as_raw_fd);
    // Sent while the lock keeps the descriptor open.
    send(&s, fd)
}

fn current_uid() -> u32 {
    // SAFETY: getuid cannot fail.
    unsafe { libc::getuid() }
}

fn peer_uid(s: &UnixStream) -> std::io::Result<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: u32::MAX,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: writes at most `len` bytes into `cred`.
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(cred.uid)
}

/// Room for one descriptor's control message (u64 words keep it aligned).
const CONTROL_WORDS: usize = 4;

/// Runs `f` on a message of one status byte and room for one descriptor's control data.
fn message<R>(
    status: &mut [u8; 1],
    control: &mut [u64; CONTROL_WORDS],
    f: impl FnOnce(&mut libc::msghdr) -> R,
) -> R {
    let mut iov = libc::iovec {
        iov_base: status.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // SAFETY: a zeroed msghdr is valid; the pointers set below outlive `f`.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(control);
    f(&mut msg)
}

fn send(s: &UnixStream, fd: Option<RawFd>) -> std::io::Result<()> {
    let mut status = [u8::from(fd.is_some())];
    let mut control = [0u64; CONTROL_WORDS];
    let n = message(&mut status, &mut control, |msg| {
        match fd {
            // SAFETY: CMSG_SPACE of one int fits in the control words (32 bytes); the
            // header returned by CMSG_FIRSTHDR lies inside them, as does its data.
            Some(fd) => unsafe {
                msg.msg_controllen = libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) as usize;
                let c = libc::CMSG_FIRSTHDR(msg);
                (*c).cmsg_level = libc::SOL_SOCKET;
                (*c).cmsg_type = libc::SCM_RIGHTS;
                (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as usize;
                std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<RawFd>(), fd);
            },
            None => {
                msg.msg_control = std::ptr::null_mut();
                msg.msg_controllen = 0;
            }
        }
        // SAFETY: `msg` describes live buffers.
        unsafe { libc::sendmsg(s.as_raw_fd(), msg, libc::MSG_NOSIGNAL) }
    });
    if n != 1 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn receive(s: &UnixStream) -> std::io::Result<(u8, Option<OwnedFd>)> {
    let mut status = [0u8; 1];
    let mut control = [0u64; CONTROL_WORDS];
    message(&mut status, &mut control, |msg| {
        // SAFETY: `msg` describes live buffers; received descriptors are closed on exec.
        let n = unsafe { libc::recvmsg(s.as_raw_fd(), msg, libc::MSG_CMSG_CLOEXEC) };
        if n != 1 {
            return Err(match n {
                0 => std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "no answer"),
                _ => std::io::Error::last_os_error(),
            });
        }
        let mut fd = None;
        // SAFETY: walks the control messages the kernel wrote into the control words.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                    let raw = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<RawFd>());
                    fd = Some(OwnedFd::from_raw_fd(raw));
                }
                c = libc::CMSG_NXTHDR(msg, c);
            }
        }
        Ok(fd)
    })
    .map(|fd| (status[0], fd))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::io::{Seek, SeekFrom};

    #[test]
    fn descriptors_reach_another_client_and_stay_valid_after_withdrawal() {
        let mut f = tempfile_with(b"shared bytes");
        let dup = f.try_clone().expect("dup");
        let at = offer(77, OwnedFd::from(dup)).expect("offer");
        // Another thread stands for another process: it gets its own descriptor.
        let got = std::thread::spawn(move || fetch(at, 77))
            .join()
            .expect("client thread")
            .expect("fetched");
        withdraw(77);
        let mut g = File::from(got);
        g.seek(SeekFrom::Start(0)).expect("seek");
        let mut text = String::new();
        g.read_to_string(&mut text).expect("read");
        assert_eq!(text, "shared bytes");
        // The same file: a write through one descriptor is seen through the other.
        f.seek(SeekFrom::Start(0)).expect("seek");
        f.write_all(b"S").expect("write");
        g.seek(SeekFrom::Start(0)).expect("seek");
        let mut first = [0u8; 1];
        g.read_exact(&mut first).expect("read");
        assert_eq!(&first, b"S");
        let err = fetch(at, 77).expect_err("withdrawn");
        assert!(err.to_string().contains("not offered"), "{err}");
        let err = fetch(at, 12345).expect_err("never offered");
        assert!(err.to_string().contains("not offered"), "{err}");
    }

    fn tempfile_with(bytes: &[u8]) -> File {
        let name = std::ffi::CString::new("fdpass-test").expect("name");
        // SAFETY: creates an anonymous memory file owned by the returned File.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0, "memfd_create");
        // SAFETY: a fresh descriptor owned by nothing else.
        let mut f = unsafe { File::from_raw_fd(fd) };
        f.write_all(bytes).expect("write");
        f
    }
}
