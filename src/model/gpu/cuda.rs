//! The predictor on burn's CUDA backend (`Fusion<CubeBackend<CudaRuntime>>`):
//! the linear layers' products in NVIDIA's cuBLASLt, with their backward,
//! and few large operations rather than many small ones
//! ([`ModelBackend::FEW_KERNELS`]).
//!
//! cuBLASLt is loaded at run time (cudarc's dynamic loading), so building
//! needs no CUDA. Each product is a custom operation in burn's fusion
//! stream: when the stream reaches it, the inputs' device pointers come from
//! CubeCL (`get_resource`, which first lets every earlier operation reach
//! the GPU), the output buffer is CubeCL's, and the call is enqueued on the
//! CUDA stream that buffer belongs to (exposed by the patched cubecl-cuda in
//! `vendor/`), so it runs in order with CubeCL's kernels and nothing waits
//! on the host.
//!
//! Which products run is decided once per process: cuBLASLt when the
//! library loads and its products agree with burn's on a few test shapes
//! (f32 and bf16), burn's otherwise, with one warning; a cuBLASLt call that
//! fails later falls back to burn's product for that call, also with a
//! warning. `CHESSBENCH_PRODUCTS=burn` keeps burn's products (for
//! comparisons); `cublaslt` (the default where it works) asks for the
//! vendor library.

use std::{
    collections::HashMap,
    ffi::c_void,
    sync::{
        Mutex, OnceLock,
        atomic::{AtomicU64, Ordering},
    },
};

use burn::{
    backend::{Autodiff, autodiff::checkpoint::strategy::CheckpointStrategy},
    tensor::{DType, Shape, Tensor, TensorData, TensorPrimitive, ops::FloatTensor},
};
use burn_cubecl::{
    BoolElement, CubeBackend, FloatElement, IntElement, kernel::into_contiguous, tensor::CubeTensor,
};
use burn_fusion::Fusion;
use burn_ir::{OperationOutput, TensorIr};
use cubecl::cuda::{CudaDevice, CudaRuntime};
use cudarc::{
    cublaslt::{result as lt, sys},
    driver,
};

use crate::model::{
    backend::Products,
    gemm::{self, Gemm, LtMatrix, LtPlan, Operand, burn_gemm, lt_plan},
    gpu::backend::GpuRuntime,
    gpu::pass::{KernelPass, operands, panic_message, register_pass},
};

type Cube<F, I, BT> = CubeBackend<CudaRuntime, F, I, BT>;

/// The environment variable that picks the products: `burn` or `cublaslt`.
pub const PRODUCTS_VAR: &str = "CHESSBENCH_PRODUCTS";

/// CUDA's side of the predictor on the fused backend
/// ([`crate::model::gpu::backend`]): the products in cuBLASLt where it loads and
/// passes its self-test, NVIDIA's profiler range.
impl GpuRuntime for CudaRuntime {
    fn products() -> Products {
        if vendor_products() {
            Products::Cublaslt
        } else {
            Products::Burn
        }
    }

    fn project<F: FloatElement, I: IntElement, BT: BoolElement, const D: usize>(
        x: Tensor<Fusion<Cube<F, I, BT>>, D>,
        w: Tensor<Fusion<Cube<F, I, BT>>, 2>,
    ) -> Tensor<Fusion<Cube<F, I, BT>>, D> {
        if vendor_products() {
            gemm::project_inference(x, w)
        } else {
            crate::model::gpu::backend::flat_linear(x, w)
        }
    }

    fn project_autodiff<
        F: FloatElement,
        I: IntElement,
        BT: BoolElement,
        C: CheckpointStrategy,
        const D: usize,
    >(
        x: Tensor<Autodiff<Fusion<Cube<F, I, BT>>, C>, D>,
        w: Tensor<Autodiff<Fusion<Cube<F, I, BT>>, C>, 2>,
    ) -> Tensor<Autodiff<Fusion<Cube<F, I, BT>>, C>, D> {
        if vendor_products() {
            gemm::project(x, w)
        } else {
            crate::model::gpu::backend::flat_linear(x, w)
        }
    }

