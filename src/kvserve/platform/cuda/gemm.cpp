// Linear layers on cuBLASLt: C[m, n] = A[m, k] . B[n, k]^T (+ bias), bf16/f16/f32 inputs with f32
// accumulation (CUBLAS_COMPUTE_32F), the bias fused as an epilogue.
//
// cuBLASLt is column-major, so the row-major product is computed as its transpose:
// C^T[n, m] = B[n, k] . A^T, i.e. Lt's "A" is our weight B (k x n column-major, transposed) and
// Lt's "B" is our activation A (k x m column-major). The algorithm for a shape is chosen once and
// cached with its descriptors; the cache and the handle are shared by every caller of the process
// (the engine thread launches, tests may too), behind a mutex. For the decode batches (m in 2..7
// and multiples of 8 up to 256: tuned_shape) the heuristic's first eight answers are timed on the
// first call's buffers, each from a cold L2 (fastest): 8B-shape decode steps on an H100, tuned vs
// the first answer, two runs each: batch 8 6.52 vs 6.61 ms, batch 32 7.61-7.64 vs 7.76-7.78, batch
// 64 9.22-9.27 vs 9.27-9.28; 0.5 s more at load (docs/perf/2026-12-07-issue21-before-after.md). An
// earlier try timed back to back, with the weight in L2 (which a forward never sees), and picked
// slower kernels at m <= 4 on the H200.
//
// m <= kSkinnyGemmMaxM with 16-bit inputs goes to our skinny kernel instead (skinny_gemm.cu: a
// weight read at the copy bandwidth); KVSERVE_SKINNY_GEMM=0 sends it to cuBLASLt too.
#include <cublasLt.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "kvserve/platform/cuda/cuda_check.h"
#include "kvserve/platform/cuda/ops.h"
#include "kvserve/platform/cuda/skinny_gemm.h"

#define KV_CUBLAS_CHECK(call)                                                            \
  do {                                                                                   \
    const cublasStatus_t kv_cublas_st_ = (call);                                         \
    if (kv_cublas_st_ != CUBLAS_STATUS_SUCCESS) [[unlikely]] {                           \
      ::kvserve::detail::check_failed(__FILE__, __LINE__, #call, "cuBLASLt call failed", \
                                      std::to_string(static_cast<int>(kv_cublas_st_)));  \
    }                                                                                    \
  } while (0)

namespace kvserve::platform::cuda {
namespace {

// What cuBLASLt asks for on Hopper. One workspace for the process, allocated at the first GEMM
// with cudaMalloc, and a buffer of twice the L2 allocated at the first tuning (fastest; the decode
// graphs' warm-up runs at load): the device allocations outside a platform's device pool, counted
// in the pool's headroom (platform/device_pool.h), never freed. Without room for the buffer a plan
// keeps the heuristic's answer.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

// Shapes whose algorithm is timed among the heuristic's first kCandidates answers (fastest):
// the decode batches cuBLASLt serves (m = 1 is the skinny kernel's; the decode graphs' sizes are
// multiples of 8 past 8), where the weight read dominates and the heuristic's tile choice leaves
// bandwidth unused. Other m (an extend's length) keep the heuristic's answer, so that a new
// prompt length never waits for a tuning (~5-10 ms per shape).
constexpr int kCandidates = 8;
constexpr int64_t kTunedMaxM = 256;

bool tuned_shape(int64_t m) {
  return m >= 2 && m <= kTunedMaxM && (m < 8 || m % 8 == 0);
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::kBF16:
      return CUDA_R_16BF;
    case DType::kF16:
      return CUDA_R_16F;
    case DType::kF32:
      return CUDA_R_32F;
    default:
      detail::check_failed(__FILE__, __LINE__, "gemm dtype", "must be bf16, f16 or f32",
                           std::to_string(static_cast<int>(t)));
  }
}

// The largest power of two (up to 256) that divides an address: what cuBLASLt may assume.
uint32_t alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && a % align != 0)
    align /= 2;
  return align;
}

using ShapeKey = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, bool, bool,
                            uint32_t, uint32_t, uint32_t, int>;

struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr;  // Lt's A: our weight
  cublasLtMatrixLayout_t b = nullptr;  // Lt's B: our activation
  cublasLtMatrixLayout_t c = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

class LtContext {
 public:
  static LtContext& get() {
    static LtContext* ctx = new LtContext();  // lives as long as the process (CUDA teardown order)
    return *ctx;
  }

  void run(const ops::GemmParams& p, cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(mu_);
    int device = 0;
    KV_CUDA_CHECK(cudaGetDevice(&device));
    const ShapeKey key{p.m,
                       p.n,
                       p.k,
                       p.lda,
                       p.ldb,
                       p.ldc,
                       static_cast<int>(p.dtype),
                       p.c_f32,
                       p.bias != nullptr,
                       alignment(p.a),
                       alignment(p.b),
                       alignment(p.c),
                       device};
    auto it = plans_.find(key);
    if (it == plans_.end()) it = plans_.emplace(key, make_plan(p, device, stream)).first;
    const Plan& plan = it->second;
    set_bias(plan, p);
    KV_CUBLAS_CHECK(matmul(plan, plan.algo, p, stream));
  }

 private:
  LtContext() {
    KV_CUBLAS_CHECK(cublasLtCreate(&handle_));
    KV_CUDA_CHECK(cudaMalloc(&workspace_, kWorkspaceBytes));
  }

