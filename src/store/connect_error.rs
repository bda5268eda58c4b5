//! A failed connection, said so a person can act on it: which server, port,
//! database and user were tried (never the password), the cause once, and
//! the likely fix.

use sqlx::mysql::MySqlConnectOptions;
use std::fmt;
use std::io::ErrorKind;

/// Where a connection was attempted: everything of `DATABASE_URL` but the
/// password.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectTarget {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub database: Option<String>,
}

impl ConnectTarget {
    pub(crate) fn of(options: &MySqlConnectOptions) -> Self {
        ConnectTarget {
            host: options.get_host().to_owned(),
            port: options.get_port(),
            user: options.get_username().to_owned(),
            database: options.get_database().map(str::to_owned),
        }
    }
}

impl fmt::Display for ConnectTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "MySQL at {}:{} as user `{}`",
            self.host, self.port, self.user
        )?;
        match &self.database {
            Some(database) => write!(f, ", database `{database}`"),
            None => Ok(()),
        }
    }
}

/// The cause of a failed connection, told once (sqlx's own messages repeat
/// their source), with the fix an operator would try first.
pub(crate) fn describe(err: &sqlx::Error, target: &ConnectTarget) -> String {
    let (cause, hint) = classify(err, target);
    format!("cannot connect to {target}: {cause}\n  hint: {hint}")
}

fn classify(err: &sqlx::Error, target: &ConnectTarget) -> (String, String) {
    match err {
        sqlx::Error::Io(io) => match io.kind() {
            ErrorKind::ConnectionRefused => (
                "connection refused".into(),
                format!(
                    "is MariaDB or MySQL running on {}:{}? Start it (`start-stop-daemon --start \
                     --oknodo --background --exec /usr/sbin/mariadbd`) or fix the host and port \
                     in DATABASE_URL",
                    target.host, target.port
                ),
            ),
            ErrorKind::TimedOut => (
                "the connection timed out".into(),
                "check the host and port in DATABASE_URL and any firewall between".into(),
            ),
            _ => (
                io.to_string(),
                "check the host name and port in DATABASE_URL".into(),
            ),
        },
        sqlx::Error::PoolTimedOut => (
            "no connection within the pool's acquire timeout".into(),
            "the server may be overloaded or unreachable; check DATABASE_URL's host and port"
                .into(),
        ),
        sqlx::Error::Tls(tls) => (
            format!("TLS failed: {tls}"),
            "check ssl-mode in DATABASE_URL and the server's certificate".into(),
        ),
        sqlx::Error::Database(db) => {
            let number = super::mysql_errors::mysql_error_number(err);
            let message = db.message().to_owned();
            match number {
                // 1045: wrong password; 1698: no such user (MariaDB).
                Some(1045 | 1698) => (
                    format!("access denied ({message})"),
                    "check the user and password in DATABASE_URL \
                     (mysql://USER:PASSWORD@HOST:PORT/DATABASE)"
                        .into(),
                ),
                Some(1049) => (
                    format!("the database does not exist ({message})"),
                    "run `linktrack migrate`, which creates it, or fix the database name in \
                     DATABASE_URL"
                        .into(),
                ),
                Some(1044) => (
                    format!("the user may not use this database ({message})"),
                    format!(
                        "GRANT ALL ON `{}`.* TO the user, or use another user in DATABASE_URL",
                        target.database.as_deref().unwrap_or("…")
                    ),
                ),
                _ => (message, "see the server's error log".into()),
            }
        }
        other => (other.to_string(), "check DATABASE_URL".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> ConnectTarget {
        ConnectTarget {
            host: "db.example".into(),
            port: 3307,
            user: "app".into(),
            database: Some("linktrack".into()),
        }
    }

    #[test]
    fn a_refused_connection_names_the_target_once_and_suggests_starting_the_server() {
        let err = sqlx::Error::Io(std::io::Error::from(ErrorKind::ConnectionRefused));
        let text = describe(&err, &target());
        assert!(text.starts_with(
            "cannot connect to MySQL at db.example:3307 as user `app`, database `linktrack`: \
             connection refused"
        ));
        assert_eq!(text.matches("refused").count(), 1, "{text}");
        assert!(text.contains("hint: is MariaDB or MySQL running on db.example:3307?"));
    }

    #[test]
    fn the_target_never_shows_a_password() {
        let options: MySqlConnectOptions = "mysql://app:s3cret@db.example:3307/linktrack"
            .parse()
            .unwrap();
        let shown = ConnectTarget::of(&options).to_string();
        assert!(!shown.contains("s3cret"), "{shown}");
        assert_eq!(
            shown,
            "MySQL at db.example:3307 as user `app`, database `linktrack`"
        );
    }
}
