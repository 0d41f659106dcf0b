#include <gtest/gtest.h>

#include <cmath>
#include <csignal>
#include <limits>

#include "common/child_process.h"

namespace fp4moe {
namespace {

TEST(RunChild, CapturesOutputAndExitCode) {
  ChildResult r = run_child({"/bin/sh", "-c", "echo hello; echo oops >&2; exit 3"});
  EXPECT_EQ(r.outcome, ChildResult::Outcome::kExited);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.stdout_text, "hello\n");
  EXPECT_EQ(r.stderr_tail, "oops\n");
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.describe(), "exited with 3");
}

TEST(RunChild, ReportsTheSignalThatKilledTheChild) {
  ChildResult r = run_child({"/bin/sh", "-c", "kill -SEGV $$"});
  EXPECT_EQ(r.outcome, ChildResult::Outcome::kSignaled);
  EXPECT_EQ(r.signal, SIGSEGV);
  EXPECT_EQ(r.describe(), "killed by signal SIGSEGV");
}

TEST(RunChild, KillsAHangingChildAndItsChildrenAtTheTimeLimit) {
  ChildOptions options;
  options.timeout_seconds = 0.5;
  ChildResult r = run_child({"/bin/sh", "-c", "sleep 30 & sleep 30"}, options);
  EXPECT_EQ(r.outcome, ChildResult::Outcome::kTimedOut);
  EXPECT_LT(r.seconds, 5.0);
}

TEST(RunChild, RefusesATimeLimitThatCouldNeverExpireOrIsNotPositive) {
  // A NaN limit compares false with every elapsed time, so it never expired: the child, here one that would
  // sleep an hour, was not started.
  for (double limit : {std::nan(""), -1.0, 0.0, std::numeric_limits<double>::infinity()}) {
    ChildOptions options;
    options.timeout_seconds = limit;
    ChildResult r = run_child({"/bin/sh", "-c", "sleep 3600"}, options);
    EXPECT_EQ(r.outcome, ChildResult::Outcome::kSpawnFailed) << limit;
    EXPECT_NE(r.error.find("invalid time limit"), std::string::npos) << r.error;
    EXPECT_LT(r.seconds, 1.0);
  }
}

TEST(RunChild, MissingProgramIsAnExitNotACrash) {
  ChildResult r = run_child({"/nonexistent/program"});
  EXPECT_EQ(r.outcome, ChildResult::Outcome::kExited);
  EXPECT_EQ(r.exit_code, 127);
}

}  // namespace
}  // namespace fp4moe
