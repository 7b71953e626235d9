//! `--sample-games N --seed S`: a uniform sample of N accepted games drawn
//! in one pass over a stream of unknown length.
//!
//! Each accepted game gets the priority `xxh3_64(game_no, seed)`; the sample
//! is the N games of lowest priority (bottom-k sampling, equivalent to a
//! reservoir sample). While streaming, a max-heap holds the N best so far and
//! only games that enter it are spooled to disk (metadata and moves): about
//! N * (1 + ln(M / N)) of M games. At the end, the spool is replayed in game
//! order keeping the final N, so board first-occurrence order is preserved.

use std::{
    collections::{BinaryHeap, HashSet},
    fs::File,
    io::{BufReader, BufWriter, Read, Write},
    path::{Path, PathBuf},
};

use xxhash_rust::xxh3::xxh3_64_with_seed;

use super::{config::Speed, error::IngestError, worker::GameMeta};

/// A spooled candidate.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Candidate {
    pub game_no: u64,
    pub split: u8,
    pub input: u32,
    pub game_index: u64,
    pub byte_offset: u64,
    pub line: u64,
    pub meta: GameMeta,
    pub moves: Vec<u16>,
}

/// The sampler.
pub(crate) struct Reservoir {
    k: usize,
    seed: u64,
    heap: BinaryHeap<(u64, u64)>,
    spool: BufWriter<File>,
    path: PathBuf,
    offered: u64,
    buf: Vec<u8>,
}

/// The priority of a game.
pub(crate) fn priority(game_no: u64, seed: u64) -> u64 {
    xxh3_64_with_seed(&game_no.to_le_bytes(), seed)
}

fn spool_err(path: &Path, source: std::io::Error) -> IngestError {
    IngestError::Spill {
        path: path.to_owned(),
        source,
    }
}

impl Reservoir {
    pub(crate) fn new(k: u64, seed: u64, dir: &Path) -> Result<Reservoir, IngestError> {
        let path = dir.join("sample-spool.bin");
        let file = File::create(&path).map_err(|e| spool_err(&path, e))?;
        Ok(Reservoir {
            k: usize::try_from(k).unwrap_or(usize::MAX),
            seed,
            heap: BinaryHeap::new(),
            spool: BufWriter::with_capacity(1 << 20, file),
            path,
            offered: 0,
            buf: Vec::new(),
        })
    }

    /// Offers an accepted game; spools it if it may end up in the sample.
    pub(crate) fn offer(&mut self, c: &Candidate) -> Result<(), IngestError> {
        self.offered += 1;
        let item = (priority(c.game_no, self.seed), c.game_no);
        if self.heap.len() < self.k {
            self.heap.push(item);
        } else if self.heap.peek().is_some_and(|top| item < *top) {
            self.heap.pop();
            self.heap.push(item);
        } else {
            return Ok(());
        }
        self.buf.clear();
        encode(c, &mut self.buf);
        self.spool
            .write_all(&self.buf)
            .map_err(|e| spool_err(&self.path, e))
    }

    /// Accepted games offered so far.
    #[cfg(test)]
    #[cfg(test)]
    pub(crate) fn offered(&self) -> u64 {
        self.offered
    }

    /// Ends the stream: the selected game numbers and a reader over the
    /// spooled candidates (a superset, in game order).
    pub(crate) fn finish(self) -> Result<(HashSet<u64>, SpoolReader), IngestError> {
        let Reservoir {
            heap, spool, path, ..
        } = self;
        let file = spool
            .into_inner()
            .map_err(|e| spool_err(&path, e.into_error()))?;
        drop(file);
        let selected = heap.into_iter().map(|(_, g)| g).collect();
        let file = File::open(&path).map_err(|e| spool_err(&path, e))?;
        Ok((
            selected,
            SpoolReader {
                reader: BufReader::with_capacity(1 << 20, file),
                path,
            },
        ))
    }
}

/// Reads spooled candidates back.
pub(crate) struct SpoolReader {
    reader: BufReader<File>,
    path: PathBuf,
}

impl Iterator for SpoolReader {
    type Item = Result<Candidate, IngestError>;
    fn next(&mut self) -> Option<Self::Item> {
        let mut len = [0u8; 4];
        match self.reader.read_exact(&mut len) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return None,
            Err(e) => return Some(Err(spool_err(&self.path, e))),
        }
        let mut body = vec![0u8; u32::from_le_bytes(len) as usize];
        if let Err(e) = self.reader.read_exact(&mut body) {
            return Some(Err(spool_err(&self.path, e)));
        }
        Some(decode(&body).ok_or_else(|| {
            IngestError::Internal(format!(
                "{}: corrupt sample spool record",
                self.path.display()
            ))
        }))
    }
}

fn put_str(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        None => out.extend_from_slice(&u32::MAX.to_le_bytes()),
        Some(s) => {
            out.extend_from_slice(&(s.len() as u32).to_le_bytes());
            out.extend_from_slice(s.as_bytes());
        }
    }
}

fn put_opt<const N: usize>(out: &mut Vec<u8>, v: Option<[u8; N]>) {
    match v {
        None => out.push(0),
        Some(b) => {
            out.push(1);
            out.extend_from_slice(&b);
        }
    }
}

