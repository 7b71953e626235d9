//! What every fused GPU kernel of the project shares, on any CubeCL runtime
//! (CUDA, wgpu): a pass registered as a custom operation of burn's fusion
//! stream ([`KernelPass`], [`register_pass`]); the device's limits the
//! launches must fit ([`Limits`]); the choice, kernel variant by kernel
//! variant, between the project's kernels and burn's own by a self-test on
//! the device the first time a variant is about to run ([`Variant`],
//! [`variant_enabled`]); and how those tests compare results
//! ([`errors_within`], [`relative_error`]). The products (`cuda`), the
//! attention (`gpu::attention`) and the layers (`gpu::layers`) build on it.

use std::{
    any::TypeId,
    collections::HashMap,
    sync::{Mutex, PoisonError},
};

use burn::tensor::{DType, ops::FloatTensor};
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};
use burn_fusion::{
    Fusion, FusionBackend, FusionRuntime,
    stream::{Operation, OperationStreams},
};
use burn_ir::{CustomOpIr, HandleContainer, OperationIr, TensorIr};
use cubecl::prelude::ComputeClient;

/// A pass of the project's GPU kernels (a product, the attention's, the
/// layers') as a custom operation of burn's fusion stream on runtime `R`:
/// its name there, and what it computes from its inputs' tensors, in
/// order, on the CubeCL backend when the stream reaches it.
pub(crate) trait KernelPass<R: CubeRuntime>:
    Clone + std::fmt::Debug + Send + Sync + 'static
{
    fn name(&self) -> &'static str;

    fn run<F: FloatElement, I: IntElement, BT: BoolElement>(
        self,
        inputs: Vec<FloatTensor<CubeBackend<R, F, I, BT>>>,
    ) -> Vec<FloatTensor<CubeBackend<R, F, I, BT>>>;
}

/// A pass's inputs as an array (a pass takes a fixed number).
pub(crate) fn operands<T, const N: usize>(inputs: Vec<T>) -> [T; N] {
    let n = inputs.len();
    inputs
        .try_into()
        .unwrap_or_else(|_| panic!("a pass of {N} operands given {n}"))
}

/// A [`KernelPass`] in the fusion stream.
#[derive(Debug)]
struct KernelOp<R, P, F, I, BT> {
    desc: CustomOpIr,
    pass: P,
    _backend: std::marker::PhantomData<(R, F, I, BT)>,
}

impl<R, P, F, I, BT> Operation<<CubeBackend<R, F, I, BT> as FusionBackend>::FusionRuntime>
    for KernelOp<R, P, F, I, BT>
where
    R: CubeRuntime,
    P: KernelPass<R>,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    fn execute(
        &self,
        handles: &mut HandleContainer<
            <<CubeBackend<R, F, I, BT> as FusionBackend>::FusionRuntime as FusionRuntime>::FusionHandle,
        >,
    ) {
        let inputs = self
            .desc
            .inputs
            .iter()
            .map(|t| handles.get_float_tensor::<CubeBackend<R, F, I, BT>>(t))
            .collect();
        let outputs = self.pass.clone().run::<F, I, BT>(inputs);
        for (ir, t) in self.desc.outputs.iter().zip(outputs) {
            handles.register_float_tensor::<CubeBackend<R, F, I, BT>>(&ir.id, t);
        }
    }
}

/// burn's fused CubeCL backend on runtime `R`.
pub(crate) type FusedCube<R, F, I, BT> = Fusion<CubeBackend<R, F, I, BT>>;

