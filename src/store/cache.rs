//! A CPU-cache hint shared by the large hash tables above this foundation
//! (ingest's board index, `stats`' test-in-train set): they fetch the slots
//! of a batch of keys ahead of looking them up, so misses overlap.

/// Asks the CPU to bring the cache line at `ptr` into its caches.
#[inline]
pub(crate) fn prefetch<T>(ptr: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it never faults, even for addresses
    // outside any allocation.
    unsafe {
        std::arch::x86_64::_mm_prefetch(ptr.cast::<i8>(), std::arch::x86_64::_MM_HINT_T0);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = ptr;
}
