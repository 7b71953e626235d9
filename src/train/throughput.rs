//! Training-step throughput without the data loader: random token batches of
//! the real shape through the full step (forward, loss, backward, global-norm
//! clip, Adam, EMA), timed per phase. `chessbench bench-step` prints it, the
//! `train` bench compares it with the loader and with the PyTorch reference
//! (`bench/torch_reference.py`) on the same machine, batch and precision.

use std::collections::BTreeMap;
use std::io::{self, Write};

use std::time::Instant;

use burn::{
    optim::GradientsParams,
    tensor::{Int, Tensor, TensorData, backend::Backend},
};
use serde::Serialize;

use super::{
    agreement::Batch,
    config::Recipe,
    error::TrainError,
    loss::{self, Loss, ValueSupport},
    optim::{AdamSettings, Optimiser, Phase, scalar},
    sampler::SplitMix64,
    threads::{self, HostTime},
};
use crate::{
    chess::{RecordSet, value::ValueBuckets},
    model::{
        AttentionKernel, DeviceKind, LayerKernels, ModelBackend, ModelShape, Precision, Predictor,
        Products, TrainBackend,
        gpu::kernel_log::{self, Counts, KernelCounts, KernelLog, Launches},
        op_count::OpCounts,
        tokens_tensor, tune_allocator,
    },
    options::Compute,
    ui::Report,
};

/// `chessbench bench-step`'s options (command line only): the training
/// recipe's options, with `train`'s defaults, and how long to time.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchStepOptions {
    #[command(flatten)]
    pub recipe: Recipe,
    /// Timed steps.
    #[arg(long, default_value_t = 20)]
    pub steps: usize,
    /// Untimed steps first.
    #[arg(long, default_value_t = 3)]
    pub warmup: usize,
    #[command(flatten)]
    pub compute: Compute,
    /// Synchronise after each phase and report seconds per phase.
    #[arg(long)]
    pub profile: bool,
    /// Count the operations a step issues instead of timing it on a GPU:
    /// the step runs on the CPU, built as on CUDA (fused kernels unless
    /// CHESSBENCH_ATTENTION / CHESSBENCH_LAYERS say `burn`), and every burn
    /// operation is counted by kind: what the GPU step's kernel launches
    /// follow. f32 only. Any batch size counts the same; use a small one.
    #[arg(long, conflicts_with = "profile")]
    pub count_ops: bool,
    /// On a GPU (--device wgpu or cuda): count the kernels each timed step
    /// launches, by kernel, and the kernels the process compiles, from
    /// CubeCL's own logs (every kernel CubeCL launches, after fusion; a
    /// vendor library's calls are not counted), with the bytes of the
    /// buffers each launch binds. Launches are not timed or synchronised;
    /// the first step's compilation counts as a cold process's. With
    /// --profile, also by phase of the step (the synchronisation between
    /// phases ends fusion's groups there, as it does for the timing).
    #[arg(long, conflicts_with = "count_ops")]
    pub count_kernels: bool,
}

impl BenchStepOptions {
    /// What to time.
    pub fn bench(&self) -> StepBench {
        let recipe = &self.recipe;
        StepBench {
            shape: {
                let mut shape = ModelShape::preset(recipe.model, recipe.policy, recipe.buckets);
                shape.architecture = recipe.architecture;
                shape.layers = recipe.layers.unwrap_or(shape.layers);
                shape
            },
            loss: if recipe.policy == RecordSet::BehavioralCloning {
                Loss::CrossEntropy
            } else {
                recipe.loss.unwrap_or(Loss::HlGauss)
            },
            batch_size: recipe.batch_size.max(1),
            steps: self.steps.max(1),
            warmup: self.warmup,
            device: self.compute.device,
            precision: self.compute.precision,
            profile: self.profile,
            count_ops: self.count_ops,
            count_kernels: self.count_kernels,
        }
    }
}