/// Registers `pass` on `inputs` in the fusion stream, its outputs described
/// by `outputs`. Shapes and formats are the caller's to check, on its own
/// thread: inside the fusion stream a panic would only be logged.
pub(crate) fn register_pass<R, P, F, I, BT>(
    pass: P,
    inputs: Vec<FloatTensor<FusedCube<R, F, I, BT>>>,
    outputs: &[TensorIr],
) -> Vec<FloatTensor<FusedCube<R, F, I, BT>>>
where
    R: CubeRuntime,
    P: KernelPass<R>,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    let client = inputs[0].client.clone();
    let streams = OperationStreams::with_inputs(inputs.iter());
    let irs: Vec<TensorIr> = inputs.into_iter().map(|t| t.into_ir()).collect();
    let desc = CustomOpIr::new(pass.name(), &irs, outputs);
    client.register(
        streams,
        OperationIr::Custom(desc.clone()),
        KernelOp::<R, P, F, I, BT> {
            desc,
            pass,
            _backend: std::marker::PhantomData,
        },
    )
}

/// What a device allows a launch: read from the device's own properties
/// (CubeCL's), never assumed. An H100 gives 227 KiB of shared memory a
/// cube, 1,024 units, 2^31 - 1 cubes along x and hundreds of bindings;
/// Mesa's lavapipe (software Vulkan) 32 KiB, 1,024 units, 65,535 cubes
/// along x; WebGPU's minimum is 16 KiB, 256 units and 8 storage buffers
/// a shader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Bytes of shared memory a cube may declare.
    pub shared_bytes: usize,
    /// Units in one cube.
    pub units: u32,
    /// Cubes along x in one launch.
    pub cubes_x: u32,
    /// Buffers one kernel may bind (its tensors and CubeCL's metadata).
    pub bindings: u32,
}

impl Limits {
    /// The limits of the device `client` runs on.
    pub(crate) fn of<R: CubeRuntime>(client: &ComputeClient<R>) -> Limits {
        Limits::from_hardware(&client.properties().hardware)
    }

    /// The limits a device's properties (CubeCL's) give.
    pub(crate) fn from_hardware(hw: &cubecl::ir::HardwareProperties) -> Limits {
        Limits {
            shared_bytes: hw.max_shared_memory_size,
            units: hw.max_units_per_cube.min(hw.max_cube_dim.0),
            cubes_x: hw.max_cube_count.0,
            bindings: hw.max_bindings,
        }
    }

    /// The limits of `device` under runtime `R`.
    pub(crate) fn of_device<R: CubeRuntime>(device: &R::Device) -> Limits {
        Limits::of(&R::client(device))
    }
}

/// A family of the project's fused kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Family {
    /// The attention's forward and backward (`gpu::attention`).
    Attention,
    /// The layer norm's forward and backward (`gpu::layers`).
    LayerNorm,
    /// The SwiGLU's forward and backward (`gpu::layers`).
    Swiglu,
    /// The optimiser's gather of the gradients into one buffer
    /// (`gpu::flat`).
    Gather,
}

/// How a variant's inputs are laid out in memory when the model hands
/// them over: the self-test builds its inputs the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Layout {
    /// Dense, row-major tensors (a product's output, a residual sum).
    Dense,
    /// Views: the attention's q, k and v sliced out of one `[batch, seq,
    /// 3 x width]` projection and transposed to `[batch, heads, seq, dim]`
    /// (the output's gradient a transposed `[batch, seq, width]`), or the
    /// final layer norm's input, each sequence's last position of
    /// `[batch, seq, width]`.
    Views,
    /// The attention's packed passes: q, k and v read in place from one
    /// `[batch, seq, 3 x width]` projection, the context written as
    /// `[batch, seq, width]` and the projection's gradient as one buffer
    /// (`FusedAttention::attention_forward_packed`).
    Packed,
}

/// A kernel variant as it is compiled and launched: the family, the sizes
/// the kernels are specialised on (the attention's sequence length and
/// head dimension, the layer norm's width and positions per sequence, the
/// SwiGLU's width), the tensors' format and how the inputs are laid out.
/// Each is self-tested once per process and device before its first use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Variant {
    pub family: Family,
    pub sizes: [usize; 2],
    pub dtype: DType,
    pub layout: Layout,
}

