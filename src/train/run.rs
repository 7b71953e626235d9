//! `chessbench train`: the training loop and its run directory.
//!
//! `RUN/train/NAME/` holds
//! - `config.json`: the resolved recipe;
//! - `metrics.csv`: one row per `log_every` steps (step, epoch, samples, mean
//!   loss, gradient norm before clipping, learning rate, samples/s, the share
//!   of time spent waiting for data, elapsed seconds);
//! - `eval.csv`: one row per evaluation of the EMA parameters on the eval
//!   split (log-loss, the predict-the-marginal baseline, accuracy, value MSE);
//! - `checkpoints/step-N/` (see [`super::save`]) and `summary.json`.
//!
//! A run resumes from its newest checkpoint: the model, EMA, Adam state and
//! sampler position are restored and the logs are cut back to that step, so
//! the resumed run computes exactly what the uninterrupted one would have.

use std::{
    fs::{self, OpenOptions},
    io::{self, BufRead, BufReader, Write},
    path::{Path, PathBuf},
    time::Instant,
};

use burn::tensor::{Int, Tensor, TensorData, backend::Backend};
use indicatif::ProgressBar;
use serde::{Deserialize, Serialize};

use super::{
    config::TrainConfig,
    data::{DataError, Loader},
    error::{TrainError, io},
    held_out::{eval_set, evaluate},
    logs::{self, EvalResult, EvalRow, MetricsRow},
    loss::ValueSupport,
    optim::{AdamSettings, OptimError, Optimiser, scalar},
    sampler::Position,
    save::{self, TrainState},
    step::{Batch, step},
    stream::training_data,
};
use crate::{
    chess::{RecordSet, value::ValueBuckets},
    model::{
        DeviceKind, ModelBackend, Predictor, Products, TrainBackend,
        checkpoint::{latest, load_module, read_state},
        tokens_tensor, tune_allocator,
    },
    options::Shard,
    store::failpoint,
    ui::{Report, group},
};

/// Held while a run seeds the backend and draws its initial parameters.
static INITIALISING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// What a finished run reports (also `summary.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Summary {
    pub name: String,
    pub out_dir: PathBuf,
    pub policy: RecordSet,
    pub params: u64,
    pub step: u64,
    pub samples: u64,
    /// Steps done by this invocation (0 when the run was already complete).
    pub steps_this_run: u64,
    pub resumed_from: Option<u64>,
    /// The last logged loss, samples/s and the share of wall time spent
    /// waiting for batches, of the invocation that last trained the run
    /// (an invocation with no step to do keeps them).
    pub last_loss: Option<f64>,
    pub samples_per_s: Option<f64>,
    pub data_wait_share: Option<f64>,
    pub train_flops_per_sample: f64,
    pub device: String,
    /// The implementation of the linear layers' products (burn's in
    /// summaries written before the field existed).
    #[serde(default)]
    pub products: Products,
    pub eval: Option<EvalResult>,
    /// The recipe's total steps (not in `summary.json`).
    #[serde(skip)]
    pub steps: u64,
}

impl Report for Summary {
    fn render(&self, out: &mut dyn Write) -> io::Result<()> {
        let resumed = self
            .resumed_from
            .map(|s| format!(", resumed from step {s}"))
            .unwrap_or_default();
        writeln!(
            out,
            "trained {} ({:?}, {:.2}M parameters): step {} of {}, {} samples{resumed}",
            self.name,
            self.policy,
            self.params as f64 / 1e6,
            self.step,
            self.steps,
            group(self.samples),
        )?;
        if let (Some(loss), Some(rate)) = (self.last_loss, self.samples_per_s) {
            writeln!(
                out,
                "  last train loss {loss:.4}; {rate:.0} samples/s ({:.2} GFLOP/s of model FLOPs) on {} ({:?} products); waiting for data {:.1}% of the time",
                rate * self.train_flops_per_sample / 1e9,
                self.device,
                self.products,
                100.0 * self.data_wait_share.unwrap_or(0.0)
            )?;
        }
        if let Some(e) = &self.eval {
            let verdict = if e.log_loss < e.marginal_log_loss {
                "beats"
            } else {
                "does not beat"
            };
            writeln!(
                out,
                "  {} split ({} records, EMA parameters): log-loss {:.4}, {verdict} the marginal baseline {:.4}; accuracy {:.3}{}",
                e.split,
                group(e.records as u64),
                e.log_loss,
                e.marginal_log_loss,
                e.accuracy,
                e.value_mse
                    .map(|m| format!("; win% MSE {m:.4}"))
                    .unwrap_or_default()
            )?;
        }
        writeln!(out, "  wrote {}", self.out_dir.display())
    }
}

