// SHA-256 of files and byte ranges (OpenSSL's libcrypto), as lowercase hex.
//
//   std::string digest = sha256_file("step_00000100/model.safetensors");   // 64 hex characters
//   std::string d = sha256_hex(bytes.data(), bytes.size());
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace wick {

// Hashes `size` bytes at `data`.
std::string sha256_hex(const void* data, size_t size);
// Hashes the whole file, reading it in 4 MiB chunks; `bytes_read` (optional) receives its size.
// Throws WickError (Data) naming the file when it cannot be opened or read.
std::string sha256_file(const std::string& path, uint64_t* bytes_read = nullptr);

}  // namespace wick
