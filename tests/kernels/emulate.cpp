// chessbench: GPL-3.0-or-later. Runs the fused attention's three kernels, as
// CubeCL compiles them to CUDA C (src/model/cuda_attention.rs writes them to
// k_fwd.inc, k_dq.inc, k_dkdv.inc), on the CPU (shim.h), one cube after the
// other, and prints each output's largest error relative to a double
// precision reference of attention and its backward.
//
//   g++ -std=c++20 -DSEQ=79 -DDIM=32 -DELEM=float -I. -IDIR emulate.cpp -lpthread
//   ./a.out HEADS
#include "shim.h"
#include <cstdio>
#include <functional>
#include <random>
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
#include "k_fwd.inc"
#include "k_dq.inc"
#include "k_dkdv.inc"

template <class Info> Info* make_info(float scale, std::vector<uint32_t> lens) {
    Info* info = new Info;
    memset(info, 0, sizeof(Info));
    info->scalars_float[0] = scale;
    size_t n = sizeof(info->static_meta) / sizeof(uint32_t);
    for (size_t i = 0; i < lens.size() && i < n; i++) info->static_meta[i] = lens[i];
    return info;
}

void launch(unsigned grid, unsigned block, unsigned shared, std::function<void()> f) {
    blockDim = {block, 1, 1};
    gridDim = {grid, 1, 1};
    for (unsigned b = 0; b < grid; b++) {
        unsigned char* sh = new unsigned char[shared ? shared : 1];
        memset(sh, 0xFF, shared);
        g_shared = sh;
        std::barrier<> bar(block);
        g_barrier = &bar;
        std::vector<std::thread> ts;
        for (unsigned t = 0; t < block; t++)
            ts.emplace_back([&, t, b] {
                threadIdx = {t, 0, 0};
                blockIdx = {b, 0, 0};
                f();
            });
        for (auto& t : ts) t.join();
        delete[] sh;
    }
}

template <class A> static double relerr(const A* a, const std::vector<double>& r) {
    double top = 1e-30, e = 0;
    for (size_t i = 0; i < r.size(); i++) top = std::max(top, std::fabs(r[i]));
    for (size_t i = 0; i < r.size(); i++) {
        double d = std::fabs((double)(float)a[i] - r[i]);
        if (!(d <= e)) e = std::isnan(d) ? INFINITY : std::max(e, d);
    }
    return e / top;
}

int main(int argc, char** argv) {
    const unsigned T = SEQ, D = DIM, BH = atoi(argv[1]);
    const size_t n = (size_t)BH * T * D, nl = (size_t)BH * T;
    const float scale = 1.0f / std::sqrt((float)D);
    std::mt19937 rng(42 + T * 7 + D);
    std::uniform_real_distribution<float> U(-2, 2);
    ELEM *q = new ELEM[n], *k = new ELEM[n], *v = new ELEM[n], *g = new ELEM[n];
    for (size_t i = 0; i < n; i++) {
        q[i] = U(rng);
        k[i] = U(rng);
        v[i] = U(rng);
        g[i] = U(rng);
    }
    ELEM *out = new ELEM[n], *dq = new ELEM[n], *dk = new ELEM[n], *dv = new ELEM[n];
    float *lse = new float[nl], *delta = new float[nl];
    for (size_t i = 0; i < n; i++) out[i] = dq[i] = dk[i] = dv[i] = NAN;
    for (size_t i = 0; i < nl; i++) lse[i] = delta[i] = NAN;
    unsigned units = (T + 31) / 32 * 32;
    auto fi = make_info<fwd::info_st>(scale, {(uint32_t)n, (uint32_t)n, (uint32_t)n, (uint32_t)n, (uint32_t)nl});
    launch(BH, units, fwd::SHARED_BYTES, [&] { fwd::attention_forward_kernel(q, k, v, out, lse, fi); });
    auto qi = make_info<dqk::info_st>(
        scale, {(uint32_t)n, (uint32_t)n, (uint32_t)n, (uint32_t)n, (uint32_t)nl, (uint32_t)n, (uint32_t)n, (uint32_t)nl});
    launch(BH, units, dqk::SHARED_BYTES, [&] { dqk::attention_dq_kernel(q, k, v, out, lse, g, dq, delta, qi); });
    auto ki = make_info<dkdvk::info_st>(
        scale, {(uint32_t)n, (uint32_t)n, (uint32_t)n, (uint32_t)nl, (uint32_t)nl, (uint32_t)n, (uint32_t)n, (uint32_t)n});
    launch(BH, units, dkdvk::SHARED_BYTES, [&] { dkdvk::attention_dkdv_kernel(q, k, v, lse, delta, g, dk, dv, ki); });

    // The reference, in double from the same (rounded) inputs.
    std::vector<double> ro(n), rl(nl), rdq(n), rdk(n), rdv(n), rd(nl);
    auto f = [](ELEM x) { return (double)(float)x; };
    for (unsigned h = 0; h < BH; h++) {
        size_t b = (size_t)h * T * D;
        std::vector<double> P(T * T);
        for (unsigned i = 0; i < T; i++) {
            double m = -INFINITY;
            for (unsigned j = 0; j < T; j++) {
                double s = 0;
                for (unsigned c = 0; c < D; c++) s += f(q[b + i * D + c]) * f(k[b + j * D + c]);
                P[i * T + j] = s * scale;
                m = std::max(m, P[i * T + j]);
            }
            double l = 0;
            for (unsigned j = 0; j < T; j++) {
                P[i * T + j] = std::exp(P[i * T + j] - m);
                l += P[i * T + j];
            }
            for (unsigned j = 0; j < T; j++) P[i * T + j] /= l;
            rl[h * T + i] = m + std::log(l);
            for (unsigned c = 0; c < D; c++) {
                double o = 0;
                for (unsigned j = 0; j < T; j++) o += P[i * T + j] * f(v[b + j * D + c]);
                ro[b + i * D + c] = o;
            }
        }
        for (unsigned i = 0; i < T; i++) {
            double s = 0;
            for (unsigned c = 0; c < D; c++) s += f(g[b + i * D + c]) * ro[b + i * D + c];
            rd[h * T + i] = s;
        }
        for (unsigned i = 0; i < T; i++)
            for (unsigned j = 0; j < T; j++) {
                double dp = 0;
                for (unsigned c = 0; c < D; c++) dp += f(g[b + i * D + c]) * f(v[b + j * D + c]);
                double p = P[i * T + j], ds = p * (dp - rd[h * T + i]);
                for (unsigned c = 0; c < D; c++) {
                    rdv[b + j * D + c] += p * f(g[b + i * D + c]);
                    rdq[b + i * D + c] += scale * ds * f(k[b + j * D + c]);
                    rdk[b + j * D + c] += scale * ds * f(q[b + i * D + c]);
                }
            }
    }
    printf("out %.3e lse %.3e delta %.3e dq %.3e dk %.3e dv %.3e\n", relerr(out, ro), relerr(lse, rl),
           relerr(delta, rd), relerr(dq, rdq), relerr(dk, rdk), relerr(dv, rdv));
}
