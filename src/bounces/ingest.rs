//! One message that came back, acted on: read it, find the letter it
//! names (its VERP token, else its recipient and the returned letter's
//! `Message-ID` through `deliveries`), decide per the classification
//! table and store the decision. Nothing is suppressed that the report
//! does not name: a bounce acts only on the letter's own recipient, when
//! the report names that address; a complaint also when only its
//! (unforgeable) VERP token names the letter, as providers redact the
//! recipient.

use super::classify::Class;
use super::events_out::EventsOut;
use super::read;
use super::reading::Reading;
use super::report::{Failure, Kind, Report};
use super::soft_policy::SoftPolicy;
use crate::address::normalize;
use crate::delivery::message::{letter_token_of_message_id, mailing_id_part};
use crate::kind::TokenKind;
use crate::payload::{self, BounceEvent};
use crate::store::bounces::{self as rows, Decision, LetterRow, TokenLetter};
use crate::store::outbox::{self, NewOutboxRow};
use crate::store::suppressions::{self, SuppressionReason};
use crate::store::StoreError;
use crate::token::{Opened, SealRing, Token};
use sha2::{Digest, Sha256};
use sqlx::{MySqlConnection, MySqlPool};
use std::sync::Arc;

/// The default of `--max-bytes`: a bounce or complaint with the letter
/// attached is far below it (a newsletter is tens of kilobytes).
pub const DEFAULT_MAX_BYTES: usize = 10 << 20;

/// What one message came to: its line, and whether it needs an
/// operator's look (the command's exit status).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub line: String,
    pub needs_look: bool,
    /// The kinds (`hard`, `soft`, `policy`, `complaint`) of the decisions
    /// this message stored now: none for a second delivery (what the
    /// server's counters count).
    pub decided: Vec<&'static str>,
}

impl Outcome {
    fn done(line: String) -> Outcome {
        Outcome {
            line,
            needs_look: false,
            decided: Vec::new(),
        }
    }

    fn look(line: String) -> Outcome {
        Outcome {
            line,
            needs_look: true,
            decided: Vec::new(),
        }
    }

    /// The line followed by what the message was read as (a message not
    /// acted on still says what linktrack made of it).
    fn read_as(mut self, report: &Report) -> Outcome {
        self.line = format!("{}; read as {}", self.line, Reading::of(report));
        self
    }

    fn decided(mut self, kind: &'static str) -> Outcome {
        self.decided.push(kind);
        self
    }
}

/// The intake: the database, the seal keys that open VERP tokens, the
/// soft bounce limit, the largest message read and the endpoints that
/// get each decision's event (`Arc::new(())`: none).
pub struct Ingest {
    pub pool: MySqlPool,
    pub ring: SealRing,
    pub soft: SoftPolicy,
    pub max_bytes: usize,
    pub events_out: Arc<dyn EventsOut>,
}

/// How the letter was found.
enum Found {
    /// Through a VERP token: only our key makes one, so the letter is
    /// the one the message was about.
    Token(LetterRow),
    /// Through the returned letter's Message-ID, which carries the
    /// letter's sealed token, of a letter handed over: acted on only when
    /// the report names the letter's recipient too.
    MessageId(LetterRow),
    /// A token no key of ours made (forged, or another installation's).
    Forged,
    /// Our letter, but its rows are gone.
    RowsGone { mailing_id: String, letter_id: u64 },
    /// Neither a token nor a Message-ID of ours.
    Unnamed,
}

impl Ingest {
    /// Act on one message (`raw`, `size` its whole length: a message
    /// over the limit is passed truncated and only named).
    pub async fn message(&self, raw: &[u8], size: usize) -> Result<Outcome, StoreError> {
        if size > self.max_bytes {
            return Ok(Outcome::look(format!(
                "too big: {size} bytes, over --max-bytes {}; not read, nothing done",
                self.max_bytes
            )));
        }
        let report = match read::read(raw) {
            Ok(report) => report,
            Err(err) => return Ok(Outcome::look(format!("unreadable: {err}; nothing done"))),
        };
        let source_key = source_key(&report, raw);
        self.report(&report, &source_key).await
    }

