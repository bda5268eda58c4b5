//! The seal keys a server opens tokens with: the current key first, then
//! the previous ones that opened tokens made before a rotation.

use super::seal::{Opened, TokenSeal};
use super::uuid_v7::Token;
use crate::kind::TokenKind;

/// The seal keys a server opens tokens with (docs/token.md, "Rotating the
/// secret"): the current one (`LINKTRACK_SECRET`), which the builder
/// seals new tokens with, then the previous ones
/// (`LINKTRACK_PREVIOUS_SECRETS`), which opened tokens made before a
/// rotation. Opening tries the current key first and the others only when
/// it does not give a kind the route serves, so a token of the current key
/// costs one open, as before rotation.
#[derive(Clone, Debug)]
pub struct SealRing {
    keys: Vec<TokenSeal>,
}

impl SealRing {
    /// A ring of `current` then `previous`, in that order (a key given
    /// twice is kept once).
    pub fn new(current: TokenSeal, previous: Vec<TokenSeal>) -> SealRing {
        let mut keys = vec![current];
        for seal in previous {
            let fingerprint = seal.fingerprint();
            if keys.iter().all(|k| k.fingerprint() != fingerprint) {
                keys.push(seal);
            }
        }
        SealRing { keys }
    }

    /// The key new tokens are sealed with.
    pub fn current(&self) -> &TokenSeal {
        &self.keys[0]
    }

    /// Every key, the current one first.
    pub fn keys(&self) -> &[TokenSeal] {
        &self.keys
    }

    /// The first opening of `token` whose kind `fits`, trying the current
    /// key first; `None` when no key of the ring gives a fitting kind (a
    /// forged token, or one sealed by a key not in the ring). A legacy
    /// token opens as [`Opened::Legacy`] under every key.
    pub fn open_fitting(&self, token: &Token, fits: impl Fn(TokenKind) -> bool) -> Option<Opened> {
        self.openings(token, fits).next()
    }

    /// Every opening of `token` whose kind `fits`, the current key's first:
    /// a late link's template is looked for under each in turn (a wrong
    /// key's opening may fit by chance, and then names no template).
    pub fn openings<'a>(
        &'a self,
        token: &'a Token,
        fits: impl Fn(TokenKind) -> bool + 'a,
    ) -> impl Iterator<Item = Opened> + 'a {
        self.keys
            .iter()
            .map(move |seal| seal.open(token))
            .filter(move |opened| match opened {
                Opened::Legacy => true,
                Opened::Sealed(plain) => plain.token_kind().is_some_and(&fits),
            })
    }
}
