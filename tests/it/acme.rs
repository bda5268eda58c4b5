//! Issue 41: automatic TLS for the tracking domains. A real certificate is
//! ordered from pebble (Debian's ACME test server, scripts/prepare.d/
//! 75-pebble.sh) on loopback, which resolves the test domain through
//! pebble-challtestsrv and proves it by HTTP-01 on the server's plain
//! listener; the server then serves the domain over TLS, and renews the
//! certificate when it is due.

use crate::common::wait::{eventually, never_within, PATIENCE};
use crate::common::{add_link, days_ago, quick, TestDb, TestServer};
use crate::domains::{free_port, FakeDns};
use linktrack::acme::{AcmeSettings, CertificateSettings};
use linktrack::domains::DomainChecker;
use linktrack::server::{App, AppSettings, TlsSettings};
use linktrack::store::links::LinkKind;
use linktrack::store::tls_certificates::{self, StoredCertificate};
use linktrack::store::tracking_domains::{self, DomainState};
use reqwest::StatusCode;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const HOST: &str = "click.brand.example";

/// pebble on loopback: its ACME directory served over HTTPS with a
/// certificate of a test CA made here, validating HTTP-01 on `http_port`
/// and resolving names through `dns`.
struct Pebble {
    child: Child,
    directory: String,
    management: String,
    /// The test CA that signed pebble's own HTTPS certificate.
    ca_file: PathBuf,
    _dir: tempfile::TempDir,
}

impl Pebble {
    async fn start(http_port: u16, dns: SocketAddr) -> Pebble {
        let dir = tempfile::tempdir().unwrap();
        let ca_file = crate::common::test_ca::write_signed_certificate(
            dir.path(),
            "linktrack test CA",
            &["127.0.0.1", "localhost"],
        );
        let (acme_port, management_port) = (free_port(), free_port());
        let config = serde_json::json!({"pebble": {
            "listenAddress": format!("127.0.0.1:{acme_port}"),
            "managementListenAddress": format!("127.0.0.1:{management_port}"),
            "certificate": dir.path().join("cert.pem"),
            "privateKey": dir.path().join("key.pem"),
            "httpPort": http_port,
            // TLS-ALPN-01 is not used: a closed loopback port.
            "tlsPort": free_port(),
            "ocspResponderURL": "",
            "externalAccountBindingRequired": false,
        }});
        let config_path = dir.path().join("pebble.json");
        std::fs::write(&config_path, config.to_string()).unwrap();
        let child = Command::new("pebble")
            .arg("-config")
            .arg(&config_path)
            .args(["-dnsserver", &dns.to_string()])
            // Validate at once, and never refuse a nonce on purpose.
            .env("PEBBLE_VA_NOSLEEP", "1")
            .env("PEBBLE_WFE_NONCEREJECT", "0")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("pebble (scripts/prepare.d/75-pebble.sh installs Debian's pebble)");
        let pebble = Pebble {
            child,
            directory: format!("https://127.0.0.1:{acme_port}/dir"),
            management: format!("https://127.0.0.1:{management_port}"),
            ca_file,
            _dir: dir,
        };
        let https = pebble.https();
        eventually(PATIENCE, "pebble serves its directory", || {
            https.get(&pebble.directory).send()
        })
        .await;
        pebble
    }

    /// A client trusting the test CA of pebble's own listeners.
    fn https(&self) -> reqwest::Client {
        let ca = std::fs::read(&self.ca_file).unwrap();
        reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(&ca).unwrap())
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap()
    }

    /// The root pebble issues certificates under (new at every start).
    async fn issuing_root(&self) -> reqwest::Certificate {
        let pem = self
            .https()
            .get(format!("{}/roots/0", self.management))
            .send()
            .await
            .unwrap()
            .error_for_status()
            .unwrap()
            .bytes()
            .await
            .unwrap();
        reqwest::Certificate::from_pem(&pem).unwrap()
    }

    fn settings(&self, renew_before: Option<Duration>) -> CertificateSettings {
        CertificateSettings {
            acme: Some(AcmeSettings {
                directory_url: self.directory.clone(),
                ca_file: Some(self.ca_file.clone()),
                contact: vec!["ops@brand.example".to_owned()],
                renew_before,
            }),
            check_every: Duration::from_millis(500),
        }
    }
}

