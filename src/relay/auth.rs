//! AUTH PLAIN and LOGIN (RFC 4616, and the LOGIN draft every client
//! speaks): the credentials a client sends, decoded.

use base64::Engine;

/// The user name and password a client gave.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Credentials {
    pub user: String,
    pub password: Vec<u8>,
}

/// Why a client's AUTH answer cannot be read.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum AuthError {
    #[error("not base64")]
    Base64,
    #[error("PLAIN wants authzid NUL user NUL password")]
    Plain,
}

/// A base64 text the client sent (`*` cancels: `None`).
pub(crate) fn decode(text: &str) -> Result<Option<Vec<u8>>, AuthError> {
    let text = text.trim();
    if text == "*" {
        return Ok(None);
    }
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .map(Some)
        .map_err(|_| AuthError::Base64)
}

/// PLAIN's `authzid NUL authcid NUL passwd`.
pub(crate) fn plain(message: &[u8]) -> Result<Credentials, AuthError> {
    let mut fields = message.split(|b| *b == 0);
    let (Some(_authzid), Some(user), Some(password), None) =
        (fields.next(), fields.next(), fields.next(), fields.next())
    else {
        return Err(AuthError::Plain);
    };
    Ok(Credentials {
        user: String::from_utf8_lossy(user).into_owned(),
        password: password.to_vec(),
    })
}

/// LOGIN's prompts, base64: `Username:` and `Password:`.
pub(crate) const LOGIN_USER_PROMPT: &str = "VXNlcm5hbWU6";
pub(crate) const LOGIN_PASSWORD_PROMPT: &str = "UGFzc3dvcmQ6";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_credentials_are_split_at_the_nuls() {
        let message = decode("AHVzZXIAc2VjcmV0").unwrap().unwrap();
        assert_eq!(
            plain(&message).unwrap(),
            Credentials {
                user: "user".into(),
                password: b"secret".to_vec()
            }
        );
        assert_eq!(plain(b"user\0secret"), Err(AuthError::Plain));
        assert_eq!(decode("*"), Ok(None));
        assert_eq!(decode("!!"), Err(AuthError::Base64));
    }
}
