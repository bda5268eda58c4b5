//! Flags of `links`: the links of a sent mailing, listed and repointed
//! (docs/serve.md, "Repointing a sent link").

use crate::mailing_id::MailingId;
use clap::{ArgGroup, Args, Subcommand};

#[derive(Debug, Subcommand)]
pub enum LinksCommand {
    /// Each click position of a mailing: its name, where it leads now, and
    /// every repoint (who, when, from, to).
    List(ListArgs),
    /// Send a sent link somewhere else: every letter's link at a position
    /// (or named so, or leading to a URL now), or one recipient's. Every
    /// running server follows within 10 s; clicks stay counted per position.
    Repoint(RepointArgs),
}

#[derive(Debug, Clone, Args)]
pub struct ListArgs {
    /// The mailing id.
    #[arg(long, value_name = "ID")]
    pub mailing: MailingId,
    /// Print JSON (the same as `GET /api/mailings/{id}/links`).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
#[command(group(ArgGroup::new("which").required(true).args(["position", "name", "from"])))]
pub struct RepointArgs {
    /// The mailing id.
    #[arg(long, value_name = "ID")]
    pub mailing: MailingId,
    /// The link's position, as the stats number it (the first link is 1).
    #[arg(long, value_name = "N")]
    pub position: Option<u32>,
    /// The link's name (`data-linktrack-name` in the creative).
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Every link that leads to this URL now.
    #[arg(long, value_name = "URL")]
    pub from: Option<String>,
    /// The new target: an http:// or https:// URL. For a personalised
    /// link, it may use the fields of the link's URL as built
    /// (`https://shop.example/a/{{ id }}`): each reader's link is filled
    /// with their own values (docs/serve.md "Repointing a sent link").
    #[arg(long, value_name = "URL")]
    pub to: String,
    /// Only this recipient's letter.
    #[arg(long, value_name = "ADDRESS")]
    pub recipient: Option<String>,
}