/// Trains (or resumes) the run `config` describes, on the backend it names
/// (f32 parameters on both; the precision is the forward pass's).
pub fn run(config: &TrainConfig) -> Result<Summary, TrainError> {
    use burn::backend::Autodiff;
    failpoint::check();
    crate::model::check_compute(config.device, config.precision, crate::model::Use::Train)?;
    match config.device {
        DeviceKind::Cpu => train_on::<Autodiff<burn::backend::Flex>>(config, Default::default()),
        #[cfg(feature = "cuda")]
        DeviceKind::Cuda => {
            crate::model::gpu::cache::configure_kernel_cache();
            train_on::<Autodiff<burn::backend::Cuda<f32, i32>>>(config, Default::default())
        }
        #[cfg(feature = "wgpu")]
        DeviceKind::Wgpu => {
            crate::model::gpu::cache::configure_kernel_cache();
            let device = crate::model::gpu::wgpu::device()
                .map_err(|e| crate::model::ComputeError::NoAdapter(e.to_string()))?;
            crate::model::gpu::wgpu::check_batch(&device, &config.shape(), config.batch_size)?;
            train_on::<Autodiff<burn::backend::Wgpu<f32, i32>>>(config, device)
        }
        #[allow(unreachable_patterns)]
        other => Err(crate::model::ComputeError::NotBuilt(other).into()),
    }
}

/// Keeps the header and the rows whose first field (the step, in both
/// logs) is at most `step`; creates the file with `header` when it is
/// missing.
fn cut_log(path: &Path, header: &str, step: u64) -> Result<(), TrainError> {
    let mut kept = format!("{header}\n");
    if let Ok(file) = fs::File::open(path) {
        for line in BufReader::new(file).lines().skip(1) {
            let line = line.map_err(io(path))?;
            let row_step = line.split(',').next().and_then(|s| s.parse::<u64>().ok());
            if row_step.is_some_and(|s| s <= step) {
                kept.push_str(&line);
                kept.push('\n');
            }
        }
    }
    Ok(crate::store::commit::write_atomic(path, kept.as_bytes())?)
}

fn append(path: &Path, line: &str) -> Result<(), TrainError> {
    let mut f = OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .map_err(io(path))?;
    writeln!(f, "{line}").map_err(io(path))?;
    f.sync_data().map_err(io(path))
}

fn progress_bar(enabled: bool, total: u64, start: u64) -> ProgressBar {
    let bar = crate::ui::bar(
        enabled,
        Some(total),
        "train {bar:30} {pos}/{len} steps {msg} [{elapsed_precise}, eta {eta}]",
    );
    bar.set_position(start);
    bar
}

