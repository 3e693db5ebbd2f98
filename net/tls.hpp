// TLS for the server's port (`rz serve --tls-cert FILE --tls-key FILE`, docs/security.md): the
// OpenSSL server context made from a PEM certificate (chain) and its PEM private key. The
// sessions take it through ServerState::tls (net/server_state.hpp); net/streams.hpp names the
// stream they run on then. Only a forward declaration of Boost here: net/tls.cpp pays for the
// Asio SSL headers.
#pragma once
#include <memory>
#include <string>

namespace boost::asio::ssl {
class context;
}  // namespace boost::asio::ssl

namespace rz::net {

// A server context: TLS 1.2 and 1.3 only (1.2 with forward-secret AEAD ciphers), no
// renegotiation, compression off. `cert_file` holds the certificate first, then any
// intermediates; `key_file` its private key, unencrypted. Throws rz::Error naming the file and the
// cause when a file is missing or unreadable, holds no PEM certificate or key (an encrypted key
// included: nothing may prompt for a pass phrase), or the key does not belong to the certificate.
std::shared_ptr<boost::asio::ssl::context> load_tls_context(const std::string& cert_file,
                                                            const std::string& key_file);

// One line on a context's certificate for the log: "subject CN=localhost, valid until Jan  1
// 00:00:00 2030 GMT".
std::string describe_tls_certificate(boost::asio::ssl::context& ctx);

}  // namespace rz::net
