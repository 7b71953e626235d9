//! CUDA kernels on the CPU, launched as the CUDA runtime launches them
//! (`make test-kernels`; docs/gpu.md, "CPU checks that model the CUDA
//! runtime").
//!
//! A kernel's CUDA C (CubeCL's own compiler with the options cubecl-cuda
//! uses on an H100, the source NVRTC gets there) is compiled as C++
//! against `tests/kernels/shim.h` and run by `tests/kernels/emulate.cpp`:
//! a thread per unit, a barrier for `__syncthreads`, shared memory and
//! every byte of every allocation not written by the test filled with
//! poison (NaN as f32 and bf16: CUDA clears neither), the cubes of a launch
//! in shuffled order. What this side models, from CubeCL's own code where
//! it exists:
//!
//! - **memory layouts**: outputs allocated as a kernel's launch allocates
//!   them, through cubecl-runtime's `PitchedMemoryLayoutPolicy` with
//!   cubecl-cuda's 512-byte alignment (rows padded to an aligned pitch),
//!   inputs as the model hands them over (dense, freshly allocated, or
//!   views with an offset), read back through their strides as burn reads
//!   them; bytes outside a tensor's elements must keep their poison;
//! - **the launch**: cubes, units and shared memory checked against an
//!   H100's limits, and the kernel's info (scalars, buffer lengths,
//!   shapes, strides) serialised by CubeCL's own `InfoBuilder`, passed as
//!   cubecl-cuda passes it with grid constants (by value, the shapes and
//!   strides in a second buffer).
//!
//! What it cannot show: warp scheduling, the GPU's memory model, the
//! device's `__expf`, speed. Used by the attention's and the layers'
//! kernel tests ([`crate::model::gpu::attention`], [`crate::model::gpu::layers`]).

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use burn::tensor::bf16;
use burn_cubecl::cubecl::{
    Compiler, InfoBuilder,
    ir::{
        AddressType, DeviceProperties, ElemType, FloatKind, HardwareProperties,
        MemoryDeviceProperties, StorageType, UIntKind, VectorSize,
    },
    prelude::*,
    profile::TimingMethod,
    server::{MemoryLayoutDescriptor, MemoryLayoutPolicy, MemoryLayoutStrategy},
    stream_id::StreamId,
};
use cubecl_cpp::{
    cuda::{CudaDialect, mma::CudaWmmaCompiler},
    shared::{CompilationOptions, CppCompiler, CppSupportedFeatures},
};
use cubecl_runtime::allocator::PitchedMemoryLayoutPolicy;

/// The row alignment cubecl-cuda gives its allocator (`runtime.rs`:
/// `cuMemAllocPitch`'s alignment).
pub(crate) const CUDA_MEM_ALIGNMENT: usize = 512;

/// What an allocation holds before anything writes it: CUDA does not
/// clear memory. `0xFF` bytes read as NaN in f32 and in bf16.
pub(crate) const POISON: u8 = 0xFF;

/// An H100's limits (what the compiler consults, and what a launch
/// must fit).
pub(crate) fn properties() -> DeviceProperties {
    let hardware = HardwareProperties {
        load_width: 128,
        plane_size_min: 32,
        plane_size_max: 32,
        max_bindings: 1024,
        max_shared_memory_size: 227 * 1024,
        max_cube_count: (i32::MAX as u32, 65535, 65535),
        max_units_per_cube: 1024,
        max_cube_dim: (1024, 1024, 64),
        num_streaming_multiprocessors: Some(132),
        num_cpu_cores: None,
        num_tensor_cores: Some(4),
        min_tensor_cores_dim: Some(8),
        max_vector_size: VectorSize::MAX,
    };
    let memory = MemoryDeviceProperties {
        max_page_size: 1 << 34,
        alignment: CUDA_MEM_ALIGNMENT as u64,
    };
    let mut p = DeviceProperties::new(Default::default(), memory, hardware, TimingMethod::System);
    cubecl_cpp::register_supported_types(&mut p);
    p
}

