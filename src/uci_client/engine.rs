//! One UCI engine process, driven synchronously with deadlines.
//!
//! A reader thread turns the engine's stdout into lines on a channel, so
//! every wait has a deadline: an engine that hangs is killed, one that exits
//! is reported with its exit status and the tail of its stderr. Callers
//! (the annotate pool, evaluation games) restart engines with backoff; see
//! fishnet's `stockfish.rs` for the same shape.

use std::{
    collections::VecDeque,
    io::{BufRead, BufReader, BufWriter, Read, Write},
    path::{Path, PathBuf},
    process::{Child, ChildStdin, Command as Process, Stdio},
    sync::{Arc, Mutex},
    thread,
    time::{Duration, Instant},
};

use crossbeam_channel::{Receiver, RecvTimeoutError, bounded};
use shakmaty::uci::UciMove;
use thiserror::Error;

use super::protocol::{
    Bound, Command, EngineMessage, Info, Limit, OptionDecl, OptionKind, Position, ProtocolError,
    Score,
};

/// How to start an engine.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct EngineConfig {
    /// Executable (a path, or a name looked up in PATH).
    pub path: PathBuf,
    pub args: Vec<String>,
    /// `Threads` (the paper's oracle: 1 per process, one process per core).
    pub threads: u32,
    /// `Hash` in MiB.
    pub hash_mb: u32,
    /// Other `setoption`s, in order.
    pub options: Vec<(String, String)>,
    /// Deadline for `uci` / `isready` answers.
    pub handshake_timeout: Duration,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            path: PathBuf::from(DEFAULT_ENGINE),
            args: Vec::new(),
            threads: 1,
            hash_mb: 16,
            options: Vec::new(),
            handshake_timeout: Duration::from_secs(20),
        }
    }
}

/// The engine options default to: `stockfish`, found when it starts
/// ([`program`]). A constant, so `--help` reads the same on every machine.
pub(crate) const DEFAULT_ENGINE: &str = "stockfish";

/// The program to start for `path`: itself, except that a bare `stockfish`
/// missing from PATH is Debian's `/usr/games/stockfish` where that exists
/// (the package installs there, and /usr/games is not on root's PATH).
pub(crate) fn program(path: &Path) -> PathBuf {
    if path != Path::new(DEFAULT_ENGINE) {
        return path.to_owned();
    }
    let in_path = std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths).any(|dir| dir.join(DEFAULT_ENGINE).is_file())
    });
    if !in_path && Path::new("/usr/games/stockfish").is_file() {
        PathBuf::from("/usr/games/stockfish")
    } else {
        path.to_owned()
    }
}

/// What went wrong with an engine. Every variant is a reason to kill and
/// restart it.
#[derive(Debug, Error)]
pub enum EngineError {
    #[error("cannot start engine {}: {source}", path.display())]
    Spawn {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("engine exited ({status}) while {during}{}", stderr_suffix(.stderr))]
    Exited {
        status: String,
        during: String,
        stderr: String,
    },
    #[error("engine did not answer within {timeout:?} while {during}")]
    Timeout { timeout: Duration, during: String },
    #[error("engine sent garbage while {during}: {source}")]
    Protocol {
        during: String,
        source: ProtocolError,
    },
    #[error("engine misbehaved while {during}: {what}")]
    Implausible { during: String, what: String },
    #[error("writing to the engine: {0}")]
    Write(std::io::Error),
}

fn stderr_suffix(stderr: &str) -> String {
    if stderr.is_empty() {
        String::new()
    } else {
        format!("; stderr: {stderr}")
    }
}

impl EngineError {
    /// A short, stable reason name for failure tables.
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            EngineError::Spawn { .. } => "spawn",
            EngineError::Exited { .. } | EngineError::Write(_) => "crash",
            EngineError::Timeout { .. } => "timeout",
            EngineError::Protocol { .. } | EngineError::Implausible { .. } => "garbage",
        }
    }
}

/// Name, author and options the engine announced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EngineId {
    pub name: String,
    pub author: Option<String>,
    pub options: Vec<OptionDecl>,
}

/// The final, exact evaluation of one principal variation.
#[derive(Debug, Clone, PartialEq)]
pub struct PvLine {
    pub score: Score,
    pub depth: u32,
    pub seldepth: Option<u32>,
    pub multipv: u32,
    pub pv: Vec<UciMove>,
}

/// The outcome of one `go`.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchResult {
    /// The last exact-score line per first move (MultiPV 1: one line).
    pub lines: Vec<PvLine>,
    pub bestmove: Option<UciMove>,
    /// Nodes and time of the whole search, as the engine last reported them.
    pub nodes: u64,
    pub time_ms: u64,
    /// Wall time from sending `go` to reading `bestmove`.
    pub elapsed: Duration,
}