impl std::fmt::Display for Variant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let [a, b] = self.sizes;
        let layout = match self.layout {
            Layout::Dense => "dense",
            Layout::Views => "views",
            Layout::Packed => "packed",
        };
        match self.family {
            Family::Attention => write!(
                f,
                "attention seq {a} x head dim {b}, {:?}, {layout}",
                self.dtype
            ),
            Family::LayerNorm => write!(
                f,
                "layer norm width {a}, {b} positions, {:?}, {layout}",
                self.dtype
            ),
            Family::Swiglu => write!(f, "SwiGLU width {a}, {:?}, {layout}", self.dtype),
            Family::Gather => write!(f, "gradient gather, {:?}", self.dtype),
        }
    }
}

/// A variant's verdict in this process: the runtime, the device, the
/// variant, and whether it passed (with the reason when it did not).
#[derive(Debug, Clone)]
pub struct Verdict {
    pub runtime: &'static str,
    pub device: String,
    pub variant: String,
    pub passed: bool,
    pub reason: Option<String>,
}

/// Every variant tested so far: (runtime, device, variant) -> verdict.
type Verdicts = HashMap<(TypeId, String, Variant), Verdict>;

static VERDICTS: Mutex<Option<Verdicts>> = Mutex::new(None);

thread_local! {
    /// [`with_kernels`]' choice for this thread, over the environment's.
    static CHOSEN: std::cell::Cell<Option<bool>> = const { std::cell::Cell::new(None) };
}

/// Runs `f` with the project's fused kernels on (`true`, where their
/// self-tests pass) or off (`false`: burn's operations) for every family,
/// on this thread only, whatever the environment says: comparisons of the
/// two in one process (tests, benchmarks) without touching process-wide
/// variables. The choice is made where a model's graph is built, on the
/// caller's thread.
pub fn with_kernels<T>(fused: bool, f: impl FnOnce() -> T) -> T {
    let before = CHOSEN.with(|c| c.replace(Some(fused)));
    let out = f();
    CHOSEN.with(|c| c.set(before));
    out
}

/// The choice the environment variable `var` makes for a family: `burn`
/// turns its fused kernels off, `fused` (or nothing) uses them where their
/// self-test passes. Anything else warns once and counts as `fused`.
/// [`with_kernels`] overrides it on its thread.
pub(crate) fn fused_wanted(var: &str) -> bool {
    if let Some(chosen) = CHOSEN.with(std::cell::Cell::get) {
        return chosen;
    }
    let wanted = std::env::var(var).unwrap_or_default();
    if wanted == "burn" {
        return false;
    }
    if !matches!(wanted.as_str(), "" | "fused") {
        static WARNED: Mutex<Vec<String>> = Mutex::new(Vec::new());
        let mut warned = WARNED.lock().unwrap_or_else(PoisonError::into_inner);
        if !warned.contains(&var.to_owned()) {
            eprintln!(
                "warning: {var}={wanted:?} is neither \"burn\" nor \"fused\"; using the fused kernels where they pass their self-test"
            );
            warned.push(var.to_owned());
        }
    }
    true
}

/// Whether `variant` of the project's kernels runs on `device` of runtime
/// `R`: not when `var` says `burn`; otherwise when `self_test` (the variant
/// through the fused backend training uses, against its CPU twin) passed,
/// run the first time the variant is asked for on that device and
/// remembered for the process. A failure (a panic counts) prints one
/// warning naming the variant and what runs instead; other variants are
/// unaffected. The lock is held during the test, so threads asking at once
/// run it once.
pub(crate) fn variant_enabled<R: CubeRuntime>(
    var: &str,
    device: &R::Device,
    variant: Variant,
    fallback: &str,
    self_test: impl FnOnce() -> Result<(), String>,
) -> bool {
    if !fused_wanted(var) {
        return false;
    }
    let key = (TypeId::of::<R>(), format!("{device:?}"), variant);
    let mut verdicts = VERDICTS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(v) = verdicts.get_or_insert_with(HashMap::new).get(&key) {
        return v.passed;
    }
    let tested = std::panic::catch_unwind(std::panic::AssertUnwindSafe(self_test))
        .unwrap_or_else(|panic| Err(format!("it panicked: {}", panic_message(&*panic))));
    let runtime = R::name(&R::client(device));
    if let Err(e) = &tested {
        FELL_BACK.store(true, std::sync::atomic::Ordering::Relaxed);
        eprintln!(
            "warning: the fused kernels for {variant} on {runtime} are not used ({e}); {fallback} runs for it"
        );
    }
    let verdict = Verdict {
        runtime,
        device: key.1.clone(),
        variant: variant.to_string(),
        passed: tested.is_ok(),
        reason: tested.err(),
    };
    let passed = verdict.passed;
    verdicts
        .get_or_insert_with(HashMap::new)
        .insert(key, verdict);
    passed
}