fn train_on<B: TrainBackend>(
    config: &TrainConfig,
    device: B::Device,
) -> Result<Summary, TrainError> {
    tune_allocator();
    // Which products run is decided (and any warning printed) before the
    // first step.
    let products = <B as ModelBackend>::products();
    let out = config.out_dir();
    let shape = config.shape();
    let buckets =
        ValueBuckets::new(config.buckets).map_err(|_| DataError::Buckets(config.buckets))?;
    let support = ValueSupport::<B>::new(&buckets, &device);
    let eval_support = ValueSupport::<B::InnerBackend>::new(&buckets, &device);
    let adam = AdamSettings::new(config.adam_beta1, config.adam_beta2, config.adam_epsilon);

    let Started {
        mut model,
        mut optimiser,
        mut state,
        resumed_from,
    } = resume_or_start::<B>(config, &out, config.restart, &shape, adam, &device)?;
    // The data is opened before anything is written or removed: a run that
    // is not one, or has no records, leaves no training directory behind,
    // and `--restart` keeps the earlier run's files until the data opens.
    let eval = match &config.eval_split {
        Some(split) => Some(eval_set(config, split)?),
        None => None,
    };
    let mut loader = Loader::new(training_data(config, Shard::ALL), state.position)?;
    if config.restart && out.exists() {
        clear_for_restart(&out)?;
    }
    let (metrics_path, eval_path) = open_logs(config, &out, state.step)?;
    let epoch_records = loader.records().max(1);

    let bar = progress_bar(config.progress, config.steps, state.step);
    let clock = Clock::start(&state);
    let mut interval = Interval::<B::InnerBackend>::begin();
    let mut total_wait = 0.0f64;
    let mut last_loss = None;
    let mut last_eval = None;
    let seq_len = config.policy.sequence_length();

    while state.step < config.steps {
        let waited = Instant::now();
        let batch = loader.next_batch()?;
        let w = waited.elapsed().as_secs_f64();
        interval.wait_s += w;
        total_wait += w;
        let n = batch.len();
        let tokens = tokens_tensor::<B>(&batch.tokens, seq_len, &device);
        let targets = Tensor::<B, 1, Int>::from_data(TensorData::new(batch.targets, [n]), &device);
        let win_prob = Tensor::<B, 1>::from_data(TensorData::new(batch.win_prob, [n]), &device);
        let (updated, detached, norm) = step(
            model,
            &mut optimiser,
            Batch {
                tokens,
                targets,
                win_prob,
            },
            config.loss,
            &support,
            config.learning_rate,
            config.grad_clip,
        );
        model = updated;
        // --require-fused: stop at the first step that met a fallback.
        crate::model::check_fused()?;
        interval.add(detached, norm, n);
        state.step += 1;
        state.samples += n as u64;
        state.position = batch.position;

        let last = state.step == config.steps;
        if state.step % config.log_every == 0 || last {
            let row = interval.close(&state, config, epoch_records, clock.elapsed_s())?;
            append(&metrics_path, &row.line())?;
            bar.set_position(state.step);
            bar.set_message(format!(
                "loss {:.4} · {:.0} samples/s",
                row.loss, row.samples_per_s
            ));
            last_loss = Some(row.loss);
            failpoint::hit(failpoint::Point::StepLogged);
        }
        let eval_now = config.eval_every > 0 && state.step % config.eval_every == 0;
        if let Some(set) = &eval
            && (eval_now || last)
        {
            let r = evaluate(
                &optimiser.average(&model),
                set,
                &eval_support,
                config.policy,
                config.batch_size.min(4096),
                state.step,
                &device,
            );
            crate::model::check_fused()?;
            log_eval(&r, &eval_path, clock.elapsed_s(), &bar)?;
            last_eval = Some(r);
        }
        if state.step % config.checkpoint_every == 0 || last {
            state.elapsed_s = clock.elapsed_s();
            save::save(
                &out,
                &state,
                &model,
                &optimiser.average(&model),
                optimiser.record(&model),
                config.keep_checkpoints,
            )?;
        }
    }
    bar.finish_and_clear();
    let run_secs = clock.run.elapsed().as_secs_f64();
    let steps_this_run = state.step - clock.step;
    // A resume with no step left to do keeps the figures (and the device
    // and products) of the invocation that last trained the run.
    let before = if steps_this_run == 0 {
        read_summary(&out)
    } else {
        None
    };
    let kept = |f: fn(&Summary) -> Option<f64>| before.as_ref().and_then(f);
    let summary = Summary {
        name: config.name.clone(),
        out_dir: out.clone(),
        policy: config.policy,
        params: shape.num_params(),
        step: state.step,
        samples: state.samples,
        steps_this_run,
        resumed_from,
        last_loss: last_loss.or_else(|| kept(|s| s.last_loss)),
        samples_per_s: (steps_this_run > 0)
            .then(|| (state.samples - clock.samples) as f64 / run_secs.max(1e-9))
            .or_else(|| kept(|s| s.samples_per_s)),
        data_wait_share: (steps_this_run > 0)
            .then(|| total_wait / run_secs.max(1e-9))
            .or_else(|| kept(|s| s.data_wait_share)),
        train_flops_per_sample: shape.train_flops_per_sample(),
        // The figures kept from the run's record keep the device and the
        // products that made them.
        device: match &before {
            Some(b) => b.device.clone(),
            None => format!("{:?}", device),
        },
        products: before.as_ref().map_or(products, |b| b.products),
        eval: last_eval.or_else(|| read_last_eval(&eval_path)),
        steps: config.steps,
    };
    write_summary(&out, &summary)?;
    Ok(summary)
}

