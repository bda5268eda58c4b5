//! `linktrack domains`: add, remove, list and verify tracking domains
//! (docs/domains.md, "Tracking domains").

use super::args::domains::{DomainsCommand, DomainsVerifyArgs};
use crate::domains::{host_name, DomainChecker};
use crate::store::tracking_domains::{self, DomainState};

pub(super) async fn run(url: &str, command: DomainsCommand) -> anyhow::Result<()> {
    let pool = super::connect::pool(url).await?;
    match command {
        DomainsCommand::Add(args) => {
            let host = host_name(&args.host)?;
            let sender = host_name(&args.sender)?;
            tracking_domains::add(&pool, &host, &sender).await?;
            say!("added {host} for {sender}, pending: point it at this service (a CNAME to the base URL's host), then run `linktrack domains verify {host}`")?;
            if tracking_domains::list(&pool).await?.len() == 1 {
                say!("{}", first_domain_note(&args.tracking.base_url))?;
            }
            Ok(())
        }
        DomainsCommand::Remove(args) => {
            let host = host_name(&args.host)?;
            if !tracking_domains::remove(&pool, &host).await? {
                anyhow::bail!("no tracking domain {host} (`linktrack domains list` names them)");
            }
            say!("removed {host}")
        }
        DomainsCommand::List => list(&pool).await,
        DomainsCommand::Verify(args) => verify(&pool, &args).await,
    }
}

/// What the first domain changes: the servers stop answering links on
/// hosts other than the base URL's and the tracking hosts.
fn first_domain_note(base_url: &str) -> String {
    let base_host = url::Url::parse(base_url)
        .ok()
        .and_then(|url| url.host_str().map(str::to_owned))
        .unwrap_or_else(|| base_url.to_owned());
    let login = format!("{}/login", base_url.trim_end_matches('/'));
    format!(
        "note: this is the first tracking domain: within 2 s the servers answer links only on \
         {base_host} (LINKTRACK_BASE_URL's host) and the tracking domains; a link opened on any \
         other host (localhost, say, when the base URL names 127.0.0.1) is a 404. The dashboard \
         is at {login}"
    )
}

async fn list(pool: &sqlx::MySqlPool) -> anyhow::Result<()> {
    let domains = tracking_domains::list(pool).await?;
    if domains.is_empty() {
        return say!("no tracking domain: every letter uses the base URL (`linktrack domains add HOST --for DOMAIN`)");
    }
    for domain in domains {
        let checked = domain
            .checked
            .map_or_else(|| "never checked".to_owned(), |at| format!("checked {at}"));
        say!(
            "{}\tfor {}\t{}\t{}\t{}",
            domain.host,
            domain.sender_domain,
            domain.state.as_str(),
            checked,
            domain.detail.unwrap_or_default()
        )?;
    }
    Ok(())
}

/// Checks each host and records the state; fails when any is not verified.
async fn verify(pool: &sqlx::MySqlPool, args: &DomainsVerifyArgs) -> anyhow::Result<()> {
    let target = match &args.target {
        Some(target) => target.trim().to_owned(),
        None => url::Url::parse(&args.tracking.base_url)
            .ok()
            .and_then(|url| url.host_str().map(str::to_owned))
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "LINKTRACK_BASE_URL {:?} has no host to point at: give --target",
                    args.tracking.base_url
                )
            })?,
    };
    let known = tracking_domains::list(pool).await?;
    let mut hosts = Vec::new();
    for named in &args.hosts {
        let host = host_name(named)?;
        if !known.iter().any(|d| d.host == host) {
            anyhow::bail!("no tracking domain {host}: add it first (`linktrack domains add {host} --for DOMAIN`)");
        }
        hosts.push(host);
    }
    if args.hosts.is_empty() {
        hosts = known.into_iter().map(|d| d.host).collect();
    }
    let checker = DomainChecker::new(args.nameserver)?;
    let mut failed = 0;
    for host in &hosts {
        let check = checker.check(host, &target).await;
        tracking_domains::set_state(pool, host, check.state, &check.detail).await?;
        failed += usize::from(check.state != DomainState::Verified);
        say!("{host}\t{}\t{}", check.state.as_str(), check.detail)?;
    }
    if failed > 0 {
        anyhow::bail!(
            "{failed} of {} tracking domains do not point at {target}",
            hosts.len()
        );
    }
    Ok(())
}
