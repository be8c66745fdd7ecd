#include "elastic/child_job.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>

#include "core/check.h"

namespace loom::elastic {
namespace {

// A signal handler can reach nothing but statics: the running child's pid
// and the signal that came. One supervisor per process, one job at a time.
volatile sig_atomic_t running_child = 0;
volatile sig_atomic_t received_signal = 0;

void pass_on(int sig) {
  received_signal = sig;
  if (running_child > 0) ::kill(pid_t(running_child), sig);
}

void install_handlers() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = pass_on;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // reading the child's output goes on
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &sa, nullptr);
}

}  // namespace

ChildJob::ChildJob(const std::string& command) {
  int fds[2];
  LOOM_USER_CHECK(::pipe(fds) == 0, "elastic: cannot make a pipe: %s", std::strerror(errno));
  install_handlers();
  // Signals wait while the child starts: it must not run pass_on (it would
  // swallow them) but die of them as mpirun would.
  sigset_t block, before;
  sigemptyset(&block);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&block, sig);
  ::sigprocmask(SIG_BLOCK, &block, &before);
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ == 0) {
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::signal(sig, SIG_DFL);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // a supervisor killed outright takes the job with it
    if (::getppid() != parent) ::_exit(143);
    ::sigprocmask(SIG_SETMASK, &before, nullptr);
    ::dup2(fds[1], STDOUT_FILENO);
    ::dup2(fds[1], STDERR_FILENO);
    ::close(fds[0]);
    ::close(fds[1]);
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(fds[1]);
  if (pid_ < 0) {
    ::sigprocmask(SIG_SETMASK, &before, nullptr);
    ::close(fds[0]);
    throw UserError(strprintf("elastic: cannot start '%s': %s", command.c_str(), std::strerror(errno)));
  }
  running_child = pid_;
  ::sigprocmask(SIG_SETMASK, &before, nullptr);   // one that came meanwhile runs pass_on now
  if (received_signal) ::kill(pid_, received_signal);  // or came before the fork
  output_ = ::fdopen(fds[0], "r");
}

void ChildJob::signal(int sig) const {
  if (pid_ > 0 && !waited_) ::kill(pid_, sig);
}

int ChildJob::wait() {
  if (output_) std::fclose(output_), output_ = nullptr;
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  running_child = 0;
  waited_ = true;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1;
}

ChildJob::~ChildJob() {
  if (!waited_ && pid_ > 0) wait();
}

int ChildJob::interrupted() { return received_signal; }

}  // namespace loom::elastic
