//! The operations a training step issues, counted on the CPU: what the GPU
//! step's launches follow between device runs (`chessbench bench-step
//! --count-ops`).
//!
//! On CUDA nearly every burn operation that is not a view is a kernel
//! launch, except the element-wise ones, which burn's fusion merges into
//! fewer kernels. Which operations a step issues depends only on the
//! model's code and shape, not on the device, so the CPU can count them: [`Counted`] is
//! burn's CPU backend (`flex`) behind burn's router, which hands every
//! operation over as burn's intermediate representation (the same
//! `OperationIr` the CUDA backend's fusion sees); [`CountingClient`] tallies
//! each by name before running it. The step is built as on a GPU
//! ([`ModelBackend::FEW_KERNELS`]: one product for q|k|v and one for
//! gate|up), and the project's fused kernels (attention, layer norm,
//! SwiGLU) count as the kernels each pass launches, computed by their
//! plain-Rust references, unless `CHESSBENCH_ATTENTION=burn` /
//! `CHESSBENCH_LAYERS=burn` ask for burn's operations, as on CUDA. Products
//! count as burn's matmul (cuBLASLt's calls are one launch each as well),
//! a concatenation as one launch per input (as burn's CUDA backend does
//! it).
//!
//! What it cannot count: how many kernels fusion makes of the element-wise
//! operations (reported apart), reshapes that copy a permuted view on CUDA
//! (counted as views here: the IR has no strides), autotuning, and what the
//! CUDA runtime adds.

use std::{
    collections::BTreeMap,
    pin::Pin,
    sync::{Mutex, OnceLock},
};

use burn::{
    backend::{
        Autodiff,
        autodiff::checkpoint::strategy::CheckpointStrategy,
        flex::{Flex, FlexDevice},
    },
    nn::LayerNorm,
    prelude::Backend,
    tensor::{
        DType, Shape, Tensor, TensorData,
        backend::{BackendTypes, DTypeUsageSet, ExecutionError},
        ops::FloatTensor,
    },
};
use burn_ir::{BackendIr, OperationIr, TensorId, TensorIr};
use burn_router::{
    BackendRouter, MultiBackendBridge, RouterTensor, Runner, RunnerChannel, RunnerClient,
};
use serde::Serialize;

use super::{
    attention::{self, FusedAttention},
    backend::{
        ATTENTION_VAR, AttentionKernel, LAYERS_VAR, LayerKernels, ModelBackend, attend_by_parts,
        burn_flatten, burn_swiglu, burn_unflatten,
    },
    layers::{self, FusedLayers},
};

/// burn's CPU backend with every operation counted (module docs).
pub type Counted = BackendRouter<CountingChannel>;

/// Operations seen, by name, since the last [`reset`].
fn tally() -> &'static Mutex<BTreeMap<String, u64>> {
    static TALLY: OnceLock<Mutex<BTreeMap<String, u64>>> = OnceLock::new();
    TALLY.get_or_init(Default::default)
}

/// The tally's entry for the operations handed to the backend, every kind
/// counted once (views, drops and each fused pass included): what a GPU
/// step's host cost follows, since burn's fusion plans each of them.
pub(crate) const REGISTERED: &str = "registered";

