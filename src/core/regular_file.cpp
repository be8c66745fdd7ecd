#include "core/regular_file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "core/check.h"

namespace loom {

void require_regular_file(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    LOOM_USER_CHECK(errno != ENOENT && errno != ENOTDIR, "%s '%s' does not exist", what.c_str(), path.c_str());
    throw UserError(strprintf("%s '%s' cannot be read: %s", what.c_str(), path.c_str(), std::strerror(errno)));
  }
  LOOM_USER_CHECK(S_ISREG(st.st_mode), "%s '%s' is not a regular file (a %s)", what.c_str(), path.c_str(),
                  S_ISDIR(st.st_mode) ? "folder" : S_ISFIFO(st.st_mode) ? "pipe" : "device or other special file");
}

}  // namespace loom