fn encode(c: &Candidate, out: &mut Vec<u8>) {
    out.extend_from_slice(&[0; 4]); // length, patched below
    out.extend_from_slice(&c.game_no.to_le_bytes());
    out.push(c.split);
    out.extend_from_slice(&c.input.to_le_bytes());
    out.extend_from_slice(&c.game_index.to_le_bytes());
    out.extend_from_slice(&c.byte_offset.to_le_bytes());
    out.extend_from_slice(&c.line.to_le_bytes());
    let m = &c.meta;
    put_str(out, m.id.as_deref());
    put_str(out, m.event.as_deref());
    put_opt(out, m.white_elo.map(u16::to_le_bytes));
    put_opt(out, m.black_elo.map(u16::to_le_bytes));
    put_str(out, m.time_control.as_deref());
    put_opt(
        out,
        m.clock.map(|(b, i)| {
            let mut x = [0u8; 8];
            x[..4].copy_from_slice(&b.to_le_bytes());
            x[4..].copy_from_slice(&i.to_le_bytes());
            x
        }),
    );
    put_opt(
        out,
        m.speed
            .map(|s| [Speed::ALL.iter().position(|x| *x == s).unwrap_or(0) as u8]),
    );
    put_str(out, m.result.as_deref());
    put_str(out, m.termination.as_deref());
    put_opt(out, m.utc_date.map(i32::to_le_bytes));
    put_opt(out, m.utc_time.map(i32::to_le_bytes));
    put_str(out, m.eco.as_deref());
    put_str(out, m.opening.as_deref());
    out.extend_from_slice(&m.plies.to_le_bytes());
    out.extend_from_slice(&(c.moves.len() as u32).to_le_bytes());
    for mv in &c.moves {
        out.extend_from_slice(&mv.to_le_bytes());
    }
    let len = (out.len() - 4) as u32;
    out[..4].copy_from_slice(&len.to_le_bytes());
}

struct Cursor<'a>(&'a [u8]);

impl Cursor<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(*head)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take::<1>().map(|b| b[0])
    }
    fn u32(&mut self) -> Option<u32> {
        self.take().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Option<u64> {
        self.take().map(u64::from_le_bytes)
    }
    fn str(&mut self) -> Option<Option<Box<str>>> {
        let len = self.u32()?;
        if len == u32::MAX {
            return Some(None);
        }
        let len = len as usize;
        if self.0.len() < len {
            return None;
        }
        let (s, rest) = self.0.split_at(len);
        self.0 = rest;
        Some(Some(std::str::from_utf8(s).ok()?.into()))
    }
    fn opt<const N: usize>(&mut self) -> Option<Option<[u8; N]>> {
        match self.u8()? {
            0 => Some(None),
            _ => self.take().map(Some),
        }
    }
}

fn decode(body: &[u8]) -> Option<Candidate> {
    let mut c = Cursor(body);
    let game_no = c.u64()?;
    let split = c.u8()?;
    let input = c.u32()?;
    let game_index = c.u64()?;
    let byte_offset = c.u64()?;
    let line = c.u64()?;
    let meta = GameMeta {
        id: c.str()?,
        event: c.str()?,
        white_elo: c.opt::<2>()?.map(u16::from_le_bytes),
        black_elo: c.opt::<2>()?.map(u16::from_le_bytes),
        time_control: c.str()?,
        clock: c.opt::<8>()?.map(|x| {
            (
                u32::from_le_bytes([x[0], x[1], x[2], x[3]]),
                u32::from_le_bytes([x[4], x[5], x[6], x[7]]),
            )
        }),
        speed: match c.opt::<1>()? {
            None => None,
            Some([i]) => Some(*Speed::ALL.get(usize::from(i))?),
        },
        result: c.str()?,
        termination: c.str()?,
        utc_date: c.opt::<4>()?.map(i32::from_le_bytes),
        utc_time: c.opt::<4>()?.map(i32::from_le_bytes),
        eco: c.str()?,
        opening: c.str()?,
        plies: c.u32()?,
    };
    let n = c.u32()? as usize;
    let mut moves = Vec::with_capacity(n);
    for _ in 0..n {
        moves.push(u16::from_le_bytes(c.take()?));
    }
    Some(Candidate {
        game_no,
        split,
        input,
        game_index,
        byte_offset,
        line,
        meta,
        moves,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(game_no: u64) -> Candidate {
        Candidate {
            game_no,
            split: 1,
            input: 2,
            game_index: game_no * 2,
            byte_offset: 77,
            line: 5,
            meta: GameMeta {
                id: Some("abcdefgh".into()),
                white_elo: Some(1500),
                clock: Some((300, 3)),
                speed: Some(Speed::Blitz),
                utc_date: Some(-3),
                opening: Some("Sicilian".into()),
                plies: 3,
                ..GameMeta::default()
            },
            moves: vec![1, 2, 3],
        }
    }

    #[test]
    fn spool_round_trip_and_uniform_selection() {
        let tmp = tempfile::tempdir().unwrap();
        let mut r = Reservoir::new(100, 7, tmp.path()).unwrap();
        for g in 0..10_000 {
            r.offer(&candidate(g)).unwrap();
        }
        assert_eq!(r.offered(), 10_000);
        let (selected, spool) = r.finish().unwrap();
        assert_eq!(selected.len(), 100);
        // The selection is exactly the 100 lowest priorities.
        let mut all: Vec<(u64, u64)> = (0..10_000).map(|g| (priority(g, 7), g)).collect();
        all.sort();
        let want: HashSet<u64> = all[..100].iter().map(|x| x.1).collect();
        assert_eq!(selected, want);
        let spooled: Vec<Candidate> = spool.collect::<Result<_, _>>().unwrap();
        // Far fewer spooled than offered, in order, all selected among them.
        assert!(spooled.len() < 2000, "{}", spooled.len());
        assert!(spooled.windows(2).all(|w| w[0].game_no < w[1].game_no));
        assert!(want.iter().all(|g| spooled.iter().any(|c| c.game_no == *g)));
        assert_eq!(spooled[0], candidate(spooled[0].game_no));
    }
}
