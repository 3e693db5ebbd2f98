// gpu_verify's subcommands (each returns the process exit code: 0 all cases passed, 1 some
// failed; rz::Error for bad usage is reported by main as exit code 2).
#pragma once

namespace rz::verify {

int cmd_compare(int argc, char** argv);  // cmd_compare.cpp
int cmd_hf(int argc, char** argv);       // cmd_hf.cpp
int cmd_batch(int argc, char** argv);    // cmd_batch.cpp
int cmd_fp8(int argc, char** argv);      // cmd_fp8.cpp

}  // namespace rz::verify
