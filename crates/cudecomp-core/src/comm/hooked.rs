//! One forwarding decorator for transports: a [`Hooked`] transport forwards every call to
//! the transport it wraps, running its [`Hook`] before the calls that post messages and
//! around every call. What differs between wrappers (a stream fence, per-call timing) is
//! the hook; the forwarding is written once.

use super::{Request, Transport};
use crate::Result;

/// What a [`Hooked`] transport adds to the calls it forwards.
pub(crate) trait Hook {
    /// Runs before each call that posts messages (`isend`, `irecv`, `alltoallv`).
    fn before_post(&self) -> Result<()> {
        Ok(())
    }

    /// Runs `call`, one forwarded call (after [`Hook::before_post`] where there is one).
    fn around<T>(&self, call: impl FnOnce() -> Result<T>) -> Result<T> {
        call()
    }

    /// Whether the hooked transport accepts device pointers, given the inner one's answer.
    fn cuda_aware(&self, inner: bool) -> bool {
        inner
    }
}

/// A transport that forwards to `inner` through `hook`.
pub(crate) struct Hooked<'a, H> {
    pub(crate) inner: &'a dyn Transport,
    pub(crate) hook: H,
}

impl<'a, H: Hook> Hooked<'a, H> {
    /// `inner`, its calls going through `hook`.
    pub(crate) fn new(inner: &'a dyn Transport, hook: H) -> Self {
        Hooked { inner, hook }
    }

    fn posting<T>(&self, call: impl FnOnce() -> Result<T>) -> Result<T> {
        self.hook.around(|| {
            self.hook.before_post()?;
            call()
        })
    }
}

impl<H: Hook> Transport for Hooked<'_, H> {
    unsafe fn isend(&self, buf: *const u8, len: usize, peer: usize, tag: i32) -> Result<Request> {
        // SAFETY: forwarded to the caller.
        self.posting(|| unsafe { self.inner.isend(buf, len, peer, tag) })
    }

    unsafe fn irecv(&self, buf: *mut u8, len: usize, peer: usize, tag: i32) -> Result<Request> {
        // SAFETY: forwarded to the caller.
        self.posting(|| unsafe { self.inner.irecv(buf, len, peer, tag) })
    }

    fn wait_all(&self, reqs: &mut [Request]) -> Result<()> {
        self.hook.around(|| self.inner.wait_all(reqs))
    }

    fn wait_any(&self, reqs: &mut [Request]) -> Result<Option<usize>> {
        self.hook.around(|| self.inner.wait_any(reqs))
    }

    unsafe fn alltoallv(
        &self,
        send: *const u8,
        send_counts: &[usize],
        send_displs: &[usize],
        recv: *mut u8,
        recv_counts: &[usize],
        recv_displs: &[usize],
    ) -> Result<()> {
        // SAFETY: forwarded to the caller.
        self.posting(|| unsafe {
            self.inner.alltoallv(
                send,
                send_counts,
                send_displs,
                recv,
                recv_counts,
                recv_displs,
            )
        })
    }

    fn cuda_aware(&self) -> bool {
        self.hook.cuda_aware(self.inner.cuda_aware())
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;
    use crate::comm::Communicator;
    use crate::testing::mock;

    /// Counts posts and calls.
    #[derive(Default)]
    struct Counting {
        posts: Cell<usize>,
        calls: Cell<usize>,
    }

    impl Hook for Counting {
        fn before_post(&self) -> Result<()> {
            self.posts.set(self.posts.get() + 1);
            Ok(())
        }

        fn around<T>(&self, call: impl FnOnce() -> Result<T>) -> Result<T> {
            self.calls.set(self.calls.get() + 1);
            call()
        }

        fn cuda_aware(&self, _inner: bool) -> bool {
            true
        }
    }

    #[test]
    fn forwards_every_call_through_the_hook() {
        let results = mock::run(
            2,
            |world: &dyn Communicator| -> Result<(usize, usize, bool, u64)> {
                let t = Hooked::new(world, Counting::default());
                let peer = 1 - world.rank();
                let mine = [world.rank() as u64 + 7];
                let mut theirs = [0u64];
                // SAFETY: both arrays outlive the requests, completed by wait_all below.
                let mut reqs = unsafe {
                    vec![
                        t.irecv(theirs.as_mut_ptr().cast(), 8, peer, 3)?,
                        t.isend(mine.as_ptr().cast(), 8, peer, 3)?,
                    ]
                };
                t.wait_all(&mut reqs)?;
                Ok((
                    t.hook.posts.get(),
                    t.hook.calls.get(),
                    t.cuda_aware(),
                    theirs[0],
                ))
            },
        );
        assert_eq!(results, vec![Ok((2, 3, true, 8)), Ok((2, 3, true, 7))]);
    }
}
