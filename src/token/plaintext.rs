//! What a version-2 token's 74 bits seal: a kind, a link template and a
//! nonce, packed into the 74 bits the seal permutes (docs/token.md,
//! "Layout").

use crate::kind::TokenKind;
use rand::Rng;

/// Widths of the plaintext's fields (docs/token.md): 3 + 32 + 39 = 74.
const KIND_BITS: u32 = 3;
const TEMPLATE_BITS: u32 = 32;
const NONCE_BITS: u32 = 39;
const _: () = assert!(KIND_BITS + TEMPLATE_BITS + NONCE_BITS == 74);
/// The nonce's low 19 bits are random; the 20 above them are the letter id's.
const RANDOM_NONCE_BITS: u32 = 19;
const NONCE_MASK: u64 = (1 << NONCE_BITS) - 1;

/// What a version-2 token's 74 bits seal (docs/token.md, "Layout").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plaintext {
    /// 3 bits: a [`TokenKind`] code, 0 never issued.
    pub kind: u8,
    /// `link_templates.id`; 0 = no template.
    pub template: u32,
    /// 39 bits: letter id's low 20 bits ‖ 19 random bits.
    pub nonce: u64,
}

impl Plaintext {
    /// A fresh plaintext for a letter's link: the nonce is the letter id's
    /// low 20 bits and 19 random bits (39 random bits for `letter_id = 0`,
    /// the image tokens a mailing's letters share).
    pub fn issue(kind: TokenKind, template: u32, letter_id: u64) -> Plaintext {
        let random = rand::rng().next_u64();
        let nonce = if letter_id == 0 {
            random & NONCE_MASK
        } else {
            ((letter_id & ((1 << 20) - 1)) << RANDOM_NONCE_BITS)
                | (random & ((1 << RANDOM_NONCE_BITS) - 1))
        };
        Plaintext {
            kind: kind.code(),
            template,
            nonce,
        }
    }

    /// The plaintext of a letter's bounce address (VERP, docs/bounces.md):
    /// kind [`TokenKind::Bounce`], the mailing's unsubscribe link template
    /// (which names the mailing) and the whole nonce for the letter id
    /// (its low 39 bits). Nothing random: stamped with the letter's Date
    /// (its unsubscribe token's time), a re-run seals the same address,
    /// as it writes the same message.
    pub fn bounce(unsubscribe_template: u32, letter_id: u64) -> Plaintext {
        Plaintext {
            kind: TokenKind::Bounce.code(),
            template: unsubscribe_template,
            nonce: letter_id & NONCE_MASK,
        }
    }

    /// The letter id a bounce plaintext carries (its low 39 bits).
    pub fn bounce_letter_id(&self) -> u64 {
        self.nonce & NONCE_MASK
    }

    /// The kind, if it is one ever issued.
    pub fn token_kind(&self) -> Option<TokenKind> {
        TokenKind::from_code(self.kind)
    }

    /// The 74 bits the seal permutes.
    pub(super) fn pack(self) -> u128 {
        (u128::from(self.kind & 0b111) << (TEMPLATE_BITS + NONCE_BITS))
            | (u128::from(self.template) << NONCE_BITS)
            | u128::from(self.nonce & NONCE_MASK)
    }

    /// The plaintext of 74 opened bits.
    pub(super) fn unpack(bits: u128) -> Plaintext {
        Plaintext {
            kind: (bits >> (TEMPLATE_BITS + NONCE_BITS)) as u8 & 0b111,
            template: (bits >> NONCE_BITS) as u32,
            nonce: bits as u64 & NONCE_MASK,
        }
    }
}
