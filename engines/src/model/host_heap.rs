//! The C allocator's settings for the engine's buffers. Every CPU forward allocates its activations and logits
//! afresh (16 MiB of logits a step for 16 sequences over a 262k vocabulary); glibc hands buffers over 128 KiB to
//! `mmap` and gives freed heap tops back to the OS, so each step paid a page fault and a page clear for every
//! 4 KiB of them: 400k faults and 15% of Gemma 3 270M's 16-sequence decode. Kept in the heap, they are reused.

use std::sync::Once;

/// Keeps freed buffers of up to 32 MiB in the process's heap for reuse, once per process; a user's own
/// `MALLOC_MMAP_THRESHOLD_`, `MALLOC_TRIM_THRESHOLD_` or `GLIBC_TUNABLES` wins. Only glibc on Linux has these.
pub fn keep_freed_buffers() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let user_set = ["MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES"]
            .iter()
            .any(|v| std::env::var_os(v).is_some());
        if !user_set {
            set();
        }
    });
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn set() {
    /// Buffers up to this size come from the heap, not from a fresh `mmap` (glibc's largest allowed threshold).
    const MMAP_THRESHOLD: i32 = 32 << 20;
    /// Freed memory at the heap's top stays mapped up to this size.
    const TRIM_THRESHOLD: i32 = 256 << 20;
    // SAFETY: mallopt only changes the allocator's thresholds; it is thread-safe and has no memory preconditions.
    let ok = unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
            && libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    };
    if !ok {
        tracing::debug!("mallopt refused the heap thresholds; large buffers stay mmapped");
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn set() {}
