//! The probe's registered memory: whole pages, page-aligned, as JACCL
//! registers its buffers with Apple's stack (ARCHITECTURE.md, "The RDMA
//! probe"). A registration pins whole pages anyway; owning them keeps the
//! probe's region from sharing a page with the rest of the heap, and an
//! aligned start is what Apple's stack is known to take.

use std::alloc::Layout;
use std::ptr::NonNull;

/// Zeroed, page-aligned bytes, freed when dropped.
pub(super) struct PageBuffer {
    start: NonNull<u8>,
    layout: Layout,
}

impl PageBuffer {
    /// At least `bytes`, rounded up to whole pages of `page_size` (a power
    /// of two); `None` when the layout is impossible or the allocator has
    /// no memory.
    pub(super) fn new(bytes: usize, page_size: usize) -> Option<Self> {
        let size = bytes.max(1).checked_next_multiple_of(page_size)?;
        let layout = Layout::from_size_align(size, page_size).ok()?;
        // SAFETY: `layout` has a non-zero size.
        let start = NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) })?;
        Some(Self { start, layout })
    }

    /// The page size of this host.
    pub(super) fn host_page_size() -> usize {
        rustix::param::page_size()
    }

    pub(super) fn len(&self) -> usize {
        self.layout.size()
    }

    pub(super) fn as_mut_ptr(&mut self) -> *mut u8 {
        self.start.as_ptr()
    }

    pub(super) fn bytes(&self) -> &[u8] {
        // SAFETY: `len` initialised (zeroed) bytes owned by this buffer.
        unsafe { std::slice::from_raw_parts(self.start.as_ptr(), self.len()) }
    }

    pub(super) fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, borrowed mutably through `self`.
        unsafe { std::slice::from_raw_parts_mut(self.start.as_ptr(), self.len()) }
    }
}

impl Drop for PageBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this very layout, freed once.
        unsafe { std::alloc::dealloc(self.start.as_ptr(), self.layout) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_whole_aligned_zeroed_pages() {
        let page = PageBuffer::host_page_size();
        assert!(page.is_power_of_two(), "{page}");
        let mut buffer = PageBuffer::new(768, page).expect("memory");
        assert_eq!(buffer.as_mut_ptr() as usize % page, 0);
        assert_eq!(buffer.len(), page);
        assert!(buffer.bytes().iter().all(|b| *b == 0));
        buffer.bytes_mut()[767] = 7;
        assert_eq!(buffer.bytes()[767], 7);
        let larger = PageBuffer::new(page + 1, page).expect("memory");
        assert_eq!(larger.len(), 2 * page);
    }

    #[test]
    fn an_impossible_layout_is_no_buffer() {
        assert!(PageBuffer::new(64, 3).is_none(), "not a power of two");
        assert!(PageBuffer::new(usize::MAX, 4096).is_none(), "too large");
    }
}
