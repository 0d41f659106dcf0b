// DIAGNOSTIC r40: how long does it take just to read one token's weights of Qwen3.5-397B (10 experts x
// 7,077,888 bytes = 70.8 MB, cold in L2) from a standing start, with no routing and no arithmetic? That
// is the floor of any fused decode design that streams the experts once; issue 5's target is 21 us.
// Ran in r40 on an H100 in its first form (docs/perf/2026-12-06-h100-r40-stream-floor.txt): the ~1 GB
// contiguous read and the variants one (n = 10), two and two-pdl, the same code paths as here. This form adds the
// n sweep, interleaved, bulk, empty and the chained variants; it ran in r41 on another H100
// (docs/perf/2026-12-07-h100-r41-stream-floor.txt), all but empty-light, added after that run; all of it ran
// in r42 on an H100 (docs/perf/2026-12-07-h100-r42-stream-floor.txt).
// Standalone (no fp4moe headers):
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a THIS.cu -o /tmp/stream_floor && /tmp/stream_floor
// (~1 min on the device, 3.6 GB of GPU memory)
// A pool of 512 experts (3.6 GB, pseudo-random bytes); every layer reads n distinct random experts. A
// CUDA graph holds 8 layers; 8 graphs with different draws are replayed in turn; time = median over
// replays of (replay time / 8), the bench's statistic. The streaming kernel is the fused decode's copy
// scheme without the math: 2 CTAs per SM (100 KB of shared memory each, as launch 1's ~106 KB) x 8 warps,
// each warp a contiguous share of the bytes, cp.async.cg 16 B per lane into its own ring (stages of
// 4 x 512 B per warp), the lane reading back its own bytes (no barriers). Variants (n = 10 unless named):
//   one          one launch reads all n experts (stages 3, 4, 6: 96 / 128 / 192 KB in flight per SM);
//                n = 1, 2, 5, 20 too: time = a + b n separates the per-layer fixed cost from the stream
//   interleaved  as one, stages 4, but warp w takes the 512 B steps w, w + W, ... (the GPU walks the
//                bytes together) instead of a contiguous share
//   bulk         as one, stages 4, each 2 KB stage one cp.async.bulk (TMA) by lane 0 on an mbarrier
//   empty        the same launch reading nothing: the graph's per-launch floor
//   empty-light  a launch reading nothing with one CTA per SM and no dynamic shared memory (r41): how much
//                of empty's floor is the grid's size and shared memory
//   two          W13 parts (47.2 MB) in launch 1, W2 parts (23.6 MB) in launch 2, ordinary launches
//   two-pdl      launch 2 programmatic (SM90): it starts on SMs launch 1 leaves, primes its ring, then
//                waits (griddepcontrol.wait) as the fused decode's launch 2 does before it may use h
//   one-chain,   as one and two-pdl, but each layer's (first) launch is programmatic too and waits at its
//   two-chain    entry for the launch before, as the fused decode's launch 1 does: the launch latency
//                between layers is hidden as in the bench's graphs of the fused decode (first form: not)
// Prints the copy ceiling (cudaMemcpy device to device, 1 GiB, read + write counted) and the kernel's own
// read bandwidth on ~1 GB, measured in the same run.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#define CHECK(call)                                                                                 \
  do {                                                                                              \
    const cudaError_t err_ = (call);                                                                \
    if (err_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(err_)); \
      std::exit(1);                                                                                 \
    }                                                                                               \
  } while (0)

constexpr int kExperts = 512, kMaxTopK = 20, kLayersPerGraph = 8, kGraphs = 8, kReplays = 48;
constexpr long long kExpertBytes = 7077888, kW13Bytes = 4718592, kW2Bytes = 2359296;
constexpr int kWarps = 8, kStepBytes = 512, kStepsPerStage = 4, kStageBytes = kStepsPerStage * kStepBytes;
constexpr int kMaxStages = 6;
constexpr size_t kMinSmemBytes = 100 * 1024;
static_assert(kW13Bytes + kW2Bytes == kExpertBytes, "one expert = W13 + W2");
static_assert(kW13Bytes % kStageBytes == 0 && kW2Bytes % kStageBytes == 0, "segments of whole stages");

