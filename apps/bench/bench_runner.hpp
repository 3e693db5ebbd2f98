// rz bench's measuring: the workloads of its predecessor gpu_decode_bench, on either executor
// (built by apps/executor_factory.hpp) and driven by a SlotRunner (sched/slot_runner.hpp), which
// prefills each prompt in one step and runs each decode in one step with the block tables it keeps.
//
//   pp:      one prefill of --pp random token ids into a free slot: --pp / time tokens/s;
//   tg:      --tg greedy decode steps at B=1 after a 1-token prompt: --tg / time of the steps;
//   batched: for each B of --batches, B prompts of --prompt random tokens in one prefill step,
//            then --gen decode steps over all B slots: S_TG = B x gen / decode time.
// Every figure is the median of --reps timed runs after a warm-up run; every timed call returns
// host token ids, so it ends with a device sync. One executor per slot count (slots = B, context
// = the largest need rounded up to 64, or --context), destroyed before the next one is made; B=1
// shares the single-stream executor. Slots are released between runs.
#pragma once
#include <cstdio>
#include <memory>
#include <string>

#include "apps/bench/bench_results.hpp"
#include "formats/model_file.hpp"

namespace rz::bench {

// Runs every workload `o` asks for (its batches resolved) on `device` ("cpu" or "cuda") and
// returns what was measured, with the limits (bench_limits.hpp): on the cpu the bandwidth is
// measured after the workloads unless --bandwidth gave one. A workload that fails (an executor
// that cannot be made, a step that throws) is recorded with its error and the others go on.
// Progress lines go to `log`.
BenchRun run_bench(const BenchOptions& o, const std::string& device,
                   std::shared_ptr<const ModelFile> file, std::FILE* log);

}  // namespace rz::bench
