//! Handing letters to the sending pool: each built letter as a complete
//! RFC 5322 message ([`message`]). SMTP delivery to the pools' MTAs is the
//! next step of issue 8 and is not built yet.

pub mod message;