/// A use of the project's kernels that ran burn's operations instead
/// because the kernels do not take its shape or format on the device (too
/// many elements for their u32 indices, a sequence or row longer than a
/// cube holds, f64): recorded the first time each is asked for, with one
/// warning, and reported with the verdicts ([`fallbacks`]).
#[derive(Debug, Clone)]
struct ShapeFallback {
    runtime: &'static str,
    what: String,
    reason: String,
    fallback: &'static str,
}

/// Every shape fallback so far: (runtime, family, what) -> fallback.
type ShapeFallbacks = HashMap<(TypeId, Family, String), ShapeFallback>;

static SHAPE_FALLBACKS: Mutex<Option<ShapeFallbacks>> = Mutex::new(None);

/// Whether any use of the kernels has fallen back in this process (a shape
/// fallback or a failed self-test): what `--require-fused`'s check after
/// every step reads, without the locks and strings of [`fallbacks`].
static FELL_BACK: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether any use of the project's kernels has fallen back to burn's
/// operations in this process ([`fallbacks`] names them).
pub fn any_fallback() -> bool {
    FELL_BACK.load(std::sync::atomic::Ordering::Relaxed)
}

/// Records that `what` (a family's shape and format, as the warning names
/// it) runs `fallback` on runtime `R` because the kernels do not take it
/// (`reason`); the first time, one warning says so.
pub(crate) fn shape_fallback<R: CubeRuntime>(
    device: &R::Device,
    family: Family,
    what: String,
    reason: String,
    fallback: &'static str,
) {
    let key = (TypeId::of::<R>(), family, what);
    let mut all = SHAPE_FALLBACKS
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let all = all.get_or_insert_with(HashMap::new);
    if all.contains_key(&key) {
        return;
    }
    FELL_BACK.store(true, std::sync::atomic::Ordering::Relaxed);
    let runtime = R::name(&R::client(device));
    eprintln!(
        "warning: the fused kernels do not take {} on {runtime} ({reason}); {fallback} runs for it",
        key.2
    );
    let what = key.2.clone();
    all.insert(
        key,
        ShapeFallback {
            runtime,
            what,
            reason,
            fallback,
        },
    );
}

/// How a family of kernels ran on a runtime so far in this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FamilyUse {
    /// The project's kernels for everything asked of them (or nothing
    /// asked yet, with the kernels wanted).
    Fused,
    /// The project's kernels for some shapes, burn's for others (a shape
    /// they do not take, or a variant that failed its self-test).
    Mixed,
    /// burn's operations: turned off, or no variant ran fused.
    Burn,
}

/// How `families` (the ones `var` turns on and off) ran on runtime `R` so
/// far: [`FamilyUse::Fused`] unless a use of them fell back.
pub(crate) fn family_use<R: CubeRuntime>(var: &str, families: &[Family]) -> FamilyUse {
    if !fused_wanted(var) {
        return FamilyUse::Burn;
    }
    let runtime = TypeId::of::<R>();
    let (mut passed, mut failed) = (false, false);
    if let Some(all) = VERDICTS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .as_ref()
    {
        for ((r, _, v), verdict) in all {
            if *r == runtime && families.contains(&v.family) {
                passed |= verdict.passed;
                failed |= !verdict.passed;
            }
        }
    }
    if let Some(all) = SHAPE_FALLBACKS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .as_ref()
    {
        failed |= all
            .keys()
            .any(|(r, family, _)| *r == runtime && families.contains(family));
    }
    match (failed, passed) {
        (false, _) => FamilyUse::Fused,
        (true, true) => FamilyUse::Mixed,
        (true, false) => FamilyUse::Burn,
    }
}

