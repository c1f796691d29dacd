// Probe: kernels launched with programmatic dependent launch (PDL), as TensorRT-LLM and
// FlashInfer do on Hopper (cudaLaunchKernelEx with programmatic stream serialization): a kernel
// lets the next one on its stream start before it ends (griddepcontrol.launch_dependents), so two
// kernels of one stream run at once. What is probed is how nsys records them (the launch call's
// name, kernels of one stream overlapping in time) and whether each phase's GPU time still reads
// what CUDA events on the stream read.
//
// Per cycle, on one non-blocking stream, with the CPU free to run ahead until "sample":
//   draft  : three PDL kernels (the first two trigger their dependents at once; the third waits
//            for the second with griddepcontrol.wait after a short prologue)
//   verify : a plain kernel, then two PDL kernels that overlap each other
//   sample : a 4-byte device-to-host copy into pinned memory, then cudaStreamSynchronize
// Mode "events" records a CUDA event before the cycle and after each phase (an event between two
// kernels ends PDL's overlap across it, so the phases' boundaries are where the events are);
// mode "cycle" records events only around the whole cycle (PDL overlaps across draft | verify).
// One JSON line per cycle: what the events read (ms).
//
// Build and run (GPU machine): launch/h200_pdl.sh
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e)); exit(1); } } while (0)

__device__ void spin(long long cycles) {
  long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

// Lets the next kernel on the stream start now, then works.
__global__ void pdl_lead(long long cycles) {
  asm volatile("griddepcontrol.launch_dependents;");
  spin(cycles);
}

// Starts early (its launch overlaps the kernel before), works a prologue, waits for the kernel
// before to finish, then works the rest.
__global__ void pdl_wait(long long prologue, long long cycles) {
  spin(prologue);
  asm volatile("griddepcontrol.wait;" ::: "memory");
  spin(cycles);
}

__global__ void plain(long long cycles, int* out) {
  spin(cycles);
  if (threadIdx.x == 0) out[0] += 1;
}

// Launches k on s with programmatic stream serialization allowed: it may start before the kernel
// before it on the stream ends (its griddepcontrol.wait, if any, waits for that one).
template <typename... Args>
static void launch_pdl(cudaStream_t s, void (*k)(Args...), Args... args) {
  cudaLaunchConfig_t cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.gridDim = dim3(1);
  cfg.blockDim = dim3(32);
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  CHECK(cudaLaunchKernelEx(&cfg, k, args...));
}

int main(int argc, char** argv) {
  int cycles_n = argc > 1 ? atoi(argv[1]) : 40;
  bool boundary_events = argc > 2 ? strcmp(argv[2], "cycle") != 0 : true;
  FILE* gt = argc > 3 ? fopen(argv[3], "w") : stdout;
  if (!gt) { perror(argv[3]); return 1; }
  int clock_khz = 0;
  // The SM clock only sets how long the spins are; the events say how long they took.
  if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0) != cudaSuccess || clock_khz <= 0) {
    cudaGetLastError();
    clock_khz = 1980000;
  }
  auto us = [&](double x) { return (long long)(x * clock_khz / 1000.0); };
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int* dev;
  int* host;
  CHECK(cudaMalloc(&dev, sizeof(int)));
  CHECK(cudaMemset(dev, 0, sizeof(int)));
  CHECK(cudaMallocHost(&host, sizeof(int)));
  cudaEvent_t e0, e1, e2, e3;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  CHECK(cudaEventCreate(&e2));
  CHECK(cudaEventCreate(&e3));
  char name[32];
  for (int c = 0; c < cycles_n; ++c) {
    int v = c % 3;
    snprintf(name, sizeof name, "cycle %d", c);
    nvtxRangePushA(name);
    CHECK(cudaEventRecord(e0, s));
    nvtxRangePushA("draft");
    launch_pdl(s, pdl_lead, us(80 + 20 * v));
    launch_pdl(s, pdl_lead, us(60));
    launch_pdl(s, pdl_wait, us(10), us(40 + 10 * v));
    nvtxRangePop();
    if (boundary_events) CHECK(cudaEventRecord(e1, s));
    nvtxRangePushA("verify");
    plain<<<1, 32, 0, s>>>(us(50), dev);
    CHECK(cudaGetLastError());
    launch_pdl(s, pdl_lead, us(120 + 30 * v));
    launch_pdl(s, pdl_lead, us(70));
    nvtxRangePop();
    if (boundary_events) CHECK(cudaEventRecord(e2, s));
    nvtxRangePushA("sample");
    CHECK(cudaMemcpyAsync(host, dev, sizeof(int), cudaMemcpyDeviceToHost, s));
    CHECK(cudaEventRecord(e3, s));
    CHECK(cudaStreamSynchronize(s));
    nvtxRangePop();
    nvtxRangePop();
    float cycle_ms = 0, draft_ms = -1, verify_ms = -1, sample_ms = -1;
    CHECK(cudaEventElapsedTime(&cycle_ms, e0, e3));
    if (boundary_events) {
      CHECK(cudaEventElapsedTime(&draft_ms, e0, e1));
      CHECK(cudaEventElapsedTime(&verify_ms, e1, e2));
      CHECK(cudaEventElapsedTime(&sample_ms, e2, e3));
    }
    fprintf(gt, "{\"cycle\": %d, \"cycle_ms\": %.6f, \"draft_ms\": %.6f, \"verify_ms\": %.6f, \"sample_ms\": %.6f}\n", c, cycle_ms, draft_ms,
            verify_ms, sample_ms);
  }
  CHECK(cudaDeviceSynchronize());
  fclose(gt);
  return 0;
}
