// run_child: run a program in a child process with a time limit, capturing its stdout and the tail
// of its stderr. Qualification runs every backend this way: a kernel fault poisons the CUDA context
// of its process and a hang must not hang the parent, so the parent never touches the GPU itself.
#pragma once
#include <string>
#include <vector>

namespace fp4moe {

struct ChildResult {
  enum class Outcome { kExited, kSignaled, kTimedOut, kSpawnFailed };
  Outcome outcome = Outcome::kSpawnFailed;
  int exit_code = -1;  // kExited
  int signal = 0;      // kSignaled
  double seconds = 0.0;
  std::string stdout_text;  // everything the child printed (bounded to max_output_bytes)
  std::string stderr_tail;  // the last few KiB of stderr
  std::string error;        // kSpawnFailed: why

  bool ok() const { return outcome == Outcome::kExited && exit_code == 0; }
  std::string describe() const;  // "exited with 0", "killed by SIGSEGV", "timed out after 30.0 s", ...
};

struct ChildOptions {
  double timeout_seconds = 60.0;
  size_t max_output_bytes = 64 << 20;
  bool echo_stderr = false;  // also forward the child's stderr lines to ours (progress)
};

// argv[0] is the program path (no PATH search). On timeout the child's whole process group is
// killed with SIGKILL. Never throws for child failures; they are reported in the result.
ChildResult run_child(const std::vector<std::string>& argv, const ChildOptions& options = {});

// Path of the running executable (/proc/self/exe resolved).
std::string current_executable_path();

}  // namespace fp4moe