impl SearchResult {
    /// The best line (MultiPV rank 1).
    pub fn best(&self) -> Option<&PvLine> {
        self.lines.iter().find(|l| l.multipv == 1)
    }
}

const STDERR_TAIL_LINES: usize = 8;

/// A running engine.
pub struct Engine {
    child: Child,
    stdin: BufWriter<ChildStdin>,
    lines: Receiver<String>,
    stderr: Arc<Mutex<VecDeque<String>>>,
    id: EngineId,
    multipv: u32,
    line: String,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("pid", &self.child.id())
            .field("name", &self.id.name)
            .finish()
    }
}

impl Engine {
    /// Spawns the engine, runs the `uci` handshake and sets `Threads`,
    /// `Hash` and the configured options (those it declares).
    pub fn start(config: &EngineConfig) -> Result<Engine, EngineError> {
        let mut child = Process::new(program(&config.path))
            .args(&config.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| EngineError::Spawn {
                path: config.path.clone(),
                source,
            })?;
        let (stdin, stdout, stderr_pipe) =
            match (child.stdin.take(), child.stdout.take(), child.stderr.take()) {
                (Some(i), Some(o), Some(e)) => (i, o, e),
                _ => {
                    let _ = child.kill();
                    return Err(EngineError::Spawn {
                        path: config.path.clone(),
                        source: std::io::Error::other("no pipes to the engine"),
                    });
                }
            };
        let (tx, lines) = bounded::<String>(1024);
        thread::Builder::new()
            .name("cb-engine-out".into())
            .spawn(move || {
                let mut reader = BufReader::with_capacity(64 * 1024, stdout);
                let mut bytes = Vec::with_capacity(128);
                loop {
                    bytes.clear();
                    match reader.read_until(b'\n', &mut bytes) {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {
                            // A line that is not UTF-8 is passed on with its
                            // bad bytes replaced, for the parser to refuse as
                            // garbage; ending the stream would report a live
                            // engine as exited, after waiting for it to exit.
                            let line = String::from_utf8_lossy(&bytes).into_owned();
                            if tx.send(line).is_err() {
                                break;
                            }
                        }
                    }
                }
            })
            .map_err(|source| EngineError::Spawn {
                path: config.path.clone(),
                source,
            })?;
        let stderr = Arc::new(Mutex::new(VecDeque::new()));
        let tail = Arc::clone(&stderr);
        thread::Builder::new()
            .name("cb-engine-err".into())
            .spawn(move || {
                let mut reader = BufReader::new(stderr_pipe);
                let mut buf = Vec::new();
                loop {
                    buf.clear();
                    match reader.by_ref().take(4096).read_until(b'\n', &mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {
                            if let Ok(mut t) = tail.lock() {
                                if t.len() == STDERR_TAIL_LINES {
                                    t.pop_front();
                                }
                                t.push_back(String::from_utf8_lossy(&buf).trim_end().to_owned());
                            }
                        }
                    }
                }
            })
            .map_err(|source| EngineError::Spawn {
                path: config.path.clone(),
                source,
            })?;
        let mut engine = Engine {
            child,
            stdin: BufWriter::new(stdin),
            lines,
            stderr,
            id: EngineId::default(),
            multipv: 1,
            line: String::new(),
        };
        engine.handshake(config)?;
        Ok(engine)
    }

    fn handshake(&mut self, config: &EngineConfig) -> Result<(), EngineError> {
        let deadline = Instant::now() + config.handshake_timeout;
        self.send(&Command::Uci)?;
        let during = "waiting for uciok";
        loop {
            match self.recv(deadline, config.handshake_timeout, during)? {
                EngineMessage::IdName(n) => self.id.name = n,
                EngineMessage::IdAuthor(a) => self.id.author = Some(a),
                EngineMessage::Option(o) => self.id.options.push(o),
                EngineMessage::UciOk => break,
                _ => {}
            }
        }
        let threads = config.threads.to_string();
        let hash = config.hash_mb.to_string();
        let mut options: Vec<(&str, &str)> = vec![("Threads", &threads), ("Hash", &hash)];
        options.extend(config.options.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        for (name, value) in options {
            if self.declares(name) {
                self.send(&Command::SetOption {
                    name: name.into(),
                    value: Some(value.into()),
                })?;
            }
        }
        if self.declares("MultiPV") {
            self.send(&Command::SetOption {
                name: "MultiPV".into(),
                value: Some("1".into()),
            })?;
        }
        self.sync(config.handshake_timeout)
    }

    fn declares(&self, name: &str) -> bool {
        self.id
            .options
            .iter()
            .any(|o| o.name.eq_ignore_ascii_case(name))
    }

    /// What the engine announced.
    pub fn id(&self) -> &EngineId {
        &self.id
    }

    /// The largest MultiPV the engine allows (1 if it has no such option).
    pub(crate) fn max_multipv(&self) -> u32 {
        self.id
            .options
            .iter()
            .find(|o| o.name.eq_ignore_ascii_case("MultiPV"))
            .map_or(1, |o| match o.kind {
                OptionKind::Spin { max: Some(m), .. } => m.clamp(1, u32::MAX.into()) as u32,
                _ => 1,
            })
    }

    fn send(&mut self, cmd: &Command<'_>) -> Result<(), EngineError> {
        match writeln!(self.stdin, "{cmd}").and_then(|()| self.stdin.flush()) {
            Ok(()) => Ok(()),
            // A closed pipe means the engine is gone (it may die before it
            // reads its first command): report its exit status and stderr.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                Err(self.exited("sending it a command"))
            }
            Err(e) => Err(EngineError::Write(e)),
        }
    }

