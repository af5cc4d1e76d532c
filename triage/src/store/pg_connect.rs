//! Connecting to the PostgreSQL store: the URL's `sslmode` as libpq reads it, over rustls, and a
//! password that never appears in a message.
//!
//! `sslmode` (libpq's words; default `prefer`):
//! - `disable`: no TLS;
//! - `prefer`: TLS when the server offers it, else plain; the certificate is not checked;
//! - `require`: TLS or no connection; the certificate is not checked, unless `sslrootcert` is given
//!   (then as `verify-ca`, as libpq does);
//! - `verify-ca`: TLS, with a certificate signed by a root of `sslrootcert`;
//! - `verify-full`: as `verify-ca`, and the certificate names the host connected to.
//!
//! `sslrootcert=FILE` (PEM), `sslrootcert=system` (the system's roots: `$SSL_CERT_FILE`, else
//! `/etc/ssl/certs/ca-certificates.crt`), else `~/.postgresql/root.crt` when it exists.

use postgres::config::SslMode;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, Error, RootCertStore, SignatureScheme};
use std::path::PathBuf;
use std::sync::Arc;

/// A connection string's secrets, to be kept out of every message.
pub struct Redactor {
    /// The password as written in the URL and as decoded, longest first.
    secrets: Vec<String>,
}

impl Redactor {
    /// The passwords `url` may carry: in its user information (up to the first `@`, as the postgres
    /// crate reads it, and up to the last one before the host, as RFC 3986 does) and in a `password`
    /// parameter; each as written and percent-decoded.
    pub fn new(url: &str) -> Redactor {
        let mut secrets = Vec::new();
        let mut add = |raw: &str| {
            secrets.push(raw.to_string());
            secrets.push(percent_decode(raw));
        };
        let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
        for at in [rest.find('@'), rest.rfind('@')].into_iter().flatten() {
            if let Some((_, password)) = rest[..at].split_once(':') {
                add(password);
            }
        }
        if let Some((_, query)) = rest.split_once('?') {
            for pair in query.split('&') {
                if let Some(("password", value)) = pair.split_once('=') {
                    add(value);
                }
            }
        }
        secrets.retain(|s| !s.is_empty());
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        Redactor { secrets }
    }

    /// `text` with every occurrence of a secret replaced by `***`.
    pub fn scrub(&self, text: &str) -> String {
        let mut out = text.to_string();
        for secret in &self.secrets {
            out = out.replace(secret.as_str(), "***");
        }
        out
    }
}

/// What the URL asks of TLS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verify {
    /// Any certificate (`prefer`, `require`).
    Nothing,
    /// Signed by a trusted root (`verify-ca`).
    Chain,
    /// Signed by a trusted root and naming the host (`verify-full`).
    Full,
}

/// A connection for `url`: the postgres crate's config (with the TLS settings taken out of the
/// URL, which that crate does not know all of) and the TLS connector. Errors are scrubbed.
pub fn connect(url: &str, redactor: &Redactor) -> Result<postgres::Client, String> {
    let scrub = |e: &dyn std::fmt::Display| redactor.scrub(&e.to_string());
    let (base, params) = match url.split_once('?') {
        Some((base, query)) => (base, query.split('&').filter(|p| !p.is_empty()).collect::<Vec<_>>()),
        None => (url, Vec::new()),
    };
    let mut sslmode = None;
    let mut rootcert = None;
    let mut kept = Vec::new();
    for param in params {
        let (key, value) = param.split_once('=').unwrap_or((param, ""));
        let value = percent_decode(value);
        match key {
            "sslmode" => sslmode = Some(value),
            "sslrootcert" => rootcert = Some(value),
            _ => kept.push(param),
        }
    }
    let url = if kept.is_empty() { base.to_string() } else { format!("{base}?{}", kept.join("&")) };
    let mut config: postgres::Config = url.parse().map_err(|e: postgres::Error| scrub(&e))?;
    let (mode, verify) = match sslmode.as_deref().unwrap_or("prefer") {
        "disable" => (SslMode::Disable, Verify::Nothing),
        "allow" | "prefer" => (SslMode::Prefer, Verify::Nothing),
        "require" if rootcert.is_some() => (SslMode::Require, Verify::Chain),
        "require" => (SslMode::Require, Verify::Nothing),
        "verify-ca" => (SslMode::Require, Verify::Chain),
        "verify-full" => (SslMode::Require, Verify::Full),
        other => {
            return Err(format!(
                "sslmode={} is not one of disable, allow, prefer, require, verify-ca, verify-full",
                scrub(&other)
            ))
        }
    };
    config.ssl_mode(mode);
    let tls = tls_config(verify, rootcert.as_deref())?;
    config.connect(tokio_postgres_rustls::MakeRustlsConnect::new(tls)).map_err(|e| {
        let message = match e.as_db_error() {
            Some(db) => db.message().to_string(),
            None => {
                // `error performing TLS handshake: invalid peer certificate: UnknownIssuer`.
                let mut text = e.to_string();
                let mut source = std::error::Error::source(&e);
                while let Some(cause) = source {
                    text = format!("{text}: {cause}");
                    source = cause.source();
                }
                text
            }
        };
        scrub(&message)
    })
}

