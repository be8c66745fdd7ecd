// One launch of a shell command whose merged stdout and stderr the
// supervisor reads line by line. While a ChildJob runs, SIGINT, SIGTERM and
// SIGHUP sent to the supervisor are passed on to it (mpirun then ends every
// rank), so that stopping the supervisor never leaves a job running
// without it; interrupted() then says which signal came.
#pragma once

#include <cstdio>
#include <string>

namespace loom::elastic {

class ChildJob {
 public:
  explicit ChildJob(const std::string& command);  // throws UserError if it cannot start
  ~ChildJob();                                     // waits for the child if wait() was not called
  ChildJob(const ChildJob&) = delete;
  ChildJob& operator=(const ChildJob&) = delete;

  FILE* output() { return output_; }  // read until EOF
  // Sends the command (mpirun) a signal, e.g. when it does not end after a
  // rank aborted the job.
  void signal(int sig) const;
  // Waits for the command; its exit code (128 + the signal that ended it).
  int wait();
  // The signal the supervisor received while this job ran (0: none).
  static int interrupted();

 private:
  int pid_ = -1;
  FILE* output_ = nullptr;
  bool waited_ = false;
};

}  // namespace loom::elastic