impl Drop for Pebble {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The server on `listener` (the port pebble validates HTTP-01 on), with a
/// TLS listener on a free loopback port. Returns it and the TLS address.
async fn start_server(
    db: &TestDb,
    listener: std::net::TcpListener,
    journal: &Path,
    certificates: CertificateSettings,
) -> (TestServer, SocketAddr) {
    listener.set_nonblocking(true).unwrap();
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    let settings = quick(AppSettings::new(
        db.pool.clone(),
        linktrack::journal::segments::JournalSettings::new(journal),
    ));
    let settings = AppSettings {
        tls: Some(TlsSettings {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            certificates,
        }),
        ..settings
    };
    let app = App::build(settings, listener).await.unwrap();
    let tls = app.tls_addr().expect("a TLS listener");
    (TestServer::running(app), tls)
}

/// The stored certificate of `HOST` once it differs from `before` (by
/// serial).
async fn certificate_after(db: &TestDb, before: Option<&str>) -> StoredCertificate {
    let what = format!("a new certificate for {HOST} (before: {before:?})");
    eventually(PATIENCE, &what, || async {
        let stored = tls_certificates::list(&db.pool).await.unwrap();
        match stored.into_iter().find(|c| c.host == HOST) {
            Some(cert) if Some(cert.serial.as_str()) != before => Ok(cert),
            seen => Err(seen.map(|c| c.serial)),
        }
    })
    .await
}

/// The answer to `url` once the TLS listener has loaded the certificate
/// (it reads the stored certificates at its next pass; until then the
/// handshake fails).
async fn served(https: &reqwest::Client, url: &str) -> reqwest::Response {
    eventually(PATIENCE, "the TLS listener serves the certificate", || {
        https.get(url).send()
    })
    .await
}

/// The value of the series `series` (name and labels) in a scrape.
fn metric(scrape: &str, series: &str) -> Option<f64> {
    scrape
        .lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
}

/// A client for `HOST` over TLS at `tls`, trusting `root` only.
fn tls_client(root: &reqwest::Certificate, tls: SocketAddr) -> reqwest::Client {
    reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(root.clone())
        .resolve(HOST, tls)
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_verified_domain_gets_a_certificate_from_pebble_is_served_over_tls_and_renewed() {
    let db = TestDb::with_days_since(days_ago(1)).await;
    let journal = tempfile::tempdir().unwrap();
    let dns = FakeDns::start().await;
    dns.address(HOST, "127.0.0.1").await;
    // pebble validates on the plain listener's port: bound first.
    let plain = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let http_port = plain.local_addr().unwrap().port();
    let pebble = Pebble::start(http_port, dns.dns).await;
    let root = pebble.issuing_root().await;

    tracking_domains::add(&db.pool, HOST, "brand.example")
        .await
        .unwrap();
    let token = add_link(&db.pool, LinkKind::Click, "https://shop.brand.example/a", 1).await;
    let (server, tls) = start_server(&db, plain, journal.path(), pebble.settings(None)).await;
    let https = tls_client(&root, tls);
    let click = format!("https://{HOST}:{}/c/{token}", tls.port());

    // Pending: no certificate is ordered, and the TLS listener has none to
    // give. The worker passes every 500 ms (`check_every` above): 2 s is
    // four passes, any of which would order one if pending domains were
    // ordered for (a slow machine makes fewer passes: a weaker check,
    // never a false failure).
    never_within(
        Duration::from_secs(2),
        "a certificate for a pending domain",
        || async {
            let stored = tls_certificates::list(&db.pool).await.unwrap();
            match stored.is_empty() {
                true => Ok(()),
                false => Err(stored.into_iter().map(|c| c.host).collect::<Vec<_>>()),
            }
        },
    )
    .await;
    let refused = https.get(&click).send().await;
    assert!(
        refused.is_err(),
        "a handshake without a certificate: {refused:?}"
    );

    // Verified (its address is this service's): ordered, stored, served.
    let check = DomainChecker::new(Some(dns.dns))
        .unwrap()
        .check(HOST, "127.0.0.1")
        .await;
    assert_eq!(check.state, DomainState::Verified, "{check:?}");
    tracking_domains::set_state(&db.pool, HOST, check.state, &check.detail)
        .await
        .unwrap();
    let first = certificate_after(&db, None).await;
    assert!(first.not_after > first.not_before);
    let redirect = served(&https, &click).await;
    assert_eq!(redirect.status(), StatusCode::FOUND);
    assert_eq!(
        redirect.headers()[reqwest::header::LOCATION],
        "https://shop.brand.example/a"
    );
    let metrics = crate::common::metrics_text(&server.admin).await;
    let expiry = metric(
        &metrics,
        &format!("linktrack_tls_certificate_expiry_timestamp_seconds{{host=\"{HOST}\"}}"),
    );
    assert_eq!(expiry, Some(first.not_after.and_utc().timestamp() as f64));
    assert!(
        metrics.contains("linktrack_acme_certificates_issued_total{reason=\"new\"} 1"),
        "{metrics}"
    );
    // Not due (pebble's certificates last years): several passes later,
    // still the same certificate. 2 s is four of the worker's 500 ms
    // passes, any of which would renew it if a certificate not due were
    // renewed (a slow machine makes fewer: weaker, never a false failure).
    never_within(
        Duration::from_secs(2),
        "a renewal before it was due",
        || async {
            let stored = tls_certificates::list(&db.pool).await.unwrap();
            match stored.as_slice() {
                [only] if only.serial == first.serial => Ok(()),
                _ => Err(stored.into_iter().map(|c| c.serial).collect::<Vec<_>>()),
            }
        },
    )
    .await;
    server.stop().await;

    // A renewal window longer than the certificate's life: due at once.
    // The restarted server reads the stored account and certificate, and
    // renews it.
    let plain = std::net::TcpListener::bind(("127.0.0.1", http_port)).unwrap();
    let forever = Some(Duration::from_secs(100 * 365 * 86_400));
    let (server, tls) = start_server(&db, plain, journal.path(), pebble.settings(forever)).await;
    let renewed = certificate_after(&db, Some(&first.serial)).await;
    assert!(renewed.issued >= first.issued);
    let https = tls_client(&root, tls);
    let click = format!("https://{HOST}:{}/c/{token}", tls.port());
    let renewed_served = served(&https, &click).await;
    assert_eq!(renewed_served.status(), StatusCode::FOUND);
    let metrics = crate::common::metrics_text(&server.admin).await;
    assert!(
        metrics.contains("linktrack_acme_certificates_issued_total{reason=\"renewal\"}"),
        "{metrics}"
    );
    let accounts: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM acme_accounts")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(accounts, 1, "the stored account is reused");
    server.stop().await;
}
