//! The few small HTML pages the server shows people.

use axum::response::Html;

/// A minimal page. `title` and `text` are our own constants, never user input.
pub fn page(title: &str, text: &str) -> Html<String> {
    Html(format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width\">\
         <meta name=\"robots\" content=\"noindex\"><title>{title}</title></head>\
         <body><h1>{title}</h1><p>{text}</p></body></html>"
    ))
}

/// The unsubscribe confirmation: a GET never unsubscribes (link scanners
/// follow every link), the button POSTs the RFC 8058 one-click body.
pub fn unsubscribe_confirm() -> Html<String> {
    Html(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width\">\
         <meta name=\"robots\" content=\"noindex\"><title>Unsubscribe</title></head>\
         <body><h1>Unsubscribe</h1><p>Do you want to stop receiving these emails?</p>\
         <form method=\"post\"><input type=\"hidden\" name=\"List-Unsubscribe\" value=\"One-Click\">\
         <button type=\"submit\">Unsubscribe</button></form></body></html>"
            .to_owned(),
    )
}

/// An unsubscribe link whose row has expired: it no longer knows who it was
/// sent to, so it cannot unsubscribe anyone; the mailing's list-management
/// URL or address (the sender's own, from the mailing file) is offered.
pub fn unsubscribe_expired(list_manage_url: Option<&String>) -> Html<String> {
    let title = "This unsubscribe link has expired";
    let text = "This link is too old to unsubscribe anyone: for your privacy, we no longer \
                keep the address it was sent to.";
    let next = match list_manage_url {
        Some(url) => {
            let href = html_escape::encode_double_quoted_attribute(url);
            let label = html_escape::encode_text(url.strip_prefix("mailto:").unwrap_or(url));
            format!("<p>To unsubscribe or manage your subscription, use <a href=\"{href}\">{label}</a>.</p>")
        }
        None => "<p>To unsubscribe, use the unsubscribe link in a recent email from this sender, \
                 or reply to one and ask.</p>"
            .to_owned(),
    };
    Html(format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width\">\
         <meta name=\"robots\" content=\"noindex\"><title>{title}</title></head>\
         <body><h1>{title}</h1><p>{text}</p>{next}</body></html>"
    ))
}

pub fn unsubscribed() -> Html<String> {
    page(
        "You are unsubscribed",
        "You will not receive these emails any more.",
    )
}

/// "Stop tracking me": a GET never records (scanners follow every link);
/// the button POSTs.
pub fn stop_tracking_confirm() -> Html<String> {
    Html(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width\">\
         <meta name=\"robots\" content=\"noindex\"><title>Stop tracking</title></head>\
         <body><h1>Stop tracking</h1><p>Do you want us to stop recording when you open \
         these emails or click their links? You will keep receiving them.</p>\
         <form method=\"post\"><button type=\"submit\">Stop tracking me</button></form>\
         </body></html>"
            .to_owned(),
    )
}

pub fn tracking_stopped() -> Html<String> {
    page(
        "Tracking stopped",
        "Your next emails will not record opens or clicks. You still receive them.",
    )
}