    fn product_fallbacks() -> u64 {
        product_fallbacks()
    }

    fn profiler_range(start: bool) {
        profiler_range(start);
    }
}

/// `cuProfilerStart` / `cuProfilerStop` on GPU 0's primary context (the
/// one CubeCL runs on), made current on this thread first; harmless without
/// a profiler attached, and errors are ignored.
fn profiler_range(start: bool) {
    // SAFETY: driver calls on a retained primary context; the profiler
    // calls only flag the range.
    unsafe {
        if driver::result::init().is_err() {
            return;
        }
        let Ok(dev) = driver::result::device::get(0) else {
            return;
        };
        let Ok(context) = driver::result::primary_ctx::retain(dev) else {
            return;
        };
        if driver::result::ctx::set_current(context).is_err() {
            return;
        }
        let _ = if start {
            driver::sys::cuProfilerStart()
        } else {
            driver::sys::cuProfilerStop()
        };
    }
}

/// The fused backend's product: a custom operation of the fusion stream,
/// run by the CubeCL backend's [`Gemm`] when the stream reaches it.
impl<F: FloatElement, I: IntElement, BT: BoolElement> Gemm for Fusion<Cube<F, I, BT>> {
    fn gemm(
        a: FloatTensor<Self>,
        b: FloatTensor<Self>,
        transpose_a: bool,
        transpose_b: bool,
    ) -> FloatTensor<Self> {
        /// The product with its operands' transpositions.
        #[derive(Debug, Clone, Copy)]
        struct GemmPass(bool, bool);

        impl KernelPass<CudaRuntime> for GemmPass {
            fn name(&self) -> &'static str {
                "chessbench_gemm"
            }

            fn run<F: FloatElement, I: IntElement, BT: BoolElement>(
                self,
                inputs: Vec<FloatTensor<Cube<F, I, BT>>>,
            ) -> Vec<FloatTensor<Cube<F, I, BT>>> {
                let [a, b] = operands(inputs);
                vec![<Cube<F, I, BT> as Gemm>::gemm(a, b, self.0, self.1)]
            }
        }

        let (m, ka) = if transpose_a {
            (a.shape[1], a.shape[0])
        } else {
            (a.shape[0], a.shape[1])
        };
        let (kb, n) = if transpose_b {
            (b.shape[1], b.shape[0])
        } else {
            (b.shape[0], b.shape[1])
        };
        // Checked here, on the caller's thread: inside the fusion stream a
        // panic would only be logged.
        assert_eq!(
            ka, kb,
            "inner sizes of a product differ: {:?} · {:?}",
            a.shape, b.shape
        );
        assert_eq!(a.dtype, b.dtype, "a product of two formats");
        let out = TensorIr::uninit(a.client.create_empty_handle(), Shape::new([m, n]), a.dtype);
        let [c] = register_pass::<CudaRuntime, _, F, I, BT>(
            GemmPass(transpose_a, transpose_b),
            vec![a, b],
            &[out],
        )
        .outputs();
        c
    }
}

/// The CubeCL backend's product: cuBLASLt, or burn's matmul where a call
/// cannot be made (one warning).
impl<F: FloatElement, I: IntElement, BT: BoolElement> Gemm for Cube<F, I, BT> {
    fn gemm(
        a: FloatTensor<Self>,
        b: FloatTensor<Self>,
        transpose_a: bool,
        transpose_b: bool,
    ) -> FloatTensor<Self> {
        let empty = a.meta.shape().num_elements() == 0 || b.meta.shape().num_elements() == 0;
        if empty {
            return burn_gemm::<Self>(a, b, transpose_a, transpose_b);
        }
        match cublaslt_gemm(a.clone(), b.clone(), transpose_a, transpose_b) {
            Ok(c) => c,
            Err(e) => {
                if FALLBACKS.fetch_add(1, Ordering::Relaxed) == 0 {
                    eprintln!(
                        "warning: a cuBLASLt product failed ({e}); it and any other that fails run burn's matmul (counted in bench-step's product_fallbacks)"
                    );
                }
                burn_gemm::<Self>(a, b, transpose_a, transpose_b)
            }
        }
    }
}

