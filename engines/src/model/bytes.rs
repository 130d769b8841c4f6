//! Weight bytes that live as long as the model: a slice of a memory-mapped file, or an owned buffer.

use std::sync::Arc;

use tgi_formats::TensorSource;

/// Which part of a stored tensor a layer reads: expert `index` of a stack of `count` (llama.cpp's 3-D expert
/// tensors), or all of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Part {
    /// The expert.
    pub index: usize,
    /// Experts in the stack.
    pub count: usize,
}

impl Part {
    /// The part's bytes of the whole tensor's `bytes` (all of them for `None`).
    pub fn of(part: Option<Part>, bytes: &[u8]) -> &[u8] {
        match part {
            Some(p) => {
                let len = bytes.len() / p.count;
                &bytes[p.index * len..(p.index + 1) * len]
            }
            None => bytes,
        }
    }
}

/// Bytes of one stored tensor, kept valid for as long as this value lives.
pub enum WeightBytes {
    /// Borrowed from the source's memory map, which `owner` keeps alive.
    Mapped {
        /// The tensor source holding the map.
        owner: Arc<dyn TensorSource>,
        /// Start of the bytes inside the map.
        ptr: *const u8,
        /// Length in bytes.
        len: usize,
    },
    /// Converted at load time (e.g. to another `--dtype`).
    Owned(Vec<u8>),
}

// SAFETY: the pointer is into a read-only memory map owned (through `owner`) by this value; maps do not move
// and are never written, so sharing and sending the bytes across threads is as safe as sharing `&[u8]`.
unsafe impl Send for WeightBytes {}
// SAFETY: see `Send`.
unsafe impl Sync for WeightBytes {}

impl WeightBytes {
    /// Borrows tensor `name` from `owner`'s map.
    pub fn mapped(owner: &Arc<dyn TensorSource>, name: &str) -> Result<Self, tgi_formats::SourceError> {
        Self::mapped_part(owner, name, None)
    }

    /// Borrows `part` of tensor `name` (all of it for `None`) from `owner`'s map.
    pub fn mapped_part(
        owner: &Arc<dyn TensorSource>,
        name: &str,
        part: Option<Part>,
    ) -> Result<Self, tgi_formats::SourceError> {
        let bytes = Part::of(part, owner.raw_bytes(name)?);
        Ok(WeightBytes::Mapped { owner: Arc::clone(owner), ptr: bytes.as_ptr(), len: bytes.len() })
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        match self {
            // SAFETY: `ptr..ptr+len` was a live slice of the map that `owner` keeps mapped (see the Send impl).
            WeightBytes::Mapped { ptr, len, .. } => unsafe { std::slice::from_raw_parts(*ptr, *len) },
            WeightBytes::Owned(v) => v,
        }
    }

    /// Tells the OS that `part` of these bytes (a subslice) will not be read again soon, as it was copied elsewhere:
    /// for mapped bytes its whole pages leave the process's resident set, and are read back from the file if ever
    /// touched again. Owned bytes stay as they are.
    pub fn release(&self, part: &[u8]) {
        let WeightBytes::Mapped { ptr, len, .. } = self else { return };
        let (lo, hi) = (part.as_ptr() as usize, part.as_ptr() as usize + part.len());
        assert!(lo >= *ptr as usize && hi <= *ptr as usize + len, "release: the part is not inside these bytes");
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as usize;
        let (start, end) = (lo.next_multiple_of(page), hi / page * page);
        if end > start {
            // SAFETY: the range is whole pages of a read-only file map that `owner` keeps mapped; dropping them
            // only makes the next read fault them in from the file again, with the same contents.
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
        }
    }

    /// Pins the bytes in RAM (`mlock`) so the OS never pages them out.
    pub fn lock(&self) -> std::io::Result<()> {
        lock(self.as_slice())
    }
}

/// Pins `s` in RAM (`mlock`) so the OS never pages it out.
pub fn lock(s: &[u8]) -> std::io::Result<()> {
    if s.is_empty() {
        return Ok(());
    }
    // SAFETY: locking a valid, mapped range has no effect on memory safety.
    let rc = unsafe { libc::mlock(s.as_ptr().cast(), s.len()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
