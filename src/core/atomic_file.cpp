#include "core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/check.h"

namespace loom {

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  tmp_path_ = strprintf("%s.tmp.%d", path_.c_str(), int(::getpid()));
  fd_ = ::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  LOOM_USER_CHECK(fd_ >= 0, "cannot write '%s': %s", path_.c_str(), std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_path_.c_str());
  }
}

void AtomicFile::write(const void* data, size_t bytes) {
  LOOM_CHECK(fd_ >= 0, "write after commit to %s", path_.c_str());
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    LOOM_USER_CHECK(n > 0, "cannot write '%s': %s", path_.c_str(), std::strerror(errno));
    p += n;
    bytes -= size_t(n);
  }
}

void AtomicFile::commit() {
  LOOM_CHECK(fd_ >= 0, "commit twice to %s", path_.c_str());
  LOOM_USER_CHECK(::fsync(fd_) == 0, "cannot write '%s': fsync: %s", path_.c_str(), std::strerror(errno));
  ::close(fd_);
  fd_ = -1;
  if (::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp_path_.c_str());
    throw UserError(strprintf("cannot write '%s': rename: %s", path_.c_str(), std::strerror(err)));
  }
  // The rename itself is durable once the folder is synced.
  size_t slash = path_.rfind('/');
  std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path_.substr(0, slash);
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void write_file_atomically(const std::string& path, const void* data, size_t bytes) {
  AtomicFile f(path);
  f.write(data, bytes);
  f.commit();
}

}  // namespace loom
