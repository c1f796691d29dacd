// Probe: kernels that are communication only by their namespace, as nsys names them.
//
// Expert-parallel all-to-all libraries (DeepEP) name their kernels `deep_ep::intranode::dispatch`,
// `deep_ep::internode_ll::combine`, ...; nsys's short name keeps only `dispatch` / `combine`. This
// program runs, per cycle, one "verify" phase on one stream: DeepEP's local layout kernel (no
// communication), a dispatch, an expert kernel, a combine, each a spin of a set length, and
// records CUDA events around the two communication kernels; it prints one JSON line per cycle
// with what those events read (ground truth for the phase's communication time).
//
// The kernels stand in for DeepEP's (this is one process on one GPU: nothing is sent); what is
// probed is how nsys writes their names and what tracerecon makes of them.
//
// Build and run (GPU machine): launch/h200_comm_names.sh
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e)); exit(1); } } while (0)

__device__ void spin(long long cycles) {
  long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

namespace deep_ep {
namespace layout {
template <int kNumRanks>
__global__ void get_dispatch_layout(long long cycles) { spin(cycles); }
}  // namespace layout
namespace intranode {
template <int kNumRanks, int kNumThreads>
__global__ void dispatch(long long cycles) { spin(cycles); }
template <typename T, int kNumRanks>
__global__ void combine(T* out, long long cycles) { spin(cycles); if (out && threadIdx.x == 0) out[0] = T(1); }
}  // namespace intranode
}  // namespace deep_ep

namespace {
__global__ void expert_gemm(long long cycles) { spin(cycles); }
}  // namespace

int main(int argc, char** argv) {
  int cycles_n = argc > 1 ? atoi(argv[1]) : 30;
  FILE* gt = argc > 2 ? fopen(argv[2], "w") : stdout;
  if (!gt) { perror(argv[2]); return 1; }
  int clock_khz = 0;
  // The SM clock only sets how long the spins are; the events say how long they took.
  if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0) != cudaSuccess || clock_khz <= 0) {
    cudaGetLastError();
    clock_khz = 1980000;
  }
  auto us = [&](double x) { return (long long)(x * clock_khz / 1000.0); };
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  float* out;
  CHECK(cudaMalloc(&out, sizeof(float)));
  cudaEvent_t d0, d1, c0, c1;
  CHECK(cudaEventCreate(&d0));
  CHECK(cudaEventCreate(&d1));
  CHECK(cudaEventCreate(&c0));
  CHECK(cudaEventCreate(&c1));
  char name[32];
  for (int c = 0; c < cycles_n; ++c) {
    snprintf(name, sizeof name, "cycle %d", c);
    nvtxRangePushA(name);
    nvtxRangePushA("verify");
    deep_ep::layout::get_dispatch_layout<8><<<1, 32, 0, s>>>(us(20));
    CHECK(cudaEventRecord(d0, s));
    deep_ep::intranode::dispatch<8, 768><<<1, 32, 0, s>>>(us(150 + 10 * (c % 4)));
    CHECK(cudaEventRecord(d1, s));
    expert_gemm<<<1, 32, 0, s>>>(us(300));
    CHECK(cudaEventRecord(c0, s));
    deep_ep::intranode::combine<float, 8><<<1, 32, 0, s>>>(out, us(100));
    CHECK(cudaEventRecord(c1, s));
    nvtxRangePop();
    nvtxRangePushA("sample");
    CHECK(cudaStreamSynchronize(s));
    nvtxRangePop();
    nvtxRangePop();
    float dispatch_ms = 0, combine_ms = 0;
    CHECK(cudaEventElapsedTime(&dispatch_ms, d0, d1));
    CHECK(cudaEventElapsedTime(&combine_ms, c0, c1));
    fprintf(gt, "{\"cycle\": %d, \"dispatch_ms\": %.6f, \"combine_ms\": %.6f}\n", c, dispatch_ms, combine_ms);
  }
  CHECK(cudaDeviceSynchronize());
  fclose(gt);
  return 0;
}