impl Report for StepTiming {
    fn render(&self, out: &mut dyn Write) -> io::Result<()> {
        writeln!(
            out,
            "{:.2}M parameters, batch {}, {:?}: {:.0} samples/s, {:.2} model TFLOP/s ({} steps in {:.2} s on {}, {:?} products, {:?} attention, {:?} layers)",
            self.params as f64 / 1e6,
            self.bench.batch_size,
            self.bench.precision,
            self.samples_per_s,
            self.model_flops_per_s / 1e12,
            self.bench.steps,
            self.seconds,
            self.device,
            self.products,
            self.attention,
            self.layers,
        )?;
        if self.product_fallbacks > 0 {
            writeln!(
                out,
                "  {} products fell back to burn's (a cuBLASLt call failed; see the warning)",
                self.product_fallbacks
            )?;
        }
        if let Some(ops) = &self.ops {
            writeln!(
                out,
                "  operations per step: {:.0} that launch a kernel on CUDA before fusion, {:.0} of them element-wise (fusion merges those)",
                ops.launches, ops.element_wise
            )?;
            for (group, n) in &ops.groups {
                writeln!(out, "  {group:<20} {n:>8.0}")?;
            }
        }
        if let Some(k) = &self.kernels {
            writeln!(
                out,
                "  kernels: {:.0} launched per step ({} distinct), {} compiled by this process ({} during the timed steps)",
                k.launched_per_step, k.distinct, k.compiled_cold, k.compiled_in_steps
            )?;
            for (kind, t) in &k.tuned_cold {
                writeln!(
                    out,
                    "  autotuned: {} {kind} key(s), {} candidate(s) compiled and timed",
                    t.keys, t.candidates
                )?;
            }
            for (name, n) in &k.by_kernel {
                writeln!(out, "  {name:<48} {n:>8.1}")?;
            }
        }
        for v in &self.kernel_variants {
            writeln!(out, "  kernel variant: {v}")?;
        }
        for f in &self.fallbacks {
            writeln!(out, "  fallback: {f}")?;
        }
        if let Some(h) = &self.host_time {
            let wall = self.seconds / self.bench.steps.max(1) as f64;
            writeln!(
                out,
                "  CPU time per step: {:.3} ms on the host thread ({:.0}% of the {:.3} ms wall time), {:.3} ms on the others",
                h.host * 1e3,
                100.0 * h.host / wall.max(1e-12),
                wall * 1e3,
                h.others_total() * 1e3
            )?;
            for (name, s) in h.others.iter().take(4) {
                writeln!(out, "    {name:<24} {:>9.3} ms/step", s * 1e3)?;
            }
        }
        if let Some(phases) = &self.phases {
            let total: f64 = phases.iter().map(|(_, s)| s).sum();
            for (name, s) in phases {
                writeln!(
                    out,
                    "  {name:<13} {:>9.3} ms/step {:>5.1}%",
                    s * 1e3,
                    100.0 * s / total.max(1e-12)
                )?;
            }
        }
        Ok(())
    }
}

/// What to time.
#[derive(Debug, Clone, Serialize)]
pub struct StepBench {
    pub shape: ModelShape,
    pub loss: Loss,
    pub batch_size: usize,
    pub steps: usize,
    pub warmup: usize,
    pub device: DeviceKind,
    pub precision: Precision,
    /// Synchronise after each phase to attribute time (slower overall).
    pub profile: bool,
    /// Count operations on the CPU ([`crate::model::op_count`]).
    pub count_ops: bool,
    /// Count a GPU step's kernels from CubeCL's logs
    /// (`model::gpu::kernel_log`).
    pub count_kernels: bool,
}

/// Timings of [`StepBench`].
#[derive(Debug, Clone, Serialize)]
pub struct StepTiming {
    pub bench: StepBench,
    pub params: u64,
    pub device: String,
    /// The implementation of the linear layers' products.
    pub products: Products,
    /// Products that fell back to burn's (a vendor call that failed).
    pub product_fallbacks: u64,
    /// The blocks' attention: burn's, the fused kernels, or mixed (see
    /// `fallbacks`).
    pub attention: AttentionKernel,
    /// The blocks' layer norms and SwiGLUs: burn's, the fused kernels, or
    /// mixed (see `fallbacks`).
    pub layers: LayerKernels,
    /// The operations per timed step (`--count-ops` only).
    pub ops: Option<OpCounts>,
    /// The kernels a timed step launches, and those the process compiled
    /// (`--count-kernels` only).
    pub kernels: Option<KernelCounts>,
    /// The project's kernel variants self-tested in this process (GPUs),
    /// each with its verdict.
    pub kernel_variants: Vec<String>,
    /// Every use of the fused kernels that ran burn's operations instead (a
    /// shape they do not take, a variant that failed its self-test): why
    /// `attention` or `layers` says `mixed` or `burn`.
    pub fallbacks: Vec<String>,
    /// Whether burn-fusion's and CubeCL's services ran on their runner
    /// threads (`true`, the default) or inline on the step's thread
    /// (`CUBECL_DEVICE_THREADS=0`); `None` without a GPU backend.
    pub device_threads: Option<bool>,
    pub seconds: f64,
    pub samples_per_s: f64,
    pub model_flops_per_s: f64,
    /// CPU time per timed step of the thread that ran it (the host: autodiff,
    /// fusion, CubeCL's launches, wgpu's encoding) and of the others by name
    /// (a software driver's or a CPU backend's workers); `None` where the
    /// threads' times cannot be read (not Linux).
    pub host_time: Option<HostTime>,
    /// Seconds per step by phase (profile mode only): upload of the batch,
    /// forward + loss, backward, then the optimiser's phases: gathering the
    /// gradients and clipping them, Adam, the average (EMA).
    pub phases: Option<Vec<(String, f64)>>,
}

