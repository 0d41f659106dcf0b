#include "common/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>

#include "common/error.h"

namespace fp4moe {

std::string ChildResult::describe() const {
  switch (outcome) {
    case Outcome::kExited: return detail::concat("exited with ", exit_code);
    case Outcome::kSignaled: {
      const char* name = sigabbrev_np(signal);
      return detail::concat("killed by signal ", name ? std::string("SIG") + name : std::to_string(signal));
    }
    case Outcome::kTimedOut: return detail::concat("timed out after ", seconds, " s and was killed");
    case Outcome::kSpawnFailed: return "could not be started: " + error;
  }
  return "unknown outcome";
}

std::string current_executable_path() {
  char buffer[4096];
  ssize_t n = readlink("/proc/self/exe", buffer, sizeof(buffer) - 1);
  FP4MOE_CHECK(n > 0, "cannot resolve /proc/self/exe: ", std::strerror(errno));
  return std::string(buffer, static_cast<size_t>(n));
}

namespace {

void close_fd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

}  // namespace

ChildResult run_child(const std::vector<std::string>& argv, const ChildOptions& options) {
  ChildResult result;
  if (argv.empty()) {
    result.error = "empty command";
    return result;
  }
  // A NaN limit would never expire (every comparison with it is false): the child could run forever.
  if (!(std::isfinite(options.timeout_seconds) && options.timeout_seconds > 0)) {
    result.error = detail::concat("invalid time limit ", options.timeout_seconds, " s (needs a finite number > 0)");
    return result;
  }
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    result.error = std::string("pipe: ") + std::strerror(errno);
    return result;
  }
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    result.error = std::string("pipe: ") + std::strerror(errno);
    close(out_pipe[0]);
    close(out_pipe[1]);
    return result;
  }
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  const auto start = std::chrono::steady_clock::now();
  pid_t pid = fork();
  if (pid < 0) {
    result.error = std::string("fork: ") + std::strerror(errno);
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) close(fd);
    return result;
  }
  if (pid == 0) {
    // Child: own process group (so a timeout kills everything it started), then exec.
    setpgid(0, 0);
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    execv(args[0], args.data());
    const char* msg = "fp4moe: exec failed\n";
    ssize_t ignored = write(STDERR_FILENO, msg, std::strlen(msg));
    (void)ignored;
    _exit(127);
  }
  setpgid(pid, pid);  // also from the parent, to close the race with the child's own call
  close(out_pipe[1]);
  close(err_pipe[1]);
  int out_fd = out_pipe[0], err_fd = err_pipe[0];
  const size_t kStderrTail = 16 << 10;
  bool timed_out = false;
  char buffer[65536];
  while (out_fd >= 0 || err_fd >= 0) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double remaining = options.timeout_seconds - elapsed;
    if (remaining <= 0) {
      timed_out = true;
      break;
    }
    pollfd fds[2];
    int count = 0;
    if (out_fd >= 0) fds[count++] = {out_fd, POLLIN, 0};
    if (err_fd >= 0) fds[count++] = {err_fd, POLLIN, 0};
    int ready = poll(fds, static_cast<nfds_t>(count), static_cast<int>(std::min(remaining, 1.0) * 1000) + 1);
    if (ready < 0 && errno != EINTR) break;
    for (int i = 0; i < count; ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = read(fds[i].fd, buffer, sizeof(buffer));
      const bool is_out = fds[i].fd == out_fd;
      if (n <= 0) {
        close_fd(is_out ? out_fd : err_fd);
        continue;
      }
      if (is_out) {
        if (result.stdout_text.size() < options.max_output_bytes) result.stdout_text.append(buffer, static_cast<size_t>(n));
      } else {
        if (options.echo_stderr) {
          ssize_t ignored = write(STDERR_FILENO, buffer, static_cast<size_t>(n));
          (void)ignored;
        }
        result.stderr_tail.append(buffer, static_cast<size_t>(n));
        if (result.stderr_tail.size() > 2 * kStderrTail) result.stderr_tail.erase(0, result.stderr_tail.size() - kStderrTail);
      }
    }
  }
  if (timed_out) kill(-pid, SIGKILL);
  int status = 0;
  // After both pipes closed the child may still be running (it closed its stdio): wait with the
  // remaining time limit.
  while (true) {
    pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) break;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!timed_out && elapsed > options.timeout_seconds) {
      timed_out = true;
      kill(-pid, SIGKILL);
    }
    usleep(2000);
  }
  close_fd(out_fd);
  close_fd(err_fd);
  if (result.stderr_tail.size() > kStderrTail) result.stderr_tail.erase(0, result.stderr_tail.size() - kStderrTail);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (timed_out) {
    result.outcome = ChildResult::Outcome::kTimedOut;
  } else if (WIFEXITED(status)) {
    result.outcome = ChildResult::Outcome::kExited;
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.outcome = ChildResult::Outcome::kSignaled;
    result.signal = WTERMSIG(status);
  } else {
    result.outcome = ChildResult::Outcome::kSpawnFailed;
    result.error = "unknown wait status";
  }
  return result;
}

}  // namespace fp4moe