    /// Act on a report already read (a returned message's, or a
    /// provider event's: `bounces::providers`); `source_key` its identity
    /// (a second report with the same key changes nothing).
    pub async fn report(
        &self,
        report: &Report,
        source_key: &[u8; 32],
    ) -> Result<Outcome, StoreError> {
        match &report.kind {
            Kind::AutoReply => Ok(Outcome::done(
                "auto-reply (RFC 3834, vacation): not a bounce, nothing done".into(),
            )),
            Kind::NoFailure => Ok(Outcome::done(
                "delivery report without a failure (delayed, relayed or delivered): nothing done"
                    .into(),
            )),
            Kind::NotABounce { why } => {
                Ok(Outcome::look(format!("not a bounce: {why}; nothing done")))
            }
            Kind::Bounce { format, failures } => {
                let found = self.letter(report).await?;
                let Some((letter, _)) = self.usable(found) else {
                    return self.unmatched(report).await;
                };
                let mut lines = Vec::new();
                let mut needs_look = false;
                let mut decided = Vec::new();
                for failure in failures {
                    let outcome = self.bounce(report, source_key, &letter, failure).await?;
                    needs_look |= outcome.needs_look;
                    decided.extend(outcome.decided);
                    lines.push(outcome.line);
                }
                let line = format!("{format}: {}", lines.join("; "));
                Ok(Outcome {
                    line,
                    needs_look,
                    decided,
                })
            }
            Kind::Complaint {
                feedback_type,
                recipient,
            } => {
                let found = self.letter(report).await?;
                let Some((letter, by_token)) = self.usable(found) else {
                    return self.unmatched(report).await;
                };
                self.complaint(
                    report,
                    source_key,
                    &letter,
                    feedback_type,
                    recipient.as_deref(),
                    by_token,
                )
                .await
            }
        }
    }

    fn usable(&self, found: Found) -> Option<(LetterRow, bool)> {
        match found {
            Found::Token(letter) => Some((letter, true)),
            Found::MessageId(letter) => Some((letter, false)),
            _ => None,
        }
    }

    /// The line of a bounce or complaint whose letter was not found.
    async fn unmatched(&self, report: &Report) -> Result<Outcome, StoreError> {
        let what = match &report.kind {
            Kind::Complaint { .. } => "complaint",
            _ => "bounce",
        };
        let outcome = match self.letter(report).await? {
            Found::Forged => Outcome::look(format!(
                "{what} to a forged or foreign bounce address (no key of ours made its token): \
                 nothing done"
            )),
            Found::RowsGone {
                mailing_id,
                letter_id,
            } => Outcome::look(format!(
                "{what} for letter {letter_id} of {mailing_id}, whose rows are gone (rotated \
                 away or erased): nothing done"
            )),
            _ => Outcome::look(format!(
                "{what} that names no letter of ours (no bounce address, no Message-ID of a \
                 delivered letter): nothing done"
            )),
        };
        Ok(outcome.read_as(report))
    }

    /// The letter the report names: its VERP tokens first, then the
    /// sealed token of the returned letter's Message-ID. A letter id
    /// alone (the Message-IDs of older builds) proves nothing: whoever
    /// knows an address could guess ids around their own letter.
    async fn letter(&self, report: &Report) -> Result<Found, StoreError> {
        let found = self.letter_of_tokens(&report.verp).await?;
        if !matches!(found, Found::Unnamed) {
            return Ok(found);
        }
        let Some((token, part)) = report
            .original_message_id
            .as_deref()
            .and_then(letter_token_of_message_id)
        else {
            return Ok(Found::Unnamed);
        };
        let letter = match self.letter_of_tokens(&[token]).await? {
            Found::Token(letter) => letter,
            other => return Ok(other),
        };
        if mailing_id_part(&letter.mailing_id) != part {
            return Ok(Found::Forged);
        }
        // Handed over: a letter never sent cannot come back.
        Ok(
            match rows::delivered_letter(&self.pool, letter.letter_id, part, mailing_id_part)
                .await?
            {
                Some(letter) => Found::MessageId(letter),
                None => Found::Unnamed,
            },
        )
    }

    /// The letter sealed `tokens` (a report's VERP tokens, or the one of
    /// its returned Message-ID) name: `Forged` when no key of ours made
    /// any of them, `Unnamed` when there are none.
    async fn letter_of_tokens(&self, tokens: &[Token]) -> Result<Found, StoreError> {
        let mut gone = None;
        for token in tokens {
            for opened in self.ring.openings(token, |kind| kind == TokenKind::Bounce) {
                let Opened::Sealed(plain) = opened else {
                    continue; // made before tokens were sealed: no bounce token
                };
                match rows::letter_of_token(
                    &self.pool,
                    plain.template,
                    plain.bounce_letter_id(),
                    token.date(),
                )
                .await?
                {
                    TokenLetter::Found(letter) => return Ok(Found::Token(letter)),
                    TokenLetter::RowsGone {
                        mailing_id,
                        letter_id,
                    } => gone = Some((mailing_id, letter_id)),
                    TokenLetter::NoSuchMailing => {}
                }
            }
        }
        if let Some((mailing_id, letter_id)) = gone {
            return Ok(Found::RowsGone {
                mailing_id,
                letter_id,
            });
        }
        Ok(if tokens.is_empty() {
            Found::Unnamed
        } else {
            Found::Forged
        })
    }

