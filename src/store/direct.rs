//! Sequential files written and read around the page cache (`O_DIRECT` on
//! Linux).
//!
//! Scratch files that are written once and read back once (ingest's spilled
//! boards) gain nothing from the page cache, and filling it costs a copy
//! into memory the kernel must first find: on a virtual machine whose host
//! backs guest memory on first touch (this project's machines), writing and
//! reading through the page cache took several times as long as direct
//! transfers (bench/results/amd2-2026-11-29/README.md, "Figures once kept
//! in the source"). [`DirectWriter`] gathers whole
//! 4 KiB blocks in an aligned buffer and writes them straight to the disk;
//! the unaligned tail goes through the page cache in
//! [`DirectWriter::finish`]. [`DirectReader`] reads whole buffers of blocks
//! straight from the disk (the kernel writes back a cached tail before a
//! direct read covers it). Where the file system refuses `O_DIRECT` (tmpfs,
//! some network file systems) both work as with any file.
//!
//! A file read once ([`DirectReader::open_once`]: ingest's run files, each
//! merged once into the tables) gives its disk space back as it is read,
//! so a stage's scratch shrinks while its output grows instead of both
//! peaking together at the end (10^7 games: ~27 GB of runs beside 23 GB of
//! tables).

use std::{
    fs::{File, OpenOptions},
    io::{self, Read, Write},
    path::Path,
};

/// Alignment of `O_DIRECT` buffers, offsets and lengths (the largest
/// logical block size of common disks).
const ALIGN: usize = 4096;

#[derive(Clone, Copy)]
#[repr(C, align(4096))]
struct Block([u8; ALIGN]);

/// Appends to a new file through an aligned buffer of whole blocks (see
/// the module). Bytes are on their way to the disk once written, except the
/// last partial block, which [`DirectWriter::finish`] writes: dropping the
/// writer without it loses that tail.
pub(crate) struct DirectWriter {
    file: File,
    blocks: Vec<Block>,
    /// Bytes buffered at the start of `blocks`.
    len: usize,
    direct: bool,
}

impl DirectWriter {
    /// Creates (or truncates) `path` with a buffer of about `buffer` bytes
    /// (whole blocks, at least one).
    pub(crate) fn create(path: &Path, buffer: usize) -> io::Result<DirectWriter> {
        let (file, direct) = open(path)?;
        Ok(DirectWriter {
            file,
            blocks: blocks(buffer),
            len: 0,
            direct,
        })
    }

    /// Writes the whole blocks buffered; the partial one stays, moved to the
    /// start of the buffer.
    fn write_blocks(&mut self) -> io::Result<()> {
        let whole = self.len / ALIGN * ALIGN;
        if whole == 0 {
            return Ok(());
        }
        let len = self.len;
        let data = &bytes(&self.blocks)[..whole];
        let mut done = 0;
        while done < whole {
            match (&self.file).write(&data[done..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => done += n,
                Err(e) => retry_or_fail(&self.file, &mut self.direct, e)?,
            }
        }
        bytes_mut(&mut self.blocks).copy_within(whole..len, 0);
        self.len = len - whole;
        Ok(())
    }

    /// Writes the rest (the last partial block through the page cache) and
    /// closes the file.
    pub(crate) fn finish(mut self) -> io::Result<()> {
        self.write_blocks()?;
        if self.len > 0 {
            if self.direct {
                set_direct(&self.file, false)?;
            }
            let tail = self.len;
            (&self.file).write_all(&bytes(&self.blocks)[..tail])?;
        }
        Ok(())
    }
}

impl Write for DirectWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let capacity = self.blocks.len() * ALIGN;
        let n = data.len().min(capacity - self.len);
        let at = self.len;
        bytes_mut(&mut self.blocks)[at..at + n].copy_from_slice(&data[..n]);
        self.len += n;
        if self.len == capacity {
            self.write_blocks()?;
        }
        Ok(n)
    }

    /// Writes the whole blocks buffered (the partial last one waits for
    /// [`DirectWriter::finish`]).
    fn flush(&mut self) -> io::Result<()> {
        self.write_blocks()
    }
}

/// Reads a file from its start through an aligned buffer of whole blocks
/// (see the module): each refill is one read of the whole buffer at an
/// offset that is a multiple of it, so only the end of the file gives a
/// short read.
pub(crate) struct DirectReader {
    file: File,
    blocks: Vec<Block>,
    /// Unread bytes are `blocks[at..len]`.
    at: usize,
    len: usize,
    direct: bool,
    eof: bool,
    /// File offset of `blocks[0]`.
    offset: u64,
    /// The bytes before this offset were given back to the file system;
    /// the next `release_step` bytes read will be.
    released: u64,
    release_step: u64,
}

