//! Opening inputs: files or standard input, plain or zstd (detected from the
//! first bytes, so `curl URL | chessbench ingest -` works on a `.pgn.zst`
//! stream without `zstd -dc`).

use std::{
    fs::File,
    io::{self, Cursor, Read},
    sync::{Arc, atomic::AtomicU64},
};

use super::{
    config::{InputSpec, Source},
    error::IngestError,
};
use crate::store::input::{Counting, ZSTD_MAGIC};

/// An opened input: a stream of PGN bytes.
pub(crate) struct OpenInput {
    pub reader: Box<dyn Read + Send>,
    pub zstd: bool,
}

/// Opens an input. `counter` receives the number of raw bytes read.
pub(crate) fn open(spec: &InputSpec, counter: Arc<AtomicU64>) -> Result<OpenInput, IngestError> {
    let input_err = |source: io::Error| IngestError::Input {
        input: spec.display.clone(),
        source,
    };
    let raw: Box<dyn Read + Send> = match &spec.source {
        Source::Stdin => Box::new(io::stdin()),
        Source::Path(path) => Box::new(File::open(path).map_err(input_err)?),
    };
    let mut raw = Counting {
        inner: raw,
        counter,
    };
    // Sniff the first bytes; keep them in front of the rest of the stream.
    let mut head = [0u8; 4];
    let mut got = 0;
    while got < head.len() {
        match raw.read(&mut head[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(input_err(e)),
        }
    }
    let stream = Cursor::new(head[..got].to_vec()).chain(raw);
    if got == 4 && head == ZSTD_MAGIC {
        let decoder = zstd::stream::read::Decoder::new(stream).map_err(input_err)?;
        Ok(OpenInput {
            reader: Box::new(decoder),
            zstd: true,
        })
    } else {
        Ok(OpenInput {
            reader: Box::new(stream),
            zstd: false,
        })
    }
}