thread_local! {
    /// Set while [`one_operation`] runs.
    static IN_ONE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Set while [`uncounted`] runs.
    static PAUSED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` without counting the operations it issues: a fused GPU pass
/// computed here by burn's operations, counted as the pass.
fn uncounted<T>(f: impl FnOnce() -> T) -> T {
    let before = PAUSED.with(|p| p.replace(true));
    let out = f();
    PAUSED.with(|p| p.set(before));
    out
}

/// Runs `f`, whose operations a GPU backend hands to fusion as one custom
/// operation running them inside (`gpu::flat`): each is counted by name
/// (the launches are the same), the whole as one [`REGISTERED`].
fn one_operation<T>(f: impl FnOnce() -> T) -> T {
    count(REGISTERED);
    let before = IN_ONE.with(|p| p.replace(true));
    let out = f();
    IN_ONE.with(|p| p.set(before));
    out
}

fn count(name: &str) {
    if PAUSED.with(std::cell::Cell::get) {
        return;
    }
    *tally()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(name.to_owned())
        .or_default() += 1;
}

/// Forgets what was counted.
pub(crate) fn reset() {
    tally().lock().unwrap_or_else(|e| e.into_inner()).clear();
}

/// What was counted since the last [`reset`], by name.
pub(crate) fn counted() -> BTreeMap<String, u64> {
    tally().lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// An operation's name: its kind and variant (`float.Add`,
/// `base_float.Reshape`, `module.Embedding`), from burn's IR.
fn name(op: &OperationIr) -> String {
    let (kind, inner) = match op {
        OperationIr::BaseFloat(op) => ("base_float", format!("{op:?}")),
        OperationIr::BaseInt(op) => ("base_int", format!("{op:?}")),
        OperationIr::BaseBool(op) => ("base_bool", format!("{op:?}")),
        OperationIr::NumericFloat(_, op) => ("float", format!("{op:?}")),
        OperationIr::NumericInt(_, op) => ("int", format!("{op:?}")),
        OperationIr::Bool(op) => ("bool", format!("{op:?}")),
        OperationIr::Int(op) => ("int", format!("{op:?}")),
        OperationIr::Float(_, op) => ("float", format!("{op:?}")),
        OperationIr::Module(op) => ("module", format!("{op:?}")),
        OperationIr::Init(_) => return "init".to_owned(),
        OperationIr::Custom(op) => return format!("custom.{}", op.id),
        OperationIr::Drop(_) => return "drop".to_owned(),
        #[allow(unreachable_patterns)]
        _ => return "other".to_owned(),
    };
    let variant = inner
        .split(|c: char| !c.is_alphanumeric() && c != '_')
        .next()
        .unwrap_or("?");
    format!("{kind}.{variant}")
}

/// The groups the counts are reported in, as the GPU kernel account
/// (`bench/kernel_account.py`) groups kernels; the first match wins.
/// `views` and `bookkeeping` (allocations, drops) launch nothing on CUDA.
pub(crate) fn group(name: &str) -> &'static str {
    let variant = name.rsplit('.').next().unwrap_or(name);
    let any = |list: &[&str]| list.contains(&variant);
    if name.starts_with("fused.") {
        "fused kernels"
    } else if matches!(name, "init" | "drop") || variant == "Empty" {
        "bookkeeping"
    } else if any(&[
        "Reshape", "SwapDims", "Permute", "Expand", "Slice", "Unfold",
    ]) {
        "views"
    } else if any(&[
        "Matmul",
        "Linear",
        "LinearXBackward",
        "LinearWeightBackward",
    ]) {
        "matrix products"
    } else if any(&[
        "Sum",
        "SumDim",
        "Mean",
        "MeanDim",
        "Prod",
        "ProdDim",
        "Max",
        "MaxDim",
        "Min",
        "MinDim",
        "ArgMax",
        "ArgMin",
        "MaxDimWithIndices",
        "MinDimWithIndices",
        "MaxAbs",
        "MaxAbsDim",
        "Any",
        "AnyDim",
        "All",
        "AllDim",
        "CumSum",
        "CumProd",
        "CumMin",
        "CumMax",
    ]) {
        "reductions"
    } else if any(&[
        "Gather",
        "Scatter",
        "Select",
        "SelectAssign",
        "Embedding",
        "EmbeddingBackward",
        "ScatterNd",
        "GatherNd",
        "MaskWhere",
        "MaskFill",
    ]) {
        "gather and scatter"
    } else if any(&["Cast", "IntoFloat", "IntoInt"]) {
        "casts"
    } else if any(&[
        "Cat",
        "SliceAssign",
        "Repeat",
        "RepeatDim",
        "Flip",
        "IntoContiguous",
    ]) {
        "copies"
    } else if any(&[
        "Random",
        "Full",
        "Zeros",
        "Ones",
        "Empty",
        "Arange",
        "ArangeStep",
        "Eye",
    ]) {
        "fills"
    } else {
        "element-wise"
    }
}

/// A step's operations: per group and per name, per step.
#[derive(Debug, Clone, Serialize)]
pub struct OpCounts {
    /// Steps counted.
    pub steps: usize,
    /// Operations per step that launch a kernel on CUDA before fusion
    /// merges the element-wise ones (every group but views and
    /// bookkeeping; module docs for what it misses).
    pub launches: f64,
    /// Element-wise operations per step (fusion's to merge).
    pub element_wise: f64,
    /// Operations per step handed to the backend, every kind once (views,
    /// drops and each fused pass included): on a GPU, each is planned by
    /// burn's fusion on the host.
    pub registered: f64,
    /// Per step, by group.
    pub groups: BTreeMap<String, f64>,
    /// Per step, by name.
    pub ops: BTreeMap<String, f64>,
}

impl OpCounts {
    /// `counts` (over `steps` steps) per step.
    pub(crate) fn per_step(counts: &BTreeMap<String, u64>, steps: usize) -> OpCounts {
        let per = |n: u64| n as f64 / steps.max(1) as f64;
        let mut groups = BTreeMap::<String, f64>::new();
        for (name, &n) in counts.iter().filter(|(name, _)| *name != REGISTERED) {
            *groups.entry(group(name).to_owned()).or_default() += per(n);
        }
        let launches = groups
            .iter()
            .filter(|(g, _)| !matches!(g.as_str(), "views" | "bookkeeping"))
            .map(|(_, n)| n)
            .sum();
        OpCounts {
            steps,
            launches,
            element_wise: groups.get("element-wise").copied().unwrap_or(0.0),
            registered: per(counts.get(REGISTERED).copied().unwrap_or(0)),
            groups,
            ops: counts
                .iter()
                .filter(|(name, _)| *name != REGISTERED)
                .map(|(k, &n)| (k.clone(), per(n)))
                .collect(),
        }
    }
}

/// The router's channel to the counting client.
#[derive(Clone)]
pub struct CountingChannel;

/// burn's runner over the CPU backend, counting each operation first.
#[derive(Clone)]
pub struct CountingClient {
    runner: Runner<Flex>,
}

/// One backend: nothing is ever moved between backends.
pub struct NoBridge;

impl MultiBackendBridge for NoBridge {
    type TensorHandle = <Flex as BackendIr>::Handle;
    type Device = FlexDevice;

    fn change_backend_float(h: Self::TensorHandle, _: Shape, _: &FlexDevice) -> Self::TensorHandle {
        h
    }

    fn change_backend_int(h: Self::TensorHandle, _: Shape, _: &FlexDevice) -> Self::TensorHandle {
        h
    }

    fn change_backend_bool(h: Self::TensorHandle, _: Shape, _: &FlexDevice) -> Self::TensorHandle {
        h
    }
}

impl RunnerChannel for CountingChannel {
    type Device = FlexDevice;
    type Bridge = NoBridge;
    type Client = CountingClient;
    type FloatElem = <Flex as BackendTypes>::FloatElem;
    type IntElem = <Flex as BackendTypes>::IntElem;
    type BoolElem = <Flex as BackendTypes>::BoolElem;

    fn name(_: &FlexDevice) -> String {
        "counting<flex>".to_owned()
    }

    fn init_client(device: &FlexDevice) -> CountingClient {
        CountingClient {
            runner: Runner::new(*device),
        }
    }

    fn get_tensor_handle(
        tensor: &TensorIr,
        client: &CountingClient,
    ) -> <Flex as BackendIr>::Handle {
        client.runner.get_tensor_handle(tensor)
    }

    fn register_tensor(
        client: &CountingClient,
        handle: <Flex as BackendIr>::Handle,
        shape: Shape,
        dtype: DType,
    ) -> RouterTensor<CountingClient> {
        client
            .runner
            .register_tensor(handle, shape, dtype, client.clone())
    }
}

impl RunnerClient for CountingClient {
    type Device = FlexDevice;

    fn register_op(&self, op: OperationIr) {
        let name = name(&op);
        // burn's CUDA backend concatenates by one slice assignment per
        // input (burn-backend's `cat_with_slice_assign`).
        let launches = match &op {
            OperationIr::BaseFloat(burn_ir::BaseOperationIr::Cat(cat)) => cat.tensors.len(),
            _ => 1,
        };
        for _ in 0..launches {
            count(&name);
        }
        if !IN_ONE.with(std::cell::Cell::get) {
            count(REGISTERED);
        }
        self.runner.register_op(op);
    }

    fn read_tensor_async(
        &self,
        tensor: TensorIr,
    ) -> Pin<Box<dyn Future<Output = Result<TensorData, ExecutionError>> + Send>> {
        self.runner.read_tensor_async(tensor)
    }

    fn sync(&self) -> Result<(), ExecutionError> {
        self.runner.sync()
    }

    fn create_empty_handle(&self) -> TensorId {
        self.runner.create_empty_handle()
    }

    fn register_tensor_data(&self, data: TensorData) -> RouterTensor<Self> {
        let desc = self.runner.register_tensor_data_desc(data);
        RouterTensor::new(desc.id, desc.shape, desc.dtype, self.clone())
    }

    fn device(&self) -> FlexDevice {
        self.runner.device()
    }

    fn seed(&self, seed: u64) {
        self.runner.seed(seed)
    }

    fn dtype_usage(&self, dtype: DType) -> DTypeUsageSet {
        self.runner.dtype_usage(dtype)
    }
}

/// Whether the fused kernels stand in for burn's operations, as on CUDA
/// (where they pass their start-up test): unless the variable says `burn`.
fn fused(var: &str) -> bool {
    std::env::var(var).map_or(true, |v| v != "burn")
}

/// Tests' choice of (fused attention, fused layers), over the variables'.
static FORCED: Mutex<Option<(bool, bool)>> = Mutex::new(None);

/// Sets (`Some`) or clears the tests' choice of fused kernels.
#[cfg(test)]
pub(crate) fn force(modes: Option<(bool, bool)>) {
    *FORCED.lock().unwrap_or_else(|e| e.into_inner()) = modes;
}

fn forced() -> Option<(bool, bool)> {
    *FORCED.lock().unwrap_or_else(|e| e.into_inner())
}

fn attention_fused() -> bool {
    forced().map_or_else(|| fused(ATTENTION_VAR), |f| f.0)
}

fn layers_fused() -> bool {
    forced().map_or_else(|| fused(LAYERS_VAR), |f| f.1)
}

/// The fused attention as the kernels each pass launches, computed by its
/// plain-Rust reference.
impl FusedAttention for Counted {
    fn attention_forward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        count("fused.attention_forward");
        count(REGISTERED);
        attention::on_host::forward::<Self>(q, k, v)
    }

    fn attention_backward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        out: FloatTensor<Self>,
        lse: FloatTensor<Self>,
        d_out: FloatTensor<Self>,
    ) -> [FloatTensor<Self>; 3] {
        // Two kernels: dQ, then dK | dV.
        count("fused.attention_dq");
        count(REGISTERED);
        count("fused.attention_dkdv");
        attention::on_host::backward::<Self>(q, k, v, out, lse, d_out)
    }

    /// One operation and one kernel, as on a GPU, which reads the packed
    /// projection and writes the context in place (the views and copies
    /// computing it here are not counted).
    fn attention_forward_packed(
        qkv: FloatTensor<Self>,
        heads: usize,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        count("fused.attention_forward");
        count(REGISTERED);
        uncounted(|| attention::packed::forward::<Self>(qkv, heads))
    }

    /// One operation and two kernels, as on a GPU, which writes the
    /// projection's gradient as one buffer.
    fn attention_backward_packed(
        qkv: FloatTensor<Self>,
        context: FloatTensor<Self>,
        lse: FloatTensor<Self>,
        d_context: FloatTensor<Self>,
        heads: usize,
    ) -> FloatTensor<Self> {
        count("fused.attention_dq");
        count(REGISTERED);
        count("fused.attention_dkdv");
        uncounted(|| attention::packed::backward::<Self>(qkv, context, lse, d_context, heads))
    }
}

/// The fused layer norm and SwiGLU as the kernels each pass launches,
/// computed by their plain-Rust references.
impl FusedLayers for Counted {
    fn layer_norm_forward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f32,
    ) -> [FloatTensor<Self>; 3] {
        count("fused.layer_norm_forward");
        count(REGISTERED);
        layers::on_host::layer_norm_forward::<Self>(x, gamma, beta, epsilon)
    }

    fn layer_norm_backward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        mean: FloatTensor<Self>,
        rstd: FloatTensor<Self>,
        dy: FloatTensor<Self>,
    ) -> [FloatTensor<Self>; 3] {
        // Three kernels: dx with partial sums, then the sums of dgamma and
        // of dbeta.
        count("fused.layer_norm_backward");
        count(REGISTERED);
        count("fused.layer_norm_column_sums");
        count("fused.layer_norm_column_sums");
        layers::on_host::layer_norm_backward::<Self>(x, gamma, mean, rstd, dy)
    }

    fn swiglu_forward(both: FloatTensor<Self>) -> FloatTensor<Self> {
        count("fused.swiglu_forward");
        count(REGISTERED);
        layers::on_host::swiglu_forward::<Self>(both)
    }

    fn swiglu_backward(both: FloatTensor<Self>, d_out: FloatTensor<Self>) -> FloatTensor<Self> {
        count("fused.swiglu_backward");
        count(REGISTERED);
        layers::on_host::swiglu_backward::<Self>(both, d_out)
    }
}

fn norm_parameters<B: Backend>(norm: &LayerNorm<B>) -> Option<(Tensor<B, 1>, Tensor<B, 1>)> {
    Some((norm.gamma.val(), norm.beta.as_ref()?.val()))
}

impl ModelBackend for Counted {
    const FEW_KERNELS: bool = true;

    fn attend(q: Tensor<Self, 4>, k: Tensor<Self, 4>, v: Tensor<Self, 4>) -> Tensor<Self, 4> {
        if attention_fused() {
            attention::fused_attention_inference(q, k, v)
        } else {
            burn::tensor::module::attention(q, k, v, None, None, Default::default())
        }
    }

    fn attend_packed(qkv: Tensor<Self, 3>, heads: usize) -> Tensor<Self, 3> {
        if attention_fused() {
            attention::fused_attention_packed_inference(qkv, heads)
        } else {
            attend_by_parts(qkv, heads)
        }
    }

    fn attention() -> AttentionKernel {
        if attention_fused() {
            AttentionKernel::Fused
        } else {
            AttentionKernel::Burn
        }
    }

    fn norm(norm: &LayerNorm<Self>, x: Tensor<Self, 3>) -> Tensor<Self, 3> {
        match norm_parameters(norm).filter(|_| layers_fused()) {
            Some((gamma, beta)) => layers::fused_layer_norm_inference(x, gamma, beta),
            None => norm.forward(x),
        }
    }

    fn swiglu(both: Tensor<Self, 3>) -> Tensor<Self, 3> {
        if layers_fused() {
            layers::fused_swiglu_inference(both)
        } else {
            burn_swiglu(both)
        }
    }

    fn layers() -> LayerKernels {
        if layers_fused() {
            LayerKernels::Fused
        } else {
            LayerKernels::Burn
        }
    }

    fn profiler_range(start: bool) {
        if start {
            reset();
        }
    }

    fn op_counts() -> Option<BTreeMap<String, u64>> {
        Some(counted())
    }

    /// As on a GPU (`gpu::flat`): one operation, one gather kernel (every
    /// gradient in one launch, as CUDA binds them).
    fn flatten(parts: Vec<FloatTensor<Self>>) -> FloatTensor<Self> {
        if !layers_fused() {
            return burn_flatten::<Self>(parts);
        }
        count("fused.gather");
        count(REGISTERED);
        uncounted(|| burn_flatten::<Self>(parts))
    }

    /// As on a GPU (`gpu::flat`): burn's slices and reshapes (views) inside
    /// one operation.
    fn unflatten(flat: FloatTensor<Self>, shapes: &[Shape]) -> Vec<FloatTensor<Self>> {
        if !layers_fused() {
            return burn_unflatten::<Self>(flat, shapes);
        }
        one_operation(|| burn_unflatten::<Self>(flat, shapes))
    }
}

impl<C: CheckpointStrategy> ModelBackend for Autodiff<Counted, C> {
    const FEW_KERNELS: bool = true;

    fn attend(q: Tensor<Self, 4>, k: Tensor<Self, 4>, v: Tensor<Self, 4>) -> Tensor<Self, 4> {
        if attention_fused() {
            attention::fused_attention(q, k, v)
        } else {
            burn::tensor::module::attention(q, k, v, None, None, Default::default())
        }
    }

    fn attend_packed(qkv: Tensor<Self, 3>, heads: usize) -> Tensor<Self, 3> {
        if attention_fused() {
            attention::fused_attention_packed(qkv, heads)
        } else {
            attend_by_parts(qkv, heads)
        }
    }

    fn attention() -> AttentionKernel {
        Counted::attention()
    }

    fn norm(norm: &LayerNorm<Self>, x: Tensor<Self, 3>) -> Tensor<Self, 3> {
        match norm_parameters(norm).filter(|_| layers_fused()) {
            Some((gamma, beta)) => layers::fused_layer_norm(x, gamma, beta),
            None => norm.forward(x),
        }
    }

    fn swiglu(both: Tensor<Self, 3>) -> Tensor<Self, 3> {
        if layers_fused() {
            layers::fused_swiglu(both)
        } else {
            burn_swiglu(both)
        }
    }

    fn layers() -> LayerKernels {
        Counted::layers()
    }

    fn profiler_range(start: bool) {
        Counted::profiler_range(start);
    }

    fn op_counts() -> Option<BTreeMap<String, u64>> {
        Counted::op_counts()
    }
}