    /// One failed recipient of a bounce whose letter was found.
    async fn bounce(
        &self,
        report: &Report,
        source_key: &[u8; 32],
        letter: &LetterRow,
        failure: &Failure,
    ) -> Result<Outcome, StoreError> {
        let named = [
            Some(&failure.recipient),
            failure.original_recipient.as_ref(),
        ]
        .into_iter()
        .flatten()
        .any(|address| normalize(address) == letter.email);
        let status = failure.status.as_deref().unwrap_or("no status");
        let about = format!(
            "{} (letter {} of {}, {status})",
            letter.email, letter.letter_id, letter.mailing_id
        );
        if !named {
            return Ok(Outcome::look(format!(
                "the report names {}, not the letter's recipient {}: nothing done",
                failure.recipient, letter.email
            )));
        }
        let Some(class) = failure.class else {
            return Ok(Outcome::look(format!(
                "bounce for {about} that says too little to classify: nothing done"
            )));
        };
        if rows::seen(&self.pool, source_key, &letter.email).await? {
            return Ok(Outcome::done(format!(
                "{} bounce for {about}: a second delivery of a bounce already decided, nothing done",
                class.as_str()
            )));
        }
        let mut decision = Decision {
            source_key: *source_key,
            source_message_id: report.message_id.as_deref().unwrap_or_default(),
            letter,
            kind: class.as_str(),
            status: failure.status.as_deref().unwrap_or_default(),
            diagnostic: &failure.diagnostic,
            action: "reported",
        };
        let again = || {
            Ok(Outcome::done(format!(
                "{} bounce for {about}: a second delivery of a bounce already decided, nothing done",
                class.as_str()
            )))
        };
        let line = match class {
            Class::Hard => {
                decision.action = self.suppress(letter, SuppressionReason::Bounce).await?;
                if !self.store(&decision).await? {
                    return again();
                }
                format!(
                    "hard bounce for {about}: {}",
                    said(decision.action, "bounce")
                )
            }
            Class::Soft => {
                // Counted, then suppressed when this one reaches the
                // limit; the event says what was done in the end.
                let mut tx = self.pool.begin().await?;
                if !rows::record(&mut *tx, &decision.with_action("counted")).await? {
                    return again();
                }
                let count = rows::soft_letters(&mut *tx, &letter.email, self.soft.days).await?;
                let line = if count >= u64::from(self.soft.count) {
                    decision.action = self.suppress(letter, SuppressionReason::Bounce).await?;
                    rows::set_action(&mut *tx, source_key, &letter.email, decision.action).await?;
                    format!(
                        "soft bounce for {about}: {count} in {} days, {}",
                        self.soft.days,
                        said(decision.action, "bounce")
                    )
                } else {
                    decision.action = "counted";
                    format!(
                        "soft bounce for {about}: counted, {count} of {} in {} days",
                        self.soft.count, self.soft.days
                    )
                };
                self.announce(&mut tx, &decision).await?;
                tx.commit().await?;
                line
            }
            Class::Policy => {
                if !self.store(&decision).await? {
                    return again();
                }
                format!(
                    "policy block for {about}: not the address's fault, not suppressed; the \
                     operator should look: {}",
                    failure.diagnostic
                )
            }
        };
        Ok(Outcome::done(line).decided(class.as_str()))
    }

    /// A complaint whose letter was found.
    async fn complaint(
        &self,
        report: &Report,
        source_key: &[u8; 32],
        letter: &LetterRow,
        feedback_type: &str,
        recipient: Option<&str>,
        by_token: bool,
    ) -> Result<Outcome, StoreError> {
        let named = recipient.is_some_and(|r| normalize(r) == letter.email);
        let about = format!(
            "{} (letter {} of {})",
            letter.email, letter.letter_id, letter.mailing_id
        );
        // A report stating someone else is refused even with our token: the
        // token proves the letter, not whom the complaint is about.
        let stated = report.stated_recipient.as_deref();
        if let Some(other) = stated.filter(|s| normalize(s) != letter.email) {
            return Ok(Outcome::look(format!(
                "the complaint names {other}, not the letter's recipient {}: nothing done",
                letter.email
            )));
        }
        if !named && !by_token {
            return Ok(Outcome::look(format!(
                "complaint about letter {} of {} that does not name its recipient and has no \
                 bounce address of ours: nothing done",
                letter.letter_id, letter.mailing_id
            )));
        }
        if rows::seen(&self.pool, source_key, &letter.email).await? {
            return Ok(Outcome::done(format!(
                "complaint for {about}: a second delivery of a complaint already decided, nothing done"
            )));
        }
        let action = self.suppress(letter, SuppressionReason::Complaint).await?;
        let decision = Decision {
            source_key: *source_key,
            source_message_id: report.message_id.as_deref().unwrap_or_default(),
            letter,
            kind: "complaint",
            status: feedback_type,
            diagnostic: "",
            action,
        };
        if !self.store(&decision).await? {
            return Ok(Outcome::done(format!(
                "complaint for {about}: a second delivery of a complaint already decided, nothing done"
            )));
        }
        Ok(Outcome::done(format!(
            "complaint ({feedback_type}) for {about}: {}",
            said(action, "complaint")
        ))
        .decided("complaint"))
    }