/// Where this invocation of a run started: its step and samples, and the
/// time, beside the training time of the invocations before it.
struct Clock {
    run: Instant,
    step: u64,
    samples: u64,
    elapsed_before: f64,
}

impl Clock {
    fn start(state: &TrainState) -> Clock {
        Clock {
            run: Instant::now(),
            step: state.step,
            samples: state.samples,
            elapsed_before: state.elapsed_s,
        }
    }

    /// Seconds the run has trained, over all its invocations.
    fn elapsed_s(&self) -> f64 {
        self.elapsed_before + self.run.elapsed().as_secs_f64()
    }
}

/// The steps since the last `metrics.csv` row: their summed loss (on the
/// device, read only when the row is written), the last gradient norm,
/// samples, and the time spent waiting for data.
struct Interval<B: Backend> {
    start: Instant,
    wait_s: f64,
    steps: u64,
    samples: u64,
    loss_sum: Option<Tensor<B, 1>>,
    last_norm: Option<Tensor<B, 1>>,
}

impl<B: Backend> Interval<B> {
    fn begin() -> Interval<B> {
        Interval {
            start: Instant::now(),
            wait_s: 0.0,
            steps: 0,
            samples: 0,
            loss_sum: None,
            last_norm: None,
        }
    }

    /// A step of `samples` samples with its (detached) loss and norm.
    fn add(&mut self, loss: Tensor<B, 1>, norm: Tensor<B, 1>, samples: usize) {
        self.loss_sum = Some(match self.loss_sum.take() {
            Some(sum) => sum + loss,
            None => loss,
        });
        self.last_norm = Some(norm);
        self.steps += 1;
        self.samples += samples as u64;
    }

    /// The interval's row at `state`, and the next interval begun; a mean
    /// loss that is not finite is the run diverging.
    fn close(
        &mut self,
        state: &TrainState,
        config: &TrainConfig,
        epoch_records: u64,
        elapsed_s: f64,
    ) -> Result<MetricsRow, TrainError> {
        let mean_loss = self.loss_sum.take().map(scalar).unwrap_or(f64::NAN) / self.steps as f64;
        if !mean_loss.is_finite() {
            return Err(TrainError::Diverged {
                step: state.step,
                value: mean_loss,
            });
        }
        let grad_norm = self.last_norm.take().map(scalar);
        let secs = self.start.elapsed().as_secs_f64().max(1e-9);
        let row = MetricsRow {
            step: state.step,
            epoch: state.samples as f64 / epoch_records as f64,
            samples: state.samples,
            loss: mean_loss,
            grad_norm,
            learning_rate: config.learning_rate,
            samples_per_s: self.samples as f64 / secs,
            data_wait_share: self.wait_s / secs,
            elapsed_s,
        };
        *self = Interval::begin();
        Ok(row)
    }
}

/// Removes what an earlier run of this name left (`--restart`): its
/// checkpoints, logs and summary.
fn clear_for_restart(out: &Path) -> Result<(), TrainError> {
    for name in ["checkpoints", "metrics.csv", "eval.csv", "summary.json"] {
        let p = out.join(name);
        let removed = if p.is_dir() {
            fs::remove_dir_all(&p)
        } else {
            fs::remove_file(&p)
        };
        match removed {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(&p)(e)),
            _ => {}
        }
    }
    Ok(())
}

/// The model, optimiser and state a run continues from.
struct Started<B: TrainBackend> {
    model: Predictor<B>,
    optimiser: Optimiser<B>,
    state: TrainState,
    /// The step of the checkpoint resumed, if any.
    resumed_from: Option<u64>,
}

