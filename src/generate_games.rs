//! `chessbench generate-games`: Lichess-like games for scale tests, from
//! [`crate::chess::generate`]'s seeded random play, written to a file
//! (beside it first, then renamed into place) or to standard output.

use std::{
    io::{self, Write},
    path::PathBuf,
};

use clap::{Args, ValueHint};

use crate::{
    chess::generate::{GenerateError, GenerateSummary, Openings, write_games},
    ui::{Report, group},
};

/// `chessbench generate-games`'s options (command line only).
#[derive(Debug, Clone, Args)]
pub struct GenerateGamesOptions {
    /// Games to write.
    #[arg(long, value_name = "N")]
    pub games: u64,
    /// Seed of the random play (the same seed, the same games).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// PGN (.pgn or .pgn.zst) of real games whose openings are replayed
    /// [default: 2,500 Lichess games of June 2022, built in].
    #[arg(long, value_name = "FILE", value_hint = ValueHint::FilePath)]
    pub openings: Option<PathBuf>,
    /// Write the games to FILE instead of standard output.
    #[arg(long, short = 'o', value_name = "FILE", value_hint = ValueHint::FilePath)]
    pub out: Option<PathBuf>,
}

/// Writes `--games` games of `--seed`, with the openings of `--openings`
/// (the built-in ones without), to `--out` (written beside it and renamed into place when complete, so a
/// crash leaves no half file) or, without one, to standard output.
pub fn run(options: &GenerateGamesOptions) -> Result<GenerateSummary, GenerateError> {
    let (seed, games) = (options.seed, options.games);
    let openings = match options.openings.as_deref() {
        Some(path) => Openings::read(path)?,
        None => Openings::builtin(),
    };
    let Some(path) = options.out.as_deref() else {
        let mut stdout = io::BufWriter::with_capacity(1 << 20, io::stdout().lock());
        return write_games(&mut stdout, &openings, seed, games);
    };
    let err = |source| GenerateError::Io {
        path: path.to_owned(),
        source,
    };
    let name = path.file_name().map_or_else(
        || "games.pgn".to_owned(),
        |n| n.to_string_lossy().into_owned(),
    );
    let tmp = path.with_file_name(format!(".{name}.writing"));
    let result = (|| {
        let file = std::fs::File::create(&tmp).map_err(err)?;
        let mut w = io::BufWriter::with_capacity(1 << 20, file);
        let summary = write_games(&mut w, &openings, seed, games)?;
        w.into_inner()
            .map_err(|e| err(e.into_error()))?
            .sync_all()
            .map_err(err)?;
        std::fs::rename(&tmp, path).map_err(err)?;
        Ok(summary)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

impl Report for GenerateSummary {
    fn render(&self, out: &mut dyn Write) -> io::Result<()> {
        writeln!(
            out,
            "generated {} games ({:.1} plies a game, {:.1} MB): 1-0 {}, 0-1 {}, 1/2-1/2 {}; {} checkmates; {} replayed as duplicates",
            group(self.games),
            self.plies as f64 / self.games.max(1) as f64,
            self.bytes as f64 / 1e6,
            self.white_wins,
            self.black_wins,
            self.draws,
            self.checkmates,
            self.replayed
        )
    }
}