/// How much a file read once is read between two give-backs (one
/// `fallocate` call each).
const RELEASE_STEP: u64 = 8 << 20;

impl DirectReader {
    /// Opens a file that is read once, from its start, with a buffer of
    /// about `buffer` bytes (whole blocks, at least one): what has been read
    /// is given back to the file system as the reader goes (every 8 MiB,
    /// punched out with `fallocate`; the file keeps its length and reads
    /// back zeros there). Where the file system cannot punch holes the file
    /// keeps its space until it is removed.
    pub(crate) fn open_once(path: &Path, buffer: usize) -> io::Result<DirectReader> {
        DirectReader::open_once_with_step(path, buffer, RELEASE_STEP)
    }

    fn open_once_with_step(path: &Path, buffer: usize, step: u64) -> io::Result<DirectReader> {
        // Punching a hole needs a descriptor open for writing.
        let (file, direct) = open_direct(OpenOptions::new().read(true).write(true), path)?;
        Ok(DirectReader {
            file,
            blocks: blocks(buffer),
            at: 0,
            len: 0,
            direct,
            eof: false,
            offset: 0,
            released: 0,
            release_step: step,
        })
    }

    /// Refills the buffer; leaves it empty at the end of the file.
    fn fill(&mut self) -> io::Result<()> {
        // The buffer was read to its end: its bytes are done with.
        self.offset += self.len as u64;
        if self.offset - self.released >= self.release_step {
            punch_hole(&self.file, self.released, self.offset - self.released);
            self.released = self.offset;
        }
        let capacity = self.blocks.len() * ALIGN;
        let mut len = 0;
        while len < capacity {
            match (&self.file).read(&mut bytes_mut(&mut self.blocks)[len..]) {
                Ok(0) => {
                    self.eof = true;
                    break;
                }
                Ok(n) => len += n,
                Err(e) => retry_or_fail(&self.file, &mut self.direct, e)?,
            }
        }
        (self.at, self.len) = (0, len);
        Ok(())
    }
}