/// The compiler options cubecl-cuda sets for an sm_90 card with CUDA 13
/// (`runtime.rs`): fast math, the info struct as a grid constant,
/// clusters, `elect.sync`, the fast `tanh`.
/// An H100's launch limits, as the kernels' launch reads them from the
/// device ([`properties`]).
pub(crate) fn h100() -> crate::model::gpu::pass::Limits {
    crate::model::gpu::pass::Limits::from_hardware(&properties().hardware)
}

pub(crate) fn compilation_options() -> CompilationOptions {
    CompilationOptions {
        warp_size: 32,
        supports_features: CppSupportedFeatures {
            grid_constants: true,
            clusters: true,
            fast_math: true,
            fast_tanh: true,
            elect_sync: true,
        },
    }
}

/// The element formats the kernels take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Elem {
    F32,
    Bf16,
}

impl Elem {
    pub(crate) fn size(self) -> usize {
        match self {
            Elem::F32 => 4,
            Elem::Bf16 => 2,
        }
    }

    pub(crate) fn storage(self) -> StorageType {
        StorageType::Scalar(ElemType::Float(match self {
            Elem::F32 => FloatKind::F32,
            Elem::Bf16 => FloatKind::BF16,
        }))
    }

    /// The shim's name of the type.
    pub(crate) fn cpp(self) -> &'static str {
        match self {
            Elem::F32 => "float",
            Elem::Bf16 => "__nv_bfloat16",
        }
    }

    /// `x` rounded to this format (bf16: to nearest, ties to even).
    pub(crate) fn round(self, x: f32) -> f32 {
        match self {
            Elem::F32 => x,
            Elem::Bf16 => bf16::from_f32(x).to_f32(),
        }
    }

    pub(crate) fn encode(self, x: f32, out: &mut [u8]) {
        match self {
            Elem::F32 => out.copy_from_slice(&x.to_le_bytes()),
            Elem::Bf16 => out.copy_from_slice(&bf16::from_f32(x).to_le_bytes()),
        }
    }

    pub(crate) fn decode(self, bytes: &[u8]) -> f32 {
        match self {
            Elem::F32 => f32::from_le_bytes(bytes.try_into().unwrap()),
            Elem::Bf16 => bf16::from_le_bytes(bytes.try_into().unwrap()).to_f32(),
        }
    }
}

/// How a launch hands the tensors over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Launch {
    /// As the kernels' implementations do: inputs as they come, each
    /// tensor with its real strides.
    Strided,
    /// As kernels that assume dense tensors would be launched: inputs
    /// copied dense through their strides first (`into_contiguous`),
    /// outputs allocated as now, every tensor described to the kernel as
    /// if dense.
    Dense,
}

/// A tensor as the CUDA runtime hands it to a kernel: an allocation, a
/// view of it (shape, strides, the first element's offset), poison
/// wherever no element lies.
pub(crate) struct DeviceTensor {
    pub(crate) bytes: Vec<u8>,
    pub(crate) elem: Elem,
    pub(crate) shape: Vec<usize>,
    pub(crate) strides: Vec<usize>,
    /// The first element, in elements from the allocation's start (the
    /// handle's offset: the kernel's pointer starts here).
    pub(crate) offset: usize,
    /// Elements cut from the allocation's end (the handle's end offset,
    /// which a slice sets): the kernel's buffer length ends there.
    pub(crate) offset_end: usize,
    /// What every byte held before the elements were written.
    pub(crate) fill: u8,
}

pub(crate) fn dense_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1];
    }
    strides
}

impl DeviceTensor {
    /// A new allocation of `shape` as cubecl-cuda's allocator makes it
    /// for `strategy`.
    pub(crate) fn allocate(shape: &[usize], elem: Elem, strategy: MemoryLayoutStrategy) -> Self {
        Self::allocate_filled(shape, elem, strategy, POISON)
    }

