//! Property tests of the ingest path on hostile input: random bytes and
//! mutated real Lichess PGN. `make fuzz` runs many cases
//! (`PROPTEST_CASES=20000`); `make test` runs a smoke of 256 (`make
//! fuzz-smoke`).
//!
//! Properties: never a panic; every game read is accepted or rejected; the
//! boards of accepted games are legal positions; the full pipeline commits a
//! consistent run.

use chessbench::ingest::{
    chunker::Chunker,
    config::{GameFilter, Limits},
    visitor::GameVisitor,
    worker::{Emit, Verdict, WorkerSettings, process_block},
};
use proptest::prelude::*;

use super::util::lichess_1000k;

/// Per game: absolute offset and reason ("accepted" or a reject reason).
fn verdicts(data: &[u8], block_bytes: usize) -> (Vec<(u64, &'static str)>, usize) {
    let settings = WorkerSettings {
        filter: GameFilter::default(),
        limits: Limits {
            max_comment_bytes: 4096,
            max_game_bytes: 64 * 1024,
        },
        input_splits: vec![0],
        test: None,
        emit: Emit::Keys,
    };
    let mut visitor = GameVisitor::new(settings.filter.clone(), settings.limits);
    let mut chunker =
        Chunker::with_block_bytes(data, 0, settings.limits.max_game_bytes, block_bytes);
    let (mut out, mut base, mut keys, mut seq) = (Vec::new(), 0u64, 0usize, 0u64);
    while let Some(block) = chunker
        .next_block(seq, seq == 0)
        .expect("in-memory reads cannot fail")
    {
        seq += 1;
        let result = process_block(&block, &settings, &mut visitor, Default::default());
        let mut emitted = 0usize;
        for g in &result.games {
            let reason = match &g.verdict {
                Verdict::Accepted {
                    emitted: n, meta, ..
                } => {
                    emitted += *n as usize;
                    assert_eq!(*n, meta.plies + 1, "one board per ply plus the start");
                    "accepted"
                }
                Verdict::Rejected { reason, .. } => reason.name(),
            };
            out.push((base + g.offset, reason));
        }
        assert_eq!(emitted, result.keys.len(), "keys of accepted games only");
        for key in result.keys.keys() {
            key.to_position()
                .expect("every emitted board is a legal position");
        }
        keys += result.keys.len();
        base += result.span;
    }
    assert_eq!(base, data.len() as u64, "blocks cover the input exactly");
    (out, keys)
}

/// The first 30 games or so of the crate's real Lichess games, read once.
fn real_pgn() -> Vec<u8> {
    static DATA: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    DATA.get_or_init(|| std::fs::read(lichess_1000k()).unwrap()[..60_000].to_vec())
        .clone()
}

const SPECIAL: &[u8] = b"{}()[]\"\\;%$!?*.\n\r\t 0123456789-/+#=OKQRBNxabcdefgh\xff\xc3\xe9";

/// A mutation of real PGN.
#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Insert(usize, u8),
    Delete(usize, usize),
    Duplicate(usize, usize),
    Truncate(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(p, b)| Mutation::Flip(p, b)),
        (any::<usize>(), prop::sample::select(SPECIAL)).prop_map(|(p, b)| Mutation::Insert(p, b)),
        (any::<usize>(), 1usize..400).prop_map(|(p, n)| Mutation::Delete(p, n)),
        (any::<usize>(), 1usize..400).prop_map(|(p, n)| Mutation::Duplicate(p, n)),
        any::<usize>().prop_map(Mutation::Truncate),
    ]
}

fn apply(data: &mut Vec<u8>, m: &Mutation) {
    if data.is_empty() {
        return;
    }
    let at = |p: usize, len: usize| p % len;
    match *m {
        Mutation::Flip(p, b) => {
            let i = at(p, data.len());
            data[i] = b;
        }
        Mutation::Insert(p, b) => {
            let i = at(p, data.len() + 1);
            data.insert(i, b);
        }
        Mutation::Delete(p, n) => {
            let i = at(p, data.len());
            let j = (i + n).min(data.len());
            data.drain(i..j);
        }
        Mutation::Duplicate(p, n) => {
            let i = at(p, data.len());
            let j = (i + n).min(data.len());
            let copy = data[i..j].to_vec();
            data.splice(j..j, copy);
        }
        Mutation::Truncate(p) => {
            let i = at(p, data.len());
            data.truncate(i);
        }
    }
}

proptest! {
    #[test]
    fn fuzz_random_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..4096),
                                     block in 16usize..2048) {
        verdicts(&data, block);
    }

    #[test]
    fn fuzz_mutated_pgn_is_accounted_for(mutations in prop::collection::vec(mutation(), 1..12),
                                         block in 64usize..8192) {
        let mut data = real_pgn();
        for m in &mutations {
            apply(&mut data, m);
        }
        let (games, _) = verdicts(&data, block);
        // Any non-blank input is at least one game, accepted or rejected.
        let blank = data.iter().all(|b| b.is_ascii_whitespace());
        prop_assert!(blank || !games.is_empty());
    }

}