/// Every use of the project's kernels that ran burn's operations instead
/// in this process, in a stable order: the variants that failed their
/// self-test and the shapes the kernels do not take, each with its
/// runtime, the reason and what ran instead.
pub fn fallbacks() -> Vec<String> {
    let mut all: Vec<String> = verdicts()
        .into_iter()
        .filter(|v| !v.passed)
        .map(|v| {
            format!(
                "{} on {}: failed its self-test ({})",
                v.variant,
                v.runtime,
                v.reason.unwrap_or_default()
            )
        })
        .collect();
    if let Some(shapes) = SHAPE_FALLBACKS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .as_ref()
    {
        let mut shapes: Vec<&ShapeFallback> = shapes.values().collect();
        shapes.sort_by(|a, b| (a.runtime, &a.what).cmp(&(b.runtime, &b.what)));
        all.extend(shapes.into_iter().map(|s| {
            format!(
                "{} on {}: not taken ({}); {} ran",
                s.what, s.runtime, s.reason, s.fallback
            )
        }));
    }
    all
}

/// Every variant self-tested in this process, in a stable order.
pub fn verdicts() -> Vec<Verdict> {
    let verdicts = VERDICTS.lock().unwrap_or_else(PoisonError::into_inner);
    let mut all: Vec<Verdict> = verdicts
        .as_ref()
        .map(|v| v.values().cloned().collect())
        .unwrap_or_default();
    all.sort_by(|a, b| (a.runtime, &a.device, &a.variant).cmp(&(b.runtime, &b.device, &b.variant)));
    all
}

/// `Ok` when every `(shape, output, relative error)` is within `bound`
/// (NaN is not); otherwise the first that is not, as the self-tests'
/// reason.
pub(crate) fn errors_within<S: std::fmt::Debug>(
    errors: Vec<(S, &'static str, f32)>,
    bound: f32,
) -> Result<(), String> {
    match errors
        .into_iter()
        .find(|(_, _, e)| e.is_nan() || *e > bound)
    {
        Some((dims, what, e)) => Err(format!(
            "{dims:?} {what}: {e:e} from the reference (relative)"
        )),
        None => Ok(()),
    }
}

/// The bound of a kernel's relative error against its f32 reference, by
/// the tensors' format: f32 computes as the reference does (1e-4 leaves
/// room for summation order), f16 keeps 11 bits of mantissa (5e-4 a
/// rounding, 1e-2 with the tiles' sums over rounded inputs), bf16 8 bits
/// (4e-3 a rounding, 2e-2).
pub(crate) fn bound_for(dtype: DType) -> f32 {
    match dtype {
        DType::F32 => 1e-4,
        DType::F16 => 1e-2,
        _ => 2e-2,
    }
}

/// Largest difference relative to the reference's largest magnitude; a
/// NaN anywhere (memory nobody wrote read back) or a length that differs
/// makes it infinite.
pub(crate) fn relative_error(ours: &[f32], reference: &[f32]) -> f32 {
    if ours.len() != reference.len() {
        return f32::INFINITY;
    }
    let top = reference
        .iter()
        .fold(0.0f32, |a, x| a.max(x.abs()))
        .max(1e-30);
    ours.iter().zip(reference).fold(0.0f32, |a, (x, y)| {
        let d = (x - y).abs();
        if d.is_nan() { f32::INFINITY } else { a.max(d) }
    }) / top
}

/// The message of a caught panic (a self-test that panicked).
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default()
}