struct Segments {  // the bytes a launch reads: count segments of seg_bytes each
  const uint8_t* base[kMaxTopK];
  int count;
  long long seg_bytes;
};

enum Mode { kContiguous = 0, kInterleaved = 1 };
// kChain: as the fused decode's launch 1 (pdl_chain_entry), a programmatic launch that waits at its entry for
// the launch before (whose outputs it would read), then lets the next launch be scheduled. kSecondary, as
// the fused decode's launch 2, never triggers: the next layer's launch starts as its CTAs exit.
enum Pdl { kOrdinary = 0, kPrimary = 1, kSecondary = 2, kChain = 3 };

__device__ __forceinline__ void copy16(uint32_t smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem), "l"(gmem) : "memory");
}

__device__ __forceinline__ const uint8_t* step_address(const Segments& s, long long steps_per_seg, long long step) {
  const long long seg = step / steps_per_seg;
  return s.base[seg] + (step - seg * steps_per_seg) * kStepBytes;
}

// cp.async rings: warp w reads the steps [begin, end) of its contiguous share (kContiguous) or the steps
// w, w + W, ... (kInterleaved); stages - 1 stages stay in flight while it reads one.
__global__ void __launch_bounds__(kWarps * 32, 2) stream_kernel(Segments s, int stages, int mode, int pdl, uint32_t* sink) {
  extern __shared__ __align__(16) uint8_t ring[];
  if (pdl == kChain) asm volatile("griddepcontrol.wait;" ::: "memory");  // then trigger: pdl_chain_entry's order
  if (pdl == kPrimary || pdl == kChain) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const long long steps_per_seg = s.seg_bytes / kStepBytes, total = steps_per_seg * s.count;
  const long long warps = static_cast<long long>(gridDim.x) * kWarps, w = blockIdx.x * kWarps + warp;
  const long long begin = w * total / warps, end = (w + 1) * total / warps;
  const long long count = mode == kContiguous ? end - begin : (total > w ? (total - w + warps - 1) / warps : 0);
  auto step_of = [&](long long i) { return mode == kContiguous ? begin + i : w + i * warps; };
  const uint32_t ring_base = static_cast<uint32_t>(__cvta_generic_to_shared(ring)) + warp * stages * kStageBytes;
  long long next = 0;  // the warp's next step to copy (its own numbering)
  int fill_stage = 0;
  auto issue_stage = [&]() {
    for (int g = 0; g < kStepsPerStage; ++g)
      if (next + g < count)
        copy16(ring_base + fill_stage * kStageBytes + g * kStepBytes + lane * 16,
               step_address(s, steps_per_seg, step_of(next + g)) + lane * 16);
    asm volatile("cp.async.commit_group;" ::: "memory");
    next += kStepsPerStage;
    fill_stage = fill_stage + 1 == stages ? 0 : fill_stage + 1;
  };
  for (int i = 0; i < stages; ++i) issue_stage();
  if (pdl == kSecondary) asm volatile("griddepcontrol.wait;" ::: "memory");
  uint32_t acc = 0;
  int read_stage = 0;
  for (long long at = 0; at < count; at += kStepsPerStage) {
    switch (stages) {  // wait_group takes an immediate
      case 3: asm volatile("cp.async.wait_group 2;" ::: "memory"); break;
      case 4: asm volatile("cp.async.wait_group 3;" ::: "memory"); break;
      default: asm volatile("cp.async.wait_group 5;" ::: "memory"); break;
    }
    const uint8_t* stage_bytes = ring + (warp * stages + read_stage) * kStageBytes;
    for (int g = 0; g < kStepsPerStage; ++g)
      if (at + g < count) acc ^= *reinterpret_cast<const uint32_t*>(stage_bytes + g * kStepBytes + lane * 16);
    read_stage = read_stage + 1 == stages ? 0 : read_stage + 1;
    issue_stage();
  }
  asm volatile("cp.async.wait_group 0;" ::: "memory");
  sink[blockIdx.x * blockDim.x + threadIdx.x] ^= acc;
}