/// Cases for the end-to-end property: a tenth of PROPTEST_CASES (each case
/// is a whole ingest with fsyncs), at least 8.
fn pipeline_cases() -> u32 {
    let cases: u32 = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    (cases / 10).max(8)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(pipeline_cases()))]

    #[test]
    fn fuzz_pipeline_commits_consistent_runs(mutations in prop::collection::vec(mutation(), 0..6)) {
        let mut data = real_pgn();
        data.truncate(20_000);
        for m in &mutations {
            apply(&mut data, m);
        }
        let tmp = tempfile::tempdir().unwrap();
        let input = tmp.path().join("in.pgn");
        std::fs::write(&input, &data).unwrap();
        let options = chessbench::ingest::config::IngestOptions {
            inputs: vec![input.display().to_string().parse().unwrap()],
            run: chessbench::options::RunArg {
                run: Some(tmp.path().join("run")),
            },
            resources: chessbench::options::Resources {
                jobs: chessbench::options::Jobs { jobs: Some(2) },
                budget: chessbench::options::Budget {
                    memory_limit: chessbench::options::ByteSize(1 << 20),
                },
            },
            ..Default::default()
        };
        let config = options
            .resolve(&chessbench::options::Env::default())
            .unwrap();
        let summary = chessbench::ingest::run(&config).unwrap();
        let (_, c) = &summary.splits[0];
        let rejected: u64 = c.rejected.values().sum();
        prop_assert_eq!(summary.games_read(), c.games + rejected);
        prop_assert!(c.behavioral_cloning <= c.state_value);
        prop_assert!(c.state_value <= c.positions);
        let (games, keys) = verdicts(&data, 1 << 20);
        prop_assert_eq!(games.len() as u64, summary.games_read());
        prop_assert_eq!(keys as u64, c.positions);
    }
}

/// On well-formed input, where blocks are cut cannot change any result.
#[test]
fn fuzz_block_size_does_not_change_results_on_real_data() {
    let data = std::fs::read(lichess_1000k()).unwrap();
    let (expected, keys) = verdicts(&data, 1 << 20);
    assert_eq!(expected.len(), 438);
    for block in [64, 1000, 4096, 65_536] {
        assert_eq!(
            verdicts(&data, block),
            (expected.clone(), keys),
            "block size {block}"
        );
    }
}

/// Windows line endings change nothing but byte offsets.
#[test]
fn crlf_input_gives_the_same_games() {
    let data = std::fs::read(lichess_1000k()).unwrap();
    let crlf: Vec<u8> = data
        .iter()
        .flat_map(|&b| {
            if b == b'\n' {
                vec![b'\r', b'\n']
            } else {
                vec![b]
            }
        })
        .collect();
    let (lf_games, lf_keys) = verdicts(&data, 1 << 20);
    let (crlf_games, crlf_keys) = verdicts(&crlf, 4096);
    let reasons = |g: &[(u64, &'static str)]| g.iter().map(|x| x.1).collect::<Vec<_>>();
    assert_eq!(reasons(&crlf_games), reasons(&lf_games));
    assert_eq!(crlf_keys, lf_keys);
}

/// PGN without blank lines between games (some exporters write it) gives
/// the same games as the original, whatever the block size: an independent
/// check that no game is lost or merged.
#[test]
fn tight_pgn_gives_the_same_games() {
    let data = std::fs::read(lichess_1000k()).unwrap();
    let tight: Vec<u8> = String::from_utf8(data.clone())
        .unwrap()
        .replace("\n\n[Event ", "\n[Event ")
        .into_bytes();
    assert!(tight.len() < data.len());
    let (games, keys) = verdicts(&data, 1 << 20);
    let reasons = |g: &[(u64, &'static str)]| g.iter().map(|x| x.1).collect::<Vec<_>>();
    for block in [1 << 20, 65_536, 4096] {
        let (tg, tk) = verdicts(&tight, block);
        assert_eq!(reasons(&tg), reasons(&games), "block {block}");
        assert_eq!(tk, keys, "block {block}");
    }
}

/// A game cut off inside its headers followed by a blank line and more
/// games (what concatenating truncated dumps gives): the parser reads the
/// next game's tags as the same tag section, at every block size.
#[test]
fn cut_headers_before_a_game_read_the_same_in_any_block() {
    let mut data = Vec::new();
    let one = std::fs::read(lichess_1000k()).unwrap();
    for _ in 0..3 {
        data.extend_from_slice(&one);
        data.extend_from_slice(
            b"\n\n[Event \"Cut\"]\n[Site \"https://lichess.org/cutcutcu\"]\n[Round \"-\"]\n\n",
        );
    }
    let (expected, keys) = verdicts(&data, 1 << 20);
    for block in [512, 4096, 100_000] {
        assert_eq!(
            verdicts(&data, block),
            (expected.clone(), keys),
            "block {block}"
        );
    }
}
