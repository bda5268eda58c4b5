//! [`Composer`]: letters composed as `build` composes them, on the CPU
//! alone: no database, no recipients file, no delivery (`bench_build`).

use super::compose::{build_letter, letter_mode};
use super::error::BuildError;
use super::letter_tokens::ImageTokens;
use super::mailing::Mailing;
use super::mailing_context::MailingContext;
use super::options::DEFAULT_MAX_LETTER_BYTES;
use super::output;
use super::recipient_fields::Recipient;
use super::track_mode::TrackMode;
use std::path::Path;

/// Why [`Composer::letter_line`] made no line: the recipient's rejection,
/// said as the build's `rejects.jsonl` says it.
#[derive(Debug, thiserror::Error)]
pub enum LetterLineError {
    #[error(transparent)]
    Address(#[from] crate::address::AddressError),
    #[error(transparent)]
    Letter(#[from] super::reject::Reject),
    #[error("the letter's line is not UTF-8: {0}")]
    NotUtf8(#[from] std::string::FromUtf8Error),
}

/// Letters composed on the CPU alone: no database, no recipients file, no
/// delivery. What the builder's CPU side can do (`bench_build`'s part 0,
/// both paths in one run); tokens are sealed with a throwaway key.
pub struct Composer {
    ctx: MailingContext,
    images: ImageTokens,
}

impl Composer {
    /// The mailing file as `build` reads it; `letter_by_letter` turns the
    /// mailing's plan off.
    pub fn load(
        mailing: &Path,
        base_url: &str,
        letter_by_letter: bool,
    ) -> Result<Composer, BuildError> {
        let loaded = Mailing::load(mailing).map_err(BuildError::Mailing)?;
        let seal = crate::token::TokenSeal::derive(None, &rand::random::<[u8; 16]>(), 0);
        let ctx = MailingContext::prepare(loaded, base_url, DEFAULT_MAX_LETTER_BYTES, seal)
            .map_err(|source| BuildError::Template {
                path: mailing.to_owned(),
                source,
            })?;
        let ctx = if letter_by_letter {
            ctx.without_plans()
        } else {
            ctx
        };
        Ok(Composer {
            ctx,
            images: ImageTokens::default(),
        })
    }

    /// Whether the mailing's tracked letters are filled in from its plan.
    pub fn is_planned(&self) -> bool {
        self.ctx.is_planned(TrackMode::All)
    }

    /// Why its tracked letters are not planned (`None`: they are).
    pub fn plan_reason(&self) -> Option<String> {
        self.ctx.plan_reason(TrackMode::All)
    }

    /// One recipient's letter (`fields` as a recipients file's line, with
    /// `email`), as the output's JSON line; `Err` is the rejection.
    pub fn letter_line(
        &self,
        fields: serde_json::Map<String, serde_json::Value>,
        letter_id: u64,
    ) -> Result<String, LetterLineError> {
        let raw = fields
            .get("email")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default();
        let email = crate::address::Email::parse(raw)?;
        let recipient = Recipient {
            line: letter_id,
            email,
            fields,
        };
        let mode = letter_mode(&self.ctx.mailing, &recipient, false);
        let built = build_letter(
            &self.ctx,
            &recipient,
            letter_id,
            None,
            &self.images,
            chrono::Utc::now(),
            mode,
        )?;
        let mut line = Vec::new();
        output::letter_line(&built.letter, &mut line);
        Ok(String::from_utf8(line)?)
    }
}
