//! Tests that spawn hundreds of threads at once, as stress tests do. Each thread has its own
//! stack (2 MiB of address space by default), which is what a data-size limit
//! (`RLIMIT_DATA`) wrongly counts: these tests must pass in every sandbox.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;

/// Spawns `n` threads that all wait at one barrier (so they are alive at the same time),
/// then each adds its index; returns the sum.
pub fn crowd(n: usize) -> usize {
    let barrier = Arc::new(Barrier::new(n));
    let total = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let barrier = Arc::clone(&barrier);
            let total = Arc::clone(&total);
            thread::spawn(move || {
                barrier.wait();
                total.fetch_add(i, Ordering::SeqCst);
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    total.load(Ordering::SeqCst)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_hundred_threads_at_once() {
        assert_eq!(crowd(300), 300 * 299 / 2);
    }

    #[test]
    fn five_hundred_threads_at_once() {
        assert_eq!(crowd(500), 500 * 499 / 2);
    }

    #[test]
    fn crowd_fails_on_purpose() {
        assert_eq!(crowd(10), 0, "the sum of 0..10 is not 0");
    }
}
