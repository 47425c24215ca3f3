// SHA-256 through OpenSSL's EVP interface (libcrypto); no hand-written hash.
#include "engine/checkpoint/sha256.h"

#include <openssl/evp.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "runtime/error.h"

namespace wick {

struct Sha256::Context {
  EVP_MD_CTX* ctx = nullptr;
};

Sha256::Sha256() : context_(new Context) {
  context_->ctx = EVP_MD_CTX_new();
  if (context_->ctx == nullptr || EVP_DigestInit_ex(context_->ctx, EVP_sha256(), nullptr) != 1) {
    EVP_MD_CTX_free(context_->ctx);
    delete context_;
    context_ = nullptr;
    WICK_FAIL(Runtime, "sha256: cannot set up an EVP SHA-256 digest");
  }
}

Sha256::~Sha256() {
  if (context_ == nullptr) return;
  EVP_MD_CTX_free(context_->ctx);
  delete context_;
}

Sha256::Sha256(Sha256&& other) noexcept
    : context_(std::exchange(other.context_, nullptr)), bytes_(other.bytes_), finished_(other.finished_) {}

Sha256& Sha256::operator=(Sha256&& other) noexcept {
  if (this != &other) {
    std::swap(context_, other.context_);
    std::swap(bytes_, other.bytes_);
    std::swap(finished_, other.finished_);
  }
  return *this;
}

void Sha256::update(const void* data, size_t size) {
  WICK_CHECK_KIND(Runtime, context_ != nullptr && !finished_, "sha256: update after finish() or on a moved-from digest");
  if (size == 0) return;
  WICK_CHECK_KIND(Runtime, EVP_DigestUpdate(context_->ctx, data, size) == 1, "sha256: EVP_DigestUpdate failed");
  bytes_ += size;
}

FileDigest Sha256::finish() {
  WICK_CHECK_KIND(Runtime, context_ != nullptr && !finished_, "sha256: finish() called twice or on a moved-from digest");
  finished_ = true;
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  WICK_CHECK_KIND(Runtime, EVP_DigestFinal_ex(context_->ctx, digest, &length) == 1, "sha256: EVP_DigestFinal_ex failed");
  static const char* digits = "0123456789abcdef";
  std::string hex(2 * length, '0');
  for (unsigned int i = 0; i < length; ++i) {
    hex[2 * i] = digits[digest[i] >> 4];
    hex[2 * i + 1] = digits[digest[i] & 15];
  }
  return {bytes_, hex};
}

std::string sha256_hex(const void* data, size_t size) {
  Sha256 digest;
  digest.update(data, size);
  return digest.finish().sha256;
}

std::string sha256_file(const std::string& path, uint64_t* bytes_read) {
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!file) WICK_FAIL(Data, "sha256: cannot open ", path, ": ", std::strerror(errno));
  Sha256 digest;
  std::vector<unsigned char> buffer(size_t{4} << 20);
  while (true) {
    size_t n = std::fread(buffer.data(), 1, buffer.size(), file.get());
    digest.update(buffer.data(), n);
    if (n < buffer.size()) {
      if (std::ferror(file.get())) WICK_FAIL(Data, "sha256: read error in ", path, ": ", std::strerror(errno));
      break;
    }
  }
  FileDigest result = digest.finish();
  if (bytes_read) *bytes_read = result.bytes;
  return result.sha256;
}

}  // namespace wick
