// chessbench: GPL-3.0-or-later. Launches one of the project's CUDA
// kernels, as CubeCL compiles them to CUDA C (src/model/gpu/cuda_emulator.rs
// writes them with kernels.inc, which includes them), on the CPU (shim.h), the
// way cubecl-cuda launches them: the tensors' buffers in argument order,
// then the shapes and strides (the dynamic metadata), then the info struct
// by value (a grid constant). The caller (the Rust test) lays out every
// buffer and serialises the info with CubeCL's own code; this program only
// runs the cubes, in a shuffled order (a GPU runs them in no set order),
// each with one thread per unit (the same threads for every cube) and its
// shared memory poisoned.
//
//   g++ -std=c++20 -I. -IDIR emulate.cpp -lpthread
//   ./a.out KERNEL CUBES UNITS BUFFERS DYNAMIC_OFFSET SEED DIR
//
// KERNEL: a name kernels.inc dispatches. DIR holds buf0.bin..buf{BUFFERS-1}.bin (each
// buffer from the kernel's pointer on) and info.bin (the info words, the
// dynamic metadata from word DYNAMIC_OFFSET on); the buffers are written
// back after the launch.
#include "shim.h"
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
typedef unsigned int uint;
typedef unsigned char uint8;
typedef unsigned short uint16;
typedef unsigned int uint32;
typedef unsigned long long int uint64;
typedef signed char int8;
typedef signed short int16;
typedef signed int int32;
typedef signed long long int int64;
thread_local dim3s threadIdx, blockIdx;
dim3s blockDim, gridDim;
std::barrier<>* g_barrier;
unsigned char* g_shared;

static std::vector<unsigned char> slurp(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) {
        fprintf(stderr, "cannot read %s\n", path.c_str());
        exit(2);
    }
    return std::vector<unsigned char>(std::istreambuf_iterator<char>(f), {});
}

// A kernel argument: pointers in order (the buffers, then the dynamic
// metadata), the one non-pointer (the info struct) copied from `info`.
template <class T> T argument(void** pointers, size_t& next, const void* info) {
    if constexpr (std::is_pointer_v<T>) {
        return reinterpret_cast<T>(pointers[next++]);
    } else {
        T value;
        memcpy(&value, info, sizeof(T));
        return value;
    }
}

template <class... A> constexpr size_t pointer_count(void (*)(A...)) {
    return (size_t(0) + ... + size_t(std::is_pointer_v<A>));
}

template <class... A> constexpr size_t info_size(void (*)(A...)) {
    return (size_t(0) + ... + (std::is_pointer_v<A> ? size_t(0) : sizeof(A)));
}

// Runs `kernel` on every cube, in `order`, one cube at a time, with
// `units` threads: each thread is one unit of every cube in turn (threads
// are started once per launch, not once per cube: starting them was most of
// the emulator's time). Between two cubes every unit has finished the first
// and unit 0 poisons the shared memory again, so each cube starts as a
// fresh one would; __syncthreads() uses the same barrier as these two steps,
// and every unit of a cube reaches it equally often, as CUDA requires.
template <class... A>
void launch(void (*kernel)(A...), void** pointers, const void* info, const std::vector<unsigned>& order,
            unsigned units, unsigned shared) {
    blockDim = {units, 1, 1};
    gridDim = {(unsigned)order.size(), 1, 1};
    std::vector<unsigned char> memory(shared ? shared : 1, 0xFF);
    g_shared = memory.data();
    std::barrier<> barrier(units);
    g_barrier = &barrier;
    std::vector<std::thread> threads;
    for (unsigned unit = 0; unit < units; unit++)
        threads.emplace_back([&, unit] {
            for (size_t n = 0; n < order.size(); n++) {
                if (n > 0) {
                    barrier.arrive_and_wait();  // every unit is done with cube n - 1
                    if (unit == 0) std::fill(memory.begin(), memory.end(), 0xFF);
                    barrier.arrive_and_wait();  // cube n starts with its memory poisoned
                }
                threadIdx = {unit, 0, 0};
                blockIdx = {order[n], 0, 0};
                size_t next = 0;
                // Braces evaluate the arguments left to right.
                std::tuple<A...> args{argument<A>(pointers, next, info)...};
                std::apply(kernel, args);
            }
        });
    for (auto& t : threads) t.join();
}

template <class... A>
int run(void (*kernel)(A...), unsigned shared, char** argv) {
    const unsigned cubes = atoi(argv[2]), units = atoi(argv[3]), buffers = atoi(argv[4]);
    const size_t dynamic_offset = strtoull(argv[5], nullptr, 10);
    const unsigned seed = atoi(argv[6]);
    const std::string dir = argv[7];
    if (pointer_count(kernel) != buffers + 1) {
        fprintf(stderr, "%s takes %zu pointers, given %u buffers and the metadata\n", argv[1],
                pointer_count(kernel), buffers);
        return 2;
    }
    std::vector<std::vector<unsigned char>> memory;
    for (unsigned i = 0; i < buffers; i++) memory.push_back(slurp(dir + "/buf" + std::to_string(i) + ".bin"));
    std::vector<unsigned char> info_bytes = slurp(dir + "/info.bin");
    // The struct passed by value is the words before the dynamic metadata.
    if (info_size(kernel) != dynamic_offset * 8 || info_bytes.size() < dynamic_offset * 8) {
        fprintf(stderr, "the info struct is %zu bytes, the runtime's %zu\n", info_size(kernel), dynamic_offset * 8);
        return 2;
    }
    // Word-aligned copies, as the device's would be.
    std::vector<uint64> info((info_bytes.size() + 7) / 8);
    memcpy(info.data(), info_bytes.data(), info_bytes.size());
    std::vector<void*> pointers;
    for (auto& m : memory) pointers.push_back(m.data());
    pointers.push_back(info.data() + dynamic_offset);
    std::vector<unsigned> order(cubes);
    for (unsigned i = 0; i < cubes; i++) order[i] = i;
    std::mt19937 rng(seed);
    std::shuffle(order.begin(), order.end(), rng);
    launch(kernel, pointers.data(), info.data(), order, units, shared);
    for (unsigned i = 0; i < buffers; i++) {
        std::ofstream f(dir + "/buf" + std::to_string(i) + ".bin", std::ios::binary);
        f.write(reinterpret_cast<const char*>(memory[i].data()), memory[i].size());
    }
    return 0;
}

// The kernels of this build (src/model/gpu/cuda_emulator.rs writes it): each
// kernel's CUDA C in a namespace of its own, and `dispatch`, which runs the
// one named KERNEL through `run`.
#include "kernels.inc"

int main(int argc, char** argv) {
    if (argc != 8) {
        fprintf(stderr, "usage: %s KERNEL CUBES UNITS BUFFERS DYNAMIC_OFFSET SEED DIR\n", argv[0]);
        return 2;
    }
    return dispatch(argv[1], argv);
}
