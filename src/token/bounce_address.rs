//! A letter's VERP bounce address (`bounces+{token}@{domain}`) and the
//! token read back from one (docs/bounces.md).

use super::uuid_v7::Token;

/// The local part's prefix of every VERP bounce address:
/// `bounces+{token}@{bounce domain}` (docs/bounces.md).
pub const BOUNCE_LOCAL_PREFIX: &str = "bounces+";

/// A letter's VERP address for its bounce token.
pub fn bounce_address(token: &Token, domain: &str) -> String {
    format!("{BOUNCE_LOCAL_PREFIX}{token}@{domain}")
}

/// The token of a VERP address (`bounces+{token}@…`, any case of the
/// prefix, angle brackets allowed); `None` for any other address.
pub fn token_of_bounce_address(address: &str) -> Option<Token> {
    let address = address.trim().trim_start_matches('<').trim_end_matches('>');
    let (local, _domain) = address.rsplit_once('@')?;
    let prefix = local.get(..BOUNCE_LOCAL_PREFIX.len())?;
    if !prefix.eq_ignore_ascii_case(BOUNCE_LOCAL_PREFIX) {
        return None;
    }
    // Some MTAs lowercase or uppercase the local part: the hex is read
    // in either case.
    let hex = local[BOUNCE_LOCAL_PREFIX.len()..].to_ascii_lowercase();
    Token::parse(&hex).ok()
}
