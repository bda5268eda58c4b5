//! The tokens of a letter's links: the ones an earlier, interrupted run
//! stored ([`StoredTokens`], reused), the ones every letter of the mailing
//! shares ([`ImageTokens`]), and a letter's own, minted as its links are
//! met ([`LetterTokens`]) with the rows to store for them.

use super::mailing_context::MailingContext;
use super::reject::Reject;
use crate::locks::LockEvenPoisoned;
use crate::store::links::{LinkKind, NewLink};
use crate::token::Token;
use chrono::{DateTime, Utc};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Mutex;

/// Tokens a letter already has from an earlier, interrupted run.
#[derive(Debug, Default, Clone)]
pub(crate) struct StoredTokens {
    /// (kind, position) -> (token, url)
    pub by_position: HashMap<(LinkKind, u32), (Token, String)>,
}

/// Image tokens are shared by every letter of a mailing: one per distinct URL.
/// So are the click and pixel tokens of anonymous letters: one per (kind,
/// position, URL), letter 0 and no address, like an image's.
#[derive(Default)]
pub(crate) struct ImageTokens {
    inner: Mutex<ImageState>,
}

/// A shared row's key: kind, position (0 for images and the pixel), URL.
pub(crate) type SharedKey = (LinkKind, u32, String);

#[derive(Default)]
struct ImageState {
    known: HashMap<SharedKey, Token>,
    new_rows: Vec<NewLink>,
}

impl ImageTokens {
    pub(crate) fn with_known(known: HashMap<SharedKey, Token>) -> Self {
        ImageTokens {
            inner: Mutex::new(ImageState {
                known,
                new_rows: Vec::new(),
            }),
        }
    }

    pub(super) fn token_for(
        &self,
        ctx: &MailingContext,
        url: &str,
        made_at: DateTime<Utc>,
    ) -> Token {
        self.shared_token(ctx, LinkKind::Image, 0, url, None, made_at)
    }

    /// The one token every letter of the mailing shares for this link
    /// (images; links and the pixel of anonymous letters).
    pub(super) fn shared_token(
        &self,
        ctx: &MailingContext,
        kind: LinkKind,
        position: u32,
        url: &str,
        meta: Option<Value>,
        made_at: DateTime<Utc>,
    ) -> Token {
        // A poisoned lock only means another letter's build panicked; the map
        // itself is still consistent (inserts are single operations).
        let mut state = self.inner.lock_even_poisoned();
        let key = (kind, position, url.to_owned());
        if let Some(token) = state.known.get(&key) {
            return *token;
        }
        let token = ctx.issue(kind, position, url, 0, made_at);
        state.known.insert(key, token);
        state.new_rows.push(NewLink {
            token,
            kind,
            mailing_id: ctx.mailing.mailing_id.as_str().to_owned(),
            letter_id: 0,
            email: String::new(),
            position,
            url: url.to_owned(),
            meta,
        });
        token
    }

    /// Rows for image URLs first seen since the last call.
    pub(crate) fn take_new_rows(&self) -> Vec<NewLink> {
        let mut state = self.inner.lock_even_poisoned();
        std::mem::take(&mut state.new_rows)
    }
}

/// Hands out the letter's tokens: the stored one for a position when the
/// letter was built before, a fresh one otherwise, and checks that a resumed
/// letter still links where it did.
pub(super) struct LetterTokens<'a> {
    pub(super) ctx: &'a MailingContext,
    pub(super) stored: Option<&'a StoredTokens>,
    pub(super) made_at: DateTime<Utc>,
    pub(super) rows: Vec<NewLink>,
    pub(super) mismatch: Option<Reject>,
    pub(super) letter_id: u64,
    pub(super) mailing_id: &'a str,
    pub(super) email: &'a str,
}

impl LetterTokens<'_> {
    pub(super) fn token(
        &mut self,
        kind: LinkKind,
        position: u32,
        url: &str,
        meta: Option<Value>,
    ) -> Token {
        if let Some((token, stored_url)) = self
            .stored
            .and_then(|s| s.by_position.get(&(kind, position)))
        {
            if stored_url != url && self.mismatch.is_none() {
                self.mismatch = Some(Reject::ChangedContent {
                    kind,
                    position,
                    stored: stored_url.clone(),
                    now: url.to_owned(),
                });
            }
            return *token;
        }
        let token = self
            .ctx
            .issue(kind, position, url, self.letter_id, self.made_at);
        self.rows.push(NewLink {
            token,
            kind,
            mailing_id: self.mailing_id.to_owned(),
            letter_id: self.letter_id,
            email: self.email.to_owned(),
            position,
            url: url.to_owned(),
            meta,
        });
        token
    }
}