    /// Store `decision` and queue its event in one transaction, so the
    /// event goes out exactly when the decision is stored (once: a second
    /// delivery finds the decision and queues nothing). `false`: the
    /// decision was stored already (a second delivery that raced this one).
    async fn store(&self, decision: &Decision<'_>) -> Result<bool, StoreError> {
        let mut tx = self.pool.begin().await?;
        if !rows::record(&mut *tx, decision).await? {
            return Ok(false);
        }
        self.announce(&mut tx, decision).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Queue the decision's `email.bounced` or `email.complained` for
    /// every endpoint that wants it (on `conn`, the storing transaction).
    async fn announce(
        &self,
        conn: &mut MySqlConnection,
        decision: &Decision<'_>,
    ) -> Result<(), StoreError> {
        let event = BounceEvent {
            event_id: event_id(decision),
            occurred_at: chrono::Utc::now(),
            mailing_id: &decision.letter.mailing_id,
            letter_id: decision.letter.letter_id,
            email: &decision.letter.email,
            kind: decision.kind,
            status: decision.status,
            diagnostic: decision.diagnostic,
            action: decision.action,
            source_message_id: decision.source_message_id,
        };
        let endpoints = self
            .events_out
            .endpoints_for(event.event_type(), event.mailing_id);
        if endpoints.is_empty() {
            return Ok(());
        }
        let body = payload::render_bounce(&event).map_err(|err| StoreError::Corrupt {
            table: "outbox",
            detail: format!("a bounce event's payload: {err}"),
        })?;
        let queued: Vec<NewOutboxRow> = endpoints
            .into_iter()
            .map(|endpoint| NewOutboxRow {
                endpoint,
                event_id: event.event_id,
                event_type: event.event_type(),
                letter_id: Some(event.letter_id),
                occurred_at: event.occurred_at,
                payload: body.clone(),
                hold: None,
            })
            .collect();
        outbox::enqueue_on(conn, &queued).await
    }

    /// Put the letter's recipient on the suppression list: `suppressed`
    /// when this put it there, `listed` when it was there already.
    async fn suppress(
        &self,
        letter: &LetterRow,
        reason: SuppressionReason,
    ) -> Result<&'static str, StoreError> {
        let added =
            suppressions::add(&self.pool, std::slice::from_ref(&letter.email), reason).await?;
        Ok(if added > 0 { "suppressed" } else { "listed" })
    }
}

impl Decision<'_> {
    fn with_action(&self, action: &'static str) -> Self {
        Decision {
            action,
            ..self.clone()
        }
    }
}

fn said(action: &str, reason: &str) -> String {
    match action {
        "suppressed" => format!("suppressed (reason {reason})"),
        _ => "on the suppression list already".into(),
    }
}

/// A decision's event id (its `webhook-id`): the first 16 bytes of
/// SHA-256 over the source message's key and the address, so the same
/// decision always has the same id.
fn event_id(decision: &Decision<'_>) -> [u8; 16] {
    decision_event_id(&decision.source_key, &decision.letter.email)
}

/// The event id of the decision stored with `source_key` for `email` (a
/// `bounces` row): the same id its webhook carried (the event stream
/// reads it back from the row).
pub fn decision_event_id(source_key: &[u8], email: &str) -> [u8; 16] {
    let mut hash = Sha256::new();
    hash.update(b"linktrack bounce event\0");
    hash.update(source_key);
    hash.update(email.as_bytes());
    let digest: [u8; 32] = hash.finalize().into();
    let mut id = [0; 16];
    id.copy_from_slice(&digest[..16]);
    id
}

/// The key of a provider's event (`ses:FEEDBACK-ID`): SHA-256 of the
/// id, as a message's is of its Message-ID.
pub fn event_key(id: &str) -> [u8; 32] {
    Sha256::digest(id.as_bytes()).into()
}

/// The key that makes a second delivery of the same message change
/// nothing: SHA-256 of its Message-ID, or of its bytes when it has none.
fn source_key(report: &Report, raw: &[u8]) -> [u8; 32] {
    let mut hash = Sha256::new();
    match &report.message_id {
        Some(id) => hash.update(id.as_bytes()),
        None => hash.update(raw),
    }
    hash.finalize().into()
}