/// Products that fell back from cuBLASLt to burn's matmul in this process.
static FALLBACKS: AtomicU64 = AtomicU64::new(0);

/// [`FALLBACKS`]' count.
pub fn product_fallbacks() -> u64 {
    FALLBACKS.load(Ordering::Relaxed)
}

/// Whether the linear layers' products run in cuBLASLt (decided once, on
/// GPU 0; module docs).
pub fn vendor_products() -> bool {
    static CHOICE: OnceLock<bool> = OnceLock::new();
    *CHOICE.get_or_init(|| {
        let wanted = std::env::var(PRODUCTS_VAR).unwrap_or_default();
        if wanted == "burn" {
            return false;
        }
        if !matches!(wanted.as_str(), "" | "cublaslt" | "auto") {
            eprintln!(
                "warning: {PRODUCTS_VAR}={wanted:?} is neither \"burn\" nor \"cublaslt\"; using cuBLASLt where it works"
            );
        }
        // cudarc panics on a symbol the loaded library lacks: that, too, is
        // a library that cannot be used.
        let tested = std::panic::catch_unwind(|| self_test(&CudaDevice::default()))
            .unwrap_or_else(|panic| {
                Err(LtError::SelfTest(format!("it panicked: {}", panic_message(&*panic))))
            });
        match tested {
            Ok(()) => true,
            Err(e) => {
                eprintln!("warning: cuBLASLt is not used ({e}); the linear layers run burn's matmul");
                false
            }
        }
    })
}

/// cuBLASLt against burn's matmul on a few shapes and transpositions, in f32
/// (TF32 products on both sides) and bf16: the library must load, run and
/// agree within those formats' rounding.
fn self_test(device: &CudaDevice) -> Result<(), LtError> {
    type B = Cube<f32, i32, u8>;
    /// How the test stores an operand.
    #[derive(Debug, Clone, Copy)]
    enum Storage {
        /// Contiguous, row-major.
        Plain,
        /// Columns 2.. of a wider matrix: an offset start, a row stride
        /// above the width.
        Narrowed,
        /// The transpose of a contiguous matrix: column-major.
        TransposedView,
    }
    use Storage::*;
    for (m, k, n, ta, tb, storage) in [
        (37, 53, 29, false, false, Plain),
        (64, 32, 48, true, false, Plain),
        (33, 17, 65, false, true, Plain),
        (40, 24, 36, false, false, Narrowed),
        (24, 40, 20, false, true, TransposedView),
    ] {
        for dtype in [DType::F32, DType::BF16] {
            let make = |rows: usize, cols: usize, salt: usize| {
                let stored = |rows: usize, cols: usize| {
                    let v: Vec<f32> = (0..rows * cols)
                        .map(|i| (((i * 37 + salt) % 41) as f32 - 20.0) / 16.0)
                        .collect();
                    Tensor::<B, 2>::from_data(TensorData::new(v, [rows, cols]), device).cast(dtype)
                };
                match storage {
                    Plain => stored(rows, cols),
                    Narrowed => stored(rows, cols + 5).narrow(1, 2, cols),
                    TransposedView => stored(cols, rows).transpose(),
                }
            };
            let a = if ta { make(k, m, 1) } else { make(m, k, 1) };
            let b = if tb { make(n, k, 2) } else { make(k, n, 2) };
            let want = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(burn_gemm::<B>(
                a.clone().into_primitive().tensor(),
                b.clone().into_primitive().tensor(),
                ta,
                tb,
            )));
            let got = cublaslt_gemm(
                a.into_primitive().tensor(),
                b.into_primitive().tensor(),
                ta,
                tb,
            )?;
            let got = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(got));
            let values = |t: Tensor<B, 2>| -> Result<Vec<f32>, LtError> {
                t.cast(DType::F32)
                    .into_data()
                    .to_vec::<f32>()
                    .map_err(|e| LtError::SelfTest(format!("{e:?}")))
            };
            let (got, want) = (values(got)?, values(want)?);
            let (mut diff, mut norm) = (0.0f64, 0.0f64);
            for (g, w) in got.iter().zip(&want) {
                diff += f64::from(g - w).powi(2);
                norm += f64::from(*w).powi(2);
            }
            let error = (diff / norm.max(1e-30)).sqrt();
            let bound = if dtype == DType::F32 { 1e-2 } else { 3e-2 };
            if got.len() != want.len() || error.is_nan() || error >= bound {
                return Err(LtError::SelfTest(format!(
                    "{m}x{k}x{n} {dtype:?} (transposed {ta}, {tb}, {storage:?}): relative error {error:.2e} against burn's matmul"
                )));
            }
        }
    }
    Ok(())
}