// TMA rings: as stream_kernel's contiguous shares, but each 2 KB stage is one cp.async.bulk issued by lane 0,
// completing on the stage's mbarrier.
__global__ void __launch_bounds__(kWarps * 32, 2) stream_bulk_kernel(Segments s, int stages, uint32_t* sink) {
  extern __shared__ __align__(16) uint8_t ring[];
  __shared__ __align__(8) uint64_t bars[kWarps][kMaxStages];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const long long chunks_per_seg = s.seg_bytes / kStageBytes, total = chunks_per_seg * s.count;
  const long long warps = static_cast<long long>(gridDim.x) * kWarps, w = blockIdx.x * kWarps + warp;
  const long long begin = w * total / warps, end = (w + 1) * total / warps;
  const uint32_t ring_base = static_cast<uint32_t>(__cvta_generic_to_shared(ring)) + warp * stages * kStageBytes;
  const uint32_t bar_base = static_cast<uint32_t>(__cvta_generic_to_shared(&bars[warp][0]));
  if (lane == 0) {
    for (int i = 0; i < stages; ++i) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar_base + 8 * i) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncwarp();
  long long next = begin;
  int fill_stage = 0;
  auto issue_stage = [&]() {
    if (lane == 0 && next < end) {
      const long long seg = next / chunks_per_seg;
      const uint8_t* src = s.base[seg] + (next - seg * chunks_per_seg) * kStageBytes;
      const uint32_t bar = bar_base + 8 * fill_stage;
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(kStageBytes) : "memory");
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                       ring_base + fill_stage * kStageBytes),
                   "l"(src), "r"(kStageBytes), "r"(bar)
                   : "memory");
    }
    ++next;
    fill_stage = fill_stage + 1 == stages ? 0 : fill_stage + 1;
  };
  for (int i = 0; i < stages; ++i) issue_stage();
  uint32_t acc = 0, phases = 0;
  int read_stage = 0;
  for (long long at = begin; at < end; ++at) {
    const uint32_t bar = bar_base + 8 * read_stage, parity = (phases >> read_stage) & 1u;
    asm volatile(
        "{ .reg .pred done;\n"
        "WAIT%=: mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT%=; }" ::"r"(bar),
        "r"(parity)
        : "memory");
    phases ^= 1u << read_stage;
    const uint8_t* stage_bytes = ring + (warp * stages + read_stage) * kStageBytes;
    for (int g = 0; g < kStepsPerStage; ++g) acc ^= *reinterpret_cast<const uint32_t*>(stage_bytes + g * kStepBytes + lane * 16);
    __syncwarp();
    read_stage = read_stage + 1 == stages ? 0 : read_stage + 1;
    issue_stage();
  }
  sink[blockIdx.x * blockDim.x + threadIdx.x] ^= acc;
}

__global__ void fill_kernel(uint32_t* p, long long words, uint32_t seed) {
  for (long long i = blockIdx.x * 256LL + threadIdx.x; i < words; i += 256LL * gridDim.x) {
    uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    x ^= x >> 15;
    x *= 2246822519u;
    x ^= x >> 13;
    p[i] = x;
  }
}

// At least kMinSmemBytes, so that two CTAs fill an SM as the fused decode's launch-1 CTAs do, and a
// programmatic launch 2 starts only on the SMs launch 1 leaves.
static size_t smem_bytes(int stages) {
  return std::max<size_t>(kMinSmemBytes, static_cast<size_t>(kWarps) * stages * kStageBytes);
}