/// `%XX` sequences decoded (as the postgres crate decodes URLs); invalid UTF-8 replaced.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The client's TLS configuration for `verify`, with the roots `rootcert` names.
fn tls_config(verify: Verify, rootcert: Option<&str>) -> Result<rustls::ClientConfig, String> {
    let provider = provider();
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let verifier: Arc<dyn ServerCertVerifier> = match verify {
        Verify::Nothing => Arc::new(AnyCertificate(provider)),
        Verify::Chain | Verify::Full => {
            let roots = Arc::new(roots(rootcert)?);
            let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider)
                .build()
                .map_err(|e| format!("sslrootcert: {e}"))?;
            if verify == Verify::Full {
                webpki
            } else {
                Arc::new(AnyName(webpki))
            }
        }
    };
    Ok(builder.dangerous().with_custom_certificate_verifier(verifier).with_no_client_auth())
}

/// The trusted roots: `sslrootcert`, else libpq's default `~/.postgresql/root.crt`.
fn roots(rootcert: Option<&str>) -> Result<RootCertStore, String> {
    let file = match rootcert {
        Some("system") => std::env::var_os("SSL_CERT_FILE")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/etc/ssl/certs/ca-certificates.crt")),
        Some(file) => PathBuf::from(file),
        None => {
            let default = std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".postgresql/root.crt"));
            match default.filter(|f| f.is_file()) {
                Some(file) => file,
                None => {
                    return Err("sslmode=verify-ca and verify-full need the server's root certificate: \
                                sslrootcert=FILE (PEM), sslrootcert=system, or ~/.postgresql/root.crt"
                        .to_string())
                }
            }
        }
    };
    let mut store = RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(&file).map_err(|e| format!("sslrootcert {}: {e}", file.display()))?;
    for cert in certs {
        let cert = cert.map_err(|e| format!("sslrootcert {}: {e}", file.display()))?;
        store.add(cert).map_err(|e| format!("sslrootcert {}: {e}", file.display()))?;
    }
    if store.is_empty() {
        return Err(format!("sslrootcert {}: no certificate in it", file.display()));
    }
    Ok(store)
}

/// `prefer` and `require`: the channel is encrypted and the handshake's signatures checked, but any
/// certificate is taken (libpq's behaviour; `verify-ca`/`verify-full` check it).
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the chain is checked, the name is not.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        match self.0.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            Err(Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::Redactor;

    #[test]
    fn passwords_are_scrubbed_wherever_the_url_puts_them() {
        let r = Redactor::new("postgres://fleet:s3cr%40t@db:5432/races?sslmode=require");
        assert_eq!(r.scrub("postgres://fleet:s3cr%40t@db:5432/races"), "postgres://fleet:***@db:5432/races");
        assert_eq!(r.scrub("bad password s3cr@t"), "bad password ***");
        // An '@' left unencoded in the password: everything up to the last '@' is user information.
        let r = Redactor::new("postgres://fleet:p@ss@db/races");
        assert!(!r.scrub("postgres://fleet:p@ss@db/races").contains("p@ss"));
        let r = Redactor::new("postgresql://db/races?user=fleet&password=hunter2&sslmode=require");
        assert_eq!(r.scrub("…password=hunter2&…"), "…password=***&…");
    }
}
