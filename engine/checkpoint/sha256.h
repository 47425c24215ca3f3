// SHA-256 of byte streams, byte ranges and files (OpenSSL's libcrypto), as lowercase hex.
//
//   Sha256 digest;                                   // streaming: feed the bytes as they are written
//   digest.update(header.data(), header.size());
//   digest.update(tensor.data(), tensor.nbytes());
//   FileDigest d = digest.finish();                  // {bytes fed, 64 hex characters}
//
//   std::string hex = sha256_file("step_00000100/model.safetensors");
//   std::string h = sha256_hex(bytes.data(), bytes.size());
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace wick {

// What the manifest records of a file: its size and SHA-256.
struct FileDigest {
  uint64_t bytes = 0;
  std::string sha256;  // lowercase hex, 64 characters
  bool operator==(const FileDigest&) const = default;
};

// An incremental SHA-256 (EVP). Feed bytes in order with update(); finish() returns the digest of
// everything fed and may be called once. Move-only; not thread-safe (one stream, one thread at a time).
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(Sha256&& other) noexcept;
  Sha256& operator=(Sha256&& other) noexcept;
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void update(const void* data, size_t size);
  uint64_t bytes() const { return bytes_; }
  FileDigest finish();

 private:
  struct Context;
  Context* context_ = nullptr;
  uint64_t bytes_ = 0;
  bool finished_ = false;
};

// Hashes `size` bytes at `data`.
std::string sha256_hex(const void* data, size_t size);
// Hashes the whole file, reading it in 4 MiB chunks; `bytes_read` (optional) receives its size.
// Throws WickError (Data) naming the file when it cannot be opened or read.
std::string sha256_file(const std::string& path, uint64_t* bytes_read = nullptr);

}  // namespace wick
