// Decode attention speed (kernels/attention_decode.cu): µs per call and the KV bytes it reads per
// second, for the attention shapes of the side-by-side models at the batch sizes and contexts of
// the batched-decode workload (llama-batched-bench's 128-token prompts and 128 generated tokens:
// contexts 128-256). A benchmark, not a pass/fail test:
//   gpu_test --gtest_also_run_disabled_tests --gtest_filter='AttentionDecodeBench.*'
// RZ_ATTN_BENCH_ONLY="<shape> <B>" runs one row (e.g. "llama3.1-8b 256"). The caches hold random
// fp16 rows (their values do not change the speed), block tables a random permutation of the
// blocks, so consecutive blocks of a slot are not adjacent in memory, as after the block manager
// has recycled blocks for a while; max_context is the executor's graph bound (the longest
// context rounded up to a power of two, at least 256), so the grid and the partition length are
// those of the engine's captured decode step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gpu/test_support.hpp"
#include "kernels/attention_decode.hpp"
#include "model/executor.hpp"  // kDefaultKvBlockSize
#include "tests/gpu/elem_test_util.hpp"

namespace rz::gpu {
namespace {

using namespace elem_test;

struct BenchShape {
  const char* name;
  int n_head, n_head_kv, head_dim;
};

TEST(AttentionDecodeBench, DISABLED_Bandwidth) {
  RZ_REQUIRE_GPU();
  const char* only = std::getenv("RZ_ATTN_BENCH_ONLY");
  const BenchShape shapes[] = {{"llama3.1-8b", 32, 8, 128}, {"qwen2.5-1.5b", 12, 2, 128}};
  const int batches[] = {1, 16, 32, 64, 128, 256};
  const std::pair<int, int> contexts[] = {{128, 256}, {1024, 1152}, {3000, 4000}};
  std::mt19937_64 rng(7);
  std::printf("| shape | B | context | max_context | us per call | KV GB read | GB/s |\n");
  std::printf("| --- | ---: | --- | ---: | ---: | ---: | ---: |\n");
  for (const BenchShape& sh : shapes)
    for (int B : batches)
      for (auto [lo, hi] : contexts) {
        if (only && std::string(only) != std::string(sh.name) + " " + std::to_string(B)) continue;
        const int bs = kDefaultKvBlockSize;
        std::uniform_int_distribution<int> len_of(lo, hi);
        std::vector<int32_t> lens(B);
        for (auto& L : lens) L = len_of(rng);
        const int max_len = *std::max_element(lens.begin(), lens.end());
        int max_context = 256;  // the executor's graph bound (graph_context)
        while (max_context < max_len) max_context *= 2;
        const int table_stride = (max_context + bs - 1) / bs;
        int used = 0;
        for (int L : lens) used += (L + bs - 1) / bs;
        std::vector<int32_t> perm(used);
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), rng);
        std::vector<int32_t> tables(size_t(B) * table_stride, -1);
        int next = 0;
        for (int s = 0; s < B; ++s)
          for (int b = 0; b < (lens[s] + bs - 1) / bs; ++b)
            tables[size_t(s) * table_stride + b] = perm[next++];
        const KvCacheShape cache{used, sh.n_head_kv, bs, sh.head_dim};
        std::vector<uint16_t> kv(cache.layer_elems());  // fp16 in [0.125, 1): 0x3000-0x3bff
        uint64_t h = rng();
        for (auto& x : kv) {
          h = h * 6364136223846793005ull + 1442695040888963407ull;
          x = uint16_t(0x3000 + (h >> 40) % 0xc00);
        }
        std::normal_distribution<float> nd(0.0f, 1.0f);
        std::vector<float> q(size_t(B) * sh.n_head * sh.head_dim);
        for (auto& x : q) x = nd(rng);
        AttentionDecodeArgs a;
        a.n_slots = B;
        a.n_head = sh.n_head;
        a.cache = cache;
        a.max_context = max_context;
        a.table_stride = table_stride;
        auto d_k = to_device(kv), d_v = to_device(kv);
        auto d_q = to_device(q);
        auto d_tables = to_device(tables);
        auto d_lens = to_device(lens);
        DeviceBuffer<float> d_out(q.size());
        const size_t ws_n = attention_decode_workspace_floats(a);
        DeviceBuffer<float> d_ws(std::max<size_t>(ws_n, 1));
        const double us = mean_call_us([&](int) {
          attention_decode(d_q.get(), d_k.get(), d_v.get(), d_tables.get(), d_lens.get(),
                           d_out.get(), d_ws.get(), a, nullptr);
        });
        RZ_CUDA_CHECK(cudaDeviceSynchronize());
        const int64_t tokens = std::accumulate(lens.begin(), lens.end(), int64_t(0));
        const double gb = double(tokens) * sh.n_head_kv * sh.head_dim * 2 * 2 / 1e9;
        std::printf("| %s | %d | %d-%d | %d | %.1f | %.4f | %.0f |\n", sh.name, B, lo, hi,
                    max_context, us, gb, gb / (us * 1e-6));
      }
}

}  // namespace
}  // namespace rz::gpu
