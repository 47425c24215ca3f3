// SHA-256 through OpenSSL's EVP interface (libcrypto); no hand-written hash.
#include "engine/checkpoint/sha256.h"

#include <openssl/evp.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "runtime/error.h"

namespace wick {
namespace {

struct DigestContext {
  DigestContext() : ctx(EVP_MD_CTX_new()) {
    WICK_CHECK_KIND(Runtime, ctx != nullptr, "sha256: EVP_MD_CTX_new failed");
    WICK_CHECK_KIND(Runtime, EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) == 1, "sha256: EVP_DigestInit_ex failed");
  }
  ~DigestContext() { EVP_MD_CTX_free(ctx); }
  DigestContext(const DigestContext&) = delete;
  DigestContext& operator=(const DigestContext&) = delete;

  void update(const void* data, size_t size) {
    WICK_CHECK_KIND(Runtime, EVP_DigestUpdate(ctx, data, size) == 1, "sha256: EVP_DigestUpdate failed");
  }
  std::string hex() {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    WICK_CHECK_KIND(Runtime, EVP_DigestFinal_ex(ctx, digest, &length) == 1, "sha256: EVP_DigestFinal_ex failed");
    static const char* digits = "0123456789abcdef";
    std::string out(2 * length, '0');
    for (unsigned int i = 0; i < length; ++i) {
      out[2 * i] = digits[digest[i] >> 4];
      out[2 * i + 1] = digits[digest[i] & 15];
    }
    return out;
  }

  EVP_MD_CTX* ctx;
};

}  // namespace

std::string sha256_hex(const void* data, size_t size) {
  DigestContext context;
  context.update(data, size);
  return context.hex();
}

std::string sha256_file(const std::string& path, uint64_t* bytes_read) {
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!file) WICK_FAIL(Data, "sha256: cannot open ", path, ": ", std::strerror(errno));
  DigestContext context;
  std::vector<unsigned char> buffer(size_t{4} << 20);
  uint64_t total = 0;
  while (true) {
    size_t n = std::fread(buffer.data(), 1, buffer.size(), file.get());
    if (n > 0) context.update(buffer.data(), n);
    total += n;
    if (n < buffer.size()) {
      if (std::ferror(file.get())) WICK_FAIL(Data, "sha256: read error in ", path, ": ", std::strerror(errno));
      break;
    }
  }
  if (bytes_read) *bytes_read = total;
  return context.hex();
}

}  // namespace wick
