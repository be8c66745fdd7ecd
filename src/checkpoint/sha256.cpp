#include "checkpoint/sha256.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "core/check.h"

namespace loom {

struct Sha256::Ctx {
  EVP_MD_CTX* md = nullptr;
  ~Ctx() { EVP_MD_CTX_free(md); }
};

Sha256::Sha256() : ctx_(std::make_unique<Ctx>()) {
  ctx_->md = EVP_MD_CTX_new();
  LOOM_CHECK(ctx_->md && EVP_DigestInit_ex(ctx_->md, EVP_sha256(), nullptr) == 1, "SHA-256 init failed");
}
Sha256::~Sha256() = default;
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;

void Sha256::update(const void* data, size_t bytes) {
  LOOM_CHECK(ctx_ && EVP_DigestUpdate(ctx_->md, data, bytes) == 1, "SHA-256 update failed");
}

std::string Sha256::hex_digest() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  LOOM_CHECK(ctx_ && EVP_DigestFinal_ex(ctx_->md, digest, &len) == 1, "SHA-256 final failed");
  ctx_.reset();
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; i++) {
    out += hex[digest[i] >> 4];
    out += hex[digest[i] & 15];
  }
  return out;
}

std::string sha256_hex(const void* data, size_t bytes) {
  Sha256 h;
  h.update(data, bytes);
  return h.hex_digest();
}

std::string sha256_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  LOOM_USER_CHECK(fd >= 0, "cannot read '%s': %s", path.c_str(), std::strerror(errno));
  Sha256 h;
  std::vector<char> buf(size_t(4) << 20);
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      throw UserError(strprintf("cannot read '%s': %s", path.c_str(), std::strerror(err)));
    }
    if (n == 0) break;
    h.update(buf.data(), size_t(n));
  }
  ::close(fd);
  return h.hex_digest();
}

}  // namespace loom