static void enqueue(cudaStream_t stream, const Segments& segments, int grid, int stages, int mode, int pdl, bool bulk,
                    uint32_t* sink, bool light = false) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(grid);
  config.blockDim = dim3(kWarps * 32);
  config.dynamicSmemBytes = light ? 0 : smem_bytes(stages);
  config.stream = stream;
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = pdl == kSecondary || pdl == kChain ? 1 : 0;
  if (bulk) CHECK(cudaLaunchKernelEx(&config, stream_bulk_kernel, segments, stages, sink));
  else CHECK(cudaLaunchKernelEx(&config, stream_kernel, segments, stages, mode, pdl, sink));
}

int main() {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount, grid = 2 * sms;
  std::printf("device %s, %d SMs, L2 %d MB\n", prop.name, sms, prop.l2CacheSize >> 20);
  for (const void* kernel : {reinterpret_cast<const void*>(stream_kernel), reinterpret_cast<const void*>(stream_bulk_kernel)})
    CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem_bytes(kMaxStages))));
  const long long pool_bytes = kExperts * kExpertBytes;
  uint8_t* pool = nullptr;
  uint32_t* sink = nullptr;
  const size_t sink_bytes = static_cast<size_t>(grid) * kWarps * 32 * 4;
  CHECK(cudaMalloc(&pool, pool_bytes));
  CHECK(cudaMalloc(&sink, sink_bytes));
  CHECK(cudaMemset(sink, 0, sink_bytes));
  fill_kernel<<<4 * sms, 256>>>(reinterpret_cast<uint32_t*>(pool), pool_bytes / 4, 12345u);
  CHECK(cudaGetLastError());
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  auto time_ms = [&](auto&& region, int reps) {
    std::vector<float> t;
    for (int i = 0; i < reps + 2; ++i) {
      CHECK(cudaEventRecord(e0, stream));
      region(i);
      CHECK(cudaEventRecord(e1, stream));
      CHECK(cudaEventSynchronize(e1));
      float ms = 0;
      CHECK(cudaEventElapsedTime(&ms, e0, e1));
      if (i >= 2) t.push_back(ms);  // two warm-up calls
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  };

  // Copy ceiling (METHOD.md: read + write counted).
  const size_t copy_bytes = 1ull << 30;
  const float copy_ms = time_ms(
      [&](int) { CHECK(cudaMemcpyAsync(pool + copy_bytes, pool, copy_bytes, cudaMemcpyDeviceToDevice, stream)); }, 10);
  std::printf("copy ceiling: %.0f GB/s (1 GiB device to device, read + write)\n", 2.0 * copy_bytes / copy_ms / 1e6);
  {  // The kernels' own read bandwidth: 10 segments of 99 MB.
    Segments big = {};
    big.count = 10;
    big.seg_bytes = 14 * kExpertBytes;
    for (int i = 0; i < big.count; ++i) big.base[i] = pool + i * big.seg_bytes;
    const double gb = big.count * static_cast<double>(big.seg_bytes) / 1e9;
    for (int variant = 0; variant < 3; ++variant) {
      const float ms = time_ms([&](int) { enqueue(stream, big, grid, 4, variant == 1, kOrdinary, variant == 2, sink); }, 10);
      std::printf("%-11s stages 4, %.2f GB read: %.1f us, %.0f GB/s\n",
                  variant == 0 ? "one" : variant == 1 ? "interleaved" : "bulk", gb, ms * 1e3, gb / ms * 1e3);
    }
  }

  std::mt19937 rng(7);
  auto draw = [&](int n) {
    std::vector<int> ids(kExperts);
    for (int i = 0; i < kExperts; ++i) ids[i] = i;
    std::shuffle(ids.begin(), ids.end(), rng);
    ids.resize(n);
    return ids;
  };
  enum Kind { kOne, kTwo, kTwoPdl, kEmpty, kOneChain, kTwoChain, kEmptyLight };
  struct Variant {
    const char* name;
    int kind, experts, stages, mode;
    bool bulk;
  };
  const Variant variants[] = {
      {"empty", kEmpty, 10, 4, kContiguous, false},  {"empty-light", kEmptyLight, 10, 4, kContiguous, false},
      {"one", kOne, 10, 3, kContiguous, false},
      {"one", kOne, 10, 4, kContiguous, false},      {"one", kOne, 10, 6, kContiguous, false},
      {"one", kOne, 1, 4, kContiguous, false},       {"one", kOne, 2, 4, kContiguous, false},
      {"one", kOne, 5, 4, kContiguous, false},       {"one", kOne, 20, 4, kContiguous, false},
      {"interleaved", kOne, 10, 4, kInterleaved, false}, {"bulk", kOne, 10, 4, kContiguous, true},
      {"bulk", kOne, 20, 4, kContiguous, true},      {"two", kTwo, 10, 4, kContiguous, false},
      {"two-pdl", kTwoPdl, 10, 4, kContiguous, false}, {"two-pdl", kTwoPdl, 10, 6, kContiguous, false},
      {"one-chain", kOneChain, 10, 4, kContiguous, false}, {"two-chain", kTwoChain, 10, 4, kContiguous, false}};
  for (const Variant& v : variants) {
    std::vector<cudaGraphExec_t> execs;
    for (int g = 0; g < kGraphs; ++g) {
      CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      for (int layer = 0; layer < kLayersPerGraph; ++layer) {
        const std::vector<int> ids = draw(v.experts);
        Segments whole = {}, w13 = {}, w2 = {};
        whole.count = w13.count = w2.count = v.experts;
        whole.seg_bytes = v.kind == kEmpty || v.kind == kEmptyLight ? 0 : kExpertBytes;
        w13.seg_bytes = kW13Bytes;
        w2.seg_bytes = kW2Bytes;
        for (int k = 0; k < v.experts; ++k) {
          const uint8_t* expert = pool + ids[k] * kExpertBytes;
          whole.base[k] = expert;
          w13.base[k] = expert;
          w2.base[k] = expert + kW13Bytes;
        }
        if (v.kind == kEmptyLight) {
          enqueue(stream, whole, sms, v.stages, v.mode, kOrdinary, false, sink, true);
        } else if (v.kind == kOne || v.kind == kEmpty || v.kind == kOneChain) {
          enqueue(stream, whole, grid, v.stages, v.mode, v.kind == kOneChain ? kChain : kOrdinary, v.bulk, sink);
        } else {
          const int first = v.kind == kTwoChain ? kChain : v.kind == kTwoPdl ? kPrimary : kOrdinary;
          enqueue(stream, w13, grid, v.stages, v.mode, first, false, sink);
          enqueue(stream, w2, grid, v.stages, v.mode, v.kind == kTwo ? kOrdinary : kSecondary, false, sink);
        }
      }
      cudaGraph_t graph;
      CHECK(cudaStreamEndCapture(stream, &graph));
      cudaGraphExec_t exec;
      CHECK(cudaGraphInstantiate(&exec, graph, 0));
      CHECK(cudaGraphDestroy(graph));
      execs.push_back(exec);
    }
    const float ms = time_ms([&](int i) { CHECK(cudaGraphLaunch(execs[i % kGraphs], stream)); }, kReplays);
    const double us = ms * 1e3 / kLayersPerGraph, bytes = v.kind == kEmpty || v.kind == kEmptyLight ? 0.0 : v.experts * static_cast<double>(kExpertBytes);
    std::printf("%-11s %2d experts (%5.1f MB), stages %d (%3d KB in flight per SM): %6.2f us per layer, %5.0f GB/s\n",
                v.name, v.experts, bytes / 1e6, v.stages, 2 * kWarps * v.stages * kStageBytes / 1024, us, bytes / us / 1e3);
    for (cudaGraphExec_t e : execs) CHECK(cudaGraphExecDestroy(e));
  }
  CHECK(cudaStreamSynchronize(stream));
  CHECK(cudaGetLastError());
  return 0;
}