impl Read for DirectReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.at == self.len {
            if self.eof || out.is_empty() {
                return Ok(0);
            }
            self.fill()?;
        }
        let n = out.len().min(self.len - self.at);
        out[..n].copy_from_slice(&bytes(&self.blocks)[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// After a failed read or write: `Ok` to try again (interrupted; or
/// `EINVAL` with `O_DIRECT` on, which is then turned off: the file system
/// took the flag but not this transfer, or a short one left the offset
/// unaligned), else the error.
fn retry_or_fail(file: &File, direct: &mut bool, e: io::Error) -> io::Result<()> {
    if e.kind() == io::ErrorKind::Interrupted {
        return Ok(());
    }
    if *direct && e.raw_os_error() == Some(libc::EINVAL) {
        *direct = false;
        return set_direct(file, false);
    }
    Err(e)
}

/// Gives `len` bytes of `file` from `offset` back to the file system
/// (`FALLOC_FL_PUNCH_HOLE`, keeping the file's length). Advice only: a file
/// system that cannot is left as it is, and the file is removed later.
#[cfg(target_os = "linux")]
fn punch_hole(file: &File, offset: u64, len: u64) {
    use std::os::fd::AsRawFd;
    // SAFETY: a plain system call on our own open descriptor; the range lies
    // within what was read.
    unsafe {
        libc::fallocate(
            file.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            offset as libc::off_t,
            len as libc::off_t,
        );
    }
}

#[cfg(not(target_os = "linux"))]
fn punch_hole(_: &File, _: u64, _: u64) {}

/// A zeroed buffer of about `bytes` bytes: whole blocks, at least one.
fn blocks(bytes: usize) -> Vec<Block> {
    vec![Block([0; ALIGN]); bytes.div_ceil(ALIGN).max(1)]
}

/// Whole blocks as bytes.
fn bytes(blocks: &[Block]) -> &[u8] {
    // SAFETY: `Block` is `repr(C)` around `[u8; ALIGN]` (size ALIGN, no
    // padding), so `len` blocks are `len * ALIGN` initialized bytes.
    unsafe {
        std::slice::from_raw_parts(blocks.as_ptr().cast::<u8>(), std::mem::size_of_val(blocks))
    }
}

fn bytes_mut(blocks: &mut [Block]) -> &mut [u8] {
    let len = std::mem::size_of_val(blocks);
    // SAFETY: as in `bytes`, borrowed mutably.
    unsafe { std::slice::from_raw_parts_mut(blocks.as_mut_ptr().cast::<u8>(), len) }
}

/// Opens `path` for writing (a new or truncated file) with `O_DIRECT` where
/// the system takes it; whether it did.
fn open(path: &Path) -> io::Result<(File, bool)> {
    let mut options = OpenOptions::new();
    options.write(true).create(true).truncate(true);
    open_direct(&options, path)
}

#[cfg(target_os = "linux")]
fn open_direct(options: &OpenOptions, path: &Path) -> io::Result<(File, bool)> {
    use std::os::unix::fs::OpenOptionsExt;
    match options.clone().custom_flags(libc::O_DIRECT).open(path) {
        Ok(file) => Ok((file, true)),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok((options.open(path)?, false)),
        Err(e) => Err(e),
    }
}

#[cfg(not(target_os = "linux"))]
fn open_direct(options: &OpenOptions, path: &Path) -> io::Result<(File, bool)> {
    Ok((options.open(path)?, false))
}

#[cfg(target_os = "linux")]
fn set_direct(file: &File, on: bool) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on our own open descriptor, reading then setting its
    // status flags.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 {
            return Err(io::Error::last_os_error());
        }
        let flags = if on {
            flags | libc::O_DIRECT
        } else {
            flags & !libc::O_DIRECT
        };
        if libc::fcntl(fd, libc::F_SETFL, flags) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn set_direct(_: &File, _: bool) -> io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Odd sizes across block and buffer boundaries read back exactly, on
    /// a disk (`O_DIRECT`) and on tmpfs (which refuses it) alike.
    #[test]
    fn writes_read_back_exactly() {
        let disk = tempfile::tempdir().unwrap();
        let mut dirs = vec![disk.path().to_owned()];
        if Path::new("/dev/shm").is_dir() {
            dirs.push("/dev/shm".into());
        }
        for dir in dirs {
            let path = dir.join(format!("direct-{}.bin", std::process::id()));
            let mut expected = Vec::new();
            let mut w = DirectWriter::create(&path, 3 * ALIGN).unwrap();
            for i in 0..2000u32 {
                let chunk: Vec<u8> = (0..(i * 37) % 9001).map(|j| (i ^ j) as u8).collect();
                w.write_all(&chunk).unwrap();
                expected.extend_from_slice(&chunk);
                if i % 500 == 0 {
                    w.flush().unwrap();
                }
            }
            w.finish().unwrap();
            assert_eq!(std::fs::read(&path).unwrap(), expected, "{}", dir.display());
            // Read back directly, in odd pieces, with buffers smaller and
            // larger than the file (three times: nothing given back).
            for buffer in [ALIGN, 5 * ALIGN, expected.len() + ALIGN] {
                let mut r = DirectReader::open_once_with_step(&path, buffer, u64::MAX).unwrap();
                let mut got = Vec::new();
                let mut piece = vec![0u8; 777];
                loop {
                    let n = r.read(&mut piece).unwrap();
                    if n == 0 {
                        break;
                    }
                    got.extend_from_slice(&piece[..n]);
                }
                assert_eq!(r.read(&mut piece).unwrap(), 0, "stays at the end");
                assert!(
                    got == expected,
                    "{} with a {buffer}-byte buffer",
                    dir.display()
                );
            }
            std::fs::remove_file(&path).unwrap();
        }
    }

    /// A file read once reads back exactly and gives its space back behind
    /// the reader: after 3 MiB of a 4 MiB file, at most the last 2 MiB
    /// (one step and the buffer) still hold disk blocks.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_file_read_once_gives_its_space_back() {
        use std::os::unix::fs::MetadataExt;
        let disk = tempfile::tempdir().unwrap();
        let path = disk.path().join("run-00.bin");
        let expected: Vec<u8> = (0..4u32 << 20).map(|i| (i * 7 + (i >> 12)) as u8).collect();
        let mut w = DirectWriter::create(&path, 1 << 20).unwrap();
        w.write_all(&expected).unwrap();
        w.finish().unwrap();
        let held = |p: &Path| std::fs::metadata(p).unwrap().blocks() * 512;
        assert!(held(&path) >= 4 << 20, "written whole: {}", held(&path));
        let mut r = DirectReader::open_once_with_step(&path, 256 << 10, 1 << 20).unwrap();
        let mut got = vec![0u8; 3 << 20];
        r.read_exact(&mut got).unwrap();
        assert_eq!(got, expected[..3 << 20]);
        assert!(
            held(&path) <= 2 << 20,
            "{} bytes still held after 3 MiB read",
            held(&path)
        );
        let mut rest = Vec::new();
        r.read_to_end(&mut rest).unwrap();
        assert_eq!(rest, expected[3 << 20..]);
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            4 << 20,
            "length kept"
        );
    }
}
