//! `chessbench eval`: the static metrics, puzzles and games of one
//! checkpoint, as the `[eval]` recipe ([`super::config`]) asks, written to
//! its report directory ([`super::report`]).

use std::time::{Duration, Instant};

use indicatif::ProgressBar;

use super::{
    config::{EvalConfig, MEMORY, Part},
    elo,
    error::{EvalError, PlayerError},
    metrics,
    policy::{Decisive, EnginePlayer, NeuralPlayer, Player, PolicyOptions},
    puzzles::{self, PuzzleResult, PuzzleSummary},
    report::{EvalSummary, MatchSummary, write_report},
    tournament::{self, Opponent, PlayedGame},
    trained::Model,
};
use crate::{
    duckdb_session::Session,
    model::tune_allocator,
    uci_client::{
        EngineConfig,
        oracle::{Mode, SearchSettings},
    },
};

fn bar(enabled: bool, len: u64, what: &str) -> ProgressBar {
    crate::ui::bar(
        enabled,
        Some(len),
        &format!("{what:<8} {{bar:30}} {{pos}}/{{len}} {{msg}} [{{elapsed_precise}}, eta {{eta}}]"),
    )
}

fn engine_config(config: &EvalConfig, skill: Option<i32>) -> EngineConfig {
    let mut e = EngineConfig {
        path: config.engine.clone(),
        ..EngineConfig::default()
    };
    if let Some(s) = skill {
        e.options.push(("Skill Level".into(), s.to_string()));
    }
    e
}

fn policy_options(config: &EvalConfig) -> PolicyOptions {
    PolicyOptions {
        repetition_draw: config.repetition_draw,
        decisive: match &config.decisive {
            Some(Opponent::Stockfish { limit, skill }) => Some(Decisive {
                engine: engine_config(config, *skill),
                limit: *limit,
            }),
            _ => None,
        },
    }
}

/// A player for an opponent spec.
fn opponent_player(config: &EvalConfig, o: &Opponent) -> Result<Box<dyn Player>, EvalError> {
    Ok(match o {
        Opponent::Stockfish { limit, skill } => Box::new(EnginePlayer::start(
            &engine_config(config, *skill),
            *limit,
            o.name(),
        )?),
        Opponent::Checkpoint(p) => {
            let model = Model::load(p, config.weights, config.device)?
                .with_precision(config.precision)?
                .with_batch_memory(config.batch_memory());
            let name = model.label();
            Box::new(NeuralPlayer::new(model, policy_options(config), Some(name)))
        }
    })
}

/// Runs the evaluation `config` describes and writes the report.
pub fn run(config: &EvalConfig) -> Result<EvalSummary, EvalError> {
    let started = Instant::now();
    let progress = config.progress;
    tune_allocator();
    let model = Model::load(&config.checkpoint, config.weights, config.device)?
        .with_precision(config.precision)?
        .with_batch_memory(config.batch_memory());
    // Only once the checkpoint loads: a wrong one leaves no report behind.
    std::fs::create_dir_all(&config.out).map_err(|source| EvalError::Io {
        path: config.out.clone(),
        source,
    })?;
    let mut player = NeuralPlayer::new(model, policy_options(config), None);
    let mut summary = EvalSummary {
        checkpoint: std::fs::canonicalize(&player.model.checkpoint)
            .unwrap_or_else(|_| player.model.checkpoint.clone()),
        name: player.model.state.config.name.clone(),
        step: player.model.state.step,
        policy: player.model.policy(),
        params: player.model.state.shape.num_params(),
        weights: config.weights,
        device: config.device,
        precision: config.precision,
        metrics: None,
        oracle: None,
        puzzles: Vec::new(),
        games: Vec::new(),
        ratings: Vec::new(),
        anchor: None,
        skipped: Vec::new(),
        report: config.out.clone(),
        seconds: 0.0,
    };

    if config.parts.contains(&Part::Metrics) && config.boards > 0 {
        static_metrics(config, &mut player, progress, &mut summary)?;
    }
    let puzzle_rows = if config.parts.contains(&Part::Puzzles) {
        solve_puzzles(config, &mut player, progress, &mut summary)?
    } else {
        Vec::new()
    };
    let games = if config.parts.contains(&Part::Games) && !config.opponents.is_empty() {
        play_matches(config, &mut player, progress, &mut summary)?
    } else {
        Vec::new()
    };
    summary.seconds = started.elapsed().as_secs_f64();
    write_report(config, &summary, &puzzle_rows, &games)?;
    Ok(summary)
}

/// The static metrics on `config.boards` annotated boards of the split
/// (action accuracy, Kendall tau, log-loss, ...), and the oracle's on the
/// same boards when one is configured.
fn static_metrics(
    config: &EvalConfig,
    player: &mut NeuralPlayer,
    progress: bool,
    summary: &mut EvalSummary,
) -> Result<(), EvalError> {
    let boards = {
        let [session, _, _] = MEMORY.share(config.memory_limit, 1);
        let session = Session::open(&config.run, &[], session)?;
        metrics::read_labelled_boards(&session, &config.split, config.boards)?
    };
    if boards.is_empty() {
        summary.skipped.push(format!(
            "metrics: split {:?} of {} has no annotated boards",
            config.split,
            config.run.display()
        ));
    } else {
        let b = bar(progress, boards.len() as u64, "metrics");
        let m = metrics::score_model(player, &boards, &config.split, |i| b.set_position(i))?;
        b.finish_and_clear();
        summary.metrics = Some(m);
        if let Some(Opponent::Stockfish { limit, skill }) = &config.oracle {
            let mut engine = crate::uci_client::Engine::start(&engine_config(config, *skill))
                .map_err(|e| PlayerError::engine("starting the oracle", e))?;
            let settings = SearchSettings {
                mode: Mode::PerMove,
                limit: *limit,
                timeout: Duration::from_secs(60),
                new_game: true,
            };
            let b = bar(progress, boards.len() as u64, "oracle");
            let name = config
                .oracle
                .as_ref()
                .map(Opponent::name)
                .unwrap_or_default();
            let m = metrics::score_stockfish(
                &mut engine,
                &settings,
                name,
                &boards,
                &config.split,
                |i| b.set_position(i),
            )?;
            b.finish_and_clear();
            engine.quit();
            summary.oracle = Some(m);
        }
    }
    Ok(())
}