/// Why a cuBLASLt product could not run.
#[derive(Debug, thiserror::Error)]
pub enum LtError {
    #[error("libcublasLt could not be loaded (add its directory to LD_LIBRARY_PATH)")]
    NoLibrary,
    #[error("cuBLASLt: {0}")]
    Cublas(String),
    #[error("CUDA driver: {0}")]
    Driver(String),
    #[error("CubeCL: {0}")]
    Cube(String),
    #[error("no cuBLASLt product for {0}")]
    Unsupported(String),
    #[error("self-test: {0}")]
    SelfTest(String),
}

/// Bytes of cuBLASLt's workspace (NVIDIA's advice for Hopper: 32 MiB).
const WORKSPACE: usize = 32 << 20;

/// A prepared product: descriptors and the algorithm cuBLASLt's heuristic
/// picked, kept for every later call of the same shape.
struct Prepared {
    desc: sys::cublasLtMatmulDesc_t,
    first: sys::cublasLtMatrixLayout_t,
    second: sys::cublasLtMatrixLayout_t,
    out: sys::cublasLtMatrixLayout_t,
    algo: sys::cublasLtMatmulAlgo_t,
}

/// What a prepared product depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    dtype: u8,
    plan: LtPlan,
    /// Alignment (bytes, at most 16) of the two inputs and the output.
    align: [u8; 3],
}

/// The process's cuBLASLt state (one GPU: the trainer's device 0).
struct Lt {
    /// The GPU this state belongs to; products on another one run burn's.
    device: usize,
    handle: sys::cublasLtHandle_t,
    context: driver::sys::CUcontext,
    /// One workspace per CUDA stream (by the stream's address): products
    /// on two streams may run at the same time.
    workspaces: HashMap<usize, driver::sys::CUdeviceptr>,
    /// Prepared products, and the shapes cuBLASLt has no algorithm for
    /// (asked once).
    prepared: HashMap<Key, Result<Prepared, String>>,
}

// SAFETY: the handle, descriptors, context and workspace are plain CUDA
// objects usable from any thread with the context current; `Lt` is only
// reached through a mutex.
unsafe impl Send for Lt {}

/// The cuBLASLt state of the first GPU a product ran on (the trainer uses
/// GPU 0 only).
fn lt_state(device: &CudaDevice) -> Result<&'static Mutex<Lt>, LtError> {
    static STATE: OnceLock<Result<Mutex<Lt>, String>> = OnceLock::new();
    let index = device.index;
    let state = STATE
        .get_or_init(|| {
            // SAFETY: probing for the library loads it, which has no other
            // effect.
            if !unsafe { sys::is_culib_present() } {
                return Err(LtError::NoLibrary.to_string());
            }
            let driver_err = |e: driver::DriverError| LtError::Driver(format!("{e:?}")).to_string();
            driver::result::init().map_err(driver_err)?;
            let dev = driver::result::device::get(index as i32).map_err(driver_err)?;
            // SAFETY: CubeCL runs on the device's primary context; retaining
            // it again only raises its reference count.
            let context =
                unsafe { driver::result::primary_ctx::retain(dev) }.map_err(driver_err)?;
            // SAFETY: `context` is a valid, retained context.
            unsafe { driver::result::ctx::set_current(context) }.map_err(driver_err)?;
            let handle =
                lt::create_handle().map_err(|e| LtError::Cublas(e.to_string()).to_string())?;
            Ok(Mutex::new(Lt {
                device: index,
                handle,
                context,
                workspaces: HashMap::new(),
                prepared: HashMap::new(),
            }))
        })
        .as_ref()
        .map_err(|e| LtError::Cublas(e.clone()))?;
    Ok(state)
}

