//! The few small HTML pages the server shows people.

use axum::response::Html;

/// A minimal page. `title` and `text` are our own constants, never user input.
pub(crate) fn page(title: &str, text: &str) -> Html<String> {
    Html(format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width\">\
         <meta name=\"robots\" content=\"noindex\"><title>{title}</title></head>\
         <body><h1>{title}</h1><p>{text}</p></body></html>"
    ))
}

/// Whom an unsubscribe link names: the masked address it was sent to and
/// the mailing it came from, so a person forwarded a letter (or holding
/// several addresses) can tell which subscription the button ends, without
/// the page showing the whole address to whoever holds the link.
pub(crate) struct UnsubscribeTarget<'a> {
    pub email: &'a str,
    pub mailing_id: &'a str,
}

impl UnsubscribeTarget<'_> {
    /// One HTML paragraph naming the address and the mailing, both escaped
    /// (the mailing id comes from the sender's file, the address from a list).
    fn paragraph(&self) -> String {
        let mailing = html_escape::encode_text(self.mailing_id);
        match mask_address(self.email) {
            Some(masked) => format!(
                "<p>Address: <strong>{}</strong><br>Mailing: <strong>{mailing}</strong></p>",
                html_escape::encode_text(&masked)
            ),
            None => format!("<p>Mailing: <strong>{mailing}</strong></p>"),
        }
    }
}

/// `ann@example.com` → `a***@example.com`: the local part's first character,
/// then `***`, then the whole domain, as people read it (`bücher.example`,
/// not its A-labels). The address is normalized first (as the suppression
/// stores it). `None` for an empty address.
pub(crate) fn mask_address(email: &str) -> Option<String> {
    let email = crate::address::for_display(&crate::address::normalize(email));
    let (local, domain) = match email.rsplit_once('@') {
        Some((local, domain)) => (local, Some(domain)),
        None => (email.as_str(), None),
    };
    let first = local.chars().next().or_else(|| domain?.chars().next())?;
    Some(match domain {
        Some(domain) => format!("{first}***@{domain}"),
        None => format!("{first}***"),
    })
}

/// The unsubscribe confirmation: a GET never unsubscribes (link scanners
/// follow every link), the button POSTs the RFC 8058 one-click body.
pub(crate) fn unsubscribe_confirm(target: &UnsubscribeTarget<'_>) -> Html<String> {
    let whom = target.paragraph();
    Html(format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width\">\
         <meta name=\"robots\" content=\"noindex\"><title>Unsubscribe</title></head>\
         <body><h1>Unsubscribe</h1><p>Do you want to stop receiving these emails?</p>{whom}\
         <form method=\"post\"><input type=\"hidden\" name=\"List-Unsubscribe\" value=\"One-Click\">\
         <button type=\"submit\">Unsubscribe</button></form></body></html>"
    ))
}

/// An unsubscribe link whose row has expired: it no longer knows who it was
/// sent to, so it cannot unsubscribe anyone; the mailing's list-management
/// URL or address (the sender's own, from the mailing file) is offered.
pub(crate) fn unsubscribe_expired(list_manage_url: Option<&String>) -> Html<String> {
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

pub(crate) fn unsubscribed(target: &UnsubscribeTarget<'_>) -> Html<String> {
    let title = "You are unsubscribed";
    let whom = target.paragraph();
    Html(format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width\">\
         <meta name=\"robots\" content=\"noindex\"><title>{title}</title></head>\
         <body><h1>{title}</h1><p>You will not receive these emails any more.</p>{whom}\
         </body></html>"
    ))
}

/// "Stop tracking me": a GET never records (scanners follow every link);
/// the button POSTs.
pub(crate) fn stop_tracking_confirm() -> Html<String> {
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

/// The answer to a "stop tracking me" POST another site's page sent (issue
/// 43): nothing is recorded; the same button, on this site, does it.
pub(crate) fn stop_tracking_from_elsewhere() -> Html<String> {
    Html(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width\">\
         <meta name=\"robots\" content=\"noindex\"><title>Stop tracking</title></head>\
         <body><h1>Stop tracking</h1><p>This request came from another website, so \
         nothing was changed. If you want us to stop recording when you open these \
         emails or click their links, confirm here. You will keep receiving them.</p>\
         <form method=\"post\"><button type=\"submit\">Stop tracking me</button></form>\
         </body></html>"
            .to_owned(),
    )
}

pub(crate) fn tracking_stopped() -> Html<String> {
    page(
        "Tracking stopped",
        "Your next emails will not record opens or clicks. You still receive them.",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_keep_the_first_character_and_the_domain() {
        assert_eq!(
            mask_address(" Ann@Example.com").as_deref(),
            Some("a***@example.com")
        );
        assert_eq!(mask_address("x@y.org").as_deref(), Some("x***@y.org"));
        assert_eq!(
            mask_address("émile@exemple.fr").as_deref(),
            Some("é***@exemple.fr")
        );
        assert_eq!(
            mask_address("carol@xn--bcher-kva.example").as_deref(),
            Some("c***@bücher.example")
        );
        assert_eq!(mask_address("no-at-sign").as_deref(), Some("n***"));
        assert_eq!(
            mask_address("@domain.test").as_deref(),
            Some("d***@domain.test")
        );
        assert_eq!(mask_address("  "), None);
    }

    #[test]
    fn the_target_paragraph_escapes_address_and_mailing() {
        let target = UnsubscribeTarget {
            email: "<b>@ex<ample.com",
            mailing_id: "news & <notes>",
        };
        let html = target.paragraph();
        assert!(html.contains("&lt;***@ex&lt;ample.com"), "{html}");
        assert!(html.contains("news &amp; &lt;notes&gt;"), "{html}");
        assert!(!html.contains("<b>") && !html.contains("<notes>"), "{html}");
    }
}
