//! One slow client of the login form, for the tests of slow request bodies
//! (`slow_clients.rs`) and the benchmark that measures clicks beside them
//! (`examples/bench_outages.rs`, which includes this file by its path).
//! It uses nothing but Tokio, so both can compile it.

use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, ToSocketAddrs};

/// A login form's headers, then one byte every 200 ms of a 1,000-byte
/// body. True when the server answered 408 and closed; false when it could
/// not connect, or when `give_up` passed first (a ceiling, not a
/// measurement: a body never cut counts as not cut).
pub async fn trickle_a_login_body(address: impl ToSocketAddrs, give_up: Duration) -> bool {
    let Ok(stream) = TcpStream::connect(address).await else {
        return false;
    };
    let (mut read, mut write) = stream.into_split();
    let head = b"POST /login HTTP/1.1\r\nHost: t\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000\r\n\r\ntoken=";
    if write.write_all(head).await.is_err() {
        return false;
    }
    let trickle = async {
        loop {
            // The pause between bytes is the slow client itself, not a
            // wait for something to happen.
            tokio::time::sleep(Duration::from_millis(200)).await;
            if write.write_all(b"x").await.is_err() {
                break;
            }
        }
    };
    let mut answer = Vec::new();
    tokio::select! {
        _ = read.read_to_end(&mut answer) => {}
        () = trickle => {}
        () = tokio::time::sleep(give_up) => return false,
    }
    answer.starts_with(b"HTTP/1.1 408")
}