  void set_bias(const Plan& plan, const ops::GemmParams& p) {
    if (p.bias == nullptr) return;
    KV_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                   &p.bias, sizeof(p.bias)));
  }

  cublasStatus_t matmul(const Plan& plan, const cublasLtMatmulAlgo_t& algo,
                        const ops::GemmParams& p, cudaStream_t stream) {
    const float alpha = 1.0f;
    const float beta = 0.0f;
    return cublasLtMatmul(handle_, plan.op, &alpha, p.b, plan.a, p.a, plan.b, &beta, p.c, plan.c,
                          p.c, plan.c, &algo, workspace_, kWorkspaceBytes, stream);
  }

  // The fastest of the heuristic's candidates on this call's buffers, each timed from a cold L2
  // (a forward reads every weight from HBM; timed back to back a weight of up to ~50 MB would sit
  // in L2 and favour the wrong kernel). The heuristic's first answer wins unless another is 2 %
  // faster. Runs eagerly (the decode graphs' warm-up runs make their plans before capture); a
  // plan first made during a capture keeps the first answer.
  cublasLtMatmulAlgo_t fastest(const Plan& plan, const ops::GemmParams& p,
                               const cublasLtMatmulHeuristicResult_t* results, int found,
                               int device, cudaStream_t stream) {
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    KV_CUDA_CHECK(cudaStreamIsCapturing(stream, &capturing));
    if (found < 2 || capturing != cudaStreamCaptureStatusNone) return results[0].algo;
    int l2_bytes = 0;
    KV_CUDA_CHECK(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device));
    const size_t flush_bytes = 2 * static_cast<size_t>(l2_bytes);
    void*& flush = flush_[device];
    if (flush == nullptr && cudaMalloc(&flush, flush_bytes) != cudaSuccess) {
      (void)cudaGetLastError();  // no room to time: keep the heuristic's answer
      flush = nullptr;
      return results[0].algo;
    }
    cudaEvent_t start = nullptr;
    cudaEvent_t stop = nullptr;
    KV_CUDA_CHECK(cudaEventCreate(&start));
    KV_CUDA_CHECK(cudaEventCreate(&stop));
    set_bias(plan, p);
    constexpr int kReps = 3;
    int best = -1;
    float best_ms = 0.f;
    for (int i = 0; i < found; ++i) {
      if (matmul(plan, results[i].algo, p, stream) != CUBLAS_STATUS_SUCCESS) continue;
      float total = 0.f;
      for (int r = 0; r < kReps; ++r) {
        KV_CUDA_CHECK(cudaMemsetAsync(flush, r, flush_bytes, stream));
        KV_CUDA_CHECK(cudaEventRecord(start, stream));
        KV_CUBLAS_CHECK(matmul(plan, results[i].algo, p, stream));
        KV_CUDA_CHECK(cudaEventRecord(stop, stream));
        KV_CUDA_CHECK(cudaEventSynchronize(stop));
        float ms = 0.f;
        KV_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
        total += ms;
      }
      if (best < 0 || total < 0.98f * best_ms) {
        best = i;
        best_ms = total;
      }
    }
    KV_CUDA_CHECK(cudaEventDestroy(start));
    KV_CUDA_CHECK(cudaEventDestroy(stop));
    return results[best < 0 ? 0 : best].algo;
  }

  Plan make_plan(const ops::GemmParams& p, int device, cudaStream_t stream) {
    Plan plan;
    const cudaDataType_t in = cuda_type(p.dtype);
    const cudaDataType_t out = p.c_f32 ? CUDA_R_32F : in;
    KV_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t trans = CUBLAS_OP_T;
    const cublasOperation_t no_trans = CUBLAS_OP_N;
    KV_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, &trans,
                                                   sizeof(trans)));
    KV_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, &no_trans,
                                                   sizeof(no_trans)));
    if (p.bias != nullptr) {
      const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
      KV_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                     &epilogue, sizeof(epilogue)));
      KV_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                     &in, sizeof(in)));
    }
    KV_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.a, in, p.k, p.n, p.ldb));
    KV_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.b, in, p.k, p.m, p.lda));
    KV_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.c, out, p.n, p.m, p.ldc));

    cublasLtMatmulPreference_t pref = nullptr;
    KV_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = kWorkspaceBytes;
    KV_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    const uint32_t align_a = alignment(p.b);
    const uint32_t align_b = alignment(p.a);
    const uint32_t align_c = alignment(p.c);
    KV_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof(align_a)));
    KV_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof(align_b)));
    KV_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof(align_c)));
    KV_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c, sizeof(align_c)));
    const bool tune = tuned_shape(p.m);
    cublasLtMatmulHeuristicResult_t results[kCandidates]{};
    int found = 0;
    KV_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle_, plan.op, plan.a, plan.b, plan.c, plan.c,
                                                   pref, tune ? kCandidates : 1, results, &found));
    cublasLtMatmulPreferenceDestroy(pref);
    if (found == 0) {
      detail::check_failed(
          __FILE__, __LINE__, "cublasLtMatmulAlgoGetHeuristic", "no algorithm for this GEMM",
          "m=" + std::to_string(p.m) + " n=" + std::to_string(p.n) + " k=" + std::to_string(p.k));
    }
    plan.algo = tune ? fastest(plan, p, results, found, device, stream) : results[0].algo;
    return plan;
  }

  std::mutex mu_;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::map<int, void*> flush_;  // per device: what fastest overwrites to empty the L2
  std::map<ShapeKey, Plan> plans_;
};

}  // namespace

void gemm(const ops::GemmParams& p, StreamHandle stream) {
  if (p.m == 0 || p.n == 0) return;
  // p.skinny false (KernelSwitches::skinny_gemm, set at the op dispatch) sends skinny shapes to
  // cuBLASLt (A/B measurements).
  if (p.skinny && skinny_gemm_applies(p)) return skinny_gemm(p, stream);
  LtContext::get().run(p, static_cast<cudaStream_t>(stream.ptr));
}

}  // namespace kvserve::platform::cuda
