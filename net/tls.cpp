// The TLS server context (see tls.hpp): the PEM files read and checked with the OpenSSL C API
// (so each failure can name its file and cause), then handed to an asio::ssl::context.
#include "net/tls.hpp"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include <boost/asio/ssl/context.hpp>

#include "formats/common.hpp"

namespace rz::net {

namespace ssl = boost::asio::ssl;

namespace {

// TLS 1.2 suites (Mozilla's "intermediate" set without DHE): forward secrecy and AEAD only. TLS
// 1.3 has its own (all of them are).
constexpr const char* kTls12Ciphers =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;

// The reason of OpenSSL's latest error ("no start line"), and the error queue emptied.
std::string openssl_reason() {
  const unsigned long e = ERR_peek_last_error();
  std::string why = "unknown error";
  if (const char* r = e ? ERR_reason_error_string(e) : nullptr) {
    why = r;
  } else if (e) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    why = buf;
  }
  ERR_clear_error();
  return why;
}

// The whole file, or rz::Error "PATH: cannot read the TLS WHAT (FLAG): CAUSE".
std::string read_file(const std::string& path, const char* what, const char* flag) {
  auto fail = [&](int err) {
    return Error(path + ": cannot read the TLS " + what + " (" + flag + "): " + std::strerror(err));
  };
  errno = 0;
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw fail(errno);
  std::string text;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  const int err = std::ferror(f) ? (errno ? errno : EIO) : 0;
  std::fclose(f);
  if (err) throw fail(err);  // a directory, say
  return text;
}

BioPtr memory_bio(const std::string& text) {
  return BioPtr(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

// Every certificate of a PEM file, the server's own first.
std::vector<X509Ptr> parse_certificates(const std::string& pem, const std::string& path) {
  std::vector<X509Ptr> certs;
  BioPtr bio = memory_bio(pem);
  while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) certs.emplace_back(x);
  const std::string why = openssl_reason();  // the end of the file, or a broken certificate
  if (certs.empty())
    throw Error(
        path +
        ": holds no PEM certificate (--tls-cert; expected -----BEGIN CERTIFICATE-----): " + why);
  return certs;
}

PkeyPtr parse_private_key(const std::string& pem, const std::string& path) {
  if (pem.find("-----BEGIN ENCRYPTED PRIVATE KEY-----") != std::string::npos ||
      pem.find("Proc-Type: 4,ENCRYPTED") != std::string::npos)
    throw Error(path +
                ": the private key is encrypted (--tls-key); rz reads unencrypted keys only "
                "(openssl pkey -in KEY -out PLAIN_KEY writes one)");
  BioPtr bio = memory_bio(pem);
  // No pass phrase callback may prompt on the terminal: one that refuses.
  pem_password_cb* no_pass = [](char*, int, int, void*) { return -1; };
  PkeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, no_pass, nullptr));
  if (!key)
    throw Error(path +
                ": holds no PEM private key (--tls-key; expected -----BEGIN PRIVATE KEY-----): " +
                openssl_reason());
  return key;
}

}  // namespace

std::shared_ptr<ssl::context> load_tls_context(const std::string& cert_file,
                                               const std::string& key_file) {
  if (cert_file.empty() || key_file.empty())
    throw Error(
        "TLS needs both a certificate and its private key (--tls-cert FILE --tls-key FILE)");
  const std::string cert_pem = read_file(cert_file, "certificate", "--tls-cert");
  const std::string key_pem = read_file(key_file, "private key", "--tls-key");
  std::vector<X509Ptr> certs = parse_certificates(cert_pem, cert_file);
  PkeyPtr key = parse_private_key(key_pem, key_file);
  if (X509_check_private_key(certs.front().get(), key.get()) != 1) {
    ERR_clear_error();
    throw Error(key_file + ": the private key does not match the certificate in " + cert_file +
                " (--tls-key, --tls-cert)");
  }

  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_server);
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                   ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 |
                   ssl::context::no_compression | ssl::context::single_dh_use);
  SSL_CTX* h = ctx->native_handle();
  auto check = [&](int ok, const char* what) {
    if (ok != 1) throw Error(std::string("TLS setup: ") + what + ": " + openssl_reason());
  };
  check(SSL_CTX_set_min_proto_version(h, TLS1_2_VERSION), "minimum version TLS 1.2");
  SSL_CTX_set_options(h, SSL_OP_NO_RENEGOTIATION);
  check(SSL_CTX_set_cipher_list(h, kTls12Ciphers), "TLS 1.2 ciphers");
  check(SSL_CTX_use_certificate(h, certs.front().get()),
        ("the certificate of " + cert_file).c_str());
  for (std::size_t i = 1; i < certs.size(); ++i)
    check(static_cast<int>(SSL_CTX_add1_chain_cert(h, certs[i].get())),
          ("an intermediate certificate of " + cert_file).c_str());
  check(SSL_CTX_use_PrivateKey(h, key.get()), ("the private key of " + key_file).c_str());
  check(SSL_CTX_check_private_key(h), "the key against the certificate");
  return ctx;
}

std::string describe_tls_certificate(ssl::context& ctx) {
  X509* x = SSL_CTX_get0_certificate(ctx.native_handle());
  if (!x) return "no certificate";
  BioPtr out(BIO_new(BIO_s_mem()));
  BIO_puts(out.get(), "subject ");
  X509_NAME_print_ex(out.get(), X509_get_subject_name(x), 0, XN_FLAG_RFC2253);
  BIO_puts(out.get(), ", valid until ");
  ASN1_TIME_print(out.get(), X509_get0_notAfter(x));
  if (X509_cmp_current_time(X509_get0_notAfter(x)) < 0) BIO_puts(out.get(), " (EXPIRED)");
  if (X509_cmp_current_time(X509_get0_notBefore(x)) > 0) BIO_puts(out.get(), " (not valid yet)");
  char* data = nullptr;
  const long n = BIO_get_mem_data(out.get(), &data);
  return std::string(data, static_cast<std::size_t>(n));
}

}  // namespace rz::net
