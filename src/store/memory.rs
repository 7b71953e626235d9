//! Hints to the operating system about how big tables are used.

/// Asks Linux to back a big table with 2 MiB pages (`MADV_HUGEPAGE`; the
/// machine's default is often `madvise`): lookups in a table of gigabytes
/// then miss the TLB far less. A hint only; failure changes nothing.
pub(crate) fn advise_huge_pages<T>(data: *const T, len: usize) {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        let bytes = len * std::mem::size_of::<T>();
        if bytes < 2 * HUGE {
            return;
        }
        let start = data as usize;
        let aligned = start.next_multiple_of(HUGE);
        let end = (start + bytes) / HUGE * HUGE;
        if end > aligned {
            // SAFETY: the range lies inside the allocation of `len` items at
            // `data` (the caller's vector and its capacity); madvise
            // with MADV_HUGEPAGE does not change its contents.
            unsafe {
                libc::madvise(
                    aligned as *mut libc::c_void,
                    end - aligned,
                    libc::MADV_HUGEPAGE,
                );
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (data, len);
}