    /// [`Self::allocate`] with every byte `fill`.
    pub(crate) fn allocate_filled(
        shape: &[usize],
        elem: Elem,
        strategy: MemoryLayoutStrategy,
        fill: u8,
    ) -> Self {
        let policy = PitchedMemoryLayoutPolicy::new(CUDA_MEM_ALIGNMENT);
        let descriptor = MemoryLayoutDescriptor::new(strategy, shape.to_vec().into(), elem.size());
        let (_, layouts) = policy.apply(StreamId::current(), &[descriptor]);
        let layout = &layouts[0];
        DeviceTensor {
            bytes: vec![fill; layout.memory.size_in_used() as usize],
            elem,
            shape: shape.to_vec(),
            strides: layout.strides.to_vec(),
            offset: 0,
            offset_end: 0,
            fill,
        }
    }

    /// A `[b, t, w]` view of a dense `[b, t, total]` allocation from column
    /// `start` on, as burn slices the last dimension (a block's gate|up
    /// product cut in two, a projection's part): the view's handle is cut at
    /// both ends.
    pub(crate) fn narrowed(shape: [usize; 3], elem: Elem, total: usize, start: usize) -> Self {
        let [b, t, w] = shape;
        assert!(start + w <= total);
        let mut v = Self::allocate(&[b, t, total], elem, MemoryLayoutStrategy::Contiguous);
        v.shape = vec![b, t, w];
        v.strides = vec![t * total, total, 1];
        v.offset = start;
        v.offset_end = total - start - w;
        v
    }

    /// A dense copy, read through the strides (`into_contiguous`).
    pub(crate) fn contiguous(&self) -> Self {
        let mut dense = Self::allocate(&self.shape, self.elem, MemoryLayoutStrategy::Contiguous);
        dense.write(&self.read());
        dense
    }

    /// Byte offsets of the elements, in row-major order of the shape.
    pub(crate) fn positions(&self) -> Vec<usize> {
        let n: usize = self.shape.iter().product();
        (0..n)
            .map(|mut flat| {
                let mut at = self.offset;
                for (&dim, &stride) in self.shape.iter().zip(&self.strides).rev() {
                    at += (flat % dim) * stride;
                    flat /= dim;
                }
                at * self.elem.size()
            })
            .collect()
    }

    pub(crate) fn write(&mut self, values: &[f32]) {
        let size = self.elem.size();
        for (at, &x) in self.positions().into_iter().zip(values) {
            self.elem.encode(x, &mut self.bytes[at..at + size]);
        }
    }

    /// The elements, through the strides (as burn reads a tensor back).
    pub(crate) fn read(&self) -> Vec<f32> {
        let size = self.elem.size();
        self.positions()
            .into_iter()
            .map(|at| self.elem.decode(&self.bytes[at..at + size]))
            .collect()
    }

    /// Every byte `fill`, as if newly allocated.
    pub(crate) fn refill(&mut self, fill: u8) {
        self.bytes.fill(fill);
        self.fill = fill;
    }

    /// Bytes outside the elements that no longer hold what they held
    /// when allocated.
    pub(crate) fn stray_writes(&self) -> usize {
        let mut mine = vec![false; self.bytes.len()];
        for at in self.positions() {
            mine[at..at + self.elem.size()].fill(true);
        }
        self.bytes
            .iter()
            .zip(mine)
            .filter(|&(&b, mine)| !mine && b != self.fill)
            .count()
    }

    /// What the kernel's pointer covers: the handle between its offsets.
    pub(crate) fn binding(&self) -> &[u8] {
        let size = self.elem.size();
        &self.bytes[self.offset * size..self.bytes.len() - self.offset_end * size]
    }
}