/// The latest checkpoint in `out` when there is one and this is not a
/// `restart` (refused when its recipe differs from `config` in a way that
/// matters), else fresh parameters drawn from `config.seed`.
fn resume_or_start<B: TrainBackend>(
    config: &TrainConfig,
    out: &Path,
    restart: bool,
    shape: &crate::model::ModelShape,
    adam: AdamSettings,
    device: &B::Device,
) -> Result<Started<B>, TrainError> {
    let latest = if restart { None } else { latest(out)? };
    let started = match latest {
        Some(dir) => {
            let (dir, saved): (PathBuf, TrainState) = read_state(&dir)?;
            let diffs = config.incompatible_with(&saved.config);
            if !diffs.is_empty() {
                return Err(TrainError::Incompatible { dir, diffs });
            }
            let model = load_module(&dir, "model.mpk", Predictor::new(shape, device), device)?
                .with_precision(config.precision);
            let ema = load_module(
                &dir,
                "ema.mpk",
                Predictor::<B::InnerBackend>::new(shape, device),
                device,
            )?;
            let record = save::load_adam::<B>(&dir, device)?;
            let optimiser = Optimiser::resume(&model, adam, record, Some((&ema, config.ema_decay)))
                .map_err(|source| TrainError::Optimiser {
                    path: dir.clone(),
                    source,
                })?;
            let state = TrainState {
                config: config.clone(),
                ..saved
            };
            if optimiser.steps() as u64 != state.step {
                return Err(TrainError::Optimiser {
                    path: dir,
                    source: OptimError::Steps(optimiser.steps(), state.step as usize),
                });
            }
            let from = state.step;
            Started {
                model,
                optimiser,
                state,
                resumed_from: Some(from),
            }
        }
        None => {
            // The backend's random generator is global to the process: runs
            // started at once (`ablate --parallel`) draw their initial
            // parameters one after another, each from its own seed.
            let _drawing = INITIALISING.lock().unwrap_or_else(|e| e.into_inner());
            B::seed(device, config.seed);
            let model = Predictor::<B>::new(shape, device).with_precision(config.precision);
            let optimiser = Optimiser::new(&model, adam, Some(config.ema_decay));
            let state = TrainState {
                step: 0,
                position: Position::default(),
                samples: 0,
                elapsed_s: 0.0,
                config: config.clone(),
                shape: *shape,
            };
            Started {
                model,
                optimiser,
                state,
                resumed_from: None,
            }
        }
    };
    Ok(started)
}

/// Creates the run's directory and its logs, cut back to `step` (a resumed
/// run rewrites what came after its checkpoint), and writes its recipe.
/// Returns the paths of `metrics.csv` and `eval.csv`.
fn open_logs(
    config: &TrainConfig,
    out: &Path,
    step: u64,
) -> Result<(PathBuf, PathBuf), TrainError> {
    fs::create_dir_all(out).map_err(io(out))?;
    let metrics_path = out.join("metrics.csv");
    let eval_path = out.join("eval.csv");
    cut_log(&metrics_path, MetricsRow::HEADER, step)?;
    cut_log(&eval_path, EvalRow::HEADER, step)?;
    write_json(&out.join("config.json"), config)?;
    Ok((metrics_path, eval_path))
}

/// Appends an evaluation to `eval.csv` and prints it.
fn log_eval(
    r: &EvalResult,
    eval_path: &Path,
    elapsed_s: f64,
    bar: &ProgressBar,
) -> Result<(), TrainError> {
    append(eval_path, &EvalRow::new(r.clone(), elapsed_s).line())?;
    let line = format!(
        "step {}: {} log-loss {:.4} (marginal baseline {:.4}), accuracy {:.3}",
        r.step, r.split, r.log_loss, r.marginal_log_loss, r.accuracy
    );
    if bar.is_hidden() {
        eprintln!("{line}");
    } else {
        bar.println(line);
    }
    Ok(())
}

/// The run's `summary.json`, if there is one that reads.
fn read_summary(out: &Path) -> Option<Summary> {
    let bytes = std::fs::read(out.join("summary.json")).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Writes `summary.json`.
fn write_summary(out: &Path, summary: &Summary) -> Result<(), TrainError> {
    write_json(&out.join("summary.json"), summary)
}

/// Writes `value` as pretty JSON to `path`, atomically.
fn write_json(path: &Path, value: &impl serde::Serialize) -> Result<(), TrainError> {
    let json = serde_json::to_vec_pretty(value).unwrap_or_default();
    Ok(crate::store::commit::write_atomic(path, &json)?)
}

/// The last row of `eval.csv` (a run resumed after it finished).
fn read_last_eval(path: &Path) -> Option<EvalResult> {
    Some(EvalResult::from(logs::read::<EvalRow>(path).pop()?))
}
