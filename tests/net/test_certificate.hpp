// A self-signed TLS certificate for the network tests, made at run time with the OpenSSL C API
// (no key is checked in, no openssl command is run): an EC P-256 key, a certificate for
// 127.0.0.1 and localhost valid from an hour ago for a day, and a second key that does not match
// it, written as PEM files to a fresh temporary directory (removed at exit).
#pragma once
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>

namespace rz::net::testing {

struct TestCertificate {
  std::string dir;             // the temporary directory that holds the files
  std::string cert_file;       // the certificate (PEM)
  std::string key_file;        // its private key (PEM, PKCS#8, unencrypted)
  std::string other_key_file;  // a key of another pair: does not match cert_file
  std::string cert_pem;        // cert_file's text: what a client trusts
  TestCertificate() = default;
  TestCertificate(const TestCertificate&) = delete;
  TestCertificate& operator=(const TestCertificate&) = delete;
  ~TestCertificate() {
    std::error_code ignored;
    if (!dir.empty()) std::filesystem::remove_all(dir, ignored);
  }
};

namespace detail {

struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};

inline std::unique_ptr<EVP_PKEY, PkeyFree> ec_key() {
  std::unique_ptr<EVP_PKEY, PkeyFree> k(EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256"));
  if (!k) throw std::runtime_error("EC key generation failed");
  return k;
}

inline void write_key(EVP_PKEY* key, const std::string& path) {
  std::unique_ptr<BIO, BioFree> out(BIO_new_file(path.c_str(), "w"));
  if (!out || PEM_write_bio_PrivateKey(out.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1)
    throw std::runtime_error("cannot write " + path);
}

inline std::string make(const std::string& dir, TestCertificate& c) {
  auto key = ec_key();
  std::unique_ptr<X509, X509Free> x(X509_new());
  X509_set_version(x.get(), 2);  // v3: extensions
  ASN1_INTEGER_set(X509_get_serialNumber(x.get()), static_cast<long>(getpid()));
  X509_gmtime_adj(X509_getm_notBefore(x.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(x.get()), 24 * 3600);
  X509_set_pubkey(x.get(), key.get());
  X509_NAME* name = X509_get_subject_name(x.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("rz test"), -1, -1, 0);
  X509_set_issuer_name(x.get(), name);  // self-signed
  X509V3_CTX v3;
  X509V3_set_ctx_nodb(&v3);
  X509V3_set_ctx(&v3, x.get(), x.get(), nullptr, nullptr, 0);
  for (const auto& [nid, value] :
       {std::pair<int, const char*>{NID_subject_alt_name, "IP:127.0.0.1,DNS:localhost"},
        {NID_basic_constraints, "critical,CA:FALSE"},
        {NID_ext_key_usage, "serverAuth"}}) {
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &v3, nid, value);
    if (!ext) throw std::runtime_error("certificate extension failed");
    X509_add_ext(x.get(), ext, -1);
    X509_EXTENSION_free(ext);
  }
  if (X509_sign(x.get(), key.get(), EVP_sha256()) <= 0)
    throw std::runtime_error("certificate signing failed");

  c.cert_file = dir + "/cert.pem";
  c.key_file = dir + "/key.pem";
  c.other_key_file = dir + "/other_key.pem";
  std::unique_ptr<BIO, BioFree> mem(BIO_new(BIO_s_mem()));
  PEM_write_bio_X509(mem.get(), x.get());
  char* data = nullptr;
  const long n = BIO_get_mem_data(mem.get(), &data);
  std::string pem(data, static_cast<std::size_t>(n));
  {
    std::unique_ptr<BIO, BioFree> out(BIO_new_file(c.cert_file.c_str(), "w"));
    if (!out || BIO_write(out.get(), pem.data(), static_cast<int>(pem.size())) != int(pem.size()))
      throw std::runtime_error("cannot write " + c.cert_file);
  }
  write_key(key.get(), c.key_file);
  write_key(ec_key().get(), c.other_key_file);
  return pem;
}

}  // namespace detail

// The process's test certificate, made on first use.
inline const TestCertificate& test_certificate() {
  static TestCertificate cert;
  static const bool made = [] {
    cert.dir =
        (std::filesystem::temp_directory_path() / ("rz_tls_" + std::to_string(getpid()))).string();
    std::filesystem::create_directories(cert.dir);
    cert.cert_pem = detail::make(cert.dir, cert);
    return true;
  }();
  (void)made;
  return cert;
}

}  // namespace rz::net::testing
