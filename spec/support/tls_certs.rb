# frozen_string_literal: true

require "tmpdir"

# Certificates the TLS specs make themselves: a CA that signs a server
# certificate for localhost, 127.0.0.1 and ::1, and a second CA that signs
# nothing the servers use (so a client that trusts only it must fail).
# EC P-256 keys: made in milliseconds, and every TLS stack takes them.
# openssl is required on first use, not by spec_helper for every spec file.
module EvixTLSCerts
  # What the specs need: made once per process (forked children share it).
  PKI = Struct.new(:ca_cert, :server_cert, :server_key, :other_ca_cert, keyword_init: true)

  module_function

  def pki
    @pki ||= begin
      require "openssl"
      ca_cert, ca_key = certificate_authority("evix test CA")
      server_cert, server_key = server_certificate(ca_cert, ca_key)
      PKI.new(ca_cert: ca_cert, server_cert: server_cert, server_key: server_key,
              other_ca_cert: certificate_authority("evix untrusted CA").first)
    end
  end

  # A server context with the server certificate.
  def server_context
    context = OpenSSL::SSL::SSLContext.new
    context.cert = pki.server_cert
    context.key = pki.server_key
    context
  end

  # A client context that trusts only +authority+ (a new SSLContext
  # otherwise: what it verifies is up to Evix::TCPClient.connect's verify:).
  def client_context(authority = pki.ca_cert)
    store = OpenSSL::X509::Store.new
    store.add_cert(authority)
    context = OpenSSL::SSL::SSLContext.new
    context.cert_store = store
    context
  end

  # Writes ca.pem, server.pem and server.key into a new directory and
  # yields its path (removed afterwards).
  def with_pem_files
    Dir.mktmpdir("evix-tls") do |dir|
      File.write(File.join(dir, "ca.pem"), pki.ca_cert.to_pem)
      File.write(File.join(dir, "server.pem"), pki.server_cert.to_pem)
      File.write(File.join(dir, "server.key"), pki.server_key.private_to_pem)
      yield dir
    end
  end

  def certificate_authority(common_name)
    key = OpenSSL::PKey::EC.generate("prime256v1")
    cert = new_certificate(common_name, key)
    extensions = OpenSSL::X509::ExtensionFactory.new(cert, cert)
    cert.add_extension(extensions.create_extension("basicConstraints", "CA:TRUE", true))
    cert.add_extension(extensions.create_extension("keyUsage", "keyCertSign,cRLSign", true))
    cert.add_extension(extensions.create_extension("subjectKeyIdentifier", "hash"))
    cert.sign(key, "SHA256")
    [cert, key]
  end

  def server_certificate(ca_cert, ca_key)
    key = OpenSSL::PKey::EC.generate("prime256v1")
    cert = new_certificate("localhost", key, issuer: ca_cert.subject)
    extensions = OpenSSL::X509::ExtensionFactory.new(ca_cert, cert)
    cert.add_extension(extensions.create_extension("basicConstraints", "CA:FALSE", true))
    cert.add_extension(extensions.create_extension("keyUsage", "digitalSignature", true))
    cert.add_extension(extensions.create_extension("extendedKeyUsage", "serverAuth"))
    cert.add_extension(extensions.create_extension("subjectAltName", "DNS:localhost,IP:127.0.0.1,IP:::1"))
    cert.add_extension(extensions.create_extension("authorityKeyIdentifier", "keyid"))
    cert.sign(ca_key, "SHA256")
    [cert, key]
  end

  def new_certificate(common_name, key, issuer: nil)
    cert = OpenSSL::X509::Certificate.new
    cert.version = 2
    cert.serial = OpenSSL::BN.rand(64)
    cert.subject = OpenSSL::X509::Name.parse("/CN=#{common_name}")
    cert.issuer = issuer || cert.subject
    cert.public_key = key
    cert.not_before = Time.now - 60
    cert.not_after = Time.now + 86_400
    cert
  end
end
