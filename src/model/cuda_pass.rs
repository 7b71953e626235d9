//! What every fused CUDA kernel of the project shares: a pass registered
//! as a custom operation of burn's fusion stream ([`KernelPass`],
//! [`register_pass`]), the choice between a family of kernels and burn's
//! own by a start-up test on the GPU ([`fused_choice`]), and how those tests
//! compare results ([`errors_within`], [`relative_error`]). The products
//! (`cuda`), the attention (`cuda_attention`) and the layers (`cuda_layers`)
//! all build on it.

use burn::tensor::ops::FloatTensor;
use burn_cubecl::{BoolElement, CubeBackend, FloatElement, IntElement};
use burn_fusion::{
    Fusion, FusionBackend, FusionRuntime,
    stream::{Operation, OperationStreams},
};
use burn_ir::{CustomOpIr, HandleContainer, OperationIr, TensorIr};
use cubecl::cuda::{CudaDevice, CudaRuntime};

type Cube<F, I, BT> = CubeBackend<CudaRuntime, F, I, BT>;

/// A pass of the project's CUDA kernels (a product, the attention's, the
/// layers') as a custom operation of burn's fusion stream: its name there,
/// and what it computes from its inputs' tensors, in order, on the CubeCL
/// backend when the stream reaches it.
pub(crate) trait KernelPass: Copy + std::fmt::Debug + Send + Sync + 'static {
    fn name(self) -> &'static str;

    fn run<F: FloatElement, I: IntElement, BT: BoolElement>(
        self,
        inputs: Vec<FloatTensor<Cube<F, I, BT>>>,
    ) -> Vec<FloatTensor<Cube<F, I, BT>>>;
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
struct KernelOp<P, F, I, BT> {
    desc: CustomOpIr,
    pass: P,
    _backend: std::marker::PhantomData<(F, I, BT)>,
}

impl<P: KernelPass, F: FloatElement, I: IntElement, BT: BoolElement>
    Operation<<Cube<F, I, BT> as FusionBackend>::FusionRuntime> for KernelOp<P, F, I, BT>
{
    fn execute(
        &self,
        handles: &mut HandleContainer<
            <<Cube<F, I, BT> as FusionBackend>::FusionRuntime as FusionRuntime>::FusionHandle,
        >,
    ) {
        let inputs = self
            .desc
            .inputs
            .iter()
            .map(|t| handles.get_float_tensor::<Cube<F, I, BT>>(t))
            .collect();
        let outputs = self.pass.run::<F, I, BT>(inputs);
        for (ir, t) in self.desc.outputs.iter().zip(outputs) {
            handles.register_float_tensor::<Cube<F, I, BT>>(&ir.id, t);
        }
    }
}

/// Registers `pass` on `inputs` in the fusion stream, its outputs described
/// by `outputs`. Shapes and formats are the caller's to check, on its own
/// thread: inside the fusion stream a panic would only be logged.
pub(crate) fn register_pass<P: KernelPass, F: FloatElement, I: IntElement, BT: BoolElement>(
    pass: P,
    inputs: Vec<FloatTensor<Fusion<Cube<F, I, BT>>>>,
    outputs: &[TensorIr],
) -> Vec<FloatTensor<Fusion<Cube<F, I, BT>>>> {
    let client = inputs[0].client.clone();
    let streams = OperationStreams::with_inputs(inputs.iter());
    let irs: Vec<TensorIr> = inputs.into_iter().map(|t| t.into_ir()).collect();
    let desc = CustomOpIr::new(pass.name(), &irs, outputs);
    client.register(
        streams,
        OperationIr::Custom(desc.clone()),
        KernelOp::<P, F, I, BT> {
            desc,
            pass,
            _backend: std::marker::PhantomData,
        },
    )
}

/// Whether a family of the project's fused kernels runs (the caller keeps
/// the answer for the process): not when `var` says `burn`; otherwise when
/// `self_test` passes on GPU 0 (a panic counts as a failure), with one
/// warning naming `what` and `fallback` when it does not.
pub(crate) fn fused_choice(
    var: &str,
    what: &str,
    fallback: &str,
    self_test: fn(&CudaDevice) -> Result<(), String>,
) -> bool {
    let wanted = std::env::var(var).unwrap_or_default();
    if wanted == "burn" {
        return false;
    }
    if !matches!(wanted.as_str(), "" | "fused") {
        eprintln!(
            "warning: {var}={wanted:?} is neither \"burn\" nor \"fused\"; using {what} where it works"
        );
    }
    let tested = std::panic::catch_unwind(|| self_test(&CudaDevice::default()))
        .unwrap_or_else(|panic| Err(format!("it panicked: {}", panic_message(&*panic))));
    match tested {
        Ok(()) => true,
        Err(e) => {
            eprintln!("warning: {what} is not used ({e}); {fallback} runs");
            false
        }
    }
}

/// `Ok` when every `(shape, output, relative error)` is within `bound`
/// (NaN is not); otherwise the first that is not, as the start-up tests'
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

/// The message of a caught panic (a start-up test that panicked).
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default()
}