    fn recv(
        &mut self,
        deadline: Instant,
        timeout: Duration,
        during: &str,
    ) -> Result<EngineMessage, EngineError> {
        match self.lines.recv_deadline(deadline) {
            Ok(line) => {
                self.line = line;
                EngineMessage::parse(&self.line).map_err(|source| EngineError::Protocol {
                    during: during.to_owned(),
                    source,
                })
            }
            Err(RecvTimeoutError::Timeout) => Err(EngineError::Timeout {
                timeout,
                during: during.to_owned(),
            }),
            Err(RecvTimeoutError::Disconnected) => Err(self.exited(during)),
        }
    }

    fn exited(&mut self, during: &str) -> EngineError {
        // stdout closed: the process is gone or going.
        let start = Instant::now();
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(s)) => break s.to_string(),
                Ok(None) if start.elapsed() < Duration::from_millis(500) => {
                    thread::sleep(Duration::from_millis(5));
                }
                Ok(None) => break "closed its output".to_owned(),
                Err(e) => break e.to_string(),
            }
        };
        // Give the stderr thread a moment to collect the last words.
        thread::sleep(Duration::from_millis(10));
        let stderr = self
            .stderr
            .lock()
            .map(|t| t.iter().cloned().collect::<Vec<_>>().join(" | "))
            .unwrap_or_default();
        EngineError::Exited {
            status,
            during: during.to_owned(),
            stderr,
        }
    }

    /// `isready` / `readyok` round trip.
    pub(crate) fn sync(&mut self, timeout: Duration) -> Result<(), EngineError> {
        self.send(&Command::IsReady)?;
        let deadline = Instant::now() + timeout;
        loop {
            if let EngineMessage::ReadyOk = self.recv(deadline, timeout, "waiting for readyok")? {
                return Ok(());
            }
        }
    }

    /// `ucinewgame` (clears the hash and histories, so a search does not
    /// depend on what was searched before), then `isready`.
    pub(crate) fn new_game(&mut self, timeout: Duration) -> Result<(), EngineError> {
        self.send(&Command::UciNewGame)?;
        self.sync(timeout)
    }

    /// Sets the MultiPV option if it differs from the current value.
    pub(crate) fn set_multipv(&mut self, n: u32) -> Result<(), EngineError> {
        if n != self.multipv {
            let v = n.to_string();
            self.send(&Command::SetOption {
                name: "MultiPV".into(),
                value: Some(v.as_str().into()),
            })?;
            self.multipv = n;
        }
        Ok(())
    }

    /// Sets the position for the following searches.
    pub fn set_position(&mut self, position: Position<'_>) -> Result<(), EngineError> {
        self.send(&Command::Position(position))
    }

    /// Runs `go` on the current position and waits for `bestmove`, at most
    /// `timeout`. Bound scores are skipped; the result holds, per first
    /// move, the last exact score.
    pub fn search(
        &mut self,
        limit: Limit,
        searchmoves: &[UciMove],
        timeout: Duration,
    ) -> Result<SearchResult, EngineError> {
        let start = Instant::now();
        self.send(&Command::Go {
            limit: Some(limit),
            searchmoves: searchmoves.into(),
        })?;
        let deadline = start + timeout;
        let mut lines: Vec<PvLine> = Vec::new();
        let (mut nodes, mut time_ms) = (0u64, 0u64);
        loop {
            match self.recv(deadline, timeout, "searching")? {
                EngineMessage::Info(info) => {
                    let Info {
                        depth,
                        seldepth,
                        multipv,
                        score,
                        bound,
                        nodes: n,
                        time_ms: t,
                        pv,
                        string,
                        ..
                    } = *info;
                    nodes = n.unwrap_or(nodes).max(nodes);
                    time_ms = t.unwrap_or(time_ms).max(time_ms);
                    let _ = string;
                    let (Some(score), Bound::Exact, Some(&first)) = (score, bound, pv.first())
                    else {
                        continue;
                    };
                    let line = PvLine {
                        score,
                        depth: depth.unwrap_or(0),
                        seldepth,
                        multipv: multipv.unwrap_or(1),
                        pv,
                    };
                    if self.multipv == 1 {
                        lines.clear();
                        lines.push(line);
                    } else if let Some(slot) =
                        lines.iter_mut().find(|l| l.pv.first() == Some(&first))
                    {
                        *slot = line;
                    } else {
                        lines.push(line);
                    }
                }
                EngineMessage::BestMove { best, .. } => {
                    return Ok(SearchResult {
                        lines,
                        bestmove: best,
                        nodes,
                        time_ms,
                        elapsed: start.elapsed(),
                    });
                }
                EngineMessage::Unknown(line) => {
                    return Err(EngineError::Protocol {
                        during: "searching".into(),
                        source: ProtocolError {
                            line: line.chars().take(200).collect(),
                            what: "not a UCI message",
                        },
                    });
                }
                _ => {}
            }
        }
    }

    /// Asks the engine to quit, then kills it if it is still there.
    pub fn quit(mut self) {
        let _ = self.send(&Command::Quit);
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(200) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            thread::sleep(Duration::from_millis(2));
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        // Killing is safe after a normal quit (the process is already gone)
        // and needed after a hang.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn handshake_and_search_with_real_stockfish() {
        let Some(config) = crate::testing::stockfish() else {
            return;
        };
        let mut engine = Engine::start(&config).unwrap();
        assert!(engine.id().name.contains("Stockfish"), "{:?}", engine.id());
        assert!(engine.max_multipv() >= 218);
        engine.new_game(Duration::from_secs(5)).unwrap();
        // White mates with Ra8#.
        engine
            .set_position(Position::fen("6k1/5ppp/8/8/8/8/5PPP/R5K1 w - - 0 1", &[]))
            .unwrap();
        let r = engine
            .search(Limit::Nodes(2000), &[], Duration::from_secs(5))
            .unwrap();
        assert_eq!(r.best().unwrap().score, Score::Mate(1));
        assert_eq!(r.bestmove.unwrap().to_string(), "a1a8");
        // The same board, restricted to a quiet move: no longer mate in 1.
        let quiet = UciMove::from_ascii(b"g1f1").unwrap();
        let r = engine
            .search(Limit::Nodes(2000), &[quiet], Duration::from_secs(5))
            .unwrap();
        assert_eq!(r.bestmove, Some(quiet));
        assert_ne!(r.best().unwrap().score, Score::Mate(1));
        assert!(r.nodes > 0);
        engine.quit();
    }

    #[test]
    fn a_missing_engine_is_a_spawn_error() {
        let config = EngineConfig {
            path: "/nonexistent/engine".into(),
            ..EngineConfig::default()
        };
        let e = Engine::start(&config).unwrap_err();
        assert_eq!(e.reason(), "spawn");
        assert!(e.to_string().contains("/nonexistent/engine"), "{e}");
    }

    #[test]
    fn a_silent_engine_times_out() {
        let config = EngineConfig {
            path: "sleep".into(),
            args: vec!["30".into()],
            handshake_timeout: Duration::from_millis(200),
            ..EngineConfig::default()
        };
        let e = Engine::start(&config).unwrap_err();
        assert_eq!(e.reason(), "timeout", "{e}");
    }

    #[test]
    fn an_engine_that_exits_is_a_crash() {
        let config = EngineConfig {
            path: "sh".into(),
            args: vec!["-c".into(), "echo boom >&2; exit 3".into()],
            ..EngineConfig::default()
        };
        let e = Engine::start(&config).unwrap_err();
        assert_eq!(e.reason(), "crash", "{e}");
        assert!(e.to_string().contains("boom"), "{e}");
    }

    /// A line of bytes that are not UTF-8 from an engine that stays alive is
    /// garbage, reported at once: not the engine's exit, which is only
    /// reported after waiting for the process to end.
    #[test]
    fn bytes_that_are_not_utf8_are_garbage_not_an_exit() {
        let config = EngineConfig {
            path: "sh".into(),
            args: vec![
                "-c".into(),
                r"read line; printf 'info depth \377\376\n'; sleep 30".into(),
            ],
            handshake_timeout: Duration::from_secs(5),
            ..EngineConfig::default()
        };
        let started = Instant::now();
        let e = Engine::start(&config).unwrap_err();
        assert_eq!(e.reason(), "garbage", "{e}");
        assert!(
            started.elapsed() < Duration::from_millis(400),
            "{:?}",
            started.elapsed()
        );
    }
}