/// Runs the bench on the backend it names.
pub fn bench_steps(bench: &StepBench) -> Result<StepTiming, TrainError> {
    use burn::backend::Autodiff;
    if bench.count_ops {
        // Mixed bf16 is refused: burn's router runs the products'
        // backward with mismatched formats on the CPU backend.
        if bench.device != DeviceKind::Cpu || bench.precision != Precision::F32 {
            return Err(TrainError::CountOpsSettings);
        }
        // At least one warm-up step: the optimiser's first step sets up its
        // state, which no later step repeats.
        let bench = StepBench {
            warmup: bench.warmup.max(1),
            ..bench.clone()
        };
        return run::<Autodiff<crate::model::op_count::Counted>>(&bench, Default::default(), None);
    }
    if bench.count_kernels && bench.device == DeviceKind::Cpu {
        return Err(TrainError::CountKernelsSettings);
    }
    // CubeCL's configuration (the kernel cache, the kernel log) is set
    // before anything touches the GPU, the compute check included.
    #[cfg(gpu)]
    let log = match bench.device {
        DeviceKind::Cpu => None,
        _ => kernel_log(bench)?,
    };
    crate::model::check_compute(bench.device, bench.precision, crate::model::Use::Train)?;
    match bench.device {
        DeviceKind::Cpu => run::<Autodiff<burn::backend::Flex>>(bench, Default::default(), None),
        #[cfg(feature = "cuda")]
        DeviceKind::Cuda => {
            run::<Autodiff<burn::backend::Cuda<f32, i32>>>(bench, Default::default(), log)
        }
        #[cfg(feature = "wgpu")]
        DeviceKind::Wgpu => {
            let device = crate::model::gpu::wgpu::device()
                .map_err(|e| crate::model::ComputeError::NoAdapter(e.to_string()))?;
            crate::model::gpu::wgpu::check_batch(&device, &bench.shape, bench.batch_size)?;
            run::<Autodiff<burn::backend::Wgpu<f32, i32>>>(bench, device, log)
        }
        #[allow(unreachable_patterns)]
        other => Err(crate::model::ComputeError::NotBuilt(other).into()),
    }
}

/// Where CubeCL logs kernels (`--count-kernels`), or `None`: sets up the
/// kernel cache either way, before the device starts.
#[cfg(gpu)]
fn kernel_log(bench: &StepBench) -> Result<Option<KernelLog>, TrainError> {
    if !bench.count_kernels {
        crate::model::gpu::cache::configure_kernel_cache();
        return Ok(None);
    }
    let dir = std::env::temp_dir().join(format!("chessbench-kernel-log-{}", std::process::id()));
    match crate::model::gpu::cache::configure_with_kernel_log(&dir) {
        Some(log) => Ok(Some(log)),
        None => Err(TrainError::CountKernelsSettings),
    }
}

/// The project's kernel variants self-tested so far, with their verdicts.
fn kernel_variants() -> Vec<String> {
    #[cfg(gpu)]
    {
        crate::model::gpu::pass::verdicts()
            .into_iter()
            .map(|v| {
                let verdict = match &v.reason {
                    None => "passed".to_owned(),
                    Some(r) => format!("failed ({r}); burn's operations ran"),
                };
                format!("{} on {}: {verdict}", v.variant, v.runtime)
            })
            .collect()
    }
    #[cfg(not(gpu))]
    Vec::new()
}

fn sync<B: Backend>(device: &B::Device) {
    let _ = B::sync(device);
}