/// The alignment of a device address, in bytes, at most 16.
fn alignment(ptr: u64) -> u8 {
    1 << ptr.trailing_zeros().min(4)
}

fn cublas_err(e: lt::CublasError) -> LtError {
    LtError::Cublas(format!("{e:?}"))
}

impl Lt {
    /// The workspace of `stream`, allocated on first use and kept for the
    /// process's lifetime.
    fn workspace(&mut self, stream: driver::sys::CUstream) -> Result<u64, LtError> {
        if let Some(&w) = self.workspaces.get(&(stream as usize)) {
            return Ok(w);
        }
        // SAFETY: a plain allocation on the current (primary) context.
        let w = unsafe { driver::result::malloc_sync(WORKSPACE) }
            .map_err(|e| LtError::Driver(format!("{e:?}")))?;
        self.workspaces.insert(stream as usize, w);
        Ok(w)
    }

    /// The descriptors and algorithm for `key`, prepared on first use; a
    /// shape cuBLASLt cannot run is remembered and refused at once after.
    fn prepare(&mut self, key: Key, types: Types) -> Result<&Prepared, LtError> {
        if !self.prepared.contains_key(&key) {
            let prepared = self.build(key, types).map_err(|e| e.to_string());
            self.prepared.insert(key, prepared);
        }
        self.prepared[&key]
            .as_ref()
            .map_err(|e| LtError::Unsupported(e.clone()))
    }

    /// Creates the descriptors of `key` and asks cuBLASLt's heuristic for
    /// an algorithm; everything created is destroyed again on failure.
    fn build(&self, key: Key, types: Types) -> Result<Prepared, LtError> {
        let mut made = Descriptors::default();
        let prepared = self.build_into(key, types, &mut made);
        if prepared.is_err() {
            made.destroy();
        }
        prepared
    }

    fn build_into(
        &self,
        key: Key,
        types: Types,
        made: &mut Descriptors,
    ) -> Result<Prepared, LtError> {
        let plan = key.plan;
        let desc = lt::create_matmul_desc(types.compute, sys::cudaDataType_t::CUDA_R_32F)
            .map_err(cublas_err)?;
        made.desc = Some(desc);
        for (attr, transpose) in [
            (
                sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA,
                plan.first.transpose,
            ),
            (
                sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSB,
                plan.second.transpose,
            ),
        ] {
            // cublasOperation_t: CUBLAS_OP_N = 0, CUBLAS_OP_T = 1.
            let op: i32 = i32::from(transpose);
            // SAFETY: `desc` is live; the attribute is an int32_t.
            unsafe {
                lt::set_matmul_desc_attribute(
                    desc,
                    attr,
                    (&op as *const i32).cast::<c_void>(),
                    size_of::<i32>(),
                )
            }
            .map_err(cublas_err)?;
        }
        let out_matrix = LtMatrix {
            transpose: false,
            rows: plan.n,
            cols: plan.m,
            ld: plan.n.max(1),
        };
        for m in [plan.first, plan.second, out_matrix] {
            let layout =
                lt::create_matrix_layout(types.data, m.rows as u64, m.cols as u64, m.ld as i64)
                    .map_err(cublas_err)?;
            made.layouts.push(layout);
        }
        let (first, second, out) = (made.layouts[0], made.layouts[1], made.layouts[2]);
        let pref = lt::create_matmul_pref().map_err(cublas_err)?;
        made.pref = Some(pref);
        let workspace = WORKSPACE as u64;
        // SAFETY: `pref` is live; the attribute types are uint64_t and
        // uint32_t as cuBLASLt documents them.
        unsafe {
            use sys::cublasLtMatmulPreferenceAttributes_t as P;
            lt::set_matmul_pref_attribute(
                pref,
                P::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                (&workspace as *const u64).cast::<c_void>(),
                size_of::<u64>(),
            )
            .map_err(cublas_err)?;
            // A' is b's memory, B' is a's, C and D the output.
            let [align_a, align_b, align_out] = key.align.map(u32::from);
            for (attr, value) in [
                (P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_b),
                (P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_a),
                (P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_out),
                (P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_out),
            ] {
                lt::set_matmul_pref_attribute(
                    pref,
                    attr,
                    (&value as *const u32).cast::<c_void>(),
                    size_of::<u32>(),
                )
                .map_err(cublas_err)?;
            }
        }
        // SAFETY: every descriptor is live.
        let heuristic = unsafe {
            lt::get_matmul_algo_heuristic(self.handle, desc, first, second, out, out, pref)
        }
        .map_err(|e| {
            LtError::Unsupported(format!(
                "{plan:?} in {:?}: no algorithm ({e:?})",
                types.data
            ))
        })?;
        // The preference is only needed by the heuristic.
        if let Some(pref) = made.pref.take() {
            // SAFETY: `pref` is live and not used again.
            let _ = unsafe { lt::destroy_matmul_pref(pref) };
        }
        Ok(Prepared {
            desc,
            first,
            second,
            out,
            algo: heuristic.algo,
        })
    }
}

