//! API keys: what they may do ([`Scope`], `scope.rs`), their text and
//! keyed hash (`secret.rs`), making and revoking them (`manage.rs`), and
//! the one check of a presented key or `LINKTRACK_API_TOKEN`
//! ([`KeyVerifier`], `verifier.rs`) that the HTTP API and the SMTP relay
//! call. The SQL is in `store/api_keys.rs`; docs/api.md is the contract.

mod manage;
mod scope;
mod secret;
mod verifier;

pub use manage::{create, CreateError, CreatedKey, KeyRequest, MAX_EXPIRES_DAYS};
pub use scope::{Scope, Scopes, UnknownScope};
pub use secret::{generate, prefix_of, KeySecret, NewKeyText, KEY_MARK};
pub use verifier::{Caller, KeyVerifier, CACHE_TTL};
