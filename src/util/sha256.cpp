#include "fact/util/sha256.hpp"

#include <openssl/evp.h>

#include <cerrno>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <system_error>
#include <vector>

namespace fact::util {
namespace {

class Digest {
 public:
  Digest() : context_(EVP_MD_CTX_new(), EVP_MD_CTX_free) {
    if (!context_ || EVP_DigestInit_ex(context_.get(), EVP_sha256(), nullptr) != 1) {
      throw std::runtime_error("SHA-256: cannot initialize OpenSSL digest");
    }
  }
  void update(const void* data, size_t size) {
    if (EVP_DigestUpdate(context_.get(), data, size) != 1) throw std::runtime_error("SHA-256: update failed");
  }
  std::string hex() {
    unsigned char bytes[EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    if (EVP_DigestFinal_ex(context_.get(), bytes, &length) != 1) throw std::runtime_error("SHA-256: final failed");
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string text;
    text.reserve(length * 2);
    for (unsigned int i = 0; i < length; ++i) {
      text += kDigits[bytes[i] >> 4];
      text += kDigits[bytes[i] & 0xf];
    }
    return text;
  }

 private:
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> context_;
};

}  // namespace

std::string sha256_hex(std::string_view data) {
  Digest digest;
  digest.update(data.data(), data.size());
  return digest.hex();
}

std::string sha256_file_hex(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::system_error(errno ? errno : ENOENT, std::generic_category(), "cannot read " + path.string());
  Digest digest;
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    if (in.gcount() > 0) digest.update(buffer.data(), static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) throw std::system_error(EIO, std::generic_category(), "cannot read " + path.string());
  return digest.hex();
}

}  // namespace fact::util