/// What [`Lt::build`] has created so far, destroyed when it fails.
#[derive(Default)]
struct Descriptors {
    desc: Option<sys::cublasLtMatmulDesc_t>,
    layouts: Vec<sys::cublasLtMatrixLayout_t>,
    pref: Option<sys::cublasLtMatmulPreference_t>,
}

impl Descriptors {
    fn destroy(&mut self) {
        // SAFETY: each was created by cuBLASLt and is destroyed once.
        unsafe {
            if let Some(d) = self.desc.take() {
                let _ = lt::destroy_matmul_desc(d);
            }
            for l in self.layouts.drain(..) {
                let _ = lt::destroy_matrix_layout(l);
            }
            if let Some(p) = self.pref.take() {
                let _ = lt::destroy_matmul_pref(p);
            }
        }
    }
}

/// cuBLASLt's types for a burn dtype.
#[derive(Debug, Clone, Copy)]
struct Types {
    data: sys::cudaDataType_t,
    compute: sys::cublasComputeType_t,
    code: u8,
}

fn types(dtype: DType) -> Option<Types> {
    use sys::{cublasComputeType_t as C, cudaDataType_t as T};
    match dtype {
        // f32 operands on TF32 tensor cores, as burn-cuda's own f32
        // products, PyTorch's `tf32` and JAX's default precision.
        DType::F32 => Some(Types {
            data: T::CUDA_R_32F,
            compute: C::CUBLAS_COMPUTE_32F_FAST_TF32,
            code: 0,
        }),
        DType::BF16 => Some(Types {
            data: T::CUDA_R_16BF,
            compute: C::CUBLAS_COMPUTE_32F,
            code: 1,
        }),
        DType::F16 => Some(Types {
            data: T::CUDA_R_16F,
            compute: C::CUBLAS_COMPUTE_32F,
            code: 2,
        }),
        _ => None,
    }
}

fn operand(t: &CubeTensor<CudaRuntime>) -> Operand {
    let (shape, strides) = (t.meta.shape(), t.meta.strides());
    Operand {
        rows: shape[0],
        cols: shape[1],
        row_stride: strides[0],
        col_stride: strides[1],
    }
}

