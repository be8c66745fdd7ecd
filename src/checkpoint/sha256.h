// SHA-256 of bytes and files (OpenSSL's EVP), as lowercase hex.
//
// Incremental so that a checkpoint writer hashes what it writes as it writes
// it, and never reads the file back.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace loom {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(Sha256&&) noexcept;
  Sha256& operator=(Sha256&&) noexcept;

  void update(const void* data, size_t bytes);
  std::string hex_digest();  // finishes; the object is spent afterwards

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
};

std::string sha256_hex(const void* data, size_t bytes);
// Streams the file; throws UserError naming it if it cannot be read.
std::string sha256_file(const std::string& path);

}  // namespace loom