/// The puzzles solved by the model and by the puzzle engine, if any;
/// returns each puzzle's result per player, for the report's CSV.
fn solve_puzzles(
    config: &EvalConfig,
    player: &mut NeuralPlayer,
    progress: bool,
    summary: &mut EvalSummary,
) -> Result<Vec<(String, PuzzleResult)>, EvalError> {
    let mut puzzle_rows: Vec<(String, PuzzleResult)> = Vec::new();
    match &config.puzzles {
        None => summary
            .skipped
            .push("puzzles: no puzzle file configured (--puzzles)".into()),
        Some(p) => {
            let list = puzzles::read_puzzles(p, Some(config.max_puzzles))?;
            let mut players: Vec<Box<dyn Player>> = Vec::new();
            if let Some(o) = &config.puzzle_engine {
                players.push(opponent_player(config, o)?);
            }
            let mut run_one = |pl: &mut dyn Player| -> Result<PuzzleSummary, EvalError> {
                let t = Instant::now();
                let b = bar(progress, list.len() as u64, "puzzles");
                b.set_message(pl.name().to_owned());
                let results = puzzles::solve_many(&list, pl, |done| b.set_position(done))?;
                b.finish_and_clear();
                puzzle_rows.extend(results.iter().map(|r| (pl.name().to_owned(), r.clone())));
                Ok(puzzles::summarise(
                    pl.name(),
                    &results,
                    t.elapsed().as_secs_f64(),
                ))
            };
            summary.puzzles.push(run_one(player)?);
            for pl in &mut players {
                summary.puzzles.push(run_one(pl.as_mut())?);
            }
        }
    }
    Ok(puzzle_rows)
}

/// The games against each opponent from every opening, with both colours,
/// `--games-at-once` at a time, and the Elo fit of their results; returns
/// the games, for the report's PGN.
fn play_matches(
    config: &EvalConfig,
    player: &mut NeuralPlayer,
    progress: bool,
    summary: &mut EvalSummary,
) -> Result<Vec<PlayedGame>, EvalError> {
    let name = player.name().to_owned();
    let mut games: Vec<PlayedGame> = Vec::new();
    let openings = tournament::read_openings(config.openings.as_deref(), config.openings_count)?;
    let total = (openings.len() * 2 * config.opponents.len()) as u64;
    let b = bar(progress, total, "games");
    let pairings: Vec<tournament::Pairing> = openings
        .iter()
        .enumerate()
        .flat_map(|(i, opening)| {
            [true, false].map(|model_white| tournament::Pairing {
                opening,
                model_white,
                round: format!("{}.{}", i + 1, if model_white { 1 } else { 2 }),
            })
        })
        .collect();
    let slots = config.games_at_once.min(pairings.len()).max(1);
    let mut adjudicators = match &config.adjudicate {
        Some(Opponent::Stockfish { limit, skill }) => (0..slots)
            .map(|_| {
                tournament::Adjudicator::start(
                    &engine_config(config, *skill),
                    *limit,
                    config.adjudicate_cp,
                )
            })
            .collect::<Result<Vec<_>, _>>()?,
        _ => Vec::new(),
    };
    for o in &config.opponents {
        // A checkpoint keeps every game at once; an engine's games
        // share its process, so each slot gets its own.
        let mut opps: Vec<Box<dyn Player>> = vec![opponent_player(config, o)?];
        if opps[0].slots() == 1 {
            for _ in 1..slots {
                opps.push(opponent_player(config, o)?);
            }
        }
        let opponent = opps[0].name().to_owned();
        let mut seats: Vec<&mut dyn Player> = opps
            .iter_mut()
            .map(|p| &mut **p as &mut dyn Player)
            .collect();
        let (mut w, mut d, mut l) = (0u64, 0u64, 0u64);
        let played = tournament::play_games(
            &mut *player,
            &mut seats,
            adjudicators.iter_mut().collect(),
            &pairings,
            config.max_plies,
            |g, model_white| {
                let s = g.record().white_score;
                let model_score = if model_white { s } else { 1.0 - s };
                match model_score {
                    x if x > 0.75 => w += 1,
                    x if x < 0.25 => l += 1,
                    _ => d += 1,
                }
                b.inc(1);
                b.set_message(format!("{name} vs {opponent}: +{w} ={d} -{l}"));
            },
        )?;
        games.extend(played);
        let n = w + d + l;
        summary.games.push(MatchSummary {
            opponent,
            games: n,
            wins: w,
            draws: d,
            losses: l,
            score: (w as f64 + 0.5 * d as f64) / n.max(1) as f64,
        });
    }
    b.finish_and_clear();
    let records: Vec<elo::GameRecord> = games.iter().map(PlayedGame::record).collect();
    let anchor = config
        .anchor
        .clone()
        .unwrap_or_else(|| config.opponents[0].name());
    summary.ratings = elo::fit(&records, &anchor, config.anchor_elo, 2.0)?;
    summary.anchor = Some(anchor);
    Ok(games)
}