/// `op(a) · op(b)` in cuBLASLt, into a new contiguous tensor, enqueued on
/// the output buffer's CUDA stream.
fn cublaslt_gemm(
    a: CubeTensor<CudaRuntime>,
    b: CubeTensor<CudaRuntime>,
    transpose_a: bool,
    transpose_b: bool,
) -> Result<CubeTensor<CudaRuntime>, LtError> {
    if a.dtype != b.dtype {
        return Err(LtError::Unsupported(format!(
            "operands of two formats ({:?}, {:?})",
            a.dtype, b.dtype
        )));
    }
    let dtype = a.dtype;
    let types = types(dtype).ok_or_else(|| LtError::Unsupported(format!("{dtype:?}")))?;
    let (a, b, plan) = match lt_plan(operand(&a), transpose_a, operand(&b), transpose_b) {
        Some(plan) => (a, b, plan),
        None => {
            let (a, b) = (into_contiguous(a), into_contiguous(b));
            let plan = lt_plan(operand(&a), transpose_a, operand(&b), transpose_b)
                .ok_or_else(|| LtError::Unsupported("operands without a unit stride".into()))?;
            (a, b, plan)
        }
    };
    if plan.m == 0 || plan.n == 0 || plan.k == 0 {
        return Err(LtError::Unsupported(format!("an empty product {plan:?}")));
    }
    let client = a.client.clone();
    let handle = client.empty(plan.m * plan.n * dtype.size());
    let out = CubeTensor::new_contiguous(
        client.clone(),
        a.device.clone(),
        Shape::new([plan.m, plan.n]),
        handle,
        dtype,
    );
    let cube = |e: cubecl::server::ServerError| LtError::Cube(format!("{e:?}"));
    // Each resource keeps its buffer alive until the call is enqueued; later
    // reuse of the memory is ordered after it on the same stream.
    let ra = client.get_resource(a.handle.clone()).map_err(cube)?;
    let rb = client.get_resource(b.handle.clone()).map_err(cube)?;
    let rd = client.get_resource(out.handle.clone()).map_err(cube)?;
    let (pa, pb, pd) = (ra.resource().ptr, rb.resource().ptr, rd.resource().ptr);
    let stream = rd.resource().stream;
    // Inputs from another thread's stream: reading them is ordered (CubeCL
    // made this stream wait for theirs), but their memory could be reused
    // on their stream before this call ran. Those go to burn's product.
    if ra.resource().stream != stream || rb.resource().stream != stream {
        return Err(LtError::Unsupported(
            "operands from another CUDA stream".into(),
        ));
    }
    let key = Key {
        dtype: types.code,
        plan,
        align: [alignment(pa), alignment(pb), alignment(pd)],
    };
    let state = lt_state(&a.device)?;
    let mut lt = state
        .lock()
        .map_err(|_| LtError::Cublas("a previous call panicked".into()))?;
    if lt.device != a.device.index {
        return Err(LtError::Unsupported(format!(
            "GPU {} (cuBLASLt is set up for GPU {})",
            a.device.index, lt.device
        )));
    }
    // SAFETY: the context is the device's primary context, retained.
    unsafe { driver::result::ctx::set_current(lt.context) }
        .map_err(|e| LtError::Driver(format!("{e:?}")))?;
    let handle = lt.handle;
    let workspace = lt.workspace(stream)?;
    let prepared = lt.prepare(key, types)?;
    let (alpha, beta) = (1.0f32, 0.0f32);
    // SAFETY: the pointers are live CubeCL buffers of the sizes the layouts
    // describe (held by `ra`, `rb`, `rd`), the descriptors are live, and the
    // stream is the one CubeCL orders the output's kernels on.
    unsafe {
        lt::matmul(
            handle,
            prepared.desc,
            (&alpha as *const f32).cast::<c_void>(),
            (&beta as *const f32).cast::<c_void>(),
            pb as *const c_void,
            prepared.first,
            pa as *const c_void,
            prepared.second,
            pd as *const c_void,
            prepared.out,
            pd as *mut c_void,
            prepared.out,
            &prepared.algo,
            workspace as *mut c_void,
            WORKSPACE,
            stream as sys::cudaStream_t,
        )
    }
    .map_err(cublas_err)?;
    drop((ra, rb, rd));
    Ok(out)
}
