//! The bound on open connections: `--max-connections` served as usual, a small reserve beyond it
//! that is answered at once (health checks served, anything else 503) so that `/health` stays
//! reachable when the connections are exhausted, and nothing beyond that. A full reserve makes room
//! by evicting its oldest connection still waiting for a request head, so connections that never
//! send one cannot keep health checks out. Each connection holds a file descriptor, so the open-file
//! limit is fitted to the bound at startup.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// Connections answered beyond `--max-connections`.
pub const RESERVE: usize = 16;

/// File descriptors the process needs besides its connections (model files, the listener, stdio).
const OTHER_FILES: libc::rlim_t = 64;

/// The connection slots; a connection holds its [`Slot`] until it closes.
pub struct Slots {
    regular: Arc<Semaphore>,
    reserve: Arc<Mutex<VecDeque<Arc<Reserved>>>>,
}

/// A connection in the reserve, as the reserve sees it.
#[derive(Default)]
pub struct Reserved {
    /// Whether its first request head arrived (it is then no longer evicted).
    started: AtomicBool,
    /// Notified when it is evicted.
    evict: Notify,
}

impl Reserved {
    /// Notes that the connection's first request arrived.
    pub fn start(&self) {
        self.started.store(true, Ordering::Relaxed);
    }

    /// Resolves when the connection is evicted to make room.
    pub async fn evicted(&self) {
        self.evict.notified().await;
    }
}

/// A connection's place, given back when dropped.
pub enum Slot {
    /// Within `--max-connections`.
    Regular {
        /// Held until the connection closes.
        _permit: OwnedSemaphorePermit,
    },
    /// In the reserve, where only health checks are served.
    Reserve(ReserveSlot),
}

/// A place in the reserve.
pub struct ReserveSlot {
    /// The connection as the reserve sees it.
    pub reserved: Arc<Reserved>,
    reserve: Arc<Mutex<VecDeque<Arc<Reserved>>>>,
}

impl Drop for ReserveSlot {
    fn drop(&mut self) {
        if let Ok(mut q) = self.reserve.lock() {
            q.retain(|r| !Arc::ptr_eq(r, &self.reserved));
        }
    }
}

impl Slots {
    /// `max` regular slots and [`RESERVE`] more.
    pub fn new(max: usize) -> Self {
        Slots { regular: Arc::new(Semaphore::new(max)), reserve: Arc::default() }
    }

    /// A slot for a new connection: a regular one, else one in the reserve (evicting the reserve's
    /// oldest connection still waiting for a request when it is full), else `None`.
    pub fn take(&self) -> Option<Slot> {
        if let Ok(p) = self.regular.clone().try_acquire_owned() {
            return Some(Slot::Regular { _permit: p });
        }
        let mut q = self.reserve.lock().ok()?;
        if q.len() >= RESERVE {
            let idle = q.iter().position(|r| !r.started.load(Ordering::Relaxed))?;
            if let Some(evicted) = q.remove(idle) {
                evicted.evict.notify_one();
            }
        }
        let reserved = Arc::new(Reserved::default());
        q.push_back(reserved.clone());
        Some(Slot::Reserve(ReserveSlot { reserved, reserve: self.reserve.clone() }))
    }
}

/// Raises the open-file limit (`ulimit -n`) so that `max_connections` plus the reserve fit, within
/// the hard limit; returns how many connections fit (`max_connections` unless the limit is lower).
pub fn fit_open_files(max_connections: usize) -> usize {
    let needed = (max_connections + RESERVE) as libc::rlim_t + OTHER_FILES;
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 || lim.rlim_cur >= needed {
        return max_connections;
    }
    let raised = libc::rlimit { rlim_cur: needed.min(lim.rlim_max), rlim_max: lim.rlim_max };
    // SAFETY: setrlimit reads the struct it is given.
    let limit =
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 { raised.rlim_cur } else { lim.rlim_cur };
    if limit >= needed {
        return max_connections;
    }
    let fit = limit.saturating_sub(RESERVE as libc::rlim_t + OTHER_FILES).max(1) as usize;
    tracing::warn!(
        "the open-file limit ({limit}) is too low for --max-connections {max_connections}: serving at most {fit} \
         connections (raise the hard limit, e.g. `ulimit -Hn`, to allow more)"
    );
    fit
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reserved(slot: &Slot) -> Arc<Reserved> {
        match slot {
            Slot::Reserve(r) => r.reserved.clone(),
            Slot::Regular { .. } => panic!("a regular slot"),
        }
    }

    #[tokio::test]
    async fn regular_then_reserve_evicting_connections_without_a_request() {
        let slots = Slots::new(2);
        let regular: Vec<Slot> = (0..2).map(|_| slots.take().unwrap()).collect();
        assert!(regular.iter().all(|s| matches!(s, Slot::Regular { .. })));
        let reserve: Vec<Slot> = (0..RESERVE).map(|_| slots.take().unwrap()).collect();
        // Every reserved connection but the second has a request: the second is evicted.
        for (i, s) in reserve.iter().enumerate() {
            if i != 1 {
                reserved(s).start();
            }
        }
        let newcomer = slots.take().unwrap();
        assert!(matches!(newcomer, Slot::Reserve(_)));
        let told = tokio::time::timeout(std::time::Duration::from_secs(10), reserved(&reserve[1]).evicted()).await;
        assert!(told.is_ok(), "the idle connection was not told");
        // Now all have requests: nobody can be evicted.
        reserved(&newcomer).start();
        assert!(slots.take().is_none());
        drop(reserve);
        assert!(matches!(slots.take(), Some(Slot::Reserve(_))));
        drop(regular);
        assert!(matches!(slots.take(), Some(Slot::Regular { .. })));
    }
}