/// The kernel's CUDA C as a C++ namespace `ns` for emulate.cpp, and
/// its shared memory in bytes: the dynamic shared memory becomes the
/// shim's buffer, whose size (the last shared array's end) it declares.
pub(crate) fn as_cpp(source: &str, ns: &str) -> (String, usize) {
    let mut shared = 0;
    let lines: Vec<&str> = source.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        // "// Shared array size: N, B bytes" then "T *x = reinterpret_cast<T*>(&dynamic_shared_mem[OFF]);"
        let Some(rest) = line.trim().strip_prefix("// Shared array size: ") else {
            continue;
        };
        let bytes: usize = rest
            .split(", ")
            .nth(1)
            .and_then(|b| b.trim_end_matches(" bytes").parse().ok())
            .expect("a shared array's size");
        let next = lines.get(i + 1).copied().unwrap_or("");
        let offset: usize = next
            .split("dynamic_shared_mem[")
            .nth(1)
            .and_then(|r| r.split(']').next())
            .and_then(|o| o.parse().ok())
            .expect("a shared array's offset");
        shared = shared.max(offset + bytes);
    }
    let body = source.replace("extern \"C\" ", "");
    let body = body
        .lines()
        .filter(|l| !l.trim_start().starts_with("#include <cuda"))
        .map(|l| {
            if l.contains("extern __shared__") && l.contains("dynamic_shared_mem[]") {
                "uint8* dynamic_shared_mem = g_shared;".to_owned()
            } else {
                l.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let cpp =
        format!("namespace {ns} {{\nconstexpr unsigned SHARED_BYTES = {shared};\n{body}\n}}\n");
    (cpp, shared)
}

/// A kernel builder with the device's properties (as cubecl-cuda builds
/// a launch); the caller registers the kernel's element type, then u32
/// addresses (`AddressType::U32.register`), then expands it.
pub(crate) fn builder() -> KernelBuilder {
    let mut b = KernelBuilder::default();
    b.runtime_properties(Default::default());
    b.device_properties(&properties());
    b
}

/// The settings of a kernel named `name` run by cubes of `units` units.
pub(crate) fn settings(name: &str, units: u32) -> KernelSettings {
    KernelSettings::default()
        .cube_dim(CubeDim::new_1d(units))
        .address_type(AddressType::U32)
        .kernel_name(name)
}

/// The CUDA C that cubecl-cuda compiles `definition` to on an H100.
pub(crate) fn cuda_c(definition: KernelDefinition) -> String {
    let mut compiler = CppCompiler::<CudaDialect<CudaWmmaCompiler>>::default();
    let address = StorageType::Scalar(ElemType::UInt(UIntKind::U32));
    let kernel = compiler
        .compile(
            definition,
            &compilation_options(),
            ExecutionMode::Checked,
            address,
        )
        .expect("CubeCL compiles the kernel");
    format!("{kernel}")
}

/// The environment variable naming a directory where the tests that
/// generate the 9M step's kernel variants write their CUDA C as cubecl-cuda
/// hands it to NVRTC (`make bench-nvrtc` compiles them).
pub(crate) const NVRTC_DUMP_VAR: &str = "CHESSBENCH_NVRTC_DUMP";

/// Checks that `source` is the CUDA C of a kernel `function` (its
/// `extern "C" __global__` entry point has that name) and, when
/// [`NVRTC_DUMP_VAR`] is set, writes it there as `NAME.cu`.
pub(crate) fn check_and_dump(name: &str, function: &str, source: &str) {
    if let Some(dir) = std::env::var_os(NVRTC_DUMP_VAR) {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(Path::new(&dir).join(format!("{name}.cu")), source).unwrap();
    }
    // `extern "C" __global__ void __launch_bounds__(N)NAME (`
    let entry = source
        .lines()
        .find(|l| l.contains("__global__"))
        .and_then(|l| l.split(')').nth(1))
        .map(|rest| rest.trim_end_matches('(').trim());
    assert!(
        entry == Some(function),
        "{name}: the CUDA C has no __global__ {function}"
    );
}

/// A kernel to build into the emulator: the name a launch asks for, the
/// file name its C++ is dumped under (`CHESSBENCH_KERNEL_DUMP`), the
/// function's name in its CUDA C, and that source.
pub(crate) struct Kernel {
    pub(crate) name: String,
    pub(crate) dump: String,
    pub(crate) function: String,
    pub(crate) source: String,
}

/// Kernels compiled for the CPU into one emulator, with their shared
/// memory sizes.
pub(crate) struct Device {
    _dir: tempfile::TempDir,
    exe: PathBuf,
    kernels: Vec<(String, usize)>,
}

/// Whether g++ is there to build the emulator (under `CI=true` its absence
/// fails the test that asks).
pub(crate) fn have_gpp() -> bool {
    if Command::new("g++").arg("--version").output().is_err() {
        crate::testing::missing("no g++ to compile the kernels' CUDA C for the CPU");
        return false;
    }
    true
}

impl Device {
    /// `kernels` compiled for the CPU with `flags` added to g++'s (a
    /// sanitizer). `CHESSBENCH_KERNEL_DUMP=DIR` also writes each kernel's
    /// C++ there, for reading what a GPU compiles.
    pub(crate) fn build(kernels: &[Kernel], flags: &[&str]) -> Device {
        let dir = tempfile::tempdir().unwrap();
        let mut shared = Vec::new();
        let mut inc = String::new();
        let mut dispatch =
            String::from("static int dispatch(const std::string& which, char** argv) {\n");
        for (n, k) in kernels.iter().enumerate() {
            let ns = format!("k{n}");
            let (cpp, bytes) = as_cpp(&k.source, &ns);
            shared.push((k.name.clone(), bytes));
            std::fs::write(dir.path().join(format!("{ns}.inc")), &cpp).unwrap();
            inc += &format!("#include \"{ns}.inc\"\n");
            dispatch += &format!(
                "    if (which == \"{}\") return run({ns}::{}, {ns}::SHARED_BYTES, argv);\n",
                k.name, k.function
            );
            if let Some(dump) = std::env::var_os("CHESSBENCH_KERNEL_DUMP") {
                std::fs::create_dir_all(&dump).unwrap();
                std::fs::write(Path::new(&dump).join(format!("{}.cu", k.dump)), &cpp).unwrap();
            }
        }
        dispatch += "    fprintf(stderr, \"no kernel %s\\n\", which.c_str());\n    return 2;\n}\n";
        std::fs::write(dir.path().join("kernels.inc"), inc + &dispatch).unwrap();
        let sources = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kernels");
        let exe = dir.path().join("emulate");
        let built = Command::new("g++")
            .args(["-std=c++20", "-O1", "-w"])
            .args(flags)
            .arg(format!("-I{}", sources.display()))
            .arg(format!("-I{}", dir.path().display()))
            .arg(sources.join("emulate.cpp"))
            .arg("-o")
            .arg(&exe)
            .arg("-lpthread")
            .output()
            .expect("g++ runs");
        assert!(
            built.status.success(),
            "the kernels' CUDA C does not compile as C++: {}",
            String::from_utf8_lossy(&built.stderr)
        );
        Device {
            _dir: dir,
            exe,
            kernels: shared,
        }
    }

    /// The shared memory kernel `name` declares, in bytes.
    pub(crate) fn shared(&self, name: &str) -> usize {
        self.kernels
            .iter()
            .find(|(k, _)| k == name)
            .map(|&(_, bytes)| bytes)
            .unwrap_or_else(|| panic!("no kernel {name} in this build"))
    }

    /// Launches kernel `name` on `cubes` cubes of `units` units, with
    /// `scalars` (its f32 arguments, in order) and `inputs` then `outputs`
    /// (its tensor arguments, in order), as cubecl-cuda does after
    /// `launch`'s preparation; the outputs' memory is what the kernel left.
    /// The launch must fit an H100 (CUDA refuses it otherwise), and the
    /// kernel must leave its inputs as they were.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn launch(
        &self,
        name: &str,
        cubes: u32,
        units: u32,
        scalars: &[f32],
        inputs: &[&DeviceTensor],
        outputs: &mut [&mut DeviceTensor],
        launch: Launch,
        seed: u64,
    ) {
        let hw = properties().hardware;
        assert!(
            units <= hw.max_units_per_cube && units <= hw.max_cube_dim.0,
            "{name}: {units} units in a cube"
        );
        assert!(
            cubes >= 1 && cubes <= hw.max_cube_count.0,
            "{name}: {cubes} cubes"
        );
        let shared = self.shared(name);
        assert!(
            shared <= hw.max_shared_memory_size,
            "{name}: {shared} bytes of shared memory"
        );
        let dense: Vec<DeviceTensor>;
        let inputs: Vec<&DeviceTensor> = match launch {
            Launch::Strided => inputs.to_vec(),
            Launch::Dense => {
                dense = inputs.iter().map(|t| t.contiguous()).collect();
                dense.iter().collect()
            }
        };

        // The info as the launcher builds it: the scalars, then per tensor
        // its buffer length, length, rank, shape and strides (u32 indices).
        let mut info = InfoBuilder::default();
        for &s in scalars {
            info.scalars.push(s);
        }
        let tensors = inputs.iter().copied().chain(outputs.iter().map(|t| &**t));
        for t in tensors {
            let strides = match launch {
                Launch::Strided => t.strides.clone(),
                Launch::Dense => dense_strides(&t.shape),
            };
            let buffer_len = t.binding().len() / t.elem.size();
            assert!(
                buffer_len <= u32::MAX as usize,
                "u32 indices cannot reach {buffer_len} elements"
            );
            info.metadata.register_tensor(
                t.shape.len() as u64,
                buffer_len as u64,
                t.shape.iter().product::<usize>() as u64,
                t.shape.clone().into(),
                strides.into(),
                AddressType::U32,
            );
        }
        let info = info.finish(AddressType::U32);

        let dir = tempfile::tempdir().unwrap();
        let file = |i: usize| dir.path().join(format!("buf{i}.bin"));
        let tensors = inputs.iter().copied().chain(outputs.iter().map(|t| &**t));
        for (i, t) in tensors.enumerate() {
            std::fs::write(file(i), t.binding()).unwrap();
        }
        let words: Vec<u8> = info.data.iter().flat_map(|w| w.to_le_bytes()).collect();
        std::fs::write(dir.path().join("info.bin"), words).unwrap();
        let ran = Command::new(&self.exe)
            .arg(name)
            .arg(cubes.to_string())
            .arg(units.to_string())
            .arg((inputs.len() + outputs.len()).to_string())
            .arg(info.dynamic_metadata_offset.to_string())
            .arg(seed.to_string())
            .arg(dir.path())
            .output()
            .expect("the emulator runs");
        assert!(
            ran.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&ran.stderr)
        );
        for (i, t) in inputs.iter().enumerate() {
            let back = std::fs::read(file(i)).unwrap();
            assert!(back == t.binding(), "{name} wrote into input {i}");
        }
        for (i, t) in outputs.iter_mut().enumerate() {
            let back = std::fs::read(file(inputs.len() + i)).unwrap();
            let size = t.elem.size();
            let (start, end) = (t.offset * size, t.bytes.len() - t.offset_end * size);
            t.bytes[start..end].copy_from_slice(&back);
        }
    }
}

/// The errors of one run of a kernel family against its reference, and
/// the bytes its launches wrote outside their outputs' elements.
pub(crate) struct Outcome {
    /// Each output's largest error relative to the reference (NaN counts
    /// as infinite).
    pub(crate) errors: Vec<(&'static str, f32)>,
    pub(crate) stray: usize,
}

impl Outcome {
    /// Prints the errors under `label`, then asserts each within `bound`
    /// and nothing written outside the outputs.
    pub(crate) fn assert_within(&self, label: &str, bound: f32) {
        println!("{label}: {:?}", self.errors);
        for (what, e) in &self.errors {
            assert!(*e <= bound, "{label}, {what}: {e:e} relative");
        }
        assert_eq!(self.stray, 0, "{label}: bytes written outside the outputs");
    }
}
