//! One certificate ordered from the ACME directory for one host, proved by
//! HTTP-01: the challenge's answer is stored (`acme_challenges`) and served
//! by every server at `/.well-known/acme-challenge/TOKEN` on the plain
//! listener (port 80 in production), where the CA asks for it.

use super::certificate::{leaf_facts, CertificateError};
use super::settings::AcmeSettings;
use crate::store::tls_certificates::{self, StoredCertificate};
use crate::store::StoreError;
use chrono::Utc;
use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, ChallengeType, Identifier, NewAccount,
    NewOrder, OrderStatus, RetryPolicy,
};
use sqlx::MySqlPool;
use std::time::Duration;

/// Why an order did not bring a certificate.
#[derive(Debug, thiserror::Error)]
pub enum OrderError {
    #[error("ACME directory {directory}: {source}")]
    Acme {
        directory: String,
        #[source]
        source: instant_acme::Error,
    },
    #[error("ACME order for {host}: {detail}")]
    Refused { host: String, detail: String },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Certificate(#[from] CertificateError),
    #[error("stored ACME account of {directory} unreadable: {source}")]
    Credentials {
        directory: String,
        #[source]
        source: serde_json::Error,
    },
}

/// How long the CA is waited for, per order: validation, then issuance.
const POLL: RetryPolicy = RetryPolicy::new()
    .initial_delay(Duration::from_millis(250))
    .backoff(1.5)
    .timeout(Duration::from_secs(90));

/// The account of the directory: the stored one, else a new one (stored
/// before it is used, so every server then shares it).
pub async fn account(pool: &MySqlPool, settings: &AcmeSettings) -> Result<Account, OrderError> {
    let directory = settings.directory_url.clone();
    let acme = |source| OrderError::Acme {
        directory: directory.clone(),
        source,
    };
    let builder = || match &settings.ca_file {
        Some(path) => Account::builder_with_root(path),
        None => Account::builder(),
    };
    if let Some(saved) = tls_certificates::account(pool, &directory).await? {
        let credentials: AccountCredentials =
            serde_json::from_str(&saved).map_err(|source| OrderError::Credentials {
                directory: directory.clone(),
                source,
            })?;
        return builder()
            .map_err(acme)?
            .from_credentials(credentials)
            .await
            .map_err(acme);
    }
    let contact: Vec<String> = settings
        .contact
        .iter()
        .map(|email| format!("mailto:{email}"))
        .collect();
    let contact: Vec<&str> = contact.iter().map(String::as_str).collect();
    let (account, credentials) = builder()
        .map_err(acme)?
        .create(
            &NewAccount {
                contact: &contact,
                terms_of_service_agreed: true,
                only_return_existing: false,
            },
            directory.clone(),
            None,
        )
        .await
        .map_err(acme)?;
    let saved = serde_json::to_string(&credentials).map_err(|source| OrderError::Credentials {
        directory: directory.clone(),
        source,
    })?;
    tls_certificates::save_account(pool, &directory, &saved).await?;
    tracing::info!(directory = %directory, "ACME account created");
    Ok(account)
}

/// Orders a certificate for `host` and returns it (not stored yet).
pub async fn order(
    pool: &MySqlPool,
    account: &Account,
    directory: &str,
    host: &str,
) -> Result<StoredCertificate, OrderError> {
    let mut tokens = Vec::new();
    let ordered = order_with_challenges(pool, account, host, &mut tokens).await;
    // The answers are no longer needed, whatever became of the order.
    for token in &tokens {
        if let Err(err) = tls_certificates::remove_challenge(pool, token).await {
            tracing::debug!(%err, "an ACME challenge's answer stays stored");
        }
    }
    ordered.map_err(|err| match err {
        Ordered::Acme(source) => OrderError::Acme {
            directory: directory.to_owned(),
            source,
        },
        Ordered::Other(err) => err,
    })
}

enum Ordered {
    Acme(instant_acme::Error),
    Other(OrderError),
}

impl From<instant_acme::Error> for Ordered {
    fn from(err: instant_acme::Error) -> Self {
        Ordered::Acme(err)
    }
}

impl From<StoreError> for Ordered {
    fn from(err: StoreError) -> Self {
        Ordered::Other(OrderError::Store(err))
    }
}

async fn order_with_challenges(
    pool: &MySqlPool,
    account: &Account,
    host: &str,
    tokens: &mut Vec<String>,
) -> Result<StoredCertificate, Ordered> {
    let refused = |detail: String| {
        Ordered::Other(OrderError::Refused {
            host: host.to_owned(),
            detail,
        })
    };
    let identifiers = [Identifier::Dns(host.to_owned())];
    let mut order = account.new_order(&NewOrder::new(&identifiers)).await?;
    let mut authorizations = order.authorizations();
    while let Some(authorization) = authorizations.next().await {
        let mut authorization = authorization?;
        match authorization.status {
            AuthorizationStatus::Pending => {}
            AuthorizationStatus::Valid => continue,
            other => return Err(refused(format!("authorization is {other:?}"))),
        }
        let mut challenge = authorization
            .challenge(ChallengeType::Http01)
            .ok_or_else(|| refused("the CA offers no http-01 challenge".to_owned()))?;
        let answer = challenge.key_authorization();
        tls_certificates::save_challenge(pool, &challenge.token, host, answer.as_str()).await?;
        tokens.push(challenge.token.clone());
        challenge.set_ready().await?;
    }
    let status = order.poll_ready(&POLL).await?;
    if status != OrderStatus::Ready {
        let detail = order.state().error.as_ref().map_or_else(
            || format!("order is {status:?}"),
            |problem| problem.to_string(),
        );
        return Err(refused(detail));
    }
    let key_pem = order.finalize().await?;
    let chain_pem = order.poll_certificate(&POLL).await?;
    let facts = leaf_facts(host, &chain_pem).map_err(|err| Ordered::Other(err.into()))?;
    Ok(StoredCertificate {
        host: host.to_owned(),
        chain_pem,
        key_pem,
        serial: facts.serial,
        not_before: facts.not_before,
        not_after: facts.not_after,
        issued: Utc::now().naive_utc(),
    })
}