fn run<B: TrainBackend>(
    bench: &StepBench,
    device: B::Device,
    log: Option<KernelLog>,
) -> Result<StepTiming, TrainError> {
    tune_allocator();
    // Decided (and any warning printed) before anything is timed; the
    // kernel variants are self-tested at their first use, in the warm-up.
    let products = <B as ModelBackend>::products();
    let log_error =
        |e: std::io::Error| TrainError::Backend(format!("reading CubeCL's kernel logs: {e}"));
    let mut before = None;
    B::seed(&device, 0);
    let shape = bench.shape;
    let n = bench.batch_size;
    let buckets = ValueBuckets::new(shape.outputs.max(2))
        .map_err(|_| super::data::DataError::Buckets(shape.outputs))?;
    let support = ValueSupport::<B>::new(&buckets, &device);
    let mut model = Predictor::<B>::new(&shape, &device).with_precision(bench.precision);
    let mut optimiser = Optimiser::new(&model, AdamSettings::new(0.9, 0.999, 1e-8), Some(0.99));
    // Four fixed random batches, uploaded per step like real ones.
    let mut rng = SplitMix64::new(42);
    let batches: Vec<Batch> = (0..4).map(|_| Batch::random(&shape, n, &mut rng)).collect();
    let mut phases = [0.0f64; 6];
    // With a kernel log and --profile: the kernels of each phase, from a
    // snapshot of the log at each phase's end.
    let mut phase_kernels: Vec<BTreeMap<String, Launches>> = vec![BTreeMap::new(); 6];
    let mut last_counts: Option<Counts> = None;
    let mut log_failure: Option<std::io::Error> = None;
    let mut last_loss = None;
    let mut start = Instant::now();
    let host_thread = threads::current_thread();
    let mut cpu_before = None;
    for i in 0..bench.warmup + bench.steps {
        if i == bench.warmup {
            // Nothing is timed with a fallback --require-fused refuses.
            crate::model::check_fused()?;
            sync::<B>(&device);
            if let Some(log) = &log {
                before = Some(log.counts().map_err(log_error)?);
                last_counts = before.clone();
            }
            B::profiler_range(true);
            cpu_before = threads::Snapshot::now();
            start = Instant::now();
            phases = [0.0; 6];
        }
        let mut t = Instant::now();
        let mut mark = |k: usize, t: &mut Instant| {
            if bench.profile {
                sync::<B>(&device);
                phases[k] += t.elapsed().as_secs_f64();
                if let (Some(log), Some(last)) = (&log, &last_counts) {
                    match log.counts() {
                        Ok(now) => {
                            kernel_log::accumulate(
                                &mut phase_kernels[k],
                                &kernel_log::between_counts(last, &now),
                            );
                            last_counts = Some(now);
                        }
                        Err(e) => log_failure = Some(e),
                    }
                }
                *t = Instant::now();
            }
        };
        let batch = &batches[i % 4];
        let x = tokens_tensor::<B>(&batch.tokens, shape.seq_len, &device);
        let y =
            Tensor::<B, 1, Int>::from_data(TensorData::new(batch.targets.clone(), [n]), &device);
        let w = Tensor::<B, 1>::from_data(TensorData::new(batch.win.clone(), [n]), &device);
        mark(0, &mut t);
        let loss = loss::batch_loss(bench.loss, model.forward(x), y, w, &support);
        mark(1, &mut t);
        let scale = model.precision().loss_scale();
        optimiser.set_loss_scale(scale);
        let grads =
            GradientsParams::from_grads(super::step::scaled_backward(loss.clone(), scale), &model);
        mark(2, &mut t);
        model = optimiser
            .step_marked(model, grads, 1e-4, 1.0, &mut |phase| match phase {
                Phase::Clip => mark(3, &mut t),
                Phase::Adam => mark(4, &mut t),
                Phase::Average => mark(5, &mut t),
            })
            .0;
        last_loss = Some(loss.inner());
    }
    if let Some(l) = last_loss {
        let _ = scalar(l);
    }
    sync::<B>(&device);
    let seconds = start.elapsed().as_secs_f64();
    crate::model::check_fused()?;
    let host_time = match (cpu_before, threads::Snapshot::now(), host_thread) {
        (Some(before), Some(after), Some(host)) => {
            Some(HostTime::between(&before, &after, host, bench.steps))
        }
        _ => None,
    };
    B::profiler_range(false);
    if let Some(e) = log_failure {
        return Err(log_error(e));
    }
    let names = ["upload", "forward+loss", "backward", "clip", "adam", "ema"];
    let samples_per_s = (bench.steps * n) as f64 / seconds.max(1e-9);
    let kernels = match (&log, &before) {
        (Some(log), Some(before)) => {
            let after = log.counts().map_err(log_error)?;
            let by_phase: Vec<(String, BTreeMap<String, Launches>)> = if bench.profile {
                names
                    .iter()
                    .map(|n| (*n).to_owned())
                    .zip(phase_kernels)
                    .collect()
            } else {
                Vec::new()
            };
            Some(KernelCounts::between(
                before,
                &after,
                bench.steps,
                &by_phase,
            ))
        }
        _ => None,
    };
    Ok(StepTiming {
        bench: bench.clone(),
        params: shape.num_params(),
        device: format!("{device:?}"),
        products,
        product_fallbacks: <B as ModelBackend>::product_fallbacks(),
        attention: <B as ModelBackend>::attention(),
        layers: <B as ModelBackend>::layers(),
        ops: <B as ModelBackend>::op_counts().map(|c| OpCounts::per_step(&c, bench.steps)),
        kernels,
        kernel_variants: kernel_variants(),
        fallbacks: crate::model::fallbacks(),
        device_threads: crate::model::device_threads(),
        host_time,
        seconds,
        samples_per_s,
        model_flops_per_s: samples_per_s * shape.train_flops_per_sample(),
        phases: bench.profile.then(|| {
            names
                .iter()
                .zip(phases)
                .map(|(n, s)| ((*n).to_owned(), s / bench.steps.max(1) as f64))
                .collect()
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Preset, op_count};

    fn counted(modes: (bool, bool)) -> StepTiming {
        op_count::force(Some(modes));
        let bench = StepBench {
            shape: ModelShape::preset(Preset::Tiny, RecordSet::ActionValue, 32),
            loss: Loss::HlGauss,
            batch_size: 3,
            steps: 2,
            warmup: 1,
            device: DeviceKind::Cpu,
            precision: Precision::F32,
            profile: false,
            count_ops: true,
            count_kernels: false,
        };
        let timing = bench_steps(&bench).expect("a counted step");
        op_count::force(None);
        timing
    }

    /// `--count-ops` counts a step's operations as CUDA builds the step:
    /// the same counts every step and every run, the fused kernels by the
    /// kernels each pass launches (two layer norms and a SwiGLU per block
    /// and the final norm; an attention per block), and far fewer launches
    /// with them than with burn's operations.
    #[test]
    fn counted_steps_show_what_the_fused_kernels_save() {
        let fused = counted((true, true));
        let ops = fused.ops.clone().expect("counts");
        assert_eq!(fused.attention, AttentionKernel::Fused);
        assert_eq!(fused.layers, LayerKernels::Fused);
        let layers = fused.bench.shape.layers as f64;
        let per = |name: &str| ops.ops.get(name).copied().unwrap_or(0.0);
        assert_eq!(per("fused.layer_norm_forward"), 2.0 * layers + 1.0);
        assert_eq!(per("fused.layer_norm_backward"), 2.0 * layers + 1.0);
        assert_eq!(
            per("fused.layer_norm_column_sums"),
            2.0 * (2.0 * layers + 1.0)
        );
        assert_eq!(per("fused.swiglu_forward"), layers);
        assert_eq!(per("fused.attention_dq"), layers);
        assert_eq!(per("fused.attention_dkdv"), layers);
        assert!(
            ops.groups["matrix products"] >= 5.0 * layers,
            "{:?}",
            ops.groups
        );
        // Whole numbers per step: every step issues the same operations.
        for (name, n) in &ops.ops {
            assert_eq!(n.fract(), 0.0, "{name}: {n} per step");
        }
        let again = counted((true, true)).ops.unwrap();
        assert_eq!(again.ops, ops.ops, "the same counts in another run");

        let burn = counted((false, false)).ops.expect("counts");
        assert!(burn.ops.keys().all(|k| !k.starts_with("fused.")));
        assert!(
            burn.launches > ops.launches + 10.0 * layers,
            "burn's {} launches per step against {} with the fused kernels",
            burn.launches,
            ops.launches
        );
        println!(
            "tiny model, launches per step before fusion: fused {} (element-wise {}), burn's {} (element-wise {})",
            ops.launches, ops.element_wise, burn.launches, burn.element_wise
        );
    }
}
